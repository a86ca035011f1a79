"""GRPO advantages and loss: pure torch functions, used by rlvr-train's trainer only.

What this GRPO is, precisely:
- Advantages are group-relative: for the G samples of one prompt with rewards r_1..r_G,
  A_i = r_i - mean(r), divided by std(r) (unbiased, + eps) unless scale="none" (Dr. GRPO).
  The sequence's advantage applies to each of its tokens.
- The policy loss per token is PPO's clipped surrogate with separate bounds (DAPO's
  clip-higher): -min(rho * A, clip(rho, 1 - clip_low, 1 + clip_high) * A), where
  rho = pi_theta / pi_old and pi_old is the trainer's own policy at the start of the step.
- Off-policy correction (truncated importance sampling): the engine that sampled the tokens
  (behaviour policy mu: a different numeric implementation, possibly an older version) is
  corrected with the weight w = min(pi_old / mu, tis_cap), detached, multiplying each token's
  loss. tis_cap = None turns it off.
- KL to a frozen reference with the k3 estimator exp(ref - logp) - (ref - logp) - 1, times
  beta (no reference is needed when beta = 0).
- Aggregation (`loss_type`): "grpo" averages tokens within each sequence, then sequences;
  "dapo" averages over all tokens of the batch (token level); "dr_grpo" sums tokens and divides
  by (number of sequences x max_tokens), a constant.
Shapes: N sequences in the micro-batch, L completion positions (right-padded); mask is 1 on
real completion tokens.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

LOSS_TYPES = ("grpo", "dapo", "dr_grpo")
METRIC_KEYS = ("loss/policy", "loss/kl", "loss/total", "clip/frac", "clip/frac_low", "clip/frac_high",
               "entropy", "ratio/mean", "tis/weight_mean", "tis/frac_capped")


def group_advantages(rewards: torch.Tensor, scale: str = "group", eps: float = 1e-4) -> tuple[torch.Tensor, torch.Tensor]:
    """rewards [B, G] -> (advantages [B, G], zero_std [B] bool).

    scale: "group" divides by the group's std (GRPO), "none" does not (Dr. GRPO).
    """
    mean = rewards.mean(dim=1, keepdim=True)                       # [B, 1]
    g = rewards.shape[1]
    std = rewards.std(dim=1, keepdim=True) if g > 1 else torch.zeros_like(mean)  # [B, 1]
    adv = rewards - mean                                            # [B, G]
    if scale == "group":
        adv = adv / (std + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r} (group, none)")
    zero_std = (rewards.max(dim=1).values - rewards.min(dim=1).values) == 0  # [B]
    return adv, zero_std


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor, with_entropy: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor | None]:
    """logits [N, L, V] predicting targets [N, L] -> (logp [N, L], entropy [N, L] or None)."""
    logits = logits.float()
    logz = torch.logsumexp(logits, dim=-1)                          # [N, L]
    logp = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1) - logz  # [N, L]
    ent = None
    if with_entropy:
        p = torch.softmax(logits, dim=-1)                           # [N, L, V]
        ent = logz - (p * logits).sum(-1)                           # [N, L]
    return logp, ent


@dataclass
class LossConfig:
    loss_type: str = "grpo"
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0
    tis_cap: float | None = 2.0
    max_tokens: int = 256          # dr_grpo's constant normaliser


def _aggregate(x: torch.Tensor, mask: torch.Tensor, cfg: LossConfig, n_total: int | None = None,
               tokens_total: float | None = None) -> torch.Tensor:
    """x, mask [N, L] -> scalar, per cfg.loss_type. n_total/tokens_total: the whole batch's
    sequence and token counts when x is one micro-batch of it (gradient accumulation)."""
    n = n_total if n_total is not None else x.shape[0]
    if cfg.loss_type == "grpo":
        per_seq = (x * mask).sum(1) / mask.sum(1).clamp(min=1)      # [N]
        return per_seq.sum() / n
    if cfg.loss_type == "dapo":
        t = tokens_total if tokens_total is not None else mask.sum().clamp(min=1)
        return (x * mask).sum() / t
    if cfg.loss_type == "dr_grpo":
        return (x * mask).sum() / (n * cfg.max_tokens)
    raise ValueError(f"unknown loss_type {cfg.loss_type!r} ({', '.join(LOSS_TYPES)})")


def policy_loss(
    logp: torch.Tensor,                 # [N, L] current policy
    old_logp: torch.Tensor,             # [N, L] trainer policy at the start of the step (detached)
    advantages: torch.Tensor,           # [N]
    mask: torch.Tensor,                 # [N, L] 1 = completion token that counts
    cfg: LossConfig,
    behaviour_logp: torch.Tensor | None = None,  # [N, L] the sampling engine's logprobs
    ref_logp: torch.Tensor | None = None,        # [N, L] reference policy (beta > 0)
    entropy: torch.Tensor | None = None,         # [N, L]
    n_total: int | None = None,
    tokens_total: float | None = None,
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
        d = ref_logp - logp
        kl = torch.exp(d) - d - 1                                   # k3, >= 0
    loss_pg = _aggregate(pg, mask, cfg, n_total, tokens_total)
    loss_kl = _aggregate(kl, mask, cfg, n_total, tokens_total)
    loss = loss_pg + cfg.beta * loss_kl
    with torch.no_grad():
        tok = mask.sum().clamp(min=1)
        low = ((ratio < 1 - cfg.clip_low) & (adv < 0)).to(logp.dtype)
        high = ((ratio > 1 + cfg.clip_high) & (adv > 0)).to(logp.dtype)
        metrics = {
            "loss/policy": float(loss_pg),
            "loss/kl": float(loss_kl),
            "loss/total": float(loss),
            "clip/frac_low": float((low * mask).sum() / tok),
            "clip/frac_high": float((high * mask).sum() / tok),
            "clip/frac": float(((low + high) * mask).sum() / tok),
            "entropy": float((entropy * mask).sum() / tok) if entropy is not None else float("nan"),
            "ratio/mean": float((ratio * mask).sum() / tok),
            "tis/weight_mean": float((weight * mask).sum() / tok),
            "tis/frac_capped": float((capped * mask).sum() / tok),
        }
    return loss, metrics
