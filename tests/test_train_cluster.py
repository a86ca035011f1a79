"""rlvr-train's placement on a Ray cluster: each actor sees only the GPUs Ray gave it; on two
Ray nodes of this machine (`two_nodes`, ray.cluster_utils), trainer ranks that no single node
holds span both nodes (one PACK placement group, rank 0 on the driver's node, run.json's
`mesh`), and a trainer that would not see the run folder (nodes that share no filesystem, as
SageMaker instances) is refused before the run starts. A run over two nodes that share nothing
is test_submit.py's two-instance SageMaker job."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import REPO
from machine_time import scaled
from rlvr.config_loader import load_config, to_yaml
from rlvr.errors import ConfigError
from rlvr.train.config import TrainConfig
from rlvr.train.loop import train


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


def test_spanning_bundles_pin_rank_0_to_the_driver_and_keep_tp_groups_and_neighbours_together():
    from rlvr.train.cluster import rank_bundles, spanning_bundles
    from rlvr.train.trainers import mesh_record

    nodes = [{"NodeID": "drv", "NodeManagerAddress": "10.0.0.1", "Resources": {"CPU": 16, "GPU": 8}},
             {"NodeID": "oth", "NodeManagerAddress": "10.0.0.2", "Resources": {"CPU": 16, "GPU": 8}},
             {"NodeID": "head", "NodeManagerAddress": "10.0.0.3", "Resources": {"CPU": 4}}]
    # 16 ranks, TP 8: two bundles of 8 GPUs (a bundle lies on one node), the first on the driver's node
    bundles, selectors = spanning_bundles(16, 8, {"CPU": 1.0, "GPU": 1.0}, "drv", nodes)
    assert bundles == [{"CPU": 8.0, "GPU": 8.0}] * 2 and selectors == [{"ray.io/node-id": "drv"}, {}]
    # a driver on a node without GPUs (a `ray job submit` head): no pin, Ray's PACK decides
    assert spanning_bundles(16, 8, {"CPU": 1.0, "GPU": 1.0}, "head", nodes)[1] is None
    # Ray put the bundles anywhere: the driver's node's first, then node by node
    assert rank_bundles({0: "drv", 1: "oth"}, 16, 8, "drv") == [0] * 8 + [1] * 8
    assert rank_bundles({0: "oth", 1: "drv", 2: "oth", 3: "drv"}, 4, 1, "drv") == [1, 3, 0, 2]
    assert rank_bundles({0: "x", 1: "y", 2: "x"}, 3, 1, "head") == [0, 2, 1]
    placed = [{"node_id": "drv"}, {"node_id": "drv"}, {"node_id": "oth"}, {"node_id": "oth"}]
    mesh = mesh_record(placed, nodes, 2, {"placement": "PACK", "driver_node": "drv", "rank0_pinned": True},
                       ("10.0.0.1", 29500))
    assert mesh == {"world": 4, "tensor_parallel": 2, "data_parallel": 2, "placement": "PACK", "driver_node": "drv",
                    "rank0_pinned": True, "rank0_node": "drv", "rank0_on_driver_node": True,
                    "rendezvous": "10.0.0.1:29500",
                    "nodes": [{"node_id": "drv", "address": "10.0.0.1", "ranks": [0, 1]},
                              {"node_id": "oth", "address": "10.0.0.2", "ranks": [2, 3]}]}


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """(tiny model folder, head node id, second node id): a Ray head (2 CPUs, 2 inference_node,
    1 trainer_slot) and a second node (1 CPU, 1 trainer_slot) on this machine, the driver
    connected to the head. One trainer_slot a node: two ranks asking for one each must span
    both nodes."""
    import ray
    from ray.cluster_utils import Cluster

    from rlvr.tiny import build

    if ray.is_initialized():
        ray.shutdown()
    model = build(str(tmp_path_factory.mktemp("cluster") / "tiny"))
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "resources": {"inference_node": 2, "trainer_slot": 1}})
    try:
        # Ray's own waits for a node are 30 s of wall time: a busy machine gets them stretched
        second = cluster.add_node(wait=False, num_cpus=1, resources={"trainer_slot": 1})
        ray.init(address=cluster.address, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
        cluster.wait_for_nodes(timeout=scaled(60))
        head = ray.get_runtime_context().get_node_id()
        assert head == cluster.head_node.node_id and second.node_id != head
        yield model, head, second.node_id
    finally:
        ray.shutdown()
        cluster.shutdown()
        # the head recorded the cluster for ray.init() calls on this machine: forget it
        from ray._private.utils import get_ray_address_file

        marker = get_ray_address_file(None)
        if os.path.exists(marker) and open(marker).read().strip() == cluster.address:
            os.unlink(marker)


def cluster_cfg(model: str, *sets: str) -> TrainConfig:
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=1", "checkpoint.every=1", "rollout.engine=hf", "rollout.num_engines=1",
        "rollout.prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=8",
        "rollout.engine_num_cpus=0.5", "train.trainer_num_cpus=0.5",
        "rollout.engine_resources={inference_node: 1}", *sets])
    cfg.model.path = model
    return cfg


def test_trainer_ranks_span_two_nodes_with_rank_0_beside_the_run_folder(two_nodes, tmp_path):
    # No node holds both ranks (one trainer_slot each): the plan says so, the ranks go in one
    # PACK group over both nodes, rank 0 on the driver's node (which holds the run folder; both
    # nodes see it here), they meet at rank 0's node address over gloo, train a step and write
    # the checkpoint into the run folder; run.json's mesh says where each rank ran.
    model, head, second = two_nodes
    run_dir = tmp_path / "run"
    cfg = cluster_cfg(model, "train.num_trainers=2", "train.trainer_resources={trainer_slot: 1}",
                      "rollout.max_tokens=4", "rollout.prompts_per_step=2", "rollout.n=2")
    train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
    man = orjson.loads((run_dir / "run.json").read_bytes())
    assert man["status"] == "completed", man.get("error")
    assert man["plan"]["trainers_together"] is False
    mesh = man["mesh"]
    assert {k: mesh[k] for k in ("world", "tensor_parallel", "data_parallel", "placement", "rank0_pinned")} == \
        {"world": 2, "tensor_parallel": 1, "data_parallel": 2, "placement": "PACK", "rank0_pinned": True}
    assert [(n["node_id"], n["ranks"]) for n in mesh["nodes"]] == [(head, [0]), (second, [1])]
    assert mesh["driver_node"] == mesh["rank0_node"] == head and mesh["rank0_on_driver_node"] is True
    assert mesh["rendezvous"].split(":")[0] == mesh["nodes"][0]["address"]   # rank 0's node address, as Ray has it
    assert [r["node_id"] for r in man["placement"]["trainer_ranks"]] == [head, second]
    rows = [orjson.loads(x) for x in open(run_dir / "traces" / "trace.jsonl", "rb")]
    assert [r["step"] for r in rows] == [1]
    ck = run_dir / "checkpoints" / "step_000001"
    assert (ck / "model.safetensors").exists()
    assert sorted(f for f in os.listdir(ck) if f.startswith("optimizer_rank")) == \
        ["optimizer_rank000.pt", "optimizer_rank001.pt"]


def test_a_trainer_that_cannot_reach_the_run_folder_is_refused(two_nodes, tmp_path, monkeypatch):
    # The nodes that do not see the run folder are found by a probe file (rlvr.train.placement;
    # for real in test_submit.py's two-instance SageMaker job, whose trainer is kept beside its
    # run folder and whose engine runs on the other instance). Given such a node, a trainer
    # placed there by its resources is refused, and so is a trainer the driver's node cannot
    # hold (Ray would wait for it forever).
    from rlvr.train import placement

    model, me, _ = two_nodes
    monkeypatch.setattr(placement, "nodes_not_seeing", lambda folder: {me: "node-without-the-folder"})
    cfg = cluster_cfg(model, "train.trainer_resources={inference_node: 0.5}")
    with pytest.raises(ConfigError, match=r"trainer rank 0 was placed .* on node node-without-the-folder, which "
                                          r"does not see the run folder"):
        train(cfg, str(tmp_path / "run-placed"), ["rlvr-train"], to_yaml(cfg))
    monkeypatch.setattr(placement, "nodes_not_seeing", lambda folder: {"other": "node-2"})
    # the cluster as a whole could hold the trainer (node-2 has 8 CPUs: the start-up plan passes),
    # the driver's node cannot
    from rlvr.train import plan

    real = plan.cluster_from_ray

    def with_node_2(*a, **kw):
        c = real(*a, **kw)
        c.nodes.append(plan.Node(8.0, 0, None, "node-2", {}))
        return c

    monkeypatch.setattr(plan, "cluster_from_ray", with_node_2)
    cfg = cluster_cfg(model, "train.trainer_num_cpus=3")
    with pytest.raises(ConfigError, match=r"not on a filesystem shared .*\(node-2\).* has 2 CPU for the "
                                          r"1 rank\(s\)' 3"):
        train(cfg, str(tmp_path / "run-big"), ["rlvr-train"], to_yaml(cfg))
