"""Upstream checkers' backtracking regular expressions, evaluated in linear time.

Some IFEval and Tulu 3 checks count or find spans with regular expressions that take
time quadratic in the length of a crafted response: ``\\[.*?\\]`` on a line of a hundred
thousand ``[`` rescans the rest of the line from every ``[``; ``^\\s*\\*[^\\*].*$``
(MULTILINE) rescans a long run of blank lines from every line start in it. A policy that
stumbles on such text turns a millisecond check into a timeout. Each function here gives
the result of ``re.findall``/``re.search`` with the named pattern (the same matches, so
the same count or truth value) with one pass over the text. ``.`` and ``[^\\n]`` stop at
``\\n`` only and ``^`` (MULTILINE) matches after ``\\n`` only, as in ``re``; ``\\s`` is
``str.isspace``, as in ``re`` on str patterns. Tests compare each with the regex on
random and crafted texts.
"""

from __future__ import annotations

import re

_NON_SPACE = re.compile(r"\S")


def count_bracketed(text: str, left: str = "[", right: str = "]") -> int:
    """``len(re.findall(r"\\[.*?\\]", text))`` for one-character ``left``/``right``."""
    n = 0
    for line in text.split("\n"):
        pos = 0
        while True:
            i = line.find(left, pos)
            if i < 0:
                break
            j = line.find(right, i + 1)
            if j < 0:
                break  # no closing mark after this opening: none after any later one either
            n += 1
            pos = j + 1
    return n


def titles(text: str, min_inner: int = 1) -> list[str]:
    """``re.findall(r"<<[^\\n]+>>", text)`` (``min_inner=1``); ``min_inner=0`` gives the
    matches of ``<<[^\\n]*>>``, whose existence is that of ``<<(.*?)>>``.

    The greedy ``[^\\n]+`` makes each match run from the first ``<<`` of a line to the
    last ``>>`` of that line, so a line holds at most one.
    """
    out = []
    for line in text.split("\n"):
        i = line.find("<<")
        if i < 0:
            continue
        j = line.rfind(">>")
        if j >= i + 2 + min_inner:
            out.append(line[i:j + 2])
    return out


def count_marked_lines(text: str, mark: str) -> int:
    """``len(re.findall(r"^\\s*\\*[^\\*].*$", text, flags=re.MULTILINE))`` for
    ``mark="*"``, ``len(re.findall(r"^\\s*-.*$", text, flags=re.MULTILINE))`` for ``"-"``.

    ``\\s*`` crosses line ends, so a match starts at a line start, skips any blank text to
    the first non-space character, which must be the mark (``*`` followed by a character
    other than ``*``, a line end included), and ends at the end of that line (of the next
    one when the character after ``*`` is the line end). A failed line start skips to the
    line after that first non-space character: every line start in between reaches it too.
    """
    if mark not in ("*", "-"):
        raise ValueError(f"mark must be '*' or '-', got {mark!r}")
    n, size, pos = 0, len(text), 0
    while True:  # pos is a line start
        m = _NON_SPACE.search(text, pos)
        if m is None:
            return n
        p = m.start()
        if mark == "-":
            ok, rest = text[p] == "-", p + 1
        else:
            ok, rest = text[p] == "*" and p + 1 < size and text[p + 1] != "*", p + 2
        if ok:
            n += 1
            end = text.find("\n", rest)
        else:
            end = text.find("\n", p)
        if end < 0:
            return n
        pos = end + 1
