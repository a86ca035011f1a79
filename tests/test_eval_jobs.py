"""rlvr-eval --jobs and --watch: tasks as (benchmark, shots), jobs files, node shares, GPU
ids in both modes, and the scheduler that runs one task of one checkpoint per GPU.

GPUs are faked: tests/fakes/pynvml.py answers for the driver (rlvr.gpu finds the free ones),
and the evaluations that run on them are CPU processes of the hf engine on the tiny model
(a child's GPU is only its CUDA_VISIBLE_DEVICES, which its summary.json records)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap

import orjson
import pytest

from helpers import REPO, invoke
import machine_time  # hang guards in machine seconds
from rlvr.eval import runner as ev
from rlvr.errors import BadInput, UsageError
from rlvr.eval import jobs as sweep

HF = ["--engine", "hf", "--dtype", "float32", "--verify-jobs", "1"]
FAKES = os.path.join(REPO, "tests", "fakes")


def summary(path) -> dict:
    return orjson.loads(open(os.path.join(path, "summary.json"), "rb").read())


# --------------------------------------------------------------------------- tasks and jobs files


def test_tasks_are_a_benchmark_and_a_shot_count():
    assert sweep.parse_task("gsm8k:8") == sweep.Task("gsm8k", 8) == sweep.parse_task("gsm8k_8shot")
    assert sweep.parse_task("ifeval") == sweep.Task("ifeval") and sweep.Task("ifeval").folder == "ifeval"
    assert sweep.Task("mbpp", 3).folder == "mbpp_3shot" and str(sweep.Task("mbpp", 3)) == "mbpp:3"
    assert [t.folder for t in sweep.DEFAULT_TASKS] == ["gsm8k_8shot", "gsm8k_4shot", "math_qwen_4shot",
                                                       "ifeval_0shot", "mbpp_3shot"]
    for bad in ("gsm8k:x", "gsm8k:", "a b", ""):
        with pytest.raises(UsageError):
            sweep.parse_task(bad)
    sweep.check_tasks([sweep.Task("toy"), sweep.Task("gsm8k", 8)], ev.known_benchmarks(), shots_supported=True)
    with pytest.raises(UsageError, match="unknown benchmark 'gsm9k'"):
        sweep.check_tasks([sweep.Task("gsm9k")], ev.known_benchmarks(), shots_supported=True)
    with pytest.raises(UsageError, match="no --shots"):
        sweep.check_tasks([sweep.Task("gsm8k", 8)], ev.known_benchmarks(), shots_supported=False)
    with pytest.raises(UsageError, match="given twice"):
        sweep.check_tasks([sweep.Task("toy"), sweep.Task("toy")], ev.known_benchmarks(), shots_supported=False)


def test_jobs_files_list_or_lines_and_bad_input_names_the_line_and_field(tmp_path):
    p = tmp_path / "jobs.json"
    p.write_text('[\n  {"checkpoint_path": "/c/a", "output_name": "a"},\n  {"checkpoint_path": "/c/b",\n'
                 '   "output_name": "runs/b/"}\n]\n')
    assert sweep.read_jobs(str(p)) == [sweep.Job("/c/a", "a"), sweep.Job("/c/b", "runs/b")]
    p.write_text('{"checkpoint_path": "/c/a", "output_name": "a"}\n\n{"checkpoint_path": "/c/b", "output_name": "b"}\n')
    assert [j.name for j in sweep.read_jobs(str(p))] == ["a", "b"]
    for text, where in [
        ('[{"checkpoint_path": "/c/a", "output_name": "a"},\n {"output_name": "b"}]', ":2: field checkpoint_path: missing"),
        ('[{"checkpoint_path": "/c/a", "output_name": "a"},\n\n {"checkpoint_path": "/c/b", "output_name": "a"}]',
         ":3: field output_name: 'a' is already used at line 1"),
        ('[{"checkpoint_path": "/c/a", "output_name": "../up"}]', ":1: field output_name: '../up' must be a folder"),
        ('[{"checkpoint_path": "/c/a", "output_name": "/abs"}]', ":1: field output_name"),
        ('[{"checkpoint_path": "", "output_name": "a"}]', ":1: field checkpoint_path: must be a non-empty string"),
        ('[{"checkpoint": "/c/a", "output_name": "a"}]', ":1: field checkpoint: unknown"),
        ('[\n{"checkpoint_path": "/c/a", "output_name": "a"}\n{"x": 1}]', ":3: invalid JSON"),
        ('[\n  "a"\n]', ":2: a job must be an object"),
        ("[]", ":1: no jobs"),
        ('{"checkpoint_path": "/c/a", "output_name": "a"}\nnot json\n', ":2: not a JSON object"),
    ]:
        p.write_text(text)
        with pytest.raises(BadInput) as e:
            sweep.read_jobs(str(p))
        assert str(e.value).startswith(str(p) + where), (text, str(e.value))
    with pytest.raises(UsageError, match="cannot read"):
        sweep.read_jobs(str(tmp_path / "missing.json"))


def test_a_range_and_a_shard_split_the_jobs_between_nodes():
    jobs = [sweep.Job(f"/c/{i}", str(i)) for i in range(7)]
    names = lambda js: [j.name for j in js]  # noqa: E731
    assert names(sweep.select_jobs(jobs, sweep.parse_range("2:5"))) == ["2", "3", "4"]
    assert names(sweep.select_jobs(jobs, sweep.parse_range("5:"))) == ["5", "6"]
    assert names(sweep.select_jobs(jobs, sweep.parse_range(":2"))) == ["0", "1"]
    halves = [names(sweep.select_jobs(jobs, shard=(i, 2))) for i in range(2)]
    assert halves == [["0", "2", "4", "6"], ["1", "3", "5"]]
    assert names(sweep.select_jobs(jobs, (1, 6), (1, 2))) == ["2", "4"]
    for bad in ("3", "5:2", "a:b", "-1:2"):
        with pytest.raises(UsageError):
            sweep.parse_range(bad)


def test_gpu_ids_are_physical_or_relative_to_cuda_visible_devices():
    assert sweep.resolve_gpus(["0", "1"], "absolute", None) == (["0", "1"], [])
    assert sweep.resolve_gpus(["0", "1"], "visible", None) == (["0", "1"], [])
    assert sweep.resolve_gpus(["0", "2"], "visible", "4,5,6,7") == (["4", "6"], [])
    assert sweep.resolve_gpus(["1"], "visible", "GPU-aaaa,GPU-bbbb") == (["GPU-bbbb"], [])
    ids, warnings = sweep.resolve_gpus(["0", "5"], "absolute", "4,5")
    assert ids == ["0", "5"] and len(warnings) == 1 and "GPU 0 is outside CUDA_VISIBLE_DEVICES=4,5" in warnings[0]
    with pytest.raises(UsageError, match="not a position in CUDA_VISIBLE_DEVICES=4,5"):
        sweep.resolve_gpus(["2"], "visible", "4,5")
    with pytest.raises(UsageError):
        sweep.resolve_gpus(["0"], "relative", None)


def test_pick_gpus_for_gpu_and_gpus_in_both_modes(monkeypatch):
    said: list[str] = []
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    assert sweep.pick_gpus("1", None, "visible", said.append) == ["5"]
    assert sweep.pick_gpus(None, "0, 2", "visible", said.append) == ["4", "6"]
    assert sweep.pick_gpus(None, "5", "absolute", said.append) == ["5"] and said == []
    assert sweep.pick_gpus("1", None, "absolute", said.append) == ["1"] and "outside CUDA_VISIBLE_DEVICES" in said[0]
    assert sweep.pick_gpus(None, None, "visible", said.append) is None
    with pytest.raises(UsageError, match="names no GPU"):
        sweep.pick_gpus(None, ",", "absolute", said.append)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert sweep.pick_gpus(None, "0,1", "visible", said.append) == ["0", "1"]


def test_unit_command_passes_the_task_its_shots_and_one_gpu():
    opts = ev.EvalOptions(engine="hf", source={"gsm8k": "g.jsonl", "toy": "t.jsonl"}, limit=3)
    cmd = sweep.unit_command(sweep.Unit("/c/a", "out/a/gsm8k_8shot", sweep.Task("gsm8k", 8)), opts, "3")
    assert cmd[1:5] == ["-m", "rlvr.commands.eval", "/c/a", "out/a/gsm8k_8shot"]
    args = " ".join(cmd[5:])
    assert "--benchmark gsm8k --shots 8" in args and "--source gsm8k=g.jsonl" in args and "toy" not in args
    assert "--limit 3" in args and args.endswith("--gpu 3") and "--subdirs" not in args
    cmd = sweep.unit_command(sweep.Unit("/c/a", "o", sweep.Task("toy")), opts, None)
    assert "--shots" not in cmd and "--gpu" not in cmd and "--judge" not in cmd
    judged = ev.EvalOptions(engine="hf", judge={"base_url": "http://h/v1", "model": "m", "rubric": "Rate {completion}"})
    cmd = sweep.unit_command(sweep.Unit("/c/a", "o", sweep.Task("toy")), judged, None)
    assert cmd[-6:] == ["--judge", "http://h/v1", "--judge-model", "m", "--judge-rubric", "Rate {completion}"]
    # --source NAME=PATH names a benchmark or its dataset (math: minerva_math, math_qwen, math, ...)
    src = ev.parse_sources(["math=/d/math", "gsm8k_cot=/d/g.jsonl"], ["minerva_math", "math_qwen", "gsm8k_cot"])
    assert src == {"math": "/d/math", "gsm8k_cot": "/d/g.jsonl"}
    assert [ev.source_for(b, src) for b in ("minerva_math", "math_qwen", "gsm8k_cot")] == ["/d/math", "/d/math",
                                                                                          "/d/g.jsonl"]
    assert ev.parse_sources(["/d/a=b.jsonl"], ["gsm8k"]) == {"gsm8k": "/d/a=b.jsonl"}
    for bad, match in ((["gsm8k=/d"], "not a benchmark .* of this evaluation"), (["/d/x"], "write NAME=PATH")):
        with pytest.raises(UsageError, match=match):
            ev.parse_sources(bad, ["math500", "ifeval"])
    # lm-eval itself as the unit: its folder is <task>_<N>shot below the checkpoint's, shots made explicit
    tasks = sweep.sweep_tasks(["gsm8k", "mbpp:0"], "lm-eval")
    assert tasks == [sweep.Task("gsm8k", 8), sweep.Task("mbpp", 0)]
    with pytest.raises(UsageError, match="runs lm-eval's tasks"):
        sweep.sweep_tasks(["math500"], "lm-eval")
    lm = ev.EvalOptions(harness="lm-eval", harness_python="/opt/lm/bin/python", model_args="enforce_eager=True",
                        source={"math": "/d/math"}, limit=2)
    cmd = sweep.unit_command(sweep.Unit("s3://b/ckpt/", "out/a/math_qwen_4shot", sweep.Task("math_qwen", 4)), lm, "1")
    assert cmd[3:5] == ["s3://b/ckpt/", "out/a"] and "--engine" not in cmd
    args = " ".join(cmd[5:])
    assert args.startswith("--harness lm-eval --harness-python /opt/lm/bin/python --model-args enforce_eager=True")
    assert "-b" not in cmd and "--benchmark math_qwen --shots 4 --source math_qwen=/d/math" in args
    assert "--limit 2" in args and args.endswith("--gpu 1") and "--verify-jobs" not in args


# --------------------------------------------------------------------------- the scheduler

# A stand-in for one evaluation: it says it started, waits until `want` units have started
# (so it proves they ran at the same time), then writes its summary.json. Bounded: a unit
# that waits longer than the guard fails, it never hangs the test.
FAKE_EVAL = textwrap.dedent("""
    import json, os, sys, time
    out, device, started, want = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    print("fake evaluation of", out, file=sys.stderr)
    open(os.path.join(started, os.path.basename(os.path.dirname(out)) + "-" + os.path.basename(out) + "@" + device),
         "w").close()
    guard = time.monotonic() + 120
    while len(os.listdir(started)) < want:
        if time.monotonic() > guard:
            sys.exit(7)
        time.sleep(0.05)
    if os.path.basename(out) == "broken":
        sys.exit(3)
    os.makedirs(out, exist_ok=True)
    json.dump({"checkpoint": "c", "benchmark": os.path.basename(out), "mode": "greedy", "metrics": {"accuracy": 1.0},
               "settings": {"cuda_visible_devices": device}}, open(os.path.join(out, "summary.json"), "w"))
""")


def test_the_tasks_of_one_checkpoint_run_at_once_one_per_gpu(tiny_model_dir, tmp_path):
    shutil.copytree(tiny_model_dir, tmp_path / "ckpts" / "step_1")
    started = tmp_path / "started"
    started.mkdir()
    script = tmp_path / "fake_eval.py"
    script.write_text(FAKE_EVAL)
    tasks = [sweep.Task("gsm8k", 8), sweep.Task("gsm8k", 4), sweep.Task("ifeval", 0)]
    opts = ev.EvalOptions()
    out = tmp_path / "evals"
    pattern = str(tmp_path / "ckpts" / "step_*")
    command = lambda u, o, dev: [sys.executable, str(script), u.out, str(dev), str(started), "3"]  # noqa: E731
    logs: list[str] = []
    failed = sweep.run_units(lambda: sweep.watch_units(pattern, str(out), tasks, opts), ["0", "3", "5"], opts,
                             log=logs.append, command=command)
    assert failed == 0
    # all three ran at the same time, each on its own GPU
    assert sorted(os.listdir(started)) == ["step_1-gsm8k_4shot@3", "step_1-gsm8k_8shot@0", "step_1-ifeval_0shot@5"]
    for t in tasks:
        assert summary(out / "step_1" / t.folder)["benchmark"] == t.folder
        # each unit's own log beside its results: a header naming this process, then the child's stderr
        head, said = (out / "step_1" / t.folder / "eval.log").read_text().splitlines()
        assert head.startswith("== ") and f"pid {os.getpid()}" in head and "fake_eval.py" in head
        assert said == f"fake evaluation of {out / 'step_1' / t.folder}"
    assert logs == [f"evaluating {tmp_path}/ckpts/step_1 on {t} (GPU {g}); log {out}/step_1/{t.folder}/eval.log"
                    for t, g in zip(tasks, ("0", "3", "5"))]
    # Done units are skipped; a failing unit is counted, reported, and not retried in the same run.
    assert sweep.watch_units(pattern, str(out), tasks, opts) == []
    tasks.append(sweep.Task("broken"))
    logs.clear()
    failed = sweep.run_units(lambda: sweep.watch_units(pattern, str(out), tasks, opts), ["0", "3"], opts,
                             log=logs.append, command=command)
    assert failed == 1 and len(logs) == 2 and "on broken: evaluation failed (exit 3): fake evaluation of" in logs[1]


def test_a_gpu_freed_later_takes_the_next_unit_and_a_node_with_none_free_waits(tmp_path):
    started = tmp_path / "started"
    started.mkdir()
    script = tmp_path / "fake_eval.py"
    script.write_text(FAKE_EVAL)
    opts = ev.EvalOptions()
    units = [sweep.Unit("/ckpt", str(tmp_path / "evals" / "a" / t), sweep.Task(t)) for t in ("x", "y")]
    scan = lambda: [u for u in units if not sweep.unit_done(u, opts)]  # noqa: E731
    # GPU 0 free at the start; GPU 1 busy, then freed: the second unit runs there while the first
    # still runs (each fake evaluation waits until both have started: only a second GPU lets it end)
    answers = [[], ["1"]]
    asked = []

    def free():
        asked.append(1)
        return answers[min(len(asked) - 1, len(answers) - 1)]

    command = lambda u, o, dev: [sys.executable, str(script), u.out, str(dev), str(started), "2"]  # noqa: E731
    logs: list[str] = []
    assert sweep.run_units(scan, ["0"], opts, log=logs.append, command=command, free=free, recheck=0.0) == 0
    assert sorted(os.listdir(started)) == ["a-x@0", "a-y@1"] and len(asked) >= 2
    # every GPU busy at the start: the units wait (one line) until one frees up, then use it
    for u in units:
        os.unlink(os.path.join(u.out, "summary.json"))
    shutil.rmtree(started)
    started.mkdir()
    answers[:] = [[], [], ["2"]]
    asked.clear()
    logs.clear()
    command = lambda u, o, dev: [sys.executable, str(script), u.out, str(dev), str(started), "1"]  # noqa: E731
    assert sweep.run_units(scan, [], opts, log=logs.append, command=command, free=free, recheck=0.0) == 0
    assert sorted(os.listdir(started)) == ["a-x@2", "a-y@2"]
    assert logs[0] == "2 unit(s) to run and no free GPU; waiting for one (checking every 0 s)"
    assert [ln for ln in logs if "waiting" in ln] == logs[:1]


# --------------------------------------------------------------------------- end to end on fake GPUs


def fake_node(tmp_path, gpus, later=None) -> dict:
    """The environment of a node whose driver (the fake NVML) shows `gpus`: 'free' or 'busy'
    (for the first look at them, five readings; `later`: from then on)."""
    busy = (71234, 97, [[os.getpid(), 71000]])
    sample = lambda gs: [dict(zip(("used_mib", "util", "procs"), busy if g == "busy" else (4, 0, []))) for g in gs]  # noqa: E731
    samples = [sample(gpus)] * (5 if later else 1) + ([sample(later)] if later else [])
    scn = {"gpus": [{"uuid": f"GPU-{i}f6c9a2e-1b3d-4c5e-9f7a-2d4b6c8e0a1{i}", "name": "NVIDIA A100-SXM4-80GB",
                     "total_mib": 81920} for i in range(len(gpus))], "samples": samples}
    path = tmp_path / "node.json"
    path.write_text(json.dumps(scn))
    env = dict(os.environ, FAKE_GPU_SCENARIO=str(path), RLVR_GPU_PID_NAMESPACE="shared", OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([FAKES, REPO]))
    env.pop("CUDA_VISIBLE_DEVICES", None)
    return env


def test_jobs_run_on_the_free_gpus_at_once_and_skip_finished_ones(tiny_model_dir, tmp_path):
    """The users' offline sweep: lm-eval's gsm8k from $RLVR_DATA_DIR with the hub unreachable
    (HF_HUB_OFFLINE=1, and no hub at HF_ENDPOINT), over the free GPUs, one of the units left
    claimed by a process that died (taken over)."""
    from test_eval_claims import dead_pid, plant
    from rlvr.eval.claims import machine

    for name in ("a", "b"):
        shutil.copytree(tiny_model_dir, tmp_path / "ckpts" / name)
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"checkpoint_path": str(tmp_path / "ckpts" / n), "output_name": f"model-{n}"}
                                for n in ("a", "b")]))
    out = tmp_path / "evals"
    plant(out / "model-a" / "gsm8k_1shot", 0, **machine(), pid=dead_pid(), start="1")
    env = fake_node(tmp_path, ["busy", "busy", "busy"], later=["busy", "free", "free"])
    env.update(RLVR_DATA_DIR=os.path.join(REPO, "tests", "data", "lmeval"), HF_HUB_OFFLINE="1",
               HF_DATASETS_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    env.pop("RLVR_S3_DATASETS", None)
    cmd = [sys.executable, "-m", "rlvr.commands.eval", "--jobs", str(jobs), str(out), "-b", "gsm8k:1", "--limit", "2",
           "--max-tokens", "4", *HF]
    r = machine_time.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert r.returncode == 0, r.stderr + "".join(p.read_text() for p in out.glob("*/*/eval.log"))
    # every GPU busy at the start: the node waits (no exit 4), and GPUs 1 and 2, freed later, take the units
    assert "2 job(s) x 1 task(s): 2 to run on the GPUs as they free up (none is free now)" in r.stderr
    assert f"evaluating {tmp_path}/ckpts/a on gsm8k:1 (GPU 1)" in r.stderr
    assert f"evaluating {tmp_path}/ckpts/b on gsm8k:1 (GPU 2)" in r.stderr   # both at once, one per GPU
    assert "took over the claim" in r.stderr and "no longer running" in r.stderr
    assert sorted(orjson.loads(x)["checkpoint"] for x in r.stdout.splitlines()) == \
        [str(tmp_path / "ckpts" / n) for n in ("a", "b")]
    for name, device in (("a", "1"), ("b", "2")):
        unit = out / f"model-{name}" / "gsm8k_1shot"
        s = summary(unit)
        assert s["checkpoint"] == str(tmp_path / "ckpts" / name) and s["records"] == 2
        assert s["settings"]["cuda_visible_devices"] == device and s["settings"]["num_fewshot"] == 1
        assert (unit / "eval.log").read_text().startswith("== ")
    for noise in ("thrown while requesting", "Couldn't reach", "Traceback"):
        assert noise not in r.stderr + "".join(p.read_text() for p in out.glob("*/*/eval.log"))
    md = (out / "results.md").read_text().splitlines()
    assert md[0].startswith("| checkpoint | gsm8k_1shot_4tok exact_match,flexible-extract |")   # --max-tokens 4
    assert [ln.split(" | ")[0] for ln in md[2:]] == ["| model-a", "| model-b"]
    # finished units are skipped; a node's part of the list is what it counts
    r = subprocess.run(cmd + ["--range", "1:", "--shard", "0/2"], capture_output=True, text=True, cwd=REPO, env=env,
                       timeout=600)
    assert r.returncode == 0 and "1 job(s) x 1 task(s): 0 to run" in r.stderr and "evaluating" not in r.stderr
    (out / "model-a" / "gsm8k_1shot" / "summary.json").unlink()
    r = subprocess.run(cmd + ["--shard", "1/2"], capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert r.returncode == 0 and "1 job(s) x 1 task(s): 0 to run" in r.stderr   # job a is node 1's


def test_no_free_gpu_fails_and_usage_errors(tmp_path, monkeypatch):
    env = fake_node(tmp_path, ["busy"])
    jobs = tmp_path / "jobs.json"
    jobs.write_text('[{"checkpoint_path": "/nowhere", "output_name": "x"}]')
    cmd = [sys.executable, "-m", "rlvr.commands.eval", "--jobs", str(jobs), str(tmp_path / "o"), "-b", "toy",
           "--no-wait-gpus"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 4 and "no free GPU" in r.stderr      # one-shot use: every GPU busy is exit 4
    cmd = [sys.executable, "-m", "rlvr.commands.eval", "--watch", str(tmp_path / "none" / "*"), str(tmp_path / "o"),
           "-b", "toy", "--once"]
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, r.stderr                          # waiting is the default; nothing to wait for here
    r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "toy", "--range", "3"])
    assert r.code == 2 and "START:END" in r.stderr
    # the standard task set is what rlvr-eval runs by default: every task and shot count is known
    sweep.check_tasks(list(sweep.DEFAULT_TASKS), ev.known_benchmarks(), shots_supported=True)
    r = invoke("rlvr-eval", ["--jobs", str(jobs), "--watch", "x/*", str(tmp_path / "o"), "-b", "toy"])
    assert r.code == 2 and "do not go together" in r.stderr
    r = invoke("rlvr-eval", ["x", str(tmp_path / "o"), "-b", "toy", "--range", "0:1"])
    assert r.code == 2 and "--range goes with --jobs" in r.stderr
    r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "gsm8k:1", "--max-tokens", "gsm8k_cto=64"])
    assert r.code == 2 and "gsm8k_cto is not among the benchmarks" in r.stderr and not (tmp_path / "o").exists()
    # what lm-eval's own template cannot honour is refused before any unit starts, in a sweep too
    for extra in (["--pass-at-k", "4"], ["--chat-template", "tulu_thinker_r1_style"]):
        r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "gsm8k", "--harness", "lm-eval", *extra])
        assert r.code == 2 and "no --pass-at-k or --chat-template" in r.stderr and not (tmp_path / "o").exists()
    # a mistyped --source or RLVR_DATA_DIR: one line before any child starts (nothing written)
    r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "gsm8k:1", "--source",
                             f"gsm8k={tmp_path}/data/tset.jsonl"])
    assert r.code == 2 and r.stderr.strip().endswith("tset.jsonl: no such file or folder") and not (tmp_path / "o").exists()
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path / "nodata"))
    r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "gsm8k:1"])
    monkeypatch.delenv("RLVR_DATA_DIR")
    assert r.code == 1 and f"RLVR_DATA_DIR={tmp_path}/nodata: no such folder" in r.stderr and not (tmp_path / "o").exists()
    jobs.write_text('[{"checkpoint_path": "/nowhere"}]')
    r = invoke("rlvr-eval", ["--jobs", str(jobs), str(tmp_path / "o"), "-b", "toy"])
    assert r.code == 3 and f"{jobs}:1: field output_name: missing" in r.stderr


def test_watch_evaluates_each_checkpoint_once_on_the_gpus_named_within_cuda_visible_devices(tiny_model_dir, tmp_path):
    for step in ("step_000002", "step_000004"):
        shutil.copytree(tiny_model_dir, tmp_path / "runs" / "run_a" / "checkpoints" / step)
    (tmp_path / "runs" / "run_a" / "checkpoints" / ".step_000006.tmp").mkdir()   # being written: never matches
    (tmp_path / "runs" / "run_a" / "checkpoints" / "step_000008").mkdir()        # not a model folder (yet)
    pattern = str(tmp_path / "runs" / "run_*" / "checkpoints" / "step_*")
    out = tmp_path / "evals"
    env = dict(os.environ, OMP_NUM_THREADS="1", CUDA_VISIBLE_DEVICES="3,5")
    cmd = [sys.executable, "-m", "rlvr.commands.eval", "--watch", pattern, str(out), "-b", "math500", "--limit", "3",
           "--source", f"math500={REPO}/tests/data/datasets/math500/test.jsonl", "--max-tokens", "4",
           "--once", "--gpus", "0,1", "--gpu-mode", "visible", *HF]
    r = subprocess.run(cmd + ["--shard", "1/2"], capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert [orjson.loads(x)["checkpoint"].endswith("step_000004") for x in r.stdout.splitlines()] == [True]
    assert "(GPU 3)" in r.stderr
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, r.stderr
    assert r.stderr.count("evaluating ") == 1 and "step_000002 on math500 (GPU 3)" in r.stderr   # step 4 was done
    for step in ("step_000002", "step_000004"):
        s = summary(out / "run_a" / "checkpoints" / step / "math500")
        assert s["settings"]["cuda_visible_devices"] == "3" and s["records"] == 3
        assert s["settings"]["source"].endswith("math500/test.jsonl")
    md = (out / "results.md").read_text().splitlines()
    assert md[0] == "| checkpoint | math500_4tok accuracy |" and len(md) == 4   # --max-tokens 4: said so
    assert md[2].split(" | ")[0] == "| run_a/checkpoints/step_000002"
    assert (out / "results.csv").read_text().splitlines()[0] == "checkpoint,math500_4tok accuracy"
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0 and "evaluating" not in r.stderr and r.stdout == ""


def test_offline_single_evaluation_and_watch_read_lm_evals_task_rows_from_rlvr_data_dir(tiny_model_dir, tmp_path):
    """The users' offline checks, hub unreachable: `rlvr-eval MODEL OUT -b gsm8k` and `--watch ...
    -b gsm8k:1`, lm-eval's gsm8k rows (test and the few-shot train split) from $RLVR_DATA_DIR."""
    shutil.copytree(tiny_model_dir, tmp_path / "run" / "checkpoints" / "step_000002")
    env = dict(os.environ, OMP_NUM_THREADS="1", RLVR_DATA_DIR=os.path.join(REPO, "tests", "data", "lmeval"),
               HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", HF_ENDPOINT="http://127.0.0.1:9")
    env.pop("RLVR_S3_DATASETS", None)
    single = [sys.executable, "-m", "rlvr.commands.eval", str(tmp_path / "run" / "checkpoints" / "step_000002"),
              str(tmp_path / "one"), "-b", "gsm8k", "--limit", "2", "--max-tokens", "4", *HF]
    watch = [sys.executable, "-m", "rlvr.commands.eval", "--watch", str(tmp_path / "run" / "checkpoints" / "step_*"),
             str(tmp_path / "evals"), "-b", "gsm8k:1", "--once", "--limit", "2", "--max-tokens", "4", *HF]
    for cmd, folder in ((single, tmp_path / "one"), (watch, tmp_path / "evals" / "step_000002" / "gsm8k_1shot")):
        r = machine_time.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
        logs = "".join(p.read_text() for p in tmp_path.glob("evals/*/*/eval.log"))
        assert r.returncode == 0, r.stderr + logs
        s = summary(folder)
        assert s["records"] == 2 and s["benchmark"] == "gsm8k" and orjson.loads(r.stdout)["benchmark"] == "gsm8k"
        for noise in ("thrown while requesting", "Couldn't reach", "Traceback"):
            assert noise not in r.stderr + logs
    assert summary(tmp_path / "one")["settings"]["num_fewshot"] == 8
    assert summary(tmp_path / "evals" / "step_000002" / "gsm8k_1shot")["settings"]["num_fewshot"] == 1


def test_checkpoint_ids_follow_the_pattern(tmp_path):
    assert sweep.fixed_prefix("results/run_*/checkpoints/step_*") == "results"
    assert sweep.checkpoint_id("results/run_a/checkpoints/step_000010", "results/run_*/checkpoints/step_*") == \
        "run_a/checkpoints/step_000010"
    # the watch goes by step whatever the spelling (the users' step100, a SageMaker upload's <run>_step100),
    # and evaluates one of two spellings of one step
    for name in ("step100", "step_000100", "step9", "step_000020", "grpo_step100", "grpo_step20", "final"):
        d = tmp_path / "ck" / name
        d.mkdir(parents=True)
        for f in ("config.json", "tokenizer.json", "model.safetensors"):
            (d / f).write_text("{}")
    found = [os.path.basename(p) for p in sweep.find_checkpoints(str(tmp_path / "ck" / "*"))]
    assert found == ["final", "step9", "step_000020", "step100", "grpo_step20", "grpo_step100"]


def test_second_node_recipe_runs_the_venvs_rlvr_eval_by_absolute_path_over_ssh(tmp_path):
    """bin/eval-two-nodes.sh: the same command here and over ssh (tests/fakes/fake-ssh runs it
    here; the nodes split the units by claiming them), each by the virtualenv's absolute path:
    the remote shell's PATH has no rlvr-eval."""
    venv_bin = tmp_path / "venv" / "bin"
    venv_bin.mkdir(parents=True)
    log = tmp_path / "calls.log"
    fake = venv_bin / "rlvr-eval"
    fake.write_text(f'#!/bin/sh\nwhere=here; [ -n "$FAKE_GPU_SCENARIO" ] && where=node2   # set by fake-ssh\n'
                    f'printf "%s|%s|%s|%s\\n" "$where" "$PWD" "${{RLVR_DATA_DIR:-}}" "$*" >> "{log}"\n'
                    '[ "$where" = node2 ] && exit 5\nexit 0\n')
    fake.chmod(0o755)
    (tmp_path / "node2.json").write_text("{}")
    work = tmp_path / "work dir"
    work.mkdir()
    (work / "jobs.json").write_text("[]")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "RLVR_VENV_BIN": str(venv_bin), "FAKE_SSH_DIR": str(tmp_path),
           "RLVR_SSH_CMD": os.path.join(FAKES, "fake-ssh"), "RLVR_DATA_DIR": "/data/rows"}
    r = subprocess.run(["bash", os.path.join(REPO, "bin", "eval-two-nodes.sh"), "node2", "jobs.json", "evals",
                        "-b", "gsm8k:8"], cwd=work, env=env, capture_output=True, text=True, timeout=120)
    calls = sorted(log.read_text().splitlines())
    assert r.returncode == 5 and "node2 failed (exit 5)" in r.stderr      # the remote's failure is the exit status
    assert "activate" not in r.stderr and f"{venv_bin}/rlvr-eval" in r.stderr
    jobs, out = f"{work}/jobs.json", f"{work}/evals"
    assert calls == sorted([f"here|{work}|/data/rows|--jobs {jobs} {out} -b gsm8k:8",
                            f"node2|{work}|/data/rows|--jobs {jobs} {out} -b gsm8k:8",
                            f"here|{work}|/data/rows|--table {out}"])


def test_harness_units_fetch_s3_checkpoints_first(tmp_path, monkeypatch):
    """--harness lm-eval (as each --jobs/--watch unit runs it) resolves an s3:// checkpoint into the
    local cache before lm-eval starts: here the store is unreachable, so that is where it stops."""
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "x")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "y")
    monkeypatch.setenv("RLVR_S3_RETRIES", "0")
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    r = invoke("rlvr-eval", ["--harness", "lm-eval", "s3://bucket/ckpts/step100/", str(tmp_path / "o"), "-b", "gsm8k"])
    assert r.code == 1 and "model s3://bucket/ckpts/step100/: fetching into the local cache" in r.stderr
    assert "cannot reach http://127.0.0.1:9" in r.stderr and "lm_eval" not in r.stderr and "Traceback" not in r.stderr
