"""rlvr-eval: canonical checkpoint evaluation, a watch loop and results tables (see rlvr.eval)."""

from __future__ import annotations

import os
import sys

import click

from rlvr import records
from rlvr.cli import (ConfigError, Failure, RlvrError, check_output_dir, judge_options, parse_shard, run, say,
                      tool_options, tool_settings, warn, with_examples)

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

    The users' own protocol (greedy, 0-shot, rlvr's verifiers), named apart from lm-eval's
    tasks on the same data: gsm8k_0shot_qa ("Q: ...\\nA:", stops [Question] Question: Q:
    and a blank-line run, 1,024 tokens), math_0shot_minerva ("Problem:/Solution:", stops
    Problem: and a blank-line run, 1,024 tokens, accuracy per subject and level),
    mmlu_0shot_letter (the first choice letter, 32 tokens), ifeval_rlvr (rlvr's IFEval
    checkers, 2,048 tokens), and pass@k benchmarks aime_passk and beyondaime_passk (32
    samples at temperature 1.0, top_p 0.95, top_k 20, 1,024 tokens). Completions that stop
    at the generation limit are counted in summary.json (hit_max_tokens) with a warning;
    --max-tokens [BENCH=]N changes a benchmark's length, recorded in summary.json and in
    its table column (BENCH_Ntok).

    --harness lm-eval runs lm-eval's own vLLM backend under the same template instead
    (OUT_DIR/<task>_<N>shot/; --harness-python PATH for a lm-eval in another virtualenv), on
    the same rows and with the same checkpoint checks; with --jobs and --watch too. Each
    task keeps its own length (max_gen_toks) unless --max-tokens [TASK=]N gives one
    (lm-eval's --gen_kwargs max_gen_toks=N, in the result line's max_gen_toks); completions
    cut there are counted (hit_max_tokens in the result line and hit_max_tokens.json) with a
    warning.

    --harness olmes runs AllenAI's OLMES, its own command line from its own virtualenv
    (--harness-python, default /opt/olmes-venv/bin/python where it exists): each -b is a
    task group of OLMES task or suite names (gsm8k::tulu,minerva_math::tulu; tulu_3_dev),
    run by one OLMES process on one GPU (tensor parallel 1) into OUT_DIR (OUT_DIR/<group>/
    for several), where OLMES writes its metrics-all.jsonl, metrics.json and per-task files
    (--shots N: OLMES's --num-shots, else each task's own count);
    --watch and --jobs spread the groups of each checkpoint over the GPUs like rlvr's own
    tasks, and --table shows OLMES's scores beside rlvr's and lm-eval's.

    Chat and thinking (as rlvr-data and rlvr-rollout): --chat, --system TEXT and
    --chat-template FILE shape rlvr's own benchmarks' prompts; --thinking / --no-thinking
    set the template's enable_thinking and judge only the answer after the thinking (one
    that never closes scores nothing), for lm-eval's scores too. With --harness lm-eval,
    --chat becomes lm-eval's --apply_chat_template, --system its --system_instruction and
    --thinking its enable_thinking with think_end_token </think> (both with
    --apply_chat_template); --pass-at-k and --chat-template are refused there.

    --tools python evaluates with rlvr-rollout's tool loop (docs/rollout.md, Multi-turn
    rollouts with a Python tool): a code block the model closes runs in the code verifier's
    sandbox and its output comes back as a tool turn, up to --max-turns model turns within
    the benchmark's generation length (--tool-markers, --tool-output-chars and --tool-timeout
    as in rlvr-rollout). completions.jsonl and results.jsonl keep each trajectory's turns
    (trajectories), the verifier scores the whole completion as rlvr-verify does (its
    extraction finds the final answer), and summary.json adds "tools": the settings, the
    tool calls and their statuses. With --gpus each engine process runs the tool loop on its
    own engine. Not with --harness lm-eval or olmes.

    An LLM judge grades the completions instead of (or with) the benchmark's own verifier:
    --judge BASE_URL (an OpenAI-compatible /v1 endpoint such as `vllm serve`), --judge-model,
    --judge-rubric, --judge-mode and --judge-cache, as rlvr-verify takes them (rlvr's own
    harness only; with --jobs and --watch for each unit). Each result carries the judge's
    verdict and reply, the metrics count its verdicts, and summary.json records the judge's
    options under settings.judge.

    --pass-at-k N draws N samples per prompt at temperature 1.0 and adds pass_at_k.json;
    --gpus spreads the prompts over one engine per GPU (auto: the free ones) and merges in
    order. Everything resumes: a finished benchmark (summary.json) is skipped, an
    interrupted one continues from its completions.jsonl. CKPT may be an s3:// folder (fetched
    once into a local cache) or a hub name (looked for under $RLVR_S3_MODELS first).

    --jobs JOBS.json OUT_DIR evaluates a list of checkpoints
    ([{"checkpoint_path": ..., "output_name": ...}, ...], or one object a line) on the
    standard task set (gsm8k:8, gsm8k:4, math_qwen:4, ifeval:0, mbpp:3; -b NAME[:SHOTS]
    to choose) in OUT_DIR/<output_name>/<task>_<N>shot/: one task of one checkpoint per
    child process, one child per free GPU (--gpus: which), never tensor parallelism.
    Finished tasks are skipped, interrupted ones resume. Each unit logs to
    OUT_DIR/<output_name>/<task>/eval.log. The same command on several nodes that share the
    filesystem splits the units as their GPUs free up: each unit is claimed by the process
    that starts it (a claim file in its folder, with the owner's host, process and
    heartbeat), and the unit of a process that died is taken over. --range A:B (0-based, B
    excluded) and --shard I/N (every N-th job from I) split a list statically.

    --watch GLOB OUT_DIR polls for checkpoints (e.g. results/run_*/checkpoints/step_*) and
    evaluates each once per task in OUT_DIR/<checkpoint>/<task>/, the tasks of one
    checkpoint spread over the free GPUs too, by step (step_000100, step100 and
    <run>_step100 name steps alike); --once stops when nothing is left; --shard I/N takes
    every N-th checkpoint. Both keep OUT_DIR/results.md and results.csv current.

    --config FILE (with --watch or --jobs) takes the tasks, harness, interval and options
    from an evaluation config: rlvr's form (benchmarks, interval, args, harness), the users'
    lm-eval watch config (benchmarks: [{task, num_fewshot}], vllm: {dtype, max_model_len},
    max_gen_toks: {TASK: N, default: N}, watch: {poll_interval_s, task_groups}) or their
    OLMES watch config, as rlvr-submit --eval-config reads them (docs/cloud.md); flags
    given on the command line win. --watch takes the watch's task groups, --jobs the
    config's benchmarks list.

    GPU ids (--gpu, --gpus) are physical (nvidia-smi's numbering) with --gpu-mode absolute,
    or positions in CUDA_VISIBLE_DEVICES with --gpu-mode visible; --gpus auto picks the
    free GPUs of this node (rlvr-gpu-free). With --jobs and --watch, auto asks again whenever
    a unit ends and every 30 s while units wait, so a GPU freed later takes the next unit; a
    node whose GPUs are all busy waits for one (--no-wait-gpus: exit 4 instead).

    --table DIR prints one table of every rlvr summary.json and lm-eval results file
    (results_<date>.json) below DIR (a row per checkpoint, a column per task and metric); --baseline FILE (a YAML of
    reference scores, e.g. configs/baselines/qwen3-1.7B-base.yaml) adds a baseline row
    and each checkpoint's difference to it.

    Rows come from --source NAME=PATH (NAME a benchmark or its dataset: math serves
    minerva_math, math_qwen, hendrycks_math and math; a local file or folder, or s3://),
    else $RLVR_S3_DATASETS/<dataset>/ or <dataset>_<split>/, else the same below
    $RLVR_DATA_DIR, else the Hugging Face hub (see rlvr-data), for lm-eval's tasks and
    their few-shot splits too; with --jobs and --watch alike.
    """,
    """
rlvr-eval results/run1/checkpoints/step_000100 evals/step100 --benchmark gsm8k --gpu 0
rlvr-eval CKPT evals/ckpt -b gsm8k --shots 4 -b math_qwen --source gsm8k=data/gsm8k/ --source math_qwen=data/math/
rlvr-eval --harness lm-eval CKPT evals/lm -b gsm8k_cot --shots 8    # lm-eval itself, same template
rlvr-eval --harness lm-eval CKPT evals/lm -b mbpp --harness-python /opt/lm-eval/.venv/bin/python
rlvr-eval --harness olmes CKPT evals/olmes -b gsm8k::tulu,ifeval::tulu --harness-python /opt/olmes-venv/bin/python
rlvr-eval --harness olmes --watch 'results/run_*/checkpoints/step_*' evals -b gsm8k::tulu,ifeval::tulu -b minerva_math::tulu --gpus 6,7
rlvr-eval CKPT evals/passk -b math500 --pass-at-k 64 --gpus auto
rlvr-eval CKPT evals/ours -b gsm8k_0shot_qa -b math_0shot_minerva -b mmlu_0shot_letter -b ifeval_rlvr
rlvr-eval CKPT evals/ckpt -b gsm8k_cot --max-tokens gsm8k_cot=1024   # lm-eval's task, longer answers
rlvr-eval CKPT evals/aime -b aime_passk --source aime_passk=aime/ --gpus auto
rlvr-eval --watch 'results/run_*/checkpoints/step_*' evals -b gsm8k -b ifeval --gpus auto
rlvr-eval --watch 'results/*/checkpoints/step_*' evals -b gsm8k --once --shard 1/2   # node 2 of 2
rlvr-eval --watch 'results/run1/checkpoints/step_*' evals --config configs/eval/lm_eval_watch.yaml --gpus 6,7
rlvr-eval --jobs jobs.json evals                       # the standard tasks, every free GPU
rlvr-eval --jobs jobs.json evals -b gsm8k:8 -b ifeval:0   # the same line on a second node shares the work
RLVR_DATA_DIR=/data HF_HUB_OFFLINE=1 rlvr-eval --jobs jobs.json evals --source math=/data/hendrycks_math/
rlvr-eval --jobs jobs.json evals --harness lm-eval -b gsm8k:8 -b minerva_math:4   # lm-eval itself per unit
CUDA_VISIBLE_DEVICES=4,5,6,7 rlvr-eval --jobs jobs.json evals --gpus 0,1 --gpu-mode visible   # GPUs 4, 5
rlvr-eval --table evals --format csv > results.csv
rlvr-eval --table evals --baseline configs/baselines/qwen3-1.7B-base.yaml
rlvr-eval ./tiny evals/tiny -b toy --engine hf --dtype float32 --limit 16   # CPU smoke test
rlvr-eval CKPT evals/tools -b math500 --tools python --max-turns 4 --max-tokens 4096   # with a Python tool
rlvr-eval CKPT evals/judged -b ifeval_rlvr --judge http://127.0.0.1:8000/v1 --judge-model Qwen/Qwen3-8B --judge-mode gate
""",
)


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
@click.option("-b", "--benchmark", "benchmarks", multiple=True, metavar="NAME[:SHOTS]",
              help="lm-eval's gsm8k, gsm8k_cot, minerva_math, hendrycks_math, mbpp, humaneval, ifeval; math_qwen; "
                   "rlvr's math, math500, ifbench, if_multi, toy; the users' protocol gsm8k_0shot_qa, "
                   "math_0shot_minerva, mmlu_0shot_letter, ifeval_rlvr, aime_passk, beyondaime_passk "
                   "(repeatable); with --jobs and --watch a task "
                   "NAME:SHOTS (default: the standard task set).")
@click.option("--shots", type=click.IntRange(min=0), metavar="N",
              help="lm-eval tasks: few-shot examples (default: gsm8k 8, gsm8k_cot 8, minerva_math 4, hendrycks_math 4, "
                   "math_qwen 4, mbpp 3, humaneval 0, ifeval 0).")
@click.option("--harness", type=click.Choice(["rlvr", "lm-eval", "olmes"]), default="rlvr", show_default=True,
              help="olmes: OLMES's own command line on task groups (-b a::tulu,b::tulu); "
                   "lm-eval: run lm-evaluation-harness's own vLLM backend under the standard template "
                   "(OUT_DIR/<task>_<N>shot/); with --jobs and --watch, for each unit.")
@click.option("--harness-python", metavar="PATH", help="--harness lm-eval / olmes: the Python interpreter that has the "
                                                        "harness (kept in its own virtualenv; olmes default: "
                                                        "/opt/olmes-venv/bin/python where it exists).")
@click.option("--model-args", metavar="K=V,...", help="--harness lm-eval / olmes: more vLLM arguments for the harness's "
              "--model_args (e.g. enforce_eager=True on CPU); the template's keys cannot be changed.")
@click.option("--tensor-parallel-size", type=int, default=1, show_default=True,
              help="Always 1: anything else fails (tensor parallelism changes scores of small models).")
@click.option("--gpu", metavar="N", help="Run on this GPU (sets CUDA_VISIBLE_DEVICES).")
@click.option("--gpus", metavar="0,1,...|auto", help="One engine per GPU (auto: the free ones); with --jobs and --watch, one task per GPU at a time (default: auto).")
@click.option("--wait-gpus/--no-wait-gpus", default=True, show_default=True,
              help="--jobs/--watch with --gpus auto: when no GPU is free at the start, wait for one (or exit 4).")
@click.option("--gpu-mode", type=click.Choice(["absolute", "visible"]), default="absolute", show_default=True, help="GPU ids are physical, or positions in CUDA_VISIBLE_DEVICES.")
@click.option("--jobs", "jobs_file", metavar="JOBS.json", help="Evaluate the checkpoints of this list ({checkpoint_path, output_name} objects) into OUT_DIR.")
@click.option("--range", "span", metavar="A:B", help="--jobs: only jobs A to B-1 of the list (0-based; a node's part of a sweep).")
@click.option("--pass-at-k", type=click.IntRange(min=1), metavar="N", help="N samples per prompt at temperature 1.0, and pass@k.")
@click.option("--watch", "pattern", metavar="GLOB", help="Evaluate every checkpoint matching GLOB (quote it), as they appear.")
@click.option("--interval", type=click.FloatRange(min=0), default=60.0, show_default=True, help="--watch: seconds between scans.")
@click.option("--once", is_flag=True, help="--watch: stop when every checkpoint found is done.")
@click.option("--idle-exit", type=click.FloatRange(min=0), metavar="SECONDS", help="--watch: stop after this long without new work.")
@click.option("--shard", metavar="I/N", help="--jobs, --watch: take every N-th job or checkpoint from I (one shard per node).")
@click.option("--table", is_flag=True, help="Print the results table of the rlvr and lm-eval results below OUT_DIR.")
@click.option("--format", "fmt", type=click.Choice(["markdown", "csv"]), default="markdown", show_default=True, help="--table format.")
@click.option("--baseline", metavar="FILE", help="--table: a YAML of reference scores; adds a baseline row and differences to it.")
@click.option("--engine", type=click.Choice(["vllm", "hf"]), default="vllm", show_default=True, help="Generation engine.")
@click.option("--dtype", type=click.Choice(["bfloat16", "float16", "float32", "auto"]), default="bfloat16", show_default=True, help="Canonical: bfloat16.")
@click.option("--max-model-len", type=click.IntRange(min=1), default=4096, show_default=True,
              help="Context length (lm-eval's standard template: 4096; smaller for small-context models).")
@click.option("--kv-cache-gib", type=click.FloatRange(min=0, min_open=True), help="KV cache size in GiB (CUDA: instead of the memory utilization; CPU default 4).")
@click.option("--source", "sources", multiple=True, metavar="[NAME=]PATH",
              help="Rows of a benchmark, or of every benchmark of a dataset (NAME: gsm8k, math, mbpp, ...); a local "
                   "file or folder or s3:// (repeatable).")
@click.option("--limit", type=click.IntRange(min=1), help="Only the first N prompts (a smoke test, not a canonical number).")
@click.option("--max-tokens", "max_tokens", multiple=True, metavar="[BENCH=]N",
              help="Generation length instead of the benchmark's (repeatable per benchmark; not canonical: recorded "
                   "in summary.json and the table's task name).")
@click.option("--chat", is_flag=True, help="Prompts as chat messages through the chat template (chat models).")
@click.option("--system", metavar="TEXT", help="A system prompt first in every chat prompt (rlvr's benchmarks need --chat).")
@click.option("--thinking/--no-thinking", "thinking", default=None,
              help="enable_thinking for the chat template, and answer-only judging  [default: the template's own]")
@click.option("--chat-template", metavar="FILE|NAME", help="A chat template file replacing the tokenizer's, or one rlvr ships by name (tulu_thinker_r1_style) (needs --chat).")
@click.option("--verify-jobs", type=click.IntRange(min=1), help="Verifier worker processes (default: the cores).")
@judge_options
@click.option("--subdirs", is_flag=True, help="Write OUT_DIR/<benchmark>/ even for one benchmark.")
@click.option("--progress/--no-progress", default=None, help="Progress bar on stderr (default: on a terminal).")
@tool_options
@click.option("--config", "config", metavar="FILE", is_eager=True, expose_value=False, callback=lambda c, p, v: _config(c, v),
              help="--watch, --jobs: an evaluation config (rlvr's, or the users' lm-eval or OLMES watch config) "
                   "giving the tasks, harness, interval and options; flags given here win.")
def cmd(paths, benchmarks, shots, harness, harness_python, model_args, tensor_parallel_size, gpu, gpus, wait_gpus,
        gpu_mode, jobs_file, span, pass_at_k, pattern, interval, once, idle_exit, shard, table, fmt, baseline, engine,
        dtype, max_model_len, kv_cache_gib, sources, limit, max_tokens, chat, system, thinking, chat_template,
        verify_jobs, judge, subdirs, progress, tools, max_turns, tool_markers, tool_output_chars, tool_timeout):
    from rlvr.eval import jobs as sweep
    from rlvr.eval import runner as ev

    if table:
        _table(paths, fmt, baseline)
        return
    spec = click.get_current_context().meta.get("rlvr.eval.config")
    if spec is not None:
        if not (pattern or jobs_file):
            raise click.UsageError("--config goes with --watch or --jobs")
        if click.get_current_context().get_parameter_source("benchmarks") == click.core.ParameterSource.DEFAULT:
            benchmarks = tuple((spec.job_benchmarks or spec.benchmarks) if jobs_file else spec.benchmarks)
    if harness != "olmes":  # another name of a dataset (if_multi_constraints) names its benchmark
        from rlvr.data import benchmark_name

        benchmarks = tuple(benchmark_name(b) for b in benchmarks)
    if baseline is not None:
        raise click.UsageError("--baseline goes with --table")
    max_tokens, max_tokens_by = _lengths(max_tokens)
    named = {b.partition(":")[0] for b in benchmarks}
    stray = sorted(set(max_tokens_by) - named) if benchmarks else []
    if stray:
        raise click.BadParameter(f"{stray[0]}=...: {stray[0]} is not among the benchmarks (-b {','.join(benchmarks)})",
                                 param_hint="--max-tokens")
    if harness == "lm-eval" and (pass_at_k is not None or chat_template is not None):
        raise click.UsageError("--harness lm-eval runs each task's own greedy template: no --pass-at-k or "
                               "--chat-template (--chat, --system and --thinking apply the tokenizer's chat template)")
    tools = tool_settings(tools, max_turns, tool_markers, tool_output_chars, tool_timeout)
    if tools is not None and harness != "rlvr":
        raise click.UsageError(f"--tools runs rlvr's own tool loop: not with --harness {harness}")
    if tensor_parallel_size != 1:
        raise ConfigError(f"--tensor-parallel-size {tensor_parallel_size}: evaluations run with tensor parallel 1 "
                          "only (tensor parallelism made small models score 10% instead of 28% on minerva_math); "
                          "spread checkpoints or tasks over GPUs instead")
    if harness == "olmes":
        from rlvr.eval import harness as hz

        if not benchmarks:
            raise click.UsageError("--harness olmes: give the task groups with -b (e.g. -b gsm8k::tulu,ifeval::tulu)")
        for b in benchmarks:
            hz.olmes_tasks(b)
        hz.olmes_python(harness_python)        # before any GPU is asked
        if any(x is not None for x in (system, thinking, chat_template, max_tokens)) or chat or pass_at_k \
                or max_tokens_by:
            raise click.UsageError("--harness olmes: OLMES's tasks set their own prompts and sampling (no --chat, "
                                   "--system, --thinking, --chat-template, --max-tokens or --pass-at-k)")
    if jobs_file and pattern:
        raise click.UsageError("--jobs and --watch do not go together")
    if judge and harness != "rlvr":
        raise click.UsageError(f"--judge goes with rlvr's own harness (--harness {harness} scores with its own metrics)")
    if judge:
        from rlvr.verifiers.judge import check_config

        try:
            check_config(judge)   # before any engine starts
        except ValueError as e:
            raise ConfigError(str(e)) from None
    if harness == "rlvr" and (harness_python or model_args):
        raise click.UsageError("--harness-python and --model-args go with --harness lm-eval or olmes")
    if (span is not None and not jobs_file) or (shard is not None and not (jobs_file or pattern)):
        raise click.UsageError("--range goes with --jobs" if span is not None else "--shard goes with --jobs or --watch")
    want = 1 if (pattern or jobs_file) else 2
    if len(paths) != want:
        raise click.UsageError("expected --watch GLOB OUT_DIR" if pattern else "expected --jobs JOBS.json OUT_DIR"
                               if jobs_file else "expected CKPT OUT_DIR")
    check_output_dir(paths[-1], "OUT_DIR")
    if pattern or jobs_file:
        if harness == "olmes":
            tasks = [sweep.Task(b) for b in dict.fromkeys(benchmarks)]
        else:
            tasks = sweep.sweep_tasks(benchmarks, harness)
        names = list(dict.fromkeys(t.name for t in tasks))
        opts = _options(ev, names, sources, engine=engine, dtype=dtype, max_model_len=max_model_len,
                        kv_cache_gib=kv_cache_gib, limit=limit, max_tokens=max_tokens, max_tokens_by=max_tokens_by,
                        chat=chat, pass_at_k=pass_at_k,
                        verify_jobs=verify_jobs, progress=progress, system=system, thinking=thinking,
                        chat_template=chat_template, harness=harness, harness_python=harness_python,
                        model_args=model_args, shots=shots if harness == "olmes" else None, tools=tools,
                        judge=judge)
        from rlvr.data.sources import check_data_dir

        check_data_dir()   # --source paths were checked by _options: one line before any child starts
        work = sweep.read_jobs(jobs_file) if jobs_file else None   # bad input fails before any GPU is asked
        if work is not None:
            work = sweep.select_jobs(work, sweep.parse_range(span), parse_shard(shard))
        devices = sweep.pick_gpus(gpu, gpus, gpu_mode, warn, default="auto", wait=wait_gpus)
        # --gpus auto on a node with GPUs: asked again as units end, so GPUs freed later are used
        free = sweep.free_now if devices is not None and gpu is None and (gpus or "auto") == "auto" else None
        devices = [None] if devices is None else devices
        if work is not None:
            failed = sweep.run_jobs(work, paths[0], tasks, opts, devices=devices, log=say, free=free)
        else:
            failed = sweep.watch(pattern, paths[0], tasks, opts, devices=devices, interval=interval, once=once,
                                 idle_exit=idle_exit, shard=parse_shard(shard), log=say, free=free)
        if failed:
            raise Failure(f"{failed} evaluation(s) failed (see above)")
        return
    benchmarks = list(dict.fromkeys(benchmarks))
    if not benchmarks:
        raise click.UsageError("give at least one --benchmark")
    if harness == "olmes":
        if gpu is not None:
            os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
            os.environ["CUDA_VISIBLE_DEVICES"] = sweep.pick_gpus(gpu, None, gpu_mode, warn)[0]
        for b in benchmarks:
            out = paths[1] if len(benchmarks) == 1 and not subdirs else os.path.join(paths[1], hz.olmes_folder(b))
            res = hz.run_olmes(paths[0], out, b, python=harness_python, limit=limit, max_model_len=max_model_len,
                               dtype=dtype, extra_model_args=hz.typed_args(_model_args(model_args)), log=say,
                               shots=shots)
            sys.stdout.buffer.write(records.dumps(res))
            sys.stdout.flush()
        return
    known = ev.known_benchmarks()
    unknown = [b for b in benchmarks if b not in known]
    if unknown:
        raise ConfigError(f"unknown benchmark {unknown[0]!r} (known: {', '.join(known)})")
    if gpu is not None:
        os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # nvidia-smi's numbering
        os.environ["CUDA_VISIBLE_DEVICES"] = sweep.pick_gpus(gpu, None, gpu_mode, warn)[0]
    if harness == "lm-eval":
        _harness(paths, benchmarks, shots, sources, harness_python, limit, dtype, max_model_len, model_args,
                 system=system, thinking=thinking, chat=chat, lengths=(max_tokens, max_tokens_by))
        return
    opts = _options(ev, benchmarks, sources, engine=engine, dtype=dtype, max_model_len=max_model_len,
                    kv_cache_gib=kv_cache_gib, shots=shots, limit=limit, max_tokens=max_tokens,
                    max_tokens_by=max_tokens_by, chat=chat,
                    pass_at_k=pass_at_k, verify_jobs=verify_jobs, progress=progress, system=system, thinking=thinking,
                    chat_template=chat_template, tools=tools, judge=judge)
    if gpu is None and gpus is not None:
        opts.gpus = sweep.pick_gpus(None, gpus, gpu_mode, warn)
    from rlvr.models import resolve_model
    from rlvr.rollout import record_stdout

    ckpt = resolve_model(paths[0], log=say).path  # s3://... (and Org/Name with RLVR_S3_MODELS): the local cache
    with record_stdout() as out:  # engine processes cannot write into the JSON lines
        try:
            results = ev.evaluate_checkpoint(ckpt, paths[1], benchmarks, opts, warn=warn, subdirs=subdirs or None)
        except RlvrError:  # engine, checkpoint and prompt errors carry their exit codes
            raise
        except ValueError as e:  # an option value the library rejects
            raise ConfigError(str(e)) from None
        try:
            for b in benchmarks:
                s = results[b]
                out.write(records.dumps({"checkpoint": s["checkpoint"], "benchmark": b, "mode": s["mode"],
                                         "metrics": s["metrics"], "records": s["records"]}))
                out.flush()
        except BrokenPipeError:  # `| head`: end quietly (click would turn EPIPE into exit 1)
            raise click.exceptions.Exit(0) from None


def _lengths(values: tuple[str, ...]) -> tuple[int | None, dict[str, int]]:
    """--max-tokens N (every benchmark) and BENCH=N (one benchmark)."""
    every, by = None, {}
    for v in values:
        name, sep, n = v.rpartition("=")
        if sep:
            from rlvr.data import canonical

            name = canonical(name)
        try:
            k = int(n)
        except ValueError:
            k = 0
        if k < 1:
            raise click.BadParameter(f"{v!r}: expected N or BENCH=N with N >= 1", param_hint="--max-tokens")
        if sep:
            by[name] = k
        else:
            every = k
    return every, by


def _harness(paths, benchmarks, shots, sources, python, limit, dtype, max_model_len, model_args, system=None,
             thinking=None, chat=False, lengths=(None, {})) -> None:
    from rlvr.eval import harness as hz
    from rlvr.eval import runner as ev
    from rlvr.models import resolve_model

    given = ev.parse_sources(sources, benchmarks)
    ev.check_source_paths(given)
    ckpt = resolve_model(paths[0], log=say).path   # s3://... (and Org/Name with RLVR_S3_MODELS): the local cache
    for b in benchmarks:
        res = hz.run_lm_eval(ckpt, paths[1], b, shots=shots, source=ev.source_for(b, given), python=python,
                             limit=limit, dtype=dtype, max_model_len=max_model_len,
                             extra_model_args=_model_args(model_args), log=say, system=system, thinking=thinking,
                             chat=chat, max_gen_toks=lengths[1].get(b, lengths[0]))
        sys.stdout.buffer.write(records.dumps(res))
        sys.stdout.flush()


def _config(ctx, path: str | None) -> None:
    """--config FILE: its tasks, harness, interval and options become this command's defaults."""
    if path is None:
        return
    from rlvr.cloud.evalspec import load_eval_config

    spec = load_eval_config(path)
    sub = cmd.make_context("rlvr-eval", ["--interval", f"{spec.interval:g}", *spec.options(), *spec.args],
                           parent=None)
    given = {p.name: sub.params[p.name] for p in cmd.params
             if p.name and sub.get_parameter_source(p.name) == click.core.ParameterSource.COMMANDLINE
             and p.name != "benchmarks"}
    ctx.default_map = {**(ctx.default_map or {}), **given}
    ctx.meta["rlvr.eval.config"] = spec


def _options(ev, benchmarks: list[str], sources: tuple[str, ...], **kw):
    given = ev.parse_sources(sources, benchmarks)
    ev.check_source_paths(given)
    return ev.EvalOptions(source=given, **kw)


def _table(paths: tuple[str, ...], fmt: str, baseline: str | None) -> None:
    from rlvr.eval import table as tables

    if len(paths) != 1:
        raise click.UsageError("--table takes one OUT_DIR")
    if not os.path.isdir(paths[0]):
        raise ConfigError(f"--table: {paths[0]} is not a folder")
    base = tables.load_baseline(baseline) if baseline is not None else None
    scores = tables.collect(paths[0])
    if not scores:
        warn(f"no rlvr summaries or lm-eval results under {paths[0]}")
    sys.stdout.write(tables.render(scores, fmt, base))


main = run(cmd)

if __name__ == "__main__":
    main()
