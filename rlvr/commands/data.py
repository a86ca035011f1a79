"""rlvr-data: datasets to prompt records (see rlvr.data)."""

from __future__ import annotations

import os

import click

from rlvr.cli import ConfigError, run, shard_callback, stdout_writer, warn, with_examples
from rlvr.data import (ALIASES, SPECS, TEMPLATES, ChatOptions, apply_chat_fields, apply_order, canonical,
                       load_records, mix, parse_mix, read_order, select, split_kind_keys, split_name)
from rlvr.eval.tasks import STANDARD as LM_TASKS

HELP = with_examples(
    f"""Write a dataset's prompts as JSONL records.

    NAME is one of: {", ".join(dict.fromkeys([*SPECS, *LM_TASKS]))}
    ({", ".join(f"{a} is {n}" for a, n in ALIASES.items())}). Each record carries `id`,
    `dataset`, `prompt`, `verifier` and the ground truth its verifier needs (see
    rlvr-records(5)).

    lm-evaluation-harness's tasks (gsm8k_cot, minerva_math, hendrycks_math, math_qwen, and
    gsm8k, mbpp, humaneval, ifeval with --shots N > 0) are built through lm-eval itself: each
    prompt is the context `lm_eval --num_fewshot N --seed SEED` builds for that document
    (few-shot examples drawn with --seed, or the task's fixed exemplars), and each record
    carries the task's `stop` sequences and `max_tokens`. Their few-shot split (gsm8k and
    hendrycks_math: train) comes from the folder given as --source.

    Rows come from --source (a local .jsonl/.json/.parquet/.arrow file, a folder holding
    split files or a `datasets.save_to_disk` folder, or an s3:// object or folder of either
    kind, fetched into a local cache), else from $RLVR_S3_DATASETS/NAME/ when it holds the
    split, or $RLVR_S3_DATASETS/NAME_<split>/ (a folder of that split only, e.g. gsm8k_train/),
    else from the same two below $RLVR_DATA_DIR, else from the Hugging Face hub (MATH: its
    seven subjects). A source named after the split wins over a folder whose one file names
    no split (gsm8k/data.jsonl); that file serves only a dataset of one split (humaneval) or
    whose rows say their split (mbpp): for gsm8k it is an error naming the file and the split,
    so the same rows never serve both training and test. From S3 only the split's files are
    fetched, once the folder's listing shows it there. lm-eval's tasks find their rows the same way (NAME: the task's dataset,
    gsm8k, math, mbpp, humaneval or ifeval), both the evaluated and the few-shot split.
    Offline, a hub name fails with one line saying where else it looked and how to pass a
    local copy.

    Chat: --chat writes prompts as chat messages (the model's chat template applies them
    at generation); --system TEXT puts a system message first; --chat-template FILE names a
    template file that replaces the tokenizer's (each record carries its path in
    `chat_template`); --thinking / --no-thinking write `"thinking": true/false` into each
    record: the chat template gets enable_thinking (Qwen3) and rlvr-verify judges only the
    answer after the thinking (a thinking block that never closes is unfinished_thinking).

    Order of selection: --filter, shuffle (with --seed), --order, --limit, then --shard I/N,
    so that N shards of a limited set partition exactly that set. A dataset of a mixture
    ordered by --order NAME=FILE keeps that order (no shuffle) and the weights still
    interleave it.

    Per dataset (NAME=VALUE in a mixture, else VALUE for every dataset): --template takes
    a template name or a format string of the record's fields ('Q: {{question}}\\nA:');
    --stop and --max-tokens are written into the records (rlvr-rollout and rlvr-train
    use a record's own `stop` and `max_tokens`); --max-tokens KIND=N gives the rows of one
    kind of allenai their own length (allenai/gsm8k=512, allenai/math=1024,
    allenai/ifeval=2048: the records' `dataset`); --assistant-prefix is appended to each
    prompt (a final assistant message with --chat). In these, \\n and \\t stand for a
    newline and a tab. --filter FIELD=V1,V2 keeps the records whose FIELD is one of the
    values (MATH: level=3,4,5; APPS: difficulty=interview); a filter that keeps no record
    (difficulty=bogus) exits 2 naming the field, the value and the values the records have,
    and a value among several that no record has is a warning on stderr.
    """,
    r"""
rlvr-data gsm8k --split test --source data/gsm8k/test.jsonl --limit 100
rlvr-data math500 --source MATH-500/test.jsonl --template boxed
rlvr-data gsm8k --shots 8 --seed 42 --source gsm8k/   # lm-eval's 8-shot gsm8k prompts (train from gsm8k/)
rlvr-data minerva_math --shots 4 --source hendrycks_math/   # the seven subjects, Minerva's exemplars
rlvr-data mbpp --source mbpp.jsonl --shard 0/4
rlvr-data --mix gsm8k:0.25,math:0.75 --source gsm8k=g.jsonl --source math=m.jsonl --seed 1
rlvr-data gsm8k --source g.jsonl --order curriculum.txt
rlvr-data --mix gsm8k:0.5,mbpp:0.5 --split train --order gsm8k=configs/curricula/gsm8k-easy-first.txt
RLVR_S3_DATASETS=s3://bucket/datasets/ rlvr-data gsm8k   # S3, then RLVR_DATA_DIR, then the hub
rlvr-data toy --limit 16      # the synthetic task of the CPU demo (answer always 7)
rlvr-data gsm8k --template 'Q: {question}\nA:' --stop 'Q:' --stop '\n\n\n' --max-tokens 1024
rlvr-data math --split train --filter level=3,4,5 --template minerva --stop 'Problem:' --max-tokens 1024
rlvr-data apps --split train --filter difficulty=introductory,interview --source apps/
rlvr-data --mix gsm8k:1,math:1 --template 'gsm8k=Q: {question}\nA:' --template math=minerva --max-tokens gsm8k=512
rlvr-data gsm8k --chat --system "You are a careful solver." --thinking --source gsm8k/
rlvr-data allenai --chat --thinking     # AllenAI's RLVR-GSM-MATH-IF-Mixed-Constraints, each row to its verifier
rlvr-data allenai --source allenai/Dolci-Think-RL-7B --kinds math,ifeval,code --chat --thinking
rlvr-data allenai --chat --chat-template tulu_thinker_r1_style --thinking --max-tokens allenai/gsm8k=512
rlvr-data math500 --chat --chat-template my_template.jinja --thinking --source MATH-500/
""",
)


def _sources(values: tuple[str, ...], names: list[str]) -> dict[str, str | None]:
    out: dict[str, str | None] = {n: None for n in names}
    for v in values:
        name, sep, path = split_name(v)
        if sep and (name in SPECS or name in LM_TASKS):
            if name not in out:
                raise ConfigError(f"--source {v}: {name} is not in the mixture")
            out[name] = path
        elif len(names) == 1:
            out[names[0]] = v
        else:
            raise ConfigError(f"--source {v}: with several datasets write NAME=PATH")
    return out


@click.command(help=HELP)
@click.argument("name", required=False, type=click.Choice(list(dict.fromkeys([*SPECS, *LM_TASKS, *ALIASES]))))
@click.option("--split", help="Split (default: the dataset's evaluation split: test, or train for IF sets).")
@click.option("--source", "sources", multiple=True, metavar="PATH|NAME=PATH",
              help="Local file/folder or s3:// URI of the rows (repeat NAME=PATH for a mixture).")
@click.option("--fewshot-source", help="Where the few-shot split lives, if not beside --source.")
@click.option("--template", "templates", multiple=True, metavar="[NAME=]TEMPLATE",
              help=f"Prompt template: {', '.join(TEMPLATES)} or a format string (default: the dataset's).")
@click.option("--shots", type=click.IntRange(0), default=0, show_default=True, help="Few-shot examples.")
@click.option("--chat/--no-chat", default=False, show_default=True,
              help="Prompt as chat messages (for chat models) or one string (base models).")
@click.option("--system", metavar="TEXT", help="A system prompt, first in every chat prompt (needs --chat).")
@click.option("--thinking/--no-thinking", "thinking", default=None,
              help="Write \"thinking\": true/false into each record: the chat template's enable_thinking, and "
                   "answer-only judging in rlvr-verify  [default: no field]")
@click.option("--chat-template", metavar="FILE|NAME", type=click.Path(dir_okay=False),
              help="A chat template file (Jinja) replacing the tokenizer's, or one rlvr ships by name (tulu_thinker_r1_style) "
                   "(needs --chat; its path goes into each record).")
@click.option("--kinds", metavar="K,...", help="allenai: only rows of these kinds (gsm8k, math, strict_math, ifeval, "
                                               "ifeval_old, code, code_stdio); without it a row rlvr cannot verify stops the read.")
@click.option("--limit", type=click.IntRange(0), help="Emit at most this many records.")
@click.option("--shuffle", is_flag=True, help="Shuffle deterministically with --seed.")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed for --shuffle and --mix.")
@click.option("--shard", callback=shard_callback, metavar="I/N", help="Emit only shard I of N (0-based).")
@click.option("--mix", "mixture", metavar="NAME:W,...", help="Interleave several datasets by weight.")
@click.option("--filter", "filters", multiple=True, metavar="[NAME.]FIELD=V,...",
              help="Keep records whose FIELD is one of the values (repeatable).")
@click.option("--stop", "stops", multiple=True, metavar="[NAME=]TEXT", help="A stop string for the records (repeatable).")
@click.option("--max-tokens", "lengths", multiple=True, metavar="[NAME=]N", help="The records' generation length.")
@click.option("--assistant-prefix", "prefixes", multiple=True, metavar="[NAME=]TEXT",
              help="Text the answer starts with, appended to the prompt.")
@click.option("--order", "orders", multiple=True, metavar="FILE|NAME=FILE",
              help="Curriculum: emit the prompt ids listed in FILE (local or s3://), in that order; NAME=FILE "
                   "orders one dataset of a mixture (repeatable), the weights still interleave them.")
def cmd(name, split, sources, fewshot_source, templates, shots, chat, system, thinking, chat_template, kinds, limit,
        shuffle, seed, shard, mixture, filters, stops, lengths, prefixes, orders):
    if bool(name) == bool(mixture):
        raise click.UsageError("give a dataset NAME or --mix, not both or neither")
    name = canonical(name) if name else name
    weights = parse_mix(mixture) if mixture else {name: 1.0}
    if kinds and "allenai" not in weights:
        raise click.UsageError("--kinds selects rows of allenai (not among the datasets given)")
    srcs = _sources(sources, list(weights))
    names = list(weights)
    template = per_dataset(templates, names, "--template", once=True)
    stop = per_dataset(stops, names, "--stop")
    prefix = per_dataset(prefixes, names, "--assistant-prefix", once=True)
    max_tokens, kind_max_tokens = _lengths(lengths, names)
    row_filters = _filters(filters, names)
    per: dict[str, str] = {}
    whole = []
    for v in orders:
        n, sep, path = split_name(v)
        if sep and n in weights:
            per[n] = path
        elif sep and n in SPECS and not os.path.exists(v):
            raise click.BadParameter(f"{v}: {n} is not a dataset of this run", param_hint="--order")
        else:
            whole.append(v)
    if len(whole) > 1:
        raise click.BadParameter("one FILE for the whole output; NAME=FILE for each dataset of a mixture",
                                 param_hint="--order")

    def ids_of(path: str) -> list:
        ids = read_order(path)
        if not ids:
            raise ConfigError(f"--order: {path} lists no prompt ids")
        return ids

    def one(n: str) -> list[dict]:
        if n in LM_TASKS and (n not in SPECS or (shots and not template.get(n) and not chat)):
            # lm-eval's own task: its context for each document, few-shot examples drawn with --seed
            from rlvr.eval import tasks

            if (template.get(n) or chat or fewshot_source or system is not None or chat_template
                    or (split and split != tasks.standard(n).splits[0]) or row_filters.get(n) or stop.get(n)
                    or prefix.get(n) or max_tokens.get(n)):
                raise ConfigError(f"{n}: lm-eval's task fixes its prompts, splits, stops and lengths (no --template, "
                                  f"--chat, --system, --chat-template, --fewshot-source, --filter, --stop, --max-tokens "
                                  f"or --assistant-prefix; few-shot examples come from the folder given as --source)")
            # lm-eval's --limit (the first N documents of each subtask) holds the first N overall:
            # only those contexts are built, unless the whole split is shuffled, ordered or mixed
            first = limit if not (shuffle or mixture or orders) else None
            recs = [apply_chat_fields(r, ChatOptions(thinking=thinking))
                    for r in tasks.records(n, shots, seed, srcs[n], limit=first)]
            return select(recs, shuffle=shuffle, seed=seed)
        recs = load_records(n, split=split, source=srcs[n], template=template.get(n), shots=shots, chat=chat,
                            fewshot_source=fewshot_source, chat_options=ChatOptions(system, thinking, chat_template),
                            kinds=[k.strip() for k in kinds.split(",") if k.strip()] if kinds and n == "allenai"
                            else None, filters=row_filters.get(n), stop=stop.get(n), max_tokens=max_tokens.get(n),
                            kind_max_tokens=kind_max_tokens.get(n), assistant_prefix=prefix.get(n))
        if not recs:   # e.g. a zero-byte file left by an interrupted copy
            warn(f"{n}: {srcs[n] or 'its source'} holds no rows{f' of split {split}' if split else ''}")
        if n in per:
            return apply_order(recs, ids_of(per[n]), per[n])
        return select(recs, shuffle=shuffle, seed=seed)

    if mixture:
        recs = list(mix({n: one(n) for n in weights}, weights, seed=seed))
    else:
        recs = one(name)
    if whole:
        recs = apply_order(recs, ids_of(whole[0]), whole[0])
    recs = select(recs, limit=limit, shard=shard)
    with stdout_writer() as out:
        for rec in recs:
            out.write(rec)


def unescape(text: str) -> str:
    r"""\n, \t and \\ in a command-line value (a stop string or template that holds a newline)."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1] in "nt\\":
            out.append({"n": "\n", "t": "\t", "\\": "\\"}[text[i + 1]])
            i += 2
            continue
        out.append(c)
        i += 1
    return "".join(out)


def per_dataset(values: tuple[str, ...], names: list[str], option: str, once: bool = False, raw: bool = False) -> dict:
    """{dataset: value} (once) or {dataset: [values]} from [NAME=]VALUE options: NAME= applies to
    that dataset of the run, a bare VALUE to every dataset."""
    out: dict = {}
    for v in values:
        n, sep, rest = split_name(v)
        targets, value = ([n], rest) if sep and n in names else (names, v)
        if sep and n in SPECS and n not in names:
            raise ConfigError(f"{option} {v}: {n} is not a dataset of this run")
        value = value if raw else unescape(value)
        for t in targets:
            if once:
                if t in out and out[t] != value:
                    raise ConfigError(f"{option}: two values for {t}")
                out[t] = value
            else:
                out.setdefault(t, []).append(value)
    return out


def _lengths(values: tuple[str, ...], names: list[str]) -> tuple[dict[str, int], dict[str, dict[str, int]]]:
    """--max-tokens [NAME=]N and KIND=N (allenai/gsm8k=512: the rows of one kind of a mixed
    dataset) as ({dataset: N}, {dataset: {kind: N}})."""
    plain, kinds = [], {}
    for v in values:
        key, sep, n = split_name(v)
        if sep and key not in names:
            kinds[key] = _positive(n, v)   # a kind (allenai/gsm8k), else refused by split_kind_keys
        else:
            plain.append(v)
    whole = {n: _positive(v, v) for n, v in per_dataset(tuple(plain), names, "--max-tokens", once=True,
                                                        raw=True).items()}
    return whole, split_kind_keys(kinds, names, "--max-tokens")[1]


def _positive(v: str, given: str) -> int:
    try:
        n = int(v)
    except ValueError:
        n = 0
    if n < 1:
        raise ConfigError(f"--max-tokens {given}: expected a positive integer")
    return n


def _filters(values: tuple[str, ...], names: list[str]) -> dict[str, dict]:
    from rlvr.data.filters import parse_filter

    out: dict[str, dict] = {}
    for v in values:
        ds, field, vals = parse_filter(v)
        if ds is not None and ds not in names:
            raise ConfigError(f"--filter {v}: {ds} is not a dataset of this run")
        for t in [ds] if ds else names:
            out.setdefault(t, {})[field] = vals
    return out


main = run(cmd)


if __name__ == "__main__":
    main()
