"""watch: poll the jobs under a prefix and keep local copies of their traces fresh; the flock
that keeps overlapping cron runs apart."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterable

from rlvr.errors import S3UsageError
from rlvr.s3._util import human, int_or_none, read_json, write_json
from rlvr.s3.checksums import PART_SIZE_META, local_matches
from rlvr.s3.transfer import Action, Remote, S3Transfer
from rlvr.s3.uri import parse_uri, safe_relpath

WATCH_FILES = ("traces/trace.jsonl", "config.yaml")
WATCH_STATE = ".rlvr-s3-sync-watch.json"
WATCH_LOCK = ".rlvr-s3-sync-watch.lock"


class LockHeld(Exception):
    """Another process holds the watch lock."""


class WatchLock:
    """An exclusive flock on a file (released when the process ends, even by kill -9)."""

    def __init__(self, path: str):
        self.path = path
        self.fh = None

    def acquire(self) -> "WatchLock":
        import fcntl

        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            raise LockHeld(f"another watch holds {self.path}" + (f" (pid {holder})" if holder.isdigit() else "")) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self.fh = fh
        return self

    def release(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def __enter__(self) -> "WatchLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def watch(pattern: str, src_uri: str, dest: str, *, files: Iterable[str] = WATCH_FILES, interval: float = 60,
          idle_exit: float | None = 3600, once: bool = False, transfer: S3Transfer | None = None,
          endpoint_url: str | None = None, on_action: Callable[[Action], None] | None = None,
          log: Callable[[str], None] | None = None, stop: threading.Event | None = None) -> int:
    """Poll src_uri for job folders whose name contains `pattern`; download `files` of each when changed.

    Files land in dest/JOB/FILE atomically. Returns the number of downloads. Stops after
    `idle_exit` seconds without a change (None: never), after one poll with `once`, or when
    `stop` is set. The caller holds the lock (see WatchLock).
    """
    bucket, prefix = parse_uri(src_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    files = [f.strip("/") for f in files]
    for f in files:
        if safe_relpath(f) is None:
            raise S3UsageError(f"--file {f!r} is not a relative path")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
    state_path = os.path.join(dest, WATCH_STATE)
    state: dict[str, str] = {k: v for k, v in read_json(state_path).items() if isinstance(v, str)}
    log = log or (lambda msg: None)
    stop = stop or threading.Event()
    total = 0
    last_change = time.monotonic()
    try:
        while True:
            jobs = sorted(j for j in t.list_dirs(bucket, prefix) if pattern in j and safe_relpath(j) is not None)
            changed = 0
            for job in jobs:
                for f in files:
                    key = f"{prefix}{job}/{f}"
                    local = os.path.join(dest, job, *f.split("/"))
                    h = t.head(bucket, key)
                    if h is None:
                        continue
                    r = Remote(key, int(h["ContentLength"]), str(h.get("ETag", "")).strip('"'))
                    sk = f"{job}/{f}"
                    if state.get(sk) == r.etag and os.path.isfile(local) and os.path.getsize(local) == r.size:
                        continue
                    hint = int_or_none((h.get("Metadata") or {}).get(PART_SIZE_META))
                    if os.path.isfile(local) and local_matches(local, os.path.getsize(local), r.etag, r.size, [hint], t.etags):
                        state[sk] = r.etag
                        continue
                    act = t.download(bucket, key, local, r)
                    state[sk] = r.etag
                    write_json(state_path, state)
                    changed += 1
                    log(f"{job}: {f} updated ({human(r.size)})")
                    if on_action:
                        on_action(act)
            total += changed
            now = time.monotonic()
            if changed:
                last_change = now
            if once or stop.is_set():
                return total
            if idle_exit is not None and now - last_change >= idle_exit:
                log(f"no changes for {idle_exit:g} s: exiting ({len(jobs)} job(s) matched {pattern!r})")
                return total
            wait_s = interval if idle_exit is None else min(interval, max(0.0, idle_exit - (now - last_change)))
            if stop.wait(wait_s):
                return total
    finally:
        if transfer is None:
            t.close()
