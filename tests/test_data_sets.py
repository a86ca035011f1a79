"""rlvr-data: DeepScaleR, APPS, RLVR-IFeval, MMLU, AIME and BeyondAIME rows; row filters;
format-string templates; per-dataset stop strings, generation lengths and assistant prefixes."""

from __future__ import annotations

import os

import pytest

from helpers import DATA, invoke
from rlvr.data import load_records
from rlvr.data.filters import compile_filters, per_dataset
from rlvr.errors import ConfigError

D = os.path.join(DATA, "datasets")
MATH = os.path.join(DATA, "lmeval", "math", "test.jsonl")   # hendrycks_math rows: level "Level N", type


def data(*args):
    r = invoke("rlvr-data", list(args))
    assert r.code == 0, r.stderr
    return r.records(), r.stderr


def test_deepscaler_rows_are_math_records():
    recs, _ = data("deepscaler", "--source", f"{D}/deepscaler", "--template", "minerva")
    assert len(recs) == 4 and recs[0]["verifier"] == "math" and recs[0]["answer"] == "-\\frac{2}{3}"
    assert recs[0]["id"] == "deepscaler/train/0"
    assert recs[1]["prompt"].startswith("Problem:\nDoug constructs") and recs[1]["prompt"].endswith("\n\nSolution:")


def test_apps_rows_become_stdio_and_call_tests():
    recs, err = data("apps", "--source", f"{D}/apps")
    assert [r["id"] for r in recs] == [f"apps/test/{i}" for i in range(5)]
    assert "1 of 6 apps rows have no tests and were left out" in err  # the row without input_output
    water, sums, two_sum, codewars, power = recs
    assert water["verifier"] == "code" and water["difficulty"] == "introductory"
    assert water["stdio_tests"][0] == {"input": "8\n", "output": "YES\n"} and len(water["stdio_tests"]) == 6
    assert sums["stdio_tests"][0]["output"] == "3\n0"   # an output given as a list of lines
    assert two_sum["tests"][0] == "assert _apps_match(Solution().twoSum([2, 7, 11, 15], 9), [[0, 1]])"
    assert "def _apps_match" in two_sum["test_setup"]
    assert two_sum["prompt"].endswith("Starter code:\n```python\nclass Solution:\n    def twoSum(self, nums: List[int], "
                                      "target: int) -> List[int]:\n```\n")
    assert codewars["tests"][1] == "assert _apps_match(solution(20), [78])"
    assert power["tests"][0].startswith("assert _apps_match(seven_power(6000), 0x")   # 5,071 digits, as hex


def test_apps_difficulty_filter():
    recs, _ = data("apps", "--source", f"{D}/apps", "--filter", "difficulty=introductory,competition")
    assert [r["difficulty"] for r in recs] == ["introductory", "introductory", "competition"]
    r = invoke("rlvr-data", ["apps", "--source", f"{D}/apps", "--filter", "dificulty=interview"])
    assert r.code == 2 and "no field 'dificulty'" in r.stderr
    # a value no record has: keeping nothing fails, naming the field, the value and the values there are
    r = invoke("rlvr-data", ["apps", "--source", f"{D}/apps", "--filter", "difficulty=bogus"])
    assert r.code == 2 and r.stdout == "" and r.stderr.count("error:") == 1, r.stderr
    assert "no apps record has difficulty bogus; its values: competition, interview, introductory" in r.stderr
    # one of several values that no record has: a warning, the others kept
    recs, err = data("apps", "--source", f"{D}/apps", "--filter", "difficulty=competition,bogus")
    assert [r["difficulty"] for r in recs] == ["competition"]
    assert "warning: filters of apps: no apps record has difficulty bogus (its values: competition, interview, " \
           "introductory); kept 1 of 5" in err
    with pytest.raises(ConfigError, match="no math record has level 9; its values: 1, 2, 3, 4, 5"):
        load_records("math", split="test", source=MATH, filters={"level": [9]})


def test_math_level_filter_takes_numbers_for_level_names():
    recs = load_records("math", split="test", source=MATH, filters={"level": [3, 4, 5]})
    assert recs and {r["level"] for r in recs} <= {"Level 3", "Level 4", "Level 5"}
    every = load_records("math", split="test", source=MATH)
    assert len(recs) == sum(r["level"] in ("Level 3", "Level 4", "Level 5") for r in every) < len(every)
    assert per_dataset({"math": {"level": [5]}, "apps": {"difficulty": "interview"}}, ["math", "apps"]) == \
        {"math": {"level": [5]}, "apps": {"difficulty": "interview"}}
    with pytest.raises(ConfigError, match="several datasets"):
        per_dataset({"level": [5]}, ["math", "apps"])
    keep = compile_filters({"level": "Level 2"}, "math")
    assert keep({"level": 2}) and keep({"level": "level 2"}) and not keep({"level": "Level 20"})


def test_rlvr_ifeval_rows_carry_func_name_ground_truth():
    recs, _ = data("rlvr_ifeval", "--source", f"{D}/rlvr_ifeval")
    assert len(recs) == 5 and all(r["verifier"] == "if_functions" for r in recs)
    assert recs[1]["constraint"] == {"func_name": "verify_keyword_frequency", "N": 3, "word": "tree"}
    assert recs[0]["prompt"].startswith("Write a short poem about the sea. Your entire response")


def test_mmlu_prompt_and_letter_answer():
    recs, _ = data("mmlu", "--source", f"{D}/mmlu")
    assert recs[0]["prompt"] == ("Question: Find all c in Z_3 such that Z_3[x]/(x^2 + c) is a field.\nChoices:\n(A) 0\n"
                                 "(B) 1\n(C) 2\n(D) 3\nAnswer: (")
    assert [r["answer"] for r in recs] == ["B", "D", "B", "C"] and recs[1]["subject"] == "anatomy"
    assert recs[0]["verifier"] == "choice"


def test_aime_and_beyondaime_are_problem_solution_prompts():
    aime, _ = data("aime", "--source", f"{D}/aime")
    beyond, _ = data("beyondaime", "--source", f"{D}/beyondaime")
    assert aime[0]["answer"] == "204" and beyond[1]["answer"] == "481"   # integer answers become strings
    assert beyond[0]["prompt"].startswith("Problem:\nLet $S$") and beyond[0]["prompt"].endswith("\n\nSolution:")


def test_format_string_template_stop_and_max_tokens():
    recs, _ = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--limit", "2", "--template", "Q: {question}\\nA:",
                   "--stop", "Q:", "--stop", "\\n\\n\\n", "--max-tokens", "1024")
    assert recs[0]["prompt"].startswith("Q: Janet") and recs[0]["prompt"].endswith("\nA:")
    assert recs[0]["stop"] == ["Q:", "\n\n\n"] and recs[0]["max_tokens"] == 1024
    mbpp, _ = data("mbpp", "--source", f"{D}/mbpp/mbpp.jsonl", "--limit", "1", "--stop", "\\n\\n\\n")
    assert mbpp[0]["stop"] == ["[DONE]", "\n\n\n"]   # the dataset's own stop string stays first
    r = invoke("rlvr-data", ["gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--template", "Q: {problem}\\nA:"])
    assert r.code == 2 and "no field 'problem'" in r.stderr


def test_mixture_takes_per_dataset_templates_stops_and_lengths():
    recs, _ = data("--mix", "gsm8k:1,math500:1", "--source", f"gsm8k={D}/gsm8k/test.jsonl",
                   "--source", f"math500={D}/math500/test.jsonl", "--template", "gsm8k=Q: {question}\\nA:",
                   "--template", "math500=minerva", "--stop", "gsm8k=Q:", "--max-tokens", "gsm8k=512",
                   "--max-tokens", "math500=1024", "--limit", "12", "--seed", "3")
    by = {d: [r for r in recs if r["dataset"] == d] for d in ("gsm8k", "math500")}
    assert by["gsm8k"] and by["math500"]
    assert all(r["prompt"].startswith("Q: ") and r["stop"] == ["Q:"] and r["max_tokens"] == 512 for r in by["gsm8k"])
    assert all(r["prompt"].startswith("Problem:\n") and "stop" not in r and r["max_tokens"] == 1024
               for r in by["math500"])


def test_assistant_prefix_on_strings_and_chat():
    recs = load_records("gsm8k", source=f"{D}/gsm8k/test.jsonl", template="Q: {question}", assistant_prefix="\nA:")
    assert recs[0]["prompt"].endswith("?\nA:")
    chat = load_records("gsm8k", source=f"{D}/gsm8k/test.jsonl", chat=True, assistant_prefix="Let's think.")
    assert chat[0]["prompt"][-1] == {"role": "assistant", "content": "Let's think."}


def test_rollout_uses_each_records_own_max_tokens(hf_engine, tiny_model_dir):
    import io

    import orjson

    from rlvr.engines import EngineOptions, Sampling
    from rlvr.records import RecordWriter
    from rlvr.rollout import RolloutSettings, run

    recs = [{"id": f"p{i}", "prompt": f"count {i}:", "max_tokens": 3 if i % 2 else 7} for i in range(4)]
    settings = RolloutSettings(model=tiny_model_dir, engine="hf", sampling=Sampling(n=2, max_tokens=12, seed=1),
                               options=EngineOptions(dtype="float32", max_model_len=512))

    def lengths(s):
        buf = io.BytesIO()
        run(recs, s, RecordWriter(buf), engine=hf_engine, progress=False)
        return [orjson.loads(ln)["completion_tokens"] for ln in buf.getvalue().splitlines()]

    own = lengths(settings)
    assert all(max(t) <= r["max_tokens"] for t, r in zip(own, recs)) and max(own[0]) == 7 and max(own[1]) == 3
    settings.record_max_tokens = False   # rlvr-rollout --max-tokens N: one length for every record
    assert max(max(t) for t in lengths(settings)) > 7


def test_training_stream_takes_per_dataset_templates_filters_stops_and_lengths():
    from rlvr.train.config import DataConfig, RolloutConfig, TrainConfig, check
    from rlvr.train.stream import PromptStream

    data = DataConfig(dataset=None, mix={"gsm8k": 1.0, "math": 1.0}, split="test", shuffle=False,
                      source={"gsm8k": f"{D}/gsm8k/test.jsonl", "math": MATH},
                      template={"gsm8k": "Q: {question}\nA:", "math": "minerva"}, filters={"math": {"level": [1, 2]}},
                      assistant_prefix={"gsm8k": " Let's"})
    rollout = RolloutConfig(stop_by_dataset={"gsm8k": ["Q:"]}, max_tokens_by_dataset={"math": 1024})
    s = PromptStream(data, rollout)
    gsm, math = s.by_name["gsm8k"], s.by_name["math"]
    assert gsm[0]["prompt"].startswith("Q: Janet") and gsm[0]["prompt"].endswith("\nA: Let's")
    assert gsm[0]["stop"] == ["Q:"] and "max_tokens" not in gsm[0]
    assert math and all(r["level"] in ("Level 1", "Level 2") and r["max_tokens"] == 1024 and "stop" not in r for r in math)
    assert all(r["prompt"].startswith("Problem:\n") for r in math)
    cfg = TrainConfig(data=data, rollout=RolloutConfig(max_tokens_by_dataset={"mbpp": 512}))
    with pytest.raises(ConfigError, match="mbpp is not a dataset of this run"):
        check(cfg)
    with pytest.raises(ConfigError, match="data.template: apps is not a dataset"):
        PromptStream(DataConfig(dataset="gsm8k", split="test", source={"gsm8k": f"{D}/gsm8k/test.jsonl"},
                                template={"apps": "plain"}))


def test_every_dataset_file_has_its_provenance_in_the_readme():
    """Each file under tests/data/datasets has a row in its README: where it comes from, or
    which published format it imitates."""
    readme = open(os.path.join(D, "README.md"), encoding="utf-8").read()
    rows = {line.split("|")[1].strip() for line in readme.splitlines() if line.startswith("| ") and "/" in line}
    files = {os.path.relpath(os.path.join(d, f), D) for d, _, fs in os.walk(D) for f in fs if f != "README.md"}
    assert files and files <= rows, sorted(files - rows)
