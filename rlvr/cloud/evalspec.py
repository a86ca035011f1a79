"""--eval-config FILE: the evaluation that runs beside training in one job (rlvr-eval --watch).

    benchmarks: [gsm8k, math500, ifeval]   # required: rlvr-eval --benchmark values
    interval: 120                          # seconds between scans for new checkpoints (default 60)
    args: [--max-model-len, "4096"]        # more rlvr-eval options, as they would be typed

The job runs `rlvr-eval --watch RUN/checkpoints/step_* RUN/evals -b ... --gpus EVAL_GPUS`
beside `rlvr-train` (on TRAIN_GPUS), and one `--once` pass after training for the last
checkpoints; results land in the run folder's evals/ (and on S3 under <job>/evals/).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field

import yaml

from rlvr.errors import UsageError

KEYS = ("benchmarks", "interval", "args")


@dataclass
class EvalSpec:
    benchmarks: list[str]
    interval: float = 60.0
    args: list[str] = field(default_factory=list)

    def command(self, pattern: str, out_dir: str, gpus: list[int] | None) -> list[str]:
        cmd = [sys.executable, "-m", "rlvr.commands.eval", "--watch", pattern, out_dir,
               "--interval", f"{self.interval:g}"]
        for b in self.benchmarks:
            cmd += ["-b", b]
        if gpus:
            cmd += ["--gpus", ",".join(map(str, gpus))]
        return cmd + list(self.args)


def load_eval_config(path: str) -> EvalSpec:
    if not os.path.isfile(path):
        raise UsageError(f"--eval-config {path}: no such file")
    try:
        with open(path, encoding="utf-8") as fh:
            data = yaml.safe_load(fh)
    except yaml.YAMLError as e:
        raise UsageError(f"{path}: not valid YAML: {str(e).splitlines()[0]}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{path}: expected a mapping with {', '.join(KEYS)}")
    unknown = sorted(set(data) - set(KEYS))
    if unknown:
        raise UsageError(f"{path}: unknown key {unknown[0]!r} (known: {', '.join(KEYS)})")
    b = data.get("benchmarks")
    if isinstance(b, str):
        b = [b]
    if not b or not isinstance(b, list) or not all(isinstance(x, str) and x for x in b):
        raise UsageError(f"{path}: benchmarks: expected a non-empty list of benchmark names")
    interval = data.get("interval", 60)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or interval < 0:
        raise UsageError(f"{path}: interval: expected a number of seconds >= 0, got {interval!r}")
    args = data.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, (str, int, float)) for a in args):
        raise UsageError(f"{path}: args: expected a list of rlvr-eval options")
    return EvalSpec(list(b), float(interval), [str(a) for a in args])
