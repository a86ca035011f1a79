"""Benchmark of the LLM judge (rlvr.verifiers.judge): the cost of a judge call per sample,
measured against a local `vllm serve` of the tiny model on the CPU.

    python bench/bench_judge.py               # writes docs/bench/judge.md
    python bench/bench_judge.py --samples 16  # quicker, noisier

In one run, on the same N completions and the same rubric (8 reply tokens at most):
1. the bare HTTP requests, one after another (urllib, the body rlvr sends): the server's own
   time per call, the floor;
2. rlvr-verify --judge with -j 1 and -j 2 (the verifier pool: worker start, rendering,
   parsing, the on-disk cache written), cache empty;
3. the same rlvr-verify again with the cache filled: what a repeated or resumed verification
   costs per sample.
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
    while True:   # readiness, not a fixed sleep
        if proc.poll() is not None:
            raise SystemExit(f"vllm serve exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                if r.status == 200:
                    return proc
        except OSError:
            time.sleep(0.5)


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


def verify(url: str, inp: str, jobs: int, cache: str) -> tuple[float, dict]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "-m", "rlvr.commands.verify", "--verifier", "judge", "--judge", url,
                        "--judge-model", "tiny-judge", "--judge-rubric", RUBRIC, "--judge-cache", cache,
                        "--set", "judge.max_tokens=8", "-j", str(jobs), inp],
                       capture_output=True, text=True, env={**os.environ, "PYTHONPATH": ROOT, "OMP_NUM_THREADS": "1"},
                       check=True)
    dt = time.perf_counter() - t0
    verdicts = [v for ln in r.stdout.splitlines() for v in json.loads(ln)["verdicts"]]
    stats = {"cached": sum(v["judge"]["cached"] for v in verdicts if "judge" in v), "n": len(verdicts),
             "statuses": sorted({v["status"] for v in verdicts})}
    return dt, stats


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=64)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from rlvr.tiny import build

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
    try:
        bare(url, texts[:2])   # warm the server
        best: dict[str, float] = {}
        info: dict[str, dict] = {}
        for _ in range(args.reps):
            best["bare"] = min(best.get("bare", 1e9), bare(url, texts))
            for jobs in (1, 2):
                cache = os.path.join(tmp, f"cache{jobs}")
                shutil.rmtree(cache, ignore_errors=True)
                dt, st = verify(url, inp, jobs, cache)
                best[f"j{jobs}"] = min(best.get(f"j{jobs}", 1e9), dt)
                info[f"j{jobs}"] = st
                dt, st = verify(url, inp, jobs, cache)
                best[f"j{jobs}c"] = min(best.get(f"j{jobs}c", 1e9), dt)
                info[f"j{jobs}c"] = st
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=60)
        log.close()
    n = args.samples
    ms = lambda k: f"{1000 * best[k] / n:.1f} ms"  # noqa: E731
    rows = [f"| bare HTTP requests, one at a time (the server's own time) | {best['bare']:.2f} s | {ms('bare')} | - |"]
    for jobs in (1, 2):
        rows.append(f"| rlvr-verify --judge -j {jobs}, cache empty | {best[f'j{jobs}']:.2f} s | {ms(f'j{jobs}')} | "
                    f"{info[f'j{jobs}']['cached']} of {info[f'j{jobs}']['n']} |")
        rows.append(f"| rlvr-verify --judge -j {jobs}, cache filled | {best[f'j{jobs}c']:.2f} s | {ms(f'j{jobs}c')} | "
                    f"{info[f'j{jobs}c']['cached']} of {info[f'j{jobs}c']['n']} |")
    text = "\n".join([
        "## LLM judge (rlvr-verify --judge)",
        "",
        f"`python bench/bench_judge.py --samples {n} --reps {args.reps}` ({time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, a shared machine). "
        f"The judge: `vllm serve` (vllm-cpu) of the tiny random Qwen3 on the CPU, float32, eager, ready in "
        f"{ready:.0f} s; {n} completions, a one-line rubric, at most 8 reply tokens, chat API. The rlvr-verify rows "
        "are whole processes (start, worker start, import) timed end to end; best of the reps. Statuses seen: "
        f"{', '.join(info['j1']['statuses'])} (the tiny model's weights are random: its replies seldom hold a score).",
        "",
        "| what | wall | per sample | replies from the cache |",
        "|---|---|---|---|",
        *rows,
        "",
        "On a real judge the server's time per call dominates (hundreds of ms to seconds per reply); rlvr adds its "
        "process and worker start once per run and little per call, and -j N keeps N calls in flight. A filled "
        "cache answers without the server.",
        "",
    ])
    with open(os.path.join(ROOT, "docs", "bench", "judge.md"), "w") as fh:
        fh.write(text)
    print(text)
    shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
