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
    def observe_as(self, name: str) -> None:
        """Name this process's spans (the lane on the timeline): engine-0, trainer-1, teacher-0."""
        spans.set_actor(name)

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

    def _ask(self, method: str) -> dict:
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
        for name, got in self._ask("drain_spans").items():
            if isinstance(got, dict):
                log.add(name, got)
            else:
                silent.append(name)
        return silent

    def stacks_all(self) -> dict[str, str]:
        return {name: got if isinstance(got, str) else f"(no stacks: {type(got).__name__}: {got})"
                for name, got in self._ask("stacks").items()}


def make_poll(log: "spans.SpanLog", probe: ActorProbe | None = None):
    """The watchdog's poll: the driver's own spans, then every actor's, into log; returns the
    actors that did not answer."""
    def poll() -> list[str]:
        log.add(spans.recorder().actor, spans.drain())
        return probe.drain_all(log) if probe is not None else []
    return poll
