"""--eval-config FILE: the evaluation that runs beside training in one job (rlvr-eval --watch).

    benchmarks: [gsm8k, math500, ifeval]   # required: rlvr-eval --benchmark values
    interval: 120                          # seconds between scans for new checkpoints (default 60)
    args: [--max-model-len, "4096"]        # more rlvr-eval options, as they would be typed

An OLMES watch config runs OLMES (rlvr-eval --harness olmes) on its task groups instead, one
group per eval GPU at a time (the job image has OLMES in /opt/olmes-venv):

    harness: olmes
    task_groups:                           # one OLMES process per group and checkpoint
      - [gsm8k::tulu, ifeval::tulu]        # a list of OLMES task or suite names,
      - minerva_math::tulu                 # or one name / "a,b" (or {tasks: [...]} per group;
                                           # a group's gpu key is ignored: groups take free eval GPUs)
    harness_python: /opt/olmes-venv/bin/python   # optional (that is the default where it exists)
    interval: 60

The users' own OLMES watch config (their configs/eval/olmes-tulu-watch.yaml: `watch:`,
`output_dir:` and an `olmes:` section with `tasks`, `model_type` and `model_args`) is read too,
mapped onto the form above (olmes_watch_form): each of its tasks one task group,
watch.poll_interval_s the interval, model_args' dtype and max_length rlvr-eval's --dtype and
--max-model-len, its other model_args --model-args, num_shots and limit --shots and --limit.
Where it names things the job decides itself (which checkpoints, where results go, an HF
cache) a warning says so; a setting rlvr cannot honour is refused with the rlvr form to write.

The job runs `rlvr-eval --watch RUN/checkpoints/step_* RUN/evals -b ... --gpus EVAL_GPUS`
beside `rlvr-train` (on TRAIN_GPUS), and one `--once` pass after training for the last
checkpoints; results land in the run folder's evals/ (and on S3 under <job>/evals/).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import yaml

from rlvr.errors import UsageError

KEYS = ("benchmarks", "interval", "args", "harness", "task_groups", "harness_python")
HARNESSES = ("rlvr", "olmes", "lm-eval")


@dataclass
class EvalSpec:
    benchmarks: list[str]                      # the tasks of --watch
    interval: float = 60.0
    args: list[str] = field(default_factory=list)
    harness: str = "rlvr"
    harness_python: str | None = None
    job_benchmarks: list[str] | None = None    # the tasks of --jobs (eval-only jobs), where they differ
    eval_gpus: int | None = None               # how many GPUs the config evaluates on (its task groups)
    form: str = "rlvr"                         # the form it was written in (rlvr.eval.watchconfig.config_form)

    def options(self, jobs: bool = False) -> list[str]:
        """rlvr-eval's options for this config (tasks, harness, more args), without the mode."""
        cmd = []
        if self.harness != "rlvr":
            cmd += ["--harness", self.harness]
        if self.harness_python:
            cmd += ["--harness-python", self.harness_python]
        for b in (self.job_benchmarks or self.benchmarks) if jobs else self.benchmarks:
            cmd += ["-b", b]
        return cmd

    def command(self, pattern: str, out_dir: str, gpus: list[int] | None) -> list[str]:
        cmd = [sys.executable, "-m", "rlvr.commands.eval", "--watch", pattern, out_dir,
               "--interval", f"{self.interval:g}", *self.options()]
        if gpus:
            cmd += ["--gpus", ",".join(map(str, gpus))]
        return cmd + list(self.args)

    def jobs_command(self, jobs_file: str, out_dir: str, gpus: list[int] | None) -> list[str]:
        """`rlvr-eval --jobs JOBS OUT` over this config's tasks (an eval-only job)."""
        cmd = [sys.executable, "-m", "rlvr.commands.eval", "--jobs", jobs_file, out_dir, *self.options(jobs=True)]
        if gpus:
            cmd += ["--gpus", ",".join(map(str, gpus))]
        return cmd + list(self.args)


def load_eval_config(path: str) -> EvalSpec:
    if not os.path.isfile(path):
        raise UsageError(f"--eval-config {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping with {', '.join(KEYS)}")
    from rlvr.eval.watchconfig import config_form, lm_eval_watch_form

    form = config_form(data)
    if form == "lm-eval-watch":
        return _lm_eval_spec(path, lm_eval_watch_form(path, data, _warn()))
    if form == "olmes-watch":
        data = olmes_watch_form(path, data)
    eval_gpus = data.pop("eval_gpus", None) if form == "olmes-watch" else None
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UsageError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    harness = data.get("harness", "rlvr")
    if harness not in HARNESSES:
        raise UsageError(f"{path}: harness: expected one of {', '.join(HARNESSES)}, got {harness!r}")
    if "task_groups" in data:
        if harness != "olmes" or "benchmarks" in data:
            raise UsageError(f"{path}: task_groups go with harness: olmes (instead of benchmarks)")
        b = _task_groups(path, data["task_groups"])
    else:
        b = data.get("benchmarks")
        if isinstance(b, str):
            b = [b]
        if not b or not isinstance(b, list) or not all(isinstance(x, str) and x for x in b):
            raise UsageError(f"{path}: benchmarks: expected a non-empty list of benchmark names")
    if harness == "olmes":
        from rlvr.eval.harness import olmes_tasks

        for g in b:
            olmes_tasks(g)
    hp = data.get("harness_python")
    if hp is not None and (harness == "rlvr" or not isinstance(hp, str) or not hp):
        raise UsageError(f"{path}: harness_python: the path of the harness's interpreter (with harness: olmes "
                         "or lm-eval)")
    interval = data.get("interval", 60)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
        raise UsageError(f"{path}: interval: expected a number of seconds >= 0, got {interval!r}")
    args = data.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise UsageError(f"{path}: args: expected a list of rlvr-eval options")
    if harness == "lm-eval":
        _check_tasks(path, b, harness)
    return EvalSpec(list(b), float(interval), [str(a) for a in args], harness, hp, eval_gpus=eval_gpus, form=form)


def _warn():
    from rlvr.messages import warn

    return warn


def _check_tasks(path: str, tasks: list[str], harness: str) -> None:
    from rlvr.eval.jobs import sweep_tasks

    try:
        sweep_tasks(tasks, harness)
    except UsageError as e:
        raise UsageError(f"{path}: {e}") from None


def _lm_eval_spec(path: str, d: dict) -> EvalSpec:
    """EvalSpec of their lm-eval watch config (rlvr.eval.watchconfig), its tasks checked."""
    _check_tasks(path, d["benchmarks"], d["harness"])
    if d["job_benchmarks"] != d["benchmarks"]:
        _check_tasks(path, d["job_benchmarks"], d["harness"])
    return EvalSpec(d["benchmarks"], float(d.get("interval", 60)), d["args"], d["harness"],
                    job_benchmarks=d["job_benchmarks"], eval_gpus=d.get("eval_gpus"), form="lm-eval-watch")


def _task_groups(path: str, groups) -> list[str]:
    """OLMES task groups as rlvr-eval -b values ("a::tulu,b::tulu")."""
    if not isinstance(groups, list) or not groups:
        raise UsageError(f"{path}: task_groups: expected a non-empty list of task groups")
    out = []
    for i, g in enumerate(groups):
        if isinstance(g, dict):
            g = g.get("tasks", g.get("benchmarks"))
        if isinstance(g, str):
            g = [g]
        if isinstance(g, list) and any(isinstance(t, dict) and set(t) - {"task"} for t in g):
            raise UsageError(f"{path}: task_groups[{i}]: an OLMES task takes its own settings (num_fewshot and "
                             "the like are not per task here: args: [--shots, N] sets every task's)")
        names = [t.get("task") if isinstance(t, dict) else t for t in g] if isinstance(g, list) else None
        if not names or not all(isinstance(t, str) and t for t in names):
            raise UsageError(f"{path}: task_groups[{i}]: expected OLMES task names (a list, a string or {{tasks: [...]}})")
        out.append(",".join(names))
    return out


# --------------------------------------------------------------------------- the users' form

THEIR_KEYS = {"olmes", "watch", "output_dir", "seed", "parallel_gpus"}
# what the job decides itself: accepted, with a warning naming what happens instead
_JOB_DECIDES = {
    "output_dir": "results go to the run folder's evals/ (and to S3 under <job>/evals/)",
    "parallel_gpus": "the eval GPUs are rlvr-submit's --eval-gpus",
    "watch.run_name": "the job watches its own run's checkpoints (RUN/checkpoints/step_*)",
    "watch.local_dir": "the job watches its own run's checkpoints (RUN/checkpoints/step_*)",
    "watch.checkpoint_prefix": "the job watches its own run's checkpoints (RUN/checkpoints/step_*)",
    "olmes.hf_cache_s3": "rlvr does not sync an HF cache for OLMES: it reads its data as its environment "
                         "lets it (HF_HOME, HF_DATASETS_OFFLINE)",
    "olmes.hf_cache_local": "rlvr does not sync an HF cache for OLMES: it reads its data as its environment "
                            "lets it (HF_HOME, HF_DATASETS_OFFLINE)",
    "olmes.upload_summary": "the evals/ folder (OLMES's metrics and rlvr's table) goes to S3 with the run",
}
_OLMES_KEYS = {"tasks", "task_suites", "model_type", "model_args", "num_shots", "limit", "hf_cache_s3",
               "hf_cache_local", "upload_summary", "num_workers", "num_gpus"}


def olmes_watch_form(path: str, data: dict) -> dict:
    """The users' OLMES watch config (harness: olmes, watch:, output_dir:, olmes: {tasks,
    model_type, model_args, ...}) as rlvr's form (harness, interval, task_groups, args).
    Warns for what the job decides itself; UsageError, with the rlvr form to write, for a
    setting rlvr cannot honour."""
    from rlvr.eval.harness import OLMES_MODEL_ARGS
    from rlvr.messages import warn

    out: dict = {"harness": data.get("harness", "olmes")}
    args: list[str] = []
    problems: list[str] = []
    ignored: list[str] = []
    olmes = data.get("olmes") or {}
    watch = data.get("watch") or {}
    if not isinstance(olmes, dict) or not isinstance(watch, dict):
        raise UsageError(f"{path}: olmes and watch must be mappings (their OLMES watch config)")
    for key in sorted(set(data) - THEIR_KEYS - {"harness"}):
        problems.append(f"{key}: not a key of an OLMES watch config")
    if out["harness"] != "olmes":
        problems.append(f"harness: {out['harness']!r} with an olmes section (write harness: olmes)")
    if data.get("seed", 42) != 42:
        problems.append(f"seed: {data['seed']!r} (rlvr runs OLMES with seed 42)")
    for key in sorted(watch):
        if key == "enable":
            if watch[key] is not True:
                problems.append("watch.enable: an --eval-config evaluates beside training; leave it out or true")
        elif key == "poll_interval_s":
            out["interval"] = watch[key]
        elif f"watch.{key}" in _JOB_DECIDES:
            ignored.append(f"watch.{key}")
        else:
            problems.append(f"watch.{key}: not a key of an OLMES watch config")
    groups = []
    for key in ("task_suites", "tasks"):
        v = olmes.get(key) or []
        groups += [v] if isinstance(v, str) else list(v) if isinstance(v, list) else [v]
    if groups:
        out["task_groups"] = groups        # one OLMES process per task, each on a free eval GPU
    else:
        problems.append("olmes.tasks: the OLMES tasks or suites to run (a list)")
    if olmes.get("model_type", "vllm") != "vllm":
        problems.append(f"olmes.model_type: {olmes['model_type']!r} (rlvr runs OLMES with vllm)")
    margs = olmes.get("model_args") or {}
    if not isinstance(margs, dict):
        problems.append("olmes.model_args: a mapping of OLMES model arguments")
        margs = {}
    extra = []
    for k, v in margs.items():
        if k == "dtype":
            args += ["--dtype", str(v)]
        elif k in ("max_length", "max_model_len"):
            args += ["--max-model-len", str(v)]
        elif k == "gpu_memory_utilization":  # memory only: OLMES's vLLM takes it as given
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
                problems.append(f"olmes.model_args.{k}: expected a number in (0, 1], got {v!r}")
            elif v != OLMES_MODEL_ARGS[k]:
                extra.append(f"{k}={v}")
        elif k in OLMES_MODEL_ARGS or k == "model_path":
            if v != OLMES_MODEL_ARGS.get(k):
                problems.append(f"olmes.model_args.{k}: {v!r} (rlvr's OLMES runs fix it at "
                                f"{OLMES_MODEL_ARGS.get(k)!r}: one GPU per task group)")
        else:
            extra.append(f"{k}={v}")
    if extra:
        args += ["--model-args", ",".join(extra)]
    # the newer form (their olmo-repro branch): num_gpus evaluation GPUs, num_workers OLMES
    # processes per task: rlvr runs one process per task group on each of the evaluation GPUs
    for k in ("num_gpus", "num_workers"):
        v = olmes.get(k)
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            problems.append(f"olmes.{k}: expected an integer >= 1, got {v!r}")
    if olmes.get("num_workers") not in (None, 1):
        problems.append(f"olmes.num_workers: {olmes['num_workers']!r} (rlvr runs one OLMES process per task group "
                        "and GPU: spread them with num_gpus)")
    if isinstance(olmes.get("num_gpus"), int) and not isinstance(olmes["num_gpus"], bool):
        out["eval_gpus"] = olmes["num_gpus"]   # the job's default number of evaluation GPUs
    for k, opt in (("num_shots", "--shots"), ("limit", "--limit")):
        if olmes.get(k) is not None:
            args += [opt, str(olmes[k])]
    for key in sorted(olmes):
        if key not in _OLMES_KEYS:
            problems.append(f"olmes.{key}: not something rlvr's OLMES runs take")
        elif f"olmes.{key}" in _JOB_DECIDES and olmes[key] not in (None, False):
            ignored.append(f"olmes.{key}")
    ignored += [k for k in ("output_dir", "parallel_gpus") if k in data]
    if args:
        out["args"] = args
    if problems:
        form = yaml.safe_dump({k: v for k, v in out.items() if k != "eval_gpus"}, default_flow_style=True, sort_keys=False, width=1 << 16).strip()
        raise UsageError(f"{path}: {problems[0]}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else "")
                         + f"; in rlvr's form (YAML), what maps of it is: {form}")
    for key in ignored:
        warn(f"{path}: {key} ignored: {_JOB_DECIDES[key]}")
    return out
