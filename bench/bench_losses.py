"""The loss types side by side on the tiny CPU task: an rlvr-train ablation and rlvr-plot's table.

    python bench/bench_losses.py [--run-dir DIR] [--seeds 3] [--set KEY=VALUE ...]

Runs `rlvr-train configs/tiny-cpu.yaml --ablate train.loss.loss_type=grpo,dapo,gspo,cispo --seeds N`
into --run-dir (an existing grid there is resumed: its completed runs are skipped), then
`rlvr-plot DIR` for the table and the curves, and writes docs/bench/losses.md (and
docs/bench/losses.png). The table reports what completed: a run still missing shows as 0 seeds.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "bench"))

from bench_train import machine  # noqa: E402

LOSSES = "grpo,dapo,gspo,cispo"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--run-dir", default=os.path.join(ROOT, "results", "losses"))
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--set", action="append", default=[], help="extra config overrides for every run")
    ap.add_argument("--table-only", action="store_true", help="do not run: tabulate what --run-dir holds")
    a = ap.parse_args()
    bindir = os.path.dirname(sys.executable)
    sets = [x for s in a.set for x in ("--set", s)]
    cmd = [os.path.join(bindir, "rlvr-train"), os.path.join(ROOT, "configs", "tiny-cpu.yaml"),
           "--ablate", f"train.loss.loss_type={LOSSES}", "--seeds", str(a.seeds), *sets, "--run-dir", a.run_dir]
    if not a.table_only:
        subprocess.run(cmd, check=False)
    png = os.path.join(a.run_dir, "losses.png")
    table = subprocess.run([os.path.join(bindir, "rlvr-plot"), a.run_dir, "-o", png],
                           check=True, capture_output=True, text=True).stdout
    table = "\n".join(ln for ln in table.splitlines() if ln.startswith("|"))
    shown = " ".join(["rlvr-train configs/tiny-cpu.yaml", "--ablate", f"train.loss.loss_type={LOSSES}",
                      "--seeds", str(a.seeds), *sets])
    out = [
        "## Loss types on the tiny task (train.loss.loss_type)\n",
        f"Command: `{shown}`, then `rlvr-plot` on its folder (`python bench/bench_losses.py"
        f"{''.join(' --set ' + s for s in a.set)}`), on {machine()}; the machine is shared with other jobs, "
        "so samples/s compare only within this table. configs/tiny-cpu.yaml: 30 steps of 16 prompts x 8 samples "
        "of at most 24 tokens, one update per rollout batch.\n",
        table + "\n",
        "Final reward: the mean of the last 3 steps, mean ± sd over seeds. With one update per batch every "
        "ratio pi_theta/pi_old is 1, where `gspo` has `grpo`'s gradient and `cispo` has `dapo`'s "
        "(docs/train-algorithms.md): their gradients differ by float rounding only, which over 30 steps can "
        "still change the tokens sampled, so each pair agrees within its seeds' spread rather than exactly. "
        "The table checks that the new objectives learn as the ones they reduce to; their clipping differs "
        "only off policy (`train.mini_batches` > 1), which it does not measure. The hf engine (`--set "
        "rollout.engine=hf`) kept the 12 runs within the time the shared machine allowed.\n",
        "![reward vs samples and wall time](losses.png)\n",
    ]
    os.makedirs(os.path.join(ROOT, "docs", "bench"), exist_ok=True)
    with open(os.path.join(ROOT, "docs", "bench", "losses.md"), "w") as f:
        f.write("\n".join(out))
    if os.path.exists(png):
        shutil.copy(png, os.path.join(ROOT, "docs", "bench", "losses.png"))


if __name__ == "__main__":
    main()
