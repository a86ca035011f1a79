"""Padding-free micro-batches for rlvr-train's trainer (train.packing: true).

A micro-batch becomes one row: the sequences (prompt + completion) concatenated without
padding, position ids restarting at 0 for each, and `cu_seqlens` (cumulative lengths) marking
where each begins. Attention stays inside each sequence:

- on CUDA in bf16/fp16, torch's variable-length FlashAttention kernel
  (`torch.nn.attention.varlen.varlen_attn`) takes `cu_seqlens` directly, causal through its
  `window_size=(-1, 0)` (it has no `is_causal` argument) and grouped-query heads through
  `enable_gqa`;
- elsewhere (CPU, fp32) each sequence's slice goes through causal scaled-dot-product attention
  on its own, so no [T, T] block-diagonal mask is ever built and attention costs the sum of
  the sequences' squared lengths, not the square of the row.

The attention function is registered with transformers' AttentionInterface and selected for
the packed forward and its backward only (`packed_attention`: gradient checkpointing recomputes
there), so checkpoints keep the model's own setting;
transformers passes `cu_seq_lens_q` and friends from the model's forward down to it, as it does
for its flash-attention kernels. Only the positions that predict completion tokens reach the
output layer (`logits_to_keep` as indices). Sequences are packed into micro-batches of at
most train.max_tokens_per_microbatch real tokens (first-fit decreasing).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
from dataclasses import dataclass

import torch
import torch.nn.functional as F

NAME = "rlvr_varlen"


@dataclass
class Packed:
    input_ids: torch.Tensor      # [1, T] every sequence's prompt + completion, back to back
    position_ids: torch.Tensor   # [1, T] 0.. per sequence
    cu_seqlens: torch.Tensor     # [N + 1] int32, where sequence i starts (and the total at the end)
    max_len: int                 # longest sequence
    keep: torch.Tensor           # [T_c] positions whose hidden states predict the completion tokens
    targets: torch.Tensor        # [T_c] the completion tokens, sequence after sequence
    cmask: torch.Tensor          # [N, L] 1 on real completion tokens (right-padded layout of the loss)


def pack(prompts: list[list[int]], comps: list[list[int]]) -> Packed:
    """One padding-free row of the sequences; the loss keeps its [N, L] layout through cmask
    (its real tokens, in row-major order, are `targets` in order)."""
    ids: list[int] = []
    pos: list[int] = []
    keep: list[int] = []
    targets: list[int] = []
    cu = [0]
    for p, c in zip(prompts, comps):
        start = cu[-1]
        ids += p + c
        pos += range(len(p) + len(c))
        keep += range(start + len(p) - 1, start + len(p) - 1 + len(c))   # position t predicts token t + 1
        targets += c
        cu.append(start + len(p) + len(c))
    L = max(1, max((len(c) for c in comps), default=1))
    cmask = torch.zeros((len(comps), L), dtype=torch.float32)
    for i, c in enumerate(comps):
        cmask[i, :len(c)] = 1
    return Packed(torch.tensor([ids]), torch.tensor([pos]), torch.tensor(cu, dtype=torch.int32),
                  max(b - a for a, b in zip(cu, cu[1:])), torch.tensor(keep, dtype=torch.long),
                  torch.tensor(targets, dtype=torch.long), cmask)


def plan(lengths: dict[int, int], budget: int) -> list[list[int]]:
    """Sequence indices packed into micro-batches of at most `budget` tokens each (first-fit
    decreasing; a sequence longer than the budget goes alone). Deterministic: ties by index."""
    bins: list[list[int]] = []
    room: list[int] = []
    for i in sorted(lengths, key=lambda i: (-lengths[i], i)):
        n = lengths[i]
        for b, r in enumerate(room):
            if n <= r:
                bins[b].append(i)
                room[b] -= n
                break
        else:
            bins.append([i])
            room.append(budget - n)
    return [sorted(b) for b in bins]


CAUSAL = (-1, 0)   # varlen_attn's window for causal attention: torch compares it with == to this tuple


@functools.lru_cache(maxsize=1)
def _varlen_kernel():
    """torch's varlen_attn when its signature takes the arguments used here (window_size, scale
    and enable_gqa, as torch 2.13's does), else None (the per-sequence path)."""
    try:
        from torch.nn.attention.varlen import varlen_attn
    except ImportError:  # an older torch
        return None
    try:
        params = inspect.signature(varlen_attn).parameters
    except (TypeError, ValueError):
        return None
    return varlen_attn if {"window_size", "scale", "enable_gqa"} <= set(params) else None


def varlen_attention(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                     sliding_window: int | None = None, **kwargs):
    """transformers' attention interface for one packed row: query [1, H, T, D], key and value
    [1, H_kv, T, D] -> ([1, T, H, D], None), attending only within each cu_seqlens segment."""
    cu = kwargs.get("cu_seq_lens_q")
    if cu is None:
        raise RuntimeError("packed attention needs cu_seq_lens_q (rlvr.train.packing)")
    if sliding_window is not None:
        raise RuntimeError("train.packing does not support sliding-window attention layers")
    if query.shape[0] != 1:
        raise RuntimeError(f"packed attention expects one row, got {query.shape[0]}")
    groups = query.shape[1] // key.shape[1]
    kernel = _varlen_kernel()
    if kernel is not None and query.is_cuda and query.dtype in (torch.bfloat16, torch.float16) and dropout == 0.0:
        q, k, v = (x[0].transpose(0, 1) for x in (query, key, value))          # [T, H, D]
        cu = cu.to(device=query.device, dtype=torch.int32)
        m = int(kwargs.get("max_length_q") or int((cu[1:] - cu[:-1]).max()))
        # causal within each segment: the window (-1, 0) as a tuple (torch compares it with ==, and for a
        # list tells the kernel is_causal False)
        out = kernel(q, k, v, cu, cu, m, m, scale=scaling, window_size=CAUSAL, enable_gqa=groups > 1)  # [T, H, D]
        return out.unsqueeze(0), None
    bounds = cu.tolist()
    outs = []
    for a, b in zip(bounds, bounds[1:]):
        if b <= a:
            continue
        k, v = key[:, :, a:b], value[:, :, a:b]
        if groups > 1:
            k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
        outs.append(F.scaled_dot_product_attention(query[:, :, a:b], k, v, dropout_p=dropout, is_causal=True,
                                                   scale=scaling))                     # [1, H, len, D]
    return torch.cat(outs, dim=2).transpose(1, 2).contiguous(), None                    # [1, T, H, D]


_registered = False


def register() -> None:
    """Make `rlvr_varlen` known to transformers (once per process). No attention mask is built
    for it: the segments are the mask."""
    global _registered
    if not _registered:
        from transformers import AttentionInterface

        AttentionInterface.register(NAME, varlen_attention)
        _registered = True


@contextlib.contextmanager
def packed_attention(model):
    """The model's attention is rlvr_varlen inside the block, its own setting again after it."""
    register()
    cfg = model.config
    before = cfg._attn_implementation
    cfg._attn_implementation = NAME
    try:
        yield
    finally:
        cfg._attn_implementation = before


def forward_kwargs(p: Packed, device) -> dict:
    """What the model's forward takes for a packed row (transformers' flash-attention kwargs)."""
    cu = p.cu_seqlens.to(device)
    return {"input_ids": p.input_ids.to(device), "position_ids": p.position_ids.to(device),
            "cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": p.max_len, "max_length_k": p.max_len,
            "logits_to_keep": p.keep.to(device), "use_cache": False}
