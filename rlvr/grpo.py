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
from rlvr.train.config_trainer import LOSS_TYPES, LossConfig

METRIC_KEYS = ("loss/policy", "loss/kl", "loss/total", "clip/frac", "clip/frac_low", "clip/frac_high",
               "entropy", "kl", "kl/max", "ratio/mean", "ratio/max", "tis/weight_mean", "tis/frac_capped")
STDS = ("unbiased", "population")


def group_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-4, std: str = "unbiased"
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards [B, G] -> (advantages [B, G], zero_std [B] bool).

    scale: "group" divides by the group's std (GRPO), "none" does not (Dr. GRPO).
    std: "unbiased" (divides the squared deviations by G - 1) or "population" (by G).
    """
    if std not in STDS:
        raise ValueError(f"unknown std {std!r} ({', '.join(STDS)})")
    mean = rewards.mean(dim=1, keepdim=True)                       # [B, 1]
    g = rewards.shape[1]
    sd = rewards.std(dim=1, keepdim=True, correction=int(std == "unbiased")) if g > 1 else torch.zeros_like(mean)
    adv = rewards - mean                                            # [B, G]
    if scale == "group":
        adv = adv / (sd + eps)                                      # sd [B, 1]
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r} (group, none)")
    zero_std = (rewards.max(dim=1).values - rewards.min(dim=1).values) == 0  # [B]
    return adv, zero_std


def _gather(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """logits [..., V] at targets [...] -> [...], or at targets [..., K] (several ids per
    position, e.g. a teacher's top-k) -> [..., K]."""
    if targets.dim() == logits.dim():
        return logits.gather(-1, targets)
    return logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1)


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [..., V] predicting targets [...] -> (logp [...], entropy [...] or None); targets
    [..., K] give logp [..., K]. Works on whatever it is given at once: selective_logprobs feeds
    it one chunk at a time."""
    logits = logits.float()
    logz = torch.logsumexp(logits, dim=-1)                          # [...]
    multi = targets.dim() == logits.dim()
    logp = _gather(logits, targets) - (logz.unsqueeze(-1) if multi else logz)  # [...] or [..., K]
    ent = None
    if with_entropy:
        with torch.no_grad():                                       # a diagnostic: no graph
            lg = logits.detach()
            p = torch.exp(lg - logz.detach().unsqueeze(-1))         # [..., V]
            ent = logz.detach() - torch.einsum("...v,...v->...", p, lg)
    return logp, ent


class _ChunkLogprobs(torch.autograd.Function):
    """One chunk's log-probs (and entropy) with a hand-written backward that recomputes the
    chunk's logits and turns them into their gradient in place: one [C, V] float32 buffer in
    the backward pass, about two in the forward pass, none kept between them."""

    @staticmethod
    def forward(ctx, h, w, b, t, temperature, with_entropy, dtype):
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
        ctx.save_for_backward(h, w, b, t, logz)
        ctx.temperature, ctx.dtype = temperature, dtype
        ctx.mark_non_differentiable(*([ent] if ent is not None else []))
        return lp, (ent if ent is not None else lp.new_zeros(0))

    @staticmethod
    def backward(ctx, g, _g_ent):
        h, w, b, t, logz = ctx.saved_tensors
        dt = ctx.dtype
        with torch.autocast(h.device.type, enabled=False):
            hc, wc = h.to(dt), w.to(dt)
            grad = F.linear(hc, wc, None if b is None else b.to(dt)).float()     # [C, V] logits again
            if ctx.temperature != 1.0:
                grad.div_(ctx.temperature)
            # d lp / d logits = onehot(t) - softmax, times g, divided by the temperature (with
            # K targets per row, [C, K]: the softmax term takes the sum of their g)
            multi = t.dim() == 2
            grad.sub_(logz.unsqueeze(-1)).exp_().mul_(-(g.sum(-1) if multi else g).unsqueeze(-1))
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
                       chunk_size: int | None = 1024, with_entropy: bool = False, bias: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Log-probs of targets under softmax((hidden @ weight.T + bias) / temperature), without
    the full [T, V] logits: hidden [T, H] (the positions that predict the targets), weight
    [V, H] (the output layer), targets [T] -> (logp [T], entropy [T] detached, or None);
    targets [T, K] (several ids per position) give logp [T, K].

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
    return logp, torch.cat(ents) if ents else torch.zeros_like(logp)


KL_LOG_RATIO_CLAMP = 20.0   # verl's low_var_kl: the log-ratio is clamped to [-20, 20] ...
KL_VALUE_CLAMP = 10.0       # ... and the k3 value to [-10, 10] (it is >= 0)


def k3_kl(ref_logp: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
    """The k3 estimate of KL(pi || ref) per token, exp(d) - d - 1 with d = ref - logp, clamped
    as verl's low_var_kl (d to [-20, 20], the value to <= 10): no overflow on tokens the
    policy has moved far from the reference (a clamped token passes no gradient)."""
    d = (ref_logp - logp).clamp(-KL_LOG_RATIO_CLAMP, KL_LOG_RATIO_CLAMP)
    return (torch.exp(d) - d - 1).clamp(max=KL_VALUE_CLAMP)


def _aggregate(x: torch.Tensor, mask: torch.Tensor, cfg: LossConfig, n_total: int | None = None,
               tokens_total: float | None = None, dr_grpo_sequences: float | None = None) -> torch.Tensor:
    """x, mask [N, L] -> scalar, per cfg.loss_type. n_total/tokens_total: the whole batch's
    sequence and token counts when x is one micro-batch of it (gradient accumulation).
    dr_grpo_sequences: Dr. GRPO's constant number of sequences (the configured samples per
    mini-batch); default: n_total."""
    n = n_total if n_total is not None else x.shape[0]
    if cfg.loss_type == "grpo":
        per_seq = (x * mask).sum(1) / mask.sum(1).clamp(min=1)      # [N]
        return per_seq.sum() / n
    if cfg.loss_type == "dapo":
        t = tokens_total if tokens_total is not None else mask.sum().clamp(min=1)
        return (x * mask).sum() / t
    if cfg.loss_type == "dr_grpo":
        if not cfg.max_tokens:
            raise ValueError("loss_type dr_grpo needs max_tokens (its constant normaliser)")
        seqs = dr_grpo_sequences if dr_grpo_sequences else n
        return (x * mask).sum() / (seqs * cfg.max_tokens)
    raise ValueError(f"unknown loss_type {cfg.loss_type!r} ({', '.join(LOSS_TYPES)})")


def policy_loss(
    logp: torch.Tensor,                 # [N, L] current policy
    old_logp: torch.Tensor,             # [N, L] trainer policy before the batch's first update (detached)
    advantages: torch.Tensor,           # [N]
    mask: torch.Tensor,                 # [N, L] 1 = completion token that counts
    cfg: LossConfig,
    behaviour_logp: torch.Tensor | None = None,  # [N, L] the sampling engine's logprobs
    ref_logp: torch.Tensor | None = None,        # [N, L] reference policy (beta > 0)
    entropy: torch.Tensor | None = None,         # [N, L]
    n_total: int | None = None,
    tokens_total: float | None = None,
    dr_grpo_sequences: float | None = None,      # dr_grpo: the constant sequence count (configured)
) -> tuple[torch.Tensor, dict[str, float]]:
    """The GRPO loss of a (micro-)batch and its detached diagnostics."""
    mask = mask.to(logp.dtype)
    adv = advantages.to(logp.dtype).unsqueeze(1)                    # [N, 1]
    ratio = torch.exp(logp - old_logp)                              # [N, L]
    clipped = torch.clamp(ratio, 1 - cfg.clip_low, 1 + cfg.clip_high)
    pg = -torch.minimum(ratio * adv, clipped * adv)                 # [N, L]
    weight = torch.ones_like(logp)
    capped = torch.zeros_like(logp)
    if cfg.tis_cap is not None and behaviour_logp is not None:
        raw = torch.exp((old_logp - behaviour_logp).clamp(max=20.0))  # [N, L]
        weight = raw.clamp(max=cfg.tis_cap).detach()
        capped = (raw > cfg.tis_cap).to(logp.dtype)
        pg = pg * weight
    kl = torch.zeros_like(logp)
    if cfg.beta > 0:
        if ref_logp is None:
            raise ValueError("beta > 0 needs ref_logp")
        kl = k3_kl(ref_logp, logp)                                  # k3, >= 0, clamped
    loss_pg = _aggregate(pg, mask, cfg, n_total, tokens_total, dr_grpo_sequences)
    loss_kl = _aggregate(kl, mask, cfg, n_total, tokens_total, dr_grpo_sequences)
    loss = loss_pg + cfg.beta * loss_kl
    with torch.no_grad():
        tok = mask.sum().clamp(min=1)
        low = ((ratio < 1 - cfg.clip_low) & (adv < 0)).to(logp.dtype)
        high = ((ratio > 1 + cfg.clip_high) & (adv > 0)).to(logp.dtype)
        k3_old = k3_kl(logp.detach(), old_logp)                      # KL(pi_old || pi_theta), k3, >= 0
        metrics = {
            "loss/policy": float(loss_pg),
            "loss/kl": float(loss_kl),
            "loss/total": float(loss),
            "clip/frac_low": float((low * mask).sum() / tok),
            "clip/frac_high": float((high * mask).sum() / tok),
            "clip/frac": float(((low + high) * mask).sum() / tok),
            "entropy": float((entropy * mask).sum() / tok) if entropy is not None else float("nan"),
            "kl": float((k3_old * mask).sum() / tok),
            "ratio/mean": float((ratio * mask).sum() / tok),
            "kl/max": float(kl.detach().masked_fill(mask == 0, 0.0).max()) if mask.numel() else 0.0,
            "ratio/max": float(ratio.detach().masked_fill(mask == 0, 0.0).max()) if mask.numel() else 0.0,
            "tis/weight_mean": float((weight * mask).sum() / tok),
            "tis/frac_capped": float((capped * mask).sum() / tok),
        }
    return loss, metrics
