"""The policy side of rlvr-train: model, optimizer, GRPO step, weights out, checkpoints.

PolicyTrainer knows nothing of Ray or vLLM; rlvr.train.actors wraps it in a Ray actor.
One `step(batch)` trains on one rollout batch of (prompt ids, completion ids, advantage,
engine log-probs) sequences: `train.epochs` passes of `train.mini_batches` optimizer steps
(PPO; 1 x 1 by default), each accumulating gradients over micro-batches (a sequence count or
a token budget), and bumps the policy version (= rollout batches trained on, one weight sync
each).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
from dataclasses import dataclass, field

import numpy as np
import torch

from rlvr.grpo import policy_loss, selective_logprobs, token_logprobs
from rlvr.losses import EXTRA_LOSSES
from rlvr.records import atomic_file
from rlvr.train import extras as extra_losses
from rlvr.train.config import optimizer_args


@dataclass
class Batch:
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: list[float]
    behaviour_logprobs: list[list[float]] | None = None
    loss_mask: list[bool] | None = None     # False: sequence excluded (e.g. truncated)
    extras: dict = field(default_factory=dict)   # loss name -> rlvr.train.extras.ExtraBatch (rlvr.losses)
    samples_per_batch: int | None = None    # the configured sequences per rollout batch (prompts x n):
                                            # dr_grpo's constant normaliser, whatever was filtered out


def merge_metrics(per_rank: list[dict]) -> dict[str, float]:
    """Metrics of one step over all ranks: losses add up (each rank's is its share of the
    batch's loss), token-level means are weighted by tokens, counts add up."""
    if len(per_rank) == 1:
        m = dict(per_rank[0])
    else:
        toks = [r.get("_tokens", 0.0) for r in per_rank]
        total = sum(toks)
        m = {}
        for k in per_rank[0]:
            vals = [r.get(k, float("nan")) for r in per_rank]
            if k.startswith("loss/") or k.endswith(("/sequences", "/tokens")) or k.split("/")[0] in EXTRA_LOSSES \
                    or k in ("_tokens", "_diff_sum", "_diff_n", "_real", "_padded"):
                m[k] = float(sum(vals))
            elif k.endswith("/max") or k.startswith("time/"):
                m[k] = max(vals)
            elif k in ("grad/norm", "lr", "train/updates", "ref/version") or k.startswith("precision/"):
                m[k] = vals[0]
            else:
                pairs = [(v, t) for v, t in zip(vals, toks) if t and v == v]
                m[k] = sum(v * t for v, t in pairs) / sum(t for _, t in pairs) if pairs and total else float("nan")
        n = m.get("_diff_n", 0.0)
        m["logprob/engine_vs_trainer_abs_diff"] = m.get("_diff_sum", 0.0) / n if n else float("nan")
        padded = m.get("_padded", 0.0)
        m["train/padded_frac"] = 1.0 - m.get("_real", 0.0) / padded if padded else 0.0
    for k in ("_tokens", "_diff_sum", "_diff_n", "_real", "_padded"):
        m.pop(k, None)
    return m


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
            "float16": torch.float16, "fp16": torch.float16}[dtype]


def lr_lambda(schedule: str, warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - frac if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))
    return f


def _shard(model, compute_dtype: torch.dtype, reduce_dtype: torch.dtype = torch.float32) -> None:
    """FSDP2: shard each decoder layer, then the rest of the model; parameters are cast to
    compute_dtype for forward/backward, gradients reduced (and accumulated over micro-batches)
    in reduce_dtype."""
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = MixedPrecisionPolicy(param_dtype=compute_dtype, reduce_dtype=reduce_dtype)
    layers = getattr(getattr(model, "model", model), "layers", [])
    for layer in layers:
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)


class MasterWeights:
    """Mixed precision on one rank the way FSDP's MixedPrecisionPolicy does it on several: the
    model's parameters hold the compute dtype (bf16), so the whole forward and backward run in
    it (residual stream, norms, rotary, as vLLM and the FSDP ranks compute them, not autocast's
    fp32 islands), while an fp32 master copy of every parameter takes the gradients
    (accumulated in fp32 over micro-batches, moved there as each parameter's gradient is
    complete) and the optimizer's update, and is copied back into the compute copy after
    each step."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        for p in model.parameters():          # a tied parameter once
            master = p.detach().clone().float().requires_grad_(True)
            p.data = p.data.to(dtype)         # parameters only: buffers (rotary inv_freq) stay fp32
            p.register_post_accumulate_grad_hook(self._mover(master))
            self.pairs.append((p, master))
        self.params = [m for _, m in self.pairs]
        self.by_param = {id(p): m for p, m in self.pairs}

    @staticmethod
    def _mover(master: torch.Tensor):
        def hook(p: torch.Tensor) -> None:
            if master.grad is None:
                master.grad = p.grad.to(torch.float32)
            else:
                master.grad.add_(p.grad)      # accumulated in fp32, no fp32 copy of p.grad
            p.grad = None
        return hook

    @torch.no_grad()
    def copy_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)

    def state_dict(self, model: torch.nn.Module) -> dict:
        """The model's state dict with every parameter replaced by its fp32 master."""
        sd = model.state_dict()
        names = {n: p for n, p in model.named_parameters(remove_duplicate=False)}
        return {k: (self.by_param[id(names[k])] if k in names else v) for k, v in sd.items()}


def synchronize(device: str) -> None:
    """Wait for every kernel queued on the device's current stream (no-op on CPU)."""
    if str(device).startswith("cuda"):
        torch.cuda.current_stream(torch.device(device)).synchronize()


class PolicyTrainer:
    def __init__(self, model_path: str, tcfg, max_tokens: int, total_steps: int, trust_remote_code: bool = False,
                 ref_path: str | None = None, temperature: float = 1.0, rank: int = 0, world: int = 1):
        from rlvr.models import lean_transformers

        lean_transformers()
        from transformers import AutoModelForCausalLM, AutoTokenizer

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
        self.model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32,
                                                          trust_remote_code=trust_remote_code).to(self.device)
        self.tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
        if tcfg.gradient_checkpointing:
            self.model.gradient_checkpointing_enable()
        self.master: MasterWeights | None = None
        if world > 1:
            _shard(self.model, self.dtype, resolve_dtype(getattr(tcfg, "grad_reduce_dtype", "float32"), self.device))
        elif self.dtype != torch.float32:
            self.master = MasterWeights(self.model, self.dtype)
        self.model.train()
        self.ref = None
        if tcfg.loss.beta > 0:
            # The reference is the initial policy, also when resuming from a checkpoint.
            # one rank: held in the compute dtype (no update, no master); FSDP: sharded, cast as the policy
            self.ref = AutoModelForCausalLM.from_pretrained(
                ref_path or model_path, dtype=torch.float32 if world > 1 else self.dtype,
                trust_remote_code=trust_remote_code).to(self.device).eval()
            for p in self.ref.parameters():
                p.requires_grad_(False)
            if world > 1:
                _shard(self.ref, self.dtype)
        self.ref_version = 0                     # the policy version the reference holds (train.ref_sync_every)
        self.opt = torch.optim.AdamW(self.master.params if self.master else self.model.parameters(),
                                     **optimizer_args(tcfg))
        # float16 compute: a dynamic loss scaler keeps small gradients from flushing to zero (an
        # update whose gradients overflow is skipped and the scale halved); bf16 needs none. It
        # unscales and checks the gradients the optimizer holds (the fp32 masters on one rank).
        self.scaler = None
        if self.dtype == torch.float16:
            dev = self.device.split(":")[0]
            if world > 1:
                from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

                self.scaler = ShardedGradScaler(device=dev)   # the ranks agree on skipping an update
            else:
                self.scaler = torch.amp.GradScaler(dev)
        self.sched = torch.optim.lr_scheduler.LambdaLR(self.opt, lr_lambda(tcfg.lr_schedule, tcfg.warmup_steps, total_steps))
        self.loss_cfg = dataclasses.replace(tcfg.loss, max_tokens=tcfg.loss.max_tokens or max_tokens)
        self.version = 0
        self._backwards_left = 0                 # backward passes left in the current update (FSDP sync)
        pad = self.tokenizer.pad_token_id
        self.pad_id = pad if pad is not None else (self.tokenizer.eos_token_id or 0)

    # -- forward ---------------------------------------------------------------------------

    def _collate(self, prompts: list[list[int]], comps: list[list[int]]):
        """Left-pad prompts and right-pad completions so every completion starts at column P."""
        P = max(len(p) for p in prompts)
        L = max(1, max(len(c) for c in comps))
        n = len(prompts)
        ids = torch.full((n, P + L), self.pad_id, dtype=torch.long)        # [N, P+L]
        attn = torch.zeros((n, P + L), dtype=torch.long)                    # [N, P+L]
        cmask = torch.zeros((n, L), dtype=torch.float32)                    # [N, L]
        targets = torch.full((n, L), self.pad_id, dtype=torch.long)         # [N, L]
        for i, (p, c) in enumerate(zip(prompts, comps)):
            ids[i, P - len(p):P] = torch.tensor(p)
            attn[i, P - len(p):P] = 1
            if c:
                ids[i, P:P + len(c)] = torch.tensor(c)
                attn[i, P:P + len(c)] = 1
                targets[i, :len(c)] = torch.tensor(c)
                cmask[i, :len(c)] = 1
        pos = (attn.cumsum(1) - 1).clamp(min=0)                             # [N, P+L]
        return ids, attn, pos, targets, cmask, L

    def _head(self, model):
        """The output layer when log-probs can be taken from its inputs chunk by chunk, else None
        (a chunk size of 0, or a model whose logits are not a plain linear map of its last hidden state)."""
        head = model.get_output_embeddings() if self.cfg.logprob_chunk_size else None
        cfg = getattr(model, "config", None)
        if not isinstance(head, torch.nn.Linear) or getattr(cfg, "final_logit_softcapping", None) \
                or getattr(cfg, "logit_scale", None) not in (None, 1, 1.0):
            return None
        return head

    def _logprobs(self, model, prompts, comps, with_entropy=False, temperature: float | None = None,
                  extra_ids: torch.Tensor | None = None):
        """-> (logp [N, L], entropy [N, L] detached or None, mask [N, L]) of the completions, at
        the sampling temperature unless `temperature` is given. extra_ids [N, L, K]: also the
        log-probs of these ids at each position (a teacher's top-k), logp then [N, L, 1 + K]
        with the completion's own token first."""
        temperature = self.temperature if temperature is None else temperature
        if self.cfg.packing:
            return self._logprobs_packed(model, prompts, comps, with_entropy, temperature, extra_ids)
        ids, attn, pos, targets, cmask, L = self._collate(prompts, comps)
        if extra_ids is not None:
            targets = torch.cat([targets.unsqueeze(-1), extra_ids[:, :L].to(targets.dtype).cpu()], -1)  # [N, L, 1+K]
        dev = self.device
        targets, cmask = targets.to(dev), cmask.to(dev)
        head = self._head(model)
        ents = []
        if head is not None:
            # The output layer's forward is swapped, for this call, for the chunked selective
            # log-softmax of the completion's real tokens: the model's forward (and FSDP's hooks
            # around it) runs as usual, and no [N, L, V] logits ever exist.
            sel = cmask.bool()                                                   # [N, L]

            def forward(h):                                                      # h [N, L+1, H]
                lp, ent = selective_logprobs(h[:, :L][sel], head.weight, targets[sel], temperature,
                                             self.cfg.logprob_chunk_size, with_entropy, head.bias)
                ents.append(ent)
                return lp                                                        # [T] real tokens
            head.forward = forward
        try:
            # no autocast: the parameters are in the compute dtype (MasterWeights, FSDP's policy)
            out = model(input_ids=ids.to(dev), attention_mask=attn.to(dev), position_ids=pos.to(dev),
                        logits_to_keep=L + 1, use_cache=False)
        finally:
            if head is not None:
                del head.forward                                                 # back to nn.Linear.forward
        if head is not None:
            where = sel.unsqueeze(-1).expand_as(targets) if targets.dim() == 3 else sel
            logp = torch.zeros(targets.shape, dtype=cmask.dtype, device=dev).masked_scatter(where, out.logits)
            ent = torch.zeros_like(cmask).masked_scatter(sel, ents[0]) if with_entropy else None
            return logp, ent, cmask
        # The reference path (train.logprob_chunk_size 0): [N, L, V] logits, in fp32 before the
        # temperature (as vLLM).
        logits = out.logits[:, :L, :].float() / temperature
        del out
        logp, ent = token_logprobs(logits, targets, with_entropy=with_entropy)  # [N, L]
        return logp, ent, cmask

    def _logprobs_packed(self, model, prompts, comps, with_entropy=False, temperature: float | None = None,
                         extra_ids: torch.Tensor | None = None):
        """_logprobs on one padding-free row (train.packing, rlvr.train.packing): the same
        values in the same [N, L(, 1 + K)] layout; only real tokens are computed."""
        from rlvr.train.packing import forward_kwargs, pack, packed_attention

        temperature = self.temperature if temperature is None else temperature
        p = pack(prompts, comps)
        dev = self.device
        cmask, targets = p.cmask.to(dev), p.targets.to(dev)
        sel = cmask.bool()                                                       # [N, L]
        if extra_ids is not None:   # the real tokens' rows, in the packed (row-major) order: [T_c, 1+K]
            targets = torch.cat([targets.unsqueeze(-1), extra_ids[:, :sel.shape[1]].to(dev, targets.dtype)[sel]], -1)
        head = self._head(model)
        ents = []
        if head is not None:
            def forward(h):                                                      # h [1, T_c, H]
                lp, ent = selective_logprobs(h[0], head.weight, targets, temperature,
                                             self.cfg.logprob_chunk_size, with_entropy, head.bias)
                ents.append(ent)
                return lp                                                        # [T_c]
            head.forward = forward
        try:
            # no autocast: the parameters are in the compute dtype (MasterWeights, FSDP's policy)
            with packed_attention(model):
                out = model(**forward_kwargs(p, dev))
        finally:
            if head is not None:
                del head.forward
        if head is not None:
            lp, ent = out.logits, (ents[0] if with_entropy else None)
        else:
            lp, ent = token_logprobs(out.logits[0].float() / temperature, targets, with_entropy=with_entropy)
        where = sel.unsqueeze(-1).expand(*sel.shape, targets.shape[1]) if targets.dim() == 2 else sel
        logp = torch.zeros(where.shape, dtype=cmask.dtype, device=dev).masked_scatter(where, lp)   # [N, L(, 1+K)]
        return logp, (torch.zeros_like(cmask).masked_scatter(sel, ent) if with_entropy else None), cmask

    # -- one optimizer step ----------------------------------------------------------------

    def _micro_batches(self, idx: list[int], batch: Batch) -> list[list[int]]:
        """Split this rank's sequences into micro-batches: train.micro_batch_size sequences in
        order, or, with train.max_tokens_per_microbatch, sorted by length and packed so that
        each micro-batch's padded size (sequences x (longest prompt + longest completion))
        stays within the budget (a longer sequence goes alone); with train.packing, so that
        its real tokens do (rlvr.train.packing.plan)."""
        budget = self.cfg.max_tokens_per_microbatch
        if not budget:
            mb = max(1, self.cfg.micro_batch_size)
            return [idx[k:k + mb] for k in range(0, len(idx), mb)]
        if self.cfg.packing:   # real tokens only: no padding to count
            from rlvr.train.packing import plan

            return plan({i: len(batch.prompt_ids[i]) + len(batch.completion_ids[i]) for i in idx}, budget)
        order = sorted(idx, key=lambda i: (len(batch.completion_ids[i]) + len(batch.prompt_ids[i]),
                                           len(batch.completion_ids[i]), i))
        out: list[list[int]] = []
        cur, p_max, c_max = [], 0, 0
        for i in order:
            p, c = max(p_max, len(batch.prompt_ids[i])), max(c_max, len(batch.completion_ids[i]))
            if cur and (len(cur) + 1) * (p + c) > budget:
                out.append(cur)
                cur, p, c = [], len(batch.prompt_ids[i]), len(batch.completion_ids[i])
            cur.append(i)
            p_max, c_max = p, c
        if cur:
            out.append(cur)
        return out

    def _plan(self, shares: list[list[int]], batch: Batch) -> list[list[int]]:
        """This rank's micro-batches over its share (shares[rank]). Every rank runs the same
        number of them (FSDP's collectives need all ranks): a rank with fewer gets empty ones
        (one masked dummy sequence)."""
        per_rank = [self._micro_batches(share, batch) for share in shares]
        n = max(len(p) for p in per_rank)
        mine = per_rank[self.rank]
        return mine + [[] for _ in range(n - len(mine))]

    def _forward(self, model, part: list[int], batch: Batch, with_entropy: bool, temperature: float | None = None,
                 extra_ids: torch.Tensor | None = None):
        prompts = [batch.prompt_ids[i] for i in part] or [[self.pad_id]]
        comps = [batch.completion_ids[i] for i in part] or [[self.pad_id]]
        logp, ent, mask = self._logprobs(model, prompts, comps, with_entropy=with_entropy,
                                         temperature=temperature, extra_ids=extra_ids)   # [n, L(, 1+K)]
        if not part:
            mask = torch.zeros_like(mask)
        return logp, ent, mask

    def _stack(self, rows: list[torch.Tensor | list[float] | None], like: torch.Tensor) -> torch.Tensor:
        """Per-sequence values (tensors or lists, possibly shorter) right-padded with 0 into like's shape."""
        out = torch.zeros_like(like)
        for j, r in enumerate(rows):
            if r is not None and len(r):
                r = torch.as_tensor(r, dtype=like.dtype, device=like.device)[:like.shape[1]]
                out[j, :len(r)] = r
        return out

    def step(self, batch: Batch) -> dict[str, float]:
        """Train on one rollout batch (this rank's share of it when world > 1): train.epochs
        passes over train.mini_batches mini-batches, one optimizer step each, with pi_old the
        policy before the first of them.

        Returns metrics; with several ranks, merge them with merge_metrics()."""
        n = len(batch.prompt_ids)
        keep = batch.loss_mask or [True] * n
        idx_all = [i for i in range(n) if keep[i] and batch.completion_ids[i]]
        extras = batch.extras or {}   # the extra losses' own sequences (rlvr.train.extras): split alike
        k = min(max(1, self.cfg.mini_batches), max([len(idx_all), *map(len, extras.values())]))
        minis = [idx_all[j * len(idx_all) // k:(j + 1) * len(idx_all) // k] for j in range(k)]
        updates = [m for _ in range(max(1, self.cfg.epochs)) for m in minis]
        # rank r takes every world-th sequence of each mini-batch
        shares = [[m[r::self.world] for m in minis] for r in range(self.world)]
        mine = [i for m in shares[self.rank] for i in m]
        # pi_old and the reference, per sequence, taken once before the first update; with a
        # single update pi_old is the graph-free copy of the policy's own log-probs.
        old: dict[int, torch.Tensor] = {}
        ref: dict[int, torch.Tensor] = {}
        t0 = self._clock()
        if len(updates) > 1 or self.ref is not None:
            models = ([self.model] if len(updates) > 1 else []) + ([self.ref] if self.ref is not None else [])
            with torch.no_grad():
                for part in self._plan([[i for m in sh for i in m] for sh in shares], batch):
                    for model in models:
                        lp, _, _ = self._forward(model, part, batch, with_entropy=False)
                        dst = old if model is self.model else ref
                        for j, i in enumerate(part):
                            dst[i] = lp[j, :len(batch.completion_ids[i])].clone()
        t_old = self._clock() - t0
        t_fb = t_opt = 0.0
        real_tokens = padded_tokens = 0
        acc: dict[str, float] = {}
        maxima: dict[str, float] = {}
        extra_acc: dict[str, float] = {}
        tok_weights, grad_norms, skipped = 0.0, [], 0
        diffs_sum, diffs_n = 0.0, 0
        # Dr. GRPO's constant: the configured sequences of a mini-batch, not those that survived
        dr_seqs = batch.samples_per_batch / max(1, self.cfg.mini_batches) if batch.samples_per_batch else None
        for u, mini in enumerate(updates):
            self.opt.zero_grad(set_to_none=True)
            tokens_total = float(sum(len(batch.completion_ids[i]) for i in mini))
            plan = self._plan([sh[u % len(minis)] for sh in shares], batch)
            # every backward of this update (RL, then the extra losses'): FSDP reduces at the last only
            self._backwards_left = len(plan) + extra_losses.micro_batch_count(extras, u % len(minis), len(minis),
                                                                              self.world, self.rank)
            t0 = self._clock()
            for part in plan:
                if u < len(minis) and part:                   # padding: tokens computed / tokens real
                    real = sum(len(batch.prompt_ids[i]) + len(batch.completion_ids[i]) for i in part)
                    real_tokens += real
                    padded_tokens += real if self.cfg.packing else len(part) * (
                        max(len(batch.prompt_ids[i]) for i in part) + max(len(batch.completion_ids[i]) for i in part))
                logp, ent, mask = self._forward(self.model, part, batch, with_entropy=True)
                old_t = self._stack([old[i] for i in part], logp) if old else logp.detach()
                beh = None
                if batch.behaviour_logprobs is not None and part:
                    beh = self._stack([batch.behaviour_logprobs[i] for i in part], logp)
                    if u < len(minis):                        # first pass: each sequence once
                        diffs_sum += float(((old_t - beh).abs() * mask).sum())
                        diffs_n += int(mask.sum())
                ref_t = self._stack([ref[i] for i in part], logp) if self.ref is not None else None
                adv = torch.tensor([batch.advantages[i] for i in part] or [0.0], device=self.device)
                # train.loss.ratio_to engine: the ratio (and clip) against the engine's behaviour
                # log-probs instead of the trainer's pi_old; the TIS weight pi_old/mu is then 1
                base = old_t
                if self.loss_cfg.ratio_to == "engine" and part:
                    if beh is None:
                        raise ValueError("train.loss.ratio_to engine needs the engines' log-probs of the samples")
                    base = beh
                loss, m = policy_loss(logp, base, adv, mask, self.loss_cfg, behaviour_logp=beh, ref_logp=ref_t,
                                      entropy=ent, n_total=len(mini), tokens_total=tokens_total,
                                      dr_grpo_sequences=dr_seqs)
                # Losses are normalised by the whole mini-batch's counts, so the ranks' gradients
                # must be summed; FSDP averages them over ranks, hence the factor.
                self._backward(loss * self.world)
                w = float(mask.sum())
                tok_weights += w
                for key, v in m.items():
                    if key.startswith("loss/"):
                        acc[key] = acc.get(key, 0.0) + v / len(updates)   # mean over updates
                    elif key.endswith("/max"):
                        maxima[key] = max(maxima.get(key, 0.0), v) if w else maxima.get(key, 0.0)
                    elif w:
                        acc[key] = acc.get(key, 0.0) + v * w
            if extras:
                extra_losses.backward(self, extras, u % len(minis), len(minis), len(updates), extra_acc)
            t1 = self._clock()
            t_fb += t1 - t0
            norm = self._optimizer_step()
            if math.isfinite(norm):
                grad_norms.append(norm)
            else:
                skipped += 1
            t_opt += self._clock() - t1
        for key in list(acc):
            if not key.startswith("loss/"):
                acc[key] = acc[key] / tok_weights if tok_weights else float("nan")
        if updates and idx_all:
            acc.update(maxima)
        extra_losses.finish(acc, extra_acc, extras, len(minis), self.rank, self.world)
        lr = self.sched.get_last_lr()[0]
        self.sched.step()
        self.version += 1
        if self.ref is not None:
            if self.cfg.ref_sync_every and self.version % self.cfg.ref_sync_every == 0:
                self._sync_reference()
            acc["ref/version"] = float(self.ref_version)
        if self.scaler is not None:
            acc["precision/loss_scale"] = float(self.scaler.get_scale())
            acc["precision/skipped_updates"] = float(skipped)
        acc.update({
            "grad/norm": sum(grad_norms) / len(grad_norms) if grad_norms else 0.0,
            "lr": lr,
            "train/updates": float(len(updates)),
            "train/sequences": float(len(mine)),
            "train/tokens": float(sum(len(batch.completion_ids[i]) for i in mine)),
            "logprob/engine_vs_trainer_abs_diff": diffs_sum / diffs_n if diffs_n else float("nan"),
            # where a step's time goes (the slowest rank's, merged), and the share of computed
            # positions that were padding
            "time/trainer_pi_old_s": t_old, "time/trainer_fwd_bwd_s": t_fb, "time/trainer_optimizer_s": t_opt,
            "train/padded_frac": 1.0 - real_tokens / padded_tokens if padded_tokens else 0.0,
            "_tokens": tok_weights, "_diff_sum": diffs_sum, "_diff_n": float(diffs_n),
            "_real": float(real_tokens), "_padded": float(padded_tokens),
        })
        return acc

    def _backward(self, loss: torch.Tensor) -> None:
        """One micro-batch's backward. With FSDP, the unsharded gradients accumulate over an
        update's backwards (self._backwards_left, set by step()) and are reduce-scattered once,
        by the last of them: the same count on every rank, as their plans are padded alike.
        With train.packing the backward runs under the packed attention too: gradient
        checkpointing recomputes each layer's forward there, on the same packed row."""
        if self.world > 1:
            self.model.set_requires_gradient_sync(self._backwards_left <= 1)
        self._backwards_left -= 1
        if self.cfg.packing:
            from rlvr.train.packing import packed_attention

            ctx = packed_attention(self.model)
        else:
            ctx = contextlib.nullcontext()
        with ctx:
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
            else:
                loss.backward()

    def _optimizer_step(self) -> float:
        """Clip the accumulated gradient and step; returns its norm (not finite: with float16, an
        overflow, and the loss scaler skipped the update). With fp32 master weights (one rank)
        the update is copied back into the compute copy."""
        if self.scaler is not None:
            self.scaler.unscale_(self.opt)
        # the parameters as they are now: FSDP registers a root module's unsharded parameters after
        # a forward pass (pi_old's) until the next backward reshards them
        params = self.master.params if self.master else self.model.parameters()
        norm = float(torch.nn.utils.clip_grad_norm_(params, self.cfg.grad_clip))
        if self.scaler is not None:
            self.scaler.step(self.opt)
            self.scaler.update()
        else:
            self.opt.step()
        if self.master is not None:
            self.master.copy_to_model()
        return norm

    def _sync_reference(self) -> None:
        """The KL reference becomes the current policy (train.ref_sync_every); with several
        ranks each copies its own shards."""
        ref = dict(self.ref.named_parameters())
        with torch.no_grad():
            for name, p in self.model.named_parameters():
                ref[name].copy_(p)
        self.ref_version = self.version

    def _clock(self) -> float:
        """A time stamp once the device has finished what was queued (GPU kernels run
        asynchronously: without the wait, time lands in whichever phase syncs next)."""
        import time

        synchronize(self.device)
        return time.monotonic()

    # -- weights out -----------------------------------------------------------------------

    def full_state_dict(self, model=None) -> dict:
        """The unsharded state dict of the policy (fp32 master weights), or of `model` (a
        collective call with several ranks: all must call it)."""
        if model is None and self.world == 1:
            return self.master.state_dict(self.model) if self.master else self.model.state_dict()
        model = self.model if model is None else model
        if self.world == 1:
            return model.state_dict()
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))

    def weights(self) -> list[tuple[str, np.ndarray, str]] | None:
        """(name, array, dtype) per parameter, as numpy (bf16 travels as int16 bits: exact).
        With several ranks every rank must call it; rank 0 returns the weights, others None."""
        sd = self.full_state_dict()
        if self.rank != 0:
            return None
        tied = bool(getattr(self.model.config, "tie_word_embeddings", False))
        out = []
        for name, t in sd.items():
            if tied and name == "lm_head.weight":
                continue  # the engine ties it to the embedding itself: do not send it twice
            t = t.detach().to("cpu", dtype=self.dtype)
            if t.dtype == torch.bfloat16:
                out.append((name, t.view(torch.int16).numpy(), "bfloat16"))
            else:
                out.append((name, t.numpy(), str(t.dtype).replace("torch.", "")))
        return out

    def wire_weights(self) -> list[tuple[str, torch.Tensor]] | None:
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
        tied = bool(getattr(self.model.config, "tie_word_embeddings", False))
        out: list[tuple[str, torch.Tensor]] | None = [] if self.rank == 0 else None
        for name, p in self.model.named_parameters():
            if tied and name == "lm_head.weight":
                continue
            t = p.detach()
            if hasattr(t, "full_tensor"):
                t = t.to(self.dtype).full_tensor()   # cast the shard, gather half the bytes
            elif t.dtype != self.dtype:
                t = t.to(self.dtype)
            if out is not None:
                out.append((name, t))
        synchronize(self.device)
        return out

    # -- checkpoints -----------------------------------------------------------------------

    def save(self, path: str, extra_state: dict, dtype: str | None = None) -> None:
        """A Hugging Face folder (model, tokenizer, generation config) + trainer_state.pt last;
        the weights in `dtype` (checkpoint.dtype; default the float32 master weights). With
        several ranks every rank must call it: each writes its optimizer shard."""
        sd = self.full_state_dict()
        ref_sd = self.full_state_dict(self.ref) if self.ref is not None and self.ref_version else None
        opt_state = self.opt.state_dict()
        if self.world > 1:
            torch.save(opt_state, os.path.join(path, f"optimizer_rank{self.rank:03d}.pt"))
            opt_state = None
        if self.rank == 0:
            if getattr(self.model.config, "tie_word_embeddings", False):
                # gathered copies are no longer one tensor: keep the checkpoint's tied layout
                sd = {k: v for k, v in sd.items() if k != "lm_head.weight"}
            cast = dtype not in (None, "float32")
            if cast:
                to = resolve_dtype(dtype, "cpu")
                sd = {k: v.to(to) if v.is_floating_point() else v for k, v in sd.items()}
            self.model.save_pretrained(path, state_dict=sd, safe_serialization=True)
            if cast:
                _set_config_dtype(path, dtype)
            if ref_sd is not None:   # a re-synced KL reference is no longer the base model
                with atomic_file(os.path.join(path, "reference.pt")) as fh:
                    torch.save(ref_sd, fh)
            self.tokenizer.save_pretrained(path)
            gen = os.path.join(self.model_path, "generation_config.json")
            if os.path.exists(gen) and not os.path.exists(os.path.join(path, "generation_config.json")):
                import shutil

                shutil.copy(gen, path)
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()
        if self.rank != 0:
            return
        state = {
            "version": self.version,
            "world": self.world,
            "optimizer": opt_state,
            "scheduler": self.sched.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler is not None else None,
            "ref_version": self.ref_version,
            "rng": {"torch": torch.get_rng_state(), "python": random.getstate(), "numpy": np.random.get_state()},
            **extra_state,
        }
        with atomic_file(os.path.join(path, "trainer_state.pt")) as fh:
            torch.save(state, fh)

    def load_state(self, path: str) -> dict:
        """Restore optimizer, scheduler, version and RNG from a checkpoint; returns the state dict.
        (The weights come from constructing the trainer on the checkpoint folder.)"""
        state = torch.load(os.path.join(path, "trainer_state.pt"), weights_only=False)
        if state.get("world", 1) != self.world:
            raise ValueError(f"{path} was saved by {state.get('world', 1)} trainer rank(s); resume with the same "
                             f"train.num_trainers")
        if self.world > 1:
            self.opt.load_state_dict(torch.load(os.path.join(path, f"optimizer_rank{self.rank:03d}.pt"),
                                                weights_only=False))
        else:
            self.opt.load_state_dict(state["optimizer"])
        self.sched.load_state_dict(state["scheduler"])
        if self.scaler is not None and state.get("scaler"):
            self.scaler.load_state_dict(state["scaler"])
        self.version = int(state["version"])
        if self.ref is not None and state.get("ref_version"):
            self._load_reference(torch.load(os.path.join(path, "reference.pt"), weights_only=True))
            self.ref_version = int(state["ref_version"])
        torch.set_rng_state(state["rng"]["torch"])
        random.setstate(state["rng"]["python"])
        np.random.set_state(state["rng"]["numpy"])
        return state

    def _load_reference(self, sd: dict) -> None:
        if self.world == 1:
            self.ref.load_state_dict(sd)
            return
        from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

        set_model_state_dict(self.ref, sd, options=StateDictOptions(full_state_dict=True))


def _set_config_dtype(path: str, dtype: str) -> None:
    """The saved config.json names the dtype its weights were written in (what dtype auto loads)."""
    import json

    cfg_path = os.path.join(path, "config.json")
    with open(cfg_path) as fh:
        cfg = json.load(fh)
    cfg["dtype"] = str(resolve_dtype(dtype, "cpu")).replace("torch.", "")
    cfg.pop("torch_dtype", None)
    with atomic_file(cfg_path) as fh:
        fh.write(json.dumps(cfg, indent=2, sort_keys=True).encode() + b"\n")
