"""S3 inside the other commands: rlvr-data reads s3:// sources and curricula, and rlvr-train
uploads its run folder (checkpoints, traces) in the background, against the real test server."""

from __future__ import annotations

import os
import sys

import orjson
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_fixtures import bucket, s3env, s3server  # noqa: E402,F401

from helpers import DATA, REPO, invoke  # noqa: E402


def test_rlvr_data_reads_s3_sources_and_orders(s3env, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    c = s3env.client()
    c.upload_file(os.path.join(DATA, "datasets", "gsm8k", "test.jsonl"), bucket, "data/gsm8k/test.jsonl")
    c.put_object(Bucket=bucket, Key="curricula/easy.txt", Body=b"gsm8k/test/3\ngsm8k/test/1\n")
    local = invoke("rlvr-data", ["gsm8k", "--source", os.path.join(DATA, "datasets", "gsm8k", "test.jsonl")]).records()
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/gsm8k/test.jsonl"])
    assert r.code == 0, r.stderr
    assert r.records() == local
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/gsm8k/test.jsonl",
                             "--order", f"s3://{bucket}/curricula/easy.txt"])
    assert [x["id"] for x in r.records()] == ["gsm8k/test/3", "gsm8k/test/1"]
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/nope.jsonl"])
    assert r.code != 0 and "nope.jsonl" in r.stderr and "Traceback" not in r.stderr


@pytest.fixture()
def ray_local():
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def test_train_uploads_its_run_folder(s3env, bucket, tmp_path, ray_local):
    from rlvr.config import load_config, to_yaml
    from rlvr.tiny import build
    from rlvr.train.config import TrainConfig
    from rlvr.train.loop import train

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=2", "checkpoint.every=1", "rollout.engine=hf", "rollout.prompts_per_step=4", "rollout.n=4",
        "rollout.max_tokens=8", f"checkpoint.upload=s3://{bucket}/jobs/"])
    cfg.model.path = build(str(tmp_path / "tiny"))
    run_dir = tmp_path / "runs" / "job1"
    train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
    c = s3env.client()
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="jobs/")["Contents"]}
    for k in ("jobs/job1/config.yaml", "jobs/job1/run.json", "jobs/job1/traces/trace.jsonl",
              "jobs/job1/checkpoints/step_000001/model.safetensors",
              "jobs/job1/checkpoints/step_000002/trainer_state.pt"):
        assert k in keys, k
    assert not any("/.tmp-" in k for k in keys)  # checkpoints being written never go up
    remote = c.get_object(Bucket=bucket, Key="jobs/job1/traces/trace.jsonl")["Body"].read()
    assert remote == (run_dir / "traces" / "trace.jsonl").read_bytes()
    assert orjson.loads(c.get_object(Bucket=bucket, Key="jobs/job1/run.json")["Body"].read())["status"] == "completed"


def test_train_traces_reach_s3_before_the_next_checkpoint(s3env, bucket, tmp_path, ray_local, monkeypatch):
    """A watcher sees step N's trace while training runs, before the checkpoint that follows it,
    with the uploads mapped to another layout (the one of a SageMaker job)."""
    import time

    from rlvr.config import load_config, to_yaml
    from rlvr.s3 import BackgroundUploader, watch
    from rlvr.tiny import build
    from rlvr.train.config import TrainConfig
    from rlvr.train.loop import train

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=3", "checkpoint.every=2", "rollout.engine=hf", "rollout.prompts_per_step=4", "rollout.n=4",
        "rollout.max_tokens=8", f"checkpoint.upload=s3://{bucket}/sm/", "upload.trace_interval_s=0"])
    cfg.upload.layout = {"checkpoints/step_000003/": "checkpoints/job1/{run}_final/",
                         "checkpoints/step_{step}/": "checkpoints/job1/{run}_step{step}/",
                         "traces/": "checkpoints/job1/traces/", "": "checkpoints/job1/{run}/"}
    cfg.model.path = build(str(tmp_path / "tiny"))
    run_dir = tmp_path / "runs" / "r1"
    c = s3env.client()
    seen = []
    tick = BackgroundUploader.tick

    def watched_tick(self):
        tick(self)
        # the training thread waits here (bounded only against a hang) until a watcher finds
        # this step's trace in S3; then no checkpoint may be there yet
        step = len((run_dir / "traces" / "trace.jsonl").read_bytes().splitlines())
        local = tmp_path / "watched" / "job1" / "traces" / "trace.jsonl"
        deadline = time.monotonic() + 180
        while not (local.exists() and len(local.read_bytes().splitlines()) == step):
            assert time.monotonic() < deadline, f"step {step}'s trace never reached S3"
            watch("job1", f"s3://{bucket}/sm/checkpoints/", str(tmp_path / "watched"), once=True)
            time.sleep(0.2)
        ckpts = [o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="sm/checkpoints/job1/r1_").get("Contents", [])]
        seen.append((orjson.loads(local.read_bytes().splitlines()[-1])["step"], ckpts))

    monkeypatch.setattr(BackgroundUploader, "tick", watched_tick)
    train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
    assert [s for s, _ in seen] == [1, 2, 3]
    assert seen[0][1] == [] and seen[1][1] == []  # steps 1 and 2 were in S3 before checkpoint 2 existed
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="sm/")["Contents"]}
    for k in ("sm/checkpoints/job1/r1_step2/model.safetensors", "sm/checkpoints/job1/r1_step2/trainer_state.pt",
              "sm/checkpoints/job1/r1_final/trainer_state.pt", "sm/checkpoints/job1/traces/samples.jsonl",
              "sm/checkpoints/job1/r1/run.json", "sm/checkpoints/job1/r1/config.yaml"):
        assert k in keys, k
    assert not any(k.startswith("sm/checkpoints/job1/r1/checkpoints/") or "/.tmp-" in k for k in keys)
    remote = c.get_object(Bucket=bucket, Key="sm/checkpoints/job1/traces/trace.jsonl")["Body"].read()
    assert remote == (run_dir / "traces" / "trace.jsonl").read_bytes()
