"""rlvr-eval: canonical checkpoint evaluation, a watch loop and results tables (see rlvr.eval)."""

from __future__ import annotations

import functools
import os
import sys

import click
import orjson

from rlvr.cli import ConfigError, Failure, check_output_dir, parse_shard, run, warn, with_examples

HELP = with_examples(
    """Evaluate checkpoints with canonical settings.

    rlvr-eval CKPT OUT_DIR --benchmark B composes rlvr-data, rlvr-rollout and rlvr-verify
    under lm-evaluation-harness's standard template (greedy, tensor parallel 1, bfloat16,
    gpu_memory_utilization 0.8, max_model_len 4096, seed 42) and writes
    OUT_DIR/completions.jsonl, results.jsonl and summary.json. Several --benchmark go to
    OUT_DIR/<benchmark>/ with one engine. It prints one JSON line per benchmark.

    lm-eval's tasks gsm8k, gsm8k_cot, minerva_math (seven subjects), hendrycks_math, mbpp,
    humaneval and ifeval, and math_qwen, are built through lm-eval itself: each prompt is the
    context `lm_eval --num_fewshot N --seed 42` builds, with its stops and generation length;
    summary.json carries lm-eval's own scores under its keys (exact_match,strict-match,
    exact_match,flexible-extract, exact_match,none, pass_at_1,none,
    prompt_level_strict_acc,none, ...), rlvr's own verdict as rlvr_verify,none, and per
    subject for the MATH tasks. --shots N sets the few-shot count (defaults: gsm8k 8,
    gsm8k_cot 8, minerva_math 4, hendrycks_math 4, math_qwen 4, mbpp 3, humaneval 0,
    ifeval 0). rlvr's own benchmarks: math, math500 (boxed, 2048 tokens), ifbench, if_multi
    (2048) and toy (32). hendrycks_math warns that it under-reports.

    --harness lm-eval runs lm-eval's own vLLM backend under the same template instead
    (OUT_DIR/<task>_<N>shot/; --harness-python PATH for a lm-eval in another virtualenv).

    --pass-at-k N draws N samples per prompt at temperature 1.0 and adds pass_at_k.json;
    --gpus spreads the prompts over one engine per GPU (auto: the free ones) and merges in
    order. Everything resumes: a finished benchmark (summary.json) is skipped, an
    interrupted one continues from its completions.jsonl.

    --watch GLOB OUT_DIR polls for checkpoints (e.g. results/run_*/checkpoints/step_*),
    evaluates each once per benchmark in OUT_DIR/<checkpoint>/<benchmark>/, one child
    process per GPU, and keeps OUT_DIR/results.md and results.csv current. --once stops
    when nothing is left; --shard I/N takes every N-th checkpoint, to share a sweep
    between nodes. --table OUT_DIR prints the results table of the summaries below it.

    Rows come from --source BENCH=PATH (a local file or folder), $RLVR_DATA_DIR/<dataset>/,
    or the Hugging Face hub (see rlvr-data).
    """,
    """
rlvr-eval results/run1/checkpoints/step_000100 evals/step100 --benchmark gsm8k --gpu 0
rlvr-eval CKPT evals/ckpt -b gsm8k --shots 4 -b math_qwen --source gsm8k=data/gsm8k/ --source math_qwen=data/math/
rlvr-eval --harness lm-eval CKPT evals/lm -b gsm8k_cot --shots 8    # lm-eval itself, same template
rlvr-eval --harness lm-eval CKPT evals/lm -b mbpp --harness-python /opt/lm-eval/.venv/bin/python
rlvr-eval CKPT evals/passk -b math500 --pass-at-k 64 --gpus auto
rlvr-eval --watch 'results/run_*/checkpoints/step_*' evals -b gsm8k -b ifeval --gpus auto
rlvr-eval --watch 'results/*/checkpoints/step_*' evals -b gsm8k --once --shard 1/2   # node 2 of 2
rlvr-eval --table evals --format csv > results.csv
rlvr-eval ./tiny evals/tiny -b toy --engine hf --dtype float32 --limit 16   # CPU smoke test
""",
)


def _sources(values: tuple[str, ...], benchmarks: list[str]) -> dict[str, str]:
    out = {}
    for v in values:
        name, sep, path = v.partition("=")
        if not sep:
            if len(benchmarks) != 1:
                raise click.BadParameter(f"{v!r}: with several benchmarks use BENCH=PATH", param_hint="--source")
            name, path = benchmarks[0], v
        out[name] = path
    return out


def _model_args(text: str | None) -> dict:
    out = {}
    for part in (text or "").split(","):
        if part.strip():
            k, sep, v = part.partition("=")
            if not sep or not k.strip():
                raise click.BadParameter(f"{part!r} is not K=V", param_hint="--model-args")
            out[k.strip()] = v.strip()
    return out


@click.command(help=HELP)
@click.argument("paths", nargs=-1, metavar="[CKPT] OUT_DIR")
@click.option("-b", "--benchmark", "benchmarks", multiple=True, metavar="NAME",
              help="lm-eval's gsm8k, gsm8k_cot, minerva_math, hendrycks_math, mbpp, humaneval, ifeval; math_qwen; "
                   "rlvr's math, math500, ifbench, if_multi, toy (repeatable).")
@click.option("--shots", type=click.IntRange(min=0), metavar="N",
              help="lm-eval tasks: few-shot examples (default: gsm8k 8, gsm8k_cot 8, minerva_math 4, hendrycks_math 4, "
                   "math_qwen 4, mbpp 3, humaneval 0, ifeval 0).")
@click.option("--harness", type=click.Choice(["rlvr", "lm-eval"]), default="rlvr", show_default=True,
              help="lm-eval: run lm-evaluation-harness's own vLLM backend under the standard template "
                   "(OUT_DIR/<task>_<N>shot/).")
@click.option("--harness-python", metavar="PATH", help="--harness lm-eval: the Python interpreter that has lm-eval "
                                                        "(a harness kept in its own virtualenv).")
@click.option("--model-args", metavar="K=V,...", help="--harness lm-eval: more vLLM arguments for lm-eval's "
              "--model_args (e.g. enforce_eager=True on CPU); the template's keys cannot be changed.")
@click.option("--tensor-parallel-size", type=int, default=1, show_default=True,
              help="Always 1: anything else fails (tensor parallelism changes scores of small models).")
@click.option("--gpu", metavar="N", help="Run on this GPU (sets CUDA_VISIBLE_DEVICES).")
@click.option("--gpus", metavar="0,1,...|auto", help="One engine per GPU (auto: the free ones); with --watch, one job per GPU.")
@click.option("--pass-at-k", type=click.IntRange(min=1), metavar="N", help="N samples per prompt at temperature 1.0, and pass@k.")
@click.option("--watch", "pattern", metavar="GLOB", help="Evaluate every checkpoint matching GLOB (quote it), as they appear.")
@click.option("--interval", type=click.FloatRange(min=0), default=60.0, show_default=True, help="--watch: seconds between scans.")
@click.option("--once", is_flag=True, help="--watch: stop when every checkpoint found is done.")
@click.option("--idle-exit", type=click.FloatRange(min=0), metavar="SECONDS", help="--watch: stop after this long without new work.")
@click.option("--shard", metavar="I/N", help="--watch: take every N-th checkpoint from I (one shard per node).")
@click.option("--table", is_flag=True, help="Print the results table of the summaries below OUT_DIR.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True, help="--table format.")
@click.option("--engine", type=click.Choice(["vllm", "hf"]), default="vllm", show_default=True, help="Generation engine.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32", "auto"]), default="bfloat16", show_default=True, help="Canonical: bfloat16.")
@click.option("--max-model-len", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Context length (lm-eval's standard template: 4096; smaller for small-context models).")
@click.option("--kv-cache-gib", type=click.FloatRange(min=0, min_open=True), help="KV cache size in GiB (CUDA: instead of the memory utilization; CPU default 4).")
@click.option("--source", "sources", multiple=True, metavar="[BENCH=]PATH", help="Local rows of a benchmark (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N prompts (a smoke test, not a canonical number).")
@click.option("--max-tokens", type=click.IntRange(min=1), help="Instead of the benchmark's (not canonical; recorded).")
@click.option("--chat", is_flag=True, help="Prompts as chat messages through the chat template (chat models).")
@click.option("--verify-jobs", type=click.IntRange(min=1), help="Verifier worker processes (default: the cores).")
@click.option("--subdirs", is_flag=True, help="Write OUT_DIR/<benchmark>/ even for one benchmark.")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a terminal).")
def cmd(paths, benchmarks, shots, harness, harness_python, model_args, tensor_parallel_size, gpu, gpus, pass_at_k, pattern, interval, once, idle_exit, shard, table, fmt, engine, dtype,
        max_model_len, kv_cache_gib, sources, limit, max_tokens, chat, verify_jobs, subdirs, progress):
    from rlvr.eval import runner as ev

    if table:
        if len(paths) != 1:
            raise click.UsageError("--table takes one OUT_DIR")
        if not os.path.isdir(paths[0]):
            raise ConfigError(f"--table: {paths[0]} is not a folder")
        if not ev.collect(paths[0]):
            warn(f"no evaluation summaries under {paths[0]}", "rlvr-eval")
        sys.stdout.write(ev.results_table(paths[0], fmt))
        return
    want = 1 if pattern else 2
    if len(paths) != want:
        raise click.UsageError("expected --watch GLOB OUT_DIR" if pattern else "expected CKPT OUT_DIR")
    check_output_dir(paths[-1], "OUT_DIR")
    benchmarks = list(dict.fromkeys(benchmarks))
    if not benchmarks:
        raise click.UsageError("give at least one --benchmark")
    known = ev.known_benchmarks()
    unknown = [b for b in benchmarks if b not in known]
    if unknown:
        raise ConfigError(f"unknown benchmark {unknown[0]!r} (known: {', '.join(known)})")
    if tensor_parallel_size != 1:
        raise ConfigError(f"--tensor-parallel-size {tensor_parallel_size}: evaluations run with tensor parallel 1 "
                          "only (tensor parallelism made small models score 10% instead of 28% on minerva_math); "
                          "spread checkpoints or tasks over GPUs instead")
    if harness == "lm-eval":
        from rlvr.eval import harness as hz

        if pattern or len(paths) != 2:
            raise click.UsageError("--harness lm-eval takes CKPT OUT_DIR")
        check_output_dir(paths[1], "OUT_DIR")
        for b in benchmarks:
            res = hz.run_lm_eval(paths[0], paths[1], b, shots=shots, source=_sources(sources, benchmarks).get(b),
                                 python=harness_python, limit=limit, dtype=dtype, max_model_len=max_model_len,
                                 extra_model_args=_model_args(model_args),
                                 log=lambda m: click.echo(f"rlvr-eval: {m}", err=True))
            sys.stdout.write(orjson.dumps(res).decode() + "\n")
            sys.stdout.flush()
        return
    if harness_python or model_args:
        raise click.UsageError("--harness-python and --model-args go with --harness lm-eval")
    opts = ev.EvalOptions(engine=engine, dtype=dtype, max_model_len=max_model_len, kv_cache_gib=kv_cache_gib, shots=shots,
                          source=_sources(sources, benchmarks), limit=limit, max_tokens=max_tokens, chat=chat,
                          pass_at_k=pass_at_k, verify_jobs=verify_jobs, progress=progress)
    say = functools.partial(warn, prog="rlvr-eval")
    if pattern:
        devices = ev.pick_devices(gpu, gpus, say) or [None]
        failed = ev.watch(pattern, paths[0], benchmarks, opts, devices=devices, interval=interval, once=once,
                          idle_exit=idle_exit, shard=parse_shard(shard), log=lambda m: click.echo(f"rlvr-eval: {m}", err=True))
        if failed:
            raise Failure(f"{failed} checkpoint evaluation(s) failed (see above)")
        return
    if gpu is not None:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # nvidia-smi's numbering
        os.environ["CUDA_VISIBLE_DEVICES"] = gpu
    elif gpus is not None:
        opts.gpus = ev.pick_devices(None, gpus, say)
    from rlvr.engines import CheckpointError, EngineError
    from rlvr.engines.rollout import PromptError, record_stdout

    with record_stdout() as out:  # engine processes cannot write into the JSON lines
        try:
            results = ev.evaluate_checkpoint(paths[0], paths[1], benchmarks, opts, warn=say, subdirs=subdirs or None)
        except (CheckpointError, PromptError, ValueError) as e:
            raise ConfigError(str(e)) from None
        except EngineError as e:
            raise Failure(str(e)) from None
        try:
            for b in benchmarks:
                s = results[b]
                out.write(orjson.dumps({"checkpoint": s["checkpoint"], "benchmark": b, "mode": s["mode"],
                                        "metrics": s["metrics"], "records": s["records"]}) + b"\n")
                out.flush()
        except BrokenPipeError:  # `| head`: end quietly (click would turn EPIPE into exit 1)
            raise click.exceptions.Exit(0) from None


main = run(cmd, "rlvr-eval")

if __name__ == "__main__":
    main()
