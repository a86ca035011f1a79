"""The unbiased pass@k estimator (Chen et al. 2021) and pass@k summaries.

pass@k for one prompt with n samples of which c are correct is 1 - C(n-c, k) / C(n, k):
the chance that k samples drawn without replacement contain a correct one. It is computed
as 1 - prod_{i=n-c+1..n} (1 - k/i), which never forms a large binomial. Used by
rlvr-passk, rlvr-eval and the training loop's eval metrics; RecordsPassAtK is pass@k over
verified records (threshold, repeated ids, error records, prompts without samples).
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from dataclasses import dataclass, field

import numpy as np


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for n samples with c correct. Requires 0 <= c <= n and 1 <= k <= n."""
    if not (0 <= c <= n) or k < 1 or k > n:
        raise ValueError(f"pass_at_k needs 0 <= c <= n and 1 <= k <= n (n={n}, c={c}, k={k})")
    if n - c < k:
        return 1.0
    return float(1.0 - np.prod(1.0 - k / np.arange(n - c + 1, n + 1)))


def pass_at_k_exact(n: int, c: int, k: int) -> float:
    """The direct combinatorial formula with exact integers (for tests and checks)."""
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def default_ks(max_n: int) -> list[int]:
    """Powers of two up to max_n: 1, 2, 4, ..."""
    ks, k = [], 1
    while k <= max_n:
        ks.append(k)
        k *= 2
    return ks


@dataclass
class _Acc:
    prompts: int = 0
    sums: dict[int, float] = field(default_factory=lambda: defaultdict(float))
    counted: dict[int, int] = field(default_factory=lambda: defaultdict(int))
    n_hist: Counter = field(default_factory=Counter)
    correct_samples: int = 0
    samples: int = 0

    def add(self, n: int, c: int, ks: list[int] | None, values: dict[int, float]) -> None:
        self.prompts += 1
        self.n_hist[n] += 1
        self.samples += n
        self.correct_samples += c
        for k, v in values.items():
            self.sums[k] += v
            self.counted[k] += 1

    def result(self, ks: list[int]) -> dict:
        out: dict = {"n_prompts": self.prompts, "n_samples": self.samples}
        for k in ks:
            cnt = self.counted.get(k, 0)
            out[f"pass@{k}"] = (self.sums[k] / cnt) if cnt else None
        short = {f"pass@{k}": self.prompts - self.counted.get(k, 0) for k in ks if self.prompts - self.counted.get(k, 0)}
        if short:
            out["prompts_with_n_lt_k"] = short
        out["mean_accuracy"] = self.correct_samples / self.samples if self.samples else None
        out["n_distribution"] = {str(n): c for n, c in sorted(self.n_hist.items())}
        return out


class PassAtK:
    """Accumulates per-prompt (n, c) and reports pass@k overall and per dataset.

    ks=None means powers of two up to the largest n seen. Prompts with n < k do not enter
    pass@k (the estimator is undefined there); they are counted under prompts_with_n_lt_k.
    """

    def __init__(self, ks: list[int] | None = None):
        self.fixed_ks = sorted(set(ks)) if ks else None
        self.rows: list[tuple[str, int, int]] = []  # (dataset, n, c)

    def add(self, dataset: str, n: int, c: int) -> dict[str, float | None]:
        self.rows.append((dataset, n, c))
        ks = self.fixed_ks or default_ks(n)
        return {f"pass@{k}": (pass_at_k(n, c, k) if k <= n else None) for k in ks}

    def ks(self) -> list[int]:
        if self.fixed_ks:
            return self.fixed_ks
        return default_ks(max((n for _, n, _ in self.rows), default=0))

    def summary(self) -> dict:
        ks = self.ks()
        total, per = _Acc(), defaultdict(_Acc)
        for ds, n, c in self.rows:
            vals = {k: pass_at_k(n, c, k) for k in ks if k <= n}
            total.add(n, c, ks, vals)
            per[ds].add(n, c, ks, vals)
        out = {"k": ks, **total.result(ks)}
        out["per_dataset"] = {ds: acc.result(ks) for ds, acc in sorted(per.items())}
        return out


class RecordsPassAtK:
    """pass@k over verified records: the one implementation behind rlvr-passk and rlvr-eval.

    ``add(rec)`` takes one record with ``rewards`` (a completion is correct when its reward
    >= threshold) and returns its per-prompt row ({id, dataset, n, c, pass@k...}), the
    record itself when it is an error record (--keep-going), or None for a repeated ``id``
    (counted once). ``summary()`` is PassAtK's summary plus the threshold and the counts of
    prompts with no samples, repeated ids and error records. Records without ``dataset``
    count under ``default_dataset``.
    """

    def __init__(self, ks: list[int] | None = None, threshold: float = 1.0, default_dataset: str = "unknown"):
        self.acc = PassAtK(ks)
        self.threshold = threshold
        self.default_dataset = default_dataset
        self.seen: set = set()
        self.duplicates = 0
        self.errors = 0
        self.no_samples: Counter = Counter()  # dataset -> prompts with no samples

    def add(self, rec: dict) -> dict | None:
        from rlvr.records import is_error_record

        if is_error_record(rec):
            self.errors += 1
            return rec
        rid = rec.get("id")
        if rid is not None:
            if rid in self.seen:
                self.duplicates += 1
                return None
            self.seen.add(rid)
        dataset = rec.get("dataset") or self.default_dataset
        rewards = rec.get("rewards") or []
        n = len(rewards)
        if n == 0:  # nothing sampled (e.g. a prompt too long to generate for): counted, never in pass@k
            self.no_samples[dataset] += 1
            return {"id": rid, "dataset": rec.get("dataset"), "n": 0, "c": 0,
                    **{f"pass@{k}": None for k in self.acc.fixed_ks or []}}
        c = sum(1 for r in rewards if r >= self.threshold)
        vals = self.acc.add(dataset, n, c)
        return {"id": rid, "dataset": rec.get("dataset"), "n": n, "c": c, **vals}

    @property
    def empty(self) -> bool:
        """No prompt counted (error records and repeats aside)."""
        return not self.acc.rows and not self.no_samples

    def summary(self) -> dict:
        s = self.acc.summary()
        s["threshold"] = self.threshold
        if self.no_samples:
            s["prompts_with_no_samples"] = sum(self.no_samples.values())
            for ds, count in sorted(self.no_samples.items()):
                s["per_dataset"].setdefault(ds, {"n_prompts": 0, "n_samples": 0})["prompts_with_no_samples"] = count
            s["per_dataset"] = dict(sorted(s["per_dataset"].items()))
        if self.duplicates:
            s["duplicate_ids"] = self.duplicates
        if self.errors:
            s["error_records"] = self.errors
        return s


def records_pass_at_k(records, ks: list[int] | None = None, threshold: float = 1.0,
                      default_dataset: str = "unknown") -> dict:
    """The pass@k summary of verified records (see RecordsPassAtK)."""
    acc = RecordsPassAtK(ks, threshold, default_dataset)
    for rec in records:
        acc.add(rec)
    return acc.summary()


def summary_table(summary: dict, fmt: str) -> str:
    """A pass@k summary as a Markdown or CSV table: one row overall, one per dataset."""
    from rlvr.textutil import md_cell

    ks = summary["k"]
    cols = ["dataset", "n_prompts"] + [f"pass@{k}" for k in ks]
    rows = [("all", summary)] + list(summary.get("per_dataset", {}).items())

    def cell(v: object) -> str:
        if v is None:
            return ""
        if isinstance(v, float):
            return f"{v:.4f}"
        return str(v)

    lines = []
    if fmt == "markdown":
        lines.append("| " + " | ".join(cols) + " |")
        lines.append("|" + "|".join("---" for _ in cols) + "|")
        for name, s in rows:
            lines.append("| " + " | ".join([md_cell(name), cell(s["n_prompts"])] + [cell(s.get(f"pass@{k}")) for k in ks]) + " |")
    elif fmt == "csv":
        import csv
        import io

        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(cols)
        for name, s in rows:
            w.writerow([name, s["n_prompts"]] + [cell(s.get(f"pass@{k}")) for k in ks])
        return buf.getvalue()
    else:
        raise ValueError(f"unknown table format {fmt!r}")
    return "\n".join(lines) + "\n"
