"""rlvr-rollout: records in, records with completions and metadata out, in input order;
too-long prompts kept with a status; resume after kill -9 gives the file an uninterrupted run
gives; shards and shuffles are deterministic; --gpus merges engine processes in order. The
library runs on the shared vLLM engine; the command runs in subprocesses with the hf engine."""

from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import sys
import time

import orjson
import pytest

from helpers import REPO, invoke, jsonl
from rlvr.engines import EngineOptions, Sampling
from rlvr.rollout import RolloutSettings, run, run_to_file, select
from rlvr.records import RecordWriter

WORDS = "what is seven plus the answer count apples how many people write code".split()


def prompts(n: int, start: int = 0) -> list[dict]:
    return [{"id": f"p{i}", "dataset": "toy", "prompt": " ".join(WORDS[(i * 3 + j) % len(WORDS)] for j in range(5))}
            for i in range(start, start + n)]


def rollout(records, settings, engine) -> list[dict]:
    buf = io.BytesIO()
    run(records, settings, RecordWriter(buf), engine=engine, progress=False)
    return [orjson.loads(ln) for ln in buf.getvalue().splitlines()]


def vllm_settings(model, **sampling) -> RolloutSettings:
    s = dict(n=3, temperature=1.0, max_tokens=12, seed=5)
    s.update(sampling)
    return RolloutSettings(model=model, engine="vllm", sampling=Sampling(**s))


def test_records_come_back_in_order_with_generation_metadata(vllm_engine, tiny_model_dir):
    recs = prompts(5)
    recs[1]["rewards"] = [1.0]                      # from an older rollout: must not survive
    recs[1]["verdicts"] = [{"status": "correct"}]
    recs.insert(2, {"id": "long", "prompt": "the answer " * 400})
    recs.insert(4, {"error": {"file": "<stdin>", "line": 4, "message": "invalid JSON"}})
    recs.append({"id": "chat", "prompt": [{"role": "user", "content": "say seven"}]})
    out = rollout(recs, vllm_settings(tiny_model_dir, logprobs=True), vllm_engine)
    assert [r.get("id") for r in out] == [r.get("id") for r in recs]
    assert out[4] == recs[4]                          # error records pass through untouched
    long = out[2]
    assert long["completions"] == [] and long["generation"]["status"] == "prompt_too_long"
    assert long["prompt_tokens"] > 500 - 12 and "over the limit of 500" in long["generation"]["error"]
    for r, src in zip(out, recs):
        if r is long or "error" in r:
            continue
        assert "rewards" not in r and "verdicts" not in r and r["dataset" if "dataset" in src else "id"] == src[
            "dataset" if "dataset" in src else "id"]
        assert len(r["completions"]) == 3 and set(r["finish_reasons"]) <= {"stop", "length"}
        ids = vllm_engine.encode(src["prompt"])
        assert r["prompt_tokens"] == len(ids)
        assert r["completion_tokens"] == [len(t) for t in r["completion_token_ids"]]
        assert [len(x) for x in r["logprobs"]] == r["completion_tokens"]
        assert all(lp <= 0 for x in r["logprobs"] for lp in x)
        g = r["generation"]
        assert g["status"] == "ok" and g["model"] == tiny_model_dir and g["engine"] == "vllm"
        assert g["sampling"] == {"n": 3, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 12, "stop": [],
                                 "seed": 5, "logprobs": True, "chat_template": "auto", "max_prompt_len": 500}
        assert isinstance(g["prompt_seed"], int)
    chat = out[-1]
    assert chat["prompt_tokens"] == len(vllm_engine.encode(recs[-1]["prompt"]))   # templated (ChatML)
    assert chat["prompt_tokens"] > len(vllm_engine.encode("say seven")) + 4


def test_resume_after_a_torn_write_gives_the_same_file(vllm_engine, tiny_model_dir, tmp_path):
    recs = prompts(12)
    settings = vllm_settings(tiny_model_dir, n=2)
    whole = tmp_path / "whole.jsonl"
    assert run_to_file(recs, settings, str(whole), engine=vllm_engine)[0] == 0
    lines = whole.read_bytes().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_bytes(b"".join(lines[:5]) + lines[5][:40])       # killed while writing line 6
    said = []
    skipped, stats = run_to_file(recs, settings, str(torn), engine=vllm_engine, warn=said.append)
    assert skipped == 5 and stats.generated == 7 and "5 of 12" in said[0]
    assert torn.read_bytes() == whole.read_bytes()
    assert run_to_file(recs, settings, str(torn), engine=vllm_engine)[1].generated == 0   # nothing left to do
    with pytest.raises(ValueError, match="other generation settings"):
        run_to_file(recs + prompts(1, 50), vllm_settings(tiny_model_dir, n=4), str(torn), engine=vllm_engine)
    with pytest.raises(ValueError, match="another input"):
        run_to_file(prompts(12, 1), settings, str(torn), engine=vllm_engine)


def test_shards_of_a_shuffled_input_partition_it_and_keep_each_records_samples(vllm_engine, tiny_model_dir):
    recs = prompts(10)
    settings = vllm_settings(tiny_model_dir)
    full = {r["id"]: r for r in rollout(recs, settings, vllm_engine)}
    parts = [rollout(select(recs, (i, 3), shuffle=True, seed=9), settings, vllm_engine) for i in range(3)]
    ids = [r["id"] for p in parts for r in p]
    assert sorted(ids) == sorted(full) and ids != [r["id"] for r in recs]
    assert [r["id"] for r in select(recs, (1, 3), shuffle=True, seed=9)] == [r["id"] for r in parts[1]]
    for p in parts:
        for r in p:
            assert r["completions"] == full[r["id"]]["completions"]   # same seed, other batch: same samples


def test_gpus_run_one_engine_process_each_and_merge_in_order(hf_engine, tiny_model_dir):
    """One pool of two engine processes serves a plain rollout and a tool rollout (each worker
    runs the tool loop; markers "a" ... "e" that the tiny model writes often make it call the
    tool): both merge in input order and equal the single engine's records, trajectories too."""
    from dataclasses import replace

    from rlvr.rollout import build_engine
    from rlvr.tools import ToolSettings

    recs = prompts(7)
    settings = RolloutSettings(model=tiny_model_dir, engine="hf", sampling=Sampling(n=2, max_tokens=6, seed=1),
                               options=EngineOptions(dtype="float32", max_model_len=512))
    tooled = replace(settings, sampling=replace(settings.sampling, max_tokens=32),
                     tools=ToolSettings(markers=(("a", "e"),), max_turns=3, max_output_chars=20, timeout_s=1.0))
    one, one_tools = rollout(recs, settings, hf_engine), rollout(recs[:4], tooled, hf_engine)
    settings.gpus = tooled.gpus = ["0", "1"]
    pool = build_engine(settings)
    try:
        assert len(pool.procs) == 2
        buf = io.BytesIO()
        stats = run(recs, settings, RecordWriter(buf), engine=pool, progress=False)
        assert stats.generated == 7
        assert [orjson.loads(ln) for ln in buf.getvalue().splitlines()] == one
        got = rollout(recs[:4], tooled, pool)
    finally:
        pool.close()
    assert got == one_tools and [r["id"] for r in got] == ["p0", "p1", "p2", "p3"]
    roles = [[t["role"] for t in tr] for r in got for tr in r["trajectories"]]
    assert any("tool" in r for r in roles), roles
    assert got[0]["generation"]["sampling"]["tools"]["max_turns"] == 3


# --- the command --------------------------------------------------------------------------

def rollout_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", "from rlvr.commands.rollout import main; main()", *args]


def test_kill_9_then_rerun_ends_with_the_uninterrupted_file(hf_engine, tiny_model_dir, tmp_path):
    recs = prompts(40)
    src = tmp_path / "in.jsonl"
    src.write_text(jsonl(*recs))
    out = tmp_path / "out.jsonl"
    args = ["-m", tiny_model_dir, "--engine", "hf", "--dtype", "float32", "--max-model-len", "512", "-n", "2",
            "--max-tokens", "24", "--seed", "3", "--output", str(out), str(src)]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    p = subprocess.Popen(rollout_cmd(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=env)
    deadline = time.monotonic() + 600  # a guard against a hang only
    while (not out.exists() or out.read_bytes().count(b"\n") < 2) and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.05)
    p.send_signal(signal.SIGKILL)
    p.communicate()
    partial = out.read_bytes()
    assert 2 <= partial.count(b"\n") < 40, partial.count(b"\n")
    with open(out, "ab") as fh:
        fh.write(b'{"id": "p9", "completions": ["tor')    # a torn last line as a crash mid-write leaves
    r = subprocess.run(rollout_cmd(*args, "--progress"), capture_output=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    assert r.stdout == b""
    err = r.stderr.decode()
    assert "already done; resuming" in err and "tok/s" in err
    settings = RolloutSettings(model=tiny_model_dir, engine="hf", sampling=Sampling(n=2, max_tokens=24, seed=3),
                               options=EngineOptions(dtype="float32", max_model_len=512))
    expected = io.BytesIO()
    run(recs, settings, RecordWriter(expected), engine=hf_engine, progress=False)
    assert out.read_bytes() == expected.getvalue()


def test_command_loads_a_folder_with_a_mismatched_index_and_writes_jsonl(tiny_model_dir, tmp_path, monkeypatch):
    import json

    from rlvr.engines import checkpoint

    d = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, d)
    names = list(checkpoint.safetensors_header(str(d / "model.safetensors")))
    (d / checkpoint.INDEX).write_text(json.dumps({"weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}))
    env = dict(os.environ, OMP_NUM_THREADS="1", RLVR_CACHE=str(tmp_path / "cache"))
    r = subprocess.run(rollout_cmd("-m", str(d), "--engine", "hf", "--dtype", "float32", "--max-tokens", "4",
                                   "--temperature", "0", "-n", "2"),
                       input=jsonl(*prompts(2)).encode(), capture_output=True, cwd=REPO, env=env, timeout=300)
    assert r.returncode == 0, r.stderr.decode()
    lines = r.stdout.decode().splitlines()
    assert [orjson.loads(x)["id"] for x in lines] == ["p0", "p1"]
    recs = [orjson.loads(x) for x in lines]
    assert all(len(x["completions"]) == 2 and x["completions"][0] == x["completions"][1] for x in recs)
    warning = [ln for ln in r.stderr.decode().splitlines() if ln.startswith("rlvr-rollout: warning:")]
    assert len(warning) == 1 and "model-00001-of-00001.safetensors" in warning[0] and "delete" in warning[0]
    # no --max-model-len: the longest prompt plus --max-tokens, rounded up to 256 (not the model's 2048)
    longest = max(x["prompt_tokens"] for x in recs)
    assert f"max model length 256 (longest prompt {longest} tokens + --max-tokens 4" in r.stderr.decode()
    assert all(x["generation"]["sampling"]["max_prompt_len"] == 256 - 4 for x in recs)


def test_output_closed_early_ends_quietly(tiny_model_dir, tmp_path):
    src = tmp_path / "in.jsonl"
    src.write_text(jsonl(*prompts(40)))
    cmd = " ".join(rollout_cmd("-m", tiny_model_dir, "--engine", "hf", "--dtype", "float32", "--max-tokens", "24",
                               str(src))).replace("-c from", "-c 'from").replace("main()", "main()'")
    p = subprocess.run(f"{cmd} | head -n 1; exit ${{PIPESTATUS[0]}}", shell=True, executable="/bin/bash",
                       capture_output=True, text=True, cwd=REPO, env=dict(os.environ, OMP_NUM_THREADS="1"), timeout=300)
    assert p.returncode == 0, p.stderr
    assert orjson.loads(p.stdout)["id"] == "p0"
    assert "Traceback" not in p.stderr and "error" not in p.stderr


def test_usage_errors_are_one_line():
    r = invoke("rlvr-rollout", [], jsonl(*prompts(1)))
    assert r.code == 2 and r.stderr.strip().splitlines()[-1] == (
        "rlvr-rollout: error: --model is required (or set RLVR_MODEL)")
    r = invoke("rlvr-rollout", ["-m", "x"], '{"id": "a", "text": "no prompt"}\n')
    assert r.code == 3 and "<stdin>:1: required field is missing (field prompt)" in r.stderr
    r = invoke("rlvr-rollout", ["-m", "x", "--top-p", "0"], "")
    assert r.code == 2
    r = invoke("rlvr-rollout", ["-m", "/nonexistent/model", "--engine", "hf"], jsonl(*prompts(1)))
    assert r.code == 2 and "no such model folder" in r.stderr and "Traceback" not in r.stderr


def test_chat_messages_need_the_chat_template(tiny_model_dir, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    rec = {"id": "c", "prompt": [{"role": "user", "content": "hi"}]}
    r = invoke("rlvr-rollout", ["-m", tiny_model_dir, "--engine", "hf", "--chat-template", "off"], jsonl(rec))
    assert r.code == 2 and "chat messages but the chat template is off" in r.stderr


def test_chat_prompts_also_stop_at_the_templates_end_of_turn(hf_engine, tiny_model_dir):
    # The tiny model ends text with <|endoftext|> (a base model) but its ChatML turns with
    # <|im_end|>: a chat prompt's request stops at either, as rlvr-train's rollouts do.
    from rlvr.engines.base import end_of_turn_ids

    seen: dict[str, Sampling] = {}

    class Spy:
        def __getattr__(self, name):
            return getattr(hf_engine, name)

        def stream(self, requests, sampling):
            def tap():
                for req in requests:
                    seen[recs[req[0]]["id"]] = req[3] if len(req) > 3 else sampling
                    yield req
            return hf_engine.stream(tap(), sampling)

    recs = [{"id": "chat", "prompt": [{"role": "user", "content": "hi"}]}, {"id": "text", "prompt": "hi there"}]
    settings = RolloutSettings(model=tiny_model_dir, engine="hf", sampling=Sampling(n=1, max_tokens=4, seed=1))
    out = rollout(recs, settings, Spy())
    eot = end_of_turn_ids(hf_engine.tokenizer)
    assert eot and eot[0] != hf_engine.tokenizer.eos_token_id
    assert seen["chat"].stop_token_ids == tuple(eot) and seen["text"].stop_token_ids == ()
    assert [r["id"] for r in out] == ["chat", "text"]


def test_one_seed_rule_for_rollout_and_training():
    # One function derives every per-prompt seed (rlvr-rollout, rlvr-eval, rlvr-train's
    # rollouts). Its values are part of the record format (generation.prompt_seed): pinned.
    from rlvr.engines.base import prompt_seed

    assert prompt_seed(0, "gsm8k-0") == 3612317861595893919
    assert prompt_seed(7, [1, 2, 3]) == 2362980472267532350
    assert prompt_seed(0, "gsm8k-0", epoch=0) == prompt_seed(0, "gsm8k-0")
    later = {prompt_seed(0, "gsm8k-0", epoch=e) for e in range(1, 50)}
    assert len(later) == 49 and prompt_seed(0, "gsm8k-0") not in later
    assert all(0 <= s < 2**62 for s in later)


def test_the_fitted_context_is_the_prompts_need_rounded_up_and_at_most_the_models(tiny_model_dir):
    from rlvr.rollout import fitted_max_model_len

    recs = prompts(3) + [{"id": "long", "prompt": "seven " * 400}, {"error": {"message": "bad line", "line": 9}}]
    s = RolloutSettings(model=tiny_model_dir, engine="hf", sampling=Sampling(max_tokens=100))
    ctx, longest, tokens = fitted_max_model_len(recs, s)
    assert 400 <= longest < 500 and ctx == -(-(longest + 100) // 256) * 256 and tokens == 100
    assert fitted_max_model_len(recs, RolloutSettings(model=tiny_model_dir, max_prompt_len=300,
                                                      sampling=Sampling(max_tokens=300))) == (768, 300, 300)
    # a record's own max_tokens counts (rlvr-data writes them), and is what the count says it used
    own = [dict(r, max_tokens=700) if r.get("id") == "long" else r for r in recs]
    assert fitted_max_model_len(own, RolloutSettings(model=tiny_model_dir, record_max_tokens=True,
                                                     sampling=Sampling(max_tokens=100)))[1:] == (longest, 700)
    # never above the model's own context (2048 here): longer prompts come out as prompt_too_long
    assert fitted_max_model_len(recs, RolloutSettings(model=tiny_model_dir, sampling=Sampling(max_tokens=4000)))[0] == 2048
    assert fitted_max_model_len(recs[-1:], s) is None
