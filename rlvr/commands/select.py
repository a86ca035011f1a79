"""rlvr-select: SFT records from verified rollouts, by pass rate (see rlvr.selection)."""

from __future__ import annotations

import math
import sys

import click

from rlvr.cli import input_options, run, say, with_examples
from rlvr.records import RecordWriter, read_records
from rlvr.selection import Selection

HELP = with_examples(
    """Pick one correct completion per prompt whose pass rate lies in a range, as SFT records.

    Reads verified records (`completions` and `rewards`, as rlvr-verify writes them). A
    prompt's pass rate is the fraction of its completions whose reward is >= --threshold (as
    rlvr-passk counts them). A prompt is kept when --min-pass <= rate < --max-pass (a
    --max-pass of 1 keeps rate 1 too) and one of its completions is correct: it gives one
    record with the prompt's own fields, `completion` (a correct completion drawn with a
    generator seeded by --seed and the prompt's id, so the choice does not depend on order or
    sharding), its `finish_reason`, `stop_reason` and `completion_token_ids` when present,
    `reward`, `verdict`, `completion_index`, `pass_rate`, `n_samples` and `n_correct`. rlvr-train's
    sft.data reads these records.

    --original-prompt pairs the refined successes of rlvr-refine's prompts with the prompt
    they were refined from (STaR's rationalization): a record with a `refine` field gives the
    original `prompt` and `id` (refine.prompt, refine.root), the prompt the completion answered
    as `refined_prompt`, and one record per original prompt.

    The last line on stderr says how many prompts were kept and why the others were not
    (below --min-pass, at or above --max-pass, no correct completion, no samples, repeated
    ids). A repeated id is used once; error records (--keep-going) pass through.
    """,
    """
rlvr-data gsm8k --split train | rlvr-rollout -m MODEL -n 128 | rlvr-verify | rlvr-select > sft.jsonl
rlvr-select --min-pass 0 --max-pass 0.5 verified.jsonl > hardest.jsonl
rlvr-select --min-pass 0.25 --max-pass 1 --seed 1 shard-*.jsonl > sft.jsonl
rlvr-select --threshold 0.5 ifeval_verified.jsonl > sft.jsonl     # fraction rewards: half met counts
rlvr-refine verified.jsonl | rlvr-rollout -m MODEL | rlvr-verify | rlvr-select --original-prompt --max-pass 1 > star.jsonl
""",
)


def _finite(ctx, param, value: float) -> float:
    if not math.isfinite(value) or not 0 <= value <= 1:
        raise click.BadParameter("must be a number from 0 to 1")
    return value


@click.command(help=HELP)
@input_options
@click.option("--min-pass", type=float, default=0.0, show_default=True, callback=_finite,
              help="Keep prompts whose pass rate is at least this.")
@click.option("--max-pass", type=float, default=0.5, show_default=True, callback=_finite,
              help="... and below this (1: up to and including 1).")
@click.option("--threshold", type=float, default=1.0, show_default=True,
              help="Reward at or above which a completion is correct.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the choice among correct completions.")
@click.option("--original-prompt", is_flag=True,
              help="Records from rlvr-refine: the SFT record gets the prompt and id they were refined from.")
def cmd(files, keep_going, min_pass, max_pass, threshold, seed, original_prompt):
    if min_pass > max_pass:
        raise click.BadParameter(f"--min-pass {min_pass:g} is above --max-pass {max_pass:g}", param_hint="--min-pass")
    if not math.isfinite(threshold):
        raise click.BadParameter("must be a finite number", param_hint="--threshold")
    sel = Selection(min_pass, max_pass, threshold, seed, original_prompt)
    with RecordWriter(sys.stdout.buffer) as out:
        for rec in read_records(files, keep_going=keep_going, required=("completions", "rewards")):
            picked = sel.add(rec)
            if picked is not None:
                out.write(picked)
    say(sel.summary())


main = run(cmd)
