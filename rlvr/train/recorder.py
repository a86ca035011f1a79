"""The run's record keeping: the traces (traces/trace.jsonl, rollouts.jsonl, samples.jsonl)
and the experiment trackers fed from them, the progress line on stderr, the background
uploads of the run folder (checkpoint.upload), and run.json's outcome.

    rec = Recorder(cfg, run_dir, resume, start_step)
    rec.write(metrics, groups, version, annotate)   # a step's line, its rollouts and samples
    rec.close(status, last, faults)                 # traces, trackers, run.json's outcome
    rec.finish_uploads()                            # the final traces and run.json go up

`Throughput` turns a step's batch and times into its mfu/ and throughput/ figures, and
`observer(run)` makes the run's RunObserver (rlvr.train.observe: spans, stall watchdog, the
actors' memory and engine figures, sample fates).
"""

from __future__ import annotations

import os
import sys
import time

from rlvr.messages import say
from rlvr.runs import Traces, end_manifest
from rlvr.train.metrics import rollout_record, sample_record


def log(msg: str) -> None:
    say(msg)


def uploader(cfg, run_dir: str):
    """The run folder's background uploader (rlvr.s3.BackgroundUploader), None without
    checkpoint.upload."""
    if not cfg.checkpoint.upload:
        return None
    from rlvr.s3 import BackgroundUploader, Layout

    # Default: s3://bucket/prefix/ + <run folder name>/..., the layout rlvr-s3-sync pull
    # expects (upload.layout maps it otherwise). Checkpoints being written (hidden .tmp-*
    # folders) stay local; a checkpoint's completeness marker goes up after its weights, so
    # a remote copy is never falsely complete. The live files (traces) go up on their own
    # thread as steps end, never behind a checkpoint.
    u = cfg.upload
    run_dir = os.path.abspath(run_dir)
    up = BackgroundUploader(cfg.checkpoint.upload, root=run_dir,
                            layout=Layout(u.layout or Layout.DEFAULT, run=os.path.basename(run_dir)),
                            exclude=["*/.tmp-*"], last=["trainer_state.pt"])
    up.live([os.path.join(run_dir, p) for p in u.live], u.trace_interval_s)
    return up


def observer(run):
    """The run's RunObserver over its actors as they are now (asked at every call: a restarted
    engine's new actor is the one asked): trainer-<rank>, engine-<i>, teacher-<i>."""
    from rlvr.train.observe import RunObserver

    def actors() -> dict:
        out = {f"trainer-{r}": h for r, h in enumerate(run.trainers.ranks)}
        out.update({f"engine-{e}": h for e, h in enumerate(run.fleet.engines)})
        for m in run.modes or ():
            t = getattr(m, "teacher", None)
            out.update({f"teacher-{e}": h for e, h in enumerate(getattr(t, "actors", None) or ())})
        return out
    return RunObserver(run.run_dir, run.cfg.log, actors=actors)


class Throughput:
    """mfu/ and throughput/ of a step: the trainer's trained tokens (prompt + completion of every
    sequence in the loss) over the trainer's seconds, the engines' generated tokens over their
    busy seconds (summed over engines: the rate of one engine while it generates); MFU from the
    model's FLOPs per token (rlvr.train.figures) where the GPU's peak is known."""

    def __init__(self, model_dir: str, trainer_devices: int, engine_devices: float, gpus: bool):
        from rlvr.train.figures import Shape, peak_flops

        try:
            self.shape = Shape.from_model_dir(model_dir)
        except (OSError, KeyError, TypeError, ValueError):
            self.shape = None   # no FLOPs per token: tokens/s only
        self.peak = None
        if gpus:
            try:
                import torch

                self.peak = peak_flops(torch.cuda.get_device_name(0)) if torch.cuda.is_available() else None
            except Exception:  # noqa: BLE001 - no MFU, tokens/s still
                self.peak = None
        self.trainer_devices, self.engine_devices = max(1, trainer_devices), max(1.0, engine_devices)

    def metrics(self, a, drawn: list, times) -> dict:
        from rlvr.train.figures import flops_per_token, throughput

        out = {}
        seqs = [(len(p), len(c)) for p, c, keep in zip(a.batch.prompt_ids, a.batch.completion_ids, a.batch.loss_mask)
                if keep and c]
        tokens = sum(p + c for p, c in seqs)
        if seqs and times.train > 0:
            ctx = tokens / len(seqs) / 2
            f = flops_per_token(self.shape, ctx, True) if self.shape else 0.0
            t = throughput(tokens, times.train, f, self.trainer_devices, self.peak if self.shape else None)
            out["throughput/trainer_tokens_per_s"] = t["tokens_per_s"]
            if t["mfu"] is not None:
                out["mfu/trainer"] = t["mfu"]
        gen = [(len(g.prompt_ids), len(s.get("token_ids") or ())) for g in drawn for s in g.samples]
        gen_tokens = sum(c for _, c in gen)
        if gen_tokens and times.engine_busy > 0:
            ctx = sum(p + c / 2 for p, c in gen) / len(gen)
            f = flops_per_token(self.shape, ctx, False) if self.shape else 0.0
            t = throughput(gen_tokens, times.engine_busy, f, self.engine_devices, self.peak if self.shape else None)
            out["throughput/engine_tokens_per_s"] = t["tokens_per_s"]
            if t["mfu"] is not None:
                out["mfu/engines"] = t["mfu"]
        return out


class Recorder:
    def __init__(self, cfg, run_dir: str, resume: bool, start_step: int):
        from rlvr.trackers import for_run

        self.cfg, self.run_dir = cfg, run_dir
        self.uploader = uploader(cfg, run_dir)
        self.trackers = for_run(cfg.log.trackers, run_dir, resume, start_step, warn=lambda m: log(f"warning: {m}"))
        self.traces = Traces(run_dir, [self.trackers.log] if self.trackers else [])

    def write(self, metrics: dict, groups: list, version: int, annotate=None) -> None:
        """A step's metrics line, its groups' rollout records and the first log.samples_per_step
        of them as sample records (annotate(group, record): what the modes add to a sample)."""
        traces = self.traces
        traces.metrics(metrics)
        for i, g in enumerate(groups):
            traces.rollout(rollout_record(g, version))
            if i < self.cfg.log.samples_per_step:
                rec = sample_record(g, version)
                if annotate is not None:
                    annotate(g, rec)
                traces.sample(rec)
        if self.cfg.log.stdout:
            from rlvr.records import dumps

            sys.stdout.buffer.write(dumps(metrics))
            sys.stdout.flush()

    def tick(self) -> None:
        if self.uploader is not None:
            self.uploader.tick()  # the live traces changed: sent on the uploader's thread

    def progress(self, metrics: dict, version: int, start_step: int, total: int, t_start: float) -> None:
        """An RL step's line on stderr."""
        done = version - start_step
        eta = (time.monotonic() - t_start) / done * (total - version) if done else 0
        log(f"step {version}/{total} reward {metrics['reward/mean']:.3f} "
            f"len {metrics['completions/mean_length']:.1f} tok/s {metrics['throughput/tokens_per_s']:.0f} "
            f"staleness {metrics['staleness/mean']:.2f} step {metrics['time/step_s']:.2f}s ETA {eta:.0f}s")

    def close(self, status: str, last: dict, faults: dict) -> None:
        """The traces and trackers closed, the outcome in run.json."""
        self.traces.close()
        self.trackers.close(status)
        end_manifest(self.run_dir, status, final_metrics=last, faults=faults)

    def finish_uploads(self) -> None:
        up = self.uploader
        if up is not None:
            up.submit(os.path.abspath(self.run_dir))  # the final traces and run.json
            failed = up.close(timeout=600)
            if failed:
                log(f"{len(failed)} upload(s) to {self.cfg.checkpoint.upload} failed: {failed[0][1]}")
