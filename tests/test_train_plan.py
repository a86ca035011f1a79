"""rlvr-train's plan (rlvr.train.plan, `rlvr-train CONFIG --plan`) and the checks every run makes
before and while its actors start: the memory arithmetic (Qwen3-1.7B from a folder holding only
its config.json), GPUs and CPUs counted against the cluster, GPUs shared under NCCL, a trainer
or a shared GPU that cannot hold what is planned, the engines' memory fraction capped beside a
trainer. With logical Ray GPUs standing in for real ones: what Ray assigns to fractional
requests, a run that asks for more than the cluster has stopped before any actor exists, an
actor that cannot be placed named after ray.startup_timeout_s, the processes an engine actor
started killed with it, and a weight sync whose member refuses failed at once, naming it."""

from __future__ import annotations

import json
import os
import shutil
import sys

import pytest

from helpers import DATA, REPO, invoke
from rlvr.config_loader import load_config
from rlvr.errors import ConfigError, Failure, UsageError
from rlvr.train.config import TrainConfig, check
from rlvr.train.plan import Actor, Cluster, ModelShape, Node, make_plan, place, read_model_config, trainer_memory
from rlvr.train.placement import shared_gpus
from rlvr.train.weight_sync import choose

QWEN = os.path.join(DATA, "models", "qwen3-1.7b")
GSM8K = os.path.join(REPO, "configs", "qwen3-1.7B-gsm8k.yaml")
TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")


@pytest.fixture(scope="module")
def qwen_dir(tmp_path_factory) -> str:
    """A folder holding only Qwen3-1.7B's config.json: no weights, no tokenizer."""
    d = tmp_path_factory.mktemp("qwen3-1.7b")
    shutil.copy(os.path.join(QWEN, "config.json"), d / "config.json")
    return str(d)


def qwen() -> ModelShape:
    return ModelShape.from_config(read_model_config(QWEN)[0])


def gsm8k(qwen_dir, *sets):
    return load_config(TrainConfig, GSM8K, [f"model.path={qwen_dir}", *sets])


def test_qwen3_1_7b_trainer_estimate_at_32k_tokens_lands_in_the_reviewed_range():
    s = qwen()
    assert (s.hidden, s.layers, s.heads, s.kv_heads, s.head_dim, s.intermediate, s.vocab, s.tied) == \
        (2048, 28, 16, 8, 128, 6144, 151936, True)
    assert 1.70e9 < s.params < 1.73e9                       # Qwen3-1.7B: 1.72 B with tied embeddings
    m = trainer_memory(s, 32768)                            # one rank, bf16, checkpointing: the shipped configs
    assert 40 <= m["est_peak_gib"] <= 60, m
    # the fp32 states are 16 bytes a parameter; the bf16 compute copy 2
    assert m["master_weights"] + m["gradients"] + m["optimizer"] == pytest.approx(16 * s.params / 2**30, abs=0.05)
    assert m["compute_copy"] == pytest.approx(2 * s.params / 2**30, abs=0.01)
    # activations grow with the token budget, FSDP ranks shard the states, checkpointing matters
    assert trainer_memory(s, 16384)["est_peak_gib"] < m["est_peak_gib"]
    assert trainer_memory(s, 32768, world=4)["optimizer"] == pytest.approx(m["optimizer"] / 4, abs=0.01)
    assert trainer_memory(s, 32768, gradient_checkpointing=False)["est_peak_gib"] > 100


def test_plan_of_the_shipped_8_gpu_layout_fits_an_h100_node(qwen_dir):
    r = invoke("rlvr-train", [GSM8K, "--set", f"model.path={qwen_dir}", "--plan", "--gpus", "8",
                              "--gpu-mem-gib", "80", "--cpus", "32"])
    assert r.code == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["fits"] is True and p["problems"] == [] and p["sync"] == "nccl"
    engines = [a for a in p["actors"] if a["role"] == "engine"]
    trainers = [a for a in p["actors"] if a["role"] == "trainer"]
    assert len(engines) + sum(a["gpus"] for a in trainers) == 8         # every GPU used
    assert all(a["gpus"] == 1 and a["est_peak_gib"] for a in p["actors"])
    assert len({tuple(a["gpu_ids"]) for a in p["actors"]}) == len(p["actors"])   # one GPU each
    assert p["cluster"] == {"source": "planned", "address": None, "gpus": 8, "cpus": 32.0,
                            "nodes": [{"cpus": 32.0, "gpus": 8, "gpu_mem_gib": 80.0, "name": "planned",
                                       "resources": None}]}
    assert p["trainers_together"] is True
    assert p["sync_bucket_mib"] >= 593                      # the embedding (594 MiB) fits one bucket
    assert p["model"]["parameters"] == qwen().params


@pytest.mark.parametrize("name", ["qwen3-1.7B-gsm8k-grpo-sft.yaml", "qwen3-1.7B-gsm8k-gkd.yaml",
                                  "qwen3-1.7B-gsm8k-grpo-gkd.yaml", "qwen3-1.7B-gsm8k-opsd.yaml",
                                  "qwen3-1.7B-math.yaml", "qwen3-1.7B-mix.yaml"])
def test_shipped_8_gpu_configs_keep_every_gpu_busy_and_vllms_eager_choice(qwen_dir, name):
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", name), [f"model.path={qwen_dir}"])
    assert cfg.rollout.enforce_eager is None                 # vLLM's own choice: CUDA graphs on GPUs
    p = make_plan(cfg, Cluster([Node(32, 8, 80.0, "n")], "planned"), qwen())
    assert p["fits"], p["problems"]
    assert sorted(g for a in p["actors"] for g in a["gpu_ids"]) == list(range(8))   # one GPU each, none idle
    assert p["trainers_together"] and cfg.train.num_trainers > 1


def test_plan_refuses_more_gpus_than_there_are_and_says_so_on_stderr(qwen_dir):
    r = invoke("rlvr-train", [GSM8K, "--set", f"model.path={qwen_dir}", "--plan", "--gpus", "4",
                              "--gpu-mem-gib", "80", "--cpus", "32"])
    assert r.code == 2
    p = json.loads(r.stdout)                                 # the plan is still printed
    assert p["fits"] is False and len(p["problems"]) == 1
    assert "fit on no node" in p["problems"][0] and "4 GPU" in p["problems"][0]
    assert "does not fit" in r.stderr and "fit on no node" in r.stderr


def test_shared_gpu_caps_the_engine_or_refuses_with_the_arithmetic(qwen_dir):
    shared = ("rollout.num_engines=1", "rollout.engine_num_gpus=0.5", "train.trainer_num_gpus=0.5",
              "train.num_trainers=1")
    one = Cluster([Node(8, 1, 80.0, "n")], "planned")
    p = make_plan(gsm8k(qwen_dir, *shared), one, qwen())
    assert p["fits"] and p["sync"] == "object_store"        # auto: NCCL refuses two ranks on one GPU
    t = next(a for a in p["actors"] if a["role"] == "trainer")
    e = next(a for a in p["actors"] if a["role"] == "engine")
    assert t["gpu_ids"] == e["gpu_ids"] == [0]
    frac = p["engine_gpu_memory_utilization"]
    assert frac < 0.85 and frac * 80 + t["est_peak_gib"] <= 0.95 * 80 + 1e-6       # capped to what the trainer leaves
    assert e["memory"]["kv_cache_gib"] > 1
    # nccl over a shared GPU is refused; so is a GPU too small for both
    p = make_plan(gsm8k(qwen_dir, *shared, "sync.method=nccl"), one, qwen())
    assert not p["fits"] and "NCCL refuses two ranks on one device" in p["problems"][0]
    p = make_plan(gsm8k(qwen_dir, *shared), Cluster([Node(8, 1, 48.0, "n")], "planned"), qwen())
    assert not p["fits"] and "0.85 x 48 GiB" in p["problems"][0] and "GPUs of their own" in p["problems"][0]


def test_trainer_that_cannot_fit_its_gpu_is_a_problem(qwen_dir):
    # one rank of 44 GiB on 40 GiB GPUs; the shipped four FSDP ranks (28 GiB each) fit
    p = make_plan(gsm8k(qwen_dir, "train.num_trainers=1", "rollout.num_engines=7"),
                  Cluster([Node(32, 8, 40.0, "n")], "planned"), qwen())
    assert not p["fits"] and any("trainer rank(s) 0 need about 43.6" in x for x in p["problems"])
    assert make_plan(gsm8k(qwen_dir), Cluster([Node(32, 8, 40.0, "n")], "planned"), qwen())["fits"]


def test_cpu_cluster_plans_by_cpus(tmp_path):
    cfg = load_config(TrainConfig, TINY, ["rollout.num_engines=2"])
    p = make_plan(cfg, Cluster([Node(4, 0, None, "n")], "local"), ModelShape.from_config(read_model_config("tiny")[0]))
    assert p["fits"] and p["sync"] == "object_store"
    assert [a["gpus"] for a in p["actors"]] == [0, 0, 0] and all(a["est_peak_gib"] is None for a in p["actors"])
    p = make_plan(cfg, Cluster([Node(2, 0, None, "n")], "local"), None)
    assert not p["fits"] and "3 CPU" in p["problems"][0]
    # a custom resource the cluster lacks (a Ray this run starts has none) would wait for ever
    cfg = load_config(TrainConfig, TINY, ["rollout.engine_resources={inference_node: 1}"])
    p = make_plan(cfg, Cluster([Node(4, 0, None, "n", {})], "local"), None)
    assert not p["fits"] and "1 inference_node each" in p["problems"][0]
    assert make_plan(cfg, Cluster([Node(4, 0, None, "n", {"inference_node": 2})], "joined"), None)["fits"]
    assert make_plan(cfg, Cluster([Node(4, 0, None, "n")], "planned"), None)["fits"]   # unknown: not checked


def test_model_config_is_read_alone_and_bad_paths_say_so(tmp_path, qwen_dir):
    assert os.listdir(qwen_dir) == ["config.json"]
    raw, where = read_model_config(qwen_dir)
    assert raw["hidden_size"] == 2048 and where.endswith("config.json")
    with pytest.raises(ConfigError, match="no config.json"):
        read_model_config(str(tmp_path))


def test_gpu_counts_per_actor_are_checked(qwen_dir):
    with pytest.raises(ConfigError, match="num_trainers"):
        check(gsm8k(qwen_dir, "train.trainer_num_gpus=2"))
    with pytest.raises(ConfigError, match="tensor_parallel_size"):
        check(gsm8k(qwen_dir, "rollout.engine_num_gpus=2"))
    check(gsm8k(qwen_dir, "train.trainer_num_gpus=0.5", "rollout.engine_num_gpus=0.5"))
    with pytest.raises(ConfigError, match="grad_reduce_dtype"):
        check(gsm8k(qwen_dir, "train.grad_reduce_dtype=fp8"))
    r = invoke("rlvr-train", [GSM8K, "--gpus", "2"])
    assert r.code == 2 and "go with --plan" in r.stderr


def test_trainer_ranks_no_node_holds_span_nodes_each_tp_group_on_one(qwen_dir):
    # 16 ranks on two 8-GPU nodes (their 32B layout, TP 8 x FSDP 2): not together, one TP
    # group a node; the plan tells the run to place them with PACK, not STRICT_PACK
    two = Cluster([Node(64, 8, 80.0, "a", {}), Node(64, 8, 80.0, "b", {})], "planned")
    p = make_plan(gsm8k(qwen_dir, "train.num_trainers=16", "train.tensor_parallel=8", "rollout.num_engines=0"),
                  two, None)
    assert p["trainers_together"] is False and p["fits"], p["problems"]
    assert [a["node"] for a in p["actors"] if a["role"] == "trainer"] == ["a"] * 8 + ["b"] * 8
    assert any("span nodes (one PACK placement group" in n for n in p["notes"])
    one = Cluster([Node(64, 8, 80.0, "a", {})], "planned")
    assert make_plan(gsm8k(qwen_dir, "train.num_trainers=8", "rollout.num_engines=0"), one, None)["trainers_together"]
    # 8 ranks over two nodes of 6 GPUs: rank by rank would split the second TP group of 4 (6 + 2);
    # in groups it is 4 + 4, and groups that fit on no node are a problem, named
    actors = [Actor("trainer", k, 1.0, 1.0) for k in range(8)]
    problems, together = place(actors, [Node(16, 6, 80.0, "a", {}), Node(16, 6, 80.0, "b", {})], tensor_parallel=4)
    assert not problems and not together and [a.node for a in actors] == [0] * 4 + [1] * 4
    actors = [Actor("trainer", k, 1.0, 1.0) for k in range(4)]
    small = [Node(16, 3, 80.0, "a", {}), Node(16, 3, 80.0, "b", {})]
    assert place(actors, small, tensor_parallel=1) == ([], False)
    actors = [Actor("trainer", k, 1.0, 1.0) for k in range(4)]
    problems, _ = place(actors, small, tensor_parallel=4)
    assert len(problems) == 1 and "in tensor-parallel groups of 4 on one node) fit on no node" in problems[0]


def test_nccl_is_refused_on_shared_gpus_and_auto_falls_back():
    where = {"node_id": "a" * 56, "ray_gpu_ids": ["0"]}
    other = {"node_id": "a" * 56, "ray_gpu_ids": ["1"]}
    shared = shared_gpus([("trainer rank 0", where), ("engine 0", where), ("engine 1", other)])
    assert shared == [f"GPU 0 of node {'a' * 12}: trainer rank 0, engine 0"]
    assert shared_gpus([("trainer rank 0", where), ("engine 0", other)]) == []
    assert choose("auto", "vllm", ["cuda", "cuda"], "cuda", shared) == "object_store"
    assert choose("auto", "vllm", ["cuda", "cuda"], "cuda", []) == "nccl"
    with pytest.raises(UsageError, match="NCCL refuses two ranks on one device"):
        choose("nccl", "vllm", ["cuda", "cuda"], "cuda", shared)
    assert choose("gloo", "vllm", ["cpu"], "cpu", shared) == "gloo"     # CPU tensors: sharing is fine


SFT_ONLY = os.path.join(REPO, "configs", "qwen3-1.7B-gsm8k-sft-only.yaml")
GKD = os.path.join(REPO, "configs", "qwen3-1.7B-gsm8k-gkd.yaml")


def test_sft_only_plans_the_trainer_alone_and_distill_only_its_engines_and_teacher(qwen_dir):
    # the SFT baseline starts no engines: one GPU is enough, and nothing is synced
    r = invoke("rlvr-train", [SFT_ONLY, "--set", f"model.path={qwen_dir}", "--plan", "--gpus", "1",
                              "--gpu-mem-gib", "80"])
    assert r.code == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["fits"] and p["sync"] is None and [a["role"] for a in p["actors"]] == ["trainer"]
    t = p["actors"][0]
    assert t["gpu_ids"] == [0] and t["memory"]["tokens_per_microbatch"] == 8 * 1024   # sft.micro_batch_size x max_model_len
    assert "no rollout engines and no weight sync" in r.stderr
    # GKD alone still samples on the rollout engines, and its teacher has engines of its own
    p = make_plan(load_config(TrainConfig, GKD, [f"model.path={qwen_dir}"]),
                  Cluster([Node(32, 8, 80.0, "n")], "planned"), qwen())
    assert [a["role"] for a in p["actors"]] == ["trainer"] * 4 + ["engine"] * 3 + ["teacher"]
    assert p["fits"] and p["sync"] == "nccl" and len({g for a in p["actors"] for g in a["gpu_ids"]}) == 8
    p = make_plan(load_config(TrainConfig, GKD, [f"model.path={qwen_dir}"]),
                  Cluster([Node(32, 7, 80.0, "n")], "planned"), qwen())
    assert not p["fits"] and "1 teacher(s)" in p["problems"][0] and "8 GPU" in p["problems"][0]


# -- teachers on shared GPUs (issue 34, review item 3) -------------------------------------------

# Qwen3-4B's dimensions (the shipped GKD teacher), as its config.json gives them
QWEN3_4B = {"hidden_size": 2560, "num_hidden_layers": 36, "num_attention_heads": 32, "num_key_value_heads": 8,
            "head_dim": 128, "intermediate_size": 9728, "vocab_size": 151936, "tie_word_embeddings": True,
            "max_position_embeddings": 40960}


def qwen4b() -> ModelShape:
    return ModelShape.from_config(QWEN3_4B)


def gkd(qwen_dir, *sets):
    return load_config(TrainConfig, GKD, [f"model.path={qwen_dir}", "rollout.num_engines=1", "train.num_trainers=1",
                                          *sets])


def by_role(p, role):
    return next(a for a in p["actors"] if a["role"] == role)


def test_teacher_sharing_an_engines_gpu_is_capped_so_both_fit_or_refused(qwen_dir):
    shared = ("rollout.engine_num_gpus=0.5", "teacher.engine_num_gpus=0.5")
    p = make_plan(gkd(qwen_dir, *shared), Cluster([Node(8, 2, 80.0, "n")], "planned"), qwen(), qwen4b(), 200)
    e, te, t = by_role(p, "engine"), by_role(p, "teacher"), by_role(p, "trainer")
    assert e["gpu_ids"] == te["gpu_ids"] == [1] and t["gpu_ids"] == [0]
    # both ask 0.85 of the GPU (68 GiB each): scaled by one factor to 0.95 / (0.85 + 0.85) x 0.85 = 0.475
    assert p["fits"], p["problems"]
    assert p["engine_gpu_memory_utilization"] == p["teacher_gpu_memory_utilization"] == pytest.approx(0.475)
    assert e["est_peak_gib"] == te["est_peak_gib"] == pytest.approx(0.475 * 80)
    assert e["est_peak_gib"] + te["est_peak_gib"] <= 0.95 * 80 + 1e-6
    # the teacher's KV cache is what its share leaves after its weights (4.02e9 x 2 bytes) and 1 GiB
    w = qwen4b().params * 2 / 2**30
    assert te["memory"]["weights_gib"] == pytest.approx(w, abs=0.01)
    assert te["memory"]["kv_cache_gib"] == pytest.approx(0.475 * 80 - w - 1, abs=0.01)
    assert any("teacher.gpu_memory_utilization 0.85 capped to 0.475" in n for n in p["notes"])
    # on 16 GiB GPUs the teacher's share (7.6 GiB) cannot hold its 7.5 GiB of weights, 1 GiB and 1 GiB of KV
    p = make_plan(gkd(qwen_dir, *shared), Cluster([Node(8, 2, 16.0, "n")], "planned"), qwen(), qwen4b(), 200)
    assert not p["fits"]
    [msg] = [x for x in p["problems"] if "teacher(s)" in x]
    assert "1 engine(s), 1 teacher(s) and 0 trainer rank(s)" in msg and "cannot hold teacher 0" in msg
    assert "1 x 0.85 x 16 GiB (teacher.gpu_memory_utilization)" in msg and "0.475 (7.6 GiB)" in msg


def test_teacher_sharing_a_trainers_gpu_takes_what_the_trainer_leaves_or_is_refused(qwen_dir):
    shared = ("train.trainer_num_gpus=0.5", "teacher.engine_num_gpus=0.5")
    p = make_plan(gkd(qwen_dir, *shared), Cluster([Node(8, 2, 80.0, "n")], "planned"), qwen(), qwen4b(), 200)
    t, te = by_role(p, "trainer"), by_role(p, "teacher")
    assert t["gpu_ids"] == te["gpu_ids"] == [0] and p["fits"], p["problems"]
    # the teacher gets 0.95 x 80 GiB less the trainer's estimate, not its 0.85 (68 GiB) beside a 39 GiB trainer
    frac = (0.95 * 80 - t["est_peak_gib"]) / 80
    assert p["teacher_gpu_memory_utilization"] == pytest.approx(frac, abs=1e-4) and frac < 0.5
    assert t["est_peak_gib"] + te["est_peak_gib"] == pytest.approx(0.95 * 80, abs=0.01)
    assert p["engine_gpu_memory_utilization"] == 0.85        # the engine has a GPU of its own
    # a trainer that leaves less than the teacher's weights: refused with the arithmetic
    p = make_plan(gkd(qwen_dir, *shared), Cluster([Node(8, 2, 48.0, "n")], "planned"), qwen(), qwen4b(), 200)
    assert not p["fits"]
    [msg] = [x for x in p["problems"] if "teacher(s)" in x]
    assert "0 engine(s), 1 teacher(s) and 1 trainer rank(s)" in msg and "(trainer estimate)" in msg
    # a teacher of unknown dimensions beside a trainer that leaves it nothing: still refused
    p = make_plan(gkd(qwen_dir, *shared), Cluster([Node(8, 2, 40.0, "n")], "planned"), qwen(), None, 200)
    assert not p["fits"] and any("cannot hold teacher 0" in x for x in p["problems"])
    # a teacher alone whose own fraction cannot hold its weights
    p = make_plan(gkd(qwen_dir, "teacher.gpu_memory_utilization=0.1"), Cluster([Node(8, 3, 80.0, "n")], "planned"),
                  qwen(), qwen4b(), 200)
    assert not p["fits"] and any(x.startswith("teacher 0 on GPU 2") and "teacher.gpu_memory_utilization" in x
                                 for x in p["problems"])


def test_plan_reads_the_teachers_config_and_counts_it_on_the_command_line(qwen_dir, tmp_path):
    (tmp_path / "config.json").write_text(json.dumps(QWEN3_4B))
    r = invoke("rlvr-train", [GKD, "--set", f"model.path={qwen_dir}", "--set", f"teacher.model={tmp_path}",
                              "--set", "rollout.engine_num_gpus=0.5", "--set", "teacher.engine_num_gpus=0.5",
                              "--set", "rollout.num_engines=1", "--plan", "--gpus", "5", "--gpu-mem-gib", "80",
                              "--cpus", "32"])
    assert r.code == 0, r.stderr
    p = json.loads(r.stdout)
    te = by_role(p, "teacher")
    assert te["memory"]["weights_gib"] == pytest.approx(qwen4b().params * 2 / 2**30, abs=0.01)
    assert p["teacher_gpu_memory_utilization"] == pytest.approx(0.475) and "capped to 0.475" in r.stderr


# -- the trainer's arithmetic (issue 34, review item 4) -----------------------------------------

def test_two_buckets_follow_the_broadcasts_packing_rule():
    from rlvr.train.plan_memory import two_buckets

    # a bucket closes once it holds more than 9: [10] [3 3 3 3] [10]
    assert two_buckets([10, 3, 3, 3, 3, 10], 9) == 12 + 10
    assert two_buckets([4, 4], 100) == 8                         # one open bucket
    # Qwen3-1.7B in bf16 at the default bucket (the embedding's 622,329,856 bytes): the embedding
    # and layer 0's q_proj (8,388,608), then the rest of layer 0 (92,283,392), five layers of
    # 100,672,000 and layer 6 up to its gate projection (q, k, v, o, q/k norms 25,166,336 + 25,165,824)
    s = qwen()
    assert two_buckets([2 * n for n in s.tensors()], 622_329_856) == \
        (622_329_856 + 8_388_608) + (92_283_392 + 5 * 100_672_000 + 25_166_336 + 25_165_824)


def test_fsdp_ranks_count_the_fp32_reference_the_root_and_rank_0s_weights_out():
    s = qwen()
    P, G = s.params, 2**30
    layer, root = 50_336_000, 151_936 * 2048 + 2048          # by hand from the dimensions
    assert s.layer_params == layer and P == 2 * 0 + 151_936 * 2048 + 28 * layer + 2048
    m = trainer_memory(s, 32768, world=4, reference=True, sends=True, broadcast=True, bucket_bytes=622_329_856)
    # two gathered layers and the unsharded root (embedding + final norm) in bf16
    assert m["compute_copy"] == pytest.approx(2 * (2 * layer + root) / G, abs=0.005)
    # the reference: fp32 shards (4P / 4), plus its own gathered layers and root
    assert m["reference"] == pytest.approx((4 * P / 4 + 2 * (2 * layer + root)) / G, abs=0.005)
    # rank 0's full bf16 copy for the broadcast, and two buckets in flight
    assert m["weights_out"] == pytest.approx(2 * P / G, abs=0.005)
    assert m["sync_buffers"] == pytest.approx(1_276_694_016 / G, abs=0.005)
    # the total: persistent states + the largest phase, +10%, + the CUDA context
    persistent = (4 * P / 4) + (4 * P / 4 + 4 * P) + 8 * P / 4 + 2 * (2 * layer + root) + \
        (4 * P / 4 + 2 * (2 * layer + root))
    T, H, Hkv, I, V = 32768, 2048, 1024, 6144, 151_936
    act = 28 * T * H * 2 + T * (2 * (16 * H + 6 * Hkv + 4 * I) + 4 * (6 * H + 2 * Hkv) + 2 * (4 * H + 2 * I))
    loss = 2 * 1024 * V * 4 + 2 * V * H * 2
    checkpoints = 28 * T * H * 2
    # with checkpointing, the loss path and the recomputed layer (with the root's output-layer gradient) apart
    phase = max(checkpoints + max(act - checkpoints + V * H * 2, loss), 4 * P / 4, 2 * P + 1_276_694_016)
    assert m["est_peak_gib"] == pytest.approx(((persistent + phase) * 1.1 + 0.5 * G) / G, abs=0.01)
    # one rank: the reference in bf16 beside the policy, no gathered copy to send, no root apart
    one = trainer_memory(s, 32768, reference=True, sends=True, broadcast=True, bucket_bytes=622_329_856)
    assert one["reference"] == pytest.approx(2 * P / G, abs=0.005) and one["weights_out"] == 0
    assert one["compute_copy"] == pytest.approx(2 * P / G, abs=0.005)
    # the object store sends one tensor at a time, without the gathered copy
    store = trainer_memory(s, 32768, world=4, sends=True)
    assert store["sync_buffers"] == pytest.approx(4 * V * H / G, abs=0.005) and store["weights_out"] == 0


def test_users_config_of_64_sequences_of_768_tokens_is_planned_at_its_sequences(qwen_dir, tmp_path):
    """Their qwen3-1.7B-gsm8k-grpo-lr5e6.yaml: 64 completions per micro-batch of at most 768
    tokens (seq_len_buckets [768]: prompts of at most 256 + 512 generated), max_model_len 2560.
    At max_model_len alone it is refused (93 GiB; 95 GiB before the loss path and the recomputed
    layer were counted apart); at its sequences it fits an 80 GiB GPU."""
    import yaml

    from rlvr.port_config import port_config

    src = os.path.join(DATA, "port", "qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    (tmp_path / "ported.yaml").write_text(port_config(yaml.safe_load(open(src)), source=src).yaml())
    cfg = load_config(TrainConfig, str(tmp_path / "ported.yaml"), [f"model.path={qwen_dir}"])
    # the port keeps their 2 trainer GPUs as 2 FSDP ranks of 32 sequences each (tests/test_port_config.py);
    # the arithmetic below is that of their micro-batch whole, on one rank
    assert (cfg.train.num_trainers, cfg.train.micro_batch_size) == (2, 32)
    cfg.train.num_trainers, cfg.train.micro_batch_size = 1, 64
    assert (cfg.train.micro_batch_size, cfg.rollout.max_model_len, cfg.rollout.max_tokens) == (64, 2560, 512)
    two = Cluster([Node(8, 2, 80.0, "n")], "planned")
    old = make_plan(cfg, two, qwen())                        # the longest prompt unknown: 64 x 2560 tokens
    assert not old["fits"] and "need about 92.8 GiB" in old["problems"][0]
    p = make_plan(cfg, two, qwen(), longest_prompt=256)
    assert p["fits"], p["problems"]
    assert p["microbatches"] == {"longest_prompt": 256, "longest_sequence": 768, "rl": 64 * 768, "distill": 0,
                                 "sft": 0, "tokens": 49152}
    m = by_role(p, "trainer")["memory"]
    P, G, T = qwen().params, 2**30, 49152
    # by hand: one rank, bf16, checkpointing, a bf16 reference (beta 0.001), nccl buckets of 100 MiB
    act = 28 * T * 2048 * 2 + T * 225_280                   # 225,280 bytes a token in the recomputed layer
    assert m["activations"] == pytest.approx(act / G, abs=0.005) == pytest.approx(15.56, abs=0.01)
    persistent = 16 * P + 2 * P + 2 * P
    loss = 2 * 1024 * 151_936 * 4 + 2 * 151_936 * 2048 * 2
    checkpoints = 28 * T * 2048 * 2                        # the recomputed layer is larger than the loss path
    assert act - checkpoints > loss
    assert m["est_peak_gib"] == pytest.approx(((persistent + act) * 1.1 + 0.5 * G) / G, abs=0.01)
    assert 52 < m["est_peak_gib"] < 53
    # a longer prompt is bounded by max_model_len
    assert make_plan(cfg, two, qwen(), longest_prompt=5000)["microbatches"]["longest_sequence"] == 2560


def test_distillation_and_sft_micro_batches_count_their_own_sequences(qwen_dir):
    # GKD beside RL: the distillation loss runs train.micro_batch_size sequences, not the token budget
    cfg = gkd(qwen_dir, "train.distill.only=false", "train.max_tokens_per_microbatch=8192", "train.micro_batch_size=32")
    mb = make_plan(cfg, Cluster([Node(8, 3, 80.0, "n")], "planned"), qwen(), qwen4b(), 200)["microbatches"]
    seq = 200 + 512                                          # within max_model_len 1024
    assert mb["longest_sequence"] == seq and mb["distill"] == 32 * seq and mb["rl"] == 8192
    assert mb["tokens"] == 32 * seq
    # the shipped GKD alone (distill.only): no RL micro-batches, 16 distilled sequences
    mb = make_plan(gkd(qwen_dir), Cluster([Node(8, 3, 80.0, "n")], "planned"), qwen(), None, 200)["microbatches"]
    assert (mb["rl"], mb["distill"], mb["tokens"]) == (0, 16 * seq, 16 * seq)
    # SFT beside RL: sft.micro_batch_size records of at most max_model_len (their prompts are not measured)
    sft = load_config(TrainConfig, os.path.join(REPO, "configs", "qwen3-1.7B-gsm8k-grpo-sft.yaml"),
                      [f"model.path={qwen_dir}"])
    mb = make_plan(sft, Cluster([Node(32, 8, 80.0, "n")], "planned"), qwen(), None, 200)["microbatches"]
    assert mb["sft"] == sft.sft.micro_batch_size * sft.rollout.max_model_len


def test_plan_measures_the_longest_prompt_where_tokenizer_and_data_are_here(qwen_dir):
    from rlvr.tiny import build_tokenizer
    from rlvr.train.plan import measure_longest_prompt, plan_for
    from rlvr.train.stream import PromptStream

    cfg = load_config(TrainConfig, TINY, [])
    n, why = measure_longest_prompt(cfg)
    tok = build_tokenizer()
    recs = [r for rs in PromptStream(cfg.data, cfg.rollout).by_name.values() for r in rs]
    assert why is None and n == max(len(tok(r["prompt"])["input_ids"]) for r in recs) > 0
    p = plan_for(cfg, Cluster([Node(4, 0, None, "n")], "planned"))
    assert p["microbatches"]["longest_sequence"] == min(cfg.rollout.max_model_len, n + cfg.rollout.max_tokens)
    # a folder holding only config.json has no tokenizer: sequences at max_model_len, and a note says so
    p = plan_for(gsm8k(qwen_dir), Cluster([Node(32, 8, 80.0, "n")], "planned"))
    assert p["microbatches"]["longest_prompt"] is None and p["microbatches"]["longest_sequence"] == 2048
    assert any("longest prompt is not measured (no tokenizer files" in x for x in p["notes"])


class FakeRay:
    """What cluster_for reads of a joined cluster (one alive node), and the address it joined."""

    def __init__(self):
        self.joined = []

    def init(self, address=None, **kw):
        self.joined.append(address)

    def shutdown(self):
        pass

    def nodes(self):
        return [{"Alive": True, "NodeID": "f" * 56, "NodeManagerAddress": "10.0.0.5",
                 "Resources": {"CPU": 16.0, "GPU": 2.0, "memory": 1e9, "node:10.0.0.5": 1.0}}]

    def cluster_resources(self):
        return {"CPU": 16.0, "GPU": 2.0}


def test_plan_chooses_the_cluster_the_run_would_and_starts_none(qwen_dir, tmp_path, monkeypatch):
    from rlvr.train import plan as planning
    from rlvr.train import ray_cluster

    fake = FakeRay()
    monkeypatch.setitem(sys.modules, "ray", fake)          # no Ray is started, or joined for real
    monkeypatch.setenv("RAY_AUTH_MODE", "")
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path))        # Ray's default temp folder: tmp_path/ray
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("10.0.0.5:6379")
    monkeypatch.setattr(ray_cluster, "_cmdlines", lambda: [
        ["/x/raylet", f"--temp_dir={tmp_path / 'ray'}", "--gcs-address=10.0.0.5:6379"]])
    cfg = gsm8k(qwen_dir)
    # RAY_ADDRESS=local (or ray.address local): this machine's own resources, nothing joined
    monkeypatch.setenv("RAY_ADDRESS", "local")
    c = planning.cluster_for(cfg)
    assert c.source == "local" and c.address is None and fake.joined == []
    assert "starting a Ray of its own" in c.notes[0] and "10.0.0.5:6379" in c.notes[0]
    # no address anywhere: the cluster `ray start` left running here is the run's, so the plan's
    monkeypatch.delenv("RAY_ADDRESS")
    c = planning.cluster_for(cfg, gpu_mem_gib=80)
    assert fake.joined == ["10.0.0.5:6379"] and c.source == "joined" and c.address == "10.0.0.5:6379"
    assert (c.gpus, c.cpus) == (2, 16.0) and "left running" in c.notes[0]
    # --gpus plans for a machine without choosing any cluster
    assert planning.cluster_for(cfg, gpus=8).source == "planned" and len(fake.joined) == 1


def test_plan_of_a_hub_model_offline_skips_the_memory_estimates(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    cfg = load_config(TrainConfig, GSM8K, ["model.path=rlvr-tests/not-cached-anywhere"])
    r = invoke("rlvr-train", [GSM8K, "--set", "model.path=rlvr-tests/not-cached-anywhere", "--plan", "--gpus", "8",
                              "--gpu-mem-gib", "80", "--cpus", "32"])
    assert r.code == 0, r.stderr
    p = json.loads(r.stdout)
    assert p["fits"] and all(a["est_peak_gib"] is None for a in p["actors"]) and "model" not in p
    assert "memory estimates are skipped" in r.stderr and "HF_HUB_OFFLINE" in r.stderr
    # a local folder without config.json is the user's mistake: said, not skipped
    cfg.model.path = str(tmp_path)
    from rlvr.train.plan import plan_for

    with pytest.raises(ConfigError, match="no config.json"):
        plan_for(cfg, Cluster([Node(32, 8, 80.0, "n")], "planned"))


# -- on a Ray cluster with logical GPUs ------------------------------------------------------------

@pytest.fixture(scope="module")
def logical_gpus():
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=4, num_gpus=2, resources={"slot": 1}, include_dashboard=False,
             logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def probe_class():
    """An actor class that reports its placement and can start a child process, as vLLM's engine
    core is. Defined in a function so that Ray ships it by value (this test module is not
    importable in Ray's workers)."""

    class Probe:
        def __init__(self, child: bool = False):
            import subprocess
            import sys

            self.child = subprocess.Popen([sys.executable, "-c", "import signal, time\n"
                                           "signal.signal(signal.SIGTERM, signal.SIG_IGN)\ntime.sleep(600)"]) \
                if child else None

        def node(self) -> dict:
            from rlvr.train.actors import placement

            return placement()

    return Probe


def test_fractional_requests_share_a_logical_gpu(logical_gpus):
    ray = logical_gpus
    half = ray.remote(num_gpus=0.5, num_cpus=0.1)(probe_class())
    whole = ray.remote(num_gpus=1, num_cpus=0.1)(probe_class())
    a, b = half.remote(), half.remote()
    c = whole.remote()
    where = ray.get([x.node.remote() for x in (a, b, c)], timeout=120)
    shared = shared_gpus([("trainer rank 0", where[0]), ("engine 0", where[1]), ("engine 1", where[2])])
    assert len(shared) == 1 and "trainer rank 0, engine 0" in shared[0]     # Ray packed the halves together
    with pytest.raises(UsageError):
        choose("nccl", "vllm", ["cuda"] * 2, "cuda", shared)
    for x in (a, b, c):
        ray.kill(x)


def _run(cfg, run_dir):
    from rlvr.config_loader import to_yaml
    from rlvr.train.loop import train

    return train(cfg, str(run_dir), ["rlvr-train", "test"], to_yaml(cfg))


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory):
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("base") / "tiny"))


def test_a_run_asking_more_gpus_than_the_cluster_stops_before_any_actor(logical_gpus, tiny_base, tmp_path):
    ray = logical_gpus
    cfg = load_config(TrainConfig, TINY, ["rollout.engine=hf", "rollout.num_engines=2", "train.steps=1"])
    cfg.model.path = tiny_base
    before = set(ray.util.list_named_actors())
    with pytest.raises(ConfigError, match="does not fit its Ray cluster.*3 GPU"):
        _run(cfg, tmp_path)                                  # 2 engines + 1 trainer, 1 GPU each, on 2 GPUs
    assert set(ray.util.list_named_actors()) == before
    man = json.loads((tmp_path / "run.json").read_text())
    assert man["plan"]["fits"] is False and man["plan"]["cluster"]["gpus"] == 2


def test_an_actor_that_cannot_be_placed_is_named_within_the_startup_limit(logical_gpus, tiny_base, tmp_path):
    # the one "slot" exists (the plan's count passes) but is held: Ray would wait for ever
    ray = logical_gpus
    holder = ray.remote(num_cpus=0, resources={"slot": 1})(probe_class()).remote()
    ray.get(holder.node.remote(), timeout=120)
    cfg = load_config(TrainConfig, TINY, ["rollout.engine=hf", "train.steps=1", "ray.startup_timeout_s=3",
                                          "train.trainer_resources={slot: 1}", "train.trainer_num_gpus=0.5"])
    cfg.model.path = tiny_base
    with pytest.raises(Failure, match=r"trainer rank 0 \(0.5 GPU, 1 CPU, 1 slot\) did not start within 3s"):
        _run(cfg, tmp_path)
    assert not [n for n in ray.util.list_named_actors() if n.startswith("rlvr-")]   # the waiting actor is gone
    ray.kill(holder)


@pytest.mark.parametrize("dead_first", [False, True])
def test_retired_engine_takes_its_child_processes_along(logical_gpus, dead_first):
    import psutil

    from rlvr.train.actors import retire

    ray = logical_gpus
    a = ray.remote(num_cpus=0.1)(probe_class()).remote(child=True)
    where = ray.get(a.node.remote(), timeout=120)
    assert len(where["children"]) == 1
    child = psutil.Process(where["children"][0][0])
    if dead_first:       # the actor died on its own: its child is an orphan, found by what was recorded
        ray.kill(a)
        ray.wait([a.node.remote()], timeout=60)
        assert child.is_running()
    killed = retire(a, where)
    assert killed == [child.pid]
    assert not child.is_running() or child.status() == psutil.STATUS_ZOMBIE


def test_a_refused_or_failed_sync_member_fails_at_once_naming_it(logical_gpus, tiny_base, tmp_path):
    # the trainer's side of a broadcast would wait 10 minutes for an engine that refused: the
    # driver does not wait it out, and a group that cannot form names the member and its cause
    import time

    from rlvr.train.engine_sync import EngineSync
    from rlvr.train.weight_sync import wait_all

    ray = logical_gpus

    @ray.remote(num_cpus=0)
    def refuse():
        raise RuntimeError("weights of the wrong shape")

    @ray.remote(num_cpus=0)
    def hang():
        time.sleep(600)

    broadcast = type("Broadcast", (), {"blocking": True, "check": lambda self, r: len(r)})()
    syncs = EngineSync(load_config(TrainConfig, TINY, []), None, None, broadcast)
    slow = hang.remote()
    t0 = time.monotonic()
    with pytest.raises(Failure, match=r"engine 1 refused \(RuntimeError: weights of the wrong shape\) the broadcast"):
        syncs.wait({0: ray.put({"checksum": 1}), 1: refuse.remote(), "trainer-0": slow}, version=3, limit=600)
    with pytest.raises(Failure, match=r"could not be formed: engine 0 failed \(RuntimeError: weights of the wrong"):
        wait_all({"trainer rank 0": slow, "engine 0": refuse.remote()}, 600,
                 "the weight-transfer group (nccl) could not be formed")
    with pytest.raises(Failure, match=r"trainer rank 0 did not answer within 1s"):
        wait_all({"trainer rank 0": slow}, 1, "the weight-transfer group (nccl) could not be formed")
    assert time.monotonic() - t0 < 120
    ray.cancel(slow, force=True)


def test_engine_requests_carry_seeds_when_seeded_and_chat_prompts_their_end_of_turn(tmp_path):
    # what the driver sends an engine: per-request seeds unless rollout.seeded is false, and the
    # chat template's end-of-turn token as a stop token for prompts that are chat messages
    from rlvr.train.loop import Run

    sent = []

    class Engine:
        class generate:   # noqa: N801 - stands in for an actor method's .remote
            @staticmethod
            def remote(*args):
                sent.append(args)
                return object()

    items = [({"id": "a", "prompt": "2+2="}, 0, [5, 6], []),
             ({"id": "b", "prompt": [{"role": "user", "content": "2+2?"}]}, 0, [7, 8], [])]
    for seeded in (True, False):
        fleet = Run(load_config(TrainConfig, TINY, [f"rollout.seeded={str(seeded).lower()}"]), str(tmp_path), [], "",
                    False).fleet
        fleet.engines, fleet.end_of_turn = [Engine()], [99]
        fleet.submit(0, items)
        _, _, seeds, _, stop_ids, min_version, lengths = sent[-1][:7]   # then step, ids, timeout, abortable
        assert min_version is None and lengths is None    # between_rounds: no version to wait for; one length
        assert (seeds is not None) == seeded and stop_ids == [[], [99]]
        if seeded:
            assert len(set(seeds)) == 2
