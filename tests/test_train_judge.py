"""rlvr-train with `verify.judge`: the training run's verifier pool asks the judge (a scripted
OpenAI-compatible server on 127.0.0.1, tests/test_verify_judge.py) for every completion, and the
rewards it trains on are the judge's, as traces/rollouts.jsonl shows. One step on the tiny
model with the hf engine."""

from __future__ import annotations

import os

import orjson

from test_train import SMALL, base_model, cfg_for, ray_session, run  # noqa: F401 - fixtures
from test_verify_judge import server  # noqa: F401 - fixture


def test_training_rewards_come_from_the_judge(ray_session, base_model, server, tmp_path):  # noqa: F811
    cfg = cfg_for(base_model, "train.steps=1", "checkpoint.every=0", *SMALL, f"verify.judge.base_url={server.url}",
                  "verify.judge.model=judge-m", f"verify.judge.cache={tmp_path / 'cache'}", "verify.judge.backoff=0")
    run(cfg, tmp_path / "run")
    recs = [orjson.loads(ln) for ln in open(os.path.join(tmp_path / "run", "traces", "rollouts.jsonl"), "rb")]
    verdicts = [v for r in recs for v in r.get("verdicts") or []]
    assert len(verdicts) == 8 * 4
    assert all(v["verifier"] == "judge" and v["judge"]["reply"] == "Score: 9" and v["score"] == 0.9
               for v in verdicts)
    assert all(rw == 1.0 for r in recs for rw in r["rewards"])
    assert 1 <= server.calls["GOOD"] <= 32     # identical completions share one call through the cache
