"""PolicyTrainer on the tiny model: a GRPO step moves log-probs the way advantages say,
checkpoints are Hugging Face folders written atomically, and state round-trips."""

from __future__ import annotations

import os

import pytest
import torch

from rlvr.runs import (checkpoint_dir, commit_checkpoint, latest_checkpoint, list_checkpoints, tmp_checkpoint_dir,
                       truncate_traces)
from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.trainer import Batch, PolicyTrainer


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("tiny") / "m"))


def trainer(path, **kw):
    cfg = TrainerConfig(lr=1e-2, micro_batch_size=2, dtype="float32", device="cpu", **kw)
    return PolicyTrainer(path, cfg, max_tokens=8, total_steps=10)


def logp_of(t, prompt, comp):
    with torch.no_grad():
        lp, _, mask = t._logprobs(t.model, [prompt], [comp])
    return float((lp * mask).sum())


def test_step_follows_advantages_and_bumps_version(tiny):
    p = [5, 6, 7]
    good, bad = [10, 11, 12], [20, 21]
    t = trainer(tiny)
    g0 = logp_of(t, p, good)
    t.step(Batch([p], [good], [1.0], None, [True]))
    assert logp_of(t, p, good) > g0 + 0.1
    t = trainer(tiny)
    b0 = logp_of(t, p, bad)
    t.step(Batch([p], [bad], [-1.0], None, [True]))
    assert logp_of(t, p, bad) < b0 - 0.1
    t = trainer(tiny)
    m = t.step(Batch([p, p], [good, bad], [1.0, -1.0], None, [True, False]))  # masked: no effect of bad
    assert t.version == 1 and m["train/sequences"] == 1.0
    for k in ("loss/policy", "loss/kl", "clip/frac", "entropy", "grad/norm", "lr",
              "logprob/engine_vs_trainer_abs_diff"):
        assert k in m
    assert m["entropy"] > 0


def test_micro_batching_gives_the_same_gradient(tiny):
    p = [[5, 6, 7], [8, 9], [3]]
    c = [[10, 11, 12], [20, 21], [4, 4, 4, 4]]
    adv = [1.0, -0.5, 0.25]
    grads = []
    for mb in (1, 3):
        t = trainer(tiny)
        t.cfg.micro_batch_size = mb
        t.opt.step = lambda: None  # keep the accumulated gradient to compare
        t.step(Batch(p, c, adv, None, None))
        grads.append(torch.cat([q.grad.flatten() for q in t.model.parameters() if q.grad is not None]))
    assert grads[0].abs().max() > 0
    assert torch.allclose(grads[0], grads[1], rtol=1e-3, atol=1e-6)


def test_behaviour_logprobs_feed_the_mismatch_metric(tiny):
    t = trainer(tiny)
    p, c = [5, 6, 7], [10, 11]
    true = t._logprobs(t.model, [p], [c])[0][0, :2].tolist()
    m = t.step(Batch([p], [c], [1.0], [[x - 0.5 for x in true]], None))
    assert m["logprob/engine_vs_trainer_abs_diff"] == pytest.approx(0.5, abs=1e-4)


def test_reference_model_only_with_beta(tiny):
    assert trainer(tiny).ref is None
    t = trainer(tiny, loss=LossConfig(beta=0.1))
    assert t.ref is not None
    m = t.step(Batch([[5, 6]], [[7, 8]], [1.0], None, None))
    assert m["loss/kl"] == pytest.approx(0.0, abs=1e-6)  # first step: policy == reference


def test_checkpoint_is_hf_folder_and_state_round_trips(tiny, tmp_path):
    from transformers import AutoModelForCausalLM

    t = trainer(tiny)
    t.step(Batch([[5, 6]], [[7, 8]], [1.0], None, None))
    run = str(tmp_path)
    tmp = tmp_checkpoint_dir(run, 1)
    assert list_checkpoints(run) == []
    t.save(tmp, {"step": 1})
    assert latest_checkpoint(run) is None  # not visible until committed
    commit_checkpoint(tmp, checkpoint_dir(run, 1))
    step, path = latest_checkpoint(run)
    assert step == 1 and os.path.exists(os.path.join(path, "model.safetensors"))
    assert os.path.exists(os.path.join(path, "tokenizer.json")) and os.path.exists(os.path.join(path, "generation_config.json"))
    m = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    for (n1, a), (n2, b) in zip(m.state_dict().items(), t.model.state_dict().items()):
        assert torch.equal(a, b), n1
    t2 = PolicyTrainer(path, t.cfg, 8, 10)
    st = t2.load_state(path)
    assert t2.version == 1 and st["step"] == 1
    assert t2.opt.state_dict()["state"][0]["step"] == t.opt.state_dict()["state"][0]["step"]


def test_partial_checkpoint_is_ignored(tmp_path):
    os.makedirs(checkpoint_dir(str(tmp_path), 5))  # no trainer_state.pt: incomplete
    assert latest_checkpoint(str(tmp_path)) is None


def test_mixed_precision_keeps_fp32_master_and_exports_bf16(tiny):
    cfg = TrainerConfig(lr=1e-6, micro_batch_size=2, dtype="bfloat16", device="cpu")
    t = PolicyTrainer(tiny, cfg, max_tokens=8, total_steps=10)
    assert all(p.dtype == torch.float32 for p in t.model.parameters())
    before = {n: p.detach().clone() for n, p in t.model.named_parameters()}
    t.step(Batch([[5, 6, 7]], [[10, 11]], [1.0], None, None))
    changed = sum(int((p.detach() != before[n]).sum()) for n, p in t.model.named_parameters())
    total = sum(p.numel() for p in t.model.parameters())
    assert changed > 0.5 * total  # a 1e-6 step survives in the fp32 master weights
    w = {n: (a, d) for n, a, d in t.weights()}
    name = "model.embed_tokens.weight"
    arr, dt = w[name]
    assert dt == "bfloat16" and "lm_head.weight" not in w  # tied: sent once
    back = torch.from_numpy(arr).view(torch.bfloat16)
    assert torch.equal(back, t.model.state_dict()[name].to(torch.bfloat16))


def test_truncate_traces(tmp_path):
    d = tmp_path / "traces"
    d.mkdir()
    (d / "trace.jsonl").write_text('{"step": 1}\n{"step": 2}\n{"step": 3}\n{"ste')
    truncate_traces(str(tmp_path), 2)
    assert (d / "trace.jsonl").read_text() == '{"step": 1}\n{"step": 2}\n'
