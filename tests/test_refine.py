"""rlvr-refine (rlvr.refine): the feedback each verifier's verdict gives, the new prompt records
(template, chat prompts, ids, rounds, what is dropped), bad input at FILE:LINE, and the whole
loop as a pipe on the CPU: rlvr-rollout (hf engine, tiny model) | rlvr-verify | rlvr-refine |
rlvr-rollout | rlvr-verify | rlvr-select."""

from __future__ import annotations

import pytest

from helpers import invoke, jsonl
from rlvr.refine import Refiner, feedback, refine


def _verified(**kw):
    rec = {"id": "p1", "prompt": "Write about cats.", "verifier": "ifeval",
           "instruction_id_list": ["punctuation:no_comma", "length_constraints:number_words"],
           "kwargs": [{}, {"relation": "at least", "num_words": 50}],
           "completions": ["cats, dogs", "<think>hmm</think>cats are nice", "x"],
           "finish_reasons": ["stop"] * 3, "completion_tokens": [3, 5, 1], "generation": {"model": "m"},
           "verdicts": [{"status": "wrong", "strict": [False, False], "score": 0.0, "verifier": "ifeval"},
                        {"status": "wrong", "strict": [True, False], "score": 0.5, "verifier": "ifeval"},
                        {"status": "error", "message": "checker crashed"}],
           "rewards": [0.0, 0.5, 0.0]}
    rec.update(kw)
    return rec


def test_if_feedback_names_the_instructions_not_followed_and_keeps_the_grading_fields():
    r = Refiner()
    (out,) = list(refine([_verified()], r))
    assert out["id"] == "p1/refine-1"          # the best failed completion (reward 0.5); the error one skipped
    assert out["refine"] == {"of": "p1", "root": "p1", "completion_index": 1, "round": 1, "status": "wrong",
                             "reward": 0.5, "prompt": "Write about cats."}
    assert "cats are nice" in out["prompt"] and "hmm" not in out["prompt"]     # thinking cut off
    assert "- number words (length_constraints:number_words: relation=at least, num_words=50)" in out["prompt"]
    assert "no comma" not in out["prompt"]                                      # that one was followed
    assert out["prompt"].startswith("Write about cats.")
    assert out["instruction_id_list"] == _verified()["instruction_id_list"] and out["verifier"] == "ifeval"
    for gone in ("completions", "verdicts", "rewards", "finish_reasons", "completion_tokens", "generation"):
        assert gone not in out
    assert r.stats == {"records": 1, "failed": 2, "prompts": 1, "skipped_error": 1, "solved": 0}
    allp = list(refine([_verified()], Refiner(per_prompt=None)))
    assert [x["id"] for x in allp] == ["p1/refine-1", "p1/refine-0"]


def test_rounds_chat_prompts_and_a_custom_template():
    chat = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Add 2 and 2."}]
    rec = {"id": "m/refine-0", "prompt": chat, "verifier": "math", "answer": "4", "completions": ["5", "4"],
           "verdicts": [{"status": "wrong", "extracted": "5"}, {"status": "correct", "extracted": "4"}],
           "rewards": [0.0, 1.0], "refine": {"of": "m", "root": "m", "completion_index": 0, "round": 1}}
    (out,) = list(refine([rec], Refiner(template="[{status}] {prompt} | {completion} | {feedback}")))
    assert out["prompt"][0] == chat[0] and len(out["prompt"]) == 2
    assert out["prompt"][1]["content"] == ("[wrong] Add 2 and 2. | 5 | the final answer 5 is not correct.\n"
                                           "Give the final answer in \\boxed{}.")
    assert "4" not in out["prompt"][1]["content"].split("|")[-1]     # never the reference answer
    assert out["refine"]["round"] == 2 and out["refine"]["root"] == "m" and out["id"] == "m/refine-0/refine-0"
    assert "prompt" not in out["refine"]   # its origin's prompt is unknown (refined before refine.prompt)
    (again,) = list(refine([{**rec, "refine": {**rec["refine"], "prompt": "Add 2 and 2."}}], Refiner()))
    assert again["refine"]["prompt"] == "Add 2 and 2."   # the first prompt, through every round
    assert out["answer"] == "4"
    with pytest.raises(ValueError, match="not valid"):
        Refiner(template="{answer}")


def test_feedback_of_each_verifier():
    code = feedback({"verifier": "code"}, {"status": "wrong", "tests_passed": 1, "tests_total": 3,
                                           "error": "AssertionError: assert add(1, 2) == 3", "output_tail": "oops"})
    assert code == ("1 of 3 tests passed.\nThe first failure: AssertionError: assert add(1, 2) == 3\n"
                    "The program's output ended with:\noops")
    assert feedback({"verifier": "code"}, {"status": "timeout", "error": "wall-clock limit"}).startswith(
        "the program ran out of time.")
    assert "\\boxed{}" in feedback({"verifier": "math"}, {"status": "no_answer", "extracted": None})
    assert feedback({"verifier": "judge"}, {"status": "wrong", "score": 0.2, "judge": {"reply": "Score: 2. Rambles."}}) \
        == "a grader scored it 0.20 out of 1 and said: Score: 2. Rambles."
    gated = feedback({"verifier": "math"}, {"status": "wrong", "extracted": "4", "gated": True,
                                            "judge": {"reply": "gibberish"}})
    assert gated.endswith("A grader rejected the response: gibberish")
    fn = feedback({"verifier": "if_functions", "constraint": {"func_name": "validate_lowercase"}},
                  {"status": "wrong", "function": "validate_lowercase"})
    assert fn == "the response does not satisfy the constraint validate_lowercase."
    assert "never finished" in feedback({}, {"status": "unfinished_thinking"})


def test_bad_input_names_file_line_and_field(tmp_path):
    f = tmp_path / "v.jsonl"
    f.write_text(jsonl(_verified(), {"id": "q", "prompt": "x", "completions": ["a"]}))
    r = invoke("rlvr-refine", [str(f)])
    assert r.code == 3 and f"{f}:2: required field is missing (field verdicts)" in r.stderr
    assert [x["id"] for x in r.records()] == ["p1/refine-1"]        # what came before is written
    r = invoke("rlvr-refine", ["--keep-going", str(f)])
    assert r.code == 0 and r.records()[1]["error"]["field"] == "verdicts"
    r = invoke("rlvr-refine", [], jsonl({**_verified(), "rewards": [1.0]}))
    assert r.code == 3 and "<stdin>:1: has 1 entries for 3 completions (field rewards)" in r.stderr
    t = tmp_path / "t.txt"
    t.write_text("{prompt} {nope}")
    r = invoke("rlvr-refine", [], jsonl({**_verified(), "prompt": [{"role": "system", "content": "x"}]}))
    assert r.code == 3 and "<stdin>:1: rlvr-refine needs the original prompt" in r.stderr and "(field prompt)" in r.stderr
    r = invoke("rlvr-refine", ["--template", str(t), str(f)])
    assert r.code == 2 and "--template" in r.stderr and "not valid" in r.stderr


def test_select_pairs_refined_successes_with_the_original_prompt():
    """rlvr-select --original-prompt (STaR's rationalization): a refined record's success is kept
    as an answer to the prompt it was refined from, once per original prompt; other records and
    the default keep their own prompt."""
    first = {"id": "p1", "prompt": "Write about cats.", "verifier": "ifeval", "completions": ["a"], "rewards": [0.0],
             "verdicts": [{"status": "wrong", "strict": [False]}], "instruction_id_list": ["x:y"], "kwargs": [{}]}
    (r1,) = list(refine([first], Refiner()))
    solved = [{**r1, "id": f"p1/refine-{k}", "completions": ["bad", "good"], "rewards": [0.0, 1.0]} for k in (0, 1)]
    plain = {"id": "q", "prompt": "Hi.", "completions": ["ok"], "rewards": [1.0]}
    r = invoke("rlvr-select", ["--original-prompt", "--max-pass", "1"], jsonl(*solved, plain))
    assert r.code == 0, r.stderr
    out = r.records()
    assert [(x["id"], x["prompt"], x["completion"]) for x in out] == [("p1", "Write about cats.", "good"),
                                                                      ("q", "Hi.", "ok")]
    assert out[0]["refined_prompt"] == r1["prompt"] and out[0]["refine"]["of"] == "p1" and "refined_prompt" not in out[1]
    assert "not kept: 1 repeated ids" in r.stderr      # the second success of p1
    r = invoke("rlvr-select", ["--max-pass", "1"], jsonl(*solved))
    assert [(x["id"], x["prompt"]) for x in r.records()] == [(x["id"], r1["prompt"]) for x in solved]


def test_refine_loop_as_a_pipe_on_the_cpu(tiny_model_dir):
    """Two IF prompts through a full round; the tiny model's weights are random, so which
    completions fail is whatever they are: each failure gives exactly one new prompt that the
    second rollout and verification carry by its id, and rlvr-select reads the result."""
    prompts = [{"id": f"if{i}", "prompt": f"Write a line about {w}.", "verifier": "ifeval",
                "instruction_id_list": [iid], "kwargs": [{}]}
               for i, (w, iid) in enumerate([("rain", "change_case:english_capital"), ("sun", "punctuation:no_comma")])]

    def rollout(stdin):
        r = invoke("rlvr-rollout", ["--engine", "hf", "--model", tiny_model_dir, "--max-tokens", "12",
                                    "--temperature", "1.0", "--seed", "3", "-n", "3", "--dtype", "float32"], stdin)
        assert r.code == 0, r.stderr
        return r.stdout

    first = invoke("rlvr-verify", ["-j", "1"], rollout(jsonl(*prompts)))
    assert first.code == 0, first.stderr
    failed = {x["id"]: [k for k, rw in enumerate(x["rewards"]) if rw < 1.0] for x in first.records()}
    ref = invoke("rlvr-refine", ["--all"], first.stdout)
    assert ref.code == 0, ref.stderr
    new = ref.records()
    assert [x["id"] for x in new] == [f"{i}/refine-{k}" for i, ks in failed.items() for k in ks]
    assert f"{len(new)} new prompts" in ref.stderr
    if not new:
        pytest.skip("every completion of the tiny model passed: nothing to refine")
    assert all("It was not accepted: these instructions were not followed:" in x["prompt"] for x in new)
    second = invoke("rlvr-verify", ["-j", "1"], rollout(ref.stdout))
    assert second.code == 0, second.stderr
    out = second.records()
    assert [x["id"] for x in out] == [x["id"] for x in new]
    assert all(len(x["rewards"]) == 3 and x["refine"]["round"] == 1 for x in out)
    sel = invoke("rlvr-select", ["--max-pass", "1"], second.stdout)
    assert sel.code == 0, sel.stderr
    solved = [x["id"] for x in out if any(r == 1.0 for r in x["rewards"])]
    assert [x["id"] for x in sel.records()] == solved
    assert all(x["refine"]["of"] in failed for x in sel.records())
