"""rlvr-train's plan: what a run asks of its cluster and whether it fits, before anything starts.

`rlvr-train CONFIG --plan` prints it as one JSON object and starts nothing; every real run
makes the same plan at start-up, against the cluster it joined or started, and stops with
the problems (exit 2) before it creates an actor:

    {"actors": [{"role": "engine"|"trainer"|"teacher", "index", "gpus", "cpus", "est_peak_gib", ...}],
     "sync": "nccl"|"gloo"|"object_store"|null, "cluster": {...}, "fits": true|false,
     "problems": [...], "notes": [...], "model": {...}}

Everything here is arithmetic on the model's config.json (a folder holding only that file is
enough: no weights are read, nothing is downloaded for a local path), the config and the
cluster's resources:

- placement: the actors' GPU and CPU requests packed onto the cluster's nodes the way Ray
  does it (whole GPUs for whole requests, several fractional requests on one GPU), trainer
  ranks first and together (one STRICT_PACK placement group where one node holds them);
- memory: each trainer rank's peak (`trainer_memory`, the arithmetic in its docstring) and
  each engine's share (`engine_memory`: weights + KV cache inside vLLM's memory fraction);
- problems: more GPUs or CPUs than there are, a GPU shared under sync.method nccl (NCCL
  refuses two ranks on one device), a trainer that cannot fit its GPU, engines and trainers
  on one GPU that together need more than it has. Where an engine shares a GPU with a
  trainer (fractional requests), the engine's memory fraction is capped to what the
  trainer leaves (`engine_fraction`), or the plan is refused with the arithmetic.

What Ray actually assigned is checked again once the actors run (rlvr.train.placement.
shared_gpus, rlvr.train.weight_sync.choose).
"""

from __future__ import annotations

import os

from rlvr.train import plan_parallel
from rlvr.train.plan_cluster import (Actor, Cluster, Node, cluster_for, cluster_from_ray,  # noqa: F401
                                     local_gpu_memory_gib, place, requests)
from rlvr.train.plan_memory import (BYTES, CUDA_CONTEXT_GIB, ENGINE_MIN_KV_GIB, FRAGMENTATION, GIB,  # noqa: F401
                                    SHARED_GPU_HEADROOM, ModelShape, engine_fraction, engine_memory,
                                    read_model_config, trainer_memory)


# -- the plan ----------------------------------------------------------------------------------

def microbatch_tokens(cfg) -> int:
    """Padded tokens of the largest micro-batch: the token budget, else micro_batch_size x the
    longest sequence (max_model_len); an SFT micro-batch (sft.micro_batch_size sequences of at
    most max_model_len, rlvr.train.sft) where it is larger, and alone with sft.only."""
    t, r, s = cfg.train, cfg.rollout, cfg.sft
    longest = int(r.max_model_len or r.max_tokens)
    sft = int(s.micro_batch_size) * longest if s.data else 0
    if s.only:
        return sft
    if t.max_tokens_per_microbatch:     # a longer sequence goes alone
        return max(int(t.max_tokens_per_microbatch), int(r.max_model_len or 0), sft)
    return max(int(t.micro_batch_size) * longest, sft)


def make_plan(cfg, cluster: Cluster, shape: ModelShape | None) -> dict:
    """The plan (see the module docstring) of `cfg` on `cluster` for a model of `shape` (None:
    the resources only, no memory estimate)."""
    from rlvr.train.trainer_model import resolve_dtype

    r, t = cfg.rollout, cfg.train
    has_gpus = cluster.gpus > 0
    actors = requests(cfg, has_gpus)
    problems, together = place(actors, cluster.nodes)
    notes = list(cluster.notes)
    world = max(1, t.num_trainers)
    if world > 1 and not together:
        notes.append(f"no node holds all {world} trainer ranks: they are placed by Ray (PACK), not in one "
                     "STRICT_PACK group")
    c = resolve_dtype(t.dtype, "cuda" if has_gpus else "cpu").itemsize
    tmem = None if shape is None else trainer_memory(
        shape, microbatch_tokens(cfg), world=world, compute_bytes=c, gradient_checkpointing=t.gradient_checkpointing,
        logprob_chunk=t.logprob_chunk_size, reference=t.loss.beta > 0, on_gpu=has_gpus)
    if shape is not None and (world > 1 or t.tensor_parallel > 1):   # FSDP x TP, grad_sync, offload
        tmem = plan_parallel.rank_memory(cfg, shape, microbatch_tokens(cfg), c, cluster, has_gpus)
    eb = BYTES.get(r.dtype if r.dtype != "auto" else ("bfloat16" if has_gpus else "float32"), 2)
    users: dict[tuple[int, int], list[Actor]] = {}     # (node, GPU) -> the actors on it
    for a in actors:
        for g in a.gpu_ids:
            users.setdefault((a.node, g), []).append(a)
    fraction = float(r.gpu_memory_utilization)
    for (k, g), on in sorted(users.items()):
        mem = cluster.nodes[k].gpu_mem_gib
        if mem is None or shape is None:
            continue
        engines = [a for a in on if a.role == "engine"]
        trainers = [a for a in on if a.role == "trainer"]
        where = f"GPU {g} of node {cluster.nodes[k].name or k} ({mem:.0f} GiB)"
        tneed = tmem["est_peak_gib"] * len(trainers)
        if not engines:
            if tneed > mem:
                problems.append(f"trainer rank(s) {', '.join(str(a.index) for a in trainers)} need about "
                                f"{tneed:.1f} GiB on {where}: lower train.max_tokens_per_microbatch, set "
                                "train.gradient_checkpointing, or add ranks (train.num_trainers)"
                                + (f" ({tmem['why']})" if tmem.get("why") else ""))
            continue
        cap = engine_fraction(mem, tneed, len(engines), fraction) if len(on) > 1 else fraction
        need = engine_memory(shape, cap, mem, eb, r.tensor_parallel_size)
        if need["kv_cache_gib"] >= ENGINE_MIN_KV_GIB:
            fraction = min(fraction, cap)
        elif len(on) > 1:
            problems.append(
                f"{where} holds {len(engines)} engine(s) and {len(trainers)} trainer rank(s): {len(engines)} x "
                f"{r.gpu_memory_utilization:g} x {mem:.0f} GiB (rollout.gpu_memory_utilization) + {tneed:.1f} GiB "
                f"(trainer estimate) > {SHARED_GPU_HEADROOM:g} x {mem:.0f} GiB, and what is left ({cap:.3f} of the "
                f"GPU per engine, {cap * mem:.1f} GiB) cannot hold the weights ({need['weights_gib']:.1f} GiB), "
                f"activations (1 GiB) and {ENGINE_MIN_KV_GIB:g} GiB of KV cache: give engines and trainer ranks "
                "GPUs of their own (whole rollout.engine_num_gpus / train.trainer_num_gpus)")
        else:
            problems.append(f"engine {engines[0].index} on {where}: {fraction:g} of it ({fraction * mem:.1f} GiB, "
                            f"rollout.gpu_memory_utilization) cannot hold the weights ({need['weights_gib']:.1f} GiB), "
                            f"activations (1 GiB) and {ENGINE_MIN_KV_GIB:g} GiB of KV cache")
    if fraction < r.gpu_memory_utilization and not problems:
        notes.append(f"engines share GPUs with trainer ranks or each other: rollout.gpu_memory_utilization "
                     f"{r.gpu_memory_utilization:g} capped to {fraction:.3f} for every engine, so that all fit")
    # the weight sync: NCCL's group is trainer rank 0 and every engine worker, each on its own GPU
    shared = [key for key, on in users.items()
              if len([a for a in on if a.role == "engine" or (a.role == "trainer" and a.index == 0)]) > 1]
    method = cfg.sync.method
    if cfg.sft.only:
        sync = None         # no engines: no weights to send
        notes.append("sft.only: the trainer ranks alone, no rollout engines and no weight sync")
    elif method == "auto":
        sync = "nccl" if r.engine == "vllm" and has_gpus and not shared else "object_store"
        if r.engine == "vllm" and has_gpus and shared:
            notes.append("engines or trainer rank 0 share GPUs: weights go through the object store (NCCL refuses "
                         "two ranks on one device)")
    else:
        sync = method
        if method == "nccl" and not has_gpus:
            problems.append("sync.method nccl needs GPUs, and the cluster has none")
        elif method == "nccl" and shared:
            problems.append(f"sync.method nccl with {len(shared)} GPU(s) shared by trainer rank 0 and engines "
                            "(fractional GPUs): NCCL refuses two ranks on one device; use sync.method object_store "
                            "or auto")
    out_actors = []
    for a in actors:
        node = cluster.nodes[a.node] if a.node is not None else None
        d: dict = {"role": a.role, "index": a.index, "gpus": a.gpus, "cpus": a.cpus,
                   "node": node.name if node else None, "gpu_ids": a.gpu_ids, "est_peak_gib": None}
        if shape is not None and a.role == "trainer":
            d["est_peak_gib"] = tmem["est_peak_gib"] if has_gpus else None
            d["memory"] = tmem
        elif shape is not None and a.role == "engine":
            em = engine_memory(shape, fraction, node.gpu_mem_gib if node and has_gpus else None, eb,
                               r.tensor_parallel_size)
            d["est_peak_gib"] = em["est_peak_gib"]
            d["memory"] = em
        out_actors.append(d)
    plan = {"actors": out_actors, "sync": sync, "cluster": cluster.as_dict(), "fits": not problems,
            "problems": problems, "notes": notes, "engine_gpu_memory_utilization": round(fraction, 4),
            "trainers_together": together}
    if shape is not None:
        largest = shape.largest_tensor * c
        bucket = cfg.sync.bucket_mb
        plan["sync_bucket_mib"] = round((bucket * 2**20 if bucket else max(512 * 2**20, largest)) / 2**20, 1)
        plan["trainer_layouts"] = plan_parallel.layouts_summary(cfg, shape, microbatch_tokens(cfg), c, cluster)
        plan["model"] = {"name": shape.name, "parameters": shape.params, "hidden": shape.hidden,
                         "layers": shape.layers, "vocab": shape.vocab, "tied": shape.tied}
        if bucket and bucket * 2**20 < largest:
            notes.append(f"sync.bucket_mb {bucket:g} is smaller than the largest tensor ({largest / 2**20:.0f} MiB): "
                         "it travels alone in a bucket of its own size; null sizes the buckets to fit it")
    return plan


def plan_for(cfg, cluster: Cluster) -> dict:
    """make_plan with the model's shape read from model.path's config.json. A hub name whose
    config.json cannot be had (offline, not cached) is planned without the memory estimates,
    as a run plans when it cannot read it; a local path without one is an error."""
    from rlvr.errors import ConfigError

    path = cfg.model.path
    try:
        raw, _ = read_model_config(path)
    except ConfigError as e:
        if path.startswith(("s3://", ".", "/")) or os.path.exists(path):
            raise
        p = make_plan(cfg, cluster, None)
        p["notes"].append(f"the plan's memory estimates are skipped: {e}")
        return p
    return make_plan(cfg, cluster, ModelShape.from_config(raw, name=path))


def print_plan(cfg, gpus: int | None = None, gpu_mem_gib: float | None = None, cpus: float | None = None) -> dict:
    """rlvr-train --plan: the plan as one JSON line on stdout, its notes on stderr (as a run says
    them); a plan that does not fit raises a ConfigError (exit 2) listing the problems on
    stderr, after the JSON."""
    import sys

    from rlvr.errors import ConfigError
    from rlvr.messages import say
    from rlvr.records import dumps

    p = plan_for(cfg, cluster_for(cfg, gpus=gpus, gpu_mem_gib=gpu_mem_gib, cpus=cpus))
    sys.stdout.buffer.write(dumps(p))
    sys.stdout.flush()
    for note in p["notes"]:
        say(note)
    if not p["fits"]:
        raise ConfigError("the run does not fit: " + "; ".join(p["problems"]))
    return p
