"""The trainer's checkpoints: a Hugging Face folder of the policy (weights, tokenizer,
generation config) plus trainer_state.pt (optimizer, scheduler, loss scaler, version, RNG),
written last, and the restore of that state into a trainer built on the folder.

`save` and `load_state` act on a rlvr.train.trainer.PolicyTrainer (its model, reference,
optimizer, scheduler, loss scaler, version, rank and world); with several ranks every rank
calls them and each writes and reads its own optimizer shard, and the other ranks wait for
rank 0's writes on a gloo group with its own long timeout (`wait_for_rank0`), never in an NCCL
collective whose watchdog a slow filesystem could trip.
"""

from __future__ import annotations

import os
import random

import numpy as np
import torch

from rlvr.records import atomic_file
from rlvr.train.trainer_model import checkpoint_group, resolve_dtype


def save(tr, path: str, extra_state: dict, dtype: str | None = None) -> None:
    """A Hugging Face folder (model, tokenizer, generation config) + trainer_state.pt last;
    the weights in `dtype` (checkpoint.dtype; default the float32 master weights). With
    several ranks every rank must call it: each writes its optimizer shard."""
    if tr.world > 1 and getattr(tr, "checkpoint_group", None) is None:
        tr.checkpoint_group = checkpoint_group()     # every rank, before rank 0's writes
    sd = tr.full_state_dict()
    ref_sd = tr.full_state_dict(tr.ref) if tr.ref is not None and tr.ref_version else None
    opt_state = tr.opt.state_dict()
    if tr.world > 1:
        torch.save(opt_state, os.path.join(path, f"optimizer_rank{tr.rank:03d}.pt"))
        opt_state = None
    if tr.rank == 0:
        if getattr(tr.model.config, "tie_word_embeddings", False):
            # gathered copies are no longer one tensor: keep the checkpoint's tied layout
            sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
        cast = dtype not in (None, "float32")
        if cast:
            to = resolve_dtype(dtype, "cpu")
            sd = {k: v.to(to) if v.is_floating_point() else v for k, v in sd.items()}
        tr.model.save_pretrained(path, state_dict=sd, safe_serialization=True)
        if cast:
            set_config_dtype(path, dtype)
        if ref_sd is not None:   # a re-synced KL reference is no longer the base model
            with atomic_file(os.path.join(path, "reference.pt")) as fh:
                torch.save(ref_sd, fh)
        tr.tokenizer.save_pretrained(path)
        gen = os.path.join(tr.model_path, "generation_config.json")
        if os.path.exists(gen) and not os.path.exists(os.path.join(path, "generation_config.json")):
            import shutil

            shutil.copy(gen, path)
    wait_for_rank0(tr)              # every optimizer shard and the weights are written ...
    if tr.rank != 0:
        wait_for_rank0(tr)
        return
    state = {
        "version": tr.version,
        "world": tr.world,
        "optimizer": opt_state,
        "scheduler": tr.sched.state_dict(),
        "scaler": tr.scaler.state_dict() if tr.scaler is not None else None,
        "ref_version": tr.ref_version,
        "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
        **extra_state,
    }
    with atomic_file(os.path.join(path, "trainer_state.pt")) as fh:
        torch.save(state, fh)
    wait_for_rank0(tr)              # ... and trainer_state.pt, last, before any rank goes on


def wait_for_rank0(tr) -> None:
    """With several ranks, a barrier on the trainer's checkpoint group (trainer_model.
    checkpoint_group: gloo, its own long timeout, built at the first save): the other ranks
    wait there while rank 0 writes, and never inside an NCCL collective whose watchdog a slow
    filesystem would trip."""
    if tr.world <= 1:
        return
    import torch.distributed as dist

    dist.barrier(group=tr.checkpoint_group)


def load_state(tr, path: str) -> dict:
    """Restore optimizer, scheduler, version and RNG from a checkpoint; returns the state dict.
    (The weights come from constructing the trainer on the checkpoint folder.)"""
    state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
    if state.get("world", 1) != tr.world:
        raise ValueError(f"{path} was saved by {state.get('world', 1)} trainer rank(s); resume with the same "
                         f"train.num_trainers")
    if tr.world > 1:
        tr.opt.load_state_dict(torch.load(os.path.join(path, f"optimizer_rank{tr.rank:03d}.pt"),
                                          weights_only=False))
    else:
        tr.opt.load_state_dict(state["optimizer"])
    tr.sched.load_state_dict(state["scheduler"])
    if tr.scaler is not None and state.get("scaler"):
        tr.scaler.load_state_dict(state["scaler"])
    tr.version = int(state["version"])
    if tr.ref is not None and state.get("ref_version"):
        load_reference(tr.ref, torch.load(os.path.join(path, "reference.pt"), weights_only=True), tr.world)
        tr.ref_version = int(state["ref_version"])
    torch.set_rng_state(state["rng"]["torch"])
    random.setstate(state["rng"]["python"])
    np.random.set_state(state["rng"]["numpy"])
    return state


def load_reference(ref, sd: dict, world: int) -> None:
    """A saved (full) state dict into the KL reference, each rank taking its shards."""
    if world == 1:
        ref.load_state_dict(sd)
        return
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    set_model_state_dict(ref, sd, options=StateDictOptions(full_state_dict=True))


def set_config_dtype(path: str, dtype: str) -> None:
    """The saved config.json names the dtype its weights were written in (what dtype auto loads)."""
    import json

    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    cfg["dtype"] = str(resolve_dtype(dtype, "cpu")).replace("torch.", "")
    cfg.pop("torch_dtype", None)
    with atomic_file(cfg_path) as fh:
        fh.write(json.dumps(cfg, indent=2, sort_keys=True).encode() + b"\n")
