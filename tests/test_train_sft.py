"""rlvr-train's SFT modes and the users' optimizer and sync knobs end to end on the tiny model:
the SFT baseline (sft.only: no engines, float16 with a loss scaler, a float16 checkpoint), and
GRPO + SFT with weights synced every other step, a re-synced KL reference, the ratio against the
engine's raw log-probs, population-std advantages and the torchtitan optimizer preset in one
run (the transformers engine: none of it depends on vLLM). Config checks run without Ray."""

from __future__ import annotations

import json
import os

import pytest

from helpers import invoke, jsonl
from rlvr.runs import latest_checkpoint
from test_train import SMALL, TINY, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def sft_file(tmp_path_factory):
    """The toy task's training prompts, each with the completion " 7" (its answer), under a
    different template than the RL data's ("Q: ...\\nA:"): the run trains them on the RL prompts."""
    from rlvr.data import load_records

    recs = [{"id": r["id"], "prompt": f"Q: {r['prompt']}\nA:", "completion": " 7"}
            for r in load_records("toy", split="train")[:64]]
    path = tmp_path_factory.mktemp("sft") / "sft.jsonl"
    path.write_text(jsonl(*recs))
    return str(path)


def test_sft_only_is_the_baseline_through_the_same_trainer(ray_session, base_model, sft_file, tmp_path):
    cfg = cfg_for(base_model, "sft.only=true", f"sft.data={sft_file}", "sft.batch_size=16", "train.steps=4",
                  "train.dtype=float16", "checkpoint.dtype=float16", "checkpoint.every=0")
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    losses = [r["loss/sft"] for r in rows]
    assert losses[-1] < 0.8 * losses[0], losses                    # the SFT loss falls on its data
    for r in rows:
        assert r["sft/sequences"] == 16 and r["loss/total"] == pytest.approx(r["loss/sft"])
        assert r["precision/loss_scale"] > 0 and "reward/mean" not in r and "loss/rl" not in r
    man = json.loads((tmp_path / "run.json").read_text())
    assert man["placement"]["engines"] == [] and man["status"] == "completed"   # no engines
    assert man["plan"]["fits"] and man["plan"]["sync"] is None            # planned without engines or a sync
    assert not os.path.exists(tmp_path / "traces" / "rollouts.jsonl") or \
        (tmp_path / "traces" / "rollouts.jsonl").read_text() == ""
    step, ck = latest_checkpoint(str(tmp_path))
    assert step == 4 and json.load(open(os.path.join(ck, "config.json")))["dtype"] == "float16"


def test_grpo_with_sft_every_other_sync_and_the_users_knobs(ray_session, base_model, sft_file, tmp_path, capsys):
    cfg = cfg_for(base_model, *SMALL, "train.steps=4", "checkpoint.every=0", f"sft.data={sft_file}",
                  "sft.batch_size=8", "sft.weight=0.5", "sync.every_steps=2", "train.max_staleness=1",
                  "train.loss.beta=0.01", "train.ref_sync_every=2", "train.loss.ratio_to=engine",
                  "rollout.logprobs=raw", "train.adv_std=population", "compat=torchtitan", "train.adam_eps=1e-6")
    run(cfg, tmp_path)
    err = capsys.readouterr().err
    assert "sft: 64 of 64 records" in err and "64 trained on the RL data's prompt for their id" in err
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    # weights reach the engines after steps 2 and 4 only: steps 2 and 4 train on samples one version old
    assert [r["sync/engine_version"] for r in rows] == [0, 2, 2, 4]
    assert [r["staleness/max"] for r in rows] == [0, 1, 0, 1]
    versions = {}
    for x in trace(tmp_path, "rollouts.jsonl"):
        versions.setdefault(x["step"], set()).add(x["policy_version"])
    assert versions == {1: {0}, 2: {0}, 3: {2}, 4: {2}}
    # SFT beside RL: both losses in the trace, the SFT one falling
    for r in rows:
        assert r["loss/total"] == pytest.approx(r["loss/rl"] + 0.5 * r["loss/sft"], rel=1e-4, abs=1e-6)
        assert r["sft/sequences"] == 8
    assert rows[-1]["loss/sft"] < rows[0]["loss/sft"]
    # the reference follows the policy every 2 steps; step 3 starts from it, so its KL is 0
    assert [r["ref/version"] for r in rows] == [0, 2, 2, 4]
    assert rows[1]["kl/max"] > 0 and rows[2]["kl/max"] == pytest.approx(0.0, abs=1e-6)
    # the ratio is taken against the engine's raw log-probs: 1 when the engine is current (and
    # fp32, so it agrees with the trainer), away from 1 on the stale steps; TIS then weighs 1
    assert rows[0]["ratio/mean"] == pytest.approx(1.0, abs=1e-3) and rows[1]["ratio/mean"] != pytest.approx(1.0, abs=1e-3)
    assert all(r["tis/weight_mean"] == pytest.approx(1.0) for r in rows if r["train/sequences"])
    t = cfg.train  # what the trainer was built with: the torchtitan preset where the config said nothing
    assert (t.weight_decay, t.adam_beta2, t.adam_eps) == (0.1, 0.95, 1e-6)


@pytest.mark.parametrize("sets, message", [
    (["sync.every_steps=2"], "sync.every_steps 2 needs train.max_staleness >= 1"),
    (["train.ref_sync_every=5"], "train.ref_sync_every re-syncs the KL reference, which exists only with "
                                 "train.loss.beta > 0"),
    (["sft.only=true"], "sft.only needs sft.data"),
    (["sft.only=true", "sft.data=s.jsonl", "eval.benchmarks=[toy]"],
     "eval.benchmarks: validation runs on the rollout engines, which sft.only does not start"),
    (["train.loss.ratio_to=behaviour"], "train.loss.ratio_to: expected one of trainer, engine"),
    (["train.dtype=half"], "train.dtype: expected one of auto"),
    (["compat=titan"], "compat: expected one of none, torchtitan"),
    (["rollout.logprobs=sampled"], "rollout.logprobs: expected one of processed, raw"),
])
def test_config_errors(sets, message):
    r = invoke("rlvr-train", [TINY, "--print-config", *[a for s in sets for a in ("--set", s)]])
    assert r.code == 2 and message in r.stderr, r.stderr


def test_sft_only_needs_no_rl_data(tmp_path):
    r = invoke("rlvr-train", [TINY, "--print-config", "--set", "sft.only=true", "--set", f"sft.data={tmp_path}/s.jsonl",
                              "--set", "data.dataset=null"])
    assert r.code == 0, r.stderr


def test_print_config_resolves_the_compat_preset():
    r = invoke("rlvr-train", [TINY, "--print-config", "--set", "compat=torchtitan", "--set", "train.weight_decay=0.01"])
    assert r.code == 0, r.stderr
    assert "weight_decay: 0.01" in r.stdout and "adam_beta2: 0.95" in r.stdout and "adam_eps: 1.0e-08" in r.stdout
    r = invoke("rlvr-train", [TINY, "--print-config", "--set", "rollout.logprobs=raw", "--set", "rollout.temperature=0.7"])
    assert r.code == 0 and "warning: rollout.logprobs raw reports log-probs before the temperature" in r.stderr
