"""Benchmark of multi-turn tool rollouts (rlvr.tools): what one tool turn costs per sample,
beside the model's own generation.

    python bench/bench_tools.py               # writes docs/bench/tools.md
    python bench/bench_tools.py --samples 16  # quicker, noisier

In one run, on the tiny model's tokenizer and the same code block (print(6*7)):
1. run_python alone: one sandboxed call (a fork of the warm sandbox server, the code run as
   __main__, its output back), one after another;
2. tool_stream over a scripted engine (no model time: the text is fixed) for samples of one
   model turn and samples of two model turns with one tool turn between them: the difference
   per sample is what rlvr adds per tool turn (the call, the output template encoded, one more
   engine request built), without the engine's own generation and prefill.
Each figure is the best of --reps runs (the machine is shared); the sandbox server starts once.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

PROMPT = "Q: what is 6*7?\nA: "
ONE = "The answer is \\boxed{42}."
TWO = ["Let me compute.\n```python\nprint(6*7)\n```", ONE]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=32)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "tools.md"))
    args = ap.parse_args()

    from fakes.scripted_engine import ScriptedEngine, in_turns

    from rlvr.engines.base import Sampling, load_tokenizer
    from rlvr.sandbox import SandboxConfig, get_sandbox
    from rlvr.tiny import build
    from rlvr.tools import ToolSettings, run_python, tool_stream

    tok = load_tokenizer(build(os.path.join(tempfile.mkdtemp(), "tiny")))
    tools = ToolSettings()
    sandbox = get_sandbox(SandboxConfig(mode=tools.sandbox))
    run_python("print(1)", tools)   # the server warm before the clock
    load0 = os.getloadavg()[0]
    n = args.samples

    def best(fn) -> float:
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        return min(times)

    def calls() -> None:
        for _ in range(n):
            assert run_python("print(6*7)", tools)["output"] == "42\n"

    def stream(turns: list[str]):
        def go() -> None:
            eng = ScriptedEngine(tok, in_turns(turns, PROMPT))
            ids = tok.encode(PROMPT, add_special_tokens=False)
            [(_, res)] = list(tool_stream(eng, [(0, ids, 0)], Sampling(n=n, max_tokens=256), tools))
            assert len(res.samples) == n and len(res.samples[0].turns) == (3 if len(turns) > 1 else 1)
        return go

    t_call = best(calls)
    t_one = best(stream([ONE]))
    t_two = best(stream(TWO))
    load1 = os.getloadavg()[0]
    ms = lambda t: f"{1000 * t / n:.1f} ms"  # noqa: E731
    rows = [("run_python alone (one sandboxed call)", t_call),
            ("tool_stream, scripted engine: one model turn per sample", t_one),
            ("tool_stream, scripted engine: two model turns and one tool turn per sample", t_two)]
    lines = [
        "## Tool rollouts (rlvr-rollout --tools python)\n",
        f"`python bench/bench_tools.py --samples {n} --reps {args.reps}` ({time.strftime('%Y-%m-%d')}, "
        f"{platform.machine()}, {os.cpu_count()} cores, python {platform.python_version()}, a shared machine; "
        f"sandbox mode {sandbox.mode}). {n} samples of one prompt; the code block is `print(6*7)`; best of the reps.\n",
        "| what | wall | per sample |", "|---|---|---|",
        *[f"| {w} | {t:.2f} s | {ms(t)} |" for w, t in rows],
        "",
        f"One tool turn costs rlvr {ms(t_two - t_one)} per sample (two turns less one: the sandboxed call, the "
        "output encoded, a second engine request built; the turn that stopped at the opening fence and went on "
        "included), of which the sandboxed call is "
        f"{ms(t_call)}. The engine then pays one more request per tool turn whose prompt is the trajectory so far "
        "(vLLM's prefix cache keeps its prefill to the new tokens); tool calls run one at a time on the rollout's "
        f"thread, between engine steps. Load average {load0:.1f} before the run, {load1:.1f} after.\n",
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
