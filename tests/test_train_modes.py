"""rlvr-train's run modes end to end on the tiny model: resume in the same data order, two FSDP
trainer ranks, prompts over the context and stop strings, the DAPO preset. (Split from
test_train.py, whose fixtures it shares, so the files run side by side.)"""

from __future__ import annotations

import os

import orjson

from rlvr.runs import latest_checkpoint
from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


def test_resume_on_two_fsdp_ranks_continues_the_same_data_order(ray_session, base_model, tmp_path):
    # A run stopped after its step-2 checkpoint and resumed, its trainer two FSDP ranks, trains
    # on the same prompts step by step as an uninterrupted run would: batch k of the prompt
    # stream at step k+1. The ranks' optimizer shards are in each checkpoint and engines and
    # trainer agree on log-probs. run.json's plan records the gradient sync the plan chose.
    from rlvr.train.stream import PromptStream

    fsdp = ("train.num_trainers=2", "train.trainer_num_cpus=0.5", "checkpoint.every=2")
    part = tmp_path / "part"
    run(cfg_for(base_model, "train.steps=2", *fsdp, *SMALL), part)
    cfg = cfg_for(base_model, "train.steps=3", *fsdp, *SMALL)
    run(cfg, part, resume=True)
    stream = PromptStream(cfg.data)
    expected = [(k + 1, rec["id"]) for k in range(3) for rec, _ in stream.batch(k, cfg.rollout.prompts_per_step)]
    got = [(x["step"], x["id"]) for x in trace(part, "rollouts.jsonl")]
    assert sorted(got) == sorted(expected) and len(set(got)) == len(got)
    rows = trace(part)
    assert [r["step"] for r in rows] == [1, 2, 3]
    man = orjson.loads((part / "run.json").read_bytes())
    assert len(man["placement"]["trainer_ranks"]) == 2 and man["resumed_from_step"] == 2
    # train.grad_sync null on a CPU cluster (no GPU size to fit the unsharded gradients in): the plan's choice
    assert (man["plan"]["grad_sync"], man["plan"]["grad_sync_chosen"]) == ("per_microbatch", True)
    trained = [r for r in rows if r["train/sequences"] > 0]  # all-zero groups are filtered out
    assert trained and all(r["logprob/engine_vs_trainer_abs_diff"] < 1e-2 for r in trained)
    step, ck = latest_checkpoint(str(part))
    assert step == 3 and os.path.exists(os.path.join(ck, "optimizer_rank001.pt"))


def test_overlong_prompt_is_dropped_and_stop_strings_end_training_rollouts(ray_session, base_model, tmp_path,
                                                                           monkeypatch):
    # One prompt longer than the engine's context: it is kept back and written to the trace,
    # and no engine restarts. Stop strings (the config's, the dataset's and each record's own)
    # end the completions the trainer trains on; the dataset's own generation length holds.
    import rlvr.train.stream as stream_mod

    real = stream_mod.load_records

    def records(name, **kw):
        recs = real(name, **kw)[:16]
        recs[3] = dict(recs[3], prompt="count apples and say seven " * 60)
        return [dict(r, stop=[*(r.get("stop") or []), "#"]) for r in recs]

    monkeypatch.setattr(stream_mod, "load_records", records)
    cfg = cfg_for(base_model, "train.steps=2", "checkpoint.every=0", "data.limit=16", "rollout.prompts_per_step=8",
                  "rollout.n=4", 'rollout.stop=["q"]', 'rollout.stop_by_dataset={toy: ["z"]}',
                  "rollout.max_tokens_by_dataset={toy: 10}")
    assert cfg.rollout.engine == "vllm"
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[-1]["faults/dropped_prompts"] == 1 and rows[-1]["faults/engine_restarts"] == 0
    outs = trace(tmp_path, "rollouts.jsonl")
    dropped = [x for x in outs if x.get("generation", {}).get("status") == "prompt_too_long"]
    assert len(dropped) == 1 and dropped[0]["completions"] == [] and dropped[0]["generation"]["prompt_tokens"] > 232
    done = [x for x in outs if x["completions"]]
    assert len(done) == 15
    reasons = [r for x in done for r in x["stop_reasons"]]
    assert reasons.count("q") > 0 and reasons.count("#") > 0
    assert dropped[0]["stop"] == ["z", "#"] and dropped[0]["max_tokens"] == 10   # the dataset's, in the record
    assert max(max(x["completion_tokens"]) for x in done) == 10   # rollout.max_tokens is 24
    assert not any("q" in c or "#" in c for x in done for c in x["completions"])
    # the trainer's tokens are the engine's, which end at the stop
    for r in rows:
        assert r["train/tokens"] <= sum(sum(x["completion_tokens"]) for x in done if x["step"] == r["step"])


def test_dapo_preset_trains_full_batches_of_informative_groups(ray_session, base_model, tmp_path):
    cfg = cfg_for(base_model, "train.steps=2", "checkpoint.every=0", "preset=dapo", "dapo.max_extra_rounds=0", *SMALL)
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    assert sum(r["sampling/groups_filtered"] for r in rows) > 0     # groups of equal rewards were drawn...
    assert max(r["sampling/rounds"] for r in rows) > 1               # ...so more prompts were
    for r in rows:
        assert r["sampling/groups_trained"] == 8 and r["train/sequences"] == 8 * 4
        assert r["sampling/groups_drawn"] == 8 * r["sampling/rounds"]
    ids = [x["id"] for x in trace(tmp_path, "rollouts.jsonl")]
    assert len(ids) == sum(r["sampling/groups_drawn"] for r in rows) == len(set(ids))
