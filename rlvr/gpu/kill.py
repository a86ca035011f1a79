"""Killing zombies: which dead processes may be signalled (``plan_kills``) and signalling
them, SIGTERM then SIGKILL after a grace period (``execute_kills``)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rlvr.gpu.classify import DEAD, GpuProc, GpuState


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
    of its GPUs), never PID 1 (nor 0 or below, nor this process) or a process whose owner could
    not be read, and only the caller's own processes unless uid is 0. A process on several
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
            elif p.pid <= 1 or p.pid == os.getpid():
                plan.append(KillItem(g, p, "skip", f"pid {p.pid} is never signalled"))
            elif p.uid is None:
                plan.append(KillItem(g, p, "skip", "its owner could not be read: not signalled"))
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
