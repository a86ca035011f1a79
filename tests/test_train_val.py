"""Validation inside training on the tiny model (hf engine): val/ metrics and completions equal
rlvr-eval's on the same checkpoint with the same settings; the run's trackers (those installed)
mirror the trace, validation lines included; a validated step is synced to the engines whatever
sync.every_steps, and its line names the weights that generated it; which steps are validated,
and what a resume keeps; with rollout.tools a validation runs the tool loop on the engine
actors and equals rlvr-eval --tools."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import invoke
from rlvr.trackers import TRACKERS, mlflow_name
from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures
from test_trackers import installed, read_back

# pass@4: 4 seeded samples per prompt at temperature 1.0, so the scores are not all 0 on a tiny model
EVAL = ("eval.benchmarks=[toy]", "eval.every=2", "eval.before_training=true", "eval.limit=6", "eval.max_tokens=10",
        "eval.n=4")
LEAF = "toy-pass@4"


def load(path):
    return [orjson.loads(ln) for ln in open(path, "rb")]


def test_validation_equals_rlvr_eval_and_reaches_the_trackers(ray_session, base_model, tmp_path, monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "file:" + str(tmp_path / "mlruns"))
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    names = [t for t in TRACKERS if installed(t)]
    run_dir = tmp_path / "run"
    # sync.every_steps 2 would leave the engines at version 0 for step 1: a validated step is synced all the same
    cfg = cfg_for(base_model, *SMALL, "train.steps=2", "train.max_staleness=1", *EVAL, "eval.every=1",
                  "sync.every_steps=2", f"log.trackers=[{','.join(names)}]")
    run(cfg, run_dir)
    rows = trace(run_dir)
    train_rows = [r for r in rows if "reward/mean" in r]
    val_rows = {r["step"]: r for r in rows if "val/toy/accuracy" in r}
    assert [r["step"] for r in train_rows] == [1, 2]
    assert [r["sync/engine_version"] for r in train_rows] == [1, 2]
    assert sorted(val_rows) == [0, 1, 2]              # before training, and every step
    from rlvr.train.spans import read_spans

    vals = [s for s in read_spans(str(run_dir / "traces" / "spans.jsonl")) if s["kind"] == "validation"]
    assert sorted(s["step"] for s in vals) == [0, 1, 2]   # each validation on the timeline, sent to written
    assert all(s["actor"] == "validation" and s["end"] >= s["start"] for s in vals)
    for step, row in val_rows.items():
        s = orjson.loads((run_dir / "val" / f"step_{step:06d}" / LEAF / "summary.json").read_bytes())
        assert row["val/toy/accuracy"] == s["metrics"]["accuracy"] and s["policy_version"] == step
        assert row["policy_version"] == row["val/policy_version_max"] == step and s["policy_versions"] == [step]
        assert "warning" not in s
        assert s["settings"]["sampling"]["temperature"] == 1.0 and s["settings"]["sampling"]["seed"] == 42
        assert row["val/toy/pass@4"] == s["metrics"]["pass@4"]
        recs = load(run_dir / "val" / f"step_{step:06d}" / LEAF / "completions.jsonl")
        assert len(recs) == 6 and all(r["generation"]["policy_version"] == step for r in recs)

    # rlvr-eval on the checkpoint of step 2 with the same settings: the same completions and metrics
    ck = run_dir / "checkpoints" / "step_000002"
    out = tmp_path / "eval"
    r = invoke("rlvr-eval", [str(ck), str(out), "-b", "toy", "--engine", "hf", "--dtype", "float32",
                             "--max-model-len", str(cfg.rollout.max_model_len), "--limit", "6", "--max-tokens", "10",
                             "--pass-at-k", "4", "--verify-jobs", "1"])
    assert r.code == 0, r.stderr
    ev = orjson.loads((out / "summary.json").read_bytes())
    val = orjson.loads((run_dir / "val" / "step_000002" / LEAF / "summary.json").read_bytes())
    assert val["metrics"] == ev["metrics"] and val["metrics"]["pass@4"] > 0
    timing = ("mean_duration_s", "max_duration_s")
    assert {k: v for k, v in val["verify"].items() if k not in timing} == \
           {k: v for k, v in ev["verify"].items() if k not in timing}
    assert orjson.loads((run_dir / "val" / "step_000002" / LEAF / "pass_at_k.json").read_bytes()) == \
           orjson.loads((out / "pass_at_k.json").read_bytes())
    mine = load(run_dir / "val" / "step_000002" / LEAF / "results.jsonl")
    theirs = load(out / "results.jsonl")
    assert [(x["id"], x["completions"], x["rewards"]) for x in mine] == \
           [(x["id"], x["completions"], x["rewards"]) for x in theirs]
    # a step-0 validation saw other weights (the same prompts)
    first = load(run_dir / "val" / "step_000000" / LEAF / "results.jsonl")
    assert [x["id"] for x in first] == [x["id"] for x in mine]
    # rlvr-eval --table and rlvr-passk read the val/ folder as they read rlvr-eval's
    t = invoke("rlvr-eval", ["--table", str(run_dir / "val")])
    # eval.max_tokens 10 is not toy's own 32: the table's column says so
    assert t.code == 0 and "step_000002" in t.stdout and "toy_10tok-pass@4" in t.stdout, t.stdout + t.stderr
    p = invoke("rlvr-passk", [str(run_dir / "val" / "step_000002" / LEAF / "results.jsonl")])
    assert p.code == 0, p.stderr

    for name in names:   # every line of the trace, validation lines included, under its own step
        got = read_back(name, run_dir)
        key = (lambda k: mlflow_name(k, file_store=True)) if name == "mlflow" else (lambda k: k)
        assert got[key("reward/mean")] == {r["step"]: r["reward/mean"] for r in train_rows}, name
        assert got[key("kl/max")] == {r["step"]: r["kl/max"] for r in train_rows}, name   # beside `kl`
        assert got[key("val/toy/accuracy")] == {s: r["val/toy/accuracy"] for s, r in val_rows.items()}, name


def test_which_steps_are_validated_and_what_a_resume_keeps(tmp_path):
    from rlvr.errors import ConfigError
    from rlvr.train.config import EvalConfig
    from rlvr.train.validation import Validation, clear_after, val_dir

    def make(**kw):
        e = EvalConfig(benchmarks=["toy"], limit=3, **kw)
        return Validation(e, str(tmp_path), engine="hf", dtype="float32", max_model_len=256, verify_jobs=1,
                          total_steps=7, base_model="base", log=print)

    v = make(every=3, before_training=True)
    assert [s for s in range(8) if v.due(s)] == [0, 3, 6, 7]
    assert [s for s in range(8) if make(every=0).due(s)] == [7]           # every 0: after the last step only
    assert make().due(5, last=True)                                       # the data ran out at step 5
    assert len(v.records["toy"]) == 3
    for step in (3, 6):
        d = os.path.join(val_dir(str(tmp_path), step), "toy")
        os.makedirs(d)
        open(os.path.join(d, "summary.json"), "w").write("{}")
    assert v.done(3) and v.done(6) and not v.done(7)
    clear_after(str(tmp_path), 3)                                         # resumed from the checkpoint of step 3
    assert sorted(os.listdir(tmp_path / "val")) == ["step_000003"]
    with pytest.raises(ConfigError, match="toy generates up to 32 tokens"):
        Validation(EvalConfig(benchmarks=["toy"]), str(tmp_path), engine="hf", dtype="float32", max_model_len=32,
                   verify_jobs=1, total_steps=7, base_model="base", log=print)


def test_a_validation_line_names_the_weights_that_generated_it(tmp_path):
    from rlvr.train.config import EvalConfig
    from rlvr.train.validation import Pending, Validation

    logged = []
    v = Validation(EvalConfig(benchmarks=["toy"], limit=3), str(tmp_path), engine="hf", dtype="float32",
                   max_model_len=256, verify_jobs=1, total_steps=7, base_model="base", log=logged.append)
    p = Pending(3, 96.0, 10.0, 0.0, results={"toy": {"metrics": {"accuracy": 0.5}, "policy_versions": [3]}})
    line = v._line(p)
    assert line["policy_version"] == 3 and line["val/policy_version_max"] == 3.0
    assert not [m for m in logged if "warning" in m]
    # in flight: the update of step 4 landed while the validation of step 3 generated
    p.results["toy"]["policy_versions"] = [3, 4]
    line = v._line(p)
    assert line["step"] == 3 and line["policy_version"] == 3 and line["val/policy_version_max"] == 4.0
    assert line["val/toy/accuracy"] == 0.5 and [m for m in logged if "warning" in m and "version(s) [3, 4]" in m]


def test_validation_with_rollout_tools_runs_the_tool_loop_and_equals_rlvr_eval(tiny_model_dir, tmp_path, monkeypatch):
    """rollout.tools: a validation hands the tool settings to the engine actors (one EngineActor on
    the hf engine, called in this process: Ray's get and wait are the identity here), its records
    keep the trajectories, summary.json counts the tool calls, and the completions equal
    rlvr-eval's with the same tools (evaluate_one on the engine itself, the single-engine tool
    loop). Markers "a" ... "e", which the tiny model writes often, make it call the tool."""
    from dataclasses import replace
    from types import SimpleNamespace

    from rlvr.eval.runner import evaluate_one
    from rlvr.tools import ToolSettings
    from rlvr.train import ray_calls
    from rlvr.train.actors import EngineActor
    from rlvr.train.config import EvalConfig
    from rlvr.train.validation import Validation, val_dir

    class Ref:   # an answered call, as ray.get returns it
        def __init__(self, value):
            self.value = value

    monkeypatch.setattr(ray_calls, "wait", lambda refs, num_returns=1: (refs[:1], refs[1:]))
    monkeypatch.setattr(ray_calls, "get", lambda ref: ref.value)
    actor = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512})
    local = SimpleNamespace(generate=SimpleNamespace(remote=lambda *a: Ref(actor.generate(*a))))
    tools = ToolSettings(markers=(("a", "e"),), max_turns=3, max_output_chars=20, timeout_s=1.0)
    lines: list = []
    v = Validation(EvalConfig(benchmarks=["toy"], limit=3, n=2, max_tokens=32), str(tmp_path), engine="hf",
                   dtype="float32", max_model_len=512, verify_jobs=1, total_steps=1, base_model=tiny_model_dir,
                   log=print, tools=tools)
    try:
        v.attach(lambda: [local], actor.engine.tokenizer, {"dtype": "float32"}, 512)
        v.start(0)
        v.poll(SimpleNamespace(metrics=lines.append), wait=True)
        [line] = lines
        assert line["step"] == 0 and any(k.startswith("val/toy/") for k in line), line
        out = os.path.join(val_dir(str(tmp_path), 0), "toy-pass@2")
        got = load(os.path.join(out, "results.jsonl"))
        summary = orjson.loads(open(os.path.join(out, "summary.json"), "rb").read())
        ref = evaluate_one(tiny_model_dir, str(tmp_path / "eval"), "toy", replace(v.opts), v.records["toy"],
                           actor.engine, pool=v.pools["toy"])
    finally:
        v.close()
        actor.engine.close()
    assert summary["tools"]["settings"] == tools.to_dict() and summary["tools"]["calls"] > 0, summary["tools"]
    assert summary["tools"] == ref["tools"] and summary["metrics"] == ref["metrics"]
    want = load(str(tmp_path / "eval" / "results.jsonl"))
    assert [r["completions"] for r in got] == [r["completions"] for r in want]
    assert [r["trajectories"] for r in got] == [r["trajectories"] for r in want]
    assert all(len(r["trajectories"]) == 2 for r in got) and all("rewards" in r for r in got)


def test_eval_section_errors_exit_2():
    from test_trackers import TINY

    for sets, msg in ((["eval.benchmarks=[nosuch]"], "eval.benchmarks: unknown benchmark 'nosuch'"),
                      (["eval.benchmarks=[toy]", "eval.source={gsm8k: x.jsonl}"], "eval.source: 'gsm8k' is not one"),
                      (["eval.benchmarks=[toy]", "eval.every=-1"], "eval.every must be >= 0"),
                      (["eval.benchmarks=[toy]", "eval.max_tokens=4096"], "eval.max_tokens 4096 must be")):
        r = invoke("rlvr-train", [TINY, *[a for s in sets for a in ("--set", s)], "--print-config"])
        assert r.code == 2 and msg in r.stderr, (sets, r.stderr)
