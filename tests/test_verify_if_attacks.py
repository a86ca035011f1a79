"""Adversarial responses and malformed ground truth for the instruction-following verifiers.

Pure Python, no subprocesses: crafted responses that made a check take quadratic time,
text that games a check, and records whose kwargs have the wrong types.
"""

from __future__ import annotations

import random
import re

import pytest

from rlvr.verifiers import get
from rlvr.verifiers import if_functions
from rlvr.verifiers.if_checks import evaluate, patterns

# --- linear-time equivalents of the upstream regular expressions -------------------------

_ALPHABET = "[]<>*- \t\n\ra\x85\u2028"


def _random_texts(n: int = 3000, seed: int = 7):
    rnd = random.Random(seed)
    yield from ("", "\n", "*", "-", "*\n", "**", "[]", "<<>>", "<<x>>", "<<<x>>>", "\n\n* a\n- b")
    for _ in range(n):
        yield "".join(rnd.choice(_ALPHABET) for _ in range(rnd.randint(0, 24)))


def test_linear_patterns_give_the_regex_results():
    for t in _random_texts():
        assert patterns.count_bracketed(t) == len(re.findall(r"\[.*?\]", t)), repr(t)
        assert patterns.count_bracketed(t, "<", ">") == len(re.findall(r"<.*?>", t)), repr(t)
        assert patterns.titles(t) == re.findall(r"<<[^\n]+>>", t), repr(t)
        assert bool(patterns.titles(t, min_inner=0)) == bool(re.search(r"<<(.*?)>>", t)), repr(t)
        assert patterns.count_marked_lines(t, "*") == len(re.findall(r"^\s*\*[^\*].*$", t, flags=re.MULTILINE)), repr(t)
        assert patterns.count_marked_lines(t, "-") == len(re.findall(r"^\s*-.*$", t, flags=re.MULTILINE)), repr(t)


# Each of these took minutes (quadratic regex backtracking) before; now milliseconds. No time
# is asserted: a regression shows as a test that does not finish.
_BIG = 300_000
_CRAFTED = [
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "[" * _BIG + "\n]", False),
    ("detectable_content:number_placeholders", {"num_placeholders": 1}, "[x] " + "[" * _BIG, True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 0}, "x" + "\n" * _BIG + "y", True),
    ("detectable_format:number_bullet_lists", {"num_bullets": 1}, "* a\n" + " \n" * _BIG + "y", True),
    ("detectable_content:postscript", {"postscript_marker": "P.S."}, "P.S. bye\n" + "\t" * _BIG + "y", True),
    ("detectable_content:postscript", {"postscript_marker": "P.P.S"}, "x" + "\n" * _BIG + "y", False),
    ("detectable_format:title", {}, "<" * _BIG, False),
    ("detectable_format:title", {}, "<<A title>>\n" + "<" * _BIG, True),
]


@pytest.mark.parametrize("iid, kwargs, text, expected", _CRAFTED, ids=[f"{c[0]}-{i}" for i, c in enumerate(_CRAFTED)])
def test_crafted_enormous_responses_are_checked_in_linear_time(iid, kwargs, text, expected):
    for registry in ("ifeval", "if_multi"):
        strict, loose, errors = evaluate(registry, [iid], [kwargs], text)
        assert errors == []
        assert strict == [expected]


def test_if_functions_placeholder_and_title_are_linear():
    assert if_functions.validate_placeholders("[" * _BIG + "]", 1)
    assert not if_functions.validate_placeholders("[" * _BIG, 1)
    assert not if_functions.validate_title("<" * _BIG)
    assert if_functions.validate_title("<" * _BIG + ">>")


# --- gamed or pathological formats --------------------------------------------------------

@pytest.mark.parametrize("text, ok", [
    ("[" * 100_000 + "]" * 100_000, False),  # too deep for Python's parser: not followed, not a crash
    ('```json\n{"a": 1}\n```', True),
    ('```json\n{"a": 1}\n```\nHope this helps!', False),
    ('{"a": 1} and some trailing text', False),
])
def test_json_format_verdicts(text, ok):
    strict, loose, errors = evaluate("ifeval", ["detectable_format:json_format"], [{}], text)
    assert errors == [] and strict == [ok]


# --- malformed ground truth ---------------------------------------------------------------

@pytest.mark.parametrize("iid, kwargs, field", [
    ("keywords:existence", {"keywords": "cat"}, "keywords"),  # upstream checked the letters c, a, t
    ("keywords:existence", {"keywords": ["cat", 3]}, "keywords"),
    ("keywords:forbidden_words", {"forbidden_words": 0}, "forbidden_words"),  # upstream drew random words
    ("length_constraints:number_words", {"num_words": True, "relation": "at least"}, "num_words"),
    ("length_constraints:number_words", {"num_words": float("nan"), "relation": "at least"}, "num_words"),
    ("length_constraints:number_words", {"num_words": "300", "relation": "less than"}, "num_words"),
    ("detectable_format:number_bullet_lists", {"num_bullets": [3]}, "num_bullets"),
    ("startend:end_checker", {"end_phrase": 42}, "end_phrase"),
    ("detectable_content:postscript", {"postscript_marker": {"x": 1}}, "postscript_marker"),
])
def test_kwargs_of_the_wrong_kind_are_bad_ground_truth(iid, kwargs, field):
    rec = {"verifier": "ifeval", "instruction_id_list": [iid], "kwargs": [kwargs]}
    v = get("ifeval")
    where, problem = v.check_record(rec)
    assert where == "kwargs" and repr(field) in problem and iid in problem
    out = v.verify(rec, "Some response, with words. P.S. cat", {})
    assert out["status"] == "error" and repr(field) in out["message"]


def test_kwargs_of_the_published_kinds_still_build():
    ok = [("length_constraints:number_words", {"num_words": 300.0, "relation": "less than"}),  # exported column
          ("keywords:existence", {"keywords": []}),
          ("keywords:forbidden_words", {"forbidden_words": ["cat"]})]
    for iid, kw in ok:
        assert get("ifeval").check_record({"verifier": "ifeval", "instruction_id_list": [iid], "kwargs": [kw]}) is None
    rec = {"instruction_id_list": ["copy:repeat_phrase"], "kwargs": [{"phrase": "a b c", "small_n": 2.0}]}
    assert get("ifeval").check_record(rec) is None


# --- what holds, and the reference's literal rules kept on purpose (docs/verify.md) ------

@pytest.mark.parametrize("iid, kwargs, text, strict, loose", [
    ("change_case:english_capital", {}, "这是一个中文回答。", False, False),  # no cased letters
    ("change_case:english_lowercase", {}, "这是一个中文回答。", False, False),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Hi. Any other questions?  \n\n", True, True),
    ("startend:end_checker", {"end_phrase": "Any other questions?"}, "Hi. Any other questions?**", False, True),
    ("keywords:existence", {"keywords": ["cat"]}, "**C**at", False, True),
    ("keywords:forbidden_words", {"forbidden_words": ["bad"]}, "b\u0430d, ba\u200bd", True, True),  # kept: literal
    ("punctuation:no_comma", {}, "One\uff0ctwo", True, True),  # kept: only ',' is a comma upstream
    ("length_constraints:number_words", {"num_words": 3, "relation": "less than"}, "a_b_c_d_e f", True, True),
    ("detectable_format:title", {}, "<<>>\nbody", False, False),
    ("detectable_content:number_placeholders", {"num_placeholders": 2}, "[a]\n[b\n]", False, False),
])
def test_literal_reference_rules(iid, kwargs, text, strict, loose):
    s, lo, errors = evaluate("ifeval", [iid], [kwargs], text)
    assert (s, lo, errors) == ([strict], [loose], [])


@pytest.mark.parametrize("text", ["", " \n\t ", "\u3000"])
def test_blank_responses_follow_nothing(text):
    out = get("ifeval").verify({"instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]}, text, {})
    assert out["status"] == "no_answer" and out["strict"] == [False] and out["loose"] == [False]


def test_empty_columns_of_other_instructions_are_absent():
    # a table with every instruction's kwargs columns fills the unused ones with "" or []
    row = {"keywords": [], "end_phrase": "", "num_words": None, "relation": ""}
    assert evaluate("ifeval", ["punctuation:no_comma"], [row], "a b") == ([True], [True], [])
    # a value under a name the checker does not take is still refused
    assert get("ifeval").check_record({"instruction_id_list": ["punctuation:no_comma"],
                                       "kwargs": [{"keywords": ["x"]}]})[0] == "kwargs"


@pytest.mark.parametrize("iid, kwargs, text, ok", [
    ("keywords:existence", {"keywords": ["c++"]}, "I like c and python", False),  # regex c++ matched any 'c'
    ("keywords:existence", {"keywords": ["C++"]}, "Written in c++.", True),
    ("keywords:existence", {"keywords": ["U.S."]}, "UxSx", False),
    ("keywords:frequency", {"keyword": "a.", "frequency": 2, "relation": "less than"}, "ab ac ad", True),
    ("keywords:forbidden_words", {"forbidden_words": ["c++"]}, "Use c++ here", False),
    ("keywords:forbidden_words", {"forbidden_words": ["c++"]}, "Use c here", True),  # regex c++ forbade 'c'
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "concatenate", True),
    ("keywords:forbidden_words", {"forbidden_words": ["cat"]}, "A CAT.", False),
])
def test_keywords_are_literal(iid, kwargs, text, ok):
    for registry in ("ifeval", "if_multi", "ifbench"):
        strict, _, errors = evaluate(registry, [iid], [kwargs], text)
        assert (strict, errors) == ([ok], []), registry


@pytest.mark.parametrize("iid, text", [
    ("custom:csv_city", "x" * 200_000),  # over csv's field size limit
    ("custom:csv_special_character", 'ProductID,Category,Brand,Price,Stock\n"' + "x" * 200_000),
    ("custom:csv_quotes", '"StudentID"\t"Subject"\t"Grade"\t"Semester"\t"Score"\n' + '"a"\t\t"c"\t"d"\t"e"\n' * 3),
])
def test_unreadable_csv_is_not_followed(iid, text):
    strict, loose, errors = evaluate("ifbench", [iid], [{}], text)
    assert (strict, loose, errors) == ([False], [False], [])


def test_if_multi_keywords_and_phrases_are_literal_too():
    """The IFEvalG checkers of if_multi match keywords and phrase words as text, as ifeval's do
    ('f(x' used to crash the check, 'c++' to match any c)."""
    from rlvr.verifiers import if_checks

    def ok(iid, kwargs, text):
        v = if_checks.verify("if_multi", {"instruction_id_list": [iid], "kwargs": [kwargs]}, text, {})
        assert v["status"] in ("correct", "wrong"), v
        return v["status"] == "correct"

    assert ok("keywords:word_once", {"keyword": "f(x"}, "here f(x) is defined")
    assert not ok("keywords:word_once", {"keyword": "c++"}, "c and c")
    assert ok("keywords:word_count_different_numbers", {"keyword": "c++", "frequency": 1, "relation": "at least"},
              "I write c++ daily")
    assert not ok("keywords:word_count_different_numbers", {"keyword": "c++", "frequency": 1,
                                                            "relation": "at least"}, "I write c daily")


def test_kwargs_from_numpy_and_tuples_build():
    np = pytest.importorskip("numpy")
    from rlvr.verifiers import if_checks

    assert if_checks.kwarg_problem("num_words", np.int64(300)) is None
    assert if_checks.kwarg_problem("keywords", ("a", "b")) is None
    assert if_checks.kwarg_problem("num_words", True) == "a number"
