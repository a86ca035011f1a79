"""Trainer memory benchmark: peak memory of one trainer step at Qwen3's real vocabulary.

    python bench/bench_memory.py [--seqs 4] [--len 192] [--chunks 0,128,256]

A Qwen3-shaped model with the real vocabulary (151,936) and a small hidden size (64, one
layer) is built offline, so that the step's memory is the loss path's: the output layer,
the temperature, the log-softmax, the entropy and their backward. Each chunk size runs one
PolicyTrainer.step in its own process (chunk 0 is the unchunked path: the [N, L, V] logits,
as the trainer computed them before chunking), and reports the step's peak resident memory
above what the process held just before it (VmHWM after resetting it through
/proc/self/clear_refs; ru_maxrss where that is not available), with the step's loss and
gradient norm to show that every chunk size computes the same thing.

Writes docs/bench/memory.md.
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

from bench_train import machine  # noqa: E402

VOCAB = 151_936
PROMPT = 16


def build_model(out: str) -> str:
    import torch
    from transformers import Qwen3Config, Qwen3ForCausalLM

    from rlvr.tiny import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen3Config(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
                      num_attention_heads=1, num_key_value_heads=1, head_dim=64, max_position_embeddings=4096,
                      tie_word_embeddings=True, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    torch.manual_seed(0)
    Qwen3ForCausalLM(cfg).save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    return out


def _status_kb(key: str) -> int:
    for ln in open("/proc/self/status"):
        if ln.startswith(key + ":"):
            return int(ln.split()[1])
    raise KeyError(key)


def child(model: str, chunk: int, seqs: int, length: int) -> None:
    """One measured trainer step; prints one JSON line."""
    import resource
    import time

    import torch

    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import Batch, PolicyTrainer

    torch.set_num_threads(1)
    cfg = TrainerConfig(lr=1e-6, micro_batch_size=seqs, dtype="float32", device="cpu", logprob_chunk_size=chunk)
    t = PolicyTrainer(model, cfg, max_tokens=length, total_steps=10, temperature=0.7)
    g = torch.Generator().manual_seed(0)
    ids = lambda n: torch.randint(10, VOCAB, (n,), generator=g).tolist()  # noqa: E731
    t.step(Batch([ids(4)], [ids(4)], [1.0]))       # warm-up: optimizer state and gradients exist from here on
    batch = Batch([ids(PROMPT) for _ in range(seqs)], [ids(length) for _ in range(seqs)],
                  [1.0 if i % 2 else -0.5 for i in range(seqs)])
    try:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")                                 # reset VmHWM to the current RSS
        before, hwm = _status_kb("VmRSS"), "VmHWM"
    except OSError:
        before, hwm = _status_kb("VmRSS"), None
    t0 = time.perf_counter()
    m = t.step(batch)
    wall = time.perf_counter() - t0
    peak = _status_kb(hwm) if hwm else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(orjson.dumps({"chunk": chunk, "peak_mib": (peak - before) / 1024, "step_s": wall,
                        "loss": m["loss/total"], "grad_norm": m["grad/norm"],
                        "method": "VmHWM" if hwm else "ru_maxrss"}).decode())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--seqs", type=int, default=4)
    ap.add_argument("--len", type=int, default=192, help="completion tokens per sequence")
    ap.add_argument("--chunks", default="0,64,128,256", help="logprob_chunk_size values; 0 = unchunked")
    ap.add_argument("--headline", type=int, default=128, help="the chunk size the summary line reports")
    ap.add_argument("--child", nargs=4, metavar=("MODEL", "CHUNK", "SEQS", "LEN"), help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        child(a.child[0], int(a.child[1]), int(a.child[2]), int(a.child[3]))
        return
    chunks = [int(c) for c in a.chunks.split(",")]
    env = dict(os.environ, PYTHONPATH=ROOT, MALLOC_MMAP_THRESHOLD_="65536")  # big buffers return to the OS when freed
    rows = []
    with tempfile.TemporaryDirectory() as d:
        model = build_model(os.path.join(d, "m"))
        for c in chunks:
            out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", model, str(c), str(a.seqs),
                                  str(a.len)], check=True, env=env, capture_output=True, text=True).stdout
            rows.append(orjson.loads(out.strip().splitlines()[-1]))
            print(rows[-1], file=sys.stderr)
    base = next(r for r in rows if r["chunk"] == 0)
    tokens = a.seqs * a.len
    copy_mib = a.seqs * (a.len + 1) * VOCAB * 4 / 2 ** 20
    lines = ["## Trainer memory (loss path)\n",
             f"Command: `python bench/bench_memory.py --seqs {a.seqs} --len {a.len} --chunks {a.chunks}` on {machine()}. "
             f"One PolicyTrainer.step (fp32, temperature 0.7, one micro-batch) on {a.seqs} sequences of {PROMPT} prompt "
             f"+ {a.len} completion tokens ({tokens} completion tokens), on a Qwen3-shaped model with the real vocabulary "
             f"({VOCAB:,}) and hidden size 64 (one layer), so that the step's memory is the loss path's: output layer, "
             "temperature, log-softmax, entropy and their backward. Peak: the step's peak resident memory above what the "
             f"process held before it ({base['method']}), each chunk size in its own process. One float32 copy of this "
             f"micro-batch's logits is {copy_mib:.0f} MiB.\n",
             "| train.logprob_chunk_size | peak MiB | vs unchunked | step s | loss | grad norm |", "|---|---|---|---|---|---|"]
    for r in rows:
        name = "0 (unchunked: [N, L, V] logits)" if r["chunk"] == 0 else str(r["chunk"])
        lines.append(f"| {name} | {r['peak_mib']:.0f} | {r['peak_mib'] / base['peak_mib']:.2f}x | {r['step_s']:.2f} | "
                     f"{r['loss']:.7f} | {r['grad_norm']:.7f} |")
    best = next((r for r in rows if r["chunk"] == a.headline), None) or min(
        (r for r in rows if r["chunk"]), key=lambda r: r["peak_mib"])
    lines.append("")
    lines.append(f"Chunked (chunk {best['chunk']} of {tokens} tokens): {best['peak_mib'] / base['peak_mib']:.2f}x of the "
                 "unchunked peak (target: at most 0.25x). The peak "
                 "grows with the chunk (one or two chunk-sized float32 buffers: a chunk's logits, then its softmax and "
                 "gradient in place), not with the micro-batch: at 16 x 2,048 tokens one full logits copy is 19 GiB "
                 "while the default chunk of 1,024 tokens needs buffers of 0.6 GiB. The chunks' logits are recomputed "
                 "in the backward pass (one more output-layer matmul per chunk; step times here carry the shared "
                 "machine's noise); tests/test_grpo.py and tests/test_trainer.py check that loss "
                 "and gradients equal the unchunked computation.")
    from assemble import write_fragment

    write_fragment("memory", lines)


if __name__ == "__main__":
    main()
