"""Reward curves of run folders: reward against samples and against wall time.

    plot_runs(["results/a", "results/b"], "reward.png", labels=["S=0", "S=1"])

Reads each run's traces/trace.jsonl (reward/mean, samples/total, time/elapsed_s); used by
rlvr-plot and the staleness benchmark.
"""

from __future__ import annotations

import os

import orjson

from rlvr.cli import Failure


def read_trace(run_dir: str) -> list[dict]:
    path = os.path.join(run_dir, "traces", "trace.jsonl")
    try:
        with open(path, "rb") as fh:
            rows = []
            for n, ln in enumerate(fh, 1):
                if not ln.endswith(b"\n"):
                    break  # a line being written right now
                try:
                    rows.append(orjson.loads(ln))
                except orjson.JSONDecodeError:
                    raise Failure(f"{path}:{n}: invalid JSON", code=3) from None
            return rows
    except FileNotFoundError:
        raise Failure(f"{run_dir}: no traces/trace.jsonl (not a run folder, or no step finished yet)") from None


def smooth(values: list[float], window: int) -> list[float]:
    if window <= 1:
        return list(values)
    out, acc = [], []
    for v in values:
        acc.append(v)
        if len(acc) > window:
            acc.pop(0)
        out.append(sum(acc) / len(acc))
    return out


def plot_runs(run_dirs: list[str], out: str, labels: list[str] | None = None, metric: str = "reward/mean",
              window: int = 1, title: str | None = None) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for i, rd in enumerate(run_dirs):
        rows = [r for r in read_trace(rd) if metric in r]
        if not rows:
            raise Failure(f"{rd}: no {metric!r} in traces/trace.jsonl")
        label = labels[i] if labels and i < len(labels) else os.path.basename(os.path.normpath(rd))
        y = smooth([r[metric] for r in rows], window)
        samples = [r.get("samples/total", r["step"]) for r in rows]
        wall = [r.get("time/elapsed_s", float("nan")) for r in rows]
        axes[0].plot(samples, y, label=label)
        axes[1].plot(wall, y, label=label)
    axes[0].set_xlabel("samples")
    axes[1].set_xlabel("wall time (s)")
    axes[0].set_ylabel(metric + (f" (mean of {window})" if window > 1 else ""))
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[1].legend(loc="best")
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)
    fig.savefig(out, dpi=120)
    plt.close(fig)
    return out
