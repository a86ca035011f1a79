"""bench/gpu_check.py, the GPU acceptance check, run as its CPU fallback: the same code path
(rlvr's trainer in bf16 compute with fp32 master weights, the transformers engine, the policy as
its own distillation teacher, the FSDP path on a one-process group, packed vs padded
micro-batches) on a tiny Qwen3, one JSON line per part and a summary; a part that fails
is that part's result only; the gates hold p99 and max |dlogp|, not only the mean."""

from __future__ import annotations

import importlib.util
import json
import os

import pytest

from helpers import REPO


def _gpu_check():
    spec = importlib.util.spec_from_file_location("gpu_check", os.path.join(REPO, "bench", "gpu_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cpu_fallback_runs_every_part_and_writes_a_line_each_and_a_summary(capsys, tmp_path):
    mod = _gpu_check()
    assert mod.QWEN3_1_7B["vocab_size"] == 151936 and mod.QWEN3_1_7B["num_hidden_layers"] == 28
    doc, jsonl = tmp_path / "gpucheck.md", tmp_path / "gpucheck.jsonl"
    assert mod.main(["--cpu", "--steps", "2", "--sequences", "6", "--gen-prompts", "2", "--gen-tokens", "6",
                     "--set", "logprob_chunk_size=16", "--doc", str(doc), "--out", str(jsonl)]) == 0
    lines = [json.loads(ln) for ln in capsys.readouterr().out.splitlines() if ln.strip()]
    assert [json.loads(ln) for ln in jsonl.read_text().splitlines()] == lines      # --out: the same lines
    parts = {r["part"]: r for r in lines[:-1]}
    assert list(parts) == ["build", "generate", "trainer", "agree", "distill_identity", "fsdp", "train", "sync", "packed",
                           "packing_speed", "tp_step", "smoke"]
    out = lines[-1]
    assert out["summary"] is True and out["ok"] is True and out["failed"] == [] and out["skipped"] == ["tp_step", "smoke"]
    assert out["passed"] == list(parts)[:-2] and all(parts[p]["ok"] is True for p in out["passed"])
    assert parts["tp_step"]["ok"] is None and "more than one GPU" in parts["tp_step"]["skipped"]
    assert parts["smoke"]["ok"] is None and "GPU" in parts["smoke"]["skipped"]   # rlvr-train runs on a GPU only
    assert out["device"] == "cpu" and out["gpu"] is None and out["fallback"]
    assert out["model"]["tie_word_embeddings"] is True and out["model"]["parameters"] > 0
    # the engine's log-probs and the trainer's agree on the same weights (both bf16), gated on p99 and max
    ag = parts["agree"]
    assert ag["nan"] == 0 and 0 < ag["tokens"] <= 12 and ag["max"] >= ag["p99"] >= 0
    assert set(ag["gates"]) == {"mean", "p99", "max"} and all(ag[k] <= g for k, g in ag["gates"].items())
    # the policy as its own top-k teacher: over the whole vocabulary kl and jsd are 0; over its
    # top 20, kl is exactly -log(top-20 mass), the renormalisation
    d = parts["distill_identity"]
    assert d["full_vocab"]["k"] == 1024 and d["full_vocab"]["topk_mass"] == pytest.approx(1.0, abs=1e-4)
    assert abs(d["full_vocab"]["kl"]) <= d["gates"]["kl"] and abs(d["full_vocab"]["jsd"]) <= d["gates"]["jsd"]
    assert d["top20"]["kl"] > 1.0 and d["top20"]["kl"] == pytest.approx(d["top20"]["expected_kl"], abs=1e-3)
    # the FSDP path on a one-process gloo group: fully_shard, fp32 reduce, gradient sync per update,
    # the gathers of weights out, save then load_state
    f = parts["fsdp"]
    assert f["backend"] == "gloo" and f["fsdp_modules"] == 3 and f["vs_one_rank"]["max"] <= f["gates"]["max"]
    assert f["reduce_dtypes"] == ["torch.float32"] and f["synced"] >= 1 and f["grad_norm"] > 0
    assert f["wire_equal"] is True and f["wire_tensors"] > 10 and f["version"] == 1 and f["save_s"] >= 0
    r = f["restored"]
    assert r["version"] == 1 and r["state_step"] == 1 and r["optimizer_equal"] is True and r["max_dlogp"] == 0.0
    t = parts["train"]
    assert t["version"] == 2 and t["steps"] == 2                  # two rollout batches were trained on
    # the shipped trainer options: 4 mini-batches (4 updates), dapo, TIS, the pi_old pass
    assert t["updates"] == 4 and t["options"]["loss_type"] == "dapo" and t["options"]["tis_cap"] == 2.0
    assert t["options"]["logprob_chunk_size"] == 16               # --set reaches the trainer
    assert t["compute_dtype"] == "bfloat16" and t["master_dtype"] == "float32"
    assert t["sequences"] == 6 and t["tokens_per_s"] > 0 and t["grad_norm"] > 0
    assert t["step_s"] >= t["fwd_bwd_s"] > 0 and t["pi_old_s"] > 0 and t["optimizer_s"] > 0
    assert 0 < t["padded_frac"] < 1 and t["flops_per_token"] > 0 and t["mfu"] is None
    assert t["max_allocated_gib"] is None and t["plan_estimate_gib"] > 0     # no CUDA allocator on CPU
    s = parts["sync"]
    assert s["match"] is True and s["checksum_sent"] == s["checksum_weights"] and s["tensors"] > 0
    # packed vs padded, numerically: within the gates, and the control attending across sequences is caught
    pk = parts["packed"]
    g = pk["gates"]
    assert pk["dlogp"]["tokens"] > 0 and pk["dlogp"]["max"] <= g["max"] and pk["dlogp"]["p99"] <= g["p99"]
    assert pk["loss_rel_diff"] <= g["loss_rel"] and pk["grad_norm_rel_diff"] <= g["grad_norm_rel"]
    assert pk["grad_cosine"] >= g["grad_cosine"] and pk["kernel_calls"] == 0     # the CPU's per-sequence path
    span = pk["controls"]["one_segment_per_row"]
    assert span["caught"] is True and span["must_be_caught"] is True and span["max"] > g["max"]
    assert "CUDA" in pk["controls"]["window_as_list"]["skipped"]
    p = parts["packing_speed"]   # padded and packed (train.packing) steps on the length mix
    assert p["sequences"] == 4 and p["padded_tokens_per_s"] > 0 and p["packed_tokens_per_s"] > 0
    gen = parts["generate"]
    assert gen["prompts"] == 2 and 0 < gen["tokens"] <= 2 * 6 and gen["tokens_per_s"] > 0
    assert out["max_rss_gib"] > 0 and out["versions"]["torch"]
    text = doc.read_text()
    assert text.startswith("## GPU acceptance check") and "trainer vs engine log-probs" in text
    assert "packed vs padded" in text and "one_segment_per_row caught" in text


def test_a_failing_part_is_its_own_result_and_the_others_still_run(capsys, tmp_path):
    """A part that raises (or misses its gates) is recorded as failed, with its error, in its
    own line, flushed to --out at once; the parts after it run; those needing it say so."""
    mod = _gpu_check()
    out = tmp_path / "parts.jsonl"
    parts = mod.Parts(str(out))
    parts.run("first", lambda: {"figure": 1})
    assert [json.loads(ln)["part"] for ln in out.read_text().splitlines()] == ["first"]   # flushed as it ended

    def broken():
        raise TypeError("varlen_attn() got an unexpected keyword argument 'is_causal'")

    assert parts.run("packed", broken) is None
    parts.run("gated", lambda: {"ok": False, "max": 3.0})
    parts.run("after", lambda: {"figure": 2}, needs=("first",))
    parts.run("dependent", lambda: {"figure": 3}, needs=("packed",))
    summary = parts.summary({"device": "cpu"})
    rows = [json.loads(ln) for ln in out.read_text().splitlines()]
    assert [r.get("part") for r in rows] == ["first", "packed", "gated", "after", "dependent", None]
    by = {r["part"]: r for r in rows[:-1]}
    assert by["packed"]["ok"] is False and "is_causal" in by["packed"]["error"] and by["packed"]["traceback"]
    assert by["gated"]["ok"] is False and by["gated"]["max"] == 3.0
    assert by["after"]["ok"] is True and by["after"]["figure"] == 2
    assert by["dependent"]["ok"] is False and "needs packed" in by["dependent"]["error"]
    assert summary == rows[-1] and summary["passed"] == ["first", "after"] and summary["ok"] is False
    assert summary["failed"] == ["packed", "gated", "dependent"]
    assert len(capsys.readouterr().out.splitlines()) == 6


def test_gates_hold_p99_and_max_not_only_the_mean():
    mod = _gpu_check()
    import torch

    d = torch.zeros(1000)
    d[:5] = 1.5      # a mean of 0.0075, a max far above bf16 noise: a few tokens misaligned
    stats = mod.dlogp_stats(d)
    assert stats["mean"] < 0.01 and stats["max"] == 1.5
    for where in ("gpu", "cpu"):
        gates = mod.GATES[where]["agree"]
        assert stats["mean"] <= gates["mean"] and not mod.within(stats, gates)
    assert not mod.within(mod.dlogp_stats(torch.tensor([0.0, float("nan")])), {"max": 1.0})
    assert mod.within(mod.dlogp_stats(torch.full((100,), 0.001)), mod.GATES["cpu"]["packed"])


def test_unknown_trainer_option_is_refused():
    with pytest.raises(SystemExit, match="not a trainer option"):
        _gpu_check().main(["--cpu", "--steps", "1", "--set", "no_such_option=1"])


def test_the_checks_cuda_branches_run_with_torch_cuda_stood_in(monkeypatch, tiny_model_dir):
    """On a GPU the check reads CUDA's peak-memory counters, resets them between parts, and packs
    the weights on a side stream, synchronising the device before it compares checksums: here
    with torch.cuda's functions as recorders (tests/cuda_standins.py), on a CPU trainer."""
    from cuda_standins import CudaRecorder
    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import PolicyTrainer

    mod = _gpu_check()
    rec = CudaRecorder(allocated=3 * 2**30, reserved=5 * 2**30).install(monkeypatch)
    assert mod._mem("cuda") == {"max_allocated_gib": 3.0, "max_reserved_gib": 5.0}
    assert mod._mem("cpu") == {"max_allocated_gib": None, "max_reserved_gib": None}
    rec.events.clear()
    mod._reset_peak("cuda")
    assert rec.events == ["synchronize", "empty_cache", "reset_peak_memory_stats"]
    t = PolicyTrainer(tiny_model_dir, TrainerConfig(device="cpu", dtype="bfloat16"), max_tokens=8, total_steps=1)
    rec.events.clear()
    s = mod.sync_check(t, "cuda")
    assert s["match"] is True and s["tensors"] > 0
    assert rec.events == ["Stream", "stream.enter", "stream.exit", "synchronize"]   # packed on the side stream


def test_the_fsdp_part_asks_for_a_one_process_nccl_group_on_a_gpu(monkeypatch):
    """On a GPU the fsdp part's group is NCCL, bound to the current CUDA device, of one process
    (the CPU fallback runs the same function over gloo): here up to the group's creation, with
    torch.distributed's init stood in."""
    import types

    import torch
    import torch.distributed as dist

    mod = _gpu_check()
    seen = {}

    class Stop(Exception):
        pass

    def init(backend, **kw):
        seen.update(backend=backend, **kw)
        raise Stop

    monkeypatch.setattr(dist, "init_process_group", init)
    # a fresh gpu-check process has no group yet; this worker may hold one (an in-process vLLM
    # engine of an earlier test initialises a one-process group and keeps it)
    monkeypatch.setattr(dist, "is_initialized", lambda: False)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    with pytest.raises(Stop):
        mod.fsdp_check("model", None, types.SimpleNamespace(device="cuda:0"), [], {})
    assert seen["backend"] == "nccl" and seen["world_size"] == 1 and seen["rank"] == 0
    assert seen["device_id"] == torch.device("cuda", 0) and seen["init_method"].startswith("tcp://127.0.0.1:")
