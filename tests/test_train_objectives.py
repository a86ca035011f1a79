"""The objectives and corrections of rlvr.grpo inside the trainer's step (the tiny model, no Ray):
the entropy bonus raises the entropy, the mismatch and per-dataset entropy metrics reach the
step's metrics and merge over ranks by their own weights; and one tiny end-to-end run per new
setting (loss type, advantage estimator, token or sequence mask, entropy bonus) whose reward rises."""

from __future__ import annotations

import pytest
import torch

from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.trainer import Batch, PolicyTrainer
from rlvr.train.trainer_step import merge_metrics
from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("tiny") / "m"))


def trainer(path, lr=1e-2, **loss):
    cfg = TrainerConfig(lr=lr, micro_batch_size=2, dtype="float32", device="cpu", loss=LossConfig(**loss))
    return PolicyTrainer(path, cfg, max_tokens=8, total_steps=10)


P = [[5, 6, 7], [8, 9], [3, 4]]
C = [[10, 11, 12], [20, 21], [4, 4, 4, 4]]


def mean_entropy(t):
    with torch.no_grad():
        _, ent, mask = t._logprobs(t.model, P, C, with_entropy=True)
    return float((ent * mask).sum() / mask.sum())


def test_entropy_bonus_raises_the_entropy(tiny):
    """With zero advantages the only gradient is the bonus: the entropy goes up, and with
    entropy_coef 0 nothing moves."""
    for coef in (0.0, 1.0):
        t = trainer(tiny, lr=1e-4, entropy_coef=coef)   # a small step: near its maximum, Adam's first overshoots
        h0 = mean_entropy(t)
        m = t.step(Batch(P, C, [0.0, 0.0, 0.0], None, None))
        h1 = mean_entropy(t)
        if coef:
            assert h1 > h0 + 1e-3 and m["loss/entropy"] == pytest.approx(h0, rel=1e-4)
        else:
            assert h1 == pytest.approx(h0, abs=1e-6)


def test_step_reports_mismatch_and_entropy_per_dataset(tiny):
    t = trainer(tiny, token_mask=[0.5, 1.5], tis_cap=2.0)
    with torch.no_grad():
        lp, _, _ = t._logprobs(t.model, P, C)
    # sequence 1's engine log-probs are 1 nat below the trainer's on every token: rho = e, masked
    beh = [[float(x) for x in lp[i, :len(C[i])]] for i in range(3)]
    beh[1] = [x - 1.0 for x in beh[1]]
    b = Batch(P, C, [1.0, -1.0, 0.5], beh, None, datasets=["gsm8k", "math", "gsm8k"])
    m = merge_metrics([t.step(b)])   # as the driver reads a step (private weights removed)
    assert m["mismatch/token_masked_frac"] == pytest.approx(2 / 9)
    # the trainer's minus the engine's log-perplexity: -1 on one sequence of three, on 2 tokens of 9
    assert m["mismatch/seq_log_ppl_gap"] == pytest.approx(-1 / 3, abs=1e-5)
    assert m["mismatch/token_log_ppl_gap"] == pytest.approx(-2 / 9, abs=1e-5)
    assert m["entropy/dataset/gsm8k"] > 0 and m["entropy/dataset/math"] > 0
    tok = {"gsm8k": 7, "math": 2}
    assert m["entropy"] == pytest.approx(sum(m[f"entropy/dataset/{k}"] * n for k, n in tok.items()) / 9, rel=1e-4)
    assert 0 < m["entropy/top1_prob"] < 1 and 0 <= m["entropy/low_frac"] <= 1
    assert not any(k.startswith("_") for k in m)


def test_merge_weighs_sequence_means_by_sequences_and_dataset_entropy_by_its_tokens():
    a = {"mismatch/seq_kl": 1.0, "mismatch/token_kl": 1.0, "entropy/dataset/x": 2.0,
         "_tokens": 10.0, "_seqs": 1.0, "_ent_n/x": 10.0}
    b = {"mismatch/seq_kl": 4.0, "mismatch/token_kl": 4.0, "entropy/dataset/x": 5.0,
         "_tokens": 20.0, "_seqs": 3.0, "_ent_n/x": 5.0}
    m = merge_metrics([a, b])
    assert m["mismatch/seq_kl"] == pytest.approx((1 + 4 * 3) / 4)
    assert m["mismatch/token_kl"] == pytest.approx((10 + 80) / 30)
    assert m["entropy/dataset/x"] == pytest.approx((20 + 25) / 15)
    assert not any(k.startswith("_") for k in m)


# engine log-probs of the untempered distribution (rollout.logprobs raw) against the trainer's tempered one: a
# systematic train-inference mismatch (rho = pi_old / mu leaves 1 on every token) for the masks to act on
MISMATCH = ("rollout.temperature=0.8", "rollout.logprobs=raw")


@pytest.mark.parametrize("setting", [
    ("train.loss.loss_type=gspo", "train.loss.clip_low=3e-4", "train.loss.clip_high=4e-4", "train.loss.token_mask=[0.5,2.0]"),
    ("train.loss.loss_type=cispo", "train.loss.clip_high=0.28", "train.loss.token_mask=[0.5,2.0]"),
    ("train.loss.loss_type=sapo", "train.loss.token_mask=[0.5,2.0]"),
    ("train.advantage=rloo",),
    ("train.advantage=reinforce_pp",),
    ("train.loss.token_mask=[0.5,2.0]", *MISMATCH),
    ("train.loss.seq_mask=[0.9,1.11]", *MISMATCH),
    ("train.loss.entropy_coef=0.01",),
], ids=["gspo", "cispo", "sapo", "rloo", "reinforce_pp", "token_mask", "seq_mask", "entropy_coef"])
def test_tiny_run_learns_with_each_new_setting(ray_session, base_model, tmp_path, setting):
    """20 steps of the toy task with two mini-batches a step (so the ratio leaves 1 and the
    objective's clip or gate acts), one new loss type, advantage estimator, mask or entropy bonus
    each: the reward of the last 3 steps beats the first 3's; a mask drops some tokens on the way."""
    cfg = cfg_for(base_model, *SMALL, "train.steps=20", "train.mini_batches=2", "checkpoint.every=0", *setting)
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert len(rows) == 20
    first = sum(r["reward/mean"] for r in rows[:3]) / 3
    last = sum(r["reward/mean"] for r in rows[-3:]) / 3
    assert last > first + 0.1, (first, last)
    trained = [r for r in rows if r.get("train/sequences")]   # a step whose groups all had one reward trains none
    assert trained and all("mismatch/token_kl" in r and "entropy/top1_prob" in r for r in trained)
    masked = {"token_mask": "mismatch/token_masked_frac", "seq_mask": "mismatch/seq_masked_frac"}
    for key, metric in masked.items():
        if any(x.startswith(f"train.loss.{key}=") for x in setting) and MISMATCH[0] in setting:
            shares = [r[metric] for r in trained]
            assert max(shares) > 0 and sum(shares) / len(shares) < 0.5, shares
    if "train.loss.entropy_coef=0.01" in setting:
        assert all("loss/entropy" in r for r in trained)
