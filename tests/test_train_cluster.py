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
