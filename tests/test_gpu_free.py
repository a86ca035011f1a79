"""rlvr-gpu-free and rlvr.gpu against a fake 8 x A100-80GB node.

The driver is faked (tests/fakes: a pynvml module and an nvidia-smi script reading one JSON
scenario); the processes are real: the tests start live servers, an unreaped (defunct)
child, reaped (gone) PIDs and orphaned multiprocessing workers, and --kill-zombies signals
them for real. ssh is replaced by tests/fakes/fake-ssh, which runs the command locally.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time

import orjson
import pytest

from helpers import REPO, invoke
from machine_time import SLOW, MachineClock
from rlvr import gpu

FAKES = os.path.join(REPO, "tests", "fakes")
A100 = "NVIDIA A100-SXM4-80GB"
UUIDS = [f"GPU-{i}f6c9a2e-1b3d-4c5e-9f7a-2d4b6c8e0a1{i}" for i in range(8)]
PROG = "rlvr-gpu-free"


def _load_fake_nvml():
    spec = importlib.util.spec_from_file_location("pynvml", os.path.join(FAKES, "pynvml.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ----------------------------------------------------------------- real processes


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, ppid) of a process, None when it is gone."""
    try:
        rest = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return rest[0], int(rest[1])


def _sigign(pid: int) -> int:
    for ln in open(f"/proc/{pid}/status"):
        if ln.startswith("SigIgn:"):
            return int(ln.split()[1], 16)
    return 0


def _running(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def _until(cond, what: str, limit: float = 300.0) -> None:  # a guard against a hang only
    deadline = time.monotonic() + limit
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


LAUNCH_ORPHANS = """
import multiprocessing as mp, os, sys, time
ctx = mp.get_context("spawn")
ps = [ctx.Process(target=time.sleep, args=(600,)),
      ctx.Process(target=exec, args=("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
                                     "time.sleep(600)",)),
      ctx.Process(target=time.sleep, args=(600,))]
for p in ps:
    p.start()
print(" ".join(str(p.pid) for p in ps), flush=True)
sys.stdin.readline()   # the test says when the workers are up: then the "job" dies
os._exit(0)
"""


def _orphans() -> list[int]:
    """Three orphaned multiprocessing spawn workers: [obeys SIGTERM, ignores SIGTERM, obeys]."""
    # a session of its own, like a job started from a login shell (not the test runner's session)
    p = subprocess.Popen([sys.executable, "-c", LAUNCH_ORPHANS], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         text=True, start_new_session=True)
    pids = [int(x) for x in p.stdout.readline().split()]
    # a spawn worker's command line is set at exec; the second one must ignore SIGTERM before we go on
    _until(lambda: all("spawn_main" in open(f"/proc/{q}/cmdline").read() for q in pids), "spawn workers")
    _until(lambda: _sigign(pids[1]) & (1 << (signal.SIGTERM - 1)), "SIGTERM ignored")
    p.stdin.write("\n")
    p.stdin.flush()
    p.wait()
    _until(lambda: all(_stat(q) and _stat(q)[1] != p.pid for q in pids), "reparenting")
    return pids


def _reparented_to_reaper(pid: int) -> bool:
    """Whether this machine reparents orphans to PID 1 or a known init (the test's precondition:
    a test runner that is itself a child subreaper would adopt them)."""
    ppid = _stat(pid)[1]
    return ppid == 1 or open(f"/proc/{ppid}/comm").read().strip() in gpu.REAPERS


class Procs:
    """Real processes standing for GPU users: live, defunct, gone, orphaned, nohup'ed."""

    def __init__(self):
        self.popen: list[subprocess.Popen] = []
        # (each lives far longer than the module runs, on a busy machine too; stop() ends them)
        self.live = self._start(["sleep", "601"]).pid            # e.g. an inference server
        self.trainer = self._start(["sleep", "602"]).pid
        z = self._start(["true"])                                 # never waited for: defunct
        self.defunct = z.pid
        _until(lambda: _stat(z.pid) and _stat(z.pid)[0] == "Z", "a defunct child")
        self.gone, self.gone2 = self._reaped(), self._reaped()   # not in /proc any more
        out = subprocess.run(["sh", "-c", "sleep 603 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
        self.nohup = int(out.stdout)                              # left by its shell: ppid 1, no worker
        self.extra = [self.nohup]
        _until(lambda: _stat(self.nohup) is not None, "nohup child")

    @staticmethod
    def _reaped() -> int:
        g = subprocess.Popen(["true"])
        g.wait()
        return g.pid

    def _start(self, argv):
        p = subprocess.Popen(argv)
        self.popen.append(p)
        return p

    def stop(self, more=()):
        for pid in [*self.extra, *more]:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for p in self.popen:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def procs():
    p = Procs()
    p.orphans = _orphans()
    yield p
    p.stop(p.orphans)


@pytest.fixture(autouse=True)
def clean_env(monkeypatch, tmp_path):
    for k in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "RLVR_GPU_BACKEND", "RLVR_SSH_CMD", "RLVR_GPU_FREE_REMOTE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("FAKE_GPU_SCENARIO", "")  # scenario() sets it; restored afterwards
    monkeypatch.setenv("RLVR_GPU_PID_NAMESPACE", "shared")  # the same answer inside a CI container
    # nvidia-smi on PATH is the fake (a real one on a GPU machine must not answer these tests)
    bindir = tmp_path / "bin"
    bindir.mkdir()
    smi = bindir / "nvidia-smi"
    smi.write_text(f'#!/bin/sh\nexec "{sys.executable}" -S "{FAKES}/nvidia-smi" "$@"\n')
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("PYTHONPATH", FAKES + os.pathsep + os.environ.get("PYTHONPATH", ""))
    fake = _load_fake_nvml()
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    yield


def scenario(tmp_path, samples, *, name="node", n=None, **extra) -> str:
    """Write a fake-node scenario; samples: per sample, per GPU (used_mib, util, procs[, extra])."""
    n = n or len(samples[0])
    scn = {"gpus": [{"uuid": UUIDS[i], "name": A100, "total_mib": 81920} for i in range(n)],
           "samples": [[dict(used_mib=g[0], util=g[1], procs=g[2], **(g[3] if len(g) > 3 else {})) for g in s]
                       for s in samples], **extra}
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps(scn))
    os.environ["FAKE_GPU_SCENARIO"] = str(path)  # the clean_env fixture restores it
    sys.modules["pynvml"].load(scn)
    return str(path)


FREE = (4, 0, [])


def node_8(p: Procs) -> list[list[tuple]]:
    """Three samples of a busy shared node; GPU 6 is busy in the middle sample only."""
    base = [
        FREE,                                                    # 0 free
        (71234, 97, [[p.trainer, 71000]]),                        # 1 busy training
        (70980, 0, [[p.live, 70900]]),                            # 2 idle inference server
        (38000, 0, [[p.gone, 37900]]),                            # 3 zombie: pid gone
        (20000, 0, [[p.defunct, 19900]]),                         # 4 zombie: defunct
        (30500, 0, [[p.orphans[0], 30400]]),                      # 5 zombie: orphaned worker
        (15000, 0, [[p.orphans[2], 14900]]),                      # 6 busy in one sample of three
        (52000, 0, [[p.nohup, 30000], [p.gone2, 20000]]),  # 7 mixed: nohup server + gone
    ]
    s1 = list(base)
    s1[1] = (71234, 100, base[1][2])
    s1[6] = (15000, 35, base[6][2])
    s2 = list(base)
    s2[1] = (71234, 99, base[1][2])
    return [base, s1, s2]


# ----------------------------------------------------------------- classification


@pytest.mark.parametrize("backend", ["nvml", "smi"])
def test_mixed_node_states_from_both_backends(procs, tmp_path, backend):
    if not _reparented_to_reaper(procs.orphans[0]):
        pytest.skip("orphans here are reparented to a process running our own interpreter")
    scenario(tmp_path, node_8(procs))
    states = gpu.snapshot(backend=backend, samples=3, interval=0)
    got = {g.index: g.state for g in states}
    assert got == {0: "free", 1: "busy", 2: "idle", 3: "zombie", 4: "zombie", 5: "zombie", 6: "busy", 7: "idle"}
    by = {g.index: g for g in states}
    assert by[1].util == [97, 100, 99] and by[1].util_max == 100
    assert by[6].util == [0, 35, 0]   # one busy reading in three is enough
    p2 = by[2].procs[0]
    assert (p2.pid, p2.status, p2.state, p2.cmdline) == (procs.live, "live", "S", "sleep 601")
    assert p2.user and p2.uid == os.getuid() and p2.age_s is not None and 0 <= p2.age_s < 600
    assert round(p2.used_mib) == 70900
    assert [p.status for p in by[3].procs] == ["gone"]
    assert by[4].procs[0].status == "defunct" and by[4].procs[0].state == "Z"
    assert by[5].procs[0].status == "orphan" and "multiprocessing worker" in by[5].procs[0].reason
    # the nohup'ed server has ppid 1 too, but is no worker: live, so GPU 7 stays idle
    st7 = {p.pid: p.status for p in by[7].procs}
    assert st7 == {procs.nohup: "live", procs.gone2: "gone"}
    assert "live process(es)" in by[7].reason and "dead" in by[7].reason
    assert by[0].mem_total_mib == 81920 and by[0].name == A100 and by[0].uuid == UUIDS[0]


def test_edge_cases_of_the_rule(procs, tmp_path):
    ctx = 500  # a bare CUDA context
    s0 = [(ctx, 0, [[procs.live, ctx]]),                          # 0 context only: a process -> not free
          (20000, 0, []),                                         # 1 memory, no process listed -> idle
          (4, 0, []),                                             # 2 process appears later -> busy
          (30000, None, [[procs.live, 29000]], {"error": "util_not_supported"}),  # 3 util unknown -> busy
          (4, None, [], {"error": "util_not_supported"}),          # 4 util unknown, empty -> free
          (30000, 0, [[procs.trainer, 29000]], {"error": "gpu_lost"}),  # 5 -> error
          (10000, 0, [[procs.gone, 9000]]),                       # 6 memory moving -> busy
          (900, 0, [])]                                           # 7 under --max-mem -> free
    s1 = list(s0)
    s1[2] = (3000, 0, [[procs.trainer, 2900]])
    s1[6] = (14000, 0, [[procs.gone, 13000]])
    scenario(tmp_path, [s0, s1])
    states = gpu.snapshot(backend="nvml", samples=2, interval=0)
    assert [g.state for g in states] == ["idle", "idle", "busy", "busy", "free", "error", "busy", "free"]
    assert "no listed process" in states[1].reason
    assert "started or exited" in states[2].reason
    assert "not reported" in states[3].reason
    assert "GPU is lost" in states[5].reason
    assert "moved by 4000 MiB" in states[6].reason
    # a lower threshold turns GPU 7 (900 MiB, no process) from free to idle
    sys.modules["pynvml"].load(json.load(open(os.environ["FAKE_GPU_SCENARIO"])))
    assert gpu.snapshot(backend="nvml", samples=2, interval=0, max_mem_mib=512)[7].state == "idle"


def test_a_process_that_exits_during_the_window_is_not_a_zombie(procs, tmp_path):
    # pid `gone` held a little memory in the first sample and has left: activity, not death (nor free yet)
    scenario(tmp_path, [[(600, 0, [[procs.gone, 500]])], [(4, 0, [])], [(4, 0, [])]])
    g = gpu.snapshot(backend="nvml", samples=3, interval=0)[0]
    assert g.state == "busy" and [(p.pid, p.status) for p in g.procs] == [(procs.gone, "exited")]


class Table(gpu.ProcTable):
    """A process table given as data, for the orphan rule's corner cases."""

    def __init__(self, rows: dict[int, tuple]):
        super().__init__(foreign_ns=False, hidepid=False)
        self.rows = {pid: gpu.ProcInfo(pid, comm, "S", ppid, pgid, sid, 1000, cmd, 1, 60.0)
                     for pid, (comm, ppid, pgid, sid, cmd) in rows.items()}

    def get(self, pid):
        return self.rows.get(pid)

    def has_env(self, pid, prefix):
        return False


SPAWNED = "/venv/bin/python -c from multiprocessing.spawn import spawn_main; spawn_main(tracker_fd=5, pipe_handle=7)"


@pytest.mark.parametrize("rows,orphan", [
    # the job died, its worker went to systemd (PID 1 or a user's subreaper): orphan
    ({1: ("systemd", 0, 1, 1, "/sbin/init"), 50: ("VLLM::Worker_TP", 1, 40, 40, "VLLM::Worker_TP0")}, True),
    ({1: ("systemd", 0, 1, 1, "/sbin/init"), 9: ("systemd", 1, 9, 9, "/lib/systemd/systemd --user"),
      50: ("python", 9, 40, 40, SPAWNED)}, True),
    # a container whose entrypoint is the server: its engine is PID 1's child, in PID 1's session
    ({1: ("vllm", 0, 1, 1, "/venv/bin/python /venv/bin/vllm serve m"),
      50: ("VLLM::EngineCor", 1, 1, 1, "VLLM::EngineCore")}, False),
    # ... even when the engine moved to a process group of its own
    ({1: ("vllm", 0, 1, 1, "/venv/bin/python /venv/bin/vllm serve m"),
      50: ("VLLM::EngineCor", 1, 50, 1, "VLLM::EngineCore")}, False),
    # a worker left on PID 1 from another session: its job is gone
    ({1: ("bash", 0, 1, 1, "bash /entry.sh"), 50: ("ray::Worker", 1, 30, 30, "ray::RayWorkerWrapper")}, True),
    # a nohup'ed server left by its shell: no worker, live
    ({1: ("systemd", 0, 1, 1, "/sbin/init"), 50: ("python", 1, 40, 40, "python serve.py --port 8000")}, False),
    # a worker whose job still runs
    ({1: ("systemd", 0, 1, 1, "/sbin/init"), 30: ("python", 1, 30, 30, "python train.py"),
      50: ("python", 30, 30, 30, SPAWNED)}, False),
])
def test_orphan_rule(rows, orphan):
    table = Table(rows)
    assert (gpu.orphan_reason(table.get(50), table) is not None) == orphan


def test_orphan_rule_never_takes_a_hidden_parent_or_init_for_dead():
    rows = {1: ("systemd", 0, 1, 1, "/sbin/init"), 50: ("python", 30, 30, 30, SPAWNED)}  # parent 30 not visible
    assert gpu.orphan_reason(Table(rows).get(50), Table(rows)) is not None  # all of /proc visible: it died
    for hidden in ({"hidepid": True}, {"foreign_ns": True}):
        t = Table(rows)
        for k, v in hidden.items():
            setattr(t, k, v)
        assert gpu.orphan_reason(t.get(50), t) is None, hidden  # another user's launcher may be alive
    init = Table({1: ("python", 0, 1, 1, SPAWNED)})
    assert gpu.orphan_reason(init.get(1), init) is None


def test_kill_plan_never_proposes_pid_1_itself_or_an_unknown_owner():
    procs = [gpu.GpuProc(pid, 1000.0, "orphan", "orphaned multiprocessing worker", uid=uid)
             for pid, uid in ((1, 0), (0, 0), (-1, 0), (os.getpid(), 0), (4242, None), (4243, 0))]
    g = gpu.GpuState(0, UUIDS[0], A100, "zombie", "", 2000.0, 81920.0, [0], procs)
    plan = gpu.plan_kills([g], uid=0)
    assert [(it.proc.pid, it.action) for it in plan] == [(1, "skip"), (0, "skip"), (-1, "skip"),
                                                         (os.getpid(), "skip"), (4242, "skip"), (4243, "kill")]
    assert "never signalled" in plan[0].reason and "owner could not be read" in plan[4].reason


def test_a_defunct_main_thread_with_live_threads_is_live(tmp_path):
    # state Z on the leader, but the process still runs in another thread (and may hold a GPU)
    code = ("import ctypes, threading, time\n"
            "threading.Thread(target=time.sleep, args=(60,)).start()\n"
            "print('up', flush=True)\n"
            "ctypes.CDLL(None).pthread_exit(None)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        _until(lambda: _stat(p.pid)[0] == "Z", "the main thread to exit")
        scenario(tmp_path, [[(30000, 0, [[p.pid, 29000]])]])
        g = gpu.snapshot(backend="nvml", samples=1)[0]
        assert (g.state, g.procs[0].status, g.procs[0].state) == ("idle", "live", "Z")
        assert "other threads still run" in g.procs[0].reason
    finally:
        p.kill()
        p.wait()


def test_pid_namespace_rule(procs, tmp_path):
    r = [gpu.Reading(0, UUIDS[0], A100, 30000, 81920, 0, {procs.gone: 29000.0}),
         gpu.Reading(1, UUIDS[1], A100, 30000, 81920, 0, {procs.live: 29000.0})]
    shared = gpu.classify([r, r], gpu.ProcTable(foreign_ns=False, hidepid=False))
    assert [g.state for g in shared] == ["zombie", "idle"]
    # in a nested PID namespace the driver's PIDs are host PIDs: absent is not dead, and a
    # visible PID without /dev/nvidia* open may be an unrelated local process
    nested = gpu.classify([r, r], gpu.ProcTable(foreign_ns=True))
    assert [g.state for g in nested] == ["idle", "idle"]
    assert [g.procs[0].status for g in nested] == ["hidden", "hidden"]
    assert "namespace" in nested[0].procs[0].reason
    # detection unknown (no NSpid): when none of the node's PIDs is visible, assume another namespace
    only_gone = [r[0]]
    unknown = gpu.ProcTable(foreign_ns=False, hidepid=False)
    unknown.foreign_ns = None
    assert gpu.classify([only_gone], unknown)[0].state == "idle"
    # /proc mounted with hidepid=2 hides other users' processes: absent is not dead either
    assert gpu.classify([only_gone], gpu.ProcTable(foreign_ns=False, hidepid=True))[0].state == "idle"


@pytest.mark.parametrize("nspid,mount,foreign,hidden", [
    ("NSpid:\t4242\n", "rw,relatime", False, False),                  # the host's namespace
    ("NSpid:\t4242\t17\n", "rw,relatime", True, False),              # a container's
    ("", "rw,relatime", None, False),                                 # old kernel: unknown
    ("NSpid:\t4242\n", "rw,nosuid,hidepid=2", False, True),           # other users hidden
    ("NSpid:\t4242\n", "rw,hidepid=invisible,gid=27", False, True),
])
def test_namespace_and_hidepid_detection(tmp_path, monkeypatch, nspid, mount, foreign, hidden):
    monkeypatch.setenv("RLVR_GPU_PID_NAMESPACE", "auto")
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "status").write_text(f"Name:\tpython\n{nspid}Threads:\t1\n")
    (tmp_path / "self" / "mountinfo").write_text(
        f"22 27 0:21 / {tmp_path} rw,nosuid,nodev,noexec,relatime shared:12 - proc proc {mount}\n")
    t = gpu.ProcTable(root=str(tmp_path))
    assert t.foreign_ns is foreign
    t.euid = 1000   # as a user: root sees every process whatever the mount says
    assert t._hidepid() is hidden
    monkeypatch.setenv("RLVR_GPU_PID_NAMESPACE", "foreign")
    assert gpu.ProcTable(root=str(tmp_path)).foreign_ns is True
    monkeypatch.setenv("RLVR_GPU_PID_NAMESPACE", "maybe")
    with pytest.raises(gpu.GpuError, match="auto, shared or foreign"):
        gpu.ProcTable(root=str(tmp_path))


def test_parse_visible():
    devs = [(i, UUIDS[i]) for i in range(8)]
    assert gpu.parse_visible(None, devs) == (list(range(8)), [])
    assert gpu.parse_visible("3,1", devs) == ([3, 1], [])
    assert gpu.parse_visible(f"{UUIDS[5][:10]},0", devs) == ([5, 0], [])
    assert gpu.parse_visible("", devs) == ([], [])
    assert gpu.parse_visible("-1", devs) == ([], [])
    ids, warns = gpu.parse_visible("2,9,4", devs)   # like CUDA: the list ends at a bad entry
    assert ids == [2] and "'9' names no GPU" in warns[0]
    ids, warns = gpu.parse_visible("2,2", devs)
    assert ids == [2] and "repeats" in warns[0]
    ids, warns = gpu.parse_visible("MIG-abc,1", devs)
    assert ids == [1] and "MIG" in warns[0]


def test_the_fake_nvml_speaks_the_real_modules_api(monkeypatch):
    """The fake must not drift from nvidia-ml-py: same names, codes, signatures and struct fields."""
    import importlib.machinery
    import inspect

    fake = sys.modules["pynvml"]
    spec = importlib.machinery.PathFinder.find_spec("pynvml")   # the installed one, not the fake
    real = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "pynvml", real)   # it adds its error classes to sys.modules["pynvml"]
    spec.loader.exec_module(real)
    assert real.__file__ != fake.__file__
    for name in dir(fake):
        if name.startswith(("nvml", "NVML")):
            assert hasattr(real, name), name
            if name.isupper() or name == "nvmlMemory_v2":
                assert getattr(real, name) == getattr(fake, name), name
            elif callable(getattr(fake, name)) and name.startswith("nvml"):
                assert list(inspect.signature(getattr(real, name)).parameters) == \
                    list(inspect.signature(getattr(fake, name)).parameters), name
    assert issubclass(real.NVMLError_NotSupported, real.NVMLError)
    assert {"gpu", "memory"} <= {f[0] for f in real.c_nvmlUtilization_t._fields_}
    assert {"pid", "usedGpuMemory"} <= {f[0] for f in real.c_nvmlProcessInfo_v3_t._fields_}
    assert {"total", "used", "free"} <= {f[0] for f in real.c_nvmlMemory_v2_t._fields_}


# ----------------------------------------------------------------- the command


def all_free_but(busy: set[int], n: int = 8) -> list[tuple]:
    return [(40000, 80, []) if i in busy else FREE for i in range(n)]


def test_list_output_feeds_cuda_visible_devices(tmp_path):
    scenario(tmp_path, [all_free_but({0, 2, 3, 5, 6})])
    r = invoke(PROG, ["--samples", "2", "--interval", "0"])
    assert (r.code, r.stdout, r.stderr) == (0, "1,4,7\n", "")
    r = invoke(PROG, ["-n", "2", "--samples", "2", "--interval", "0"])
    assert (r.code, r.stdout) == (0, "1,4\n")
    r = invoke(PROG, ["-n", "2", "--uuid", "--samples", "1"])
    assert r.stdout == f"{UUIDS[1]},{UUIDS[4]}\n"


def test_too_few_free_exits_4_with_nothing_on_stdout(tmp_path):
    scenario(tmp_path, [all_free_but({0, 1, 2, 3, 5, 6, 7})])
    r = invoke(PROG, ["-n", "2", "--samples", "1"])
    assert r.code == gpu.EXIT_TOO_FEW and r.stdout == ""
    assert r.stderr.strip() == f"{PROG}: error: only 1 free GPU of 8, 2 wanted (busy: 0,1,2,3,5,6,7)"
    scenario(tmp_path, [all_free_but(set(range(8)))])
    r = invoke(PROG, ["--samples", "1"])
    assert r.code == gpu.EXIT_TOO_FEW and "no free GPU of 8, 1 wanted" in r.stderr


def test_cuda_visible_devices_is_respected(tmp_path, monkeypatch):
    scenario(tmp_path, [all_free_but({2})])
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"6,2,{UUIDS[3][:12]}")
    r = invoke(PROG, ["--samples", "1"])
    assert (r.code, r.stdout) == (0, "6,3\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    r = invoke(PROG, ["--samples", "1"])
    assert r.code == gpu.EXIT_NO_GPU and "hides all 8" in r.stderr and "Traceback" not in r.stderr


def test_json_has_every_field(procs, tmp_path):
    scenario(tmp_path, node_8(procs))
    r = invoke(PROG, ["--json", "--samples", "3", "--interval", "0"])
    assert r.code == 0, r.stderr
    recs = [orjson.loads(ln) for ln in r.stdout.splitlines()]
    assert [x["index"] for x in recs] == list(range(8))
    for x in recs:
        assert set(x) == {"host", "index", "uuid", "name", "state", "reason", "mem_used_mib", "mem_total_mib",
                          "util_max", "util", "samples", "window_s", "processes"}
        assert x["samples"] == 3 and len(x["util"]) == 3
    p = recs[2]["processes"][0]
    assert {k: p[k] for k in ("pid", "cmdline", "state", "status", "used_mib")} == \
        {"pid": procs.live, "cmdline": "sleep 601", "state": "S", "status": "live", "used_mib": 70900.0}
    assert isinstance(p["age_s"], float) and p["user"]


def test_table_marks_the_picked_gpus(procs, tmp_path):
    scenario(tmp_path, node_8(procs))
    r = invoke(PROG, ["--format", "table", "-n", "1", "--samples", "3", "--interval", "0"])
    assert r.code == 0
    lines = r.stdout.splitlines()
    assert lines[0].split()[:2] == ["GPU", "STATE"]
    assert lines[1].startswith("*0 ") and " free " in lines[1]
    assert any(f"pid {procs.live}" in ln and "sleep 601" in ln for ln in lines)
    assert lines[-1] == "* picked: 0"


def test_wait_until_free_and_wait_timeout(tmp_path):
    busy, free = all_free_but(set(range(8))), all_free_but({0, 1, 2, 3, 4, 5})
    scenario(tmp_path, [busy, busy, busy, busy, free, free])   # free from the third window on
    clock = MachineClock(sample=True)  # machine seconds (tests/machine_time.py)
    r = invoke(PROG, ["-n", "2", "--wait", "--samples", "2", "--interval", "0"])
    took = clock.seconds()
    clock.stop()
    assert (r.code, r.stdout) == (0, "6,7\n"), r.stderr
    assert "waiting for 2 free GPU(s)" in r.stderr and took < 10 * SLOW, took
    scenario(tmp_path, [busy])
    r = invoke(PROG, ["-n", "1", "--wait", "--timeout", "0.3", "--samples", "1"])
    assert r.code == gpu.EXIT_TOO_FEW and "timed out after 0.3 s" in r.stderr and r.stdout == ""
    assert invoke(PROG, ["--timeout", "3"]).code == 2
    assert invoke(PROG, ["--max-mem", "0"]).code == 2   # "below 0 MiB" could never be free
    r = invoke(PROG, ["--json", "--format", "list"])
    assert r.code == 2 and "different outputs" in r.stderr


def test_nvidia_smi_fallback_when_nvml_is_missing(tmp_path):
    scenario(tmp_path, [all_free_but({1, 2})], nvml="missing")
    path = os.environ["FAKE_GPU_SCENARIO"]
    r = invoke(PROG, ["--samples", "2", "--interval", "0"])
    assert (r.code, r.stdout) == (0, "0,3,4,5,6,7\n")
    assert json.load(open(path + ".smi-calls")) == {"gpu": 2, "apps": 2}   # it really asked nvidia-smi


@pytest.mark.parametrize("raw,msg", [
    ({"gpu": "0, GPU-x, A100, 4, 81920\n"}, "output line 1: expected 6 fields, got 5"),
    ({"gpu": "0, GPU-x, A100, 4, 81920, 0\n1, GPU-y, A100, lots, 81920, 0\n"},
     "output line 2: field mem_used_mib is not a number: 'lots'"),
    ({"gpu": "zero, GPU-x, A100, 4, 81920, 0\n"}, "field index is not an integer"),
    ({"gpu": "0, GPU-x, A100, 4, 81920, 0\n", "apps": "GPU-zzz, 123, 500\n"}, "field gpu_uuid names no GPU"),
    ({"gpu": "0, GPU-x, A100, 4, 81920, 0\n", "apps": "GPU-x, 12a, 500\n"}, "field pid/used_memory is not a number"),
])
def test_malformed_nvidia_smi_output_is_one_clear_line(tmp_path, raw, msg):
    scenario(tmp_path, [all_free_but(set())], nvml="missing", smi_raw=raw)
    r = invoke(PROG, ["--samples", "1"])
    assert r.code == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and msg in r.stderr, r.stderr


def test_garbled_bytes_from_nvidia_smi_are_fields_not_a_crash(tmp_path):
    smi = tmp_path / "nvidia-smi"
    smi.write_bytes(b"#!/bin/sh\ncase \"$1\" in\n"
                    b"--query-gpu=*) printf '0, GPU-x, A\\377100, 4, 81920, 0\\n1, GPU-y, A100, \\3774, 81920, 0\\n';;\n"
                    b"*) printf 'GPU-x, 12\\376, 500\\n';;\nesac\n")
    smi.chmod(0o755)
    reader = gpu.readers.SmiReader(str(smi))
    with pytest.raises(gpu.GpuError, match="output line 2: field mem_used_mib is not a number"):
        reader.read()


def test_no_driver_is_exit_5_without_traceback(tmp_path):
    env = {**os.environ, "PATH": str(tmp_path), "PYTHONPATH": FAKES}
    env.pop("FAKE_GPU_SCENARIO", None)   # the fake NVML then says "NVML Shared Library Not Found"
    p = subprocess.run([sys.executable, "-m", "rlvr.commands.gpu_free"], env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == gpu.EXIT_NO_GPU and p.stdout == ""
    assert p.stderr == (f"{PROG}: error: no NVIDIA GPU driver: NVML: NVML Shared Library Not Found; "
                        "nvidia-smi: 'nvidia-smi' not found on PATH\n")
    # a driver that nvidia-smi cannot talk to, and a node without devices: exit 5 as well
    scenario(tmp_path, [all_free_but(set())], nvml="not_loaded", smi="no_driver")
    r = invoke(PROG, ["--samples", "1"])
    assert r.code == gpu.EXIT_NO_GPU and "couldn't communicate with the NVIDIA driver" in r.stderr
    assert "NVML: Driver Not Loaded" in r.stderr
    scenario(tmp_path, [[]], nvml="missing", n=0)
    r = invoke(PROG, ["--samples", "1"])
    assert r.code == gpu.EXIT_NO_GPU and "No devices were found" in r.stderr


def test_help_documents_the_exit_codes():
    r = invoke(PROG, ["--help"])
    assert r.code == 0
    assert "4    fewer free GPUs than asked for" in r.stdout and "5    no NVIDIA GPU or driver" in r.stdout
    assert "CUDA_VISIBLE_DEVICES=$(rlvr-gpu-free -n 2)" in r.stdout


# ----------------------------------------------------------------- killing zombies


def test_kill_zombies_signals_only_orphaned_workers(tmp_path):
    p = Procs()
    orphans = _orphans()
    try:
        if not _reparented_to_reaper(orphans[0]):
            pytest.skip("orphans here are reparented to a process running our own interpreter")
        obeys, stubborn, on_busy = orphans
        s = [(30000, 0, [[obeys, 29000]]),            # 0 zombie: SIGTERM is enough
             (30000, 0, [[stubborn, 29000]]),         # 1 zombie: ignores SIGTERM, needs SIGKILL
             (30000, 45, [[on_busy, 29000]]),         # 2 an orphan on a busy GPU: never touched
             (30000, 0, [[p.live, 29000]]),           # 3 idle server: never touched
             (30000, 0, [[p.nohup, 29000]]),          # 4 nohup'ed server (ppid 1): never touched
             (30000, 0, [[p.defunct, 29000]]),        # 5 defunct: nothing to signal
             (30000, 0, [[p.gone, 29000]]),           # 6 gone: nothing to signal
             FREE]
        scenario(tmp_path, [s])
        args = ["--kill-zombies", "--samples", "2", "--interval", "0"]
        r = invoke(PROG, args)   # dry run
        assert r.code == 0, r.stderr
        lines = r.stdout.splitlines()
        assert [ln.split(":")[0] for ln in lines] == ["would kill", "would kill", "skip", "skip", "skip"]
        assert f"pid {obeys} on GPU 0" in lines[0] and f"pid {stubborn} on GPU 1" in lines[1]
        assert "GPU is busy" in lines[2] and "defunct" in lines[3] and "nothing to signal" in lines[4]
        assert "dry run" in r.stderr and "sent" not in r.stderr
        assert all(_running(q) for q in (*orphans, p.live, p.nohup))

        sys.modules["pynvml"].load(json.load(open(os.environ["FAKE_GPU_SCENARIO"])))
        r = invoke(PROG, [*args, "--yes", "--grace", "0.5", "--json"])
        assert r.code == 0, r.stderr
        res = {x["pid"]: (x["action"], x["result"], x["signals"]) for x in map(orjson.loads, r.stdout.splitlines())}
        assert res[obeys] == ("kill", "terminated", ["SIGTERM"])
        assert res[stubborn] == ("kill", "killed", ["SIGTERM", "SIGKILL"])
        assert res[on_busy][0] == "skip" and res[on_busy][2] == []
        sent = [ln for ln in r.stderr.splitlines() if " sent SIG" in ln]
        assert [ln.split()[2:5] for ln in sent] == [["SIGTERM", "to", "pid"], ["SIGTERM", "to", "pid"],
                                                     ["SIGKILL", "to", "pid"]]
        assert f"pid {obeys} " in sent[0] and f"pid {stubborn} " in sent[1] and f"pid {stubborn} " in sent[2]
        assert not _running(obeys) and not _running(stubborn)
        assert all(_running(q) for q in (on_busy, p.live, p.nohup))
    finally:
        p.stop(orphans)


def test_kill_plan_spares_other_users_unless_root(procs, tmp_path):
    if not _reparented_to_reaper(procs.orphans[0]):
        pytest.skip("orphans here are reparented to a process running our own interpreter")
    scenario(tmp_path, [[(30000, 0, [[procs.orphans[0], 29000]])]])
    states = gpu.snapshot(backend="nvml", samples=1)
    me = os.getuid()
    assert [it.action for it in gpu.plan_kills(states, uid=me)] == ["kill"]
    assert [it.action for it in gpu.plan_kills(states, uid=0)] == ["kill"]
    other = gpu.plan_kills(states, uid=me + 4242)
    assert other[0].action == "skip" and "only root may signal" in other[0].reason


def test_kill_plan_spares_a_process_that_also_runs_on_a_busy_gpu():
    def g(i, state, *pids):
        procs = [gpu.GpuProc(pid, 1000.0, "orphan", "orphaned multiprocessing worker", uid=0) for pid in pids]
        return gpu.GpuState(i, UUIDS[i], A100, state, "", 2000.0, 81920.0, [0], procs)

    plan = gpu.plan_kills([g(0, "zombie", 11, 12), g(1, "busy", 12), g(2, "zombie", 11, 13)], uid=0)
    got = [(it.gpu.index, it.proc.pid, it.action) for it in plan]
    assert got == [(0, 11, "kill"), (0, 12, "skip"), (1, 12, "skip"), (2, 11, "skip"), (2, 13, "kill")]
    assert "also on GPU 1, which is busy" in plan[1].reason and "signalled once" in plan[3].reason


def test_kill_never_reaches_a_reused_pid(procs, tmp_path):
    scenario(tmp_path, [[(30000, 0, [[procs.live, 29000]])]])
    g = gpu.snapshot(backend="nvml", samples=1)[0]
    proc = g.procs[0]
    proc.status, proc.start_ticks = "orphan", proc.start_ticks - 1   # as if the PID now named another process
    plan = gpu.execute_kills(gpu.plan_kills([g]), grace=0.1, log=lambda m: pytest.fail(m))
    assert plan[0].result == "gone" and _running(procs.live)


# ----------------------------------------------------------------- other nodes


def test_hosts_over_a_fake_ssh(tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_SSH_DIR", str(tmp_path))
    scenario(tmp_path, [all_free_but({1, 2, 4, 5, 6, 7})], name="nodeA")
    scenario(tmp_path, [all_free_but({0, 3, 4, 6, 7})], name="nodeB")
    scenario(tmp_path, [[]], name="nodeC", n=0, nvml="missing")   # a node without GPUs
    hosts = tmp_path / "hosts.txt"
    hosts.write_text("# the sweep's nodes\nnodeA\nnodeB   # second\n\nnodeC\nnodeZ\n")
    base = ["--ssh-cmd", os.path.join(FAKES, "fake-ssh"), "--remote-cmd", f"{sys.executable} -m rlvr.commands.gpu_free",
            "--samples", "1", "--interval", "0"]
    r = invoke(PROG, [*base, "--hosts-file", str(hosts), "-n", "4"])
    assert (r.code, r.stdout) == (0, "nodeA:0,nodeA:3,nodeB:1,nodeB:2\n"), r.stderr
    assert "nodeC: rlvr-gpu-free: error: no NVIDIA GPU" in r.stderr
    assert "nodeZ: ssh: Could not resolve hostname nodeZ" in r.stderr and "(exit status 255)" in r.stderr
    r = invoke(PROG, [*base, "--host", "nodeB,nodeA", "--json"])
    recs = [orjson.loads(ln) for ln in r.stdout.splitlines()]
    assert [(x["host"], x["index"]) for x in recs][:2] == [("nodeB", 0), ("nodeB", 1)] and len(recs) == 16
    assert invoke(PROG, [*base, "--host", "nodeA", "--host", "nodeB", "-n", "6"]).code == gpu.EXIT_TOO_FEW
    r = invoke(PROG, [*base, "--host", "nodeZ", "--host", "nodeY"])
    assert r.code == 1 and "no host answered: nodeZ, nodeY" in r.stderr
    assert invoke(PROG, [*base, "--host", "nodeA", "--kill-zombies"]).code == 2


@pytest.mark.parametrize("line", ['{"index": 0, "uuid": "u", "name": "n", "state": "free", "processes": [5]}',
                                  '{"index": 0, "uuid": "u", "name": "n", "state": "free", "processes": "ab"}',
                                  '[1, 2]', '7', '{"index": "x"}', '{"index": 0, "uuid": "u"'])
def test_a_garbled_record_from_a_host_is_that_hosts_one_line(tmp_path, line):
    ssh = tmp_path / "ssh"
    ssh.write_text(f"#!/bin/sh\necho '{line}'\n")
    ssh.chmod(0o755)
    with pytest.raises(gpu.GpuError, match="h1: output line 1 is not a GPU record"):
        gpu.query_host("h1", [], ssh_cmd=str(ssh))
    warned = []
    with pytest.raises(gpu.GpuError, match="no host answered: h1, h2"):  # every host failed: one line each
        gpu.query_hosts(["h1", "h2"], [], warned.append, ssh_cmd=str(ssh))
    assert len(warned) == 2


def test_hosts_run_this_installations_command_by_absolute_path_by_default(tmp_path, monkeypatch):
    """Over ssh the remote shell has no virtualenv on its PATH: the default remote command is this
    installation's rlvr-gpu-free by absolute path (the fake ssh's shell here finds no other)."""
    from rlvr.gpu.hosts import default_remote

    monkeypatch.setenv("FAKE_SSH_DIR", str(tmp_path))
    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    monkeypatch.delenv("RLVR_GPU_FREE_REMOTE", raising=False)
    scenario(tmp_path, [all_free_but({1})], name="nodeA")
    remote = default_remote()
    assert os.path.isabs(remote.split()[0].strip("'")) and remote.split()[0].strip("'").startswith(
        os.path.dirname(sys.executable))
    r = invoke(PROG, ["--ssh-cmd", os.path.join(FAKES, "fake-ssh"), "--host", "nodeA", "--samples", "1",
                      "--interval", "0", "-n", "2"])
    assert (r.code, r.stdout) == (0, "nodeA:0,nodeA:2\n"), r.stderr
    r = invoke(PROG, ["--help"])
    assert "this installation's rlvr-gpu-free, by" in " ".join(r.stdout.split()) and sys.executable not in r.stdout


def test_free_gpus_api(tmp_path):
    scenario(tmp_path, [all_free_but({0, 1})])
    assert gpu.free_gpus(2, backend="nvml", samples=2, interval=0) == [2, 3]
    with pytest.raises(gpu.TooFewFree) as e:
        gpu.free_gpus(7, backend="nvml", samples=1)
    assert e.value.want == 7 and len(e.value.states) == 8
