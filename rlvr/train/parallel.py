"""Trainer parallelism on torch's DTensor: the device mesh (data-parallel shard x tensor
parallel), the tensor-parallel plan of Qwen3- and Llama-shaped decoders (torch's
`parallelize_module`), FSDP2 over the data-parallel dimension (with its CPU offload policy
where train.offload asks), AdamW with its state on the CPU (train.offload optimizer: CPUAdamW),
and the vocabulary-parallel log-softmax of the output layer.

    mesh = build_mesh(world, tensor_parallel, device)   # 2-D ("dp", "tp"), or None on one rank
    shard(model, compute_dtype, reduce_dtype, mesh)      # TP plan, then FSDP2 over "dp"

Tensor parallelism (Megatron's layout, as torch's parallel styles spell it): q/k/v/gate/up
column-wise (heads and the MLP's inner features split over the TP ranks: each rank's attention
runs on its own heads), o/down row-wise (their partial sums all-reduced), the embedding and
the output layer split over the vocabulary. Qwen3's q_norm/k_norm normalise each head over
head_dim: their weight is replicated and their input sharded on the heads dimension
(SequenceParallel over dim 2), so their gradients are summed over the TP ranks. The output
layer is never run as a layer: rlvr.train.trainer_forward swaps its forward for the
selective log-softmax of the real tokens, here `vocab_parallel_logprobs` when the weight is
split (each rank projects onto its slice of the vocabulary; the log-sum-exp and the target's
logit are all-reduced over the TP ranks: no rank ever holds full-vocabulary logits).

rlvr.train.trainer_model builds the policy and the reference with these; the data split of a
step is by data-parallel coordinates (`data_coords`): the TP ranks of one group see the same
sequences.
"""

from __future__ import annotations

import torch

OFFLOADS = (None, "optimizer", "params_and_optimizer")


def build_mesh(world: int, tensor_parallel: int, device: str):
    """The 2-D device mesh ("dp", "tp") over the `world` ranks of the default process group
    (initialised by the caller: NCCL on GPUs, gloo on CPUs): consecutive ranks form a TP
    group (one node's GPUs, NVLink), data-parallel shards across them. None on one rank."""
    tp = max(1, int(tensor_parallel or 1))
    if world % tp:
        raise ValueError(f"train.tensor_parallel {tp} does not divide the {world} trainer ranks")
    if world == 1:
        return None
    from torch.distributed.device_mesh import init_device_mesh

    dev = "cuda" if str(device).startswith("cuda") else "cpu"
    return init_device_mesh(dev, (world // tp, tp), mesh_dim_names=("dp", "tp"))


def data_coords(mesh, rank: int, world: int) -> tuple[int, int]:
    """(data-parallel rank, data-parallel size): the coordinates a step splits its batch by."""
    if mesh is None:
        return rank, world
    return mesh["dp"].get_local_rank(), mesh["dp"].size()


def tp_size(mesh) -> int:
    return 1 if mesh is None else mesh["tp"].size()


def check_divisible(config, tp: int) -> None:
    """The model's heads, KV heads, MLP width and vocabulary must split evenly over `tp` ranks."""
    sizes = {"num_attention_heads": config.num_attention_heads,
             "num_key_value_heads": getattr(config, "num_key_value_heads", None) or config.num_attention_heads,
             "intermediate_size": config.intermediate_size, "vocab_size": config.vocab_size}
    bad = {k: v for k, v in sizes.items() if v % tp}
    if bad:
        raise ValueError(f"train.tensor_parallel {tp} does not divide the model's " +
                         ", ".join(f"{k} {v}" for k, v in bad.items()))


def tp_plan(model) -> dict:
    """parallelize_module's plan for a Qwen3/Llama-shaped causal LM (names relative to the model)."""
    from torch.distributed.tensor import Replicate
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, SequenceParallel

    plan = {"model.embed_tokens": RowwiseParallel(input_layouts=Replicate(), output_layouts=Replicate())}
    for i, layer in enumerate(model.model.layers):
        p = f"model.layers.{i}."
        for name in ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"):
            plan[p + name] = ColwiseParallel()
        for name in ("self_attn.o_proj", "mlp.down_proj"):
            plan[p + name] = RowwiseParallel()
        for name in ("q_norm", "k_norm"):   # Qwen3: per-head norms on the local heads [B, S, heads, D]
            if getattr(layer.self_attn, name, None) is not None:
                plan[p + "self_attn." + name] = SequenceParallel(sequence_dim=2, use_local_output=True)
    return plan


def apply_tp(model, tp_mesh) -> None:
    """Split `model` over the TP mesh (tp_plan), the output layer over the vocabulary
    (re-tied to the embedding where the model ties them)."""
    from torch.distributed.tensor import Shard, distribute_tensor
    from torch.distributed.tensor.parallel import parallelize_module

    check_divisible(model.config, tp_mesh.size())
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    parallelize_module(model, tp_mesh, tp_plan(model))
    head = model.get_output_embeddings()
    if tied:
        head.weight = model.model.embed_tokens.weight      # Shard(0): the same vocabulary rows
    else:
        head.weight = torch.nn.Parameter(distribute_tensor(head.weight.data, tp_mesh, [Shard(0)]))
    if head.bias is not None:
        head.bias = torch.nn.Parameter(distribute_tensor(head.bias.data, tp_mesh, [Shard(0)]))


def shard(model, compute_dtype: torch.dtype, reduce_dtype: torch.dtype = torch.float32, mesh=None,
          offload: str | None = None) -> None:
    """Tensor parallel over mesh["tp"] (when larger than 1), then FSDP2 over mesh["dp"] (the
    whole default group when `mesh` is None): each decoder layer, then the rest of the model;
    parameters cast to compute_dtype for forward/backward, gradients reduced (and accumulated
    over micro-batches) in reduce_dtype. offload "params_and_optimizer": FSDP2's
    CPUOffloadPolicy (sharded parameters, gradients and the optimizer's step on the CPU);
    "optimizer" leaves the shards on the device (the optimizer is CPUAdamW)."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

    if offload not in OFFLOADS:
        raise ValueError(f"train.offload must be optimizer, params_and_optimizer or None, got {offload!r}")
    if mesh is not None and tp_size(mesh) > 1:
        apply_tp(model, mesh["tp"])
    kw = {"mp_policy": MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=reduce_dtype)}
    if mesh is not None:
        kw["mesh"] = mesh["dp"]
    if offload == "params_and_optimizer":
        kw["offload_policy"] = CPUOffloadPolicy(pin_memory=torch.cuda.is_available())
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer, **kw)
    fully_shard(model, **kw)


# -- the vocabulary-parallel log-softmax ----------------------------------------------------


class _SumFromTP(torch.autograd.Function):
    """All-reduce (sum) over the TP group forward; identity backward (every TP rank computes
    the same loss from the sum: Megatron's g)."""

    @staticmethod
    def forward(ctx, x, group):
        import torch.distributed as dist

        x = x.clone()
        dist.all_reduce(x, group=group)
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


class _CopyToTP(torch.autograd.Function):
    """Identity forward; all-reduce (sum) of the gradient over the TP group backward (each
    rank's slice of the vocabulary contributes its part of the hidden state's gradient:
    Megatron's f)."""

    @staticmethod
    def forward(ctx, x, group):
        ctx.group = group
        return x

    @staticmethod
    def backward(ctx, g):
        import torch.distributed as dist

        g = g.clone()
        dist.all_reduce(g, group=ctx.group)
        return g, None


def is_vocab_parallel(weight) -> bool:
    """Whether an output layer's weight is split over the vocabulary (a DTensor on a TP mesh)."""
    return hasattr(weight, "placements") and any(getattr(p, "dim", None) == 0 for p in weight.placements)


def vocab_parallel_logprobs(hidden: torch.Tensor, weight, targets: torch.Tensor, temperature: float = 1.0,
                            chunk_size: int | None = 1024, with_entropy: bool = False, bias=None
                            ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """rlvr.grpo.selective_logprobs with the output layer's weight [V, H] split over the TP
    ranks by vocabulary rows (a DTensor, Shard(0)): hidden [T, H] (the same on every TP rank),
    targets [T] or [T, K] -> (logp [T(, K)], entropy [T] detached or None), identical on every
    TP rank. Each rank projects onto its V/tp rows, chunk_size positions at a time; the max,
    the sum of exponentials and the target's logit are all-reduced over the TP group, so
    the full [T, V] logits exist nowhere."""
    import torch.distributed as dist

    mesh = weight.device_mesh
    group = mesh.get_group()
    w = weight.to_local()                                              # [V/tp, H]
    b = bias.to_local() if bias is not None else None
    v_local = w.shape[0]
    lo = mesh.get_local_rank() * v_local
    h = _CopyToTP.apply(hidden, group)
    step = int(chunk_size) if chunk_size else max(1, h.shape[0])
    lps, ents = [], []
    for s in range(0, h.shape[0], step):
        z = torch.nn.functional.linear(h[s:s + step], w, b).float() / temperature   # [c, V/tp]
        tg = targets[s:s + step]
        with torch.no_grad():
            m = z.max(-1).values
            dist.all_reduce(m, op=dist.ReduceOp.MAX, group=group)
        e = torch.exp(z - m.unsqueeze(-1))
        lse = m + torch.log(_SumFromTP.apply(e.sum(-1), group))                   # [c]
        local = tg - lo
        inside = (local >= 0) & (local < v_local)
        picked = torch.gather(z, 1, local.clamp(0, v_local - 1).view(z.shape[0], -1)).view(tg.shape)
        picked = _SumFromTP.apply(torch.where(inside, picked, torch.zeros_like(picked)), group)
        lps.append(picked - (lse.unsqueeze(-1) if tg.dim() == 2 else lse))
        if with_entropy:
            with torch.no_grad():
                pz = (torch.exp(z - lse.unsqueeze(-1)) * z).sum(-1)
                dist.all_reduce(pz, group=group)
                ent = lse - pz
                # "stats" (the trainer's step): [c, 2], the entropy (detached here: train.loss.entropy_coef
                # needs tensor_parallel 1) and the top-1 probability
                ents.append(torch.stack([ent, torch.exp(m - lse)], -1) if with_entropy == "stats" else ent)
    logp = torch.cat(lps) if lps else hidden.new_zeros((0, *targets.shape[1:]), dtype=torch.float32)
    if not with_entropy:
        return logp, None
    if ents:
        return logp, torch.cat(ents)
    return logp, hidden.new_zeros((0, 2) if with_entropy == "stats" else (0,), dtype=torch.float32)


def clip_grad_norm(params, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ over parameters that may live on different meshes (with
    tensor parallelism, the TP-split ones on the 2-D mesh, the replicated norms on the
    data-parallel one): each mesh's norm is assembled (full_tensor), then the total clips all."""
    params = [p for p in params if p.grad is not None]
    groups: dict = {}
    for p in params:
        mesh = getattr(p.grad, "device_mesh", None)
        groups.setdefault(id(mesh) if mesh is not None else None, []).append(p)
    if len(groups) <= 1:
        return torch.nn.utils.clip_grad_norm_(params, max_norm)
    sq = []
    for ps in groups.values():
        n = torch.nn.utils.get_total_norm([p.grad for p in ps], 2.0)
        sq.append((n.full_tensor() if hasattr(n, "full_tensor") else n).float() ** 2)
    total = torch.stack(sq).sum().sqrt()
    for ps in groups.values():      # one foreach call per mesh, as torch does it within one
        torch.nn.utils.clip_grads_with_norm_(ps, max_norm, total)
    return total


# -- train.offload optimizer: AdamW's state on the CPU ---------------------------------------


def _local(t: torch.Tensor) -> torch.Tensor:
    """This rank's part of a parameter or gradient (a DTensor's local shard; a plain tensor itself)."""
    return t.to_local() if hasattr(t, "to_local") else t


class CPUAdamW(torch.optim.Optimizer):
    """train.offload optimizer: AdamW whose state (the two moments) and step live in host
    memory, while the parameters and their gradients stay on the device (FSDP's shards, or one
    rank's fp32 masters). Each parameter has a host copy of this rank's part (fp32, pinned
    where the device is a GPU) with a host gradient buffer; `step` copies the device gradients
    into the buffers, runs torch's AdamW on the host copies (its fused CPU implementation unless
    the arguments choose one), and copies the updated values back into the device parameters. The host holds 16 bytes a parameter of this rank's part
    (copy, gradient buffer, two moments); the device none of the optimizer's.

    The optimizer's param_groups are the device parameters (what clipping, a loss scaler's
    unscale and zero_grad act on, and the lr scheduler sets); their hyperparameters are handed
    to the host AdamW at each step. state_dict / load_state_dict are the host AdamW's: the
    same layout as a plain AdamW's over the same parameters (one rank: a checkpoint resumes
    with or without the offload; with FSDP a plain AdamW's DTensor moments load as their local
    shards)."""

    def __init__(self, params, **adamw_args):
        super().__init__(params, dict(adamw_args))
        devs = [p for g in self.param_groups for p in g["params"]]
        self.pinned = bool(devs) and devs[0].is_cuda          # page-locked buffers for async copies
        self.device = devs[0].device if devs else torch.device("cpu")
        groups = []
        for g in self.param_groups:
            hs = []
            for p in g["params"]:
                h = self._host(_local(p.detach()))
                h.copy_(_local(p.detach()))
                hs.append(h)
            groups.append({**{k: v for k, v in g.items() if k != "params"}, "params": hs})
        # torch's fused AdamW on the CPU: one pass over the moments, ~5x the default's speed here
        self.fused = not any(adamw_args.get(k) is not None for k in ("foreach", "fused"))
        self.host = torch.optim.AdamW(groups, **({"fused": True} if self.fused else {}), **adamw_args)

    def _host(self, like: torch.Tensor) -> torch.Tensor:
        h = torch.empty(like.shape, dtype=torch.float32, device="cpu")
        return h.pin_memory() if self.pinned else h

    def _pairs(self):
        for g, hg in zip(self.param_groups, self.host.param_groups):
            yield from zip(g["params"], hg["params"])

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self._hand_over_groups()
        moved = []
        for p, h in self._pairs():
            if p.grad is None:
                h.grad = None
                continue
            if h.grad is None:
                h.grad = self._host(h)
            h.grad.copy_(_local(p.grad), non_blocking=self.pinned)
            moved.append((p, h))
        if self.pinned:      # the device-to-host copies are done before the host reads them
            torch.cuda.current_stream(self.device).synchronize()
        self.host.step()
        for p, h in moved:
            _local(p).copy_(h, non_blocking=self.pinned)
        return loss

    def _hand_over_groups(self) -> None:
        """The device side's hyperparameters (the lr the scheduler set, ...) to the host AdamW."""
        for g, hg in zip(self.param_groups, self.host.param_groups):
            hg.update({k: v for k, v in g.items() if k != "params"})

    def state_dict(self) -> dict:
        self._hand_over_groups()      # the lr as it is now, not as the last step took it
        return self.host.state_dict()

    def load_state_dict(self, state_dict: dict) -> None:
        state = {i: {k: _local(v) if torch.is_tensor(v) else v for k, v in st.items()}
                 for i, st in state_dict["state"].items()}
        self.host.load_state_dict({**state_dict, "state": state})
        if self.fused:       # a plain AdamW's checkpoint names its own (unfused) implementation
            for hg in self.host.param_groups:
                hg.update(fused=True, foreach=None)
        for g, hg in zip(self.param_groups, self.host.param_groups):
            g.update({k: v for k, v in hg.items() if k != "params" and k in g})
