"""The trainer's step: one rollout batch (Batch) trained on in train.epochs passes over
train.mini_batches mini-batches, one optimizer update each (PPO; 1 x 1 by default), each
accumulating gradients over micro-batches (a sequence count or a token budget), pi_old and the
KL reference taken once before the first update; and the metrics of a step merged over ranks.

`micro_batches`, `rank_plan`, `stack`, `lr_lambda` and `merge_metrics` are pure; `step`,
`backward` and `optimizer_step` act on a rlvr.train.trainer.PolicyTrainer (its model, reference,
optimizer, loss scaler and version), which calls them.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass, field

import torch

from rlvr.grpo import policy_loss
from rlvr.losses import EXTRA_LOSSES
from rlvr.train import extras as extra_losses
from rlvr.train import spans
from rlvr.train.config import optimizer_args
from rlvr.train.parallel import clip_grad_norm
from rlvr.train.trainer_model import synchronize


@dataclass
class Batch:
    """What one step trains on: each sequence's prompt and completion ids, its advantage, the
    engine's log-probs of its tokens; the extra losses' own sequences beside them."""
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    advantages: list[float]
    behaviour_logprobs: list[list[float]] | None = None
    loss_mask: list[bool] | None = None     # False: sequence excluded (e.g. truncated)
    extras: dict = field(default_factory=dict)   # loss name -> rlvr.train.extras.ExtraBatch (rlvr.losses)
    samples_per_batch: int | None = None    # the configured sequences per rollout batch (prompts x n):
                                            # dr_grpo's constant normaliser, whatever was filtered out
    datasets: list[str] | None = None       # each sequence's dataset: the trace's entropy/dataset/<name>
    token_mask: list[list[int]] | None = None   # per completion token: 0 leaves it out of the loss (a tool
                                                # turn's output in a multi-turn rollout, rlvr.tools)


PRIVATE = ("_tokens", "_diff_sum", "_diff_n", "_real", "_padded", "_seqs")
SEQ_WEIGHTED = "mismatch/seq_"          # rlvr.grpo.mismatch's per-sequence means
DATASET_ENTROPY = "entropy/dataset/"    # the policy's token-mean entropy on each dataset's sequences


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
                    or k in PRIVATE or k.startswith("_ent_n/"):
                m[k] = float(sum(vals))
            elif k.startswith(SEQ_WEIGHTED) or k.startswith(DATASET_ENTROPY):
                # per-sequence means weigh by sequences, a dataset's entropy by its tokens
                ws = [r.get("_seqs", 0.0) if k.startswith(SEQ_WEIGHTED)
                      else r.get("_ent_n/" + k[len(DATASET_ENTROPY):], 0.0) for r in per_rank]
                pairs = [(v, w) for v, w in zip(vals, ws) if w and v == v]
                m[k] = sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else float("nan")
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
    for k in [k for k in m if k in PRIVATE or k.startswith("_ent_n/")]:
        m.pop(k, None)
    return m


def lr_lambda(schedule: str, warmup: int, total: int):
    def f(step: int) -> float:
        if warmup and step < warmup:
            return (step + 1) / warmup
        if schedule == "constant" or total <= warmup:
            return 1.0
        frac = min(1.0, (step - warmup) / max(1, total - warmup))
        return 1.0 - frac if schedule == "linear" else 0.5 * (1 + math.cos(math.pi * frac))
    return f


def build_optimizer(params, tcfg, dtype: torch.dtype, device: str, world: int, total_steps: int):
    """(optimizer, loss scaler or None, lr scheduler) over `params` (the fp32 masters on one rank
    with a compute dtype below float32, else the model's parameters): AdamW with train's settings
    (rlvr.train.config.optimizer_args; with train.offload optimizer its state on the CPU,
    rlvr.train.parallel.CPUAdamW), the lr schedule over total_steps.

    float16 compute: a dynamic loss scaler keeps small gradients from flushing to zero (an
    update whose gradients overflow is skipped and the scale halved); bf16 needs none. It
    unscales and checks the gradients the optimizer holds (the fp32 masters on one rank)."""
    if getattr(tcfg, "offload", None) == "optimizer":   # AdamW's state on the CPU (rlvr.train.parallel)
        from rlvr.train.parallel import CPUAdamW

        opt = CPUAdamW(params, **optimizer_args(tcfg))
    else:
        opt = torch.optim.AdamW(params, **optimizer_args(tcfg))
    scaler = None
    if dtype == torch.float16:
        dev = device.split(":")[0]
        if world > 1:
            from torch.distributed.fsdp.sharded_grad_scaler import ShardedGradScaler

            scaler = ShardedGradScaler(device=dev)   # the ranks agree on skipping an update
        else:
            scaler = torch.amp.GradScaler(dev)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(tcfg.lr_schedule, tcfg.warmup_steps, total_steps))
    return opt, scaler, sched


def micro_batches(idx: list[int], batch: Batch, cfg) -> list[list[int]]:
    """Split this rank's sequences into micro-batches: train.micro_batch_size sequences in
    order, or, with train.max_tokens_per_microbatch, sorted by length and packed so that
    each micro-batch's padded size (sequences x (longest prompt + longest completion))
    stays within the budget (a longer sequence goes alone); with train.packing, so that
    its real tokens do (rlvr.train.packing.plan)."""
    budget = cfg.max_tokens_per_microbatch
    if not budget:
        mb = max(1, cfg.micro_batch_size)
        return [idx[k:k + mb] for k in range(0, len(idx), mb)]
    if cfg.packing:   # real tokens only: no padding to count
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


def rank_plan(shares: list[list[int]], batch: Batch, cfg, rank: int) -> list[list[int]]:
    """This rank's micro-batches over its share (shares[rank]). Every rank runs the same
    number of them (FSDP's collectives need all ranks): a rank with fewer gets empty ones
    (one masked dummy sequence)."""
    per_rank = [micro_batches(share, batch, cfg) for share in shares]
    n = max(len(p) for p in per_rank)
    mine = per_rank[rank]
    return mine + [[] for _ in range(n - len(mine))]


def stack(rows: list[torch.Tensor | list[float] | None], like: torch.Tensor) -> torch.Tensor:
    """Per-sequence values (tensors or lists, possibly shorter) right-padded with 0 into like's shape."""
    out = torch.zeros_like(like)
    for j, r in enumerate(rows):
        if r is not None and len(r):
            r = torch.as_tensor(r, dtype=like.dtype, device=like.device)[:like.shape[1]]
            out[j, :len(r)] = r
    return out


def step(tr, batch: Batch) -> dict[str, float]:
    """Train on one rollout batch (this rank's share of it when world > 1): train.epochs
    passes over train.mini_batches mini-batches, one optimizer step each, with pi_old the
    policy before the first of them.

    Returns metrics; with several ranks, merge them with merge_metrics()."""
    n = len(batch.prompt_ids)
    keep = batch.loss_mask or [True] * n
    idx_all = [i for i in range(n) if keep[i] and batch.completion_ids[i]]
    extras = batch.extras or {}   # the extra losses' own sequences (rlvr.train.extras): split alike
    k = min(max(1, tr.cfg.mini_batches), max([len(idx_all), *map(len, extras.values())]))
    minis = [idx_all[j * len(idx_all) // k:(j + 1) * len(idx_all) // k] for j in range(k)]
    updates = [m for _ in range(max(1, tr.cfg.epochs)) for m in minis]
    # rank r takes every world-th sequence of each mini-batch
    shares = [[m[r::tr.world] for m in minis] for r in range(tr.world)]
    mine = [i for m in shares[tr.rank] for i in m]
    # pi_old and the reference, per sequence, taken once before the first update; with a
    # single update pi_old is the graph-free copy of the policy's own log-probs.
    old: dict[int, torch.Tensor] = {}
    ref: dict[int, torch.Tensor] = {}
    t0, sp = clock(tr.device), spans.begin("pi_old", step=tr.version + 1, version=tr.version)
    if len(updates) > 1 or tr.ref is not None:
        models = ([tr.model] if len(updates) > 1 else []) + ([tr.ref] if tr.ref is not None else [])
        with torch.no_grad():
            for part in rank_plan([[i for m in sh for i in m] for sh in shares], batch, tr.cfg, tr.rank):
                for model in models:
                    lp, _, _ = tr._forward(model, part, batch, with_entropy=False)
                    dst = old if model is tr.model else ref
                    for j, i in enumerate(part):
                        dst[i] = lp[j, :len(batch.completion_ids[i])].clone()
    t_old = clock(tr.device) - t0
    spans.end(sp)
    t_fb = t_opt = 0.0
    real_tokens = padded_tokens = 0
    acc: dict[str, float] = {}
    maxima: dict[str, float] = {}
    extra_acc: dict[str, float] = {}
    tok_weights, grad_norms, skipped = 0.0, [], 0
    seq_weights, seq_acc = 0.0, {}                # per-sequence means, weighed by sequences
    ds_ent: dict[str, float] = {}                 # dataset -> summed token entropy (first pass)
    ds_tok: dict[str, float] = {}
    diffs_sum, diffs_n = 0.0, 0
    # Dr. GRPO's constant: the configured sequences of a mini-batch, not those that survived
    dr_seqs = batch.samples_per_batch / max(1, tr.cfg.mini_batches) if batch.samples_per_batch else None
    for u, mini in enumerate(updates):
        tr.opt.zero_grad(set_to_none=True)
        tokens_total = float(sum(len(batch.completion_ids[i]) if batch.token_mask is None else sum(batch.token_mask[i])
                                 for i in mini))
        plan = rank_plan([sh[u % len(minis)] for sh in shares], batch, tr.cfg, tr.rank)
        # every backward of this update (RL, then the extra losses'): FSDP reduces at the last only
        tr._backwards_left = len(plan) + extra_losses.micro_batch_count(extras, u % len(minis), len(minis),
                                                                        tr.world, tr.rank)
        t0, sp = clock(tr.device), spans.begin("forward_backward", step=tr.version + 1, version=tr.version)
        for part in plan:
            if u < len(minis) and part:                   # padding: tokens computed / tokens real
                real = sum(len(batch.prompt_ids[i]) + len(batch.completion_ids[i]) for i in part)
                real_tokens += real
                padded_tokens += real if tr.cfg.packing else len(part) * (
                    max(len(batch.prompt_ids[i]) for i in part) + max(len(batch.completion_ids[i]) for i in part))
            # "stats": the entropy with its graph (the entropy bonus) and the top-1 probability, [n, L, 2]
            logp, stats, mask = tr._forward(tr.model, part, batch, with_entropy="stats")
            ent, top1 = stats[..., 0], stats[..., 1]
            if batch.token_mask is not None and part:   # tool-output tokens: no loss
                mask = mask * stack([batch.token_mask[i] for i in part], mask)
            if batch.datasets is not None and u < len(minis):
                for j, i in enumerate(part):
                    name = str(batch.datasets[i])
                    ds_ent[name] = ds_ent.get(name, 0.0) + float((ent[j].detach() * mask[j]).sum())
                    ds_tok[name] = ds_tok.get(name, 0.0) + float(mask[j].sum())
            old_t = stack([old[i] for i in part], logp) if old else logp.detach()
            beh = None
            if batch.behaviour_logprobs is not None and part:
                beh = stack([batch.behaviour_logprobs[i] for i in part], logp)
                if u < len(minis):                        # first pass: each sequence once
                    diffs_sum += float(((old_t - beh).abs() * mask).sum())
                    diffs_n += int(mask.sum())
            ref_t = stack([ref[i] for i in part], logp) if tr.ref is not None else None
            adv = torch.tensor([batch.advantages[i] for i in part] or [0.0], device=tr.device)
            # train.loss.ratio_to engine: the ratio (and clip) against the engine's behaviour
            # log-probs instead of the trainer's pi_old; the TIS weight pi_old/mu is then 1
            base = old_t
            if tr.loss_cfg.ratio_to == "engine" and part:
                if beh is None:
                    raise ValueError("train.loss.ratio_to engine needs the engines' log-probs of the samples")
                base = beh
            loss, m = policy_loss(logp, base, adv, mask, tr.loss_cfg, behaviour_logp=beh, ref_logp=ref_t,
                                  entropy=ent, n_total=len(mini), tokens_total=tokens_total,
                                  dr_grpo_sequences=dr_seqs, top1=top1, trainer_logp=old_t)
            # Losses are normalised by the whole mini-batch's counts, so the ranks' gradients
            # must be summed; FSDP averages them over ranks, hence the factor.
            backward(tr, loss * tr.world)
            w = float(mask.sum())
            tok_weights += w
            n_seq = float((mask.sum(1) > 0).sum())
            seq_weights += n_seq
            for key, v in m.items():
                if key.startswith(SEQ_WEIGHTED):
                    if n_seq:
                        seq_acc[key] = seq_acc.get(key, 0.0) + v * n_seq
                elif key.startswith("loss/"):
                    acc[key] = acc.get(key, 0.0) + v / len(updates)   # mean over updates
                elif key.endswith("/max"):
                    maxima[key] = max(maxima.get(key, 0.0), v) if w else maxima.get(key, 0.0)
                elif w:
                    acc[key] = acc.get(key, 0.0) + v * w
        if extras:
            extra_losses.backward(tr, extras, u % len(minis), len(minis), len(updates), extra_acc)
        t1 = clock(tr.device)
        spans.end(sp)
        sp = spans.begin("optimizer", step=tr.version + 1, version=tr.version)
        t_fb += t1 - t0
        norm = optimizer_step(tr)
        if math.isfinite(norm):
            grad_norms.append(norm)
        else:
            skipped += 1
        t_opt += clock(tr.device) - t1
        spans.end(sp)
    for key in list(acc):
        if not key.startswith("loss/"):
            acc[key] = acc[key] / tok_weights if tok_weights else float("nan")
    if updates and idx_all:
        acc.update(maxima)
    for key, v in seq_acc.items():
        acc[key] = v / seq_weights if seq_weights else float("nan")
    for name, n_tok in ds_tok.items():
        acc[DATASET_ENTROPY + name] = ds_ent[name] / n_tok if n_tok else float("nan")
        acc["_ent_n/" + name] = n_tok
    extra_losses.finish(acc, extra_acc, extras, len(minis), tr.rank, tr.world)
    lr = tr.sched.get_last_lr()[0]
    tr.sched.step()
    tr.version += 1
    if tr.ref is not None:
        if tr.cfg.ref_sync_every and tr.version % tr.cfg.ref_sync_every == 0:
            sync_reference(tr)
        acc["ref/version"] = float(tr.ref_version)
    if tr.scaler is not None:
        acc["precision/loss_scale"] = float(tr.scaler.get_scale())
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
        "_real": float(real_tokens), "_padded": float(padded_tokens), "_seqs": seq_weights,
    })
    return acc


def backward(tr, loss: torch.Tensor) -> None:
    """One micro-batch's backward. With FSDP, the unsharded gradients accumulate over an
    update's backwards (tr._backwards_left, set by step()) and are reduce-scattered once,
    by the last of them: the same count on every rank, as their plans are padded alike.
    With train.packing the backward runs under the packed attention too: gradient
    checkpointing recomputes each layer's forward there, on the same packed row."""
    if tr.world > 1:   # train.grad_sync per_microbatch: reduce-scatter after every backward (sharded grads only)
        tr.model.set_requires_gradient_sync(tr._backwards_left <= 1 or tr.cfg.grad_sync == "per_microbatch")
    tr._backwards_left -= 1
    if tr.cfg.packing:
        from rlvr.train.packing import packed_attention

        ctx = packed_attention(tr.model)
    else:
        ctx = contextlib.nullcontext()
    with ctx:
        if tr.scaler is not None:
            tr.scaler.scale(loss).backward()
        else:
            loss.backward()


def optimizer_step(tr) -> float:
    """Clip the accumulated gradient and step; returns its norm (not finite: with float16, an
    overflow, and the loss scaler skipped the update). With fp32 master weights (one rank)
    the update is copied back into the compute copy."""
    if tr.scaler is not None:
        tr.scaler.unscale_(tr.opt)
    # the parameters as they are now: FSDP registers a root module's unsharded parameters after
    # a forward pass (pi_old's) until the next backward reshards them
    params = tr.master.params if tr.master else tr.model.parameters()
    norm = float(clip_grad_norm(params, tr.cfg.grad_clip))   # mesh-aware (rlvr.train.parallel)
    if tr.scaler is not None:
        tr.scaler.step(tr.opt)
        tr.scaler.update()
    else:
        tr.opt.step()
    if tr.master is not None:
        tr.master.copy_to_model()
    return norm


def sync_reference(tr) -> None:
    """The KL reference becomes the current policy (train.ref_sync_every); with several
    ranks each copies its own shards."""
    ref = dict(tr.ref.named_parameters())
    with torch.no_grad():
        for name, p in tr.model.named_parameters():
            ref[name].copy_(p)
    tr.ref_version = tr.version


def clock(device: str) -> float:
    """A time stamp once the device has finished what was queued (GPU kernels run
    asynchronously: without the wait, time lands in whichever phase syncs next)."""
    import time

    synchronize(device)
    return time.monotonic()
