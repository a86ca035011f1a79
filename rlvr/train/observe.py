"""What a Ray actor exposes so the driver can see into it: its spans and its Python stacks.

    @ray.remote(concurrency_groups=OBSERVE_GROUPS)
    class EngineActor(Observed):
        def __init__(self, ...):
            self.observe_as("engine-0")          # names this process's spans
            ...

`drain_spans()` and `stacks()` run in the concurrency group "observe" (one thread of its own), so
an actor blocked in a long call (a hung generate, a collective that never completes) still
answers them. The driver side: `ActorProbe(handles)` turns actor handles into the two callables
the SpanLog feeder and the watchdog take (`drain_all()` and `stacks_all()`), each call bounded by
a timeout so that a dead actor is named, never waited on.
"""

from __future__ import annotations

import os
import time

import ray

from rlvr.train import spans
from rlvr.train.watchdog import python_stacks

OBSERVE_GROUPS = {"observe": 1}


class Observed:
    """Mixin for Ray actors (declare the class with concurrency_groups=OBSERVE_GROUPS)."""

    @ray.method(concurrency_group="observe")
    def observe_as(self, name: str, enabled: bool = True) -> None:
        """Name this process's spans (the lane on the timeline): engine-0, trainer-1, teacher-0;
        enabled False (log.spans: false): record none."""
        spans.set_actor(name, enabled)

    @ray.method(concurrency_group="observe")
    def observe_figures(self) -> dict:
        """This actor's figures: {"memory": peak memory (rlvr.train.figures.memory) on the device its
        `device()` method names (the CPU without one), "engine": vLLM's statistics where the actor's
        `engine_metrics()` returns LLM.get_metrics()}."""
        from rlvr.train import figures

        dev = self.device() if callable(getattr(self, "device", None)) else "cpu"
        em = getattr(self, "engine_metrics", None)
        return {"memory": figures.memory(dev), "engine": figures.engine_stats(em()) if callable(em) else {}}

    @ray.method(concurrency_group="observe")
    def drain_spans(self) -> dict:
        """{"spans": closed since the last call, "open": open now} of this actor's process."""
        return spans.drain()

    @ray.method(concurrency_group="observe")
    def stacks(self) -> str:
        """The Python stacks of every thread of this actor's process (py-spy's native view too
        where py-spy is installed)."""
        return python_stacks(pid=os.getpid(), py_spy=True)


class ActorProbe:
    """The driver's view of its actors: {name: handle} of Observed actors, or a function that
    returns it (asked at every call, so that a restarted engine's new handle is the one asked)."""

    def __init__(self, actors, timeout_s: float = 10.0):
        self.actors = actors if callable(actors) else dict(actors)
        self.timeout_s = timeout_s

    def handles(self) -> dict:
        return dict(self.actors()) if callable(self.actors) else self.actors

    def ask(self, method: str) -> dict:
        """{name: what method() returned, or the exception (a timeout, a dead actor)} of every actor."""
        refs = {}
        for name, h in self.handles().items():
            try:
                refs[name] = getattr(h, method).remote()
            except Exception as e:  # noqa: BLE001 - e.g. an actor handle of a dead actor
                refs[name] = e
        deadline = time.monotonic() + self.timeout_s
        out = {}
        for name, ref in refs.items():
            if isinstance(ref, Exception):
                out[name] = ref
                continue
            try:
                out[name] = ray.get(ref, timeout=max(0.0, deadline - time.monotonic()))
            except ray.exceptions.GetTimeoutError:
                out[name] = TimeoutError(f"{name} did not answer {method}() within {self.timeout_s:g} s")
            except Exception as e:  # noqa: BLE001 - a dead actor is reported, not raised
                out[name] = e
        return out

    def drain_all(self, log: "spans.SpanLog") -> list[str]:
        """Drain every actor's spans into log; returns the names of the actors that did not answer."""
        silent = []
        for name, got in self.ask("drain_spans").items():
            if isinstance(got, dict):
                log.add(name, got)
            else:
                silent.append(name)
        return silent

    def stacks_all(self) -> dict[str, str]:
        return {name: got if isinstance(got, str) else f"(no stacks: {type(got).__name__}: {got})"
                for name, got in self.ask("stacks").items()}


def make_poll(log: "spans.SpanLog", probe: ActorProbe | None = None):
    """The watchdog's poll: the driver's own spans, then every actor's, into log; returns the
    actors that did not answer."""
    def poll() -> list[str]:
        log.add(spans.recorder().actor, spans.drain())
        return probe.drain_all(log) if probe is not None else []
    return poll


class RunObserver:
    """The driver's whole side, in one object: the spans file, the stall watchdog, the actors'
    figures and the sample fates.

        obs = RunObserver(run_dir, cfg.log, actors=lambda: {"engine-0": h0, "trainer-0": t0})
        ...                                   # each step:
        metrics.update(obs.step_figures())   # memory/<actor>/..., engine/<actor>/...
        obs.fates.add(version, "trained", n)  # as the step settles its samples' fates
        metrics.update(obs.end_step(step))   # fates/<fate>; spans and fates written
        ...
        obs.close()                           # however the run ends
    """

    def __init__(self, run_dir: str, log_cfg, actors=None, timeout_s: float = 10.0, err=None):
        from rlvr.train.figures import SampleFates
        from rlvr.train.watchdog import Watchdog

        self.enabled = bool(getattr(log_cfg, "spans", True))
        spans.recorder().reset("driver")   # nothing this process recorded before the run is the run's
        spans.recorder().enabled = self.enabled
        self.log = spans.SpanLog(run_dir, log_cfg.spans_full_mb, log_cfg.spans_sample_every)
        self.probe = ActorProbe(actors if actors is not None else {}, timeout_s)
        self.poll = make_poll(self.log, self.probe)
        self.fates = SampleFates()
        self._fates = open(os.path.join(run_dir, "traces", "fates.jsonl"), "ab")
        self.watchdog = None
        if self.enabled and log_cfg.stall_s > 0:
            self.watchdog = Watchdog(run_dir, log_cfg.stall_s, self.log, stacks=self.probe.stacks_all,
                                     poll=self.poll, err=err).start()

    def step_figures(self) -> dict:
        """Every actor's memory and engine statistics as trace metrics (an actor that does not
        answer is left out)."""
        from rlvr.train.figures import actor_figures

        out = {}
        for name, got in self.probe.ask("observe_figures").items():
            if isinstance(got, dict):
                out.update(actor_figures(name, got.get("memory") or {}, got.get("engine")))
        return out

    def end_step(self, step: int) -> dict:
        """Drain the spans (when no watchdog thread does), write the step's outlines and its fates
        per version; returns the step's fates/<fate> metrics."""
        import orjson

        if self.enabled and self.watchdog is None:
            self.poll()
        self.log.end_step(step)
        m = self.fates.metrics()
        rows = self.fates.take(step)
        if rows:
            self._fates.write(b"".join(orjson.dumps(r) + b"\n" for r in rows))
            self._fates.flush()
        return m

    def close(self) -> None:
        if self.watchdog is not None:
            self.watchdog.stop()
        if self.enabled:
            try:
                self.poll()
            except Exception:  # noqa: BLE001 - the actors may be gone already
                pass
        self.log.close()
        self._fates.close()
