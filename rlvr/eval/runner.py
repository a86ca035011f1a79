"""rlvr-eval's runner: checkpoint evaluation under the standard template.

    summaries = evaluate_checkpoint("results/run1/checkpoints/step_000100", "evals/step100",
                                    ["gsm8k", "ifeval"], EvalOptions(source={"gsm8k": "gsm8k/test.jsonl"}))

Sweeps over many checkpoints and GPUs (--jobs, --watch) are rlvr.eval.jobs; results
tables are rlvr.eval.table.

One evaluation composes the same three homes the commands use: rlvr.data.load_records or,
for lm-eval's tasks, rlvr.eval.tasks (prompts and lm-eval's scores), rlvr.rollout (generation,
resumable completions.jsonl) and rlvr.verification.pool.VerifierPool (results.jsonl), then
rlvr.verification.summary and
rlvr.passk for summary.json and pass_at_k.json. Canonical settings (BENCHMARKS, CANONICAL)
are fixed so numbers from different runs compare; docs/rollout.md lists them.

Layout: evaluate_checkpoint writes OUT/ for one benchmark, OUT/<benchmark>/ for several
(OUT/<benchmark>-pass@N/ in pass@k mode). A benchmark whose summary.json exists is done
and skipped; an interrupted one resumes from its completions.jsonl.

With EvalOptions.tools (rlvr-eval --tools python) the rollout is rlvr.rollout's tool loop
(rlvr.tools): completions are whole trajectories, records keep their turns (trajectories),
the verifier scores each completion as rlvr-verify does (its extraction finds the final
answer), and summary.json adds "tools" (the settings, calls, their statuses).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any
from dataclasses import asdict, dataclass, field

import orjson

from rlvr.data.catalog import split_name
from rlvr.errors import RlvrError, UsageError
from rlvr.records import atomic_write, dumps, write_json

IF_METRICS = ("prompt_level_strict_acc", "inst_level_strict_acc", "prompt_level_loose_acc", "inst_level_loose_acc")


@dataclass(frozen=True)
class Benchmark:
    """A benchmark's canonical prompt and generation settings."""

    dataset: str
    split: str
    template: str | None        # rlvr.data template or format string (None: the dataset's default)
    max_tokens: int
    stop: tuple[str, ...] = ()
    metrics: tuple[str, ...] = ("accuracy",)
    breakdown: tuple[str, ...] = ()   # record fields the accuracy is also given by (subject, level)
    passk: int | None = None          # a pass@k benchmark: samples per prompt when --pass-at-k is not given
    top_p: float = 1.0                # sampling of pass@k mode (temperature 1.0)
    top_k: int = 0


# The users' own evaluation protocol (halflearned/rlvr-experiments: scripts/eval_checkpoint.py,
# greedy, 0-shot, rlvr's verifiers; scripts/eval_pass_at_k.py for AIME and BeyondAIME).
# Named apart from lm-eval's tasks of the same data: gsm8k is lm-eval's 8-shot task (256
# tokens), gsm8k_0shot_qa theirs; ifeval is lm-eval's scoring (1,280 tokens), ifeval_rlvr theirs.
QA_STOPS = ("[Question]", "Question:", "Q:", "\n\n\n")
PROBLEM_STOPS = ("Problem:", "\n\n\n")
PROBLEM = "Problem:\n{question}\n\nSolution:"
PROTOCOL: dict[str, Benchmark] = {
    "gsm8k_0shot_qa": Benchmark("gsm8k", "test", "Q: {question}\nA:", 1024, QA_STOPS),
    "math_0shot_minerva": Benchmark("math", "test", PROBLEM, 1024, PROBLEM_STOPS, breakdown=("subject", "level")),
    "mmlu_0shot_letter": Benchmark("mmlu", "test", "mmlu", 32, ("\n", "Question:", "Q:"), breakdown=("subject",)),
    "ifeval_rlvr": Benchmark("ifeval", "train", "plain", 2048, (), IF_METRICS),
    "aime_passk": Benchmark("aime", "train", PROBLEM, 1024, PROBLEM_STOPS, passk=32, top_p=0.95, top_k=20),
    "beyondaime_passk": Benchmark("beyondaime", "test", PROBLEM, 1024, PROBLEM_STOPS, passk=32, top_p=0.95, top_k=20),
}

# rlvr's own benchmarks (prompts from rlvr.data templates). The lm-eval standard tasks
# (gsm8k, gsm8k_cot, minerva_math, hendrycks_math, math_qwen, mbpp, humaneval, ifeval) come
# from rlvr.eval.tasks: lm-eval's prompts, stops, generation lengths and scores.
BENCHMARKS: dict[str, Benchmark] = {
    "math": Benchmark("math", "test", "boxed", 2048),
    "math500": Benchmark("math500", "test", "boxed", 2048),
    "ifbench": Benchmark("ifbench", "train", "plain", 2048, (), IF_METRICS),
    "if_multi": Benchmark("if_multi", "train", "plain", 2048, (), IF_METRICS),
    "toy": Benchmark("toy", "test", "plain", 32),   # the CPU demo task (answer always 7)
    **PROTOCOL,
}

# lm-eval's standard template: greedy, one GPU (never tensor parallel), bf16, 80% of GPU
# memory, context 4096, seed 42. pass@k samples at temperature 1.0.
CANONICAL = {"temperature": 0.0, "tensor_parallel_size": 1, "dtype": "bfloat16", "gpu_memory_utilization": 0.8,
             "seed": 42, "max_model_len": 4096}


def known_benchmarks() -> list[str]:
    from rlvr.eval.tasks import STANDARD

    return list(STANDARD) + list(BENCHMARKS)


def dataset_of(bench: str) -> str:
    """The rlvr dataset a benchmark's rows are (gsm8k_cot: gsm8k, minerva_math: math, ...)."""
    from rlvr.eval.tasks import STANDARD

    if bench in BENCHMARKS:
        return BENCHMARKS[bench].dataset
    return STANDARD[bench].data if bench in STANDARD else bench


def source_for(bench: str, sources: dict[str, str]) -> str | None:
    """A benchmark's rows: given for the benchmark itself, else for its dataset (`--source
    math=DIR` serves minerva_math, math_qwen, hendrycks_math and math); None: found as every
    dataset's are (rlvr.data.sources.locate)."""
    return sources.get(bench) or sources.get(dataset_of(bench))


def parse_sources(values: Sequence[str], benchmarks: Sequence[str]) -> dict[str, str]:
    """--source values ([NAME=]PATH) -> {benchmark or dataset: PATH}; a bare PATH needs one
    benchmark. UsageError for a NAME that is neither a benchmark nor one's dataset."""
    names = set(benchmarks) | {dataset_of(b) for b in benchmarks}
    out: dict[str, str] = {}
    for v in values:
        name, sep, path = split_name(v)
        if sep and name in names:
            out[name] = path
        elif sep and (name in known_benchmarks() or name in {dataset_of(b) for b in known_benchmarks()}):
            raise UsageError(f"--source {v}: {name} is not a benchmark (or the dataset of one) of this evaluation "
                             f"({', '.join(benchmarks)})")
        elif len(benchmarks) == 1:
            out[benchmarks[0]] = v
        else:
            raise UsageError(f"--source {v!r}: with several benchmarks write NAME=PATH (NAME: a benchmark, or its "
                             "dataset: gsm8k, math, mbpp, humaneval, ifeval, ...)")
    return out


def check_source_paths(sources: dict[str, str]) -> None:
    """UsageError for a --source that looks like a local path (rlvr.data.sources.looks_like_path)
    and does not exist: a mistyped path fails at once, before any model or child starts."""
    from rlvr.data.sources import check_local

    for path in sources.values():
        try:
            check_local(path)
        except RlvrError:
            raise UsageError(f"--source {path}: no such file or folder") from None


PASSK_TEMPERATURE = 1.0


@dataclass
class EvalOptions:
    """What may differ from the canonical settings (recorded in every summary.json)."""

    engine: str = "vllm"
    dtype: str = CANONICAL["dtype"]
    max_model_len: int | None = CANONICAL["max_model_len"]
    shots: int | None = None               # lm-eval tasks: few-shot examples (None: the task's standard count)
    kv_cache_gib: float | None = None
    gpus: list[str] | None = None          # one engine per entry; None: the visible device(s)
    source: dict[str, str] = field(default_factory=dict)   # benchmark -> local file/folder of its rows
    limit: int | None = None               # first N prompts (a smoke test, not a canonical number)
    max_tokens: int | None = None          # instead of the benchmark's (small-context models, smoke tests)
    max_tokens_by: dict[str, int] = field(default_factory=dict)   # per benchmark, before max_tokens
    chat: bool = False                     # prompts as chat messages (chat models)
    system: str | None = None              # a system prompt (chat; rlvr.data.templates.ChatOptions)
    thinking: bool | None = None           # enable_thinking and answer-only judging (None: the records')
    chat_template: str | None = None       # a chat template file replacing the tokenizer's
    pass_at_k: int | None = None           # N samples at temperature 1.0, and pass@k
    verify_jobs: int | None = None
    progress: bool | None = None
    harness: str = "rlvr"                  # --jobs/--watch units: rlvr's own path, lm-eval itself, or OLMES task groups
    harness_python: str | None = None      # --harness lm-eval / olmes: the interpreter that has the harness
    model_args: str | None = None          # --harness lm-eval / olmes: more vLLM model arguments (K=V,...)
    tools: Any = None                      # rlvr.tools.ToolSettings: tool-using evaluation (multi-turn rollouts)
    judge: dict = field(default_factory=dict)   # the LLM judge's options (rlvr.verifiers.judge; {}: none)


def leaf(bench: str, opts: EvalOptions) -> str:
    return f"{bench}-pass@{opts.pass_at_k}" if opts.pass_at_k else bench


def tokens_override(bench: str, opts: EvalOptions) -> int | None:
    """The generation length given for this benchmark (--max-tokens [BENCH=]N), or None."""
    name = bench.split(":", 1)[0]
    return opts.max_tokens_by.get(name, opts.max_tokens)


def passk_samples(bench: str, opts: EvalOptions) -> int | None:
    """Samples per prompt in pass@k mode (--pass-at-k, or a pass@k benchmark's default)."""
    if opts.pass_at_k:
        return opts.pass_at_k
    b = BENCHMARKS.get(bench)
    return b.passk if b is not None else None


def is_done(out_dir: str) -> bool:
    """An evaluation folder is done once it holds rlvr's summary.json or, for an OLMES task
    group, OLMES's metrics-all.jsonl (both are written last)."""
    from rlvr.eval.harness import OLMES_DONE

    return any(os.path.isfile(os.path.join(out_dir, f)) for f in ("summary.json", OLMES_DONE))


def _max_tokens_and_stop(bench: str, records: list[dict] | None) -> tuple[int, tuple[str, ...]]:
    if bench in BENCHMARKS:
        return BENCHMARKS[bench].max_tokens, BENCHMARKS[bench].stop
    # lm-eval tasks: each record carries the task's stop sequences; one generation length per task
    return max((r.get("max_tokens") or 0 for r in records or []), default=0) or 256, ()


def _settings(ckpt: str, bench: str, opts: EvalOptions, records: list[dict] | None = None):
    from rlvr.engines import EngineOptions, Sampling
    from rlvr.rollout import RolloutSettings

    max_tokens, stop = _max_tokens_and_stop(bench, records)
    k = passk_samples(bench, opts)
    b = BENCHMARKS.get(bench)
    truncated = {"top_p": b.top_p, "top_k": b.top_k} if k and b is not None else {}
    sampling = Sampling(n=k or 1, temperature=PASSK_TEMPERATURE if k else CANONICAL["temperature"],
                        max_tokens=tokens_override(bench, opts) or max_tokens, stop=stop, seed=CANONICAL["seed"],
                        **truncated)
    options = EngineOptions(dtype=opts.dtype, tensor_parallel_size=CANONICAL["tensor_parallel_size"],
                            gpu_memory_utilization=CANONICAL["gpu_memory_utilization"], seed=CANONICAL["seed"],
                            max_model_len=opts.max_model_len, kv_cache_gib=opts.kv_cache_gib)
    return RolloutSettings(model=ckpt, sampling=sampling, engine=opts.engine, options=options,
                           chat_template="auto", gpus=opts.gpus, thinking=opts.thinking,
                           template_file=opts.chat_template, record_max_tokens=tokens_override(bench, opts) is None,
                           tools=opts.tools)


def chat_options(opts: EvalOptions):
    from rlvr.data import ChatOptions

    return ChatOptions(opts.system, opts.thinking, opts.chat_template)


def prompts(bench: str, opts: EvalOptions) -> list[dict]:
    from rlvr.data import apply_chat_fields, load_records

    if bench not in BENCHMARKS:
        from rlvr.eval import tasks

        if opts.chat or opts.system is not None or opts.chat_template is not None:
            raise UsageError(f"{bench}: lm-eval's task prompts are plain text (--chat, --system and --chat-template "
                             "are for rlvr's own benchmarks)")
        return [apply_chat_fields(r, chat_options(opts))
                for r in tasks.records(bench, opts.shots, CANONICAL["seed"], source_for(bench, opts.source), opts.limit)]
    b = BENCHMARKS[bench]
    recs = load_records(b.dataset, split=b.split, source=source_for(bench, opts.source), template=b.template,
                        chat=opts.chat, chat_options=chat_options(opts))
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
    engine = build_engine(_settings(ckpt, todo[0], opts, data[todo[0]]), warn)
    try:
        for b in todo:
            results[b] = evaluate_one(ckpt, dirs[b], b, opts, data[b], engine, warn)
    finally:
        engine.close()
    return results


def evaluate_one(ckpt: str, out: str, bench: str, opts: EvalOptions, records: list[dict], engine,
                 warn: Callable[[str], None] | None = None, pool=None) -> dict:
    """Rollout (resumable) -> verify -> summary.json [+ pass_at_k.json] in `out`. pool: a warm
    VerifierPool to use (rlvr-train's validations keep one per benchmark); else one of its own."""
    from rlvr.rollout import run_to_file
    from rlvr.records import read_records
    from rlvr.verification.pool import VerifierPool
    from rlvr.verification.summary import summarize

    os.makedirs(out, exist_ok=True)
    settings = _settings(ckpt, bench, opts, records)
    std = None
    if bench not in BENCHMARKS:
        from rlvr.eval import tasks

        std = tasks.standard(bench)
        if std.warning and warn is not None:
            warn(std.warning)
    t0 = time.monotonic()
    comp = os.path.join(out, "completions.jsonl")
    run_to_file(records, settings, comp, engine=engine, progress=opts.progress, warn=warn)
    t1 = time.monotonic()
    done = list(read_records([comp]))
    if pool is None:
        config = {"judge": dict(opts.judge)} if opts.judge else None
        with VerifierPool(jobs=opts.verify_jobs, thinking=opts.thinking, config=config) as own:
            verified = list(own.verify_records(done))
    else:
        verified = list(pool.verify_records(done))
    lm = _lm_eval_scores(bench, opts, verified) if std is not None else None
    atomic_write(os.path.join(out, "results.jsonl"), b"".join(dumps(r) for r in verified))
    t2 = time.monotonic()
    verify = summarize(verified)["all"]
    if std is None:
        b = BENCHMARKS[bench]
        metrics = {m: verify.get(m) for m in b.metrics}
        data_settings = {"dataset": b.dataset, "split": b.split, "template": b.template}
    else:
        metrics, subjects = lm
        data_settings = {"lm_eval_task": bench, "num_fewshot": (records[0]["lm_eval"]["num_fewshot"] if records
                                                                else opts.shots), "fewshot_seed": CANONICAL["seed"],
                         "stop": records[0]["stop"] if records else None}
    k = passk_samples(bench, opts)
    summary = {
        "checkpoint": ckpt, "benchmark": bench, "mode": f"pass@{k}" if k else "greedy",
        "metrics": metrics, "records": len(verified),
        "prompt_too_long": sum(1 for r in verified if (r.get("generation") or {}).get("status") == "prompt_too_long"),
        "finish_reasons": _count(f for r in verified for f in r.get("finish_reasons") or []),
        "settings": {**data_settings, "chat": opts.chat, "chat_options": chat_options(opts).check(opts.chat).manifest(),
                     "source": source_for(bench, opts.source), "limit": opts.limit, "engine": opts.engine,
                     "sampling": settings.sampling.to_dict(), "engine_options": _engine_opts(settings.options),
                     "max_tokens": settings.sampling.max_tokens, "max_tokens_default": _max_tokens_and_stop(bench, records)[0],
                     "gpus": opts.gpus, "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES"),
                     "judge": dict(opts.judge) if pool is None and opts.judge else None},
        "verify": verify, "seconds": {"rollout": round(t1 - t0, 3), "verify": round(t2 - t1, 3)},
    }
    if opts.tools is not None:
        summary["tools"] = tool_summary(verified, opts.tools)
    if std is not None:
        if std.subjects:
            summary["subjects"] = subjects
        if std.warning:
            summary["warning"] = std.warning
    cut = length_limited(verified)
    summary["hit_max_tokens"] = cut
    if cut["completions"] and warn is not None:
        warn(f"{bench}: {cut['completions']} of {cut['of']} completions ({cut['fraction']:.1%}) stopped at the "
             f"{settings.sampling.max_tokens}-token limit; chain-of-thought answers cut there score as wrong "
             f"(give a longer one with --max-tokens {bench}=N; summary.json records the length used)")
    b = BENCHMARKS.get(bench)
    if b is not None and b.breakdown:
        summary["breakdown"] = breakdown(verified, b.breakdown)
    if k:
        from rlvr.passk import records_pass_at_k

        table = records_pass_at_k(verified, default_dataset=bench)
        write_json(os.path.join(out, "pass_at_k.json"), table)
        summary["metrics"].update({f"pass@{k}": table[f"pass@{k}"] for k in table["k"]})
    write_json(os.path.join(out, "summary.json"), summary)
    return summary


def length_limited(verified: list[dict]) -> dict:
    """How many completions ended at the generation limit (finish reason `length`)."""
    reasons = [f for r in verified for f in r.get("finish_reasons") or []]
    n = sum(1 for f in reasons if f == "length")
    return {"completions": n, "of": len(reasons), "fraction": round(n / len(reasons), 6) if reasons else 0.0}


def breakdown(verified: list[dict], fields: Sequence[str]) -> dict[str, dict[str, float]]:
    """Accuracy (the mean fraction of correct completions per record) by each field's value;
    `subject` falls back to MATH's `type`."""
    out: dict[str, dict[str, float]] = {}
    for f in fields:
        groups: dict[str, list[float]] = {}
        for r in verified:
            value = r.get(f, r.get("type") if f == "subject" else None)
            rewards = r.get("rewards") or []
            if value is None or not rewards:
                continue
            groups.setdefault(str(value), []).append(sum(1 for x in rewards if x >= 1.0) / len(rewards))
        out[f] = {v: round(sum(xs) / len(xs), 6) for v, xs in sorted(groups.items())}
    return out


def _lm_eval_scores(bench: str, opts: EvalOptions, verified: list[dict]) -> tuple[dict, dict]:
    """lm-eval's per-sample metrics (its filters and process_results on the first completion)
    written into each result as `lm_eval_metrics`, beside rlvr's own verdict (`rlvr_verify,none`:
    reward 1 on the first completion); returns (metrics over all documents, per subject)."""
    from rlvr.eval import tasks

    scored = tasks.score(bench, [_answers_only(r) for r in verified], opts.shots, CANONICAL["seed"],
                         source_for(bench, opts.source), opts.limit)
    by_id = {s["id"]: s for s in scored}
    for r in verified:
        s = by_id.get(r["id"])
        if s is None:
            continue
        rewards = r.get("rewards") or [0.0]
        s["metrics"]["rlvr_verify,none"] = int(rewards[0] >= 1.0)
        r["lm_eval_metrics"] = s["metrics"]
        r["lm_eval_filtered"] = s["filtered"]
    agg = tasks.aggregate(bench, scored)
    return agg.pop("all"), agg


def tool_summary(verified: list[dict], tools) -> dict:
    """A tool-using evaluation's settings and what its trajectories did: tool calls in all, per
    completion, by status (rlvr.tools.STATUSES), and completions that called the tool at all."""
    trajs = [t or [] for r in verified for t in r.get("trajectories") or []]
    calls = [x for t in trajs for x in t if x.get("role") == "tool"]
    return {"settings": tools.to_dict(), "calls": len(calls),
            "calls_per_completion": round(len(calls) / len(trajs), 4) if trajs else 0.0,
            "completions_with_calls": sum(1 for t in trajs if any(x.get("role") == "tool" for x in t)),
            "statuses": _count(x.get("status") for x in calls)}


def _answers_only(rec: dict) -> dict:
    """The record as lm-eval's scoring sees it: a completion judged on its answer only
    (rlvr.verification.thinking) gives lm-eval that answer, or "" when its thinking never
    closed, as rlvr's own verdict does (lm-eval's think_end_token likewise)."""
    comps, verdicts = rec.get("completions") or [], rec.get("verdicts") or []
    if not any(isinstance(v, dict) and isinstance(v.get("thinking"), dict) for v in verdicts):
        return rec
    out = []
    for c, v in zip(comps, verdicts):
        t = v.get("thinking") if isinstance(v, dict) else None
        if isinstance(t, dict):
            n = int(t.get("answer_chars") or 0)
            c = (c[len(c) - n:] if n else "") if t.get("closed") else ""
        out.append(c)
    return {**rec, "completions": out}


def _engine_opts(options) -> dict:
    d = asdict(options)
    d.pop("extra", None)
    return d


def _count(items) -> dict:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items()))
