"""rlvr's one progress display: a tqdm bar on stderr (never stdout), or nothing.

``enabled=None`` means "only when stderr is a terminal", so pipes and logs stay clean.
``Progress`` is a bar advanced by hand (thread-safe: transfers call it from worker
threads), with an optional rate shown beside it (e.g. tokens per second); ``progress``
wraps an iterable. Commands add the shared ``--progress/--no-progress`` option
(rlvr.cli.progress_option) and pass its value here.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")


def _enabled(enabled: bool | None) -> bool:
    return sys.stderr.isatty() if enabled is None else bool(enabled)


class Progress:
    """A progress bar of `total` units on stderr, or nothing when disabled or total is 0.

    ``update(n)`` (or calling the object) advances it by n units; ``rate_unit`` adds a
    postfix with the rate of ``extra`` counts per second (``update(1, extra=tokens)``).
    Extra keyword arguments go to tqdm (e.g. unit_scale=True for bytes).
    """

    def __init__(self, total: int | None, desc: str, enabled: bool | None = None, unit: str = "rec",
                 rate_unit: str | None = None, **tqdm_kwargs: Any):
        self.bar = None
        self.extra = 0
        self.rate_unit = rate_unit
        self.start = time.monotonic()
        self.lock = threading.Lock()
        if _enabled(enabled) and (total is None or total > 0):
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, dynamic_ncols=True,
                            mininterval=0.5, **tqdm_kwargs)

    def update(self, n: int = 1, extra: int = 0) -> None:
        self.extra += extra
        if self.bar is None:
            return
        with self.lock:
            self.bar.update(n)
            if self.rate_unit:
                rate = self.extra / max(time.monotonic() - self.start, 1e-9)
                self.bar.set_postfix_str(f"{rate:,.0f} {self.rate_unit}", refresh=False)

    __call__ = update

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()

    def __enter__(self) -> Progress:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def progress(iterable: Iterable[T], desc: str, total: int | None = None, enabled: bool | None = None,
             unit: str = "rec") -> Iterator[T]:
    """Yield from `iterable`, advancing a bar on stderr (only when enabled; None: stderr is a TTY)."""
    if not _enabled(enabled):
        yield from iterable
        return
    with Progress(total, desc, True, unit=unit) as bar:
        for item in iterable:
            yield item
            bar.update(1)
