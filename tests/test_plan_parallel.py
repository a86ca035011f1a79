"""The plan's arithmetic for parallel trainers (rlvr.train.plan_parallel), checked against
hand arithmetic for Qwen3-8B and Qwen3-32B (their config.json alone, tests/data/models/): the
per-rank parts with the TP split and the gradient-sync choice, the layouts that fit 8 and 16
GPUs of 80 GiB, and the refusal of one that does not, with its figures."""

from __future__ import annotations

import os

import pytest

from rlvr.train.plan_memory import GIB, ModelShape, read_model_config
from rlvr.train.plan_parallel import choose_grad_sync, layouts, nearest_fit, plan_rank, trainer_memory

DATA = os.path.join(os.path.dirname(__file__), "data", "models")


def shape(name: str) -> ModelShape:
    cfg, _ = read_model_config(os.path.join(DATA, name))
    return ModelShape.from_config(cfg, name)


# parameters by hand: 2 x V x H (untied) + L x (q + k + v + o + gated MLP + norms) + H
P8 = 2 * 151936 * 4096 + 36 * (4096 * 4096 * 2 + 2 * 4096 * 1024 + 3 * 4096 * 12288 + 2 * 4096 + 2 * 128) + 4096
P32 = 2 * 151936 * 5120 + 64 * (5120 * 8192 * 2 + 2 * 5120 * 1024 + 3 * 5120 * 25600 + 2 * 5120 + 2 * 128) + 5120


def gib(x: float) -> float:
    return round(x / GIB, 2)


def test_parameter_counts():
    assert shape("qwen3-8b").params == P8 == 8_190_735_360
    assert shape("qwen3-32b").params == P32 == 32_762_123_264


@pytest.mark.parametrize("name,P,world,tp", [("qwen3-8b", P8, 8, 2), ("qwen3-32b", P32, 16, 4),
                                             ("qwen3-32b", P32, 16, 8)])
def test_per_rank_states_by_hand(name, P, world, tp):
    m = trainer_memory(shape(name), 8192, world=world, tensor_parallel=tp, grad_sync="per_update")
    assert m["master_weights"] == gib(4 * P / world) and m["gradients"] == gib(4 * P / world)
    assert m["optimizer"] == gib(8 * P / world) and m["optimizer_step"] == gib(4 * P / world)
    assert m["unsharded_gradients"] == gib(4 * P / tp)        # this rank's TP slice, unsharded, fp32
    assert (m["data_parallel"], m["tensor_parallel"]) == (world // tp, tp)
    per_mb = trainer_memory(shape(name), 8192, world=world, tensor_parallel=tp, grad_sync="per_microbatch")
    assert per_mb["unsharded_gradients"] == 0.0
    assert per_mb["est_peak_gib"] == pytest.approx(m["est_peak_gib"] - 1.1 * 4 * P / tp / GIB, abs=0.05)
    # the vocabulary-parallel loss path: chunk x V / tp logits twice in fp32, the head's gradient twice in bf16
    assert m["loss_path"] == gib(2 * 1024 * 151936 / tp * 4 + 2 * 151936 / tp * shape(name).hidden * 2)
    off = trainer_memory(shape(name), 8192, world=world, tensor_parallel=tp, grad_sync="per_microbatch",
                         offload="params_and_optimizer")
    assert off["master_weights"] == off["optimizer"] == off["optimizer_step"] == 0.0
    assert off["host_gib"] == gib(16 * P / world)
    # offload optimizer: the moments and the step's temporary leave the GPU, weights and gradients stay
    opt = trainer_memory(shape(name), 8192, world=world, tensor_parallel=tp, grad_sync="per_microbatch",
                         offload="optimizer")
    assert opt["optimizer"] == opt["optimizer_step"] == 0.0 and opt["host_gib"] == gib(16 * P / world)
    assert opt["master_weights"] == opt["gradients"] == gib(4 * P / world)


def test_32b_on_one_node_the_users_layout():
    """Their 32B trainer: 8 GPUs, TP 8 (one data-parallel rank: no unsharded gradients to
    keep). fp32 masters, gradients and AdamW's moments are 16P / 8 = 61 GiB a rank, and AdamW's
    foreach temporary 4P / 8 = 15.3 GiB more at its step: 76.5 GiB allocated, 84.7 GiB with the
    allocator's 10% and the context, over 80 GiB: refused with that arithmetic. Offloading the
    states to the CPU fits; so does the same layout over two nodes (16 = 2 x 8)."""
    s = shape("qwen3-32b")
    m = plan_rank(s, 8192, 80.0, world=8, tensor_parallel=8)
    assert m["unsharded_gradients"] == 0.0 and m["grad_sync"] == "per_update"
    states = gib(4 * P32 / 8) * 2 + gib(8 * P32 / 8)
    assert states == pytest.approx(61.03, abs=0.01)
    assert not m["fits"] and m["est_peak_gib"] == pytest.approx(84.66, abs=0.02)
    assert "optimizer_step 15.26" in m["why"] and "= 84.66 GiB > 80 GiB" in m["why"]
    off = plan_rank(s, 8192, 80.0, world=8, tensor_parallel=8, offload="params_and_optimizer")
    assert off["fits"] and off["host_gib"] == gib(16 * P32 / 8)
    # AdamW's state alone on the CPU: the moments (30.52 GiB) and the step's temporary leave the GPU
    opt = plan_rank(s, 8192, 80.0, world=8, tensor_parallel=8, offload="optimizer")
    assert opt["fits"] and opt["optimizer"] == 0.0 and opt["master_weights"] == gib(4 * P32 / 8)
    two = plan_rank(s, 8192, 80.0, world=16, tensor_parallel=8)
    assert two["fits"] and two["master_weights"] == gib(4 * P32 / 16)
    assert two["grad_sync"] == "per_update" and two["unsharded_gradients"] == gib(4 * P32 / 8) == 15.26
    near = nearest_fit(s, 8192, 8, 80.0)
    assert near["data_parallel"] * near["tensor_parallel"] == 16


def test_grad_sync_chosen_where_unsharded_gradients_do_not_fit():
    """FSDP alone over 16 GPUs at 32B: per_update keeps 4P = 122.05 GiB of unsharded gradients on
    every rank, more than 80 GiB: the plan chooses per_microbatch, which fits."""
    s = shape("qwen3-32b")
    assert gib(4 * P32) == 122.05
    assert choose_grad_sync(s, 8192, 80.0, world=16, tensor_parallel=1) == "per_microbatch"
    assert choose_grad_sync(s, 8192, 80.0, world=16, tensor_parallel=8) == "per_update"
    assert choose_grad_sync(shape("qwen3-8b"), 8192, 80.0, world=8, tensor_parallel=1) == "per_update"


def test_refused_with_arithmetic_and_nearest_layout():
    s = shape("qwen3-32b")
    # 2 GPUs: the states alone are 16 P / 2 = 244 GiB a rank
    m = plan_rank(s, 8192, 80.0, world=2, tensor_parallel=2, grad_sync="per_microbatch")
    assert not m["fits"]
    assert f"master_weights {gib(4 * P32 / 2):g}" in m["why"] and "> 80 GiB" in m["why"]
    near = nearest_fit(s, 8192, 2, 80.0)
    assert near is not None and near["fits"] and near["data_parallel"] * near["tensor_parallel"] == 16


def test_layouts_on_one_and_two_nodes():
    for name in ("qwen3-8b", "qwen3-32b"):
        for gpus in (8, 16):
            ls = layouts(shape(name), 8192, gpus, 80.0)
            assert [m["tensor_parallel"] for m in ls] == [1, 2, 4, 8]
            assert all(m["data_parallel"] * m["tensor_parallel"] == gpus for m in ls)
    # 8B fits every layout of one node; 32B none of one node's, every one of two nodes'
    # (FSDP-heavy ones with per_microbatch sync)
    assert all(m["fits"] for m in layouts(shape("qwen3-8b"), 8192, 8, 80.0))
    assert not any(m["fits"] for m in layouts(shape("qwen3-32b"), 8192, 8, 80.0))
    two = layouts(shape("qwen3-32b"), 8192, 16, 80.0)
    assert all(m["fits"] for m in two) and [m["grad_sync"] for m in two][0] == "per_microbatch"


def test_plan_of_a_32b_run_refuses_one_node_and_fits_two():
    """--plan (make_plan) for Qwen3-32B's config.json alone: 8 trainer ranks at TP 8 and two
    TP-2 engines on a third node's worth of GPUs do not fit 80 GiB GPUs (the rank's arithmetic
    in the problem); 16 ranks over two nodes do; the plan lists the layouts that fit."""
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig
    from rlvr.train.plan import Cluster, Node, make_plan

    repo = os.path.dirname(os.path.dirname(__file__))
    path = os.path.join(DATA, "qwen3-32b")

    def cfg(n):
        return load_config(TrainConfig, os.path.join(repo, "configs", "qwen3-1.7B-gsm8k.yaml"),
                           [f"model.path={path}", f"train.num_trainers={n}", "train.tensor_parallel=8",
                            "train.max_tokens_per_microbatch=8192", "rollout.num_engines=2",
                            "rollout.tensor_parallel_size=2"])

    one = make_plan(cfg(8), Cluster([Node(64, 8, 80.0, "a"), Node(64, 8, 80.0, "b")], "planned"), shape("qwen3-32b"))
    assert not one["fits"]
    assert any("= 84.66 GiB > 80 GiB" in p for p in one["problems"]), one["problems"]
    rank = [a for a in one["actors"] if a["role"] == "trainer"][0]["memory"]
    assert (rank["data_parallel"], rank["tensor_parallel"]) == (1, 8)
    three = Cluster([Node(64, 8, 80.0, n) for n in "abc"], "planned")
    two = make_plan(cfg(16), three, shape("qwen3-32b"))
    assert two["fits"], two["problems"]
    rank = [a for a in two["actors"] if a["role"] == "trainer"][0]["memory"]
    assert (rank["data_parallel"], rank["tensor_parallel"], rank["grad_sync"]) == (2, 8, "per_update")
    fit = {(x["num_trainers"], x["tensor_parallel"]) for x in two["trainer_layouts"] if x["fits"]}
    assert (16, 8) in fit and (8, 8) not in fit and (24, 8) in fit


def test_config_checks_the_parallel_keys():
    from rlvr.errors import ConfigError
    from rlvr.train.config import TrainerConfig, _check_parallel

    _check_parallel(TrainerConfig(num_trainers=8, tensor_parallel=4, grad_sync="per_microbatch",
                                  offload="params_and_optimizer"))
    _check_parallel(TrainerConfig(offload="optimizer"))            # CPUAdamW: one rank too
    for bad, words in [({"num_trainers": 4, "tensor_parallel": 3}, "must divide train.num_trainers 4"),
                       ({"num_trainers": 2, "tensor_parallel": 2, "logprob_chunk_size": 0}, "logprob_chunk_size > 0"),
                       ({"grad_sync": "sometimes"}, "train.grad_sync must be"),
                       ({"offload": "sometimes"}, "train.offload must be"),
                       ({"offload": "params_and_optimizer"}, "needs train.num_trainers > 1")]:
        with pytest.raises(ConfigError, match=words):
            _check_parallel(TrainerConfig(**bad))


def test_a_null_grad_sync_becomes_the_plans_choice_in_the_trainer_config(tmp_path):
    """train.grad_sync null: make_plan records the choice (run.json's plan) and the config the
    trainer ranks get (Cluster.trainer_config) carries it. FSDP alone over 16 x 80 GiB at 32B
    cannot keep the unsharded gradients: per_microbatch; TP 8 x FSDP 2 can: per_update; one
    data-parallel rank has nothing to choose; a CPU cluster (no GPU size) takes per_microbatch;
    a value the user set is kept."""
    from rlvr.config_loader import load_config
    from rlvr.train.cluster import Cluster as RunCluster
    from rlvr.train.config import TrainConfig
    from rlvr.train.plan import Cluster, Node, make_plan

    repo = os.path.dirname(os.path.dirname(__file__))

    def cfg(*sets):
        return load_config(TrainConfig, os.path.join(repo, "configs", "qwen3-1.7B-gsm8k.yaml"),
                           [f"model.path={os.path.join(DATA, 'qwen3-32b')}", "train.max_tokens_per_microbatch=8192",
                            "rollout.num_engines=2", "rollout.tensor_parallel_size=2", *sets])

    gpus = Cluster([Node(64, 8, 80.0, n) for n in "abc"], "planned")
    cases = [(("train.num_trainers=16",), gpus, "per_microbatch", True),
             (("train.num_trainers=16", "train.tensor_parallel=8"), gpus, "per_update", True),
             (("train.num_trainers=8", "train.tensor_parallel=8"), gpus, "per_update", True),
             (("train.num_trainers=16", "train.grad_sync=per_update"), gpus, "per_update", False),
             (("train.num_trainers=2", "rollout.engine_num_gpus=0", "train.trainer_num_gpus=0",
               "rollout.tensor_parallel_size=1"), Cluster([Node(64, 0, None, "n")], "local"), "per_microbatch", True)]
    for sets, cluster, want, chosen in cases:
        c = cfg(*sets)
        assert c.train.grad_sync == (None if chosen else want)
        plan = make_plan(c, cluster, shape("qwen3-32b"))
        assert (plan["grad_sync"], plan["grad_sync_chosen"]) == (want, chosen), sets
        trainer = [a for a in plan["actors"] if a["role"] == "trainer"][0]["memory"]
        if "unsharded_gradients" in trainer and want == "per_microbatch":
            assert trainer["unsharded_gradients"] == 0.0 and trainer["grad_sync"] == want
        run = RunCluster(c, str(tmp_path), "t")
        assert run.trainer_config() is c.train          # before the plan: as given
        run.plan = plan
        assert run.trainer_config().grad_sync == want, sets
        assert c.train.grad_sync == (None if chosen else want)   # the saved config keeps the user's null
    # FSDP alone at 32B, per_microbatch chosen: the rank's figures are the per-micro-batch ones, and fit
    plan = make_plan(cfg("train.num_trainers=16"), gpus, shape("qwen3-32b"))
    rank = [a for a in plan["actors"] if a["role"] == "trainer"][0]["memory"]
    assert rank["grad_sync"] == "per_microbatch" and rank["unsharded_gradients"] == 0.0 and rank["fits"]
