"""In-flight serving for rlvr-train's engine actors (sync.mode: in_flight).

One thread owns the engine and keeps one stream open while there is work: requests from any
number of generate calls join the running batch as they come (a round's prompts start while
the previous round's long completions are still being generated), and weight updates from
other threads land between two engine steps, the running requests going on with the new
weights (rlvr.engines: update_weights(..., in_flight="recompute" | "keep")). Every sample
then carries the versions of its tokens (Sample.versions).

    server = InFlightServer(engine, kv="recompute", version=lambda: actor.version)
    results, errors, v0 = server.generate(prompt_ids, samplings, seeds, min_version=3)  # any thread
    server.run(lambda: engine.update_weights(w, 4, in_flight="recompute"))             # any thread

`min_version` holds a generate call back until the engine holds at least that version: the
driver admits a round once the update it needs was sent, and the update may still be on its
way (in between_rounds mode Ray's call order gives this for free). A request that the engine
refuses fails alone (its index is in errors); a failure that leaves the engine unusable fails
every generate call in flight, and rlvr-train restarts the engine as in between_rounds mode.

With tools (rollout.tools; generate(..., tools=rlvr.tools.ToolSettings)) each of a request's n
samples is its own trajectory (rlvr.tools.Trajectory, the turn logic tool_stream runs): when a
model turn closes a code block, the code runs in the sandbox (rlvr.tools.run_python) on a tool
thread while the engine steps on with everything else, and the next model turn joins the running
batch as a new request: it resumes on whatever weights the engine holds then, and its tokens say
which (tool tokens take the version of the model turn they answer). Tool calls run one at a time
(the sandbox serves one session at a time). The request's result comes once its n samples end.
"""

from __future__ import annotations

import itertools
import threading
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from contextlib import closing
from collections.abc import Callable, Iterator
from typing import Any


class _Closed(Exception):
    """Raised by the stream's source once the server is closed: the stream ends (its requests
    in the engine are aborted) between two engine steps."""


def _closed_error() -> RuntimeError:
    return RuntimeError("the engine server was closed")


class _Job:
    def __init__(self, fn: Callable[[], Any]):
        self.fn = fn
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: BLE001 - handed to the caller's thread
            self.error = e
        finally:
            self.done.set()

    def wait(self) -> Any:
        self.done.wait()
        if self.error is not None:
            raise self.error
        return self.result


class _Call:
    """One generate call: its requests' results as they finish."""

    def __init__(self, n: int, version: Any):
        self.left = n
        self.results: dict[int, Any] = {}
        self.errors: dict[int, str] = {}
        self.version = version
        self.failure: BaseException | None = None
        self.done = threading.Event()
        if n == 0:
            self.done.set()

    def finish(self, i: int, result: Any = None, error: str | None = None) -> None:
        if error is not None:
            self.errors[i] = error
        else:
            self.results[i] = result
        self.left -= 1
        if self.left <= 0:
            self.done.set()

    def fail(self, e: BaseException) -> None:
        self.failure = e
        self.done.set()


class _Group:
    """One request of a generate call with tools: its n trajectories, and the samples done."""

    def __init__(self, call: _Call, i: int, prompt: list[int], n: int, tools):
        self.call, self.i, self.prompt, self.tools = call, i, prompt, tools
        self.samples: list = [None] * n
        self.version: Any = None
        self.over = False


class InFlightServer:
    """An engine (rlvr.engines.base.Engine) served by one thread; see the module docstring.

    kv: "recompute" or "keep", what happens to the running requests' keys and values when
    weights change under them. version(): the version the engine holds (the actor's count)."""

    WINDOW = 1 << 30   # no window: every request goes to the engine, which schedules them itself

    def __init__(self, engine, kv: str, version: Callable[[], int]):
        if kv not in ("recompute", "keep"):
            raise ValueError(f"kv must be recompute or keep, got {kv!r}")
        self.engine, self.kv, self.version = engine, kv, version
        self._cv = threading.Condition()
        self._queue: deque = deque()        # (handle, prompt ids, seed, sampling) not yet in the engine
        self._jobs: deque = deque()         # _Job, run on the engine thread in order
        self._owner: dict[Any, tuple] = {}  # handle -> (call, index, request), queued or in the engine
        self._in_engine: set = set()
        self._ids = itertools.count()
        self._turns: dict[Any, tuple] = {}  # handle -> (rlvr.tools.Trajectory, _Group) with tools
        self._tool_pool: ThreadPoolExecutor | None = None
        self._closed = False
        self._thread = threading.Thread(target=self._serve, name="rlvr-inflight-engine", daemon=True)
        self._thread.start()

    # -- any thread ---------------------------------------------------------------------------

    def run(self, fn: Callable[[], Any]) -> Any:
        """fn() on the engine thread: between two steps of the open stream, or at once when
        none is open. Returns its result (raises its error)."""
        job = _Job(fn)
        with self._cv:
            if self._closed:
                raise RuntimeError("the engine server is closed")
            self._jobs.append(job)
            self._cv.notify_all()
        return job.wait()

    def generate(self, prompt_ids: list[list[int]], samplings: list, seeds: list, min_version: int | None = None,
                 tools=None) -> tuple[dict[int, Any], dict[int, str], Any]:
        """Generate prompt i with samplings[i] and seeds[i], alongside whatever else runs.
        Returns ({i: Result}, {i: error of a refused request}, the version they started with).
        tools (rlvr.tools.ToolSettings): multi-turn samples with tool turns (module docstring)."""
        from rlvr.tools import Trajectory

        with self._cv:
            while min_version is not None and self.version() < min_version and not self._closed:
                self._cv.wait()
            if self._closed:
                raise RuntimeError("the engine server is closed")
            call = _Call(len(prompt_ids), self.version())
            key = next(self._ids)
            for i, (ids, sp, seed) in enumerate(zip(prompt_ids, samplings, seeds)):
                if tools is None:
                    req = ((key, i), list(ids), seed, sp)
                    self._owner[req[0]] = (call, i, req)
                    self._queue.append(req)
                    continue
                group = _Group(call, i, list(ids), sp.n, tools)
                for j in range(sp.n):
                    tr = Trajectory(prompt=list(ids), sampling=sp, seed=seed, index=j)
                    req = ((key, i, j), *tr.request(tools))
                    self._owner[req[0]] = (call, i, req)
                    self._turns[req[0]] = (tr, group)
                    self._queue.append(req)
            self._cv.notify_all()
        call.done.wait()
        if call.failure is not None:
            raise call.failure
        return call.results, call.errors, call.version

    def pending(self) -> tuple[int, int]:
        """(requests queued, requests in the engine) right now."""
        with self._cv:
            return len(self._queue), len(self._in_engine)

    def close(self, timeout: float = 60.0) -> bool:
        """Stop serving: the open stream ends between two engine steps (its requests aborted),
        every generate call and job still waiting fails, and the engine thread leaves. Waits for
        it at most `timeout` seconds; returns whether it has left. The engine stays open (its
        owner closes it after this)."""
        with self._cv:
            self._closed = True
            self._cv.notify_all()
            pool, self._tool_pool = self._tool_pool, None
        if pool is not None:
            pool.shutdown(wait=False, cancel_futures=True)   # a call running ends in the sandbox's own limits
        if self._thread is not threading.current_thread():
            self._thread.join(timeout=timeout)
        return not self._thread.is_alive()

    # -- the engine thread -------------------------------------------------------------------

    def _run_jobs(self) -> None:
        while True:
            with self._cv:
                if not self._jobs:
                    return
                job = self._jobs.popleft()
            job.run()
            with self._cv:
                self._cv.notify_all()   # generate calls waiting for a version look again

    def _serve(self) -> None:
        while True:
            with self._cv:
                while not (self._queue or self._jobs or self._closed):
                    self._cv.wait()
                closed = self._closed
            if closed:
                self._fail_all(_closed_error())
                with self._cv:
                    jobs, self._jobs = list(self._jobs), deque()
                for job in jobs:
                    job.error = _closed_error()
                    job.done.set()
                return
            self._run_jobs()
            with self._cv:
                if not self._queue:
                    continue
                first = self._queue[0][3]
            try:
                with closing(self.engine.stream(self._source(), first, window=self.WINDOW, each_step=True)) as st:
                    for handle, res in st:
                        self._deliver(handle, res)
                        if self._closed:
                            break       # closing the stream aborts what is still in the engine
            except _Closed:
                pass                    # the loop's top fails what was left
            except Exception as e:  # noqa: BLE001 - one request, or the engine? (as EngineActor.generate)
                if self._closed:
                    continue
                self._recover(e)

    def _source(self) -> Iterator[tuple | None]:
        """The stream's requests: queued ones as they come, the jobs run between two steps; ends
        when nothing is queued or in the engine."""
        while True:
            if self._closed:
                raise _Closed
            self._run_jobs()
            with self._cv:
                if self._closed:
                    raise _Closed
                taken = list(self._queue)
                self._queue.clear()
                self._in_engine.update(req[0] for req in taken)
                idle = not taken and not self._in_engine
            if taken:
                yield from taken
            elif idle:
                return
            else:
                yield None

    def _deliver(self, handle: Any, result: Any = None, error: str | None = None) -> None:
        with self._cv:
            self._in_engine.discard(handle)
            owner = self._owner.pop(handle, None)
            turn = self._turns.pop(handle, None)
        if owner is None:
            return
        if turn is None:
            owner[0].finish(owner[1], result, error)
            return
        tr, group = turn
        if error is not None:
            self._end_group(group, error=error)
            return
        group.version = result.version
        action, code = tr.after_model(result.samples[0], group.tools)
        if action == "call":
            with self._cv:
                if self._closed:
                    group.call.fail(_closed_error())
                    return
                self._owner[handle], self._turns[handle] = owner, turn   # held while the tool runs
                if self._tool_pool is None:
                    self._tool_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rlvr-inflight-tool")
                self._tool_pool.submit(self._tool_turn, handle, owner, turn, code, result.version)
            return
        self._next_turn(handle, owner, turn, action == "resume")

    def _tool_turn(self, handle: Any, owner: tuple, turn: tuple, code: str, version: Any) -> None:
        """On the tool thread: run the code, append its output, queue the next model turn."""
        from rlvr.tools import run_python

        tr, group = turn
        with self._cv:
            if self._owner.get(handle) is not owner:
                return   # its call failed (or the server closed) meanwhile
        try:
            go = tr.after_tool(code, run_python(code, group.tools), group.tools, self.engine.tokenizer, version)
        except Exception as e:  # noqa: BLE001 - this request fails alone
            with self._cv:
                self._owner.pop(handle, None)
                self._turns.pop(handle, None)
            self._end_group(group, error=f"{type(e).__name__}: {str(e).strip()[:300]}")
            return
        self._next_turn(handle, owner, turn, go)

    def _next_turn(self, handle: Any, owner: tuple, turn: tuple, go: bool) -> None:
        """The trajectory goes on (its next model turn queued) or its sample is done."""
        tr, group = turn
        with self._cv:
            if group.over or self._closed or group.call.failure is not None:
                self._owner.pop(handle, None)
                self._turns.pop(handle, None)
                if self._closed and not group.over:
                    group.call.fail(_closed_error())   # _fail_all may have run without this handle
                return
            if go:
                req = (handle, *tr.request(group.tools))
                self._owner[handle], self._turns[handle] = (owner[0], owner[1], req), turn
                self._queue.append(req)
                self._cv.notify_all()
                return
            self._owner.pop(handle, None)
            self._turns.pop(handle, None)
            group.samples[tr.index] = tr.sample()
            complete = all(x is not None for x in group.samples)
        if complete:
            self._end_group(group)

    def _end_group(self, group: _Group, error: str | None = None) -> None:
        """A request with tools ends: its Result once its n samples are done, or its error
        (its other samples are dropped, wherever they are)."""
        from rlvr.engines.base import Result

        with self._cv:
            if group.over:
                return
            group.over = True
            mine = [h for h, (_, g) in self._turns.items() if g is group]
            for h in mine:
                self._owner.pop(h, None)
                self._turns.pop(h, None)
            self._queue = deque(r for r in self._queue if r[0] not in mine)
        if error is not None:
            group.call.finish(group.i, error=error)
        else:
            group.call.finish(group.i, Result(prompt_token_ids=group.prompt, samples=group.samples,
                                              version=group.version))

    def _fail_all(self, why: BaseException) -> None:
        """Every generate call with a request queued or in the engine fails with `why`."""
        with self._cv:
            calls = {id(c): c for c, _, _ in self._owner.values()}
            self._owner.clear()
            self._turns.clear()
            self._queue.clear()
            self._in_engine.clear()
        for c in calls.values():
            c.fail(why)

    def _recover(self, e: Exception) -> None:
        """The stream failed. An unusable engine fails every call in flight; else each request
        that was in the engine is tried alone, and one the engine refuses fails alone."""
        with self._cv:
            stuck = [self._owner[h] for h in self._in_engine if h in self._owner]
        if not self._usable(e):
            return
        for _call, _i, (handle, ids, seed, sp) in stuck:
            try:
                res = self.engine.generate([ids], sp, seeds=[seed])[0]
            except Exception as e2:  # noqa: BLE001
                if not self._usable(e2):
                    return
                self._deliver(handle, error=f"{type(e2).__name__}: {str(e2).strip()[:300]}")
                continue
            self._deliver(handle, res)

    def _usable(self, e: Exception) -> bool:
        """Whether the engine passes its health check; if not, every call in flight fails."""
        health = self.engine.health()
        if not health["ok"]:
            self._fail_all(RuntimeError(f"the engine is unusable: {health['detail']} "
                                        f"({type(e).__name__}: {str(e).strip()[:300]})"))
        return bool(health["ok"])
