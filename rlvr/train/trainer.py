"""The policy side of rlvr-train: model, optimizer, GRPO step, weights out, checkpoints.

PolicyTrainer knows nothing of Ray or vLLM; rlvr.train.actors wraps it in a Ray actor.
One `step(batch)` trains on one rollout batch of (prompt ids, completion ids, advantage,
engine log-probs) sequences: `train.epochs` passes of `train.mini_batches` optimizer steps
(PPO; 1 x 1 by default), each accumulating gradients over micro-batches (a sequence count or
a token budget), and bumps the policy version (= rollout batches trained on, one weight sync
each).

PolicyTrainer holds the state; its parts are modules of their own, each usable alone:
rlvr.train.trainer_model (building and sharding the policy and reference), trainer_forward
(log-probs of completions), trainer_step (the step, its micro-batches and update; Batch,
merge_metrics), trainer_weights (what the weight sync and checkpoints read) and
trainer_checkpoint (save and restore).
"""

from __future__ import annotations

import dataclasses
import random

import numpy as np
import torch

from rlvr.train import trainer_checkpoint, trainer_forward, trainer_step, trainer_weights
from rlvr.train.parallel import build_mesh, data_coords
from rlvr.train.trainer_model import (MasterWeights, load_policy, load_reference, resolve_device,  # noqa: F401
                                      resolve_dtype, synchronize)
from rlvr.train.trainer_step import Batch, lr_lambda, merge_metrics  # noqa: F401


class PolicyTrainer:
    def __init__(self, model_path: str, tcfg, max_tokens: int, total_steps: int, trust_remote_code: bool = False,
                 ref_path: str | None = None, temperature: float = 1.0, rank: int = 0, world: int = 1):
        from rlvr.models import lean_transformers

        lean_transformers()
        self.cfg = tcfg
        # Data parallel over `world` ranks with FSDP (torch.distributed must be initialised by
        # the caller: NCCL on GPUs, gloo on CPUs). Each rank takes every world-th sequence.
        self.rank, self.world = rank, world
        # Log-probs are taken under the sampling temperature, as the engine reports them.
        self.temperature = temperature if temperature > 0 else 1.0
        torch.manual_seed(tcfg.seed)
        random.seed(tcfg.seed)
        np.random.seed(tcfg.seed)
        self.device = resolve_device(tcfg.device)
        if self.device == "cuda" and world > 1:
            self.device = f"cuda:{torch.cuda.current_device()}"
        # Mixed precision: fp32 master weights and optimizer state, forward/backward in
        # self.dtype (bf16 on GPUs), on one rank (MasterWeights) as on several (FSDP): the same
        # numerics whatever train.num_trainers. Pure-bf16 AdamW would round most updates of lr
        # ~1e-6 away.
        self.dtype = resolve_dtype(tcfg.dtype, self.device)
        self.model_path = model_path
        # With train.tensor_parallel N the ranks form a (world / N) x N mesh (rlvr.train.parallel):
        # a step splits its batch by the data-parallel coordinates (self.data_rank, data_world).
        tp = max(1, getattr(tcfg, "tensor_parallel", 1))
        self.mesh = build_mesh(world, tp, self.device) if world > 1 and tp > 1 else None   # None: FSDP over all
        self.data_rank, self.data_world = data_coords(self.mesh, rank, world)
        self.model, self.tokenizer, self.master = load_policy(model_path, tcfg, self.device, self.dtype, world,
                                                              trust_remote_code, self.mesh)
        self.ref = None
        if tcfg.loss.beta > 0:
            # The reference is the initial policy, also when resuming from a checkpoint.
            self.ref = load_reference(ref_path or model_path, self.device, self.dtype, world, trust_remote_code,
                                      self.mesh)
        self.ref_version = 0                     # the policy version the reference holds (train.ref_sync_every)
        self.opt, self.scaler, self.sched = trainer_step.build_optimizer(
            self.master.params if self.master else self.model.parameters(), tcfg, self.dtype, self.device, world,
            total_steps)
        self.loss_cfg = dataclasses.replace(tcfg.loss, max_tokens=tcfg.loss.max_tokens or max_tokens)
        self.version = 0
        self._backwards_left = 0                 # backward passes left in the current update (FSDP sync)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)

    # -- forward (rlvr.train.trainer_forward) ----------------------------------------------

    def _head(self, model):
        """The output layer when log-probs are taken chunk by chunk, else None (trainer_forward.output_head)."""
        return trainer_forward.output_head(model, self.cfg.logprob_chunk_size)

    def _logprobs(self, model, prompts, comps, with_entropy=False, temperature: float | None = None,
                  extra_ids: torch.Tensor | None = None):
        """-> (logp [N, L], entropy [N, L] detached or None, mask [N, L]) of the completions, at
        the sampling temperature unless `temperature` is given (trainer_forward.logprobs, with
        train.logprob_chunk_size and train.packing)."""
        return trainer_forward.logprobs(
            model, prompts, comps, pad_id=self.pad_id, device=self.device,
            temperature=self.temperature if temperature is None else temperature,
            chunk_size=self.cfg.logprob_chunk_size, packing=self.cfg.packing, with_entropy=with_entropy,
            extra_ids=extra_ids)

    def _forward(self, model, part: list[int], batch, with_entropy: bool, temperature: float | None = None,
                 extra_ids: torch.Tensor | None = None):
        """Log-probs of the sequences `part` of `batch` (a Batch or an extra loss's ExtraBatch);
        an empty part is one masked dummy sequence (FSDP's collectives need every rank)."""
        prompts = [batch.prompt_ids[i] for i in part] or [[self.pad_id]]
        comps = [batch.completion_ids[i] for i in part] or [[self.pad_id]]
        logp, ent, mask = self._logprobs(model, prompts, comps, with_entropy=with_entropy,
                                         temperature=temperature, extra_ids=extra_ids)   # [n, L(, 1+K)]
        if not part:
            mask = torch.zeros_like(mask)
        return logp, ent, mask

    # -- one optimizer step (rlvr.train.trainer_step) --------------------------------------

    def _micro_batches(self, idx: list[int], batch: Batch) -> list[list[int]]:
        """The sequences `idx` of `batch` in micro-batches, as train's settings cut them."""
        return trainer_step.micro_batches(idx, batch, self.cfg)

    def step(self, batch: Batch) -> dict[str, float]:
        """Train on one rollout batch (this rank's share of it when world > 1): train.epochs
        passes over train.mini_batches mini-batches, one optimizer step each, with pi_old the
        policy before the first of them.

        Returns metrics; with several ranks, merge them with merge_metrics() (with tensor
        parallelism, leave out those marked `_tp_copy`: one rank per TP group reports).

        trainer_step splits the batch by (rank, world): with tensor parallelism these are the
        data-parallel coordinates for the step's duration (the ranks of a TP group take the
        same sequences; FSDP averages over the data-parallel ranks only)."""
        if self.data_world == self.world:
            return trainer_step.step(self, batch)
        rank, world = self.rank, self.world
        self.rank, self.world = self.data_rank, self.data_world
        try:
            m = trainer_step.step(self, batch)
        finally:
            self.rank, self.world = rank, world
        if not self.reports:
            m["_tp_copy"] = 1.0      # the same sequences as its TP group's first rank: left out of the merge
        return m

    @property
    def reports(self) -> bool:
        """Whether this rank's step metrics count in the merge (the first rank of its TP group)."""
        return self.mesh is None or self.mesh["tp"].get_local_rank() == 0

    def _backward(self, loss: torch.Tensor) -> None:
        """One micro-batch's backward (trainer_step.backward; the extra losses' too)."""
        trainer_step.backward(self, loss)

    # -- weights out (rlvr.train.trainer_weights) ------------------------------------------

    def full_state_dict(self, model=None) -> dict:
        """The unsharded state dict of the policy (fp32 master weights), or of `model` (a
        collective call with several ranks: all must call it)."""
        if model is None:
            return trainer_weights.full_state_dict(self.model, self.world, self.master)
        return trainer_weights.full_state_dict(model, self.world)

    def weights(self) -> list[tuple[str, np.ndarray, str]] | None:
        """(name, array, dtype) per parameter, as numpy (bf16 travels as int16 bits: exact).
        With several ranks every rank must call it; rank 0 returns the weights, others None."""
        sd = self.full_state_dict()
        if self.rank != 0:
            return None
        return trainer_weights.numpy_weights(sd, self.model, self.dtype)

    def wire_weights(self) -> list[tuple[str, torch.Tensor]] | None:
        """The weights as the broadcast sends them (trainer_weights.wire_weights): rank 0 gets
        them, the other ranks None; every rank must call it."""
        return trainer_weights.wire_weights(self.model, self.dtype, self.device, self.rank)

    # -- checkpoints (rlvr.train.trainer_checkpoint) ---------------------------------------

    def save(self, path: str, extra_state: dict, dtype: str | None = None) -> None:
        """A Hugging Face folder (model, tokenizer, generation config) + trainer_state.pt last;
        the weights in `dtype` (checkpoint.dtype; default the float32 master weights). With
        several ranks every rank must call it: each writes its optimizer shard."""
        trainer_checkpoint.save(self, path, extra_state, dtype)

    def load_state(self, path: str) -> dict:
        """Restore optimizer, scheduler, version and RNG from a checkpoint; returns the state dict.
        (The weights come from constructing the trainer on the checkpoint folder.)"""
        return trainer_checkpoint.load_state(self, path)
