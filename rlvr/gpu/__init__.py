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

One concern per module; the names below are importable from ``rlvr.gpu`` itself:

    common     exit codes (4 too few free, 5 no GPU), sampling defaults, GpuError & co.
    readers    the driver: Reading, NvmlReader, SmiReader, open_reader, parse_visible
    procs      the process table: ProcInfo, ProcTable, orphan_reason
    classify   the rule: GpuProc, GpuState, classify
    monitor    sampling this node and picking GPUs: Monitor, snapshot, find, free_gpus
    kill       zombies: KillItem, plan_kills, execute_kills
    hosts      other nodes over ssh: Hosts, query_host, query_hosts, read_hosts
    format     output: format_table, format_list, format_kill, ordering_warning
"""

from __future__ import annotations

from rlvr.gpu.classify import DEAD, MEM_JITTER_MIB, STATES, GpuProc, GpuState, classify
from rlvr.gpu.common import (DEFAULT_INTERVAL, DEFAULT_MAX_MEM_MIB, DEFAULT_SAMPLES, EXIT_NO_GPU, EXIT_TOO_FEW, MIB,
                             GpuError, NoGpuError, TooFewFree)
from rlvr.gpu.format import format_kill, format_list, format_table, ordering_warning
from rlvr.gpu.hosts import DEFAULT_REMOTE, DEFAULT_SSH, Hosts, query_host, query_hosts, read_hosts
from rlvr.gpu.kill import KillItem, execute_kills, plan_kills
from rlvr.gpu.monitor import Monitor, find, free_gpus, pick, snapshot, summary
from rlvr.gpu.procs import REAPERS, TORCHRUN_ENV, WORKER_SIGNS, ProcInfo, ProcTable, orphan_reason
from rlvr.gpu.readers import SMI_APP_FIELDS, SMI_GPU_FIELDS, NvmlReader, Reading, SmiReader, open_reader, parse_visible

__all__ = [
    "DEAD", "DEFAULT_INTERVAL", "DEFAULT_MAX_MEM_MIB", "DEFAULT_REMOTE", "DEFAULT_SAMPLES", "DEFAULT_SSH", "EXIT_NO_GPU",
    "EXIT_TOO_FEW", "MEM_JITTER_MIB", "MIB", "REAPERS", "SMI_APP_FIELDS", "SMI_GPU_FIELDS", "STATES", "TORCHRUN_ENV",
    "WORKER_SIGNS", "GpuError", "GpuProc", "GpuState", "Hosts", "KillItem", "Monitor", "NoGpuError", "NvmlReader",
    "ProcInfo", "ProcTable", "Reading", "SmiReader", "TooFewFree", "classify", "execute_kills", "find", "format_kill",
    "format_list", "format_table", "free_gpus", "open_reader", "ordering_warning", "orphan_reason", "parse_visible",
    "pick", "plan_kills", "query_host", "query_hosts", "read_hosts", "snapshot", "summary",
]
