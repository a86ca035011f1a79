"""The code verifier: extraction, grading semantics, statuses, config, and a slice of the
real HumanEval and MBPP problems (reference solutions pass, broken ones fail).

The attack corpus lives in tests/test_sandbox_attacks.py; the full 164 + 974 conformance
runs in bench/bench_code.py.
"""

from __future__ import annotations

import gzip
import json
import multiprocessing
import os
import subprocess
import sys
import textwrap
import threading

import pytest

from rlvr.sandbox.grading import python_eq, strict_eq
from rlvr.verifiers import code

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data", "code")
CFG = {"timeout": 5.0}


def _load(name: str) -> dict:
    with gzip.open(os.path.join(DATA, name), "rt", encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh]
    return {str(r["task_id"]): r for r in rows}


HUMANEVAL = _load("humaneval.jsonl.gz")
MBPP = _load("mbpp.jsonl.gz")


def he_record(task: dict) -> dict:
    return {"id": task["task_id"], "prefix": task["prompt"], "test": task["test"], "entry_point": task["entry_point"]}


def mbpp_record(task: dict) -> dict:
    return {"id": f"mbpp/{task['task_id']}", "tests": task["test_list"], "test_setup": task["test_setup_code"]}


def run(record: dict, completion: str, **config) -> dict:
    return code.verify(record, completion, {**CFG, **config})


# --------------------------------------------------------------------------- extraction

@pytest.mark.parametrize("completion,expected,how", [
    ("def f():\n    return 1\n", "def f():\n    return 1\n", "plain"),
    ("Here:\n```python\ndef f():\n    return 1\n```\nDone.", "def f():\n    return 1", "fence"),
    ("```\nx = 1\n```", "x = 1", "fence"),
    ("```py\nx = 1\n```\nthen\n```python\nx = 2\n```\n", "x = 2", "fence"),
    ("```python\nx = 1\n```\nOutput:\n```text\n1\n```\n", "x = 1", "fence"),
    ("~~~python\nx = 3\n~~~\n", "x = 3", "fence"),
    ("Sure!\n```python\ndef f():\n    return 1\n", "def f():\n    return 1", "unterminated_fence"),
    ("```python\nx = 1\n```\n```python\nx = 2\n", "x = 1", "fence"),
    ("[BEGIN]\ndef f():\n    return 1\n[DONE]\nmore text", "def f():\n    return 1", "markers"),
    ("def f():\n    return 1\n[DONE]\n[BEGIN]", "", "markers"),
    ("def f():\n    return 1\n[DONE]\nThe next task", "def f():\n    return 1", "markers"),
    ("[BEGIN]\n 'def f():\n    return 1' \n[DONE]", "def f():\n    return 1", "markers"),
])
def test_extract_code(completion, expected, how):
    got, got_how = code.extract_code(completion)
    assert (got, got_how) == (expected, how)


def test_extract_prefers_the_block_defining_the_entry_point():
    completion = "```python\ndef add(a, b):\n    return a + b\n```\nUsage:\n```python\nprint(add(1, 2))\n```\n"
    assert code.extract_code(completion, "add")[0] == "def add(a, b):\n    return a + b"
    assert code.extract_code(completion)[0] == "print(add(1, 2))"


def test_prefix_joins_continuations_and_extracted_code():
    rec = {"prefix": "def f(x):\n    \"\"\"Double.\"\"\"\n"}
    assert code.build_program(rec, "    return 2 * x\n")[0] == "def f(x):\n    \"\"\"Double.\"\"\"\n    return 2 * x\n"
    prog, extracted, how = code.build_program(rec, "```python\ndef f(x):\n    return 2 * x\n```")
    assert prog == "def f(x):\n    \"\"\"Double.\"\"\"\ndef f(x):\n    return 2 * x" and how == "fence"
    assert extracted == "def f(x):\n    return 2 * x"
    rec2 = {"prefix": "import math", "tests": ["assert f(4) == 2.0"]}
    assert run(rec2, "```python\ndef f(x):\n    return math.sqrt(x)\n```")["status"] == "correct"


@pytest.mark.parametrize("completion", ["", "   \n", "```python\n```", "[BEGIN]\n[DONE]"])
def test_no_code_is_no_answer(completion):
    v = run({"tests": ["assert f() == 1"]}, completion)
    assert v["status"] == "no_answer" and v["extracted"] is None


# --------------------------------------------------------------------------- statuses

ADD = {"tests": ["assert add(1, 2) == 3", "assert add(2, 2) == 4"]}


def test_correct_and_wrong_verdicts():
    v = run(ADD, "def add(a, b):\n    return a + b\n")
    assert v["status"] == "correct" and v["tests_passed"] == 2 and v["tests_total"] == 2
    assert v["calls"] == 2 and isinstance(v["isolation"], list) and "rlimits" in v["isolation"]
    v = run(ADD, "def add(a, b):\n    return 4\n")
    assert v["status"] == "wrong" and v["tests_passed"] == 1
    assert v["error"] == "test 1 failed: assert add(1, 2) == 3"


def test_program_errors_are_wrong_with_the_reason():
    v = run(ADD, "def add(a, b)\n    return a + b\n")
    assert v["status"] == "wrong" and "SyntaxError" in v["error"]
    v = run(ADD, "import nonexistent_module_xyz\n")
    assert v["status"] == "wrong" and "ModuleNotFoundError" in v["error"]
    v = run(ADD, "def add(a, b):\n    return a / 0\n")
    assert v["status"] == "wrong" and "ZeroDivisionError" in v["error"]
    v = run(ADD, "def plus(a, b):\n    return a + b\n")
    assert v["status"] == "wrong" and "NameError" in v["error"]


def test_stderr_tail_is_reported_on_failure():
    v = run(ADD, "import sys\nprint('debugging', file=sys.stderr)\ndef add(a, b):\n    return 0\n")
    assert v["status"] == "wrong" and "debugging" in v["output_tail"]


def test_timeout_status():
    v = run(ADD, "def add(a, b):\n    while True:\n        pass\n", timeout=0.5, wall_timeout=0.5)
    assert v["status"] == "timeout" and "wall-clock" in v["error"]


def test_allenai_mode_runs_every_assert_in_its_own_process_with_its_own_time_limit():
    """open-instruct's code verifier: each test runs the program afresh in a process of its
    own with its own timeout; one that hangs, spins or ends the process fails alone, the
    others still count; the whole check stays within its wall-clock budget."""
    rec = {"tests": ["assert f(1) == 1", "assert f(2) == 2", "assert f(3) == 3"]}
    cfg = {"mode": "allenai", "timeout": 0.5, "test_timeout": 1.0}
    for program in ("import time\ndef f(x):\n    if x == 1:\n        time.sleep(60)\n    return x\n",
                    "def f(x):\n    while x == 2:\n        pass\n    return x\n"):
        v = run(rec, program, **cfg)
        assert v["status"] == "wrong" and v["tests_passed"] == 2 and v["score"] == 2 / 3, (program, v)
        assert v["tests_timed_out"] == 1 and "limit" in v["error"], v
    v = run(rec, "import os\ndef f(x):\n    if x == 1:\n        os._exit(3)\n    return x\n", **cfg)
    assert v["tests_passed"] == 2 and v["exit_code"] == 3 and "test 1: exited" in v["error"], v
    # globals do not carry over: each test loads the program afresh
    assert run(rec, "calls = []\ndef f(x):\n    calls.append(x)\n    return x if len(calls) == 1 else 0\n",
               **cfg)["status"] == "correct"
    # the budget: 1.5 s for three tests that all hang: test 3 gets no time, and fails unrun
    v = run(rec, "import time\ndef f(x):\n    time.sleep(60)\n", **cfg, wall_timeout=1.5)
    assert v["status"] == "timeout" and v["tests_timed_out"] == 3 and "test 3 not run" in v["error"], v
    # a program slow to load, each test within its limit: the budget runs out during a load, and
    # the rest are said unrun for the budget, not blamed on a limit the program never met
    # (a budget below test_timeout: whichever test meets its end meets it while loading)
    v = run(rec, "import time\ntime.sleep(0.4)\ndef f(x):\n    return x\n", **dict(cfg, test_timeout=3.0),
            wall_timeout=1.0)
    assert v["tests_passed"] < 3 and v["tests_passed"] + v["tests_timed_out"] == 3, v
    assert "not run: the check's 1 s of wall clock were spent" in v["error"] and "limit" not in v["error"], v
    # a program that never finishes loading would do so for every test: all fail, once
    v = run(rec, "while True:\n    pass\n", **cfg)
    assert v["status"] == "timeout" and v["tests_passed"] == 0 and v["tests_timed_out"] == 3, v


@pytest.mark.parametrize("config", [{}, {"timeout": 1}, {"timeout": 30}, {"test_timeout": 100}, {"wall_timeout": 300},
                                    {"mode": "allenai", "test_timeout": 0.5}, {"timeout": 0.1, "wall_timeout": 0.1}])
def test_the_pools_limit_covers_every_check_the_options_allow(config):
    """The pool's hard limit for a code verification follows the options (timeout_s, asked
    by the pool in place of TIMEOUT_S): the longest check they allow, a stdin/stdout check
    of any number of tests included, made twice, fits in it, so a slow program is graded by
    its own limits and never killed with the worker."""
    from rlvr.verification.pool import _module_timeout

    limits, _, opts = code._settings(config)
    limit = _module_timeout(code, config)
    assert limit == code.timeout_s(config)
    for n in (1, 3, 100, 10 ** 6):
        budget = code._check_budget(limits, opts, n)
        assert 2 * (budget + code.OVERHEAD_S) <= limit and 2 * (limits.wall + code.OVERHEAD_S) <= limit
        # bounded: a record of a million tests does not hold a worker for days
        assert budget <= max(code.MAX_CHECK_S, code._test_wall(limits, opts) + 5.0, config.get("wall_timeout", 0))


def test_a_stdio_check_is_bounded_by_its_budget_and_each_test_gets_what_is_left():
    tests = [{"input": f"{i}\n", "output": f"{i}\n"} for i in range(4)]
    slow = "import time\nn = int(input())\nif n:\n    time.sleep(60)\nprint(n)\n"
    v = run({"stdio_tests": tests}, slow, mode="allenai", timeout=0.5, test_timeout=1.0, wall_timeout=1.5)
    assert v["tests_passed"] == 1 and v["tests_timed_out"] == 3 and v["score"] == 0.25, v
    assert "test 4 not run: the check's 1.5 s of wall clock were spent" in v["error"], v
    v = run({"stdio_tests": tests}, slow, timeout=0.5, test_timeout=1.0, wall_timeout=1.5)
    assert v["status"] == "timeout" and v["tests_passed"] == 1 and "test 2: no exit within 1 s" in v["error"], v


@pytest.mark.parametrize("record,needle", [
    ({"prompt": "x"}, "no tests"),
    ({"test": "def check(candidate):\n    assert candidate() == 1\n"}, "entry_point"),
    ({"tests": ["assert f( == 1"]}, "<test 1>"),
    ({"test": "def nocheck(c):\n    pass\n", "entry_point": "f"}, "check(candidate)"),
])
def test_unusable_tests_are_errors_not_wrong(record, needle):
    v = run(record, "def f():\n    return 1\n")
    assert v["status"] == "error" and needle in v["error"]


@pytest.mark.parametrize("test", ["assert f() == 1  # \x00", "assert f() == '\ud800'"], ids=["nul", "surrogate"])
def test_tests_python_cannot_compile_are_unusable_on_every_311(test):
    """A NUL byte (a ValueError from the parser on Python 3.11.2, a SyntaxError on 3.11.7)
    or a lone surrogate in the test code: bad input at the record, not a crash."""
    rec = {"tests": [test]}
    assert code.check_record(rec)[0] == "tests"
    v = code.verify(rec, "def f():\n    return 1\n", {})
    assert v["status"] == "error" and "unusable tests" in v["error"], v


@pytest.mark.timeout(60)  # a guard against the quadratic patterns' hang, not a timing check
def test_extraction_is_linear_on_hostile_completions():
    """Blank-line runs and fence lines ending in a backtick: both patterns used to backtrack
    quadratically (8,000 newlines took 10 s; these sizes would take hours)."""
    lines = "\n" * 300_000
    assert code.extract_code("```python\n" + lines + "def f(x):\n    return x\n```", "f")[1] == "fence"
    assert code.extract_code("```python\n" + lines + "x = 1\n```", "f") == ("x = 1", "fence")
    tick = "```" + "a" * 300_000 + "`\n"
    assert code.extract_code(tick + "print(1)\n") == (tick + "print(1)\n", "plain")  # not an opening fence
    assert code.extract_code("```py thon\nx = 1\n```")[0] == "x = 1"
    assert code._defines("x = 1\n\tasync def  f (x):\n", "f") and not code._defines("def\nf(x):\n", "f")


def test_config_is_validated():
    code.check_config({"timeout": 3, "wall_timeout": 9, "memory_mb": 512, "sandbox": "process", "strict_types": True,
                       "numeric_cross": False})
    with pytest.raises(ValueError, match="strict_types"):
        code.check_config({"numeric_cross": False})   # it would be silently ignored
    with pytest.raises(ValueError, match="strict_types must be true or false"):
        code.check_config({"strict_types": "yes"})
    for bad in ({"timeout": 0}, {"timeout": "5"}, {"wall_timeout": -1}, {"memory_mb": 1.5}, {"sandbox": "docker"}, {"network": 1},
                {"bogus": 1}):
        with pytest.raises(ValueError):
            code.check_config(bad)


# --------------------------------------------------------------------------- grading semantics

def test_strict_eq():
    assert strict_eq(1, 1) and strict_eq("a", "a") and strict_eq(None, None)
    assert not strict_eq(True, 1) and not strict_eq(0, False) and not strict_eq([True], [1])
    assert strict_eq(2, 2.0) and not strict_eq(2, 2.0, numeric_cross=False)
    assert not strict_eq((1, 2), [1, 2]) and strict_eq((1, [2, (3,)]), (1, [2, (3,)]))
    assert not strict_eq({1: "a"}, {True: "a"}) and strict_eq({(1, 2): {3}}, {(1, 2): {3}})
    assert not strict_eq({1, 2}, frozenset({1, 2})) and not strict_eq({1}, {True}) and strict_eq({1, 2}, {2, 1})
    assert not strict_eq({"a": 1}, {"a": True}) and not strict_eq("1", 1) and not strict_eq(b"a", "a")
    assert not strict_eq(float("nan"), float("nan"))


def test_python_eq_on_plain_values_and_handles():
    assert python_eq(True, 1) and python_eq(0, False) and python_eq([True], [1]) and python_eq(2, 2.0)
    assert python_eq({1: "a"}, {True: "a"}) and python_eq({1, 2}, frozenset({1, 2}))
    assert not python_eq((1, 2), [1, 2]) and not python_eq("1", 1) and not python_eq(float("nan"), float("nan"))
    from rlvr.sandbox.remote import Remote

    h = Remote.__new__(Remote)   # a handle equals only itself, whatever it stands for
    assert python_eq(h, h) and not python_eq(h, 1) and not python_eq([h], [1]) and not python_eq(1, h)


def test_values_cross_the_boundary_with_their_types():
    rec = {"tests": [
        "assert f('int') == 10 ** 5000",
        "assert f('neg') == -(2 ** 100)",
        "assert f('inf') == float('inf')",
        "assert f('nan') != f('nan')",
        "assert str(f('negzero')) == '-0.0'",
        "assert f('complex') == 1 + 2j",
        "assert f('bytes') == b'\\x00\\xff'",
        "assert f('frozen') == frozenset({(1, 'a'), (2, 'b')})",
        "assert f('dict') == {(1, 2): [None, True], 'k': {'n': 1.5}}",
        "assert f('text') == 'h\\u00e9llo \\ud83d\\ude00 \\x00'",
        "assert f('tuple') == (1,) and type(f('tuple')) is tuple",
    ]}
    prog = textwrap.dedent("""
        def f(kind):
            return {"int": 10 ** 5000, "neg": -(2 ** 100), "inf": float("inf"), "nan": float("nan"),
                    "negzero": -0.0, "complex": 1 + 2j, "bytes": b"\\x00\\xff",
                    "frozen": frozenset({(1, "a"), (2, "b")}), "dict": {(1, 2): [None, True], "k": {"n": 1.5}},
                    "text": "h\\u00e9llo \\ud83d\\ude00 \\x00", "tuple": (1,)}[kind]
    """)
    v = run(rec, prog)
    assert v["status"] == "correct", v


def test_subclasses_and_numpy_like_scalars_travel_as_their_base_type():
    rec = {"tests": ["assert pair() == (1, 2)", "assert counts() == {'a': 2}", "assert flag() == 3"]}
    prog = textwrap.dedent("""
        from collections import namedtuple, Counter
        from enum import IntEnum
        P = namedtuple("P", "x y")
        class F(IntEnum):
            THREE = 3
        def pair():
            return P(1, 2)
        def counts():
            return Counter("aa")
        def flag():
            return F.THREE
    """)
    assert run(rec, prog)["status"] == "correct"


def test_handles_for_objects_generators_and_classes():
    rec = {"test_setup": "box = Box(3)\nbox.extra = 4", "tests": [
        "assert list(evens(6)) == [0, 2, 4]",
        "assert sorted(evens(6), reverse=True) == [4, 2, 0]",
        "assert 4 in evens(6) and 5 not in evens(6)",
        "assert box.value + box.extra == 7",
        "assert total([Box(1), Box(2)]) == 3",
        "assert len(Box(9)) == 9 and str(Box(9)) == 'Box(9)' and Box(0) != Box(0)",
        "g = evens(4)\nassert next(g) == 0 and next(g) == 2",
    ]}
    prog = textwrap.dedent("""
        def evens(n):
            return (i for i in range(n) if i % 2 == 0)
        class Box:
            def __init__(self, v):
                self.value = v
            def __len__(self):
                return self.value
            def __str__(self):
                return f"Box({self.value})"
        def total(boxes):
            return sum(b.value for b in boxes)
    """)
    v = run(rec, prog)
    assert v["status"] == "correct", v


def test_expected_exceptions_keep_their_builtin_class():
    rec = {"test": textwrap.dedent("""
        def check(candidate):
            assert candidate(4) == 2
            try:
                candidate(-1)
            except ValueError as e:
                assert "negative" in str(e)
            else:
                assert False, "no error raised"
    """), "entry_point": "root"}
    good = "class Neg(ValueError):\n    pass\ndef root(x):\n    if x < 0:\n        raise Neg('negative input')\n    return int(x ** 0.5)\n"
    assert run(rec, good)["status"] == "correct"
    v = run(rec, "def root(x):\n    if x < 0:\n        raise KeyError('negative')\n    return int(x ** 0.5)\n")
    assert v["status"] == "wrong" and "KeyError" in v["error"]


def test_stop_iteration_from_the_candidate_does_not_end_the_tests_iteration():
    """Python ends map() quietly when the function it calls raises StopIteration, so
    ``all(map(f, xs))`` held for an f that only raised it; next() of the candidate's own
    iterator still ends with StopIteration."""
    rec = {"tests": ["assert all(map(is_prime, [2, 3, 5, 7]))", "assert not any(map(is_prime, [4, 6, 8]))"]}
    for cheat in ("def is_prime(n):\n    raise StopIteration\n",
                  "def is_prime(n):\n    return next(iter([]))\n"):
        v = run(rec, cheat)
        assert v["status"] == "wrong" and "StopIteration" in v["error"], v
    honest = "def is_prime(n):\n    return n > 1 and all(n % d for d in range(2, n))\n"
    assert run(rec, honest)["status"] == "correct"
    gen = {"tests": ["g = count_to(2)", "assert next(g) == 1 and next(g) == 2", "assert next(g, 'end') == 'end'",
                     "assert list(map(count_to, [0])) != []"]}
    assert run(gen, "def count_to(n):\n    yield from range(1, n + 1)\n")["status"] == "correct"


def test_truthiness_asserts_and_numeric_cross_option():
    rec = {"tests": ["assert is_big(10)", "assert not is_big(1)"]}
    assert run(rec, "def is_big(n):\n    return n > 5\n")["status"] == "correct"
    assert run(rec, "def is_big(n):\n    return True\n")["status"] == "wrong"
    rec = {"tests": ["assert half(4) == 2"]}
    assert run(rec, "def half(n):\n    return n / 2\n")["status"] == "correct"
    assert run(rec, "def half(n):\n    return n / 2\n", strict_types=True)["status"] == "correct"
    assert run(rec, "def half(n):\n    return n / 2\n", strict_types=True, numeric_cross=False)["status"] == "wrong"
    rec = {"tests": ["assert is_even(2) == True", "assert is_even(3) == False", "assert pair(1) == (1, 1)"]}
    prog = "def is_even(n):\n    return 1 - n % 2\ndef pair(n):\n    return (n, True)\n"
    assert run(rec, prog)["status"] == "correct"          # Python's ==: True == 1, (1, True) == (1, 1)
    v = run(rec, prog, strict_types=True)
    assert v["status"] == "wrong" and "is_even(2) == True" in v["error"]
    rec = {"tests": ["assert 2 == half(4) == 2.0", "assert half(4) != 3"]}
    assert run(rec, "def half(n):\n    return n / 2\n")["status"] == "correct"


def test_builtin_named_entry_point_but_builtins_stay_trusted():
    # MBPP 126 names its function `sum`: with no other candidate function called, it is the one.
    rec = {"tests": ["assert sum(10, 15) == 6"]}
    assert run(rec, "def sum(a, b):\n    return 6\n")["status"] == "correct"
    # When the test also calls a candidate function, `sum` stays the real built-in.
    rec = {"tests": ["assert sum(double([1, 2])) == 6"]}
    assert run(rec, "def double(xs):\n    return [2 * x for x in xs]\n")["status"] == "correct"
    assert run(rec, "def sum(xs):\n    return 6\ndef double(xs):\n    return xs\n")["status"] == "wrong"
    # An explicit entry_point may be a built-in name.
    rec = {"tests": ["assert max(3) == 9"], "entry_point": "max"}
    assert run(rec, "def max(x):\n    return x * x\n")["status"] == "correct"


def test_trusted_builtins_and_stdlib_functions_can_be_passed_as_arguments():
    rec = {"tests": ["assert apply(int, '7') == 7", "import math\nassert apply(math.floor, 2.5) == 2",
                     "from collections import Counter\nassert apply(Counter, 'ab') == {'a': 1, 'b': 1}"]}
    assert run(rec, "def apply(f, x):\n    return f(x)\n")["status"] == "correct"
    v = run({"tests": ["assert apply(lambda x: x, 1) == 1"]}, "def apply(f, x):\n    return f(x)\n")
    assert v["status"] == "wrong" and "cannot pass a function" in v["error"]


def test_honest_programs_can_use_processes_threads_and_files():
    from rlvr.sandbox import SandboxConfig, get_sandbox

    if get_sandbox(SandboxConfig()).describe()["mode"] == "process" and os.geteuid() == 0:
        pytest.skip("as root without bubblewrap the standard library may be unreadable to the sandbox user")
    rec = {"tests": ['assert run() == "hi\\n"', "assert par() == [0, 1, 4]", "assert threads() == 45",
                     'assert tmpf() == "ok"', 'assert name() == "solution"']}
    prog = textwrap.dedent("""
        import subprocess, multiprocessing, concurrent.futures, tempfile
        def run():
            return subprocess.run(["echo", "hi"], capture_output=True, text=True).stdout
        def sq(x):
            return x * x
        def par():
            with multiprocessing.Pool(2) as p:
                return p.map(sq, range(3))
        def threads():
            with concurrent.futures.ThreadPoolExecutor(4) as ex:
                return sum(ex.map(lambda x: x, range(10)))
        def tmpf():
            with tempfile.NamedTemporaryFile("w+") as f:
                f.write("ok")
                f.flush()
                f.seek(0)
                return f.read()
        def name():
            return __name__
        if __name__ == "__main__":
            input()  # demo code of a completion: not run
    """)
    v = run(rec, prog)
    assert v["status"] == "correct", v


def test_asserts_survive_python_O():
    prog = ("from rlvr.verifiers import code\n"
            "v = code.verify({'tests': ['assert f() == 1']}, 'def f():\\n    return 2\\n', {})\n"
            "print(v['status'])\n")
    out = subprocess.run([sys.executable, "-O", "-c", prog], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "wrong", out.stderr


def test_many_calls_in_one_check_and_state_between_them():
    rec = {"test": textwrap.dedent("""
        def check(candidate):
            import random
            for _ in range(300):
                x, y = random.randint(0, 1000), random.randint(0, 1000)
                assert candidate(x, y) == x + y
            assert calls() == 300
    """), "entry_point": "add"}
    prog = "n = 0\ndef add(a, b):\n    global n\n    n += 1\n    return a + b\ndef calls():\n    return n\n"
    v = run(rec, prog)
    assert v["status"] == "correct" and v["calls"] == 301 and v["asserts_passed"] == 301


def test_literal_calls_are_batched_in_order_and_state_is_kept():
    rec = {"tests": ["assert tick() == 1", "assert tick() == 2", "assert tick(step=10) == 12"]}
    prog = "n = 0\ndef tick(step=1):\n    global n\n    n += step\n    return n\n"
    v = run(rec, prog)
    assert v["status"] == "correct" and v["calls"] == 3 and v["batched"] == 3


def test_batch_stops_at_an_exception_and_the_rest_goes_one_by_one():
    rec = {"tests": ["assert inv(1) == 1.0", "assert inv(0) == 0", "assert inv(4) == 0.25", "assert inv(2) == 0.5"]}
    v = run(rec, "def inv(x):\n    return 1 / x\n")
    assert v["status"] == "wrong" and v["tests_passed"] == 3 and "ZeroDivisionError" in v["error"]
    assert v["calls"] == 4 and v["batched"] == 2


def test_a_call_off_the_batch_turns_batching_off():
    # The failing assert's message calls f(2), which the batch did not foresee.
    rec = {"test": "def check(candidate):\n    assert candidate(1) == 5, candidate(2)\n    assert candidate(3) == 3\n",
           "entry_point": "f"}
    v = run(rec, "def f(x):\n    return x\n")
    assert v["status"] == "wrong" and "(2)" in v["error"] and v["calls"] == 2 and v["batched"] == 1
    rec["test"] = "def check(candidate):\n    assert candidate(1) == 1\n    for i in (2, 3):\n        assert candidate(i) == i\n"
    v = run(rec, "def f(x):\n    return x\n")
    assert v["status"] == "correct" and v["calls"] == 3 and v["batched"] == 1


# --------------------------------------------------------------------------- where verify runs

def test_threads_share_one_server_safely():
    results = []

    def work(i):
        results.append(run({"tests": [f"assert f() == {i}"]}, f"def f():\n    return {i}\n")["status"])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == ["correct"] * 4


def _in_child(q):
    q.put(code.verify({"tests": ["assert f() == 1"]}, "def f():\n    return 1\n", {})["status"])


def test_works_in_a_forked_child_after_the_parent_used_it():
    assert run(ADD, "def add(a, b):\n    return a + b\n")["status"] == "correct"
    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=_in_child, args=(q,))
    p.start()
    p.join(60)
    assert q.get(timeout=5) == "correct"
    assert run(ADD, "def add(a, b):\n    return a + b\n")["status"] == "correct"


def test_works_inside_the_verifier_pool():
    from rlvr.verification.pool import VerifierPool

    rec = {"id": "p1", "verifier": "code", "tests": ["assert add(1, 2) == 3"],
           "completions": ["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return 0\n", "import os\nos._exit(0)\n"]}
    with VerifierPool(jobs=1) as pool:
        out = list(pool.verify_records([rec]))
    assert out[0]["rewards"] == [1.0, 0.0, 0.0]
    assert [v["status"] for v in out[0]["verdicts"]] == ["correct", "wrong", "wrong"]


# --------------------------------------------------------------------------- real problems

HE_SLICE = ["HumanEval/0", "HumanEval/2", "HumanEval/4", "HumanEval/10", "HumanEval/12", "HumanEval/32",
            "HumanEval/33", "HumanEval/38", "HumanEval/53", "HumanEval/87", "HumanEval/107", "HumanEval/112",
            "HumanEval/137", "HumanEval/151", "HumanEval/160", "HumanEval/162"]


@pytest.mark.parametrize("task_id", HE_SLICE)
def test_humaneval_canonical_passes_and_broken_fails(task_id):
    task = HUMANEVAL[task_id]
    rec = he_record(task)
    v = run(rec, task["canonical_solution"])
    assert v["status"] == "correct", v
    assert v["asserts_passed"] >= 1
    for broken in ("    return None\n", "    raise NotImplementedError\n"):
        assert run(rec, broken)["status"] == "wrong"


def test_humaneval_chat_style_answer():
    task = HUMANEVAL["HumanEval/38"]  # decode_cyclic relies on the prompt's encode_cyclic
    body = task["canonical_solution"]
    answer = f"Here is the function:\n```python\ndef decode_cyclic(s: str):\n{body}```\n"
    assert run(he_record(task), answer)["status"] == "correct"


MBPP_SLICE = ["11", "16", "87", "97", "126", "137", "367", "395", "533", "596", "601", "620", "861", "945"]


@pytest.mark.parametrize("task_id", MBPP_SLICE)
def test_mbpp_reference_passes_and_broken_fails(task_id):
    task = MBPP[task_id]
    rec = mbpp_record(task)
    v = run(rec, task["code"])
    assert v["status"] == "correct", v
    broken = task["code"] + "\n\n" + "\n".join(
        f"def {name}(*args, **kwargs):\n    return None\n" for name in _functions_under_test(task))
    assert run(rec, broken)["status"] == "wrong"


def _functions_under_test(task: dict) -> list[str]:
    import ast

    defined = {n.name for n in ast.parse(task["code"]).body if isinstance(n, ast.FunctionDef)}
    called = {n.func.id for t in task["test_list"] for n in ast.walk(ast.parse(t))
              if isinstance(n, ast.Call) and isinstance(n.func, ast.Name)}
    return sorted(defined & called)


def test_mbpp_414_passes_as_in_the_reference_harness():
    """Its reference returns 1/0 where the tests expect True/False: correct under Python's ==
    (as in the reference harness), wrong only under the strict_types setting."""
    task = MBPP["414"]
    assert run(mbpp_record(task), task["code"])["status"] == "correct"
    v = run(mbpp_record(task), task["code"], strict_types=True)
    assert v["status"] == "wrong" and "== False" in v["error"]
    fixed = task["code"].replace("return 1", "return True").replace("return 0", "return False")
    assert run(mbpp_record(task), fixed, strict_types=True)["status"] == "correct"
