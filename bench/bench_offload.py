"""The cost per step of the trainer's CPU offload (train.offload), on the CPU.

    python bench/bench_offload.py [--shapes tiny,small] [--steps 4]

Two FSDP trainer ranks (gloo, one thread each) train the same batches with train.offload null,
optimizer (rlvr.train.parallel.CPUAdamW: AdamW's state and step in host memory, the gradients
copied there and the parameters back) and params_and_optimizer (FSDP2's CPUOffloadPolicy), on
the tiny test model and a small Qwen3 shape (bench/bench_plan_memory.py's) with random weights
(the optimizer setting's host step is torch's fused CPU AdamW, the others torch's default).
The three settings run side by side in one pair of processes, their steps interleaved so that
each sees the same load of a shared machine (each first, second and third in turn): a warm-up
step each, then `--steps` measured steps; the median step time, its forward + backward
(time/trainer_fwd_bwd_s) and its optimizer phase (time/trainer_optimizer_s) are rank 0's. On the
CPU the "device" is the CPU, so these figures are the bookkeeping cost of the offload (the
copies between two host buffers, FSDP's offload hooks), not the PCIe transfer a GPU pays; the
device memory each setting keeps per rank is the plan's arithmetic (rlvr.train.plan_parallel).

Writes docs/bench/offload.md.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import time

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_plan_memory import SHAPES, build_model  # noqa: E402
from bench_train import machine  # noqa: E402

OFFLOADS = (None, "optimizer", "params_and_optimizer")
SEQS, PROMPT, COMPLETION = 4, 16, 48       # a rank's 2 sequences of 64 tokens a step


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rank_main(rank: int, world: int, port: int, model: str, steps: int, out: str) -> None:
    """The three settings side by side in one pair of processes, their steps interleaved (none,
    optimizer, params_and_optimizer, none, ...), so that each sees the same load of a shared
    machine; rank 0 writes each one's step and optimizer-phase times."""
    import torch
    import torch.distributed as dist

    from rlvr.train.config import LossConfig, TrainerConfig
    from rlvr.train.trainer import Batch, PolicyTrainer

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    vocab = orjson.loads(open(os.path.join(model, "config.json"), "rb").read())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    trainers = {}
    for offload in OFFLOADS:
        cfg = TrainerConfig(lr=1e-5, micro_batch_size=SEQS, dtype="float32", device="cpu", offload=offload,
                            grad_sync="per_update", loss=LossConfig(loss_type="dapo"))
        trainers[offload] = PolicyTrainer(model, cfg, max_tokens=COMPLETION, total_steps=steps + 1, rank=rank,
                                          world=world)
    times = {o: {"step_s": [], "optimizer_s": [], "fwd_bwd_s": []} for o in OFFLOADS}
    for i in range(steps + 1):
        batch = Batch([ids(PROMPT) for _ in range(SEQS)], [ids(COMPLETION) for _ in range(SEQS)],
                      [1.0 if k % 2 else -0.5 for k in range(SEQS)])
        for k in range(len(OFFLOADS)):              # each setting first, second and third in turn
            offload = OFFLOADS[(i + k) % len(OFFLOADS)]
            dist.barrier()
            t0 = time.monotonic()
            m = trainers[offload].step(batch)
            if i:                                   # the first step is the warm-up
                times[offload]["step_s"].append(time.monotonic() - t0)
                times[offload]["optimizer_s"].append(m["time/trainer_optimizer_s"])
                times[offload]["fwd_bwd_s"].append(m["time/trainer_fwd_bwd_s"])
    if rank == 0:
        with open(out, "wb") as fh:
            fh.write(orjson.dumps({str(k): v for k, v in times.items()}))
    dist.destroy_process_group()


def planned(model: str, offload) -> dict:
    """The states a rank keeps on the device and in host memory, bytes as rlvr.train.plan_parallel
    counts them (fp32 weights 4P, gradients 4P, AdamW's moments 8P, each over the 2 ranks)."""
    from rlvr.train.plan_memory import ModelShape, read_model_config

    p = ModelShape.from_config(read_model_config(model)[0]).params
    device = {None: 16, "optimizer": 8, "params_and_optimizer": 0}[offload] * p / 2
    return {"params": p, "device_states_mib": device / 2**20, "host_mib": (16 * p / 2 if offload else 0) / 2**20}


def main() -> None:
    import torch.multiprocessing as mp

    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="tiny,small", help=f"tiny (rlvr.tiny), or of {', '.join(SHAPES)}")
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.shapes.split(","):
            if name == "tiny":
                from rlvr.tiny import build

                model = build(os.path.join(d, name))
            else:
                model = build_model(os.path.join(d, name), SHAPES[name][0])
            out = os.path.join(d, f"{name}.json")
            mp.spawn(rank_main, args=(2, free_port(), model, a.steps, out), nprocs=2, join=True)
            got = orjson.loads(open(out, "rb").read())
            for offload in OFFLOADS:
                rows.append({"shape": name, "offload": offload, **got[str(offload)], **planned(model, offload)})
                print({k: v for k, v in rows[-1].items() if k not in ("step_s", "optimizer_s")},
                      statistics.median(rows[-1]["step_s"]), statistics.median(rows[-1]["optimizer_s"]),
                      file=sys.stderr)
    lines = ["## CPU offload per step (train.offload)\n",
             f"Command: `python bench/bench_offload.py --shapes {a.shapes} --steps {a.steps}` on {machine()}. Two FSDP "
             "ranks (gloo, one thread each), a step of 2 sequences x "
             f"{PROMPT + COMPLETION} tokens a rank, float32; the three settings side by side, their steps interleaved "
             f"in turn (the same load for each); the median of {a.steps} steps after a warm-up, rank 0's figures "
             "(forward + backward and the optimizer phase are the trainer's own timings of the step). "
             "**On the CPU the \"device\" is the CPU**: the offloaded settings copy between host buffers, so "
             "these times are the bookkeeping cost of the offload (the copies, FSDP's offload hooks, a second "
             "AdamW's buffers), not the transfer over PCIe that a GPU pays; a GPU run confirms that cost "
             "(docs/gpu.md). The optimizer setting's host step is torch's fused CPU AdamW (rlvr.train.parallel."
             "CPUAdamW); null and params_and_optimizer run torch's default AdamW over the DTensor shards, so "
             "their optimizer phases differ by the implementation too. Device states: what a rank keeps on the "
             "device of fp32 weights, gradients and AdamW's moments, as the plan counts them "
             "(rlvr.train.plan_parallel); host: what it keeps in host memory.\n",
             "| model | parameters | train.offload | step s (median) | forward + backward s | optimizer phase s "
             "| step vs none | optimizer phase vs none | device states MiB / rank | host MiB / rank |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    base = {}
    for r in rows:
        step, opt, fb = (statistics.median(r[k]) for k in ("step_s", "optimizer_s", "fwd_bwd_s"))
        if r["offload"] is None:
            base[r["shape"]] = (step, opt)
        b = base.get(r["shape"], (step, opt))
        r["median_step"], r["median_opt"] = step, opt
        lines.append(f"| {r['shape']} | {r['params'] / 1e6:.2f} M | {r['offload'] or 'null'} | {step:.3f} "
                     f"| {fb:.3f} | {opt:.4f} | "
                     f"{step / b[0]:.2f}x | {opt / b[1]:.2f}x | {r['device_states_mib']:.2f} | {r['host_mib']:.2f} |")
    lines.append("")
    big = [r for r in rows if r["shape"] == rows[-1]["shape"]]
    cost = {r["offload"]: r["median_step"] - big[0]["median_step"] for r in big}
    lines.append(f"At the {big[0]['shape']} shape the offload adds {cost['optimizer']:+.3f} s a step (optimizer) and "
                 f"{cost['params_and_optimizer']:+.3f} s (params_and_optimizer) to {big[0]['median_step']:.3f} s; on "
                 "this shared 2-core machine step times vary by tens of percent between runs, so differences of that "
                 "order are noise. What only a GPU shows: the device-to-host and host-to-device copies of the "
                 "gradients and weights (params_and_optimizer: every forward's parameters too) and the CPU AdamW's "
                 "time against the GPU's.")
    from assemble import write_fragment

    write_fragment("offload", lines)


if __name__ == "__main__":
    main()
