"""The code verifier (MBPP, HumanEval and alike): extract the program, run it sandboxed, grade it.

    verify({"tests": ["assert add(1, 2) == 3"]}, "```python\\ndef add(a, b):\\n    return a + b\\n```", {})
    -> {"status": "correct", "extracted": "def add(a, b):\\n    return a + b", "tests_passed": 1,
        "tests_total": 1, "isolation": ["bwrap", "pidns", "netns", "uid", "rlimits"], ...}

Extraction: the last complete markdown fence (with or without a language; among several,
the last one that is Python or unlabelled, and the last one that defines the entry point
when there is one), else an unterminated fence, else the text between ``[BEGIN]`` and
``[DONE]`` (a single pair of quotes around it is dropped), else the whole completion. The
record's ``prefix`` is prepended: HumanEval completions continue the prompt, so a plain
continuation is appended to it as is, and extracted code on a new line.

Execution and grading (rlvr.sandbox): the program runs in a forked child of a warm,
confined server (bubblewrap namespaces, a separate uid as root, resource limits), and
the record's test code runs in this process with every name it takes from the candidate
turned into a handle whose calls cross into the sandbox and come back as plain values.
A pass is the test code finishing here without a failed assert; exit codes and printed
markers mean nothing. Records: ``tests`` (assert lines, MBPP) with optional
``test_setup`` and ``entry_point``; or ``test`` (``def check(candidate)``, HumanEval)
with ``entry_point``; both with optional ``prefix``. Or ``stdio_tests`` (``[{"input",
"output"}]``, APPS): the program runs once per test in its own process in the sandbox with
the input on stdin, and its stdout is compared here, after normalising whitespace, with the
expected output, which never enters the sandbox (rlvr.sandbox.stdio); stop at the first
failure, a CPU and a wall-clock limit per test (``test_timeout``), the whole check within
``wall_timeout`` or the tests' share up to MAX_CHECK_S (_check_budget). The pool's limit for
one verification follows these options (timeout_s).

Statuses: correct (every test passed), wrong (a test failed, the program raised or
exited, printed past the output cap, or ran out of memory), timeout (wall clock or CPU
limit), no_answer (no code in the completion), error (the record's tests are unusable or
the sandbox could not run; never the candidate's doing).

Config keys: timeout (CPU seconds per process of the program, 5), wall_timeout (wall-clock
seconds for the whole check, default 2 x timeout), memory_mb (1024), nproc (64), fsize_mb (16),
nofile (64), max_output_bytes (1 MiB), tmpfs_mb (64), sandbox (auto | bwrap | process),
network (false), site_packages (false: the sandbox sees the standard library only),
user ("rlvr-sandbox"), strict_types (false: ``==`` inside asserts is Python's, ``True == 1``
as in the reference harnesses; true: the types must match at every level, see
docs/verify.md), numeric_cross (with strict_types: true lets 1 == 1.0, false keeps int and
float apart too), test_timeout (wall-clock seconds per stdin/stdout test, 2 x timeout),
mode (default | allenai: AllenAI's open-instruct grading, below), pass_rate_threshold
(allenai mode: a pass rate below it scores 0, open-instruct's code_pass_rate_reward_threshold).

``mode: allenai`` grades as open-instruct's code verifiers do (its ``code`` and
``code_stdio``), to reproduce the rewards of AllenAI's RLVR runs: every test runs (a failed
or timed-out one does not stop the others; each assert in a fresh child of its own), stdin/stdout outputs are compared line by line
with numbers by value (LiveCodeBench's rule, rlvr.sandbox.stdio.same_lines), and the
verdict's ``score`` is the pass rate, which ``--reward-mode fraction`` makes the reward.
The status is still correct only when every test passed.
"""

from __future__ import annotations

import ast
import dataclasses
import re
import signal
import time

from rlvr.sandbox import grading, stdio
from rlvr.sandbox.remote import Link
from rlvr.sandbox.server import (ChildNotStarted, Finished, Limits, SandboxConfig, SandboxError, SandboxStop,
                                 SandboxTimeout, get_sandbox)

NAME = "code"
VERSION = "2"  # 2: mode allenai runs each assert in a child of its own; one budget per check
# A check that runs test by test (stdin/stdout tests; asserts in mode allenai) takes at most
# test_timeout x tests + 5 s of wall clock, and at most this (or one test's time, if longer)
# unless wall_timeout says otherwise: a record of a thousand tests cannot hold a worker for hours.
MAX_CHECK_S = 60.0
# Room for what is not the program's time: the sandbox server's start, the child's hello, the
# trusted test code, the cleanup.
OVERHEAD_S = 10.0

_DEFAULTS = {"timeout": 5.0, "wall_timeout": None, "memory_mb": 1024, "nproc": 64, "fsize_mb": 16, "nofile": 64,
             "max_output_bytes": 1 << 20, "tmpfs_mb": 64, "sandbox": "auto", "network": False,
             "site_packages": False, "user": "rlvr-sandbox", "strict_types": False, "numeric_cross": True,
             "test_timeout": None, "mode": "default", "pass_rate_threshold": 0.0}
_CONFIG_KEYS = set(_DEFAULTS)
_INTS = {"memory_mb": 16, "nproc": 1, "fsize_mb": 0, "nofile": 8, "max_output_bytes": 0, "tmpfs_mb": 1}
_BOOLS = {"network", "site_packages", "strict_types", "numeric_cross"}
MODES = ("default", "allenai")
MAX_CODE_CHARS = 200_000


# --------------------------------------------------------------------------- config


def check_config(config: dict) -> None:
    """Raise ValueError for an unknown key or a bad value (called once, before any work)."""
    unknown = set(config) - _CONFIG_KEYS
    if unknown:
        raise ValueError(f"unknown code option(s): {', '.join(sorted(unknown))} (known: {', '.join(sorted(_CONFIG_KEYS))})")
    t = config.get("timeout", 5.0)
    if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 < t <= 3600:
        raise ValueError(f"code.timeout must be a number of seconds in (0, 3600], got {t!r}")
    for key in ("wall_timeout", "test_timeout"):
        w = config.get(key)
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or not 0 < w <= 7200):
            raise ValueError(f"code.{key} must be a number of seconds in (0, 7200], got {w!r}")
    for k, lo in _INTS.items():
        v = config.get(k, _DEFAULTS[k])
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"code.{k} must be an integer >= {lo}, got {v!r}")
    for k in _BOOLS:
        if not isinstance(config.get(k, _DEFAULTS[k]), bool):
            raise ValueError(f"code.{k} must be true or false")
    if config.get("numeric_cross") is False and not config.get("strict_types", False):
        raise ValueError("code.numeric_cross applies to strict comparison only: set code.strict_types=true too")
    if config.get("sandbox", "auto") not in ("auto", "bwrap", "process"):
        raise ValueError(f"code.sandbox must be auto, bwrap or process, got {config.get('sandbox')!r}")
    if not isinstance(config.get("user", "rlvr-sandbox"), str):
        raise ValueError("code.user must be a user name")
    if config.get("mode", "default") not in MODES:
        raise ValueError(f"code.mode must be one of {', '.join(MODES)}, got {config.get('mode')!r}")
    th = config.get("pass_rate_threshold", 0.0)
    if isinstance(th, bool) or not isinstance(th, (int, float)) or not 0 <= th <= 1:
        raise ValueError(f"code.pass_rate_threshold must be a number in [0, 1], got {th!r}")
    if th and config.get("mode", "default") != "allenai":
        raise ValueError("code.pass_rate_threshold applies to the pass rate of code.mode=allenai: set it too")


def _settings(config: dict) -> tuple[Limits, SandboxConfig, dict]:
    c = {**_DEFAULTS, **(config or {})}
    wall = c["wall_timeout"]
    limits = Limits(timeout_s=float(c["timeout"]), wall_s=float(wall) if wall is not None else None,
                    memory_mb=c["memory_mb"], nproc=c["nproc"],
                    fsize_mb=c["fsize_mb"], nofile=c["nofile"], max_output_bytes=c["max_output_bytes"])
    sbc = SandboxConfig(mode=c["sandbox"], user=c["user"], network=c["network"], tmpfs_mb=c["tmpfs_mb"],
                        site_packages=c["site_packages"])
    return limits, sbc, {"strict_types": c["strict_types"], "numeric_cross": c["numeric_cross"],
                         "test_timeout": c["test_timeout"], "mode": c["mode"],
                         "pass_rate_threshold": float(c["pass_rate_threshold"])}


def _test_wall(limits: Limits, opts: dict) -> float:
    """Wall-clock seconds for one test of a check that runs test by test."""
    return float(opts["test_timeout"] or 2.0 * limits.timeout_s)


def _check_budget(limits: Limits, opts: dict, n_tests: int) -> float:
    """Wall-clock seconds for the whole of a check that runs n_tests tests one by one."""
    if limits.wall_s is not None:
        return limits.wall_s
    test_wall = _test_wall(limits, opts)
    return min(test_wall * n_tests + 5.0, max(MAX_CHECK_S, test_wall + 5.0))


def timeout_s(config: dict | None = None) -> float:
    """The pool's hard limit for one verification under this config (rlvr.verification.pool
    asks for it in place of TIMEOUT_S): the longest check the config allows, made twice (a
    check whose process never started is made again), plus overheads. So the program is
    always stopped by its own limits, and graded by them, before the pool kills the worker."""
    limits, _, opts = _settings(config or {})
    longest = max(limits.wall, _check_budget(limits, opts, 1 << 30))
    return 2.0 * (longest + OVERHEAD_S)


# The pool's limit under the default options (the pool calls timeout_s with the options in use).
TIMEOUT_S = timeout_s()


def _pass_rate(verdict: dict, opts: dict) -> None:
    """mode allenai: the verdict's score, open-instruct's reward (the share of tests passed,
    0 below pass_rate_threshold), on the verdicts a fraction reward reads (correct, wrong)."""
    total = verdict.get("tests_total")
    if opts["mode"] != "allenai" or verdict["status"] not in ("correct", "wrong") or not total:
        return
    rate = verdict.get("tests_passed", 0) / total
    verdict["score"] = 0.0 if rate < opts["pass_rate_threshold"] else rate


def warmup() -> None:
    """Start the default sandbox server (the pool calls this once per worker)."""
    try:
        get_sandbox(SandboxConfig()).start()
    except SandboxError:
        pass  # reported by the first verdict


# --------------------------------------------------------------------------- extraction

# A fence's opening line: the fence, a language, and no backtick in the rest of the line
# (checked apart: in one pattern, two overlapping runs before `$` made it quadratic).
_FENCE_OPEN = re.compile(r"[ \t]{0,3}(`{3,}|~{3,})[ \t]*([^\s`]*)")
_PY_LANGS = {"", "python", "py", "python3", "py3", "pycon", "ipython"}


def _fences(text: str) -> tuple[list[tuple[str, str]], str | None]:
    """(complete blocks as (language, body), body of an unterminated last block or None)."""
    blocks: list[tuple[str, str]] = []
    lines = text.split("\n")
    i, n = 0, len(lines)
    while i < n:
        m = _FENCE_OPEN.match(lines[i])
        if not m or "`" in lines[i][m.end():]:
            i += 1
            continue
        fence, lang = m.group(1), m.group(2).lower()
        body: list[str] = []
        j = i + 1
        closed = False
        while j < n:
            s = lines[j].strip()
            if s and s[0] == fence[0] and set(s) == {fence[0]} and len(s) >= len(fence):
                closed = True
                break
            body.append(lines[j])
            j += 1
        if not closed:
            return blocks, "\n".join(body)
        blocks.append((lang, "\n".join(body)))
        i = j + 1
    return blocks, None


def _defines(code: str, name: str) -> bool:
    # [ \t\f], not \s: \s crosses line ends, and from every line start over a run of blank
    # lines that is quadratic (a completion of many newlines took minutes).
    return re.search(rf"^[ \t\f]*(?:async[ \t\f]+)?def[ \t\f]+{re.escape(name)}[ \t\f]*\(", code, re.M) is not None


def _unquote(code: str) -> str:
    s = code.strip()
    if len(s) >= 2 and s[0] == s[-1] and s[0] in "'\"" and not s.startswith(s[0] * 3):
        inner = s[1:-1]
        try:
            ast.parse(s)
        except (SyntaxError, ValueError, MemoryError, RecursionError):
            try:
                ast.parse(inner)
                return inner
            except (SyntaxError, ValueError, MemoryError, RecursionError):
                pass
    return code


def extract_code(completion: str, entry_point: str | None = None) -> tuple[str, str]:
    """(code, how): how is fence | unterminated_fence | markers | plain."""
    if "```" in completion or "~~~" in completion:
        blocks, open_body = _fences(completion)
        if blocks:
            py = [b for lang, b in blocks if lang in _PY_LANGS] or [b for _, b in blocks]
            if entry_point:
                defining = [b for b in py if _defines(b, entry_point)]
                if defining:
                    return defining[-1].strip("\n"), "fence"
            return py[-1].strip("\n"), "fence"
        if open_body is not None:
            return open_body.strip("\n"), "unterminated_fence"
    if "[BEGIN]" in completion or "[DONE]" in completion:
        start = completion.rfind("[BEGIN]")
        body = completion[start + len("[BEGIN]"):] if start >= 0 else completion
        end = body.find("[DONE]")
        if end >= 0:
            body = body[:end]
        return _unquote(body).strip("\n"), "markers"
    return completion, "plain"


def build_program(record: dict, completion: str) -> tuple[str, str, str]:
    """(program to run, extracted code, how it was extracted)."""
    code, how = extract_code(completion, record.get("entry_point"))
    prefix = record.get("prefix") or ""
    if not prefix:
        return code, code, how
    if how == "plain":
        return prefix + code, code, how
    sep = "" if prefix.endswith("\n") else "\n"
    return prefix + sep + code, code, how


# --------------------------------------------------------------------------- verify


def check_record(record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record's tests cannot be graded whatever the completion."""
    if record.get("stdio_tests") is not None and not (record.get("tests") or record.get("test")):
        try:
            stdio.stdio_tests(record)
        except stdio.StdioPlanError as e:
            return "stdio_tests", f"unusable tests: {e}"
        return None
    try:
        grading.plan_for(record)
    except grading.PlanError as e:
        field = ("tests" if record.get("tests") or not record.get("test")
                 else "test" if record.get("entry_point") else "entry_point")
        return field, f"unusable tests: {e}"
    return None


def _check_failed(verdict: dict, sandbox, e: Exception) -> dict:
    """The verdict of a check whose tests cannot be used (PlanError) or whose sandbox failed."""
    if isinstance(e, SandboxError):
        verdict["error"] = f"sandbox: {e}"
        verdict["isolation"] = list(sandbox.isolation)
    else:
        verdict["error"] = f"unusable tests: {e}"
    return verdict


def verify(record: dict, completion: str, config: dict) -> dict:
    """Run the completion's code against the record's tests in the sandbox; return a verdict."""
    config = config or {}
    if record.get("stdio_tests") is not None and not (record.get("tests") or record.get("test")):
        return _verify_stdio(record, completion, config)
    limits, sbc, opts = _settings(config)
    compare = {k: opts[k] for k in ("strict_types", "numeric_cross")}
    verdict, program, how, plan = _prepare(record, completion, grading.plan_for)
    if program is None:
        return verdict
    sandbox = get_sandbox(sbc)
    if opts["mode"] == "allenai" and plan.kind == "asserts":
        return _verify_each(verdict, program, how, plan, sandbox, limits, opts)

    def check(session):
        link = Link(session)
        outcome = grading.Outcome(total=len(plan.units) if plan.kind == "asserts" else 1)
        load_error = None
        try:
            names, known = link.load(program, plan.want, plan.calls)
        except SandboxStop as e:
            outcome.stop = e
        except SandboxError:
            raise  # the sandbox failed, not the program
        except Exception as e:  # noqa: BLE001 - the candidate program raised while loading
            load_error = f"{type(e).__name__}: {e}"
        else:
            outcome = grading.run_plan(plan, link, names, known, **compare)
        # Exit status and the last output matter only when the program stopped answering.
        fin = session.finish(wait=outcome.stop is not None)
        return outcome, load_error, fin, link.calls, link.batched

    try:
        outcome, load_error, fin, calls, batched = _in_session(sandbox, limits, check)
    except (grading.PlanError, SandboxError) as e:
        return _check_failed(verdict, sandbox, e)
    verdict["tests_passed"] = outcome.passed
    verdict["tests_total"] = outcome.total
    if plan.kind == "check":
        verdict["asserts_passed"] = outcome.asserts_passed
    stop = outcome.stop
    if stop is not None:
        if isinstance(stop, SandboxTimeout) or fin.backstop:
            verdict["status"] = "timeout"
            verdict["error"] = f"wall-clock limit: {stop}"
        elif fin.signal == signal.SIGXCPU:
            verdict["status"] = "timeout"
            verdict["error"] = f"CPU time limit: over {limits.timeout_s:g} s of CPU"
        else:
            verdict["status"] = "wrong"
            verdict["error"] = f"{stop.reason}: {stop}"
        verdict["tests_passed"] = 0 if plan.kind == "check" else outcome.passed
    elif load_error is not None:
        verdict["status"] = "wrong"
        verdict["error"] = f"the program raised {load_error}"
    elif outcome.passed == outcome.total and outcome.failure is None:
        verdict["status"] = "correct"
    else:
        verdict["status"] = "wrong"
        verdict["error"] = outcome.failure
    if verdict.get("error"):
        verdict["error"] = verdict["error"][:1000]
    if fin.exit is not None and (stop is not None or load_error is not None):
        verdict["exit_code"] = fin.exit
    _pass_rate(verdict, opts)
    return _finish(verdict, fin, fin.signal, sandbox, how, {"calls": calls, "batched": batched or None})


def _verify_each(verdict: dict, program: str, how: str, plan, sandbox, limits: Limits, opts: dict) -> dict:
    """Mode allenai, assert tests (open-instruct's code verifier): each test in a fresh child
    of its own with the program loaded afresh, its own wall-clock limit (test_timeout) and
    CPU limit; a test that fails, times out or ends the process fails alone and the others
    still run, within the check's budget (_check_budget: the tests it leaves no time for
    fail, unrun). The score is the share of tests passed."""
    compare = {k: opts[k] for k in ("strict_types", "numeric_cross")}
    total = len(plan.units)
    test_wall = _test_wall(limits, opts)
    budget = _check_budget(limits, opts, total)
    deadline = time.monotonic() + budget
    passed = timed_out = calls = 0
    failure = signum = exit_code = None
    last = None

    def one(unit, wall):
        def work(session):
            link = Link(session)
            try:
                names, known = link.load(program, plan.want, [])  # no batch: each call within its test's time
            except SandboxStop as e:
                return grading.Outcome(total=1, stop=e), "load", session.finish(wait=True), link.calls
            except SandboxError:
                raise
            except Exception as e:  # noqa: BLE001 - the program raised while loading
                return grading.Outcome(total=1, failure=f"the program raised {type(e).__name__}: {e}"), "load", \
                    session.finish(), link.calls
            sub = dataclasses.replace(plan, units=[unit], calls=[])
            out = grading.run_plan(sub, link, names, known, **compare)
            return out, "test", session.finish(wait=out.stop is not None), link.calls
        return _in_session(sandbox, dataclasses.replace(limits, wall_s=wall), work)

    def spent(i: int) -> str:
        unrun = f"test {i}" + (f" to {total}" if i < total else "") + \
            f" not run: the check's {budget:g} s of wall clock were spent"
        return unrun if failure is None else f"{failure}; {unrun}"

    try:
        for i, unit in enumerate(plan.units, 1):
            wall = min(test_wall, deadline - time.monotonic())
            if wall < 0.01:
                timed_out += total - i + 1
                failure = spent(i)
                break
            out, stage, fin, n_calls = one(unit, wall)
            calls += n_calls
            last = fin
            if out.stop is None and out.failure is None and out.passed:
                passed += 1
                continue
            stop = out.stop
            cpu = stop is not None and fin.signal == signal.SIGXCPU
            slow = stop is not None and (isinstance(stop, SandboxTimeout) or fin.backstop or cpu)
            if stage == "load" and slow and not cpu and wall < test_wall:
                # the program was still loading when what was left of the budget ran out, not its
                # own limit: the budget was spent (not a program that hangs before any test)
                timed_out += total - i + 1
                failure = spent(i)
                break
            if stop is None:
                why = out.failure
                if stage == "test" and why.startswith("test 1"):
                    why = f"test {i}" + why[len("test 1"):]
            elif slow:
                why = (f"test {i}: CPU time limit: over {limits.timeout_s:g} s of CPU" if cpu
                       else f"test {i}: wall-clock limit: no answer within {round(wall, 2):g} s")
            else:
                why = f"test {i}: {stop.reason}: {stop}"
            if failure is None:
                failure, signum = why, fin.signal
                exit_code = fin.exit if stop is not None else None
            if stage == "load":  # the program itself fails (or hangs) before any test: so would every test
                timed_out += (total - i + 1) if slow else 0
                break
            timed_out += slow
    except (grading.PlanError, SandboxError) as e:
        return _check_failed(verdict, sandbox, e)
    verdict["tests_passed"], verdict["tests_total"] = passed, total
    if passed == total:
        verdict["status"] = "correct"
    else:
        verdict["status"] = "timeout" if timed_out == total else "wrong"
        verdict["error"] = (failure or "")[:1000]
        if timed_out:
            verdict["tests_timed_out"] = timed_out
        if exit_code is not None:
            verdict["exit_code"] = exit_code
    _pass_rate(verdict, opts)
    return _finish(verdict, last or Finished(), signum, sandbox, how, {"calls": calls})


def _in_session(sandbox, limits: Limits, work):
    """work(session) in a fresh sandboxed child; once more when the child never started (the
    server died after an earlier check, and a fresh one is started) or could not start a
    test's process: nothing of this program decided the check."""
    try:
        with sandbox.session(limits) as session:
            return work(session)
    except ChildNotStarted:
        pass
    with sandbox.session(limits) as session:
        return work(session)


def _prepare(record: dict, completion: str, make_plan) -> tuple[dict, str | None, str, object]:
    """(verdict so far, program or None when the verdict is already final, how the code was
    extracted, the record's grading plan)."""
    program, code, how = build_program(record, completion or "")
    verdict: dict = {"status": "error", "extracted": code if code.strip() else None}
    if not code.strip():
        verdict["status"] = "no_answer"
        return verdict, None, how, None
    try:
        plan = make_plan(record)
    except (grading.PlanError, stdio.StdioPlanError) as e:
        verdict["error"] = f"unusable tests: {e}"
        return verdict, None, how, None
    if len(program) > MAX_CODE_CHARS:
        verdict.update(status="wrong", error=f"program longer than {MAX_CODE_CHARS} characters")
        return verdict, None, how, None
    return verdict, program, how, plan


def _finish(verdict: dict, fin, signum: int | None, sandbox, how: str, extra: dict | None = None) -> dict:
    """The verdict's closing fields: the signal, the output's tail and size, where it ran."""
    if signum is not None and signum != signal.SIGKILL:
        verdict["signal"] = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else signum
    if fin.output_tail and verdict["status"] != "correct":
        verdict["output_tail"] = fin.output_tail[-500:]
    if fin.output_bytes:
        verdict["output_bytes"] = fin.output_bytes
    verdict.update({k: v for k, v in (extra or {}).items() if v is not None})
    verdict["sandbox"] = sandbox.mode
    verdict["isolation"] = list(sandbox.isolation)
    if how != "plain":
        verdict["extraction"] = how
    return verdict


def _verify_stdio(record: dict, completion: str, config: dict) -> dict:
    """stdin/stdout tests (APPS style): the program runs once per test, its stdout compared
    here, after normalising whitespace, with the expected output (rlvr.sandbox.stdio); in
    mode allenai every test runs, compared line by line, and the pass rate is the score."""
    limits, sbc, opts = _settings(config)
    verdict, program, how, tests = _prepare(record, completion, stdio.stdio_tests)
    if program is None:
        return verdict
    # Each test: `timeout` CPU seconds (RLIMIT_CPU, afresh per test process) and test_timeout
    # seconds of wall clock (2 x timeout); the whole check: _check_budget (the tests' share,
    # capped), within which each test gets what is left. The session's own wall clock is a
    # backstop past that (the agent ends each test process in time itself).
    test_wall = _test_wall(limits, opts)
    budget = _check_budget(limits, opts, len(tests))
    limits = dataclasses.replace(limits, wall_s=budget + OVERHEAD_S)
    allenai = opts["mode"] == "allenai"
    sandbox = get_sandbox(sbc)

    def check(session):
        outcome = stdio.run_tests(session, program, tests, test_wall, limits.max_output_bytes,
                                  compare=stdio.same_lines if allenai else stdio.same_output, run_all=allenai,
                                  budget_s=budget)
        return outcome, session.finish(wait=outcome.stop is not None)

    try:
        outcome, fin = _in_session(sandbox, limits, check)
    except SandboxError as e:
        verdict["error"] = f"sandbox: {e}"
        verdict["isolation"] = list(sandbox.isolation)
        return verdict
    verdict["tests_passed"] = outcome.passed
    verdict["tests_total"] = outcome.total
    stop = outcome.stop
    if stop is not None:
        if isinstance(stop, SandboxTimeout) or fin.backstop:
            verdict.update(status="timeout", error=f"wall-clock limit: {stop}")
        else:
            verdict.update(status="wrong", error=f"{stop.reason}: {stop}")
    elif outcome.kind in ("timeout", "cpu") and (not allenai or outcome.timed_out == outcome.total):
        # (mode allenai runs every test: a timeout is one failed test, a timeout status only when all are)
        verdict.update(status="timeout", error=f"wall-clock limit: {outcome.failure}" if outcome.kind == "timeout"
                       else f"CPU time limit: over {limits.timeout_s:g} s of CPU ({outcome.failure})")
    elif outcome.failure is not None:
        verdict.update(status="wrong", error=outcome.failure[:1000])
    else:
        verdict["status"] = "correct"
    if outcome.exit_code not in (None, 0) and verdict["status"] != "correct":
        verdict["exit_code"] = outcome.exit_code
    if outcome.timed_out and allenai:
        verdict["tests_timed_out"] = outcome.timed_out
    _pass_rate(verdict, opts)
    return _finish(verdict, fin, outcome.signal, sandbox, how)
