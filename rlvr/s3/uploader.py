"""The background uploader: files and folders queued by rlvr-train go up on a daemon thread."""

from __future__ import annotations

import os
import queue
import sys
import threading
from collections.abc import Callable, Iterable

from rlvr.errors import S3Error
from rlvr.s3.checksums import snapshot_size
from rlvr.s3.sync import SyncReport, push
from rlvr.s3.transfer import Remote, S3Transfer
from rlvr.s3.uri import join_key, parse_uri


class BackgroundUploader:
    """Uploads files and folders to an S3 prefix on a background thread (for rlvr-train).

    ``submit(path)`` returns at once and never blocks the caller; a path under `root` goes to
    dest_uri + its path relative to root (a folder is pushed: unchanged files are skipped).
    Failures are kept in ``.failed`` and passed to `on_error` (default: a warning on stderr);
    ``close(timeout)`` waits for the queue and returns the failures.
    """

    def __init__(self, dest_uri: str, root: str | None = None, *, transfer: S3Transfer | None = None,
                 endpoint_url: str | None = None, workers: int = 4,
                 on_error: Callable[[str, str], None] | None = None,
                 on_done: Callable[[str, SyncReport], None] | None = None,
                 exclude: Iterable[str] = (), last: Iterable[str] = ()):
        self.bucket, self.prefix = parse_uri(dest_uri)
        if self.prefix and not self.prefix.endswith("/"):
            self.prefix += "/"
        self.dest_uri = f"s3://{self.bucket}/{self.prefix}"
        self.root = os.path.abspath(root) if root else None
        self.exclude = list(exclude)
        self.last = list(last)
        self._transfer = transfer
        self._endpoint_url = endpoint_url
        self._workers = workers
        self.on_error = on_error or (lambda path, msg: print(f"rlvr: warning: upload of {path} failed: {msg}",
                                                             file=sys.stderr, flush=True))
        self.on_done = on_done
        self.failed: list[tuple[str, str]] = []
        self.uploaded: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="s3-background-upload", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def submit(self, path: str) -> None:
        """Queue a file or folder for upload (a path already queued is not queued twice)."""
        if self._closed:
            raise RuntimeError("BackgroundUploader is closed")
        path = os.path.abspath(path)
        with self._lock:
            if path in self._pending:
                return
            self._pending.add(path)
        self._q.put(path)

    def _dest(self, path: str) -> str:
        if self.root and (path == self.root or path.startswith(self.root + os.sep)):
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel
        else:
            rel = os.path.basename(path)
        return f"s3://{self.bucket}/{join_key(self.prefix, rel) if rel else self.prefix}"

    def _loop(self) -> None:
        t = None
        while True:
            path = self._q.get()
            if path is None:
                break
            with self._lock:
                self._pending.discard(path)
            try:
                if t is None:
                    t = self._transfer or S3Transfer(endpoint_url=self._endpoint_url, workers=self._workers)
                dest = self._dest(path)
                if os.path.isdir(path):
                    d = dest if dest.endswith("/") else dest + "/"
                    # files matching `last` go up in a second pass, after everything else (e.g.
                    # a checkpoint's completeness marker after its weights)
                    report = push(path, d, exclude=self.exclude + self.last, transfer=t)
                    if self.last and not report.failed:
                        more = push(path, d, include=self.last, exclude=self.exclude, transfer=t)
                        report.actions += more.actions
                        report.failed += more.failed
                    for p, msg in report.failed:
                        self._fail(p, msg)
                else:
                    b, k = parse_uri(dest)
                    report = SyncReport()
                    size = snapshot_size(path)
                    h = t.head(b, k)
                    if h is not None and t.same(path, size, Remote(k, int(h["ContentLength"]),
                                                                    str(h.get("ETag", "")).strip('"'), b)):
                        report.skipped += 1
                    else:
                        report.actions.append(t.upload_file(path, b, k, size))
                if not report.failed:
                    with self._lock:
                        self.uploaded.append(path)
                if self.on_done:
                    self.on_done(path, report)
            except Exception as e:  # noqa: BLE001 - a failed upload must never kill the thread
                self._fail(path, str(e) if isinstance(e, S3Error) else f"{type(e).__name__}: {e}")
            finally:
                self._q.task_done()
        if t is not None and self._transfer is None:
            t.close()

    def _fail(self, path: str, msg: str) -> None:
        with self._lock:
            self.failed.append((path, msg))
        try:
            self.on_error(path, msg)
        except Exception:  # noqa: BLE001
            pass

    def close(self, timeout: float | None = None) -> list[tuple[str, str]]:
        """Wait up to `timeout` seconds (None: no limit) for queued uploads; return the failures.

        Uploads still running after the timeout go on in the daemon thread and are noted in
        the returned list as not finished.
        """
        if not self._closed:
            self._closed = True
            self._q.put(None)
        self._thread.join(timeout)
        out = list(self.failed)
        if self._thread.is_alive():
            out += [(p, "not finished before close() timed out") for p in sorted(self._pending)] or [
                ("", "an upload was still running when close() timed out")]
        return out

    def __enter__(self) -> "BackgroundUploader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
