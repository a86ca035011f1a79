"""rlvr-train's plan for parallel trainers: one trainer rank's memory with tensor parallelism
(train.tensor_parallel), the gradient-sync choice (train.grad_sync) and CPU offload
(train.offload), the layouts of a model that fit a cluster of identical GPUs, and the refusal
of one that does not, with its arithmetic. Arithmetic only (no weights read); the single-rank
and FSDP-only figures are rlvr.train.plan_memory.trainer_memory's, which this extends.

W ranks in a (W / t) x t mesh (rlvr.train.parallel), P parameters, c bytes of the compute
dtype, r bytes of the gradient reduce dtype:

- master weights 4P / W, sharded gradients 4P / W, AdamW's moments 8P / W (FSDP shards what
  TP has split: every rank holds 1/W of each; the norms, replicated over TP, are negligible);
- per_update gradient sync: the unsharded gradients FSDP accumulates over an update's
  micro-batches, of this rank's TP slice, rP / t (none when W = t: one data-parallel rank); per_microbatch: none (a reduce-scatter after
  each micro-batch, the extra traffic: one reduce-scatter per micro-batch instead of per update);
- the compute copy: two layers gathered, 2c x layer / t; the reference: cP / W;
- activations: the layer inputs kept by checkpointing, L x T x H x c (the hidden state is
  whole on every TP rank: no sequence parallelism), and one recomputed layer whose head- and
  MLP-sized terms divide by t;
- the loss path: chunk x V / t fp32 logits twice, the output layer's gradient 2 x V / t x H x c;
- offload params_and_optimizer: master weights, sharded gradients, moments and the optimizer
  step's temporaries move to host memory (reported as host_gib); offload optimizer: the
  moments and the step's temporaries move (rlvr.train.parallel.CPUAdamW), the host holding a
  copy of the weights, a gradient buffer and the moments, 16P / W (host_gib).
"""

from __future__ import annotations

from rlvr.train.plan_memory import CUDA_CONTEXT_GIB, FRAGMENTATION, GIB, ModelShape

GRAD_SYNC_HEADROOM = 0.90     # per_update is chosen only where the estimate stays under this share of the GPU


def trainer_memory(shape: ModelShape, tokens: int, *, world: int = 1, tensor_parallel: int = 1,
                   grad_sync: str = "per_update", offload: str | None = None, compute_bytes: int = 2,
                   reduce_bytes: int = 4, gradient_checkpointing: bool = True, logprob_chunk: int = 1024,
                   reference: bool = False, on_gpu: bool = True) -> dict:
    """One trainer rank's estimated peak GPU memory in GiB, by part (see the module docstring)."""
    P, H, L, V, I = shape.params, shape.hidden, shape.layers, shape.vocab, shape.intermediate
    Hkv = shape.kv_heads * shape.head_dim
    Hq = shape.heads * shape.head_dim
    c, W, t, T = compute_bytes, max(1, world), max(1, tensor_parallel), max(1, int(tokens))
    off = offload == "params_and_optimizer"
    host = off or offload == "optimizer"           # AdamW's moments and step on the CPU
    p: dict[str, float] = {}
    p["master_weights"] = 0.0 if off else 4 * P / W
    p["gradients"] = 0.0 if off else 4 * P / W
    # with one data-parallel rank (W = t) there is nothing to reduce-scatter: the gradients are the shards
    p["unsharded_gradients"] = reduce_bytes * P / t if (W // t > 1 and grad_sync == "per_update") else 0.0
    p["optimizer"] = 0.0 if host else 8 * P / W
    p["compute_copy"] = 2 * c * shape.layer_params / t if W > 1 else (c * P if c < 4 else 0.0)
    p["reference"] = c * P / W if reference else 0.0
    # one layer recomputed with its gradients: hidden-sized terms whole, head/MLP-sized ones split
    layer = T * (c * (10 * H + 6 * Hq / t + 6 * Hkv / t + 4 * I / t) + 4 * (6 * H + 2 * Hkv / t)
                 + c * (4 * H + 2 * I / t))
    checkpoints = L * T * H * c
    p["activations"] = checkpoints + layer if gradient_checkpointing else L * layer
    chunk = min(T, logprob_chunk or T)
    p["loss_path"] = 2 * chunk * V / t * 4 + 2 * V / t * H * c
    p["optimizer_step"] = 0.0 if host else 4 * P / W
    transient = max(p["activations"] + p["loss_path"], p["optimizer_step"])
    persistent = sum(p[k] for k in ("master_weights", "gradients", "unsharded_gradients", "optimizer",
                                    "compute_copy", "reference"))
    allocated = persistent + transient
    total = allocated * (1 + FRAGMENTATION) + (CUDA_CONTEXT_GIB * GIB if on_gpu else 0)
    out = {k: round(v / GIB, 2) for k, v in p.items()}
    out.update({"tokens_per_microbatch": T, "tensor_parallel": t, "data_parallel": W // t, "grad_sync": grad_sync,
                "offload": offload, "allocated_gib": round(allocated / GIB, 2), "est_peak_gib": round(total / GIB, 2),
                "host_gib": round(16 * P / W / GIB, 2) if host else 0.0})
    return out


def choose_grad_sync(shape: ModelShape, tokens: int, gpu_mem_gib: float | None, **kw) -> str:
    """train.grad_sync left null: per_update (one reduce-scatter per update) where the rank's
    estimate with the unsharded gradients stays under GRAD_SYNC_HEADROOM of the GPU (or no GPU
    size is known and there is one rank), else per_microbatch."""
    if kw.get("world", 1) // max(1, kw.get("tensor_parallel", 1)) <= 1:
        return "per_update"     # one data-parallel rank: no reduce-scatter, nothing to choose
    if gpu_mem_gib is None:
        return "per_microbatch"
    m = trainer_memory(shape, tokens, grad_sync="per_update", **kw)
    return "per_update" if m["est_peak_gib"] <= GRAD_SYNC_HEADROOM * gpu_mem_gib else "per_microbatch"


def plan_rank(shape: ModelShape, tokens: int, gpu_mem_gib: float | None, *, grad_sync: str | None = None,
              **kw) -> dict:
    """trainer_memory with train.grad_sync resolved (null: choose_grad_sync), plus `fits`
    (None without a GPU size) and, where it does not fit, `why`: the arithmetic."""
    gs = grad_sync or choose_grad_sync(shape, tokens, gpu_mem_gib, **kw)
    m = trainer_memory(shape, tokens, grad_sync=gs, **kw)
    m["grad_sync_chosen"] = grad_sync is None
    if gpu_mem_gib is None:
        m["fits"] = None
        return m
    m["fits"] = m["est_peak_gib"] <= gpu_mem_gib
    if not m["fits"]:
        parts = ", ".join(f"{k} {m[k]:g}" for k in ("master_weights", "gradients", "unsharded_gradients", "optimizer",
                                                    "compute_copy", "reference", "activations", "loss_path",
                                                    "optimizer_step") if m[k])
        m["why"] = (f"a trainer rank of {m['data_parallel']} x {m['tensor_parallel']} (FSDP x TP), grad_sync {gs}"
                    f"{', offload ' + m['offload'] if m['offload'] else ''}: {parts} GiB (the larger of activations + "
                    f"loss_path and optimizer_step counts), allocated {m['allocated_gib']:g} GiB x "
                    f"{1 + FRAGMENTATION:g} + {CUDA_CONTEXT_GIB:g} GiB context = {m['est_peak_gib']:g} GiB "
                    f"> {gpu_mem_gib:g} GiB")
    return m


def layouts(shape: ModelShape, tokens: int, gpus: int, gpu_mem_gib: float, gpus_per_node: int = 8, **kw) -> list[dict]:
    """Every trainer layout of `gpus` ranks (TP degrees dividing the model's heads, KV heads,
    MLP and vocabulary, at most one node's GPUs), each with its plan_rank figures."""
    out = []
    t = 1
    while t <= min(gpus, gpus_per_node):
        if gpus % t == 0 and all(x % t == 0 for x in (shape.heads, shape.kv_heads, shape.intermediate, shape.vocab)):
            out.append(plan_rank(shape, tokens, gpu_mem_gib, world=gpus, tensor_parallel=t, **kw))
        t *= 2
    return out


def nearest_fit(shape: ModelShape, tokens: int, gpus: int, gpu_mem_gib: float, gpus_per_node: int = 8,
                **kw) -> dict | None:
    """The first layout that fits with the fewest extra GPUs: `gpus`, then whole nodes more
    (up to four times as many); None if none does."""
    n = gpus
    while n <= 4 * max(gpus, gpus_per_node):
        fit = [m for m in layouts(shape, tokens, n, gpu_mem_gib, gpus_per_node, **kw) if m["fits"]]
        if fit:
            return min(fit, key=lambda m: (m["tensor_parallel"], m["est_peak_gib"]))
        n = (n // gpus_per_node + 1) * gpus_per_node
    return None


# -- what rlvr.train.plan calls ----------------------------------------------------------------

def _gpu_mem(cluster) -> float | None:
    sizes = [n.gpu_mem_gib for n in cluster.nodes if n.gpu_mem_gib]
    return min(sizes) if sizes else None


def _rank_kw(cfg, compute_bytes: int, on_gpu: bool) -> dict:
    t = cfg.train
    return dict(world=max(1, t.num_trainers), tensor_parallel=max(1, t.tensor_parallel), offload=t.offload,
                compute_bytes=compute_bytes, reduce_bytes=4 if t.grad_reduce_dtype == "float32" else 2,
                gradient_checkpointing=t.gradient_checkpointing, logprob_chunk=t.logprob_chunk_size,
                reference=t.loss.beta > 0, on_gpu=on_gpu)


def rank_memory(cfg, shape: ModelShape, tokens: int, compute_bytes: int, cluster, on_gpu: bool,
                grad_sync: str | None = None) -> dict:
    """One trainer rank's plan_rank figures for `cfg` (train.num_trainers, tensor_parallel,
    grad_sync, offload, grad_reduce_dtype) on `cluster`'s GPUs (the smallest); `grad_sync`
    (resolve_grad_sync's) in place of a null train.grad_sync."""
    return plan_rank(shape, tokens, _gpu_mem(cluster) if on_gpu else None, grad_sync=cfg.train.grad_sync or grad_sync,
                     **_rank_kw(cfg, compute_bytes, on_gpu))


def resolve_grad_sync(cfg, shape: ModelShape | None, tokens: int, compute_bytes: int, cluster, on_gpu: bool) -> str:
    """The gradient sync the trainer ranks run: train.grad_sync where set, else the plan's
    choice (choose_grad_sync on `cluster`'s smallest GPU): per_update with one data-parallel
    rank, or where the unsharded gradients are known to fit; per_microbatch where they are
    not (no GPU size, or a model whose config.json could not be read: `shape` None).
    rlvr.train.cluster.Cluster.trainer_config hands it to the ranks."""
    t = cfg.train
    if t.grad_sync:
        return t.grad_sync
    if max(1, t.num_trainers) // max(1, t.tensor_parallel) <= 1:
        return "per_update"
    if shape is None:
        return "per_microbatch"
    return choose_grad_sync(shape, tokens, _gpu_mem(cluster) if on_gpu else None,
                            **_rank_kw(cfg, compute_bytes, on_gpu))


def layouts_summary(cfg, shape: ModelShape, tokens: int, compute_bytes: int, cluster) -> list[dict]:
    """The trainer layouts of one node's GPUs, two nodes', ... all of the cluster's, whether
    each fits, with its per-rank peak and grad-sync choice: what --plan lists beside the
    configured one (`trainer_layouts`)."""
    mem = _gpu_mem(cluster)
    gpus = int(sum(n.gpus for n in cluster.nodes))
    per_node = int(max((n.gpus for n in cluster.nodes), default=0))
    if mem is None or gpus < 1:
        return []
    t = cfg.train
    out = []
    for n in sorted({per_node * k for k in range(1, gpus // max(1, per_node) + 1)} | {gpus}):
        for m in layouts(shape, tokens, n, mem, per_node, compute_bytes=compute_bytes, offload=t.offload,
                         gradient_checkpointing=t.gradient_checkpointing, logprob_chunk=t.logprob_chunk_size,
                         reference=t.loss.beta > 0):
            out.append({"num_trainers": n, "tensor_parallel": m["tensor_parallel"], "grad_sync": m["grad_sync"],
                        "offload": m["offload"], "est_peak_gib": m["est_peak_gib"], "fits": m["fits"]})
    return out
