"""AllenAI's mixed RLVR data end to end: rows in the published formats (tests/data/allenai,
provenance in its README) through rlvr-data (files, save_to_disk folders, mixtures; refused
and selected kinds), the verifiers each row is routed to (AllenAI's reference rules as
math.mode allenai, Tulu 3's 25 instruction functions) and rlvr-verify. The tiny training run
on this data, with the chat and thinking controls, is tests/test_olmes.py's simulated job."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import DATA, invoke, jsonl
from rlvr.data import allenai
from rlvr.verifiers import allenai_rules
from rlvr.verifiers import if_functions as iff

AL = os.path.join(DATA, "allenai")
TULU = os.path.join(AL, "rlvr_gsm_math_if_mixed.jsonl")
THINK = os.path.join(AL, "thinker_mix.jsonl")
STDIO = os.path.join(AL, "code_stdio.jsonl")


def records(*args):
    r = invoke("rlvr-data", ["allenai", *args])
    assert r.code == 0, r.stderr
    return r.records()


def test_rows_are_routed_to_the_verifier_of_their_kind(tmp_path):
    recs = records("--source", TULU)
    assert [r["dataset"] for r in recs] == ["allenai/gsm8k"] * 4 + ["allenai/math"] * 2 + ["allenai/ifeval"] * 3
    assert [r["verifier"] for r in recs] == ["math"] * 6 + ["if_functions"] * 3
    assert recs[0]["answer"] == "72" and recs[0]["reference_verifier"] == "gsm8k"
    assert recs[4]["reference_verifier"] == "math" and recs[4]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert recs[7]["constraint"] == {"func_name": "verify_keywords", "keyword_list": ["amber", "horizon"]}
    assert recs[0]["prompt"].startswith("Question: There are 15 trees") and recs[0]["prompt"].endswith(
        "How many clips did Natalia sell altogether in April and May?")
    think = records("--source", THINK, "--chat", "--system", "Think first.", "--thinking")
    assert [(r["id"], r["verifier"]) for r in think] == [
        ("allenai/math-0", "math"), ("allenai/if-0", "if_multi"), ("allenai/code-11", "code"),
        ("allenai/code-12", "code"), ("allenai/code-13", "code")]
    assert think[1]["instruction_id_list"] == ["punctuation:no_comma"] and think[1]["kwargs"] == [{}]
    assert think[1]["prompt"][0] == {"role": "system", "content": "Think first."}   # replaces the row's own
    assert all(r["thinking"] is True for r in think)
    assert think[4]["tests"][0].startswith("assert count_common(")                 # the base64+zlib+pickle row
    # a datasets.save_to_disk folder (AllenAI's data on S3 is kept that way) gives the same records
    import datasets

    rows = [orjson.loads(ln) for ln in open(TULU, "rb")]
    datasets.Dataset.from_list(rows).save_to_disk(str(tmp_path / "saved"))
    assert records("--source", str(tmp_path / "saved")) == recs
    # usable in a mixture like any other dataset
    mixed = invoke("rlvr-data", ["--mix", "allenai:1,toy:1", "--source", f"allenai={TULU}", "--limit", "6"]).records()
    assert {r["dataset"].split("/")[0] for r in mixed} == {"allenai", "toy"}


def test_rows_rlvr_cannot_verify_are_refused_with_file_row_and_kind(tmp_path):
    r = invoke("rlvr-data", ["allenai", "--source", os.path.join(AL, "unverifiable.jsonl")])
    assert r.code == 3 and r.stdout == ""
    assert "unverifiable.jsonl: row 2: kind 'string_f1' cannot be verified here" in r.stderr
    # the LLM-judged row before it is a record for the judge (rlvr.verifiers.judge)
    r = invoke("rlvr-data", ["allenai", "--source", os.path.join(AL, "unverifiable.jsonl"),
                             "--kinds", "general-quality_ref"])
    assert r.code == 0 and [(x["verifier"], x["answer"]) for x in r.records()] == [("judge", "a good poem")]
    r = invoke("rlvr-data", ["allenai", "--source", os.path.join(AL, "unverifiable.jsonl"), "--kinds", "code_stdio"])
    assert r.code == 0 and r.stdout == ""   # selected out by choice
    bad = tmp_path / "bad.jsonl"
    for row, needle in (({"messages": [{"role": "user", "content": "x"}], "ground_truth": ["1", "2"],
                          "dataset": ["gsm8k", "math"]}, "several verifiers (gsm8k, math)"),
                        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": "not a list",
                          "dataset": "code"}, "row 1: 'ground_truth' is neither a JSON list of tests"),
                        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": '{"func_name": "nope"}',
                          "dataset": "ifeval"}, "unknown func_name 'nope'"),
                        # the newer forms are checked as rlvr-verify would check them, at read time
                        ({"messages": [{"role": "user", "content": "x"}], "dataset": ["ifeval"],
                          "ground_truth": ["[{'instruction_id': ['nonexistent:thing'], 'kwargs': [None]}]"]},
                         "row 1: instruction 0: unknown if_multi instruction id 'nonexistent:thing' (dataset "
                         "allenai, field ground_truth)"),
                        ({"messages": [{"role": "user", "content": "x"}], "dataset": "ifeval",
                          "ground_truth": '[{"instruction_id": ["length_constraints:number_words"], '
                                          '"kwargs": [{"relation": "at least", "num_words": "many"}]}]'},
                         "field ground_truth"),
                        ({"messages": [{"role": "user", "content": "x"}], "ground_truth": ["assert ("],
                          "dataset": "code"}, "row 1: unusable tests: <test 1>: '(' was never closed"),
                        ({"prompt": "x", "ground_truth": "7"}, "missing field 'dataset'")):
        bad.write_bytes(orjson.dumps(row) + b"\n")
        r = invoke("rlvr-data", ["allenai", "--source", str(bad)])
        assert r.code == 3 and needle in r.stderr, r.stderr
    # --kinds leaves the other kinds out by choice; each row keeps its id and line number
    mixed = tmp_path / "mixed.jsonl"
    mixed.write_bytes(open(os.path.join(AL, "unverifiable.jsonl"), "rb").read() + open(TULU, "rb").read())
    kept = invoke("rlvr-data", ["allenai", "--source", str(mixed), "--kinds", "gsm8k,ifeval"]).records()
    assert [r["id"] for r in kept] == [f"allenai/train/{i}" for i in (2, 3, 4, 5, 8, 9, 10)]
    for args, needle in ((["allenai", "--source", str(mixed), "--kinds", "gsm8k,judge"], "'judge' is not a kind"),
                         (["toy", "--kinds", "gsm8k"], "--kinds selects rows of allenai")):
        r = invoke("rlvr-data", args)
        assert r.code == 2 and needle in r.stderr, r.stderr
    # a pickle that names any class is refused, not run
    import base64
    import pickle
    import zlib

    evil = base64.b64encode(zlib.compress(pickle.dumps([os.system]))).decode()
    bad.write_bytes(orjson.dumps({"prompt": "x", "ground_truth": evil, "dataset": "code"}) + b"\n")
    r = invoke("rlvr-data", ["allenai", "--source", str(bad)])
    assert r.code == 3 and "refusing" in r.stderr


@pytest.mark.parametrize("rule,prediction,label,ok", [
    ("gsm8k", "She sold 48 + 24 = 72 clips.", "72", True),
    ("gsm8k", "so 1,234 apples", "1234", True),
    ("gsm8k", "The answer is 72. It took 3 steps.", "72", False),    # the last number counts, not the stated one
    ("gsm8k", "7.0", "7", False),                                    # compared as strings
    ("math", "Thus $\\boxed{\\frac12}$.", "\\frac{1}{2}", True),
    ("math", "Final Answer: The final answer is $x^2+1$. I hope it is correct.", "1+x^2", True),
    ("math", "we get $y = 0.5$ in the end", "\\frac{1}{2}", True),   # the last $...$ span, Hendrycks' 0.5 rule
    ("math", "\\boxed{3} or maybe \\boxed{4}", "3", False),
    ("strict_math", "\\boxed{4}. Final Answer: The final answer is 3. I hope it is correct.", "3", True),
    ("strict_math", "So the answer is \\boxed{3}, I think.", "3", False),
])
def test_allenai_reference_rules(rule, prediction, label, ok):
    assert allenai_rules.score(rule, prediction, label)[0] is ok


@pytest.mark.parametrize("constraint,good,bad", [
    ({"func_name": "verify_keywords", "keyword_list": ["Amber", "sky"]}, "amber SKY", "amber only"),
    ({"func_name": "verify_keyword_frequency", "word": "cat", "N": 2}, "Cat, cat!", "cat cats"),
    ({"func_name": "validate_forbidden_words", "forbidden_words": ["bad"]}, "good", "no BADness"),
    ({"func_name": "verify_letter_frequency", "letter": "a", "N": 2}, "a cat", "banana"),
    ({"func_name": "validate_response_language", "language": "en"}, "This is an English sentence about cats.",
     "Ceci est une phrase en français sur les chats."),
    ({"func_name": "verify_paragraph_count", "N": 2}, "one\n* * *\ntwo", "one\n* * *\n\n* * *\ntwo"),
    ({"func_name": "validate_word_constraint", "N": 10, "quantifier": "around"}, " ".join(["w"] * 11), "w w"),
    ({"func_name": "verify_sentence_constraint", "N": 2, "quantifier": "at least"}, "One. Two.", "Only one."),
    ({"func_name": "validate_paragraphs", "N": 2, "first_word": "Then", "i": 2}, "First.\n\nThen more.", "Then.\n\nNo."),
    ({"func_name": "verify_postscript", "postscript_marker": "P.S."}, "Hi.\nP.S. bye", "Hi. P.S."),
    ({"func_name": "validate_placeholders", "N": 2}, "[name] at [address]", "[name] only"),
    ({"func_name": "verify_bullet_points", "N": 2}, "* a\n- b", "* a"),
    ({"func_name": "validate_title"}, "<<Title>> text", "no title"),
    ({"func_name": "validate_choice", "options": ["yes", "no"]}, "My answer is yes.", "Maybe."),
    ({"func_name": "validate_highlighted_sections", "N": 2}, "*a* and *b*", "*a* only"),
    ({"func_name": "validate_sections", "N": 2, "section_splitter": "SECTION"}, "SECTION 1 a SECTION 2 b", "SECTION 1"),
    ({"func_name": "validate_json_format"}, '{"a": 1}', "{a: 1}"),
    ({"func_name": "validate_repeat_prompt", "original_prompt": "Say hi"}, "Say hi. Hi!", "Hi! Say hi"),
    ({"func_name": "validate_two_responses"}, "one ****** two", "one ****** one"),
    ({"func_name": "validate_uppercase"}, "ALL CAPS", "Not all"),
    ({"func_name": "validate_lowercase"}, "all lower", "Not all"),
    ({"func_name": "validate_frequency_capital_words", "N": 2, "quantifier": "at least"}, "NASA and ESA", "Nasa"),
    ({"func_name": "validate_end", "end_phrase": "Is there anything else?"}, "Done. Is there anything else?", "Is there anything else? Done."),
    ({"func_name": "validate_quotation"}, '"quoted"', 'not "quoted"'),
    ({"func_name": "validate_no_commas"}, "no commas", "a, b"),
])
def test_the_25_tulu3_instruction_functions(constraint, good, bad):
    rec = {"constraint": constraint}
    assert iff.verify(rec, good)["status"] == "correct"
    assert iff.verify(rec, bad)["status"] == "wrong"


def test_if_functions_cleans_like_the_reference_and_reports_bad_constraints():
    rec = {"constraint": {"func_name": "validate_quotation"}}
    assert iff.verify(rec, '<answer> "quoted" </answer>\n')["status"] == "correct"
    assert iff.verify(rec, "  ")["status"] == "no_answer"
    assert len(iff.FUNCTIONS) == 25
    for c, needle in (({"func_name": "verify_keywords"}, "needs keyword_list"), ({}, "unknown func_name None"),
                      ('{"func_name": "verify_letter_frequency", "letter": "ab", "N": 1}', "single character")):
        v = iff.verify({"constraint": c}, "text")
        assert v["status"] == "error" and needle in v["error"], v


def test_rlvr_verify_reproduces_the_reference_rewards_with_math_mode_allenai():
    recs = records("--source", TULU)
    comps = {0: "Natalia sold 48 + 24 = 72 clips. The answer is 72. That took 2 steps.",
             6: "<think>Should I use Capitals? No.</think>the sea is calm, the sky is wide",
             7: "The amber sun climbs over the horizon.", 8: "A prime has exactly two divisors: one and itself."}
    todo = [{**r, "completions": [comps[i]]} for i, r in enumerate(recs) if i in comps]
    ref = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=allenai"], jsonl(*todo))
    own = invoke("rlvr-verify", ["-j", "1"], jsonl(*todo))
    assert ref.code == own.code == 0, ref.stderr + own.stderr
    assert [r["rewards"] for r in ref.records()] == [[0.0], [1.0], [1.0], [1.0]]   # AllenAI: the last number, 2
    assert [r["rewards"] for r in own.records()] == [[1.0], [1.0], [1.0], [1.0]]   # rlvr: "The answer is 72"
    assert ref.records()[0]["verdicts"][0]["method"] == "allenai-gsm8k"
    assert ref.records()[1]["verdicts"][0]["thinking"]["closed"] is True   # the capital in the reasoning is not judged


def test_code_stdio_rows_decode_open_instructs_encodings_and_refuse_bad_tests(tmp_path):
    recs = records("--source", STDIO)
    rows = [orjson.loads(ln) for ln in open(STDIO, "rb")]
    assert [(r["id"], r["dataset"], r["verifier"]) for r in recs] == [
        (f"allenai/code_stdio-{t}", "allenai/code_stdio", "code") for t in (11, 14, 12)]
    assert recs[0]["stdio_tests"] == orjson.loads(rows[0]["ground_truth"])            # json.dumps of the list
    assert recs[2]["stdio_tests"][1] == {"input": "3\n1 2 3\n-2 4 -5\n1 -1 1\n",   # base64 + zlib + pickle
                                         "output": "-2 4 -5\n1 -1 1\n1 2 3\n"}
    assert "rewritten_solution" not in recs[0] and "tests" not in recs[0]
    # a test given as lines joins them; its other keys are dropped
    row = {"prompt": "x", "dataset": "code_stdio",
           "ground_truth": [{"input": ["1", "2"], "output": "3", "testtype": "stdin"}]}
    assert allenai.convert(row, 0, "train")["stdio_tests"] == [{"input": "1\n2", "output": "3"}]
    bad = tmp_path / "bad.jsonl"
    for gt, needle in (("[]", "non-empty list of stdin/stdout tests"),
                       ('[{"input": "1"}]', "stdin/stdout test 0 must be an object with input and output"),
                       ('[{"input": "1", "output": 2}]', "test 0's output must be a string, got int"),
                       ("%%%", "neither a JSON list of stdin/stdout tests")):
        bad.write_bytes(orjson.dumps({"prompt": "x", "ground_truth": gt, "dataset": "code_stdio"}) + b"\n")
        r = invoke("rlvr-data", ["allenai", "--source", str(bad)])
        assert r.code == 3 and "bad.jsonl: row 1:" in r.stderr and needle in r.stderr, r.stderr


def test_stdio_comparison_rules():
    """rlvr's own rule (whitespace tokens) and open-instruct's (LiveCodeBench's: lines, numbers by value)."""
    from rlvr.sandbox.stdio import same_lines, same_output

    assert same_output("1 2\n", "1\n2") and not same_lines("1 2\n", "1\n2")        # lines count there
    assert same_lines("240.0\n", "240") and not same_output("240.0", "240")          # numbers by value
    assert same_lines("  a b \r\n\n", "a b") and same_lines("1e2 -0", "100 0")
    assert not same_lines("a  b", "a b")                                               # not numbers: as strings
    assert same_lines("NaN", "NaN ") and not same_lines("NaN", "nan")                  # NaN is not NaN by value
    assert not same_lines("1\n\n2", "1\n2") and not same_lines("x", "y")


def test_code_stdio_rows_through_rlvr_verify_with_rlvr_and_open_instruct_grading():
    """The rows' own solutions, a partly right program and one that hangs on one test: rlvr's
    all-pass rule by default; code.mode=allenai with --reward-mode fraction gives
    open-instruct's pass-rate reward (every test run, outputs compared line by line)."""
    recs = records("--source", STDIO)
    sols = [orjson.loads(ln)["rewritten_solution"] for ln in open(STDIO, "rb")]
    by_max = "n = int(input())\nrows = [input().split() for _ in range(n)]\n" \
             "for r in sorted(rows, key=lambda r: max(map(int, r))):\n    print(*r)\n"
    hangs = "s, ch = input(), input()\nwhile s == 'PHP':\n    pass\nprint(s.replace(ch, ''))\n"
    todo = [{**recs[0], "completions": [f"```python\n{sols[0]}```", hangs]},
            {**recs[1], "completions": [f"Here:\n```python\n{sols[1]}```"]},
            {**recs[2], "completions": [f"```python\n{sols[2]}```", by_max]}]
    own = invoke("rlvr-verify", ["-j", "1", "--set", "code.timeout=1"], jsonl(*todo))
    ref = invoke("rlvr-verify", ["-j", "1", "--set", "code.timeout=1", "--set", "code.mode=allenai",
                                 "--reward-mode", "fraction"], jsonl(*todo))
    assert own.code == ref.code == 0, own.stderr + ref.stderr
    own_v = [r["verdicts"] for r in own.records()]
    assert [[v["status"] for v in vs] for vs in own_v] == [["correct", "timeout"], ["wrong"], ["correct", "wrong"]]
    assert own_v[1][0]["error"] == "test 1: output '240.0' where '240' was expected"   # whitespace tokens
    assert own_v[2][1]["tests_passed"] == 1 and "score" not in own_v[2][1]              # stopped at test 2
    assert [r["rewards"] for r in own.records()] == [[1.0, 0.0], [0.0], [1.0, 0.0]]
    ref_v = [r["verdicts"] for r in ref.records()]
    assert [[v["status"] for v in vs] for vs in ref_v] == [["correct", "wrong"], ["correct"], ["correct", "wrong"]]
    assert ref_v[0][1]["tests_passed"] == 2 and ref_v[0][1]["tests_timed_out"] == 1    # the other tests still ran
    assert ref_v[2][1]["tests_passed"] == 2 and ref_v[2][1]["error"].startswith("test 2: output")
    assert [r["rewards"] for r in ref.records()] == [[1.0, 2 / 3], [1.0], [1.0, 2 / 3]]
    # open-instruct's code_pass_rate_reward_threshold: a pass rate below it scores 0
    hi = invoke("rlvr-verify", ["-j", "1", "--set", "code.mode=allenai", "--set", "code.pass_rate_threshold=0.9",
                                "--reward-mode", "fraction"], jsonl({**todo[2]}))
    assert hi.code == 0 and hi.records()[0]["rewards"] == [1.0, 0.0], hi.stderr
    r = invoke("rlvr-verify", ["--set", "code.pass_rate_threshold=0.5"], jsonl(todo[2]))
    assert r.code == 2 and "code.mode=allenai" in r.stderr


def test_code_mode_allenai_scores_assert_rows_by_pass_rate_too():
    from rlvr.verifiers import code

    rec = next(r for r in records("--source", THINK) if r["id"] == "allenai/code-11")
    ends = "def remove_Occ(s, ch):\n    return s[1:-1]\n"      # right for 2 of the 3 tests
    own = code.verify(rec, ends, {})
    ref = code.verify(rec, ends, {"mode": "allenai"})
    assert own["status"] == ref["status"] == "wrong" and "score" not in own
    assert ref["tests_passed"] == 2 and ref["score"] == 2 / 3
    assert code.verify(rec, ends, {"mode": "allenai", "pass_rate_threshold": 0.7})["score"] == 0.0
    for bad, needle in (({"mode": "lenient"}, "code.mode must be one of default, allenai"),
                        ({"mode": "allenai", "pass_rate_threshold": 2}, "in [0, 1]")):
        with pytest.raises(ValueError, match=needle.replace("[", r"\[").replace("]", r"\]")):
            code.check_config(bad)


def test_each_kind_of_rows_gets_its_own_length_in_rlvr_data_and_rlvr_train():
    from rlvr.errors import ConfigError
    from rlvr.train.config import DataConfig, RolloutConfig, TrainConfig, check
    from rlvr.train.stream import PromptStream

    recs = records("--source", TULU, "--max-tokens", "allenai/gsm8k=512", "--max-tokens", "allenai/ifeval=2048",
                   "--max-tokens", "1024")
    assert {(r["dataset"], r["max_tokens"]) for r in recs} == {("allenai/gsm8k", 512), ("allenai/math", 1024),
                                                                ("allenai/ifeval", 2048)}
    kinds_only = records("--source", TULU, "--max-tokens", "allenai/math=700")
    assert [r.get("max_tokens") for r in kinds_only] == [None] * 4 + [700] * 2 + [None] * 3
    for value, needle in (("allenai/judge=5", "allenai/judge is not a kind of allenai (kinds: allenai/gsm8k, "),
                          ("gsm8k=512", "gsm8k is not a dataset of this run (allenai) nor one of its kinds "
                                        "(allenai/gsm8k,"),
                          ("allenai/gsm8k=many", "--max-tokens allenai/gsm8k=many: expected a positive integer")):
        r = invoke("rlvr-data", ["allenai", "--source", TULU, "--max-tokens", value])
        assert r.code == 2 and needle in r.stderr, r.stderr
    r = invoke("rlvr-data", ["--mix", "allenai:1,toy:1", "--source", f"allenai={TULU}", "--max-tokens", "toy/x=5"])
    assert r.code == 2 and "toy/x is not a kind of toy (per-kind keys apply to a dataset whose rows" in r.stderr
    # rlvr-train: the same keys in rollout.max_tokens_by_dataset, checked before anything starts
    data = DataConfig(dataset=None, mix={"allenai": 1.0, "toy": 1.0}, source={"allenai": TULU}, shuffle=False)
    rollout = RolloutConfig(max_tokens=1024, max_tokens_by_dataset={"allenai/gsm8k": 512, "allenai/math": 900,
                                                                    "toy": 16})
    check(TrainConfig(data=data, rollout=rollout))
    s = PromptStream(data, rollout)
    assert [r.get("max_tokens") for r in s.by_name["allenai"]] == [512] * 4 + [900] * 2 + [None] * 3
    assert {r["max_tokens"] for r in s.by_name["toy"]} == {16}
    for table, needle in (({"allenai/judge": 5}, "allenai/judge is not a kind of allenai"),
                          ({"gsm8k": 5}, "gsm8k is not a dataset of this run (allenai, toy) nor one of its kinds")):
        with pytest.raises(ConfigError, match=needle.replace("(", r"\(").replace(")", r"\)")):
            check(TrainConfig(data=data, rollout=RolloutConfig(max_tokens_by_dataset=table)))
