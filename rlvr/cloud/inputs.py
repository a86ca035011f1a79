"""The s3:// inputs a SageMaker job will read, checked before rlvr-submit sends anything.

    needed = job_inputs(cfg, channels, env)      # what the config, --input and --env name on S3
    for line in missing(needed, s3_client):      # one line per input that is not there
        ...

A job that starts without its model, dataset or curriculum fails minutes later, after an
instance was paid for, with the reason deep in its log. What is checked, with read-only
calls (HeadObject, ListObjectsV2 of one key):

- ``model.path: s3://...``: a folder holding ``config.json`` (the model the engines and the
  trainer load); skipped when ``--input model=...`` replaces it;
- ``data.source`` values that are s3:// URIs: an object, or a folder holding something;
- ``data.order`` (a curriculum file, or one per dataset of a mixture): an object;
- each dataset of ``data.dataset`` / ``data.mix`` without a source, when the job's
  environment (``--env``) sets ``RLVR_S3_DATASETS`` and no ``--input data`` channel is
  given: ``$RLVR_S3_DATASETS/NAME/`` or ``$RLVR_S3_DATASETS/NAME_<split>/`` holds the split,
  judged from their listings as rlvr.data.sources.locate judges them (a split-named folder or
  file; a file whose name names no split only for a dataset of one split);
- ``teacher.model: s3://...`` (distillation): a folder holding ``config.json``;
- validation (``eval.benchmarks``, ``eval.source``) and ``--eval-config`` (its ``benchmarks``
  and the ``--source`` values of its ``args``): s3:// sources as data sources above, and each
  benchmark's dataset without a source under ``RLVR_S3_DATASETS`` (its evaluated split), as
  the training datasets;
- ``--input NAME=s3://...`` channels: the prefix holds something (SageMaker refuses to start
  a job whose channel is empty).

Access denied to the submitter is reported as a warning, not as missing: the job's role may
still read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

DATASETS_ENV = "RLVR_S3_DATASETS"


@dataclass(frozen=True)
class Input:
    what: str                   # where it is named: model.path, data.source.gsm8k, data.order, --input data
    uris: tuple[str, ...]       # any of them will do (a dataset's NAME/ or NAME_<split>/)
    kind: str                   # model (a folder with config.json), data (object or folder), file, prefix, dataset
    split: str | None = None    # dataset: the split the job reads
    splitless: bool = True      # dataset: whether a file naming no split may serve it (Spec.serves_splitless)


def _s3(value) -> bool:
    return isinstance(value, str) and value.startswith("s3://")


def _benchmark_data(bench: str) -> tuple[str, str] | None:
    """(dataset, evaluated split) of an rlvr-eval benchmark, None for one rlvr does not know."""
    from rlvr.data import benchmark_name
    from rlvr.eval import runner
    from rlvr.eval.tasks import STANDARD

    bench = benchmark_name(bench).partition(":")[0]
    if bench in runner.BENCHMARKS:
        return runner.BENCHMARKS[bench].dataset, runner.BENCHMARKS[bench].split
    if bench in STANDARD:
        return STANDARD[bench].data, STANDARD[bench].splits[0]
    return None


def _eval_sources(args: list[str], benchmarks: list[str]) -> dict[str, str]:
    """{benchmark or dataset: value} of the --source options among rlvr-eval arguments."""
    from rlvr.data import split_name

    values = [a.split("=", 1)[1] for a in args if a.startswith("--source=")]
    values += [b for a, b in zip(args, args[1:]) if a == "--source"]
    out = {}
    for v in values:
        name, sep, path = split_name(v)
        if sep and "/" not in name and ":" not in name:
            out[name] = path
        elif len(benchmarks) == 1:
            out[benchmarks[0]] = v
    return out


def job_inputs(cfg, channels: dict[str, str], env: dict[str, str], eval_spec=None) -> list[Input]:
    """The s3:// inputs of a job running `cfg` (a TrainConfig, --set applied) with these input
    channels and job environment variables, and the evaluation beside it (an EvalSpec of
    --eval-config, or None). cfg None: an eval-only job (rlvr-submit --eval), which reads
    the evaluation's inputs only."""
    out: list[Input] = []
    if cfg is None:
        from rlvr.train.config import TrainConfig

        cfg = TrainConfig()
        cfg.data.dataset, cfg.data.mix, cfg.eval.benchmarks = None, None, []
    if _s3(cfg.model.path) and "model" not in channels:
        out.append(Input("model.path", (cfg.model.path,), "model"))
    if _s3(cfg.teacher.model):
        out.append(Input("teacher.model", (cfg.teacher.model,), "model"))
    sources = dict(cfg.data.source or {})
    for name, uri in sorted(sources.items()):
        if _s3(uri):
            out.append(Input(f"data.source.{name}", (uri,), "data"))
    order = cfg.data.order
    for name, uri in (sorted(order.items()) if isinstance(order, dict) else [("", order)]):
        if _s3(uri):
            out.append(Input(f"data.order.{name}" if name else "data.order", (uri,), "file"))
    prefix = (env.get(DATASETS_ENV) or "").strip()
    base = prefix.rstrip("/") + "/" if _s3(prefix) and "data" not in channels else None
    # (who reads it, dataset, split) of every dataset that RLVR_S3_DATASETS would serve
    wanted: list[tuple[str, str, str]] = []
    names = list(cfg.data.mix or {}) or ([cfg.data.dataset] if cfg.data.dataset else [])
    wanted += [("", n, cfg.data.split or "train") for n in names if n not in sources]
    evals = [("eval", list(cfg.eval.benchmarks), dict(cfg.eval.source or {}))]
    if eval_spec is not None and eval_spec.harness in ("rlvr", "lm-eval"):
        benches = list(dict.fromkeys([*eval_spec.benchmarks, *(eval_spec.job_benchmarks or [])]))
        evals.append(("--eval-config", benches, _eval_sources(list(eval_spec.args), benches)))
    for what, benches, given in evals:
        from rlvr.eval.runner import source_for

        for name, uri in sorted(given.items()):
            if _s3(uri):
                out.append(Input(f"{what}.source.{name}" if what == "eval" else f"{what} --source {name}", (uri,), "data"))
        for b in benches:
            found = _benchmark_data(b)
            if found is not None and source_for(b.partition(":")[0], given) is None \
                    and source_for(found[0], given) is None:
                wanted.append((f"{what} benchmark {b}: ", *found))
    seen = set()
    for who, name, split in wanted if base is not None else []:
        if name != "toy" and (name, split) not in seen:
            from rlvr.data.catalog import SPECS, canonical

            seen.add((name, split))
            spec = SPECS.get(canonical(name))
            # every name the dataset goes by, NAME/ then NAME_<split>/ each, in locate's order
            names = (spec.name, *spec.aliases) if spec is not None else (name,)
            out.append(Input(f"{who}dataset {name} ({DATASETS_ENV})",
                             tuple(u for n in names for u in (f"{base}{n}/", f"{base}{n}_{split}/")),
                             "dataset", split, spec.serves_splitless(split) if spec is not None else True))
    for name, uri in sorted(channels.items()):
        if _s3(uri):
            out.append(Input(f"--input {name}", (uri,), "prefix"))
    return out


def _exists(s3, uri: str, kind: str) -> str | None:
    """None when `uri` is there as `kind`, else why not (one phrase)."""
    from rlvr.s3 import parse_uri

    bucket, key = parse_uri(uri)

    def head(k: str) -> bool:
        try:
            s3.head_object(Bucket=bucket, Key=k)
            return True
        except Exception as e:  # noqa: BLE001 - 404 is "not there"; others go up
            if _code(e) in ("404", "NoSuchKey", "NotFound"):
                return False
            raise

    def listed(prefix: str) -> bool:
        return bool(s3.list_objects_v2(Bucket=bucket, Prefix=prefix, MaxKeys=1).get("KeyCount"))

    if kind == "file":
        return None if key and not key.endswith("/") and head(key) else "no such S3 object"
    if kind == "prefix":
        return None if listed(key) else "nothing under this S3 prefix"
    folder = key.rstrip("/") + "/" if key.strip("/") else ""
    if kind == "data":
        if key and not key.endswith("/") and head(key):
            return None
        return None if listed(folder) else "no such S3 object or folder"
    # a model: a folder with config.json at its top
    if head(folder + "config.json"):
        return None
    return "holds no config.json (not a model folder)" if listed(folder) else "no such S3 folder"


def _dataset_missing(s3, inp: Input) -> str | None:
    """None when NAME/ or NAME_<split>/ (inp.uris: pairs of them, one per name the dataset goes
    by) holds the split as the job's locate will find it, else why not."""
    from rlvr.data.sources import NAMED, SPLITLESS, probe_keys
    from rlvr.s3 import parse_uri

    fallback, anything = None, False
    for i, uri in enumerate(inp.uris):
        bucket, key = parse_uri(uri)
        folder = key.rstrip("/") + "/"
        keys = [o["Key"][len(folder):] for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket,
                                                                                                Prefix=folder)
                for o in page.get("Contents", []) or [] if not o["Key"].endswith("/")]
        anything = anything or bool(keys)

        def saved() -> str | None:
            import json

            try:
                body = s3.get_object(Bucket=bucket, Key=folder + "state.json")["Body"].read()
                split = json.loads(body).get("_split")
            except Exception:  # noqa: BLE001 - no state.json, or not JSON: no split recorded
                return None
            return split if isinstance(split, str) and split else None

        status, _, what = probe_keys(keys, inp.split, i % 2 == 1, saved)
        if status == NAMED:
            return None
        if status == SPLITLESS and fallback is None:
            fallback = uri + what
    if fallback is not None:
        return None if inp.splitless else (f"{fallback} names no split, so it is not taken as the {inp.split!r} "
                                           f"split (name it {inp.split}.jsonl, or use a NAME_{inp.split}/ folder)")
    return f"no {inp.split!r} split under these S3 prefixes" if anything else "nothing under this S3 prefix"


def _code(e: BaseException) -> str | None:
    from rlvr.cloud.aws import error_code

    return error_code(e)


def missing(inputs: list[Input], s3, warn: Callable[[str], None]) -> list[str]:
    """One line per input that is not on S3 ("WHAT URI: why"); an input the submitter may not
    read is warned about (the job's role may) and not counted."""
    from rlvr.cloud.aws import redact

    lines = []
    for inp in inputs:
        why = None
        try:
            if inp.kind == "dataset":
                why = _dataset_missing(s3, inp)
            for uri in inp.uris if inp.kind != "dataset" else ():
                why = _exists(s3, uri, inp.kind)
                if why is None:
                    break
        except Exception as e:  # noqa: BLE001 - one line per input, whatever boto raised
            code = _code(e)
            if code in ("403", "AccessDenied"):
                warn(f"warning: cannot check {inp.what} {inp.uris[0]} (access denied); the job's role may read it")
                continue
            why = ("bucket does not exist" if code == "NoSuchBucket"
                   else f"cannot check it: {code or type(e).__name__}: {redact(str(e))[:200]}")
        if why is not None:
            where = " or ".join(inp.uris)
            lines.append(f"{inp.what} {where}: {why}")
    return lines
