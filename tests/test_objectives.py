"""The field's objectives, advantage estimators, off-policy masks and entropy terms of rlvr.grpo,
each against a reference written here from its paper's formula with plain Python loops over
hand-made tensors (values and gradients), and the metric names they put in the trace."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.grpo import (METRIC_KEYS, MISMATCH_KEYS, LossConfig, group_advantages, policy_loss, selective_logprobs,
                       token_logprobs)

# two sequences of 3 and 2 real tokens (the second right-padded)
MASK = [[1, 1, 1], [1, 1, 0]]
OLD = [[-1.0, -0.5, -2.0], [-0.3, -1.2, 0.0]]
NEW = [[-0.7, -0.6, -1.5], [-0.9, -1.1, 0.0]]   # ratios e^.3, e^-.1, e^.5 | e^-.6, e^.1
ADV = [1.5, -0.8]


def tensors():
    logp = torch.tensor(NEW, dtype=torch.float64, requires_grad=True)
    return logp, torch.tensor(OLD, dtype=torch.float64), torch.tensor(ADV, dtype=torch.float64), \
        torch.tensor(MASK, dtype=torch.float64)


def cfg(**kw) -> LossConfig:
    return LossConfig(tis_cap=None, **kw)


def grad_of(loss, x):
    (g,) = torch.autograd.grad(loss, x)
    return g


def clip(x, lo, hi):
    return min(max(x, lo), hi)


def reference_grad(f, values):
    """d f / d values[i][t], by central differences on the Python reference (float64)."""
    out = []
    for i, row in enumerate(values):
        out.append([])
        for t in range(len(row)):
            h = 1e-6
            up = [list(r) for r in values]
            dn = [list(r) for r in values]
            up[i][t] += h
            dn[i][t] -= h
            out[-1].append((f(up) - f(dn)) / (2 * h))
    return torch.tensor(out, dtype=torch.float64)


def lens():
    return [sum(m) for m in MASK]


# -- objectives -----------------------------------------------------------------------------

def gspo_reference(new, eps_low=0.1, eps_high=0.2):
    """GSPO (Zheng et al. 2025, eq. 5-7): s_i = (pi/pi_old)^(1/|y_i|) = exp(mean_t log ratio);
    J = 1/G sum_i min(s_i A_i, clip(s_i, 1 - eps, 1 + eps) A_i); the loss is -J."""
    total = 0.0
    for i in range(len(new)):
        n = lens()[i]
        s = math.exp(sum(new[i][t] - OLD[i][t] for t in range(n)) / n)
        total += min(s * ADV[i], clip(s, 1 - eps_low, 1 + eps_high) * ADV[i])
    return -total / len(new)


def test_gspo_is_the_sequence_level_clipped_ratio():
    logp, old, adv, mask = tensors()
    loss, m = policy_loss(logp, old, adv, mask, cfg(loss_type="gspo", clip_low=0.1, clip_high=0.2))
    assert loss.item() == pytest.approx(gspo_reference(NEW))
    assert torch.allclose(grad_of(loss, logp), reference_grad(gspo_reference, NEW) * mask, atol=1e-7)
    # sequence 0: s = e^(.7/3) = 1.263 > 1.2 with A > 0: clipped, all its tokens lose their gradient
    assert grad_of(policy_loss(logp, old, adv, mask, cfg(loss_type="gspo", clip_low=0.1, clip_high=0.2))[0],
                   logp)[0].abs().max() == 0
    # sequence 1: s = e^(-.5/2) = .78 < .9 with A < 0: clipped low
    assert m["clip/frac_high"] == pytest.approx(3 / 5) and m["clip/frac_low"] == pytest.approx(2 / 5)
    # the trace's ratio is the sequence's at each token
    assert m["ratio/max"] == pytest.approx(math.exp(0.7 / 3))


def test_gspo_on_policy_has_grpos_gradient():
    """At ratio 1 (one update per batch) GSPO's gradient is GRPO's: A_i times the mean over the
    sequence's tokens of grad log pi."""
    logp, _, adv, mask = tensors()
    old = logp.detach().clone()
    g_gspo = grad_of(policy_loss(logp, old, adv, mask, cfg(loss_type="gspo"))[0], logp)
    g_grpo = grad_of(policy_loss(logp, old, adv, mask, cfg(loss_type="grpo"))[0], logp)
    assert torch.allclose(g_gspo, g_grpo)


def cispo_reference_value_and_grad(eps_low=0.2, eps_high=0.2):
    """CISPO (MiniMax-M1 2025, eq. 4): J = 1/sum_i |o_i| sum_i sum_t sg(r_hat_it) A_i log pi(o_it),
    r_hat = clip(r, 1 - eps_low, 1 + eps_high); the loss is -J, its gradient -r_hat A / T."""
    T = sum(lens())
    value, grad = 0.0, [[0.0] * 3 for _ in MASK]
    for i in range(len(MASK)):
        for t in range(lens()[i]):
            w = clip(math.exp(NEW[i][t] - OLD[i][t]), 1 - eps_low, 1 + eps_high)
            value -= w * ADV[i] * NEW[i][t] / T
            grad[i][t] = -w * ADV[i] / T
    return value, torch.tensor(grad, dtype=torch.float64)


def test_cispo_clips_the_weight_not_the_gradient():
    logp, old, adv, mask = tensors()
    loss, m = policy_loss(logp, old, adv, mask, cfg(loss_type="cispo", clip_low=0.2, clip_high=0.2))
    value, grad = cispo_reference_value_and_grad()
    assert loss.item() == pytest.approx(value)
    g = grad_of(loss, logp)
    assert torch.allclose(g, grad)
    # token (0, 2): ratio e^.5 = 1.65 > 1.2 with A > 0: PPO drops its gradient, CISPO keeps 1.2 A / T
    assert g[0, 2].item() == pytest.approx(-1.2 * 1.5 / 5)
    ppo = grad_of(policy_loss(logp, old, adv, mask, cfg(loss_type="dapo"))[0], logp)
    assert ppo[0, 2].item() == 0.0
    # clipped weights, whatever A's sign: (0, 0) e^.3 and (0, 2) e^.5 high, (1, 0) e^-.6 low
    assert m["clip/frac_high"] == pytest.approx(2 / 5) and m["clip/frac_low"] == pytest.approx(1 / 5)


def sapo_reference(new, tau_pos=1.0, tau_neg=1.05):
    """SAPO (Gao et al. 2025): J = 1/G sum_i 1/|y_i| sum_t f(r_it) A_i, f(r) = 4/tau sigmoid(tau (r - 1)),
    tau = tau_pos for A > 0, tau_neg otherwise; the loss is -J."""
    total = 0.0
    for i in range(len(new)):
        tau = tau_pos if ADV[i] > 0 else tau_neg
        n = lens()[i]
        total += sum(4 / tau / (1 + math.exp(-tau * (math.exp(new[i][t] - OLD[i][t]) - 1))) * ADV[i]
                     for t in range(n)) / n
    return -total / len(new)


def test_sapo_is_a_sigmoid_gated_soft_clip():
    logp, old, adv, mask = tensors()
    loss, _ = policy_loss(logp, old, adv, mask, cfg(loss_type="sapo"))
    assert loss.item() == pytest.approx(sapo_reference(NEW))
    g = grad_of(loss, logp)
    assert torch.allclose(g, reference_grad(sapo_reference, NEW) * mask, atol=1e-7)
    # on policy its gradient is GRPO's (the gate's slope is 1 at r = 1) ...
    on = logp.detach().clone()
    g_sapo = grad_of(policy_loss(logp, on, adv, mask, cfg(loss_type="sapo", sapo_tau_neg=3.0))[0], logp)
    g_grpo = grad_of(policy_loss(logp, on, adv, mask, cfg(loss_type="grpo"))[0], logp)
    assert torch.allclose(g_sapo, g_grpo)
    # ... and off policy it decays smoothly, never to zero: token (0, 2) at r = e^.5
    r = math.exp(0.5)
    s = 1 / (1 + math.exp(-(r - 1)))
    assert g[0, 2].item() == pytest.approx(-1.5 * 4 * s * (1 - s) * r / 3 / 2)
    assert 0 < abs(g[0, 2].item()) < 1.5 * r / 3 / 2


# -- advantages -----------------------------------------------------------------------------

REWARDS = [[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 0.0], [0.5, 0.5, 0.5, 0.5]]


def std(xs, ddof=1):
    mu = sum(xs) / len(xs)
    return math.sqrt(sum((x - mu) ** 2 for x in xs) / (len(xs) - ddof))


def test_rloo_is_the_leave_one_out_baseline():
    r = torch.tensor(REWARDS)
    adv, zero = group_advantages(r, "none", estimator="rloo")
    for b, row in enumerate(REWARDS):
        for i, x in enumerate(row):
            others = [y for j, y in enumerate(row) if j != i]
            assert adv[b, i].item() == pytest.approx(x - sum(others) / len(others), abs=1e-6)
    assert zero.tolist() == [False, False, True]
    scaled, _ = group_advantages(r, "group", estimator="rloo")   # scale_rewards group: / the group's std
    for b, row in enumerate(REWARDS):
        for i in range(4):
            assert scaled[b, i].item() == pytest.approx(adv[b, i].item() / (std(row) + 1e-4), abs=1e-5)


def test_reinforce_pp_normalises_over_the_batch():
    r = torch.tensor(REWARDS)
    centred = [[x - sum(row) / len(row) for x in row] for row in REWARDS]
    flat = [x for row in centred for x in row]
    mu, sd = sum(flat) / len(flat), std(flat)
    adv, _ = group_advantages(r, "group", estimator="reinforce_pp")
    for b in range(3):
        for i in range(4):
            assert adv[b, i].item() == pytest.approx((centred[b][i] - mu) / (sd + 1e-4), abs=1e-5)
    # not the group's std: group 0 (std .577) and group 1 (std .5) share the batch's scale
    assert adv[0, 0].item() / centred[0][0] == pytest.approx(adv[1, 0].item() / centred[1][0], rel=1e-5)
    pop, _ = group_advantages(r, "group", std="population", estimator="reinforce_pp")
    assert pop[0, 0].item() == pytest.approx(centred[0][0] / (std(flat, ddof=0) + 1e-4), abs=1e-5)
    plain, _ = group_advantages(r, "none", estimator="reinforce_pp")   # scale_rewards none: the baseline alone
    assert plain.flatten().tolist() == pytest.approx([x for row in centred for x in row])


def test_grpo_estimator_is_unchanged_and_bad_names_fail():
    r = torch.tensor(REWARDS)
    assert torch.equal(group_advantages(r, "group")[0], group_advantages(r, "group", estimator="grpo")[0])
    with pytest.raises(ValueError, match="estimator"):
        group_advantages(r, estimator="ppo")


# -- off-policy masks and the mismatch metrics ----------------------------------------------

BEH = [[-1.5, -0.4, -1.0], [-0.2, -1.3, 0.0]]   # rho = pi_old/mu: e^.5, e^-.1, e^-1 | e^-.1, e^.1


def test_token_mask_drops_tokens_outside_the_band():
    logp, old, adv, mask = tensors()
    beh = torch.tensor(BEH, dtype=torch.float64)
    c = cfg(loss_type="dapo", token_mask=[0.5, 1.5])
    loss, m = policy_loss(logp, old, adv, mask, c, behaviour_logp=beh)
    # kept: every token but (0, 0) (rho 1.65) and (0, 2) (rho 0.37); the normaliser stays 5 tokens
    keep = [[0, 1, 0], [1, 1, 0]]
    value = 0.0
    for i in range(2):
        for t in range(3):
            if keep[i][t]:
                r = math.exp(NEW[i][t] - OLD[i][t])
                value -= min(r * ADV[i], clip(r, 0.8, 1.2) * ADV[i]) / 5
    assert loss.item() == pytest.approx(value)
    g = grad_of(loss, logp)
    assert g[0, 0] == 0 and g[0, 2] == 0 and g[0, 1] != 0 and g[1, 1] != 0   # (1, 0) is PPO-clipped anyway
    assert m["mismatch/token_masked_frac"] == pytest.approx(2 / 5)
    assert m["mismatch/seq_masked_frac"] == 0.0 and m["mismatch/masked_frac"] == pytest.approx(2 / 5)


def test_seq_mask_drops_a_sequence_by_its_geometric_mean_ratio():
    logp, old, adv, mask = tensors()
    beh = torch.tensor(BEH, dtype=torch.float64)
    # geometric means: seq 0 exp((.5 - .1 - 1) / 3) = e^-.2 = .819; seq 1 exp(0 / 2) = 1
    c = cfg(loss_type="grpo", seq_mask=[0.9, 1.1])
    loss, m = policy_loss(logp, old, adv, mask, c, behaviour_logp=beh)
    ref = -sum(min(math.exp(NEW[1][t] - OLD[1][t]) * ADV[1], clip(math.exp(NEW[1][t] - OLD[1][t]), .8, 1.2) * ADV[1])
               for t in range(2)) / 2 / 2
    assert loss.item() == pytest.approx(ref)
    g = grad_of(loss, logp)
    assert g[0].abs().max() == 0 and g[1, 1] != 0   # (1, 0) is PPO-clipped anyway
    assert m["mismatch/seq_masked_frac"] == pytest.approx(1 / 2) and m["mismatch/masked_frac"] == pytest.approx(3 / 5)
    wide = policy_loss(logp, old, adv, mask, cfg(loss_type="grpo", seq_mask=[0.8, 1.25]), behaviour_logp=beh)[1]
    assert wide["mismatch/seq_masked_frac"] == 0.0


def test_mismatch_metrics_match_their_definitions():
    logp, old, adv, mask = tensors()
    beh = torch.tensor(BEH, dtype=torch.float64)
    _, m = policy_loss(logp, old, adv, mask, cfg(), behaviour_logp=beh)
    k3, gap, seq_k3, seq_gap = [], [], [], []
    for i in range(2):
        n = lens()[i]
        d = [OLD[i][t] - BEH[i][t] for t in range(n)]            # log rho, tokens drawn from mu
        ks = [math.exp(x) - 1 - x for x in d]                    # k3 of KL(mu || pi_old)
        k3 += ks
        gap += [-x for x in d]
        seq_k3.append(sum(ks))
        seq_gap.append(-sum(d) / n)                              # log-ppl(pi_old) - log-ppl(mu)
    assert m["mismatch/token_kl"] == pytest.approx(sum(k3) / 5)
    assert m["mismatch/seq_kl"] == pytest.approx(sum(seq_k3) / 2)
    assert m["mismatch/token_log_ppl_gap"] == pytest.approx(sum(gap) / 5)
    assert m["mismatch/seq_log_ppl_gap"] == pytest.approx(sum(seq_gap) / 2)
    assert m["mismatch/token_masked_frac"] == 0.0


def test_masks_need_the_engines_logprobs():
    logp, old, adv, mask = tensors()
    with pytest.raises(ValueError, match="behaviour_logp"):
        policy_loss(logp, old, adv, mask, cfg(token_mask=[0.5, 2.0]))


def test_masks_use_the_trainers_pi_old_when_the_ratio_is_taken_against_the_engine():
    """ratio_to engine passes mu as old_logp: the masks still compare the trainer's pi_old to mu."""
    logp, old, adv, mask = tensors()
    beh = torch.tensor(BEH, dtype=torch.float64)
    c = cfg(loss_type="dapo", token_mask=[0.5, 1.5])
    _, m = policy_loss(logp, beh, adv, mask, c, behaviour_logp=beh, trainer_logp=old)
    assert m["mismatch/token_masked_frac"] == pytest.approx(2 / 5)


# -- entropy: the bonus, its gradient through the chunked log-softmax, and the collapse metrics --

def entropy_reference(logits):
    """H = -sum_v p_v log p_v per row, written out."""
    p = torch.softmax(logits, -1)
    return -(p * torch.log(p)).sum(-1)


@pytest.mark.parametrize("chunk", [0, 2, 16])
def test_entropy_stats_carry_the_entropys_gradient(chunk):
    torch.manual_seed(0)
    h = torch.randn(5, 4, requires_grad=True)     # float32: the log-softmax computes in float32
    w = torch.randn(7, 4, requires_grad=True)
    t = torch.tensor([0, 3, 6, 2, 2])
    lp, stats = selective_logprobs(h, w, t, temperature=0.7, chunk_size=chunk, with_entropy="stats")
    assert stats.shape == (5, 2)
    loss = (lp * torch.tensor([1.0, -2.0, 0.5, 0.3, 1.0])).sum() + (stats[:, 0] * torch.arange(1.0, 6.0)).sum()
    gh, gw = torch.autograd.grad(loss, (h, w))
    h2, w2 = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    logits = h2 @ w2.T / 0.7
    ref_lp = torch.log_softmax(logits, -1).gather(-1, t[:, None])[:, 0]
    ref_h = entropy_reference(logits)
    close = lambda a, b: torch.allclose(a, b, rtol=1e-4, atol=1e-5)   # noqa: E731
    assert close(lp, ref_lp) and close(stats[:, 0], ref_h)
    assert close(stats[:, 1], torch.softmax(logits, -1).max(-1).values)
    ref_loss = (ref_lp * torch.tensor([1.0, -2.0, 0.5, 0.3, 1.0])).sum() + (ref_h * torch.arange(1.0, 6.0)).sum()
    rh, rw = torch.autograd.grad(ref_loss, (h2, w2))
    assert close(gh, rh) and close(gw, rw)
    # True keeps its old contract: the entropy alone, detached
    _, ent = selective_logprobs(h, w, t, temperature=0.7, chunk_size=chunk, with_entropy=True)
    assert ent.shape == (5,) and not ent.requires_grad and close(ent, ref_h.detach())


def test_token_logprobs_stats_match_the_reference():
    logits = torch.log(torch.tensor([[0.5, 0.25, 0.25], [0.1, 0.1, 0.8]]))
    _, stats = token_logprobs(logits, torch.tensor([1, 2]), with_entropy="stats")
    assert stats[:, 0].tolist() == pytest.approx(entropy_reference(logits).tolist())
    assert stats[:, 1].tolist() == pytest.approx([0.5, 0.8])


def test_entropy_bonus_and_collapse_metrics():
    logp, old, adv, mask = tensors()
    ent = torch.tensor([[0.05, 1.0, 0.2], [0.01, 2.0, 9.0]], dtype=torch.float64, requires_grad=True)
    top1 = torch.tensor([[0.9, 0.3, 0.5], [0.99, 0.2, 0.0]], dtype=torch.float64)
    base, _ = policy_loss(logp, old, adv, mask, cfg(loss_type="grpo"), entropy=ent, top1=top1)
    loss, m = policy_loss(logp, old, adv, mask, cfg(loss_type="grpo", entropy_coef=0.1, entropy_low=0.1),
                          entropy=ent, top1=top1)
    mean_h = ((0.05 + 1.0 + 0.2) / 3 + (0.01 + 2.0) / 2) / 2          # per sequence, then over sequences
    assert loss.item() == pytest.approx(base.item() - 0.1 * mean_h)
    assert m["loss/entropy"] == pytest.approx(mean_h)
    g = grad_of(loss, ent)
    assert g.flatten().tolist() == pytest.approx([-0.1 / 3 / 2] * 3 + [-0.1 / 2 / 2] * 2 + [0.0])
    assert m["entropy"] == pytest.approx((0.05 + 1.0 + 0.2 + 0.01 + 2.0) / 5)
    assert m["entropy/low_frac"] == pytest.approx(2 / 5)                # 0.05 and 0.01 below 0.1
    assert m["entropy/top1_prob"] == pytest.approx((0.9 + 0.3 + 0.5 + 0.99 + 0.2) / 5)
    with pytest.raises(ValueError, match="entropy"):
        policy_loss(logp, old, adv, mask, cfg(entropy_coef=0.1))


# -- the names in the trace -----------------------------------------------------------------

@pytest.mark.parametrize("loss_type", ["grpo", "dapo", "gspo", "cispo", "sapo"])
def test_metric_names_are_pinned(loss_type):
    logp, old, adv, mask = tensors()
    _, m = policy_loss(logp, old, adv, mask, cfg(loss_type=loss_type))
    assert set(m) == set(METRIC_KEYS)
    _, m = policy_loss(logp, old, adv, mask, cfg(loss_type=loss_type),
                        behaviour_logp=torch.tensor(BEH, dtype=torch.float64))
    assert set(m) == set(METRIC_KEYS) | set(MISMATCH_KEYS)
    assert MISMATCH_KEYS == ("mismatch/token_kl", "mismatch/seq_kl", "mismatch/token_log_ppl_gap",
                             "mismatch/seq_log_ppl_gap", "mismatch/token_masked_frac", "mismatch/seq_masked_frac",
                             "mismatch/masked_frac")
    assert {"entropy", "entropy/low_frac", "entropy/top1_prob", "loss/entropy"} <= set(METRIC_KEYS)
