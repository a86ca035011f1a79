"""rlvr-eval --table: rlvr summaries (today's metric names and lm-eval's) and lm-eval result
files in lm-eval's own layout read into one checkpoint x task x metric table, CSV and
Markdown, with differences to a baseline YAML (the shipped Qwen3-1.7B-Base one included)."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import REPO, invoke
from rlvr.errors import BadInput
from rlvr.eval import table as tables

QWEN = os.path.join(REPO, "configs", "baselines", "qwen3-1.7B-base.yaml")


def put_summary(root, folder, ckpt, bench, metrics, mode="greedy", **extra):
    d = root / folder
    d.mkdir(parents=True)
    (d / "summary.json").write_bytes(orjson.dumps({"checkpoint": ckpt, "benchmark": bench, "mode": mode,
                                                   "metrics": metrics, **extra}))


def lm_eval_results(model, task, shots, metrics, subtasks=None) -> dict:
    """A results file as lm-eval 0.4 writes it (output_path/<model_name_sanitized>/results_<date>.json)."""
    results = {task: {"alias": task, **metrics}}
    for sub, m in (subtasks or {}).items():
        results[sub] = {"alias": f" - {sub}", **m}
    return {"results": results, "group_subtasks": {task: list(subtasks or {})},
            "configs": {task: {"task": task, "num_fewshot": shots}}, "versions": {task: 3.0},
            "n-shot": {task: shots, **{s: shots for s in subtasks or {}}},
            "higher_is_better": {task: {k.split(",")[0]: True for k in metrics}},
            "config": {"model": "vllm", "model_args": f"pretrained={model},tensor_parallel_size=1,seed=42"},
            "model_name": model, "model_name_sanitized": model.replace("/", "__"), "date": 1763900000.0}


def put_lm_eval(root, folder, name, data):
    d = root / folder / data["model_name_sanitized"]
    d.mkdir(parents=True, exist_ok=True)
    (d / name).write_bytes(orjson.dumps(data))


@pytest.fixture
def evals(tmp_path):
    root = tmp_path / "evals"
    # rlvr summaries: today's keys, lm-eval's keys with a shot count, pass@k mode
    put_summary(root, "step_10/gsm8k", "/ck/step_10", "gsm8k", {"accuracy": 0.5})
    put_summary(root, "step_2/gsm8k", "/ck/step_2", "gsm8k", {"accuracy": 0.25})
    put_summary(root, "step_2/ifeval_0shot", "/ck/step_2", "ifeval",
                {"prompt_level_strict_acc,none": 0.3, "inst_level_strict_acc,none": None}, settings={"shots": 0})
    put_summary(root, "step_2/gsm8k_8shot", "/ck/step_2", "gsm8k",
                {"exact_match,strict-match": 0.72, "exact_match,flexible-extract": 0.75,
                 "exact_match_stderr,strict-match": 0.01}, shots=8)
    put_summary(root, "step_2/math500-pass@4", "/ck/step_2", "math500", {"pass@1": 0.1, "pass@4": 0.3}, mode="pass@4")
    # lm-eval's runs of a base model: OUT/<name>/<task>_<N>shot/<model_name_sanitized>/results_<date>.json
    old = lm_eval_results("/models/base", "gsm8k", 8, {"exact_match,strict-match": 0.1})
    put_lm_eval(root, "base/gsm8k_8shot", "results_2026-11-22T10-00-00.000001.json", old)   # a rerun replaced it
    new = lm_eval_results("/models/base", "gsm8k", 8, {"exact_match,strict-match": 0.6960,
                                                       "exact_match_stderr,strict-match": 0.0127,
                                                       "exact_match,flexible-extract": 0.7013,
                                                       "exact_match_stderr,flexible-extract": 0.0126})
    put_lm_eval(root, "base/gsm8k_8shot", "results_2026-11-23T10-00-00.000001.json", new)
    mm = lm_eval_results("/models/base", "minerva_math", 4, {"exact_match,none": 0.282, "math_verify,none": 0.3908},
                         subtasks={"minerva_math_algebra": {"exact_match,none": 0.4}})
    put_lm_eval(root, "base/minerva_math_4shot", "results_2026-11-23T11-00-00.000001.json", mm)
    # lm-eval run straight into the root: named by its model
    put_lm_eval(root, "", "results_2026-11-23T12-00-00.json",
                lm_eval_results("/models/other", "ifeval", 0, {"prompt_level_strict_acc,none": 0.2126}))
    # neither kind: ignored
    (root / "step_2" / "gsm8k" / "results.jsonl").write_text('{"id": 1}\n')
    (root / "notes").mkdir()
    (root / "notes" / "summary.json").write_text('{"all": {"accuracy": 1.0}}')
    (root / "notes" / "results_x.json").write_text("not json")
    return root


def test_rlvr_summaries_and_lm_eval_results_in_one_table(evals):
    scores = {(s.checkpoint, s.task, s.metric): s.value for s in tables.collect(str(evals))}
    assert scores == {
        ("step_10", "gsm8k", "accuracy"): 0.5,
        ("step_2", "gsm8k", "accuracy"): 0.25,
        ("step_2", "ifeval_0shot", "prompt_level_strict_acc,none"): 0.3,
        ("step_2", "ifeval_0shot", "inst_level_strict_acc,none"): None,
        ("step_2", "gsm8k_8shot", "exact_match,strict-match"): 0.72,
        ("step_2", "gsm8k_8shot", "exact_match,flexible-extract"): 0.75,
        ("step_2", "math500-pass@4", "pass@1"): 0.1,
        ("step_2", "math500-pass@4", "pass@4"): 0.3,
        ("base", "gsm8k_8shot", "exact_match,strict-match"): 0.6960,
        ("base", "gsm8k_8shot", "exact_match,flexible-extract"): 0.7013,
        ("base", "minerva_math_4shot", "exact_match,none"): 0.282,
        ("base", "minerva_math_4shot", "math_verify,none"): 0.3908,
        ("/models/other", "ifeval_0shot", "prompt_level_strict_acc,none"): 0.2126,
    }
    csv = tables.render(tables.collect(str(evals)), "csv").splitlines()
    assert csv[0] == ('checkpoint,gsm8k accuracy,"gsm8k_8shot exact_match,flexible-extract",'
                      '"gsm8k_8shot exact_match,strict-match","ifeval_0shot inst_level_strict_acc,none",'
                      '"ifeval_0shot prompt_level_strict_acc,none",math500-pass@4 pass@1,math500-pass@4 pass@4,'
                      '"minerva_math_4shot exact_match,none","minerva_math_4shot math_verify,none"')
    assert csv[1:] == ["/models/other,,,,,0.2126,,,,",
                       "base,,0.7013,0.6960,,,,,0.2820,0.3908",
                       "step_2,0.2500,0.7500,0.7200,,0.3000,0.1000,0.3000,,",
                       "step_10,0.5000,,,,,,,,"]        # step_2 before step_10
    md = tables.render(tables.collect(str(evals)), "markdown").splitlines()
    assert md[1] == "|---" + "|---:" * 9 + "|" and md[5] == "| step_10 | 0.5000 |" + "  |" * 8
    r = invoke("rlvr-eval", ["--table", str(evals), "--format", "csv"])
    assert r.code == 0 and r.stdout.splitlines() == csv


def test_baseline_adds_a_row_and_each_checkpoints_difference(evals, tmp_path):
    base = tables.load_baseline(QWEN)
    assert base.name == "Qwen3-1.7B-Base" and len(base.scores) == 16
    assert base.scores[("gsm8k_8shot", "exact_match,strict-match")] == pytest.approx(0.6960)
    assert base.scores[("mbpp_3shot", "pass_at_1,none")] == pytest.approx(0.558)
    assert base.scores[("ifeval_0shot", "inst_level_strict_acc,none")] == pytest.approx(0.3285)
    r = invoke("rlvr-eval", ["--table", str(evals), "--format", "csv", "--baseline", QWEN])
    assert r.code == 0, r.stderr
    lines = r.stdout.splitlines()
    # the baseline's columns first (its order; the ones nothing here measured left out), each with a difference
    assert lines[0].startswith('checkpoint,"gsm8k_8shot exact_match,flexible-extract",Δ,'
                               '"gsm8k_8shot exact_match,strict-match",Δ,"minerva_math_4shot exact_match,none",Δ,'
                               '"minerva_math_4shot math_verify,none",Δ,"ifeval_0shot prompt_level_strict_acc,none",Δ,'
                               '"ifeval_0shot inst_level_strict_acc,none",Δ,gsm8k accuracy,')
    assert lines[1].startswith("baseline: Qwen3-1.7B-Base,0.7013,,0.6960,,0.2820,,0.3908,,0.2126,,0.3285,,,")
    assert lines[3].startswith("base,0.7013,+0.0000,0.6960,+0.0000,0.2820,+0.0000,0.3908,+0.0000,,,,,,")
    assert lines[4].startswith("step_2,0.7500,+0.0487,0.7200,+0.0240,,,,,0.3000,+0.0874,,,0.2500,")
    md = invoke("rlvr-eval", ["--table", str(evals), "--baseline", QWEN]).stdout.splitlines()
    assert md[0].startswith("| checkpoint | gsm8k_8shot exact_match,flexible-extract | Δ |")
    assert md[2].startswith("| baseline: Qwen3-1.7B-Base | 0.7013 |  |")

    # a baseline in fractions, for a metric of today's summaries
    own = tmp_path / "own.yaml"
    own.write_text("name: mine\nscores:\n  gsm8k:\n    accuracy: 0.4\n")
    out = tables.render(tables.collect(str(evals)), "csv", tables.load_baseline(str(own))).splitlines()
    assert out[0].startswith("checkpoint,gsm8k accuracy,Δ,")
    assert out[1].startswith("baseline: mine,0.4000,,") and out[-1].startswith("step_10,0.5000,+0.1000,")


@pytest.mark.parametrize("text, where", [
    ("name: x\nunit: percent\nscores:\n  gsm8k_8shot:\n    exact_match,strict-match: high\n",
     ":5: field scores.gsm8k_8shot.exact_match,strict-match: not a number: 'high'"),
    ("name: x\nunit: permille\nscores: {a: {b: 1}}\n", ":2: field unit: must be fraction or percent"),
    ("name: x\nscores:\n  a: 3\n", ":3: field scores.a: must map metrics to scores"),
    ("name: x\nscore: {a: {b: 1}}\n", ":2: field score: unknown"),
    ("name: x\n", ":1: field scores: must map tasks"),
    ("name: [x\n", ": not YAML"),
])
def test_a_bad_baseline_names_the_line_and_field(tmp_path, text, where):
    p = tmp_path / "b.yaml"
    p.write_text(text)
    with pytest.raises(BadInput) as e:
        tables.load_baseline(str(p))
    assert str(e.value).startswith(str(p)) and where in str(e.value), str(e.value)
    r = invoke("rlvr-eval", ["--table", str(tmp_path), "--baseline", str(p)])
    assert r.code == 3 and where in r.stderr


def test_table_usage(tmp_path):
    r = invoke("rlvr-eval", ["--table", str(tmp_path / "missing")])
    assert r.code == 2 and "is not a folder" in r.stderr
    r = invoke("rlvr-eval", ["--table", str(tmp_path)])
    assert r.code == 0 and "no rlvr summaries or lm-eval results" in r.stderr and r.stdout.startswith("| checkpoint |")
    r = invoke("rlvr-eval", ["x", str(tmp_path), "-b", "toy", "--baseline", QWEN])
    assert r.code == 2 and "--baseline goes with --table" in r.stderr
    r = invoke("rlvr-eval", ["--table", str(tmp_path), "--baseline", str(tmp_path / "nope.yaml")])
    assert r.code == 2 and "cannot read" in r.stderr


def test_a_results_file_lm_eval_wrote_itself(tmp_path):
    """tests/data/eval/lm_eval_results_gsm8k_2shot.json: lm-eval 0.4.13's own output, in its
    own layout (OUT/<model_name_sanitized>/results_<date>.json, here below OUT/base/gsm8k_2shot)."""
    from helpers import DATA

    src = os.path.join(DATA, "eval", "lm_eval_results_gsm8k_2shot.json")
    d = tmp_path / "base" / "gsm8k_2shot" / "__ckpts__base"
    d.mkdir(parents=True)
    (d / "results_2026-11-23T21-23-00.797576.json").write_bytes(open(src, "rb").read())
    got = sorted((s.checkpoint, s.task, s.metric, s.value) for s in tables.collect(str(tmp_path)))
    assert got == [("base", "gsm8k_2shot", "exact_match,flexible-extract", 0.0),
                   ("base", "gsm8k_2shot", "exact_match,strict-match", 0.0)]     # not sample_len, not stderr
    # straight into OUT (lm_eval --output_path OUT): named by the model it records
    (tmp_path / "base" / "gsm8k_2shot" / "__ckpts__base").rename(tmp_path / "__ckpts__base")
    assert {s.checkpoint for s in tables.collect(str(tmp_path))} == {"/ckpts/base"}


def test_a_group_without_scores_keeps_its_subtasks(tmp_path):
    data = lm_eval_results("/m", "minerva_math", 4, {}, subtasks={"minerva_math_algebra": {"exact_match,none": 0.4},
                                                                   "minerva_math_geometry": {"exact_match,none": 0.2}})
    put_lm_eval(tmp_path, "m", "results_1.json", data)
    got = sorted((s.task, s.value) for s in tables.collect(str(tmp_path)))
    assert got == [("minerva_math_algebra_4shot", 0.4), ("minerva_math_geometry_4shot", 0.2)]


def test_lm_eval_output_path_ending_in_json_and_reruns(tmp_path):
    # lm_eval --output_path OUT/run.json writes OUT/run_<date>.json; the newest of a stem counts
    for date, x in (("2026-11-22T09-00-00.1", 0.1), ("2026-11-23T09-00-00.1", 0.5)):
        put_lm_eval(tmp_path, "ck", f"run_{date}.json", lm_eval_results("/m", "gsm8k", 8, {"exact_match,none": x}))
    put_lm_eval(tmp_path, "ck", "other.json", lm_eval_results("/m", "ifeval", 0, {"inst_level_strict_acc,none": 0.3}))
    got = sorted((s.checkpoint, s.task, s.value) for s in tables.collect(str(tmp_path)))
    assert got == [("ck", "gsm8k_8shot", 0.5), ("ck", "ifeval_0shot", 0.3)]


def test_checkpoint_names_of_one_step_are_one_row_in_step_order(tmp_path):
    """step100 (the users' runs), step_000100 (rlvr-train) and <run>_step100 (SageMaker uploads) name
    steps alike: rows go by step, not by string, and two spellings of one step are one row."""
    from rlvr.runs import checkpoint_key, checkpoint_step

    assert [checkpoint_step(n) for n in ("step_000100", "step100", "grpo-math_step100", "checkpoint-100",
                                         "x/step-7", "final", "mystep3")] == [100, 100, 100, 100, 7, None, None]
    assert checkpoint_key("r/step100") == checkpoint_key("r/step_000100") != checkpoint_key("r/run_step100")
    root = tmp_path / "evals"
    for folder, acc in (("run/step100/gsm8k", 0.5), ("run/step_000020/gsm8k", 0.2), ("run/step9/gsm8k", 0.1),
                        ("jobs/grpo_step100/gsm8k", 0.7), ("jobs/grpo_step20/gsm8k", 0.6)):
        put_summary(root, folder, "/c", "gsm8k", {"accuracy": acc})
    put_summary(root, "run/step_000100/math500", "/c", "math500", {"accuracy": 0.3})
    lines = tables.render(tables.collect(str(root)), "csv").splitlines()
    assert lines == ["checkpoint,gsm8k accuracy,math500 accuracy", "jobs/grpo_step20,0.6000,", "jobs/grpo_step100,0.7000,",
                     "run/step9,0.1000,", "run/step_000020,0.2000,", "run/step100,0.5000,0.3000"]


def test_two_spellings_of_one_step_with_different_scores_warn(tmp_path, capsys):
    root = tmp_path / "evals"
    put_summary(root, "run/step100/gsm8k", "/c", "gsm8k", {"accuracy": 0.5})
    put_summary(root, "run/step_000100/gsm8k", "/c", "gsm8k", {"accuracy": 0.7})
    lines = tables.render(tables.collect(str(root)), "csv").splitlines()
    assert lines == ["checkpoint,gsm8k accuracy", "run/step100,0.5000"]
    err = capsys.readouterr().err
    assert "run/step100 and run/step_000100 are one checkpoint with different scores for gsm8k accuracy: run/step100's shown" in err
    assert err.count("\n") == 1
