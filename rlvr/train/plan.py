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

import json
import math
import os
from dataclasses import asdict, dataclass, field

GIB = 2**30
CUDA_CONTEXT_GIB = 0.5        # the CUDA context and cuBLAS workspaces of a process, outside PyTorch's allocator
FRAGMENTATION = 0.10          # PyTorch's caching allocator reserves about this much over what is allocated
ENGINE_MIN_KV_GIB = 1.0       # the least KV cache worth starting an engine with
SHARED_GPU_HEADROOM = 0.95    # at most this fraction of a shared GPU is planned for
BYTES = {"bfloat16": 2, "bf16": 2, "float16": 2, "fp16": 2, "float32": 4, "fp32": 4}


# -- the model ---------------------------------------------------------------------------------

@dataclass(frozen=True)
class ModelShape:
    """The dimensions of a decoder-only transformer, from its config.json."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    max_position: int = 0
    name: str = ""

    @classmethod
    def from_config(cls, cfg: dict, name: str = "") -> ModelShape:
        cfg = dict(cfg.get("text_config") or cfg) if "text_config" in cfg else cfg
        heads = int(cfg["num_attention_heads"])
        hidden = int(cfg["hidden_size"])
        return cls(hidden=hidden, layers=int(cfg["num_hidden_layers"]), heads=heads,
                   kv_heads=int(cfg.get("num_key_value_heads") or heads),
                   head_dim=int(cfg.get("head_dim") or hidden // heads),
                   intermediate=int(cfg["intermediate_size"]), vocab=int(cfg["vocab_size"]),
                   tied=bool(cfg.get("tie_word_embeddings", False)),
                   max_position=int(cfg.get("max_position_embeddings") or 0), name=name)

    @property
    def layer_params(self) -> int:
        """Parameters of one decoder layer (Llama/Qwen layout: q, k, v, o, gated MLP, two norms, q/k norms)."""
        q = self.hidden * self.heads * self.head_dim
        kv = 2 * self.hidden * self.kv_heads * self.head_dim
        o = self.heads * self.head_dim * self.hidden
        mlp = 3 * self.hidden * self.intermediate
        return q + kv + o + mlp + 2 * self.hidden + 2 * self.head_dim

    @property
    def params(self) -> int:
        emb = self.vocab * self.hidden
        return emb * (1 if self.tied else 2) + self.layers * self.layer_params + self.hidden

    @property
    def largest_tensor(self) -> int:
        """Elements of the largest single tensor (the embedding, for every model of this kind)."""
        return max(self.vocab * self.hidden, self.intermediate * self.hidden,
                   self.hidden * self.heads * self.head_dim)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


def read_model_config(path: str) -> tuple[dict, str]:
    """The model's config.json as a dict, and where it came from. Reads only that file: a
    folder holding just config.json is enough. "tiny" is rlvr's tiny model (its dimensions);
    an s3:// folder has its config.json fetched alone; a hub name is read from the local
    hub cache, else its config.json alone is fetched."""
    from rlvr.errors import ConfigError

    if path == "tiny":
        return {"hidden_size": 128, "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
                "head_dim": 64, "intermediate_size": 256, "vocab_size": 384, "tie_word_embeddings": True,
                "max_position_embeddings": 2048}, "rlvr.tiny"
    if path.startswith("s3://"):
        from rlvr.s3 import download_cached

        uri = path.rstrip("/") + "/config.json"
        with open(download_cached(uri)) as fh:      # that object alone, through the download cache
            return json.load(fh), uri
    local = os.path.join(path, "config.json") if os.path.isdir(path) else path
    if os.path.isfile(local):
        try:
            with open(local) as fh:
                return json.load(fh), local
        except (OSError, json.JSONDecodeError) as e:
            raise ConfigError(f"{local}: not a readable model config ({e})") from None
    if os.path.exists(path) or path.startswith((".", "/")):
        raise ConfigError(f"model.path {path}: no config.json there")
    from rlvr.data.sources import _hub_reachable, _quiet_hub

    try:
        from huggingface_hub import hf_hub_download, try_to_load_from_cache

        cached = try_to_load_from_cache(path, "config.json")
        if not isinstance(cached, str):
            offline = os.environ.get("HF_HUB_OFFLINE", "0").lower() not in ("0", "", "false", "no", "off")
            why = "HF_HUB_OFFLINE is set" if offline else _hub_reachable()
            if why is not None:     # one quick check, not the hub client's retries
                raise OSError(f"not in the hub cache, and the hub is unreachable: {why}")
            with _quiet_hub():
                cached = hf_hub_download(path, "config.json")
        with open(cached) as fh:
            return json.load(fh), cached
    except Exception as e:  # noqa: BLE001 - offline, unknown repository, ...
        raise ConfigError(f"model.path {path}: cannot read its config.json ({type(e).__name__}: {e}); give a "
                          "local folder holding it") from None


# -- memory ------------------------------------------------------------------------------------

def trainer_memory(shape: ModelShape, tokens: int, *, world: int = 1, compute_bytes: int = 2,
                   gradient_checkpointing: bool = True, logprob_chunk: int = 1024, reference: bool = False,
                   on_gpu: bool = True) -> dict:
    """Estimated peak GPU memory of one trainer rank, in GiB, with its parts.

    P parameters, T tokens in one micro-batch (padded: train.max_tokens_per_microbatch, or
    micro_batch_size x max_model_len), H hidden, Hkv = kv_heads x head_dim, I intermediate,
    V vocabulary, L layers, W ranks, c bytes of the compute dtype (2 for bf16):

    - states: fp32 master weights 4P, fp32 gradients 4P, AdamW's two moments 8P, each divided
      by W (FSDP shards them); the compute copy: cP on one rank (rlvr.train.trainer.
      MasterWeights), two layers' unsharded copies on W > 1 (FSDP gathers one layer ahead);
      with W > 1 also the unsharded fp32 gradients FSDP accumulates over micro-batches before
      its one reduce-scatter, 4P; the reference policy (beta > 0): cP / W.
    - activations: with gradient checkpointing, every layer's input, L x T x H x c, plus one
      layer recomputed in the backward pass with its gradients, T x (c (16H + 6Hkv + 4I) +
      4 (6H + 2Hkv) + c (4H + 2I)) bytes (projections, attention, the gated MLP, fp32 RMSNorm
      intermediates); without it, L such layers.
    - loss path: the fused selective log-softmax keeps two chunk x V float32 buffers
      (logits, then their gradient), plus the output layer's gradient twice (the chunk's and
      the one accumulated), 2 x V x H x c.
    - optimizer step: foreach AdamW makes one fp32 temporary of every moment it updates, 4P /
      W; it is not live at the same time as the activations, so the larger of the two counts.
    - the allocator's fragmentation (+10%) and the CUDA context (0.5 GiB).

    Qwen3-1.7B (P = 1.72e9) at 32,768 tokens, bf16, checkpointing, one rank: about 46 GiB
    (bench/gpu_check.py measures the real peak on a GPU)."""
    P, H, L, V, I = shape.params, shape.hidden, shape.layers, shape.vocab, shape.intermediate
    Hkv = shape.kv_heads * shape.head_dim
    c, W, T = compute_bytes, max(1, world), max(1, int(tokens))
    parts: dict[str, float] = {}
    parts["master_weights"] = 4 * P / W                      # fp32 parameters (the model itself in fp32)
    parts["gradients"] = 4 * P / W + (4 * P if W > 1 else 0.0)
    parts["optimizer"] = 8 * P / W
    if W == 1:
        parts["compute_copy"] = c * P if c < 4 else 0.0
    else:
        parts["compute_copy"] = 2 * c * shape.layer_params
    parts["reference"] = c * P / W if reference else 0.0
    layer = T * (c * (16 * H + 6 * Hkv + 4 * I) + 4 * (6 * H + 2 * Hkv) + c * (4 * H + 2 * I))
    checkpoints = L * T * H * c
    parts["activations"] = checkpoints + layer if gradient_checkpointing else L * layer
    chunk = min(T, logprob_chunk or T)
    parts["loss_path"] = 2 * chunk * V * 4 + 2 * V * H * c
    parts["optimizer_step"] = 4 * P / W
    transient = max(parts["activations"] + parts["loss_path"], parts["optimizer_step"])
    persistent = sum(parts[k] for k in ("master_weights", "gradients", "optimizer", "compute_copy", "reference"))
    allocated = persistent + transient
    total = allocated * (1 + FRAGMENTATION) + (CUDA_CONTEXT_GIB * GIB if on_gpu else 0)
    out = {k: round(v / GIB, 2) for k, v in parts.items()}
    out.update({"tokens_per_microbatch": T, "allocated_gib": round(allocated / GIB, 2),
                "est_peak_gib": round(total / GIB, 2)})
    return out


def engine_memory(shape: ModelShape, fraction: float, gpu_mem_gib: float | None, dtype_bytes: int = 2,
                  tensor_parallel: int = 1) -> dict:
    """One engine's GPU memory: vLLM takes `fraction` of the GPU (gpu_memory_utilization) and
    fits the weights (P x dtype bytes / tensor_parallel), its activations and CUDA graphs
    (about 1 GiB, profiled at start) and the KV cache in it; the rest is KV cache, of
    2 x L x Hkv x bytes per token."""
    weights = shape.params * dtype_bytes / max(1, tensor_parallel) / GIB
    out = {"weights_gib": round(weights, 2), "fraction": round(fraction, 4)}
    if gpu_mem_gib is None:
        out["est_peak_gib"] = None
        return out
    budget = fraction * gpu_mem_gib
    kv = budget - weights - 1.0
    out.update({"est_peak_gib": round(budget, 2), "kv_cache_gib": round(kv, 2),
                "kv_tokens": int(max(0.0, kv) * GIB // max(1, shape.kv_bytes_per_token(dtype_bytes) // tensor_parallel))})
    return out


def engine_fraction(gpu_mem_gib: float, trainer_gib: float, engines: int, wanted: float) -> float:
    """The memory fraction each of `engines` engines may take on a GPU of gpu_mem_gib GiB where
    trainer ranks need trainer_gib GiB: what they leave, shared equally, under `wanted`."""
    free = gpu_mem_gib * SHARED_GPU_HEADROOM - trainer_gib
    return max(0.0, min(wanted, free / (gpu_mem_gib * max(1, engines))))


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
    role: str                 # engine | trainer | teacher
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


def place(actors: list[Actor], nodes: list[Node]) -> tuple[list[str], bool]:
    """Pack the actors onto the nodes in order (sets each actor's node and gpu_ids); returns the
    problems (actors that fit nowhere) and whether the trainer ranks share one node."""
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

    trainers = [a for a in actors if a.role == "trainer"]
    together = False
    if len(trainers) > 1:
        for k in range(len(nodes)):
            snapshot = ([*cpus], [list(g) for g in gpus], [dict(c) if c is not None else None for c in custom])
            if all(put(a, only=k) for a in trainers):
                together = True
                break
            cpus[:], gpus[:], custom[:] = snapshot
            for a in trainers:
                a.node, a.gpu_ids = None, []
    left: dict[str, list[Actor]] = {}
    for a in actors:
        if a.node is None and not put(a):
            left.setdefault(a.role, []).append(a)
    asked_gpus, asked_cpus = sum(a.gpus for a in actors), sum(a.cpus for a in actors)
    for role, out in left.items():
        names = ", ".join(str(a.index) for a in out)
        extra = "".join(f", {v:g} {k}" for k, v in out[0].resources.items())
        problems.append(f"{len(out)} {role}(s) ({role} {names}: {out[0].gpus:g} GPU, {out[0].cpus:g} CPU{extra} each) fit on "
                        f"no node: the run asks for {asked_gpus:g} GPU and {asked_cpus:g} CPU, the cluster has "
                        f"{sum(n.gpus for n in nodes)} GPU and {sum(n.cpus for n in nodes):g} CPU in {len(nodes)} "
                        "node(s) (Ray would wait for ever)")
    return problems, together or len(trainers) <= 1


# -- the plan ----------------------------------------------------------------------------------

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
    te = cfg.teacher   # a distillation teacher on engines of its own (rlvr.train.distill; its memory is not estimated)
    if t.distill.weight > 0 and te.model not in (None, "policy"):
        out += [Actor("teacher", e, float(te.engine_num_gpus) * te.tensor_parallel_size if has_gpus else 0.0,
                      float(te.engine_num_cpus), dict(te.engine_resources)) for e in range(te.num_engines)]
    return out


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
    from rlvr.train.trainer import resolve_dtype

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
                                "train.gradient_checkpointing, or add ranks (train.num_trainers)")
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
