"""rlvr-train's plan: what a run asks of its cluster and whether it fits, before anything starts.

`rlvr-train CONFIG --plan` prints it as one JSON object and starts nothing; every real run
makes the same plan at start-up, against the cluster it joined or started, and stops with
the problems (exit 2) before it creates an actor:

    {"actors": [{"role": "engine"|"trainer"|"teacher"|"judge", "index", "gpus", "cpus", "est_peak_gib", ...}],
     "sync": "nccl"|"gloo"|"object_store"|null, "cluster": {...}, "fits": true|false,
     "problems": [...], "notes": [...], "engine_gpu_memory_utilization", "teacher_gpu_memory_utilization"
     (with teachers), "microbatches": {...}, "grad_sync", "grad_sync_chosen", "model": {...}}

Everything here is arithmetic on the model's config.json (a folder holding only that file is
enough: no weights are read, nothing is downloaded for a local path), the config and the
cluster's resources:

- placement: the actors' GPU and CPU requests packed onto the cluster's nodes the way Ray
  does it (whole GPUs for whole requests, several fractional requests on one GPU), trainer
  ranks first and together (one STRICT_PACK placement group where one node holds them, else
  one PACK group over several nodes, each tensor-parallel group on one node);
- memory: each trainer rank's peak (`trainer_memory`, the arithmetic in its docstring) at the
  largest micro-batch (`microbatches`: sequences of at most the longest prompt plus the
  longest generation, within max_model_len; `measure_longest_prompt` reads the prompts where
  the tokenizer and the data are on this machine), and each engine's and distillation
  teacher's share (`engine_memory`: weights + KV cache inside vLLM's memory fraction);
- gradient sync: train.grad_sync, or where null the plan's choice (rlvr.train.plan_parallel.
  resolve_grad_sync: per_update only where the unsharded gradients fit), which the trainer
  ranks then run (rlvr.train.cluster.Cluster.trainer_config);
- problems: more GPUs or CPUs than there are, a GPU shared under sync.method nccl (NCCL
  refuses two ranks on one device), a trainer that cannot fit its GPU, engines, teachers and
  trainers on one GPU that together need more than it has. Where engines or teachers share a
  GPU with a trainer or each other (fractional requests), their memory fractions are scaled
  to what is left (`shared_fractions`: engine_gpu_memory_utilization and
  teacher_gpu_memory_utilization in the plan), or the plan is refused with the arithmetic.

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
                                    read_model_config, shared_fractions, trainer_memory)


# -- the plan ----------------------------------------------------------------------------------

def longest_sequence(cfg, longest_prompt: int | None = None) -> int:
    """The longest sequence a trainer sees: the longest prompt plus the longest generation
    (rollout.max_tokens, or a larger rollout.max_tokens_by_dataset), within max_model_len
    (a longer prompt is never sent); max_model_len where the longest prompt is not known."""
    r = cfg.rollout
    limit = int(r.max_model_len or r.max_tokens)
    if longest_prompt is None:
        return limit
    gen = max([int(r.max_tokens), *(int(v) for v in (r.max_tokens_by_dataset or {}).values())])
    return max(1, min(limit, int(longest_prompt) + gen))


def microbatches(cfg, longest_prompt: int | None = None) -> dict:
    """Padded tokens of the largest micro-batch of each kind a trainer rank runs, and the
    largest (`tokens`): the RL loss's (train.max_tokens_per_microbatch, a longer sequence
    alone; else train.micro_batch_size sequences of the longest sequence), the distillation
    loss's (train.micro_batch_size of the same sequences, rlvr.train.extras: not packed by
    tokens), the SFT loss's (sft.micro_batch_size records of at most max_model_len: their
    prompts are not known here). sft.only runs the SFT micro-batches alone, distill.only
    no RL ones."""
    t, r, s = cfg.train, cfg.rollout, cfg.sft
    seq = longest_sequence(cfg, longest_prompt)
    out = {"longest_prompt": longest_prompt, "longest_sequence": seq, "rl": 0, "distill": 0,
           "sft": int(s.micro_batch_size) * int(r.max_model_len or r.max_tokens) if s.data else 0}
    if not s.only:
        if not t.distill.only:
            out["rl"] = max(int(t.max_tokens_per_microbatch), seq) if t.max_tokens_per_microbatch \
                else int(t.micro_batch_size) * seq
        if t.distill.weight > 0:
            out["distill"] = int(t.micro_batch_size) * seq
    out["tokens"] = max(out["rl"], out["distill"], out["sft"])
    return out


def microbatch_tokens(cfg, longest_prompt: int | None = None) -> int:
    """Padded tokens of the largest micro-batch (`microbatches`)."""
    return microbatches(cfg, longest_prompt)["tokens"]


def make_plan(cfg, cluster: Cluster, shape: ModelShape | None, teacher: ModelShape | None = None,
              longest_prompt: int | None = None) -> dict:
    """The plan (see the module docstring) of `cfg` on `cluster` for a model of `shape` (None:
    the resources only, no memory estimate), a distillation teacher of shape `teacher` (None:
    its weights are not checked, its memory fraction still is) and prompts of at most
    `longest_prompt` tokens (None: sequences of max_model_len)."""
    from rlvr.train.trainer_model import resolve_dtype

    r, t, te = cfg.rollout, cfg.train, cfg.teacher
    has_gpus = cluster.gpus > 0
    actors = requests(cfg, has_gpus)
    problems, together = place(actors, cluster.nodes, t.tensor_parallel)
    notes = list(cluster.notes)
    world = max(1, t.num_trainers)
    if world > 1 and not together:
        notes.append(f"no node holds all {world} trainer ranks: they span nodes (one PACK placement group, rank 0 "
                     "on the driver's node where it can hold one"
                     + (f", each tensor-parallel group of {t.tensor_parallel} ranks on one node" if t.tensor_parallel > 1
                        else "") + "), not one STRICT_PACK group")
    users: dict[tuple[int, int], list[Actor]] = {}     # (node, GPU) -> the actors on it
    for a in actors:
        for g in a.gpu_ids:
            users.setdefault((a.node, g), []).append(a)
    # the weight sync: NCCL's group is trainer rank 0 and every engine worker, each on its own GPU;
    # teachers take no part
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
    c = resolve_dtype(t.dtype, "cuda" if has_gpus else "cpu").itemsize
    bucket = cfg.sync.bucket_mb * 2**20 if cfg.sync.bucket_mb else max(512 * 2**20, c * shape.largest_tensor) \
        if shape is not None else 0
    mbs = microbatches(cfg, longest_prompt)
    tmem = None if shape is None else trainer_memory(
        shape, mbs["tokens"], world=world, compute_bytes=c, gradient_checkpointing=t.gradient_checkpointing,
        logprob_chunk=t.logprob_chunk_size, reference=t.loss.beta > 0, on_gpu=has_gpus,
        sends=sync is not None and has_gpus, broadcast=sync in ("nccl", "gloo") and has_gpus,
        bucket_bytes=int(bucket) if sync == "nccl" and has_gpus else 0)
    # train.grad_sync null: the plan's choice, which the trainer ranks run (rlvr.train.cluster)
    grad_sync = plan_parallel.resolve_grad_sync(cfg, shape, mbs["tokens"], c, cluster, has_gpus)
    if shape is not None and (t.tensor_parallel > 1 or t.offload or grad_sync == "per_microbatch"):
        tmem = plan_parallel.rank_memory(cfg, shape, mbs["tokens"], c, cluster, has_gpus,   # FSDP x TP, offload
                                         grad_sync=grad_sync)
    eb = BYTES.get(r.dtype if r.dtype != "auto" else ("bfloat16" if has_gpus else "float32"), 2)
    tb = BYTES.get(te.dtype if te.dtype != "auto" else ("bfloat16" if has_gpus else "float32"), 2)
    fraction, tfraction = float(r.gpu_memory_utilization), float(te.gpu_memory_utilization)
    for (k, g), on in sorted(users.items()):
        if any(a.role == "judge" for a in on) and len(on) > 1:
            # vLLM's server takes gpu_memory_utilization of the whole GPU, whoever else is on it
            problems.append(f"the judge engine shares GPU {g} of node {cluster.nodes[k].name or k} with "
                            f"{', '.join(f'{a.role} {a.index}' for a in on if a.role != 'judge')}: give it GPUs of "
                            "its own (whole verify.judge.engine.num_gpus)")
            continue
        mem = cluster.nodes[k].gpu_mem_gib
        if mem is None or shape is None:
            continue
        engines = [a for a in on if a.role == "engine"]
        teachers = [a for a in on if a.role == "teacher"]
        trainers = [a for a in on if a.role == "trainer"]
        where = f"GPU {g} of node {cluster.nodes[k].name or k} ({mem:.0f} GiB)"
        tneed = tmem["est_peak_gib"] * len(trainers)
        if not engines and not teachers:
            if tneed > mem:
                problems.append(f"trainer rank(s) {', '.join(str(a.index) for a in trainers)} need about "
                                f"{tneed:.1f} GiB on {where}: lower train.max_tokens_per_microbatch, set "
                                "train.gradient_checkpointing, or add ranks (train.num_trainers)"
                                + (f" ({tmem['why']})" if tmem.get("why") else ""))
            continue
        wanted = [float(r.gpu_memory_utilization)] * len(engines) + [float(te.gpu_memory_utilization)] * len(teachers)
        caps = shared_fractions(mem, tneed, wanted) if len(on) > 1 else wanted
        ecap = caps[0] if engines else fraction
        tcap = caps[-1] if teachers else tfraction
        eneed = engine_memory(shape, ecap, mem, eb, r.tensor_parallel_size)
        tneed_e = engine_memory(teacher, tcap, mem, tb, te.tensor_parallel_size) if teacher is not None else None
        # a teacher of unknown dimensions still needs its activations and some KV cache
        teacher_short = tcap * mem < 1.0 + ENGINE_MIN_KV_GIB if tneed_e is None \
            else tneed_e["kv_cache_gib"] < ENGINE_MIN_KV_GIB
        short = [f"engine {a.index}" for a in engines if eneed["kv_cache_gib"] < ENGINE_MIN_KV_GIB] + \
            [f"teacher {a.index}" for a in teachers if teacher_short]
        if not short:
            fraction, tfraction = (min(fraction, ecap) if engines else fraction,
                                   min(tfraction, tcap) if teachers else tfraction)
            continue
        if len(on) == 1:
            a = on[0]
            frac, need = (fraction, eneed) if a.role == "engine" else (tfraction, tneed_e)
            key = "rollout" if a.role == "engine" else "teacher"
            weights = f"the weights ({need['weights_gib']:.1f} GiB), " if need is not None else ""
            problems.append(f"{a.role} {a.index} on {where}: {frac:g} of it ({frac * mem:.1f} GiB, "
                            f"{key}.gpu_memory_utilization) cannot hold {weights}activations (1 GiB) and "
                            f"{ENGINE_MIN_KV_GIB:g} GiB of KV cache")
            continue
        asked, left = [], []
        if engines:
            asked.append(f"{len(engines)} x {r.gpu_memory_utilization:g} x {mem:.0f} GiB (rollout.gpu_memory_utilization)")
            left.append(f"an engine {ecap:.3f} of it ({ecap * mem:.1f} GiB) for its weights "
                        f"({eneed['weights_gib']:.1f} GiB)")
        if teachers:
            asked.append(f"{len(teachers)} x {te.gpu_memory_utilization:g} x {mem:.0f} GiB "
                         "(teacher.gpu_memory_utilization)")
            left.append(f"a teacher {tcap:.3f} ({tcap * mem:.1f} GiB)" + (
                f" for its weights ({tneed_e['weights_gib']:.1f} GiB)" if tneed_e is not None else ""))
        if trainers:
            asked.append(f"{tneed:.1f} GiB (trainer estimate)")
        asked, left = " + ".join(asked), "; ".join(left)
        problems.append(
            f"{where} holds {len(engines)} engine(s), {len(teachers)} teacher(s) and {len(trainers)} trainer "
            f"rank(s): {asked} > {SHARED_GPU_HEADROOM:g} x {mem:.0f} GiB, and what is left ({left}, activations "
            f"1 GiB and {ENGINE_MIN_KV_GIB:g} GiB of KV cache each) cannot hold {', '.join(short)}: give engines, "
            "teachers and trainer ranks GPUs of their own (whole rollout.engine_num_gpus / teacher.engine_num_gpus "
            "/ train.trainer_num_gpus)")
    if fraction < r.gpu_memory_utilization and not problems:
        notes.append(f"engines share GPUs with trainer ranks, teachers or each other: rollout.gpu_memory_utilization "
                     f"{r.gpu_memory_utilization:g} capped to {fraction:.3f} for every engine, so that all fit")
    if tfraction < te.gpu_memory_utilization and not problems:
        notes.append(f"teachers share GPUs with engines, trainer ranks or each other: teacher.gpu_memory_utilization "
                     f"{te.gpu_memory_utilization:g} capped to {tfraction:.3f} for every teacher, so that all fit")
    out_actors = []
    for a in actors:
        node = cluster.nodes[a.node] if a.node is not None else None
        d: dict = {"role": a.role, "index": a.index, "gpus": a.gpus, "cpus": a.cpus,
                   "node": node.name if node else None, "gpu_ids": a.gpu_ids, "est_peak_gib": None}
        node_mem = node.gpu_mem_gib if node and has_gpus else None
        if shape is not None and a.role == "trainer":
            d["est_peak_gib"] = tmem["est_peak_gib"] if has_gpus else None
            d["memory"] = tmem
        elif shape is not None and a.role == "engine":
            em = engine_memory(shape, fraction, node_mem, eb, r.tensor_parallel_size)
            d["est_peak_gib"] = em["est_peak_gib"]
            d["memory"] = em
        elif a.role == "teacher":
            if teacher is not None:
                d["memory"] = engine_memory(teacher, tfraction, node_mem, tb, te.tensor_parallel_size)
            d["est_peak_gib"] = round(tfraction * node_mem, 2) if node_mem else None
        out_actors.append(d)
    plan = {"actors": out_actors, "sync": sync, "cluster": cluster.as_dict(), "fits": not problems,
            "problems": problems, "notes": notes, "engine_gpu_memory_utilization": round(fraction, 4),
            "trainers_together": together, "microbatches": mbs, "grad_sync": grad_sync,
            "grad_sync_chosen": t.grad_sync is None}
    if any(a.role == "teacher" for a in actors):
        plan["teacher_gpu_memory_utilization"] = round(tfraction, 4)
    if shape is not None:
        largest = shape.largest_tensor * c
        plan["sync_bucket_mib"] = round(bucket / 2**20, 1)
        plan["trainer_layouts"] = plan_parallel.layouts_summary(cfg, shape, mbs["tokens"], c, cluster)
        plan["model"] = {"name": shape.name, "parameters": shape.params, "hidden": shape.hidden,
                         "layers": shape.layers, "vocab": shape.vocab, "tied": shape.tied}
        if cfg.sync.bucket_mb and bucket < largest:
            notes.append(f"sync.bucket_mb {cfg.sync.bucket_mb:g} is smaller than the largest tensor "
                         f"({largest / 2**20:.0f} MiB): it travels alone in a bucket of its own size; null sizes the "
                         "buckets to fit it")
    return plan


def longest_prompt(records, tokenizer) -> int:
    """Tokens of the longest prompt among `records`, tokenised as the run tokenises them
    (rlvr.train.loop.prompt_token_ids); a record that cannot be tokenised is left out, as
    the run leaves it out."""
    from rlvr.rollout import Prompter

    prompter = Prompter(tokenizer, "auto", 0)
    longest = 0
    for rec in records:
        try:
            longest = max(longest, len(prompter.ids(rec)))
        except Exception:  # noqa: BLE001 - the run reports such a record itself
            continue
    return longest


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def _local_tokenizer(path: str, trust_remote_code: bool):
    """The model's tokenizer where its files are on this machine (rlvr's tiny one, a local
    folder, the hub cache), else None; nothing is downloaded."""
    if path == "tiny":
        from rlvr.tiny import build_tokenizer

        return build_tokenizer()
    if os.path.isdir(path):
        if not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
            return None         # transformers would build an empty tokenizer from config.json alone
    elif path.startswith(("s3://", ".", "/")):
        return None
    else:
        from huggingface_hub import try_to_load_from_cache

        if not any(isinstance(try_to_load_from_cache(path, f), str) for f in TOKENIZER_FILES):
            return None
    from rlvr.models import lean_transformers

    lean_transformers()
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(path, local_files_only=True, trust_remote_code=trust_remote_code)


def measure_longest_prompt(cfg) -> tuple[int | None, str | None]:
    """(tokens of the run's longest prompt, None), or (None, why not): the prompts as the run
    reads them (rlvr.train.stream.PromptStream) through the model's tokenizer, only where the
    tokenizer and the data are on this machine (the hub is not asked: HF_HUB_OFFLINE while
    the prompts are read)."""
    if cfg.sft.only:
        return None, "sft.only: no prompts"
    path = cfg.model.path
    try:
        tokenizer = _local_tokenizer(path, cfg.model.trust_remote_code)
    except Exception as e:  # noqa: BLE001 - an unusable tokenizer: the run itself says what is wrong
        return None, f"the tokenizer of {path} cannot be loaded ({type(e).__name__})"
    if tokenizer is None:
        return None, f"no tokenizer files for {path} on this machine"
    from rlvr.train.stream import PromptStream

    saved = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        stream = PromptStream(cfg.data, cfg.rollout)
    except Exception as e:  # noqa: BLE001 - the run itself says what is wrong with the data
        return None, f"the prompts are not on this machine ({type(e).__name__})"
    finally:
        if saved is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = saved
    return longest_prompt((rec for recs in stream.by_name.values() for rec in recs), tokenizer), None


def teacher_shape(cfg) -> ModelShape | None:
    """The shape of a distillation teacher of its own (train.distill, teacher.model a model),
    from its config.json; None where there is none or its config.json cannot be read."""
    from rlvr.errors import ConfigError

    te = cfg.teacher
    if not cfg.train.distill.weight > 0 or te.model in (None, "policy"):
        return None
    try:
        return ModelShape.from_config(read_model_config(te.model)[0], name=te.model)
    except ConfigError:
        return None


def plan_for(cfg, cluster: Cluster, longest_prompt: int | None = None, measure: bool = True) -> dict:
    """make_plan with the model's (and a distillation teacher's) shape read from its
    config.json, and the longest prompt measured (`measure_longest_prompt`) unless given. A
    hub name whose config.json cannot be had (offline, not cached) is planned without the
    memory estimates, as a run plans when it cannot read it; a local path without one is an
    error. A teacher's config.json that cannot be read leaves its weights unchecked (its
    memory fraction still is)."""
    from rlvr.errors import ConfigError

    why = None
    if longest_prompt is None and measure:
        longest_prompt, why = measure_longest_prompt(cfg)
    te = cfg.teacher
    teacher = teacher_shape(cfg)
    path = cfg.model.path
    try:
        raw, _ = read_model_config(path)
    except ConfigError as e:
        if path.startswith(("s3://", ".", "/")) or os.path.exists(path):
            raise
        p = make_plan(cfg, cluster, None, teacher, longest_prompt)
        p["notes"].append(f"the plan's memory estimates are skipped: {e}")
        return p
    p = make_plan(cfg, cluster, ModelShape.from_config(raw, name=path), teacher, longest_prompt)
    if why is not None and not cfg.sft.only:
        p["notes"].append(f"the longest prompt is not measured ({why}): trainer sequences are planned at "
                          f"rollout.max_model_len ({p['microbatches']['longest_sequence']} tokens)")
    if any(a["role"] == "teacher" for a in p["actors"]) and teacher is None:
        p["notes"].append(f"teacher.model {te.model}: its config.json cannot be read here; its weights are not "
                          "checked against its memory fraction")
    return p


def print_plan(cfg, gpus: int | None = None, gpu_mem_gib: float | None = None, cpus: float | None = None,
               longest_prompt: int | None = None) -> dict:
    """rlvr-train --plan: the plan as one JSON line on stdout, its notes on stderr (as a run says
    them); a plan that does not fit raises a ConfigError (exit 2) listing the problems on
    stderr, after the JSON."""
    import sys

    from rlvr.errors import ConfigError
    from rlvr.messages import say
    from rlvr.records import dumps

    p = plan_for(cfg, cluster_for(cfg, gpus=gpus, gpu_mem_gib=gpu_mem_gib, cpus=cpus), longest_prompt)
    sys.stdout.buffer.write(dumps(p))
    sys.stdout.flush()
    for note in p["notes"]:
        say(note)
    if not p["fits"]:
        raise ConfigError("the run does not fit: " + "; ".join(p["problems"]))
    return p
