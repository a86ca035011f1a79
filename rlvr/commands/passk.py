"""rlvr-passk: unbiased pass@k from verified records (see rlvr.passk)."""

from __future__ import annotations

import math
import sys

import click

from rlvr.cli import input_options, int_list, run, warn, with_examples
from rlvr.passk import RecordsPassAtK, summary_table
from rlvr.records import RecordWriter, read_records, to_json

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
    acc = RecordsPassAtK(k_list, threshold)
    out = RecordWriter(sys.stdout.buffer) if per_prompt else None
    for rec in read_records(files, keep_going=keep_going, required=("rewards",)):
        row = acc.add(rec)
        if out is not None and row is not None:
            out.write(row)  # an error record passes through: --per-prompt keeps N records in, N out
    if acc.duplicates:
        warn(f"{acc.duplicates} repeated id(s) counted once")
    if acc.errors:
        warn(f"{acc.errors} error record(s) skipped")
    if out is not None or acc.empty:
        if acc.empty:
            warn("no records")
        return
    s = acc.summary()
    if fmt == "json":
        sys.stdout.buffer.write(to_json(s, indent=True) + b"\n")
    else:
        sys.stdout.write(summary_table(s, fmt))


main = run(cmd)
