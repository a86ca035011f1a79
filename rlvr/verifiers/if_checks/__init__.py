"""Instruction-following checks: the registries and the evaluator behind the IF verifiers.

Three registries of upstream checkers, vendored with their licences in
``rlvr.verifiers.vendored`` (see rlvr/verifiers/vendored/NOTICE):

- ``ifeval``: Google's IFEval, 25 instruction types (module ``vendored.ifeval``);
- ``if_multi``: open-instruct's IFEvalG, IFEval's 25 plus 29 more (module ``vendored.ifevalg``);
- ``ifbench``: AllenAI's IFBench, 58 out-of-distribution types plus IFEval's 25 (``vendored.ifbench``).

``evaluate`` scores one response against a record's ``instruction_id_list`` and
``kwargs`` the way the reference implementations do: strict = each checker on the
response as is; loose = followed if any of the eight variants passes (the response with
and without ``*``, with its first, last or first-and-last line removed). ``verify`` wraps
it into the verdict the rlvr verifiers return. It is deterministic: the same record and
completion give the same verdict in every run and every process (see ``nlp``).
"""

from __future__ import annotations

import functools
import importlib
import inspect
import numbers
from typing import Any

from rlvr.verifiers.if_checks import nlp

REGISTRIES = {
    "ifeval": "rlvr.verifiers.vendored.ifeval",
    "if_multi": "rlvr.verifiers.vendored.ifevalg",
    "ifbench": "rlvr.verifiers.vendored.ifbench",
}


class GroundTruthError(ValueError):
    """The record's instructions cannot be built (unknown id, bad or missing kwargs)."""


def registry(name: str) -> dict[str, type]:
    """The {instruction id: checker class} dict of registry `name`."""
    return importlib.import_module(REGISTRIES[name]).INSTRUCTION_DICT


def loose_variants(response: str) -> list[str]:
    """The eight responses the loose score tries, in upstream order, duplicates dropped."""
    r = response.split("\n")
    first = "\n".join(r[1:]).strip()
    last = "\n".join(r[:-1]).strip()
    both = "\n".join(r[1:-1]).strip()
    variants = [response, response.replace("*", ""), first, last, both,
                first.replace("*", ""), last.replace("*", ""), both.replace("*", "")]
    return list(dict.fromkeys(variants))


# The value each kwarg of the three registries takes (as IFEval, IFBench and IF
# multi-constraints data write them): a number (int, or float where a ratio or an exported
# column allows it; never a bool, NaN or infinity), a text, or a list of texts. Upstream
# takes any value and misreads a wrong one without a word (a string of keywords is checked
# letter by letter, ``True`` counts as 1, ``0`` keywords draws random ones), so a value of
# the wrong kind is bad ground truth. Names not listed are left to the checker.
_NUMBER_KWARGS = frozenset({
    "N", "capital_frequency", "frequency", "let_frequency", "m", "max_words", "min_words", "n", "n_end",
    "n_sent", "n_start", "n_words", "nth_paragraph", "num_bullets", "num_highlights", "num_paragraphs",
    "num_placeholders", "num_sections", "num_sentences", "num_words", "percentage", "small_n"})
_TEXT_KWARGS = frozenset({
    "capital_relation", "end_phrase", "first_word", "keyword", "keyword1", "keyword2", "keyword3", "keyword4",
    "keyword5", "language", "last_word", "let_relation", "letter", "options", "phrase", "postscript_marker",
    "prompt_to_repeat", "reference_text", "relation", "section_spliter", "sep", "word"})
_TEXTS_KWARGS = frozenset({"keywords", "forbidden_words"})


def kwarg_problem(key: str, value) -> str | None:
    """Why ``value`` cannot be kwarg ``key`` (None when it can, or the name is not listed)."""
    if key in _NUMBER_KWARGS:
        # numbers.Real: NumPy's integers and floats too (rows handed over from pandas)
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or value != value \
                or value in (float("inf"), float("-inf")):
            return "a number"
    elif key in _TEXT_KWARGS:
        if not isinstance(value, str):
            return "a string"
    elif key in _TEXTS_KWARGS:
        if not isinstance(value, (list, tuple)) or not all(isinstance(x, str) for x in value):
            return "a list of strings"
    return None


@functools.cache
def _parameters(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.build_description).parameters) - {"self"}


def build(name: str, index: int, instruction_id: str, kwargs: dict | None):
    """One checker, built from its kwargs with null values dropped."""
    reg = registry(name)
    cls = reg.get(instruction_id)
    if cls is None:
        hint = ""
        if name == "ifeval" and instruction_id in registry("if_multi"):
            hint = " (it is an if_multi instruction: set the record's verifier to if_multi)"
        raise GroundTruthError(f"instruction {index}: unknown {name} instruction id {instruction_id!r}{hint}")
    if kwargs is not None and not isinstance(kwargs, dict):
        raise GroundTruthError(f"instruction {index} ({instruction_id}): kwargs must be an object")
    # null means absent; so does an empty value ("", [], {}) under a name this checker does
    # not take: a table with every instruction's columns fills the unused ones that way
    # (lm-evaluation-harness drops every falsy value; rlvr keeps a given 0 or "").
    takes = _parameters(cls)
    kw = {k: v for k, v in (kwargs or {}).items()
          if v is not None and (k in takes or not (isinstance(v, (str, list, dict)) and not v))}
    for key, value in kw.items():
        want = kwarg_problem(key, value)
        if want:
            raise GroundTruthError(f"instruction {index} ({instruction_id}): kwargs field {key!r} must be {want}, "
                                   f"got {value!r}"[:300])
    nlp.reset_rng(instruction_id)
    checker = cls(instruction_id)
    try:
        checker.build_description(**kw)
    except Exception as e:  # upstream raises TypeError/ValueError/AttributeError on bad kwargs
        args = ", ".join(sorted(kw)) or "none"
        raise GroundTruthError(
            f"instruction {index} ({instruction_id}): cannot build it from kwargs ({args}): "
            f"{type(e).__name__}: {e}"
        ) from None
    return checker


def _check(checker, text: str, errors: list[str], index: int) -> bool:
    if not text.strip():
        return False
    try:
        return bool(checker.check_following(text))
    except nlp.ResourceMissing:
        raise
    except Exception as e:  # an upstream checker crashing on this text (e.g. a regex keyword)
        msg = f"instruction {index} ({checker.id}): checker failed: {type(e).__name__}: {e}"
        if msg not in errors:
            errors.append(msg)
        return False


def check_record(name: str, record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record's instructions cannot be built (registry `name`)."""
    ids = record.get("instruction_id_list")
    if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
        return "instruction_id_list", "must be a list of instruction ids"
    kwargs = record.get("kwargs")
    if kwargs is not None and not isinstance(kwargs, list):
        return "kwargs", "must be a list of objects, one per instruction"
    try:
        build_all(name, ids, kwargs)
    except GroundTruthError as e:
        return ("kwargs" if "kwargs" in str(e) else "instruction_id_list"), str(e)
    return None


def build_all(name: str, instruction_ids: list[str], kwargs: list[dict | None] | None) -> list:
    """The checkers of a record's instructions; GroundTruthError when they cannot be built."""
    if not instruction_ids:
        raise GroundTruthError("instruction_id_list is empty")
    kwargs = list(kwargs) if kwargs is not None else [None] * len(instruction_ids)
    if len(kwargs) != len(instruction_ids):
        raise GroundTruthError(f"kwargs has {len(kwargs)} entries for {len(instruction_ids)} instructions")
    return [build(name, i, iid, kw) for i, (iid, kw) in enumerate(zip(instruction_ids, kwargs))]


def evaluate(name: str, instruction_ids: list[str], kwargs: list[dict | None] | None,
             response: str) -> tuple[list[bool], list[bool], list[str]]:
    """(strict, loose, errors) for one response; raises GroundTruthError on bad ground truth."""
    checkers = build_all(name, instruction_ids, kwargs)
    variants = loose_variants(response)
    strict, loose, errors = [], [], []
    for i, checker in enumerate(checkers):
        ok = _check(checker, response, errors, i)
        strict.append(ok)
        loose.append(ok or any(_check(checker, v, errors, i) for v in variants[1:]))
    return strict, loose, errors


CONFIG_KEYS = {"loose": bool}


def check_config(name: str, config: dict) -> None:
    """Raise ValueError for an unknown option or a bad value (called once, before any work)."""
    for key, value in config.items():
        if key == "strip_think":
            raise ValueError(f"{name}.strip_think is gone: every verifier judges the answer after the thinking "
                             "the same way (rlvr-verify --thinking/--no-thinking, rlvr-train verify.thinking)")
        if key not in CONFIG_KEYS:
            raise ValueError(f"unknown {name} option {key!r} (known: {', '.join(sorted(CONFIG_KEYS))})")
        if not isinstance(value, CONFIG_KEYS[key]):
            raise ValueError(f"{name}.{key} must be true or false, got {value!r}")


def warmup() -> None:
    """Load the Punkt model and the language profiles now rather than in a timed check."""
    nlp.punkt()
    nlp.detect_language("warm up the language detector")


def verify(name: str, record: dict, completion: str, config: dict | None = None) -> dict[str, Any]:
    """The verdict for one completion of an IF record (registry `name`).

    status: correct (all instructions followed), wrong, no_answer (empty response), error
    (bad ground truth, a missing packaged resource, or a checker crash; see ``message``).
    ``strict`` / ``loose`` hold one bool per instruction, ``score`` the fraction followed.
    Option (``config``): ``loose`` (status and score from the loose results; default
    false). A completion that reasons first reaches this function as its answer only (the
    verifier pool's answer-only judging, rlvr.verification.thinking).
    """
    config = config or {}
    ids = record.get("instruction_id_list")
    base: dict[str, Any] = {"instructions": ids if isinstance(ids, list) else None}
    if not isinstance(ids, list) or not all(isinstance(x, str) for x in ids):
        return {"status": "error", "extracted": None, **base,
                "message": "record has no instruction_id_list (a list of instruction ids)"}
    text = completion if isinstance(completion, str) else ""
    try:
        strict, loose, errors = evaluate(name, ids, record.get("kwargs"), text)
    except GroundTruthError as e:
        return {"status": "error", "extracted": None, **base, "message": str(e)}
    except nlp.ResourceMissing as e:
        return {"status": "error", "extracted": None, **base, "message": str(e)}
    graded = loose if config.get("loose", False) else strict
    verdict: dict[str, Any] = {"extracted": text if text and text.strip() else None, **base,
                               "strict": strict, "loose": loose,
                               "score": sum(graded) / len(graded)}
    if errors:
        verdict.update(status="error", message="; ".join(errors))
    elif verdict["extracted"] is None:
        verdict["status"] = "no_answer"
    else:
        verdict["status"] = "correct" if all(graded) else "wrong"
    return {"status": verdict.pop("status"), **verdict}
