"""train.offload optimizer (rlvr.train.parallel.CPUAdamW): AdamW's state and step in host
memory while the parameters and gradients stay on the device. On one rank of the tiny model it
gives the same updates as torch's AdamW (fp32, and bf16 compute with fp32 masters), keeps no
optimizer state beside the device parameters, follows the lr schedule, and its checkpoint state
saves, loads and resumes (also across the offload setting). Two FSDP ranks with it are in
tests/test_trainer_tp.py (test_per_microbatch_sync_gives_the_same_update)."""

from __future__ import annotations

import pytest
import torch

from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.parallel import CPUAdamW
from rlvr.train.trainer import Batch, PolicyTrainer

PROMPTS = [[5, 6, 7], [8, 9], [3], [4, 4, 2]]
COMPS = [[10, 11, 12], [20, 21], [4, 4, 4, 4], [9]]
ADV = [1.0, -0.5, 0.25, 0.7]


def cfg(**kw):
    # two updates a step, a warm-up (the scheduler sets the lr the host AdamW must take),
    # weight decay (applied to the host copy)
    base = dict(lr=1e-2, adam_eps=1e-2, weight_decay=0.1, micro_batch_size=1, dtype="float32", device="cpu",
                mini_batches=2, warmup_steps=2, loss=LossConfig(loss_type="dapo"))
    return TrainerConfig(**{**base, **kw})


def batch():
    return Batch(PROMPTS, COMPS, ADV, None, None)


def weights(t):
    return {k: v.clone() for k, v in t.full_state_dict().items()}


def assert_close(a, b, tol=1e-6):
    assert set(a) == set(b) and len(a) > 10
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-5, atol=tol), (k, float((a[k] - b[k]).abs().max()))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_offloaded_adamw_gives_the_same_updates_on_one_rank(tiny_model_dir, dtype):
    torch.set_num_threads(1)
    plain = PolicyTrainer(tiny_model_dir, cfg(dtype=dtype), max_tokens=8, total_steps=4)
    off = PolicyTrainer(tiny_model_dir, cfg(dtype=dtype, offload="optimizer"), max_tokens=8, total_steps=4)
    assert isinstance(off.opt, CPUAdamW) and not isinstance(plain.opt, CPUAdamW)
    base = weights(plain)
    for _ in range(2):
        mp, mo = plain.step(batch()), off.step(batch())
        assert mo["loss/total"] == pytest.approx(mp["loss/total"], abs=1e-6)
    wp, wo = weights(plain), weights(off)
    assert_close(wp, wo)
    assert any(not torch.equal(wp[k], base[k]) for k in wp)          # the updates happened
    # the device side holds no optimizer state: the moments are the host AdamW's, one pair a parameter
    assert not off.opt.state and len(off.opt.host.state) == len(off.opt.param_groups[0]["params"])
    assert all(s["exp_avg"].device.type == "cpu" for s in off.opt.host.state.values())
    # the lr the scheduler set (warm-up: step 4 of 2) reached the host AdamW
    assert off.opt.host.param_groups[0]["lr"] == off.opt.param_groups[0]["lr"] == plain.opt.param_groups[0]["lr"]
    # one optimizer state layout: the host AdamW's (fused) equals torch's default AdamW's within
    # float rounding (the fused kernel orders its operations otherwise)
    sp, so = plain.opt.state_dict(), off.opt.state_dict()
    assert sp["state"].keys() == so["state"].keys() and all(g["fused"] for g in so["param_groups"])
    for i in sp["state"]:
        for k in ("exp_avg", "exp_avg_sq"):
            a, b = sp["state"][i][k], so["state"][i][k]
            assert torch.allclose(a, b, rtol=1e-5, atol=1e-5 * float(a.abs().max())), (i, k)


def test_offloaded_optimizer_checkpoint_resumes(tiny_model_dir, tmp_path):
    """A checkpoint of an offloaded trainer: the resumed trainer (offloaded, or not) steps on
    to the same weights as the one that went on."""
    torch.set_num_threads(1)
    t = PolicyTrainer(tiny_model_dir, cfg(offload="optimizer"), max_tokens=8, total_steps=4)
    t.step(batch())
    ck = tmp_path / "ck"
    ck.mkdir()
    t.save(str(ck), {"step": 1})
    saved = torch.load(ck / "trainer_state.pt", weights_only=False)["optimizer"]
    assert all(s["exp_avg"].abs().sum() > 0 for s in saved["state"].values())
    t.step(batch())
    want = weights(t)
    for offload in ("optimizer", None):
        r = PolicyTrainer(str(ck), cfg(offload=offload), max_tokens=8, total_steps=4)
        assert r.load_state(str(ck))["step"] == 1 and r.version == 1
        if offload:   # the moments loaded into the host AdamW, and its group's hyperparameters to the device side
            assert len(r.opt.host.state) == len(saved["state"]) and r.opt.host.param_groups[0]["fused"]
            assert r.opt.param_groups[0]["lr"] == r.opt.host.param_groups[0]["lr"]
        r.step(batch())
        assert_close(weights(r), want)


def test_an_update_with_frozen_parameters_and_the_lr_of_the_groups():
    """Parameters without a gradient are left alone (as AdamW leaves them); each group's lr and
    weight decay reach the host AdamW."""
    torch.manual_seed(0)
    a, b = torch.nn.Parameter(torch.randn(3, 2)), torch.nn.Parameter(torch.randn(4))
    a2, b2 = (torch.nn.Parameter(x.detach().clone()) for x in (a, b))
    groups = lambda x, y: [{"params": [x], "lr": 0.1}, {"params": [y], "lr": 0.01, "weight_decay": 0.0}]  # noqa: E731
    off, ref = CPUAdamW(groups(a, b), lr=1.0, weight_decay=0.5), torch.optim.AdamW(groups(a2, b2), lr=1.0,
                                                                                     weight_decay=0.5)
    for step in range(3):
        for o, (x, y) in ((off, (a, b)), (ref, (a2, b2))):
            o.zero_grad()
            loss = (x ** 2).sum() + (y.sum() if step != 1 else 0.0)   # b has no gradient in step 1
            loss.backward()
            o.step()
        assert torch.allclose(a, a2, atol=1e-7) and torch.allclose(b, b2, atol=1e-7), step
    b_before = b.detach().clone()
    off.zero_grad()
    (a ** 2).sum().backward()
    off.step()
    assert torch.equal(b, b_before)
