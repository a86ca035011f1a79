"""Answer-only judging: a completion that reasons first is judged on its answer alone.

    split("<think>7 looks right</think>The answer is \\boxed{8}.")
    -> Split(closed=True, thinking="7 looks right", answer="The answer is \\boxed{8}.")
    split("<think>so the answer is \\boxed{7}")       -> Split(closed=False, thinking=..., answer=None)

One mechanism for every verifier: the verifier pool (rlvr.verification.pool) splits each
completion before any verifier sees it, so math, code and instruction following (and any
verifier added later) grade only the answer, and a completion whose thinking never closes
gets the status ``unfinished_thinking`` (its reward comes from the reward table, 0 by
default) without reaching a verifier: an answer written inside an unfinished thinking block
is never credited, nor silently graded wrong.

The rule for a record (``mode``; the record's ``thinking`` field, which ``rlvr-data
--thinking`` writes, or a stream-wide override such as ``rlvr-verify --thinking``):

- ``True``: the completion reasons first. The answer is the text after the last close
  marker; with no close marker the thinking never closed (``unfinished_thinking``), also
  when no open marker appears (templates such as DeepSeek-R1's open the block in the prompt).
- ``False``: the whole completion is the answer; markers mean nothing.
- ``None`` (no ``thinking`` field, no override): decided by the text. A close marker: the
  answer follows the last one; an open marker that never closes: ``unfinished_thinking``;
  no marker: the whole completion is the answer.

With ``True`` and ``None`` alike, a thinking block opened after the last close marker never
closed: the answer is the text before it (``unfinished_thinking`` when there is none), so a
second answer written in it (``</think>7<think>or 8``, ``</think><think>8``) is never judged.

The markers default to ``<think>`` and ``</think>`` (Qwen3, DeepSeek-R1, OLMo 3 Think) and
are configurable (``--think-markers OPEN CLOSE``, ``verify.think_markers``). A verdict of a
completion judged this way carries ``thinking``: ``closed``, ``thinking_chars`` and
``answer_chars`` (character counts), which rlvr-train's trace and rlvr-verify --summary
aggregate (``thinking_metrics``).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

UNFINISHED = "unfinished_thinking"
DEFAULT_MARKERS = ("<think>", "</think>")


@dataclass(frozen=True)
class Split:
    closed: bool
    thinking: str
    answer: str | None      # None: the thinking never closed

    def info(self) -> dict:
        """What a verdict records about the split."""
        return {"closed": self.closed, "thinking_chars": len(self.thinking),
                "answer_chars": len(self.answer) if self.answer is not None else 0}


def check_markers(markers: Sequence[str] | None) -> tuple[str, str]:
    """(open, close) from a pair of non-empty, different strings; ValueError otherwise."""
    if markers is None:
        return DEFAULT_MARKERS
    if isinstance(markers, str) or len(markers) != 2 or not all(isinstance(m, str) and m for m in markers):
        raise ValueError(f"think markers must be two non-empty strings (OPEN CLOSE), got {markers!r}")
    if markers[0] == markers[1]:
        raise ValueError(f"the open and close think markers must differ, got {markers[0]!r} twice")
    return markers[0], markers[1]


def record_mode(rec: dict, override: bool | None = None) -> bool | None:
    """The thinking mode of a record: the override when given, else its ``thinking`` field
    (true / false), else None (decided by the text)."""
    if override is not None:
        return override
    v = rec.get("thinking") if isinstance(rec, dict) else None
    return v if isinstance(v, bool) else None


def split(text: str, mode: bool | None = None, markers: Sequence[str] = DEFAULT_MARKERS) -> Split | None:
    """The completion as (thinking, answer) under `mode` (see the module docstring); None
    when the whole text is the answer and no thinking is involved."""
    if mode is False:
        return None
    open_, close = markers
    k = text.rfind(close)
    if k >= 0:
        before = text[:k]
        j = before.find(open_)
        thinking = before[j + len(open_):] if j >= 0 else before
        answer = text[k + len(close):]
        r = answer.find(open_)
        if r >= 0:  # a block opened after the last close never closed: its text is no answer
            thinking += answer[r + len(open_):]
            answer = answer[:r]
            if not answer.strip():
                return Split(False, thinking.strip(), None)
        return Split(True, thinking.strip(), answer)
    if mode is True or open_ in text:
        j = text.find(open_)
        return Split(False, (text[j + len(open_):] if j >= 0 else text).strip(), None)
    return None


class ThinkingStats:
    """Running aggregates over the verdicts that carry ``thinking`` (constant memory)."""

    __slots__ = ("n", "closed", "think_chars", "answer_chars")

    def __init__(self):
        self.n = self.closed = self.think_chars = self.answer_chars = 0

    def add(self, verdict) -> None:
        t = verdict.get("thinking") if isinstance(verdict, dict) else None
        if not isinstance(t, dict):
            return
        self.n += 1
        self.think_chars += int(t.get("thinking_chars") or 0)
        if t.get("closed"):
            self.closed += 1
            self.answer_chars += int(t.get("answer_chars") or 0)

    def result(self) -> dict[str, float]:
        """completions, closed_frac, mean_thinking_chars (all of them), mean_answer_chars
        (those that closed); empty when no verdict carried ``thinking``."""
        if not self.n:
            return {}
        return {"completions": self.n, "closed_frac": self.closed / self.n,
                "mean_thinking_chars": self.think_chars / self.n,
                "mean_answer_chars": self.answer_chars / self.closed if self.closed else 0.0}


def thinking_metrics(verdicts: Iterable[dict]) -> dict[str, float]:
    """The trace metrics of a step: thinking/completions, thinking/closed_frac,
    thinking/mean_thinking_chars, thinking/mean_answer_chars (empty when no verdict carries
    ``thinking``)."""
    st = ThinkingStats()
    for v in verdicts:
        st.add(v)
    return {f"thinking/{k}": float(v) for k, v in st.result().items()}
