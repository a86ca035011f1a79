"""RLVR-IFeval's rows through the if_functions verifier (Tulu 3's func_name constraints), every
one of its 25 functions passing and failing, and the choice verifier (MMLU)."""

from __future__ import annotations

import json
import os

import pytest

from helpers import DATA, invoke, jsonl
from rlvr.data import load_records
from rlvr.verifiers import choice, if_functions as iff

# func_name, arguments, a response that meets it, one that does not
CASES = [
    ("verify_keywords", {"keyword_list": ["Ocean", "salt"]}, "The ocean is full of SALT.", "The sea is blue."),
    ("verify_keyword_frequency", {"word": "tree", "N": 2}, "A tree, another Tree.", "One tree. Trees do not count."),
    ("validate_forbidden_words", {"forbidden_words": ["bad"]}, "All good here.", "This is Badly done."),
    ("verify_letter_frequency", {"letter": "z", "N": 2}, "Zig: z and z", "z only once"),
    ("validate_response_language", {"language": "de"},
     "Das ist ein kurzer Satz auf Deutsch, und er bleibt auch auf Deutsch bis zum Ende.",
     "This is a short sentence in English that stays in English until the end."),
    ("verify_paragraph_count", {"N": 2}, "First.\n* * *\nSecond.", "First.\n* * *\n\n* * *\nThird."),
    ("validate_word_constraint", {"N": 10, "quantifier": "around"}, "one two three four five six seven eight nine",
     "one two three"),
    ("verify_sentence_constraint", {"N": 2, "quantifier": "at most"}, "One. Two.", "One. Two. Three. Four."),
    ("validate_paragraphs", {"N": 2, "first_word": "Then", "i": 2}, "First part.\n\nThen more.", "First.\n\nAnd more."),
    ("verify_postscript", {"postscript_marker": "P.S."}, "Hi.\nP.S. See you.", "Hi.\nP.S."),
    ("validate_placeholders", {"N": 2}, "Dear [name], at [address].", "Dear [name]."),
    ("verify_bullet_points", {"N": 2}, "* one\n* two", "* one\n* two\n- three"),
    ("validate_title", {}, "<<A Title>>\nText.", "No title."),
    ("validate_choice", {"options": ["My answer is yes.", "My answer is no."]}, "My answer is no.", "Perhaps."),
    ("validate_highlighted_sections", {"N": 2}, "*one* and *two*", "*one* only"),
    ("validate_sections", {"N": 2, "section_splitter": "SECTION"}, "SECTION 1 a SECTION 2 b", "SECTION 1 a"),
    ("validate_json_format", {}, '{"a": 1}', "{a: 1}"),
    ("validate_repeat_prompt", {"original_prompt": "Say hi."}, "Say hi. Hi!", "Hi! Say hi."),
    ("validate_two_responses", {}, "Yes.\n******\nNo.", "Yes.\n******\nYes."),
    ("validate_uppercase", {}, "ALL CAPS 1", "Not caps"),
    ("validate_lowercase", {}, "all lower", "Not lower"),
    ("validate_frequency_capital_words", {"N": 2, "quantifier": "at least"}, "THE END IS near", "THE end"),
    ("validate_end", {"end_phrase": "Any other questions?"}, "Done. Any other questions?", "Any other questions? No."),
    ("validate_quotation", {}, '"quoted"', 'not "quoted"'),
    ("validate_no_commas", {}, "no commas here", "one, two"),
]


def test_every_function_has_a_case():
    assert {c[0] for c in CASES} == set(iff.FUNCTIONS) and len(iff.FUNCTIONS) == 25


@pytest.mark.parametrize("func,args,good,bad", CASES, ids=[c[0] for c in CASES])
def test_functions_pass_and_fail(func, args, good, bad):
    # the hub's form: a JSON string naming every argument, unused ones null
    rec = {"verifier": "if_functions",
           "constraint": json.dumps({"func_name": func, "N": None, "quantifier": None, "end_phrase": None, **args})}
    assert iff.check_record(rec) is None
    assert iff.verify(rec, good)["status"] == "correct", good
    assert iff.verify(rec, bad)["status"] == "wrong", bad


def test_rlvr_ifeval_records_through_rlvr_verify():
    recs = load_records("rlvr_ifeval", source=os.path.join(DATA, "datasets", "rlvr_ifeval"))
    assert recs[3]["constraint"] == {"func_name": "validate_end", "end_phrase": "Is there anything else I can help with?"}
    recs[0]["completions"] = ["the sea is wide and grey", "The Sea"]
    recs[1]["completions"] = ["A tree is a tree; this tree stands tall.", "no trees"]
    r = invoke("rlvr-verify", ["--summary"], jsonl(recs[0], recs[1]))
    assert r.code == 0, r.stderr
    assert [x["rewards"] for x in r.records()] == [[1.0, 0.0], [1.0, 0.0]]
    assert r.records()[0]["verdicts"][0]["function"] == "validate_lowercase"
    bad = dict(recs[0], constraint={"func_name": "validate_end"})   # its end_phrase is missing
    r = invoke("rlvr-verify", [], jsonl(bad))
    assert r.code == 3 and "validate_end needs end_phrase" in r.stderr


def test_choice_takes_the_first_letter():
    rec = {"answer": "B", "choices": ["0", "1", "2", "3"]}
    assert choice.verify(rec, "B) 1\nQuestion: next")["status"] == "correct"
    assert choice.verify(rec, " (B)")["extracted"] == "B"
    assert choice.verify(rec, "A) 0")["status"] == "wrong"
    assert choice.verify(rec, "the answer is b")["status"] == "no_answer"   # lower case is no letter
    assert choice.verify(rec, "E) none")["status"] == "no_answer"          # four choices: A-D only
    assert choice.check_record({"answer": "E", "choices": ["a", "b"]}) == ("answer", "must be one of the letters AB")
    assert choice.verify({"answer": 1}, "A")["status"] == "error"


# "Choose" as RLVR-IFeval writes it: the options as ONE string in the JSON ground truth
# ("I know or I don't know" is a published row's; the others are the forms the same prompt
# text takes: IFEval's three answers comma-separated or as a tuple, a slash list, letters).
CHOOSE = [
    ("My answer is yes., My answer is no., My answer is maybe.", "My answer is maybe. It depends on the premise.",
     "Maybe; it depends on the premise."),
    ("I know or I don't know", "I don't know: the premise says nothing about a dining room.",
     "The hypothesis is not entailed."),
    ("('My answer is yes.', 'My answer is no.', 'My answer is maybe.')", "My answer is no.", "My answer is nope."),
    ("yes/no/maybe", "yes", "My eyes say nothing."),
    ("A, B, C, D", "The answer is B.", "Apples are red."),
]


@pytest.mark.parametrize("options,good,bad", CHOOSE, ids=[c[0][:24] for c in CHOOSE])
def test_choose_needs_one_of_the_real_options(options, good, bad):
    rec = {"verifier": "if_functions", "constraint": json.dumps(
        {"func_name": "validate_choice", "N": None, "quantifier": None, "options": options, "original_prompt": None})}
    assert iff.check_record(rec) is None
    assert iff.verify(rec, good)["status"] == "correct" and iff.verify(rec, good)["option"] in good
    assert iff.verify(rec, bad) == {**iff.verify(rec, bad), "status": "wrong", "option": None}
    # open-instruct's function iterates the string: today any option character passes (almost
    # anything does), as Tulu 3 was trained the whole response had to fit in one character
    assert iff.verify(rec, bad, {"choice": "reference"})["status"] == "correct"
    assert iff.verify(rec, good, {"choice": "tulu3"})["status"] == "wrong"


@pytest.mark.parametrize("options,parsed", [
    ("I know or I don't know", ["I know", "I don't know"]),
    ("yes, no, or maybe", ["yes", "no", "maybe"]),
    ('["A)", "B)"]', ["A)", "B)"]),
    ("(yes, no)", ["yes", "no"]),
    ("(a), (b), (c)", ["(a)", "(b)", "(c)"]),
    ("- yes\n- no", ["yes", "no"]),
    ("'yes' | 'no'", ["yes", "no"]),
    ("10,000 or 20,000", ["10,000", "20,000"]),
    ("My answer is yes.", ["My answer is yes."]),
    (["My answer is yes.", " My answer is no. "], ["My answer is yes.", "My answer is no."]),
])
def test_choose_reads_the_options(options, parsed):
    assert iff.choice_options(options) == parsed


def test_choose_options_as_rlvr_ifeval_stores_them_through_rlvr_verify():
    rec = load_records("rlvr_ifeval", source=os.path.join(DATA, "datasets", "rlvr_ifeval"))[4]
    assert rec["constraint"]["options"] == "My answer is yes., My answer is no., My answer is maybe."
    rec["completions"] = ["My answer is yes. On a clear day it is.", "Yes, on a clear day it is.", ""]
    r = invoke("rlvr-verify", [], jsonl(rec))
    assert r.code == 0, r.stderr
    assert r.records()[0]["rewards"] == [1.0, 0.0, 0.0]
    r = invoke("rlvr-verify", ["--set", "if_functions.choice=reference"], jsonl(rec))
    assert r.records()[0]["rewards"] == [1.0, 1.0, 0.0]    # the reproduction: any letter of the options
    r = invoke("rlvr-verify", ["--set", "if_functions.choice=any"], jsonl(rec))
    assert r.code == 2 and "if_functions.choice must be one of options, reference, tulu3" in r.stderr
    assert iff.choice_options(" ; ") == [";"] and iff.choice_options(["", " '' "]) == [] and iff.check_record(
        {"constraint": {"func_name": "validate_choice", "options": "   "}}) == (
        "constraint", "validate_choice needs options: none given")
