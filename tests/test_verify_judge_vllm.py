"""The LLM judge against a real OpenAI-compatible server: `vllm serve` (vLLM's api_server) of
the tiny model on the CPU, started here and stopped at the end. The tiny model's weights are
random, so its replies are noise: what is checked is the protocol (chat and completions
requests, the reply kept in every verdict, a verdict or judge_unparsable for each completion,
the cache on a second pass), not the grades."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import urllib.request

import pytest

from helpers import invoke, jsonl
from machine_time import wait_for

pytest.importorskip("vllm")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve_command(model_dir: str, port: int) -> tuple[list[str], dict]:
    """`vllm serve` of a model on the CPU, and what its environment adds: the in-run judge
    engine's own command (rlvr.train.judge_engines), served as `judge` on 127.0.0.1."""
    from rlvr.train.judge_engines import DEFAULTS, serve_args, serve_env

    s = {**DEFAULTS, "max_model_len": 512}
    args = serve_args(model_dir, port, s, on_gpu=False)
    args[args.index("--host") + 1] = "127.0.0.1"
    return args, serve_env(s, on_gpu=False)


def _healthy(url: str, proc) -> bool:
    if proc.poll() is not None:
        raise AssertionError(f"vllm serve exited with {proc.returncode} before it was ready")
    try:
        with urllib.request.urlopen(url + "/health", timeout=2) as r:
            return r.status == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def vllm_server(tiny_model_dir, tmp_path_factory):
    port = _free_port()
    log = open(tmp_path_factory.mktemp("vllm") / "serve.log", "wb")
    args, added = serve_command(tiny_model_dir, port)
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1", "OMP_NUM_THREADS": "1", **added}
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, env=env,
                            start_new_session=True, stdin=subprocess.DEVNULL)
    root = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: _healthy(root, proc), 300, "vllm serve's /health")
        yield root + "/v1"
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


RUBRIC = "Rate this answer to {prompt} from 0 to 10.\n{completion}\nScore:"


@pytest.mark.parametrize("api", ["chat", "completions"])
def test_judge_protocol_against_vllm_serve(vllm_server, tmp_path, api):
    recs = [{"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
             "completions": [f"It is {2 * i}.", "I do not know."]} for i in range(3)]
    args = ["--verifier", "judge", "--judge", vllm_server, "--judge-model", "judge", "--judge-rubric", RUBRIC,
            "--judge-cache", str(tmp_path / "cache"), "--set", "judge.max_tokens=8", "--set", f"judge.api={api}",
            "-j", "2", "--summary=" + str(tmp_path / "s.json")]
    r = invoke("rlvr-verify", args, jsonl(*recs))
    assert r.code == 0, r.stderr
    out = r.records()
    assert [x["id"] for x in out] == ["q0", "q1", "q2"]
    verdicts = [v for x in out for v in x["verdicts"]]
    assert len(verdicts) == 6
    for v in verdicts:
        assert v["status"] in ("correct", "wrong", "judge_unparsable"), v
        assert isinstance(v["judge"]["reply"], str) and v["judge"] == {**v["judge"], "model": "judge",
                                                                       "cached": False, "attempts": 1}
        if v["status"] == "judge_unparsable":
            assert v["extracted"] is None and "no score" in v["error"]
        else:
            assert 0.0 <= v["score"] <= 1.0
    # the same input again: every reply comes from the cache, the verdicts are the same
    again = invoke("rlvr-verify", args, jsonl(*recs)).records()
    assert all(v["judge"]["cached"] for x in again for v in x["verdicts"])
    strip = lambda x: [(v["status"], v.get("score"), v["judge"]["reply"]) for v in x["verdicts"]]  # noqa: E731
    assert [strip(x) for x in again] == [strip(x) for x in out]
