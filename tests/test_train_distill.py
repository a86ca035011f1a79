"""Distillation from a teacher in rlvr-train, end to end on the tiny model (the transformers
engine: scoring on vLLM is tested in test_engines.py): GKD alone from a separate frozen
teacher, whose KL to the policy falls; GRPO beside on-policy self-distillation, the policy
scoring its own completions on the rollout engines under a privileged prompt."""

from __future__ import annotations

import json

import pytest

from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


@pytest.fixture(scope="module")
def teacher_model(tmp_path_factory):
    """Another random tiny model: the same tokenizer, other weights."""
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("teacher") / "tiny"), seed=1)


def test_gkd_alone_brings_the_policy_to_a_frozen_teacher(ray_session, base_model, teacher_model, tmp_path):
    """GKD alone; the teacher engine is killed after the first step and replaced."""
    import ray

    from test_train_faults import act_when, first_step_done, kill_named

    cfg = cfg_for(base_model, *SMALL, "train.steps=8", "train.lr=1e-2", "checkpoint.every=0", "train.distill.weight=2",
                  "train.distill.only=true", "train.distill.jsd_beta=0.5", f"teacher.model={teacher_model}",
                  "teacher.engine=hf", "teacher.top_k=8", "teacher.engine_num_cpus=0.5")
    killed: list = []
    th = act_when(lambda: first_step_done(tmp_path), lambda: kill_named(ray, "rlvr-teacher-", killed))
    run(cfg, tmp_path)
    th.join(timeout=300)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 9))
    assert killed and rows[-1]["faults/teacher_restarts"] >= 1
    for r in rows:
        assert "loss/rl" not in r and "loss/policy" not in r             # no RL loss...
        assert "reward/mean" in r                                         # ...but the rewards are traced
        assert r["distill/scored"] == r["distill/sequences"] > 0 and r["distill/skipped_correct"] == 0
        assert r["loss/total"] == pytest.approx(2 * r["loss/distill"], rel=1e-5)
        assert r["distill/jsd"] > 0 and r["distill/payload_mb"] > 0 and r["time/teacher_s"] > 0
        assert 0 < r["distill/teacher_topk_mass"] <= 1.0001 and "distill/teacher_version" not in r
    # the policy's KL to the teacher falls (measured on each step's fresh samples: compare means)
    for key in ("distill/kl", "distill/jsd"):
        v = [r[key] for r in rows]
        assert sum(v[-3:]) / 3 < 0.85 * sum(v[:2]) / 2, (key, v)
    # and its samples become likelier under the teacher
    assert sum(r["distill/teacher_logprob"] for r in rows[-3:]) / 3 > sum(r["distill/teacher_logprob"] for r in rows[:2]) / 2
    samples = trace(tmp_path, "samples.jsonl")
    assert samples and all(s["teacher_prompt"] == s["prompt"] for s in samples)   # no template: the same prompt
    man = json.loads((tmp_path / "run.json").read_text())
    assert man["teacher"]["model"]["path"] == teacher_model and len(man["teacher"]["engines"]) == 1


def test_grpo_beside_self_distillation_under_a_privileged_prompt(ray_session, base_model, tmp_path):
    """Asynchronous (max_staleness 1): the scoring calls queue behind the next round's generation
    on the rollout engine, and score with the weights of the step before."""
    cfg = cfg_for(base_model, *SMALL, "train.steps=3", "train.max_staleness=1", "checkpoint.every=0",
                  "train.distill.weight=0.5",
                  "train.distill.only_incorrect=true", "train.distill.loss=kl", "teacher.model=policy",
                  "teacher.top_k=5")
    cfg.teacher.template = "{prompt} The answer is {answer}. {feedback}\n{prompt}"
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    rollouts = trace(tmp_path, "rollouts.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and max(r["staleness/max"] for r in rows) == 1
    for r in rows:
        step = [x for x in rollouts if x["step"] == r["step"]]
        wrong = sum(1 for x in step for n, v in zip(x["completion_tokens"], x["verdicts"])
                    if n and v["status"] != "correct")
        assert r["distill/scored"] == wrong and r["distill/sequences"] == wrong        # only the incorrect ones
        # (a step whose groups all have equal rewards has no RL sequences, hence no loss/rl)
        assert r["loss/total"] == pytest.approx(r.get("loss/rl", 0.0) + 0.5 * r["loss/distill"], rel=1e-4, abs=1e-6)
        assert r["distill/teacher_version"] == r["step"] - 1 == r["sync/engine_version"] - 1   # the current policy
        assert r["distill/kl"] > 0             # the privileged prompt changes the policy's distribution
    assert json.loads((tmp_path / "run.json").read_text())["teacher"]["model"] == "policy"
    shown = [s for s in trace(tmp_path, "samples.jsonl") if "teacher_prompt" in s]
    assert shown
    for s in shown:
        assert s["teacher_prompt"].startswith(s["prompt"] + " The answer is 7. ")
        assert s["teacher_prompt"].endswith("\n" + s["prompt"])
        assert "is wrong." in s["teacher_prompt"] or "No final answer was found." in s["teacher_prompt"]


def test_teacher_model_tiny_is_built_offline_and_scores_a_gkd_step(ray_session, base_model, tmp_path, monkeypatch):
    """teacher.model tiny builds rlvr's tiny model into the run folder (no hub: offline), with weights other than
    the policy's, and a GKD step trains against it on the CPU."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = cfg_for(base_model, *SMALL, "train.steps=2", "checkpoint.every=0", "train.distill.weight=1",
                  "train.distill.only=true", "teacher.model=tiny", "teacher.engine=hf", "teacher.top_k=8",
                  "teacher.engine_num_cpus=0.5")
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert all(r["distill/scored"] > 0 and r["distill/kl"] > 0 for r in rows)   # other weights: a KL to close
    man = json.loads((tmp_path / "run.json").read_text())
    assert man["teacher"]["model"]["path"] == str(tmp_path / "teacher_model")
    assert (tmp_path / "teacher_model" / "config.json").exists()
