"""The driver's side of a weight sync (the transfer itself is rlvr.train.weight_sync's): push
the trainer's weights to every engine tagged with a version, wait for them (synchronous mode,
or a broadcast) or confirm them before the next step (asynchronous mode), and tell who failed.

An engine that refused the weights, a trainer that failed, and (in a broadcast, which cannot
go on without every member) an engine that died end the run at once, naming it; with the
object store a dead engine is restarted once the others have finished, which brings it to the
version. A sync past sync.timeout_s ends the run naming who is late.
"""

from __future__ import annotations

import time

from rlvr.errors import Failure
from rlvr.train import ray_calls


class EngineSync:
    def __init__(self, cfg, fleet, trainers, weight_sync):
        self.cfg, self.fleet, self.trainers, self.weight_sync = cfg, fleet, trainers, weight_sync
        self.verified: int | None = None   # engines whose received weights matched the trainer's (a broadcast)

    def push(self, version: int, wait: bool) -> float:
        """Send the weights of `version`; returns the seconds it took the driver."""
        t0 = time.monotonic()
        self.verified = None
        self.fleet.abort_stale(version)          # sync.abort_in_flight (off: nothing)
        refs = self.weight_sync.push(version)   # {engine index: ref} (a broadcast: + the trainer ranks')
        self.fleet.synced_version = version
        if wait or self.weight_sync.blocking:
            # a broadcast waits for the engines' queued generate calls too when the loop is asynchronous
            self.wait(refs, version, self.cfg.sync.timeout_s + (0 if wait else self.cfg.sync.generate_timeout_s))
        else:
            self.fleet.pending_syncs = refs
        return time.monotonic() - t0

    def wait(self, refs: dict, version: int, limit: float) -> None:
        """Wait for a sync's calls ({engine index or "trainer-<rank>": ref}) as they finish, and
        compare what the engines received with what the trainer sent (weight_sync's check);
        see the module for what ends the run."""
        import ray

        from rlvr.train.weight_sync import cause_line

        deadline = time.monotonic() + limit
        pending = {ref: key for key, ref in refs.items()}
        results, dead = {}, []
        while pending:
            ready, _ = ray_calls.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = sorted(f"engine {k}" if isinstance(k, int) else k.replace("-", " rank ") for k in pending.values())
                raise Failure(f"weight sync to version {version} took longer than {limit:.0f}s (sync.timeout_s): "
                              f"{', '.join(late)} did not finish (hung?)")
            for ref in ready:
                key = pending.pop(ref)
                try:
                    results[key] = ray_calls.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                        ray.exceptions.RayTaskError) as ex:
                    died = not isinstance(ex, ray.exceptions.RayTaskError)
                    if isinstance(key, str):       # a trainer rank: its error is the run's
                        self.trainers.failed(ex, f"the weight sync to version {version}")
                    if died and not self.weight_sync.blocking:
                        dead.append(key)
                        continue
                    what = "died during" if died else f"refused ({cause_line(ex)})"
                    raise Failure(f"weight sync to version {version} failed: engine {key} {what} the "
                                  f"{'broadcast' if self.weight_sync.blocking else 'update'}") from None
        if dead:
            # The weights come from the trainer: tell a dead trainer from a dead engine.
            self.trainers.alive(f"the weight sync to version {version}")
        for e in dead:
            self.fleet.restart_engine(e, "died during a weight sync")
        self.verified = self.weight_sync.check(results)

    def confirm(self, step: int) -> None:
        """Async mode: the updates sent after the previous step must have landed by now."""
        import ray

        cfg = self.cfg
        for e, ref in list(self.fleet.pending_syncs.items()):
            try:
                ray_calls.get(ref, timeout=cfg.sync.timeout_s + cfg.sync.generate_timeout_s)
            except ray.exceptions.GetTimeoutError:
                self.fleet.restart_engine(e, "did not apply a weight update in time")
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
                # the weights come from the trainer: a dead trainer ends the run
                self.trainers.alive(f"the weight sync to version {step}")
                self.fleet.restart_engine(e, f"failed a weight update ({type(ex).__name__})")
        self.fleet.pending_syncs = {}


def check_agreement(cfg, metrics: dict, step: int) -> None:
    """The first step of a run (or of a resumed one): the engines' log-probs of the sampled tokens
    must agree with the trainer's within sync.max_logprob_diff, or the run stops here with the
    figure, instead of training on an importance ratio that measures a defect. Not checked
    where the two are known to differ (rollout.logprobs raw at a temperature other than 1)."""
    limit = cfg.sync.max_logprob_diff
    diff = metrics.get("logprob/engine_vs_trainer_abs_diff")
    r = cfg.rollout
    if limit is None or diff is None or diff != diff or (r.logprobs == "raw" and r.temperature not in (0.0, 1.0)):
        return
    if diff > limit:
        raise Failure(f"step {step + 1}: the engines' log-probs of the sampled tokens differ from the trainer's by "
                      f"{diff:.3g} on average (sync.max_logprob_diff {limit:g}; bf16 noise is about 0.01-0.05): the "
                      "engines are not sampling from the trainer's weights (a weight loading or sync defect, or a "
                      "sampling setting the trainer does not share); `make gpu-check` measures the agreement, "
                      "sync.max_logprob_diff: null turns this check off")
