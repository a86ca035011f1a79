"""rlvr-refine: new prompt records from the failed completions of verified records (see rlvr.refine)."""

from __future__ import annotations

import math
import sys

import click

from rlvr.cli import ConfigError, input_options, run, say, with_examples
from rlvr.records import RecordWriter, read_records

HELP = with_examples(
    """Ask again where a completion failed: one new prompt record per failed completion.

    Reads verified records (`completions`, `verdicts` and `rewards`, as rlvr-verify writes
    them). A completion fails when its reward is below --threshold; one whose verdict is
    `error` (the verifier could not grade it) is skipped. Of a record's failed completions
    the best --per-prompt (highest reward first) each give a prompt record: the record's own
    fields (verifier, answer, tests, instructions: rlvr-verify grades the new answer the same
    way) without what rollout and verification added, a `prompt` rendered from the template
    with {prompt} (the original prompt; with chat messages, the last user message, which the
    rendering replaces), {completion} (the failed answer, thinking cut off), {feedback} (what
    the verifier found: the instructions not followed, the failing test and the program's
    output, a wrong or missing answer and the expected format, the judge's score and reply)
    and {status}; `id` `<id>/refine-<k>` (k: the completion's index); and `refine` (of, root,
    completion_index, round, status, reward). The feedback never shows the reference answer.

    So a feedback loop is a pipe: rlvr-rollout | rlvr-verify | rlvr-refine | rlvr-rollout |
    rlvr-verify, and the refined successes feed rlvr-select (STaR). The last line on stderr
    counts records, failed completions and prompts written. A record without an id, a prompt,
    or verdicts and rewards for its completions is bad input (FILE:LINE and the field; exit 3,
    --keep-going writes an error record instead).
    """,
    """
rlvr-rollout -m MODEL -n 4 ifeval.jsonl | rlvr-verify | rlvr-refine > round2.jsonl
rlvr-refine --per-prompt 2 --template retry.txt verified.jsonl | rlvr-rollout -m MODEL | rlvr-verify
rlvr-refine --threshold 0.5 --all verified.jsonl > retry.jsonl
rlvr-refine verified.jsonl | rlvr-rollout -m MODEL -n 8 | rlvr-verify | rlvr-select --max-pass 1 > star.jsonl
""",
)


@click.command(help=HELP)
@input_options
@click.option("--template", "template_file", type=click.File("r", encoding="utf-8"), metavar="FILE",
              help="The new prompt's template, with {prompt}, {completion}, {feedback}, {status}  [default: the "
                   "original prompt, the previous answer, why it was not accepted, a request to fix it]")
@click.option("--threshold", type=float, default=1.0, show_default=True,
              help="Reward at or above which a completion succeeded (is not refined).")
@click.option("--per-prompt", type=click.IntRange(min=1), default=1, show_default=True,
              help="Failed completions per record that each give a new prompt, best first.")
@click.option("--all", "all_failed", is_flag=True, help="Every failed completion gives a new prompt.")
def cmd(files, keep_going, template_file, threshold, per_prompt, all_failed):
    from rlvr.refine import Refiner, check_record, refine

    if not math.isfinite(threshold):
        raise click.BadParameter("must be a finite number", param_hint="--threshold")
    template = template_file.read() if template_file else None
    try:
        refiner = Refiner(template, threshold, None if all_failed else per_prompt)
    except ValueError as e:
        raise ConfigError(f"--template: {template_file.name}: {e}") from None
    # a missing field is reported once the whole input has parsed (a malformed line first)
    records = read_records(files, keep_going=keep_going, required=("completions", "prompt", "verdicts", "rewards"),
                           defer_required=True, check=check_record)
    with RecordWriter(sys.stdout.buffer) as out:
        for rec in refine(records, refiner):
            out.write(rec)
    s = refiner.stats
    say(f"{s['records']} records, {s['failed']} failed completions ({s['skipped_error']} verifier errors skipped), "
        f"{s['prompts']} new prompts; {s['solved']} records had a success")


main = run(cmd)
