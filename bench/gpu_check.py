"""GPU acceptance check: does rlvr's training core do on this GPU what the CPU tests say it does?

    python bench/gpu_check.py            # or: make gpu-check
    python bench/gpu_check.py --set max_tokens_per_microbatch=16384 --doc docs/bench/gpucheck.md

Needs torch and transformers only (no vLLM, no Ray, nothing downloaded; with vLLM and Ray
installed it also runs rlvr-train for 3 steps, up to 7 minutes more). With torch and
transformers only it should take about 6 minutes on one H200, within 8 (an estimate, not yet
measured: build ~15 s, generate ~2 min, each trainer load ~15 s, train ~30 s, fsdp ~1.5 min of
which ~20 GB of checkpoint written and read back, packed and packing_speed ~40 s each). A model
with Qwen3-1.7B's dimensions (hidden 2048, 28 layers, 16 heads, 8 KV heads, head_dim 128,
intermediate 6144, vocabulary 151,936, tied embeddings) is built with random weights, saved to
a temporary folder, and then:

1. build: the random model, saved;
2. generate: rlvr's transformers engine (bf16) samples --gen-prompts x --gen-tokens tokens
   with their log-probs (tokens/s, peak memory);
3. trainer: rlvr's trainer (rlvr.train.trainer.PolicyTrainer, bf16 compute, fp32 masters) loads;
4. agree: the trainer scores the engine's tokens on the same weights; |trainer - engine|
   log-prob per token (mean, p99, max, NaNs), each gated, catches alignment, temperature, EOS,
   padding and NaN problems at once (a few misaligned tokens move the max, not the mean);
   distill_identity: the policy as its own top-k teacher (the engine's scores of its samples,
   rlvr.losses.distill_loss against the trainer's log-probs of the same ids): over the whole
   vocabulary kl and jsd about 0; over its top 20, kl equal to -log(top-20 mass);
   fsdp: the trainer's world > 1 path (fully_shard, fp32 reduce, set_requires_gradient_sync,
   DTensor clipping, the full_tensor() gathers of wire_weights, save then load_state) on a
   one-process NCCL group (gloo on the CPU), its log-probs against the one-rank trainer's, and
   the time a 1.7B checkpoint takes to write (save_s);
5. train: the shipped configuration, not a best case: the trainer options of
   configs/qwen3-1.7B-gsm8k.yaml (token budget, mini_batches, loss_type, TIS with behaviour
   log-probs, hence the pi_old pass, gradient checkpointing; --set KEY=VALUE changes one) on
   one FSDP rank's share of its rollout batch (prompts_per_step x n / num_trainers sequences)
   with a realistic length mix (prompts of 60-260 tokens, completions mostly a few hundred
   tokens with a long tail, some cut at max_tokens), padded as the trainer pads; reported:
   the last step's time split (pi_old / forward-backward / optimizer), tokens/s, padded-token
   fraction, MFU, max_memory_allocated and max_memory_reserved, next to rlvr-train --plan's
   estimate of the same;
6. sync: right after the last optimizer step, the weight producer (PolicyTrainer.wire_weights,
   then packing on a side stream, as vLLM's NCCL producer does) is timed, and the checksum of
   what it packed is compared with the checksum of the fp32 master weights cast to bf16 (a
   send that raced the optimizer's kernels would differ);
7. packed: packed micro-batches (train.packing: torch's varlen_attn on CUDA) against padded
   ones, numerically, on the same weights and batch: per-token |dlogp| max and p99, the loss's
   and the gradient norm's relative difference, the cosine of the flattened gradients; negative
   controls: one segment spanning each packed row (must miss the gates) and, on CUDA, the
   causal window handed to varlen_attn as a list (what the kernel makes of it, reported);
8. packing_speed: one trainer step padded and one packed on a GSM8K + MATH length mix
   (bench/bench_packing.py), tokens/s of each;
9. smoke (where vLLM and Ray are installed): a 3-step rlvr-train on this one GPU, the engine
   and the trainer sharing it (fractional GPUs, the engine's memory capped by the plan, weights
   through the object store).

Every part runs guarded: an exception or a missed gate is that part's result (with its error),
the other parts still run (those that need it say so). One JSON line per part on stdout, and
appended to --out FILE, flushed as the part ends; then a summary line (which parts passed,
failed, were skipped); progress on stderr. Exit 0 when no part failed. Without a GPU the same
code runs on CPU at tiny dimensions (the fallback the test suite runs; its figures say nothing
about a GPU; the window-list control and the smoke run are skipped there).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import json
import math
import os
import platform
import random
import re
import subprocess
import sys
import tempfile
import time
import warnings

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
SHIPPED = os.path.join(ROOT, "configs", "qwen3-1.7B-gsm8k.yaml")

# Qwen3-1.7B(-Base)'s config.json, weights random.
QWEN3_1_7B = dict(hidden_size=2048, num_hidden_layers=28, num_attention_heads=16, num_key_value_heads=8,
                  head_dim=128, intermediate_size=6144, vocab_size=151936, tie_word_embeddings=True,
                  max_position_embeddings=40960, rope_theta=1000000.0, rms_norm_eps=1e-6)
# The CPU fallback: the same architecture at toy size.
TINY = dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
            intermediate_size=128, vocab_size=1024, tie_word_embeddings=True, max_position_embeddings=2048,
            rope_theta=1000000.0, rms_norm_eps=1e-6)
# Dense bf16 peak of the GPUs these checks meet, for MFU (None: not reported).
PEAK_BF16_TFLOPS = {"H100": 989.0, "H200": 989.0, "H800": 989.0, "A100": 312.0, "L40S": 362.0, "A10": 125.0}


def log(msg: str) -> None:
    print(f"gpu-check: {msg}", file=sys.stderr, flush=True)


def build_model(out_dir: str, dims: dict, device: str) -> int:
    """A random Qwen3 of `dims` saved as bf16 safetensors with rlvr's offline tokenizer;
    returns its parameter count. Initialised on `device` (fast on a GPU)."""
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlvr.tiny import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen3Config(**dims, bos_token_id=None, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(cfg).to(torch.bfloat16)
    n = sum(p.numel() for p in model.parameters())
    model.save_pretrained(out_dir, safe_serialization=True)
    tok.save_pretrained(out_dir)
    del model
    return n


def _mem(device: str) -> dict:
    import torch

    if not device.startswith("cuda"):
        return {"max_allocated_gib": None, "max_reserved_gib": None}
    return {"max_allocated_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2),
            "max_reserved_gib": round(torch.cuda.max_memory_reserved() / 2**30, 2)}


def _reset_peak(device: str) -> None:
    import torch

    gc.collect()   # what the part before left, its optimizer state included
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _value(text: str):
    low = text.lower()
    if low in ("true", "false"):
        return low == "true"
    if low in ("null", "none"):
        return None
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def shipped_config(device: str, sets: dict):
    """The run config whose trainer is checked: configs/qwen3-1.7B-gsm8k.yaml, or its tiny
    cousin for the CPU fallback, with the --set trainer options."""
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig

    cfg = load_config(TrainConfig, SHIPPED)
    gpu = device.startswith("cuda")
    if not gpu:   # the CPU fallback: the same options at toy lengths
        cfg.rollout.max_tokens, cfg.rollout.max_model_len = 24, 64
        cfg.train.max_tokens_per_microbatch = 256
        cfg.train.gradient_checkpointing = False
    cfg.train = dataclasses.replace(cfg.train, device=device, dtype="bfloat16", **sets)
    return cfg


def length_mix(n: int, max_tokens: int, vocab: int, seed: int = 0):
    """n (prompt, completion) token lists with a realistic length mix: prompts of 60-260
    tokens (a templated GSM8K/MATH question), completions log-normal around a quarter of
    max_tokens with a long tail, one in ten cut at max_tokens (lengths scaled down with
    max_tokens for the CPU fallback)."""
    rng = random.Random(seed)
    scale = max_tokens / 1024
    out = []
    for _ in range(n):
        p = max(2, int(rng.randint(60, 260) * scale))
        c = max_tokens if rng.random() < 0.1 else max(1, min(max_tokens, int(rng.lognormvariate(math.log(256), 0.6) * scale)))
        out.append(([rng.randrange(vocab) for _ in range(p)], [rng.randrange(vocab) for _ in range(c)]))
    return out


def flops_per_token(dims: dict, seq: float) -> float:
    """Training FLOPs per token (forward + backward, no recomputation counted): 6 x the
    parameters a token's matmuls touch (layers and the output layer) + attention's 12 x L x
    heads x head_dim x sequence length (PaLM's accounting)."""
    h, L, i = dims["hidden_size"], dims["num_hidden_layers"], dims["intermediate_size"]
    q = dims["num_attention_heads"] * dims["head_dim"]
    kv = dims["num_key_value_heads"] * dims["head_dim"]
    per_layer = h * q + 2 * h * kv + q * h + 3 * h * i
    n = L * per_layer + dims["vocab_size"] * h
    return 6 * n + 12 * L * q * seq


def generate_check(path: str, device: str, prompts: int, new_tokens: int) -> tuple[dict, object, list]:
    """rlvr's transformers engine: prompts x new_tokens sampled with log-probs. Returns the
    figures, the engine (closed by the caller) and the samples [(prompt ids, sample)]."""
    from rlvr.engines import EngineOptions, Sampling, create

    _reset_peak(device)
    t0 = time.monotonic()
    eng = create("hf", path, EngineOptions(dtype="bfloat16", device=device.split(":")[0], max_model_len=4096))
    load_s = time.monotonic() - t0
    ids = [eng.encode(f"Question {i}: what is {i} + {i}?") for i in range(prompts)]
    # a random model rarely says end-of-sequence; every prompt runs its new tokens
    t0 = time.monotonic()
    res = eng.generate(ids, Sampling(n=1, temperature=1.0, max_tokens=new_tokens, seed=0, logprobs=True))
    _sync(device)
    dt = time.monotonic() - t0
    n = sum(len(s.token_ids) for r in res for s in r.samples)
    log(f"generated {n} tokens in {dt:.2f}s")
    out = {"load_s": round(load_s, 2), "prompts": prompts, "max_tokens": new_tokens, "tokens": n,
           "seconds": round(dt, 3), "tokens_per_s": round(n / dt, 1), "peak_mem_gib": _mem(device)["max_allocated_gib"]}
    return out, eng, [(p, r.samples[0]) for p, r in zip(ids, res)]


def agreement(trainer, samples: list) -> dict:
    """|trainer - engine| log-prob of every sampled token, same weights: the trainer scores the
    engine's tokens the way it trains on them (padded micro-batch, chunked log-softmax)."""
    import torch

    prompts = [p for p, _ in samples]
    comps = [list(s.token_ids) for _, s in samples]
    with torch.no_grad():
        lp, _, mask = trainer._logprobs(trainer.model, prompts, comps)
    diffs = []
    for j, (_, s) in enumerate(samples):
        mine = lp[j, :len(comps[j])].float().cpu()
        theirs = torch.tensor(s.logprobs, dtype=torch.float32)
        diffs.append((mine - theirs).abs())
    return dlogp_stats(torch.cat(diffs))


def train_check(trainer, cfg, dims: dict, device: str, sequences: int, steps: int) -> dict:
    """--steps PolicyTrainer.step calls on one rank's share of a shipped rollout batch."""
    from rlvr.train.plan import ModelShape, trainer_memory

    pairs = length_mix(sequences, cfg.rollout.max_tokens, dims["vocab_size"])
    batch = _rollout_batch(pairs, dims["vocab_size"], seed=1)
    real = sum(len(p) + len(c) for p, c in pairs)
    _reset_peak(device)
    times, metrics = [], {}
    for k in range(steps):
        t0 = time.monotonic()
        metrics = trainer.step(batch)
        _sync(device)
        times.append(time.monotonic() - t0)
        log(f"step {k + 1}/{steps}: {times[-1]:.2f}s (pi_old {metrics['time/trainer_pi_old_s']:.2f}s, forward-backward "
            f"{metrics['time/trainer_fwd_bwd_s']:.2f}s, optimizer {metrics['time/trainer_optimizer_s']:.2f}s), "
            f"loss {metrics.get('loss/policy', float('nan')):.4f}")
    t = cfg.train
    seq = real / len(pairs)
    out = {"steps": steps, "sequences": sequences, "tokens_per_step": real,
           "step_s": round(times[-1], 3), "tokens_per_s": round(real / times[-1], 1),
           "pi_old_s": round(metrics["time/trainer_pi_old_s"], 3),
           "fwd_bwd_s": round(metrics["time/trainer_fwd_bwd_s"], 3),
           "optimizer_s": round(metrics["time/trainer_optimizer_s"], 3),
           "padded_frac": round(metrics["train/padded_frac"], 4), "updates": metrics["train/updates"],
           **_mem(device), "version": trainer.version,
           "compute_dtype": str(trainer.dtype).replace("torch.", ""),
           "master_dtype": ",".join(sorted({str(p.dtype).replace("torch.", "") for p in
                                            (trainer.master.params if trainer.master else trainer.model.parameters())})),
           "grad_norm": float(metrics.get("grad/norm", float("nan"))),
           "loss": float(metrics.get("loss/policy", float("nan"))),
           "options": {k: getattr(t, k) for k in ("max_tokens_per_microbatch", "mini_batches", "gradient_checkpointing",
                                                  "logprob_chunk_size")} | {"loss_type": t.loss.loss_type,
                                                                            "tis_cap": t.loss.tis_cap}}
    out["flops_per_token"] = flops_per_token(dims, seq)
    shape = ModelShape.from_config(dims)
    est = trainer_memory(shape, max(t.max_tokens_per_microbatch or 0, cfg.rollout.max_model_len), world=1,
                         compute_bytes=2, gradient_checkpointing=t.gradient_checkpointing,
                         logprob_chunk=t.logprob_chunk_size, reference=t.loss.beta > 0, on_gpu=device.startswith("cuda"))
    out["plan_estimate_gib"] = est["est_peak_gib"]
    out["plan_allocated_gib"] = est["allocated_gib"]
    return out


def sync_check(trainer, device: str) -> dict:
    """The weight producer right after an optimizer step: PolicyTrainer.wire_weights (which
    synchronises), then packing into buckets on a side stream as vLLM's NCCL producer does;
    the checksum of what was packed against the fp32 masters cast to bf16 (computed after a
    full synchronisation)."""
    import torch

    from rlvr.engines.weights import Checksum, checksum

    t0 = time.monotonic()
    pairs = trainer.wire_weights()
    t_wire = time.monotonic() - t0
    packed = Checksum()
    stream = torch.cuda.Stream() if device.startswith("cuda") else None
    t0 = time.monotonic()
    ctx = torch.cuda.stream(stream) if stream is not None else _null()
    with ctx:
        bucket, names, size = [], [], 0
        for name, t in pairs:
            packed.add(name, t)
            bucket.append(t.contiguous().view(-1).view(torch.uint8))
            size += bucket[-1].numel()
            if size > 512 * 2**20:
                torch.cat(bucket)
                bucket, size = [], 0
        if bucket:
            torch.cat(bucket)
    value = packed.value()
    t_pack = time.monotonic() - t0
    _sync(device)
    if trainer.master is not None:
        names = dict(trainer.model.named_parameters())
        want = checksum([(n, trainer.master.by_param[id(names[n])].to(trainer.dtype)) for n, _ in pairs])
    else:
        want = checksum([(n, p.detach().to(trainer.dtype)) for n, p in trainer.model.named_parameters()
                         if n in dict(pairs)])
    return {"wire_s": round(t_wire, 3), "pack_s": round(t_pack, 3), "tensors": len(pairs),
            "bytes": sum(t.numel() * t.element_size() for _, t in pairs), "checksum_sent": value,
            "checksum_weights": want, "match": value == want}


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def smoke_check(path: str, timeout_s: float) -> dict:
    """A 3-step rlvr-train on this GPU: one vLLM engine and the trainer sharing it (0.5 GPU
    each: the plan caps the engine's memory and picks the object store), the toy task."""
    import yaml

    with tempfile.TemporaryDirectory(prefix="rlvr-gpu-smoke-") as tmp:
        cfg = {"model": {"path": path},
               "data": {"dataset": "toy"},
               "rollout": {"engine": "vllm", "num_engines": 1, "prompts_per_step": 8, "n": 4, "max_tokens": 32,
                           "max_model_len": 512, "dtype": "bfloat16", "engine_num_gpus": 0.5,
                           "gpu_memory_utilization": 0.5},
               "verify": {"jobs": 1, "verifier_config": {"math_mode": "flexible-extract"}},
               "train": {"steps": 3, "lr": 1.0e-6, "max_tokens_per_microbatch": 4096, "trainer_num_gpus": 0.5,
                         "gradient_checkpointing": True, "dtype": "bfloat16"},
               "sync": {"method": "auto"}, "checkpoint": {"every": 0}}
        cpath = os.path.join(tmp, "smoke.yaml")
        with open(cpath, "w") as fh:
            yaml.safe_dump(cfg, fh)
        run_dir = os.path.join(tmp, "run")
        t0 = time.monotonic()
        p = subprocess.run([sys.executable, "-m", "rlvr.commands.train", cpath, "--run-dir", run_dir],
                           capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                           env=dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")))
        dt = time.monotonic() - t0
        rows = []
        trace = os.path.join(run_dir, "traces", "trace.jsonl")
        if os.path.exists(trace):
            rows = [json.loads(ln) for ln in open(trace)]
        sync = [ln for ln in p.stderr.splitlines() if "weight sync:" in ln]
        return {"ok": p.returncode == 0 and len(rows) == 3, "returncode": p.returncode, "seconds": round(dt, 1),
                "steps": len(rows), "sync": sync[-1].split("weight sync: ", 1)[1] if sync else None,
                "engine_vs_trainer": [r.get("logprob/engine_vs_trainer_abs_diff") for r in rows],
                "error": None if p.returncode == 0 else p.stderr.strip().splitlines()[-1:]}


# Gates on |dlogp| per token (trainer vs engine, packed vs padded): bf16 on a GPU, bf16 on the CPU
# fallback's tiny model. A control that must fail must exceed them.
GATES = {"gpu": {"agree": {"mean": 0.1, "p99": 0.3, "max": 1.0},
                 "packed": {"p99": 0.05, "max": 0.25, "loss_rel": 0.01, "grad_norm_rel": 0.02, "grad_cosine": 0.99},
                 "fsdp": {"max": 0.05, "restored_max": 1e-5},
                 "distill": {"kl": 0.01, "jsd": 0.01, "kl_topk_offset": 0.05}},
         "cpu": {"agree": {"mean": 0.05, "p99": 0.1, "max": 0.25},
                 "packed": {"p99": 0.01, "max": 0.03, "loss_rel": 0.01, "grad_norm_rel": 0.02, "grad_cosine": 0.99},
                 "fsdp": {"max": 0.01, "restored_max": 1e-5},
                 "distill": {"kl": 0.01, "jsd": 0.01, "kl_topk_offset": 0.05}}}


class Parts:
    """Each part of the check runs guarded: its failure (an exception, a gate missed) is its own
    result, never the others' loss. One JSON line per part on stdout (and appended to `out`),
    flushed as the part ends; `summary()` is the closing line."""

    def __init__(self, out_path: str | None):
        self.results: dict[str, dict] = {}
        self.fh = open(out_path, "a") if out_path else None

    def emit(self, row: dict) -> None:
        line = json.dumps(row, default=str)
        print(line, flush=True)
        if self.fh is not None:
            self.fh.write(line + "\n")
            self.fh.flush()

    def run(self, name: str, fn, needs: tuple[str, ...] = (), skip: str | None = None) -> dict | None:
        """fn() -> the part's figures (an "ok" key: its gates; absent, it passed by running).
        Returns the figures, or None when the part failed or did not run."""
        missing = [n for n in needs if not self.results.get(n, {}).get("ok")]
        t0 = time.monotonic()
        figures: dict | None = None
        if skip is not None:
            row = {"part": name, "ok": None, "skipped": skip}
        elif missing:
            row = {"part": name, "ok": False, "error": f"not run: needs {', '.join(missing)}, which did not pass"}
        else:
            try:
                figures = fn()
                row = {"part": name, "ok": bool(figures.get("ok", True)), **{k: v for k, v in figures.items()
                                                                            if k != "ok"}}
            except Exception as e:  # noqa: BLE001 - one part's failure is its own result
                import traceback

                row = {"part": name, "ok": False, "error": f"{type(e).__name__}: {e}",
                       "traceback": traceback.format_exc().strip().splitlines()[-6:]}
                log(f"{name} FAILED: {type(e).__name__}: {e}")
        row["seconds"] = round(time.monotonic() - t0, 2)
        self.results[name] = row
        self.emit(row)
        return figures if row["ok"] else None

    def summary(self, head: dict) -> dict:
        rows = self.results.values()
        out = {"check": "gpu", "summary": True, **head,
               "passed": [r["part"] for r in rows if r["ok"] is True],
               "failed": [r["part"] for r in rows if r["ok"] is False],
               "skipped": [r["part"] for r in rows if r["ok"] is None]}
        out["ok"] = not out["failed"]
        self.emit(out)
        if self.fh is not None:
            self.fh.close()
        return out


def dlogp_stats(d) -> dict:
    """mean, p99 and max of per-token |dlogp| (a 1-D tensor), NaNs counted apart."""
    import torch

    d = d.detach().float().abs().cpu()
    nan = int(torch.isnan(d).sum())
    d = d[~torch.isnan(d)]
    if not d.numel():
        return {"tokens": nan, "nan": nan, "mean": None, "p99": None, "max": None}
    return {"tokens": int(d.numel()) + nan, "nan": nan, "mean": round(float(d.mean()), 5),
            "p99": round(float(torch.quantile(d, 0.99)), 5), "max": round(float(d.max()), 5)}


def within(stats: dict, gates: dict) -> bool:
    """Every gated figure of `stats` present, finite and at most its gate; no NaN."""
    return stats.get("nan", 0) == 0 and all(stats.get(k) is not None and stats[k] <= g for k, g in gates.items()
                                            if k in ("mean", "p99", "max"))


def agree_check(trainer, samples: list, gates: dict) -> dict:
    out = agreement(trainer, samples)
    out["gates"] = gates
    out["ok"] = within(out, gates)
    return out


def distill_identity_check(engine, trainer, samples: list, gates: dict, tokens: int = 64) -> dict:
    """The policy as its own top-k teacher: the engine scores the policy's own samples (its
    top-k at each position, the same weights) and rlvr.losses.distill_loss compares them with
    the trainer's log-probs of those ids, as train.distill does. With k the whole vocabulary
    teacher and student are one distribution: kl and jsd about 0. With k = 20 the teacher is
    its top 20 renormalised, so kl is -log(top-20 mass) exactly, checked against it. Two
    sequences of at most `tokens` tokens ([N, L, V] teacher arrays stay small)."""
    import numpy as np
    import torch

    from rlvr.losses import distill_loss

    vocab = int(trainer.model.get_output_embeddings().weight.shape[0])
    prompts = [p for p, _ in samples[:2]]
    comps = [list(s.token_ids)[:tokens] for _, s in samples[:2]]
    out: dict = {"sequences": len(comps), "tokens": sum(map(len, comps)), "gates": gates}
    for name, k in (("full_vocab", vocab), ("top20", 20)):
        top = engine.score(prompts, comps, top_k=k)
        n, L = len(comps), max(map(len, comps))
        ids = torch.zeros((n, L, k), dtype=torch.long)
        t_lp = torch.full((n, L, k), float("-inf"))
        t_tok = torch.zeros((n, L))
        for i in range(n):
            a, b, c = top.rows(i)
            ids[i, :len(a)] = torch.from_numpy(a.astype(np.int64))
            t_lp[i, :len(a)] = torch.from_numpy(np.asarray(b, dtype=np.float32))
            t_tok[i, :len(c)] = torch.from_numpy(np.asarray(c, dtype=np.float32))
        with torch.no_grad():
            lp, _, mask = trainer._logprobs(trainer.model, prompts, comps, temperature=1.0, extra_ids=ids)
            payload = {"target_logprobs": lp[..., 1:], "teacher_logprobs": t_lp.to(lp.device),
                       "teacher_token_logprobs": t_tok.to(lp.device)}
            count = float(mask.sum())
            row = {"k": k}
            for loss in ("kl", "jsd"):
                _, m = distill_loss(lp[..., 0], mask, count, payload, loss=loss, beta=0.5)
                row[loss] = round(m[f"distill/{loss}"], 6)
            mass = torch.logsumexp(t_lp.to(lp.device), -1)                 # log of the teacher's top-k mass
            row["expected_kl"] = round(float((-mass * mask).sum() / count), 6)
            row["topk_mass"] = round(m["distill/teacher_topk_mass"], 6)
        out[name] = row
        del ids, t_lp, payload, lp
    fv, t20 = out["full_vocab"], out["top20"]
    out["ok"] = abs(fv["kl"]) <= gates["kl"] and abs(fv["jsd"]) <= gates["jsd"] \
        and abs(t20["kl"] - t20["expected_kl"]) <= gates["kl_topk_offset"] and t20["jsd"] >= 0
    return out


def fsdp_check(path: str, cfg, trainer, samples: list, gates: dict) -> dict:
    """The trainer's FSDP path (what world > 1 runs: fully_shard with an fp32 gradient reduce,
    set_requires_gradient_sync over micro-batches, gradient clipping of DTensors, the
    full_tensor() gathers of wire_weights and checkpoints, save then load_state) on a
    one-process group: NCCL on a GPU, gloo on the CPU. The trainer is told world 2 (so every
    world > 1 branch runs) on a group of one: it takes rank 0's share of each mini-batch.
    Gated: its log-probs equal the one-rank trainer's (`trainer`, the same weights) within
    bf16 noise; the step's gradient norm is finite; what wire_weights sends equals the
    gathered state; a trainer built on the saved checkpoint, after load_state, has the saved
    version, optimizer state and log-probs. save_s: the checkpoint's write (weights in fp32,
    optimizer shard, trainer_state.pt)."""
    import inspect
    import socket

    import torch
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule

    from rlvr.train.trainer import PolicyTrainer

    dev = trainer.device
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    nccl = dev.startswith("cuda")
    kw = {"device_id": torch.device("cuda", torch.cuda.current_device())} if nccl else {}
    owned = not dist.is_initialized()   # a host process's own one-process group is used as it is
    if owned:
        dist.init_process_group("nccl" if nccl else "gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                                world_size=1, **kw)
    elif dist.get_world_size() != 1:
        raise RuntimeError(f"a process group of {dist.get_world_size()} ranks exists: the fsdp part runs one process")
    out: dict = {"backend": dist.get_backend(), "gates": gates}
    try:
        import torch.distributed.fsdp._fully_shard._fsdp_param_group as fpg

        reduce_dtypes: list = []
        real_reduce = fpg.foreach_reduce

        sig = inspect.signature(real_reduce)

        def counted(*a, **k):
            args = sig.bind(*a, **k).arguments
            reduce_dtypes.append(str(args["reduce_dtype"] or args["unsharded_grads"][0].dtype))
            return real_reduce(*a, **k)
        fpg.foreach_reduce = counted
        tr = PolicyTrainer(path, cfg.train, max_tokens=cfg.rollout.max_tokens, total_steps=2, temperature=1.0,
                           rank=0, world=2)
        out["fsdp_modules"] = sum(isinstance(m, FSDPModule) for m in tr.model.modules())
        prompts = [p for p, _ in samples]
        comps = [list(s.token_ids) for _, s in samples]
        with torch.no_grad():
            mine, _, mask = tr._logprobs(tr.model, prompts, comps)
            theirs, _, _ = trainer._logprobs(trainer.model, prompts, comps)
        out["vs_one_rank"] = dlogp_stats((mine - theirs).abs()[mask.bool()].float().cpu())
        syncs: list = []
        real_sync = tr.model.set_requires_gradient_sync

        def sync_spy(flag, *a, **k):
            syncs.append(bool(flag))
            return real_sync(flag, *a, **k)
        tr.model.set_requires_gradient_sync = sync_spy
        batch = _rollout_batch(list(zip(prompts, comps)), int(tr.model.config.vocab_size), seed=3)
        m = tr.step(batch)
        del tr.model.set_requires_gradient_sync
        fpg.foreach_reduce = real_reduce
        out.update(grad_norm=m["grad/norm"], gradient_sync_calls=len(syncs), synced=sum(syncs),
                   reduce_dtypes=sorted(set(reduce_dtypes)), version=tr.version)
        pairs = tr.wire_weights()
        full = tr.full_state_dict()
        out["wire_tensors"] = len(pairs)
        out["wire_equal"] = all(torch.equal(w.cpu(), full[n].to(w.dtype).cpu()) for n, w in pairs)
        del pairs, full
        with tempfile.TemporaryDirectory(prefix="rlvr-gpu-check-fsdp-") as ck:
            _sync(dev)
            t0 = time.monotonic()
            tr.save(ck, {"step": tr.version})
            out["save_s"] = round(time.monotonic() - t0, 2)
            out["checkpoint_gib"] = round(sum(os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck)) / 2**30, 3)
            with torch.no_grad():
                before, _, _ = tr._logprobs(tr.model, prompts, comps)
            opt_before = [v.to_local().clone() if hasattr(v, "to_local") else v.clone()
                          for st in tr.opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim()]
            del tr
            gc.collect()
            back = PolicyTrainer(ck, cfg.train, max_tokens=cfg.rollout.max_tokens, total_steps=2, temperature=1.0,
                                 rank=0, world=2)
            state = back.load_state(ck)
            opt_after = [v.to_local() if hasattr(v, "to_local") else v
                         for st in back.opt.state.values() for v in st.values() if torch.is_tensor(v) and v.dim()]
            with torch.no_grad():
                after, _, _ = back._logprobs(back.model, prompts, comps)
            out["restored"] = {"version": back.version, "state_step": state.get("step"),
                               "optimizer_tensors": len(opt_after),
                               "optimizer_equal": len(opt_before) == len(opt_after) > 0 and all(
                                   torch.equal(a, b) for a, b in zip(opt_before, opt_after)),
                               "max_dlogp": round(float((after - before).abs()[mask.bool()].max()), 6)}
            del back
        r = out["restored"]
        out["ok"] = out["fsdp_modules"] > 1 and out["vs_one_rank"]["max"] <= gates["max"] \
            and math.isfinite(out["grad_norm"]) and out["grad_norm"] > 0 and 0 < out["synced"] < len(syncs) + 1 \
            and out["wire_equal"] and r["version"] == out["version"] and r["optimizer_equal"] \
            and r["max_dlogp"] <= gates["restored_max"]
    finally:
        if owned:
            dist.destroy_process_group()
        gc.collect()
    return out


def _rollout_batch(pairs: list, vocab: int, seed: int):
    """A Batch of (prompt, completion) pairs: random advantages, behaviour log-probs of a
    near-uniform random model (about -log V), as an engine would report them."""
    from rlvr.train.trainer import Batch

    rng = random.Random(seed)
    return Batch(prompt_ids=[p for p, _ in pairs], completion_ids=[c for _, c in pairs],
                 advantages=[rng.choice([-1.0, 1.0]) * rng.random() for _ in pairs],
                 behaviour_logprobs=[[-math.log(vocab) + rng.gauss(0, 0.05) for _ in c] for _, c in pairs],
                 samples_per_batch=len(pairs))


def packed_check(path: str, cfg, dims: dict, device: str, sequences: int, gates: dict) -> dict:
    """Packed (train.packing) against padded micro-batches on one trainer, the same weights and
    batch: per-token |dlogp| (max, p99), the loss's and the gradient norm's relative difference,
    the cosine of the flattened gradients. Two negative controls, measured against the same
    gates: one segment spanning each packed row (attention across sequences), which the gates
    must catch; and, where the kernel runs (CUDA, bf16), torch's varlen_attn given its causal
    window as a list (torch's wrapper compares it with == to the tuple (-1, 0), so it tells the
    kernel is_causal False), reported as caught or not: what FlashAttention makes of it."""
    import contextlib

    import torch

    from rlvr.train import packing
    from rlvr.train.trainer import PolicyTrainer

    pairs = length_mix(sequences, cfg.rollout.max_tokens, dims["vocab_size"], seed=2)
    batch = _rollout_batch(pairs, dims["vocab_size"], seed=2)
    lengths = [len(p) + len(c) for p, c in pairs]
    budget = max(max(lengths), sum(lengths) // 2)            # two or three packed rows, several sequences each
    tc = dataclasses.replace(cfg.train, mini_batches=1, epochs=1, packing=False, micro_batch_size=4,
                             max_tokens_per_microbatch=budget)
    t = PolicyTrainer(path, tc, max_tokens=cfg.rollout.max_tokens, total_steps=4, temperature=1.0)
    t.opt.step = lambda: None                                # gradients compared, weights left as they are
    warnings.filterwarnings("ignore", message=re.escape("Seems like `optimizer.step()` has been overridden"))
    kernel = packing._varlen_kernel() if device.startswith("cuda") else None
    calls = []

    def counted(*a, **kw):
        calls.append(1)
        return kernel(*a, **kw)

    @contextlib.contextmanager
    def patched(name, value):
        before = getattr(packing, name)
        setattr(packing, name, value)
        try:
            yield
        finally:
            setattr(packing, name, before)

    def spanning(p, dev):                                     # negative control: one segment per row
        kw = real_forward_kwargs(p, dev)
        n = p.input_ids.shape[1]
        kw["cu_seq_lens_q"] = kw["cu_seq_lens_k"] = torch.tensor([0, n], dtype=torch.int32, device=dev)
        kw["max_length_q"] = kw["max_length_k"] = n
        return kw

    def listed(*a, **kw):                                     # negative control: the window as a list
        kw["window_size"] = list(kw.get("window_size", (-1, -1)))
        return counted(*a, **kw)

    real_forward_kwargs = packing.forward_kwargs
    prompts, comps = batch.prompt_ids, batch.completion_ids

    def logprobs(packed: bool):
        t.cfg = dataclasses.replace(tc, packing=packed)
        with torch.no_grad():
            lp, _, mask = t._logprobs(t.model, prompts, comps)
        return lp.float()[mask.bool()]

    def stepped(packed: bool):
        t.cfg = dataclasses.replace(tc, packing=packed)
        m = t.step(batch)
        params = t.master.params if t.master is not None else list(t.model.parameters())
        g = torch.cat([p.grad.detach().float().flatten() for p in params if p.grad is not None])
        return m, g

    kctx = patched("_varlen_kernel", lambda: counted) if kernel is not None else contextlib.nullcontext()
    with kctx:
        lp_pad, (m_pad, g_pad) = logprobs(False), stepped(False)
        lp_pack, (m_pack, g_pack) = logprobs(True), stepped(True)
    out: dict = {"sequences": sequences, "tokens": sum(lengths), "budget": budget,
                 "kernel": "torch varlen_attn" if kernel is not None else "scaled_dot_product_attention per sequence",
                 "kernel_calls": len(calls), "gates": gates}
    out["dlogp"] = dlogp_stats(lp_pack - lp_pad)
    rel = lambda a, b: abs(a - b) / max(abs(b), 1e-12)   # noqa: E731
    out["loss_padded"], out["loss_packed"] = m_pad["loss/policy"], m_pack["loss/policy"]
    out["loss_rel_diff"] = round(rel(m_pack["loss/policy"], m_pad["loss/policy"]), 6)
    out["grad_norm_padded"], out["grad_norm_packed"] = m_pad["grad/norm"], m_pack["grad/norm"]
    out["grad_norm_rel_diff"] = round(rel(m_pack["grad/norm"], m_pad["grad/norm"]), 6)
    out["grad_cosine"] = round(float(torch.nn.functional.cosine_similarity(g_pack, g_pad, dim=0)), 6)
    del g_pad, g_pack
    controls: dict = {}
    with patched("forward_kwargs", spanning):
        controls["one_segment_per_row"] = dlogp_stats(logprobs(True) - lp_pad)
    if kernel is not None:
        with patched("_varlen_kernel", lambda: listed):
            controls["window_as_list"] = dlogp_stats(logprobs(True) - lp_pad)
    else:
        controls["window_as_list"] = {"skipped": "torch's varlen_attn (FlashAttention) runs on CUDA in bf16/fp16 "
                                                 "only; here the per-sequence path has no window"}
    for c in controls.values():
        if "skipped" not in c:
            c["caught"] = not within(c, gates)
    # Attention across sequences must be seen by the gates, or they are too loose to mean anything.
    # The window list is a finding, not a gate: torch's wrapper then tells the kernel is_causal False
    # with the window (-1, 0), and FlashAttention-2 derives causality from the window itself (left <
    # 0, right == 0), so it probably masks causally anyway; this run measures it (rlvr passes the
    # tuple either way: tests/test_packing.py).
    controls["one_segment_per_row"]["must_be_caught"] = True
    controls["window_as_list"]["must_be_caught"] = False
    out["controls"] = controls
    out["ok"] = bool(within(out["dlogp"], gates) and out["loss_rel_diff"] <= gates["loss_rel"]
                     and out["grad_norm_rel_diff"] <= gates["grad_norm_rel"] and out["grad_cosine"] >= gates["grad_cosine"]
                     and (kernel is None or out["kernel_calls"] > 0) and controls["one_segment_per_row"]["caught"])
    del t
    gc.collect()
    return out


def _tp_rank(rank: int, world: int, port: int, path: str, out: str) -> None:
    """One NCCL rank of tp_step_check: a TP step of `world` ranks (1 x world mesh), timed."""
    import torch
    import torch.distributed as dist

    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import Batch, PolicyTrainer

    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t = PolicyTrainer(path, TrainerConfig(tensor_parallel=world, micro_batch_size=4, device="cuda"), max_tokens=256,
                      total_steps=3, rank=rank, world=world)
    g = torch.Generator().manual_seed(0)
    prompts = [torch.randint(10, 1000, (128,), generator=g).tolist() for _ in range(8)]
    comps = [torch.randint(10, 1000, (256,), generator=g).tolist() for _ in range(8)]
    batch = Batch(prompts, comps, [1.0, -1.0] * 4, None, None)
    t.step(batch)                                   # warm-up
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.synchronize()
    t0 = time.monotonic()
    t.step(batch)
    torch.cuda.synchronize()
    if rank == 0:
        with open(out, "w") as fh:
            json.dump({"step_s": round(time.monotonic() - t0, 3), "tensor_parallel": world,
                       "peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)}, fh)
    dist.destroy_process_group()


def tp_step_check(path: str) -> dict:
    """A tensor-parallel trainer step over the GPUs (up to 8, a power of two dividing the
    model's heads): its time and rank 0's peak memory (rlvr.train.parallel on NCCL)."""
    import socket

    import torch
    import torch.multiprocessing as mp

    world = 1
    while world * 2 <= min(8, torch.cuda.device_count()):
        world *= 2
    with socket.socket() as sk:
        sk.bind(("127.0.0.1", 0))
        port = sk.getsockname()[1]
    out = os.path.join(tempfile.mkdtemp(), "tp.json")
    mp.spawn(_tp_rank, args=(world, port, path, out), nprocs=world, join=True)
    with open(out) as fh:
        figures = json.load(fh)
    log(f"TP step over {world} GPUs: {figures['step_s']}s, rank 0 peak {figures['peak_gib']} GiB")
    return figures


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="gpu_check.py", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="examples:\n  python bench/gpu_check.py --out gpucheck.jsonl\n"
                                        "  python bench/gpu_check.py --set max_tokens_per_microbatch=16384\n"
                                        "  python bench/gpu_check.py --cpu     # the tiny CPU fallback")
    ap.add_argument("--cpu", action="store_true", help="run the tiny CPU fallback even if a GPU is present")
    ap.add_argument("--sequences", type=int, help="sequences per trainer step (default: one FSDP rank's share of "
                    "the shipped config's rollout batch, 256; CPU fallback 8)")
    ap.add_argument("--steps", type=int, default=2, help="trainer steps; the last one is timed (default 2)")
    ap.add_argument("--gen-prompts", type=int, help="prompts for the engine (default 16; CPU 2)")
    ap.add_argument("--gen-tokens", type=int, help="new tokens per prompt (default 256; CPU 8)")
    ap.add_argument("--packed-sequences", type=int, help="sequences of the packed vs padded comparison "
                    "(default 32; CPU 6)")
    ap.add_argument("--smoke", choices=("auto", "on", "off"), default="auto",
                    help="the 3-step rlvr-train (auto: on a GPU where vLLM and Ray are installed)")
    ap.add_argument("--out", metavar="FILE", help="also append each part's JSON line to FILE as the part ends")
    ap.add_argument("--doc", metavar="FILE", help="also write the figures as a markdown section (e.g. "
                    "docs/bench/gpucheck.md, then python bench/assemble.py)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="a trainer option (rlvr.train.config.TrainerConfig), e.g. mini_batches=1")
    a = ap.parse_args(argv)
    import torch
    import transformers

    sets = {}
    for kv in a.set:
        if "=" not in kv:
            ap.error(f"--set {kv}: expected KEY=VALUE")
        k, v = kv.split("=", 1)
        sets[k.strip().removeprefix("train.")] = _value(v.strip())
    from rlvr.train.config import TrainerConfig

    fields = {f.name for f in dataclasses.fields(TrainerConfig)}
    unknown = sorted(set(sets) - fields)
    if unknown:
        raise SystemExit(f"gpu-check: --set {unknown[0]}: not a trainer option ({', '.join(sorted(fields))})")
    gpu = torch.cuda.is_available() and not a.cpu
    device = "cuda" if gpu else "cpu"
    dims = QWEN3_1_7B if gpu else TINY
    gates = GATES["gpu" if gpu else "cpu"]
    if not gpu:
        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    cfg = shipped_config(device, sets)
    share = cfg.rollout.prompts_per_step * cfg.rollout.n // max(1, cfg.train.num_trainers)
    sequences = a.sequences or (share if gpu else 8)
    t_start = time.monotonic()
    name = torch.cuda.get_device_name(0) if gpu else None
    head: dict = {"device": device, "gpu": name,
                  "fallback": None if gpu else "no CUDA GPU: tiny model on CPU (figures say nothing about a GPU)",
                  "model": {"shape": "Qwen3-1.7B" if gpu else "tiny Qwen3", **{k: dims[k] for k in (
                      "hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim",
                      "intermediate_size", "vocab_size", "tie_word_embeddings")}},
                  "versions": {"python": platform.python_version(), "torch": torch.__version__,
                               "transformers": transformers.__version__,
                               "cuda": torch.version.cuda if gpu else None}}
    from rlvr.train.trainer import PolicyTrainer

    parts = Parts(a.out)
    held: dict = {}          # what one part hands to the next: the engine, its samples, the trainer
    with tempfile.TemporaryDirectory(prefix="rlvr-gpu-check-") as tmp:
        path = os.path.join(tmp, "model")

        def build():
            n = build_model(path, dims, device)
            log(f"built a random {head['model']['shape']} ({n / 1e9:.2f} B parameters)")
            head["model"]["parameters"] = n
            return {"parameters": n}

        def generate():
            figures, held["engine"], held["samples"] = generate_check(path, device, a.gen_prompts or (16 if gpu else 2),
                                                                      a.gen_tokens or (256 if gpu else 8))
            return figures

        def load():
            t0 = time.monotonic()
            held["trainer"] = PolicyTrainer(path, cfg.train, max_tokens=cfg.rollout.max_tokens, total_steps=a.steps,
                                            temperature=1.0)
            _sync(device)
            tr = held["trainer"]
            log(f"trainer loaded on {tr.device} ({tr.dtype} compute, fp32 masters)")
            return {"load_s": round(time.monotonic() - t0, 2), "device": tr.device,
                    "compute_dtype": str(tr.dtype).replace("torch.", "")}

        def agree():
            out = agree_check(held["trainer"], held["samples"], gates["agree"])
            log(f"trainer vs engine log-probs: mean {out['mean']}, p99 {out['p99']}, max {out['max']}, NaN {out['nan']}")
            return out

        def fsdp():
            out = fsdp_check(path, cfg, held["trainer"], held["samples"][:8], gates["fsdp"])
            log(f"FSDP on a one-process {out['backend']} group: log-probs vs one rank max {out['vs_one_rank']['max']}, "
                f"checkpoint saved in {out.get('save_s')}s, restored {out.get('restored')}")
            return out

        def distill():
            out = distill_identity_check(held["engine"], held["trainer"], held["samples"], gates["distill"])
            log(f"self-distillation: full vocabulary kl {out['full_vocab']['kl']}, jsd {out['full_vocab']['jsd']}; "
                f"top-20 kl {out['top20']['kl']} (expected {out['top20']['expected_kl']})")
            return out

        def train():
            out = train_check(held["trainer"], cfg, dims, device, sequences, a.steps)
            peak = next((v for k, v in PEAK_BF16_TFLOPS.items() if name and k in name), None)
            out["mfu"] = round(out["flops_per_token"] * out["tokens_per_s"] / (peak * 1e12), 4) if peak else None
            return out

        def sync():
            out = sync_check(held["trainer"], device)
            log(f"weights out after the step: {out['wire_s']:.3f}s gathered, {out['pack_s']:.3f}s packed, "
                f"checksum {'matches' if out['match'] else 'DIFFERS'}")
            out["ok"] = out["match"]
            return out

        def packed():
            out = packed_check(path, cfg, dims, device, a.packed_sequences or (32 if gpu else 6), gates["packed"])
            log(f"packed vs padded: |dlogp| p99 {out['dlogp']['p99']}, max {out['dlogp']['max']}, grad cosine "
                f"{out['grad_cosine']}; controls caught: "
                f"{[k for k, c in out['controls'].items() if c.get('caught')]}")
            return out

        def speed():
            from bench.bench_packing import packing_check   # padded vs packed on a GSM8K + MATH mix

            out = packing_check(path, device, dims["vocab_size"], 16 if gpu else 4, 1.0 if gpu else 0.02,
                                {k: v for k, v in sets.items() if k not in ("packing", "micro_batch_size")})
            log(f"packed micro-batches: {out['packed_speedup']}x the padded step's tokens/s")
            return out

        smoke = a.smoke == "on" or (a.smoke == "auto" and gpu and _importable("vllm") and _importable("ray"))
        parts.run("build", build)
        parts.run("generate", generate, needs=("build",))
        parts.run("trainer", load, needs=("build",))
        parts.run("agree", agree, needs=("generate", "trainer"))
        parts.run("distill_identity", distill, needs=("generate", "trainer"))
        parts.run("fsdp", fsdp, needs=("generate", "trainer"))
        if held.get("engine") is not None:
            held.pop("engine").close()
        held.pop("samples", None)
        parts.run("train", train, needs=("trainer",))
        parts.run("sync", sync, needs=("train",))
        held.pop("trainer", None)
        _reset_peak(device)
        parts.run("packed", packed, needs=("build",))
        parts.run("packing_speed", speed, needs=("build",))
        parts.run("tp_step", lambda: tp_step_check(path), needs=("build",),
                  skip=None if gpu and _gpu_count() > 1 else "needs more than one GPU")
        parts.run("smoke", lambda: smoke_check(path, 420), needs=("build",),
                  skip=None if smoke else "auto: rlvr-train runs on a GPU where vLLM and Ray are installed")
    import resource

    head["max_rss_gib"] = round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2)  # host memory
    head["total_s"] = round(time.monotonic() - t_start, 1)
    summary = parts.summary(head)
    if a.doc:
        with open(a.doc, "w") as fh:
            fh.write(doc_section(summary, parts.results, argv if argv is not None else sys.argv[1:]))
    return 0 if summary["ok"] else 1


def _gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def _importable(name: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(name) is not None


def doc_section(summary: dict, parts: dict[str, dict], argv: list[str]) -> str:
    """docs/bench/gpucheck.md from one run's part lines and summary (a part that failed or did not
    run says so in its row)."""
    def row(label: str, part: str, text):
        r = parts.get(part) or {"ok": False, "error": "not run"}
        if r["ok"] is None:
            return None
        if r["ok"] is False and "error" in r:
            return f"| {label} | FAILED: {r['error']} |"
        return f"| {label} | {text(r)}{'' if r['ok'] else ' (FAILED its gates)'} |"

    m = summary["model"]
    where = summary["gpu"] or "CPU (fallback: tiny model)"
    t = parts.get("train", {})
    lines = [
        "## GPU acceptance check (bench/gpu_check.py)", "",
        f"Command: `python bench/gpu_check.py {' '.join(argv)}`".rstrip() + f" on {where}, torch "
        f"{summary['versions']['torch']}, transformers {summary['versions']['transformers']}, "
        f"{time.strftime('%Y-%m-%d')}. A random {m['shape']} ({m.get('parameters', 0) / 1e6:,.1f} M parameters, "
        f"vocabulary {m['vocab_size']:,}); rlvr's trainer (bf16 compute, fp32 masters, the shipped options "
        f"{t.get('options', '(train did not run)')}); rlvr's transformers engine for generation. Parts passed: "
        f"{', '.join(summary['passed']) or 'none'}; failed: {', '.join(summary['failed']) or 'none'}.", "",
        "| part | figure |", "|---|---|",
        row(f"trainer step (last of {t['steps']})" if "steps" in t else "trainer step", "train",
            lambda t: f"{t['step_s']:.2f} s: pi_old {t['pi_old_s']:.2f} s, forward-backward {t['fwd_bwd_s']:.2f} s, "
                      f"optimizer {t['optimizer_s']:.2f} s; {t['tokens_per_s']:,.0f} tokens/s ({t['sequences']} "
                      f"sequences, {t['tokens_per_step']:,} tokens, {t['padded_frac']:.0%} padding); MFU "
                      f"{t['mfu'] if t['mfu'] is not None else 'n/a'}"),
        row("trainer memory", "train",
            lambda t: f"max_memory_allocated {t['max_allocated_gib']} GiB, max_memory_reserved "
                      f"{t['max_reserved_gib']} GiB; rlvr-train --plan's estimate {t['plan_estimate_gib']} GiB "
                      f"({t['plan_allocated_gib']} GiB before allocator overhead)"),
        row("trainer vs engine log-probs, same weights", "agree",
            lambda a: f"mean {a['mean']}, p99 {a['p99']}, max {a['max']} over {a['tokens']} tokens, {a['nan']} NaN "
                      f"(gates {a['gates']})"),
        row("weights out after the step", "sync",
            lambda s: f"gathered {s['wire_s']:.3f} s, packed {s['pack_s']:.3f} s ({s['bytes'] / 2**30:.2f} GiB); "
                      f"checksum {'equals' if s['match'] else 'DIFFERS from'} the masters'"),
        row("generation", "generate",
            lambda g: f"{g['prompts']} prompts x {g['max_tokens']} tokens: {g['seconds']:.2f} s, "
                      f"{g['tokens_per_s']:,.0f} tokens/s, peak {g['peak_mem_gib']} GiB"),
        row("packed vs padded, same weights and batch", "packed",
            lambda p: f"{p['kernel']}: \\|dlogp\\| p99 {p['dlogp']['p99']}, max {p['dlogp']['max']}; loss "
                      f"{p['loss_rel_diff']:.2e} and grad norm {p['grad_norm_rel_diff']:.2e} relative difference, "
                      f"gradient cosine {p['grad_cosine']}; controls: " + "; ".join(
                          f"{k} {'skipped' if 'skipped' in c else ('caught' if c['caught'] else 'NOT caught')}"
                          + ('' if 'skipped' in c else f" (max {c['max']}"
                             f"{', must be caught' if c['must_be_caught'] else ', reported'})")
                          for k, c in p["controls"].items())),
        row("the policy as its own top-k teacher (distillation)", "distill_identity",
            lambda d: f"whole vocabulary: kl {d['full_vocab']['kl']}, jsd {d['full_vocab']['jsd']}; top 20: kl "
                      f"{d['top20']['kl']} against -log(top-20 mass) {d['top20']['expected_kl']} (gates {d['gates']})"),
        row("FSDP path on a one-process group", "fsdp",
            lambda f: f"{f['backend']}: log-probs vs one rank max {f['vs_one_rank']['max']}; grad norm "
                      f"{f['grad_norm']:.3g}, reduce in {f['reduce_dtypes']}; wire weights equal the gathered "
                      f"state: {f['wire_equal']}; checkpoint {f['checkpoint_gib']} GiB saved in {f['save_s']} s; "
                      f"restored: {f['restored']}"),
        row("rlvr-train, 3 steps, engine and trainer on one GPU", "smoke",
            lambda s: f"{'ok' if s['ok'] else 'FAILED'} in {s['seconds']:.0f} s; sync: {s['sync']}"),
        row("trainer step, padded / packed (train.packing), GSM8K + MATH length mix", "packing_speed",
            lambda p: f"{p['tokens']:,} tokens: {p['padded_step_s']:.2f} s / {p['packed_step_s']:.2f} s, "
                      f"{p['padded_tokens_per_s']:,.0f} / {p['packed_tokens_per_s']:,.0f} tokens/s "
                      f"({p['packed_speedup']}x)"),
    ]
    lines = [ln for ln in lines if ln is not None]
    lines += ["", f"Whole check: {summary['total_s']:.0f} s.", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
