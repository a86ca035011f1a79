"""rlvr-eval's library: canonical checkpoint evaluation.

    summaries = evaluate_checkpoint("results/run1/checkpoints/step_000100", "evals/step100",
                                    ["gsm8k", "ifeval"], EvalOptions(source={"gsm8k": "gsm8k/test.jsonl"}))

Sweeps over many checkpoints and GPUs (--jobs, --watch) are rlvr.eval.jobs; results
tables are rlvr.eval.table.

One evaluation composes the same three homes the commands use: rlvr.data.load_records
(prompts), rlvr.rollout (generation, resumable completions.jsonl) and
rlvr.verification.pool.VerifierPool (results.jsonl), then rlvr.verification.summary and
rlvr.passk for summary.json and pass_at_k.json. Canonical settings (BENCHMARKS, CANONICAL)
are fixed so numbers from different runs compare; docs/rollout.md lists them.

Layout: evaluate_checkpoint writes OUT/ for one benchmark, OUT/<benchmark>/ for several
(OUT/<benchmark>-pass@N/ in pass@k mode). A benchmark whose summary.json exists is done
and skipped; an interrupted one resumes from its completions.jsonl.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field

import orjson

from rlvr.records import atomic_write, dumps, write_json

IF_METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's canonical prompt and generation settings."""

    dataset: str
    split: str
    template: str | None        # rlvr.data template (None: the dataset's default)
    max_tokens: int
    stop: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("accuracy",)


BENCHMARKS: dict[str, Benchmark] = {
    "gsm8k": Benchmark("gsm8k", "test", "qa", 1024, ("Question:",)),
    "math": Benchmark("math", "test", "boxed", 2048),
    "math500": Benchmark("math500", "test", "boxed", 2048),
    "mbpp": Benchmark("mbpp", "test", "mbpp", 512, ("[DONE]",)),
    "humaneval": Benchmark("humaneval", "test", "humaneval", 512, ("\nclass", "\ndef", "\n#", "\nif", "\nprint")),
    "ifeval": Benchmark("ifeval", "train", "plain", 2048, (), IF_METRICS),
    "ifbench": Benchmark("ifbench", "train", "plain", 2048, (), IF_METRICS),
    "toy": Benchmark("toy", "test", "plain", 32),   # the CPU demo task (answer always 7)
}

# Greedy, one GPU, bf16, 90% of GPU memory, seed 42. pass@k samples at temperature 1.0.
CANONICAL = {"temperature": 0.0, "tensor_parallel_size": 1, "dtype": "bfloat16", "gpu_memory_utilization": 0.9,
             "seed": 42}
PASSK_TEMPERATURE = 1.0


@dataclass
class EvalOptions:
    """What may differ from the canonical settings (recorded in every summary.json)."""

    engine: str = "vllm"
    dtype: str = CANONICAL["dtype"]
    max_model_len: int | None = None
    kv_cache_gib: float | None = None
    gpus: list[str] | None = None          # one engine per entry; None: the visible device(s)
    source: dict[str, str] = field(default_factory=dict)   # benchmark -> local file/folder of its rows
    limit: int | None = None               # first N prompts (a smoke test, not a canonical number)
    max_tokens: int | None = None          # instead of the benchmark's (small-context models, smoke tests)
    chat: bool = False                     # prompts as chat messages (chat models)
    pass_at_k: int | None = None           # N samples at temperature 1.0, and pass@k
    verify_jobs: int | None = None
    progress: bool | None = None


def leaf(bench: str, opts: EvalOptions) -> str:
    return f"{bench}-pass@{opts.pass_at_k}" if opts.pass_at_k else bench


def is_done(out_dir: str) -> bool:
    return os.path.isfile(os.path.join(out_dir, "summary.json"))


def _settings(ckpt: str, bench: str, opts: EvalOptions):
    from rlvr.engines import EngineOptions, Sampling
    from rlvr.rollout import RolloutSettings

    b = BENCHMARKS[bench]
    n = opts.pass_at_k or 1
    sampling = Sampling(n=n, temperature=PASSK_TEMPERATURE if opts.pass_at_k else CANONICAL["temperature"],
                        max_tokens=opts.max_tokens or b.max_tokens, stop=b.stop, seed=CANONICAL["seed"])
    options = EngineOptions(dtype=opts.dtype, tensor_parallel_size=CANONICAL["tensor_parallel_size"],
                            gpu_memory_utilization=CANONICAL["gpu_memory_utilization"], seed=CANONICAL["seed"],
                            max_model_len=opts.max_model_len, kv_cache_gib=opts.kv_cache_gib)
    return RolloutSettings(model=ckpt, sampling=sampling, engine=opts.engine, options=options,
                           chat_template="auto", gpus=opts.gpus)


def prompts(bench: str, opts: EvalOptions) -> list[dict]:
    from rlvr.data import load_records

    b = BENCHMARKS[bench]
    recs = load_records(b.dataset, split=b.split, source=opts.source.get(bench), template=b.template, chat=opts.chat)
    return recs[: opts.limit] if opts.limit is not None else recs


def evaluate_checkpoint(ckpt: str, out: str, benchmarks: Sequence[str], opts: EvalOptions,
                        warn: Callable[[str], None] | None = None, subdirs: bool | None = None) -> dict[str, dict]:
    """Evaluate one checkpoint on each benchmark with one engine; returns {benchmark: summary}.
    Benchmarks already done (summary.json present) are skipped and their summary returned.
    subdirs (default: with several benchmarks) puts each in OUT/<benchmark>/."""
    from rlvr.rollout import build_engine

    if subdirs is None:
        subdirs = len(benchmarks) > 1
    dirs = {b: os.path.join(out, leaf(b, opts)) if subdirs else out for b in benchmarks}
    results = {b: orjson.loads(open(os.path.join(d, "summary.json"), "rb").read())
               for b, d in dirs.items() if is_done(d)}
    todo = [b for b in benchmarks if b not in results]
    if not todo:
        return results
    data = {b: prompts(b, opts) for b in todo}   # fail on data before paying for an engine
    engine = build_engine(_settings(ckpt, todo[0], opts), warn)
    try:
        for b in todo:
            results[b] = evaluate_one(ckpt, dirs[b], b, opts, data[b], engine, warn)
    finally:
        engine.close()
    return results


def evaluate_one(ckpt: str, out: str, bench: str, opts: EvalOptions, records: list[dict], engine,
                 warn: Callable[[str], None] | None = None) -> dict:
    """Rollout (resumable) -> verify -> summary.json [+ pass_at_k.json] in `out`."""
    from rlvr.rollout import run_to_file
    from rlvr.records import read_records
    from rlvr.verification.pool import VerifierPool
    from rlvr.verification.summary import summarize

    os.makedirs(out, exist_ok=True)
    settings = _settings(ckpt, bench, opts)
    t0 = time.monotonic()
    comp = os.path.join(out, "completions.jsonl")
    run_to_file(records, settings, comp, engine=engine, progress=opts.progress, warn=warn)
    t1 = time.monotonic()
    done = list(read_records([comp]))
    with VerifierPool(jobs=opts.verify_jobs) as pool:
        verified = list(pool.verify_records(done))
    atomic_write(os.path.join(out, "results.jsonl"), b"".join(dumps(r) for r in verified))
    t2 = time.monotonic()
    verify = summarize(verified)["all"]
    b = BENCHMARKS[bench]
    metrics = {m: verify.get(m) for m in b.metrics}
    summary = {
        "checkpoint": ckpt, "benchmark": bench, "mode": f"pass@{opts.pass_at_k}" if opts.pass_at_k else "greedy",
        "metrics": metrics, "records": len(verified),
        "prompt_too_long": sum(1 for r in verified if (r.get("generation") or {}).get("status") == "prompt_too_long"),
        "finish_reasons": _count(f for r in verified for f in r.get("finish_reasons") or []),
        "settings": {"dataset": b.dataset, "split": b.split, "template": b.template, "chat": opts.chat,
                     "source": opts.source.get(bench), "limit": opts.limit, "engine": opts.engine,
                     "sampling": settings.sampling.to_dict(), "engine_options": _engine_opts(settings.options),
                     "gpus": opts.gpus, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
        "verify": verify, "seconds": {"rollout": round(t1 - t0, 3), "verify": round(t2 - t1, 3)},
    }
    if opts.pass_at_k:
        from rlvr.passk import records_pass_at_k

        table = records_pass_at_k(verified, default_dataset=bench)
        write_json(os.path.join(out, "pass_at_k.json"), table)
        summary["metrics"].update({f"pass@{k}": table[f"pass@{k}"] for k in table["k"]})
    write_json(os.path.join(out, "summary.json"), summary)
    return summary


def _engine_opts(options) -> dict:
    d = asdict(options)
    d.pop("extra", None)
    return d


def _count(items) -> dict:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))
