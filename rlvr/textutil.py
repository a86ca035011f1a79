"""Small text helpers shared by data loading and the verifiers (no heavy imports)."""

from __future__ import annotations

import re

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")


def last_boxed(text: str) -> str | None:
    """Content of the last \\boxed{...} or \\fbox{...} with nested braces; None if absent
    or unbalanced. Also accepts the brace-less form ``\\boxed 5``.

    Linear time: a box still open when the scan reaches the next (unbalanced) box can
    never close, so each scan stops there (100k unclosed ``\\boxed{`` cost one pass)."""
    if not text:
        return None
    starts = [m.end() for m in _BOXED.finditer(text)]
    limit = len(text)
    for start in reversed(starts):
        depth, i = 1, start
        while i < limit:
            ch = text[i]
            if ch == "\\" and i + 1 < len(text) and text[i + 1] in "{}":
                i += 2
                continue
            if ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
            i += 1
        limit = start
    m = None
    for m in re.finditer(r"\\boxed ([^\s$]+)", text):
        pass
    return m.group(1) if m else None


def gsm8k_gold(answer: str) -> str:
    """The number after '####' in a GSM8K solution, without thousands separators."""
    tail = answer.rsplit("####", 1)[-1].strip()
    return tail.replace(",", "").replace("$", "").strip()


def md_cell(text: str) -> str:
    """A markdown table cell: pipes escaped, line breaks folded (names come from user data)."""
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")
