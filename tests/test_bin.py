"""The shell recipes run as users run them: `make sweep`, bin/passk-sweep.sh feeding
bin/make-curriculum.sh, and bin/eval-checkpoint.sh, each on the tiny model with the hf engine
(their extra-options variables), finding the commands on PATH as an installed virtualenv
provides them. (bin/eval-two-nodes.sh: tests/test_eval_jobs.py; bin/s3-trace-cron.sh:
tests/test_s3_sync.py, beside the S3 server.)"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import orjson

from helpers import DATA, REPO
import machine_time  # hang guards in machine seconds
from test_eval_jobs import fake_node

BIN = os.path.join(REPO, "bin")
HF = "--engine hf --dtype float32 --verify-jobs 1"
MATH500 = os.path.join(DATA, "datasets", "math500", "test.jsonl")


def env_with_venv(base: dict | None = None) -> dict:
    """A user's environment: the virtualenv's commands on PATH, nothing else of ours."""
    env = dict(base or os.environ)
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), "/usr/bin", "/bin"])
    env["OMP_NUM_THREADS"] = "1"
    for k in ("RLVR_S3_DATASETS", "RLVR_DATA_DIR", "CUDA_VISIBLE_DEVICES"):
        env.pop(k, None)
    return env


def test_make_sweep_evaluates_the_checkpoints_and_prints_the_table(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "ckpts" / "step9")
    (tmp_path / "ckpts" / "step_000010").mkdir()    # being written (no model yet): not a checkpoint
    evals = tmp_path / "evals"
    env = env_with_venv(fake_node(tmp_path, ["free", "free"]))
    r = machine_time.run(["make", "--no-print-directory", "-C", REPO, "sweep", f"PY={sys.executable}",
                        f"CKPTS={tmp_path}/ckpts/step*", "BENCHMARKS=math500", f"EVALS={evals}",
                        f"SWEEP_ARGS=--source math500={MATH500} --limit 2 --max-tokens 2 {HF}"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    assert lines[0] == "| checkpoint | math500_2tok accuracy |"    # the length the sweep ran with is in the name
    assert [ln.split(" | ")[0] for ln in lines[2:]] == ["| step9"] and "ckpts/step9 on math500 (GPU 0)" in r.stderr
    assert json.loads((evals / "step9" / "math500" / "summary.json").read_text())["records"] == 2
    assert (evals / "step9" / "math500" / "eval.log").is_file()


def test_passk_sweep_then_a_curriculum_from_its_results(tiny_model_dir, tmp_path):
    ckpt = tmp_path / "results" / "run1" / "checkpoints" / "step_000002"
    shutil.copytree(tiny_model_dir, ckpt)
    env = env_with_venv()
    env.update(SOURCE=MATH500, EVAL_ARGS=f"--limit 3 --max-tokens 3 {HF}")
    out = tmp_path / "passk"
    r = machine_time.run(["bash", os.path.join(BIN, "passk-sweep.sh"), "math500", "2", str(out), str(ckpt)],
                         capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    run = out / "run1_step_000002"
    table = json.loads((run / "pass_at_k.json").read_text())
    assert table["k"] == [1, 2] and json.loads((run / "summary.json").read_text())["mode"] == "pass@2"
    md = (out / "passk.md").read_text().splitlines()
    assert md[0] == ("| checkpoint | math500_3tok-pass@2 accuracy | math500_3tok-pass@2 pass@1 | "
                     "math500_3tok-pass@2 pass@2 |") and md == \
        [ln for ln in r.stdout.splitlines() if ln.startswith("|")]
    # easiest first: the prompts the model solved most often; ties keep the input order
    results = run / "results.jsonl"
    recs = [orjson.loads(ln) for ln in results.read_bytes().splitlines()]
    recs[2]["rewards"] = [1.0, 1.0]
    recs[1]["rewards"] = [1.0, 0.0]
    recs[0]["rewards"] = [0.0, 0.0]
    results.write_bytes(b"".join(orjson.dumps(x) + b"\n" for x in recs))
    r = subprocess.run(["bash", os.path.join(BIN, "make-curriculum.sh"), str(results)], capture_output=True, text=True,
                       env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [recs[2]["id"], recs[1]["id"], recs[0]["id"]]


def test_eval_checkpoint_runs_the_three_commands(tiny_model_dir, tmp_path):
    env = env_with_venv()
    env["ROLLOUT_ARGS"] = "--engine hf --dtype float32 --max-tokens 4"
    out = tmp_path / "out"
    gsm8k = os.path.join(DATA, "datasets", "gsm8k", "test.jsonl")
    r = machine_time.run(["bash", os.path.join(BIN, "eval-checkpoint.sh"), tiny_model_dir, str(out), "0", gsm8k],
                         capture_output=True, text=True, env=env, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.startswith("gsm8k accuracy: ")
    done = [orjson.loads(ln) for ln in (out / "results.jsonl").read_bytes().splitlines()]
    assert len(done) == 20 and all(x["generation"]["sampling"]["temperature"] == 0.0 for x in done)
    assert all(x["generation"]["sampling"]["stop"] == ["Question:"] for x in done)
    assert json.loads((out / "summary.json").read_text())["all"]["records"] == 20
