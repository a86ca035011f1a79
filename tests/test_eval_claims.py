"""Claims on the units of a sweep (rlvr.eval.claims): two schedulers sharing one jobs list split
it between them, a dead owner's claim is taken over (at once on its own machine, after a silent
heartbeat on another), and a process whose claim was taken stops its evaluation."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading

from rlvr.eval import claims as cl
from rlvr.eval import jobs as sweep
from rlvr.eval import runner as ev


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def plant(folder, gen: int, **owner) -> str:
    """A claim file as another process would have written it."""
    os.makedirs(folder, exist_ok=True)
    path = os.path.join(folder, f"{cl.PREFIX}{gen}")
    with open(path, "w") as fh:
        json.dump({"token": f"t{gen}", "gen": gen, "interval": 30.0, "beat": 0, **owner}, fh)
    return path


def dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def test_one_owner_per_unit_and_a_dead_owner_on_this_machine_is_replaced_at_once(tmp_path):
    logs: list[str] = []
    a, b = cl.Claims(log=logs.append), cl.Claims(log=logs.append)
    unit = str(tmp_path / "evals" / "a" / "gsm8k_8shot")
    assert a.acquire(unit) and a.acquire(unit)            # made the folder; holding it twice is holding it
    assert a.state(unit)[0] == "mine" and b.state(unit)[0] == "live" and not b.acquire(unit)
    a.release(unit, failed=True)                          # a failed unit is free for the others at once
    assert b.state(unit)[0] == "free" and b.acquire(unit) and not a.acquire(unit)
    assert cl.current(unit).gen == 1 and cl.current(unit).owner["pid"] == os.getpid()
    b.release(unit)
    # an owner on this machine that no longer runs, or a PID now used by another process
    me = cl.machine()
    for gen, owner in ((2, {"pid": dead_pid(), "start": "1"}), (4, {"pid": os.getpid(), "start": "not-mine"})):
        plant(unit, gen, **me, **owner)
        assert a.state(unit)[0] == "dead" and a.acquire(unit)
        assert cl.current(unit).gen == gen + 1 and "no longer running" in logs[-1]
        assert sorted(os.listdir(unit)) == [f"{cl.PREFIX}{gen + 1}"]   # the dead claim it superseded is gone
        a.release(unit)
    assert sorted(os.listdir(unit)) == [f"{cl.PREFIX}5"]   # one released claim, no temporary file left
    # a writer that died left a temporary file: removed once it is old, never while it may be written
    young, old = (os.path.join(unit, f"{cl.PREFIX}6.{x}.tmp") for x in ("young", "old"))
    for p in (young, old):
        open(p, "w").close()
    os.utime(old, (os.path.getmtime(old) - 3600,) * 2)
    assert a.acquire(unit) and sorted(os.listdir(unit)) == [f"{cl.PREFIX}6", os.path.basename(young)]
    a.release(unit)                               # finished: the released claim alone
    assert sorted(os.listdir(unit)) == [f"{cl.PREFIX}6", os.path.basename(young)] and b.state(unit)[0] == "free"


def test_an_owner_superseded_while_it_stalled_stops_even_after_the_unit_finished(tmp_path):
    """W stalls (suspended, a hung mount); another node takes the unit over, finishes it and
    releases it. W's next beat must still see a higher generation than its own and stop: the
    finished unit's claim stays (generations are never reused), else W would write on."""
    unit = str(tmp_path / "u")
    w, x, y = cl.Claims(log=lambda m: None), cl.Claims(log=lambda m: None), cl.Claims(log=lambda m: None)
    x.me = {**x.me, "host": "node2"}
    assert w.acquire(unit) and cl.current(unit).gen == 0
    x.state = lambda folder: ("dead", cl.current(folder))     # as node2 judges the stalled W
    assert x.acquire(unit) and cl.current(unit).gen == 1
    x.release(unit)
    y.acquire(unit) and y.release(unit)                       # whoever comes next gets a new generation
    w.beat()
    assert w.lost(unit) and unit not in w.mine
    assert [n for n in os.listdir(unit) if n.startswith(cl.PREFIX)] == [f"{cl.PREFIX}{cl.current(unit).gen}"]


def test_a_filesystem_without_hard_links_still_gets_one_owner_per_unit(tmp_path, monkeypatch):
    def no_links(src, dst):
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(os, "link", no_links)
    a, b = cl.Claims(), cl.Claims()
    unit = str(tmp_path / "u")
    assert a.acquire(unit) and not b.acquire(unit) and cl.current(unit).owner["token"] == a.mine[unit]["token"]
    a.release(unit)
    assert b.acquire(unit) and cl.current(unit).gen == 1
    assert sorted(os.listdir(unit)) == [f"{cl.PREFIX}1"]


def test_an_owner_on_another_machine_is_dead_only_after_its_heartbeat_stays_silent(tmp_path):
    clock = Clock()
    c = cl.Claims(clock=clock, misses=10)
    unit = str(tmp_path / "u")
    other = {"host": "node2", "boot": "b", "pidns": "pid:[1]", "pid": os.getpid(), "start": "x"}
    path = plant(unit, 0, **other)
    assert c.state(unit)[0] == "live"                      # first seen now: its silence is timed from here
    clock.t += 9 * 30
    assert c.state(unit)[0] == "live" and not c.acquire(unit)
    with open(path, "w") as fh:                            # a beat (however late): live again, timed afresh
        json.dump({"token": "t0", "gen": 0, "interval": 30.0, "beat": 1, **other}, fh)
    assert c.state(unit)[0] == "live"
    clock.t += 9 * 30
    assert c.state(unit)[0] == "live"
    clock.t += 30                                          # ten intervals of its own without a beat
    assert c.state(unit)[0] == "dead"
    # two takers judge it dead at once: one generation, one winner
    rival = cl.Claims(clock=clock)
    rival.state(unit)
    clock.t += 10 * 30
    assert c.acquire(unit) and not rival.acquire(unit)
    assert cl.current(unit).owner["token"] == c.mine[unit]["token"]


def test_an_owner_whose_claim_was_taken_notices_at_its_next_beat(tmp_path):
    logs: list[str] = []
    owner = cl.Claims(log=logs.append)
    unit = str(tmp_path / "u")
    assert owner.acquire(unit)
    owner.beat()
    assert cl.current(unit).owner["beat"] == 1 and not owner.lost(unit)
    plant(unit, 1, host="node2", boot="b", pidns="p", pid=1, start="1")   # node2 judged it dead and took it
    owner.beat()
    assert owner.lost(unit) and "taken over by node2 pid 1" in logs[-1] and unit not in owner.mine
    owner.release(unit)                                     # never touches node2's claim
    assert cl.current(unit).owner["host"] == "node2" and "released" not in cl.current(unit).owner


def test_an_empty_or_torn_claim_is_taken_over_after_a_grace_period(tmp_path):
    logs: list[str] = []
    clock = Clock()
    c = cl.Claims(clock=clock, grace=60.0, log=logs.append)
    fresh, old = str(tmp_path / "fresh"), str(tmp_path / "old")
    for folder, text in ((fresh, ""), (old, '{"host": "node2", "pi')):
        os.makedirs(folder)
        with open(os.path.join(folder, f"{cl.PREFIX}3"), "w") as fh:
            fh.write(text)
    stamp = os.path.getmtime(os.path.join(old, f"{cl.PREFIX}3")) - 3600
    os.utime(os.path.join(old, f"{cl.PREFIX}3"), (stamp, stamp))
    # an hour-old torn file: nobody is writing it, taken over at once
    assert c.state(old)[0] == "dead" and c.acquire(old) and cl.current(old).gen == 4
    assert "unreadable claim .rlvr-claim.3" in logs[-1]
    # a new empty file may be a claim being written: live, until it stays so for the grace period
    assert c.state(fresh)[0] == "live" and not c.acquire(fresh)
    clock.t += 59
    assert not c.acquire(fresh)
    clock.t += 1
    assert c.state(fresh)[0] == "dead" and c.acquire(fresh) and cl.current(fresh).owner["pid"] == os.getpid()
    assert sorted(os.listdir(fresh)) == [f"{cl.PREFIX}4"] == sorted(os.listdir(old))   # the torn ones are gone


def test_a_unit_finished_elsewhere_between_scan_and_claim_is_not_run_again(tmp_path):
    unit = sweep.Unit("/ckpt", str(tmp_path / "a" / "toy"), sweep.Task("toy"))
    ran: list[str] = []

    def scan():
        left = [u for u in [unit] if not sweep.unit_done(u, ev.EvalOptions())]
        if left:   # meanwhile another node finishes the unit and releases its claim
            plant(unit.out, 0, **cl.machine(), pid=1, start="x", released=True)
            with open(os.path.join(unit.out, "summary.json"), "w") as fh:
                json.dump({"checkpoint": "c", "benchmark": "toy", "mode": "greedy", "metrics": {}}, fh)
        return left

    def command(u, opts, dev):
        ran.append(u.out)
        return [sys.executable, "-c", "pass"]

    assert sweep.run_units(scan, [None], ev.EvalOptions(), log=lambda m: None, command=command) == 0
    c = cl.current(unit.out)   # claimed (generation 1), found finished: its released claim alone is left
    assert ran == [] and c.gen == 1 and c.owner.get("released")
    assert [n for n in os.listdir(unit.out) if n.startswith(cl.PREFIX)] == [f"{cl.PREFIX}1"]


# A stand-in for one evaluation: it records which scheduler ran it, waits until two units have
# started (so the two schedulers provably ran at once), then writes its summary.json.
FAKE_EVAL = textwrap.dedent("""
    import json, os, sys, time
    out, who, started = sys.argv[1], sys.argv[2], sys.argv[3]
    open(os.path.join(started, os.path.basename(os.path.dirname(out)) + "@" + who), "w").close()
    guard = time.monotonic() + 120
    while len(os.listdir(started)) < 2:
        if time.monotonic() > guard:
            sys.exit(7)
        time.sleep(0.05)
    json.dump({"checkpoint": "c", "benchmark": "toy", "mode": "greedy", "metrics": {"accuracy": 1.0}},
              open(os.path.join(out, "summary.json"), "w"))
""")


def test_two_schedulers_on_one_jobs_list_split_it_and_run_each_unit_once(tmp_path):
    script = tmp_path / "fake_eval.py"
    script.write_text(FAKE_EVAL)
    started = tmp_path / "started"
    started.mkdir()
    jobs = [sweep.Job(f"/ckpts/{i}", f"job{i}") for i in range(5)]
    tasks = [sweep.Task("toy")]
    opts = ev.EvalOptions()
    out = str(tmp_path / "evals")
    results: dict[str, int] = {}

    def node(who: str) -> None:
        command = lambda u, o, dev: [sys.executable, str(script), u.out, who, str(started)]  # noqa: E731
        results[who] = sweep.run_units(lambda: sweep.job_units(jobs, out, tasks, opts), [who], opts, interval=0.5,
                                       log=lambda m: None, command=command, claims=cl.Claims(interval=0.2))

    threads = [threading.Thread(target=node, args=(w,)) for w in ("node1", "node2")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert results == {"node1": 0, "node2": 0}
    ran = sorted(os.listdir(started))
    units = [r.split("@")[0] for r in ran]
    assert sorted(units) == [f"job{i}" for i in range(5)]            # every unit once, none twice
    assert {r.split("@")[1] for r in ran} == {"node1", "node2"}      # and both nodes took some
    for i in range(5):   # a finished unit keeps one claim file, its released one
        assert len([n for n in os.listdir(os.path.join(out, f"job{i}", "toy")) if n.startswith(cl.PREFIX)]) == 1


SCHEDULER = textwrap.dedent("""
    import sys
    from rlvr.eval import jobs as sweep, runner as ev
    out, script = sys.argv[1], sys.argv[2]
    jobs = [sweep.Job("/ckpts/0", "job0")]
    sweep.run_units(lambda: sweep.job_units(jobs, out, [sweep.Task("toy")], ev.EvalOptions()), [None],
                    ev.EvalOptions(), log=lambda m: None, command=lambda u, o, d: [sys.executable, script, u.out])
""")


def test_a_unit_dies_with_its_scheduler_and_is_taken_over(tmp_path):
    """kill -9 of a scheduler leaves no orphan evaluation writing into its unit (the child gets
    SIGTERM from the kernel), and its claim is taken over at once on this machine."""
    import signal
    import time

    child = tmp_path / "child.py"
    child.write_text("import os, sys, time\nopen(os.path.join(sys.argv[1], 'pid'), 'w').write(str(os.getpid()))\n"
                     "time.sleep(600)\n")
    out = tmp_path / "evals"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(os.path.dirname(__file__))]))
    sched = subprocess.Popen([sys.executable, "-c", SCHEDULER, str(out), str(child)], env=env)
    pid_file = out / "job0" / "toy" / "pid"
    guard = time.monotonic() + 120   # a guard against a hang, not a time limit
    while not (pid_file.exists() and pid_file.read_text()) and sched.poll() is None and time.monotonic() < guard:
        time.sleep(0.05)
    pid = int(pid_file.read_text())
    os.kill(sched.pid, signal.SIGKILL)
    sched.wait()
    while cl.process_start(pid) is not None and time.monotonic() < guard:
        time.sleep(0.05)
    assert cl.process_start(pid) is None, "the evaluation outlived its scheduler"
    logs: list[str] = []
    assert cl.Claims(log=logs.append).acquire(str(out / "job0" / "toy")) and "no longer running" in logs[0]
