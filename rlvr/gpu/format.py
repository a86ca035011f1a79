"""Output for people and scripts: the GPU table, the CUDA_VISIBLE_DEVICES list, kill lines."""

from __future__ import annotations

import os
from collections.abc import Sequence

from rlvr.gpu.classify import GpuState
from rlvr.gpu.kill import KillItem


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
