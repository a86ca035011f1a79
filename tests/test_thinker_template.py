"""The R1-style thinker chat template rlvr ships (tulu_thinker_r1_style, the format of the users'
thinker run): what it renders, its use by name in rlvr-data, rlvr-rollout's prompt tokens, the
thinking verdicts of completions written under it, rlvr-port-config's mapping of their
data_iter.chat_template, and configs/qwen3-1.7B-allenai-thinker.yaml against the port of their
run (tests/data/port, provenance in its README)."""

from __future__ import annotations

import os

import pytest
import yaml

from helpers import DATA, invoke, jsonl
from rlvr.data.templates import SHIPPED_DIR, read_template, resolve_template

NAME = "tulu_thinker_r1_style"
TULU = os.path.join(DATA, "allenai", "rlvr_gsm_math_if_mixed.jsonl")
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
R1 = ("A conversation between User and Assistant. The user asks a question, and the Assistant solves it. The "
      "assistant first thinks about the reasoning process in the mind and then provides the user with the answer. "
      "The reasoning process and answer are enclosed within <think> </think> and <answer> </answer> tags, "
      "respectively, i.e., <think> reasoning process here </think> <answer> answer here </answer>.\n\n")


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tiny_model_dir)


def test_the_template_renders_the_published_format(tok):
    text = read_template(NAME)
    msgs = [{"role": "system", "content": "S"}, {"role": "user", "content": "Q1"},
            {"role": "assistant", "content": "<think>scratch</think> A1"}, {"role": "user", "content": "Q2"}]
    out = tok.apply_chat_template(msgs, chat_template=text, tokenize=False, add_generation_prompt=True)
    assert out == (R1 + "<|system|>\nS\n<|user|>\nQ1\n<|assistant|>\n A1</s>\n<|user|>\nQ2\n"
                   "<|assistant|>\n<think>")
    one = tok.apply_chat_template(msgs[1:2], chat_template=text, tokenize=False, add_generation_prompt=True)
    assert one == R1 + "<|user|>\nQ1\n<|assistant|>\n<think>"
    assert tok.apply_chat_template(msgs[1:2], chat_template=text, tokenize=False) == R1 + "<|user|>\nQ1\n"
    with pytest.raises(Exception, match="system, user and assistant"):
        tok.apply_chat_template([{"role": "tool", "content": "x"}], chat_template=text, tokenize=False)
    # by name, with or without .jinja; a file of that name wins; an unknown name lists the shipped ones
    assert resolve_template(NAME) == resolve_template(NAME + ".jinja") == os.path.join(SHIPPED_DIR, NAME + ".jinja")
    with pytest.raises(ValueError, match=f"nor a template rlvr ships: .*{NAME}"):
        read_template("no_such_template")


def test_prompts_rendered_with_it_end_as_theirs_and_completions_are_judged_on_the_answer(tok):
    from rlvr.rollout import Prompter, RolloutSettings

    r = invoke("rlvr-data", ["allenai", "--source", TULU, "--chat", "--chat-template", NAME, "--thinking"])
    assert r.code == 0, r.stderr
    recs = r.records()
    assert all(x["chat_template"] == resolve_template(NAME) and x["thinking"] is True for x in recs)
    for rec in (recs[0], recs[6]):   # a GSM8K row (its 8 shots in one user turn) and an IF row
        text = tok.decode(Prompter(tok, "auto", 0).ids(rec))
        assert text.startswith(R1 + "<|user|>\n") and text.endswith("\n<|assistant|>\n<think>")
    # rlvr-rollout --chat-template NAME replaces a record's template the same way
    plain = {k: v for k, v in recs[0].items() if k != "chat_template"}
    forced = Prompter(tok, "auto", 0, RolloutSettings(model="m", template_file=NAME)).ids(plain)
    assert tok.decode(forced).endswith("<|assistant|>\n<think>")
    # the model writes no <think> (the prompt opened it): the answer after </think> is judged,
    # the reasoning never is, and a block that never closes is unfinished_thinking
    comps = {0: ["Natalia sold 48 / 2 = 24 in May, 48 + 24 = 72 in all.</think> <answer>72</answer>",
                 "48 + 24 = 72, so 72.</think> <answer>71</answer>",
                 "48 + 24 = 72, so the answer is 72"],
             6: ["Capitals? No.</think>\n<answer>the sea is calm, the sky is wide</answer>",
                 "all lower case</think> <answer>The Sea</answer>"]}
    todo = [{**recs[i], "completions": c} for i, c in comps.items()]
    out = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=allenai"], jsonl(*todo))
    assert out.code == 0, out.stderr
    gsm, ifr = out.records()
    assert [v["status"] for v in gsm["verdicts"]] == ["correct", "wrong", "unfinished_thinking"]
    assert gsm["rewards"] == [1.0, 0.0, 0.0]
    assert gsm["verdicts"][0]["thinking"]["closed"] is True and gsm["verdicts"][2]["thinking"]["closed"] is False
    assert [v["status"] for v in ifr["verdicts"]] == ["correct", "wrong"]


def test_port_maps_their_thinker_format_and_the_shipped_config_mirrors_their_run(tmp_path):
    from rlvr.config_loader import load_config
    from rlvr.port_config import port_config
    from rlvr.train.config import TrainConfig

    with open(os.path.join(DATA, "port", "qwen3-1.7B-allenai-full-lr5e6-beta1e3-thinker.yaml")) as fh:
        port = port_config(yaml.safe_load(fh), source="thinker")
    d = port.config["data"]
    assert (d["chat"], d["chat_template"], d["thinking"]) == (True, NAME, True)
    assert any(e.their == "data.datasets[0].parse_kshot" and e.kind == "unmapped" for e in port.entries)
    path = tmp_path / "ported.yaml"
    path.write_text(port.yaml())
    theirs = load_config(TrainConfig, str(path), [])
    ours = load_config(TrainConfig, os.path.join(ROOT, "configs", "qwen3-1.7B-allenai-thinker.yaml"), [])
    pick = {
        "data": ("dataset", "chat", "chat_template", "thinking", "seed", "epochs"),
        "rollout": ("n", "prompts_per_step", "temperature", "top_p", "top_k", "max_tokens", "max_tokens_by_dataset",
                    "max_model_len", "logprobs", "dtype"),
        "verify": ("verifier_config",),
        "train": ("lr", "lr_schedule", "warmup_steps", "adam_eps", "scale_rewards", "max_staleness",
                  "ref_sync_every", "micro_batch_size", "dtype", "gradient_checkpointing"),
        "train.loss": ("loss_type", "clip_low", "clip_high", "beta", "max_tokens", "ratio_to", "tis_cap"),
        "dapo": ("dynamic_sampling", "max_extra_rounds", "overlong_buffer"),
        "checkpoint": ("every",),
    }

    def get(cfg, section, key):
        node = cfg
        for part in section.split("."):
            node = getattr(node, part)
        return getattr(node, key)

    diff = {f"{s}.{k}": (get(ours, s, k), get(theirs, s, k)) for s, keys in pick.items() for k in keys
            if get(ours, s, k) != get(theirs, s, k)}
    assert not diff, diff
    assert ours.compat == theirs.compat == "torchtitan"
