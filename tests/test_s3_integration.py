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
    from rlvr.config_loader import load_config, to_yaml
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
