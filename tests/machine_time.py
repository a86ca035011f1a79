"""Hang guards that follow the machine, not the wall clock.

A test's time limit exists to catch a hang, not to judge speed. On a busy machine (other jobs,
three test workers on two cores) everything takes longer by about the number of runnable
processes per core, so the guards here count *machine time*: each wall-clock second counts as
the share of one CPU that a runnable process gets at that moment (cores / runnable processes,
at most 1, sampled from /proc/loadavg). On a quiet machine a machine second is a wall second;
with two CPU-bound jobs beside three test workers on two cores it is about a third of one. A
real hang still fails, in bounded wall time: at most the limit times the processes per core.

RLVR_TEST_SLOW=F multiplies every limit by F, for a machine that is slow in ways the load does
not show (a slow disk, a throttled CPU); the README names it.

    clock = MachineClock()
    ...
    clock.seconds()   # machine seconds since the clock started

    wait_for(lambda: path.exists(), 30, "the checkpoint")  # 30 machine seconds (times RLVR_TEST_SLOW)
    out, err = communicate(proc, 600, "rlvr-train")        # Popen.communicate, bounded the same way
    r = run(cmd, capture_output=True, timeout=600)         # subprocess.run, timeout in machine seconds
"""

from __future__ import annotations

import os
import subprocess
import threading
import time

SLOW = float(os.environ.get("RLVR_TEST_SLOW") or 1.0)
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def cpu_share() -> float:
    """The share of one CPU a runnable process gets now: cores / runnable processes, at most 1."""
    try:
        with open("/proc/loadavg", "rb") as fh:
            running = int(fh.read().split()[3].split(b"/")[0])
        running -= 1  # the thread reading this file is one of them
    except (OSError, ValueError, IndexError):
        try:
            running = int(os.getloadavg()[0])
        except OSError:
            return 1.0
    return min(1.0, CPUS / max(1, running))


class MachineClock:
    """Machine seconds since it started, advanced by seconds(): the share is sampled at each
    call and held for the interval before it, so call it every second or so, or pass
    sample=True for a thread that does (stop() ends it)."""

    def __init__(self, sample: bool = False):
        self.used = 0.0
        self.last = time.monotonic()
        self.started = self.last
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = None
        if sample:
            self._thread = threading.Thread(target=self._sample, name="machine clock", daemon=True)
            self._thread.start()

    def _sample(self) -> None:
        while not self._stop.wait(0.1):
            self.seconds()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def seconds(self) -> float:
        with self.lock:
            now = time.monotonic()
            self.used += (now - self.last) * cpu_share()
            self.last = now
            return self.used

    def wall(self) -> float:
        return time.monotonic() - self.started


def limit(seconds: float) -> float:
    """A limit of `seconds` on a quiet machine, as machine seconds (times RLVR_TEST_SLOW)."""
    return seconds * SLOW


def scaled(seconds: float) -> float:
    """`seconds` of wall time as a quiet machine has them, for a limit that something outside the
    test counts in wall time (a run's own timeouts): stretched by the load now and RLVR_TEST_SLOW."""
    return seconds * SLOW / cpu_share()


def wait_for(ready, seconds: float, what: str, poll: float = 0.05):
    """Poll ready() until it returns something true; fail after `seconds` machine seconds
    (times RLVR_TEST_SLOW) naming what was awaited. Returns what ready() returned."""
    clock = MachineClock()
    while True:
        got = ready()
        if got:
            return got
        if clock.seconds() > limit(seconds):
            raise AssertionError(f"{what}: not ready after {clock.wall():.0f} s "
                                 f"({limit(seconds):.0f} machine seconds; RLVR_TEST_SLOW={SLOW:g})")
        time.sleep(poll)


def communicate(proc: subprocess.Popen, seconds: float, what: str, input=None):
    """proc.communicate(input), bounded by `seconds` machine seconds (times RLVR_TEST_SLOW)
    instead of wall seconds: past them the process is killed and the test fails naming what
    ran. Returns (stdout, stderr) as communicate does."""
    clock = MachineClock()
    while True:
        try:
            return proc.communicate(input, timeout=1.0)
        except subprocess.TimeoutExpired:  # (communicate keeps what it read so far)
            input = None
            if clock.seconds() > limit(seconds):
                proc.kill()
                proc.communicate()
                raise AssertionError(f"{what}: still running after {clock.wall():.0f} s "
                                     f"({limit(seconds):.0f} machine seconds; RLVR_TEST_SLOW={SLOW:g})") from None


def run(args, *, timeout: float, input=None, capture_output: bool = False, check: bool = False, **kw):
    """subprocess.run with its timeout in machine seconds (times RLVR_TEST_SLOW): for a command
    whose bound only guards against a hang."""
    if input is not None:
        kw["stdin"] = subprocess.PIPE
    if capture_output:
        kw["stdout"] = kw["stderr"] = subprocess.PIPE
    what = " ".join(map(str, args)) if isinstance(args, list) else str(args)
    with subprocess.Popen(args, **kw) as proc:
        out, err = communicate(proc, timeout, what[:200], input)
    done = subprocess.CompletedProcess(proc.args, proc.returncode, out, err)
    if check:
        done.check_returncode()
    return done
