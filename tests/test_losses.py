"""Extra losses beside the policy loss (rlvr.losses, rlvr.train.extras) and the loss and optimizer
knobs of the users' configs: hand-computed values, then the trainer on the tiny model (SFT beside
RL and alone, ratio against the engine, float16 with a loss scaler, a re-synced reference,
checkpoint dtype)."""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from rlvr.grpo import LossConfig, group_advantages, policy_loss
from rlvr.losses import EXTRA_LOSSES, sft_loss
from rlvr.train.config import TrainConfig, TrainerConfig, optimizer_args, resolve_preset
from rlvr.train.extras import ExtraBatch
from rlvr.train.trainer import Batch, PolicyTrainer


def test_sft_loss_is_the_token_mean_nll_and_micro_batches_add_up():
    logp = torch.log(torch.tensor([[0.5, 0.25, 0.9], [0.1, 0.3, 0.3]])).requires_grad_()
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    loss, m = sft_loss(logp, mask, tokens_total=3)
    want = -(math.log(0.5) + math.log(0.25) + math.log(0.1)) / 3
    assert loss.item() == pytest.approx(want) and m == {"loss/sft": pytest.approx(want)}
    loss.backward()
    assert logp.grad.flatten().tolist() == pytest.approx([-1 / 3, -1 / 3, 0.0, -1 / 3, 0.0, 0.0])
    # each micro-batch is normalised by the whole batch's tokens: the parts add up to the mean
    parts = [sft_loss(logp[i:i + 1].detach(), mask[i:i + 1], tokens_total=3)[0].item() for i in range(2)]
    assert sum(parts) == pytest.approx(want)
    assert EXTRA_LOSSES["sft"] is sft_loss


def test_population_std_advantages_hand_computed():
    r = torch.tensor([[1.0, 0, 0, 0, 0, 0, 0, 0]])
    pop, _ = group_advantages(r, "group", std="population")
    unb, _ = group_advantages(r, "group")
    pop_std = math.sqrt((0.875 ** 2 + 7 * 0.125 ** 2) / 8)     # 0.3307
    unb_std = math.sqrt((0.875 ** 2 + 7 * 0.125 ** 2) / 7)     # 0.3536
    assert pop[0, 0].item() == pytest.approx(0.875 / (pop_std + 1e-4))
    assert unb[0, 1].item() == pytest.approx(-0.125 / (unb_std + 1e-4))
    assert (unb / pop)[0, 0].item() == pytest.approx(math.sqrt(7 / 8), rel=1e-3)   # about 6.5% apart at G = 8
    none, _ = group_advantages(r, "none", std="population")
    assert none[0, 0].item() == pytest.approx(0.875)
    with pytest.raises(ValueError):
        group_advantages(r, std="sample")


def test_kl_max_is_the_largest_masked_token_k3():
    logp = torch.log(torch.tensor([[0.5, 0.4, 0.1], [0.2, 0.3, 0.9]]))
    ref = torch.log(torch.tensor([[0.5, 0.2, 0.9], [0.2, 0.6, 0.3]]))
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    _, m = policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, LossConfig(beta=0.1, tis_cap=None),
                       ref_logp=ref)
    k3 = [2.0 - math.log(2.0) - 1, 1 / 3 - math.log(1 / 3) - 1]   # ref/p = 0.5 at (0,1); 1/3 at (1,2)
    assert m["kl/max"] == pytest.approx(max(k3))  # token (0, 2) has a larger k3 but is masked
    assert policy_loss(logp, logp.detach(), torch.tensor([1.0, -1.0]), mask, LossConfig())[1]["kl/max"] == 0.0


def test_compat_preset_fills_only_the_null_optimizer_settings():
    assert optimizer_args(TrainerConfig(lr=1e-6)) == {"lr": 1e-6, "weight_decay": 0.0, "betas": (0.9, 0.999),
                                                       "eps": 1e-8}
    cfg = TrainConfig(compat="torchtitan")
    cfg.train.adam_eps = 1e-4
    resolve_preset(cfg)
    t = cfg.train
    assert (t.weight_decay, t.adam_beta2, t.adam_eps, t.grad_clip) == (0.1, 0.95, 1e-4, 1.0)
    cfg = TrainConfig(compat="torchtitan")
    cfg.train.weight_decay = 0.0
    assert resolve_preset(cfg).train.weight_decay == 0.0


# -- the trainer on the tiny model ---------------------------------------------------------

P = [[5, 6, 7], [8, 9], [3], [4, 4, 2]]
C = [[10, 11, 12], [20, 21], [4, 4, 4, 4], [9]]


@pytest.fixture
def tiny(tiny_model_dir):
    return tiny_model_dir  # the session's tiny model (tests/conftest.py); never written to


def trainer(path, temperature=1.0, **kw):
    kw = {"lr": 1e-2, "micro_batch_size": 2, "dtype": "float32", "grad_clip": 1e9, **kw}  # no clip: compare gradients
    cfg = TrainerConfig(device="cpu", **kw)
    return PolicyTrainer(path, cfg, max_tokens=8, total_steps=10, temperature=temperature)


def grads(t, batch):
    t.opt.step = lambda: None  # keep the accumulated gradient to compare
    m = t.step(batch)
    return torch.cat([q.grad.flatten() for q in t.model.parameters() if q.grad is not None]), m


def sft(mb=2, weight=1.0):
    return ExtraBatch(P, C, weight=weight, micro_batch_size=mb)


def test_sft_alone_is_the_nll_at_temperature_1_whatever_the_split(tiny):
    out = []
    for mb in (1, 3):
        t = trainer(tiny, temperature=0.7)  # the RL path's temperature: SFT ignores it
        with torch.no_grad():
            lp, _, mask = t._logprobs(t.model, P, C, temperature=1.0)
        nll = -float((lp * mask).sum() / mask.sum())
        g, m = grads(t, Batch([], [], [], [], [], extras={"sft": sft(mb, 0.5)}))
        assert m["loss/sft"] == pytest.approx(nll, rel=1e-5)
        assert m["loss/total"] == pytest.approx(0.5 * nll, rel=1e-5) and "loss/rl" not in m
        assert m["sft/sequences"] == 4 and m["sft/tokens"] == 10 and m["train/updates"] == 1 and t.version == 1
        out.append(g)
    assert out[0].abs().max() > 0 and torch.allclose(out[0], out[1], rtol=1e-4, atol=1e-7)


def test_sft_beside_rl_adds_its_weighted_gradient(tiny):
    rl = Batch(P, C, [1.0, -0.5, 0.25, 0.7], None, None)
    g_rl, m_rl = grads(trainer(tiny), rl)
    g_sft, _ = grads(trainer(tiny), Batch([], [], [], [], [], extras={"sft": sft()}))
    g_both, m = grads(trainer(tiny), Batch(P, C, [1.0, -0.5, 0.25, 0.7], None, None, extras={"sft": sft(weight=0.3)}))
    assert torch.allclose(g_both, g_rl + 0.3 * g_sft, rtol=1e-4, atol=1e-6)
    assert m["loss/rl"] == pytest.approx(m_rl["loss/total"], rel=1e-5)
    assert m["loss/total"] == pytest.approx(m["loss/rl"] + 0.3 * m["loss/sft"], rel=1e-5)


def test_sft_shares_the_mini_batches(tiny):
    t = trainer(tiny, mini_batches=2)
    m = t.step(Batch([], [], [], [], [], extras={"sft": sft()}))
    assert m["train/updates"] == 2 and m["sft/sequences"] == 4


def test_ratio_against_the_engine(tiny):
    p, c = [5, 6, 7], [10, 11]
    t = trainer(tiny)
    true = t._logprobs(t.model, [p], [c])[0][0, :2].tolist()
    beh = [[x - 0.5 for x in true]]          # the engine saw these tokens as less likely: pi/mu = e^0.5
    m = t.step(Batch([p], [c], [1.0], beh, None))
    assert m["ratio/mean"] == pytest.approx(1.0) and m["tis/weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-4)
    t = trainer(tiny, loss=LossConfig(ratio_to="engine"))
    m = t.step(Batch([p], [c], [1.0], beh, None))
    assert m["ratio/mean"] == pytest.approx(math.exp(0.5), rel=1e-4) and m["tis/weight_mean"] == pytest.approx(1.0)
    assert m["clip/frac_high"] == pytest.approx(1.0)  # e^0.5 > 1.2 with A > 0: clipped, no gradient
    assert m["grad/norm"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="ratio_to engine"):
        trainer(tiny, loss=LossConfig(ratio_to="engine")).step(Batch([p], [c], [1.0], None, None))


def test_float16_compute_with_a_dynamic_loss_scaler(tiny):
    t = trainer(tiny, dtype="float16", lr=1e-3)
    # float16 compute on float16 parameters, with float32 master weights (and optimizer state)
    assert t.scaler is not None and t.master is not None
    assert all(p.dtype == torch.float32 for p in t.master.params) and all(p.dtype == torch.float16 for p in t.model.parameters())
    assert all(s.dtype == torch.float32 for p in t.opt.param_groups[0]["params"] for s in [p])
    before = [p.detach().clone() for p in t.model.parameters()]
    m = t.step(Batch(P, C, [1.0, -0.5, 0.25, 0.7], None, None))
    assert m["precision/skipped_updates"] == 0 and m["precision/loss_scale"] == 2.0 ** 16
    assert any(not torch.equal(a, p) for a, p in zip(before, t.model.parameters()))
    # an overflowing scale: the update is skipped, the weights stay, the scale is halved
    t.scaler.update(new_scale=3e38)
    before = [p.detach().clone() for p in t.model.parameters()]
    m = t.step(Batch(P, C, [1.0, -0.5, 0.25, 0.7], None, None))
    assert m["precision/skipped_updates"] == 1 and m["precision/loss_scale"] == pytest.approx(1.5e38)
    assert all(torch.equal(a, p) for a, p in zip(before, t.model.parameters()))


def test_reference_resync_and_checkpoint_in_float16(tiny, tmp_path):
    t = trainer(tiny, loss=LossConfig(beta=0.1), ref_sync_every=2, adam_eps=1e-4)
    assert t.opt.param_groups[0]["eps"] == 1e-4
    batch = Batch(P, C, [1.0, -0.5, 0.25, 0.7], None, None)
    m1 = t.step(batch)
    assert m1["ref/version"] == 0 and m1["kl/max"] == pytest.approx(0.0, abs=1e-6)
    m2 = t.step(batch)
    assert m2["ref/version"] == 2 and m2["kl/max"] > 0       # measured before the re-sync...
    assert all(torch.equal(a, b) for a, b in zip(t.ref.parameters(), t.model.parameters()))  # ...then equal
    m3 = t.step(batch)
    assert m3["ref/version"] == 2 and m3["kl/max"] == pytest.approx(0.0, abs=1e-6)  # pi_2 against ref = pi_2
    ck = str(tmp_path / "ck")
    os.makedirs(ck)
    t.save(ck, {"step": 3}, dtype="float16")
    assert json.load(open(os.path.join(ck, "config.json")))["dtype"] == "float16"
    from safetensors import safe_open

    with safe_open(os.path.join(ck, "model.safetensors"), "pt") as f:
        assert {f.get_tensor(k).dtype for k in f.keys()} == {torch.float16}
    t2 = PolicyTrainer(ck, t.cfg, 8, 10, ref_path=tiny)
    assert t2.load_state(ck)["step"] == 3 and t2.ref_version == 2
    for (name, a), b in zip(t2.ref.named_parameters(), t.ref.parameters()):
        assert torch.equal(a, b), name      # the re-synced reference, not the base model


def test_a_new_extra_loss_plugs_in_with_a_payload(tiny, monkeypatch):
    # the extension point a distillation loss uses: one function in EXTRA_LOSSES, per-sequence
    # arrays in the payload (here a [L_i, 2] array per sequence), metrics under its own names
    from rlvr import losses
    from rlvr.train.extras import collate

    seen = []

    def weighted_nll(logp, mask, tokens_total, payload, **totals):
        w = payload["w"]                                          # [N, L, 2]
        seen.append(tuple(w.shape))
        loss = -(logp * mask * w[..., 0]).sum() / tokens_total
        return loss, {"loss/wnll": float(loss.detach()), "wnll/weight_sum": float((w[..., 1] * mask).sum())}

    monkeypatch.setitem(losses.EXTRA_LOSSES, "wnll", weighted_nll)
    w = [[[1.0, 1.0]] * len(c) for c in C]
    t = trainer(tiny)
    m = t.step(Batch([], [], [], [], [], extras={"wnll": ExtraBatch(P, C, weight=2.0, micro_batch_size=4,
                                                                     payload={"w": w})}))
    assert seen == [(4, 4, 2)] and m["wnll/sequences"] == 4 and m["wnll/weight_sum"] == 10
    assert m["loss/total"] == pytest.approx(2.0 * m["loss/wnll"])
    ref = trainer(tiny).step(Batch([], [], [], [], [], extras={"sft": ExtraBatch(P, C, micro_batch_size=4)}))
    assert m["loss/wnll"] == pytest.approx(ref["loss/sft"], rel=1e-5)   # weights of 1: the plain NLL
    assert collate([[1, 2], []], torch.zeros(2, 3)).tolist() == [[1, 2, 0], [0, 0, 0]]
