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
