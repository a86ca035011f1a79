"""The run's Ray cluster: which one to join (or start), its resources, the plan made against
it, the trainer ranks' placement group, and start-up supervision (`startup`: every actor's
first calls, bounded by ray.startup_timeout_s, an actor's error as one line).

    cluster = Cluster(cfg, run_dir, tag)
    cluster.init()                       # join or start Ray; cluster.info goes to run.json
    plan = cluster.preflight(base)       # rlvr.train.plan's checks, before any actor exists
    tcfg = cluster.trainer_config()      # train as the ranks run it (grad_sync null: the plan's choice)
    nodes = cluster.startup([a.node.remote() for a in actors], "starting the engines", labels)
"""

from __future__ import annotations

import os
import re

from rlvr.errors import ConfigError, Failure
from rlvr.messages import say
from rlvr.train import ray_calls

ENV_KEEP = ("OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE", "TOKENIZERS_PARALLELISM", "CUDA_DEVICE_ORDER",
            "HF_HUB_OFFLINE", "VLLM_LOGGING_LEVEL", "PYTHONPATH")


def log(msg: str) -> None:
    say(msg)  # "rlvr-train: msg", named by rlvr.cli.run


def asks(res: dict) -> str:
    """An actor's resources as words: "1 GPU, 2 CPU, 1 node:x"."""
    parts = [f"{res.get('num_gpus', 0):g} GPU", f"{res.get('num_cpus', 0):g} CPU"]
    parts += [f"{v:g} {k}" for k, v in (res.get("resources") or {}).items()]
    return ", ".join(parts)


def free() -> str:
    """The cluster's free GPUs and CPUs, for a message."""
    import ray

    have = ray.available_resources()
    return ", ".join(f"{have.get(k, 0):g} {k}" for k in ("GPU", "CPU"))


def actor_env() -> dict:
    """The environment every actor gets from the driver's. CUDA_VISIBLE_DEVICES is not passed on:
    Ray sets it in each actor to the GPUs it assigned to that actor (copying the driver's would
    give every actor the same ones)."""
    env = {k: os.environ[k] for k in ENV_KEEP if k in os.environ}
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


class Cluster:
    """Ray for one run: `tag` keeps the names of its actors and groups unique."""

    def __init__(self, cfg, run_dir: str, tag: str):
        self.cfg, self.run_dir, self.tag = cfg, run_dir, tag
        self.choice = None                 # rlvr.train.ray_cluster.choose's
        self.info: dict | None = None      # rlvr.train.ray_cluster.describe's, for run.json
        self.plan: dict | None = None      # rlvr.train.plan's, made against the live cluster
        self.groups: list = []             # placement groups to remove at the end
        self.layout: dict = {}             # how the trainer ranks were placed (trainer_group), for run.json

    def address(self) -> str:
        """The Ray cluster to join, "" for a Ray of our own: ray.address, else RAY_ADDRESS (set
        by `ray job submit`), else a cluster `ray start` left running on this machine
        (rlvr.train.ray_cluster; `local` in either asks for a Ray of our own)."""
        from rlvr.train import ray_cluster

        if self.choice is None:
            self.choice = ray_cluster.choose(self.cfg.ray.address, self.cfg.ray.temp_dir, os.environ)
        return self.choice.address or ""

    def prepare(self) -> None:
        """Before Ray is first imported: the authentication mode of the cluster to join."""
        from rlvr.train.placement import join_in_token_mode

        if self.address():
            join_in_token_mode(os.environ)  # Ray reads the mode once, when it is first imported

    def init(self) -> None:
        from rlvr.train import ray_cluster
        from rlvr.train.placement import join_in_token_mode, ray_gpu_args

        address = self.address()
        if address:
            join_in_token_mode(os.environ)  # takes effect only before Ray is first imported
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            self.info = ray_cluster.describe(None)
            return
        if self.choice.line():
            log(self.choice.line())
        # Actor logs (vLLM's start-up chatter) reach stderr only with RLVR_DEBUG=1; errors
        # raised in actors always surface through ray.get.
        kw: dict = {"include_dashboard": False, "log_to_driver": bool(os.environ.get("RLVR_DEBUG")),
                    "logging_level": "ERROR"}
        if address:
            if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
                log("CUDA_VISIBLE_DEVICES does not limit a running Ray cluster: start its nodes with it "
                    "(ray start under CUDA_VISIBLE_DEVICES=...)")
            ray.init(address=address, **kw)
            note = ray_cluster.temp_dir_note(self.cfg.ray.temp_dir, ray_cluster.connected()[1])
            if note:
                log(note)
        else:
            if self.cfg.ray.temp_dir:  # e.g. NVMe when / is small; Ray wants an absolute path
                os.makedirs(self.cfg.ray.temp_dir, exist_ok=True)
                kw["_temp_dir"] = os.path.abspath(self.cfg.ray.temp_dir)
            gpus, note = ray_gpu_args(self.cfg.ray.num_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if note:
                log(note)
            if gpus is not None:
                kw["num_gpus"] = gpus
            ray.init(address="local", num_cpus=self.cfg.ray.num_cpus or os.cpu_count(), **kw)
        self.info = ray_cluster.describe(self.choice)

    @staticmethod
    def has_gpus() -> bool:
        import ray

        return ray.cluster_resources().get("GPU", 0) > 0

    def preflight(self, base, prompts=None, tokenizer=None) -> dict:
        """rlvr-train --plan's checks against the cluster this run joined or started, before any
        actor exists (rlvr.train.plan): too many GPUs or CPUs asked, a GPU shared under nccl,
        a trainer or shared GPU whose memory cannot hold what is planned stop the run here
        with the arithmetic (exit 2); the plan goes to run.json. A model whose config.json
        cannot be read (an unusual layout) skips the memory part. prompts (the run's prompt
        records) and tokenizer bound the trainer's sequences by the longest prompt."""
        from rlvr.runs import update_manifest
        from rlvr.train import plan as planning

        cluster = planning.cluster_from_ray(address=self.address() or None)
        try:
            raw, _ = planning.read_model_config(base.path)
            shape = planning.ModelShape.from_config(raw, name=self.cfg.model.path)
        except Exception as ex:  # noqa: BLE001 - the run itself will say what is wrong with the model
            log(f"the plan's memory estimates are skipped: {ex}")
            shape = None
        # trainer sequences are bounded by the longest prompt the run will send plus rollout.max_tokens
        longest = planning.longest_prompt(prompts, tokenizer) if prompts is not None and tokenizer is not None else None
        p = planning.make_plan(self.cfg, cluster, shape, teacher=planning.teacher_shape(self.cfg),
                               longest_prompt=longest or None)
        update_manifest(self.run_dir, plan={k: v for k, v in p.items() if k != "actors"})
        for note in p["notes"]:
            log(note)
        if not p["fits"]:
            raise ConfigError("the run does not fit its Ray cluster (rlvr-train CONFIG --plan shows the plan): "
                              + "; ".join(p["problems"]))
        self.plan = p
        return p

    def trainer_config(self):
        """train's section as the trainer ranks run it: a null train.grad_sync becomes the plan's
        choice (run.json's plan: grad_sync, grad_sync_chosen); the config as given before any
        plan is made."""
        import dataclasses

        t = self.cfg.train
        chosen = (self.plan or {}).get("grad_sync")
        return dataclasses.replace(t, grad_sync=chosen) if t.grad_sync is None and chosen else t

    def trainer_group(self, world: int, res: dict, tensor_parallel: int = 1) -> list:
        """The trainer ranks' scheduling strategies, rank 0 first: one STRICT_PACK placement group
        (all ranks on one node, so FSDP's collectives stay on its links) where the plan found a
        node that holds them, else one PACK group over several nodes (`spanning_bundles`: one
        bundle per tensor-parallel group, the first on the driver's node, which holds the run
        folder, where that node can hold one; `rank_bundles` orders the ranks); waited for
        within ray.startup_timeout_s. self.layout says which, for run.json's mesh."""
        import ray
        from ray.util.placement_group import placement_group, placement_group_table
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = {"CPU": float(res.get("num_cpus") or 0), "GPU": float(res.get("num_gpus") or 0),
                  **(res.get("resources") or {})}
        bundle = {k: v for k, v in bundle.items() if v}
        together = (self.plan or {}).get("trainers_together", True)
        tp = max(1, int(tensor_parallel or 1))
        me = ray.get_runtime_context().get_node_id()
        if together:
            bundles, selectors, strategy = [dict(bundle) for _ in range(world)], None, "STRICT_PACK"
        else:
            bundles, selectors = spanning_bundles(world, tp, bundle, me, ray.nodes())
            strategy = "PACK"
        pg = placement_group(bundles, strategy=strategy, name=f"rlvr-trainers-{self.tag}",
                             **({"bundle_label_selector": selectors} if selectors else {}))
        self.groups.append(pg)
        limit = self.cfg.ray.startup_timeout_s
        ready, _ = ray_calls.wait([pg.ready()], timeout=limit)
        if not ready:
            pinned = " with its first bundle on the driver's node" if selectors else ""
            raise Failure(f"the trainer's placement group ({world} x {asks(res)}, {strategy}{pinned}) was not placed "
                          f"within {limit:.0f}s (ray.startup_timeout_s); free: {free()}")
        order = list(range(world))
        if not together:
            order = rank_bundles(placement_group_table(pg).get("bundles_to_node_id") or {}, world, tp, me)
        self.layout = {"placement": strategy, "driver_node": me, "rank0_pinned": bool(selectors)}
        return [PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=order[r]) for r in range(world)]

    def startup(self, refs, what: str, labels: list[str] | None = None):
        """ray.get for the start-up calls, bounded by ray.startup_timeout_s: an actor that was not
        placed or not loaded in time ends the run with one line naming it (labels: one per
        ref), and an error raised in an actor (one of rlvr's, e.g. a model missing on its node,
        or any other) with one line, not a traceback."""
        import ray

        from rlvr import errors

        single = not isinstance(refs, list)
        many = [refs] if single else list(refs)
        limit = self.cfg.ray.startup_timeout_s
        try:
            ready, late = ray_calls.wait(many, num_returns=len(many), timeout=limit)
            if late:
                names = [labels[i] if labels and i < len(labels) else f"call {i}"
                         for i, ref in enumerate(many) if ref in set(late)]
                raise Failure(f"{what}: {', '.join(names)} did not start within {limit:.0f}s (ray.startup_timeout_s); "
                              f"the cluster has {free()} free (rlvr-train CONFIG --plan shows what the run "
                              "asks for; RLVR_DEBUG=1 shows the actors' logs)")
            out = ray_calls.get(many)
            return out[0] if single else out
        except errors.RlvrError as ex:  # a task's error is also an instance of its cause
            cls = next(c for c in type(ex).__mro__
                       if issubclass(c, errors.RlvrError) and c.__module__.startswith("rlvr."))
            raise cls(ex.message) from None
        except ray.exceptions.RayError as ex:
            # an actor whose creation failed: its cause is the last line of the message
            last = str(ex).strip().splitlines()[-1] if str(ex).strip() else type(ex).__name__
            m = re.match(r"rlvr\.errors\.(\w+): (.*)", last)
            cls = getattr(errors, m.group(1), None) if m else None
            if isinstance(cls, type) and issubclass(cls, errors.RlvrError):
                raise cls(m.group(2)) from None
            raise Failure(f"{what} failed: {last[:300]}") from None

    def close(self) -> None:
        """Remove the placement groups (the actors in them are killed by their owners first)."""
        if not self.groups:
            return
        import ray

        for pg in self.groups:
            try:
                ray.util.remove_placement_group(pg)
            except Exception:  # noqa: BLE001
                pass
        self.groups = []


def spanning_bundles(world: int, tp: int, bundle: dict, driver_node: str, nodes: list) -> tuple[list, list | None]:
    """A PACK group's bundles for `world` ranks over several nodes: one bundle per
    tensor-parallel group (its `tp` ranks' resources; Ray puts a bundle on one node, so a TP
    group never spans nodes). The first bundle is pinned to the driver's node (Ray's
    `ray.io/node-id` label) where that node has the resources of one: rank 0 writes the
    checkpoints' weights and completeness marker into the run folder there. None: no pin (a
    driver on a node without GPUs, as a head node of `ray job submit`)."""
    group = {k: v * tp for k, v in bundle.items()}
    bundles = [dict(group) for _ in range(world // tp)]
    have = next((n.get("Resources") or {} for n in nodes if n.get("NodeID") == driver_node), {})
    if any(v > have.get(k, 0) + 1e-9 for k, v in group.items()):
        return bundles, None
    return bundles, [{"ray.io/node-id": driver_node}] + [{} for _ in bundles[1:]]


def rank_bundles(bundle_nodes: dict, world: int, tp: int, driver_node: str) -> list[int]:
    """The bundle of each rank (rank r: the r // tp-th of the ordered bundles, `tp` ranks to a
    bundle): bundles on the driver's node first (rank 0 there where one is), then node by
    node, so that consecutive ranks (a TP group, then the data-parallel neighbours) share a
    node. bundle_nodes: Ray's placement_group_table "bundles_to_node_id"."""
    n = world // tp
    where = {int(k): v for k, v in bundle_nodes.items()}
    first: dict[str, int] = {}
    for b in range(n):
        first.setdefault(where.get(b, ""), b)
    key = {node: (node != driver_node, b) for node, b in first.items()}
    ordered = sorted(range(n), key=lambda b: (*key[where.get(b, "")], b))
    return [ordered[r // tp] for r in range(world)]
