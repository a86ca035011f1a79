"""The trainer's weights out: what the weight sync sends the engines and what a checkpoint
writes, read from the policy however it is held (one rank's fp32 masters beside its compute
copy, or FSDP shards gathered from every rank).

rlvr.train.trainer.PolicyTrainer.full_state_dict, .weights and .wire_weights call these;
with several ranks each is a collective every rank must join.
"""

from __future__ import annotations

import numpy as np
import torch

from rlvr.train.trainer_model import MasterWeights, synchronize


def full_state_dict(model, world: int, master: MasterWeights | None = None) -> dict:
    """The unsharded state dict of `model`, its parameters replaced by master's fp32 copies where
    `master` is given (one rank); with world > 1 gathered onto the CPU (a collective call: all
    ranks must call it)."""
    if world == 1:
        return master.state_dict(model) if master else model.state_dict()
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def numpy_weights(sd: dict, model, dtype: torch.dtype) -> list[tuple[str, np.ndarray, str]]:
    """(name, array, dtype) per tensor of the state dict `sd`, cast to `dtype`, as numpy (bf16
    travels as int16 bits: exact); a tied output layer is left out (the engine ties it itself)."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    out = []
    for name, t in sd.items():
        if tied and name == "lm_head.weight":
            continue  # the engine ties it to the embedding itself: do not send it twice
        t = t.detach().to("cpu", dtype=dtype)
        if t.dtype == torch.bfloat16:
            out.append((name, t.view(torch.int16).numpy(), "bfloat16"))
        else:
            out.append((name, t.numpy(), str(t.dtype).replace("torch.", "")))
    return out


def wire_weights(model, dtype: torch.dtype, device: str, rank: int = 0) -> list[tuple[str, torch.Tensor]] | None:
    """The weights as the broadcast sends them: (checkpoint name, full tensor in the compute
    dtype) per parameter, a tied output layer left out, in the order of the transfer's
    metadata (rlvr.engines.transfer.TrainerWeights).

    Two things are settled before anything is sent. The tensors are complete: the
    optimizer's kernels run asynchronously on the device's default stream, and vLLM's
    producer packs on streams of its own, which do not wait for them (torn or one-version-old
    weights otherwise), so the default stream is synchronised here. And with several
    ranks, every parameter is gathered first (a collective all ranks must join; rank 0
    keeps the full copies, 2 bytes a parameter in bf16, the others return None), so the
    other ranks are free again before rank 0 waits for the engines: a broadcast never
    interleaves with FSDP's all-gathers, and no rank sits in a collective while the engines
    finish generating."""
    tied = bool(getattr(model.config, "tie_word_embeddings", False))
    out: list[tuple[str, torch.Tensor]] | None = [] if rank == 0 else None
    for name, p in model.named_parameters():
        if tied and name == "lm_head.weight":
            continue
        t = p.detach()
        if hasattr(t, "full_tensor"):
            t = t.to(dtype).full_tensor()   # cast the shard, gather half the bytes
        elif t.dtype != dtype:
            t = t.to(dtype)
        if out is not None:
            out.append((name, t))
    synchronize(device)
    return out
