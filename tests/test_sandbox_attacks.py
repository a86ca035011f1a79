"""The attack corpus: every known way to cheat or escape the code verifier gets reward 0.

Each attack is a completion for a small task that it does not solve; a harness it fools
would pass it. The exfiltration attacks (environment, files, network) return the secret
as their answer, so a leak would show as reward 1; a control run of the same code
outside the sandbox proves each of them really finds the secret there. After every
attack no process of the check is left and no file outside the sandbox changed.

Runs with bubblewrap and as root where available (as on the project's machines); the
attacks that need those skip elsewhere with the reason.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from machine_time import MachineClock, SLOW, wait_for

from rlvr.sandbox import Limits, SandboxConfig, get_sandbox
from rlvr.sandbox.server import ZYGOTE_SRC_PATH
from rlvr.verifiers import code
from rlvr.verification.rewards import RewardTable

HAVE_BWRAP = shutil.which("bwrap") is not None
IS_ROOT = os.geteuid() == 0
CFG = {"timeout": 2.0}
REWARDS = RewardTable()

ADD = {"id": "t/add", "tests": ["assert add(1, 2) == 3", "assert add(-5, 6) == 1", "assert add(10, 20) == 30"]}
ADD_CHECK = {
    "id": "t/add-check",
    "prefix": 'def add(a, b):\n    """Return a + b."""\n',
    "test": textwrap.dedent("""
        def check(candidate):
            assert candidate(1, 2) == 3
            assert candidate(-5, 6) == 1
            assert abs(candidate(0.1, 0.2) - 0.3) < 1e-9
            assert all(candidate(i, i) == 2 * i for i in range(5))
    """),
    "entry_point": "add",
}
# HumanEval/32-like: the test grades the answer with a helper defined by the prompt.
POLY = {
    "id": "t/poly",
    "prefix": textwrap.dedent('''
        import math


        def poly(xs: list, x: float):
            return sum(coeff * math.pow(x, i) for i, coeff in enumerate(xs))


        def find_zero(xs: list):
            """Return x such that poly(xs, x) == 0."""
    '''),
    "test": textwrap.dedent("""
        def check(candidate):
            import math
            for coeffs in ([1, 2], [-6, 11, -6, 1], [4, -2, 0, 1]):
                solution = candidate(coeffs)
                assert math.fabs(poly(coeffs, solution)) < 1e-4
    """),
    "entry_point": "find_zero",
}


def reward(verdict: dict) -> float:
    return REWARDS.reward(verdict)


def _children() -> dict[int, list[int]]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            ppid = int(data[data.rindex(b")") + 2:].split()[1])
            kids.setdefault(ppid, []).append(int(name))
    return kids


def server_tree(root: int | None = None) -> set[int]:
    """Pids below this test process, or below root (the sandbox server and whatever runs under it)."""
    kids = _children()
    out, stack = set(), [os.getpid() if root is None else root]
    while stack:
        for c in kids.get(stack.pop(), ()):
            out.add(c)
            stack.append(c)
    return out


def _cmdline(pid: int) -> list[bytes]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read().split(b"\0")
    except OSError:
        return []


ZYGOTE_ARGS = [b"-S", b"-s", b"-P", b"-c"]
with open(ZYGOTE_SRC_PATH, "rb") as _fh:
    ZYGOTE_SRC = _fh.read()


def _is_zygote(argv: list[bytes]) -> bool:
    """A sandbox server's zygote (rlvr.sandbox.server starts it as `python -S -s -P -c SRC CFG`);
    the checks it forks carry the same command line."""
    return len(argv) > 5 and argv[1:5] == ZYGOTE_ARGS and argv[5] == ZYGOTE_SRC


def strays() -> dict[int, str]:
    """The processes of checks still alive: everything below a sandbox server's zygote, on every
    server below this test process, whichever server it is now (a server can be replaced
    between checks: a check's clean-up past its budget, a lost control channel). An idle
    server has nothing below its zygote. Maps pid -> command line."""
    kids = _children()
    out: dict[int, str] = {}
    stack = [os.getpid()]
    while stack:
        for c in kids.get(stack.pop(), ()):
            if _is_zygote(_cmdline(c)):
                below = list(kids.get(c, ()))
                while below:
                    p = below.pop()
                    argv = _cmdline(p)
                    out[p] = "(the zygote's fork)" if _is_zygote(argv) else b" ".join(argv).decode("utf-8", "replace")[:200]
                    below.extend(kids.get(p, ()))
            else:
                stack.append(c)
    return out


@pytest.fixture(scope="module")
def warm():
    """A warm sandbox server: the first check of the module pays the start."""
    v = code.verify(ADD, "def add(a, b):\n    return a + b\n", CFG)
    assert v["status"] == "correct", v


@pytest.fixture(autouse=True)
def no_strays(warm):
    yield
    # The server kills a check's processes as the check ends, after the verdict is returned:
    # wait for that (a few machine seconds), then name what is left.
    try:
        wait_for(lambda: not strays(), 15, "the processes of the check")
    except AssertionError as e:
        raise AssertionError(f"a process of the check outlived it: {strays()} ({e})") from None


def check_attack(record: dict, completion: str, statuses=("wrong",), config=None) -> dict:
    clock = MachineClock(sample=True)
    v = code.verify(record, completion, {**CFG, **(config or {})})
    took = clock.seconds()
    clock.stop()
    assert reward(v) == 0.0, v
    assert v["status"] in statuses, v
    limit = (config or {}).get("wall_timeout") or 2 * (config or {}).get("timeout", CFG["timeout"])
    # bounded by its limits: on a busy machine in machine seconds (tests/machine_time.py)
    assert took < limit + 3.0 * SLOW, f"verify took {clock.wall():.1f} s ({took:.1f} machine seconds)"
    return v


# --------------------------------------------------------------------------- exiting early

@pytest.mark.parametrize("completion", [
    "def add(a, b):\n    return 0\nexit(0)\n",
    "import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n",
    "import os\ndef add(a, b):\n    return 0\nos._exit(0)\n",
    "raise SystemExit(0)\n",
    "def add(a, b):\n    import os\n    os._exit(0)\n",
    "def add(a, b):\n    raise SystemExit(0)\n",
    "import atexit\ndef add(a, b):\n    return 0\ndef bye():\n    raise SystemExit(0)\natexit.register(bye)\n"
    "raise RuntimeError('fail, then exit 0 from atexit')\n",
    "import atexit, os\ndef add(a, b):\n    return 0\natexit.register(lambda: os._exit(0))\n",
], ids=["exit", "sys.exit", "os._exit", "raise-SystemExit", "os._exit-in-call", "SystemExit-in-call",
        "atexit-SystemExit", "atexit-os._exit"])
def test_exit_early(completion):
    v = check_attack(ADD, completion)
    assert v["tests_passed"] == 0


# --------------------------------------------------------------------------- rigged comparisons

def test_eq_always_true():
    v = check_attack(ADD, textwrap.dedent("""
        class Yes:
            def __eq__(self, other): return True
            def __ne__(self, other): return False
            def __hash__(self): return 0
        def add(a, b):
            return Yes()
    """))
    assert v["tests_passed"] == 0


def test_eq_always_true_on_builtin_subclasses():
    v = check_attack(ADD, textwrap.dedent("""
        class I(int):
            def __eq__(self, other): return True
            __hash__ = int.__hash__
        class L(list):
            def __eq__(self, other): return True
        def add(a, b):
            return I(0) if a else L()
    """))
    assert v["tests_passed"] == 0


def test_rigged_arithmetic_against_tolerance_check():
    check_attack(ADD_CHECK, textwrap.dedent("""
        class Zero:
            def __sub__(self, other): return 0
            def __rsub__(self, other): return 0
            def __eq__(self, other): return True
            def __abs__(self): return 0
        def add(a, b):
            return Zero()
    """))


def test_bool_is_not_int_under_strict_types():
    """True == 1 in Python, and by default in rlvr as in the reference harnesses (MBPP 414's
    reference returns 1/0); code.strict_types=true does not let one type stand for another."""
    rec = {"tests": ["assert is_even(2) == True", "assert is_even(3) == False"]}
    check_attack(rec, "def is_even(n):\n    return 1 - n % 2\n", config={"strict_types": True})
    check_attack(rec, "def is_even(n):\n    return [True]\n", config={"strict_types": True})
    for cfg in ({}, {"strict_types": True}):
        assert code.verify(rec, "def is_even(n):\n    return n % 2 == 0\n", {**CFG, **cfg})["status"] == "correct"


# --------------------------------------------------------------------------- tampering with the test code

@pytest.mark.parametrize("completion", [
    # builtins the asserts rely on, replaced process-wide
    "import builtins\nbuiltins.abs = lambda x: 0\nbuiltins.all = lambda it: True\n"
    "def add(a, b):\n    return 0 if a != 1 else 3\n",
    # the same builtins shadowed by module-level definitions
    "def abs(x):\n    return 0\ndef all(it):\n    return True\ndef add(a, b):\n    return 0 if a != 1 else 3\n",
    # AssertionError itself replaced, so a failing assert raises something a harness ignores
    "import builtins\nclass Quiet(BaseException): pass\nbuiltins.AssertionError = Quiet\n"
    "def add(a, b):\n    return 0\n",
    # the test's own check function replaced
    "def check(candidate):\n    pass\ndef add(a, b):\n    return 0\n",
], ids=["patch-builtins", "shadow-builtins", "replace-AssertionError", "redefine-check"])
def test_tampering_with_builtins_and_check(completion):
    check_attack(ADD_CHECK, completion)


def test_monkeypatched_test_helpers():
    """Redefine the prompt's helper the test grades with, and patch math.fabs it calls."""
    check_attack(POLY, textwrap.dedent("""
        import math
        math.fabs = lambda x: 0.0
        math.pow = lambda x, i: 0.0
        def poly(xs, x):
            return 0.0
        def find_zero(xs):
            return 12345.0
    """))
    honest = textwrap.dedent("""
        def find_zero(xs):
            lo, hi = -1000.0, 1000.0
            while poly(xs, lo) * poly(xs, hi) > 0:
                lo, hi = lo * 2, hi * 2
            for _ in range(200):
                mid = (lo + hi) / 2
                if poly(xs, lo) * poly(xs, mid) <= 0:
                    hi = mid
                else:
                    lo = mid
            return lo
    """)
    assert code.verify(POLY, honest, CFG)["status"] == "correct"


def test_trace_hook_skips_assert_lines():
    check_attack(ADD_CHECK, textwrap.dedent("""
        import sys, linecache
        def local(frame, event, arg):
            if event == "line":
                line = linecache.getline(frame.f_code.co_filename, frame.f_lineno).strip()
                if line.startswith("assert"):
                    try:
                        frame.f_lineno = frame.f_lineno + 1
                    except ValueError:
                        pass
            return local
        def glob(frame, event, arg):
            return local
        sys.settrace(glob)
        import threading
        threading.settrace(glob)
        def add(a, b):
            return 0
    """))


def test_trace_hook_jumps_to_the_end_of_check():
    """The variant that beats an in-process harness on checks ending in `assert True`."""
    rec = {**ADD_CHECK, "test": ADD_CHECK["test"] + "    assert True\n"}
    check_attack(rec, textwrap.dedent("""
        import sys
        def skip(frame, event, arg):
            if event == "line" and frame.f_code.co_name == "check":
                last = max(l for _, _, l in frame.f_code.co_lines() if l is not None)
                if frame.f_lineno < last:
                    try:
                        frame.f_lineno = last
                    except ValueError:
                        pass
            return skip
        sys.settrace(lambda f, e, a: skip if f.f_code.co_name == "check" else None)
        def add(a, b):
            return None
    """))


def test_marker_read_from_code_objects_and_frames():
    """Harvest every string constant of every frame and code object and print it, then exit 0."""
    check_attack(ADD, textwrap.dedent("""
        import gc, sys, os
        found = set()
        f = sys._getframe()
        while f is not None:
            found.update(c for c in f.f_code.co_consts if isinstance(c, str))
            found.update(str(v) for v in f.f_globals.values() if isinstance(v, str))
            f = f.f_back
        for o in gc.get_objects():
            if type(o).__name__ == "code":
                found.update(c for c in o.co_consts if isinstance(c, str))
        for s in sorted(found):
            print(s)
        def add(a, b):
            return 0
        sys.stdout.flush()
        os._exit(0)
    """))


def test_fake_success_marker():
    check_attack(ADD, "print('ALL TESTS PASSED')\nprint('PASSED')\nprint('{\"passed\": true}')\n"
                      "import sys\nsys.stdout.flush()\ndef add(a, b):\n    return 0\nsys.exit(0)\n")


def test_forged_protocol_replies():
    """Write replies claiming success onto the RPC socket before any request arrives."""
    check_attack(ADD, textwrap.dedent("""
        import os, json, struct
        for fake in ({"names": ["add"]}, {"v": 3}, {"v": True}, {"v": {"$h": 1}}):
            data = json.dumps(fake).encode()
            try:
                os.write(3, struct.pack(">I", len(data)) + data)
            except OSError:
                pass
        def add(a, b):
            return 0
    """))
    assert code.verify(ADD, "def add(a, b):\n    return a + b\n", CFG)["status"] == "correct"


# --------------------------------------------------------------------------- resources

@pytest.mark.parametrize("completion,status", [
    ("def add(a, b):\n    while True:\n        pass\n", "timeout"),
    ("while True:\n    pass\n", "timeout"),
    ("import time\ntime.sleep(60)\n", "timeout"),
    ("import time\ndef add(a, b):\n    time.sleep(60)\n", "timeout"),
], ids=["loop-in-call", "loop-at-load", "sleep-at-load", "sleep-in-call"])
def test_hangs_time_out(completion, status):
    busy = "pass" in completion
    # A busy loop meets the CPU limit (whatever the machine's load); a sleep, the wall clock.
    config = {"timeout": 1.0, "wall_timeout": 30.0 if busy else 1.0}
    v = check_attack(ADD, completion, statuses=(status,), config=config)
    assert ("CPU time limit" if busy else "wall-clock limit") in v["error"], v


def test_ignoring_sigxcpu_is_still_a_cpu_timeout():
    """A program that ignores SIGXCPU runs on to the hard CPU limit, where the kernel sends
    SIGKILL: that is the CPU limit too (it was graded as a crash), in both kinds of check."""
    ignore = "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
    config = {"timeout": 1.0, "wall_timeout": 30.0, "test_timeout": 30.0}
    v = check_attack(ADD, ignore + "def add(a, b):\n    while True:\n        pass\n", statuses=("timeout",), config=config)
    assert "CPU time limit" in v["error"], v
    v = check_attack(_stdio("10"), ignore + "n = int(input())\nwhile n == 5:\n    pass\nprint(2 * n)\n",
                     statuses=("timeout",), config=config)
    assert v["tests_passed"] == 2 and "CPU time limit" in v["error"], v


@pytest.mark.parametrize("completion", [
    "x = bytearray(10 ** 12)\n",
    "x = [0] * 10 ** 10\n",
    "chunks = []\nwhile True:\n    chunks.append(bytearray(10 ** 7))\n",
    "def add(a, b):\n    s = 'x'\n    while True:\n        s = s + s\n",
], ids=["one-huge", "huge-list", "gradual", "in-call"])
def test_memory_bombs(completion):
    # the wall clock is not what this is about: a busy machine must not make a bomb a timeout
    v = check_attack(ADD, completion, config={"memory_mb": 256, "wall_timeout": 30.0})
    assert "MemoryError" in v.get("error", "") or v.get("signal") or "exited" in v.get("error", ""), v


@pytest.mark.skipif(not IS_ROOT, reason="RLIMIT_NPROC only binds a separate uid; needs root to drop to one")
def test_fork_bomb():
    v = check_attack(ADD, textwrap.dedent("""
        import os
        while True:
            try:
                os.fork()
            except OSError:
                pass
    """), statuses=("timeout",), config={"timeout": 1.0, "wall_timeout": 1.0})
    assert "uid" in v["isolation"]


def _processes_of(uid: int) -> int:
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/status") as fh:
                n += any(line.startswith("Uid:") and int(line.split()[1]) == uid for line in fh)
        except (OSError, ValueError):
            pass
    return n


@pytest.mark.skipif(not IS_ROOT, reason="the code runs under the caller's uid without root")
def test_a_fork_bomb_in_one_sandbox_leaves_other_sandboxes_able_to_start_processes():
    """RLIMIT_NPROC counts a uid's processes machine-wide: each server's checks run under a uid
    of its own, so a check that fills its process limit does not stop the programs of other
    servers (other pool workers, other verifier processes) from starting theirs."""
    bomb_cfg = {**CFG, "timeout": 4.0, "wall_timeout": 4.0, "tmpfs_mb": 65}   # a server of its own
    bomb = "import os, time\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        time.sleep(60)\n"
    verdicts = []
    t = threading.Thread(target=lambda: verdicts.append(code.verify(ADD, bomb, bomb_cfg)))
    t.start()
    sb = get_sandbox(SandboxConfig(tmpfs_mb=65))
    guard = time.monotonic() + 120                  # a hang guard, not a timing assertion
    while not (sb.uid is not None and _processes_of(sb.uid) >= Limits().nproc) and t.is_alive():
        assert time.monotonic() < guard, "the fork bomb never filled its process limit"
        time.sleep(0.05)
    forks = "import os\ndef add(a, b):\n    pid = os.fork()\n    if pid == 0:\n        os._exit(0)\n" \
            "    os.waitpid(pid, 0)\n    return a + b\n"
    try:
        v = code.verify(ADD, forks, CFG)
    finally:
        t.join()
        uids = (get_sandbox(SandboxConfig()).uid, sb.uid)
        sb.close()
    assert v["status"] == "correct", v
    assert verdicts and verdicts[0]["status"] == "timeout" and reward(verdicts[0]) == 0.0
    assert uids[0] != uids[1] and min(uids) >= 1_900_000_000


def test_stdout_flood_is_cut():
    for completion in ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n",
                       "import os\nwhile True:\n    os.write(2, b'y' * 65536)\n",
                       "def add(a, b):\n    while True:\n        print('z' * 100000)\n"):
        clock = MachineClock(sample=True)
        v = check_attack(ADD, completion, config={"timeout": 5.0})
        took = clock.seconds()
        clock.stop()
        assert "output_limit" in v["error"], v
        assert took < 5.0 * SLOW, took  # killed at the cap, long before the 10 s wall clock (machine seconds)
        assert v["output_bytes"] > (1 << 20)


def test_double_forked_daemon_is_killed():
    """A setsid()'d grandchild that holds the output pipe open must not delay or outlive the check."""
    daemon = textwrap.dedent("""
        import os, time
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.01)
            os._exit(0)
        time.sleep(0.1)
        def add(a, b):
            return 0
    """)
    check_attack(ADD, daemon)
    # The same daemon through the session API: it is alive while the check runs, gone after.
    # (It also shows the stray check of every test here seeing a check's processes.)
    sb = get_sandbox(SandboxConfig())
    wait_for(lambda: not strays(), 15, "the end of the first check's processes")
    with sb.session(Limits(timeout_s=5)) as s:
        from rlvr.sandbox.remote import Link

        Link(s).load(daemon)
        during = strays()
        assert len(during) >= 2, "the daemon and the child should both be running"
        s.finish(wait=True)  # returns once the server has killed and reaped everything
        assert not strays()


# Without root the checked code runs under the caller's own uid, so only the server's place
# as its PID namespace's init (bubblewrap) keeps these signals from it; without bubblewrap
# and without root, kill(-1) from the code would reach every process of the user.
SIGNAL_CAN_REACH_EVERYTHING = not IS_ROOT and not HAVE_BWRAP


@pytest.mark.skipif(SIGNAL_CAN_REACH_EVERYTHING, reason="without root or bubblewrap the code's kill(-1) reaches "
                    "every process of the user (docs/verify.md); nothing protects the server or this test")
@pytest.mark.parametrize("attack", [
    "os.kill(-1, signal.SIGKILL)",
    "os.kill(-1, signal.SIGSTOP)",
    "[os.kill(-1, s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGALRM, signal.SIGCHLD, signal.SIGHUP)]",
    "[os.kill(p, signal.SIGKILL) for p in range(1, 64) if p != os.getpid()]",
], ids=["kill-all", "stop-all", "catchable-all", "each-pid"])
def test_killing_everything_in_reach_leaves_the_server_alive(attack):
    sb = get_sandbox(SandboxConfig())
    sb.start()
    server_pid = sb.proc.pid
    prog = f"import os, signal\ndef add(a, b):\n    return 0\ntry:\n    {attack}\nexcept OSError:\n    pass\n"
    check_attack(ADD, prog)
    assert sb.proc.pid == server_pid and sb.proc.poll() is None
    # a check that hit its own sandbox costs only that check: the next honest one passes
    assert code.verify(ADD, "def add(a, b):\n    return a + b\n", CFG)["status"] == "correct"
    assert sb.proc.pid == server_pid


def test_unserialisable_and_deep_returns():
    check_attack(ADD, "def add(a, b):\n    x = []\n    for _ in range(100000):\n        x = [x]\n    return x\n")
    check_attack(ADD, "def add(a, b):\n    return (i for i in range(10 ** 9))\n", statuses=("wrong", "timeout"),
                 config={"timeout": 1.0, "wall_timeout": 2.0})


# --------------------------------------------------------------------------- escape and exfiltration

def _control(attack: str, *args) -> str:
    """Run the attack's function outside any sandbox (as a naive harness would)."""
    prog = attack + f"\nimport sys\nsys.stdout.write(str(leak(*{args!r})))\n"
    out = subprocess.run([sys.executable, "-c", prog], capture_output=True, text=True, timeout=20)
    return out.stdout


ENV_ATTACK = textwrap.dedent("""
    import os
    def leak(name):
        if name in os.environ:
            return os.environ[name]
        for pid in os.listdir("/proc"):
            try:
                with open(f"/proc/{pid}/environ", "rb") as fh:
                    for kv in fh.read().split(b"\\0"):
                        if kv.startswith(name.encode() + b"="):
                            return kv.split(b"=", 1)[1].decode()
            except OSError:
                pass
        return ""
""")


@pytest.mark.skipif(not (HAVE_BWRAP or IS_ROOT), reason="needs a PID namespace (bwrap) or a separate uid (root)")
def test_parent_environment_is_out_of_reach():
    token = secrets.token_hex(8)
    holder = subprocess.Popen(["sleep", "30"], env={"PATH": os.environ.get("PATH", "/usr/bin"), "RLVR_SECRET": token})
    try:
        rec = {"tests": [f"assert leak('RLVR_SECRET') == {token!r}"]}
        assert _control(ENV_ATTACK, "RLVR_SECRET") == token  # the attack works unconfined
        check_attack(rec, ENV_ATTACK)
    finally:
        holder.kill()
        holder.wait()


FILE_ATTACK = textwrap.dedent("""
    def leak(path):
        with open(path) as fh:
            return fh.read()
""")


@pytest.mark.skipif(not HAVE_BWRAP, reason="a private filesystem view needs bubblewrap")
def test_host_files_are_out_of_reach():
    token = secrets.token_hex(8)
    path = f"/tmp/rlvr-attack-secret-{token}"
    with open(path, "w") as fh:
        fh.write(token)
    os.chmod(path, 0o644)
    try:
        assert _control(FILE_ATTACK, path) == token
        check_attack({"tests": [f"assert leak({path!r}) == {token!r}"]}, FILE_ATTACK)
        repo_file = os.path.abspath(__file__)
        with open(repo_file) as fh:
            head = fh.read(40)
        check_attack({"tests": [f"assert leak({repo_file!r})[:40] == {head!r}"]}, FILE_ATTACK)
    finally:
        os.unlink(path)


@pytest.mark.skipif(not HAVE_BWRAP, reason="a private filesystem view needs bubblewrap")
def test_no_file_outside_the_sandbox_changes(tmp_path):
    token = secrets.token_hex(8)
    victim_dir = tmp_path / "shared"
    victim_dir.mkdir()
    canary = victim_dir / "canary.txt"
    canary.write_text("keep me")
    os.chmod(tmp_path, 0o755)
    os.chmod(victim_dir, 0o777)
    os.chmod(canary, 0o666)
    targets = [f"/tmp/rlvr-attack-{token}", f"/var/tmp/rlvr-attack-{token}", f"/dev/shm/rlvr-attack-{token}",
               os.path.join(os.path.expanduser("~"), f"rlvr-attack-{token}"), str(victim_dir / f"new-{token}"),
               os.path.join(os.path.dirname(os.path.abspath(__file__)), f"rlvr-attack-{token}")]
    attack = textwrap.dedent(f"""
        import os
        for p in {targets!r}:
            try:
                with open(p, "w") as fh:
                    fh.write("pwned")
            except OSError:
                pass
        for p in ({str(canary)!r}, {str(victim_dir)!r}):
            try:
                os.unlink(p)
            except OSError:
                pass
            try:
                with open(p, "w") as fh:
                    fh.write("pwned")
            except OSError:
                pass
        def add(a, b):
            return 0
    """)
    check_attack(ADD, attack)
    for p in targets:
        assert not os.path.exists(p), p
    assert canary.read_text() == "keep me"
    assert sorted(os.listdir(victim_dir)) == ["canary.txt"]


NET_ATTACK = textwrap.dedent("""
    import socket
    def leak(port):
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            return s.recv(100).decode()
""")


@pytest.mark.skipif(not (HAVE_BWRAP or IS_ROOT), reason="a network namespace needs bwrap or root")
def test_network_is_out_of_reach():
    token = secrets.token_hex(8)
    srv = socket.create_server(("127.0.0.1", 0))
    port = srv.getsockname()[1]

    def serve():
        srv.settimeout(10)
        try:
            while True:
                conn, _ = srv.accept()
                conn.sendall(token.encode())
                conn.close()
        except OSError:
            pass

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        assert _control(NET_ATTACK, port) == token
        v = check_attack({"tests": [f"assert leak({port}) == {token!r}"]}, NET_ATTACK)
        assert "netns" in v["isolation"]
    finally:
        srv.close()


@pytest.mark.skipif(not HAVE_BWRAP, reason="without bubblewrap /tmp and /dev/shm are the host's")
def test_each_check_starts_clean():
    """Files a check leaves (working directory, /tmp, /dev/shm) and its environment changes
    are gone for the next; the environment holds only the sandbox's fixed variables."""
    litter = textwrap.dedent("""
        import os
        for d in (".", os.environ.get("TMPDIR", "."), "/tmp", "/dev/shm"):
            try:
                with open(os.path.join(d, "litter.txt"), "w") as fh:
                    fh.write("x")
            except OSError:
                pass
        os.environ["LITTER"] = "1"
        def add(a, b):
            return 0
    """)
    check_attack(ADD, litter)
    look = textwrap.dedent("""
        import os
        def seen():
            out = []
            for d in (".", "/tmp", "/dev/shm"):
                try:
                    out += [os.path.join(d, n) for n in os.listdir(d) if n == "litter.txt"]
                except OSError:
                    pass
            return out
        def env():
            return sorted(os.environ)
    """)
    rec = {"tests": ["assert seen() == []", "assert env() == ['HOME', 'LANG', 'PATH', 'PYTHONHASHSEED', 'TMPDIR']"]}
    v = code.verify(rec, look, CFG)
    assert v["status"] == "correct", v


# --------------------------------------------------------------------------- without bubblewrap

def test_degraded_mode_is_honest_and_still_grades():
    """mode=process: isolation says what is missing; grading attacks still get reward 0."""
    cfg = {**CFG, "sandbox": "process"}
    v = code.verify(ADD, "def add(a, b):\n    return a + b\n", cfg)
    assert v["status"] == "correct" and v["sandbox"] == "process"
    assert "bwrap" not in v["isolation"] and "pidns" not in v["isolation"]
    assert ("uid" in v["isolation"]) == IS_ROOT
    desc = get_sandbox(SandboxConfig(mode="process")).describe()
    assert any(m.startswith("pidns") for m in desc["missing"]) and any(m.startswith("bwrap") for m in desc["missing"])
    for completion in ("import sys\ndef add(a, b):\n    return 0\nsys.exit(0)\n",
                       "class Y:\n    __eq__ = lambda s, o: True\ndef add(a, b):\n    return Y()\n",
                       "import os\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
                       "        import time\n        time.sleep(60)\n    os._exit(0)\ndef add(a, b):\n    return 0\n"):
        assert reward(code.verify(ADD, completion, cfg)) == 0.0
    get_sandbox(SandboxConfig(mode="process")).close()


# --------------------------------------------------------------------------- stdin/stdout programs (APPS)
#
# Only each test's input enters the sandbox; its stdout comes back and is compared here. A
# program that prints the expected output without reading stdin passes (it has solved the
# test); one that looks for the expected output anywhere must not find it.

def _stdio(secret: str) -> dict:
    """Three tests: double the number; the last expected output is the secret itself
    (nothing a program could compute from the input)."""
    return {"id": "t/stdio", "stdio_tests": [{"input": "2\n", "output": "4\n"}, {"input": "21\n", "output": "42\n"},
                                            {"input": "5\n", "output": secret + "\n"}]}


DOUBLE = "print(2 * int(input()))\n"


def test_stdio_honest_and_hardcoded_programs_pass():
    rec = {"id": "t/double", "stdio_tests": [{"input": "2\n", "output": "4"}, {"input": "21\n", "output": "42\n"}]}
    for program in (DOUBLE, "import sys\nprint(2 * int(sys.stdin.buffer.read()))\n",
                    "import os\nprint(2 * int(os.read(0, 100)))\nexit()\n",
                    "def main():\n    n = int(open(0).read())\n    print(n * 2)\n\nif __name__ == '__main__':\n    main()\n",
                    # no stdin at all: the sample answers, printed in order through a file in the working directory
                    "import os\nk = len(os.listdir('.'))\nopen(f'seen{k}', 'w').close()\nprint(['4', '42'][k])\n"):
        v = code.verify(rec, program, CFG)
        assert v["status"] == "correct" and v["tests_passed"] == 2, (program, v)


def test_stdio_wrong_crashing_and_exiting_programs_fail():
    rec = {"id": "t/double", "stdio_tests": [{"input": "2\n", "output": "4"}, {"input": "21\n", "output": "42\n"}]}
    for program, passed in (("print(4)\n", 1),                                   # right once, by luck
                            ("print(2 * int(input()))\nraise SystemExit(3)\n", 0),  # right output, exit 3
                            ("print(2 * int(input()))\n1 / 0\n", 0),              # right output, then a crash
                            ("import os\nprint(2 * int(input()), flush=True)\nos.kill(os.getpid(), 9)\n", 0),
                            ("print(4 if input() == '2' else '42 extra')\n", 1)):
        v = check_attack(rec, program)
        assert v["tests_passed"] == passed, (program, v)


SEARCH = textwrap.dedent("""
    import os, stat, sys

    def scan(blob, found):
        at = blob.find(b"RLVR-SECRET-")
        if at >= 0:
            found.append(blob[at:at + 12 + 32].decode("ascii", "replace"))

    def look():
        found = []
        scan(sys.stdin.buffer.read(), found)
        for k, v in os.environ.items():
            scan((k + "=" + v).encode(), found)
        for pid in os.listdir("/proc"):
            if not pid.isdigit():
                continue
            for name in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{pid}/{name}", "rb") as fh:
                        scan(fh.read(), found)
                except OSError:
                    pass
            try:
                fds = os.listdir(f"/proc/{pid}/fd")
            except OSError:
                fds = []
            for fd in fds:  # regular files only (reading a pipe would block)
                path = f"/proc/{pid}/fd/{fd}"
                try:
                    if stat.S_ISREG(os.stat(path).st_mode):
                        with open(path, "rb") as fh:
                            scan(fh.read(1 << 20), found)
                except OSError:
                    pass
        tops = [ROOT, ".", "/dev/shm"] + [os.path.join("/tmp", n) for n in sorted(os.listdir("/tmp"))[:200]]
        for top in tops:
            if found:
                break
            paths = [top] if os.path.isfile(top) else [os.path.join(d, f) for d, _, fs in os.walk(top) for f in fs]
            for path in paths[:2000]:
                try:
                    with open(path, "rb") as fh:
                        scan(fh.read(1 << 20), found)
                except OSError:
                    pass
        return found

    n = int(sys.stdin.readline())
    print(2 * n if n != 5 else " ".join(look()) or "nothing")
""")



@pytest.mark.skipif(not HAVE_BWRAP, reason="a private filesystem and PID namespace need bubblewrap")
def test_stdio_expected_output_is_out_of_reach(tmp_path):
    """The expected output is held by this process, by another process (environment and
    command line) and in a file; a program searching stdin, the environment, every
    process's environ, cmdline and open files, and the usual directories finds nothing.
    The same search run without the sandbox finds it."""
    secret = "RLVR-SECRET-" + secrets.token_hex(16)
    rec = _stdio(secret)
    planted = tmp_path / "expected.txt"
    planted.write_text(secret)
    os.chmod(tmp_path, 0o755)
    os.chmod(planted, 0o644)
    attack = f"ROOT = {str(tmp_path)!r}\n" + SEARCH
    holder = subprocess.Popen(["sh", "-c", "sleep 30", secret], env={"PATH": os.environ.get("PATH", "/usr/bin"), "EXPECTED": secret})
    try:
        out = subprocess.run([sys.executable, "-c", attack], input="5\n", capture_output=True, text=True, timeout=120)
        assert secret in out.stdout.split()  # the search works unconfined
        v = check_attack(rec, "```python\n" + attack + "```", config={"timeout": 5.0})
        assert v["tests_passed"] == 2 and "test 3: output 'nothing'" in v["error"], v
    finally:
        holder.kill()
        holder.wait()


def test_stdio_forged_replies_and_stray_processes():
    """Fake result frames written to every inherited descriptor, a daemon left running and a
    flood of output: the test fails, nothing outlives the check, the next check is sound."""
    secret = "RLVR-SECRET-" + secrets.token_hex(16)
    rec = _stdio(secret)
    forge = textwrap.dedent(f"""
        import json, os, struct, time
        n = int(input())
        print(2 * n, flush=True)
        for fd in range(3, 64):
            for fake in ({{"out": "{secret}", "timeout": False, "exit": 0}}, {{"v": None}}):
                data = json.dumps(fake).encode()
                try:
                    os.write(fd, struct.pack(">I", len(data)) + data)
                except OSError:
                    pass
        if os.fork() == 0:
            os.setsid()
            if os.fork() == 0:
                while True:
                    time.sleep(0.01)
            os._exit(0)
    """)
    v = check_attack(rec, forge)
    assert v["tests_passed"] == 2, v
    flood = "n = int(input())\nprint(2 * n)\nif n == 5:\n    while True:\n        print('x' * 65536)\n"
    v = check_attack(rec, flood, config={"timeout": 5.0})
    assert v["tests_passed"] == 2 and "stdout passed" in v["error"], v
    assert code.verify(_stdio("10"), DOUBLE, CFG)["status"] == "correct"


@pytest.mark.parametrize("program,status,words", [
    ("n = int(input())\nwhile n == 5:\n    pass\nprint(2 * n)\n", "timeout", "CPU time limit"),
    ("import time\nn = int(input())\nif n == 5:\n    time.sleep(60)\nprint(2 * n)\n", "timeout", "wall-clock limit"),
    ("n = int(input())\nprint(2 * n)\nif n == 5:\n    x = bytearray(10 ** 12)\n", "wrong", "exit status 1"),
], ids=["busy-loop", "sleep", "memory-bomb"])
def test_stdio_limits_hold_per_test(program, status, words):
    """Each test has its own CPU and wall-clock limit: tests 1 and 2 pass, test 3 hangs. (The
    wall-clock limit leaves a busy machine time to start each test's interpreter.)"""
    v = check_attack(_stdio("10"), program, statuses=(status,),
                     config={"timeout": 1.0, "test_timeout": 30.0 if "pass" in program else 5.0 * SLOW,
                             "wall_timeout": 60.0})
    assert v["tests_passed"] == 2 and words in v["error"], v


def test_stdio_input_larger_than_the_file_size_limit():
    """code.fsize_mb binds what the program writes, not the test's input (the grader's data):
    a 3 MB input under a 1 MB limit reaches the program, whose own writes stay capped, in
    stdin/stdout and assert checks alike (hard limit included)."""
    big = "7" * (3 << 20)
    rec = {"stdio_tests": [{"input": big + "\n", "output": f"{len(big)}\n"}, {"input": "12\n", "output": "2\n"}]}
    cfg = {**CFG, "fsize_mb": 1}
    v = code.verify(rec, "print(len(input()))\n", cfg)
    assert v["status"] == "correct", v
    writer = "import resource\ns = input()\nprint(resource.getrlimit(resource.RLIMIT_FSIZE))\nopen('f', 'w').write(s)\n"
    v = code.verify({"stdio_tests": [{"input": "1" * (2 << 20), "output": "(1048576, 1048576)"}]}, writer, cfg)
    assert v["status"] == "wrong" and "exit status 1" in v["error"] and "File too large" in v.get("output_tail", ""), v
    limit = "import resource\ndef fsize():\n    return resource.getrlimit(resource.RLIMIT_FSIZE)\n"
    v = code.verify({"tests": ["assert fsize() == (1 << 20, 1 << 20)"]}, limit, cfg)
    assert v["status"] == "correct", v


def test_stdio_large_integers():
    """Python's 4,300-digit limit on int/str conversion is lifted for the program."""
    old = sys.get_int_max_str_digits()
    sys.set_int_max_str_digits(0)
    try:
        want = str(7 ** 6000)
    finally:
        sys.set_int_max_str_digits(old)
    v = code.verify({"stdio_tests": [{"input": "6000\n", "output": want + "\n"}]}, "print(7 ** int(input()))\n", CFG)
    assert v["status"] == "correct", v


# --------------------------------------------------------------------------- attacks on the checks that follow

def test_a_deep_directory_tree_does_not_cost_the_next_check():
    """Directories 1,500 deep (past the recursion limit) left in the working directory: the
    server's cleanup used to recurse, die, and take the next, honest check down with it
    (graded `wrong`). Now the tree goes and the same server runs the next check."""
    sb = get_sandbox(SandboxConfig())
    sb.start()
    server_pid = sb.proc.pid
    deep = textwrap.dedent("""
        import os
        for _ in range(1500):
            os.mkdir("d")
            os.chdir("d")
        def add(a, b):
            return 0
    """)
    check_attack(ADD, deep)
    v = code.verify(ADD, "import os\ndef add(a, b):\n    return a + b + len(os.listdir('.'))\n", CFG)
    assert v["status"] == "correct", v
    assert sb.proc.pid == server_pid and sb.proc.poll() is None


@pytest.mark.skipif(not HAVE_BWRAP, reason="the cleanup budget applies to bubblewrap's private tmpfs")
def test_litter_past_the_cleanup_budget_costs_a_fresh_server_not_the_next_check(monkeypatch):
    """A check that leaves more than the server can remove in WIPE_S (a million files take
    seconds) makes the server answer and leave; the next check runs at once on a fresh one,
    on a clean /tmp. (Budget 0 here: any litter over 256 entries.)"""
    from rlvr.sandbox import server

    monkeypatch.setattr(server, "WIPE_S", 0.0)
    sbc = SandboxConfig(tmpfs_mb=63)  # a server of its own, started with the budget above
    sb = get_sandbox(sbc)
    try:
        sb.start()
        first = sb.proc.pid
        cfg = {**CFG, "tmpfs_mb": 63}
        assert code.verify(ADD, "def add(a, b):\n    return a + b\n", cfg)["status"] == "correct"
        assert sb.proc.pid == first  # a clean check: the same server
        litter = "import os\nfor i in range(2000):\n    open(f'f{i}', 'w').close()\ndef add(a, b):\n    return 0\n"
        check_attack(ADD, litter, config={"tmpfs_mb": 63})
        look = "import os\ndef add(a, b):\n    return a + b + len(os.listdir('.'))\n"
        v = code.verify(ADD, look, cfg)
        assert v["status"] == "correct", v
        assert sb.proc.pid != first
    finally:
        sb.close()


def test_a_server_lost_before_the_check_started_is_retried_not_graded(monkeypatch):
    """The server dies with a check's request unread (as when an earlier check made it
    leave): nothing of this program ran, so the check runs again on a fresh server instead
    of being graded `wrong` (it used to be, as the program's fault)."""
    import signal

    from rlvr.sandbox import server

    sb = get_sandbox(SandboxConfig())
    begin = server.Session._begin
    lost = []

    def begin_on_a_server_that_dies(self):
        self.sb.start()
        if lost:
            return begin(self)
        tree = [self.sb.proc.pid, *server_tree(self.sb.proc.pid)]  # stopped, sent the request, killed
        for sig in (signal.SIGSTOP, None, signal.SIGKILL):
            if sig is None:
                begin(self)
                lost.append(self.sb.proc.pid)
                continue
            for pid in tree:
                try:
                    os.kill(pid, sig)
                except ProcessLookupError:
                    pass

    monkeypatch.setattr(server.Session, "_begin", begin_on_a_server_that_dies)
    for record, program in ((ADD, "def add(a, b):\n    return a + b\n"), (_stdio("10"), DOUBLE)):
        lost.clear()
        v = code.verify(record, program, CFG)
        assert v["status"] == "correct", v
        assert lost and sb.proc.pid != lost[0]


def test_replies_built_to_be_slow_to_read_stop_at_the_wall_clock():
    """The program patches its own agent to answer with a set of 60,000 distinct ints of one
    hash: reading it back took minutes of this process's time past any limit. Now the
    reading stops at the check's wall clock (2 s here) as a timeout."""
    forged = textwrap.dedent("""
        import gc
        def add(a, b):
            return 0
        agent = next(o for o in gc.get_objects() if type(o).__name__ == "Agent")
        m = (1 << 61) - 1
        agent.encode = lambda v: {"$s": [{"$i": hex(m * (k + 3))} for k in range(60000)]}
    """)
    v = check_attack(ADD, forged, statuses=("timeout",), config={"timeout": 1.0})
    assert "wall-clock" in v["error"], v
