"""Sampling this node: ``Monitor`` keeps one reader open and classifies windows of samples;
``find``/``pick``/``free_gpus`` choose free GPUs (waiting for them if asked)."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from rlvr.gpu.classify import STATES, GpuState, classify
from rlvr.gpu.common import DEFAULT_INTERVAL, DEFAULT_MAX_MEM_MIB, DEFAULT_SAMPLES, NoGpuError, TooFewFree
from rlvr.gpu.kill import KillItem, execute_kills
from rlvr.gpu.procs import ProcTable
from rlvr.gpu.readers import Reading, open_reader, parse_visible


class Monitor:
    """Samples the visible GPUs of this node; ``window()`` gives one GpuState per GPU.

    Keeps one reader open (NVML initialised once), so ``--wait`` loops stay cheap.
    """

    def __init__(self, backend: str = "auto", samples: int = DEFAULT_SAMPLES, interval: float = DEFAULT_INTERVAL,
                 max_mem_mib: float = DEFAULT_MAX_MEM_MIB, cuda_visible: str | None | bool = True,
                 reader: Any = None, procs: Callable[[], ProcTable] = ProcTable):
        if samples < 1 or interval < 0:
            raise ValueError("need samples >= 1 and interval >= 0")
        self.samples, self.interval, self.max_mem_mib, self.procs = samples, interval, max_mem_mib, procs
        self.reader = reader if reader is not None else open_reader(backend)
        self.cuda_visible = os.environ.get("CUDA_VISIBLE_DEVICES") if cuda_visible is True else cuda_visible
        self.visible: list[int] | None = None
        self.warnings: list[str] = []

    def read(self) -> list[Reading]:
        """One sample of the visible GPUs, in CUDA_VISIBLE_DEVICES order."""
        rs = self.reader.read()
        if self.visible is None:
            self.visible, self.warnings = parse_visible(self.cuda_visible, [(r.index, r.uuid) for r in rs])
            if not rs:
                raise NoGpuError("no NVIDIA GPU: the driver lists no devices")
            if not self.visible:
                raise NoGpuError(f"no visible GPU: CUDA_VISIBLE_DEVICES={self.cuda_visible!r} hides all {len(rs)}")
        by_index = {r.index: r for r in rs}
        return [by_index.get(i) or Reading(i, "?", "?", error="GPU disappeared") for i in self.visible]

    def window(self) -> list[GpuState]:
        t0 = time.monotonic()
        samples = []
        for k in range(self.samples):
            if k:
                time.sleep(max(0.0, t0 + k * self.interval - time.monotonic()))
            samples.append(self.read())
        return classify(samples, self.procs(), self.max_mem_mib, time.monotonic() - t0)

    def kill(self, plan: Sequence[KillItem], grace: float = 10.0,
             log: Callable[[str], None] = print) -> list[KillItem]:
        """execute_kills after one more reading: a GPU busy by now is left alone."""
        if not any(it.action == "kill" for it in plan):
            return list(plan)
        fresh = {r.index: r.util for r in self.read()}
        return execute_kills(plan, grace, log, still_idle=lambda g: fresh.get(g.index) == 0)

    def close(self) -> None:
        self.reader.close()

    def __enter__(self) -> Monitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def snapshot(**kw: Any) -> list[GpuState]:
    """Sample this node's visible GPUs once over a window (kwargs: see Monitor)."""
    with Monitor(**kw) as m:
        return m.window()


def summary(states: Sequence[GpuState]) -> str:
    """'busy: 0,1; idle: 2; zombie: 5' for messages."""
    parts = []
    for s in STATES[1:]:
        hits = [g.label for g in states if g.state == s]
        if hits:
            parts.append(f"{s}: {','.join(hits)}")
    return "; ".join(parts) or "none"


def pick(states: Sequence[GpuState], n: int | None) -> list[GpuState]:
    """The first n free GPUs (all free ones for n=None, at least one); TooFewFree otherwise."""
    free = [g for g in states if g.state == "free"]
    want = n if n is not None else 1
    if len(free) < want:
        have = f"only {len(free)} free GPU{'s' if len(free) != 1 else ''}" if free else "no free GPU"
        raise TooFewFree(f"{have} of {len(states)}, {want} wanted ({summary(states)})", list(states), want)
    return free if n is None else free[:n]


def find(query: Callable[[], list[GpuState]], n: int | None, wait: bool = False, timeout: float | None = None,
         on_change: Callable[[list[GpuState]], None] | None = None) -> tuple[list[GpuState], list[GpuState]]:
    """(states, chosen): query() once, or with wait until n GPUs are free (TooFewFree after
    timeout seconds). on_change(states) is called whenever the number of free GPUs changes."""
    deadline = None if timeout is None else time.monotonic() + timeout
    last = None
    while True:
        states = query()
        try:
            return states, pick(states, n)
        except TooFewFree as e:
            if not wait:
                raise
            seen = sum(g.state == "free" for g in states)
            if on_change and seen != last:
                on_change(states)
            last = seen
            if deadline is not None and time.monotonic() >= deadline:
                raise TooFewFree(f"timed out after {timeout:g} s: {e}", e.states, e.want) from None
        time.sleep(0.2)


def free_gpus(n: int | None = None, *, wait: bool = False, timeout: float | None = None, **kw: Any) -> list[int]:
    """Physical indices of n free GPUs on this node (kwargs: see Monitor); raises TooFewFree / NoGpuError."""
    with Monitor(**kw) as m:
        _, chosen = find(m.window, n, wait, timeout)
    return [g.index for g in chosen]
