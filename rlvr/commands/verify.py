"""rlvr-verify: add rewards and verdicts to records with completions (see rlvr.verification.pool)."""

from __future__ import annotations

import sys

import click

from rlvr.cli import (ConfigError, Failure, check_output_file, input_options, judge_options, progress_option, run, warn,
                      with_examples)
from rlvr.cli import progress as progress_bar
from rlvr.records import RecordWriter, read_records, write_json
from rlvr.verifiers import MODULES

HELP = with_examples(
    """Verify completions: add `rewards` and `verdicts` to every record.

    Reads records with `completions` and writes them back, in the same order, with one
    verdict and one reward per completion. The verifier is the record's `verifier` field
    (math, code, ifeval, ifbench, if_multi, if_functions, choice) unless --verifier forces
    one (or its shorthand --math, --code, --ifeval, --ifbench, --if-multi, --if-functions,
    --choice). A verdict says
    what happened: status (correct, wrong, no_answer, timeout, error,
    unfinished_thinking), the extracted
    answer, the verifier's name and version and the time taken. Each verification runs in
    a pool of worker processes with a hard wall-clock timeout: a hung or crashed
    verification becomes a `timeout` or `error` verdict, never a lost record.

    Rewards come from a status table, binary by default (correct 1, anything else 0);
    --reward-table changes it, --reward-mode fraction gives instruction-following
    verdicts the fraction of instructions met (and code verdicts under code.mode=allenai
    their pass rate). Verifier options are set with --set, e.g.
    math.mode (default, strict-match, flexible-extract: the last two are
    lm-evaluation-harness's GSM8K filters and scoring; allenai), math.last_number (fall
    back to the last number in the text; default true), code.timeout (CPU seconds per
    program, default 5), code.wall_timeout, code.memory_mb (default 1024), code.sandbox
    (auto, bwrap, process), code.mode (allenai: open-instruct's pass rate over every test),
    if_functions.choice, ifeval.loose (docs/verify.md lists them all).

    Answer-only judging, for every verifier alike: a completion that reasons first
    (<think> ... </think>, then the answer) is judged on the text after its last
    </think>, up to any <think> opened after it; one whose thinking never closes gets the status unfinished_thinking (reward
    from the table, 0 by default) and reaches no verifier. A record with "thinking": true
    (rlvr-data --thinking) must close its thinking; "thinking": false judges the whole
    text; without the field the text decides (a </think> splits it, an unclosed <think>
    is unfinished). --thinking / --no-thinking set it for the whole stream; --think-markers
    sets another pair of markers.

    An LLM judge (--judge URL, an OpenAI-compatible /v1 endpoint such as `vllm serve`)
    grades completions against a rubric (--judge-rubric: a format string or file with
    {prompt}, {completion}, {answer}), alone or combined with the record's own verifier
    (--judge-mode judge, rule, weighted, gate). A reply without a score gets the status
    judge_unparsable; replies are cached on disk (--judge-cache) and kept in the verdict.
    Records whose verifier is `judge` (AllenAI's general-chat rows) need it. Its other
    options are set with --set judge.KEY=VALUE (api_key_env, parser, threshold, weight,
    timeout, retries, rubrics, datasets; docs/verify.md).

    A wrong answer is data: the exit status stays 0; so is a record that names no
    verifier (its verdicts are errors, with a warning). A record that cannot be graded
    whatever its completions say (an unknown verifier, no or a malformed `answer`,
    unusable tests, instructions that cannot be built) is bad input, reported at its
    FILE:LINE with the field, like a malformed line: records read before it are written
    before exiting with 3; --keep-going writes an error record in its place.
    """,
    """
rlvr-verify rollouts.jsonl > verified.jsonl
rlvr-verify -j 16 --summary < rollouts.jsonl > verified.jsonl
rlvr-verify --verifier math --set math.mode=strict-match gsm8k.jsonl
rlvr-rollout -m CKPT prompts.jsonl | rlvr-verify --math | rlvr-passk
rlvr-verify --timeout 10 --reward-table correct=1,no_answer=-0.1 code.jsonl
rlvr-verify --reward-mode fraction --summary=summary.json ifeval.jsonl
rlvr-verify --set code.mode=allenai --reward-mode fraction allenai_code.jsonl
rlvr-verify --thinking --reward-table unfinished_thinking=-0.5 thinker.jsonl
rlvr-verify --think-markers '<seed:think>' '</seed:think>' seed.jsonl
rlvr-rollout ... | rlvr-verify | rlvr-passk --format markdown
rlvr-verify --judge http://127.0.0.1:8000/v1 --judge-model Qwen/Qwen3-8B chat.jsonl
rlvr-verify --judge URL --judge-model M --judge-mode gate --set judge.threshold=0.7 ifeval.jsonl
""",
)


def _parse_timeout(value: str | None):
    if value is None:
        return None
    try:
        if "=" not in value:
            return float(value)
        out = {}
        for part in value.split(","):
            if part.strip():
                k, v = part.split("=", 1)
                out[k.strip()] = float(v)
        return out
    except ValueError:
        raise click.BadParameter(f"{value!r} is not SECONDS or VERIFIER=SECONDS,...", param_hint="--timeout") from None


def _parse_sets(items: tuple[str, ...]) -> dict:
    import yaml

    out = {}
    for item in items:
        if "=" not in item:
            raise click.BadParameter(f"{item!r} is not VERIFIER.OPTION=VALUE", param_hint="--set")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = yaml.safe_load(v) if v.strip() else ""
        except yaml.YAMLError:
            out[k.strip()] = v
    return out


# --math, --code, --ifeval, --ifbench, --if-multi, ...: `rlvr-rollout ... | rlvr-verify --math`.
SHORTHANDS = {"math": "--math", "code": "--code", "ifeval": "--ifeval", "ifbench": "--ifbench", "if_multi": "--if-multi",
              "if_functions": "--if-functions", "choice": "--choice"}


def _shorthands(f):
    for name, flag in reversed(SHORTHANDS.items()):
        f = click.option(flag, "verifier", flag_value=name, help=f"Shorthand for --verifier {name}.")(f)
    return f


def _verifiers_named(args: list[str]) -> dict[str, str]:
    """{verifier: how it was given} for --verifier NAME and the shorthands in args (options only)."""
    flags = {flag: name for name, flag in SHORTHANDS.items()}
    named: dict[str, str] = {}
    for i, a in enumerate(args):
        if a in flags:
            named.setdefault(flags[a], a)
        elif a == "--verifier" and i + 1 < len(args):
            named.setdefault(args[i + 1], f"--verifier {args[i + 1]}")
        elif a.startswith("--verifier="):
            named.setdefault(a.split("=", 1)[1], a)
    return named


class _Command(click.Command):
    """A bare --summary means stderr: a file is only taken as --summary=FILE, so that
    `rlvr-verify --summary in.jsonl` reads in.jsonl instead of overwriting it. --verifier and
    its shorthands must not name two different verifiers."""

    def parse_args(self, ctx, args):
        named = _verifiers_named(args[:args.index("--")] if "--" in args else args)
        if len(named) > 1:  # --verifier and its shorthands share one value: two would silently be the last
            a, b = list(named.values())[:2]
            raise click.UsageError(f"{a} and {b} name different verifiers: give one", ctx)
        if "--" in args:
            k = args.index("--")
            args = [("--summary=-" if a == "--summary" else a) for a in args[:k]] + args[k:]
        else:
            args = ["--summary=-" if a == "--summary" else a for a in args]
        return super().parse_args(ctx, args)


@click.command(cls=_Command, help=HELP)
@input_options
@click.option("--verifier", type=click.Choice(sorted(MODULES)),
              help="Use this verifier for every record (default: each record's `verifier`).")
@_shorthands
@click.option("-j", "--jobs", type=click.IntRange(min=1), help="Worker processes  [default: the number of usable cores]")
@click.option("--timeout", metavar="SECONDS|NAME=SECONDS,...",
              help="Wall-clock limit per verification, for all verifiers or per verifier  [default: each verifier's own TIMEOUT_S (math 3), else 5]")
@click.option("--reward-table", metavar="STATUS=R,...|FILE",
              help="Rewards per status (correct, wrong, no_answer, timeout, error, unfinished_thinking, judge_unparsable), inline or a YAML/JSON file; unnamed statuses keep their default (correct 1, others 0).")
@click.option("--reward-mode", type=click.Choice(["binary", "fraction"]), default="binary", show_default=True,
              help="fraction: a verdict with a score (instruction following; code under code.mode=allenai) earns wrong + score * (correct - wrong).")
@click.option("--set", "sets", multiple=True, metavar="VERIFIER.OPTION=VALUE", help="A verifier option, e.g. math.mode=flexible-extract (repeatable).")
@click.option("--summary", "summary", is_flag=False, flag_value="-", default=None, metavar="[=FILE]",
              help="Print a summary (accuracy per dataset, counts per status, timeouts) on stderr; --summary=FILE writes it as JSON instead.")
@click.option("--thinking/--no-thinking", "thinking", default=None,
              help="Judge every completion on its answer after the thinking (unclosed: unfinished_thinking), or every "
                   "one as a whole  [default: each record's `thinking` field, else the text decides]")
@click.option("--think-markers", nargs=2, metavar="OPEN CLOSE", help="The markers of a thinking block  [default: <think> </think>]")
@click.option("--memory-limit", type=click.IntRange(min=0), default=4096, show_default=True, metavar="MB",
              help="Address-space limit per worker process (0: none).")
@judge_options
@progress_option
def cmd(files, keep_going, verifier, jobs, timeout, reward_table, reward_mode, sets, summary, thinking, think_markers,
        memory_limit, judge, progress):
    from rlvr.verification.pool import VerifierPool, WorkerStartError
    from rlvr.verification.rewards import RewardTable
    from rlvr.verification.summary import Summary, format_text

    if summary and summary != "-":
        check_output_file(summary, "--summary")
    try:
        table = RewardTable.parse(reward_table, reward_mode)
        config = _parse_sets(sets)
        config.update({f"judge.{k}": v for k, v in judge.items()})
        pool = VerifierPool(jobs=jobs, timeout=_parse_timeout(timeout), config=config,
                            reward_table=table, verifier=verifier, memory_mb=memory_limit or None,
                            thinking=thinking, think_markers=think_markers or None)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    acc = Summary() if summary else None
    # A record whose reference fields its verifier rejects (no answer, unusable tests) is bad
    # input: reported at its FILE:LINE like a malformed line (an error record with --keep-going).
    # Old rewards and verdicts (completions re-rolled since) are replaced, not checked.
    records = read_records(files, keep_going=keep_going, required=("completions",), check=pool.check_record,
                           replaced=("rewards", "verdicts"))
    unnamed = 0
    try:
        with pool, RecordWriter(sys.stdout.buffer) as out:
            for rec in progress_bar(pool.verify_records(records), "verify", enabled=progress):
                out.write(rec)
                if acc is not None:
                    acc.add(rec)
                if not verifier and rec.get("completions") and not rec.get("verifier"):
                    unnamed += 1
    except WorkerStartError as e:
        raise Failure(str(e)) from None
    for name, why in pool.unavailable.items():
        warn(f"verifier {name!r} is not available here, its verdicts are errors: {why}")
    if unnamed:
        warn(f"{unnamed} record(s) name no verifier: their verdicts are errors (use --verifier NAME)")
    if acc is not None:
        result = acc.result()
        if summary == "-":
            click.echo(format_text(result), err=True, nl=False)
        else:
            write_json(summary, result)


main = run(cmd)
