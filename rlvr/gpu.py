"""GPU state for rlvr: which NVIDIA GPUs are free, busy, idle or held by dead jobs.

The one home of GPU state; rlvr-gpu-free is a thin command over it, and rlvr-eval and
sweeps import it to pick GPUs:

    from rlvr import gpu
    ids = gpu.free_gpus(2)                      # [3, 5]: physical indices, or TooFewFree
    for g in gpu.snapshot():                     # one GpuState per visible GPU
        print(g.index, g.state, g.reason)

Reading: NVML through nvidia-ml-py (``NvmlReader``), else ``nvidia-smi --query-gpu`` and
``--query-compute-apps`` (``SmiReader``); CUDA_VISIBLE_DEVICES limits which GPUs count.
Classification (``classify``) looks at several samples over a short window, never one
reading, and at the process table for every PID the driver reports:

    error   a sample could not be read
    busy    utilisation > 0 at some sample, utilisation not reported while memory is held,
            processes starting or exiting, or memory use moving during the window
    free    every sample: no process and memory used below the threshold
    zombie  utilisation 0 throughout and every process is dead: defunct (state Z), gone from
            the process table (same PID namespace only), or an orphaned worker (a
            multiprocessing / vLLM / Ray / torchrun worker whose parent died)
    idle    utilisation 0 throughout and memory held by a live (or not visible) process,
            e.g. an inference server between requests: never killed

docs/gpu.md explains the rule, the PID-namespace rule and the orphan rule. ``Monitor``
samples this node (one NVML session for repeated windows, e.g. ``find(..., wait=True)``);
``Hosts`` runs ``rlvr-gpu-free --json`` on other nodes over ssh; ``plan_kills`` and
``Monitor.kill`` signal zombie processes (SIGTERM, then SIGKILL after a grace period).
"""

from __future__ import annotations

import csv
import os
import pwd
import shlex
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import orjson

# Exit codes of rlvr-gpu-free, beside rlvr.cli's shared 0/1/2/3/130.
EXIT_TOO_FEW = 4
EXIT_NO_GPU = 5

DEFAULT_SAMPLES = 5
DEFAULT_INTERVAL = 0.5
DEFAULT_MAX_MEM_MIB = 1024
MEM_JITTER_MIB = 256  # memory moving more than this inside the window counts as activity
MIB = 1 << 20

STATES = ("free", "busy", "idle", "zombie", "error")
DEAD = ("gone", "defunct", "orphan")  # process statuses that make a zombie

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


class GpuError(RuntimeError):
    """GPU state could not be read (e.g. nvidia-smi printed something unparsable)."""


class NoGpuError(GpuError):
    """No NVIDIA driver, no GPU, or CUDA_VISIBLE_DEVICES hides every GPU."""


class TooFewFree(GpuError):
    """Fewer free GPUs than asked for; ``states`` holds what was seen."""

    def __init__(self, message: str, states: list[GpuState], want: int):
        super().__init__(message)
        self.states = states
        self.want = want


class _Unavailable(Exception):
    """A reader cannot start (no library, no driver, no binary): try the next one."""


# --------------------------------------------------------------------------- readings


@dataclass
class Reading:
    """One GPU at one instant, as the driver reports it (physical index)."""

    index: int
    uuid: str
    name: str
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    util: int | None = None  # percent; None when the driver does not report it
    procs: dict[int, float | None] = field(default_factory=dict)  # pid -> MiB (None: not reported)
    error: str | None = None


def _num(text: str) -> float | None:
    t = text.strip()
    if t.startswith("[") or t in ("N/A", ""):  # [N/A], [Not Supported], [Insufficient Permissions]
        return None
    for unit in (" MiB", " %"):
        if t.endswith(unit):
            t = t[: -len(unit)]
    return float(t)


def _decode(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlReader:
    """Reads every GPU through NVML (the nvidia-ml-py ``pynvml`` module, or one passed in)."""

    source = "nvml"

    def __init__(self, nvml: Any = None):
        if nvml is None:
            try:
                import pynvml as nvml
            except ImportError as e:
                raise _Unavailable(f"NVML: nvidia-ml-py is not installed ({e})") from None
        self.nvml = nvml
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            raise _Unavailable(f"NVML: {e}") from None
        try:
            count = nvml.nvmlDeviceGetCount()
            self.handles = [nvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]
            self.ids = [(_decode(nvml.nvmlDeviceGetUUID(h)), _decode(nvml.nvmlDeviceGetName(h))) for h in self.handles]
        except nvml.NVMLError as e:
            self.close()
            raise _Unavailable(f"NVML: {e}") from None

    def read(self) -> list[Reading]:
        nv = self.nvml
        out = []
        for i, (h, (uuid, name)) in enumerate(zip(self.handles, self.ids)):
            r = Reading(i, uuid, name)
            try:
                try:
                    mem = nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)  # used excludes reserved
                except (nv.NVMLError, AttributeError, TypeError):
                    mem = nv.nvmlDeviceGetMemoryInfo(h)
                r.mem_used_mib, r.mem_total_mib = mem.used / MIB, mem.total / MIB
                try:
                    r.util = int(nv.nvmlDeviceGetUtilizationRates(h).gpu)
                except nv.NVMLError_NotSupported:
                    r.util = None
                for fn in (nv.nvmlDeviceGetComputeRunningProcesses, nv.nvmlDeviceGetGraphicsRunningProcesses):
                    try:
                        plist = fn(h)
                    except nv.NVMLError_NotSupported:
                        continue
                    for p in plist:
                        used = None if p.usedGpuMemory is None else p.usedGpuMemory / MIB
                        old = r.procs.get(p.pid)
                        r.procs[p.pid] = used if old is None else old + (used or 0.0)
            except nv.NVMLError as e:
                r.error = f"NVML: {e}"
            out.append(r)
        return out

    def close(self) -> None:
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001 - shutting down a library that may be half-initialised
            pass


SMI_GPU_FIELDS = "index,uuid,name,memory.used,memory.total,utilization.gpu"
SMI_APP_FIELDS = "gpu_uuid,pid,used_memory"


class SmiReader:
    """Reads every GPU by running ``nvidia-smi --query-gpu`` and ``--query-compute-apps``."""

    source = "nvidia-smi"

    def __init__(self, exe: str = "nvidia-smi", why_not_nvml: str | None = None):
        path = shutil.which(exe)
        if path is None:
            raise _Unavailable(f"nvidia-smi: {exe!r} not found on PATH")
        self.exe = path
        self.why_not_nvml = why_not_nvml

    def _run(self, query: str) -> list[tuple[int, list[str]]]:
        try:
            p = subprocess.run([self.exe, query, "--format=csv,noheader,nounits"], capture_output=True, text=True,
                               timeout=60)
        except subprocess.TimeoutExpired:
            raise GpuError(f"nvidia-smi {query} did not answer in 60 s") from None
        text = (p.stdout + p.stderr).strip()
        if p.returncode != 0:
            last = text.splitlines()[-1] if text else f"exit status {p.returncode}"
            if p.returncode in (6, 9) or "No devices were found" in text or "couldn't communicate" in text:
                extra = f"; {self.why_not_nvml}" if self.why_not_nvml else ""
                raise NoGpuError(f"no NVIDIA GPU: nvidia-smi: {last}{extra}")
            raise GpuError(f"nvidia-smi {query} failed (exit status {p.returncode}): {last}")
        rows = []
        for n, line in enumerate(p.stdout.splitlines(), 1):
            if not line.strip() or line.strip().startswith("No running processes"):
                continue
            rows.append((n, next(csv.reader([line], skipinitialspace=True))))
        return rows

    def read(self) -> list[Reading]:
        out: list[Reading] = []
        by_uuid: dict[str, Reading] = {}
        q = f"--query-gpu={SMI_GPU_FIELDS}"
        for n, row in self._run(q):
            where = f"nvidia-smi {q} output line {n}"
            if len(row) != 6:
                raise GpuError(f"{where}: expected 6 fields, got {len(row)}: {', '.join(row)!r}")
            try:
                r = Reading(int(row[0]), row[1].strip(), row[2].strip())
            except ValueError:
                raise GpuError(f"{where}: field index is not an integer: {row[0]!r}") from None
            for key, text in zip(("mem_used_mib", "mem_total_mib", "util"), row[3:]):
                try:
                    v = _num(text)
                except ValueError:
                    raise GpuError(f"{where}: field {key} is not a number: {text!r}") from None
                setattr(r, key, None if v is None else (int(v) if key == "util" else v))
            if r.mem_used_mib is None or r.mem_total_mib is None:
                r.error = "nvidia-smi: memory use not reported"
            out.append(r)
            by_uuid[r.uuid] = r
        if not out:
            raise NoGpuError("no NVIDIA GPU: nvidia-smi listed no devices")
        q = f"--query-compute-apps={SMI_APP_FIELDS}"
        for n, row in self._run(q):
            where = f"nvidia-smi {q} output line {n}"
            if len(row) != 3:
                raise GpuError(f"{where}: expected 3 fields, got {len(row)}: {', '.join(row)!r}")
            r = by_uuid.get(row[0].strip())
            if r is None:
                raise GpuError(f"{where}: field gpu_uuid names no GPU of --query-gpu: {row[0]!r}")
            try:
                pid = int(row[1])
                used = _num(row[2])
            except ValueError:
                raise GpuError(f"{where}: field pid/used_memory is not a number: {row[1]!r}, {row[2]!r}") from None
            r.procs[pid] = used
        return out

    def close(self) -> None:
        pass


def open_reader(backend: str = "auto", nvml: Any = None, smi: str = "nvidia-smi"):
    """A started reader: ``auto`` tries NVML, then nvidia-smi. Raises NoGpuError if neither works."""
    if backend not in ("auto", "nvml", "smi"):
        raise ValueError(f"backend must be auto, nvml or smi, not {backend!r}")
    why = []
    if backend in ("auto", "nvml"):
        try:
            return NvmlReader(nvml)
        except _Unavailable as e:
            why.append(str(e))
    if backend in ("auto", "smi"):
        try:
            return SmiReader(smi, why_not_nvml=why[0] if why else None)
        except _Unavailable as e:
            why.append(str(e))
    raise NoGpuError("no NVIDIA GPU driver: " + "; ".join(why))


def parse_visible(value: str | None, devices: Sequence[tuple[int, str]]) -> tuple[list[int], list[str]]:
    """Physical indices that CUDA_VISIBLE_DEVICES=value exposes, in its order, plus warnings.

    devices: (index, uuid) of every GPU. Entries are indices or (prefixes of) GPU UUIDs;
    like CUDA, the list ends at the first entry that names no GPU. None means unset: all.
    """
    if value is None:
        return [i for i, _ in devices], []
    out: list[int] = []
    warnings: list[str] = []
    for tok in (t.strip() for t in value.split(",")):
        if not tok:
            break
        if tok.startswith("MIG-"):
            warnings.append(f"CUDA_VISIBLE_DEVICES entry {tok!r}: MIG instances are not handled; ignored")
            continue
        hit = None
        if tok.lstrip("-").isdigit():
            hit = next((i for i, _ in devices if i == int(tok)), None)
        else:
            want = tok if tok.startswith("GPU-") else f"GPU-{tok}"
            hits = [i for i, u in devices if u.startswith(want)]
            hit = hits[0] if len(hits) == 1 else None
        if hit is None or hit in out:
            if tok != "-1":
                what = "repeats a GPU" if hit is not None else "names no GPU"
                warnings.append(f"CUDA_VISIBLE_DEVICES entry {tok!r} {what}: the list ends there (as in CUDA)")
            break
        out.append(hit)
    return out, warnings


# --------------------------------------------------------------------------- processes


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
    parent = table.get(info.ppid) if info.ppid > 0 else None
    if info.ppid > 0 and parent is None:
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


# --------------------------------------------------------------------------- classification


@dataclass
class GpuProc:
    """A process holding memory on a GPU, with what /proc says about it."""

    pid: int
    used_mib: float | None
    status: str  # live | hidden | gone | defunct | orphan | exited
    reason: str = ""
    user: str | None = None
    uid: int | None = None
    cmdline: str | None = None
    state: str | None = None
    age_s: float | None = None
    ppid: int | None = None
    start_ticks: int | None = None

    def to_record(self) -> dict:
        d = {k: getattr(self, k) for k in ("pid", "user", "uid", "cmdline", "state", "status", "reason", "used_mib",
                                            "age_s", "ppid")}
        for k in ("used_mib", "age_s"):
            if d[k] is not None:
                d[k] = round(d[k], 1)
        return d


@dataclass
class GpuState:
    """The verdict on one GPU over a sampling window (see the module docstring)."""

    index: int
    uuid: str
    name: str
    state: str
    reason: str
    mem_used_mib: float | None
    mem_total_mib: float | None
    util: list[int | None]
    procs: list[GpuProc]
    window_s: float = 0.0
    host: str | None = None

    @property
    def util_max(self) -> int | None:
        vals = [u for u in self.util if u is not None]
        return max(vals) if vals else None

    @property
    def label(self) -> str:
        return f"{self.host}:{self.index}" if self.host else str(self.index)

    def to_record(self) -> dict:
        r = lambda v: None if v is None else round(v, 1)  # noqa: E731
        return {"host": self.host, "index": self.index, "uuid": self.uuid, "name": self.name, "state": self.state,
                "reason": self.reason, "mem_used_mib": r(self.mem_used_mib), "mem_total_mib": r(self.mem_total_mib),
                "util_max": self.util_max, "util": self.util, "samples": len(self.util),
                "window_s": round(self.window_s, 2), "processes": [p.to_record() for p in self.procs]}

    @classmethod
    def from_record(cls, rec: dict, host: str | None = None) -> GpuState:
        procs = [GpuProc(**{k: p.get(k) for k in ("pid", "used_mib", "status", "reason", "user", "uid", "cmdline",
                                                     "state", "age_s", "ppid")}) for p in rec.get("processes") or []]
        return cls(int(rec["index"]), rec["uuid"], rec["name"], rec["state"], rec.get("reason", ""),
                   rec.get("mem_used_mib"), rec.get("mem_total_mib"), list(rec.get("util") or []), procs,
                   float(rec.get("window_s") or 0.0), host if host is not None else rec.get("host"))


def _pids(pids: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(pids))


def _proc_status(pid: int, used: float | None, table: ProcTable, foreign: bool) -> GpuProc:
    info = table.get(pid) if pid > 0 else None
    if pid <= 0:
        return GpuProc(pid, used, "hidden", "the driver reported no PID")
    if info is None:
        if foreign:
            why = ("not visible here: the driver reports PIDs of another PID namespace (container?)"
                   if table.foreign_ns is not False else "not visible here (other users' processes are hidden)")
            return GpuProc(pid, used, "hidden", why)
        return GpuProc(pid, used, "gone", "not in the process table (the process died; its memory is not released)")
    p = GpuProc(pid, used, "live", "", _user(info.uid), info.uid, info.cmdline, info.state, info.age_s, info.ppid,
                info.start_ticks)
    if table.foreign_ns and table.holds_nvidia(pid) is not True:
        # In a nested PID namespace a host PID may name an unrelated local process.
        p.status, p.reason = "hidden", "a host PID seen from a nested PID namespace: maybe not this process"
        return p
    if info.state in ("Z", "X") and (table.threads(pid) or 1) > 1:
        p.reason = "its main thread exited, other threads still run"
    elif info.state in ("Z", "X"):
        p.status, p.reason = "defunct", f"defunct (state {info.state}): parent pid {info.ppid} has not reaped it"
    elif info.state != "?":
        why = orphan_reason(info, table)
        if why:
            p.status, p.reason = "orphan", why
    return p


def classify(samples: Sequence[Sequence[Reading]], procs: ProcTable | None = None,
             max_mem_mib: float = DEFAULT_MAX_MEM_MIB, window_s: float = 0.0) -> list[GpuState]:
    """One GpuState per GPU from several samples (lists of Readings, one per GPU, same order).

    The rule, in order: error, busy, free, zombie, idle (see the module docstring).
    """
    if not samples:
        raise ValueError("classify needs at least one sample")
    table = procs if procs is not None else ProcTable()
    last_pids = {p for r in samples[-1] if not r.error for p in r.procs}
    visible = [p for p in last_pids if table.get(p) is not None]
    foreign = bool(table.foreign_ns) or table.hidepid or (table.foreign_ns is None and bool(last_pids) and not visible)
    out = []
    for k, last in enumerate(samples[-1]):
        series = [s[k] if k < len(s) and s[k].index == last.index else None for s in samples]
        out.append(_classify_one(last, series, table, foreign, max_mem_mib, window_s))
    return out


def _classify_one(last: Reading, series: list[Reading | None], table: ProcTable, foreign: bool,
                  max_mem_mib: float, window_s: float) -> GpuState:
    def state(s: str, why: str, procs: list[GpuProc] | None = None) -> GpuState:
        return GpuState(last.index, last.uuid, last.name, s, why, last.mem_used_mib, last.mem_total_mib,
                        [r.util if r else None for r in series], procs or [], window_s)

    bad = [r.error if r else "GPU missing from a sample" for r in series if r is None or r.error]
    if bad or last.mem_used_mib is None:
        return state("error", bad[0] if bad else "memory use not reported")
    seen = {p for r in series for p in r.procs}
    procs = [_proc_status(p, u, table, foreign) for p, u in sorted(last.procs.items())]
    for pid in sorted(seen - set(last.procs)):
        used = max((r.procs.get(pid) or 0.0 for r in series), default=None)
        procs.append(GpuProc(pid, used, "exited", "exited during the window"))
    utils = [r.util for r in series]
    mems = [r.mem_used_mib or 0.0 for r in series]
    held = max(mems) >= max_mem_mib
    if any(u for u in utils if u is not None):
        return state("busy", f"utilisation up to {max(u for u in utils if u is not None)}% in the window", procs)
    if None in utils and (seen or held):
        return state("busy", "utilisation not reported while memory is held: treated as in use", procs)
    if not seen and not held:
        return state("free", f"no process, {mems[-1]:.0f} MiB used (< {max_mem_mib:.0f})", procs)
    if any(set(r.procs) != set(last.procs) for r in series):
        return state("busy", "processes started or exited during the window", procs)
    if max(mems) - min(mems) > MEM_JITTER_MIB:
        return state("busy", f"memory use moved by {max(mems) - min(mems):.0f} MiB during the window", procs)
    if not procs:
        return state("idle", f"{mems[-1]:.0f} MiB held by no listed process (another container or PID namespace?)")
    live = [p for p in procs if p.status not in DEAD]
    if live:
        dead = [p for p in procs if p.status in DEAD]
        tail = f"; dead: {_pids(p.pid for p in dead)}" if dead else ""
        return state("idle", f"0% utilisation, memory held by live process(es) {_pids(p.pid for p in live)}{tail}",
                     procs)
    return state("zombie", "memory held by dead processes: " + "; ".join(f"pid {p.pid} {p.status}" for p in procs),
                 procs)


# --------------------------------------------------------------------------- sampling


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


# --------------------------------------------------------------------------- killing zombies


@dataclass
class KillItem:
    gpu: GpuState
    proc: GpuProc
    action: str  # kill | skip
    reason: str
    result: str = ""  # after execute_kills: terminated | killed | survived | gone | skipped: ...
    signals: list[str] = field(default_factory=list)

    def to_record(self) -> dict:
        return {"host": self.gpu.host, "index": self.gpu.index, "gpu_state": self.gpu.state, "action": self.action,
                "reason": self.reason, "result": self.result or None, "signals": self.signals,
                **self.proc.to_record()}


def plan_kills(states: Sequence[GpuState], uid: int | None = None) -> list[KillItem]:
    """What --kill-zombies would do: every dead process, with kill or skip and why.

    Kill only orphaned workers (a defunct process cannot be signalled away, a gone one has
    nothing to signal), never a process on a GPU with utilisation > 0 in the window (on any
    of its GPUs), and only the caller's own processes unless uid is 0. A process on several
    GPUs is planned once.
    """
    uid = os.geteuid() if uid is None else uid
    in_use = {p.pid: g for g in states if g.state not in ("idle", "zombie") for p in g.procs}
    planned: dict[int, GpuState] = {}
    plan = []
    for g in states:
        for p in g.procs:
            if p.status not in DEAD:
                continue
            if g.state not in ("idle", "zombie"):
                plan.append(KillItem(g, p, "skip", f"GPU is {g.state}: {g.reason}"))
            elif p.pid in in_use:
                other = in_use[p.pid]
                plan.append(KillItem(g, p, "skip", f"also on GPU {other.label}, which is {other.state}"))
            elif p.pid in planned:
                plan.append(KillItem(g, p, "skip", f"also on GPU {planned[p.pid].label}: signalled once, there"))
            elif p.status == "gone":
                plan.append(KillItem(g, p, "skip", "not in the process table: nothing to signal"))
            elif p.status == "defunct":
                why = f"defunct: signals do nothing; its parent pid {p.ppid} must reap it"
                plan.append(KillItem(g, p, "skip", why))
            elif uid != 0 and p.uid != uid:
                plan.append(KillItem(g, p, "skip", f"owned by {p.user}: only root may signal other users' processes"))
            else:
                plan.append(KillItem(g, p, "kill", p.reason))
                planned[p.pid] = g
    return plan


def _same_alive(pid: int, start: int | None) -> bool:
    """The process still runs and is the one we classified (same start time: no PID reuse)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            rest = fh.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return False
    return rest[0] not in (b"Z", b"X") and (start is None or int(rest[19]) == start)


def execute_kills(plan: Sequence[KillItem], grace: float = 10.0, log: Callable[[str], None] = print,
                  still_idle: Callable[[GpuState], bool] | None = None) -> list[KillItem]:
    """SIGTERM every 'kill' item, SIGKILL what is left after `grace` seconds; log every signal."""
    todo = []
    for it in plan:
        if it.action != "kill":
            it.result = f"skipped: {it.reason}"
        elif still_idle is not None and not still_idle(it.gpu):
            it.result = "skipped: the GPU became busy before signalling"
        elif not _same_alive(it.proc.pid, it.proc.start_ticks):
            it.result = "gone"
        else:
            todo.append(it)

    def send(it: KillItem, sig: signal.Signals) -> None:
        try:
            os.kill(it.proc.pid, sig)
        except ProcessLookupError:
            return
        except PermissionError as e:
            it.result = f"survived: {e}"
            return
        it.signals.append(sig.name)
        log(f"sent {sig.name} to pid {it.proc.pid} (GPU {it.gpu.label}, user {it.proc.user}, "
            f"{(it.proc.used_mib or 0) / 1024:.1f} GiB, {it.reason}): {it.proc.cmdline}")

    def wait(items: list[KillItem], seconds: float) -> list[KillItem]:
        deadline = time.monotonic() + seconds
        while True:
            items = [it for it in items if _same_alive(it.proc.pid, it.proc.start_ticks)]
            if not items or time.monotonic() >= deadline:
                return items
            time.sleep(0.05)

    for it in todo:
        send(it, signal.SIGTERM)
    left = wait([it for it in todo if not it.result], grace)
    for it in todo:
        if not it.result and all(it is not x for x in left):
            it.result = "terminated"
    for it in left:
        send(it, signal.SIGKILL)
    left = wait([it for it in left if not it.result], 5.0)
    for it in todo:
        if not it.result:
            it.result = "survived" if any(it is x for x in left) else "killed"
    return list(plan)


# --------------------------------------------------------------------------- other nodes


DEFAULT_SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"
DEFAULT_REMOTE = "rlvr-gpu-free"


def read_hosts(hosts: Iterable[str], hosts_file: str | None = None) -> list[str]:
    """Hosts from --host values (comma lists allowed) and a file (one per line, # comments)."""
    out: list[str] = []
    for h in hosts:
        out += [x.strip() for x in h.split(",") if x.strip()]
    if hosts_file:
        with open(hosts_file) as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    out.append(line.split()[0])
    return list(dict.fromkeys(out))


def query_host(host: str, remote_args: Sequence[str], ssh_cmd: str = DEFAULT_SSH, remote_cmd: str = DEFAULT_REMOTE,
               timeout: float = 120.0) -> list[GpuState]:
    """Run `remote_cmd --json remote_args` on host through ssh_cmd and read its GPU records.

    Raises NoGpuError when the host has no GPU (remote exit 5), GpuError on any other failure.
    """
    remote = f"{remote_cmd} --json {shlex.join(remote_args)}".strip()
    argv = shlex.split(ssh_cmd) + [host, remote]
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise GpuError(f"{host}: ssh command not found: {argv[0]!r}") from None
    except subprocess.TimeoutExpired:
        raise GpuError(f"{host}: no answer in {timeout:g} s") from None
    err = p.stderr.decode("utf-8", "replace").strip().splitlines()
    last = err[-1] if err else f"exit status {p.returncode}"
    if p.returncode == EXIT_NO_GPU:
        raise NoGpuError(f"{host}: {last}")
    if p.returncode != 0:
        raise GpuError(f"{host}: {last} (exit status {p.returncode})")
    states = []
    for n, line in enumerate(p.stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            states.append(GpuState.from_record(orjson.loads(line), host=host))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as e:
            raise GpuError(f"{host}: output line {n} is not a GPU record ({e}): {line[:120]!r}") from None
    return states


class Hosts:
    """Other nodes as one: ``window()`` runs rlvr-gpu-free --json on each over ssh (see query_host)."""

    def __init__(self, hosts: Sequence[str], warn: Callable[[str], None], samples: int = DEFAULT_SAMPLES,
                 interval: float = DEFAULT_INTERVAL, max_mem_mib: float = DEFAULT_MAX_MEM_MIB, backend: str = "auto",
                 ssh_cmd: str = DEFAULT_SSH, remote_cmd: str = DEFAULT_REMOTE):
        self.hosts, self.warn, self.ssh_cmd, self.remote_cmd = list(hosts), warn, ssh_cmd, remote_cmd
        self.args = ["--samples", str(samples), "--interval", str(interval), "--max-mem", str(max_mem_mib)]
        self.args += ["--backend", backend] if backend != "auto" else []
        self.timeout = samples * interval + 120

    def window(self) -> list[GpuState]:
        return query_hosts(self.hosts, self.args, self.warn, ssh_cmd=self.ssh_cmd, remote_cmd=self.remote_cmd,
                           timeout=self.timeout)


def query_hosts(hosts: Sequence[str], remote_args: Sequence[str], warn: Callable[[str], None],
                **kw: Any) -> list[GpuState]:
    """GPU states of several hosts, queried in parallel; a host that fails is warned about and
    left out. GpuError when every host failed."""
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as ex:
        futures = [ex.submit(query_host, h, remote_args, **kw) for h in hosts]
    out: list[GpuState] = []
    failed = []
    for h, f in zip(hosts, futures):
        try:
            out += f.result()
        except GpuError as e:
            warn(str(e))
            failed.append(h)
    if failed and len(failed) == len(hosts):
        raise GpuError(f"no host answered: {', '.join(failed)}")
    return out


# --------------------------------------------------------------------------- output


def ordering_warning(states: Sequence[GpuState]) -> str | None:
    """A warning when local indices may not match CUDA's numbering (mixed GPU models)."""
    if len({g.name for g in states if not g.host}) > 1 and os.environ.get("CUDA_DEVICE_ORDER") != "PCI_BUS_ID":
        return ("GPUs of different models: CUDA numbers them fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; "
                "these indices follow the PCI order (or use --uuid)")
    return None


def format_list(states: Sequence[GpuState], uuid: bool = False) -> str:
    """'0,3' (or 'host:0,host:3'; UUIDs with uuid=True) for CUDA_VISIBLE_DEVICES and sweeps."""
    return ",".join((f"{g.host}:{g.uuid}" if g.host else g.uuid) if uuid else g.label for g in states)


def _age(s: float | None) -> str:
    if s is None:
        return "?"
    s = int(s)
    for unit, size, sub, subsize in (("d", 86400, "h", 3600), ("h", 3600, "m", 60), ("m", 60, "s", 1)):
        if s >= size:
            return f"{s // size}{unit}{(s % size) // subsize:02d}{sub}"
    return f"{s}s"


def _gib(mib: float | None) -> str:
    return "?" if mib is None else f"{mib / 1024:.1f}"


def format_table(states: Sequence[GpuState], chosen: Sequence[GpuState] = ()) -> str:
    """A human table: one line per GPU, one indented line per process."""
    picked = {id(g) for g in chosen}
    lines = [f"{'GPU':<12} {'STATE':<7} {'USED/TOTAL GiB':>15} {'UTIL':>5}  NOTE"]
    for g in states:
        util = "?" if g.util_max is None else f"{g.util_max}%"
        mark = "*" if id(g) in picked else " "
        lines.append(f"{mark}{g.label:<11} {g.state:<7} {_gib(g.mem_used_mib):>7}/{_gib(g.mem_total_mib):<7} "
                     f"{util:>5}  {g.reason}")
        for p in g.procs:
            cmd = (p.cmdline or "?")[:80]
            lines.append(f"    pid {p.pid:<8} {p.user or '?':<10} {_gib(p.used_mib):>6} GiB {_age(p.age_s):>7} "
                         f"{p.state or '?'} {p.status:<8} {cmd}")
    if chosen:
        lines.append(f"* picked: {format_list(chosen)}")
    return "\n".join(lines) + "\n"


def format_kill(it: KillItem, done: bool) -> str:
    """One line per planned kill: 'would kill: ...', 'skip: ...', or the result after --yes."""
    verb = "skip" if it.action == "skip" else (it.result if done else "would kill")
    return (f"{verb}: pid {it.proc.pid} on GPU {it.gpu.label} (user {it.proc.user}, {_gib(it.proc.used_mib)} GiB, "
            f"age {_age(it.proc.age_s)}): {it.reason}: {it.proc.cmdline or '?'}")
