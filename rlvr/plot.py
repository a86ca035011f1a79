"""Reward curves of run folders: reward against samples and against wall time.

    plot_runs(["results/a", "results/b"], "reward.png", labels=["S=0", "S=1"])

Reads each run's traces/trace.jsonl (reward/mean, samples/total, time/elapsed_s); used by
rlvr-plot and the staleness benchmark.
"""

from __future__ import annotations

import functools
import os

import orjson

from rlvr.errors import BadInput, Failure
from rlvr.records import atomic_file, is_number


def _bad_line(path: str, n: int, what: str, field: str | None = None) -> BadInput:
    return BadInput(f"{path}:{n}: {what}" + (f" (field {field})" if field else ""))


def read_trace(run_dir: str, metric: str = "reward/mean") -> list[tuple[float, float, float]]:
    """(samples, wall seconds, metric) per step of a run that logged the metric. Blank lines
    are skipped, a line still being written is ignored; anything else that is not a step
    line with numbers is bad input at its line (exit 3)."""
    path = os.path.join(run_dir, "traces", "trace.jsonl")
    try:
        fh = open(path, "rb")
    except FileNotFoundError:
        raise Failure(f"{run_dir}: no traces/trace.jsonl (not a run folder, or no step finished yet)") from None
    except OSError as e:
        raise Failure(f"{path}: cannot read: {e.strerror or e}") from None
    points = []
    with fh:
        for n, ln in enumerate(fh, 1):
            if not ln.endswith(b"\n"):
                break  # a line being written right now
            if not ln.strip():
                continue
            bad = functools.partial(_bad_line, path, n)
            try:
                row = orjson.loads(ln)
            except orjson.JSONDecodeError:
                raise bad("invalid JSON") from None
            if not isinstance(row, dict):
                raise bad("expected a JSON object (one step's metrics)")
            if metric not in row or row[metric] is None:
                continue
            x = row.get("samples/total", row.get("step"))
            wall = row.get("time/elapsed_s", float("nan"))
            for field, v in ((metric, row[metric]), ("samples/total" if "samples/total" in row else "step", x),
                             ("time/elapsed_s", wall)):
                if not is_number(v):
                    raise bad(f"must be a number, got {type(v).__name__}", field)
            points.append((float(x), float(wall), float(row[metric])))
    return points


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
        rows = read_trace(rd, metric)
        if not rows:
            raise Failure(f"{rd}: no {metric!r} in traces/trace.jsonl")
        label = labels[i] if labels and i < len(labels) else os.path.basename(os.path.normpath(rd))
        y = smooth([m for _, _, m in rows], window)
        samples = [x for x, _, _ in rows]
        wall = [t for _, t, _ in rows]
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
    with atomic_file(out) as fh:  # a reader never sees half a picture
        fig.savefig(fh, dpi=120, format=os.path.splitext(out)[1][1:].lower() or "png")
    plt.close(fig)
    return out
