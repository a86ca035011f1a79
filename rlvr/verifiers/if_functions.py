"""The `if_functions` verifier: Tulu 3's instruction-following constraints, one per prompt.

    verify({"constraint": {"func_name": "validate_lowercase"}}, "all lower case", {})
    -> {"status": "correct", "extracted": "all lower case", "function": "validate_lowercase", "score": 1.0}

AllenAI's RLVR-GSM-MATH-IF-Mixed-Constraints (and RLVR-IFeval) give each instruction-
following row one constraint as a JSON object ``{"func_name": NAME, ARG: value, ...}``
(arguments that do not apply are null), checked by one of 25 functions open-instruct
defines (open_instruct/if_functions.py, its verifier "ifeval_old"); ``rlvr-data allenai``
writes that object as the record's ``constraint``. This module implements the 25 checks
with the reference's semantics, one function each below, named as there: substring
tests where the reference uses substrings, its regular expressions where it counts words,
sentences, placeholders or highlights, exact string equality elsewhere. The one
non-deterministic check upstream, the response language (langdetect), uses rlvr's seeded
port of langdetect (rlvr.verifiers.if_checks.nlp), so a verdict never varies between runs.
One check differs from the reference on purpose: "Choose" (validate_choice) passes only a
response that contains one of the real options, read from RLVR-IFeval's one-string form
(``choice_options``), where open-instruct iterates that string character by character;
config ``choice: reference`` (or ``tulu3``, its earlier operand order) reproduces it.

The response is cleaned as the reference cleans it before checking: ``<|assistant|>`` and
``<answer>``/``</answer>`` removed, surrounding whitespace stripped (the thinking is already
gone: the pool's answer-only judging). Status: correct (the constraint holds), wrong,
no_answer (nothing left to check; the reference would run the function on the empty text,
which e.g. passes the lowercase check), error (no ``constraint``, an unknown function,
missing or unusable arguments; see ``error``). Config: choice (options | reference | tulu3,
see CHOICE_RULES).
"""

from __future__ import annotations

import ast
import inspect
import json
import re
from typing import Any

NAME = "if_functions"
VERSION = "2"  # 2: "Choose" checks the real options, not the characters of their string
TIMEOUT_S = 10.0


def _quantity(n: int, count: int, quantifier: str, around: int) -> bool:
    if quantifier == "at least":
        return n >= count
    if quantifier == "at most":
        return n <= count
    if quantifier == "around":
        return abs(n - count) <= around
    return False


def verify_keywords(text: str, keyword_list: list) -> bool:
    low = text.lower()
    return all(k.lower() in low for k in keyword_list)


def verify_keyword_frequency(text: str, word: str, N: int) -> bool:
    return re.findall(r"\b\w+\b", text.lower()).count(word.lower()) == N


def validate_forbidden_words(text: str, forbidden_words: list) -> bool:
    low = text.lower()
    return not any(w.lower() in low for w in forbidden_words)


def verify_letter_frequency(text: str, letter: str, N: int) -> bool:
    if len(letter) != 1:
        raise ValueError("letter must be a single character")
    return text.count(letter) == N


def validate_response_language(text: str, language: str) -> bool:
    from rlvr.verifiers.if_checks import nlp

    return nlp.detect_language(text) == language


def verify_paragraph_count(text: str, N: int) -> bool:
    cleaned = "\n".join(line.strip() for line in text.splitlines()).strip()
    parts = cleaned.split("* * *")
    return all(p.strip() for p in parts) and len(parts) == N


def validate_word_constraint(text: str, N: int, quantifier: str) -> bool:
    return _quantity(len(text.strip().split()), N, quantifier, max(round(N * 0.1), 1))


def verify_sentence_constraint(text: str, N: int, quantifier: str) -> bool:
    n = len(re.split(r"(?<!\w\.\w.)(?<![A-Z][a-z]\.)(?<=\.|\?|!)\s", text))
    return _quantity(n, N, quantifier, 1)


def validate_paragraphs(text: str, N: int, first_word: str, i: int) -> bool:
    parts = text.split("\n\n")
    return len(parts) == N and parts[i - 1].strip().startswith(first_word)


def verify_postscript(text: str, postscript_marker: str) -> bool:
    k = text.find(postscript_marker)
    return k >= 0 and len(text[k:].strip()) > len(postscript_marker)


def validate_placeholders(text: str, N: int) -> bool:
    from rlvr.verifiers.if_checks import patterns

    return patterns.count_bracketed(text) >= N  # len(re.findall(r"\[(.*?)\]", text)), linear time


def verify_bullet_points(text: str, N: int) -> bool:
    return sum(1 for line in text.split("\n") if line.strip().startswith(("*", "-"))) == N


def validate_title(text: str) -> bool:
    from rlvr.verifiers.if_checks import patterns

    return bool(patterns.titles(text, min_inner=0))  # re.search(r"<<(.*?)>>", text), linear time


_SPLITS = (re.compile(r"\s*\n\s*"), re.compile(r"\s*[;|]\s*"), re.compile(r",\s+(?:or\s+)?|\s+or\s+"),
           re.compile(r"\s*/\s*"))
_QUOTES = ("\"\"", "''", "``")
_BULLET = re.compile(r"^[-*\u2022]\s+")


def choice_options(options) -> list[str]:
    """The options of a "Choose" constraint as a list. A list (or tuple) is taken as it is;
    RLVR-IFeval writes them as ONE string (``"I know or I don't know"``, ``"My answer is
    yes., My answer is no., My answer is maybe."``), which is read as: a JSON or Python list
    or tuple literal; else split at the first of these that gives two or more options: line
    breaks; ``;`` or ``|``; ``, `` and `` or `` (``"yes, no, or maybe"``); ``/``
    (``"yes/no/maybe"``); else the whole string is the one option. Brackets around an
    unquoted list, a bullet (``- ``) before an option and quotes around it are dropped;
    empty options are ignored."""
    if isinstance(options, str):
        s = options.strip()
        parsed = None
        if s[:1] in "[(" and s[-1:] in "])":
            for parse in (json.loads, ast.literal_eval):
                try:
                    parsed = parse(s)
                    break
                except (ValueError, SyntaxError, MemoryError, RecursionError):
                    continue
        if isinstance(parsed, (list, tuple)) and all(isinstance(o, str) for o in parsed):
            items = list(parsed)
        else:
            if len(s) >= 2 and s[0] + s[-1] in ("()", "[]") and not set(s[0] + s[-1]) & set(s[1:-1]):
                s = s[1:-1]   # a list written out without quotes: (yes, no)
            items = next((parts for parts in (p.split(s) for p in _SPLITS) if sum(1 for x in parts if x.strip()) > 1),
                         [s])
    elif isinstance(options, (list, tuple)):
        items = [o if isinstance(o, str) else str(o) for o in options]
    else:
        raise ValueError(f"options must be a string or a list, got {type(options).__name__}")
    out = []
    for o in items:
        o = _BULLET.sub("", o.strip())
        if len(o) >= 2 and o[0] + o[-1] in _QUOTES:
            o = o[1:-1].strip()
        if o:
            out.append(o)
    return out


def _mentions(text: str, option: str) -> bool:
    """The option occurs in the text, not glued to a word on a side where it starts or
    ends with a word character (option "A" is not found in "Apple", "yes" not in "eyes")."""
    pattern = re.escape(option)
    if re.match(r"\w", option):
        pattern = r"(?<!\w)" + pattern
    if re.search(r"\w$", option):
        pattern += r"(?!\w)"
    return re.search(pattern, text) is not None


# How "Choose" is checked (config ``choice``): "options" (the default) passes a response that
# contains one of the real options; the other two reproduce open-instruct's function, which
# iterates ``options`` as given, so on RLVR-IFeval's one-string options it goes character by
# character: "reference" (open-instruct since May 2026: an option character in the response,
# which almost any response passes) and "tulu3" (open-instruct as Tulu 3 was trained: the
# whole response inside one option character, which almost every response fails).
CHOICE_RULES = ("options", "reference", "tulu3")


def validate_choice(text: str, options, rule: str = "options") -> str | None:
    """The option the response gives (the first found, in the options' order), or None.
    The reproduction rules return the option they matched on, a character on string options."""
    if rule == "reference":
        return next((o for o in options if o in text), None)
    if rule == "tulu3":
        return next((o for o in options if text in o), None)
    return next((o for o in choice_options(options) if _mentions(text, o)), None)


def validate_highlighted_sections(text: str, N: int) -> bool:
    return len(re.findall(r"\*(.*?)\*", text)) >= N


def validate_sections(text: str, N: int, section_splitter: str) -> bool:
    parts = text.split(section_splitter)
    if parts[0] == "":
        parts = parts[1:]
    return len(parts) == N


def validate_json_format(text: str) -> bool:
    try:
        json.loads(text)
    except ValueError:
        return False
    return True


def validate_repeat_prompt(text: str, original_prompt: str) -> bool:
    return text.startswith(original_prompt)


def validate_two_responses(text: str) -> bool:
    if text.count("******") != 1:
        return False
    first, second = text.split("******")
    return first.strip() != second.strip()


def validate_uppercase(text: str) -> bool:
    return text == text.upper()


def validate_lowercase(text: str) -> bool:
    return text == text.lower()


def validate_frequency_capital_words(text: str, N: int, quantifier: str) -> bool:
    return _quantity(len(re.findall(r"\b[A-Z]+\b", text)), N, quantifier, max(round(N * 0.1), 1))


def validate_end(text: str, end_phrase: str) -> bool:
    return text.endswith(end_phrase)


def validate_quotation(text: str) -> bool:
    return text.startswith('"') and text.endswith('"')


def validate_no_commas(text: str) -> bool:
    return "," not in text


FUNCTIONS = {f.__name__: f for f in (
    verify_keywords, verify_keyword_frequency, validate_forbidden_words, verify_letter_frequency,
    validate_response_language, verify_paragraph_count, validate_word_constraint, verify_sentence_constraint,
    validate_paragraphs, verify_postscript, validate_placeholders, verify_bullet_points, validate_title,
    validate_choice, validate_highlighted_sections, validate_sections, validate_json_format, validate_repeat_prompt,
    validate_two_responses, validate_uppercase, validate_lowercase, validate_frequency_capital_words, validate_end,
    validate_quotation, validate_no_commas)}


def parse_constraint(value: Any) -> dict:
    """The constraint object from a dict or its JSON text; ValueError when it is neither or
    names no known function (its missing arguments too)."""
    c = value
    if isinstance(c, str):
        try:
            c = json.loads(c)
        except ValueError:
            raise ValueError("constraint is not JSON") from None
    if not isinstance(c, dict):
        raise ValueError("constraint must be an object with func_name")
    name = c.get("func_name")
    if name not in FUNCTIONS:
        raise ValueError(f"unknown func_name {name!r} (known: {', '.join(sorted(FUNCTIONS))})")
    params = _params(name)
    missing = [p for p in params if c.get(p) is None]
    if missing:
        raise ValueError(f"{name} needs {', '.join(missing)}")
    if name == "validate_choice" and not choice_options(c["options"]):
        raise ValueError("validate_choice needs options: none given")
    return c


def _params(name: str) -> list[str]:
    """The constraint arguments a function takes (its parameters after the text, less the
    choice rule, which comes from the verifier's config)."""
    return [p for p in list(inspect.signature(FUNCTIONS[name]).parameters)[1:] if p != "rule"]


def check_config(config: dict) -> None:
    """Raise ValueError for an unknown option or value (called once, before any work)."""
    unknown = set(config) - {"choice"}
    if unknown:
        raise ValueError(f"unknown if_functions option(s): {', '.join(sorted(unknown))} (known: choice)")
    if config.get("choice", "options") not in CHOICE_RULES:
        raise ValueError(f"if_functions.choice must be one of {', '.join(CHOICE_RULES)}, got {config.get('choice')!r}")


def check_record(record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record's constraint cannot be checked."""
    try:
        parse_constraint(record.get("constraint"))
    except ValueError as e:
        return "constraint", str(e)
    return None


def warmup() -> None:
    validate_response_language("warm up the language detector", "en")


def verify(record: dict, completion: str, config: dict | None = None) -> dict:
    """The verdict for one completion (see the module docstring)."""
    try:
        c = parse_constraint(record.get("constraint"))
    except ValueError as e:
        return {"status": "error", "extracted": None, "error": f"{e} (field constraint)"}
    name = c["func_name"]
    text = completion if isinstance(completion, str) else ""
    text = text.replace("<|assistant|>", "").replace("<answer>", "").replace("</answer>", "").strip()
    if not text:
        return {"status": "no_answer", "extracted": None, "function": name, "score": 0.0}
    args = {p: c[p] for p in _params(name)}
    if name == "validate_choice":
        args["rule"] = (config or {}).get("choice", "options")
    try:
        got = FUNCTIONS[name](text, **args)
    except Exception as e:  # noqa: BLE001 - a bad argument (a letter of two characters, a non-number N)
        return {"status": "error", "extracted": None, "function": name, "error": f"{name}: {type(e).__name__}: {e}"}
    ok = got is not None if name == "validate_choice" else bool(got)
    verdict = {"status": "correct" if ok else "wrong", "extracted": text[:1000], "function": name,
               "score": 1.0 if ok else 0.0}
    if name == "validate_choice":
        verdict["option"] = got
    return verdict
