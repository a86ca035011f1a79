"""Seeing into a run end to end on the tiny CPU run: the spans file shows generation overlapping
training under train.max_staleness 1 and not under 0; a verifier that hangs and an engine that
stops answering each produce a stall report naming them while the run goes on; each step's line
carries the figures (memory per actor, tokens/s, queue times, sample fates); `rlvr-train
--stacks RUN_DIR` prints a running run's report."""

from __future__ import annotations

import glob
import os
import signal
import subprocess
import sys
import threading

import orjson

from machine_time import wait_for
from rlvr.train.spans import read_spans
from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


def overlap_s(a: list[dict], b: list[dict]) -> float:
    """Seconds during which a span of `a` and a span of `b` were open at once (summed over pairs)."""
    return sum(max(0.0, min(x["end"], y["end"]) - max(x["start"], y["start"])) for x in a for y in b)


def spans_of(run_dir, kind: str) -> list[dict]:
    return [s for s in read_spans(os.path.join(run_dir, "traces", "spans.jsonl")) if s["kind"] == kind]


def test_generation_overlaps_training_under_staleness_1_and_not_under_0(ray_session, base_model, tmp_path):
    got = {}
    for staleness in (0, 1):
        d = tmp_path / f"s{staleness}"
        run(cfg_for(base_model, "train.steps=4", "checkpoint.every=0", f"train.max_staleness={staleness}", *SMALL), d)
        gen = spans_of(d, "generate")
        # training: the trainer's phases (a step whose groups all have equal rewards has no update)
        fb = [s for k in ("pi_old", "forward_backward", "optimizer") for s in spans_of(d, k)]
        assert {s["actor"] for s in gen} == {"engine-0"} and {s["actor"] for s in fb} == {"trainer-0"}
        assert sorted({s["step"] for s in gen}) == [1, 2, 3, 4]            # each step's rollouts, tagged
        assert sorted({s["step"] for s in spans_of(d, "pi_old")}) == [1, 2, 3, 4]
        steps = spans_of(d, "step")
        assert [s["step"] for s in steps] == [1, 2, 3, 4] and {s["actor"] for s in steps} == {"driver"}
        verify = spans_of(d, "verify")
        assert verify and {s["actor"] for s in verify} == {"verifier"} and all(s["ids"] for s in verify)
        kinds = {s["kind"] for s in read_spans(os.path.join(d, "traces", "spans.jsonl"))}
        assert {"weight_gather", "weight_load"} <= kinds
        got[staleness] = overlap_s(gen, fb)
        rows = trace(d)
        # the figures of every step: the actors' memory, tokens/s, queue times and sample fates
        for r in rows:
            assert r["memory/engine-0/rss_gb"] > 0 and r["memory/trainer-0/rss_gb"] > 0
            assert r["throughput/engine_tokens_per_s"] > 0
            # a step whose groups all have equal rewards trains on nothing: no trainer tokens/s then
            assert (r.get("throughput/trainer_tokens_per_s", 0) > 0) == (r["fates/trained"] > 0)
            assert r["queue/wait_max_s"] >= r["queue/wait_mean_s"] >= 0
            n = sum(r[f"fates/{f}"] for f in ("trained", "zero_variance", "stale", "timed_out", "masked"))
            assert n == 8 * 4                                                # every sample has its fate
        fates = [orjson.loads(ln) for ln in open(os.path.join(d, "traces", "fates.jsonl"), "rb")]
        assert sum(f[k] for f in fates for k in ("trained", "zero_variance", "stale", "timed_out", "masked")) == 4 * 8 * 4
        assert all(f["step"] - 1 - f["policy_version"] <= staleness for f in fates)
    assert got[0] == 0.0          # synchronous: the engine waits for the trainer, and the trainer for it
    assert got[1] > 0.0           # one step ahead: the next step's rollouts run beside this step's training


def report_naming(run_dir, what: str) -> str | None:
    """The first stall report whose first line says the run waits on `what` (on a slow machine an
    earlier one may name a slow step's generation, or the verifier pool starting)."""
    for path in sorted(glob.glob(os.path.join(run_dir, "stalls", "2*.txt"))):
        with open(path) as fh:
            if f"waiting on {what}" in fh.readline():
                return path
    return None


def test_a_hanging_verifier_is_named_in_a_stall_report_and_the_run_goes_on(ray_session, base_model, tmp_path,
                                                                           monkeypatch):
    """The verifier hangs at step 2 until the stall report appears (log.stall_s 2): the report
    names it, --stacks prints a report of the running run on demand, then the run finishes."""
    from rlvr.train import loop

    real, release, calls = loop.verify, threading.Event(), []

    def hanging_verify(pool, groups):
        calls.append(1)
        if len(calls) == 2:
            release.wait(timeout=600)
        return real(pool, groups)

    monkeypatch.setattr(loop, "verify", hanging_verify)
    seen: dict = {}

    def watch():
        try:
            seen["report"] = wait_for(lambda: report_naming(tmp_path, "verifier (verify step 2"), 300,
                                      "a stall report")
            seen["stacks"] = subprocess.run([sys.executable, "-m", "rlvr.commands.train", "--stacks", str(tmp_path)],
                                            capture_output=True, text=True, timeout=300)
        finally:
            release.set()

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    run(cfg_for(base_model, "train.steps=3", "checkpoint.every=0", "log.stall_s=2", *SMALL), tmp_path)
    th.join(timeout=300)
    assert [r["step"] for r in trace(tmp_path)] == [1, 2, 3]            # the run went on
    text = open(seen["report"]).read()
    assert "waiting on verifier (verify step 2" in text.splitlines()[0], text[:2000]
    assert "hanging_verify" in text                                     # the driver's stack shows where
    st = seen["stacks"]
    assert st.returncode == 0, st.stderr
    assert st.stdout.startswith("asked for") and "trainer-0" in st.stdout and "engine-0" in st.stdout


def test_an_engine_that_stops_answering_is_named_in_a_stall_report(ray_session, base_model, tmp_path):
    """The engine is stopped (SIGSTOP) after the first step, before it gets step 2's prompts: the
    stall report names it as the actor that did not answer; it is let go again once the report is
    written and the run finishes."""
    from test_train_faults import first_step_done

    stopped, seen = [], {}

    def freeze_until_reported():
        wait_for(lambda: first_step_done(tmp_path), 300, "the first step")
        pid = orjson.loads((tmp_path / "run.json").read_bytes())["placement"]["engines"][0]["pid"]
        os.kill(pid, signal.SIGSTOP)
        stopped.append(pid)
        try:
            seen["report"] = wait_for(lambda: report_naming(tmp_path, "engine-0 (did not answer"), 300,
                                      "a stall report")
        finally:
            os.kill(pid, signal.SIGCONT)

    th = threading.Thread(target=freeze_until_reported, daemon=True)
    th.start()
    run(cfg_for(base_model, "train.steps=2", "checkpoint.every=0", "log.stall_s=2", *SMALL), tmp_path)
    th.join(timeout=300)
    assert stopped and [r["step"] for r in trace(tmp_path)] == [1, 2]
    text = open(seen["report"]).read()
    assert "actors that did not answer: engine-0" in text, text[:2000]


def test_stacks_prints_the_report_of_a_running_watchdog(tmp_path):
    """rlvr-train --stacks RUN_DIR without Ray: the watchdog of a run writing RUN_DIR answers."""
    from helpers import invoke
    from rlvr.train import spans
    from rlvr.train.watchdog import Watchdog

    log = spans.SpanLog(str(tmp_path))
    log.add("engine-0", {"spans": [], "open": [{"actor": "engine-0", "kind": "generate", "start": 1.0, "step": 3}]})
    dog = Watchdog(str(tmp_path), 600, log, stacks=lambda: {"engine-0": "Thread 1: generate"}, interval_s=0.2).start()
    try:
        r = invoke("rlvr-train", ["--stacks", str(tmp_path)])
    finally:
        dog.stop()
        log.close()
    assert r.code == 0, r.stderr
    assert r.stdout.startswith("asked for") and "generate" in r.stdout and "Thread 1: generate" in r.stdout
    assert "report: " + str(tmp_path / "stalls") in r.stderr
