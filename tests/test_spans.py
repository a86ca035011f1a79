"""Spans (rlvr.train.spans), the step figures (rlvr.train.figures), the stall watchdog
(rlvr.train.watchdog) and what a Ray actor exposes (rlvr.train.observe): a recorder's spans and
open spans, the bounded spans file that keeps every step's outline, FLOPs and MFU against hand
arithmetic, vLLM's statistics from its own metric objects, fates per version, stall reports from a
fake clock (no sleeps), and a real Ray actor that answers for its stacks while it is blocked."""

from __future__ import annotations

import io
import os
import threading

import orjson
import pytest

from machine_time import wait_for
from rlvr.train import figures, spans
from rlvr.train.spans import Recorder, SpanLog, read_spans
from rlvr.train.watchdog import Watchdog, blamed, python_stacks


class Clock:
    def __init__(self, t=1000.0):
        self.t = t

    def __call__(self):
        return self.t


def test_a_recorder_keeps_open_and_closed_spans_until_drained():
    clock = Clock()
    rec = Recorder("engine-0", clock=clock)
    with rec.span("generate", step=3, version=2, ids=["p1", "p2"]):
        clock.t += 1.5
        tok = rec.begin("verify", step=3)
        d = rec.drain()
        assert d["spans"] == [] and {r["kind"] for r in d["open"]} == {"generate", "verify"}
        clock.t += 0.5
    rec.end(tok)
    assert rec.end(tok) is None                      # ended twice: nothing
    with pytest.raises(KeyError):
        with rec.span("optimizer", step=3):
            raise KeyError("x")
    d = rec.drain()
    assert [(r["kind"], r["start"], r["end"]) for r in d["spans"]] == \
        [("generate", 1000.0, 1002.0), ("verify", 1001.5, 1002.0), ("optimizer", 1002.0, 1002.0)]
    gen = d["spans"][0]
    assert gen == {"actor": "engine-0", "kind": "generate", "start": 1000.0, "end": 1002.0, "step": 3,
                   "version": 2, "ids": ["p1", "p2"]}
    assert d["spans"][2]["error"] == "KeyError" and d["open"] == []
    assert rec.drain() == {"spans": [], "open": []}
    many = Recorder("x").span("generate", ids=range(1000))
    with many:
        pass
    assert len(many.rec.drain()["spans"][0]["ids"]) == spans.MAX_IDS


def test_the_module_recorder_is_named_per_process():
    spans.drain()
    old = spans.recorder().actor
    try:
        spans.set_actor("trainer-1")
        with spans.span("forward_backward", step=1):
            pass
        spans.end(spans.begin("optimizer", step=1))
        with spans.span("verify", step=1, actor="verifier"):
            pass
        got = spans.drain()["spans"]
        assert [(r["actor"], r["kind"]) for r in got] == [("trainer-1", "forward_backward"), ("trainer-1", "optimizer"),
                                                           ("verifier", "verify")]
    finally:
        spans.set_actor(old)


def _span(actor, kind, step, start, end):
    return {"actor": actor, "kind": kind, "start": start, "end": end, "step": step, "version": step}


def test_the_spans_file_is_bounded_and_keeps_every_steps_outline(tmp_path):
    log = SpanLog(str(tmp_path), full_mb=2000 / 2**20, sample_every=10)   # full detail for the first ~2 kB
    for step in range(1, 31):
        batch = [_span(f"engine-{e}", "generate", step, step + i * 0.01, step + i * 0.01 + 0.005)
                 for e in range(2) for i in range(10)]
        log.add("engines", {"spans": batch, "open": []})
        log.end_step(step)
    log.close()
    rows = read_spans(log.path)
    full = [r for r in rows if not r.get("outline")]
    outlines = [r for r in rows if r.get("outline")]
    assert {r["step"] for r in rows} == set(range(1, 31))            # every step is there
    first_outlined = min(r["step"] for r in outlines)
    assert all(r["step"] % 10 == 0 or r["step"] < first_outlined for r in full)
    assert len(rows) < 30 * 20 / 3
    o = next(r for r in outlines if r["step"] == 29 and r["actor"] == "engine-1")
    assert o["n"] == 10 and o["start"] == 29.0 and o["end"] == pytest.approx(29.095)
    assert o["busy"] == pytest.approx(0.05)
    assert sum(1 for r in full if r["step"] == 30) == 20
    assert read_spans(log.path, (10, 12)) and {r["step"] for r in read_spans(log.path, (10, 12))} == {10, 11, 12}


def test_the_spans_file_survives_a_torn_line_and_the_log_tracks_the_last_end(tmp_path):
    log = SpanLog(str(tmp_path), clock=Clock(0.0))
    log.add("a", {"spans": [_span("a", "verify", 1, 5.0, 7.0)], "open": [_span("a", "verify", 2, 7.5, None)]})
    assert log.last_end == 7.0 and [r["step"] for r in log.open_spans()] == [2]
    log.add("a", {"spans": [], "open": []})
    assert log.open_spans() == []
    log.close()
    with open(log.path, "ab") as fh:
        fh.write(b'{"actor": "a", "kind"')
    assert [r["kind"] for r in read_spans(log.path)] == ["verify"]


def test_span_overhead_benchmark_runs():
    b = spans.benchmark(2000)
    assert b["n"] == 2000 and b["span_with_s"] >= 0 and b["begin_end_s"] >= 0 and b["write_s"] >= 0


# --------------------------------------------------------------------------- figures

QWEN3_1_7B = {"num_hidden_layers": 28, "hidden_size": 2048, "num_attention_heads": 16, "num_key_value_heads": 8,
              "head_dim": 128, "intermediate_size": 6144, "vocab_size": 151936}


def test_flops_per_token_and_mfu_by_hand():
    sh = figures.Shape.from_config(QWEN3_1_7B)
    attn = 2048 * (16 + 16) * 128 + 16 * 128 * 2048            # q, k, v (8 kv heads x 2) and o
    n = 28 * (attn + 3 * 2048 * 6144) + 2048 * 151936
    assert sh.params == n and 1.6e9 < n < 1.75e9                 # Qwen3-1.7B: 1.7B with the embeddings
    assert figures.flops_per_token(sh, 1000, training=True) == 6 * n + 12 * 28 * 16 * 128 * 1000
    assert figures.flops_per_token(sh, 1000, training=False) == 2 * n + 4 * 28 * 16 * 128 * 1000
    f = figures.flops_per_token(sh, 512, training=True)
    peak = figures.peak_flops("NVIDIA H200")
    assert peak == 989e12 and figures.peak_flops("NVIDIA H100 PCIe") == 756e12 and figures.peak_flops("cpu") is None
    got = figures.throughput(20000, 2.0, f, devices=2, peak=peak)
    assert got["tokens_per_s"] == 10000 and got["mfu"] == pytest.approx(10000 * f / (2 * 989e12))
    assert figures.throughput(100, 1.0, f)["mfu"] is None and figures.throughput(1, 0.0, f)["tokens_per_s"] is None


def test_shape_from_the_tiny_model(tiny_model_dir):
    sh = figures.Shape.from_model_dir(tiny_model_dir)
    assert sh.params > 0 and sh.head_dim * sh.heads > 0


def test_cpu_memory_is_the_resident_set():
    m = figures.memory("cpu")
    assert set(m) == {"rss_gb"} and 0.01 < m["rss_gb"] < 64
    assert figures.actor_figures("engine-0", m, {"kv_cache_usage": 0.5}) == \
        {"memory/engine-0/rss_gb": m["rss_gb"], "engine/engine-0/kv_cache_usage": 0.5}


def test_engine_statistics_from_vllms_own_metric_objects():
    from vllm.v1.metrics.reader import Counter, Gauge, Histogram

    labels = {"model_name": "tiny", "engine": "0"}
    ms = [Gauge("vllm:kv_cache_usage_perc", labels, 0.25), Gauge("vllm:num_requests_running", labels, 3.0),
          Gauge("vllm:num_requests_waiting", labels, 5.0), Counter("vllm:num_preemptions", labels, 2),
          Counter("vllm:prefix_cache_queries", labels, 400), Counter("vllm:prefix_cache_hits", labels, 100),
          Histogram("vllm:e2e_request_latency_seconds", labels, 3, 1.5, {"+Inf": 3}),
          Gauge("vllm:num_requests_running", {"model_name": "tiny", "engine": "1"}, 1.0)]
    assert figures.engine_stats(ms) == {"kv_cache_usage": 0.25, "requests_running": 4.0, "requests_waiting": 5.0,
                                        "preemptions": 2.0, "prefix_cache_queries": 400.0,
                                        "prefix_cache_hits": 100.0, "prefix_cache_hit_rate": 0.25}
    assert figures.engine_stats([]) == {}


def test_sample_fates_per_version_and_queue_times():
    f = figures.SampleFates()
    f.add(3, "trained", 8)
    f.add(3, "zero_variance", 4)
    f.add(2, "stale", 2)
    f.add(2, "trained")
    with pytest.raises(ValueError, match="fate 'lost'"):
        f.add(2, "lost")
    assert f.metrics() == {"fates/trained": 9, "fates/zero_variance": 4, "fates/stale": 2, "fates/timed_out": 0,
                           "fates/masked": 0}
    rows = f.take(step=5)
    assert rows == [{"step": 5, "policy_version": 2, "trained": 1, "zero_variance": 0, "stale": 2, "timed_out": 0,
                     "masked": 0},
                    {"step": 5, "policy_version": 3, "trained": 8, "zero_variance": 4, "stale": 0, "timed_out": 0,
                     "masked": 0}]
    assert f.take(step=6) == []
    assert figures.queue_stats([3.0, 1.0, 2.0]) == {"queue/wait_mean_s": 2.0, "queue/wait_max_s": 3.0,
                                                    "queue/wait_p50_s": 2.0}
    assert figures.queue_stats([]) == {}


# --------------------------------------------------------------------------- the watchdog


def test_a_stall_report_names_the_open_spans_the_stuck_actor_and_the_stacks(tmp_path):
    clock = Clock(100.0)
    log = SpanLog(str(tmp_path), clock=clock)
    err = io.StringIO()
    asked = []

    def stacks():
        asked.append(1)
        return {"engine-1": "Thread 1:\n  File \"engine.py\", line 9, in generate\n"}

    dog = Watchdog(str(tmp_path), 60, log, stacks=stacks, clock=clock, err=err)
    log.add("driver", {"spans": [_span("driver", "step", 1, 90.0, 100.0)],
                       "open": [{"actor": "driver", "kind": "step", "start": 100.0, "step": 2, "version": 1}]})
    log.add("engine-1", {"spans": [], "open": [{"actor": "engine-1", "kind": "generate", "start": 101.0, "step": 2,
                                                "version": 1, "ids": ["p7"]}]})
    log.add("verifier", {"spans": [], "open": []})
    clock.t = 159.0
    assert dog.check() is None and not asked                  # 59 s without an end: not yet
    clock.t = 161.0
    path = dog.check()
    text = open(path).read()
    line = err.getvalue()
    assert line.count("\n") == 1 and "stall" in line and "waiting on engine-1 (generate step 2 open for 60 s)" in line
    assert path in line and path.startswith(str(tmp_path / "stalls"))
    assert "engine-1: generate step 2 version 1 open 60.0 s ids ['p7']" in text
    assert "driver: step step 2" in text and "== engine-1 ==" in text and "in generate" in text
    assert "== driver ==" in text and "test_a_stall_report_names" in text      # the driver's own stack
    clock.t = 300.0
    assert dog.check() is None and len(asked) == 1             # the same picture: no second report
    log.add("verifier", {"spans": [], "open": [{"actor": "verifier", "kind": "verify", "start": 250.0, "step": 2}]})
    second = dog.check()                                       # the picture changed
    assert second and second != path and len(os.listdir(tmp_path / "stalls")) == 2
    log.add("engine-1", {"spans": [_span("engine-1", "generate", 2, 101.0, 301.0)], "open": []})
    assert dog.check() is None                                 # a span ended: the run moves again
    clock.t = 400.0
    assert dog.check() is not None and len(dog.reports) == 3   # a new stall is reported afresh


def test_an_actor_that_does_not_answer_is_the_one_blamed(tmp_path):
    clock = Clock(0.0)
    log = SpanLog(str(tmp_path), clock=clock)
    err = io.StringIO()
    dog = Watchdog(str(tmp_path), 10, log, poll=lambda: ["trainer-0"], clock=clock, err=err)
    clock.t = 11.0
    assert dog.check() is not None and "waiting on trainer-0 (did not answer" in err.getvalue()
    assert blamed([], [], 0.0) is None
    assert blamed([{"actor": "driver", "kind": "step", "start": 1.0}], [], 5.0) == ("driver", "step open for 4 s")


def test_the_watchdog_thread_reports_a_stall(tmp_path):
    """The thread calls check(); the stall is made by the clock, not by waiting it out."""
    clock = Clock(0.0)
    log = SpanLog(str(tmp_path), clock=clock)
    dog = Watchdog(str(tmp_path), 5, log, clock=clock, err=io.StringIO(), interval_s=0.02).start()
    try:
        clock.t = 6.0
        wait_for(lambda: dog.reports, 30, "a stall report from the watchdog thread")
    finally:
        dog.stop()
    assert "no span is open" in open(dog.reports[0]).read()


def test_a_report_on_demand(tmp_path):
    """request_report (rlvr-train --stacks) gets a report from the running watchdog at once,
    stalled or not; without a watchdog it times out."""
    from rlvr.train.watchdog import request_report

    clock = Clock(0.0)
    log = SpanLog(str(tmp_path), clock=clock)
    log.add("engine-0", {"spans": [], "open": [{"actor": "engine-0", "kind": "generate", "start": 0.0, "step": 1}]})
    err = io.StringIO()
    dog = Watchdog(str(tmp_path), 600, log, clock=clock, err=err, interval_s=0.02).start()
    try:
        path = request_report(str(tmp_path), timeout_s=60, poll_s=0.02)
    finally:
        dog.stop()
    text = open(path).read()
    assert text.startswith("asked for (rlvr-train --stacks): no span ended for 0 s")
    assert "waiting on engine-0 (generate step 1" in text and "== driver ==" in text
    assert err.getvalue().startswith("rlvr-train: stacks: ") and os.listdir(tmp_path / "stalls") == [os.path.basename(path)]
    with pytest.raises(TimeoutError, match="no stall report"):
        request_report(str(tmp_path), timeout_s=0.1, poll_s=0.02)
    assert os.listdir(tmp_path / "stalls") == [os.path.basename(path)]


def test_the_run_observer_writes_the_drivers_spans_and_the_fates(tmp_path):
    """Without actors and without a watchdog (stall_s 0): end_step drains the driver's own spans,
    writes the step's fates per version and returns its fates/ metrics; log.spans false records none.
    What the process recorded before the run (an actor's method called in this process by earlier
    work, under that actor's name) is not the run's: the run's spans are the driver's own."""
    from types import SimpleNamespace

    from rlvr.train.observe import RunObserver

    os.makedirs(tmp_path / "traces")
    cfg = SimpleNamespace(spans=True, spans_full_mb=100.0, spans_sample_every=10, stall_s=0)
    spans.set_actor("engine-0")
    with spans.span("generate", step=7):
        spans.begin("weight_load", step=7)   # left open
    obs = RunObserver(str(tmp_path), cfg)
    try:
        assert obs.watchdog is None and obs.step_figures() == {}
        with spans.span("step", step=0, version=0):
            obs.fates.add(0, "trained", 6)
            obs.fates.add(0, "zero_variance", 2)
        assert obs.end_step(0)["fates/trained"] == 6
        got = read_spans(str(tmp_path / "traces" / "spans.jsonl"))
        assert [(r["kind"], r["actor"]) for r in got] == [("step", "driver")]
        rows = [orjson.loads(ln) for ln in open(tmp_path / "traces" / "fates.jsonl", "rb")]
        assert rows == [{"step": 0, "policy_version": 0, "trained": 6, "zero_variance": 2, "stale": 0, "timed_out": 0,
                         "masked": 0}]
    finally:
        obs.close()
    cfg.spans = False
    obs = RunObserver(str(tmp_path), cfg)
    try:
        with spans.span("step", step=1):
            pass
        obs.end_step(1)
        assert len(read_spans(str(tmp_path / "traces" / "spans.jsonl"))) == 1
    finally:
        obs.close()
        spans.recorder().enabled = True


def test_a_recorder_nobody_drains_stays_bounded(monkeypatch):
    monkeypatch.setattr(spans, "MAX_HELD", 100)
    rec = Recorder("x")
    for i in range(250):
        rec.end(rec.begin("generate", step=i))
    got = rec.drain()["spans"]
    assert 50 <= len(got) <= 100 and got[-1]["step"] == 249 and rec.dropped == 250 - len(got)
    rec.enabled = False
    assert rec.begin("generate") is None and rec.end(None) is None and rec.drain()["spans"] == []


def test_python_stacks_show_every_thread():
    ev = threading.Event()
    t = threading.Thread(target=ev.wait, name="waiting thread", daemon=True)
    t.start()
    try:
        text = python_stacks()
    finally:
        ev.set()
    assert '"waiting thread"' in text and "test_python_stacks_show_every_thread" in text



@pytest.fixture(scope="module")
def ray_two_cpus():
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield ray
    ray.shutdown()


def test_a_blocked_ray_actor_still_hands_over_its_spans_and_stacks(ray_two_cpus, tmp_path):
    """Observed's methods run on a thread of their own: the actor below is stuck in hang() (inside
    an open span) and still answers drain_spans() and stacks(); the probe names an actor that is
    gone."""
    ray = ray_two_cpus
    from rlvr.train.observe import OBSERVE_GROUPS, ActorProbe, Observed, make_poll

    @ray.remote(num_cpus=0.1, max_concurrency=2, concurrency_groups=OBSERVE_GROUPS)
    class Stuck(Observed):       # as the fleet declares an in-flight engine: several calls at once
        def __init__(self):
            self.release = threading.Event()

        def hang_in_generate(self):
            with spans.span("generate", step=4, version=3, ids=["p1"]):
                self.release.wait(600)

    a, gone = Stuck.remote(), Stuck.remote()
    ray.get([a.observe_as.remote("engine-0"), gone.drain_spans.remote()])
    ray.kill(gone)
    a.hang_in_generate.remote()
    a.hang_in_generate.remote()      # both default threads busy: only the observe group's thread is free
    log = SpanLog(str(tmp_path))
    probe = ActorProbe({"engine-0": a, "engine-1": gone}, timeout_s=30)
    poll = make_poll(log, probe)
    wait_for(lambda: poll() is not None and log.open_spans(), 60, "the actor's open generate span")
    wait_for(lambda: poll() is not None and len(log.open_spans()) == 2, 60, "both calls' open generate spans")
    assert [(s["actor"], s["kind"], s["step"]) for s in log.open_spans()] == [("engine-0", "generate", 4)] * 2
    assert poll() == ["engine-1"]
    st = probe.stacks_all()
    assert "hang_in_generate" in st["engine-0"] and st["engine-1"].startswith("(no stacks")
    # the induced stall, seen by the watchdog as the driver starts it: a report that names the
    # dead actor, shows the open generate span and the stuck actor's stack
    import time

    err = io.StringIO()
    dog = Watchdog(str(tmp_path), 5, log, stacks=probe.stacks_all, poll=poll, clock=lambda: time.time() + 6, err=err)
    path = dog.check()
    text = open(path).read()
    assert "waiting on engine-1 (did not answer" in err.getvalue()
    assert "engine-0: generate step 4 version 3" in text and "== engine-0 ==" in text and "hang_in_generate" in text
    alive = {"engine-0": a}
    probe.actors = lambda: alive          # a function of the current handles (restarts replace them)
    figs = probe.ask("observe_figures")["engine-0"]
    assert set(figs["memory"]) == {"rss_gb"} and figs["engine"] == {}
    assert dog.check() is not None and "waiting on engine-0 (generate step 4 open for" in err.getvalue().splitlines()[1]
