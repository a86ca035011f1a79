"""Training config: defaults < YAML < --set, unknown keys and wrong types are errors."""

from __future__ import annotations

import os

import pytest

from helpers import REPO
from rlvr.cli import ConfigError
from rlvr.config_loader import load_config, parse_set, to_yaml
from rlvr.train.config import TrainConfig, check

CONFIGS = os.path.join(REPO, "configs")


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(CONFIGS) if f.endswith(".yaml")))
def test_shipped_configs_load_and_check(name):
    cfg = load_config(TrainConfig, os.path.join(CONFIGS, name))
    check(cfg)


def test_packaged_default_equals_configs_tiny_cpu():
    a = open(os.path.join(CONFIGS, "tiny-cpu.yaml")).read()
    b = open(os.path.join(REPO, "rlvr", "resources", "tiny-cpu.yaml")).read()
    assert a == b


def test_overrides_and_types(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  lr: 1e-5\n  steps: 3\nrollout:\n  n: 4\n")
    cfg = load_config(TrainConfig, str(f), ["train.steps=7", "data.mix={gsm8k: 1, math: 3}", "data.dataset=null",
                                            "train.loss.tis_cap=null"])
    assert cfg.train.lr == 1e-5 and cfg.train.steps == 7 and cfg.rollout.n == 4
    assert cfg.data.mix == {"gsm8k": 1.0, "math": 3.0} and cfg.data.dataset is None and cfg.train.loss.tis_cap is None
    assert cfg.rollout.temperature == 1.0  # default kept
    back = load_config(TrainConfig, None, [])
    assert to_yaml(back) == to_yaml(TrainConfig())


@pytest.mark.parametrize("text,needle", [
    ("train:\n  lrr: 1\n", "train.lrr: unknown key"),
    ("train:\n  steps: many\n", "train.steps: expected an integer"),
    ("rollout:\n  temperature: hot\n", "rollout.temperature: expected a number"),
    ("train: 5\n", "train: expected a mapping"),
    ("bogus: {}\n", "bogus: unknown key"),
    ("train:\n  steps: [1\n", "invalid YAML"),
])
def test_errors_name_file_and_key(tmp_path, text, needle):
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as ei:
        load_config(TrainConfig, str(f))
    assert str(f) in ei.value.message and needle in ei.value.message


def test_cross_field_checks():
    cfg = TrainConfig()
    cfg.train.loss.loss_type = "ppo"
    with pytest.raises(ConfigError):
        check(cfg)
    cfg = TrainConfig()
    cfg.rollout.top_p = 0.9
    assert any("top_p" in w for w in check(cfg))


def test_ratio_to_engine_refuses_raw_logprobs_at_another_temperature():
    """ratio_to engine divides by the engine's log-probs: raw ones (before the temperature) at 0.6
    against the trainer's at 0.6 compare two distributions, refused with one line naming the keys."""
    cfg = TrainConfig()
    cfg.rollout.logprobs, cfg.rollout.temperature, cfg.train.loss.ratio_to = "raw", 0.6, "engine"
    with pytest.raises(ConfigError) as ei:
        check(cfg)
    msg = ei.value.message
    assert "\n" not in msg and all(k in msg for k in ("train.loss.ratio_to", "rollout.logprobs", "rollout.temperature"))
    for fix in (("processed", 0.6, "engine"), ("raw", 1.0, "engine"), ("raw", 0.6, "trainer")):
        cfg.rollout.logprobs, cfg.rollout.temperature, cfg.train.loss.ratio_to = fix
        check(cfg)                                # the trainer ratio keeps only the TIS warning
    thinker = load_config(TrainConfig, os.path.join(CONFIGS, "qwen3-1.7B-allenai-thinker.yaml"))
    assert thinker.rollout.temperature == 0.6 and thinker.train.loss.ratio_to == "engine"
    assert thinker.rollout.logprobs == "processed"


def test_clip_that_cannot_act_warns():
    cfg = TrainConfig()
    assert not any("cannot act" in w for w in check(cfg))      # defaults: nothing was asked of the clip
    cfg.train.loss.clip_high = 0.28
    assert any("cannot act" in w and "train.mini_batches" in w for w in check(cfg))
    cfg.train.mini_batches = 4
    assert not any("cannot act" in w for w in check(cfg))
    cfg.train.mini_batches, cfg.train.epochs = 1, 2
    assert not any("cannot act" in w for w in check(cfg))
    cfg.train.epochs = 0
    with pytest.raises(ConfigError):
        check(cfg)


def test_loss_settings_are_one_nested_section(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  loss:\n    loss_type: dapo\n    clip_high: 0.28\n  mini_batches: 2\n")
    cfg = load_config(TrainConfig, str(f), ["train.loss.beta=0.01"])
    assert (cfg.train.loss.loss_type, cfg.train.loss.clip_high, cfg.train.loss.beta) == ("dapo", 0.28, 0.01)
    assert "loss:\n    loss_type: dapo" in to_yaml(cfg)
    f.write_text("train:\n  clip_high: 0.28\n")
    with pytest.raises(ConfigError, match="train.clip_high: unknown key"):
        load_config(TrainConfig, str(f))


def test_parse_set():
    assert parse_set("a.b=3") == {"a": {"b": 3}}
    assert parse_set("a=1e-6") == {"a": 1e-6}
    assert parse_set("a=hello") == {"a": "hello"}
    with pytest.raises(ConfigError):
        parse_set("novalue")


def test_training_curriculum_may_repeat_prompts_and_unknown_ids_fail_at_once(tmp_path):
    from rlvr.records import RecordError
    from rlvr.train.config import DataConfig
    from rlvr.train.stream import PromptStream

    order = tmp_path / "order.txt"
    order.write_text("toy/train/3\ntoy/train/1\ntoy/train/3\n")   # a hard prompt twice
    stream = PromptStream(DataConfig(dataset="toy", order=str(order), epochs=2))
    # a repeat is its own prompt (its own id, so its own sample seeds), the same question
    got = [r for r, _ in stream.batch(0, 4)]
    assert [r["id"] for r in got] == ["toy/train/3", "toy/train/1", "toy/train/3#2", "toy/train/3"]
    assert got[2]["prompt"] == got[0]["prompt"] and got[2]["answer"] == got[0]["answer"]
    order.write_text("toy/train/3\nnope\n")
    with pytest.raises(RecordError, match="unknown prompt id 'nope'"):
        PromptStream(DataConfig(dataset="toy", order=str(order)))   # before any engine starts
    order.write_text("")
    with pytest.raises(ConfigError, match="lists no prompt ids"):
        PromptStream(DataConfig(dataset="toy", order=str(order)))


def test_keep_rule_never_drops_multiples_of_keep_every(tmp_path):
    from rlvr.runs import COMPLETE, checkpoints_to_prune, list_checkpoints, prune_checkpoints

    steps = list(range(10, 101, 10))
    assert checkpoints_to_prune(steps, None) == [] and checkpoints_to_prune(steps, 0) == []
    assert checkpoints_to_prune(steps, 3) == list(range(10, 71, 10))
    assert checkpoints_to_prune(steps, 3, 40) == [10, 20, 30, 50, 60, 70]
    assert checkpoints_to_prune(steps, 3, 10) == []
    for s in steps:  # on disk: complete checkpoints only, oldest first
        d = tmp_path / "checkpoints" / f"step_{s:06d}"
        d.mkdir(parents=True)
        (d / COMPLETE).write_text("")
    prune_checkpoints(str(tmp_path), 2, 30)
    assert [s for s, _ in list_checkpoints(str(tmp_path))] == [30, 60, 90, 100]


@pytest.mark.parametrize("name", sorted(f for f in os.listdir(CONFIGS) if f.endswith(".yaml")))
def test_shipped_configs_keep_every_checkpoint_a_watcher_may_lag_on(name):
    from rlvr.runs import checkpoints_to_prune

    cfg = load_config(TrainConfig, os.path.join(CONFIGS, name))
    every = cfg.checkpoint.every or cfg.train.steps
    steps = list(range(every, cfg.train.steps + 1, every)) if every else []
    assert checkpoints_to_prune(steps, cfg.checkpoint.keep_last, cfg.checkpoint.keep_every) == []


def test_ray_temp_dir_setting_and_option(tmp_path):
    from helpers import invoke

    tiny = os.path.join(CONFIGS, "tiny-cpu.yaml")
    assert load_config(TrainConfig, tiny).ray.temp_dir is None
    r = invoke("rlvr-train", [tiny, "--ray-temp-dir", "/nvme/ray", "--print-config"])
    assert r.code == 0 and "temp_dir: /nvme/ray" in r.stdout
    r = invoke("rlvr-train", [tiny, "--set", "ray.temp_dir=/nvme/ray", "--ray-address", "auto", "--print-config"])
    assert r.code == 0 and "address: auto" in r.stdout and "temp_dir: /nvme/ray" in r.stdout  # where to look for it
    cfg = load_config(TrainConfig, tiny, ["checkpoint.keep_every=0"])
    with pytest.raises(ConfigError):
        check(cfg)


USERS_MIXED = """\
data:
  dataset: mixed
  datasets:
    - name: gsm8k
      split: train
      weight: 0.25
    - name: math
      split: train
      weight: 0.25
    - name: mbpp
      split: train
      weight: 0.1
    - name: ifeval
      weight: 0.4
  seed: 42
"""


def test_the_users_mixture_form_maps_onto_mix_and_order(tmp_path):
    """The data sections of the users' own configs (dataset: mixed, datasets: [{name, weight, order}],
    their curricula's if_multi_constraints) load as rlvr's data.mix / data.order."""
    f = tmp_path / "users.yaml"
    f.write_text(USERS_MIXED)
    cfg = load_config(TrainConfig, str(f))
    check(cfg)
    d = cfg.data
    assert (d.dataset, d.mix, d.split, d.seed, d.order) == (
        None, {"gsm8k": 0.25, "math": 0.25, "mbpp": 0.1, "ifeval": 0.4}, "train", 42, None)
    assert "mixed" not in to_yaml(cfg) and "datasets" not in to_yaml(cfg)   # the run saves rlvr's form
    f.write_text("data:\n  dataset: mixed\n  datasets:\n    - name: gsm8k\n      order: /efs/curricula/gsm8k.txt\n")
    d = load_config(TrainConfig, str(f)).data
    assert (d.dataset, d.mix, d.order) == ("gsm8k", None, "/efs/curricula/gsm8k.txt")
    f.write_text("data:\n  dataset: mixed\n  mode: weighted\n  datasets:\n    - {name: if_multi_constraints, weight: 3,"
                 " order: s3://b/if.txt}\n    - {name: gsm8k}\n")
    d = load_config(TrainConfig, str(f)).data
    assert d.mix == {"if_multi": 3.0, "gsm8k": 1.0} and d.order == {"if_multi": "s3://b/if.txt"}
    f.write_text("data:\n  dataset: if_multi_constraints\n  source: {if_multi_constraints: x.jsonl}\n")
    d = load_config(TrainConfig, str(f)).data
    assert (d.dataset, d.source) == ("if_multi", {"if_multi": "x.jsonl"})


@pytest.mark.parametrize("section, says", [
    ("  dataset: mixed\n  mode: sequential\n  datasets:\n    - {name: gsm8k, count: 3200}\n    - {name: math}\n",
     "data.mode: 'sequential': rlvr interleaves a mixture by weight"),
    ("  dataset: mixed\n  datasets:\n    - {name: gsm8k, weight: 0.5}\n    - {name: math, weight: 0.5, level: [3, 4]}\n",
     "data.datasets[1].level: rlvr has no per-dataset level"),
    ("  dataset: mixed\n  datasets:\n    - {name: gsm8k, split: train}\n    - {name: math, split: test}\n",
     "one split for every dataset of a mixture"),
    ("  dataset: mixed\n  datasets:\n    - {name: gsm8k}\n    - {name: mbpp, split: test}\n",
     "data.datasets: mbpp: test but no split for gsm8k"),
    ("  dataset: mixed\n  datasets: []\n", "data.datasets: expected a non-empty list"),
    ("  dataset: mixed\n  datasets:\n    - {name: gsm8k, weight: -1}\n", "data.datasets[0].weight: expected a positive"),
])
def test_what_the_mixture_form_cannot_say_in_rlvr_is_one_line_with_rlvrs_form(tmp_path, section, says):
    f = tmp_path / "users.yaml"
    f.write_text("data:\n" + section)
    with pytest.raises(ConfigError) as e:
        load_config(TrainConfig, str(f))
    msg = str(e.value)
    assert msg.startswith(f"{f}: ") and says in msg and "\n" not in msg
    if "level" in says or "sequential" in says:
        assert "rlvr's form of the rest: data: {" in msg and "mix: {gsm8k: " in msg


def test_the_teacher_example_in_docs_shows_the_defaults():
    """docs/train-modes.md's teacher / train.distill example: every value the default, except the two
    that turn distillation on."""
    import dataclasses
    import re

    import yaml

    with open(os.path.join(REPO, "docs", "train-modes.md")) as fh:
        doc = fh.read()
    section = doc[doc.index("## Distillation from a teacher"):]
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))
    cfg = TrainConfig()
    on = {("teacher", "model"), ("distill", "weight")}
    shown = [("teacher", cfg.teacher, example["teacher"]), ("distill", cfg.train.distill, example["train"]["distill"])]
    for section_name, defaults, values in shown:
        assert set(values) <= {f.name for f in dataclasses.fields(defaults)}, values
        for key, value in values.items():
            if (section_name, key) not in on:
                assert value == getattr(defaults, key), (section_name, key, value)
