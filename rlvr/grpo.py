"""GRPO advantages and loss: pure torch functions, used by rlvr-train's trainer only.

What this GRPO is, precisely:
- Advantages are group-relative: for the G samples of one prompt with rewards r_1..r_G,
  A_i = r_i - mean(r), divided by std(r) + eps unless scale="none" (Dr. GRPO); std is the
  unbiased one (G - 1) or, with std="population", divides by G.
  The sequence's advantage applies to each of its tokens.
- The policy loss per token is PPO's clipped surrogate with separate bounds (DAPO's
  clip-higher): -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A), where
  rho = pi_theta / pi_old and pi_old is the trainer's own policy before the batch's first
  update (the ratio leaves 1 from the second mini-batch or epoch on).
- Off-policy correction (truncated importance sampling): the engine that sampled the tokens
  (behaviour policy mu: a different numeric implementation, possibly an older version) is
  corrected with the weight w = min(pi_old / mu, tis_cap), detached, multiplying each token's
  loss. tis_cap = None turns it off.
- KL to a reference with the k3 estimator exp(ref - logp) - (ref - logp) - 1, times beta (no
  reference is needed when beta = 0); `kl/max` is its largest token value. As verl's
  ``low_var_kl``, the log-ratio is clamped to [-20, 20] and the per-token value to at most
  10, so an off-policy token whose reference probability is far above the policy's cannot
  blow the loss up (exp(40) ~ 2e17).
- Aggregation (`loss_type`): "grpo" averages tokens within each sequence, then sequences;
  "dapo" averages over all tokens of the batch (token level); "dr_grpo" sums tokens and divides
  by (number of sequences x max_tokens), a constant: the sequences are the configured samples
  per (mini-)batch, whatever `filter_zero_std` or truncation masking left out (as the paper
  and TRL define it), so the normaliser does not shrink as more groups are filtered.
- Log-probs of the sampled tokens (and the entropy) are computed from the output layer's
  inputs a chunk of positions at a time (`selective_logprobs`, a fused selective
  log-softmax whose backward recomputes each chunk's logits), so at most one chunk of
  full-vocabulary float32 logits exists at once.
Shapes: N sequences in the micro-batch, L completion positions (right-padded); mask is 1 on
real completion tokens.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

# the loss's settings (rlvr-train's train.loss section) and the names of its types, from the config's leaf
from rlvr.train.config_trainer import ADVANTAGES, LOSS_TYPES, LossConfig

METRIC_KEYS = ("loss/policy", "loss/kl", "loss/entropy", "loss/total", "clip/frac", "clip/frac_low", "clip/frac_high",
               "entropy", "entropy/low_frac", "entropy/top1_prob", "kl", "kl/max", "ratio/mean", "ratio/max",
               "tis/weight_mean", "tis/frac_capped")
MISMATCH_KEYS = ("mismatch/token_kl", "mismatch/seq_kl", "mismatch/token_log_ppl_gap", "mismatch/seq_log_ppl_gap",
                 "mismatch/token_masked_frac", "mismatch/seq_masked_frac", "mismatch/masked_frac")
"""policy_loss's metrics with the engine's log-probs (rlvr.grpo.mismatch); the mismatch/seq_* are per-sequence
means (trainer_step weighs them by sequences)."""
STDS = ("unbiased", "population")


def group_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-4, std: str = "unbiased",
                     estimator: str = "grpo") -> tuple[torch.Tensor, torch.Tensor]:
    """rewards [B, G] -> (advantages [B, G], zero_std [B] bool).

    estimator (train.advantage):
      grpo:         A_i = r_i - mean_j r_j, divided by the group's std (+ eps) with scale "group";
      rloo:         A_i = r_i - mean_{j != i} r_j = G/(G-1) (r_i - mean_j r_j) (leave-one-out baseline,
                    Kool et al. 2019, Ahmadian et al. 2024), divided by the group's std alike;
      reinforce_pp: A_i = r_i - mean_j r_j (REINFORCE++'s group-mean baseline, Hu 2025), normalised over
                    the whole batch: minus the batch mean, divided by the batch's std (+ eps) with scale
                    "group" (the std and mean are over all B x G entries given).
    scale: "group" divides by the std (GRPO), "none" does not (Dr. GRPO).
    std: "unbiased" (divides the squared deviations by n - 1) or "population" (by n).
    """
    if std not in STDS:
        raise ValueError(f"unknown std {std!r} ({', '.join(STDS)})")
    if scale not in ("group", "none"):
        raise ValueError(f"unknown advantage scale {scale!r} (group, none)")
    if estimator not in ADVANTAGES:
        raise ValueError(f"unknown advantage estimator {estimator!r} ({', '.join(ADVANTAGES)})")
    corr = int(std == "unbiased")
    mean = rewards.mean(dim=1, keepdim=True)                       # [B, 1]
    g = rewards.shape[1]
    sd = rewards.std(dim=1, keepdim=True, correction=corr) if g > 1 else torch.zeros_like(mean)
    adv = rewards - mean                                            # [B, G]
    if estimator == "rloo":
        adv = adv * (g / (g - 1)) if g > 1 else torch.zeros_like(adv)
    if estimator == "reinforce_pp":
        if scale == "group":
            flat = adv.flatten()
            bsd = flat.std(correction=corr) if flat.numel() > corr else flat.new_zeros(())
            adv = (adv - flat.mean()) / (bsd + eps)
    elif scale == "group":
        adv = adv / (sd + eps)                                      # sd [B, 1]
    zero_std = (rewards.max(dim=1).values - rewards.min(dim=1).values) == 0  # [B]
    return adv, zero_std


def _gather(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [..., V] at targets [...] -> [...], or at targets [..., K] (several ids per
    position, e.g. a teacher's top-k) -> [..., K]."""
    if targets.dim() == logits.dim():
        return logits.gather(-1, targets)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool | str = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V] predicting targets [...] -> (logp [...], entropy [...] or None); targets
    [..., K] give logp [..., K]. Works on whatever it is given at once: selective_logprobs feeds
    it one chunk at a time. with_entropy True: the entropy, detached; "stats": [..., 2], the
    entropy with its graph (an entropy bonus) and the largest token probability (detached)."""
    logits = logits.float()
    logz = torch.logsumexp(logits, dim=-1)                          # [...]
    multi = targets.dim() == logits.dim()
    logp = _gather(logits, targets) - (logz.unsqueeze(-1) if multi else logz)  # [...] or [..., K]
    ent = None
    if with_entropy == "stats":
        p = torch.exp(logits - logz.unsqueeze(-1))                  # [..., V]
        ent = logz - torch.einsum("...v,...v->...", p, logits)
        top1 = torch.exp(logits.detach().max(-1).values - logz.detach())
        ent = torch.stack([ent, top1], -1)                          # [..., 2]
    elif with_entropy:
        with torch.no_grad():                                       # a diagnostic: no graph
            lg = logits.detach()
            p = torch.exp(lg - logz.detach().unsqueeze(-1))         # [..., V]
            ent = logz.detach() - torch.einsum("...v,...v->...", p, lg)
    return logp, ent


class _ChunkLogprobs(torch.autograd.Function):
    """One chunk's log-probs (and entropy) with a hand-written backward that recomputes the
    chunk's logits and turns them into their gradient in place: one [C, V] float32 buffer in
    the backward pass, about two in the forward pass, none kept between them (two in the
    backward pass when the entropy's gradient is asked for, with_entropy "stats").

    The entropy's gradient: H = logZ - sum_v p_v z_v, dH/dz_v = -p_v (log p_v + H)."""

    @staticmethod
    def forward(ctx, h, w, b, t, temperature, with_entropy, dtype):
        stats = with_entropy == "stats"
        with torch.autocast(h.device.type, enabled=False):
            logits = F.linear(h.to(dtype), w.to(dtype), None if b is None else b.to(dtype)).float()  # [C, V]
            if temperature != 1.0:
                logits.div_(temperature)
            logz = torch.logsumexp(logits, dim=-1)                               # [C]
            lp = _gather(logits, t) - (logz.unsqueeze(-1) if t.dim() == 2 else logz)  # [C] or [C, K]
            ent = None
            if with_entropy:
                p = torch.exp(logits - logz.unsqueeze(-1))
                ent = logz - torch.einsum("cv,cv->c", p, logits)
                del p
                if stats:
                    ent = torch.stack([ent, torch.exp(logits.max(-1).values - logz)], -1)   # [C, 2]
        ctx.save_for_backward(h, w, b, t, logz, ent if stats else None)
        ctx.temperature, ctx.dtype, ctx.stats = temperature, dtype, stats
        ctx.set_materialize_grads(False)   # an entropy no loss uses passes None: no extra work
        if not stats:
            ctx.mark_non_differentiable(*([ent] if ent is not None else []))
        return lp, (ent if ent is not None else lp.new_zeros(0))

    @staticmethod
    def backward(ctx, g, g_ent):
        h, w, b, t, logz, ent = ctx.saved_tensors
        dt = ctx.dtype
        if g is None:
            g = torch.zeros(t.shape, dtype=logz.dtype, device=logz.device)
        with torch.autocast(h.device.type, enabled=False):
            hc, wc = h.to(dt), w.to(dt)
            grad = F.linear(hc, wc, None if b is None else b.to(dt)).float()     # [C, V] logits again
            if ctx.temperature != 1.0:
                grad.div_(ctx.temperature)
            # d lp / d logits = onehot(t) - softmax, times g, divided by the temperature (with
            # K targets per row, [C, K]: the softmax term takes the sum of their g)
            multi = t.dim() == 2
            gsum = (g.sum(-1) if multi else g).unsqueeze(-1)                    # [C, 1]
            grad.sub_(logz.unsqueeze(-1))                                        # log p
            if ctx.stats and g_ent is not None and g_ent.numel():
                # plus g_H dH/dz = -g_H p (log p + H): grad = p (-g - g_H (log p + H))
                p = grad.exp()
                grad.add_(ent[:, :1]).mul_(-g_ent[:, :1]).sub_(gsum).mul_(p)
                del p
            else:
                grad.exp_().mul_(-gsum)
            grad.scatter_add_(-1, t if multi else t.unsqueeze(-1), g if multi else g.unsqueeze(-1))
            if ctx.temperature != 1.0:
                grad.div_(ctx.temperature)
            grad_b = grad.sum(0).to(b.dtype) if b is not None and ctx.needs_input_grad[2] else None
            gc = grad.to(dt)
            del grad
            grad_h = (gc @ wc).to(h.dtype) if ctx.needs_input_grad[0] else None
            grad_w = (gc.T @ hc).to(w.dtype) if ctx.needs_input_grad[1] else None
        return grad_h, grad_w, grad_b, None, None, None, None


def selective_logprobs(hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor, temperature: float = 1.0,
                       chunk_size: int | None = 1024, with_entropy: bool | str = False, bias: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of targets under softmax((hidden @ weight.T + bias) / temperature), without
    the full [T, V] logits: hidden [T, H] (the positions that predict the targets), weight
    [V, H] (the output layer), targets [T] -> (logp [T], entropy [T] detached, or None);
    targets [T, K] (several ids per position) give logp [T, K]. with_entropy "stats": the
    second output is [T, 2], the entropy with its graph and the top-1 probability (detached).

    chunk_size rows are projected, upcast to float32, divided by the temperature and reduced
    at a time (in the autocast dtype when autocast is on, as nn.Linear would); the backward
    pass recomputes each chunk's logits, so one chunk of full-vocabulary values is live at
    once, forward and backward. chunk_size 0 or None computes all rows at once through plain
    autograd (the reference path)."""
    if not chunk_size:
        logits = F.linear(hidden, weight, bias).float() / temperature            # [T, V]
        return token_logprobs(logits, targets, with_entropy)
    dev = hidden.device.type
    dtype = torch.get_autocast_dtype(dev) if torch.is_autocast_enabled(dev) else hidden.dtype
    lps, ents = [], []
    for s in range(0, hidden.shape[0], int(chunk_size)):
        lp, ent = _ChunkLogprobs.apply(hidden[s:s + chunk_size], weight, bias, targets[s:s + chunk_size],
                                       float(temperature), with_entropy, dtype)
        lps.append(lp)
        ents.append(ent)
    logp = torch.cat(lps) if lps else hidden.new_zeros((0, *targets.shape[1:]), dtype=torch.float32)
    if not with_entropy:
        return logp, None
    if ents:
        return logp, torch.cat(ents)
    return logp, logp.new_zeros((0, 2) if with_entropy == "stats" else (0,))


KL_LOG_RATIO_CLAMP = 20.0   # verl's low_var_kl: the log-ratio is clamped to [-20, 20] ...
KL_VALUE_CLAMP = 10.0       # ... and the k3 value to [-10, 10] (it is >= 0)


def k3_kl(ref_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of KL(pi || ref) per token, exp(d) - d - 1 with d = ref - logp, clamped
    as verl's low_var_kl (d to [-20, 20], the value to <= 10): no overflow on tokens the
    policy has moved far from the reference (a clamped token passes no gradient)."""
    d = (ref_logp - logp).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1).clamp(max=KL_VALUE_CLAMP)


SEQUENCE_MEAN = ("grpo", "gspo", "sapo")   # loss types averaged within each sequence, then over sequences
TOKEN_MEAN = ("dapo", "cispo")             # ... over all tokens of the batch


def _aggregate(x: torch.Tensor, mask: torch.Tensor, cfg: LossConfig, n_total: int | None = None,
               tokens_total: float | None = None, dr_grpo_sequences: float | None = None) -> torch.Tensor:
    """x, mask [N, L] -> scalar, per cfg.loss_type. n_total/tokens_total: the whole batch's
    sequence and token counts when x is one micro-batch of it (gradient accumulation).
    dr_grpo_sequences: Dr. GRPO's constant number of sequences (the configured samples per
    mini-batch); default: n_total."""
    n = n_total if n_total is not None else x.shape[0]
    if cfg.loss_type in SEQUENCE_MEAN:
        per_seq = (x * mask).sum(1) / mask.sum(1).clamp(min=1)      # [N]
        return per_seq.sum() / n
    if cfg.loss_type in TOKEN_MEAN:
        t = tokens_total if tokens_total is not None else mask.sum().clamp(min=1)
        return (x * mask).sum() / t
    if cfg.loss_type == "dr_grpo":
        if not cfg.max_tokens:
            raise ValueError("loss_type dr_grpo needs max_tokens (its constant normaliser)")
        seqs = dr_grpo_sequences if dr_grpo_sequences else n
        return (x * mask).sum() / (seqs * cfg.max_tokens)
    raise ValueError(f"unknown loss_type {cfg.loss_type!r} ({', '.join(LOSS_TYPES)})")


def surrogate(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor, cfg: LossConfig
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The per-token policy term of cfg.loss_type, before off-policy weights and masks:
    logp, old_logp, mask [N, L], adv [N, 1] -> (pg [N, L], ratio [N, L] (gspo: its sequence's
    ratio at each token), clipped-low [N, L], clipped-high [N, L] (0/1 floats, for the trace)).

      grpo, dapo, dr_grpo: -min(r A, clip(r, 1 - lo, 1 + hi) A), r = pi_theta / pi_old per token (PPO).
      gspo:  the same with r replaced by the sequence's s = exp(mean_t log(pi_theta / pi_old)) at
             each of its tokens (GSPO, Zheng et al. 2025; averaged per sequence, it is the
             sequence's clipped term).
      cispo: -sg(clip(r, 1 - lo, 1 + hi)) A log pi_theta (CISPO, MiniMax-M1 2025): the clipped
             weight is detached, so every token keeps its gradient sg(w) A grad log pi.
      sapo:  -f(r) A, f(r) = 4/tau sigmoid(tau (r - 1)), tau = tau_pos if A > 0 else tau_neg
             (SAPO, Gao et al. 2025): a soft clip whose gradient weight 4 s(1 - s) is 1 at r = 1
             and decays smoothly as r leaves it.
    """
    kind = cfg.loss_type
    lo, hi = 1 - cfg.clip_low, 1 + cfg.clip_high
    ratio = torch.exp(logp - old_logp)                              # [N, L]
    if kind == "gspo":
        seq_lr = ((logp - old_logp) * mask).sum(1, keepdim=True) / mask.sum(1, keepdim=True).clamp(min=1)  # [N, 1]
        ratio = torch.exp(seq_lr).expand_as(logp)                   # [N, L]
    if kind == "cispo":
        w = ratio.clamp(lo, hi).detach()
        pg = -w * adv * logp
        low, high = (ratio < lo), (ratio > hi)                      # the weight is clipped whatever A's sign
    elif kind == "sapo":
        tau = torch.where(adv > 0, cfg.sapo_tau_pos, cfg.sapo_tau_neg).to(logp.dtype)   # [N, 1]
        pg = -(4.0 / tau) * torch.sigmoid(tau * (ratio - 1)) * adv
        low, high = (ratio < lo) & (adv < 0), (ratio > hi) & (adv > 0)   # where a hard clip would cut
    else:
        pg = -torch.minimum(ratio * adv, torch.clamp(ratio, lo, hi) * adv)
        low, high = (ratio < lo) & (adv < 0), (ratio > hi) & (adv > 0)
    return pg, ratio, low.to(logp.dtype), high.to(logp.dtype)


def mismatch(trainer_logp: torch.Tensor, behaviour_logp: torch.Tensor, mask: torch.Tensor, cfg: LossConfig
             ) -> tuple[torch.Tensor, dict[str, float]]:
    """Off-policy masks and train-inference mismatch between the trainer's pi_old and the
    engine's mu on the sampled tokens; trainer_logp, behaviour_logp, mask [N, L] ->
    (keep [N, L] 0/1, metrics).

    rho_t = pi_old / mu. token_mask [low, high]: a token with rho_t outside is dropped;
    seq_mask [low, high]: a sequence whose geometric mean exp(mean_t log rho_t) is outside is
    dropped whole (verl's rollout correction, SkyRL). Metrics: mismatch/token_kl (k3 estimate of
    KL(mu || pi_old) per token, (rho - 1) - log rho, as the tokens were drawn from mu),
    mismatch/seq_kl (its sum over each sequence, averaged over sequences),
    mismatch/token_log_ppl_gap (mean of log mu - log pi_old over tokens: the trainer's minus the
    engine's log-perplexity), mismatch/seq_log_ppl_gap (the same per sequence, averaged over
    sequences), mismatch/token_masked_frac, mismatch/seq_masked_frac (shares dropped by each
    mask), mismatch/masked_frac (share of tokens dropped by either)."""
    with torch.no_grad():
        mask = mask.to(trainer_logp.dtype)
        d = (trainer_logp - behaviour_logp).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP) * mask   # log rho
        rho = torch.exp(d)
        tok_n = mask.sum(1)                                          # [N]
        real = tok_n > 0
        seqs = real.sum().clamp(min=1)
        tok = mask.sum().clamp(min=1)
        k3 = (rho - 1 - d) * mask
        keep_tok = torch.ones_like(mask)
        if cfg.token_mask is not None:
            lo, hi = cfg.token_mask
            keep_tok = ((rho >= lo) & (rho <= hi)).to(mask.dtype)
        keep_seq = torch.ones_like(tok_n)
        geo = torch.exp(d.sum(1) / tok_n.clamp(min=1))               # [N]
        if cfg.seq_mask is not None:
            lo, hi = cfg.seq_mask
            keep_seq = ((geo >= lo) & (geo <= hi)).to(mask.dtype)
        keep = keep_tok * keep_seq.unsqueeze(1)
        metrics = {
            "mismatch/token_kl": float(k3.sum() / tok),
            "mismatch/seq_kl": float((k3.sum(1) * real).sum() / seqs),
            "mismatch/token_log_ppl_gap": float(-d.sum() / tok),
            "mismatch/seq_log_ppl_gap": float(((-d.sum(1) / tok_n.clamp(min=1)) * real).sum() / seqs),
            "mismatch/token_masked_frac": float(((1 - keep_tok) * mask).sum() / tok),
            "mismatch/seq_masked_frac": float(((1 - keep_seq) * real).sum() / seqs),
            "mismatch/masked_frac": float(((1 - keep) * mask).sum() / tok),
        }
    return keep, metrics


def policy_loss(
    logp: torch.Tensor,                 # [N, L] current policy
    old_logp: torch.Tensor,             # [N, L] trainer policy before the batch's first update (detached)
    advantages: torch.Tensor,           # [N]
    mask: torch.Tensor,                 # [N, L] 1 = completion token that counts
    cfg: LossConfig,
    behaviour_logp: torch.Tensor | None = None,  # [N, L] the sampling engine's logprobs
    ref_logp: torch.Tensor | None = None,        # [N, L] reference policy (beta > 0)
    entropy: torch.Tensor | None = None,         # [N, L] (with its graph for entropy_coef > 0)
    n_total: int | None = None,
    tokens_total: float | None = None,
    dr_grpo_sequences: float | None = None,      # dr_grpo: the constant sequence count (configured)
    top1: torch.Tensor | None = None,            # [N, L] the policy's largest token probability (a diagnostic)
    trainer_logp: torch.Tensor | None = None,    # [N, L] the trainer's pi_old for the masks and mismatch
                                                 # metrics when old_logp is another (ratio_to engine)
) -> tuple[torch.Tensor, dict[str, float]]:
    """The policy loss of a (micro-)batch and its detached diagnostics (METRIC_KEYS, and
    MISMATCH_KEYS with behaviour_logp)."""
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)                    # [N, 1]
    pg, ratio, low, high = surrogate(logp, old_logp, adv, mask, cfg)
    weight = torch.ones_like(logp)
    capped = torch.zeros_like(logp)
    mis: dict[str, float] = {}
    if behaviour_logp is not None:
        pi_old = trainer_logp if trainer_logp is not None else old_logp
        if cfg.tis_cap is not None:   # against old_logp: 1 when the ratio is taken against mu itself
            raw = torch.exp((old_logp - behaviour_logp).clamp(max=20.0))  # [N, L]
            weight = raw.clamp(max=cfg.tis_cap).detach()
            capped = (raw > cfg.tis_cap).to(logp.dtype)
            pg = pg * weight
        keep, mis = mismatch(pi_old.detach(), behaviour_logp, mask, cfg)
        pg = pg * keep
    elif cfg.token_mask is not None or cfg.seq_mask is not None:
        raise ValueError("train.loss.token_mask and seq_mask need the engine's log-probs (behaviour_logp)")
    kl = torch.zeros_like(logp)
    if cfg.beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp")
        kl = k3_kl(ref_logp, logp)                                  # k3, >= 0, clamped
    loss_pg = _aggregate(pg, mask, cfg, n_total, tokens_total, dr_grpo_sequences)
    loss_kl = _aggregate(kl, mask, cfg, n_total, tokens_total, dr_grpo_sequences)
    loss = loss_pg + cfg.beta * loss_kl
    loss_ent = torch.zeros((), dtype=logp.dtype, device=logp.device)
    if cfg.entropy_coef:
        if entropy is None:
            raise ValueError("entropy_coef needs the policy's entropy")
        loss_ent = _aggregate(entropy, mask, cfg, n_total, tokens_total, dr_grpo_sequences)
        loss = loss - cfg.entropy_coef * loss_ent
    with torch.no_grad():
        tok = mask.sum().clamp(min=1)
        k3_old = k3_kl(logp.detach(), old_logp)                      # KL(pi_old || pi_theta), k3, >= 0
        tmean = lambda x: float((x.detach() * mask).sum() / tok) if x is not None else float("nan")  # noqa: E731
        metrics = {
            "loss/policy": float(loss_pg),
            "loss/kl": float(loss_kl),
            "loss/entropy": float(loss_ent),
            "loss/total": float(loss),
            "clip/frac_low": tmean(low),
            "clip/frac_high": tmean(high),
            "clip/frac": tmean(low + high),
            "entropy": tmean(entropy),
            "entropy/low_frac": tmean((entropy < cfg.entropy_low).to(mask.dtype)) if entropy is not None
            else float("nan"),
            "entropy/top1_prob": tmean(top1),
            "kl": tmean(k3_old),
            "ratio/mean": tmean(ratio),
            "kl/max": float(kl.detach().masked_fill(mask == 0, 0.0).max()) if mask.numel() else 0.0,
            "ratio/max": float(ratio.detach().masked_fill(mask == 0, 0.0).max()) if mask.numel() else 0.0,
            "tis/weight_mean": tmean(weight),
            "tis/frac_capped": tmean(capped),
            **mis,
        }
    return loss, metrics
