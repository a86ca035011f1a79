"""Datasets to prompt records: the one home of data loading for rlvr-data, -eval and -train.

    recs = load_records("gsm8k", split="test", source="data/gsm8k/test.jsonl", shots=5)
    recs = select(recs, shuffle=True, seed=1, limit=100, shard=(0, 4))
    stream = mix({"gsm8k": recs_a, "math": recs_b}, {"gsm8k": 0.25, "math": 0.75}, seed=0)

Sources are tried in order (rlvr.data.sources.locate, the one resolution every command uses,
lm-eval's tasks included): `source` (a local file or folder, or an s3:// object or folder),
then $RLVR_S3_DATASETS/<name>/ or $RLVR_S3_DATASETS/<name>_<split>/ (S3 folders, fetched into
the local cache), then $RLVR_DATA_DIR/<name>/ or $RLVR_DATA_DIR/<name>_<split>/, then the
Hugging Face hub. A dataset may go by other names too (`if_multi_constraints` is `if_multi`);
its records always carry its own name. See rlvr.data.catalog for the datasets and
rlvr.data.templates for the prompt templates.
"""

from __future__ import annotations

import os
import random
from collections.abc import Iterator

from rlvr.errors import BadInput, ConfigError, Failure
from rlvr.data.catalog import ALIASES, SPECS, RowError, Spec, benchmark_name, canonical, canonical_id, split_name, toy_rows
from rlvr.data.sources import load_hub, load_rows, locate
from rlvr.data.templates import TEMPLATES, ChatOptions, render

__all__ = ["SPECS", "ALIASES", "TEMPLATES", "ChatOptions", "benchmark_name", "canonical", "canonical_id", "split_name",
           "load_records", "raw_rows", "select", "mix", "apply_order", "parse_mix", "read_order", "apply_chat_fields",
           "kind_keys", "split_kind_keys"]


def _spec(name: str) -> Spec:
    if canonical(name) not in SPECS:
        raise ConfigError(f"unknown dataset {name!r} (known: {', '.join(SPECS)})")
    return SPECS[canonical(name)]


def kind_keys(name: str) -> list[str]:
    """The per-kind keys of a dataset whose rows name their own kind (the records' `dataset`
    values, e.g. allenai/gsm8k, allenai/math, allenai/ifeval); [] for any other dataset."""
    if canonical(name) != "allenai":
        return []
    from rlvr.data.allenai import KINDS

    return [f"allenai/{k}" for k in KINDS]


def split_kind_keys(table: dict, names: list[str], what: str) -> tuple[dict, dict[str, dict]]:
    """A per-dataset table ({gsm8k: 512, allenai/gsm8k: 512}) as (the entries keyed by a dataset
    of the run, {dataset: {kind key: value}}); ConfigError naming `what` for a key that is
    neither a dataset of the run nor a kind of one (kind_keys)."""
    whole, kinds = {}, {}
    for key, value in table.items():
        if key in names:
            whole[key] = value
            continue
        base = str(key).split("/", 1)[0]
        if "/" in str(key) and base in names:
            known = kind_keys(base)
            if key not in known:
                raise ConfigError(f"{what}: {key} is not a kind of {base} "
                                  + (f"(kinds: {', '.join(known)})" if known else
                                     "(per-kind keys apply to a dataset whose rows name their kind: allenai)"))
            kinds.setdefault(base, {})[key] = value
            continue
        extra = [k for n in names for k in kind_keys(n)]
        raise ConfigError(f"{what}: {key} is not a dataset of this run ({', '.join(names)})"
                          + (f" nor one of its kinds ({', '.join(extra)})" if extra else ""))
    return whole, kinds


def raw_rows(name: str, split: str | None = None, source: str | None = None) -> tuple[list[dict], str]:
    """(raw rows of one split of a dataset, where they came from), from `source` or wherever
    rlvr.data.sources.locate finds them (S3, the local data folder, the hub). The rows of a
    split kept in one file with the others (MBPP's task id ranges) are those of the split."""
    spec = _spec(name)
    split = split or spec.default_split
    if spec.name == "toy":
        return toy_rows(512 if split == "train" else 64, seed=0 if split == "train" else 1), "toy"
    splitless = spec.serves_splitless(split)
    loc = locate((spec.name, *spec.aliases), split, source, splitless=splitless)
    if loc.path is None:
        hub_split = spec.hub_splits.get(split, split)
        rows = []
        for config in spec.hub_configs or (spec.hub_config,):
            rows.extend(load_hub(spec.hub, hub_split, config, loc.tried, spec.name))
        where = f"hub:{spec.hub}"
    else:
        rows = load_rows(loc.path, split, whole=loc.whole, dataset=spec.name, splitless=splitless)
        where = loc.label
    if spec.split_filter is not None and rows and "task_id" in rows[0]:
        rows = [r for r in rows if spec.split_filter(r, split)]
    return rows, where


def _convert(spec: Spec, rows: list[dict], split: str, where: str, index: list[int] | None = None) -> list[dict]:
    """Records of raw rows; index: each row's position in its source (when rows were left out)."""
    out = []
    skipped = 0
    for i, row in zip(index if index is not None else range(len(rows)), rows):
        try:
            rec = spec.convert(row, i, split)
        except RowError as e:
            field = f", field {e.field}" if e.field else ""
            raise BadInput(f"{where}: row {i + 1}: {e} (dataset {spec.name}{field})") from None
        if rec is None:  # a row that cannot be graded (APPS rows without tests)
            skipped += 1
            continue
        rec.setdefault("dataset", spec.name)        # a mixed dataset names each row's kind itself
        rec.setdefault("verifier", spec.verifier)
        out.append(rec)
    if skipped:
        from rlvr.messages import warn

        warn(f"{where}: {skipped} of {len(rows)} {spec.name} rows have no tests and were left out")
    return out


def load_records(name: str, split: str | None = None, source: str | None = None, template: str | None = None,
                 shots: int = 0, chat: bool = False, fewshot_source: str | None = None,
                 chat_options: ChatOptions | None = None, kinds: list[str] | None = None,
                 filters: dict | None = None, stop: list[str] | None = None, max_tokens: int | None = None,
                 assistant_prefix: str | None = None, keep_question: bool = False,
                 kind_max_tokens: dict[str, int] | None = None) -> list[dict]:
    """Prompt records of a dataset, in the dataset's own order. chat_options: a system
    prompt, the thinking switch and a chat template file (rlvr.data.templates). kinds: for
    a dataset whose rows name their own verifier (allenai), only rows of these kinds.

    template: a template name or a format string ("Q: {question}\nA:"); filters: {field:
    values} (rlvr.data.filters); stop and max_tokens: written into every record (stop
    strings join the dataset's own); kind_max_tokens: {kind key: N} the length of the rows
    of one kind of a mixed dataset ({"allenai/gsm8k": 512}, kind_keys), instead of
    max_tokens; assistant_prefix: text the answer starts with,
    appended to the prompt (chat prompts: a final assistant message the model continues);
    keep_question: with the task text the template wrapped (`question`; a distillation
    teacher's prompt may use it)."""
    from rlvr.data import filters as rowfilters
    from rlvr.data.templates import check_format, is_format

    try:
        opts = (chat_options or ChatOptions()).check(chat)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    spec = _spec(name)
    split = split or spec.default_split
    template = template or spec.template
    if template not in TEMPLATES and not is_format(template):
        raise ConfigError(f"unknown template {template!r} (known: {', '.join(TEMPLATES)}, or a format string "
                          f"such as 'Q: {{question}}\\nA:')")
    for what, n in [(name, max_tokens), *(kind_max_tokens or {}).items()]:
        if n is not None and (isinstance(n, bool) or not isinstance(n, int) or n < 1):
            raise ConfigError(f"max_tokens for {what} must be a positive integer, got {n!r}")
    if kind_max_tokens:
        split_kind_keys(kind_max_tokens, [canonical(name)], "max_tokens")
    if stop is not None and (not isinstance(stop, list) or not all(isinstance(x, str) and x for x in stop)):
        raise ConfigError(f"stop strings for {name} must be a list of non-empty strings, got {stop!r}")
    rows, where = raw_rows(spec.name, split, source)
    index = None
    if kinds is not None:
        if spec.name != "allenai":
            raise ConfigError(f"{name}: kinds select rows of a mixed dataset (allenai), not of {name}")
        from rlvr.data.allenai import KINDS, row_kind

        bad = sorted(set(kinds) - set(KINDS))
        if bad:
            raise ConfigError(f"kinds: {bad[0]!r} is not a kind rlvr verifies (known: {', '.join(KINDS)})")
        index = [i for i, r in enumerate(rows) if row_kind(r) in kinds]
        rows = [rows[i] for i in index]
    recs = _convert(spec, rows, split, where, index)
    recs = rowfilters.apply(recs, rowfilters.compile_filters(filters, name), f"filters of {name}")
    if is_format(template) and recs:
        try:
            check_format(template, recs[0])
        except ValueError as e:
            raise ConfigError(str(e)) from None
    shot_pairs: list[tuple[dict, str]] = []
    if shots:
        fs_split = spec.fewshot_split
        if fs_split is None:
            raise ConfigError(f"{name} has no few-shot split; use --shots 0")
        src = fewshot_source
        if src is None and source is not None:
            if not os.path.isdir(source) and spec.split_filter is None:
                raise ConfigError(f"few-shot examples for {name} come from its {fs_split!r} split, which {source} "
                                  f"does not hold: pass --fewshot-source FILE")
            src = source
        try:
            fs_rows, fs_where = raw_rows(spec.name, fs_split, src)
        except Failure as e:
            raise ConfigError(f"few-shot examples for {name} come from its {fs_split!r} split: {e.message} "
                              f"(pass --fewshot-source FILE)") from None
        if len(fs_rows) < shots:
            raise ConfigError(f"{fs_where}: only {len(fs_rows)} few-shot rows for --shots {shots}")
        fs_recs = _convert(spec, fs_rows[:shots], fs_split, fs_where)
        sol = spec.solution or (lambda r: str(r.get("answer", "")))
        shot_pairs = [(r, sol(raw)) for r, raw in zip(fs_recs, fs_rows[:shots])]
    for rec in recs:
        rec["prompt"] = render(template, rec, shot_pairs, chat, opts.system)
        if assistant_prefix:
            if isinstance(rec["prompt"], str):
                rec["prompt"] += assistant_prefix
            else:
                rec["prompt"].append({"role": "assistant", "content": assistant_prefix})
        apply_chat_fields(rec, opts)
        for k in [k for k in rec if k.startswith("_") or (k == "question" and not keep_question)]:
            del rec[k]
        if stop:
            rec["stop"] = list(dict.fromkeys([*(rec.get("stop") or []), *stop]))
        n = (kind_max_tokens or {}).get(rec.get("dataset"), max_tokens)
        if n is not None:
            rec["max_tokens"] = n
    return recs


def apply_chat_fields(rec: dict, opts: ChatOptions) -> dict:
    """The record fields the chat options set: ``thinking`` (answer-only judging and the
    template's enable_thinking) and ``chat_template`` (the template file's path)."""
    if opts.thinking is not None:
        rec["thinking"] = opts.thinking
    if opts.chat_template is not None:
        rec["chat_template"] = opts.chat_template
    return rec


def select(recs: list[dict], shuffle: bool = False, seed: int = 0, limit: int | None = None,
           shard: tuple[int, int] | None = None) -> list[dict]:
    """Shuffle (seeded), then limit, then take shard I of N (round robin), in that order, so
    that N shards of a limited set partition exactly that set."""
    out = list(recs)
    if shuffle:
        random.Random(seed).shuffle(out)
    if limit is not None:
        out = out[:limit]
    if shard is not None:
        i, n = shard
        out = out[i::n]
    return out


def parse_mix(spec: str) -> dict[str, float]:
    """'gsm8k:0.25,math:0.75' -> {'gsm8k': 0.25, 'math': 0.75} (weights need not sum to 1)."""
    weights: dict[str, float] = {}
    for part in spec.split(","):
        part = part.strip()
        if not part:
            continue
        name, sep, w = part.partition(":")
        try:
            weight = float(w) if sep else 1.0
        except ValueError:
            raise ConfigError(f"--mix: {part!r} is not NAME:WEIGHT") from None
        if not 0 < weight < float("inf"):
            raise ConfigError(f"--mix: weight of {name} must be a positive finite number, got {w}")
        canon = _spec(name).name
        if canon in weights:   # the last weight would silently win
            raise ConfigError(f"--mix: {canon} is named twice")
        weights[canon] = weight
    if not weights:
        raise ConfigError("--mix: empty mixture")
    return weights


def mix(streams: dict[str, list[dict]], weights: dict[str, float], seed: int = 0) -> Iterator[dict]:
    """Interleave datasets by weight, deterministically for a seed: each next record comes from
    dataset d with probability weight[d] / (sum of weights of datasets not yet exhausted)."""
    rng = random.Random(seed)
    pos = {d: 0 for d in streams}
    live = [d for d in streams if streams[d]]
    while live:
        total = sum(weights[d] for d in live)
        x = rng.random() * total
        for d in live:
            x -= weights[d]
            if x < 0:
                break
        yield streams[d][pos[d]]
        pos[d] += 1
        if pos[d] >= len(streams[d]):
            live.remove(d)


def read_order(path: str) -> list[tuple[str, int]]:
    """Prompt ids (with their line numbers) from an order file: one id per line, or JSONL
    lines with an "id"; '#' comments and blank lines are skipped. Local or s3://. An id under
    another name of its dataset (if_multi_constraints/k2) is read as its own (if_multi/k2)."""
    import orjson

    from rlvr.records import RecordError

    if path.startswith("s3://"):
        from rlvr.s3 import download_cached

        local = download_cached(path)
    else:
        local = path
    try:
        with open(local, encoding="utf-8-sig") as fh:
            lines = fh.read().splitlines()
    except OSError as e:
        raise Failure(f"{path}: cannot read order file: {e.strerror}") from None
    ids = []
    for n, ln in enumerate(lines, 1):
        s = ln.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("{"):
            try:
                s = orjson.loads(s)["id"]
            except (orjson.JSONDecodeError, KeyError, TypeError):
                raise RecordError('expected an id or a JSON object with "id"', path, n, "id") from None
        ids.append((canonical_id(str(s)), n))
    return ids


def apply_order(recs: list[dict], order: list[tuple[str, int]], path: str = "order",
                unique: bool = True) -> list[dict]:
    """The records named by an order file, in its order (a curriculum). Unknown ids fail, and
    so does an id listed twice when unique (rlvr-data: two records with one id would collide
    wherever records are keyed by id, such as resumed rollouts and pass@k groups). Otherwise
    (training) a repeat is a copy whose id gets "#2", "#3", ..., so that its samples, seeds
    and traces stay its own."""
    from rlvr.records import RecordError

    by_id = {r["id"]: r for r in recs}
    out = []
    seen: dict[str, list[int]] = {}
    for rid, line in order:
        if rid not in by_id:
            raise RecordError(f"unknown prompt id {rid!r}", path, line, "id")
        if rid in seen:
            if unique:
                raise RecordError(f"prompt id {rid!r} is listed twice (first on line {seen[rid][0]})", path, line, "id")
            seen[rid].append(line)
            out.append(dict(by_id[rid], id=f"{rid}#{len(seen[rid])}"))
            continue
        seen[rid] = [line]
        out.append(by_id[rid])
    return out
