"""Grade a stdin/stdout program (APPS, Codeforces style) against input/output pairs.

    tests = stdio_tests(record)                      # [(input, expected output), ...]
    outcome = run_tests(session, program, tests, test_wall_s=10.0, max_output=1 << 20)

Each test runs the candidate program once, as ``__main__``, in a fresh forked process
inside the sandbox (zygote.run_stdio) with the test's input on its stdin. Its stdout comes
back here as a plain string and is compared with the expected output on this side, after
normalising whitespace (the outputs' whitespace-separated tokens must be equal:
``same_output``), or line by line with numbers compared by value (``same_lines``, the rule
of LiveCodeBench and of AllenAI's open-instruct). Only the inputs enter the sandbox; the
expected outputs never do, so a program can pass only by printing the right answer. Tests
run in order and stop at the first failure (or, with ``run_all``, every test runs and the
passes are counted: a pass rate); each has its own CPU limit (the sandbox's RLIMIT_CPU,
counted afresh per process) and wall-clock limit. A test process the sandbox could not
start (fork failing under process pressure, after retries) raises ChildNotStarted: the
caller makes the check again, and reports a sandbox error if that fails too, never a
wrong answer.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from rlvr.sandbox.server import ChildNotStarted, ProtocolError, Session, SandboxStop


class StdioPlanError(ValueError):
    """The record's stdin/stdout tests cannot be used (a dataset problem)."""


def _text(v, where: str) -> str:
    if isinstance(v, str):
        return v
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)  # APPS writes some outputs as a list of lines
    raise StdioPlanError(f"{where} must be a string, got {type(v).__name__}")


def stdio_tests(record: dict) -> list[tuple[str, str]]:
    """The record's (input, expected output) pairs; StdioPlanError when unusable."""
    tests = record.get("stdio_tests")
    if not isinstance(tests, list) or not tests:
        raise StdioPlanError("stdio_tests must be a non-empty list of {input, output} objects")
    out = []
    for i, t in enumerate(tests):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise StdioPlanError(f"stdio_tests[{i}] must be an object with input and output")
        out.append((_text(t["input"], f"stdio_tests[{i}].input"), _text(t["output"], f"stdio_tests[{i}].output")))
    return out


def same_output(got: str, want: str) -> bool:
    """Equal after normalising whitespace: the same whitespace-separated tokens."""
    return got.split() == want.split()


def _stripped_lines(s: str) -> list[str]:
    return [line.strip() for line in s.strip().split("\n")]


def _decimals(line: str) -> list[Decimal] | None:
    try:
        return [Decimal(x) for x in line.split()]
    except (InvalidOperation, ValueError):
        return None


def same_lines(got: str, want: str) -> bool:
    """LiveCodeBench's comparison (open-instruct's code_stdio): both outputs stripped and cut
    into lines, each line stripped; the same number of lines, and each pair of lines equal as
    strings or as lists of decimal numbers (``1.0`` equals ``1``, ``1e2`` equals ``100``)."""
    g, w = _stripped_lines(got), _stripped_lines(want)
    if len(g) != len(w):
        return False
    for a, b in zip(g, w):
        if a == b:
            continue
        da, db = _decimals(a), _decimals(b)
        try:
            if da is None or db is None or da != db:
                return False
        except InvalidOperation:  # a signalling NaN
            return False
    return True


@dataclass
class StdioOutcome:
    total: int
    passed: int = 0
    timed_out: int = 0               # tests past their CPU or wall-clock limit, or not run for want of time
    failure: str | None = None
    kind: str | None = None          # wrong | timeout | cpu | output_limit | compile
    exit_code: int | None = None
    signal: int | None = None
    stop: SandboxStop | None = None


def _excerpt(s: str, n: int = 120) -> str:
    s = s.strip()
    return repr(s if len(s) <= n else s[:n] + "...")


def run_tests(session: Session, program: str, tests: list[tuple[str, str]], test_wall_s: float,
              max_output: int, compare=same_output, run_all: bool = False,
              budget_s: float | None = None) -> StdioOutcome:
    """Run the program on each test in order; stop at the first failure, or with run_all go
    on and count the passes (the first failure is the one reported). budget_s bounds all
    the tests together on the wall clock: a test gets what is left of it when that is less
    than test_wall_s, and the tests it leaves no time for fail as timed out, unrun."""
    import signal as _signal

    out = StdioOutcome(total=len(tests))
    deadline = None if budget_s is None else time.monotonic() + budget_s
    try:
        rep = session.request({"op": "stdio_load", "src": program})
    except SandboxStop as e:
        out.stop = e
        return out
    if "x" in rep:
        x = rep.get("x")
        name, msg = (x[0], x[1]) if isinstance(x, list) and len(x) == 2 else ("Error", "")
        out.kind, out.failure = "compile", f"the program does not compile: {name}: {msg}"[:1000]
        return out
    for i, (inp, want) in enumerate(tests, 1):
        wall = test_wall_s
        if deadline is not None:
            wall = min(wall, deadline - time.monotonic())
            if wall < 0.01:
                unrun = (f"test {i}" + (f" to {len(tests)}" if i < len(tests) else "")
                         + f" not run: the check's {budget_s:g} s of wall clock were spent")
                out.timed_out += len(tests) - i + 1
                if out.failure is None:
                    out.kind, out.failure = "timeout", unrun
                else:
                    out.failure += f"; {unrun}"
                return out
        try:
            rep = session.request({"op": "stdio_run", "input": inp, "wall_s": wall, "max_output": max_output})
        except SandboxStop as e:
            out.stop = e
            return out
        if "infra" in rep:  # the test process could not be started: the sandbox's failure, not the program's
            raise ChildNotStarted(f"test {i}: {str(rep['infra'])[:300]}")
        got = rep.get("out")
        if "x" in rep or not isinstance(got, str) or not isinstance(rep.get("timeout"), bool):
            out.stop = session._stop(ProtocolError("malformed reply to a test run"))
            return out
        sig, code = rep.get("signal"), rep.get("exit")
        sig = sig if isinstance(sig, int) else None
        code = code if isinstance(code, int) else None
        if rep["timeout"]:
            kind, failure = "timeout", f"test {i}: no exit within {round(wall, 2):g} s of wall clock"
        elif rep.get("output_limit"):
            kind, failure = "output_limit", f"test {i}: stdout passed {max_output} bytes"
        elif sig == _signal.SIGXCPU:
            kind, failure = "cpu", f"test {i}: CPU time limit"
        elif sig is not None:
            kind, failure = "wrong", f"test {i}: killed by signal {sig}"
        elif code != 0:
            kind, failure = "wrong", f"test {i}: exit status {code}"
        elif not compare(got, want):
            kind, failure = "wrong", f"test {i}: output {_excerpt(got)} where {_excerpt(want)} was expected"
        else:
            out.passed += 1
            continue
        out.timed_out += kind in ("timeout", "cpu")
        if out.failure is None:
            out.kind, out.failure, out.signal, out.exit_code = kind, failure, sig, code
        if not run_all:
            return out
    return out
