"""Claims: which process evaluates which unit of a sweep, over nodes that share a filesystem.

    claims = Claims()                      # one per rlvr-eval --jobs/--watch process
    with claims:                           # a thread refreshes this process's claims (the heartbeat)
        if claims.acquire("evals/run_a/gsm8k_8shot"):
            ...evaluate...
            claims.release("evals/run_a/gsm8k_8shot")

A unit's claim lives in its own folder as numbered files, ``.rlvr-claim.<N>``; the highest N is
the current claim. A file is created complete and atomically: a private temporary file is
hard-linked to the name, which fails when the name exists, also on NFS (where O_EXCL was not
always atomic; O_CREAT|O_EXCL where the filesystem has no hard links). Taking a claim over
writes generation N+1 the same way, so of two nodes that
both judge claim N dead only one wins; nobody renames or deletes another's claim. The owner
rewrites only its own file (atomically: a temporary file renamed over it), to refresh it or
to release it at the end of the unit, successful or not.

A claim names its owner: host name, boot id and PID namespace (together: the machine as the
kernel sees it), PID and the process's start time, plus its heartbeat interval and a beat
counter that a thread of the owner increments every interval. Another process judges it:

- released: free to claim;
- same machine: alive exactly when that PID runs with that start time (a dead owner's claim
  is taken over at once, and a recycled PID is not mistaken for the owner);
- another machine: alive while its beat counter changes. The judging process times the
  silence with its own monotonic clock from the moment it first saw the current beat (no
  comparison of two machines' clocks, no file times) and declares the owner dead only after
  `misses` of the owner's own intervals without a new beat (default 10 x 30 s): a loaded
  owner's heartbeat is a thread that needs no GPU and no evaluation progress, and an owner
  whose beat was late still sees, at its next beat, that its claim was taken (``lost()``), and
  stops its evaluation;
- unreadable (empty or torn: a writer that died half-way on a filesystem without hard links,
  or a damaged file): it has no owner to ask, so it is judged by age: dead once its file time
  is `grace` s old, or once this process has seen it unchanged and unreadable for `grace` s by
  its own monotonic clock (whichever comes first; the second needs no agreement of clocks).
  It is then taken over like any dead claim, by writing the next generation atomically.

Claim files do not pile up: the generations below one's own are superseded (their owners are
dead, or see the higher one at their next beat and stop), so a process that has written
generation N removes the lower ones, and temporary files a writer that died left behind once
they are `grace` s old; the highest generation is never removed. Every unit, finished,
failed or interrupted, keeps one claim, released: generation numbers are never reused, so an
owner superseded while it stalled still finds a higher one than its own at its next beat. A
finished unit is never run again because a scheduler looks for its results after taking its
claim (rlvr.eval.jobs).
"""

from __future__ import annotations

import errno
import json
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

PREFIX = ".rlvr-claim."
HEARTBEAT_S = 30.0
MISSES = 10
GRACE_S = 60.0


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read().strip()
    except OSError:
        return None


def machine() -> dict:
    """The machine as the kernel sees it: host name, boot id, PID namespace."""
    try:
        pidns = os.readlink("/proc/self/ns/pid")
    except OSError:
        pidns = None
    return {"host": socket.gethostname(), "boot": _read("/proc/sys/kernel/random/boot_id"), "pidns": pidns}


def process_start(pid: int) -> str | None:
    """A running process's start time (clock ticks since boot, /proc/PID/stat field 22); None
    when there is no such process, or only its zombie (or no /proc)."""
    stat = _read(f"/proc/{pid}/stat")
    if stat is None:
        return None
    try:
        fields = stat.rsplit(")", 1)[1].split()
    except IndexError:
        return None
    return fields[19] if len(fields) > 19 and fields[0] not in ("Z", "X") else None


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass
class Claim:
    """The current claim of a unit: generation, file and owner record (None: unreadable)."""

    gen: int
    path: str
    owner: dict | None


def current(folder: str) -> Claim | None:
    """The highest-generation claim in a unit folder, or None when there is none."""
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    gens = [int(n[len(PREFIX):]) for n in names if n.startswith(PREFIX) and n[len(PREFIX):].isdigit()]
    if not gens:
        return None
    gen = max(gens)
    path = os.path.join(folder, f"{PREFIX}{gen}")
    text = _read(path)
    try:
        owner = json.loads(text) if text else None
    except ValueError:
        owner = None
    return Claim(gen, path, owner if isinstance(owner, dict) else None)


def describe(owner: dict | None) -> str:
    if not owner:
        return "another process"
    return f"{owner.get('host', '?')} pid {owner.get('pid', '?')}"


class Claims:
    """This process's claims: acquire, release, judge others', and the heartbeat thread."""

    def __init__(self, interval: float = HEARTBEAT_S, misses: int = MISSES, log: Callable[[str], None] = print,
                 clock: Callable[[], float] = time.monotonic, grace: float = GRACE_S):
        self.interval, self.misses, self.log, self.clock, self.grace = interval, misses, log, clock, grace
        self.me = {**machine(), "pid": os.getpid(), "start": process_start(os.getpid())}
        self.mine: dict[str, dict] = {}          # unit folder -> our record (token, gen, beat)
        self.lost_units: set[str] = set()
        self._seen: dict[str, tuple[int, object, float]] = {}   # claim file -> (gen, beat, first seen)
        self._lock = threading.RLock()         # also orders the owner's own rewrites (beat, release)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ judging

    def same_machine(self, owner: dict) -> bool:
        return all(owner.get(k) == self.me[k] for k in ("host", "boot", "pidns")) and self.me["boot"] is not None

    def state(self, folder: str) -> tuple[str, Claim | None]:
        """("free" | "mine" | "live" | "dead", the current claim) of a unit folder."""
        c = current(folder)
        if c is None:
            return "free", None
        o = c.owner
        with self._lock:
            ours = self.mine.get(folder)
        if ours is not None and o is not None and o.get("token") == ours["token"]:
            return "mine", c
        if o is None:  # being written, or left empty/torn: judged by its age
            return self._unreadable(c), c
        if o.get("released"):
            return "free", c
        if self.same_machine(o):
            pid = o.get("pid")
            alive = isinstance(pid, int) and _pid_alive(pid) and process_start(pid) == o.get("start")
            return ("live" if alive else "dead"), c
        beat = o.get("beat")
        now = self.clock()
        seen = self._seen.get(c.path)
        if seen is None or seen[0] != c.gen or seen[1] != beat:
            self._seen[c.path] = (c.gen, beat, now)
            return "live", c
        interval = o.get("interval")
        interval = float(interval) if isinstance(interval, (int, float)) and interval > 0 else HEARTBEAT_S
        return ("dead" if now - seen[2] >= self.misses * interval else "live"), c

    def _unreadable(self, c: Claim) -> str:
        """An unreadable claim: "dead" once `grace` s old by its file time or by this process's
        own clock since it first saw the file so (unchanged), else "live" (still being written)."""
        try:
            st = os.stat(c.path)
        except OSError:
            return "live"   # gone meanwhile: the next look sees the folder as it is then
        now = self.clock()
        key = ("unreadable", st.st_size, st.st_mtime_ns)
        seen = self._seen.get(c.path)
        if seen is None or seen[0] != c.gen or seen[1] != key:
            self._seen[c.path] = (c.gen, key, now)
            seen = self._seen[c.path]
        old = time.time() - st.st_mtime >= self.grace or now - seen[2] >= self.grace
        return "dead" if old else "live"

    # ------------------------------------------------------------------ owning

    def _write_new(self, path: str, record: dict) -> bool:
        """Create `path` holding record, atomically; False when it exists."""
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
            fh.flush()
            os.fsync(fh.fileno())
        try:
            os.link(tmp, path)
            return True
        except FileExistsError:
            return False
        except OSError as e:
            if e.errno in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.ENOSYS, errno.EMLINK):
                return self._create_exclusive(path, record)   # a filesystem without hard links
            # NFS may report a failed link that happened: the link count says which
            try:
                return os.stat(tmp).st_nlink == 2
            except OSError:
                return False    # the temporary file is gone (pruned as a dead writer's): not claimed
        finally:
            try:
                os.unlink(tmp)
            except OSError:
                pass

    @staticmethod
    def _create_exclusive(path: str, record: dict) -> bool:
        """O_CREAT|O_EXCL: atomic creation where links are not supported (a reader may see the
        file empty for a moment, which counts as a live claim)."""
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        return True

    def _rewrite(self, path: str, record: dict) -> None:
        tmp = f"{path}.{uuid.uuid4().hex}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(record, fh)
        os.replace(tmp, path)

    def acquire(self, folder: str) -> bool:
        """Claim a unit folder (made if needed) when it is free or its owner is dead."""
        os.makedirs(folder, exist_ok=True)
        st, c = self.state(folder)
        if st == "mine":
            return True
        if st == "live":
            return False
        gen = 0 if c is None else c.gen + 1
        record = {**self.me, "token": uuid.uuid4().hex, "gen": gen, "interval": self.interval, "beat": 0,
                  "time": time.time()}
        if not self._write_new(os.path.join(folder, f"{PREFIX}{gen}"), record):
            return False   # another process claimed it first
        if st == "dead" and c is not None and c.owner is None:
            self.log(f"{folder}: took over the unreadable claim {os.path.basename(c.path)} (empty or torn, "
                     f"unchanged for {self.grace:g} s)")
        elif st == "dead":
            self.log(f"{folder}: took over the claim of {describe(c.owner)}, which is no longer running")
        with self._lock:
            self.mine[folder] = record
        self.prune(folder, gen)
        return True

    def release(self, folder: str, failed: bool = False) -> None:
        """Give a unit up (finished, failed or interrupted): others may claim it at once. Only the released claim stays (the generations below it are
        pruned): an owner superseded while it stalled must still find a higher generation than
        its own at its next beat, and stop, so generation numbers are never reused."""
        with self._lock:
            record = self.mine.pop(folder, None)
            if record is None:
                return
            c = current(folder)
            if c is not None and c.owner is not None and c.owner.get("token") == record["token"]:
                try:
                    self._rewrite(c.path, {**record, "released": True, "failed": failed, "time": time.time()})
                except OSError:
                    pass
                self.prune(folder, c.gen)

    def prune(self, folder: str, below: int) -> None:
        """Remove the claim files of generations below `below` (superseded by this process's
        own), and temporary files at least `grace` s old (left by a writer that died)."""
        try:
            names = os.listdir(folder)
        except OSError:
            return
        now = time.time()
        for n in names:
            if not n.startswith(PREFIX):
                continue
            rest = n[len(PREFIX):]
            path = os.path.join(folder, n)
            try:
                if rest.isdigit():
                    if int(rest) < below:
                        os.unlink(path)
                elif n.endswith(".tmp") and now - os.stat(path).st_mtime >= self.grace:
                    os.unlink(path)
            except OSError:
                pass   # removed by another process meanwhile, or not ours to remove

    def beat(self) -> None:
        """Refresh every claim this process holds; a claim another took over is lost."""
        with self._lock:
            held = list(self.mine.items())
        for folder, record in held:
            with self._lock:
                if self.mine.get(folder) is not record:
                    continue   # released meanwhile
                c = current(folder)
                if c is None or c.owner is None or c.owner.get("token") != record["token"]:
                    if c is not None and c.gen > record["gen"]:
                        self.mine.pop(folder, None)
                        self.lost_units.add(folder)
                        self.log(f"{folder}: the claim was taken over by {describe(c.owner)}; stopping here")
                    continue
                record["beat"] += 1
                record["time"] = time.time()
                try:
                    self._rewrite(c.path, record)
                except OSError:
                    pass

    def lost(self, folder: str) -> bool:
        with self._lock:
            return folder in self.lost_units

    # ------------------------------------------------------------------ the heartbeat thread

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.beat()

    def __enter__(self) -> "Claims":
        self._thread = threading.Thread(target=self._run, name="rlvr-claims", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        with self._lock:
            held = list(self.mine)
        for folder in held:
            self.release(folder)
