"""Assemble docs/BENCHMARKS.md from the fragments the bench scripts write to docs/bench/."""

from __future__ import annotations

import glob
import os

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["verify_math", "math", "code", "ifeval", "rollout", "train", "staleness", "s3"]


def main() -> None:
    frags = sorted(glob.glob(os.path.join(ROOT, "docs", "bench", "*.md")))
    key = lambda p: (ORDER.index(os.path.basename(p)[:-3]) if os.path.basename(p)[:-3] in ORDER else 99, p)  # noqa: E731
    parts = ["# Benchmarks\n",
             "Measured by `make bench` (each section names the command that produced it and the machine).",
             "Figures are side by side with the tools users would otherwise pick, measured in the same run.\n"]
    for p in sorted(frags, key=key):
        parts.append(open(p).read().strip() + "\n")
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as fh:
        fh.write("\n".join(parts))
    print(f"wrote docs/BENCHMARKS.md from {len(frags)} sections")


if __name__ == "__main__":
    main()
