"""The math verifier (GSM8K, MATH and similar): extract an answer, normalise, compare.

    verify({"answer": "18"}, "... so she makes \\boxed{18} dollars.", {})
    -> {"status": "correct", "extracted": "18", "method": "string"}

Extraction (mode ``default``): the last ``\\boxed{...}`` / ``\\fbox{...}`` (nested braces),
else the later of "The (final) answer is X" / "Answer: X", X up to the end of that sentence
(``first_sentence``; Minerva's "Final Answer: The final answer is X. I hope it is
correct." included) and GSM8K's ``#### X``; else, as base models often end, the last math
span (``$...$``, ``\\(...\\)``, ``\\[...\\]``, ``$$...$$``, the last row of an align
environment, or a last line that is one LaTeX expression), compared as an expression,
unless a number in the prose after it ends the text; else the last number in the text
(both fallbacks: config ``last_number``, on by default). A span that is an equation stating
no value (``$m+n=29$``) is graded by the last number instead. Modes ``strict-match`` and
``flexible-extract`` reproduce lm-evaluation-harness's two GSM8K filters and its
exact_match scoring exactly, for numbers comparable with published lm_eval results. Mode
``allenai`` scores each record by AllenAI's reference rule for it (open-instruct's GSM8K
last-number rule, its MATH or strict-MATH rule; the record's ``reference_verifier``, which
``rlvr-data allenai`` writes, else MATH), to reproduce AllenAI's rewards
(rlvr.verifiers.allenai_rules).

Comparison, cheapest first: the normalised strings (thousands separators, ``$``, units
and ``\\text{}``, ``\\dfrac``/``\\tfrac``, degrees, percent, trailing ``.0``, ``x =``, one
layout for LaTeX environments such as ``\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}``), then
exact rational arithmetic on numeric answers (``2+3``, ``\\frac{14}{3}``, ``1.5``, powers
with a size guard; a decimal agrees to its last written place), and only then math-verify's
symbolic comparison (sympy), never for an answer that would have sympy build a huge value
(``too_big_for_sympy``). The common
cases never import sympy's machinery. Known math-verify false positives are avoided:
floats that agree to 6 decimals but differ (``0.0000672`` vs ``0.0000673``), an equation
that collapses to its right-hand side (``x^2-4=0`` graded equal to ``0``), and a negated or
one-sided answer read as its value (``\\ne 7``, ``\\geq 7`` graded equal to ``7``).
math-verify's own SIGALRM timeouts are switched off: the pool (rlvr.verification.pool) runs
this module in killable worker processes and enforces the wall-clock timeout.

Config keys: ``mode`` (default | strict-match | flexible-extract), ``last_number``
(bool, default true), ``max_symbolic_chars`` (longer answers are never handed to sympy and
grade as wrong unless equal as strings or numbers; default 1000).
"""

from __future__ import annotations

import logging
import math
import re
from decimal import Decimal
from fractions import Fraction
from functools import lru_cache

from rlvr.textutil import last_boxed

NAME = "math"
VERSION = "2"
TIMEOUT_S = 3.0

MODES = ("default", "strict-match", "flexible-extract", "allenai")
_CONFIG_KEYS = {"mode", "last_number", "max_symbolic_chars"}

# Relative tolerance when a decimal literal takes part (1/3 = 0.333333, 0.0000672 != 0.0000673).
REL_TOL = Fraction(1, 10**6)
# Numbers with more digits than this are never built (9^{9^{9^9}} is refused, not computed).
MAX_DIGITS = 100_000


# --------------------------------------------------------------------------- config


def check_config(config: dict) -> None:
    """Raise ValueError for an unknown key or a bad value (called once, before any work)."""
    unknown = set(config) - _CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown math option(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(_CONFIG_KEYS))})")
    mode = config.get("mode", "default")
    if mode not in MODES:
        raise ValueError(f"math.mode must be one of {', '.join(MODES)}, got {mode!r}")
    if not isinstance(config.get("last_number", True), bool):
        raise ValueError("math.last_number must be true or false")
    m = config.get("max_symbolic_chars", 1000)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError("math.max_symbolic_chars must be a positive integer")


# --------------------------------------------------------------------------- extraction

_ANSWER_IS = re.compile(r"(?i)\banswer\s*(?:is\b|:)\s*:?\s*")
_HOPE = re.compile(r"(?i)\.?\s*I hope it is correct")
_NUMBER = re.compile(r"-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|-?\.\d+")


def _delimited(s: str) -> str:
    """The leading math span of s ($...$, \\(...\\), \\[...\\]) or its first sentence."""
    s = s.lstrip()
    for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
        if s.startswith(open_):
            end = _inline_math_end(s, 0) - 1 if open_ == "$" else s.find(close, len(open_))
            if end > 0:
                return s[len(open_):end]
            break
    line = first_sentence(s)
    m = _HOPE.search(line)
    if m:
        line = line[: m.start()]
    return line.strip().rstrip(".").strip()


# Words whose period does not end a sentence ("approx. 3.5", "e.g. 4").
# Only words that never end an answer: "no", "sec" or "etc." may, so they end the sentence.
_ABBREVIATIONS = frozenset({"approx", "ca", "cf", "e.g", "i.e", "vs", "resp", "dr", "mr", "mrs", "ms", "fig", "eq",
                            "eqn"})
_ENV = re.compile(r"\\(begin|end)\s*\{")


def first_sentence(s: str) -> str:
    """s up to the end of its first sentence: a period, "!" or "?" followed by a space or the
    end of the text, outside math ($...$, \\(...\\), \\[...\\], a LaTeX environment), braces,
    brackets and parentheses, and not after an abbreviation; or up to the end of the line,
    whichever comes first (a line break inside $$...$$ or an environment does not end it).
    A decimal point (3.5) is followed by a digit, so it never ends a sentence; a $ that
    opens no math span on its line is a currency sign."""
    depth = env = 0
    i, n = 0, len(s)
    while i < n:
        c = s[i]
        if c == "\\":
            m = _ENV.match(s, i)
            if m:
                env += 1 if m.group(1) == "begin" else -1 if env else 0
                i = m.end() - 1        # the "{" opens a group, counted below
                continue
            m = _COMMAND.match(s, i)
            if m:                      # a command; \left. and \right. carry their "." along
                i = m.end() + (m.group(1) in _SIZED and s.startswith(".", m.end()))
                continue
            nxt = s[i + 1:i + 2]
            if nxt in ("(", "["):
                depth += 1
            elif nxt in (")", "]"):
                depth = max(0, depth - 1)
            i += 2                     # \\, \{, \$, \. ...
            continue
        if c == "$":
            end = _inline_math_end(s, i)
            if end > i:                # $...$ / $$...$$ is skipped whole; a lone $ is currency
                i = end
                continue
        if c in "{([":
            depth += 1
        elif c in "})]":
            depth = max(0, depth - 1)
        elif c == "\n" and not env:
            return s[:i].strip()
        elif c in ".!?" and not (env or depth) and (i + 1 == n or s[i + 1].isspace()):
            word = re.search(r"[A-Za-z.]*$", s[:i]).group(0).strip(".").lower()
            if c != "." or word not in _ABBREVIATIONS:
                return s[:i].strip()
        i += 1
    return s.strip()


_COMMAND = re.compile(r"\\([A-Za-z]+)")
_SIZED = frozenset({"left", "right", "bigl", "bigr", "Bigl", "Bigr", "biggl", "biggr", "big", "Big", "bigg", "Bigg"})
_SENTENCE_END = re.compile(r"[.!?]\s")


def _inline_math_end(s: str, i: int) -> int:
    """For s[i] == "$": the index after the math span it opens, or i when it opens none.
    $$...$$ may span lines; $...$ must close on the same line with no sentence end inside
    ("$18. So we had $5." is currency, not math)."""
    if s.startswith("$$", i):
        j = s.find("$$", i + 2)
        return j + 2 if j > i + 2 else i
    j = s.find("$", i + 1)
    inner = s[i + 1:j] if j > i + 1 else ""
    if not inner or "\n" in inner or _SENTENCE_END.search(inner):
        return i
    return j + 1


_MD_WRAP = ("**", "__", "*", "_", "`")


def _demarkdown(s: str) -> str:
    """An answer without the markdown emphasis chat models put around it (**5**, `5`, *5*),
    and without a bold marker left over from the sentence (**The answer is 5** -> 5)."""
    for _ in range(4):
        t = s.strip()
        for w in _MD_WRAP:
            if len(t) > 2 * len(w) and t.startswith(w) and t.endswith(w):
                t = t[len(w):-len(w)]
                break
        else:
            if t.endswith("**") and "**" not in t[:-2]:
                t = t[:-2]
            elif t.startswith("**") and "**" not in t[2:]:
                t = t[2:]
        if t.strip() == s.strip():
            return t.strip()
        s = t
    return s.strip()


def extract_answer(text: str, last_number: bool = True) -> tuple[str | None, str | None]:
    """(answer, how) for the default mode; (None, None) when nothing is found."""
    ans, how = _extract(text, last_number)
    if ans is not None and how != "last_number":
        ans = _demarkdown(ans) or None
        if ans is None:
            return None, None
    return ans, how


def _extract(text: str, last_number: bool) -> tuple[str | None, str | None]:
    boxed = last_boxed(text)
    if boxed is not None and boxed.strip():
        return boxed.strip(), "boxed"
    cands = []
    m = None
    for m in _ANSWER_IS.finditer(text):
        pass
    if m is not None:
        ans = _delimited(text[m.end():])
        if ans:
            cands.append((m.start(), ans, "answer_is"))
    k = text.rfind("####")
    if k >= 0:
        ans = text[k + 4:].strip().split("\n", 1)[0].strip()
        if ans:
            cands.append((k, ans, "hashes"))
    if cands:
        _, ans, how = max(cands)
        return ans, how
    if last_number:
        m = _last_number(text)
        span = _last_math(text)
        # the last math span, unless a number in the prose after it ends the text
        if span is not None and (m is None or m.end() <= span[1]):
            # after the last arrow: "... \\Rightarrow \\frac{1000}{-8} = -125" states -125
            lhs, eq, rhs = _ARROW.split(span[2])[-1].partition("=")
            if eq and _TEXT.search(lhs) and not re.search(r"[A-Za-z]", _TEXT.sub("", lhs)):
                return rhs.strip(), "last_math"   # \\text{Total} = 5 \\times 3 = 15: a label, not a variable
            return (lhs + eq + rhs).strip(), "last_math"
        if m is not None:
            return m.group(0), "last_number"
    return None, None


def _last_number(text: str) -> re.Match | None:
    """The last plain number of a text (``1,234``, ``-0.5``, ``.5``), or None."""
    m = None
    for m in _NUMBER.finditer(text):
        pass
    return m


_DISPLAY_ENV = re.compile(r"\\begin\{(align\*?|aligned|equation\*?|gather\*?|gathered|eqnarray\*?|displaymath)\}")


def math_spans(text: str) -> list[tuple[int, int, str]]:
    """The math spans of a text, [(start, end, inner)]: ``$$...$$``, ``\\[...\\]``,
    ``\\(...\\)``, display environments (``\\begin{align*}...\\end{align*}``, equation,
    gather) and ``$...$``. A ``$`` opens inline math only as Pandoc reads it: a non-space
    right after it, and its closing ``$`` (the next one, on the same line) has a non-space
    before it and no digit after it; so ``$5 and $6`` and ``$5+$6`` are currency. ``\\$`` is
    a dollar sign. Linear in the text (a closer found missing is not looked for again)."""
    out, i, n = [], 0, len(text)
    missing: set[str] = set()

    def closer(close: str, at: int) -> int:
        j = -1 if close in missing else text.find(close, at)
        if j < 0:
            missing.add(close)
        return j

    while i < n:
        c = text[i]
        if c == "\\":
            nxt = text[i + 1:i + 2]
            m = _DISPLAY_ENV.match(text, i) if nxt == "b" else None
            close, skip = ({"(": "\\)", "[": "\\]"}.get(nxt), 2) if m is None else (f"\\end{{{m.group(1)}}}", m.end() - i)
            j = closer(close, i + skip) if close else -1
            if j >= 0:
                out.append((i, j + len(close), text[i + skip:j]))
                i = j + len(close)
            else:
                i += 2
            continue
        if c == "$":
            if text.startswith("$$", i):
                j = closer("$$", i + 2)
                if j < 0:
                    break
                out.append((i, j + 2, text[i + 2:j]))
                i = j + 2
                continue
            j = text.find("$", i + 1)
            if (j > i + 1 and not text[i + 1].isspace() and not text[j - 1].isspace() and text[j - 1] != "\\"
                    and not text[j + 1:j + 2].isdigit() and "\n" not in text[i:j]):
                out.append((i, j + 1, text[i + 1:j]))
                i = j + 1
                continue
        i += 1
    return out


_ROWS_ENV = re.compile(r"\\(?:begin|end)\{(?:align\*?|aligned|gather\*?|gathered|eqnarray\*?|split)\}")
_MATRIX = re.compile(r"\\begin\{(?:[pbvBV]?matrix|array|cases)\}")


def _last_row(inner: str) -> str:
    """Of a multi-line derivation (align, aligned, gather; rows split by ``\\\\``), the last
    row without its ``&``; anything else (a matrix among them) as it is."""
    if not (_ROWS_ENV.search(inner) or "&=" in inner.replace(" ", "")) or _MATRIX.search(inner):
        return inner
    rows = [r for r in re.split(r"\\\\(?:\[[^\]]*\])?", _ROWS_ENV.sub(" ", inner)) if r.strip()]
    return rows[-1].replace("&", "").strip().lstrip("=").strip() if rows else inner


_MAX_SPAN = 10_000  # a longer span or line is no answer (and is never normalised)
_ARROW = re.compile(r"\\(?:Rightarrow|Longrightarrow|implies|therefore)(?![a-zA-Z])")
_LONE_SYMBOL = re.compile(r"^\s*[A-Za-z](?:_\{?[A-Za-z0-9]+\}?)?\s*[.,;:]?\s*$")   # $n$, $x_1$: a name, not an answer
_PROSE = re.compile(r"[A-Za-z]{2,}\s+[A-Za-z]{2,}|[A-Za-z]{4,}")
_LATEX_CMD = re.compile(r"\\[A-Za-z]+")


def _one_expression(line: str) -> bool:
    """Whether a line is one LaTeX expression: a LaTeX command and no words outside
    commands and their \\text{} groups (``\\frac{3}{4}``, ``x = \\sqrt{2}``, not ``so it is \\sqrt{2}``)."""
    if not _LATEX_CMD.search(line) or "$" in line:
        return False
    bare = _LATEX_CMD.sub(" ", _TEXT.sub(" ", line))
    return not _PROSE.search(bare)


def _last_math(text: str) -> tuple[int, int, str] | None:
    """The last math span that can be an answer (not empty, not a lone name such as ``$n$``),
    or the last line when it is one LaTeX expression and comes later: (start, end, inner)."""
    best = None
    for start, end, inner in math_spans(text):
        inner = _last_row(inner).strip() if end - start <= _MAX_SPAN else ""
        if inner and not _LONE_SYMBOL.match(inner):
            best = (start, end, inner)
    body = text.rstrip()
    start = body.rfind("\n") + 1
    line = body[start:].strip().rstrip(".").strip()
    if line and len(line) <= _MAX_SPAN and (best is None or start >= best[1]) and _one_expression(line):
        best = (start, len(body), line)
    return best


def gold_answer(raw) -> str:
    """The gold answer of a record as a string: a number, a string, a GSM8K solution
    ending in ``#### N`` or a MATH solution with a ``\\boxed{}``."""
    if isinstance(raw, bool):
        raise ValueError("answer must be a number or a string, got a boolean")
    if isinstance(raw, int):
        return str(raw)
    if isinstance(raw, float):
        if not math.isfinite(raw):
            raise ValueError(f"answer is not finite: {raw}")
        return str(int(raw)) if raw.is_integer() else repr(raw)
    if not isinstance(raw, str):
        raise ValueError(f"answer must be a number or a string, got {type(raw).__name__}")
    if "####" in raw:
        return raw.rsplit("####", 1)[1].strip()
    if "\\boxed" in raw or "\\fbox" in raw:
        b = last_boxed(raw)
        if b is not None:
            return b.strip()
    return raw.strip()


# --------------------------------------------------------------------------- lm_eval modes

_LM_STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
_LM_FLEX = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
_LM_IGNORE = [re.compile(","), re.compile(r"\$"), re.compile(r"(?s).*#### "), re.compile(r"\.$")]


def _lm_clean(s: str) -> str:
    for rx in _LM_IGNORE:
        s = rx.sub("", s)
    return s.lower()


def _lm_eval(gold_raw, completion: str, mode: str) -> dict:
    if mode == "strict-match":
        found = _LM_STRICT.findall(completion)
        pred = found[0].strip() if found else None
    else:
        found = _LM_FLEX.findall(completion)
        pred = None
        if found:
            groups = [g for g in found[-1] if g]
            pred = groups[0].strip() if groups else None
    if pred is None:
        return {"status": "no_answer", "extracted": None}
    gold = gold_raw if isinstance(gold_raw, str) else gold_answer(gold_raw)
    ok = _lm_clean(pred) == _lm_clean(gold)
    return {"status": "correct" if ok else "wrong", "extracted": pred, "method": "lm_eval_exact_match"}


# --------------------------------------------------------------------------- normalisation

_WRAPPERS = re.compile(r"\\(?:displaystyle|textstyle|scriptstyle|left|right|bigl|bigr|Bigl|Bigr|bigg|Bigg|big|Big)(?![a-zA-Z])")
_DEGREES = re.compile(r"\^\s*\{?\s*\\circ\s*\}?|\\degree(?![a-zA-Z])|°|\\circ(?![a-zA-Z])")
_TEXT_CMD = r"\\(?:text|textrm|textnormal|textbf|textit|mbox|mathrm|mathbf|mathit|mathsf|operatorname)\s*"
# words after a number that make it no plain quantity: "7 or 8", "7 is wrong", "7 not 8"
_NOT_UNIT_WORDS = r"(?i:\b(?:and|or|nor|not|no|never|but|is|isn|are|was|were|wrong|incorrect|false)\b)"
_NOT_UNIT = re.compile(_NOT_UNIT_WORDS)
# (a unit has no digit and none of those words: \\text{ (or 8)} is a second answer, not a unit)
_TRAILING_TEXT_UNIT = re.compile(r"^(.*?[\d}\)\]a-zA-Z])\s*" + _TEXT_CMD
                                 + r"\{(?![^{}]*" + _NOT_UNIT_WORDS + r")[^{}\d]*\}(?:\s*\^\s*\{?\d\}?)?\s*$")
_TEXT = re.compile(_TEXT_CMD + r"\{([^{}]*)\}")
# (number patterns below are written so that no two quantifiers compete for the same digits:
# a regex that can split a digit run many ways is quadratic on 50k digits)
_NUM = r"-?(?:\d[\d,]*(?:\.\d+)?|\.\d+)"
_UNIT_WORDS = re.compile(r"^(" + _NUM + r"(?:/\d+)?)\s+([a-zA-Z][a-zA-Z .\-/²³^]*)$")
_GLUED_UNIT = re.compile(  # a measurement unit written without a space: 5cm, 60mph, 10m^2
    r"^(" + _NUM + r")(?:mm|cm|km|m|kg|mg|g|lbs?|oz|ft|in|mi|yds?|mph|kmh|kmph|hrs?|h|min|mins|secs?|s|ml|l|cc|gal)"
    r"(?:\^\{?[23]\}?|[²³])?$")
_THOUSANDS = re.compile(r"(?<![\d.])(\d{1,3}(?:,\d{3})+)(?!\d|,\d)")
_VAR_PREFIX = re.compile(r"^\s*(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?[a-zA-Z0-9]+\}?)?\s*=\s*")
_FRAC_FIX = [
    (re.compile(r"\\frac\s*(\d)\s*(\d)"), r"\\frac{\1}{\2}"),
    (re.compile(r"\\frac\s*(\d)\s*\{"), r"\\frac{\1}{"),
    (re.compile(r"\\frac\s*(\{[^{}]*\})\s*(\d)"), r"\\frac\1{\2}"),
    (re.compile(r"\\sqrt\s*(\d+|[a-zA-Z])"), r"\\sqrt{\1}"),
]
_TRAIL_ZEROS = re.compile(r"^(-?\d+)\.(\d*[1-9])?0+$")


# A spacing command (\\! \\  \\; \\: \\,), matched after any "\\\\" so that a row break followed
# by a space or a comma is never read as one.
_SPACING = re.compile(r"\\\\|\\([! ;:,])")
_SPACE_CMDS = {"!": "", " ": " ", ";": " ", ":": " "}
_MATRIX_ENVS = re.compile(r"\\(begin|end)\{(?:pmatrix|bmatrix|matrix)\}")


def _environments(s: str) -> str:
    """One spelling of LaTeX environments (matrices, vectors, arrays): no spaces around
    cell and row separators or inside the \\begin/\\end markers, no row break before
    \\end, no skip after a row break (\\\\[2pt]), and \\begin{bmatrix} / \\begin{matrix}
    written \\begin{pmatrix} (math-verify reads all three as the same matrix; vmatrix, a
    determinant, is left as it is). Whether entries are equal is math-verify's to say."""
    s = re.sub(r"\\(begin|end)\s*\{\s*([a-zA-Z*]+)\s*\}", r"\\\1{\2}", s)
    s = re.sub(r"\\\\\[\s*-?[\d.]+\s*[a-z]{2}\s*\]", r"\\\\", s)       # \\[2pt]: a row break with a skip
    s = re.sub(r"\s*(&|\\\\|\\hline)\s*", r"\1", s)
    s = re.sub(r"(\\begin\{[a-zA-Z*]+\}(?:\{[^{}]*\})?)\s*", r"\1", s)
    s = re.sub(r"(?:\\\\|\\hline|\s)*(\\end\{)", r"\1", s)
    return _MATRIX_ENVS.sub(r"\\\1{pmatrix}", s)


def _strip_delims(s: str) -> str:
    s = s.strip()
    changed = True
    while changed and s:
        changed = False
        for open_, close in (("$$", "$$"), ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]")):
            if len(s) >= len(open_) + len(close) and s.startswith(open_) and s.endswith(close):
                s = s[len(open_):-len(close)].strip()
                changed = True
    return s


def _strip_outer_braces(s: str) -> str:
    while len(s) >= 2 and s[0] == "{" and s[-1] == "}":
        depth = 0
        for i, ch in enumerate(s):
            depth += ch == "{"
            depth -= ch == "}"
            if depth == 0 and i < len(s) - 1:
                return s
        s = s[1:-1].strip()
    return s


_SCI = re.compile(r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)[eE][-+]?\d{1,3}")


def normalize(s: str) -> str:
    """A canonical spelling of an answer (spaces kept where LaTeX needs them)."""
    s = _strip_delims(s.replace("\n", " "))
    s = _WRAPPERS.sub("", s)
    s = _SPACING.sub(lambda m: _SPACE_CMDS.get(m.group(1), m.group(0)), s)   # \\ and \, stay for now
    s = re.sub(r"(\d)\s*(?<!\\)\\,\s*(\d{3})(?!\d)", r"\1\2", s)      # 1\,000 -> 1000
    s = _SPACING.sub(lambda m: " " if m.group(1) == "," else m.group(0), s)
    if "\\begin" in s:
        s = _environments(s)
    s = s.replace("{,}", "").replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    s = _DEGREES.sub("", s)
    s = s.replace("\\%", "").replace("%", "").replace("\\$", "").replace("$", "")
    for _ in range(3):  # a trailing \text{ unit } after a value is a unit: drop it
        m = _TRAILING_TEXT_UNIT.match(s)
        if not m or not m.group(1).strip():
            break
        s = m.group(1)
    for _ in range(3):
        s2 = _TEXT.sub(r"\1", s)
        if s2 == s:
            break
        s = s2
    s = " ".join(s.split())
    m = _UNIT_WORDS.match(s) or _GLUED_UNIT.match(s)
    if m and not (m.re is _UNIT_WORDS and _NOT_UNIT.search(m.group(2))):
        s = m.group(1)
    for rx, rep in _FRAC_FIX:
        s = rx.sub(rep, s)
    s = _THOUSANDS.sub(lambda m: m.group(1).replace(",", ""), s)
    s = s.strip().rstrip(".").strip()
    if s.count("=") == 1 and not re.search(r"[<>]=|\\[lgn]e", s):
        m = _VAR_PREFIX.match(s)
        if m and m.end() < len(s):
            s = s[m.end():]
    s = _strip_outer_braces(s.strip())
    m = _SCI.fullmatch(s) if len(s) <= 64 and ("e" in s or "E" in s) else None
    if m:  # 1.5e3 -> 1500, exactly (the exponent is bounded, so no huge expansions)
        s = format(Decimal(m.group(0)), "f")
    m = _TRAIL_ZEROS.match(s)
    if m:
        s = m.group(1) + ("." + m.group(2) if m.group(2) else "")
    if s.startswith("+") and len(s) > 1:
        s = s[1:]
    return s


def _key(s: str) -> str:
    k = s.replace(" ", "")
    return k.lower() if k.isalpha() and len(k) > 1 else k


# --------------------------------------------------------------------------- exact arithmetic


class _Huge(Exception):
    """A value too large to build (more than MAX_DIGITS digits)."""


class _NotNumeric(Exception):
    pass


_TOK = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\\frac|\\cdot|\\times|\\div|[-+*/^(){}])")


def _tokens(s: str) -> list[str]:
    out, i = [], 0
    s = s.strip()
    while i < len(s):
        m = _TOK.match(s, i)
        if not m:
            raise _NotNumeric
        out.append(m.group(1))
        i = m.end()
        while i < len(s) and s[i] == " ":
            i += 1
    return out


def _digits(x: Fraction) -> float:
    n = max(abs(x.numerator), abs(x.denominator), 1)
    return n.bit_length() * 0.30103


class _Cursor:
    """Token cursor and the sum level shared by the exact and the approximate parsers;
    subclasses set self.t, self.i and define term()."""

    def peek(self):
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self, tok=None):
        cur = self.peek()
        if cur is None or (tok is not None and cur != tok):
            raise _NotNumeric
        self.i += 1
        return cur

    def parse(self):
        v = self.expr()
        if self.i != len(self.t):
            raise _NotNumeric
        return v

    def expr(self):
        v = self.term()
        while self.peek() in ("+", "-"):
            op = self.take()
            w = self.term()
            v = v + w if op == "+" else v - w
        return v


class _Arith(_Cursor):
    """Exact value of + - * / ^ \\frac \\cdot \\times \\div ( ) { } over number literals.

    Anything else (letters, implicit products, \\sqrt) raises _NotNumeric so the caller
    falls back to sympy. ``places`` is the fewest decimal places of the decimal literals
    that took part (``1.50`` has 2), None when none did (the value is exact).
    """

    def __init__(self, s: str):
        self.t = _tokens(s)
        self.i = 0
        self.places: int | None = None
        self.depth = 0

    def term(self) -> Fraction:
        v = self.unary()
        while self.peek() in ("*", "/", "\\cdot", "\\times", "\\div"):
            op = self.take()
            w = self.unary()
            if op in ("/", "\\div"):
                if w == 0:
                    raise _NotNumeric
                v = v / w
            else:
                v = v * w
            if _digits(v) > MAX_DIGITS:
                raise _Huge
        return v

    def unary(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary()
        if self.peek() == "+":
            self.take()
            return self.unary()
        return self.power()

    def power(self) -> Fraction:
        base = self.atom()
        if self.peek() == "^":
            self.take()
            exp = self.unary_atom()
            if exp.denominator != 1:
                raise _NotNumeric
            e = exp.numerator
            if base == 0 or abs(base) == 1:
                if base == 0 and e < 0:
                    raise _NotNumeric
                return base**e
            if abs(e).bit_length() > 40 or abs(e) * _digits(base) > MAX_DIGITS:
                raise _Huge  # (an exponent past 2^40 would overflow the float product)
            return base**e
        return base

    def unary_atom(self) -> Fraction:
        if self.peek() == "-":
            self.take()
            return -self.unary_atom()
        return self.power()

    def atom(self) -> Fraction:
        tok = self.take()
        if tok in ("(", "{"):
            self.depth += 1
            if self.depth > 100:
                raise _NotNumeric
            v = self.expr()
            self.take(")" if tok == "(" else "}")
            self.depth -= 1
            return v
        if tok == "\\frac":
            num = self.group()
            den = self.group()
            if den == 0:
                raise _NotNumeric
            return num / den
        if tok[0].isdigit() or tok[0] == ".":
            if "." in tok:
                k = len(tok) - tok.index(".") - 1
                self.places = k if self.places is None else min(self.places, k)
            return Fraction(tok)
        raise _NotNumeric

    def group(self) -> Fraction:
        if self.peek() == "{":
            return self.atom()
        tok = self.take()
        if tok.isdigit():
            return Fraction(tok)
        raise _NotNumeric


def numeric_value(s: str) -> tuple[Fraction, int | None] | None:
    """(exact value, decimal places) of a numeric answer, places None when no decimal
    literal took part (see _Arith); None if not purely numeric.

    Raises _Huge for values beyond MAX_DIGITS digits."""
    if not s or len(s) > 20_000 or not any(c.isdigit() for c in s):
        return None
    try:
        a = _Arith(s)
        return a.parse(), a.places
    except (_NotNumeric, ZeroDivisionError, RecursionError, ValueError, OverflowError):
        return None


def _numbers_equal(g: Fraction, g_places: int | None, p: Fraction, p_places: int | None) -> bool:
    """Exact values must be equal; where a decimal takes part, the two may differ by
    REL_TOL relative and by less than one unit in the decimal's last written place (the
    gold's, when the gold is a decimal): 0.666667 and 0.666666 are 2/3, but 7.000001 is
    not 7, nor 1234568.0 1234567."""
    if g == p:
        return True
    places = g_places if g_places is not None else p_places
    if places is None:
        return False
    diff = abs(g - p)
    return diff <= REL_TOL * max(abs(g), abs(p)) and diff < Fraction(1, 10**min(places, MAX_DIGITS))


# --------------------------------------------------------------------------- fast negative check

_ATOK = re.compile(r"\s*(\d+\.\d*|\.\d+|\d+|\\frac|\\sqrt|\\pi(?![a-zA-Z])|\\infty|\\cdot|\\times|\\div|\\\{|\\\}|[a-zA-Z]|[-+*/^()\[\]{},])")
_REFUSED_LETTERS = set("eEiIdDfgh")  # Euler's e, the imaginary unit, d in dx, function names


class _Approx(_Cursor):
    """Float value of a LaTeX expression in numbers, single-letter variables (bound to
    fixed values), \\pi, \\sqrt, \\frac, + - * / ^ and implicit products. Raises
    _NotNumeric for anything it is not sure to read as sympy would."""

    def __init__(self, toks: list[str]):
        self.t, self.i, self.depth = toks, 0, 0

    def term(self) -> float:
        v = self.signed()
        divided = implicit = False
        while True:
            tok = self.peek()
            if tok in ("*", "/", "\\cdot", "\\times", "\\div"):
                self.take()
                w = self.signed()
                if tok in ("/", "\\div"):
                    divided = True
                    v = v / w
                else:
                    v = v * w
            elif tok is not None and (tok in ("(", "\\pi", "\\sqrt", "\\frac") or (tok.isalpha() and len(tok) == 1)):
                if tok == "\\frac" and self.i > 0 and self.t[self.i - 1][0].isdigit():
                    raise _NotNumeric  # 2\frac{1}{2}: a mixed number (5/2) or a product? sympy decides
                implicit = True
                v = v * self.power()
            else:
                break
            if divided and implicit:
                raise _NotNumeric  # a/bc: grouping is ambiguous
        return v

    def signed(self) -> float:
        if self.peek() == "-":
            self.take()
            return -self.signed()
        if self.peek() == "+":
            self.take()
            return self.signed()
        return self.power()

    def power(self) -> float:
        base = self.atom()
        if self.peek() == "^":
            self.take()
            if self.peek() == "{":
                exp = self.atom()
            else:
                tok = self.take()
                if tok.isdigit() and len(tok) == 1:
                    exp = float(tok)
                elif tok.isalpha() and len(tok) == 1 and tok not in _REFUSED_LETTERS:
                    exp = _var(tok)
                else:
                    raise _NotNumeric
            if self.peek() == "^":
                raise _NotNumeric
            if base < 0 and exp != int(exp):
                raise _NotNumeric
            return base**exp
        return base

    def atom(self) -> float:
        tok = self.take()
        if tok in ("(", "{", "["):
            self.depth += 1
            if self.depth > 50:
                raise _NotNumeric
            v = self.expr()
            self.take({"(": ")", "{": "}", "[": "]"}[tok])
            self.depth -= 1
            return v
        if tok == "\\frac":
            return self.group() / self.group()
        if tok == "\\sqrt":
            n = 2.0
            if self.peek() == "[":
                self.take()
                n = self.expr()
                self.take("]")
            x = self.group()
            if x < 0 or n <= 0:
                raise _NotNumeric
            return x ** (1.0 / n)
        if tok == "\\pi":
            return math.pi
        if tok[0].isdigit() or tok[0] == ".":
            if self.peek() is not None and (self.peek()[0].isdigit() or self.peek()[0] == "."):
                raise _NotNumeric
            return float(tok)
        if tok.isalpha() and len(tok) == 1 and tok not in _REFUSED_LETTERS:
            return _var(tok)
        raise _NotNumeric

    def group(self) -> float:
        if self.peek() == "{":
            return self.atom()
        tok = self.take()
        if tok.isdigit() and len(tok) == 1:
            return float(tok)
        if tok.isalpha() and len(tok) == 1 and tok not in _REFUSED_LETTERS:
            return _var(tok)
        raise _NotNumeric


def _var(name: str) -> float:
    # A fixed, "generic" value per variable: distinct expressions rarely agree at it.
    return 0.5 + ((ord(name) * 0.6180339887498949) % 1.0) * 1.7


def _split_top(toks: list[str]) -> list[list[str]]:
    """Split tokens at top-level commas; an outer bracket pair around a list is dropped."""
    opens, closes = {"(", "[", "{", "\\{"}, {")", "]", "}", "\\}"}
    depth, outer = 0, False
    for k, tok in enumerate(toks):
        depth += tok in opens
        depth -= tok in closes
        if depth == 0:
            outer = k == len(toks) - 1 and toks[0] in opens
            if k < len(toks) - 1:
                break
    inner = toks[1:-1] if outer and "," in toks else toks
    parts, cur, depth = [], [], 0
    for tok in inner:
        if tok == "," and depth == 0:
            parts.append(cur)
            cur = []
            continue
        depth += tok in opens
        depth -= tok in closes
        cur.append(tok)
    parts.append(cur)
    return parts


def _approx_values(s: str) -> list[float] | None:
    if len(s) > 2000:
        return None
    toks, i = [], 0
    while i < len(s):
        m = _ATOK.match(s, i)
        if not m:
            return None
        toks.append(m.group(1))
        i = m.end()
        while i < len(s) and s[i] == " ":
            i += 1
    if not toks:
        return None
    out = []
    for part in _split_top(toks):
        if part in (["\\infty"], ["+", "\\infty"]):
            out.append(math.inf)
            continue
        if part == ["-", "\\infty"]:
            out.append(-math.inf)
            continue
        try:
            v = _Approx(part).parse()
        except (_NotNumeric, ZeroDivisionError, OverflowError, ValueError, TypeError, RecursionError):
            return None
        if isinstance(v, complex) or not math.isfinite(v):
            return None
        out.append(v)
    return out


def _far(a: float, b: float) -> bool:
    if a == b:
        return False
    if math.isinf(a) or math.isinf(b):
        return True
    return abs(a - b) > 1e-6 * max(abs(a), abs(b), 1e-9)


def definitely_different(gold: str, pred: str) -> bool:
    """True when both answers evaluate (as numbers, lists or interval ends, variables at
    fixed values) to values that differ beyond rounding; False means "not known"."""
    if "=" in gold or "=" in pred:
        return False
    gw, pw = gold.replace(" ", ""), pred.replace(" ", "")
    if gw.isalpha() and pw.isalpha() and len(gw) > 1 and len(pw) > 1:
        return gw.lower() != pw.lower()  # two words (names, "yes"/"no")
    g, p = _approx_values(gold), _approx_values(pred)
    if g is None or p is None:
        return False
    if len(g) != len(p):
        return len(g) > 1 or len(p) > 1
    return any(_far(a, b) for a, b in zip(sorted(g), sorted(p)))


# --------------------------------------------------------------------------- symbolic (math-verify)

_log_quieted = False


def warmup() -> None:
    """Import math-verify and sympy once per worker and exercise the parser."""
    _symbolic_equal("\\frac{1}{2}", "\\sqrt{x}")


def _mv():
    global _log_quieted
    import math_verify

    if not _log_quieted:
        logging.getLogger("math_verify").setLevel(logging.ERROR)
        _log_quieted = True
    return math_verify


@lru_cache(maxsize=256)
def _parse_cached(latex: str):
    mv = _mv()
    cfg = (mv.LatexExtractionConfig(boxed_match_priority=0), mv.ExprExtractionConfig())
    return mv.parse("\\boxed{" + latex + "}", extraction_config=cfg, fallback_mode="no_fallback",
                    parsing_timeout=None)


def _is_close_number(a, b) -> bool | None:
    """For two numeric sympy values: whether they agree to REL_TOL (None if unknown)."""
    try:
        if not (getattr(a, "is_number", False) and getattr(b, "is_number", False)):
            return None
        if not (a.has(_sympy_float()) or b.has(_sympy_float())):
            return None
        x, y = complex(a.evalf(30)), complex(b.evalf(30))
    except Exception:  # noqa: BLE001 - sympy raises many kinds; unknown means "keep the verdict"
        return None
    scale = max(abs(x), abs(y))
    return abs(x - y) <= float(REL_TOL) * scale


def _sympy_float():
    import sympy

    return sympy.Float


def _symbolic_equal(gold: str, pred: str) -> bool:
    mv = _mv()
    g = _parse_cached(gold)
    p = _parse_cached(pred)
    if not g or not p:
        return False
    if not mv.verify(g, p, timeout_seconds=None):
        return False
    close = _is_close_number(g[0], p[0])
    return close is not False


# --------------------------------------------------------------------------- sympy size guard

# Beyond these, sympy may take minutes (or never return from C code) building a value:
# (2x+1)^{2024} expanded, \lceil 10^{10^{10}} \rceil, (10^{10})!, \Gamma(10^{10}).
SYMPY_MAX_DIGITS = 1000      # a number to a number: at most this many digits
SYMPY_MAX_EXPONENT = 1000    # anything else to a number: at most this power
SYMPY_MAX_TERMS = 200        # a sum to a power: at most this many terms once expanded
SYMPY_MAX_FACTORIAL = 1000   # n!, \Gamma(n): n at most this
SYMPY_MAX_BINOM = 100_000    # \binom{n}{k}: n at most this


def _group_end(s: str, i: int) -> int:
    """For s[i] an opening brace or parenthesis: the index after its match (len(s) if none)."""
    open_, close = s[i], {"{": "}", "(": ")", "[": "]"}[s[i]]
    depth = 0
    for j in range(i, len(s)):
        depth += s[j] == open_
        depth -= s[j] == close
        if depth == 0:
            return j + 1
    return len(s)


def _operand_after(s: str, i: int) -> str:
    while i < len(s) and s[i] == " ":
        i += 1
    if i >= len(s):
        return ""
    if s[i] in "{(":
        return s[i:_group_end(s, i)]
    m = re.compile(r"\d+|\\[A-Za-z]+|.").match(s, i)
    return m.group(0)


def _operand_before(s: str, i: int) -> str:
    """The operand ending just before s[i]: a digit run, a letter, or a (...)/{...} group."""
    j = i
    while j > 0 and s[j - 1] == " ":
        j -= 1
    if j == 0:
        return ""
    if s[j - 1] in "})":
        open_, close, depth = {"}": "{", ")": "("}[s[j - 1]], s[j - 1], 0
        for k in range(j - 1, -1, -1):
            depth += s[k] == close
            depth -= s[k] == open_
            if depth == 0:
                return s[k:j]
        return s[:j]
    m = re.search(r"(?:\d*\.\d+|\d+|.)$", s[:j])
    return m.group(0)


def _size(operand: str):
    """The value of a numeric operand; "huge" past MAX_DIGITS digits; None if not numeric."""
    v = _value_or_huge(operand)
    return v if v == "huge" or v is None else v[0]


def _expanded_terms(base: str, n: Fraction) -> int:
    """How many terms (base)^n has once expanded: C(n + t - 1, t - 1) for a base of t
    terms at its top level (1 for a base that is no sum, or n not a whole number)."""
    while base[:1] == "{" and base[-1:] == "}" and len(base) > 2 and base[1:2] in "({":
        base = base[1:-1]
    if n.denominator != 1 or base[:1] not in "({":
        return 1
    t, depth = 1, 0
    for k, ch in enumerate(base[1:-1]):
        depth += ch in "({["
        depth -= ch in ")}]"
        t += depth == 0 and ch in "+-" and k > 0
    return math.comb(int(n) + t - 1, t - 1) if t > 1 else 1


def _log10(x: Fraction) -> float:
    """|log10(x)| for x > 0, without converting x to a float (which may overflow)."""
    return abs(math.log10(x.numerator) - math.log10(x.denominator))


def too_big_for_sympy(s: str) -> bool:
    """Whether an answer asks sympy to build a value beyond the SYMPY_MAX_* bounds."""
    for m in re.finditer(r"\^|!|\\Gamma|\\[dt]?binom", s):
        tok = m.group(0)
        if tok == "^":
            e = _size(_operand_after(s, m.end()))
            if e is None:
                continue
            if e == "huge":
                return True
            base = _operand_before(s, m.start())
            b = _size(base)
            if b is None:
                if abs(e) > SYMPY_MAX_EXPONENT or _expanded_terms(base, abs(e)) > SYMPY_MAX_TERMS:
                    return True
            elif b == "huge" or (b != 0 and _log10(abs(b)) > 0
                                 and (abs(e) > 10**12 or float(abs(e)) * _log10(abs(b)) > SYMPY_MAX_DIGITS)):
                return True
        elif tok == "!":
            if m.start() > 0 and s[m.start() - 1] == "\\" or s.startswith("=", m.end()):
                continue       # \! (a spacing command), != (not equal)
            i = m.start()
            while i > 0 and s[i - 1] == "!":
                i -= 1
            if m.start() - i >= 2:
                return True    # 10!!!: a factorial of a factorial
            n = _operand_before(s, i)
            if "!" in n:
                return True    # (10!)!
            v = _size(n)
            if v == "huge" or (v is not None and abs(v) > SYMPY_MAX_FACTORIAL):
                return True
        else:
            v = _size(_operand_after(s, m.end()))
            bound = SYMPY_MAX_FACTORIAL if tok == "\\Gamma" else SYMPY_MAX_BINOM
            if v == "huge" or (v is not None and abs(v) > bound):
                return True
    return False


# --------------------------------------------------------------------------- comparison

# A name on the left of an equation: x, \\theta, a_1, f(2), \\tan A; geometry's \\angle ABC, m\\angle B,
# AB, \\overline{AB} and [ABC] (an area).
_NAME_LHS = re.compile(r"^\s*(?:(?:[a-zA-Z]|\\[a-zA-Z]+)(?:_\{?[a-zA-Z0-9]+\}?)?(?:\s*\([^()=]*\))?"
                       r"|\\(?:sin|cos|tan|cot|sec|csc|log|ln)\s*[A-Za-z]|(?:m\s*)?\\angle\s*[A-Z]{1,3}|[A-Z]{2}|\\overline\{[A-Z]{2}\}|\[[A-Z]{2,4}\])\s*$")
_RELATION = re.compile(r"<|>|\\le|\\ge|\\neq|\\ne(?![a-z])|\\lt|\\gt")
# Commands of arithmetic, constants and functions of numbers: a side written with these and
# numbers only has no unknown (\\frac{240}{60}, 9 \\times 7, \\binom{4}{2}, \\sqrt{2^{16}}).
_ARITH_CMD = re.compile(r"\\(?:frac|dfrac|tfrac|cdot|times|div|sqrt|binom|choose|pi|circ|pm|mp|lfloor|rfloor|lceil|rceil"
                        r"|log|ln|exp|sin|cos|tan|cot|sec|csc)(?![a-zA-Z])")


def _no_unknown(side: str) -> bool:
    return not re.search(r"[a-zA-Z]", _ARITH_CMD.sub("", side))


def _equation_rhs(pred: str, gold: str) -> str | None:
    """For a gold value and a predicted equation (or chain ``a = b = c``): the value it
    states, its last side, when its left side is a name (``x = 5``, ``\\angle ABC = 120``) or
    some side before the last has no unknown, so the chain is a computation (``\\frac{240}{60}
    = 4``, ``t(4) = 3 - 2 = 1``); else None, as ``x^2-4=0`` does not state ``0``."""
    if "=" not in pred or "=" in gold or _RELATION.search(pred) or "," in pred:
        return pred
    parts = pred.split("=")
    lhs, rhs = parts[0], parts[-1].strip()
    if not rhs or not _sides_agree(parts):
        return None
    if _NAME_LHS.match(lhs) or any(_no_unknown(side) for side in parts[:-1]):
        return rhs
    return None


def _sides_agree(parts: list[str]) -> bool:
    """Whether the numeric sides of an equation chain have one value (``8 = 7`` and
    ``1 = 2 = ... = 7`` state nothing); a decimal side agrees to its last written place
    (``\\frac{2}{3} = 0.6667``)."""
    values = []
    for side in parts:
        try:
            v = numeric_value(normalize(side))
        except _Huge:
            return False
        if v is not None:
            values.append(v)
    for (a, ap), (b, bp) in zip(values, values[1:]):
        places = [k for k in (ap, bp) if k is not None]
        if a != b and not (places and abs(a - b) < Fraction(1, 10**min(min(places), MAX_DIGITS))):
            return False
    return True


_BASE_NUM = re.compile(r"^([0-9A-Za-z]+)_\{?(\d{1,2})\}?$")


def _base_number(s: str) -> tuple[int, int, str] | None:
    """(value, base, digits) of a number written with a base subscript (``52_8``)."""
    m = _BASE_NUM.match(s.replace(" ", ""))
    if not m:
        return None
    digits, base = m.group(1), int(m.group(2))
    if not 2 <= base <= 36:
        return None
    try:
        return int(digits, base), base, digits
    except ValueError:
        return None


def _compare_bases(g: str, p: str) -> bool | None:
    """Base-subscript answers: same base and value; a bare numeral must match the gold's
    digits; a gold in base 10 compares by value. None when neither side uses a base.
    (math-verify drops the subscript, so it grades 52_8 equal to 52_9.)"""
    gb, pb = _base_number(g), _base_number(p)
    if gb is None and pb is None:
        return None
    if gb is not None and pb is not None:
        return gb[1] == pb[1] and gb[0] == pb[0]
    if gb is not None:
        return p.replace(" ", "").lstrip("0") == gb[2].lstrip("0")
    gv = _value_or_huge(g)
    return isinstance(gv, tuple) and gv[0] == pb[0]


def _value_or_huge(s: str):
    try:
        return numeric_value(s)
    except _Huge:
        return "huge"


# "not 7", "greater than 7": a negation anywhere, or a relation with nothing on its left
_NEGATION = re.compile(r"\\(?:neq?|neg|lnot|not|nless|ngtr|nleq|ngeq)(?![a-zA-Z])|[≠¬]")
_LEADING_RELATION = re.compile(r"^\s*(?:[<>≤≥]|\\(?:le|leq|ge|geq|lt|gt|leqslant|geqslant)(?![a-zA-Z]))")


def _negates(gold: str, pred: str) -> bool:
    """Whether the prediction negates or bounds a value where the gold states one
    (``\\ne 7``, ``\\not= 7``, ``> 7``, ``\\geq 7`` for gold 7; math-verify drops the relation)."""
    g, p = _strip_delims(gold), _strip_delims(pred)
    if _NEGATION.search(p) and not _NEGATION.search(g):
        return True
    return bool(_LEADING_RELATION.match(p)) and not (_LEADING_RELATION.match(g) or _RELATION.search(g))


def equivalent(gold: str, pred: str, max_symbolic_chars: int = 1000) -> tuple[bool, str]:
    """(equal, method) for two extracted answers; method names the deciding stage."""
    g, p = normalize(gold), normalize(pred)
    if not p:
        return False, "empty"
    if _negates(gold, pred):
        return False, "relation"
    if _key(g) == _key(p):
        return True, "string"
    p2 = _equation_rhs(p, g)
    if p2 is None:
        return False, "equation"
    if p2 is not p:
        p = p2
        if _key(g) == _key(p):
            return True, "string"
    base = _compare_bases(g, p)
    if base is not None:
        return base, "base"
    gv, pv = _value_or_huge(g), _value_or_huge(p)
    if gv == "huge" or pv == "huge":
        return False, "too_large"  # never handed to sympy, which would try to build it
    if gv is not None and pv is not None:
        return _numbers_equal(gv[0], gv[1], pv[0], pv[1]), "numeric"
    if definitely_different(g, p):
        return False, "approx"
    if len(p) > max_symbolic_chars or len(g) > max_symbolic_chars:
        return False, "too_long"
    if too_big_for_sympy(p) or too_big_for_sympy(g):
        return False, "too_large"
    return _symbolic_equal(g, p), "symbolic"


def check_record(record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record cannot be graded whatever the completion says."""
    if record.get("answer") is None:
        return "answer", "required field is missing"
    try:
        gold = gold_answer(record["answer"])
    except ValueError as e:
        return "answer", str(e)
    if not normalize(gold):
        return "answer", "is empty"
    return None


def _allenai(record: dict, completion: str) -> dict:
    from rlvr.verifiers import allenai_rules

    rule = record.get("reference_verifier") or "math"
    if rule not in allenai_rules.RULES:
        return {"status": "error", "extracted": None,
                "error": f"unknown reference_verifier {rule!r} (known: {', '.join(allenai_rules.RULES)})"}
    ok, got = allenai_rules.score(rule, completion, record["answer"])
    status = "correct" if ok else ("no_answer" if got is None else "wrong")
    return {"status": status, "extracted": None if got is None else got[:1000], "method": f"allenai-{rule}"}


def verify(record: dict, completion: str, config: dict) -> dict:
    """Grade one completion against record["answer"] (see the module docstring)."""
    if "answer" not in record or record["answer"] is None:
        return {"status": "error", "extracted": None, "error": "record has no answer (field answer)"}
    mode = config.get("mode", "default")
    if mode == "allenai":
        return _allenai(record, completion)
    if mode != "default":
        return _lm_eval(record["answer"], completion, mode)
    try:
        gold = gold_answer(record["answer"])
    except ValueError as e:
        return {"status": "error", "extracted": None, "error": f"{e} (field answer)"}
    pred, how = extract_answer(completion, config.get("last_number", True))
    if pred is None:
        return {"status": "no_answer", "extracted": None}
    ok, method = equivalent(gold, pred, config.get("max_symbolic_chars", 1000))
    if how == "last_math" and method == "equation":
        # an unmarked equation that states no value (m+n=29): graded by its last number, as
        # before the last-span rule; a marked one (\\boxed{x^2-4=0}) stays wrong
        num = _last_number(completion)
        if num is not None:
            pred, how = num.group(0), "last_number"
            ok, method = equivalent(gold, pred, config.get("max_symbolic_chars", 1000))
    return {"status": "correct" if ok else "wrong", "extracted": pred[:1000], "method": method, "source": how}
