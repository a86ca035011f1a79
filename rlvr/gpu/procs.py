"""The local process table (/proc) as rlvr.gpu sees it: PID namespaces, hidden processes,
and the orphan rule (a job's worker whose parent died)."""

from __future__ import annotations

import os
import pwd
import time
from dataclasses import dataclass

from rlvr.gpu.common import GpuError

# Processes a worker is reparented to when its parent dies (PID 1 or a child subreaper).
REAPERS = frozenset({"systemd", "init", "tini", "dumb-init", "catatonit", "docker-init", "s6-svscan"})

# Processes that only exist as children of a job's main process. (needle, where, what)
WORKER_SIGNS = (
    ("from multiprocessing.spawn import spawn_main", "in", "multiprocessing worker"),
    ("from multiprocessing.forkserver import main", "in", "multiprocessing forkserver"),
    ("VLLM::", "prefix", "vLLM engine/worker"),
    ("ray::", "prefix", "Ray worker"),
)
TORCHRUN_ENV = b"TORCHELASTIC_RUN_ID="


@dataclass
class ProcInfo:
    """What /proc says about one process."""

    pid: int
    comm: str
    state: str  # R, S, D, Z, T, ... ('?' when unreadable)
    ppid: int
    pgid: int
    sid: int
    uid: int | None
    cmdline: str
    start_ticks: int  # since boot, in clock ticks (guards against PID reuse)
    age_s: float | None


class ProcTable:
    """A cached view of the local process table (/proc) and of our PID namespace.

    foreign_ns: True when the driver's PIDs are not ours (we run in a nested PID namespace,
    e.g. a container), False when they are, None to detect (NSpid in /proc/self/status)
    unless RLVR_GPU_PID_NAMESPACE is shared or foreign.
    hidepid: True when /proc hides other users' processes from us; None to detect.
    """

    def __init__(self, root: str = "/proc", foreign_ns: bool | None = None, hidepid: bool | None = None):
        if foreign_ns is None:  # RLVR_GPU_PID_NAMESPACE overrides the detection (docs/gpu.md)
            mode = os.environ.get("RLVR_GPU_PID_NAMESPACE", "auto")
            if mode not in ("auto", "shared", "foreign"):
                raise GpuError(f"RLVR_GPU_PID_NAMESPACE must be auto, shared or foreign, not {mode!r}")
            if mode != "auto":
                foreign_ns = mode == "foreign"
                hidepid = False if hidepid is None and mode == "shared" else hidepid
        self.root = root
        self._cache: dict[int, ProcInfo | None] = {}
        self.euid = os.geteuid()
        self.clk = os.sysconf("SC_CLK_TCK")
        self.btime = 0.0
        try:
            with open(f"{root}/stat") as fh:
                self.btime = float(next(ln.split()[1] for ln in fh if ln.startswith("btime ")))
        except (OSError, StopIteration, ValueError):
            pass
        self.foreign_ns = self._nested() if foreign_ns is None else foreign_ns
        self.hidepid = self._hidepid() if hidepid is None else hidepid

    def _nested(self) -> bool | None:
        try:
            with open(f"{self.root}/self/status") as fh:
                for ln in fh:
                    if ln.startswith("NSpid:"):
                        return len(ln.split()) > 2
        except OSError:
            pass
        return None

    def _hidepid(self) -> bool:
        if self.euid == 0:
            return False
        try:
            with open(f"{self.root}/self/mountinfo") as fh:
                for ln in fh:
                    parts = ln.split()
                    if len(parts) > 4 and parts[4] == self.root and " - proc " in ln:
                        opts = ln.rsplit(" ", 1)[-1].strip().split(",")
                        return any(o in ("hidepid=2", "hidepid=invisible") for o in opts)
        except OSError:
            pass
        return False

    def get(self, pid: int) -> ProcInfo | None:
        if pid not in self._cache:
            self._cache[pid] = self._read(pid)
        return self._cache[pid]

    def _read(self, pid: int) -> ProcInfo | None:
        base = f"{self.root}/{pid}"
        try:
            with open(f"{base}/stat", "rb") as fh:
                raw = fh.read().decode("utf-8", "replace")
        except FileNotFoundError:
            return None
        except (PermissionError, ProcessLookupError):
            return ProcInfo(pid, "?", "?", 0, -1, -1, None, "", 0, None) if os.path.exists(base) else None
        except OSError:
            return None
        lp, rp = raw.find("("), raw.rfind(")")
        comm, rest = raw[lp + 1 : rp], raw[rp + 2 :].split()
        if len(rest) < 20:
            return None
        try:
            uid: int | None = os.stat(base).st_uid
        except OSError:
            uid = None
        try:
            with open(f"{base}/cmdline", "rb") as fh:
                cmd = fh.read().rstrip(b"\0").replace(b"\0", b" ").decode("utf-8", "replace")
        except OSError:
            cmd = ""
        start = int(rest[19])
        age = time.time() - (self.btime + start / self.clk) if self.btime else None
        return ProcInfo(pid, comm, rest[0], int(rest[1]), int(rest[2]), int(rest[3]), uid, cmd or f"[{comm}]", start,
                        age)

    def threads(self, pid: int) -> int | None:
        try:
            with open(f"{self.root}/{pid}/status") as fh:
                return next((int(ln.split()[1]) for ln in fh if ln.startswith("Threads:")), None)
        except (OSError, ValueError):
            return None

    def has_env(self, pid: int, prefix: bytes) -> bool | None:
        try:
            with open(f"{self.root}/{pid}/environ", "rb") as fh:
                return any(v.startswith(prefix) for v in fh.read().split(b"\0"))
        except OSError:
            return None

    def holds_nvidia(self, pid: int) -> bool | None:
        """True if the process has a /dev/nvidia* file open; None when we may not look."""
        try:
            fds = os.listdir(f"{self.root}/{pid}/fd")
        except OSError:
            return None
        for fd in fds:
            try:
                if os.readlink(f"{self.root}/{pid}/fd/{fd}").startswith("/dev/nvidia"):
                    return True
            except OSError:
                continue
        return False


def _user(uid: int | None) -> str | None:
    if uid is None:
        return None
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def orphan_reason(info: ProcInfo, table: ProcTable) -> str | None:
    """Why this process is an orphaned worker of a dead job, or None.

    Both must hold: (1) it is a worker that exists only as a child of a job's main process
    (multiprocessing spawn/forkserver child, a vLLM ``VLLM::`` or Ray ``ray::`` process, a
    torchrun worker); (2) its parent died: it was reparented to a known init/subreaper
    (systemd, tini, ...), or to PID 1 while it is in neither PID 1's session nor its process
    group (a container whose entrypoint is the job itself shares PID 1's session, so that
    job's workers are not orphans). A server started with nohup and left by its shell is no
    worker, so it stays live.
    """
    if info.pid <= 1:
        return None  # init (or a namespace's init) is nobody's worker
    parent = table.get(info.ppid) if info.ppid > 0 else None
    if info.ppid > 0 and parent is None:
        if table.hidepid or table.foreign_ns:
            return None  # /proc may hide a live parent (another user's, another namespace's): not proof of death
        died = f"its parent pid {info.ppid} is gone"
    elif parent is not None and parent.comm in REAPERS:
        died = f"reparented to {parent.comm} (pid {info.ppid})"
    elif info.ppid == 1 and parent is not None and parent.state != "?":
        if info.sid in (parent.sid, 1) or info.pgid in (parent.pgid, 1):
            return None  # PID 1 may be the job itself (a container's entrypoint)
        died = f"reparented to pid 1 ({parent.comm}) from another session"
    else:
        return None
    for needle, where, what in WORKER_SIGNS:
        if (info.cmdline.startswith(needle) if where == "prefix" else needle in info.cmdline):
            return f"orphaned {what}: {died}"
    if table.has_env(info.pid, TORCHRUN_ENV):
        return f"orphaned torchrun worker: {died}"
    return None
