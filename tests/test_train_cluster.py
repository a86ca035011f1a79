"""rlvr-train on a simulated two-node Ray cluster: a head started here and a second node started
by `ray start` in its own mount namespace (bubblewrap), where the head's folders (the run folder,
the head's model cache) are an empty tmpfs, as on nodes that share no filesystem (SageMaker
instances): a trainer that would not see the run folder is refused before the run starts."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time

import orjson
import pytest

from helpers import REPO
from rlvr.config_loader import load_config, to_yaml
from rlvr.errors import ConfigError
from rlvr.train.config import TrainConfig
from rlvr.train.loop import train

JOIN_GUARD_S = 300  # only against a hang: the second node normally joins in seconds


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


def start_node(cmd: list[str], env: dict, log_path, joined, attempts: int = 3) -> subprocess.Popen:
    """`ray start --block` for a second node, in its own process group; started again when it
    gave up on its own startup (Ray allows a raylet 30 s to register, which a loaded machine
    can miss): waits on the node's readiness, `joined()`, never on a fixed time."""
    for attempt in range(attempts):
        with open(log_path, "ab") as log:
            node = subprocess.Popen(cmd, env=env, cwd="/", start_new_session=True, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + JOIN_GUARD_S
        while not joined():
            if node.poll() is not None:
                break
            assert time.monotonic() < deadline, "the second node never joined"
            time.sleep(0.2)
        else:
            return node
        text = open(log_path, errors="replace").read()
        if "timed out during startup" not in text or attempt == attempts - 1:
            raise AssertionError(text[-2000:])
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    """(head folder, model): a Ray cluster of this process's head and a second node that does
    not see the head's folder."""
    import ray
    from ray.cluster_utils import Cluster

    from rlvr.tiny import build

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: scripts/install.sh installs it")
    root = tmp_path_factory.mktemp("cluster")
    head_dir = root / "head"
    head_dir.mkdir()
    if ray.is_initialized():
        ray.shutdown()
    model = build(str(root / "tiny"))
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env["RAY_USAGE_STATS_ENABLED"] = "0"
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    cluster = node2 = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer_node": 1}})
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        node2 = start_node(
            ["bwrap", "--dev-bind", "/", "/", "--tmpfs", str(head_dir), "--unshare-pid", "--die-with-parent",
             "--proc", "/proc", "--", sys.executable, "-m", "ray.scripts.scripts", "start",
             f"--address={cluster.address}", "--num-cpus=4", '--resources={"inference_node": 2}', "--block"],
            env, root / "node2.log", lambda: sum(n["Alive"] for n in ray.nodes()) >= 2)
        yield head_dir, model
    finally:
        ray.shutdown()
        if node2 is not None:
            os.killpg(node2.pid, signal.SIGTERM)  # its namespace's processes end with it
            node2.wait()
        if cluster is not None:
            cluster.shutdown()
            # `ray start` recorded the cluster for ray.init() calls on this machine: forget it
            from ray._private.utils import get_ray_address_file

            marker = get_ray_address_file(None)
            if os.path.exists(marker) and open(marker).read().strip() == cluster.address:
                os.unlink(marker)
        os.environ.clear()
        os.environ.update(saved)


def cluster_cfg(model: str, *sets: str) -> TrainConfig:
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=1", "checkpoint.every=1", "rollout.engine=hf", "rollout.num_engines=1",
        "rollout.prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=8",
        "rollout.engine_num_cpus=0.5", "train.trainer_num_cpus=0.5",
        "rollout.engine_resources={inference_node: 1}", *sets])
    cfg.model.path = model
    return cfg


def test_a_trainer_that_cannot_reach_the_run_folder_is_refused(two_nodes):
    # (A run over such nodes, its trainer beside the run folder and its engine on the other
    # node with its own copy of an s3:// model: test_submit.py's two-instance SageMaker job.)
    head_dir, model = two_nodes
    # placed on node 2 by its resources: its checkpoints would never reach the run folder
    cfg = cluster_cfg(model, "train.trainer_resources={inference_node: 0.5}")
    with pytest.raises(ConfigError, match=r"trainer rank 0 was placed .* does not see the run folder"):
        train(cfg, str(head_dir / "run-placed"), ["rlvr-train"], to_yaml(cfg))
    # kept on the driver's node, which cannot hold it (node 2 could: Ray alone would put it there)
    cfg = cluster_cfg(model, "train.trainer_num_cpus=3")
    with pytest.raises(ConfigError, match=r"not on a filesystem shared .* has 2 CPU for the 1 rank\(s\)' 3"):
        train(cfg, str(head_dir / "run-big"), ["rlvr-train"], to_yaml(cfg))
