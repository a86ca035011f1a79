"""rlvr-train on a simulated two-node Ray cluster (two raylets on this machine): the trainer
and the engines are placed on different nodes by their resources, and the run completes."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import REPO
from rlvr.config_loader import load_config, to_yaml
from rlvr.train.config import TrainConfig
from rlvr.train.loop import train


@pytest.fixture()
def two_nodes():
    import ray
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer_node": 1}})
    cluster.add_node(num_cpus=2, resources={"inference_node": 2})
    cluster.wait_for_nodes()
    ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def test_two_node_placement(two_nodes, tmp_path):
    from rlvr.tiny import build

    base = build(str(tmp_path / "tiny"))
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=2", "checkpoint.every=0", "rollout.engine=hf", "rollout.num_engines=2",
        "rollout.prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=8",
        "rollout.engine_num_cpus=0.5", "train.trainer_num_cpus=0.5",
        "rollout.engine_resources={inference_node: 1}", "train.trainer_resources={trainer_node: 1}"])
    cfg.model.path = base
    run_dir = tmp_path / "run"
    train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
    man = orjson.loads((run_dir / "run.json").read_bytes())
    eng = [e["node_id"] for e in man["placement"]["engines"]]
    tr = man["placement"]["trainer"]["node_id"]
    assert len(eng) == 2 and tr not in eng and man["status"] == "completed"
    rows = [orjson.loads(x) for x in open(run_dir / "traces" / "trace.jsonl", "rb")]
    assert [r["step"] for r in rows] == [1, 2]


def test_each_actor_sees_only_the_gpus_ray_gave_it(tmp_path, monkeypatch):
    # Ray's logical GPUs on a CPU machine: 8 declared, the driver limited to 6 of them (GPUs 0
    # and 1 left to an evaluator). Two engines of 2 GPUs and two trainer ranks of 1 GPU fill
    # the 6: every actor's devices are its own, and none lies outside the driver's.
    import ray

    from rlvr.tiny import build

    if ray.is_initialized():
        ray.shutdown()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3,4,5,6,7")
    base = build(str(tmp_path / "tiny"))
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=1", "checkpoint.every=0", "rollout.engine=hf", "rollout.num_engines=2",
        "rollout.prompts_per_step=2", "rollout.n=2", "rollout.max_tokens=4", "rollout.engine_num_gpus=2",
        "rollout.engine_num_cpus=0.25", "train.num_trainers=2", "train.trainer_num_cpus=0.25",
        "train.device=cpu", "ray.num_gpus=8", "ray.num_cpus=2"])
    cfg.model.path = base
    run_dir = tmp_path / "run"
    try:
        train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
        assert ray.cluster_resources()["GPU"] == 6
    finally:
        ray.shutdown()
    man = orjson.loads((run_dir / "run.json").read_bytes())
    actors = man["placement"]["engines"] + man["placement"]["trainer_ranks"]
    seen = [a["gpus"].split(",") for a in actors]
    assert [len(s) for s in seen] == [2, 2, 1, 1]
    flat = [g for s in seen for g in s]
    assert len(set(flat)) == 6 and set(flat) == {"2", "3", "4", "5", "6", "7"}
    assert man["status"] == "completed"
