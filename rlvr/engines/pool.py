"""One engine process per GPU (or GPU group), fed from one request stream.

    with EnginePool("vllm", model, options, devices=["0", "1", "2", "3"]) as pool:
        for handle, result in pool.stream(requests, sampling): ...

Each worker is a spawned process with CUDA_VISIBLE_DEVICES set to its device(s) before any
library is imported; it builds its own engine and serves requests in chunks. The parent
keeps every worker's queue topped up (faster workers get more), so the engines stay busy;
results come back as they finish and the caller restores input order. On a machine without
GPUs the same code runs N CPU engines (the variable is then irrelevant), which is how it is
tested. A worker that dies or fails makes the whole stream fail with its message.

With tools (stream(..., tools=rlvr.tools.ToolSettings)) each worker runs rlvr.tools.tool_stream
over its own engine, so a request's tool turns (and their sandboxed code) stay in the process
that generated it and each result is a whole trajectory, as on one engine.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
from collections.abc import Iterable, Iterator
from typing import Any

from rlvr.engines.base import EngineError, EngineOptions, PromptIds, Result, Sampling, load_tokenizer

CHUNK = 32  # requests per message


def _serve(idx: int, devices: str, kind: str, model: str, options: EngineOptions, tasks: Any, results: Any) -> None:
    os.environ.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # the numbering nvidia-smi and rlvr-gpu-free use
    os.environ["CUDA_VISIBLE_DEVICES"] = devices
    from rlvr.engines import create

    try:
        eng = create(kind, model, options)
    except Exception as e:  # noqa: BLE001 - reported to the parent as one line
        results.put(("error", idx, f"{type(e).__name__}: {e}"))
        return
    results.put(("ready", idx, eng.max_model_len, getattr(eng, "engine_version", "unknown")))
    try:
        while True:
            msg = tasks.get()
            if msg[0] == "stop":
                break
            sampling: Sampling = msg[1]
            tools = msg[2] if len(msg) > 2 else None   # rlvr.tools.ToolSettings: this worker runs the tool loop
            state = {"submitted": 0, "returned": 0}

            def source() -> Iterator[Any]:
                while True:
                    idle = state["submitted"] == state["returned"]
                    try:
                        m = tasks.get() if idle else tasks.get_nowait()
                    except queue.Empty:
                        yield None
                        continue
                    if m[0] == "end":
                        return
                    for req in m[1]:
                        state["submitted"] += 1
                        yield req

            if tools is not None:
                from rlvr.tools import tool_stream

                stream = tool_stream(eng, source(), sampling, tools)
            else:
                stream = eng.stream(source(), sampling)
            for handle, res in stream:
                state["returned"] += 1
                results.put(("result", idx, handle, res))
            results.put(("done", idx))
    except Exception as e:  # noqa: BLE001
        results.put(("error", idx, f"{type(e).__name__}: {e}"))
    finally:
        eng.close()


class EnginePool:
    """Engines in worker processes, one per entry of `devices` (CUDA_VISIBLE_DEVICES values)."""

    kind = "pool"
    runs_tools = True   # stream(..., tools=...) runs the tool loop in the workers (rlvr.rollout.run)

    def __init__(self, kind: str, model: str, options: EngineOptions, devices: list[str], warn=None,
                 window: int | None = None, start_timeout: float = 1800.0):
        from rlvr.engines import checkpoint

        if not devices:
            raise ValueError("EnginePool needs at least one device")
        self.path = checkpoint.resolve(model, warn=warn, tokenizer=options.tokenizer)
        self.tokenizer = load_tokenizer(self.path, options.tokenizer)
        self.model, self.options, self.devices = model, options, devices
        self.window = window or (1024 if kind == "vllm" else 2)
        ctx = mp.get_context("spawn")
        self.results = ctx.Queue()
        self.tasks = [ctx.Queue() for _ in devices]
        self.procs = [ctx.Process(target=_serve, args=(i, d, kind, self.path, options, self.tasks[i], self.results),
                                  daemon=False, name=f"rlvr-engine-{d}") for i, d in enumerate(devices)]
        for p in self.procs:
            p.start()
        self.version = None
        lens, versions = {}, {}
        try:
            while len(lens) < len(devices):
                msg = self._get(start_timeout)
                if msg[0] == "error":
                    raise EngineError(f"engine on device {devices[msg[1]]}: {msg[2]}")
                if msg[0] == "ready":
                    lens[msg[1]], versions[msg[1]] = msg[2], msg[3]
        except BaseException:
            self.close()
            raise
        self.max_model_len = min(lens.values())
        self.engine_version = versions[0]

    def _get(self, timeout: float) -> tuple:
        waited = 0.0
        while True:
            try:
                return self.results.get(timeout=1.0)
            except queue.Empty:
                waited += 1.0
                dead = [(i, p.exitcode) for i, p in enumerate(self.procs) if not p.is_alive()]
                if dead:
                    i, code = dead[0]
                    raise EngineError(f"engine process for device {self.devices[i]} died (exit code {code})") from None
                if waited >= timeout:
                    raise EngineError(f"no answer from the engine processes in {timeout:.0f} s") from None

    def stream(self, requests: Iterable[tuple[Any, PromptIds, int | None]], sampling: Sampling,
               window: int | None = None, tools: Any = None) -> Iterator[tuple[Any, Result]]:
        """(handle, Result) as the workers finish them (the caller restores order); tools
        (rlvr.tools.ToolSettings): each worker runs the tool loop on its own engine."""
        window = window or self.window
        for q in self.tasks:
            q.put(("job", sampling, tools))
        outstanding = [0] * len(self.procs)
        done = 0  # workers that closed this job
        it = iter(requests)
        exhausted = False
        ended = False
        try:
            while True:
                if not exhausted:
                    for w in sorted(range(len(self.procs)), key=lambda k: outstanding[k]):
                        while not exhausted and outstanding[w] < window:
                            chunk = []
                            while len(chunk) < min(CHUNK, window - outstanding[w]):
                                item = next(it, None)
                                if item is None:
                                    exhausted = True
                                    break
                                chunk.append(item)
                            if chunk:
                                self.tasks[w].put(("batch", chunk))
                                outstanding[w] += len(chunk)
                if exhausted and not ended:
                    for q in self.tasks:
                        q.put(("end",))
                    ended = True
                if exhausted and not any(outstanding):
                    break
                msg = self._get(float("inf"))
                if msg[0] == "error":
                    raise EngineError(f"engine on device {self.devices[msg[1]]}: {msg[2]}")
                if msg[0] == "result":
                    outstanding[msg[1]] -= 1
                    yield msg[2], msg[3]
                elif msg[0] == "done":
                    done += 1
            while done < len(self.procs):  # every worker closes its job before the next one
                if self._get(600.0)[0] == "done":
                    done += 1
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for q, p in zip(self.tasks, self.procs):
            if p.is_alive():
                try:
                    q.put(("stop",))
                except Exception:  # noqa: BLE001
                    pass
        for p in self.procs:
            p.join(timeout=30)
            if p.is_alive():
                p.terminate()
                p.join(timeout=10)
        for q in [*self.tasks, self.results]:
            q.close()
            q.join_thread()

    def __enter__(self) -> "EnginePool":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
