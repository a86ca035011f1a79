"""Evaluation configs in the users' lm-eval form, read as rlvr's (--eval-config, rlvr-eval --config).

An evaluation config comes in one of three forms; which one is decided by its keys alone
(config_form), never by trying one form after another:

- their OLMES watch config: an ``olmes:`` section (rlvr.cloud.evalspec.olmes_watch_form);
- their lm-eval watch config: any of ``vllm:``, ``max_gen_toks:``, ``watch:``, ``seed:``,
  ``output_dir:``, or ``benchmarks:`` given as ``{task, num_fewshot}`` mappings (this module);
- rlvr's own form: ``benchmarks: [names]``, ``interval``, ``args``, ``harness``, ``task_groups``.

Their lm-eval watch config (configs/eval/lm_eval_*.yaml of their repository)::

    seed: 42
    output_dir: /efs/.../eval_results/x          # the job (or OUT_DIR) decides: warned, unused
    vllm: {tensor_parallel_size: 1, dtype: bfloat16, gpu_memory_utilization: 0.8, max_model_len: 4096}
    max_gen_toks: {gsm8k_cot: 1024, minerva_math: 2048, default: 1024}   # optional
    benchmarks: [{task: gsm8k_cot, num_fewshot: 4}, ...]                # the tasks of a non-watch run
    watch:
      enable: true
      poll_interval_s: 30
      gpu_mode: visible
      local_dir: /efs/...; pattern: run_step*    # the job (or --watch GLOB) decides: warned, unused
      task_groups: [{gpu: 0, benchmarks: [{task: gsm8k_cot, num_fewshot: 4}, ...]}, ...]

maps onto rlvr-eval as: each ``{task, num_fewshot}`` a sweep task ``task:num_fewshot`` (the
same lm-eval task with the same shots, through rlvr's lm-eval-parity path, or lm-eval itself
with ``harness: lm-eval``); the watch's task groups are the tasks of --watch (the union of the
groups, in order), ``benchmarks`` those of --jobs (the groups' union where it is missing);
``vllm.dtype`` and ``max_model_len`` rlvr-eval's --dtype and --max-model-len (tensor parallel 1
and gpu_memory_utilization 0.8 are rlvr's template and cannot change); ``max_gen_toks`` each
task's --max-tokens TASK=N (``default`` for the tasks it does not name); a task without a length
there keeps its own (lm-eval's max_gen_toks), which is said once when the config is read. The
length used is in each summary.json (settings.max_tokens) and completions cut there are counted
(hit_max_tokens) with a warning. The task groups' GPUs are not pinned: rlvr spreads the units
over the evaluation GPUs as they free up; the number of groups is how many GPUs the job
evaluates on by default. ``args`` (rlvr's key) adds rlvr-eval options in any form.

Every problem is one line "FILE: KEY: what (expected TYPE, got VALUE)"; all of them are given.
"""

from __future__ import annotations

from collections.abc import Callable

LM_EVAL_KEYS = {"seed", "output_dir", "vllm", "max_gen_toks", "benchmarks", "watch", "harness", "args"}
OLMES_MARK = "olmes"
_VLLM = {"tensor_parallel_size": int, "dtype": str, "gpu_memory_utilization": float, "max_model_len": int}
_WATCH = {"enable": bool, "poll_interval_s": float, "gpu_mode": str, "task_groups": list, "local_dir": str,
          "pattern": str, "s3_prefix": str, "run_name": str, "checkpoint_prefix": str}
_JOB_DECIDES = ("local_dir", "pattern", "s3_prefix", "run_name", "checkpoint_prefix")
DTYPES = ("bfloat16", "float16", "float32", "auto")
TEMPLATE_MEMORY = 0.8   # rlvr's (and lm-eval's standard template's) gpu_memory_utilization


def config_form(data: dict) -> str:
    """"olmes-watch", "lm-eval-watch" or "rlvr": which form an evaluation config is in, by its keys."""
    if OLMES_MARK in data:
        return "olmes-watch"
    if data.get("harness") == "olmes" and set(data) & {"watch", "output_dir", "seed", "parallel_gpus"}:
        return "olmes-watch"
    bench = data.get("benchmarks")
    if set(data) & {"vllm", "max_gen_toks", "watch", "seed", "output_dir"} or (
            isinstance(bench, list) and any(isinstance(b, dict) for b in bench)):
        return "lm-eval-watch"
    return "rlvr"


def _type(tp) -> str:
    return {int: "an integer", float: "a number", str: "a string", bool: "true/false", list: "a list",
            dict: "a mapping"}[tp]


def _ok(value, tp) -> bool:
    if tp is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(value, tp)


def lm_eval_watch_form(path: str, data: dict, warn: Callable[[str], None]) -> dict:
    """Their lm-eval watch config as rlvr's form: {"benchmarks": [TASK:SHOTS, ...] (the watch's),
    "job_benchmarks": [...] (--jobs'), "interval", "args", "harness", "eval_gpus" (how many task
    groups)}. UsageError with one line per problem."""
    from rlvr.errors import UsageError

    problems: list[str] = []

    def bad(key: str, what: str) -> None:
        problems.append(f"{path}: {key}: {what}")

    def typed(key: str, value, tp) -> bool:
        if _ok(value, tp):
            return True
        bad(key, f"expected {_type(tp)}, got {value!r}")
        return False

    for key in sorted(set(data) - LM_EVAL_KEYS):
        bad(key, f"unknown key (known here: {', '.join(sorted(LM_EVAL_KEYS))})")
    out: dict = {"harness": data.get("harness", "rlvr")}
    if out["harness"] not in ("rlvr", "lm-eval"):
        bad("harness", f"expected rlvr or lm-eval for lm-eval tasks, got {out['harness']!r}")
    args: list[str] = []
    if "seed" in data and typed("seed", data["seed"], int) and data["seed"] != 42:
        bad("seed", f"{data['seed']!r}: rlvr evaluates with seed 42 (lm-eval's --seed 42)")
    if "output_dir" in data:
        if typed("output_dir", data["output_dir"], str):
            warn(f"{path}: output_dir ignored: results go to the job's evals/ (or rlvr-eval's OUT_DIR)")

    def section(name: str, schema: dict):
        """The known, well-typed (key, value) pairs of a section (a problem line for the others)."""
        d = data.get(name) or {}
        if not typed(name, d, dict):
            return
        for k, v in d.items():
            if k not in schema:
                bad(f"{name}.{k}", f"unknown key (known here: {', '.join(sorted(schema))})")
            elif typed(f"{name}.{k}", v, schema[k]):
                yield k, v

    for k, v in section("vllm", _VLLM):
        if k == "tensor_parallel_size" and v != 1:
            bad(f"vllm.{k}", f"{v}: rlvr evaluates with tensor parallel 1 (it changes small models' scores)")
        elif k == "gpu_memory_utilization" and abs(v - TEMPLATE_MEMORY) > 1e-9:
            bad(f"vllm.{k}", f"{v}: rlvr's evaluation template fixes it at {TEMPLATE_MEMORY}")
        elif k == "dtype":
            if v not in DTYPES:
                bad(f"vllm.{k}", f"expected one of {', '.join(DTYPES)}, got {v!r}")
            else:
                args += ["--dtype", v]
        elif k == "max_model_len":
            if v < 1:
                bad(f"vllm.{k}", f"expected an integer >= 1, got {v!r}")
            else:
                args += ["--max-model-len", str(v)]
    lengths: dict[str, int] = {}
    gen = data.get("max_gen_toks") or {}
    if typed("max_gen_toks", gen, dict):
        for k, v in gen.items():
            if typed(f"max_gen_toks.{k}", v, int):
                if v < 1:
                    bad(f"max_gen_toks.{k}", f"expected an integer >= 1, got {v!r}")
                else:
                    lengths[str(k)] = v
    top = _tasks(path, "benchmarks", data.get("benchmarks"), bad, typed) if "benchmarks" in data else None
    groups: list[list[str]] = []
    watch = data.get("watch") if isinstance(data.get("watch"), dict) else {}
    for k, v in section("watch", _WATCH):
        if k == "poll_interval_s":
            if v < 0:
                bad(f"watch.{k}", f"expected a number of seconds >= 0, got {v!r}")
            else:
                out["interval"] = v
        elif k == "gpu_mode" and v not in ("absolute", "visible"):
            bad(f"watch.{k}", f"expected absolute or visible, got {v!r}")
        elif k in _JOB_DECIDES:
            warn(f"{path}: watch.{k} ignored: the job watches its own run's checkpoints "
                 "(or rlvr-eval's --watch GLOB names them)")
        elif k == "task_groups":
            for i, g in enumerate(v):
                where = f"watch.task_groups[{i}]"
                if not typed(where, g, dict):
                    continue
                for gk in sorted(set(g) - {"gpu", "benchmarks"}):
                    bad(f"{where}.{gk}", "unknown key (known here: benchmarks, gpu)")
                if "gpu" in g and typed(f"{where}.gpu", g["gpu"], int) and g["gpu"] < 0:
                    bad(f"{where}.gpu", f"expected a GPU index >= 0, got {g['gpu']!r}")
                groups.append(_tasks(path, f"{where}.benchmarks", g.get("benchmarks"), bad, typed))
    if watch.get("enable") is False:
        groups = []   # their watcher would not run: the tasks are the benchmarks list's
    watched = list(dict.fromkeys(t for g in groups for t in g)) or top
    if not watched:
        bad("benchmarks", "no task: give benchmarks: [{task, num_fewshot}] or watch.task_groups")
    extra = data.get("args") or []
    if not isinstance(extra, list) or not all(isinstance(a, (str, int, float)) for a in extra):
        bad("args", f"expected a list of rlvr-eval options, got {extra!r}")
        extra = []
    if problems:
        raise UsageError("\n".join(problems))
    names = list(dict.fromkeys(t.split(":")[0] for t in [*watched, *(top or [])]))
    for name in names:
        n = lengths.get(name, lengths.get("default"))
        if n is not None:
            args += ["--max-tokens", f"{name}={n}"]
    own = [n for n in names if n not in lengths and "default" not in lengths]
    if own:
        warn(f"{path}: no max_gen_toks for {', '.join(own)}: each runs with its task's own generation length "
             "(lm-eval's max_gen_toks; 256 for gsm8k_cot); completions cut there are counted in summary.json "
             "(hit_max_tokens) and warned about (add max_gen_toks: {TASK: N} for longer answers)")
    out.update(benchmarks=watched, job_benchmarks=top or watched, args=args + [str(a) for a in extra])
    if groups:
        out["eval_gpus"] = len({g.get("gpu", i) for i, g in enumerate(watch["task_groups"])})
    return out


def _tasks(path: str, key: str, items, bad, typed) -> list[str]:
    """[{task, num_fewshot}, ...] -> ["task:shots", ...] (a problem line for each bad entry)."""
    from rlvr.eval.jobs import parse_task

    if not typed(key, items, list):
        return []
    if not items:
        bad(key, "expected at least one {task, num_fewshot}")
    out = []
    for i, b in enumerate(items):
        where = f"{key}[{i}]"
        if not typed(where, b, dict):
            continue
        for k in sorted(set(b) - {"task", "num_fewshot"}):
            bad(f"{where}.{k}", "unknown key (known here: num_fewshot, task)")
        task, shots = b.get("task"), b.get("num_fewshot")
        if "task" not in b:
            bad(f"{where}.task", "missing (an lm-eval task name, e.g. gsm8k_cot)")
            continue
        if not typed(f"{where}.task", task, str):
            continue
        if shots is not None and typed(f"{where}.num_fewshot", shots, int) and shots < 0:
            bad(f"{where}.num_fewshot", f"expected an integer >= 0, got {shots!r}")
            continue
        text = task if not isinstance(shots, int) or isinstance(shots, bool) else f"{task}:{shots}"
        try:
            parse_task(text)
        except Exception as e:  # noqa: BLE001 - UsageError: its message
            bad(f"{where}.task", str(e))
            continue
        out.append(text)
    return out
