"""Figures per step: FLOPs per token, MFU and tokens/s, peak memory per actor, vLLM's engine
statistics, queue times and the fate of every sample per policy version.

Each function returns plain numbers under the trace's metric names, for the driver to put in the
step's line of traces/trace.jsonl (the fates go to traces/fates.jsonl, one line per step and
policy version). The formulas (docs/train-runs.md, "Figures"):

    N          = L * (d*(h + 2*kv)*hd + h*hd*d + 3*d*ff) + d*V     (attention, gated MLP, LM head;
                                                                   the embedding lookup costs none)
    train      = 6*N + 12*L*h*hd*T    FLOPs per trained token      (forward + backward, T: the mean
    generate   = 2*N +  4*L*h*hd*T    FLOPs per generated token     number of positions attended)
    MFU        = tokens * FLOPs per token / (seconds * devices * peak FLOP/s of one device)

The peak is the dense bf16 figure of the GPU (PEAK_FLOPS by name) or one given; MFU is None where
none is known (a CPU), tokens/s always.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass

# dense bf16 peak FLOP/s per GPU, matched as a substring of torch.cuda.get_device_name()
PEAK_FLOPS = (
    ("H200", 989e12), ("H100 PCIe", 756e12), ("H100", 989e12), ("H20", 148e12), ("B200", 2250e12),
    ("A100", 312e12), ("A10G", 125e12), ("A10", 125e12), ("L40S", 362e12), ("L4", 121e12), ("V100", 125e12),
)
FATES = ("trained", "zero_variance", "stale", "timed_out", "masked")
"""The fate of a generated sample: trained on; filtered out as part of a group with zero reward
variance; dropped as too stale; timed out (generation or verification); masked out of the loss."""


@dataclass(frozen=True)
class Shape:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int

    @classmethod
    def from_config(cls, cfg) -> "Shape":
        """From a Hugging Face config (an object or a dict: config.json of the model)."""
        get = (lambda k, d=None: cfg.get(k, d)) if isinstance(cfg, dict) else (lambda k, d=None: getattr(cfg, k, d))
        heads = int(get("num_attention_heads"))
        hidden = int(get("hidden_size"))
        return cls(layers=int(get("num_hidden_layers")), hidden=hidden, heads=heads,
                   kv_heads=int(get("num_key_value_heads") or heads), head_dim=int(get("head_dim") or hidden // heads),
                   intermediate=int(get("intermediate_size")), vocab=int(get("vocab_size")))

    @classmethod
    def from_model_dir(cls, path: str) -> "Shape":
        import json

        with open(os.path.join(path, "config.json")) as fh:
            return cls.from_config(json.load(fh))

    @property
    def params(self) -> int:
        """N: the parameters a token's matrix products touch (without the input embedding)."""
        d, h, kv, hd = self.hidden, self.heads, self.kv_heads, self.head_dim
        attn = d * (h + 2 * kv) * hd + h * hd * d
        return self.layers * (attn + 3 * d * self.intermediate) + d * self.vocab


def flops_per_token(shape: Shape, context: float, training: bool) -> float:
    """6N + 12*L*h*hd*T (training) or 2N + 4*L*h*hd*T (generation), T = context, the mean number
    of positions a token attends to (about half the sequence length under a causal mask)."""
    attn = shape.layers * shape.heads * shape.head_dim * context
    return 6 * shape.params + 12 * attn if training else 2 * shape.params + 4 * attn


def peak_flops(device_name: str | None) -> float | None:
    if not device_name:
        return None
    for key, v in PEAK_FLOPS:
        if key in device_name:
            return v
    return None


def throughput(tokens: int, seconds: float, flops_token: float, devices: int = 1,
               peak: float | None = None) -> dict:
    """{"tokens_per_s", "mfu"} (mfu None without a peak)."""
    if seconds <= 0:
        return {"tokens_per_s": None, "mfu": None}
    tps = tokens / seconds
    mfu = tps * flops_token / (devices * peak) if peak else None
    return {"tokens_per_s": tps, "mfu": mfu}


def memory(device: str = "cpu") -> dict:
    """Peak memory of this process in GB: {"allocated_gb", "reserved_gb"} on a CUDA device
    (torch's peak counters, reset afterwards so that each call covers the time since the last),
    {"rss_gb"} on the CPU (the resident set now, psutil)."""
    if str(device).startswith("cuda"):
        import torch

        out = {"allocated_gb": torch.cuda.max_memory_allocated() / 2**30,
               "reserved_gb": torch.cuda.max_memory_reserved() / 2**30}
        torch.cuda.reset_peak_memory_stats()
        return out
    import psutil

    return {"rss_gb": psutil.Process().memory_info().rss / 2**30}


# vLLM's metric (LLM.get_metrics(), vllm.v1.metrics.reader; the engine must be built with
# disable_log_stats=False) -> our name
VLLM_METRICS = {
    "vllm:kv_cache_usage_perc": "kv_cache_usage",
    "vllm:num_requests_running": "requests_running",
    "vllm:num_requests_waiting": "requests_waiting",
    "vllm:num_preemptions": "preemptions",
    "vllm:prefix_cache_queries": "prefix_cache_queries",
    "vllm:prefix_cache_hits": "prefix_cache_hits",
}


def engine_stats(metrics) -> dict:
    """vLLM's own statistics from LLM.get_metrics(): kv_cache_usage (0-1), requests_running,
    requests_waiting (gauges, summed over vLLM's engines), preemptions, prefix_cache_queries and
    _hits (counters since the engine started) and prefix_cache_hit_rate (hits / queries)."""
    out: dict[str, float] = {}
    for m in metrics or ():
        key = VLLM_METRICS.get(getattr(m, "name", None))
        v = getattr(m, "value", None)
        if key is None or not isinstance(v, (int, float)):
            continue
        out[key] = out.get(key, 0.0) + float(v)
    if out.get("prefix_cache_queries"):
        out["prefix_cache_hit_rate"] = out.get("prefix_cache_hits", 0.0) / out["prefix_cache_queries"]
    return out


def queue_stats(waits: list[float]) -> dict:
    """A step's queue times (seconds from a sample's generation to its training step)."""
    if not waits:
        return {}
    s = sorted(waits)
    return {"queue/wait_mean_s": sum(s) / len(s), "queue/wait_max_s": s[-1],
            "queue/wait_p50_s": s[len(s) // 2]}


class SampleFates:
    """Counts of samples per (policy version that generated them, fate), since the last take()."""

    def __init__(self):
        self.counts: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(FATES, 0))

    def add(self, version: int, fate: str, n: int = 1) -> None:
        if fate not in FATES:
            raise ValueError(f"fate {fate!r}: expected one of {', '.join(FATES)}")
        self.counts[int(version)][fate] += n

    def take(self, step: int) -> list[dict]:
        """The lines for traces/fates.jsonl: {"step", "policy_version", <fate>: n, ...} per version."""
        rows = [{"step": step, "policy_version": v, **c} for v, c in sorted(self.counts.items())]
        self.counts.clear()
        return rows

    def metrics(self) -> dict:
        """The step's totals over versions, as trace metrics (fates/<fate>)."""
        tot = dict.fromkeys(FATES, 0)
        for c in self.counts.values():
            for k, n in c.items():
                tot[k] += n
        return {f"fates/{k}": n for k, n in tot.items()}


def actor_figures(name: str, mem: dict, stats: dict | None = None) -> dict:
    """One actor's memory and engine statistics as trace metrics: memory/<name>/<key>,
    engine/<name>/<key>."""
    out = {f"memory/{name}/{k}": v for k, v in mem.items()}
    out.update({f"engine/{name}/{k}": v for k, v in (stats or {}).items()})
    return out
