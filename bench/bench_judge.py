"""Benchmark of the LLM judge (rlvr.verifiers.judge): the cost of a judge call per sample,
measured against a local `vllm serve` of the tiny model on the CPU.

    python bench/bench_judge.py               # writes docs/bench/judge.md
    python bench/bench_judge.py --samples 16  # quicker, noisier

In one run, on the same N completions and the same rubric (8 reply tokens at most):
1. the bare HTTP requests, one after another (urllib, the body rlvr sends): the server's own
   time per call, the floor;
2. the verifier pool rlvr-verify --judge runs, warm, with -j 1 and -j 2 (rendering, the call,
   parsing, the on-disk cache written), cache empty;
3. the same completions again with the cache filled: what a repeated or resumed verification
   costs per sample;
4. the whole rlvr-verify --judge -j 2 process once (python start, imports, worker start).
Each figure is the best of --reps runs (the machine is shared); the server starts once.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

RUBRIC = "Rate this answer from 0 to 10.\n{completion}\nScore:"


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(model: str, port: int, log) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model, "--served-model-name",
           "tiny-judge", "--dtype", "float32", "--max-model-len", "512", "--enforce-eager", "--generation-config",
           "vllm", "--no-enable-chunked-prefill", "--max-num-batched-tokens", "4096", "--host", "127.0.0.1",
           "--port", str(port)]
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        while True:   # readiness, not a fixed sleep
            if proc.poll() is not None:
                raise SystemExit(f"vllm serve exited with {proc.returncode}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        return proc
            except OSError:
                time.sleep(0.5)
    except BaseException:
        os.killpg(proc.pid, signal.SIGKILL)
        raise


def bare(url: str, texts: list[str]) -> float:
    t0 = time.perf_counter()
    for t in texts:
        body = {"model": "tiny-judge", "messages": [{"role": "user", "content": RUBRIC.format(completion=t)}],
                "max_tokens": 8, "temperature": 0.0}
        req = urllib.request.Request(url + "/chat/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as r:
            json.loads(r.read())
    return time.perf_counter() - t0


def pooled(url: str, recs: list[dict], jobs: int, cache: str) -> tuple[float, float, dict]:
    """(seconds with the cache empty, seconds with it filled, counts): a warm VerifierPool, as
    rlvr-verify and rlvr-train's reward stage use it (workers started and the judge module
    loaded on a warm-up record first, so the figures are the per-call cost)."""
    from rlvr.verification.pool import VerifierPool

    opts = {"base_url": url, "model": "tiny-judge", "rubric": RUBRIC, "cache": cache, "max_tokens": 8}
    with VerifierPool(jobs=jobs, config={"judge": opts}, verifier="judge") as pool:
        pool.verify_all([{"id": "warm", "prompt": "p", "completions": [f"warm-up {j}" for j in range(jobs)]}])
        t0 = time.perf_counter()
        first = pool.verify_all(recs)
        cold = time.perf_counter() - t0
        t0 = time.perf_counter()
        second = pool.verify_all(recs)
        warm = time.perf_counter() - t0
    verdicts = [v for r in first for v in r["verdicts"]]
    cached = [v for r in second for v in r["verdicts"]]
    if not all("judge" in v for v in verdicts):
        raise SystemExit(f"a verdict without a judge reply: {verdicts}")
    return cold, warm, {"n": len(verdicts), "cached": sum(v["judge"]["cached"] for v in cached),
                        "statuses": sorted({v["status"] for v in verdicts})}


def whole_process(url: str, inp: str, cache: str) -> float:
    """rlvr-verify --judge as a process, start to end (python start, imports, worker start)."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-c", "from rlvr.commands.verify import main; main()", "--verifier", "judge",
                        "--judge", url, "--judge-model", "tiny-judge", "--judge-rubric", RUBRIC, "--judge-cache", cache,
                        "--set", "judge.max_tokens=8", "-j", "2", inp],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
                       check=True)
    if not r.stdout.strip():
        raise SystemExit(f"rlvr-verify wrote nothing: {r.stderr[-2000:]}")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from rlvr.tiny import build

    load = os.getloadavg()
    tmp = tempfile.mkdtemp()
    model = build(os.path.join(tmp, "tiny"))
    texts = [f"The answer is {i}. It follows from adding {i // 2} and {i - i // 2}." for i in range(args.samples)]
    inp = os.path.join(tmp, "in.jsonl")
    with open(inp, "w") as fh:
        for i in range(0, len(texts), 4):
            fh.write(json.dumps({"id": f"q{i}", "prompt": "Add the numbers.", "completions": texts[i:i + 4]}) + "\n")
    port = _port()
    url = f"http://127.0.0.1:{port}/v1"
    log = open(os.path.join(tmp, "serve.log"), "wb")
    t0 = time.perf_counter()
    proc = start_server(model, port, log)
    ready = time.perf_counter() - t0
    recs = [json.loads(ln) for ln in open(inp)]
    try:
        bare(url, texts[:2])   # warm the server
        best: dict[str, float] = {}
        info: dict[str, dict] = {}
        for rep in range(args.reps):
            best["bare"] = min(best.get("bare", 1e9), bare(url, texts))
            for jobs in (1, 2):
                cache = os.path.join(tmp, f"cache{jobs}-{rep}")
                cold, warm, info[f"j{jobs}"] = pooled(url, recs, jobs, cache)
                best[f"j{jobs}"] = min(best.get(f"j{jobs}", 1e9), cold)
                best[f"j{jobs}c"] = min(best.get(f"j{jobs}c", 1e9), warm)
            best["proc"] = min(best.get("proc", 1e9), whole_process(url, inp, os.path.join(tmp, f"cacheP-{rep}")))
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    n = args.samples
    ms = lambda k: f"{1000 * best[k] / n:.1f} ms"  # noqa: E731
    added = 1000 * (best["j1"] - best["bare"]) / n
    extra = f"{added:.1f} ms" if added > 0 else "below this run's noise (the pool was the faster of the two)"
    rows = [f"| bare HTTP requests, one at a time (the server's own time) | {best['bare']:.2f} s | {ms('bare')} | - |"]
    for jobs in (1, 2):
        rows.append(f"| the verifier pool (rlvr-verify --judge), warm, -j {jobs}, cache empty | {best[f'j{jobs}']:.2f} s | {ms(f'j{jobs}')} | "
                    "0 |")
        rows.append(f"| the verifier pool, warm, -j {jobs}, cache filled | {best[f'j{jobs}c']:.2f} s | {ms(f'j{jobs}c')} | "
                    f"{info[f'j{jobs}']['cached']} of {info[f'j{jobs}']['n']} |")
    rows.append(f"| the whole rlvr-verify --judge -j 2 process, cache empty | {best['proc']:.2f} s | {ms('proc')} | 0 |")
    text = "\n".join([
        "## LLM judge (rlvr-verify --judge)",
        "",
        f"`python bench/bench_judge.py --samples {n} --reps {args.reps}` ({time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, a shared machine). "
        f"The judge: `vllm serve` (vllm-cpu) of the tiny random Qwen3 on the CPU, float32, eager, ready in "
        f"{ready:.0f} s; {n} completions, a one-line rubric, at most 8 reply tokens, chat API. The rlvr-verify rows "
        "time a warm verifier pool (workers started and the judge loaded before the clock: the cost per call, as "
        "rlvr-train's reward stage pays it), the last row the whole command (python start, imports, workers); "
        "best of the reps. Statuses seen: "
        f"{', '.join(info['j1']['statuses'])} (the tiny model's weights are random: its replies seldom hold a score).",
        "",
        "| what | wall | per sample | replies from the cache |",
        "|---|---|---|---|",
        *rows,
        "",
        f"What rlvr adds per call (rendering, the pool's IPC, parsing, the cache file written) is the warm pool at "
        f"-j 1 less the bare requests: {extra} (load average {load[0]:.1f} before the run, "
        f"{os.getloadavg()[0]:.1f} after, on 2 cores shared with other jobs: the figures carry that noise). -j 2 cannot go faster than a server that has the same 2 cores; on a real judge the server's time "
        "per call (hundreds of ms to seconds) dominates and -j N keeps N calls in flight. A filled cache answers "
        "without the server.",
        "",
    ])
    with open(os.path.join(ROOT, "docs", "bench", "judge.md"), "w") as fh:
        fh.write(text)
    print(text)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
