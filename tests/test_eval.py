"""rlvr-eval on the tiny model with the hf engine: the composition data -> rollout -> verify
-> summary (accuracy, IF metrics, pass@k) with the canonical settings recorded, resume and
skip of finished work, tool-using evaluation (--tools python). The watch loop and --jobs are tests/test_eval_jobs.py; the results
tables tests/test_eval_table.py."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import DATA, invoke
from rlvr.passk import pass_at_k
from test_verify_judge import server  # noqa: F401 - fixture: a scripted OpenAI-compatible judge

GSM8K = os.path.join(DATA, "eval", "gsm8k_test.jsonl")
IFEVAL = os.path.join(DATA, "eval", "ifeval_input_data.jsonl")
HF = ["--engine", "hf", "--dtype", "float32", "--verify-jobs", "1", "--max-model-len", "2048"]   # tiny: 2048 positions


def load(path):
    return [orjson.loads(ln) for ln in open(path, "rb")]


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


def test_greedy_eval_writes_completions_results_and_summary(tiny_model_dir, tmp_path):
    out = tmp_path / "gsm8k"
    r = invoke("rlvr-eval", [tiny_model_dir, str(out), "-b", "gsm8k", "--shots", "0", "--source", GSM8K, "--max-tokens", "12", *HF])
    assert r.code == 0, r.stderr
    line = orjson.loads(r.stdout)
    comps, results = load(out / "completions.jsonl"), load(out / "results.jsonl")
    summary = orjson.loads((out / "summary.json").read_bytes())
    assert line == {"checkpoint": tiny_model_dir, "benchmark": "gsm8k", "mode": "greedy",
                    "metrics": summary["metrics"], "records": 4}
    assert [c["id"] for c in comps] == [x["id"] for x in results] == [f"gsm8k/{i}" for i in range(4)]
    assert all(c["prompt"].startswith("Question: ") and c["prompt"].endswith("\nAnswer:") for c in comps)  # lm-eval's
    verdicts = [v for x in results for v in x["verdicts"]]
    assert len(verdicts) == 4
    m = summary["metrics"]
    assert set(m) == {"exact_match,strict-match", "exact_match,flexible-extract", "rlvr_verify,none"}
    assert m["rlvr_verify,none"] == sum(v["status"] == "correct" for v in verdicts) / 4
    for key in ("exact_match,strict-match", "exact_match,flexible-extract"):   # lm-eval's per-sample scores, averaged
        assert m[key] == sum(x["lm_eval_metrics"][key] for x in results) / 4
    s = summary["settings"]
    assert s["sampling"] == {"n": 1, "temperature": 0.0, "top_p": 1.0, "top_k": 0, "max_tokens": 12,
                             "stop": [], "seed": 42, "logprobs": False}
    assert s["stop"] == ["Question:", "</s>", "<|im_end|>"] and all(c["stop"] == s["stop"] for c in comps)
    assert s["engine_options"]["seed"] == 42 and s["engine_options"]["tensor_parallel_size"] == 1
    assert s["engine_options"]["gpu_memory_utilization"] == 0.8 and s["lm_eval_task"] == "gsm8k"
    assert s["num_fewshot"] == 0 and s["fewshot_seed"] == 42
    assert summary["finish_reasons"] == {"length": 4} or sum(summary["finish_reasons"].values()) == 4

    # A second run finds summary.json and does nothing; a lost summary is rebuilt from the
    # completions already written (nothing is generated again).
    before = (out / "completions.jsonl").read_bytes()
    r = invoke("rlvr-eval", [tiny_model_dir, str(out), "-b", "gsm8k", "--shots", "0", "--source", GSM8K, "--max-tokens", "12", *HF])
    assert r.code == 0 and orjson.loads(r.stdout) == line
    (out / "summary.json").unlink()
    lines = before.splitlines(keepends=True)
    (out / "completions.jsonl").write_bytes(b"".join(lines[:2]) + lines[2][:30])   # interrupted mid-write
    r = invoke("rlvr-eval", [tiny_model_dir, str(out), "-b", "gsm8k", "--shots", "0", "--source", GSM8K, "--max-tokens", "12", *HF])
    assert r.code == 0, r.stderr
    assert (out / "completions.jsonl").read_bytes() == before
    assert orjson.loads((out / "summary.json").read_bytes())["metrics"] == summary["metrics"]


def test_pass_at_k_and_instruction_following_metrics(tiny_model_dir, tmp_path):
    out = tmp_path / "evals"
    # if_multi_constraints (the users' name of the dataset) is another name of the if_multi benchmark
    r = invoke("rlvr-eval", [tiny_model_dir, str(out), "-b", "if_multi_constraints", "-b", "toy", "--source", f"if_multi={IFEVAL}",
                             "--max-tokens", "16", "--limit", "4", "--pass-at-k", "4", *HF])
    assert r.code == 0, r.stderr
    assert [orjson.loads(x)["benchmark"] for x in r.stdout.splitlines()] == ["if_multi", "toy"]
    for bench in ("if_multi", "toy"):
        d = out / f"{bench}-pass@4"
        results = load(d / "results.jsonl")
        summary = orjson.loads((d / "summary.json").read_bytes())
        table = orjson.loads((d / "pass_at_k.json").read_bytes())
        assert summary["mode"] == "pass@4" and summary["settings"]["sampling"]["temperature"] == 1.0
        assert all(len(x["completions"]) == 4 for x in results) and len(results) == 4
        assert table["k"] == [1, 2, 4]
        for k in (1, 2, 4):
            expected = sum(pass_at_k(4, sum(w >= 1 for w in x["rewards"]), k) for x in results) / 4
            assert table[f"pass@{k}"] == pytest.approx(expected) == summary["metrics"][f"pass@{k}"]
    summary = orjson.loads((out / "if_multi-pass@4" / "summary.json").read_bytes())
    results = load(out / "if_multi-pass@4" / "results.jsonl")
    strict = [v["strict"] for x in results for v in x["verdicts"]]
    loose = [v["loose"] for x in results for v in x["verdicts"]]
    m = summary["metrics"]
    assert m["prompt_level_strict_acc"] == pytest.approx(sum(all(s) for s in strict) / len(strict))
    assert m["inst_level_strict_acc"] == pytest.approx(sum(map(sum, strict)) / sum(map(len, strict)))
    assert m["prompt_level_loose_acc"] == pytest.approx(sum(all(s) for s in loose) / len(loose))
    assert m["inst_level_loose_acc"] == pytest.approx(sum(map(sum, loose)) / sum(map(len, loose)))


def test_tool_using_evaluation_keeps_trajectories_and_scores_the_final_answer(tiny_model_dir, tmp_path):
    """rlvr-eval --tools python: on the scripted engine the trajectories, their tool calls and
    the verdicts are exact (the final model turn's answer is scored: 8 is wrong although the
    tool printed 7); the tiny model runs the command end to end with its settings recorded,
    and a sweep's child gets the same tool options."""
    from fakes.scripted_engine import ScriptedEngine, in_turns

    from rlvr.engines.base import load_tokenizer
    from rlvr.eval import jobs as sweep
    from rlvr.eval import runner as ev
    from rlvr.tools import ToolSettings

    tools = ToolSettings(timeout_s=2.0)
    opts = ev.EvalOptions(engine="hf", limit=2, verify_jobs=1, tools=tools, max_tokens=128)   # toy: 32 tokens
    recs = ev.prompts("toy", opts)
    code = "Let me add.\n```python\nprint(3 + 4)\n```"
    answers = {recs[0]["prompt"]: in_turns([code, " So it is 7."], recs[0]["prompt"]),
               recs[1]["prompt"]: in_turns([code, " So it is 8."], recs[1]["prompt"])}
    eng = ScriptedEngine(load_tokenizer(tiny_model_dir), lambda text: next(f(text) for p, f in answers.items()
                                                                             if text.startswith(p)))
    summary = ev.evaluate_one("scripted", str(tmp_path / "s"), "toy", opts, recs, eng)
    results = load(tmp_path / "s" / "results.jsonl")
    assert [x["rewards"] for x in results] == [[1.0], [0.0]] and summary["metrics"]["accuracy"] == 0.5
    for x in results:
        [turns] = x["trajectories"]
        assert [t["role"] for t in turns] == ["model", "tool", "model"] and turns[1]["output"] == "7\n"
        assert x["completions"] == ["".join(t["text"] for t in turns)]
        assert x["generation"]["sampling"]["tools"] == tools.to_dict()
    assert summary["tools"] == {"settings": tools.to_dict(), "calls": 2, "calls_per_completion": 1.0,
                                "completions_with_calls": 2, "statuses": {"ok": 2}}
    # the tiny model, end to end (markers it writes often: "a" ... "e")
    out = tmp_path / "tiny"
    args = [tiny_model_dir, str(out), "-b", "toy", "--limit", "2", "--max-tokens", "32", "--tools", "python",
            "--tool-markers", "a|e", "--max-turns", "2", "--tool-output-chars", "10", "--tool-timeout", "1", *HF]
    r = invoke("rlvr-eval", args)
    assert r.code == 0, r.stderr
    summary = orjson.loads((out / "summary.json").read_bytes())
    results = load(out / "results.jsonl")
    turns = [t for x in results for t in x["trajectories"]]
    assert len(turns) == 2 and summary["tools"]["settings"]["markers"] == [["a", "e"]]
    assert summary["tools"]["calls"] == sum(t["role"] == "tool" for tr in turns for t in tr)
    assert all(sum(t["role"] == "model" for t in tr) <= 2 and tr[-1]["tokens"][1] <= 32 for tr in turns)
    assert summary["metrics"]["accuracy"] == sum(x["rewards"][0] for x in results) / 2
    unit = sweep.unit_command(sweep.Unit("/c", "o", sweep.Task("toy")), ev.EvalOptions(tools=ToolSettings(
        markers=(("a", "e"),), max_turns=2, max_output_chars=10, timeout_s=1.0)), None)
    assert " ".join(unit).endswith("--tools python --max-turns 2 --tool-markers a|e --tool-output-chars 10 "
                                   "--tool-timeout 1")
    r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path / "lm"), "-b", "gsm8k", "--harness", "lm-eval",
                             "--tools", "python"])
    assert r.code == 2 and "--tools" in r.stderr


def test_usage_errors(tiny_model_dir, tmp_path):
    r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path), "-b", "gsm9k"])
    assert r.code == 2 and "unknown benchmark 'gsm9k'" in r.stderr
    r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path)])
    assert r.code == 2 and "--benchmark" in r.stderr
    r = invoke("rlvr-eval", ["--watch", "x/*", "a", "b", "-b", "toy"])
    assert r.code == 2 and "--watch GLOB OUT_DIR" in r.stderr
    r = invoke("rlvr-eval", [str(tmp_path / "missing"), str(tmp_path / "o"), "-b", "toy", *HF])
    assert r.code == 2 and "no such model folder" in r.stderr


def test_a_judge_grades_the_checkpoint(tiny_model_dir, tmp_path, server):  # noqa: F811
    """--judge: every completion goes to the LLM judge (a scripted OpenAI-compatible server that
    replies "Score: 9") through the rubric given; the results carry its verdicts and replies, the
    metrics count them (the tiny model's answers are noise: its own verifier would not), and
    summary.json names the judge."""
    out = tmp_path / "toy"
    judge = ["--judge", server.url, "--judge-model", "judge-m", "--judge-cache", str(tmp_path / "cache"),
             "--judge-rubric", "Grade {completion} for: {prompt} Score:"]
    r = invoke("rlvr-eval", [tiny_model_dir, str(out), "-b", "toy", "--limit", "3", "--max-tokens", "4", *judge, *HF])
    assert r.code == 0, r.stderr
    results, summary = load(out / "results.jsonl"), orjson.loads((out / "summary.json").read_bytes())
    verdicts = [v for x in results for v in x["verdicts"]]
    assert len(verdicts) == 3 and len(server.bodies) == 3
    for x in results:
        [v] = x["verdicts"]
        assert v["verifier"] == "judge" and v["status"] == "correct" and x["rewards"] == [1.0]
        assert v["judge"]["reply"] == "Score: 9" and v["judge"]["model"] == "judge-m"
    sent = sorted(b["messages"][0]["content"] for b in server.bodies)
    assert sent == sorted(f"Grade {x['completions'][0]} for: {x['prompt']} Score:" for x in results)
    assert summary["metrics"]["accuracy"] == 1.0   # the rule verifier (answer 7) would not say so
    assert summary["settings"]["judge"]["base_url"] == server.url and summary["settings"]["judge"]["model"] == "judge-m"
    # a judge without an endpoint, or beside another harness: refused before any engine starts
    r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path / "x"), "-b", "toy", "--judge-model", "m", *HF])
    assert r.code == 2 and "judge.base_url is required" in r.stderr and not (tmp_path / "x").exists()
    r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path / "y"), "-b", "gsm8k", "--harness", "lm-eval", *judge])
    assert r.code == 2 and "--judge goes with rlvr's own harness" in r.stderr


def test_tensor_parallel_is_refused_with_the_reason(tiny_model_dir, tmp_path):
    for harness in ("rlvr", "lm-eval"):
        r = invoke("rlvr-eval", [tiny_model_dir, str(tmp_path / harness), "-b", "minerva_math", "--harness", harness,
                                 "--tensor-parallel-size", "2"])
        assert r.code == 2 and "tensor parallel 1 only" in r.stderr and "minerva_math" in r.stderr
        assert not (tmp_path / harness).exists()
