"""Process start-up benchmark: how long a fresh process takes to build an engine or a trainer.

    python bench/bench_startup.py [--reps 3]

Every engine and trainer of rlvr-train, and every rlvr-rollout / rlvr-eval, is a fresh Python
process that imports torch and transformers before its first token. transformers imports
scikit-learn (installed for lm-eval) for assisted generation only, which rlvr never uses;
rlvr.models.lean_transformers() keeps it out. Each row is a fresh interpreter that builds the
hf engine on the tiny model and generates 2 tokens (or sets up the trainer), timed from
interpreter start to done, with lean_transformers on and off (RLVR_BENCH_KEEP_SKLEARN makes it
a no-op for the "off" rows), the two taking turns; the median of the reps is shown.

Writes docs/bench/startup.md.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

ENGINE = """
import sys
if {keep}:
    import rlvr.models as m
    m.lean_transformers = lambda: None
from rlvr.engines import EngineOptions, Sampling, create
e = create("hf", {model!r}, EngineOptions(dtype="float32"))
e.generate([e.encode("say seven")], Sampling(n=1, max_tokens=2))
print("sklearn" in sys.modules)
"""

TRAINER = """
import sys
if {keep}:
    import rlvr.models as m
    m.lean_transformers = lambda: None
from rlvr.config_loader import load_config
from rlvr.train.config import TrainConfig
from rlvr.train.trainer import PolicyTrainer
cfg = load_config(TrainConfig, {config!r}, [])
PolicyTrainer({model!r}, cfg.train, 24, 2)
print("sklearn" in sys.modules)
"""


def timed(code: str) -> tuple[float, str]:
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"), check=True)
    return time.monotonic() - t0, r.stdout.strip().splitlines()[-1]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    from rlvr.tiny import build

    model = build(os.path.join(tempfile.mkdtemp(), "tiny"))
    config = os.path.join(ROOT, "configs", "tiny-cpu.yaml")
    rows = []
    for name, tmpl in (("hf engine: build + 2 tokens", ENGINE), ("trainer: PolicyTrainer set-up", TRAINER)):
        times: dict[bool, list[float]] = {True: [], False: []}
        loaded: dict[bool, str] = {}
        for _ in range(args.reps):
            for keep in (True, False):
                dt, out = timed(tmpl.format(keep=keep, model=model, config=config))
                times[keep].append(dt)
                loaded[keep] = out
        with_sk, without = statistics.median(times[True]), statistics.median(times[False])
        rows.append(f"| {name} | {with_sk:.2f} s (scikit-learn imported: {loaded[True]}) | {without:.2f} s "
                    f"(imported: {loaded[False]}) | {with_sk / without:.2f}x |")
    text = "\n".join([
        "## Process start-up",
        "",
        f"`python bench/bench_startup.py --reps {args.reps}` ({time.strftime('%Y-%m-%d')}, {platform.machine()}, "
        f"{os.cpu_count()} cores, python {platform.python_version()}). A fresh interpreter per row, timed from start "
        "to done, on the tiny model; the median of the reps, the two variants taking turns. rlvr's engine and "
        "trainer processes keep scikit-learn out of transformers' import (rlvr.models.lean_transformers): it "
        "serves only assisted generation, which rlvr never uses.",
        "",
        "| process | transformers as installed | rlvr (lean_transformers) | speed-up |",
        "|---|---|---|---|",
        *rows,
        "",
    ])
    with open(os.path.join(ROOT, "docs", "bench", "startup.md"), "w") as fh:
        fh.write(text)
    print(text)


if __name__ == "__main__":
    main()
