"""rlvr-train's plan, the cluster and placement: the nodes a run would have (`cluster_for`,
`cluster_from_ray`, without starting anything for a plan), the actors it asks Ray for
(`requests`, trainer ranks first) and how Ray would pack them onto the nodes (`place`).
rlvr.train.plan makes the plan from it.
"""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field


# -- the cluster -------------------------------------------------------------------------------

@dataclass
class Node:
    cpus: float
    gpus: int
    gpu_mem_gib: float | None = None
    name: str = ""
    resources: dict | None = None     # custom Ray resources ({inference_node: 1}); None: unknown (not checked)


@dataclass
class Cluster:
    nodes: list[Node]
    source: str                       # planned | local | joined
    address: str | None = None
    notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    @property
    def cpus(self) -> float:
        return sum(n.cpus for n in self.nodes)

    def as_dict(self) -> dict:
        return {"source": self.source, "address": self.address, "gpus": self.gpus, "cpus": self.cpus,
                "nodes": [asdict(n) for n in self.nodes]}


def local_gpu_memory_gib() -> list[float]:
    """Total memory of each GPU this machine's driver lists (NVML or nvidia-smi), in GiB; [] without GPUs."""
    try:
        from rlvr.gpu.readers import open_reader

        reader = open_reader()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPUs to read
        return []
    try:
        return [r.mem_total_mib / 1024 for r in reader.read() if r.mem_total_mib]
    except Exception:  # noqa: BLE001
        return []
    finally:
        reader.close()


def cluster_from_ray(gpu_mem_gib: float | None = None, address: str | None = None) -> Cluster:
    """The running Ray cluster's alive nodes (the caller has connected). GPU memory: the given
    value, else what this machine's driver reports when it has GPUs, else unknown."""
    import ray

    mem = gpu_mem_gib
    notes = []
    if mem is None:
        local = local_gpu_memory_gib()
        mem = min(local) if local else None
        if mem is None and ray.cluster_resources().get("GPU", 0):
            notes.append("GPU memory unknown (no GPU driver on this machine): memory not checked; give --gpu-mem-gib")
    builtin = ("CPU", "GPU", "memory", "object_store_memory")
    nodes = [Node(cpus=float(n["Resources"].get("CPU", 0)), gpus=int(n["Resources"].get("GPU", 0)),
                  gpu_mem_gib=mem if n["Resources"].get("GPU", 0) else None,
                  name=str(n.get("NodeManagerAddress") or n["NodeID"][:12]),
                  resources={k: float(v) for k, v in n["Resources"].items()
                             if k not in builtin and not k.startswith(("node:", "accelerator_type:"))})
             for n in ray.nodes() if n.get("Alive")]
    return Cluster(nodes, "joined" if address else "local", address, notes)


def cluster_for(cfg, gpus: int | None = None, gpu_mem_gib: float | None = None, cpus: float | None = None) -> Cluster:
    """The cluster `rlvr-train --plan` plans for without starting one: --gpus N (one node of N
    GPUs of --gpu-mem-gib GiB), else the Ray the run would use, chosen as the run chooses it
    (rlvr.train.ray_cluster.choose: ray.address, RAY_ADDRESS, a cluster `ray start` left
    running here): one to join is connected to, read and left; a Ray of the run's own
    (`local`, or none running) is this machine's resources (ray.num_gpus, capped by
    CUDA_VISIBLE_DEVICES, else the GPUs the driver sees; ray.num_cpus, else its CPUs)."""
    from rlvr.train import ray_cluster
    from rlvr.train.placement import ray_gpu_args, visible_devices

    choice = None if gpus is not None else ray_cluster.choose(cfg.ray.address, cfg.ray.temp_dir, os.environ)
    if choice is not None and choice.address:
        import ray

        from rlvr.train.placement import join_in_token_mode

        from rlvr.errors import Failure

        join_in_token_mode(os.environ)
        try:
            ray.init(address=choice.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        except Exception as e:  # noqa: BLE001 - Ray raises several types for an unreachable cluster
            raise Failure(f"cannot join the Ray cluster at {choice.address} ({choice.source}) to plan for it: "
                          f"{type(e).__name__}: {e} (a run would not start either; --ray-address local plans for "
                          "a Ray of the run's own on this machine, --gpus N --gpu-mem-gib M for a machine "
                          "without joining)") from None
        try:
            cluster = cluster_from_ray(gpu_mem_gib, choice.address)
        finally:
            ray.shutdown()
        cluster.notes.insert(0, choice.line())
        return cluster
    n_cpus = cpus if cpus is not None else (cfg.ray.num_cpus or os.cpu_count() or 1)
    if gpus is not None:
        notes = [] if gpu_mem_gib or not gpus else ["GPU memory not given (--gpu-mem-gib): memory not checked"]
        if cpus is None and not cfg.ray.num_cpus:
            asked = sum(a.cpus for a in requests(cfg, gpus > 0))
            if asked > n_cpus:
                n_cpus = asked
                notes.append(f"CPUs not given (--cpus): the planned node is assumed to have the {asked:g} asked for")
        return Cluster([Node(float(n_cpus), int(gpus), gpu_mem_gib if gpus else None, "planned")], "planned",
                       notes=notes)
    local = local_gpu_memory_gib()
    visible = visible_devices(os.environ.get("CUDA_VISIBLE_DEVICES"))
    seen = len(local) if visible is None else min(len(local), len(visible))
    n_gpus, _ = ray_gpu_args(cfg.ray.num_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
    n = int(n_gpus) if n_gpus is not None else seen
    mem = gpu_mem_gib or (min(local) if local else None)
    notes = []
    if n and mem is None:
        notes.append("GPU memory unknown (logical GPUs, or no driver): memory not checked; give --gpu-mem-gib")
    if choice is not None and choice.line():      # a `ray start` cluster passed over (ray.address local)
        notes.insert(0, choice.line())
    # a Ray this run starts has no custom resources
    return Cluster([Node(float(n_cpus), n, mem if n else None, "local", {})], "local", notes=notes)


# -- placement ---------------------------------------------------------------------------------

@dataclass
class Actor:
    role: str                 # engine | trainer | teacher | judge
    index: int
    gpus: float
    cpus: float
    resources: dict = field(default_factory=dict)   # custom Ray resources
    node: int | None = None
    gpu_ids: list = field(default_factory=list)


def _fit(actor: Actor, node: Node, cpus_left: float, gpu_left: list[float], res_left: dict | None) -> list[int] | None:
    """GPU instances of a node for the actor (best fit for a fraction, free GPUs for whole ones), or None."""
    if actor.cpus > cpus_left + 1e-9:
        return None
    if res_left is not None and any(v > res_left.get(k, 0.0) + 1e-9 for k, v in actor.resources.items()):
        return None
    if actor.gpus <= 0:
        return []
    if actor.gpus < 1:
        fits = [i for i, left in enumerate(gpu_left) if left + 1e-9 >= actor.gpus]
        return [min(fits, key=lambda i: (gpu_left[i], i))] if fits else None
    free = [i for i, left in enumerate(gpu_left) if left >= 1 - 1e-9]
    k = int(math.ceil(actor.gpus - 1e-9))
    return free[:k] if len(free) >= k else None


def place(actors: list[Actor], nodes: list[Node], tensor_parallel: int = 1) -> tuple[list[str], bool]:
    """Pack the actors onto the nodes in order (sets each actor's node and gpu_ids); returns the
    problems (actors that fit nowhere) and whether the trainer ranks share one node. Where no
    node holds them all, the trainer ranks go in groups of `tensor_parallel` consecutive ranks,
    each group on one node (a TP group never spans nodes), as rlvr.train.cluster asks Ray."""
    cpus = [n.cpus for n in nodes]
    gpus = [[1.0] * n.gpus for n in nodes]
    custom = [dict(n.resources) if n.resources is not None else None for n in nodes]
    problems = []

    def put(a: Actor, only: int | None = None) -> bool:
        for k, node in enumerate(nodes):
            if only is not None and k != only:
                continue
            ids = _fit(a, node, cpus[k], gpus[k], custom[k])
            if ids is not None:
                cpus[k] -= a.cpus
                for key, v in a.resources.items():
                    if custom[k] is not None:
                        custom[k][key] = custom[k].get(key, 0.0) - v
                for i in ids:
                    gpus[k][i] -= min(1.0, a.gpus)
                a.node, a.gpu_ids = k, ids
                return True
        return False

    def on_one_node(group: list[Actor]) -> bool:
        for k in range(len(nodes)):
            snapshot = ([*cpus], [list(g) for g in gpus], [dict(c) if c is not None else None for c in custom])
            if all(put(a, only=k) for a in group):
                return True
            cpus[:], gpus[:], custom[:] = snapshot
            for a in group:
                a.node, a.gpu_ids = None, []
        return False

    trainers = [a for a in actors if a.role == "trainer"]
    together = len(trainers) > 1 and on_one_node(trainers)
    tp = max(1, int(tensor_parallel or 1))
    if not together and tp > 1:
        for g in range(0, len(trainers), tp):
            on_one_node(trainers[g:g + tp])
    left: dict[str, list[Actor]] = {}
    for a in actors:
        if a.node is None and (a.role == "trainer" and tp > 1 or not put(a)):   # a TP group that fits on no node
            left.setdefault(a.role, []).append(a)
    asked_gpus, asked_cpus = sum(a.gpus for a in actors), sum(a.cpus for a in actors)
    for role, out in left.items():
        names = ", ".join(str(a.index) for a in out)
        extra = "".join(f", {v:g} {k}" for k, v in out[0].resources.items())
        groups = f" in tensor-parallel groups of {tp} on one node" if role == "trainer" and tp > 1 else ""
        problems.append(f"{len(out)} {role}(s) ({role} {names}: {out[0].gpus:g} GPU, {out[0].cpus:g} CPU{extra} "
                        f"each{groups}) fit on no node: the run asks for {asked_gpus:g} GPU and {asked_cpus:g} CPU, the cluster has "
                        f"{sum(n.gpus for n in nodes)} GPU and {sum(n.cpus for n in nodes):g} CPU in {len(nodes)} "
                        "node(s) (Ray would wait for ever)")
    return problems, together or len(trainers) <= 1


def requests(cfg, has_gpus: bool) -> list[Actor]:
    """The actors a run creates, trainer ranks first (as rlvr-train creates them), with the
    resources each asks Ray for. sft.only (the SFT baseline) starts the trainer ranks alone."""
    r, t = cfg.rollout, cfg.train
    out = [Actor("trainer", k, float(t.trainer_num_gpus) if has_gpus else 0.0, float(t.trainer_num_cpus),
                 dict(t.trainer_resources)) for k in range(max(1, t.num_trainers))]
    if cfg.sft.only:
        return out
    out += [Actor("engine", e, float(r.engine_num_gpus) * r.tensor_parallel_size if has_gpus else 0.0,
                  float(r.engine_num_cpus), dict(r.engine_resources)) for e in range(r.num_engines)]
    te = cfg.teacher   # a distillation teacher on engines of its own (rlvr.train.distill)
    if t.distill.weight > 0 and te.model not in (None, "policy"):
        out += [Actor("teacher", e, float(te.engine_num_gpus) * te.tensor_parallel_size if has_gpus else 0.0,
                      float(te.engine_num_cpus), dict(te.engine_resources)) for e in range(te.num_engines)]
    je = getattr(cfg.verify, "judge_engine", None)   # the judge's vLLM server (rlvr.train.judge_engines)
    if je:
        from rlvr.train.config_rollout import JUDGE_ENGINE_DEFAULTS

        s = {**JUDGE_ENGINE_DEFAULTS, **je}
        out.append(Actor("judge", 0, float(s["num_gpus"]) * s["tensor_parallel_size"] if has_gpus else 0.0,
                         float(s["num_cpus"]), dict(s["resources"])))
    return out
