"""Answer-only judging (rlvr.verification.thinking): one mechanism in the verifier pool for
every verifier. Each completion below reasons before answering in a way that would change
the verdict if the reasoning were judged, so a verifier that saw it would fail the test."""

from __future__ import annotations

import pytest

from helpers import invoke, jsonl
from rlvr.verification.pool import VerifierPool
from rlvr.verification.summary import format_text, summarize
from rlvr.verification.thinking import UNFINISHED, split, thinking_metrics

MATH = {"id": "m", "verifier": "math", "dataset": "gsm8k", "answer": "7"}
IF = {"id": "i", "verifier": "ifeval", "dataset": "ifeval", "instruction_id_list": ["punctuation:no_comma"],
      "kwargs": [{}]}
CODE = {"id": "c", "verifier": "code", "dataset": "mbpp", "tests": ["assert add(1, 2) == 3"]}


@pytest.mark.parametrize("text,mode,expect", [
    ("<think>a</think>b", None, (True, "a", "b")),
    ("<think>a</think>b</think>c", None, (True, "a</think>b", "c")),      # the last close marker ends it
    ("draft</think>answer", True, (True, "draft", "answer")),           # the template opened the block
    ("<think>never closed", None, (False, "never closed", None)),
    ("<think>a</think>b<think>c", None, (True, "ac", "b")),            # reopened, never closed: not the answer
    ("<think>a</think> <think>c", None, (False, "ac", None)),          # nothing outside thinking
    ("</think><think>c", True, (False, "c", None)),
    ("no markers at all", True, (False, "no markers at all", None)),    # thinking required: never closed
    ("no markers at all", None, None),                                  # the text decides: no thinking
    ("<think>a</think>b", False, None),                                 # judged whole
])
def test_split_rules(text, mode, expect):
    sp = split(text, mode)
    assert (sp if sp is None else (sp.closed, sp.thinking, sp.answer)) == expect


def test_custom_markers_and_metrics():
    sp = split("<seed:think>x</seed:think>42", True, ("<seed:think>", "</seed:think>"))
    assert (sp.closed, sp.answer) == (True, "42")
    assert split("<think>x</think>42", True, ("<seed:think>", "</seed:think>")).closed is False
    m = thinking_metrics([{"thinking": {"closed": True, "thinking_chars": 10, "answer_chars": 4}},
                          {"thinking": {"closed": False, "thinking_chars": 30, "answer_chars": 0}}, {"status": "x"}])
    assert m == {"thinking/completions": 2.0, "thinking/closed_frac": 0.5, "thinking/mean_thinking_chars": 20.0,
                 "thinking/mean_answer_chars": 4.0}


def test_math_code_and_if_are_judged_on_the_answer_only():
    recs = [
        {**MATH, "thinking": True, "completions": [
            "<think>so the answer is \\boxed{7}",                              # never closed: not credited
            "<think>maybe \\boxed{8}? recheck: 3+4</think>The answer is 7.",   # whole text: boxed 8, wrong
            "<think>it is 7 for sure</think>The answer is \\boxed{8}."]},      # whole text could read 7
        {**IF, "thinking": True, "completions": ["<think>hmm, commas, here, and there</think>No commas at all"]},
        {**CODE, "thinking": True, "completions": [
            "<think>a draft:\n```python\ndef add(a, b):\n    return a - b\n```\nno, plus</think>"
            "def add(a, b):\n    return a + b\n"]},
        {**MATH, "thinking": False, "completions": ["<think>maybe \\boxed{8}? recheck</think>The answer is 7."]},
        {**MATH, "completions": ["<think>so the answer is \\boxed{7}", "<think>\\boxed{8}?</think>7", "\\boxed{7}"]},
    ]
    with VerifierPool(jobs=1) as pool:
        out = pool.verify_all(recs)
    st = [[v["status"] for v in r["verdicts"]] for r in out]
    assert st[0] == [UNFINISHED, "correct", "wrong"]
    assert out[0]["rewards"] == [0.0, 1.0, 0.0]
    assert out[0]["verdicts"][0]["extracted"] is None and out[0]["verdicts"][0]["verifier"] == "math"
    assert out[0]["verdicts"][1]["thinking"] == {"closed": True, "thinking_chars": len("maybe \\boxed{8}? recheck: 3+4"),
                                                 "answer_chars": len("The answer is 7.")}
    assert st[1] == ["correct"]                      # the reasoning's commas are not the answer's
    assert st[2] == ["correct"]                      # the fenced draft in the reasoning is not the program
    assert st[3] == ["wrong"] and "thinking" not in out[3]["verdicts"][0]   # thinking: false judges it all
    assert st[4] == [UNFINISHED, "correct", "correct"]   # no field: the text decides
    assert "thinking" not in out[4]["verdicts"][2]
    summary = summarize(out)
    s = summary["all"]
    assert s["status"][UNFINISHED] == 2 and s["thinking"]["completions"] == 7
    assert s["thinking"]["closed_frac"] == pytest.approx(5 / 7)
    assert format_text(summary).splitlines()[0].split()[-1] == "thinking_closed"


def test_a_stream_override_and_the_reward_table():
    rec = {**MATH, "thinking": True, "completions": ["<think>maybe \\boxed{8}? recheck</think>The answer is 7."]}
    with VerifierPool(jobs=1, thinking=False) as pool:
        assert pool.verify_all([rec])[0]["verdicts"][0]["status"] == "wrong"
    with VerifierPool(jobs=1, thinking=True, reward_table={"unfinished_thinking": -0.5}) as pool:
        [r] = pool.verify_all([{**MATH, "completions": ["The answer is 7.", "<think>7</think>7"]}])
    assert [v["status"] for v in r["verdicts"]] == [UNFINISHED, "correct"] and r["rewards"] == [-0.5, 1.0]
    with pytest.raises(ValueError, match="must differ"):
        VerifierPool(jobs=1, think_markers=("x", "x"))


def test_rlvr_verify_thinking_flags_and_markers():
    rec = {**MATH, "completions": ["[r]maybe \\boxed{8}[/r]The answer is 7.", "[r]so \\boxed{7}"]}
    res = invoke("rlvr-verify", ["-j", "1", "--think-markers", "[r]", "[/r]"], jsonl(rec))
    assert res.code == 0, res.stderr
    assert [v["status"] for v in res.records()[0]["verdicts"]] == ["correct", UNFINISHED]
    res = invoke("rlvr-verify", ["-j", "1", "--no-thinking"], jsonl({**MATH, "thinking": True,
                                                                    "completions": ["<think>so \\boxed{7}"]}))
    assert res.code == 0 and res.records()[0]["verdicts"][0]["status"] == "correct"
    bad = invoke("rlvr-verify", ["-j", "1"], jsonl({**MATH, "thinking": "yes", "completions": ["7"]}))
    assert bad.code == 3 and "field thinking" in bad.stderr
