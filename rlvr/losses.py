"""Extra losses beside the policy loss (rlvr.grpo): pure torch, used by rlvr-train's trainer only.

A step's loss is the RL loss plus, for each extra loss in the step's batch, its weight times
its loss on sequences of its own (an SFT set; a teacher's scores of the student's own
completions):

    loss/total = loss/rl + sum over extra losses of weight x loss/<name>

Every extra loss is one function in EXTRA_LOSSES, called per micro-batch as

    fn(logp, mask, tokens_total, payload, sequences_total=..., **options) -> (loss, metrics)

logp [N, L]: the policy's log-probs of the sequences' completion tokens (taken by the trainer
as for the RL loss: the chunked selective log-softmax, at the ExtraBatch's temperature, 1
unless the loss sets another); mask [N, L]: 1 on
real completion tokens; tokens_total and sequences_total: the completion tokens and the
sequences of the whole (mini-)batch the micro-batch belongs to, over all ranks, so that
micro-batches and ranks add up to the batch's loss; payload: per-sequence extras of the loss,
right-padded into [N, L, ...] tensors (e.g. a teacher's top-k token ids and log-probs);
options: the loss's settings (rlvr.train.extras.ExtraBatch.options). The loss is a scalar
with a graph; the metrics are floats under the loss's own names, `loss/<name>` (the
unweighted loss) and `<name>/...`, each the micro-batch's share of the batch's value like the
loss itself: they are summed over micro-batches and ranks. The trainer (rlvr.train.extras) splits each extra
loss's sequences into the step's mini-batches, ranks and micro-batches, scales its loss by
the weight and backpropagates it with the RL loss's gradient, before one optimizer step.

A new loss is one function here and one entry in EXTRA_LOSSES; what it needs beyond the
completion tokens' log-probs travels in the payload, and a loss that needs the policy's
log-probs at other token ids (a teacher's top-k) names them in the payload as `target_ids`
[L_i, K]: the trainer then passes the policy's log-probs at those ids as
payload["target_logprobs"] [N, L, K], with their graph (rlvr.train.extras).

Distillation (`distill`, rlvr-train's train.distill) is one such loss: a teacher's top-k
log-probs at each position of the student's own completion (rlvr.train.distill) against the
policy's log-probs at the same ids.

Shapes: N sequences in the micro-batch, L completion positions (right-padded).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch


def sft_loss(logp: torch.Tensor, mask: torch.Tensor, tokens_total: float, payload: dict | None = None,
             sequences_total: int | None = None) -> tuple[torch.Tensor, dict[str, float]]:
    """Supervised fine-tuning: the token-mean negative log-likelihood of the completions.

    logp, mask [N, L]; tokens_total: the batch's completion tokens (the mean's denominator).
    Returns (loss: this micro-batch's share of the batch's mean NLL, {"loss/sft": float})."""
    mask = mask.to(logp.dtype)
    nll = -(logp * mask).sum() / max(float(tokens_total), 1.0)     # scalar
    return nll, {"loss/sft": float(nll.detach())}


DISTILL_LOSSES = ("jsd", "kl")
AGGREGATES = ("sequence", "token")
_FLOOR = -1e4   # log-probs below it (a teacher's -inf entries) count as probability 0


def distill_loss(logp: torch.Tensor, mask: torch.Tensor, tokens_total: float, payload: dict,
                 sequences_total: int | None = None, *, loss: str = "jsd", beta: float = 0.5,
                 temperature: float = 1.0, aggregate: str = "sequence") -> tuple[torch.Tensor, dict[str, float]]:
    """Distillation to a teacher's top-k at each position of the student's own completions.

    payload: target_logprobs [N, L, K] (the policy's log-probs, at `temperature`, of the
    teacher's top-k ids, with their graph), teacher_logprobs [N, L, K] (the teacher's own
    log-probs of them, at temperature 1, as engines report them; -inf: no entry, e.g. an id
    the policy has no row for) and teacher_token_logprobs [N, L] (the teacher's log-prob of
    the completion's own token).

    An entry with teacher log-prob -inf (or NaN) is left out of the loss: the sums below run
    over the remaining entries and q is renormalised over them, so the loss equals the loss
    with those entries removed, whatever the divergence (a position with no entry left adds 0).

    The teacher's distribution is its top-k renormalised at the temperature,
    q_k = softmax_k(teacher_logprobs / temperature) (exact: the normaliser cancels); the
    student's is its full-vocabulary probability p_k of the same ids. Per token:

        kl:  sum_k q_k (log q_k - log p_k)                         forward KL(teacher || student)
        jsd: sum_k beta q_k log(q_k / m_k) + (1 - beta) p_k log(p_k / m_k),
             m_k = beta q_k + (1 - beta) p_k                        GKD's generalised JSD(beta)

    (the users' GKD and OPSD losses; TRL's GKDTrainer with beta = jsd_beta over the full
    vocabulary). Each term is >= 0 and 0 exactly at p_k = q_k. `aggregate` sequence: the mean
    over each sequence's tokens, then over sequences (theirs); token: over all tokens (TRL's).

    Metrics, as token means: distill/kl (the KL above, whatever the loss), distill/jsd (with
    loss jsd), distill/student_logprob and distill/teacher_logprob (of the completion's tokens),
    distill/teacher_topk_mass (the teacher's probability in its top-k, temperature 1)."""
    if loss not in DISTILL_LOSSES:
        raise ValueError(f"unknown distillation loss {loss!r} ({', '.join(DISTILL_LOSSES)})")
    if aggregate not in AGGREGATES:
        raise ValueError(f"unknown aggregate {aggregate!r} ({', '.join(AGGREGATES)})")
    mask = mask.to(logp.dtype)                                                   # [N, L]
    s_log = payload["target_logprobs"].float()                                   # [N, L, K]
    t_in = payload["teacher_logprobs"].to(s_log.device, torch.float32)           # [N, L, K]
    valid = t_in > float("-inf")                                                 # [N, L, K]: False at -inf, NaN
    t_raw = torch.where(valid, t_in.clamp(min=_FLOOR), 0.0)                      # [N, L, K]
    # q over the valid entries only (a row with none: all zeros); q_log 0 where left out
    q_log = torch.log_softmax(torch.where(valid, t_raw / temperature, float("-inf")), dim=-1)
    q_log = torch.where(valid, q_log, 0.0)                                       # [N, L, K]
    q = torch.where(valid, q_log.exp(), 0.0)
    s_in = torch.where(valid, s_log, 0.0)                                        # the student's, where kept
    kl = (q * (q_log - s_in)).sum(-1)                                            # [N, L]
    per_token = kl
    jsd = None
    if loss == "jsd":
        if not 0.0 < beta < 1.0:
            raise ValueError(f"jsd beta must be in (0, 1), got {beta}")
        m_log = torch.logaddexp(q_log + math.log(beta), s_in + math.log1p(-beta))   # [N, L, K]
        terms = beta * q * (q_log - m_log) + (1.0 - beta) * s_in.exp() * (s_in - m_log)
        jsd = torch.where(valid, terms, 0.0).sum(-1)                             # [N, L]
        per_token = jsd
    tokens = max(float(tokens_total), 1.0)
    if aggregate == "sequence":
        per_seq = (per_token * mask).sum(1) / mask.sum(1).clamp(min=1)           # [N]
        value = per_seq.sum() / max(sequences_total if sequences_total is not None else mask.shape[0], 1)
    else:
        value = (per_token * mask).sum() / tokens
    with torch.no_grad():
        mean = lambda x: float((x.detach().float() * mask).sum() / tokens)     # noqa: E731 - the batch's token-mean share
        metrics = {"loss/distill": float(value.detach()), "distill/kl": mean(kl),
                   "distill/student_logprob": mean(logp),
                   "distill/teacher_logprob": mean(payload["teacher_token_logprobs"].to(mask.device).clamp(min=_FLOOR)),
                   "distill/teacher_topk_mass": mean(torch.where(valid, t_raw.exp(), 0.0).sum(-1))}
        if jsd is not None:
            metrics["distill/jsd"] = mean(jsd)
    return value, metrics


ExtraLossFn = Callable[..., tuple[torch.Tensor, dict[str, float]]]

EXTRA_LOSSES: dict[str, ExtraLossFn] = {
    "sft": sft_loss,
    "distill": distill_loss,
}
