"""rlvr-port-config on one training config of each kind the users ship (tests/data/port, copied
from halflearned/rlvr-experiments with their paths): every key accounted for, the ported config
loads in rlvr-train, their silent defaults ported, keys pending until rlvr-train accepts them,
unknown keys warned about and wrong values refused."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from helpers import DATA, invoke
from rlvr.config_loader import load_config
from rlvr.port_config import PENDING, _leaves, port_config
from rlvr.train.config import TrainConfig, check

PORT = os.path.join(DATA, "port")
FILES = sorted(f for f in os.listdir(PORT) if f.endswith(".yaml"))


def their(name: str) -> dict:
    with open(os.path.join(PORT, name)) as fh:
        return yaml.safe_load(fh)


def ported(name: str, tmp_path, **kw):
    port = port_config(their(name), source=name, **kw)
    path = tmp_path / f"ours-{name}"
    path.write_text(port.yaml())
    return port, load_config(TrainConfig, str(path), [])


@pytest.mark.parametrize("name", FILES)
def test_every_key_is_accounted_for_and_the_port_loads(name, tmp_path):
    port, cfg = ported(name, tmp_path)
    done = {e.their for e in port.entries}
    for path, _ in _leaves(their(name)):
        assert path in done or any(path.startswith(d.split("[")[0]) for d in done), path
    assert not [e.their for e in port.entries if e.why == "not known to this port"]
    assert all(e.why for e in port.entries if e.kind in ("unmapped", "implied"))
    assert not port.pending and not [w for w in port.warnings if "does not know" in w]
    assert cfg.model.path == "/efs/rlvr-experiments/assets/hf/Qwen3-1.7B-Base"
    check(cfg)
    if cfg.train.distill.only:   # their GKD / OPSD entry points: no RL loss, none of its defaults
        assert not cfg.dapo.dynamic_sampling
    else:
        assert cfg.dapo.dynamic_sampling is True and cfg.dapo.overlong_buffer == 0 and cfg.dapo.max_extra_rounds == 0
    if "allenai" in name:   # their allenai_rlvr is rlvr's allenai; their rewrite of its GSM8K prompts is not ported
        assert cfg.data.dataset == "allenai" and not port.warnings
        assert any(e.their == "(their default) allenai_rlvr prompts" and e.kind == "unmapped" for e in port.entries)
    assert cfg.train.grad_clip == 1.0
    from rlvr.train import config as tc

    args = tc.optimizer_args(cfg.train, cfg.compat)   # compat: torchtitan fills the null optimizer settings
    assert cfg.compat == "torchtitan" and args["weight_decay"] == 0.1 and args["betas"][1] == 0.95


def test_gsm8k_dapo_with_staleness(tmp_path):
    port, cfg = ported("qwen3-1.7B-gsm8k-dapo-lr5e6-stale2.yaml", tmp_path)
    loss = cfg.train.loss
    assert (loss.loss_type, loss.clip_low, loss.clip_high, loss.beta) == ("dapo", 0.2, 0.28, 1e-6)
    assert cfg.train.max_staleness == 2 and cfg.train.steps == 300 and cfg.rollout.prompts_per_step == 64
    assert cfg.data.template == "Q: {question}\nA:" and cfg.rollout.stop == ["[Question]", "Question:", "Q:", "\n\n\n", "\n\n"]
    assert (cfg.rollout.top_p, cfg.rollout.top_k, cfg.rollout.n) == (0.95, 20, 8) and cfg.train.lr == 5e-6
    # their TP 2 trainer of a 1.7B model: 2 FSDP ranks on the same 2 GPUs, each its own micro-batch of 64 / 2
    assert cfg.rollout.max_tokens_by_dataset == {"gsm8k": 512} and cfg.train.micro_batch_size == 32
    assert (cfg.train.num_trainers, cfg.train.tensor_parallel) == (2, 1)
    assert port.changed == ["roles.trainer.config.parallelism.tensor_parallel_degree"]
    # prompts_per_rollout_sync 128 / prompts_per_optim_step 64: weights every 2 steps
    assert cfg.sync.every_steps == 2 and cfg.train.adam_eps == 1e-4 and not port.pending
    assert cfg.train.loss.ratio_to == "engine" and cfg.train.adv_std == "population"
    # a key an older rlvr-train does not accept is pending: a --set line to add, not a key
    old = port_config(their("qwen3-1.7B-gsm8k-dapo-lr5e6-stale2.yaml"), accepted=lambda key: key != "sync.every_steps")
    assert old.pending == {"sync.every_steps": (2, PENDING)} and "#   --set sync.every_steps=2" in old.yaml()
    assert "sync" not in old.config or "every_steps" not in old.config["sync"]


def test_their_gradient_reduce_dtype_is_train_grad_reduce_dtype(tmp_path):
    name = "qwen3-1.7B-gsm8k-grpo-lr5e6.yaml"
    key = "roles.trainer.config.training.mixed_precision_reduce"
    port, cfg = ported(name, tmp_path)
    entry = next(e for e in port.entries if e.their == key)
    assert (entry.kind, entry.rlvr, entry.value) == ("mapped", ["train.grad_reduce_dtype"], "float32")
    assert cfg.train.grad_reduce_dtype == "float32"
    mine = their(name)
    trainer = next(r for r in mine["roles"] if r["name"] == "trainer")
    trainer["config"]["training"]["mixed_precision_reduce"] = "bfloat16"
    (tmp_path / "bf16.yaml").write_text(port_config(mine).yaml())
    assert load_config(TrainConfig, str(tmp_path / "bf16.yaml"), []).train.grad_reduce_dtype == "bfloat16"
    trainer["config"]["training"]["mixed_precision_reduce"] = "float16"      # not a reduce dtype rlvr has
    port = port_config(mine)
    entry = next(e for e in port.entries if e.their == key)
    assert entry.kind == "unmapped" and "grad_reduce_dtype" in entry.why and "grad_reduce_dtype" not in port.config["train"]


def test_mbpp_deepscaler_and_if_grpo_sft(tmp_path):
    _, mbpp = ported("qwen3-1.7B-code-mbpp-grpo-lr1e5.yaml", tmp_path)
    assert mbpp.data.dataset == "mbpp" and mbpp.data.split == "train" and mbpp.data.template == "mbpp"
    assert mbpp.rollout.max_tokens_by_dataset == {"mbpp": 512} and mbpp.rollout.max_tokens == 1024
    assert mbpp.verify.jobs == 8 and mbpp.rollout.num_engines == 5 and mbpp.sync.generate_timeout_s == 1800.0
    port, deep = ported("qwen3-1.7B-deepscaler.yaml", tmp_path)
    assert deep.data.dataset == "deepscaler" and deep.data.epochs == 2 and deep.train.steps == 1_000_000
    assert deep.data.template == "Problem:\n{question}\n\nSolution:" and deep.rollout.max_tokens_by_dataset == {"deepscaler": 1024}
    assert deep.train.warmup_steps == 40 and deep.train.loss.loss_type == "grpo"
    assert any(e.their == "training.abort_in_flight" and e.kind == "implied" for e in port.entries)   # staleness 0
    assert deep.sync.abort_in_flight == "off"
    port, ifsft = ported("qwen3-1.7B-if-grpo-sft.yaml", tmp_path)
    assert ifsft.data.dataset == "if_multi" and ifsft.data.template == "plain"
    assert ifsft.rollout.max_tokens_by_dataset == {"if_multi": 2048} and ifsft.train.loss.beta == 0.001
    assert not port.pending
    sft = vars(ifsft.sft)
    assert sft["data"] == "/efs/rlvr-experiments/data/ifeval_sft_20k_hardest.jsonl" and sft["weight"] == 1.0
    assert sft["micro_batch_size"] == 2 and sft["max_tokens"] == 2048


def test_gkd_and_self_distillation(tmp_path):
    name = "qwen3-1.7B-gsm8k-gkd-only-4b-jsd01.yaml"
    port, cfg = ported(name, tmp_path)
    assert cfg.rollout.prompts_per_step == 64 and cfg.train.micro_batch_size == 16   # 512 completions / n 8
    assert not port.pending and not port.warnings
    assert cfg.teacher.model == "/efs/rlvr-experiments/assets/hf/Qwen3-4B" and cfg.teacher.top_k == 20
    assert (cfg.train.distill.weight, cfg.train.distill.only, cfg.train.distill.loss, cfg.train.distill.jsd_beta) == \
        (1.0, True, "jsd", 0.1)
    every = port_config(their(name), accepted=lambda key: True)
    assert not every.pending and not every.warnings
    assert every.config["teacher"] == {"top_k": 20, "chat": True, "model": "/efs/rlvr-experiments/assets/hf/Qwen3-4B",
                                       "num_engines": 1}
    assert every.config["train"]["distill"] == {"weight": 1.0, "only": True, "loss": "jsd", "jsd_beta": 0.1,
                                                "only_incorrect": False}
    assert "dapo" not in every.config            # distillation alone: none of the RL loss's defaults
    # their self-distillation (no teacher role): the policy under their privileged GSM8K prompt,
    # only the imperfect completions (their default), their default top-k KL
    opsd = their(name)
    opsd["roles"] = [r for r in opsd["roles"] if r["name"] != "teacher"]
    for k in ("discard_perfect_completions", "opsd_loss_type"):
        del opsd["training"][k]
    self_port = port_config(opsd)
    assert self_port.config["teacher"]["model"] == "policy" and "{answer}" in self_port.config["teacher"]["template"]
    assert self_port.config["train"]["distill"]["only_incorrect"] is True
    assert self_port.config["train"]["distill"]["loss"] == "kl"
    (tmp_path / "opsd.yaml").write_text(self_port.yaml())
    check(load_config(TrainConfig, str(tmp_path / "opsd.yaml"), []))
    stale = port_config(their("qwen3-1.7B-gsm8k-dapo-lr5e6-stale2.yaml"), accepted=lambda key: True)
    assert stale.config["sync"]["every_steps"] == 2 and stale.config["train"]["loss"]["ratio_to"] == "engine"
    assert stale.config["train"]["loss"]["tis_cap"] is None and stale.config["train"]["adv_std"] == "population"
    assert stale.config["compat"] == "torchtitan" and "weight_decay" not in stale.config["train"]


def test_their_silent_defaults(tmp_path):
    cfg = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    del cfg["loss"]["name"]   # no loss.name: their default, Dr. GRPO with C = 2048 and eps 0 (no clip)
    cfg["data"] = {"dataset": "mixed", "seed": 7, "datasets": [{"name": "gsm8k", "weight": 0.5},
                                                               {"name": "math", "weight": 0.5, "level": [3, 4, 5]}]}
    cfg["roles"][0]["config"]["lr_scheduler"]["decay_ratio"] = 0.2
    port = port_config(cfg)
    c = port.config
    assert {k: v for k, v in c["train"]["loss"].items() if k not in ("ratio_to", "tis_cap")} == {
        "beta": 0.001, "loss_type": "dr_grpo", "max_tokens": 2048, "clip_low": 0.2, "clip_high": 0.2}   # eps 0.2 given
    assert c["train"]["scale_rewards"] == "none" and c["train"]["lr_schedule"] == "linear"
    assert c["data"]["mix"] == {"gsm8k": 0.5, "math": 0.5} and c["data"]["dataset"] is None
    assert c["data"]["filters"] == {"math": {"level": [3, 4, 5]}} and c["data"]["seed"] == 7
    assert c["data"]["template"] == {"gsm8k": "Q: {question}\nA:", "math": "Problem:\n{question}\n\nSolution:"}
    assert c["rollout"]["max_tokens_by_dataset"] == {"gsm8k": 512, "math": 1024}
    assert any(e.their == "(their default) loss.name" for e in port.entries)
    del cfg["loss"]["eps"]
    assert port_config(cfg).config["train"]["loss"]["clip_low"] == 1.0   # eps 0: nothing is clipped


def test_command(tmp_path):
    src = os.path.join(PORT, "qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    report = tmp_path / "port.json"
    r = invoke("rlvr-port-config", [src, "--report", str(report)])
    assert r.code == 0, r.stderr
    out = yaml.safe_load(r.stdout)
    assert out["train"]["lr"] == 5e-6 and out["train"]["steps"] == 300 and out["data"]["dataset"] == "gsm8k"
    assert "keys mapped" in r.stderr and r.stdout.startswith("# rlvr-train config ported by rlvr-port-config")
    rows = json.loads(report.read_text())
    assert {"their", "kind", "rlvr", "why", "value"} <= set(rows[0])
    assert any(x["their"] == "training.max_steps" and x["rlvr"] == ["train.steps"] for x in rows)
    bad = tmp_path / "bad.yaml"
    bad.write_text("training:\n  max_steps: [1\n")
    r = invoke("rlvr-port-config", [str(bad)])
    assert r.code == 3 and f"{bad}:3" in r.stderr
    r = invoke("rlvr-port-config", [str(tmp_path / "missing.yaml")])
    assert r.code == 2 and "cannot read" in r.stderr


def test_sft_only_run(tmp_path):
    cfg = their("qwen3-1.7B-if-grpo-sft.yaml")
    for key in ("data", "loss", "sampling", "data_iter"):   # their SFT-only configs have none of these
        del cfg[key]
    port = port_config(cfg)
    assert not any(k.startswith("train.loss") for k in port.pending) and "dapo" not in port.config
    assert port.config["sft"]["only"] is True and not port.pending and not port.warnings
    old = port_config(cfg, accepted=lambda key: not key.startswith("sft."))   # an rlvr-train without SFT
    assert old.pending["sft.only"][0] is True and old.config["data"]["dataset"] is None and old.warnings
    assert port_config(cfg, accepted=lambda key: True).config["sft"] == {
        "only": True, "micro_batch_size": 2, "max_tokens": 2048, "weight": 1.0,
        "data": "/efs/rlvr-experiments/data/ifeval_sft_20k_hardest.jsonl"}


def test_no_loss_name_is_dr_grpo_with_c_2048(tmp_path):
    """Their entry points build DrGRPOLoss(beta, eps=0.0, C=2048.0) when loss.name is absent:
    mean-centred advantages (no std), the token sum over C = 2048, nothing clipped."""
    cfg = their("qwen3-1.7B-deepscaler.yaml")
    assert cfg["loss"] == {"name": "grpo", "beta": 0.001, "eps": 0.2}
    cfg["loss"] = {"beta": 0.001}
    path = tmp_path / "ours.yaml"
    port = port_config(cfg, source="deepscaler")
    path.write_text(port.yaml())
    ours = load_config(TrainConfig, str(path), [])
    check(ours)
    loss = ours.train.loss
    assert (loss.loss_type, loss.max_tokens, loss.beta, ours.train.scale_rewards) == ("dr_grpo", 2048, 0.001, "none")
    assert loss.clip_low == 1.0 and loss.clip_high >= 1e9           # eps 0: the ratio is never clipped
    assert ours.rollout.max_tokens_by_dataset == {"deepscaler": 1024}   # C stays 2048 whatever the length
    entry = next(e for e in port.entries if e.their == "(their default) loss.name")
    assert entry.kind == "mapped" and "train.loss.max_tokens" in entry.rlvr
    cfg["loss"] = {"beta": 0.0, "C": 1024.0, "eps": 0.1}
    loss = port_config(cfg).config["train"]["loss"]
    assert (loss["loss_type"], loss["max_tokens"], loss["clip_low"], loss["clip_high"]) == ("dr_grpo", 1024, 0.1, 0.1)


def test_tensorboard_becomes_a_tracker(tmp_path):
    cfg = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    metrics = cfg["roles"][0]["config"]["metrics"]
    assert metrics["enable_tensorboard"] is False
    off = port_config(cfg)
    assert "log" not in off.config or not off.config["log"].get("trackers")
    metrics["enable_tensorboard"] = True
    port = port_config(cfg, source="their.yaml")
    assert port.config["log"]["trackers"] == ["tensorboard"]
    (tmp_path / "ours.yaml").write_text(port.yaml())
    assert load_config(TrainConfig, str(tmp_path / "ours.yaml"), []).log.trackers == ["tensorboard"]
    kinds = {e.their: e.kind for e in port.entries}
    assert kinds["roles.trainer.config.metrics.enable_tensorboard"] == "mapped"
    assert kinds["roles.trainer.config.metrics.save_tb_folder"] == "implied"


def test_unknown_keys_warn_and_wrong_values_are_refused(tmp_path):
    src = tmp_path / "their.yaml"
    cfg = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    cfg["training"]["warp_drive"] = 9
    cfg["sampling"]["flux"] = {"level": 2}
    src.write_text(yaml.safe_dump(cfg))
    r = invoke("rlvr-port-config", [str(src)])
    assert r.code == 0, r.stderr
    warned = [ln for ln in r.stderr.splitlines() if "does not know" in ln]
    assert sorted(warned) == [f"rlvr-port-config: warning: {src}: {key}: a key this port does not know; not ported"
                              for key in ("sampling.flux.level", "training.warp_drive")]
    assert "warp_drive" not in yaml.safe_dump(yaml.safe_load(r.stdout))   # a comment, not a key
    for section, key, value, named in (
            ("training", "max_steps", "abc", "training.max_steps (rlvr's train.steps): expected an integer"),
            ("sampling", "temperature", "hot", "sampling.temperature"),
            ("loss", "beta", "abc", "loss.beta: expected a number"),
            ("training", "prompts_per_optim_step", [64], "training.prompts_per_optim_step: expected an integer"),
            ("sampling", "n", "eight", "sampling.n: expected an integer")):
        bad = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
        bad[section][key] = value
        src.write_text(yaml.safe_dump(bad))
        r = invoke("rlvr-port-config", [str(src)])
        assert r.code == 3 and r.stdout == "", (key, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and f"{src}: {named}" in lines[0], (key, r.stderr)
    ok = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    ok["training"]["max_steps"] = None                        # null: as if absent, train until the data ends
    assert port_config(ok).config["train"]["steps"] == 1_000_000
    ok["roles"][0]["config"]["optimizer"]["lr"] = "5e-6"     # PyYAML's string for 5e-6 still reads as a number
    assert port_config(ok).config["train"]["lr"] == 5e-6


def test_a_section_of_the_wrong_shape_is_one_line_naming_file_key_and_type(tmp_path):
    src = tmp_path / "their.yaml"
    for path, value, named in (
            (["data"], 5, "data: expected a mapping (KEY: {...}), got int 5"),
            (["training"], [1, 2], "training: expected a mapping (KEY: {...}), got list [1, 2]"),
            (["sampling"], "x", "sampling: expected a mapping (KEY: {...}), got str 'x'"),
            (["loss"], [1], "loss: expected a mapping"),
            (["roles"], 5, "roles: expected a list of roles"),
            (["roles", 0], 7, "roles[0]: expected a role mapping"),
            (["roles", 0, "config"], [3], "roles[0].config: expected a mapping (KEY: {...}), got list [3]"),
            (["data", "datasets"], 5, "data.datasets: expected a list of datasets"),
            (["data", "datasets", 0], "gsm8k", "data.datasets[0]: expected a dataset mapping")):
        bad = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
        if path[:2] == ["data", "datasets"]:
            bad["data"] = {"dataset": "mixed", "datasets": [{"name": "gsm8k", "weight": 1.0}]}
        node = bad
        for k in path[:-1]:
            node = node[k]
        node[path[-1]] = value
        src.write_text(yaml.safe_dump(bad))
        r = invoke("rlvr-port-config", [str(src)])
        lines = r.stderr.strip().splitlines()
        assert r.code == 3 and r.stdout == "" and len(lines) == 1, (path, r.stderr)
        assert f"{src}: {named}" in lines[0] and "AttributeError" not in lines[0], (path, r.stderr)
    ok = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    ok["buffer"] = None                                     # null: as if absent
    assert port_config(ok).config["train"]


def test_system_prompt_with_and_without_a_chat_template():
    cfg = their("qwen3-1.7B-gsm8k-grpo-lr5e6.yaml")
    cfg["data_iter"].update(system_prompt="Be brief.", skip_chat_template=False)
    port = port_config(cfg)
    assert port.config["data"]["system"] == "Be brief." and port.config["data"]["chat"] is True
    cfg["data_iter"]["skip_chat_template"] = True   # their loader writes it before the prompt text then
    port = port_config(cfg)
    assert "system" not in port.config["data"]
    assert any(e.their == "data_iter.system_prompt" and e.kind == "unmapped" for e in port.entries)


@pytest.mark.parametrize("name", ["qwen3-1.7B-gsm8k-grpo-adaptive.yaml"])
def test_adaptive_sampling_maps_to_rollout_adaptive(name, tmp_path):
    port, ours = ported(name, tmp_path)
    a = ours.rollout.adaptive
    assert (a.max_n, a.k_pos, a.k_neg, a.chunk) == (64, 2, 2, 8) and ours.rollout.n == 16
    assert any(e.their == "training.adaptive_sampling" and e.kind == "mapped" for e in port.entries)
    check(ours)   # rlvr-train accepts it


def test_abort_in_flight_with_staleness_maps_to_resubmit(tmp_path):
    t = their("qwen3-1.7B-gsm8k-dapo-lr5e6-stale2.yaml")
    t["training"]["abort_in_flight"] = True
    port = port_config(t, source="stale2")
    path = tmp_path / "ours.yaml"
    path.write_text(port.yaml())
    ours = load_config(TrainConfig, str(path), [])
    assert ours.sync.abort_in_flight == "resubmit" and ours.train.max_staleness == 2
    check(ours)


def test_their_32b_trainer_keeps_its_gpus_as_a_tp_mesh_and_plans(tmp_path):
    """Their 32B config: `tensor_parallel_degree: 8` x data-parallel 1 x 1 ports to 8 trainer
    ranks in groups of 8 (train.num_trainers 8, train.tensor_parallel 8), never fewer GPUs; the
    plan of it on their 8-GPU trainer node (80 GiB GPUs) says exactly what does not fit (fp32
    master weights, gradients and AdamW's moments of 32B over 8 ranks) and the nearest layout
    that does (16 ranks over two nodes, or the states offloaded)."""
    from rlvr.train.plan_memory import ModelShape, read_model_config
    from rlvr.train.plan_parallel import nearest_fit, plan_rank

    with open(os.path.join(PORT, "multinode", "qwen3-32B-deepscaler-multinode.yaml")) as fh:
        port = port_config(yaml.safe_load(fh), source="qwen3-32B-deepscaler-multinode.yaml")
    path = tmp_path / "ours.yaml"
    path.write_text(port.yaml())
    cfg = load_config(TrainConfig, str(path), [f"model.path={os.path.join(DATA, 'models', 'qwen3-32b')}"])
    assert (cfg.train.num_trainers, cfg.train.tensor_parallel) == (8, 8)
    tp = [e for e in port.entries if e.their.endswith("tensor_parallel_degree")]
    assert tp and tp[0].kind == "mapped" and tp[0].rlvr == ["train.tensor_parallel"]
    check(cfg)
    shape = ModelShape.from_config(read_model_config(cfg.model.path)[0])
    m = plan_rank(shape, 2560 * 2, 80.0, world=8, tensor_parallel=8)
    assert not m["fits"] and "master_weights 15.26, gradients 15.26, optimizer 30.51" in m["why"]
    near = nearest_fit(shape, 2560 * 2, 8, 80.0)
    assert near["data_parallel"] * near["tensor_parallel"] == 16
    assert plan_rank(shape, 2560 * 2, 80.0, world=8, tensor_parallel=8, offload="params_and_optimizer")["fits"]
