"""rlvr-train with `verify.judge.engine`: the run starts vLLM's OpenAI-compatible server for the
judge (the tiny model, on the CPU: num_gpus 0) on a Ray actor of its own, points the LLM judge
at it, trains on its rewards, restarts it when it dies mid-run, and stops it when the run ends.
The tiny model's replies are noise: what is checked is that every verdict is the in-run judge's
(its reply kept, its status mapped to the reward table) or, while it is down, an error, the
plan counts it, and nothing of it outlives the run. One run pays for every server start: the
judge's protocol against that real `vllm serve` (chat and completions requests through
rlvr-verify --judge, the reply kept in every verdict, a verdict or judge_unparsable for each
completion, the cache on a second pass) is checked on the run's own server while it is up."""

from __future__ import annotations

import os
import urllib.request

import orjson
import pytest

from rlvr.config_loader import load_config
from rlvr.errors import ConfigError
from rlvr.train.config import TrainConfig
from rlvr.train.judge_engines import serve_args, serve_env
from rlvr.train.plan import Cluster, Node, make_plan
from helpers import invoke, jsonl
from machine_time import wait_for
from test_train import SMALL, TINY, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures
from test_train_plan import GSM8K, qwen, qwen_dir  # noqa: F401 - fixture

RUBRIC = "Rate this answer to {prompt} from 0 to 10.\n{completion}\nScore:"
TABLE = {"correct": 1.0, "wrong": 0.0, "judge_unparsable": 0.25, "error": 0.0}


def test_engine_section_is_checked_and_kept_apart_from_the_judge_options():
    cfg = load_config(TrainConfig, TINY, ["verify.judge.engine.model=Org/Judge", "verify.judge.engine.num_gpus=2"])
    assert cfg.verify.judge_engine == {"model": "Org/Judge", "num_gpus": 2}
    assert cfg.verify.verifier_config["judge"] == {"model": "judge"}   # base_url comes when the server is up
    for sets, msg in [(["verify.judge.engine.num_gpus=1"], r"engine\.model is required"),
                      (["verify.judge.engine.model=m", "verify.judge.engine.port=1"], "unknown option"),
                      (["verify.judge.engine.model=m", "verify.judge.engine.max_model_len=0"], "positive integer"),
                      (["verify.judge.engine.model=m", "verify.judge.base_url=http://x/v1"], "give one")]:
        with pytest.raises(ConfigError, match=msg):
            load_config(TrainConfig, TINY, sets)


def test_plan_counts_the_judge_engine_and_refuses_it_on_a_shared_gpu(qwen_dir):  # noqa: F811
    def plan(gpus, *sets):
        cfg = load_config(TrainConfig, GSM8K, [f"model.path={qwen_dir}", "verify.judge.engine.model=m", *sets])
        return make_plan(cfg, Cluster([Node(64, gpus, 80.0, "n")], "planned"), qwen())

    base = make_plan(load_config(TrainConfig, GSM8K, [f"model.path={qwen_dir}"]),
                     Cluster([Node(64, 8, 80.0, "n")], "planned"), qwen())
    assert base["fits"]
    used = {g for a in base["actors"] for g in a["gpu_ids"]}
    p = plan(len(used) + 1, "verify.judge.engine.num_gpus=1")
    [j] = [a for a in p["actors"] if a["role"] == "judge"]
    assert p["fits"] and j["gpus"] == 1 and j["gpu_ids"] == [len(used)]
    p = plan(len(used), "verify.judge.engine.num_gpus=1")
    assert not p["fits"] and any("1 judge(s)" in x for x in p["problems"])
    # on a GPU with a trainer rank: refused (vLLM's server takes its fraction of the whole GPU)
    p = plan(6, "verify.judge.engine.num_gpus=0.5", "train.trainer_num_gpus=0.5", "train.num_trainers=3")
    assert not p["fits"] and any("judge engine shares GPU" in x and "trainer" in x for x in p["problems"])


def test_serve_args_on_the_cpu_and_on_gpus():
    s = {"dtype": "auto", "max_model_len": 512, "tensor_parallel_size": 1, "gpu_memory_utilization": 0.8,
         "extra_args": ["--seed", "3"]}
    cpu = serve_args("/m", 8001, s, on_gpu=False)
    assert cpu[cpu.index("--dtype") + 1] == "float32" and "--enforce-eager" in cpu and "--gpu-memory-utilization" not in cpu
    gpu = serve_args("/m", 8001, s, on_gpu=True)
    assert gpu[gpu.index("--dtype") + 1] == "auto" and gpu[gpu.index("--gpu-memory-utilization") + 1] == "0.8"
    assert cpu[cpu.index("--distributed-executor-backend") + 1] == "uni" and "--distributed-executor-backend" not in gpu
    assert serve_env(s, on_gpu=False) == {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} and serve_env(s, on_gpu=True) == {}
    tp2 = {**s, "tensor_parallel_size": 2}
    assert serve_env(tp2, on_gpu=False) == {} and "--distributed-executor-backend" not in serve_args("/m", 1, tp2, False)
    assert "--enforce-eager" not in gpu and gpu[-2:] == ["--seed", "3"] and gpu[gpu.index("--port") + 1] == "8001"


def check_protocol(url: str, cache: str, api: str) -> None:
    """rlvr-verify --judge URL against a real OpenAI-compatible server serving the model as
    `judge`: every completion gets a verdict or judge_unparsable with the reply kept, in order;
    the same input again comes from the cache with the same verdicts."""
    recs = [{"id": f"q{i}", "prompt": f"What is {i} + {i}?", "answer": str(2 * i),
             "completions": [f"It is {2 * i}.", "I do not know."]} for i in range(3)]
    args = ["--verifier", "judge", "--judge", url, "--judge-model", "judge", "--judge-rubric", RUBRIC,
            "--judge-cache", cache, "--set", "judge.max_tokens=8", "--set", f"judge.api={api}", "-j", "2"]
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
    again = invoke("rlvr-verify", args, jsonl(*recs)).records()
    assert all(v["judge"]["cached"] for x in again for v in x["verdicts"])
    strip = lambda x: [(v["status"], v.get("score"), v["judge"]["reply"]) for v in x["verdicts"]]  # noqa: E731
    assert [strip(x) for x in again] == [strip(x) for x in out]


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url[:-3] + "/health", timeout=5) as r:
            return r.status == 200
    except OSError:
        return False


def test_training_rewards_come_from_the_in_run_judge_engine_restarted_when_it_dies(ray_session, base_model,  # noqa: F811
                                                                                  tmp_path, monkeypatch):
    """One run of three steps: the judge's server is killed (its process group, SIGKILL) once step
    1 is checked, so step 2's completions are judged while it is down: each gets an error verdict
    (reward per the table), none is lost; the run restarts the server on the same URL after step
    2's verification, and step 3's verdicts are its replies again."""
    import signal

    import ray

    from rlvr.train.judge_engines import JudgeEngineMode

    pytest.importorskip("vllm")
    run_dir = tmp_path / "run"
    killed: list[int] = []
    protocol: list[str] = []
    extend = JudgeEngineMode.extend

    def extend_then_kill(self, run_, assembled, groups, step):
        extend(self, run_, assembled, groups, step)
        if step == 0:   # after step 1's check of the server: it is down for step 2's verification
            man = orjson.loads((run_dir / "run.json").read_bytes())["judge_engine"]
            for api in ("chat", "completions"):   # the protocol, on the run's own vllm serve
                check_protocol(man["url"], str(tmp_path / f"cache-{api}"), api)
                protocol.append(api)
            os.killpg(man["server_pid"], signal.SIGKILL)
            killed.append(man["server_pid"])
            wait_for(lambda: not _up(man["url"]), 60, "the killed judge server's port to close")

    monkeypatch.setattr(JudgeEngineMode, "extend", extend_then_kill)
    cfg = cfg_for(base_model, "train.steps=3", "checkpoint.every=0", *SMALL, "rollout.prompts_per_step=4",
                  "rollout.n=2", "verify.judge.engine.model=tiny",
                  "verify.judge.engine.num_gpus=0", "verify.judge.engine.max_model_len=512",
                  f"verify.judge.rubric={RUBRIC}", "verify.judge.max_tokens=6", "verify.judge.backoff=0",
                  "verify.judge.retries=1", f"verify.judge.cache={tmp_path / 'cache'}",
                  "verify.reward_table.judge_unparsable=0.25")
    assert cfg.verify.judge_engine["model"] == "tiny" and "base_url" not in cfg.verify.verifier_config["judge"]
    run(cfg, run_dir)
    manifest = orjson.loads(open(run_dir / "run.json", "rb").read())
    judge = manifest["judge_engine"]
    url = judge["url"]
    assert url.startswith("http://") and url.endswith("/v1") and judge["model"] == "tiny"
    assert len(killed) == 1 and judge["restarts"] == 1 and judge["server_pid"] != killed[0]
    assert protocol == ["chat", "completions"]
    rows = trace(run_dir)
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert [r["faults/judge_engine_restarts"] for r in rows] == [0, 1, 1]   # restarted after step 2's verification
    recs = [orjson.loads(ln) for ln in open(run_dir / "traces" / "rollouts.jsonl", "rb")]
    assert sorted(r["step"] for r in recs) == [1] * 4 + [2] * 4 + [3] * 4   # every prompt accounted for
    for r in recs:
        assert len(r["verdicts"]) == 2 and r["rewards"] == [TABLE[v["status"]] for v in r["verdicts"]]
        for v in r["verdicts"]:
            assert v["verifier"] == "judge", v
            if r["step"] == 2:   # the server was down: an error naming the endpoint, after every attempt
                assert v["status"] == "error" and url in v["error"] and v["judge"]["attempts"] == 2, v
            else:                # the in-run judge's replies, before and after the restart
                assert v["status"] in TABLE and v["status"] != "error", v
                assert isinstance(v["judge"]["reply"], str) and v["judge"]["model"] == "judge"
    # the server and its actor are gone with the run
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if (a["name"] if isinstance(a, dict) else a).startswith("rlvr-judge-")]
    with pytest.raises(OSError):
        urllib.request.urlopen(url[:-3] + "/health", timeout=5)


def test_a_server_that_exits_before_it_is_ready_is_one_line_and_leaves_nothing(ray_session, base_model,  # noqa: F811
                                                                              tmp_path, monkeypatch):
    """The mode's start through Ray with a server that fails before /health answers. The server is a
    stand-in given the server's command line that exits 2 with an argument parser's line naming
    its last argument, the extra one (vLLM's own parser says the same after a minute of imports
    on a small machine)."""
    import ray

    from rlvr.errors import Failure
    from rlvr.models import local_model
    from rlvr.train import judge_engines
    from rlvr.train.cluster import Cluster
    from rlvr.train.metrics import Faults

    class Refused(judge_engines.JudgeServer):   # defined here: Ray sends it to the actor by value
        def _spawn(self):
            import subprocess
            import sys

            args = judge_engines.serve_args(self.model_dir, self.port, self.s, on_gpu=False)[3:]
            with open(self.log_path, "ab") as log:
                self.proc = subprocess.Popen(
                    [sys.executable, "-c", "import sys; print('api_server.py: error: unrecognized arguments:', "
                                           "sys.argv[-1]); sys.exit(2)", *args], stdout=log, stderr=log)

    monkeypatch.setattr(judge_engines, "JudgeServer", Refused)
    cfg = load_config(TrainConfig, TINY, ["verify.judge.engine.model=base", "verify.judge.engine.num_gpus=0",
                                          "verify.judge.engine.extra_args=[--no-such-flag]"])
    os.makedirs(tmp_path / "run")
    run_ = type("Run", (), {})()   # the parts of rlvr.train.loop.Run the mode uses
    run_.cfg, run_.run_dir, run_.faults = cfg, str(tmp_path / "run"), Faults()
    run_.cluster, run_.base = Cluster(cfg, run_.run_dir, "t"), local_model(base_model)
    mode = judge_engines.JudgeEngineMode(run_)
    try:
        with pytest.raises(Failure, match=r"judge engine's vLLM server exited with 2 before it was ready: .*"
                                          r"--no-such-flag"):
            mode.start(run_)
    finally:
        mode.close()
    assert "base_url" not in cfg.verify.verifier_config["judge"]
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if (a["name"] if isinstance(a, dict) else a) == "rlvr-judge-t"]
