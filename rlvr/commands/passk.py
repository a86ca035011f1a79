"""rlvr-passk: unbiased pass@k from verified records (see rlvr.passk)."""

from __future__ import annotations

import math
import sys
from collections import Counter

import click
import orjson

from rlvr.cli import input_options, int_list, run, warn, with_examples
from rlvr.passk import PassAtK, summary_table
from rlvr.records import RecordWriter, is_error_record, read_records

HELP = with_examples(
    """Compute pass@k from verified records.

    Reads records with `rewards` (one per completion, as rlvr-verify writes them); a
    completion counts as correct when its reward >= --threshold. Per prompt, pass@k =
    1 - C(n-c,k)/C(n,k) (the unbiased estimator), averaged over prompts, overall and per
    `dataset`. Prompts with fewer than k samples are left out of pass@k and counted under
    `prompts_with_n_lt_k`. Several files (e.g. shards) merge into one result; a repeated
    `id` counts once, with a warning.

    Prints one JSON summary (fractions, not percents), or a table with --format.
    """,
    """
rlvr-passk verified.jsonl
rlvr-passk --k 1,8,64 shard-*.jsonl
rlvr-verify < rollouts.jsonl | rlvr-passk --format markdown
rlvr-passk --per-prompt verified.jsonl > per_prompt.jsonl
""",
)


@click.command(help=HELP)
@input_options
@click.option("--k", "ks", metavar="K,K,...", help="Values of k (default: powers of two up to the largest n).")
@click.option("--threshold", type=float, default=1.0, show_default=True, help="Reward at or above which a completion is correct.")
@click.option("--per-prompt", is_flag=True, help="Write one JSONL line per prompt (id, dataset, n, c, pass@k) instead of the summary.")
@click.option("--format", "fmt", type=click.Choice(["json", "markdown", "csv"]), default="json", show_default=True,
              help="Summary format.")
def cmd(files, keep_going, ks, threshold, per_prompt, fmt):
    k_list = int_list(ks)
    if k_list is not None and (not k_list or min(k_list) < 1 or max(k_list) > 10**9):
        raise click.BadParameter("k must be integers from 1 to 1e9", param_hint="--k")
    if not math.isfinite(threshold):
        raise click.BadParameter("must be a finite number", param_hint="--threshold")
    acc = PassAtK(k_list)
    seen: set[str] = set()
    dupes = errors = no_samples = 0
    empty: Counter = Counter()   # dataset -> prompts with no samples
    out = RecordWriter(sys.stdout.buffer) if per_prompt else None
    for rec in read_records(files, keep_going=keep_going, required=("rewards",)):
        if is_error_record(rec):
            errors += 1
            if out is not None:
                out.write(rec)  # --per-prompt keeps N records in, N out
            continue
        rid = rec.get("id")
        if rid is not None:
            if rid in seen:
                dupes += 1
                continue
            seen.add(rid)
        n = len(rec["rewards"])
        if n == 0:  # nothing sampled (e.g. a prompt too long to generate for): counted, never in pass@k
            no_samples += 1
            empty[rec.get("dataset") or "unknown"] += 1
            if out is not None:
                out.write({"id": rid, "dataset": rec.get("dataset"), "n": 0, "c": 0,
                           **{f"pass@{k}": None for k in acc.fixed_ks or []}})
            continue
        c = sum(1 for r in rec["rewards"] if r >= threshold)
        vals = acc.add(rec.get("dataset") or "unknown", n, c)
        if out is not None:
            out.write({"id": rid, "dataset": rec.get("dataset"), "n": n, "c": c, **vals})
    if dupes:
        warn(f"{dupes} repeated id(s) counted once")
    if errors:
        warn(f"{errors} error record(s) skipped")
    if out is not None or not acc.rows and not no_samples:
        if not acc.rows:
            warn("no records")
        return
    s = acc.summary()
    s["threshold"] = threshold
    if no_samples:
        s["prompts_with_no_samples"] = no_samples
        for ds, count in sorted(empty.items()):
            s["per_dataset"].setdefault(ds, {"n_prompts": 0, "n_samples": 0})["prompts_with_no_samples"] = count
        s["per_dataset"] = dict(sorted(s["per_dataset"].items()))
    if dupes:
        s["duplicate_ids"] = dupes
    if errors:
        s["error_records"] = errors
    if fmt == "json":
        sys.stdout.buffer.write(orjson.dumps(s, option=orjson.OPT_INDENT_2) + b"\n")
    else:
        sys.stdout.write(summary_table(s, fmt))


main = run(cmd)
