"""Evaluation configs in the users' forms, eval-only cloud jobs and train + eval in one job.

Their 13 lm-eval watch configs and the newer OLMES watch config are vendored unmodified under
tests/data/eval/ (provenance in its README). Jobs are simulated as tests/test_submit.py does:
`rlvr-submit --local` writes SageMaker's /opt/ml layout (the fake docker records the
container's command line), then the entry point runs on it as the container would, with
RLVR_OPT_ML pointing there; S3 is the S3 test server (tests/s3server.py: Ceph RGW or moto),
the other AWS services moto. Evaluations are real: the hf engine on the tiny model, lm-eval's
gsm8k_cot task read from tests/data/lmeval/gsm8k.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys
import textwrap

import pytest

from helpers import REPO, invoke
from s3_fixtures import bucket, s3env, s3server  # noqa: F401 - fixtures
from test_submit import FAKES, TINY, aws, aws_server  # noqa: F401 - fixtures

from rlvr.cloud.entrypoint import JobEnv, plan
from rlvr.cloud.evaljob import expand_checkpoints, report, spec_units
from rlvr.cloud.evalspec import load_eval_config
from rlvr.cloud.sagemaker import split_gpus
from rlvr.errors import UsageError
from rlvr.eval.watchconfig import config_form

DATA = os.path.join(REPO, "tests", "data", "eval")
THEIRS = sorted(glob.glob(os.path.join(DATA, "lm_eval_watch", "*.yaml")))
GSM8K = os.path.join(REPO, "tests", "data", "lmeval", "gsm8k")
CPU_ARGS = ["--engine", "hf", "--limit", "2", "--verify-jobs", "1", "--source", f"gsm8k_cot={GSM8K}"]


def lm_eval_config(path, length: int = 8, **extra) -> str:
    """An lm-eval watch config in their form, with the options a CPU run needs (rlvr's args key)."""
    doc = {"seed": 42, "vllm": {"tensor_parallel_size": 1, "dtype": "float32", "gpu_memory_utilization": 0.8,
                                "max_model_len": 2048},
           "max_gen_toks": {"gsm8k_cot": length},
           "benchmarks": [{"task": "gsm8k_cot", "num_fewshot": 1}],
           "watch": {"enable": True, "poll_interval_s": 1, "gpu_mode": "visible",
                     "task_groups": [{"gpu": 0, "benchmarks": [{"task": "gsm8k_cot", "num_fewshot": 1}]}]},
           "args": CPU_ARGS, **extra}
    with open(path, "w") as fh:
        json.dump(doc, fh)   # JSON is YAML
    return str(path)


# ----------------------------------------------------------------------------- the configs


def test_their_thirteen_lm_eval_watch_configs_load_with_their_meaning(capsys):
    assert len(THEIRS) == 13
    import yaml

    for path in THEIRS:
        raw = yaml.safe_load(open(path))
        assert config_form(raw) == "lm-eval-watch", path
        spec = load_eval_config(path)
        groups = [f"{b['task']}:{b['num_fewshot']}" for g in raw["watch"]["task_groups"] for b in g["benchmarks"]]
        assert spec.benchmarks == list(dict.fromkeys(groups)), path      # the watch's tasks, same shots
        top = [f"{b['task']}:{b['num_fewshot']}" for b in raw.get("benchmarks") or []]
        assert spec.job_benchmarks == (top or spec.benchmarks), path     # --jobs: their benchmarks list
        assert spec.interval == raw["watch"]["poll_interval_s"] and spec.harness == "rlvr"
        assert spec.eval_gpus == len(raw["watch"]["task_groups"])
        assert spec.args[:4] == ["--dtype", "bfloat16", "--max-model-len", "4096"], spec.args
        lengths = dict(a.split("=") for a in spec.args[5::2] if "=" in a)
        gen = raw.get("max_gen_toks") or {}
        for task in {t.split(":")[0] for t in spec.benchmarks + spec.job_benchmarks}:
            if gen:   # the length each task needs, as they wrote it
                assert int(lengths[task]) == gen.get(task, gen.get("default")), (path, task)
            else:     # none: the task's own, said out loud
                assert task not in lengths
        err = capsys.readouterr().err
        if not gen:
            assert "no max_gen_toks for" in err and "hit_max_tokens" in err, err
        assert "watch.local_dir ignored" in err or "local_dir" not in raw["watch"]
    # their lm_eval_watch.yaml: gsm8k_cot 1024, minerva_math and hendrycks_math 2048, ifeval 4096
    spec = load_eval_config(os.path.join(DATA, "lm_eval_watch", "lm_eval_watch.yaml"))
    assert spec.args[4:] == ["--max-tokens", "gsm8k_cot=1024", "--max-tokens", "ifeval=4096",
                             "--max-tokens", "minerva_math=2048", "--max-tokens", "hendrycks_math=2048"]
    cmd = spec.command("RUN/checkpoints/step_*", "RUN/evals", [6, 7])
    assert cmd[3:] == ["--watch", "RUN/checkpoints/step_*", "RUN/evals", "--interval", "30", "-b", "gsm8k_cot:4",
                       "-b", "ifeval:0", "-b", "minerva_math:4", "-b", "hendrycks_math:4", "--gpus", "6,7",
                       *spec.args]


def test_the_newer_olmes_watch_config_is_accepted():
    spec = load_eval_config(os.path.join(DATA, "olmes-tulu-watch-olmo-repro.yaml"))
    assert spec.form == "olmes-watch" and spec.harness == "olmes" and spec.eval_gpus == 2
    assert spec.benchmarks == ["gsm8k::tulu", "minerva_math::tulu", "ifeval::tulu", "ifeval_ood::tulu"]
    i = spec.args.index("--model-args")
    assert "gpu_memory_utilization=0.9" in spec.args[i + 1].split(",")
    from rlvr.eval.harness import olmes_command, typed_args

    cmd = olmes_command("python", "/c/step_1", ["gsm8k::tulu"], "/o",
                        extra_model_args=typed_args(dict(a.split("=") for a in spec.args[i + 1].split(","))))
    assert json.loads(cmd[cmd.index("--model-args") + 1])["gpu_memory_utilization"] == 0.9


def test_forms_are_recognised_by_their_keys_and_problems_are_one_line_each(tmp_path):
    assert config_form({"benchmarks": ["gsm8k"]}) == "rlvr"
    assert config_form({"benchmarks": [{"task": "gsm8k", "num_fewshot": 8}]}) == "lm-eval-watch"
    assert config_form({"olmes": {"tasks": ["gsm8k::tulu"]}}) == "olmes-watch"
    assert config_form({"vllm": {}}) == config_form({"max_gen_toks": {}}) == "lm-eval-watch"
    bad = tmp_path / "bad.yaml"
    bad.write_text(textwrap.dedent("""\
        seed: x
        vllm: {dtype: bfloat16, max_model_len: "4096", tensor_parallel_size: 2, swap_space: 4}
        max_gen_toks: {gsm8k_cot: long}
        benchmarks: [{task: gsm8k_cot, num_fewshot: four}, {task: ifeval, shots: 0}]
        watch: {poll_interval_s: soon, task_groups: [{gpu: a, benchmarks: [{task: gsm8k_cot}]}]}
        extra: 1
        """))
    with pytest.raises(UsageError) as e:
        load_eval_config(str(bad))
    lines = str(e.value).splitlines()
    p = str(bad)
    assert lines == [
        f"{p}: extra: unknown key (known here: args, benchmarks, harness, max_gen_toks, output_dir, seed, vllm, watch)",
        f"{p}: seed: expected an integer, got 'x'",
        f"{p}: vllm.max_model_len: expected an integer, got '4096'",
        f"{p}: vllm.tensor_parallel_size: 2: rlvr evaluates with tensor parallel 1 (it changes small models' scores)",
        f"{p}: vllm.swap_space: unknown key (known here: dtype, gpu_memory_utilization, max_model_len, "
        "tensor_parallel_size)",
        f"{p}: max_gen_toks.gsm8k_cot: expected an integer, got 'long'",
        f"{p}: benchmarks[0].num_fewshot: expected an integer, got 'four'",
        f"{p}: benchmarks[1].shots: unknown key (known here: num_fewshot, task)",
        f"{p}: watch.poll_interval_s: expected a number, got 'soon'",
        f"{p}: watch.task_groups[0].gpu: expected an integer, got 'a'",
    ], lines
    bad.write_text("benchmarks: [{task: gsm9k_cot, num_fewshot: 4}]\n")
    with pytest.raises(UsageError, match="unknown benchmark 'gsm9k_cot'"):
        load_eval_config(str(bad))
    bad.write_text("vllm: {gpu_memory_utilization: 0.9}\nbenchmarks: [{task: gsm8k_cot, num_fewshot: 4}]\n")
    with pytest.raises(UsageError, match="gpu_memory_utilization: 0.9: rlvr's evaluation template fixes it at 0.8"):
        load_eval_config(str(bad))
    # through lm-eval itself: the same tasks and shots, and the lengths as lm-eval's gen_kwargs
    bad.write_text("harness: lm-eval\nmax_gen_toks: {default: 512}\nbenchmarks: [{task: gsm8k_cot, num_fewshot: 4}]\n")
    spec = load_eval_config(str(bad))
    assert spec.options(jobs=True) == ["--harness", "lm-eval", "-b", "gsm8k_cot:4"]
    assert spec.args == ["--max-tokens", "gsm8k_cot=512"]
    from rlvr.eval.harness import command

    cmd = command("py", "/c", ["gsm8k_cot"], 4, "/o", code=False, include=[], max_gen_toks=512)
    assert cmd[cmd.index("--gen_kwargs") + 1] == "temperature=0,max_gen_toks=512"
    # and the units of a sweep pass the length on
    from rlvr.eval import jobs as sweep
    from rlvr.eval.runner import EvalOptions

    unit = sweep.Unit("/c", "/o/c/gsm8k_cot_4shot", sweep.Task("gsm8k_cot", 4))
    args = " ".join(sweep.unit_command(unit, EvalOptions(harness="lm-eval", max_tokens_by={"gsm8k_cot": 512}), "0"))
    assert "--harness lm-eval" in args and "--max-tokens gsm8k_cot=512" in args


def test_the_config_decides_how_many_gpus_evaluate_beside_training():
    assert split_gpus(8, None, None, "x", want=2)[:2] == (list(range(6)), [6, 7])
    assert split_gpus(8, None, None, "x")[:2] == (list(range(6)), [6, 7])
    assert split_gpus(8, None, None, "x", want=3)[:2] == (list(range(5)), [5, 6, 7])
    assert split_gpus(2, None, None, "x", want=4)[:2] == ([0], [1])


def test_rlvr_eval_config_gives_the_watch_its_tasks_lengths_and_interval(tmp_path):
    """rlvr-eval --watch GLOB OUT --config FILE evaluates with the config's task, shots and length."""
    from rlvr.tiny import build

    build(str(tmp_path / "run" / "checkpoints" / "step_000001"))
    cfg = lm_eval_config(tmp_path / "ev.yaml", length=6)
    out = tmp_path / "evals"
    r = invoke("rlvr-eval", ["--watch", str(tmp_path / "run" / "checkpoints" / "step_*"), str(out), "--config", cfg,
                             "--once", "--dtype", "float32"])
    assert r.code == 0, r.stderr
    s = json.load(open(out / "step_000001" / "gsm8k_cot_1shot" / "summary.json"))
    assert s["settings"]["num_fewshot"] == 1 and s["settings"]["max_tokens"] == 6 and s["records"] == 2
    assert "hit_max_tokens" in s
    r = invoke("rlvr-eval", ["CKPT", str(out), "--config", cfg])
    assert r.code == 2 and "--config goes with --watch or --jobs" in r.stderr


# ----------------------------------------------------------------------------- checkpoints of an eval-only job


def test_checkpoints_by_folder_job_run_name_and_glob(tmp_path):
    keys = {"s3://b/p/checkpoints/job-1/": ["r_step1/config.json", "r_step1/model.safetensors", "r_step2/config.json",
                                             "r_final/config.json", "traces/trace.jsonl", "config.yaml"],
            "s3://b/p/checkpoints/": ["job-1/r_step1/config.json", "job-1/r_step2/config.json",
                                      "job-1/r_final/config.json", "job-2/q_step10/config.json"],
            "s3://b/m/base/": ["config.json", "model.safetensors"]}

    def listing(uri):
        return keys[uri]

    got = expand_checkpoints(["job-1"], jobs_uri="s3://b/p/checkpoints/", local=False, list_folder=listing)
    assert [(f.path, f.name) for f in got] == [("s3://b/p/checkpoints/job-1/r_step1/", "job-1/r_step1"),
                                               ("s3://b/p/checkpoints/job-1/r_step2/", "job-1/r_step2")]
    got = expand_checkpoints(["s3://b/p/checkpoints/*/*_step1*", "s3://b/m/base"], jobs_uri=None, local=False,
                             list_folder=listing)
    assert [f.name for f in got] == ["job-1/r_step1", "job-2/q_step10", "m/base"]
    with pytest.raises(UsageError, match="a local path; the SageMaker job cannot see"):
        expand_checkpoints([str(tmp_path)], jobs_uri=None, local=False, list_folder=listing)
    with pytest.raises(UsageError, match="no checkpoint there"):
        expand_checkpoints([str(tmp_path)], jobs_uri=None, local=True)
    with pytest.raises(UsageError, match="needs --s3"):
        expand_checkpoints(["job-1"], jobs_uri=None, local=False)


def test_local_dry_run_builds_the_eval_only_job(aws, tmp_path):
    from rlvr.tiny import build

    for s in (1, 2):
        build(str(tmp_path / "run" / "checkpoints" / f"step_00000{s}"))
    cfg = lm_eval_config(tmp_path / "ev.yaml")
    r = invoke("rlvr-submit", ["--eval", str(tmp_path / "run"), "--eval-config", cfg, "--local", "--dry-run",
                               "--name", "ev-dry", "--job-log", aws.log, "--local-dir", str(tmp_path / "jobs")])
    assert r.code == 0, r.stderr
    shown = json.loads(r.stdout)
    assert shown["hyperparameters"] == {"rlvr_eval_config": "ev.yaml", "rlvr_eval_jobs": "jobs.json"}
    assert shown["eval_jobs"] == [{"checkpoint_path": f"/opt/ml/input/data/checkpoint-{i}",
                                   "output_name": f"run/step_00000{i + 1}"} for i in (0, 1)]
    d = shown["docker"]
    assert f"{tmp_path}/run/checkpoints/step_000001:/opt/ml/input/data/checkpoint-0:ro" in d
    r = invoke("rlvr-submit", ["--eval", str(tmp_path / "run"), "--local", "--dry-run"])
    assert r.code == 2 and "needs --eval-config" in r.stderr
    r = invoke("rlvr-submit", [TINY, TINY])
    assert r.code == 2 and "one CONFIG" in r.stderr


def test_sagemaker_dry_run_of_an_eval_only_job(aws, tmp_path):
    from rlvr.tiny import build

    model = build(str(tmp_path / "m"))
    for f in os.listdir(model):
        aws.s3.upload_file(os.path.join(model, f), aws.bucket, f"rlvr/checkpoints/job-a/tiny_step1/{f}")
    cfg = lm_eval_config(tmp_path / "ev.yaml")
    r = invoke("rlvr-submit", ["--eval", "job-a", "--eval-config", cfg, "--role", aws.role, "--s3", aws.s3uri,
                               "--job-log", aws.log, "--image", f"{aws.repo}:v1", "--dry-run", "--name", "ev-sm",
                               "--eval-gpus", "0-3"])
    assert r.code == 0, r.stderr
    req = json.loads(r.stdout)
    assert req["HyperParameters"] == {"rlvr_eval_config": "ev.yaml", "rlvr_eval_gpus": "0,1,2,3",
                                      "rlvr_eval_jobs": "jobs.json", "rlvr_eval_results": f"s3://{aws.bucket}/rlvr/evals/"}
    assert f'"checkpoint_path": "s3://{aws.bucket}/rlvr/checkpoints/job-a/tiny_step1/"' in r.stderr
    assert "job-a/tiny_step1" in r.stderr
    # a training job with their config: its two task groups evaluate on the last two GPUs
    r = invoke("rlvr-submit", [TINY, "--eval-config", os.path.join(DATA, "lm_eval_watch", "lm_eval_watch.yaml"),
                               "--role", aws.role, "--s3", aws.s3uri, "--job-log", aws.log, "--image",
                               f"{aws.repo}:v1", "--dry-run", "--instance-type", "ml.p4de.24xlarge"])
    assert r.code == 0, r.stderr
    hp = json.loads(r.stdout)["HyperParameters"]
    assert (hp["rlvr_train_gpus"], hp["rlvr_eval_gpus"]) == ("0,1,2,3,4,5", "6,7")
    assert "the eval config evaluates on 2" in r.stderr


# ----------------------------------------------------------------------------- simulated jobs


def run_job(opt_ml, env, job: str) -> tuple[int, str]:
    p = subprocess.run([sys.executable, "-m", "rlvr.cloud.entrypoint", "train"], cwd="/", capture_output=True,
                       env=dict(env, RLVR_OPT_ML=str(opt_ml), TRAINING_JOB_NAME=job), timeout=900)
    return p.returncode, p.stdout.decode(errors="replace") + p.stderr.decode(errors="replace")


def job_env(s3env, tmp_path) -> dict:
    return dict(s3env.env(), PYTHONPATH=REPO, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0",
                TOKENIZERS_PARALLELISM="false", RLVR_CACHE=str(tmp_path / "cache"),
                PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"])


def test_eval_only_job_uploads_results_and_a_second_one_skips_them(aws, s3env, tmp_path):
    from rlvr.tiny import build

    model = build(str(tmp_path / "m"))
    for f in os.listdir(model):
        aws.s3.upload_file(os.path.join(model, f), aws.bucket, f"rlvr/checkpoints/job-a/tiny_step1/{f}")
    cfg = lm_eval_config(tmp_path / "ev.yaml")
    env = job_env(s3env, tmp_path)
    key = "rlvr/evals/job-a/tiny_step1/gsm8k_cot_1shot/summary.json"
    stamps = []
    for name in ("ev-one", "ev-two"):
        r = invoke("rlvr-submit", ["--eval", "job-a", "--eval-config", cfg, "--local", "--s3", aws.s3uri,
                                   "--name", name, "--job-log", aws.log, "--local-dir", str(tmp_path / "jobs"),
                                   "--sync-interval", "1"])
        assert r.code == 0, r.stderr
        opt_ml = tmp_path / "jobs" / name
        (p,) = [json.loads(ln) for ln in open(aws.docker_log) if name in ln]
        assert "--entrypoint" in p["argv"] and p["argv"][0] == "run"
        job = JobEnv.read({"RLVR_OPT_ML": str(opt_ml), "TRAINING_JOB_NAME": name, **env})
        pl = plan(job, env)
        assert pl.eval_cmd[3:] == ["--jobs", str(opt_ml / "input" / "data" / "config" / "jobs.json"),
                                   str(opt_ml / "model" / "evals"), "-b", "gsm8k_cot:1", "--dtype", "float32",
                                   "--max-model-len", "2048", "--max-tokens", "gsm8k_cot=8", *CPU_ARGS]
        rc, out = run_job(opt_ml, env, name)
        assert rc == 0, out[-3000:]
        assert f"evaluated s3://{aws.bucket}/rlvr/checkpoints/job-a/tiny_step1/: gsm8k_cot:1" in out, out[-3000:]
        assert f"s3://{aws.bucket}/rlvr/evals/job-a/tiny_step1/" in out
        s = json.loads(aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read())
        assert s["settings"]["max_tokens"] == 8 and s["settings"]["num_fewshot"] == 1
        stamps.append(aws.s3.head_object(Bucket=aws.bucket, Key=key)["ETag"])
        rep = json.loads(aws.s3.get_object(Bucket=aws.bucket, Key="rlvr/evals/evaluated.json")["Body"].read())
        assert [u["evaluated"] for u in rep["units"]] == [True]
        keys = [o["Key"] for o in aws.s3.list_objects_v2(Bucket=aws.bucket, Prefix="rlvr/evals/")["Contents"]]
        assert not any(".rlvr-claim." in k for k in keys)
    assert "0 to run" in out and "fetched" in out      # the second job found the unit finished in S3
    assert stamps[0] == stamps[1]


def test_the_report_lists_what_was_not_evaluated(tmp_path):
    spec = load_eval_config(lm_eval_config(tmp_path / "ev.yaml"))
    a, b, c = (str(tmp_path / "run" / "checkpoints" / f"step_00000{i}") for i in (1, 2, 3))
    out = tmp_path / "evals"
    rows = spec_units(spec, [(a, None), (b, None), (c, None)], str(out), pattern=str(tmp_path / "run/checkpoints/step_*"))
    done = out / "step_000001" / "gsm8k_cot_1shot"
    done.mkdir(parents=True)
    (done / "summary.json").write_text("{}")
    failed = out / "step_000002" / "gsm8k_cot_1shot"
    failed.mkdir(parents=True)
    (failed / "eval.log").write_text("boom\n")
    lines = []
    from rlvr.cloud.evaljob import spec_opts

    missing = report([(os.path.basename(ck), rel, units) for ck, rel, units in rows], spec_opts(spec), where=str(out),
                     uri="s3://b/j/evals", gone={c}, log=lines.append)
    assert lines[0] == f"evaluated step_000001: gsm8k_cot:1 -> {out}/step_000001 (s3://b/j/evals/step_000001/)"
    assert lines[1] == f"NOT evaluated: step_000002 on gsm8k_cot:1: its evaluation failed: see {failed}/eval.log"
    assert lines[2] == "NOT evaluated: step_000003 on gsm8k_cot:1: deleted before it was evaluated"
    assert "3 checkpoint(s), 1 of 3 evaluation(s) done" in lines[3] and "2 NOT evaluated" in lines[3]
    assert [m["checkpoint"] for m in missing] == ["step_000002", "step_000003"]
    assert json.load(open(out / "evaluated.json"))["units"][0]["evaluated"] is True


def test_train_and_eval_in_one_job_evaluates_each_checkpoint(s3env, bucket, tmp_path):
    """A training job with --eval-config on the tiny CPU config: the watcher evaluates each
    checkpoint as it lands with the config's task, shots and length; the log says which and where."""
    from rlvr.cloud.submit import write_opt_ml

    opt_ml = tmp_path / "opt" / "ml"
    cfg = lm_eval_config(tmp_path / "ev.yaml")
    hps = {"rlvr_config": "tiny-cpu.yaml", "rlvr_eval_config": "ev.yaml", "train.steps": "2", "checkpoint.every": "1",
           "rollout.engine": "hf", "rollout.prompts_per_step": "4", "rollout.n": "2", "rollout.max_tokens": "8",
           "rlvr_sync_interval": "1", "train.trainer_num_cpus": "0.5", "rollout.engine_num_cpus": "0.5"}
    write_opt_ml(str(opt_ml), hps, [TINY, cfg], [])
    env = dict(job_env(s3env, tmp_path), RLVR_JOB_S3=f"s3://{bucket}/rlvr/checkpoints/")
    rc, out = run_job(opt_ml, env, "train-eval-1")
    assert rc == 0, out[-4000:]
    (run,) = os.listdir(opt_ml / "model")
    evals = opt_ml / "model" / run / "evals"
    for step in ("step_000001", "step_000002"):
        s = json.load(open(evals / step / "gsm8k_cot_1shot" / "summary.json"))
        assert s["settings"]["max_tokens"] == 8 and s["settings"]["num_fewshot"] == 1, s["settings"]
        assert f"evaluated {step}: gsm8k_cot:1 -> {evals}/{step} " \
               f"(s3://{bucket}/rlvr/checkpoints/train-eval-1/evals/{step}/)" in out, out[-4000:]
    assert "2 checkpoint(s), 2 of 2 evaluation(s) done" in out and "NOT evaluated" not in out
    got = s3env.client().get_object(Bucket=bucket, Key="rlvr/checkpoints/train-eval-1/evals/step_000002/"
                                                       "gsm8k_cot_1shot/summary.json")["Body"].read()
    assert json.loads(got)["settings"]["max_tokens"] == 8
