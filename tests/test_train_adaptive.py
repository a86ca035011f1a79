"""The sampling side of rlvr-train. Adaptive sampling (rlvr.train.adaptive) on hand-made verdicts,
without engines: the balanced seeded draw, the stopping rule, the drop rule, the seeds of later
rounds, the config's bounds; then tiny CPU runs through rlvr-train (synchronous and with
max_staleness 1). Generations that cannot hold a step hostage: an engine actor's call stopped by
rollout.timeout_s or by sync.abort_in_flight, the driver's resubmission or drop of what it
stopped, and a step whose every group timed out (the end-to-end timeout and abort runs are in
test_train_faults.py)."""

from __future__ import annotations

import pytest

from rlvr.config_loader import load_config
from rlvr.errors import ConfigError
from rlvr.train.adaptive import adapt, draw_seed, metrics, select
from rlvr.train.batch import Group
from rlvr.train.config import TrainConfig, check


def group(i: int, rewards: list[float], start: int = 0, epoch: int = 0) -> Group:
    samples = [{"text": f"c{start + j}", "token_ids": [1, 2], "finish_reason": "stop", "logprobs": [-0.5, -0.5]}
               for j in range(len(rewards))]
    g = Group({"id": f"p{i}", "prompt": "q"}, epoch, [5, 6], samples, 3, 3)
    g.verified = {"id": f"p{i}", "dataset": "toy", "rewards": list(rewards),
                  "completions": [s["text"] for s in samples], "verdicts": [{"status": "x"}] * len(rewards)}
    return g


def test_the_draw_is_balanced_seeded_and_keeps_sampling_order():
    rewards = [1.0] * 7 + [0.0] * 9
    picks = {tuple(select(rewards, 8, s)) for s in range(20)}
    for p in picks:
        assert list(p) == sorted(p) and len(p) == 8
        assert sum(rewards[i] > 0 for i in p) == 4                    # n // 2 successes, n - n // 2 failures
    assert len(picks) > 1                                              # the seed chooses which
    assert select(rewards, 8, 5) == select(rewards, 8, 5)              # and only the seed
    # a short side gives what it has; the other fills the group
    r = [1.0] + [0.0] * 11
    idx = select(r, 4, 0)
    assert 0 in idx and len(idx) == 4
    r = [0.0, 0.0] + [1.0] * 10
    idx = select(r, 5, 0)
    assert {0, 1} <= set(idx) and len(idx) == 5
    # one outcome only: no group; as many samples as n: all of them
    assert select([0.0] * 8, 4, 0) is None and select([1.0] * 8, 4, 0) is None
    assert select([1.0, 0.0, 0.0, 1.0], 4, 0) == [0, 1, 2, 3]
    # the draw's seed depends on the prompt and its epoch
    assert draw_seed(0, "a", 0) != draw_seed(0, "a", 1) != draw_seed(0, "b", 0)


def test_prompts_are_sampled_until_k_pos_and_k_neg_or_max_n_and_one_outcome_prompts_are_dropped():
    # p0 has both outcomes at once; p1 needs one more round for its failure; p2 never succeeds
    later = {"p1": [[1.0, 1.0, 0.0, 1.0]], "p2": [[0.0] * 4, [0.0] * 4, [0.0] * 2]}
    calls = []

    def more(gs, offset, size):
        calls.append(([g.record["id"] for g in gs], offset, size))
        out = []
        for g in gs:
            rw = later[g.record["id"]].pop(0)[:size]
            out.append(group(int(g.record["id"][1:]), rw, start=offset))
        return out

    first = [group(0, [1.0, 0.0, 1.0, 1.0]), group(1, [1.0] * 4), group(2, [0.0] * 4)]
    a = adapt(first, 4, 1, 1, 14, 4, 0, more)
    # rounds: everyone open after round 1 but p0; then p2 alone; the last round is cut to max_n
    assert calls == [(["p1", "p2"], 4, 4), (["p2"], 8, 4), (["p2"], 12, 2)]
    assert a.rounds == 4 and a.samples == 12 + 4 + 4 + 4 + 2 and a.dropped == 1
    assert [g.record["id"] for g in a.groups] == ["p0", "p1"]
    assert [len(g.samples) for g in a.drawn] == [4, 8, 14]             # the trace sees every completion
    p1 = a.groups[1]
    assert len(p1.samples) == 4 and "c6" in [s["text"] for s in p1.samples]   # its one failure is in the group
    assert sorted(p1.rewards) == [0.0, 1.0, 1.0, 1.0]
    # the group's per-completion fields stay aligned with its samples
    assert [s["text"] for s in p1.samples] == p1.verified["completions"]
    assert len(p1.verified["verdicts"]) == 4
    m = metrics(a, 3, 2.0)
    assert m["adaptive/dropped_share"] == pytest.approx(1 / 3)
    assert m["adaptive/completions_per_kept"] == pytest.approx((4 + 8) / 2)
    assert m["adaptive/samples_per_s"] == pytest.approx(26 / 2.0)
    # the same verdicts give the same groups (the draw is seeded)
    later.update({"p1": [[1.0, 1.0, 0.0, 1.0]], "p2": [[0.0] * 4, [0.0] * 4, [0.0] * 2]})
    b = adapt([group(0, [1.0, 0.0, 1.0, 1.0]), group(1, [1.0] * 4), group(2, [0.0] * 4)], 4, 1, 1, 14, 4, 0, more)
    assert [[s["text"] for s in g.samples] for g in b.groups] == [[s["text"] for s in g.samples] for g in a.groups]


def test_a_prompt_satisfied_with_one_outcome_is_kept_and_a_failed_request_is_not_drawn_again():
    def more(gs, offset, size):
        return []   # every request failed

    # k_neg 0: an all-correct prompt is satisfied at once, and kept (zero-std: filter_zero_std decides)
    a = adapt([group(0, [1.0] * 4)], 4, 1, 0, 16, 4, 0, more)
    assert a.rounds == 1 and a.dropped == 0 and len(a.groups) == 1
    a = adapt([group(0, [1.0] * 4)], 4, 1, 1, 8, 4, 0, more)
    assert a.rounds == 2 and a.dropped == 1 and not a.groups


def test_adaptive_config_bounds():
    def cfg(*sets):
        return load_config(TrainConfig, None, ["rollout.n=4", *sets])

    check(cfg("rollout.adaptive.max_n=16"))
    with pytest.raises(ConfigError, match="max_n"):
        check(cfg("rollout.adaptive.max_n=2"))
    with pytest.raises(ConfigError, match="k_pos"):
        check(cfg("rollout.adaptive.max_n=8", "rollout.adaptive.k_neg=-1"))


# -- through rlvr-train on the CPU ------------------------------------------------------------

from test_train import SMALL, base_model, cfg_for, ray_session, run, trace  # noqa: E402, F401 - fixtures

ADAPTIVE = ("rollout.adaptive.max_n=12", "rollout.adaptive.k_pos=1", "rollout.adaptive.k_neg=1", "checkpoint.every=0")


def check_adaptive_trace(tmp_path, steps: int) -> list[dict]:
    rows = trace(tmp_path)
    assert [r["step"] for r in rows] == list(range(1, steps + 1))
    for r in rows:
        assert r["adaptive/samples"] >= 8 * 4 and r["adaptive/samples_per_s"] > 0
        assert 4 <= r["adaptive/completions_per_kept"] <= 12 and 0 <= r["adaptive/dropped_share"] <= 1
    rollouts = trace(tmp_path, "rollouts.jsonl")
    sizes = [len(x["completions"]) for x in rollouts]
    assert all(s in (4, 8, 12) for s in sizes) and max(sizes) > 4     # later rounds of chunk n, up to max_n
    for x in rollouts:   # a prompt sampled to max_n with one outcome was dropped; none other stopped short
        both = any(v > 0 for v in x["rewards"]) and any(v <= 0 for v in x["rewards"])
        assert both or len(x["completions"]) == 12, x["rewards"]
    return rows


def test_adaptive_sampling_run_learns(ray_session, base_model, tmp_path):
    steps = 10
    cfg = cfg_for(base_model, *SMALL, f"train.steps={steps}", *ADAPTIVE)
    run(cfg, tmp_path)
    rows = check_adaptive_trace(tmp_path, steps)
    first = sum(r["reward/mean"] for r in rows[:3]) / 3
    last = sum(r["reward/mean"] for r in rows[-3:]) / 3
    assert last > first + 0.1, (first, last)


def test_adaptive_sampling_with_max_staleness_1(ray_session, base_model, tmp_path):
    steps = 4
    cfg = cfg_for(base_model, *SMALL, f"train.steps={steps}", "train.max_staleness=1", *ADAPTIVE)
    run(cfg, tmp_path)
    rows = check_adaptive_trace(tmp_path, steps)
    assert all(r["staleness/max"] <= 1 for r in rows)


# -- generations that cannot hold a step hostage (the engine actor's side, without Ray) ----------

SAMPLING = {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 8}


def test_an_engine_call_stops_at_a_newer_version_or_its_deadline_after_one_engine_step(tiny_model_dir):
    """The transformers engine generates one prompt per engine step: a call told that newer weights are coming
    (abort_generation, sync.abort_in_flight) or past rollout.timeout_s finishes its first prompt and returns the
    rest unfinished, as aborted or as timeouts; an older version told, or no limit, changes nothing."""
    from rlvr.train.actors import EngineActor

    actor = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512})
    prompts = [[5, 6, 7], [8, 9], [10, 11, 12], [13]]
    seeds = [1, 2, 3, 4]
    full = actor.generate(prompts, SAMPLING, seeds, abortable=True)
    assert full["aborted"] == [] and full["timeouts"] == [] and all(len(s) == 2 for s in full["samples"])
    actor.abort_generation(1)                        # weights of version 1 are on their way; the engine holds 0
    out = actor.generate(prompts, SAMPLING, seeds, abortable=True)
    assert out["aborted"] == [1, 2, 3] and out["timeouts"] == []
    assert out["samples"][0] == full["samples"][0] and out["samples"][1:] == [[], [], []]
    assert actor.generate(prompts, SAMPLING, seeds)["aborted"] == []      # not abortable: runs to the end
    actor.version = 1                                                    # the update landed
    assert actor.generate(prompts, SAMPLING, seeds, abortable=True)["aborted"] == []
    out = actor.generate(prompts, SAMPLING, seeds, timeout_s=1e-9)
    assert out["timeouts"] == [1, 2, 3] and out["aborted"] == [] and out["samples"][0] == full["samples"][0]


def test_abort_in_flight_and_timeout_s_config():
    def cfg(*sets):
        return load_config(TrainConfig, None, list(sets))

    assert cfg("sync.abort_in_flight=true").sync.abort_in_flight == "resubmit"      # the users' boolean
    assert cfg("sync.abort_in_flight=false").sync.abort_in_flight == "off"
    check(cfg("sync.abort_in_flight=drop", "train.max_staleness=1"))
    for sets, match in ((["sync.abort_in_flight=resubmit"], "max_staleness"),
                        (["sync.abort_in_flight=resubmit", "train.max_staleness=1", "sync.mode=in_flight"], "in_flight"),
                        (["sync.abort_in_flight=sometimes", "train.max_staleness=1"], "expected off"),
                        (["rollout.timeout_s=0"], "timeout_s"),
                        (["rollout.timeout_s=5", "sync.mode=in_flight", "train.max_staleness=1"], "between_rounds")):
        with pytest.raises(ConfigError, match=match):
            check(cfg(*sets))
    check(cfg("rollout.timeout_s=30"))


def test_a_step_whose_every_group_timed_out_trains_nothing_says_so_and_the_next_step_trains(tiny_model_dir):
    """Every group of a step timed out (rollout.timeout_s: with vLLM one engine step advances every request, so a
    whole round can): the step's batch is empty. Between two steps that train, the trainer's step on it makes no
    update (the weights stay, though Adam holds momentum; its version advances with the driver's), the agreement
    check (were it the run's first step) lets it pass, its trace line says so (train/sequences 0,
    sampling/groups_trained 0, the timeouts counted) and is written, and the next step trains."""
    import orjson
    import torch

    from rlvr.records import dumps
    from rlvr.train.batch import Filled, assemble, sample_fates
    from rlvr.train.config import TrainerConfig
    from rlvr.train.engine_sync import check_agreement
    from rlvr.train.metrics import Faults, StepTimes, step_metrics
    from rlvr.train.trainer import PolicyTrainer
    from rlvr.train.trainer_step import merge_metrics

    cfg = load_config(TrainConfig, None, ["rollout.timeout_s=1"])
    t = PolicyTrainer(tiny_model_dir, TrainerConfig(lr=1e-2, micro_batch_size=4, dtype="float32", device="cpu"),
                      max_tokens=8, total_steps=4)
    faults = Faults()

    def weights() -> dict:
        return {k: v.clone() for k, v in t.model.state_dict().items()}

    def line(groups: list[Group], step: int) -> tuple[dict, list]:
        a = assemble(groups, step, "group", False, False, 8)
        a.batch.samples_per_batch = 8 * 4
        m = merge_metrics([t.step(a.batch)])    # as rlvr.train.trainers merges its ranks' metrics
        if not groups:
            check_agreement(cfg, m, step)
        fates = sample_fates(Filled(groups, groups), a, False)
        row = step_metrics(step + 1, a, Filled(groups, groups), m, StepTimes(step=1.0), faults, queue_depth=0,
                           engines=1, samples_total=0.0, elapsed=1.0)
        return orjson.loads(dumps(row)), fates

    row, _ = line([group(0, [1.0, 0.0, 1.0, 0.0])], 0)
    assert row["train/updates"] == 1 and t.version == 1
    before = weights()
    faults.add("timeout_prompts", 8)        # what rlvr.train.fleet counts for a round of 8 prompts all timed out
    row, fates = line([], 1)
    assert row["train/sequences"] == 0 and row["train/tokens"] == 0 and row["train/updates"] == 0
    assert row["sampling/groups_drawn"] == 0 and row["sampling/groups_trained"] == 0 and row["reward/mean"] == 0
    assert row["faults/timeout_prompts"] == 8 and row["step"] == 2 and fates == []
    assert t.version == 2 and all(torch.equal(v, before[k]) for k, v in weights().items())
    row, fates = line([group(1, [1.0, 0.0, 0.0, 0.0])], 2)
    assert row["train/sequences"] == 4 and row["train/updates"] == 1 and fates == [(3, "trained", 4)]
    assert t.version == 3 and not all(torch.equal(v, before[k]) for k, v in weights().items())


class _Remote:
    def __init__(self, log: list, name: str):
        self.log, self.name = log, name

    def options(self, **kw):
        self.log.append((self.name, "options", kw))
        return self

    def remote(self, *args):
        self.log.append((self.name, args))
        return f"ref-{len(self.log)}"


class _Engine:
    def __init__(self, log: list):
        self.generate = _Remote(log, "generate")
        self.abort_generation = _Remote(log, "abort_generation")


class _Traces:
    def __init__(self):
        self.rows: list = []

    def rollout(self, row: dict) -> None:
        self.rows.append(row)


@pytest.mark.parametrize("mode", ["resubmit", "drop"])
def test_abort_in_flight_tells_the_busy_engines_and_resubmits_or_drops_what_they_stopped(mode):
    """The driver's side (rlvr.train.fleet) with stand-in engine actors: at a sync the engines with calls not yet
    collected are told the new version (in the signal concurrency group); the prompts a call returns as aborted are
    sent again to the same engine with the same sample count and seeds, keeping their places in the round
    (resubmit), or recorded as aborted (drop)."""
    from rlvr.train.fleet import EngineFleet
    from rlvr.train.metrics import Faults
    from rlvr.train.prompts import Chunk

    cfg = load_config(TrainConfig, None, [f"sync.abort_in_flight={mode}", "train.max_staleness=1"])
    log: list = []
    fleet = EngineFleet(cfg, None, Faults())
    fleet.engines = [_Engine(log), _Engine(log)]
    items = [({"id": f"p{i}", "prompt": "q"}, 0, [5, 6], []) for i in range(4)]
    busy = Chunk(1, "r", items, 0.0, fleet.engines[1], 4, 8)
    fleet.outstanding = {busy}
    assert fleet.abort_stale(3) == 1
    assert log == [("abort_generation", "options", {"concurrency_group": "signal"}), ("abort_generation", (3,))]
    log.clear()
    traces = _Traces()
    assert fleet.aborted(busy, [], traces, 3) is None and fleet.faults["aborted_in_flight"] == 0
    again = fleet.aborted(busy, [1, 3], traces, 3)
    assert fleet.faults["aborted_in_flight"] == 2
    if mode == "resubmit":
        assert again.engine == 1 and again.items == [items[1], items[3]] and (again.n, again.offset) == (4, 8)
        # the round's prompts 3 and 7 (engine 1 of 2 held 1, 3, 5, 7): collected into their own places
        assert busy.position(1, 2) == 3 and again.positions == [3, 7] and again.position(1, 2) == 7
        (name, args), = log
        seeds = args[2]
        from rlvr.engines.base import prompt_seed
        assert name == "generate" and args[1]["n"] == 4
        assert seeds == [prompt_seed(cfg.rollout.seed, k, 0) + 8 for k in ("p1", "p3")]
        assert fleet.faults["resubmitted_in_flight"] == 2 and not traces.rows
    else:
        assert again is None and not log and fleet.faults["dropped_in_flight"] == 2
        assert [(r["id"], r["generation"]["status"]) for r in traces.rows] == [("p1", "aborted"), ("p3", "aborted")]
    off = EngineFleet(load_config(TrainConfig, None, []), None, Faults())
    off.outstanding = {busy}
    assert off.abort_stale(3) == 0
