"""The LLM judge (rlvr.verifiers.judge) against a scripted OpenAI-compatible server on 127.0.0.1:
replies, 5xx, timeouts, garbage bodies and unparsable replies each end in a verdict or an error
status (nothing lost), the on-disk cache spares a second call, the four combination modes with
a rule verifier, rlvr-verify's options, and AllenAI's judge-graded rows.
(The protocol against a real `vllm serve`: tests/test_train_judge_engine.py, on the run's own server.)"""

from __future__ import annotations

import collections
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from helpers import invoke, jsonl
from rlvr.verification.pool import VerifierPool
from rlvr.verifiers import judge


class Script:
    """What the server does, chosen by a word in the completion being judged."""

    def __init__(self):
        self.calls = collections.Counter()   # word -> requests seen
        self.bodies: list[dict] = []
        self.lock = threading.Lock()


def _word(text: str) -> str:
    for w in ("GOOD", "BAD", "GARBAGE", "FLAKY", "DOWN", "SLOW", "BODY", "REFUSE", "YES", "NO"):
        if f"<<{w}>>" in text:
            return w
    return "GOOD"


def _handler(script: Script):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def _send(self, code: int, body: bytes):
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            try:
                self.wfile.write(body)
            except OSError:
                pass

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            text = body["messages"][0]["content"] if "messages" in body else body["prompt"]
            w = _word(text)
            with script.lock:
                script.calls[w] += 1
                n = script.calls[w]
                script.bodies.append({"path": self.path, "auth": self.headers.get("Authorization"), **body})
            if w == "DOWN" or (w == "FLAKY" and n == 1):
                return self._send(503, b'{"error": "overloaded"}')
            if w == "SLOW" and n == 1:
                time.sleep(8.0)   # past the client's per-call timeout: the retry gets the reply
            if w == "BODY":
                return self._send(200, b"<html>not json</html>")
            if w == "REFUSE":
                return self._send(400, b'{"error": "bad request"}')
            reply = {"GOOD": "Score: 9", "BAD": "The response is poor.\nScore: 2", "GARBAGE": "I like turtles",
                     "FLAKY": "Score: 7", "SLOW": "8", "YES": "Answer: yes", "NO": "no, it is not"}[w]
            if self.path.endswith("/chat/completions"):
                out = {"choices": [{"message": {"role": "assistant", "content": reply}}]}
            else:
                out = {"choices": [{"text": reply}]}
            self._send(200, json.dumps(out).encode())

    return H


@pytest.fixture()
def server():
    script = Script()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _handler(script))
    srv.daemon_threads = True
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    script.url = f"http://127.0.0.1:{srv.server_address[1]}/v1"
    yield script
    srv.shutdown()
    srv.server_close()


def _opts(server, tmp_path, **kw):
    return {"base_url": server.url, "model": "judge-m", "timeout": 3.0, "retries": 2, "backoff": 0.0,
            "cache": str(tmp_path / "cache"), **kw}


def _rec(i, *completions, **kw):
    return {"id": f"r{i}", "prompt": "Write a haiku about rain.", "completions": list(completions), **kw}


def test_every_failure_ends_in_a_verdict(server, tmp_path):
    recs = [_rec(0, "<<GOOD>>", "<<BAD>>"), _rec(1, "<<GARBAGE>>", "<<FLAKY>>"), _rec(2, "<<DOWN>>", "<<SLOW>>"),
            _rec(3, "<<BODY>>", "<<REFUSE>>")]
    with VerifierPool(jobs=2, config={"judge": _opts(server, tmp_path)}, verifier="judge") as pool:
        out = pool.verify_all(recs)
    assert [r["id"] for r in out] == ["r0", "r1", "r2", "r3"]
    v = [x for r in out for x in r["verdicts"]]
    good, bad, garbage, flaky, down, slow, body, refuse = v
    assert (good["status"], good["score"], good["extracted"]) == ("correct", 0.9, "9")
    assert good["judge"] == {"model": "judge-m", "cached": False, "attempts": 1, "reply": "Score: 9"}
    assert (bad["status"], bad["score"]) == ("wrong", 0.2)
    assert garbage["status"] == "judge_unparsable" and garbage["judge"]["reply"] == "I like turtles"
    assert (flaky["status"], flaky["judge"]["attempts"]) == ("correct", 2)
    assert down["status"] == "error" and "HTTP 503" in down["error"] and "3 attempts" in down["error"]
    assert (slow["status"], slow["judge"]["attempts"]) == ("correct", 2)
    assert body["status"] == "error" and "bad reply" in body["error"]
    assert refuse["status"] == "error" and "HTTP 400" in refuse["error"] and refuse["judge"]["attempts"] == 1
    assert server.calls["DOWN"] == 3 and server.calls["REFUSE"] == 1 and server.calls["BODY"] == 3
    assert out[0]["rewards"] == [1.0, 0.0] and out[1]["rewards"] == [0.0, 1.0]
    assert {v["verifier"] for v in v} == {"judge"}
    from rlvr.verification.summary import format_text, summarize

    s = summarize(out)
    assert s["all"]["status"] == {"correct": 3, "wrong": 1, "no_answer": 0, "timeout": 0, "error": 3,
                                  "unfinished_thinking": 0, "judge_unparsable": 1}
    head = format_text(s).splitlines()[0].split()
    assert head[-1] == "judge_unparsable" and "judge_unparsable" not in format_text(summarize(out[:1]))


def test_slow_replies_past_every_attempt_time_out(server, tmp_path):
    opts = _opts(server, tmp_path, retries=0, timeout=0.5)
    with VerifierPool(jobs=1, config={"judge": opts}, verifier="judge") as pool:
        (out,) = pool.verify_all([_rec(0, "<<SLOW>>")])
    assert out["verdicts"][0]["status"] == "timeout" and "no reply within 0.5 s" in out["verdicts"][0]["error"]


def test_cache_spares_the_second_call(server, tmp_path):
    opts = {"judge": _opts(server, tmp_path)}
    with VerifierPool(jobs=1, config=opts, verifier="judge") as pool:
        first = pool.verify_all([_rec(0, "<<GOOD>>", "<<GARBAGE>>")])
        second = pool.verify_all([_rec(0, "<<GOOD>>", "<<GARBAGE>>")])
    assert server.calls["GOOD"] == 1 and server.calls["GARBAGE"] == 1
    assert [v["judge"]["cached"] for v in first[0]["verdicts"]] == [False, False]
    assert [v["judge"]["cached"] for v in second[0]["verdicts"]] == [True, True]
    assert [v["status"] for v in second[0]["verdicts"]] == ["correct", "judge_unparsable"]
    # a different rubric is a different key; no cache: every verification calls
    with VerifierPool(jobs=1, config={"judge": {**opts["judge"], "rubric": "Grade {completion}. Score 0-10."}},
                      verifier="judge") as pool:
        pool.verify_all([_rec(0, "<<GOOD>>")])
    with VerifierPool(jobs=1, config={"judge": {**opts["judge"], "cache": False}}, verifier="judge") as pool:
        pool.verify_all([_rec(0, "<<GOOD>>")])
    assert server.calls["GOOD"] == 3


def test_rubric_request_and_per_dataset_templates(server, tmp_path, monkeypatch):
    monkeypatch.setenv("JUDGE_KEY", "sekret")
    opts = _opts(server, tmp_path, api_key_env="JUDGE_KEY", rubric="Q={prompt} A={completion} REF={answer} {{x}}",
                 rubrics={"poems": "POEM {completion}"}, api="completions", max_tokens=7)
    rec = {"id": "a", "prompt": [{"role": "user", "content": "hi"}], "answer": "42", "completions": ["<<YES>>"]}
    with VerifierPool(jobs=1, config={"judge": opts}, verifier="judge") as pool:
        pool.verify_all([rec, {**rec, "id": "b", "dataset": "poems"}])
    a, b = server.bodies
    assert a["path"] == "/v1/completions" and a["auth"] == "Bearer sekret"
    assert a["prompt"] == "Q=user: hi A=<<YES>> REF=42 {x}"
    assert (a["model"], a["max_tokens"], a["temperature"]) == ("judge-m", 7, 0.0)
    assert b["prompt"] == "POEM <<YES>>"


def test_yes_no_parser():
    o = judge.options({"parser": "yes_no"})
    assert judge.parse("Answer: yes", o) == (1.0, "yes")
    assert judge.parse("No. It rambles.", o) == (0.0, "no")
    assert judge.parse("Maybe", o) is None
    n = judge.options({})
    assert judge.parse("**Score:** 10", n) == (1.0, "10")
    assert judge.parse("7/10", n) == (0.7, "7")
    assert judge.parse("Score: 11", n) is None          # off the scale: unparsable, not clipped
    assert judge.parse("", n) is None


def _math(i, completion, answer="4"):
    return {"id": f"m{i}", "prompt": "2+2?", "answer": answer, "verifier": "math", "completions": [completion]}


@pytest.mark.parametrize("mode", ["judge", "rule", "weighted", "gate"])
def test_combinations_with_the_rule_verifier(server, tmp_path, mode):
    recs = [_math(0, "4 <<GOOD>>"), _math(1, "4 <<BAD>>"), _math(2, "5 <<GOOD>>"), _math(3, "5 <<BAD>>"),
            _math(4, "4 <<GARBAGE>>")]
    with VerifierPool(jobs=1, config={"judge": _opts(server, tmp_path, mode=mode, weight=0.5)},
                      reward_mode="fraction") as pool:
        out = pool.verify_all(recs)
    st = [r["verdicts"][0]["status"] for r in out]
    rw = [r["rewards"][0] for r in out]
    if mode == "judge":
        assert st == ["correct", "wrong", "correct", "wrong", "judge_unparsable"] and rw == [0.9, 0.2, 0.9, 0.2, 0.0]
    elif mode == "rule":
        assert st == ["correct", "correct", "wrong", "wrong", "correct"] and sum(server.calls.values()) == 0
    elif mode == "weighted":
        assert rw == [0.95, 0.6, 0.45, 0.1, 0.0] and st[:4] == ["correct", "correct", "wrong", "wrong"]
        assert out[0]["verdicts"][0]["rule"]["status"] == "correct" and out[0]["verdicts"][0]["judge_score"] == 0.9
        assert st[4] == "judge_unparsable"
    else:  # gate: the judge can only take a rule reward away; a rule-wrong answer is not sent
        assert st == ["correct", "wrong", "wrong", "wrong", "judge_unparsable"] and rw == [1.0, 0.0, 0.0, 0.0, 0.0]
        assert out[1]["verdicts"][0]["gated"] is True and out[1]["verdicts"][0]["extracted"] == "4"
        assert server.calls["GOOD"] == 1   # 5 <<GOOD>> and 5 <<BAD>> never reached the judge
    assert {r["verdicts"][0]["verifier"] for r in out} == {"math" if mode == "rule" else "judge"}


def test_datasets_select_what_is_judged(server, tmp_path):
    recs = [{**_math(0, "4 <<BAD>>"), "dataset": "chat"}, {**_math(1, "4 <<BAD>>"), "dataset": "gsm8k"}]
    with VerifierPool(jobs=1, config={"judge": _opts(server, tmp_path, datasets=["chat"])}) as pool:
        out = pool.verify_all(recs)
    assert [(r["verdicts"][0]["verifier"], r["verdicts"][0]["status"]) for r in out] == [("judge", "wrong"),
                                                                                         ("math", "correct")]


def test_bad_options_are_config_errors(tmp_path):
    for bad, msg in [({"model": "m"}, "base_url is required"), ({"base_url": "x", "model": "m"}, "http"),
                     ({"base_url": "http://h/v1", "model": "m", "rubric": "{nope}"}, "not a valid template"),
                     ({"base_url": "http://h/v1", "model": "m", "mode": "vote"}, "judge.mode"),
                     ({"base_url": "http://h/v1", "model": "m", "api_key_env": "RLVR_NO_SUCH_VAR"}, "not set"),
                     ({"base_url": "http://h/v1", "model": "m", "colour": 1}, "unknown judge option")]:
        with pytest.raises(ValueError, match=msg):
            VerifierPool(jobs=1, config={"judge": bad})


def test_rlvr_verify_judge_options(server, tmp_path):
    rubric = tmp_path / "rubric.txt"
    rubric.write_text("Rate {completion} for {prompt}. Score: N")
    args = ["--judge", server.url, "--judge-model", "judge-m", "--judge-rubric", str(rubric), "--judge-mode", "gate",
            "--judge-cache", str(tmp_path / "c"), "--set", "judge.backoff=0", "-j", "1"]
    r = invoke("rlvr-verify", args, jsonl(_math(0, "4 <<BAD>>"), _math(1, "4 <<GOOD>>")))
    assert r.code == 0, r.stderr
    assert [x["rewards"] for x in r.records()] == [[0.0], [1.0]]
    assert server.bodies[0]["messages"][0]["content"].startswith("Rate 4 <<BAD>> for 2+2?")
    # a record for the judge without a judge: bad input at its line, naming the field
    r = invoke("rlvr-verify", [], jsonl({"id": "x", "prompt": "hi", "verifier": "judge", "completions": ["a"]}))
    assert r.code == 3 and "<stdin>:1:" in r.stderr and "none is configured" in r.stderr and "(field verifier)" in r.stderr
    r = invoke("rlvr-verify", ["--judge", "ftp://x", "--judge-model", "m"], jsonl(_math(0, "4")))
    assert r.code == 2 and "http(s) URL" in r.stderr


def test_allenai_judge_rows_become_judge_records():
    from rlvr.data.allenai import convert
    from rlvr.errors import RowError

    row = {"messages": [{"role": "user", "content": "Tell me about owls."}], "ground_truth": "Owls are birds.",
           "dataset": ["general-quality_ref"], "id": 7}
    rec = convert(row, 0, "train")
    assert rec["verifier"] == "judge" and rec["dataset"] == "allenai/general-quality_ref"
    assert rec["answer"] == "Owls are birds." and rec["question"] == "Tell me about owls."
    rec = convert({**row, "dataset": "general-quality", "ground_truth": None}, 0, "train")
    assert rec["verifier"] == "judge" and "answer" not in rec
    with pytest.raises(RowError, match="'string_f1' cannot be verified here"):
        convert({**row, "dataset": "string_f1"}, 0, "train")


def test_training_config_judge_section_reaches_the_pool(server, tmp_path):
    """verify.judge in rlvr-train's config lands in verify.verifier_config, the options the
    training driver hands to its VerifierPool; a bad option is a config error naming the key."""
    from rlvr.errors import ConfigError
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig

    cfg_file = tmp_path / "c.yaml"
    cfg_file.write_text(f"verify:\n  judge:\n    base_url: {server.url}\n    model: judge-m\n    mode: gate\n"
                        f"    cache: {tmp_path / 'cache'}\n  verifier_config: {{math.mode: default}}\n")
    cfg = load_config(TrainConfig, str(cfg_file))
    vc = cfg.verify.verifier_config
    assert vc["judge"]["mode"] == "gate" and vc["math.mode"] == "default"
    with VerifierPool(jobs=1, config=dict(vc)) as pool:   # as rlvr/train/loop.py builds its pool
        out = pool.verify_all([_math(0, "4 <<BAD>>"), _math(1, "4 <<GOOD>>")])
    assert [r["rewards"] for r in out] == [[0.0], [1.0]]
    with pytest.raises(ConfigError, match="verify.judge: judge.model is required"):
        load_config(TrainConfig, None, ["verify.judge.base_url=http://h/v1"])
