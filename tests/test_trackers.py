"""Experiment trackers (rlvr.trackers): what each tracker's own reader finds after a run --
TensorBoard's event reader, MLflow's file store, wandb's offline run folder (no network) --
resume into the same tracker runs, and a missing or failing tracker costing one warning.
The libraries are optional extras: a test skips only where its package is not installed."""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import struct

import pytest
import yaml

from helpers import REPO, invoke
from rlvr.trackers import CLASSES, Tracker, Trackers, flatten, mlflow_name, numeric

TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")
MODULE = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
CONFIG = {"model": {"path": "tiny"}, "rollout": {"n": 8, "stop": ["\n\n"]}, "eval": {"limit": None}}
MANIFEST = {"host": "h1", "git": {"commit": "abc"}}
LINES = [{"step": 1, "reward/mean": 0.25, "loss/policy": -0.5, "note": "text is not plotted", "flag": True},
         {"step": 2, "reward/mean": 0.5, "loss/policy": -0.25, "flag": False},
         {"step": 3, "reward/mean": 0.75, "loss/policy": 0.125, "kl": 0.01, "kl/max": 0.02},
         {"step": 2, "val/toy/accuracy": 0.5, "val/toy/pass@4": 0.75}]   # a validation line, logged late


def installed(name: str) -> bool:
    return importlib.util.find_spec(MODULE[name]) is not None


def need(name: str):
    if not installed(name):
        pytest.skip(f"{MODULE[name]} is not installed (pip install 'rlvr[{name}]')")


def wandb_history(path: str) -> list[dict]:
    """The history rows of an offline run's .wandb file (a LevelDB-style log of wandb's own
    protobuf Records: a 7-byte header, 32 KiB blocks, 7-byte record headers)."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = open(path, "rb").read()
    assert data[:4] == b":W&B"
    pos, block, buf, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, n, kind = struct.unpack("<IHB", data[pos:pos + 7])
        pos += 7
        if kind == 0 and n == 0:
            pos += left - 7
            continue
        chunk, pos = data[pos:pos + n], pos + n
        if kind in (1, 2):
            buf = chunk
        else:
            buf += chunk
        if kind in (1, 4):
            rec = pb.Record()
            rec.ParseFromString(buf)
            if rec.WhichOneof("record_type") == "history":
                out.append({i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in rec.history.item})
            elif rec.WhichOneof("record_type") == "run":
                out.append({"_run": rec.run})
            elif rec.WhichOneof("record_type") == "exit":
                out.append({"_exit": True})
    return out


def wandb_rows(path: str) -> list[dict]:
    """wandb_history once the run's writer has written its exit record (wandb.finish can
    return before its service process has written everything)."""
    import time

    from machine_time import MachineClock, limit

    clock = MachineClock()  # machine seconds: a busy machine's wall seconds count less
    while True:
        rows = wandb_history(path)
        if any("_exit" in r for r in rows) or clock.seconds() > limit(120):
            return [r for r in rows if "_exit" not in r]
        time.sleep(0.2)


def _started(path: str):
    """The order wandb made its run folders: offline-run-<time>-<id>, then -1, -2 ... within a second."""
    import re

    m = re.search(r"offline-run-(\d{8}_\d{6})-[a-z0-9]+(?:-(\d+))?$", os.path.basename(os.path.dirname(path)))
    return (m.group(1), int(m.group(2) or 0)) if m else (path, 0)


def read_back(name: str, run_dir) -> dict[str, dict[int, float]]:
    """metric -> {step: value}, as the tracker's own reader finds it (the newest value per step)."""
    run_dir = str(run_dir)
    out: dict[str, dict[int, float]] = {}
    if name == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(os.path.join(run_dir, "tensorboard"))
        acc.Reload()
        for tag in acc.Tags()["scalars"]:
            out[tag] = {e.step: pytest.approx(e.value, rel=1e-6) for e in acc.Scalars(tag)}
    elif name == "mlflow":
        from mlflow.tracking import MlflowClient

        st = json.load(open(os.path.join(run_dir, "trackers.json")))["mlflow"]
        c = MlflowClient(tracking_uri=st["tracking_uri"])
        for key in c.get_run(st["run_id"]).data.metrics:
            hist = sorted(c.get_metric_history(st["run_id"], key), key=lambda m: m.timestamp)
            out[key] = {m.step: m.value for m in hist}
    elif name == "wandb":
        for f in sorted(glob.glob(os.path.join(run_dir, "wandb", "offline-run-*", "run-*.wandb")), key=_started):
            for row in wandb_rows(f):
                if "_run" in row:
                    continue
                for k, v in row.items():
                    if not k.startswith("_") and k != "step":
                        out.setdefault(k, {})[row["step"]] = v
    return out


def feed(names, run_dir, lines=LINES, resume=False, start_step=0, status="completed"):
    warnings: list[str] = []
    t = Trackers(names, str(run_dir), resume=resume, start_step=start_step, warn=warnings.append)
    t.open(CONFIG, MANIFEST)
    for ln in lines:
        t.log(ln)
    t.close(status)
    return warnings


def expected(lines=LINES):
    out: dict[str, dict[int, float]] = {}
    for ln in lines:
        for k, v in numeric(ln).items():
            out.setdefault(k, {})[ln["step"]] = v
    return out


@pytest.fixture(autouse=True)
def _env(monkeypatch, tmp_path):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.delenv("WANDB_DIR", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("MLFLOW_EXPERIMENT_NAME", raising=False)


def test_pure_helpers():
    assert numeric(LINES[0]) == {"reward/mean": 0.25, "loss/policy": -0.5, "flag": 1.0}
    assert flatten(CONFIG) == {"model.path": "tiny", "rollout.n": "8", "rollout.stop": "['\\n\\n']",
                               "eval.limit": "null"}
    assert mlflow_name("val/gsm8k/exact_match,strict-match") == "val/gsm8k/exact_match_strict-match"
    assert mlflow_name("val/toy/pass@4") == "val/toy/pass_4"
    # a folder store keeps a metric in a file at its name's path: kl and kl/max cannot both be paths
    assert mlflow_name("kl/max", file_store=True) == "kl.max" and mlflow_name("kl", file_store=True) == "kl"
    from rlvr.trackers import MLflow

    assert [MLflow.is_file_store(u) for u in ("file:/x/mlruns", "/x/mlruns", "mlruns", "./m")] == [True] * 4
    assert not any(MLflow.is_file_store(u) for u in ("databricks", "databricks://prof", "databricks-uc",
                                                      "http://h:5000", "sqlite:///m.db", "postgresql://u@h/db"))


def test_tensorboard_event_reader_reads_back(tmp_path):
    need("tensorboard")
    run_dir = tmp_path / "run_a"
    assert feed(["tensorboard"], run_dir) == []
    assert read_back("tensorboard", run_dir) == expected()
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"tensors": 0})
    acc.Reload()
    text = {t: acc.Tensors(t)[0].tensor_proto.string_val[0].decode() for t in acc.Tags()["tensors"]}
    assert yaml.safe_load(text["config/text_summary"].replace("\n    ", "\n").strip()) == CONFIG
    assert "host: h1" in text["run/text_summary"]


def test_mlflow_file_store_reads_back(tmp_path, monkeypatch):
    need("mlflow")
    run_dir = tmp_path / "results" / "run_b"
    (run_dir).mkdir(parents=True)
    (run_dir / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    assert feed(["mlflow"], run_dir) == []
    st = json.load(open(run_dir / "trackers.json"))["mlflow"]
    assert st["tracking_uri"] == "file:" + str(tmp_path / "results" / "mlruns")   # beside the run folder
    from mlflow.tracking import MlflowClient

    c = MlflowClient(tracking_uri=st["tracking_uri"])
    run = c.get_run(st["run_id"])
    assert run.info.run_name == "run_b" and run.info.status == "FINISHED"
    assert c.get_experiment(run.info.experiment_id).name == "rlvr"
    assert run.data.params["rollout.n"] == "8" and run.data.params["run.git.commit"] == "abc"
    want = {mlflow_name(k, file_store=True): v for k, v in expected().items()}
    assert read_back("mlflow", run_dir) == want and "val.toy.pass_4" in want
    assert {a.path for a in c.list_artifacts(st["run_id"])} == {"config.yaml"}
    # MLFLOW_RUN_ID: a run made beforehand receives the metrics
    made = c.create_run(run.info.experiment_id, run_name="made").info.run_id
    monkeypatch.setenv("MLFLOW_RUN_ID", made)
    assert feed(["mlflow"], tmp_path / "results" / "run_b2") == []
    assert json.load(open(tmp_path / "results" / "run_b2" / "trackers.json"))["mlflow"]["run_id"] == made
    assert read_back("mlflow", tmp_path / "results" / "run_b2") == want


def test_wandb_offline_run_folder(tmp_path, monkeypatch):
    need("wandb")
    monkeypatch.setenv("WANDB_PROJECT", "rlvr-tests")
    run_dir = tmp_path / "run_c"
    assert feed(["wandb"], run_dir) == []
    files = glob.glob(str(run_dir / "wandb" / "offline-run-*" / "run-*.wandb"))
    assert len(files) == 1
    rows = wandb_rows(files[0])
    run = next(r["_run"] for r in rows if "_run" in r)
    assert run.display_name == "run_c" and run.project == "rlvr-tests"
    cfg = {i.key: json.loads(i.value_json) for i in run.config.update}
    assert cfg["rollout"] == CONFIG["rollout"] and cfg["run"] == MANIFEST
    assert read_back("wandb", run_dir) == expected()


def test_resume_continues_the_same_tracker_runs(tmp_path):
    names = [n for n in ("tensorboard", "mlflow", "wandb") if installed(n)]
    if not names:
        pytest.skip("none of tensorboard, mlflow, wandb is installed")
    run_dir = tmp_path / "results" / "run_d"
    assert feed(names, run_dir, LINES[:3], status="failed") == []
    first = json.load(open(run_dir / "trackers.json"))
    # resumed from the checkpoint of step 2: step 3 again (another value), then step 4
    again = [{"step": 3, "reward/mean": 0.5}, {"step": 4, "reward/mean": 1.0}]
    assert feed(names, run_dir, again, resume=True, start_step=2) == []
    assert json.load(open(run_dir / "trackers.json")) == first     # the same runs
    for n in names:
        got = read_back(n, run_dir)[mlflow_name("reward/mean", file_store=True) if n == "mlflow" else "reward/mean"]
        assert got == {1: 0.25, 2: 0.5, 3: 0.5, 4: 1.0}, n     # newest value of step 3
    if "tensorboard" in names:   # TensorBoard hides the lost step's old event
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(run_dir / "tensorboard"))
        acc.Reload()
        assert [e.step for e in acc.Scalars("reward/mean")] == [1, 2, 3, 4]
    if "mlflow" in names:
        from mlflow.tracking import MlflowClient

        c = MlflowClient(tracking_uri=first["mlflow"]["tracking_uri"])
        assert c.get_run(first["mlflow"]["run_id"]).info.status == "FINISHED"
        assert len(c.search_runs([first["mlflow"]["experiment_id"]])) == 1


class _Broken(Tracker):
    name = "broken"

    def start(self, *a):
        return {}

    def log(self, step, values):
        raise RuntimeError("server said no")


class _Missing(Tracker):
    def start(self, *a):
        raise ImportError("No module named 'nothing'")


class _Recorder(Tracker):
    seen: list = []

    def start(self, *a):
        return {}

    def log(self, step, values):
        _Recorder.seen.append((step, values))


def test_a_missing_or_failing_tracker_costs_one_warning(tmp_path, monkeypatch):
    monkeypatch.setitem(CLASSES, "wandb", _Missing)
    monkeypatch.setitem(CLASSES, "mlflow", _Broken)
    monkeypatch.setitem(CLASSES, "tensorboard", _Recorder)
    _Recorder.seen = []
    warnings = feed(["wandb", "mlflow", "tensorboard"], tmp_path / "run_e")
    assert len(warnings) == 2, warnings
    assert "tracker wandb start failed" in warnings[0] and "pip install 'rlvr[wandb]'" in warnings[0]
    assert "tracker mlflow logging failed" in warnings[1] and "server said no" in warnings[1]
    assert [s for s, _ in _Recorder.seen] == [1, 2, 3, 2]       # the others go on, every line


def test_config_and_command_line(tmp_path):
    r = invoke("rlvr-train", [TINY, "--tracker", "wandb", "--set", "log.trackers=[tensorboard]", "--print-config"])
    assert r.code == 0, r.stderr
    assert yaml.safe_load(r.stdout)["log"]["trackers"] == ["tensorboard", "wandb"]
    r = invoke("rlvr-train", [TINY, "--set", "log.trackers=[comet]", "--print-config"])
    assert r.code == 2 and "log.trackers: unknown tracker 'comet'" in r.stderr
    r = invoke("rlvr-train", [TINY, "--tracker", "comet", "--print-config"])
    assert r.code == 2
