"""Summaries of verified records: accuracy per dataset, counts per status, timeouts, IF metrics.

    s = Summary()
    for rec in verified: s.add(rec)
    s.result()        # {"all": {...}, "per_dataset": {"gsm8k": {...}}, "error_records": 0}
    format_text(s.result())

Used by rlvr-verify --summary and rlvr-eval. Per group (all records, and each `dataset`):
records, completions, accuracy (fraction of completions with status correct), mean_reward,
counts per status, timeouts, mean/max verification time. Where instruction-following
verdicts occur (verifier ifeval/ifbench/if_multi, or verdicts carrying ``strict`` lists)
the group also gets the IFEval metrics: prompt_level_strict_acc and prompt_level_loose_acc
(a completion counts when all its instructions are met) and inst_level_strict_acc and
inst_level_loose_acc (over all instructions of all completions). A timeout or error
verdict counts every instruction of its record as not met. Where verdicts were judged on
their answer only (rlvr.verification.thinking), the group gets ``thinking``: the share of
those completions that closed their thinking and the mean thinking and answer lengths in
characters. Fractions, not percents.
"""

from __future__ import annotations

from collections.abc import Iterable

from rlvr.records import STATUSES, is_error_record
from rlvr.verification.thinking import ThinkingStats

IF_VERIFIERS = ("ifeval", "ifbench", "if_multi")
IF_METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")


class _Group:
    __slots__ = ("records", "completions", "status", "reward", "dur_sum", "dur_max", "if_n", "p_strict", "p_loose",
                 "i_total", "i_strict", "i_loose", "think")

    def __init__(self):
        self.records = self.completions = 0
        self.status = dict.fromkeys(STATUSES, 0)
        self.reward = self.dur_sum = self.dur_max = 0.0
        self.if_n = self.p_strict = self.p_loose = self.i_total = self.i_strict = self.i_loose = 0
        self.think = ThinkingStats()

    def add(self, rec: dict, if_record: bool) -> None:
        self.records += 1
        verdicts = rec.get("verdicts") or []
        rewards = rec.get("rewards") or []
        n_inst = len(rec.get("instruction_id_list") or [])
        for k, v in enumerate(verdicts):
            self.completions += 1
            st = v.get("status") if isinstance(v, dict) else None
            self.status[st if st in self.status else "error"] += 1
            if k < len(rewards):
                self.reward += float(rewards[k])
            d = v.get("duration_s") if isinstance(v, dict) else None
            if isinstance(d, (int, float)):
                self.dur_sum += d
                self.dur_max = max(self.dur_max, d)
            self.think.add(v)
            strict = v.get("strict") if isinstance(v, dict) else None
            if if_record or isinstance(strict, list):
                if not isinstance(strict, list):
                    strict = [False] * n_inst
                loose = v.get("loose")
                if not isinstance(loose, list):
                    loose = strict
                self.if_n += 1
                self.p_strict += bool(strict) and all(strict)
                self.p_loose += bool(loose) and all(loose)
                self.i_total += len(strict)
                self.i_strict += sum(bool(x) for x in strict)
                self.i_loose += sum(bool(x) for x in loose)

    def result(self) -> dict:
        n = self.completions
        out = {
            "records": self.records,
            "completions": n,
            "accuracy": self.status["correct"] / n if n else None,
            "mean_reward": self.reward / n if n else None,
            "status": dict(self.status),
            "timeouts": self.status["timeout"],
            "mean_duration_s": round(self.dur_sum / n, 6) if n else None,
            "max_duration_s": round(self.dur_max, 6),
        }
        think = self.think.result()
        if think:
            out["thinking"] = think
        if self.if_n:
            out["prompt_level_strict_acc"] = self.p_strict / self.if_n
            out["inst_level_strict_acc"] = self.i_strict / self.i_total if self.i_total else None
            out["prompt_level_loose_acc"] = self.p_loose / self.if_n
            out["inst_level_loose_acc"] = self.i_loose / self.i_total if self.i_total else None
        return out


class Summary:
    """Accumulates verified records (streaming: constant memory per dataset)."""

    def __init__(self):
        self.all = _Group()
        self.groups: dict[str, _Group] = {}
        self.error_records = 0

    def add(self, rec: dict) -> None:
        if not isinstance(rec, dict) or is_error_record(rec):
            self.error_records += 1
            return
        is_if = rec.get("verifier") in IF_VERIFIERS
        ds = rec.get("dataset") or "unknown"
        self.all.add(rec, is_if)
        self.groups.setdefault(ds, _Group()).add(rec, is_if)

    def result(self) -> dict:
        return {"all": self.all.result(),
                "per_dataset": {k: g.result() for k, g in sorted(self.groups.items())},
                "error_records": self.error_records}


def summarize(records: Iterable[dict]) -> dict:
    """The summary of verified records (see the module docstring)."""
    s = Summary()
    for rec in records:
        s.add(rec)
    return s.result()


def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.4f}"
    return str(x)


def format_text(summary: dict) -> str:
    """A plain-text table: one row for all records, one per dataset."""
    rows = [("all", summary["all"])] + list(summary["per_dataset"].items())
    # judge_unparsable only when an LLM judge gave such replies (rlvr.verifiers.judge)
    shown = [st for st in STATUSES if st != "judge_unparsable" or summary["all"]["status"].get(st)]
    cols = ["records", "completions", "accuracy", "mean_reward", *shown]
    if any(IF_METRICS[0] in r for _, r in rows):
        cols += list(IF_METRICS)
    if any("thinking" in r for _, r in rows):
        cols.append("thinking_closed")

    def cell(r: dict, c: str):
        if c in STATUSES:
            return r["status"][c]
        if c == "thinking_closed":
            return (r.get("thinking") or {}).get("closed_frac")
        return r.get(c)

    table = [["dataset", *cols]]
    for name, r in rows:
        table.append([name] + [_fmt(cell(r, c)) for c in cols])
    widths = [max(len(row[i]) for row in table) for i in range(len(table[0]))]
    lines = ["  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in enumerate(zip(row, widths)))
             for row in table]
    if summary.get("error_records"):
        lines.append(f"error records passed through: {summary['error_records']}")
    return "\n".join(lines) + "\n"
