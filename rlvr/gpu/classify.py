"""Classification: free, busy, idle, zombie or error for each GPU over a sampling window
(the rule is in the rlvr.gpu package docstring and docs/gpu.md)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rlvr.gpu.common import DEFAULT_MAX_MEM_MIB
from rlvr.gpu.procs import ProcTable, _user, orphan_reason
from rlvr.gpu.readers import Reading

MEM_JITTER_MIB = 256  # memory moving more than this inside the window counts as activity
STATES = ("free", "busy", "idle", "zombie", "error")
DEAD = ("gone", "defunct", "orphan")  # process statuses that make a zombie


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
