"""rlvr-train with `verify.judge.engine`: the run starts vLLM's OpenAI-compatible server for the
judge (the tiny model, on the CPU: num_gpus 0) on a Ray actor of its own, points the LLM judge
at it, trains on its rewards, and stops it when the run ends. The tiny model's replies are
noise: what is checked is that every verdict is the in-run judge's (its reply kept, its
status mapped to the reward table), the plan counts it, and nothing of it outlives the run."""

from __future__ import annotations

import os
import urllib.request

import orjson
import pytest

from rlvr.config_loader import load_config
from rlvr.errors import ConfigError
from rlvr.train.config import TrainConfig
from rlvr.train.judge_engines import serve_args
from rlvr.train.plan import Cluster, Node, make_plan
from test_train import SMALL, TINY, base_model, cfg_for, ray_session, run  # noqa: F401 - fixtures
from test_train_plan import GSM8K, qwen, qwen_dir  # noqa: F401 - fixture

RUBRIC = "Rate this answer to {prompt} from 0 to 10.\n{completion}\nScore:"
TABLE = {"correct": 1.0, "wrong": 0.0, "judge_unparsable": 0.25}


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
    assert "--enforce-eager" not in gpu and gpu[-2:] == ["--seed", "3"] and gpu[gpu.index("--port") + 1] == "8001"


def test_training_rewards_come_from_the_in_run_judge_engine(ray_session, base_model, tmp_path):  # noqa: F811
    import ray

    pytest.importorskip("vllm")

    cfg = cfg_for(base_model, "train.steps=1", "checkpoint.every=0", *SMALL, "verify.judge.engine.model=tiny",
                  "verify.judge.engine.num_gpus=0", "verify.judge.engine.max_model_len=512",
                  f"verify.judge.rubric={RUBRIC}", "verify.judge.max_tokens=6", "verify.judge.backoff=0",
                  f"verify.judge.cache={tmp_path / 'cache'}", "verify.reward_table.judge_unparsable=0.25")
    assert cfg.verify.judge_engine["model"] == "tiny" and "base_url" not in cfg.verify.verifier_config["judge"]
    run(cfg, tmp_path / "run")
    manifest = orjson.loads(open(tmp_path / "run" / "run.json", "rb").read())
    url = manifest["judge_engine"]["url"]
    assert url.startswith("http://") and url.endswith("/v1") and manifest["judge_engine"]["model"] == "tiny"
    recs = [orjson.loads(ln) for ln in open(os.path.join(tmp_path / "run", "traces", "rollouts.jsonl"), "rb")]
    verdicts = [v for r in recs for v in r.get("verdicts") or []]
    assert len(verdicts) == 8 * 4
    for v in verdicts:
        assert v["verifier"] == "judge" and v["status"] in TABLE, v
        assert isinstance(v["judge"]["reply"], str) and v["judge"]["model"] == "judge"
    for r in recs:
        assert r["rewards"] == [TABLE[v["status"]] for v in r["verdicts"]]
    # the server and its actor are gone with the run
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if (a["name"] if isinstance(a, dict) else a).startswith("rlvr-judge-")]
    with pytest.raises(OSError):
        urllib.request.urlopen(url[:-3] + "/health", timeout=5)


def test_a_server_that_exits_before_it_is_ready_is_one_line_and_leaves_nothing(ray_session, tmp_path):  # noqa: F811
    import ray

    from rlvr.errors import Failure
    from rlvr.train.cluster import Cluster
    from rlvr.train.judge_engines import JudgeEngineMode
    from rlvr.train.metrics import Faults

    pytest.importorskip("vllm")
    cfg = load_config(TrainConfig, TINY, ["verify.judge.engine.model=tiny", "verify.judge.engine.num_gpus=0",
                                          "verify.judge.engine.extra_args=[--no-such-flag]"])
    os.makedirs(tmp_path / "run")
    run_ = type("Run", (), {})()   # the parts of rlvr.train.loop.Run the mode uses
    run_.cfg, run_.run_dir, run_.faults = cfg, str(tmp_path / "run"), Faults()
    run_.cluster = Cluster(cfg, run_.run_dir, "t")
    mode = JudgeEngineMode(run_)
    try:
        with pytest.raises(Failure, match=r"judge engine's vLLM server exited with \d+ before it was ready: .*"
                                          r"no-such-flag"):
            mode.start(run_)
    finally:
        mode.close()
    assert "base_url" not in cfg.verify.verifier_config["judge"]
    assert not [a for a in ray.util.list_named_actors(all_namespaces=True)
                if (a["name"] if isinstance(a, dict) else a) == "rlvr-judge-t"]
