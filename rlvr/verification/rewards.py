"""Status -> reward: the one place a verdict becomes a number.

    table = RewardTable.parse("no_answer=-0.1,wrong=0")     # overrides over the defaults
    table.reward({"status": "wrong"})                        # -> 0.0

The default table is binary: correct = 1, every other status (wrong, no_answer, timeout,
error, unfinished_thinking: reasoning that never closed, rlvr.verification.thinking;
judge_unparsable: an LLM judge's reply held no score, rlvr.verifiers.judge) = 0. A table is set inline (``correct=1,no_answer=-0.1``), from a YAML or JSON
file (a mapping status -> number, optionally under a ``reward_table`` key), or from a
dict (rlvr-train's ``verify.reward_table``); unnamed statuses keep their default.

Mode ``binary`` maps the status through the table. Mode ``fraction`` (open-instruct's
instruction-following and code rewards) uses a verdict's ``score`` (fraction of
instructions met; share of tests passed under ``code.mode: allenai``) where it has one: reward = table[wrong] + score * (table[correct] - table[wrong]), which is
the score itself with the default table; statuses timeout/error/no_answer/unfinished_thinking and verdicts
without a score still go through the table.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping

from rlvr.records import STATUSES

DEFAULT_TABLE: dict[str, float] = {"correct": 1.0, "wrong": 0.0, "no_answer": 0.0, "timeout": 0.0, "error": 0.0,
                                   "unfinished_thinking": 0.0, "judge_unparsable": 0.0}
MODES = ("binary", "fraction")


def _number(status: str, v) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        try:
            v = float(str(v).strip())
        except ValueError:
            raise ValueError(f"reward for {status!r} must be a number, got {v!r}") from None
    v = float(v)
    if not math.isfinite(v):
        raise ValueError(f"reward for {status!r} must be finite, got {v}")
    return v


def merge_table(overrides: Mapping | None) -> dict[str, float]:
    """The default table with overrides applied; unknown statuses are errors."""
    table = dict(DEFAULT_TABLE)
    for status, v in (overrides or {}).items():
        if status not in STATUSES:
            raise ValueError(f"unknown status {status!r} in the reward table (known: {', '.join(STATUSES)})")
        table[status] = _number(status, v)
    return table


def parse_table_spec(spec: str) -> dict[str, float]:
    """Overrides from ``status=value,...`` or from a YAML/JSON file path."""
    spec = spec.strip()
    if os.path.exists(spec) or spec.endswith((".yaml", ".yml", ".json")):
        import yaml

        try:
            with open(spec, encoding="utf-8") as fh:
                data = yaml.safe_load(fh)
        except OSError as e:
            raise ValueError(f"cannot read reward table {spec}: {e.strerror or e}") from None
        except yaml.YAMLError as e:
            raise ValueError(f"{spec}: not valid YAML/JSON: {str(e).splitlines()[0]}") from None
        if isinstance(data, Mapping) and isinstance(data.get("reward_table"), Mapping):
            data = data["reward_table"]
        if not isinstance(data, Mapping):
            raise ValueError(f"{spec}: expected a mapping status -> reward")
        return dict(merge_table(data))
    out: dict[str, float] = {}
    for part in spec.split(","):
        if not part.strip():
            continue
        if "=" not in part:
            raise ValueError(f"reward table entry {part.strip()!r} is not STATUS=VALUE")
        k, v = part.split("=", 1)
        out[k.strip()] = v
    return merge_table(out)


class RewardTable:
    """A reward table plus a mode; ``reward(verdict)`` gives the float reward."""

    def __init__(self, table: Mapping | None = None, mode: str = "binary"):
        if mode not in MODES:
            raise ValueError(f"reward mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.table = merge_table(table)
        self.mode = mode

    @classmethod
    def parse(cls, spec: str | None, mode: str = "binary") -> "RewardTable":
        return cls(parse_table_spec(spec) if spec else None, mode)

    def reward(self, verdict: Mapping) -> float:
        status = verdict.get("status")
        if self.mode == "fraction" and status in ("correct", "wrong"):
            score = verdict.get("score")
            if isinstance(score, (int, float)) and not isinstance(score, bool) and math.isfinite(score):
                lo, hi = self.table["wrong"], self.table["correct"]
                return lo + min(max(float(score), 0.0), 1.0) * (hi - lo)
        return self.table.get(status, self.table["error"])

    def as_dict(self) -> dict:
        return {"mode": self.mode, "table": dict(self.table)}
