"""Ray actors of rlvr-train: rollout engines and the trainer.

EngineActor wraps the same engine code as rlvr-rollout (rlvr.engines) and adds the policy
version bookkeeping: weights arrive tagged with a version, and every generate call returns
the version it started with and the versions of every sample's tokens. In between_rounds
mode Ray runs an actor's calls one at a time, in order, so a weight update lands between
generate calls, never inside one. In in_flight mode (sync.mode) the actor takes several calls
at once and rlvr.train.inflight serves them: one running batch, updates between two engine
steps. Either way an engine never generates with a half-updated model. TrainerActor wraps
rlvr.train.trainer.PolicyTrainer. Both are `Observed` (rlvr.train.observe): they record spans
(generate, weight_load/receive; weight_gather/send, checkpoint_save and, in the trainer's step,
pi_old/forward_backward/optimizer) and hand them, their figures and their stacks to the driver on
a thread of their own (made with concurrency_groups=OBSERVE_GROUPS).
"""

from __future__ import annotations

import os
import time

import numpy as np

from rlvr.train import spans
from rlvr.train.observe import Observed
from rlvr.train.processes import placement, retire  # noqa: F401 - retire: their home is rlvr.train.processes


def _arrays_to_tensors(weights):
    import torch

    import warnings

    out = []
    for name, arr, dtype in weights:
        with warnings.catch_warnings():
            # Arrays from Ray's object store are read-only views; the engine copies them into
            # its own parameters and never writes to these tensors.
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(np.ascontiguousarray(arr))
        if dtype == "bfloat16":
            t = t.view(torch.bfloat16)
        out.append((name, t))
    return out


def on_node(model) -> str:
    """A model for this node: a ResolvedModel (rlvr.models) through its .local(), else a path."""
    return model if isinstance(model, str) else model.local()


class _Deadline(Exception):
    """rollout.timeout_s passed: the stream ends, aborting what is still generating."""


class _Aborted(Exception):
    """sync.abort_in_flight: newer weights are on their way; the stream ends, aborting what is still generating."""


def _until(requests, total: int, got, stop):
    """A stream's source: the requests, then "nothing yet" after every engine step until got() of
    the total are done; when stop() names an exception (_Deadline, _Aborted) it raises it, and the stream aborts its
    requests in flight. The engine always takes one step first (one request of the transformers
    engine, which generates them one at a time)."""
    for r in requests:
        why = stop() if got() else None     # the engine's window may hold fewer than all requests
        if why is not None:
            raise why
        yield r
    yield None
    while got() < total:
        why = stop()
        if why is not None:
            raise why
        yield None


class EngineActor(Observed):
    """One rollout engine (vLLM or HF) in its own Ray worker process."""

    in_flight: str | None = None
    server = None   # rlvr.train.inflight.InFlightServer in in_flight mode

    def __init__(self, model, engine: str, options: dict, env: dict | None = None, in_flight: str | None = None):
        """model: a ResolvedModel, loaded from this node's copy (see rlvr.models), or a path.
        in_flight: "recompute" or "keep" (sync.mode in_flight, the actor made with
        max_concurrency > 1): generate calls share one running batch and weight updates land
        between two engine steps (rlvr.train.inflight); None: one call at a time, in order."""
        os.environ.update(env or {})
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        from rlvr.engines import create
        from rlvr.engines.base import EngineOptions

        self.model_path = on_node(model)
        self.engine = create(engine, self.model_path, EngineOptions(**options))
        self.version = 0
        self.busy_s = 0.0
        self.born = time.monotonic()
        self.in_flight = in_flight
        self.abort_below: int | None = None   # sync.abort_in_flight: calls on older weights stop (abort_generation)
        if in_flight:
            from rlvr.train.inflight import InFlightServer

            self.server = InFlightServer(self.engine, in_flight, lambda: self.version)

    def _on_engine(self, fn):
        """fn() on the engine's own thread when it is served in flight, else here."""
        return self.server.run(fn) if self.server is not None else fn()

    def generate(self, prompt_ids: list[list[int]], sampling: dict, seeds: list[int] | None,
                 stops: list[list[str]] | None = None, stop_ids: list[list[int]] | None = None,
                 min_version: int | None = None, max_tokens: list[int] | None = None,
                 step: int | None = None, ids: list | None = None, timeout_s: float | None = None,
                 abortable: bool = False) -> dict:
        """n samples for each prompt: token ids, log-probs, finish reasons, the versions of
        their tokens (run-length: [[version, count], ...]) and the version used at the start.

        stops: each prompt's own stop strings (else sampling["stop"]); stop_ids: each prompt's
        stop token ids (a chat prompt's end-of-turn token), kept in the completion; max_tokens:
        each prompt's own generation length (else sampling["max_tokens"]). A request the engine
        refuses (e.g. a prompt over its context) fails that prompt only: its index is in
        "errors" with the message. An error that leaves the engine unusable is raised (the
        driver restarts the engine). min_version (in flight): start once the engine holds it.
        step, ids: the trace's step and the prompt ids, for the call's `generate` span.

        timeout_s (rollout.timeout_s; between_rounds): a prompt still generating that long after the
        call started is aborted; its index is in "timeouts" and it has no samples. abortable
        (sync.abort_in_flight): abort_generation(v) stops a call generating with weights older than v
        after its next engine step; the prompts it had not finished are in "aborted"."""
        from dataclasses import replace

        from rlvr.engines.base import Sampling

        t0 = time.monotonic()
        tok = spans.begin("generate", step=step, version=self.version, ids=ids)
        base = Sampling(n=sampling["n"], temperature=sampling["temperature"], top_p=sampling["top_p"],
                        top_k=max(0, sampling["top_k"]), max_tokens=sampling["max_tokens"],
                        stop=tuple(sampling.get("stop") or ()), seed=0, logprobs=True)
        per = [replace(base, stop=tuple(s)) if s is not None else base for s in (stops or [None] * len(prompt_ids))]
        if stop_ids:
            per = [replace(p, stop_token_ids=tuple(ids)) if ids else p for p, ids in zip(per, stop_ids)]
        if max_tokens is not None:
            per = [replace(p, max_tokens=m) if m and m != base.max_tokens else p for p, m in zip(per, max_tokens)]
        seeds = list(seeds) if seeds is not None else [None] * len(prompt_ids)
        try:
            if self.server is not None:
                from rlvr.tools import ToolSettings

                tools = sampling.get("tools")
                results, errors, v0 = self.server.generate(prompt_ids, per, seeds, min_version,
                                                           tools=ToolSettings.from_dict(tools) if tools else None)
                aborted = False
            else:
                results, errors, v0, aborted = self._generate(prompt_ids, per, seeds, base, timeout_s, abortable,
                                                              tools=sampling.get("tools"))
        except BaseException as e:
            spans.end(tok, error=type(e).__name__)
            raise
        first = 0 if v0 is None else v0
        spans.end(tok, version=first)
        outs = [[{"text": x.text, "token_ids": list(x.token_ids), "finish_reason": x.finish_reason,
                  "stop_reason": x.stop_reason, "logprobs": [0.0 if v is None else v for v in x.logprobs or []],
                  "versions": [[0 if v is None else v, c] for v, c in (x.versions or [])],
                  **({"turns": x.turns} if x.turns is not None else {})}   # tool rollouts (rlvr.tools)
                 for x in results[i].samples]
                if i in results else [] for i in range(len(prompt_ids))]
        dt = time.monotonic() - t0
        self.busy_s += dt
        unfinished = sorted(i for i in range(len(prompt_ids)) if i not in results and i not in errors)
        return {"samples": outs, "errors": errors, "version_start": first, "version_end": self.version, "seconds": dt,
                "done_at": time.time(), "timeouts": [] if aborted else unfinished,
                "aborted": unfinished if aborted else []}

    def abort_generation(self, version: int) -> None:
        """sync.abort_in_flight (called in the actor's "signal" concurrency group, beside a running
        generate call): calls generating with weights older than `version` stop after their next
        engine step, their unfinished prompts returned as "aborted" for the driver to resubmit or drop."""
        self.abort_below = version

    def _generate(self, prompt_ids, per, seeds, base, timeout_s: float | None = None,
                  abortable: bool = False, tools: dict | None = None) -> tuple[dict, dict, int, bool]:
        """One call at a time (between_rounds): the whole call generates with one version. With
        timeout_s, the requests still in the engine at the deadline are aborted (the stream's own
        abort, checked after every engine step) and left out of the results. tools
        (rlvr.tools.ToolSettings as a dict): multi-turn samples with tool turns."""
        from rlvr.tools import ToolSettings, tool_stream

        v0 = self.version
        results: dict[int, object] = {}
        errors: dict[int, str] = {}
        t0 = time.monotonic()
        requests = ((i, p, s, sp) for i, (p, s, sp) in enumerate(zip(prompt_ids, seeds, per)))
        deadline = t0 + timeout_s if timeout_s is not None else float("inf")

        def stop() -> type[Exception] | None:
            if abortable and self.abort_below is not None and self.version < self.abort_below:
                return _Aborted
            return _Deadline if time.monotonic() > deadline else None

        watched = timeout_s is not None or abortable
        if watched:
            requests = _until(requests, len(prompt_ids), lambda: len(results), stop)
        try:
            if tools is not None:
                stream = tool_stream(self.engine, requests, base, ToolSettings.from_dict(tools), each_step=watched)
            else:
                stream = self.engine.stream(requests, base, each_step=watched)
            for i, res in stream:
                results[i] = res
        except _Deadline:
            return results, errors, v0, False   # the rest timed out
        except _Aborted:
            return results, errors, v0, True    # the rest go back to the driver
        except Exception:  # noqa: BLE001 - one request or the engine? ask each request alone
            self._check_alive()
            for i in range(len(prompt_ids)):
                if i in results:
                    continue
                try:
                    if tools is not None:   # alone, with its tool turns as well
                        [(_, results[i])] = list(tool_stream(self.engine, [(i, prompt_ids[i], seeds[i], per[i])],
                                                             per[i], ToolSettings.from_dict(tools)))
                        continue
                    results[i] = self.engine.generate([prompt_ids[i]], per[i], seeds=[seeds[i]])[0]
                except Exception as e:  # noqa: BLE001
                    self._check_alive()
                    errors[i] = f"{type(e).__name__}: {str(e).strip()[:300]}"
        return results, errors, v0, False

    def _check_alive(self) -> None:
        health = self.engine.health()
        if not health["ok"]:
            raise RuntimeError(f"the engine is unusable: {health['detail']}")

    def max_model_len(self) -> int:
        return int(self.engine.max_model_len)

    def score(self, prompts: list[list[int]], completions: list[list[int]], top_k: int):
        """The model's top-k log-probs at each completion position (rlvr.engines.base.TopK:
        numpy arrays), tagged with the weight version that scored them (a teacher's scores)."""
        t0 = time.monotonic()
        out = self._on_engine(lambda: self.engine.score(prompts, completions, top_k))
        out.version = self.version
        self.busy_s += time.monotonic() - t0
        return out

    def update_weights(self, weights, version: int) -> float:
        t0 = time.monotonic()
        with spans.span("weight_load", step=version, version=version):
            tensors = _arrays_to_tensors(weights)

            def load():
                self.engine.update_weights(tensors, version=version, in_flight=self.in_flight)
                self.version = version
            self._on_engine(load)
        return time.monotonic() - t0

    def get_version(self) -> int:
        return self.version

    # -- weights broadcast by the trainer (rlvr.train.weight_sync, sync.method nccl/gloo) --

    def device(self) -> str:
        """Where this engine computes: cpu or cuda."""
        if getattr(self.engine, "on_cpu", None) is not None:
            return "cpu" if self.engine.on_cpu else "cuda"
        return str(getattr(self.engine, "device", "cpu")).split(":")[0]

    def transfer_init(self, init_info: dict) -> None:
        self._on_engine(lambda: self.engine.init_weight_transfer(init_info))

    def receive_weights(self, update_info: dict, version: int) -> dict:
        """Receive a broadcast; {"seconds", "checksum" of what arrived}."""
        t0 = time.monotonic()

        def load():
            self.engine.receive_weights(update_info, version=version, in_flight=self.in_flight)
            self.version = version
        with spans.span("weight_receive", step=version, version=version):
            self._on_engine(load)
        return {"seconds": time.monotonic() - t0, "checksum": self.engine.received_checksum}

    def transfer_close(self) -> None:
        self._on_engine(self.engine.close_weight_transfer)

    def engine_metrics(self):
        """vLLM's own statistics (LLM.get_metrics(): KV-cache usage, running and waiting
        requests, preemptions, prefix-cache hits), None where the engine keeps none (the hf
        engine; vLLM without log.engine_stats)."""
        fn = getattr(self.engine, "metrics", None)
        return fn() if callable(fn) else None

    def stats(self) -> dict:
        return {"busy_s": self.busy_s, "alive_s": time.monotonic() - self.born}

    def close(self) -> None:
        """Close the engine (vLLM shuts its engine-core process down) before the actor is killed.
        In flight, the server stops first: its thread leaves the open stream between two engine
        steps (waited for, bounded), so that the engine is never closed under it."""
        if self.server is not None:
            self.server.close(timeout=20.0)
        engine, self.engine = self.engine, None
        if engine is not None:
            engine.close()

    def ping(self) -> bool:
        return True

    def node(self) -> dict:
        return placement(self.model_path)


class TrainerActor(Observed):
    """One rank of the policy trainer (rlvr.train.trainer.PolicyTrainer) in a Ray worker.

    Made in two phases so that several ranks can meet: address() names a rendezvous on rank
    0's node, then setup() on every rank joins the process group (NCCL on GPUs, gloo on
    CPUs) and loads the model, sharded with FSDP when world > 1.
    """

    def __init__(self, env: dict | None = None):
        os.environ.update(env or {})
        import torch

        torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
        self.t = None

    def address(self) -> tuple[str, int]:
        import socket

        import ray

        with socket.socket() as s:
            s.bind(("", 0))
            port = s.getsockname()[1]
        return ray.util.get_node_ip_address(), port

    def setup(self, model, tcfg, max_tokens: int, total_steps: int, trust_remote_code: bool,
              ref, temperature: float = 1.0, rank: int = 0, world: int = 1,
              master: tuple[str, int] | None = None) -> str:
        """Load `model` (with `ref` as the reference policy; each a ResolvedModel, loaded from
        this node's copy, or a path) and join the other ranks."""
        import datetime

        import torch

        from rlvr.train.trainer import PolicyTrainer, resolve_device

        if world > 1:
            import torch.distributed as dist

            backend = "nccl" if resolve_device(tcfg.device).startswith("cuda") else "gloo"
            if backend == "nccl":
                torch.cuda.set_device(0)  # Ray gives each rank its own GPU as cuda:0
            dist.init_process_group(backend, init_method=f"tcp://{master[0]}:{master[1]}", rank=rank,
                                    world_size=world, timeout=datetime.timedelta(minutes=10))
        model_path, ref_path = on_node(model), (on_node(ref) if ref is not None else None)
        self.t = PolicyTrainer(model_path, tcfg, max_tokens, total_steps, trust_remote_code, ref_path, temperature,
                               rank=rank, world=world)
        return self.t.device

    def step(self, batch) -> dict:
        return self.t.step(batch)

    def weights(self):
        with spans.span("weight_gather", step=self.t.version, version=self.t.version):
            return self.t.weights()

    def version(self) -> int:
        return self.t.version

    # -- the trainer's end of the weight broadcast (rlvr.engines.transfer) -----------------

    def transfer_open(self, rdv) -> dict | None:
        """Join the weight-transfer group (rank 0 sends; every rank takes part in the FSDP
        gathers); rank 0 returns the update info the engines receive with."""
        from rlvr.engines.transfer import Sender, TrainerWeights

        self.transfer_close()
        self.sender = Sender(rdv, TrainerWeights(self.t.model, self.t.dtype), rank=self.t.rank)
        return self.sender.update_info() if self.t.rank == 0 else None

    def transfer_send(self, version: int) -> dict:
        """Broadcast the current weights, which must be those of `version`. Every rank first
        takes part in gathering them (PolicyTrainer.wire_weights: complete after the
        optimizer's step, gathered before anything is sent); the other ranks then return at
        once, and rank 0 sends. Rank 0 returns the checksums of the weights and of what it
        sent."""
        if self.t.version != version:
            raise RuntimeError(f"asked to send the weights of version {version}, the trainer holds {self.t.version}")
        t0 = time.monotonic()
        with spans.span("weight_gather", step=version, version=version):
            pairs = self.t.wire_weights()
        gathered = time.monotonic() - t0
        if pairs is None:
            return {"version": version, "rank": self.t.rank}
        with spans.span("weight_send", step=version, version=version):
            sums = self.sender.send(pairs)
        del pairs
        return {"version": version, "rank": 0, "gather_s": gathered, "send_s": time.monotonic() - t0 - gathered,
                **sums}

    def largest_tensor_bytes(self) -> int:
        """Bytes of the largest tensor the broadcast sends (in the compute dtype)."""
        return max(p.numel() * self.t.dtype.itemsize for p in self.t.model.parameters())

    def transfer_close(self) -> None:
        sender, self.sender = getattr(self, "sender", None), None
        if sender is not None:
            sender.close()

    def save(self, path: str, extra_state: dict, dtype: str | None = None) -> None:
        with spans.span("checkpoint_save", step=self.t.version, version=self.t.version):
            self.t.save(path, extra_state, dtype)

    def load_state(self, path: str) -> dict:
        st = self.t.load_state(path)
        return {k: v for k, v in st.items() if k not in ("optimizer", "scheduler", "rng")}

    def device(self) -> str:
        return self.t.device

    def node(self) -> dict:
        return placement(self.t.model_path if self.t is not None else None)
