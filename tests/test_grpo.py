"""GRPO advantages and loss: hand-computed values and pinned diagnostic names."""

from __future__ import annotations

import math

import pytest
import torch

from rlvr.grpo import METRIC_KEYS, LossConfig, group_advantages, policy_loss, selective_logprobs, token_logprobs


def test_group_advantages_hand_computed():
    r = torch.tensor([[1.0, 0.0, 0.0, 1.0], [1.0, 1.0, 1.0, 1.0]])
    adv, zero = group_advantages(r, "group")
    std = math.sqrt(1 / 3)  # unbiased std of [1, 0, 0, 1]
    assert adv[0].tolist() == pytest.approx([0.5 / (std + 1e-4), -0.5 / (std + 1e-4)] * 1 + [-0.5 / (std + 1e-4), 0.5 / (std + 1e-4)])
    assert adv[1].tolist() == [0.0] * 4 and zero.tolist() == [False, True]
    adv2, _ = group_advantages(r, "none")
    assert adv2[0].tolist() == [0.5, -0.5, -0.5, 0.5]


def test_token_logprobs_and_entropy():
    logits = torch.log(torch.tensor([[[0.5, 0.25, 0.25]]]))
    lp, ent = token_logprobs(logits, torch.tensor([[1]]), with_entropy=True)
    assert lp.item() == pytest.approx(math.log(0.25))
    assert ent.item() == pytest.approx(-(0.5 * math.log(0.5) + 2 * 0.25 * math.log(0.25)))


def setup():
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.1], [0.2, 0.3, 0.9]]))
    old = torch.log(torch.tensor([[0.4, 0.4, 0.1], [0.4, 0.3, 0.5]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    adv = torch.tensor([1.0, -1.0])
    return logp, old, adv, mask


def test_clipped_surrogate_and_aggregations():
    logp, old, adv, mask = setup()
    ratio = torch.exp(logp - old)   # [[1.25, 1, 1], [0.5, 1, 1.8]]
    # seq 0 (A=+1): min(r, clip(r, .8, 1.2)) = [1.2, 1]; seq 1 (A=-1): -min(-r, -clip) = max(r, clip) = [0.8, 1, 1.8]
    tok = torch.tensor([[-1.2, -1.0, 0.0], [0.8, 1.0, 1.8]])
    cfg = LossConfig(loss_type="grpo", clip_low=0.2, clip_high=0.2, tis_cap=None)
    loss, m = policy_loss(logp, old, adv, mask, cfg)
    assert loss.item() == pytest.approx(((-2.2 / 2) + (3.6 / 3)) / 2)
    cfg.loss_type = "dapo"
    assert policy_loss(logp, old, adv, mask, cfg)[0].item() == pytest.approx((tok * mask).sum().item() / 5)
    cfg.loss_type = "dr_grpo"
    cfg.max_tokens = 4
    assert policy_loss(logp, old, adv, mask, cfg)[0].item() == pytest.approx((tok * mask).sum().item() / (2 * 4))
    # clipping: token (0,0) ratio 1.25 > 1.2 with A>0 (high); token (1,0) ratio .5 < .8 with A<0 (low)
    assert m["clip/frac_high"] == pytest.approx(1 / 5) and m["clip/frac_low"] == pytest.approx(1 / 5)
    assert m["clip/frac"] == pytest.approx(2 / 5)
    assert ratio[1, 2].item() == pytest.approx(1.8)


def test_clip_higher_is_asymmetric():
    logp, old, adv, mask = setup()
    cfg = LossConfig(clip_low=0.2, clip_high=0.28, tis_cap=None)
    _, m = policy_loss(logp, old, adv, mask, cfg)
    assert m["clip/frac_high"] == 0.0  # 1.25 < 1.28


def test_gradient_matches_reinforce_on_policy():
    # with old = logp.detach() the ratio is 1 and d loss / d logp = -A / (tokens of the sequence) (grpo)
    logp = torch.log(torch.tensor([[0.5, 0.4], [0.2, 0.3]])).requires_grad_()
    adv = torch.tensor([2.0, -1.0])
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    loss, _ = policy_loss(logp, logp.detach(), adv, mask, LossConfig(tis_cap=None))
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-2 / 2 / 2, -2 / 2 / 2, 1 / 1 / 2, 0.0])


def test_kl_k3_and_beta():
    logp, old, adv, mask = setup()
    ref = torch.log(torch.tensor([[0.5, 0.2, 0.1], [0.2, 0.3, 0.3]]))
    cfg = LossConfig(loss_type="dapo", beta=0.1, tis_cap=None)
    loss, m = policy_loss(logp, old, adv, mask, cfg, ref_logp=ref)
    d = ref - logp
    k3 = ((torch.exp(d) - d - 1) * mask).sum() / mask.sum()
    assert m["loss/kl"] == pytest.approx(k3.item()) and k3.item() > 0
    assert m["loss/total"] == pytest.approx(m["loss/policy"] + 0.1 * k3.item())
    with pytest.raises(ValueError):
        policy_loss(logp, old, adv, mask, cfg)


def test_truncated_importance_sampling():
    logp, old, adv, mask = setup()
    beh = old - torch.log(torch.tensor([[2.0, 4.0, 1.0], [1.0, 0.5, 1.0]]))  # old/beh = [[2, 4, 1], [1, .5, 1]]
    cfg = LossConfig(loss_type="dapo", tis_cap=3.0)
    base, _ = policy_loss(logp, old, adv, mask, LossConfig(loss_type="dapo", tis_cap=None))
    loss, m = policy_loss(logp, old, adv, mask, cfg, behaviour_logp=beh)
    tok = torch.tensor([[-1.2, -1.0, 0.0], [0.8, 1.0, 1.8]])
    w = torch.tensor([[2.0, 3.0, 1.0], [1.0, 0.5, 1.0]])
    assert loss.item() == pytest.approx((tok * w * mask).sum().item() / 5)
    assert m["tis/frac_capped"] == pytest.approx(1 / 5)
    assert base.item() != pytest.approx(loss.item())


def test_metric_names_are_pinned():
    logp, old, adv, mask = setup()
    _, m = policy_loss(logp, old, adv, mask, LossConfig(), entropy=torch.ones_like(logp))
    assert set(m) == set(METRIC_KEYS)
    assert m["entropy"] == pytest.approx(1.0)


@pytest.mark.parametrize("chunk", [1, 5, 16, 1000])
def test_chunked_selective_logprobs_equal_the_full_logits(chunk):
    # loss and gradients of the chunked (checkpointed) computation equal those through the full
    # [T, V] logits, temperature included
    g = torch.Generator().manual_seed(0)
    T, H, V, temp = 37, 16, 301, 0.7
    h0, w0 = torch.randn(T, H, generator=g), torch.randn(V, H, generator=g) * 0.3
    b0 = torch.randn(V, generator=g) * 0.1
    tgt = torch.randint(0, V, (T,), generator=g)
    coef = torch.randn(T, generator=g)

    def run(chunk_size):
        h, w, b = (x.clone().requires_grad_() for x in (h0, w0, b0))
        if chunk_size is None:
            lp, ent = token_logprobs((h @ w.T + b) / temp, tgt, with_entropy=True)
        else:
            lp, ent = selective_logprobs(h, w, tgt, temp, chunk_size, with_entropy=True, bias=b)
        (lp * coef).sum().backward()
        return lp.detach(), ent, h.grad, w.grad, b.grad

    ref = run(None)
    got = run(chunk)
    assert ref[2].abs().max() > 0 and ref[3].abs().max() > 0
    for a, b in zip(ref, got):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert not got[1].requires_grad and (got[1] > 0).all()
    # 0 is the unchunked reference path
    for a, b in zip(ref, run(0)):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("chunk", [0, 4, 1000])
def test_selective_logprobs_at_several_ids_per_position(chunk):
    # targets [T, K] (a token and a teacher's top-k): values and gradients equal the full
    # log-softmax gathered at each id, repeated ids included (their gradients add up)
    g = torch.Generator().manual_seed(2)
    T, H, V, K, temp = 11, 8, 53, 5, 0.8
    h0, w0 = torch.randn(T, H, generator=g), torch.randn(V, H, generator=g) * 0.3
    tgt = torch.randint(0, V, (T, K), generator=g)
    tgt[:, 2] = tgt[:, 0]
    coef = torch.randn(T, K, generator=g)
    out = []
    for mode in ("full", "chunked"):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        if mode == "full":
            lp = torch.log_softmax((h @ w.T) / temp, -1).gather(-1, tgt)
        else:
            lp, _ = selective_logprobs(h, w, tgt, temp, chunk)
        (lp * coef).sum().backward()
        out.append((lp.detach(), h.grad, w.grad))
    assert out[1][0].shape == (T, K)
    for a, b in zip(*out):
        assert torch.allclose(a, b, rtol=1e-5, atol=1e-6)
    assert selective_logprobs(h0[:0], w0, tgt[:0], 1.0, chunk)[0].shape == (0, K)


def test_kl_to_pi_old_and_ratio_max():
    logp, old, adv, mask = setup()
    _, m = policy_loss(logp, old, adv, mask, LossConfig(tis_cap=None))
    r = torch.exp(logp - old)
    k3 = ((r - 1 - torch.log(r)) * mask).sum() / mask.sum()
    assert m["kl"] == pytest.approx(k3.item()) and m["kl"] > 0
    assert m["ratio/max"] == pytest.approx(1.8)          # the masked token (0, 2) does not count
    _, m0 = policy_loss(logp, logp.detach(), adv, mask, LossConfig(tis_cap=None))
    assert m0["kl"] == 0.0 and m0["ratio/max"] == 1.0


def test_chunked_selective_logprobs_follow_autocast():
    # under bf16 autocast the chunks compute in bf16 as nn.Linear would, gradients in the inputs' dtypes
    g = torch.Generator().manual_seed(1)
    h0, w0 = torch.randn(20, 32, generator=g), torch.randn(257, 32, generator=g) * 0.2
    tgt = torch.randint(0, 257, (20,), generator=g)
    out = []
    for chunk in (0, 6):
        h, w = h0.clone().requires_grad_(), w0.clone().requires_grad_()
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lp, _ = selective_logprobs(h, w, tgt, 0.8, chunk)
        lp.sum().backward()
        assert lp.dtype == torch.float32 and h.grad.dtype == w.grad.dtype == torch.float32
        out.append((lp.detach(), h.grad, w.grad))
    for a, b in zip(*out):
        assert torch.allclose(a, b, rtol=2e-2, atol=2e-2)


def test_dr_grpo_normaliser_is_the_configured_sequence_count():
    # Dr. GRPO divides by (configured sequences x max_tokens) whatever was filtered out: two
    # sequences survive of a configured 8, the normaliser stays 8 x 4
    logp, old, adv, mask = setup()
    tok = torch.tensor([[-1.2, -1.0, 0.0], [0.8, 1.0, 1.8]])
    cfg = LossConfig(loss_type="dr_grpo", clip_low=0.2, clip_high=0.2, tis_cap=None, max_tokens=4)
    loss, _ = policy_loss(logp, old, adv, mask, cfg, n_total=2, dr_grpo_sequences=8)
    assert loss.item() == pytest.approx((tok * mask).sum().item() / (8 * 4))
    # the other aggregations ignore it
    cfg.loss_type = "dapo"
    assert policy_loss(logp, old, adv, mask, cfg, dr_grpo_sequences=8)[0].item() == \
        pytest.approx((tok * mask).sum().item() / 5)


def test_k3_kl_is_clamped_as_verls_low_var_kl():
    from rlvr.grpo import k3_kl

    ref = torch.tensor([[0.0, -50.0, -1.0]])
    logp = torch.tensor([[-60.0, 0.0, -1.2]]).requires_grad_()
    kl = k3_kl(ref, logp)
    # d = 60 -> clamped to 20, value exp(20) - 21 -> clamped to 10; d = -50 -> -20: e^-20 + 19 -> 10
    assert torch.isfinite(kl).all() and kl[0, 0].item() == 10.0 and kl[0, 1].item() == 10.0
    d = torch.tensor(0.2)
    assert kl[0, 2].item() == pytest.approx((torch.exp(d) - d - 1).item(), rel=1e-5)
    kl.sum().backward()
    assert logp.grad[0, 0].item() == 0.0 and logp.grad[0, 2].item() != 0.0   # clamped tokens pass no gradient
    # in the loss: an off-policy token with a huge reference ratio no longer dominates
    m = policy_loss(logp.detach(), logp.detach(), torch.tensor([1.0]), torch.ones(1, 3),
                    LossConfig(loss_type="dapo", beta=0.1, tis_cap=None), ref_logp=ref)[1]
    assert m["loss/kl"] == pytest.approx((10 + 10 + kl[0, 2].item()) / 3)
