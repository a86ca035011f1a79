"""rlvr-train's fault handling end to end on the tiny model: an engine killed or hung mid-run is
replaced and its prompts requeued; a dead trainer ends the run with one line naming the last
checkpoint; a prompt group past rollout.timeout_s is aborted and the run goes on; sync.abort_in_flight stops
and resubmits stale generations. (Split from test_train.py so the files run side by side; a signal during a
run: tests/test_train_signals.py.)"""

from __future__ import annotations

import os
import threading
import time

import orjson
import pytest
from machine_time import scaled

from rlvr.runs import latest_checkpoint
from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures


def act_when(ready, action) -> threading.Thread:
    """Run action() in a background thread as soon as ready() is true (a fault injected mid-run)."""
    def body():
        while not ready():
            time.sleep(0.05)
        action()

    th = threading.Thread(target=body, daemon=True)
    th.start()
    return th


def first_step_done(run_dir) -> bool:
    path = run_dir / "traces" / "trace.jsonl"
    return path.exists() and path.read_bytes().count(b"\n") >= 1


def kill_named(ray, prefix: str, killed: list) -> None:
    for name in ray.util.list_named_actors():
        if name.startswith(prefix):
            ray.kill(ray.get_actor(name))
            killed.append(name)


@pytest.mark.parametrize("when,staleness", [("sync", 0), ("generate", 1)])
def test_engine_killed_mid_run_is_restarted(ray_session, base_model, tmp_path, monkeypatch, when, staleness):
    # sync: the engine dies as the weights of step 2 are sent to it (the driver waits for that
    # sync); generate: it dies at a moment of the run's choosing, after the first step.
    import ray

    from rlvr.train import weight_sync

    cfg = cfg_for(base_model, "train.steps=3", "checkpoint.every=0", f"train.max_staleness={staleness}", *SMALL)
    killed = []
    if when == "sync":
        push = weight_sync.ObjectStoreSync.push

        def push_to_a_dying_engine(self, version):
            if version == 2 and not killed:
                kill_named(ray, "rlvr-engine-", killed)
            return push(self, version)

        monkeypatch.setattr(weight_sync.ObjectStoreSync, "push", push_to_a_dying_engine)
        run(cfg, tmp_path)
    else:
        th = act_when(lambda: first_step_done(tmp_path), lambda: kill_named(ray, "rlvr-engine-", killed))
        run(cfg, tmp_path)
        th.join(timeout=300)
    rows = trace(tmp_path)
    assert killed and [r["step"] for r in rows] == [1, 2, 3]
    assert rows[-1]["faults/engine_restarts"] >= 1
    ids = [x["id"] for x in trace(tmp_path, "rollouts.jsonl")]
    assert len(ids) == 3 * 8  # every prompt accounted for


def test_trainer_death_fails_clearly_and_keeps_the_last_checkpoint(ray_session, base_model, tmp_path):
    import ray

    from rlvr.cli import Failure

    cfg = cfg_for(base_model, "train.steps=4", "checkpoint.every=2", *SMALL)
    killed = []
    th = act_when((tmp_path / "checkpoints" / "step_000002" / "trainer_state.pt").exists,
                  lambda: kill_named(ray, "rlvr-trainer-", killed))
    with pytest.raises(Failure) as ei:
        run(cfg, tmp_path)
    th.join(timeout=300)
    msg = ei.value.message
    assert killed and "the trainer process died" in msg and "--resume" in msg and "step_0000" in msg
    step, ck = latest_checkpoint(str(tmp_path))
    assert step >= 2 and os.path.exists(os.path.join(ck, "model.safetensors"))
    assert orjson.loads((tmp_path / "run.json").read_bytes())["status"] == "failed"


def test_a_group_rebuild_drains_validation_and_teacher_calls_too(monkeypatch):
    """Before a broadcast group is rebuilt for a restarted engine, the driver waits for every
    call queued on the other current engines: rollouts, validations and a policy teacher's
    scoring (else an engine still busy leaves the others in vLLM's rendezvous)."""
    from types import SimpleNamespace

    import ray

    from rlvr.train.fleet import EngineFleet
    from rlvr.train.prompts import Chunk

    engines, retired = [object() for _ in range(3)], object()
    waited, late = [], []

    def wait(refs, num_returns, timeout):
        waited.append(sorted(refs))
        return [r for r in refs if r not in late], [r for r in refs if r in late]

    monkeypatch.setattr(ray, "wait", wait)
    # the modes' calls: a validation's and a policy teacher's (rlvr.train.modes.Modes.outstanding)
    fleet = SimpleNamespace(
        engines=engines, cfg=SimpleNamespace(sync=SimpleNamespace(generate_timeout_s=30.0)),
        outstanding={Chunk(0, "rollout-0", [], 0.0, engines[0]), Chunk(1, "rollout-1", [], 0.0, engines[1])},
        others=lambda: [("val-2", engines[2]), ("val-0", engines[0]), ("val-old", retired), ("score-1", engines[1])])
    # engine 0 restarts: its own calls and those of a retired actor are not waited for
    assert EngineFleet.drain(fleet, {0}) == set()
    assert waited == [["rollout-1", "score-1", "val-2"]]
    late.append("val-2")
    assert EngineFleet.drain(fleet, {1}) == {2}          # engine 2 did not finish: hung as well
    assert EngineFleet.drain(fleet, {1, 2}) == set() and waited[-1] == ["rollout-0", "val-0"]
    fleet.others = list   # no mode with calls on the engines
    EngineFleet.drain(fleet, {1})
    assert waited[-1] == ["rollout-0"]


def test_engines_hung_at_once_are_restarted_together_and_the_group_rebuilt_once(monkeypatch):
    """A broadcast restart for engine 0 finds engines 1 and 3 hung too (their queued calls never
    finish): they are replaced as well, and the group is rebuilt once, with all three."""
    from types import SimpleNamespace

    import ray

    from rlvr.train import actors
    from rlvr.train.fleet import EngineFleet
    from rlvr.train.metrics import Faults
    from rlvr.train.prompts import Chunk

    class Actor:
        node = SimpleNamespace(remote=lambda: "node")

    hung, waited, retired, restored = {"r1", "r3"}, [], [], []

    def wait(refs, num_returns, timeout):
        assert timeout == 30.0      # bounded by sync.generate_timeout_s
        waited.append(sorted(refs))
        return [r for r in refs if r not in hung], [r for r in refs if r in hung]

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(actors, "retire", lambda a, where: retired.append(a))
    old = [Actor() for _ in range(4)]
    fleet = EngineFleet.__new__(EngineFleet)
    fleet.engines, fleet.where, fleet.pending_syncs, fleet.last_done = list(old), {}, {}, {}
    fleet.cfg = SimpleNamespace(sync=SimpleNamespace(generate_timeout_s=30.0, timeout_s=60.0))
    fleet.faults, fleet.others = Faults(), list
    fleet.synced_version, fleet.trainers = 3, SimpleNamespace(version=4)
    fleet.outstanding = {Chunk(e, f"r{e}", [], 0.0, old[e]) for e in range(4)}
    fleet.new_engine = lambda base, index: Actor()
    fleet.base = "base"
    fleet.cluster = SimpleNamespace(startup=lambda refs, what, labels: [{"node": "n"} for _ in refs])
    fleet.weight_sync = SimpleNamespace(blocking=True,
                                        restore=lambda es, version, timeout_s: restored.append((list(es), version)))
    EngineFleet.restart_engine(fleet, 0, "gave no answer in 30s")
    assert restored == [([0, 1, 3], 4)]                  # one rebuild, every hung engine in it
    assert retired == [old[0], old[1], old[3]] and fleet.engines[2] is old[2]
    assert all(fleet.engines[e] is not old[e] for e in (0, 1, 3))
    assert fleet.faults["engine_restarts"] == 3 and set(fleet.last_done) == {0, 1, 3}
    assert waited == [["r1", "r2", "r3"], ["r2"]]       # engine 2 is waited for again, the new ones never


def test_two_engines_hung_at_once_are_both_restarted(ray_session, base_model, tmp_path, monkeypatch):
    """Two engines frozen at once under a sync that rebuilds a group on a restart (the
    broadcast's path, here on the object store so the cheap engine serves): both are replaced,
    in one rebuild, and the run goes on."""
    import signal

    from rlvr.train import weight_sync
    from rlvr.train.fleet import EngineFleet

    cfg = cfg_for(base_model, "train.steps=2", "checkpoint.every=0", f"sync.generate_timeout_s={scaled(6):.0f}",
                  "rollout.num_engines=2", *SMALL)
    monkeypatch.setattr(weight_sync.ObjectStoreSync, "blocking", True)
    restore, restored = weight_sync.ObjectStoreSync.restore, []

    def recorded(self, engines, version, timeout_s):
        restored.append(list(engines))
        return restore(self, engines, version, timeout_s)

    monkeypatch.setattr(weight_sync.ObjectStoreSync, "restore", recorded)
    submit, stopped = EngineFleet.submit, []

    def freeze_then_submit(self, e, items, *args):
        # once the first step is done, both engines stop answering before any of step 2's prompts reach them
        if not stopped and first_step_done(tmp_path):
            for where in orjson.loads((tmp_path / "run.json").read_bytes())["placement"]["engines"]:
                os.kill(where["pid"], signal.SIGSTOP)
                stopped.append(where["pid"])
        return submit(self, e, items, *args)

    monkeypatch.setattr(EngineFleet, "submit", freeze_then_submit)
    try:
        run(cfg, tmp_path)
    finally:
        for pid in stopped:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    rows = trace(tmp_path)
    assert len(stopped) == 2 and [r["step"] for r in rows] == [1, 2]
    assert [0, 1] in restored          # both replaced together: the group rebuilt once for the two
    assert rows[-1]["faults/engine_restarts"] >= 2 and rows[-1]["faults/requeued_prompts"] >= 8


def test_a_prompt_group_past_rollout_timeout_s_is_aborted_recorded_and_the_run_goes_on(ray_session, base_model,
                                                                                      tmp_path):
    """rollout.timeout_s far below a generation: the transformers engine generates one prompt at a time, so each
    call's first group finishes (the engine always takes one step) and the rest, still queued at the deadline, are
    aborted: recorded with status timeout, out of the loss; both steps train on what finished."""
    cfg = cfg_for(base_model, *SMALL, "train.steps=2", "checkpoint.every=0", "rollout.timeout_s=0.001")
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == [1, 2]
    rollouts = trace(tmp_path, "rollouts.jsonl")
    timed_out = [x for x in rollouts if (x.get("generation") or {}).get("status") == "timeout"]
    done = [x for x in rollouts if x.get("completions")]
    assert len(done) == 2 and len(timed_out) == 2 * 7                  # one group of 8 per step finished
    assert all(x["completions"] == [] and "rollout.timeout_s" in x["generation"]["error"] for x in timed_out)
    assert rows[-1]["faults/timeout_prompts"] == 14
    assert all(r["sampling/groups_trained"] == 1 for r in rows)


def test_abort_in_flight_stops_stale_generations_resubmits_them_and_the_run_learns(ray_session, base_model, tmp_path):
    """sync.abort_in_flight resubmit under max_staleness 1: the round generating for the next step while a step
    trains is stopped at the weight sync and its unfinished prompts are sent again behind the update; the trace
    counts them, every prompt of every step still has its whole group, in its place (none lost, none twice), the
    resent ones on the newer weights, and the reward rises."""
    steps = 10
    cfg = cfg_for(base_model, *SMALL, f"train.steps={steps}", "checkpoint.every=0", "train.max_staleness=1",
                  "sync.abort_in_flight=resubmit")
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    aborted = rows[-1]["faults/aborted_in_flight"]
    assert aborted > 0 and rows[-1]["faults/resubmitted_in_flight"] == aborted
    assert rows[-1]["faults/dropped_in_flight"] == 0
    rollouts = trace(tmp_path, "rollouts.jsonl")
    keys = [(x["id"], x["epoch"]) for x in rollouts]
    assert len(keys) == steps * 8 == len(set(keys)) and all(len(x["completions"]) == 4 for x in rollouts)
    assert all(r["sampling/groups_trained"] == 8 for r in rows)
    # the resent prompts generated on the weights of the step before theirs: fresher than the round they left
    fresh = sum(x["policy_version"] == x["step"] - 1 for x in rollouts if x["step"] > 1)
    assert fresh > 0 and all(x["step"] - 2 <= x["policy_version"] <= x["step"] - 1 for x in rollouts)
    first = sum(r["reward/mean"] for r in rows[:3]) / 3
    last = sum(r["reward/mean"] for r in rows[-3:]) / 3
    assert last > first + 0.1, (first, last)
