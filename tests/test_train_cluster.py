"""rlvr-train on a simulated two-node Ray cluster: a head started here and a second node started
by `ray start` in its own mount namespace (bubblewrap), where the head's folders (the run folder,
the head's model cache) are an empty tmpfs, as on nodes that share no filesystem (SageMaker
instances). The model comes from S3: each node fetches it into its own cache."""

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
from s3_fixtures import s3server  # noqa: F401 - fixture

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


@pytest.fixture(scope="module")
def two_nodes(s3server, tmp_path_factory):  # noqa: F811 - fixture
    """(head folder, node-2 cache, model URI): the head's folder is invisible on node 2."""
    import ray
    from ray.cluster_utils import Cluster

    from rlvr.tiny import build

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap (bwrap) is not installed: scripts/install.sh installs it")
    root = tmp_path_factory.mktemp("cluster")
    head_dir, node2_cache = root / "head", root / "node2-cache"
    head_dir.mkdir()
    node2_cache.mkdir()
    if ray.is_initialized():
        ray.shutdown()
    bucket = f"rlvr-cluster-{os.getpid()}"
    c = s3server.client()
    c.create_bucket(Bucket=bucket)
    model = build(str(root / "tiny-src"))
    for f in os.listdir(model):
        c.upload_file(os.path.join(model, f), bucket, f"models/tiny/{f}")
    shutil.rmtree(model)
    env = {**s3server.env(), "RAY_USAGE_STATS_ENABLED": "0", "RLVR_S3_RETRIES": "6"}
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({**env, "RLVR_CACHE": str(head_dir / "cache")})  # the driver's and the head's
    cluster = node2 = None
    try:
        cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 2, "resources": {"trainer_node": 1}})
        node2 = subprocess.Popen(
            ["bwrap", "--dev-bind", "/", "/", "--tmpfs", str(head_dir), "--unshare-pid", "--die-with-parent",
             "--proc", "/proc", "--", sys.executable, "-m", "ray.scripts.scripts", "start",
             f"--address={cluster.address}", "--num-cpus=4", '--resources={"inference_node": 2}', "--block"],
            env={**env, "RLVR_CACHE": str(node2_cache)}, cwd="/", start_new_session=True,
            stdout=open(root / "node2.log", "wb"), stderr=subprocess.STDOUT)
        ray.init(address=cluster.address, logging_level="ERROR", log_to_driver=False)
        deadline = time.monotonic() + JOIN_GUARD_S
        while sum(n["Alive"] for n in ray.nodes()) < 2:
            assert node2.poll() is None, (root / "node2.log").read_text()[-2000:]
            assert time.monotonic() < deadline, "the second node never joined"
            time.sleep(0.2)
        yield head_dir, node2_cache, f"s3://{bucket}/models/tiny/"
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


def cluster_cfg(uri: str, *sets: str) -> TrainConfig:
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=1", "checkpoint.every=1", "rollout.engine=hf", "rollout.num_engines=1",
        "rollout.prompts_per_step=4", "rollout.n=4", "rollout.max_tokens=8",
        "rollout.engine_num_cpus=0.5", "train.trainer_num_cpus=0.5",
        "rollout.engine_resources={inference_node: 1}", *sets])
    cfg.model.path = uri
    return cfg


def test_nodes_without_the_run_folder_or_the_model(two_nodes, monkeypatch):
    # The engine runs on node 2, which sees neither the run folder nor the driver's model
    # cache: it fetches the s3:// model into node 2's cache. The trainer writes checkpoints
    # into the run folder: it is kept on the driver's node, whose cache it shares. The run
    # folder is given relative to the driver's working directory, which is not the Ray
    # workers' (they run where their node started).
    head_dir, node2_cache, uri = two_nodes
    run_dir = head_dir / "run"
    cfg = cluster_cfg(uri)
    monkeypatch.chdir(head_dir)
    train(cfg, "run", ["rlvr-train"], to_yaml(cfg))
    man = orjson.loads((run_dir / "run.json").read_bytes())
    assert man["status"] == "completed" and man["model"]["source"] == "s3"
    eng, tr = man["placement"]["engines"], man["placement"]["trainer"]
    assert len(eng) == 1 and tr["node_id"] != eng[0]["node_id"]
    assert all(e["model"].startswith(str(node2_cache)) for e in eng), eng
    assert tr["model"].startswith(str(head_dir / "cache")) and tr["model"] == man["base_model"]
    assert sorted(os.listdir(eng[0]["model"])) == sorted(os.listdir(tr["model"]))
    rows = [orjson.loads(x) for x in open(run_dir / "traces" / "trace.jsonl", "rb")]
    assert [r["step"] for r in rows] == [1]
    assert (run_dir / "checkpoints" / "step_000001" / "model.safetensors").exists()


def test_a_trainer_that_cannot_reach_the_run_folder_is_refused(two_nodes):
    head_dir, _, uri = two_nodes
    # placed on node 2 by its resources: its checkpoints would never reach the run folder
    cfg = cluster_cfg(uri, "train.trainer_resources={inference_node: 0.5}")
    with pytest.raises(ConfigError, match=r"trainer rank 0 was placed .* does not see the run folder"):
        train(cfg, str(head_dir / "run-placed"), ["rlvr-train"], to_yaml(cfg))
    # kept on the driver's node, which cannot hold it (node 2 could: Ray alone would put it there)
    cfg = cluster_cfg(uri, "train.trainer_num_cpus=3")
    with pytest.raises(ConfigError, match=r"not on a filesystem shared .* has 2 CPU for the 1 rank\(s\)' 3"):
        train(cfg, str(head_dir / "run-big"), ["rlvr-train"], to_yaml(cfg))
