"""rlvr-eval --harness olmes against the OLMES stand-in (tests/fakes/olmes: OLMES's command line
and output files, no model): one task group per GPU at tensor parallel 1, --watch and --jobs,
results in --table, OLMES watch configs, and the users' thinker workflow in small: training
on AllenAI's data with chat and thinking, OLMES beside it, in a simulated SageMaker job
(--eval-config). Real OLMES is never run here (docs/cloud.md says what has)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import orjson
import pytest
import yaml

from helpers import DATA, REPO, invoke
import machine_time  # hang guards in machine seconds
from rlvr.cloud.evalspec import load_eval_config
from rlvr.eval.harness import olmes_folder

FAKE = os.path.join(REPO, "tests", "fakes", "olmes", "bin", "python")


@pytest.fixture
def olmes_log(tmp_path, monkeypatch):
    log = tmp_path / "olmes-calls.jsonl"
    monkeypatch.setenv("FAKE_OLMES_LOG", str(log))
    monkeypatch.setenv("FAKE_OLMES_PYTHON", sys.executable)
    return lambda: [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []


@pytest.fixture(scope="module")
def ckpts(tmp_path_factory):
    """Two checkpoint folders of a run (the tiny model: folders --watch takes for checkpoints)."""
    from rlvr.tiny import build

    root = tmp_path_factory.mktemp("run") / "checkpoints"
    first = build(str(root / "step_000001"))
    shutil.copytree(first, root / "step_000002")
    return root


def test_one_group_writes_olmes_own_files_and_resumes(ckpts, tmp_path, olmes_log):
    out = tmp_path / "ev"
    args = ["--harness", "olmes", str(ckpts / "step_000001"), str(out), "-b", "gsm8k::tulu,minerva_math::tulu",
            "--harness-python", FAKE, "--limit", "4", "--model-args", "max_num_seqs=64,enforce_eager=true"]
    r = invoke("rlvr-eval", args)
    assert r.code == 0, r.stderr
    [line] = r.records()
    assert line["harness"] == "olmes" and line["tasks"] == ["gsm8k::tulu", "minerva_math::tulu"]
    assert set(line["metrics"]) == {"gsm8k::tulu", "minerva_math::tulu", *(
        f"minerva_math_{s}::tulu" for s in ("algebra", "counting_and_probability", "geometry", "intermediate_algebra",
                                             "number_theory", "prealgebra", "precalculus"))}
    [call] = olmes_log()
    argv = call["argv"]
    assert argv[argv.index("--task") + 1:argv.index("--output-dir")] == ["gsm8k::tulu", "minerva_math::tulu"]
    assert argv[argv.index("--gpus") + 1] == "1" and argv[argv.index("--model-type") + 1] == "vllm"
    margs = json.loads(argv[argv.index("--model-args") + 1])
    assert margs["model_path"] == str(ckpts / "step_000001") and margs["tensor_parallel_size"] == 1
    assert margs["max_num_seqs"] == 64 and margs["enforce_eager"] is True and margs["max_length"] == 4096
    # OLMES's files: one metrics/predictions/requests triple per task, metrics-all.jsonl with the suite first
    names = sorted(os.listdir(out))
    assert "task-000-gsm8k-metrics.json" in names and "task-007-minerva_math_precalculus-predictions.jsonl" in names
    entries = [orjson.loads(ln) for ln in (out / "metrics-all.jsonl").read_bytes().splitlines()]
    assert entries[0]["task_config"]["metadata"]["alias"] == "minerva_math::tulu"
    assert all("primary_score" in e["metrics"] for e in entries)
    assert orjson.loads((out / "metrics.json").read_bytes())["all_primary_scores"][0].startswith("minerva_math::tulu: ")
    # done folders are not run again
    assert invoke("rlvr-eval", args).code == 0 and len(olmes_log()) == 1


def test_usage_and_harness_failures(ckpts, tmp_path, olmes_log):
    ck = str(ckpts / "step_000001")
    for args, code, needle in (
            (["-b", "gsm8k::tulu"], 2, "needs OLMES's interpreter: --harness-python PATH"),
            (["-b", "gsm8k::tulu", "--harness-python", "/no/python"], 2, "not an executable file"),
            (["-b", "gsm8k::tulu; rm", "--harness-python", FAKE], 2, "is not an OLMES task group"),
            (["-b", "gsm8k::tulu", "--harness-python", FAKE, "--thinking"], 2, "set their own prompts"),
            (["-b", "gsm8k::nope", "--harness-python", FAKE], 1, "not found in the task registry")):
        r = invoke("rlvr-eval", ["--harness", "olmes", ck, str(tmp_path / "x"), *args])
        assert r.code == code and needle in r.stderr, r.stderr


def test_watch_spreads_groups_over_gpus_and_the_table_shows_them(ckpts, tmp_path, olmes_log):
    out = tmp_path / "evals"
    (out / "rlvr-row" / "toy").mkdir(parents=True)   # an rlvr summary beside them: one table for both
    (out / "rlvr-row" / "toy" / "summary.json").write_bytes(orjson.dumps(
        {"checkpoint": "c", "benchmark": "toy", "metrics": {"accuracy": 0.5}}))
    r = invoke("rlvr-eval", ["--harness", "olmes", "--watch", str(ckpts / "step_*"), str(out), "--once",
                             "-b", "gsm8k::tulu,ifeval::tulu", "-b", "minerva_math::tulu", "--gpus", "6,7",
                             "--harness-python", FAKE, "--limit", "4", "--interval", "0"])
    assert r.code == 0, r.stderr
    calls = olmes_log()
    assert len(calls) == 4
    for c in calls:    # each group on one GPU of its own, OLMES told to use one, tensor parallel 1
        tasks = c["argv"][c["argv"].index("--task") + 1:c["argv"].index("--output-dir")]
        assert c["cuda_visible_devices"] in ("6", "7") and c["argv"][c["argv"].index("--gpus") + 1] == "1"
        assert tasks in (["gsm8k::tulu", "ifeval::tulu"], ["minerva_math::tulu"])
    for step in ("step_000001", "step_000002"):
        for g in ("gsm8k::tulu,ifeval::tulu", "minerva_math::tulu"):
            assert (out / step / olmes_folder(g) / "metrics-all.jsonl").exists()
    table = (out / "results.csv").read_text().splitlines()
    header = table[0].split(",")
    assert "gsm8k::tulu primary_score" in header and "minerva_math::tulu primary_score" in header
    assert "toy accuracy" in header
    assert sorted(row.split(",")[0] for row in table[1:]) == ["rlvr-row", "step_000001", "step_000002"]
    # --jobs runs the same units for a list of checkpoints
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"checkpoint_path": str(ckpts / "step_000002"), "output_name": "last"}]))
    r = invoke("rlvr-eval", ["--harness", "olmes", "--jobs", str(jobs), str(tmp_path / "j"), "-b", "ifeval::tulu",
                             "--harness-python", FAKE, "--gpus", "3", "--shots", "2"])
    assert r.code == 0, r.stderr
    done = tmp_path / "j" / "last" / "ifeval__tulu"
    assert orjson.loads((done / "task-000-ifeval-metrics.json").read_bytes())["task_config"]["num_shots"] == 2
    assert olmes_log()[-1]["cuda_visible_devices"] == "3"


def test_olmes_watch_configs(tmp_path):
    cfg = tmp_path / "olmes.yaml"
    cfg.write_text("harness: olmes\ninterval: 5\nharness_python: /venv/bin/python\ntask_groups:\n"
                   "  - [gsm8k::tulu, ifeval::tulu]\n  - minerva_math::tulu\n"
                   "  - {gpu: 1, benchmarks: [{task: codex_humaneval::tulu}]}\n")
    spec = load_eval_config(str(cfg))
    cmd = spec.command("RUN/checkpoints/step_*", "RUN/evals", [6, 7])
    assert cmd[1:] == ["-m", "rlvr.commands.eval", "--watch", "RUN/checkpoints/step_*", "RUN/evals", "--interval", "5",
                       "--harness", "olmes", "--harness-python", "/venv/bin/python", "-b", "gsm8k::tulu,ifeval::tulu",
                       "-b", "minerva_math::tulu", "-b", "codex_humaneval::tulu", "--gpus", "6,7"]
    for text, needle in (("harness: hf\nbenchmarks: [x]\n", "harness: expected one of rlvr, olmes, lm-eval"),
                         ("harness: lm-eval\nbenchmarks: [x]\n", "unknown benchmark 'x'"),
                         ("task_groups: [[a::b]]\n", "task_groups go with harness: olmes"),
                         ("harness: olmes\ntask_groups: [[]]\n", "task_groups[0]"),
                         ("harness: olmes\ntask_groups: [{benchmarks: [{task: a::b, num_fewshot: 4}]}]\n",
                          "not per task here"),
                         ("harness: olmes\nbenchmarks: ['a::b; x']\n", "not an OLMES task group")):
        cfg.write_text(text)
        with pytest.raises(Exception, match=needle.replace("[", r"\[").replace("]", r"\]")):
            load_eval_config(str(cfg))


def test_the_users_own_olmes_watch_config_is_read_as_rlvrs_form(tmp_path, capsys):
    """Their configs/eval/olmes-tulu-watch.yaml (tests/data/eval, provenance in its README)."""
    theirs = os.path.join(DATA, "eval", "olmes-tulu-watch.yaml")
    spec = load_eval_config(theirs)
    assert (spec.harness, spec.interval, spec.args) == ("olmes", 300.0, ["--dtype", "bfloat16"])
    assert spec.benchmarks == ["gsm8k::tulu", "minerva_math::tulu", "ifeval::tulu", "ifeval_ood::tulu"]
    cmd = spec.command("RUN/checkpoints/step_*", "RUN/evals", [6, 7])
    assert cmd[4:] == ["RUN/checkpoints/step_*", "RUN/evals", "--interval", "300", "--harness", "olmes",
                       "-b", "gsm8k::tulu", "-b", "minerva_math::tulu", "-b", "ifeval::tulu", "-b", "ifeval_ood::tulu",
                       "--gpus", "6,7", "--dtype", "bfloat16"]
    err = capsys.readouterr().err
    for key in ("watch.local_dir", "watch.run_name", "output_dir", "olmes.hf_cache_s3", "olmes.upload_summary"):
        assert f"olmes-tulu-watch.yaml: {key} ignored: " in err, err
    # what rlvr cannot honour is refused, with the rlvr form of the rest to write instead
    cfg = tmp_path / "olmes.yaml"
    text = open(theirs).read()
    for old, new, needle in (("tensor_parallel_size: 1", "tensor_parallel_size: 2",
                              "olmes.model_args.tensor_parallel_size: 2 (rlvr's OLMES runs fix it at 1"),
                             ("enable: true", "enable: false", "watch.enable: an --eval-config evaluates beside"),
                             ("model_type: vllm", "model_type: hf", "olmes.model_type: 'hf'")):
        cfg.write_text(text.replace(old, new))
        with pytest.raises(Exception, match=needle.replace("(", r"\(").replace(".", r"\.")) as e:
            load_eval_config(str(cfg))
        form = str(e.value).split("in rlvr's form (YAML), what maps of it is: ")[1]
        assert "\n" not in form and yaml.safe_load(form) == {
            "harness": "olmes", "interval": 300, "args": ["--dtype", "bfloat16"],
            "task_groups": ["gsm8k::tulu", "minerva_math::tulu", "ifeval::tulu", "ifeval_ood::tulu"]}
    cfg.write_text(text.replace("  model_args:", "  num_shots: 4\n  limit: 10\n  model_args:\n    max_length: 2048\n"
                                                 "    enforce_eager: true"))
    assert load_eval_config(str(cfg)).args == ["--max-model-len", "2048", "--dtype", "bfloat16", "--model-args",
                                               "enforce_eager=True", "--shots", "4", "--limit", "10"]


def test_allenai_thinker_run_with_olmes_beside_it_in_a_simulated_sagemaker_job(tmp_path):
    """The job's entry point, as SageMaker starts it, for the users' thinker workflow in small:
    rlvr-train on AllenAI's mixed data (tests/data/allenai) with chat prompts, a system prompt,
    the R1-style thinker template rlvr ships and thinking on, rewarded by AllenAI's rules, on the training GPUs; and,
    from the --eval-config (an OLMES watch config), rlvr-eval --watch with OLMES on the eval
    GPUs; after training a last pass evaluates what is left. Checked: the chat settings in
    run.json and every rollout, the thinking metrics in the trace, rollouts that rlvr-verify
    grades the same way again, both task groups of every checkpoint on the eval GPUs, and the
    evals/ table."""
    from rlvr.cloud.submit import write_opt_ml
    from rlvr.tiny import build

    opt_ml = tmp_path / "opt" / "ml"
    eval_cfg = tmp_path / "olmes-watch.yaml"
    eval_cfg.write_text(f"harness: olmes\ninterval: 1\nharness_python: {FAKE}\nargs: [--limit, '3']\n"
                        "task_groups:\n  - [gsm8k::tulu, ifeval::tulu]\n  - minerva_math::tulu\n")
    from rlvr.data.templates import resolve_template

    chat = "tulu_thinker_r1_style"   # the R1-style thinker template rlvr ships, by name, as the users' run
    tulu = os.path.join(DATA, "allenai", "rlvr_gsm_math_if_mixed.jsonl")
    hps = {"rlvr_config": "tiny-cpu.yaml", "rlvr_eval_config": "olmes-watch.yaml", "rlvr_train_gpus": "0",
           "rlvr_eval_gpus": "1,2", "train.steps": "2", "checkpoint.every": "1", "rollout.engine": "hf",
           "rollout.prompts_per_step": "3", "rollout.n": "2", "rollout.max_tokens": "8",
           "rollout.max_model_len": "2048", "rlvr_sync_interval": "1", "model.path": build(str(tmp_path / "tiny")),
           "data.dataset": "allenai", "data.source": f"{{allenai: {tulu}}}", "data.chat": "true",
           "data.system": "Reason first.", "data.thinking": "true", "data.chat_template": chat,
           "verify.verifier_config": "{math.mode: allenai}"}
    write_opt_ml(str(opt_ml), hps, [os.path.join(REPO, "configs", "tiny-cpu.yaml"), str(eval_cfg)], [])
    log = tmp_path / "olmes-calls.jsonl"
    env = dict(os.environ, RLVR_OPT_ML=str(opt_ml), TRAINING_JOB_NAME="olmes-job", PYTHONPATH=REPO,
               OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0", TOKENIZERS_PARALLELISM="false",
               FAKE_OLMES_LOG=str(log), FAKE_OLMES_PYTHON=sys.executable)
    env.pop("RLVR_JOB_S3", None)
    proc = machine_time.run([sys.executable, "-m", "rlvr.cloud.entrypoint", "train"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=900)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-3000:]
    (run,) = os.listdir(opt_ml / "model")
    run_dir = opt_ml / "model" / run
    # training: chat and thinking recorded, answer-only judging in the trace and the rollouts
    man = orjson.loads((run_dir / "run.json").read_bytes())
    assert man["status"] == "completed"
    assert man["chat"] == {"system": "Reason first.", "thinking": True, "chat_template": resolve_template(chat),
                           "chat_template_sha256": man["chat"]["chat_template_sha256"]}
    rows = [orjson.loads(ln) for ln in open(run_dir / "traces" / "trace.jsonl", "rb")]
    assert [r["step"] for r in rows] == [1, 2]
    rollouts = run_dir / "traces" / "rollouts.jsonl"
    recs = [orjson.loads(ln) for ln in open(rollouts, "rb")]
    # eight tokens of a random tiny model never close a thinking block: every completion is unfinished
    # (a GSM8K row's 8-shot prompt in the R1 format may not fit the tiny model's context: prompt_too_long)
    assert all(r["thinking/closed_frac"] == 0.0 for r in rows)
    assert sum(r["thinking/completions"] for r in rows) == sum(len(r.get("verdicts") or []) for r in recs) >= 8
    assert all(r["generation"]["status"] == "prompt_too_long" for r in recs if not r.get("verdicts"))
    assert {r["dataset"] for r in recs} <= {"allenai/gsm8k", "allenai/math", "allenai/ifeval"}
    assert all(r["thinking"] is True and r["prompt"][0]["content"] == "Reason first." for r in recs)
    assert all(v["status"] == "unfinished_thinking" for r in recs for v in r.get("verdicts") or [])
    again = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=allenai", str(rollouts)])
    assert again.code == 0
    assert [r.get("rewards") or [] for r in again.records()] == [r.get("rewards") or [] for r in recs]
    # OLMES beside it: every checkpoint, both groups, each on an eval GPU; the table
    evals = run_dir / "evals"
    for step in ("step_000001", "step_000002"):
        for g in ("gsm8k::tulu,ifeval::tulu", "minerva_math::tulu"):
            assert (evals / step / olmes_folder(g) / "metrics-all.jsonl").exists(), (step, g, out[-2000:])
    calls = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert {c["cuda_visible_devices"] for c in calls} <= {"1", "2"} and len(calls) >= 4
    assert all(c["argv"][c["argv"].index("--limit") + 1] == "3" for c in calls)
    table = (evals / "results.md").read_text()
    assert "step_000002" in table and "minerva_math::tulu primary_score" in table
    shutil.rmtree(run_dir / "checkpoints")
