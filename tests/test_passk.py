"""pass@k: hand-computed cases, the exact combinatorial formula, and the command."""

from __future__ import annotations

import math
import random

import orjson
import pytest

from helpers import invoke, jsonl
from rlvr.passk import PassAtK, default_ks, pass_at_k, pass_at_k_exact


def test_hand_computed():
    assert pass_at_k(4, 1, 1) == pytest.approx(0.25)
    assert pass_at_k(4, 1, 2) == pytest.approx(0.5)      # 1 - C(3,2)/C(4,2) = 1 - 3/6
    assert pass_at_k(5, 2, 2) == pytest.approx(0.7)      # 1 - C(3,2)/C(5,2) = 1 - 3/10
    assert pass_at_k(10, 3, 4) == pytest.approx(1 - 35 / 210)


def test_edges():
    assert pass_at_k(8, 0, 1) == 0.0 and pass_at_k(8, 0, 8) == 0.0
    assert pass_at_k(8, 8, 1) == 1.0 and pass_at_k(8, 8, 8) == 1.0
    assert pass_at_k(8, 1, 8) == 1.0                      # k = n: any correct sample counts
    with pytest.raises(ValueError):
        pass_at_k(4, 1, 5)


def test_agrees_with_exact_formula_on_random_data():
    rng = random.Random(0)
    for _ in range(500):
        n = rng.randint(1, 200)
        c = rng.randint(0, n)
        k = rng.randint(1, n)
        assert pass_at_k(n, c, k) == pytest.approx(pass_at_k_exact(n, c, k), abs=1e-9)


def test_stable_for_large_n():
    v = pass_at_k(10000, 1, 1000)
    assert v == pytest.approx(0.1, abs=1e-12) and math.isfinite(v)


def test_default_ks():
    assert default_ks(8) == [1, 2, 4, 8] and default_ks(10) == [1, 2, 4, 8] and default_ks(0) == []


def test_summary_per_dataset_and_short_prompts():
    acc = PassAtK([1, 4])
    acc.add("a", 4, 1)
    acc.add("a", 4, 4)
    acc.add("b", 2, 1)
    s = acc.summary()
    assert s["pass@1"] == pytest.approx((0.25 + 1 + 0.5) / 3)
    assert s["pass@4"] == pytest.approx((1.0 + 1.0) / 2)
    assert s["prompts_with_n_lt_k"] == {"pass@4": 1}
    assert s["per_dataset"]["b"]["pass@4"] is None
    assert s["n_distribution"] == {"2": 1, "4": 2}


def recs():
    return [
        {"id": "p1", "dataset": "gsm8k", "rewards": [1, 0, 0, 0]},
        {"id": "p2", "dataset": "gsm8k", "rewards": [1, 1, 1, 1]},
        {"id": "p3", "dataset": "math", "rewards": [0.5, 0, 0, 0]},
    ]


def test_command_summary():
    r = invoke("rlvr-passk", [], jsonl(*recs()))
    assert r.code == 0, r.stderr
    s = orjson.loads(r.stdout)
    assert s["k"] == [1, 2, 4]
    assert s["pass@1"] == pytest.approx((0.25 + 1 + 0) / 3)
    assert s["per_dataset"]["math"]["pass@4"] == 0.0
    assert s["n_prompts"] == 3


def test_command_threshold_and_k():
    r = invoke("rlvr-passk", ["--threshold", "0.5", "--k", "1,2"], jsonl(*recs()))
    s = orjson.loads(r.stdout)
    assert s["per_dataset"]["math"]["pass@1"] == pytest.approx(0.25)
    assert s["k"] == [1, 2]


def test_shards_merge_and_duplicates_count_once(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    a.write_text(jsonl(*recs()[:2]))
    b.write_text(jsonl(recs()[1], recs()[2]))
    r = invoke("rlvr-passk", [str(a), str(b)])
    s = orjson.loads(r.stdout)
    assert s["n_prompts"] == 3 and s["duplicate_ids"] == 1
    assert "repeated id" in r.stderr


def test_per_prompt_and_tables():
    r = invoke("rlvr-passk", ["--per-prompt"], jsonl(*recs()))
    rows = r.records()
    assert [x["c"] for x in rows] == [1, 4, 0] and rows[0]["pass@2"] == pytest.approx(0.5)
    md = invoke("rlvr-passk", ["--format", "markdown"], jsonl(*recs())).stdout
    assert md.splitlines()[0] == "| dataset | n_prompts | pass@1 | pass@2 | pass@4 |"
    assert md.splitlines()[2].startswith("| all | 3 | 0.4167 |")
    csv = invoke("rlvr-passk", ["--format", "csv"], jsonl(*recs())).stdout
    assert csv.splitlines()[0] == "dataset,n_prompts,pass@1,pass@2,pass@4"


def test_missing_rewards_is_bad_input():
    r = invoke("rlvr-passk", [], '{"id": "a", "completions": ["x"]}\n')
    assert r.code == 3 and "<stdin>:1:" in r.stderr and "(field rewards)" in r.stderr


def test_keep_going_counts_error_records():
    r = invoke("rlvr-passk", ["--keep-going"], jsonl(recs()[0]) + "garbage\n")
    s = orjson.loads(r.stdout)
    assert r.code == 0 and s["n_prompts"] == 1 and s["error_records"] == 1


def test_bad_k_is_usage_error():
    assert invoke("rlvr-passk", ["--k", "0"], jsonl(*recs())).code == 2
    assert invoke("rlvr-passk", ["--k", "x"], jsonl(*recs())).code == 2


def test_one_pass_at_k_over_records_for_passk_and_eval():
    # rlvr-eval's pass_at_k.json comes from the same code as rlvr-passk: repeated ids count
    # once, error records and prompts without samples are counted apart, threshold applies.
    from rlvr.passk import RecordsPassAtK, records_pass_at_k

    recs = [{"id": "a", "rewards": [1, 0]}, {"id": "a", "rewards": [1, 1]},
            {"id": "b", "dataset": "d", "rewards": [0.5, 0]}, {"id": "c", "rewards": []},
            {"error": {"file": "x", "line": 3, "message": "bad"}}]
    s = records_pass_at_k(recs, default_dataset="gsm8k")
    assert s["n_prompts"] == 2 and s["pass@1"] == pytest.approx(0.25) and s["duplicate_ids"] == 1
    assert s["error_records"] == 1 and s["prompts_with_no_samples"] == 1 and s["threshold"] == 1.0
    assert set(s["per_dataset"]) == {"gsm8k", "d"}
    assert records_pass_at_k(recs, threshold=0.5)["pass@2"] == 1.0
    r = invoke("rlvr-passk", [], jsonl(*recs[:4]))
    assert orjson.loads(r.stdout)["pass@1"] == s["pass@1"]
    acc = RecordsPassAtK([1])
    assert acc.add(recs[0]) == {"id": "a", "dataset": None, "n": 2, "c": 1, "pass@1": 0.5}
    assert acc.add(recs[1]) is None and acc.add(recs[4]) is recs[4]
