"""The verification engine: worker pool (order, streaming, hard timeouts, crash recovery,
threads), reward tables, summaries and the rlvr-verify command.

A test-only verifier module ("probe", written to a temp dir and registered in MODULES)
does what its completion says: sleep, spin forever, raise, segfault, exit, print noise,
allocate memory, report its pid.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time

import pytest
from machine_time import scaled

from helpers import invoke, jsonl
from rlvr.verifiers import MODULES
from rlvr.verifiers import math as vm
from rlvr.verification.pool import VerifierPool, normalize_config
from rlvr.verification.rewards import RewardTable, parse_table_spec
from rlvr.verification.summary import format_text, summarize

PROBE = '''
"""Test-only verifier: the completion is the command."""
import ctypes, os, sys, time
NAME = "probe"
VERSION = "p1"
TIMEOUT_S = 1.0

def timeout_s(config):
    return float(config.get("limit", TIMEOUT_S))

def verify(record, completion, config):
    cmd, _, arg = completion.partition(":")
    if cmd == "ok":
        return {"status": "correct", "extracted": arg}
    if cmd == "wrong":
        return {"status": "wrong", "extracted": arg}
    if cmd == "sleep":
        time.sleep(float(arg))
        return {"status": "correct", "extracted": arg}
    if cmd == "spin":
        while True:
            pass
    if cmd == "raise":
        raise ValueError("boom")
    if cmd == "segv":
        ctypes.string_at(0)
    if cmd == "exit":
        os._exit(3)
    if cmd == "print":
        print("noise " * 20000, flush=True)
        os.write(1, b"\\x00\\x00\\x00\\x07garbage")
        return {"status": "correct", "extracted": "printed"}
    if cmd == "pid":
        return {"status": "correct", "extracted": str(os.getpid())}
    if cmd == "invalid":
        return {"status": "great"}
    if cmd == "mem":
        b = bytearray(int(arg) * 1024 * 1024)
        return {"status": "correct", "extracted": str(len(b))}
    if cmd == "score":
        return {"status": "wrong", "extracted": None, "score": float(arg), "strict": [True, False], "loose": [True, True]}
    if cmd == "config":
        return {"status": "correct", "extracted": repr(sorted(config.items()))}
    return {"status": "no_answer", "extracted": None}
'''


@pytest.fixture(scope="module")
def probe_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("probe")
    (d / "rlvr_probe_verifier.py").write_text(PROBE)
    sys.path.insert(0, str(d))
    # rlvr-verify's --verifier choices are read from MODULES when its module is imported: import
    # it first, so the test-only probe never reaches the command's help or man page.
    import rlvr.commands.verify  # noqa: F401
    MODULES["probe"] = "rlvr_probe_verifier"
    yield d
    MODULES.pop("probe", None)
    sys.path.remove(str(d))


@pytest.fixture(scope="module")
def pool(probe_dir):
    with VerifierPool(jobs=2, timeout=2.0, memory_mb=1024) as p:
        yield p


def rec(i, *completions, **extra):
    return {"id": str(i), "verifier": "probe", "completions": list(completions), **extra}


def statuses(r):
    return [v["status"] for v in r["verdicts"]]


# ------------------------------------------------------------------------------ the pool


def test_order_is_kept_and_n_in_gives_n_out(pool):
    recs = [rec(i, f"sleep:{0.03 * (i % 3)}", f"ok:{i}") for i in range(30)]
    out = pool.verify_all(recs)
    assert [r["id"] for r in out] == [str(i) for i in range(30)]
    assert all(r["rewards"] == [1.0, 1.0] for r in out)
    v = out[0]["verdicts"][1]
    assert v["extracted"] == "0" and v["verifier"] == "probe" and v["version"] == "p1"
    assert isinstance(v["duration_s"], float)
    assert "verdicts" not in recs[0]  # the caller's dicts are not modified


def test_a_hang_times_out_and_the_rest_of_the_record_is_kept(pool):
    [r] = pool.verify_all([rec(1, "ok:a", "spin", "ok:b", "ok:c")])
    assert statuses(r) == ["correct", "timeout", "correct", "correct"]
    assert r["rewards"] == [1.0, 0.0, 1.0, 1.0]
    assert "2 s" in r["verdicts"][1]["error"] and r["verdicts"][1]["version"] == "p1"


def test_timeout_is_per_verification_not_per_record(pool):
    # Three 0.9 s verifications in one record (2.7 s), 2 s timeout: none may time out.
    [r] = pool.verify_all([rec(1, "sleep:0.9", "sleep:0.9", "sleep:0.9")])
    assert statuses(r) == ["correct"] * 3


def test_crashes_are_verdicts_and_the_rest_goes_on(pool):
    [r] = pool.verify_all([rec(1, "ok:1", "segv", "ok:2", "exit", "raise", "invalid", "ok:3")])
    assert statuses(r) == ["correct", "error", "correct", "error", "error", "error", "correct"]
    assert "SIGSEGV" in r["verdicts"][1]["error"]
    assert "exit code 3" in r["verdicts"][3]["error"]
    assert r["verdicts"][4]["error"] == "ValueError: boom"
    assert "invalid verdict" in r["verdicts"][5]["error"]
    assert pool.stats["workers_crashed"] >= 2


def test_a_crashed_or_killed_worker_is_replaced_and_a_warm_one_kept(probe_dir):
    with VerifierPool(jobs=1, timeout=2.0) as p:
        pid = lambda: p.verify_all([rec(0, "pid")])[0]["verdicts"][0]["extracted"]  # noqa: E731
        first = pid()
        assert pid() == first                      # kept warm across calls
        p.verify_all([rec(1, "segv")])
        second = pid()
        assert second != first                     # a fresh worker after the crash
        p.verify_all([rec(2, "spin")])
        assert pid() not in (first, second)        # and after the kill
        assert p.stats["workers_started"] == 3


def test_verifier_output_cannot_corrupt_the_protocol(pool):
    [r] = pool.verify_all([rec(1, "print", "ok:after")])
    assert statuses(r) == ["correct", "correct"]


def test_memory_limit_turns_a_blowup_into_an_error_verdict(pool):
    [r] = pool.verify_all([rec(1, "mem:2048", "ok:still-alive")])
    assert statuses(r) == ["error", "correct"]
    assert "MemoryError" in r["verdicts"][0]["error"]


def test_records_without_completions_and_error_records_pass(pool):
    err = {"error": {"file": "a.jsonl", "line": 3, "message": "invalid JSON"}}
    out = pool.verify_all([rec(1), {"id": "2", "verifier": "probe"}, err, rec(4, "ok:x")])
    assert out[0]["rewards"] == [] and out[0]["verdicts"] == []
    assert out[1]["rewards"] == [] and out[1]["verdicts"] == []
    assert out[2] is err and "rewards" not in err
    assert out[3]["rewards"] == [1.0]


def test_unknown_missing_or_unavailable_verifiers_are_error_verdicts(pool):
    MODULES_BEFORE = dict(pool.modules)
    out = pool.verify_all([
        {"id": "a", "completions": ["x"]},
        {"id": "b", "verifier": "nonesuch", "completions": ["x"]},
        {"id": "c", "verifier": "code", "completions": ["x", "y"]} if "code" in MODULES_BEFORE else rec("c", "ok:x"),
    ])
    assert out[0]["verdicts"][0]["status"] == "error" and "no verifier" in out[0]["verdicts"][0]["error"]
    assert "unknown verifier 'nonesuch'" in out[1]["verdicts"][0]["error"]
    assert len(out[2]["verdicts"]) == len(out[2]["completions"])


def test_records_come_out_while_a_slow_input_trickles_in_and_before_an_interrupt(pool):
    pool.verify_all([rec(0, "ok:x")])   # workers started and the probe loaded: no start-up in the timings
    events = []

    def slow():
        for i in range(1, 6):
            events.append(f"in:{i}")
            yield rec(i, "ok:x")
            # an upstream stage producing one record a second (of a quiet machine's time: the
            # pause stretches with the load, as the worker's verification does)
            time.sleep(scaled(1.0))
        raise KeyboardInterrupt  # Ctrl-C while waiting for the fourth

    with pytest.raises(KeyboardInterrupt):
        for out in pool.verify_records(slow()):
            events.append(f"out:{out['id']}")
    # every record comes out, in order, the last one before the interrupt included; and
    # once the input shows itself slow (by the second record), each record is out before the
    # one two places after it is read, not when a window of 64 fills
    assert [e for e in events if e.startswith("out:")] == [f"out:{i}" for i in range(1, 6)]
    assert all(events.index(f"out:{i}") < events.index(f"in:{i + 2}") for i in range(2, 4))
    assert events.index("out:1") < events.index("in:4")


def test_a_module_that_fails_to_import_gives_error_verdicts(probe_dir):
    (probe_dir / "rlvr_broken_verifier.py").write_text("raise ImportError('needs a missing library')\n")
    with VerifierPool(jobs=1, modules={**MODULES, "broken": "rlvr_broken_verifier"}) as p:
        out = p.verify_all([{"id": "1", "verifier": "broken", "completions": ["a", "b"]},
                            {"id": "2", "verifier": "probe", "completions": ["ok:z"]}])
    assert [v["status"] for v in out[0]["verdicts"]] == ["error", "error"]
    assert "needs a missing library" in out[0]["verdicts"][0]["error"]
    assert out[1]["rewards"] == [1.0]
    assert "needs a missing library" in p.unavailable["broken"] and list(p.unavailable) == ["broken"]


def test_a_memory_limit_too_small_to_load_a_verifier_fails_clearly():
    r = invoke("rlvr-verify", ["-j", "1", "--memory-limit", "40"], jsonl(MATH[0]))
    assert r.code == 1 and not r.stdout
    assert "cannot load within the worker memory limit of 40 MB" in r.stderr and "--memory-limit" in r.stderr


def test_memory_stays_bounded_by_the_window(probe_dir):
    pulled = 0

    def source():
        nonlocal pulled
        for i in range(200):
            pulled += 1
            yield rec(i, "ok:1")

    with VerifierPool(jobs=1, window=5) as p:
        it = p.verify_records(source())
        next(it)
        assert pulled <= 6
        assert sum(1 for _ in it) == 199


def test_input_error_comes_after_the_records_before_it(pool):
    def source():
        yield rec(1, "ok:1")
        yield rec(2, "ok:2")
        raise ValueError("bad line 3")

    got = []
    with pytest.raises(ValueError, match="bad line 3"):
        for r in pool.verify_records(source()):
            got.append(r["id"])
    assert got == ["1", "2"]


def test_stopping_early_leaves_the_pool_usable(pool):
    for r in pool.verify_records(rec(i, "sleep:0.2", "ok:1") for i in range(10)):
        break
    out = pool.verify_all([rec(1, "ok:again")])
    assert out[0]["rewards"] == [1.0]


def test_works_from_a_non_main_thread_and_still_kills_hangs(probe_dir):
    result = {}

    def driver():
        with VerifierPool(jobs=1, timeout=2.0) as p:
            result["out"] = p.verify_all([rec(1, "spin", "ok:1")])

    t = threading.Thread(target=driver)
    t.start()
    t.join(60)
    assert not t.is_alive()
    assert statuses(result["out"][0]) == ["timeout", "correct"]


def test_module_timeout_and_per_verifier_override(probe_dir):
    with VerifierPool(jobs=1) as p:
        assert p.timeout_for("probe", 1.0) == 1.0 and p.timeout_for("code", None) == 5.0
    with VerifierPool(jobs=1, timeout={"probe": 0.3, "math": 2}) as p:
        assert p.timeout_for("probe", 1.0) == 0.3 and p.timeout_for("math", 3.0) == 2.0
        [r] = p.verify_all([rec(1, "sleep:0.6")])
        assert statuses(r) == ["timeout"]
    with pytest.raises(ValueError):
        VerifierPool(jobs=1, timeout=-1)


def test_a_verifier_s_own_limit_follows_its_options(probe_dir):
    """A module's timeout_s(options) (the code verifier's follows its time limits) is the
    pool's limit for it in place of TIMEOUT_S; a limit given to the pool still wins."""
    with VerifierPool(jobs=1, config={"probe": {"limit": 60}}) as p:
        [r] = p.verify_all([rec(1, "sleep:1.5")])
        assert statuses(r) == ["correct"]
    with VerifierPool(jobs=1, timeout={"probe": 0.3}, config={"probe": {"limit": 60}}) as p:
        [r] = p.verify_all([rec(1, "sleep:1.5")])
        assert statuses(r) == ["timeout"]


def test_config_forms_reach_the_verifier(probe_dir):
    assert normalize_config({"math_mode": "strict-match", "math.last_number": False, "code": {"x": 1}}, MODULES) == \
        {"math": {"mode": "strict-match", "last_number": False}, "code": {"x": 1}}
    with pytest.raises(ValueError):
        normalize_config({"bogus": 1}, MODULES)
    with pytest.raises(ValueError, match="math.mode"):
        VerifierPool(jobs=1, config={"math.mode": "nope"})
    with VerifierPool(jobs=1, config={"probe": {"k": 1}}) as p:
        [r] = p.verify_all([rec(1, "config")])
    assert r["verdicts"][0]["extracted"] == "[('k', 1)]"


def test_math_records_and_a_real_sympy_hang_through_the_pool():
    recs = [{"id": "g", "verifier": "math", "answer": "18",
             "completions": ["\\boxed{18}", "#### 19", "\\boxed{\\sin(x)^{999}}", "The answer is 18."]}]
    # (x^{9^{9^{9}}} hung here once; the math verifier now refuses it before sympy: too_large)
    with VerifierPool(jobs=1, timeout=3.0) as p:  # the hang costs the whole timeout; honest ones take ms
        [r] = p.verify_all(recs)
    assert statuses(r) == ["correct", "wrong", "timeout", "correct"]
    assert r["verdicts"][0]["verifier"] == "math" and r["verdicts"][0]["version"] == vm.VERSION


# ------------------------------------------------------------------------------ rewards


def test_reward_table_defaults_overrides_and_files(tmp_path):
    t = RewardTable()
    assert [t.reward({"status": s}) for s in ("correct", "wrong", "no_answer", "timeout", "error")] == [1, 0, 0, 0, 0]
    t = RewardTable.parse("no_answer=-0.1, wrong=0.1")
    assert t.reward({"status": "no_answer"}) == -0.1 and t.reward({"status": "wrong"}) == 0.1
    assert t.reward({"status": "correct"}) == 1.0
    f = tmp_path / "t.yaml"
    f.write_text("reward_table:\n  correct: 2\n  timeout: -1\n")
    assert parse_table_spec(str(f)) == {"correct": 2.0, "wrong": 0.0, "no_answer": 0.0, "timeout": -1.0, "error": 0.0,
                                             "unfinished_thinking": 0.0, "judge_unparsable": 0.0}
    (tmp_path / "t.json").write_text('{"error": -0.5}')
    assert RewardTable.parse(str(tmp_path / "t.json")).reward({"status": "error"}) == -0.5
    for bad in ("great=1", "correct", "correct=abc", "correct=nan"):
        with pytest.raises(ValueError):
            RewardTable.parse(bad)
    with pytest.raises(ValueError):
        RewardTable(mode="partial")


def test_fraction_mode_uses_the_score():
    t = RewardTable(mode="fraction")
    assert t.reward({"status": "wrong", "score": 0.5}) == 0.5
    assert t.reward({"status": "correct", "score": 1.0}) == 1.0
    assert t.reward({"status": "timeout", "score": 0.9}) == 0.0
    assert t.reward({"status": "correct"}) == 1.0
    t = RewardTable({"wrong": -1.0, "correct": 1.0}, mode="fraction")
    assert t.reward({"status": "wrong", "score": 0.25}) == -0.5
    assert RewardTable().reward({"status": "wrong", "score": 0.5}) == 0.0


# ------------------------------------------------------------------------------ summary


def test_summary_counts_and_if_metrics_by_hand():
    recs = [
        {"id": "1", "dataset": "gsm8k", "verifier": "math", "rewards": [1.0, 0.0, 0.0],
         "verdicts": [{"status": "correct", "duration_s": 0.1}, {"status": "wrong", "duration_s": 0.3},
                      {"status": "timeout", "duration_s": 3.0}]},
        {"id": "2", "dataset": "ifeval", "verifier": "ifeval", "instruction_id_list": ["a", "b"], "rewards": [1.0, 0.0, 0.0],
         "verdicts": [{"status": "correct", "strict": [True, True], "loose": [True, True]},
                      {"status": "wrong", "strict": [True, False], "loose": [True, True]},
                      {"status": "error"}]},
        {"error": {"file": "x", "line": 1, "message": "bad"}},
    ]
    s = summarize(recs)
    a = s["all"]
    assert a["records"] == 2 and a["completions"] == 6 and s["error_records"] == 1
    assert a["accuracy"] == pytest.approx(2 / 6) and a["mean_reward"] == pytest.approx(2 / 6)
    assert a["status"] == {"correct": 2, "wrong": 2, "no_answer": 0, "timeout": 1, "error": 1,
                           "unfinished_thinking": 0, "judge_unparsable": 0} and a["timeouts"] == 1
    assert a["max_duration_s"] == 3.0
    g = s["per_dataset"]["gsm8k"]
    assert g["accuracy"] == pytest.approx(1 / 3) and "prompt_level_strict_acc" not in g
    i = s["per_dataset"]["ifeval"]
    # prompt level: 1 of 3 strict, 2 of 3 loose; instruction level: 3 of 6 strict, 4 of 6 loose
    assert i["prompt_level_strict_acc"] == pytest.approx(1 / 3) and i["prompt_level_loose_acc"] == pytest.approx(2 / 3)
    assert i["inst_level_strict_acc"] == pytest.approx(3 / 6) and i["inst_level_loose_acc"] == pytest.approx(4 / 6)
    text = format_text(s)
    assert text.splitlines()[0].split()[:3] == ["dataset", "records", "completions"]
    assert "prompt_level_strict_acc" in text and "error records passed through: 1" in text


# ------------------------------------------------------------------------------ the command

MATH = [
    {"id": "a", "dataset": "gsm8k", "verifier": "math", "answer": "18", "completions": ["\\boxed{18}", "#### 17", "none"]},
    {"id": "b", "dataset": "math500", "verifier": "math", "answer": "\\frac{1}{2}", "completions": ["The answer is $0.5$."]},
]


def test_cli_verifies_and_summarises_on_stderr():
    r = invoke("rlvr-verify", ["-j", "1", "--summary"], jsonl(*MATH))
    assert r.code == 0, r.stderr
    out = r.records()
    assert [x["id"] for x in out] == ["a", "b"]
    assert out[0]["rewards"] == [1.0, 0.0, 0.0] and out[1]["rewards"] == [1.0]
    assert [v["status"] for v in out[0]["verdicts"]] == ["correct", "wrong", "no_answer"]
    lines = r.stderr.splitlines()
    assert lines[0].split()[0] == "dataset"
    assert lines[1].split()[:7] == ["all", "2", "4", "0.5000", "0.5000", "2", "1"]


def test_cli_summary_file_reward_table_and_forced_verifier(tmp_path):
    recs = [{k: v for k, v in MATH[0].items() if k != "verifier"}]
    summ = tmp_path / "s.json"
    r = invoke("rlvr-verify", ["-j", "1", "--verifier", "math", "--reward-table", "no_answer=-0.5,wrong=0.1",
                               f"--summary={summ}"], jsonl(*recs))
    assert r.code == 0, r.stderr
    assert r.records()[0]["rewards"] == [1.0, 0.1, -0.5]
    s = json.loads(summ.read_text())
    assert s["all"]["status"]["no_answer"] == 1 and s["per_dataset"]["gsm8k"]["completions"] == 3
    assert r.stderr == ""


def test_cli_verifier_shorthands():
    # `rlvr-rollout ... | rlvr-verify --math`: --math, --code, --ifeval, --ifbench, --if-multi
    # are --verifier NAME.
    recs = [{k: v for k, v in MATH[0].items() if k != "verifier"}]
    r = invoke("rlvr-verify", ["-j", "1", "--math"], jsonl(*recs))
    assert r.code == 0, r.stderr
    assert [v["verifier"] for v in r.records()[0]["verdicts"]] == ["math"] * 3
    assert r.records()[0]["rewards"] == [1.0, 0.0, 0.0]
    from rlvr.commands.verify import SHORTHANDS, cmd
    from rlvr.records import VERIFIERS

    assert set(SHORTHANDS) == set(VERIFIERS) - {"judge"}   # --judge is the judge's URL (--verifier judge forces it)
    for name, flag in SHORTHANDS.items():
        assert cmd.make_context("rlvr-verify", [flag]).params["verifier"] == name
    assert cmd.make_context("rlvr-verify", ["--math", "--verifier", "math"]).params["verifier"] == "math"
    r = invoke("rlvr-verify", ["--math", "--verifier", "code"], "")
    assert r.code == 2 and "--math and --verifier code name different verifiers" in r.stderr
    r = invoke("rlvr-verify", ["--help"])
    assert all(flag in r.stdout for flag in SHORTHANDS.values())


def test_cli_bare_summary_never_takes_the_input_file(tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text(jsonl(*MATH))
    r = invoke("rlvr-verify", ["-j", "1", "--summary", str(f)])
    assert r.code == 0, r.stderr
    assert len(r.records()) == 2 and r.stderr.startswith("dataset")
    assert f.read_text() == jsonl(*MATH)


def test_cli_lm_eval_mode_and_options():
    rec = {"id": "a", "verifier": "math", "answer": "18", "completions": ["The answer is $18.00.", "#### 18"]}
    r = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=flexible-extract"], jsonl(rec))
    assert r.code == 0, r.stderr
    assert r.records()[0]["rewards"] == [0.0, 1.0]
    r = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=strict-match", "--set", "math.last_number=false"], jsonl(rec))
    assert r.code == 0 and r.records()[0]["rewards"] == [0.0, 1.0]


@pytest.mark.parametrize("args, needle", [
    (["--set", "math.mode=bogus"], "math.mode must be one of"),
    (["--set", "nothing"], "VERIFIER.OPTION=VALUE"),
    (["--set", "maths.mode=x"], "unknown verifier option"),
    (["--reward-table", "great=1"], "unknown status 'great'"),
    (["--timeout", "soon"], "SECONDS"),
    (["--timeout", "0"], "positive"),
])
def test_cli_bad_options_exit_2(args, needle):
    r = invoke("rlvr-verify", args, jsonl(*MATH))
    assert r.code == 2, (r.code, r.stderr)
    assert needle in r.stderr and "Traceback" not in r.stderr


def test_cli_record_without_verifier_gets_error_verdicts_and_a_warning():
    r = invoke("rlvr-verify", ["-j", "1"], jsonl(MATH[0], {"id": "x", "completions": ["1"]}))
    assert r.code == 0, r.stderr
    out = r.records()
    assert out[1]["verdicts"][0]["status"] == "error" and out[1]["rewards"] == [0.0]
    assert "1 record(s) name no verifier" in r.stderr


def test_cli_missing_completions_is_exit_3_after_the_records_before_it():
    r = invoke("rlvr-verify", ["-j", "1"], jsonl(MATH[0], {"id": "x", "verifier": "math"}))
    assert r.code == 3
    assert r.stderr.strip().splitlines()[-1] == "rlvr-verify: error: <stdin>:2: required field is missing (field completions)"
    assert [x["id"] for x in r.records()] == ["a"]


@pytest.mark.parametrize("bad,field,words", [
    ({"verifier": "math"}, "answer", "required field is missing"),
    ({"verifier": "math", "answer": {"x": 7}}, "answer", "must be a number or a string"),
    ({"verifier": "mathz", "answer": "7"}, "verifier", "unknown verifier 'mathz'"),
    ({"verifier": "code", "test": "assert f() == 1"}, "entry_point", "needs `entry_point`"),
    ({"verifier": "code"}, "tests", "no tests"),
    ({"verifier": "code", "tests": ["x = 1", "# nothing checked"]}, "tests", "contain no assert"),
    ({"verifier": "code", "test": "def check(c):\n    c(1)\n", "entry_point": "f"}, "test", "no assert or raise"),
    ({"verifier": "code", "test": "def check(:", "entry_point": "f"}, "test", "unusable tests"),
    ({"verifier": "ifeval", "instruction_id_list": ["nope:x"], "kwargs": [{}]}, "instruction_id_list", "unknown ifeval"),
    ({"verifier": "ifeval", "instruction_id_list": "punctuation:no_comma"}, "instruction_id_list", "must be a list"),
    ({"verifier": "ifbench", "instruction_id_list": ["count:word_count_range"], "kwargs": [{"bogus": 1}]}, "kwargs",
     "unexpected keyword argument 'bogus'"),
])
def test_cli_records_that_cannot_be_graded_are_bad_input_at_their_line(bad, field, words):
    rec = {"id": "x", "completions": ["7"], **bad}
    r = invoke("rlvr-verify", ["-j", "1"], jsonl(MATH[0], rec, MATH[1]))
    assert r.code == 3, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("rlvr-verify: error: <stdin>:2: ") and words in last and last.endswith(f"(field {field})")
    assert [x["id"] for x in r.records()] == ["a"]
    r = invoke("rlvr-verify", ["-j", "1", "--keep-going"], jsonl(MATH[0], rec, MATH[1]))   # N in, N out
    out = r.records()
    assert r.code == 0 and len(out) == 3 and out[1]["error"]["field"] == field and out[2]["rewards"] == [1.0]
    if field not in ("verifier",) and "must be a list" not in words:  # (those break the record contract itself)
        # a record with nothing to grade is not checked against its verifier
        assert invoke("rlvr-verify", ["-j", "1"], jsonl({**rec, "completions": []})).code == 0


def test_cli_a_record_check_that_itself_fails_leaves_the_verdict_to_the_worker():
    # tests nested too deeply for Python's parser: the check in the reading process gives
    # up (MemoryError/RecursionError) instead of ending the run; every record comes out
    deep = {"id": "x", "verifier": "code", "tests": ["assert f(" + "-" * 200000 + "1) == 1"], "completions": [""]}
    r = invoke("rlvr-verify", ["-j", "1"], jsonl(MATH[0], deep, MATH[1]))
    assert r.code == 0, r.stderr
    assert [x["id"] for x in r.records()] == ["a", "x", "b"] and len(r.records()[1]["verdicts"]) == 1


def test_cli_integers_beyond_64_bits_anywhere_in_a_record_are_graded_exactly():
    big = 123456789012345678901234567890
    rec = {"id": "x", "verifier": "math", "answer": big, "meta": {"seed": 2 ** 64},
           "completions": [f"The answer is {big}", f"The answer is {big + 1}"]}
    from rlvr.records import dumps

    r = invoke("rlvr-verify", ["-j", "1"], dumps(rec))
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["rewards"] == [1.0, 0.0] and out["meta"] == {"seed": 2 ** 64} and out["answer"] == big


def test_cli_reverifies_records_whose_old_rewards_no_longer_match():
    # completions re-rolled since the last verification: old rewards/verdicts are replaced
    stale = {**MATH[1], "rewards": [1.0, 0.0, 0.0], "verdicts": [{"status": "correct"}]}
    r = invoke("rlvr-verify", ["-j", "1"], jsonl(stale))
    assert r.code == 0, r.stderr
    out = r.records()[0]
    assert out["rewards"] == [1.0] and len(out["verdicts"]) == 1
    # elsewhere the mismatch is still bad input
    assert invoke("rlvr-passk", [], jsonl(stale)).code == 3


def test_cli_keep_going_passes_error_records_through():
    r = invoke("rlvr-verify", ["-j", "1", "--keep-going"], jsonl(MATH[0]) + "{oops\n" + jsonl(MATH[1]))
    assert r.code == 0, r.stderr
    out = r.records()
    assert len(out) == 3 and out[1]["error"]["line"] == 2 and "rewards" not in out[1]
    assert out[2]["rewards"] == [1.0]


def test_cli_runs_as_a_program_and_survives_a_closed_pipe(tmp_path):
    import subprocess

    f = tmp_path / "in.jsonl"
    f.write_text(jsonl(*(MATH * 200)))
    code = "from rlvr.commands.verify import main; main()"
    p = subprocess.run(f"{sys.executable} -c '{code}' -j 2 {f} | head -n 1", shell=True, capture_output=True,
                       text=True, timeout=120, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert p.returncode == 0
    assert len(p.stdout.splitlines()) == 1 and json.loads(p.stdout)["rewards"] == [1.0, 0.0, 0.0]
    assert "Traceback" not in p.stderr, p.stderr
