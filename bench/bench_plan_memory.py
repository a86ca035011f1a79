"""The plan's trainer-memory arithmetic held against a measured trainer step, on the CPU.

    python bench/bench_plan_memory.py [--shapes small,medium]

`rlvr-train --plan` estimates a trainer rank's peak memory from the model's dimensions
(rlvr.train.plan_memory.trainer_memory). Here the same arithmetic, with the trainer's CPU
settings (float32 compute, no master copy, no CUDA context), is compared with the peak
resident memory of one PolicyTrainer.step on Qwen3-shaped models with random weights built
offline, at two shapes. Each shape runs in its own process: the resident memory before the
trainer is built is the baseline; a warm-up step creates the gradients and AdamW's moments;
VmHWM is then reset (/proc/self/clear_refs) and the measured step's peak is read (ru_maxrss
where that is not available). Large buffers are returned to the system when freed
(MALLOC_MMAP_THRESHOLD_), so the peak follows what is live rather than glibc's heap. The plan's
error is (plan - measured) / measured, for its allocated bytes (before the allocator's +10%)
and for its estimate.

Writes docs/bench/plan_memory.md.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import orjson

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("OMP_NUM_THREADS", "1")

from bench_memory import _status_kb  # noqa: E402
from bench_train import machine  # noqa: E402

PROMPT = 16
# name -> (Qwen3 dimensions, sequences, completion tokens per sequence)
SHAPES = {
    "small": (dict(hidden_size=256, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=64,
                   intermediate_size=768, vocab_size=16384), 4, 240),
    "medium": (dict(hidden_size=512, num_hidden_layers=4, num_attention_heads=8, num_key_value_heads=4, head_dim=64,
                    intermediate_size=1536, vocab_size=32768), 8, 496),
}


def build_model(out: str, dims: dict) -> str:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlvr.tiny import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen3Config(**dims, max_position_embeddings=4096, tie_word_embeddings=True, eos_token_id=tok.eos_token_id,
                      pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def child(model: str, seqs: int, length: int) -> None:
    """One measured trainer step after a warm-up step; prints one JSON line (MiB above the
    resident memory before the trainer was built)."""
    import resource

    import torch
    from transformers import Qwen3ForCausalLM  # noqa: F401 - imported before the baseline

    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import Batch, PolicyTrainer

    torch.set_num_threads(1)
    vocab = orjson.loads(open(os.path.join(model, "config.json"), "rb").read())["vocab_size"]
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(10, vocab, (n,), generator=g).tolist()  # noqa: E731
    base = _status_kb("VmRSS")
    cfg = TrainerConfig(lr=1e-6, micro_batch_size=seqs, dtype="float32", device="cpu", gradient_checkpointing=True)
    t = PolicyTrainer(model, cfg, max_tokens=length, total_steps=10, temperature=1.0)
    t.step(Batch([ids(4)], [ids(4)], [1.0]))       # warm-up: AdamW's moments exist from here on
    settled = _status_kb("VmRSS")
    batch = Batch([ids(PROMPT) for _ in range(seqs)], [ids(length) for _ in range(seqs)],
                  [1.0 if i % 2 else -0.5 for i in range(seqs)])
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                                 # reset VmHWM to the current RSS
        hwm = "VmHWM"
    except OSError:
        hwm = None
    t.step(batch)
    peak = _status_kb(hwm) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(orjson.dumps({"settled_mib": (settled - base) / 1024, "peak_mib": (peak - base) / 1024,
                        "chunk": cfg.logprob_chunk_size, "method": "VmHWM" if hwm else "ru_maxrss"}).decode())


def planned(model: str, tokens: int, chunk: int) -> tuple[dict, int]:
    from rlvr.train.plan_memory import ModelShape, read_model_config, trainer_memory

    shape = ModelShape.from_config(read_model_config(model)[0])
    return trainer_memory(shape, tokens, compute_bytes=4, logprob_chunk=chunk, on_gpu=False), shape.params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default="small,medium", help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--child", nargs=3, metavar=("MODEL", "SEQS", "LEN"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]))
        return
    env = dict(os.environ, PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="65536")
    rows = []
    with tempfile.TemporaryDirectory() as d:
        for name in a.shapes.split(","):
            dims, seqs, length = SHAPES[name]
            model = build_model(os.path.join(d, name), dims)
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", model, str(seqs), str(length)],
                                 check=True, env=env, capture_output=True, text=True).stdout
            got = orjson.loads(out.strip().splitlines()[-1])
            tokens = seqs * (PROMPT + length)
            plan, params = planned(model, tokens, got["chunk"])
            rows.append({"name": name, "dims": dims, "seqs": seqs, "len": length, "tokens": tokens, "params": params,
                         "plan": plan, **got})
            print(rows[-1], file=sys.stderr)
    from rlvr.train.plan_memory import FRAGMENTATION

    lines = ["## Planned vs measured trainer memory\n",
             f"Command: `python bench/bench_plan_memory.py --shapes {a.shapes}` on {machine()}. `rlvr-train --plan`'s "
             "trainer arithmetic (rlvr.train.plan_memory.trainer_memory, with the CPU trainer's settings: float32, one "
             "rank, no master copy, gradient checkpointing, logprob chunks of "
             f"{rows[0]['chunk']}) against the peak resident memory of one PolicyTrainer.step on a Qwen3-shaped "
             "model with random weights, each shape in its own process, above what the process held before the "
             f"trainer was built ({rows[0]['method']} after a warm-up step; freed buffers go back to the system). "
             "Settled: after the warm-up step (weights, gradients, AdamW's moments); the plan's states are 16 bytes a "
             "parameter. Allocated: the plan's bytes before the allocator's +10%; estimate: with it.\n",
             "| shape | parameters | micro-batch | plan states MiB | settled MiB | plan allocated MiB | plan estimate MiB "
             "| measured peak MiB | plan error (allocated) | plan error (estimate) |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        p, dm = r["plan"], r["dims"]
        states = 16 * r["params"] / 2**20                    # fp32 weights, gradients, two moments
        alloc = p["allocated_bytes"] / 2**20
        est = alloc * (1 + FRAGMENTATION)
        shape = (f"{r['name']}: hidden {dm['hidden_size']}, {dm['num_hidden_layers']} layers, vocab "
                 f"{dm['vocab_size']:,}, intermediate {dm['intermediate_size']}")
        lines.append(f"| {shape} | {r['params'] / 1e6:.1f} M | {r['seqs']} x {PROMPT + r['len']} = {r['tokens']:,} "
                     f"tokens | {states:.0f} | {r['settled_mib']:.0f} | {alloc:.0f} | {est:.0f} | {r['peak_mib']:.0f} | "
                     f"{(alloc - r['peak_mib']) / r['peak_mib']:+.0%} | {(est - r['peak_mib']) / r['peak_mib']:+.0%} |")
    lines.append("")
    err = {r["name"]: r["plan"]["allocated_bytes"] / 2**20 * (1 + FRAGMENTATION) / r["peak_mib"] - 1 for r in rows}
    worst = max(err, key=lambda k: abs(err[k]))
    lines.append(f"Plan error: the estimate is within {abs(err[worst]):.0%} of the measured peak at "
                 f"{'both shapes' if len(rows) == 2 else 'every shape'} (largest error at the "
                 f"{worst} shape). What the CPU cannot show: bf16 compute and its fp32 masters, the CUDA "
                 "context, the caching allocator's real fragmentation, FSDP's gathers and the sync buffers; "
                 "bench/gpu_check.py measures the peak of the Qwen3-1.7B shape on a GPU.")
    from assemble import write_fragment

    write_fragment("plan_memory", lines)


if __name__ == "__main__":
    main()
