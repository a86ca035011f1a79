"""Batch assembly of rlvr-train without Ray or engines: DAPO's dynamic sampling and soft
overlong punishment, data rounds and their resume state, the GPU-count rule of a local Ray."""

from __future__ import annotations

import pytest

from rlvr.config_loader import load_config
from rlvr.train.batch import Filled, Group, assemble, fill, overlong_penalty, sample_fates
from rlvr.train.config import TrainConfig, resolve_preset
from rlvr.train.placement import ray_gpu_args
from rlvr.train.schedule import Schedule

N = 4   # samples per prompt


def group(i: int, rewards: list[float], lengths: list[int] | None = None) -> Group:
    lengths = lengths or [3] * len(rewards)
    samples = [{"text": "x", "token_ids": [1] * n, "finish_reason": "stop", "logprobs": [-0.5] * n} for n in lengths]
    g = Group({"id": f"p{i}", "prompt": "q"}, 0, [5, 6], samples, 0, 0)
    g.verified = {"id": f"p{i}", "dataset": "toy", "rewards": rewards}
    return g


def rounds_with_half_constant(start: int, size: int = 4) -> list[Group]:
    """A round where every other group has equal rewards (no signal)."""
    return [group(i, [1.0] * N if i % 2 else [1.0, 0.0, 0.0, 1.0]) for i in range(start, start + size)]


def test_dynamic_sampling_fills_the_batch_with_informative_groups():
    B = 4
    drawn = []

    def more():
        r = rounds_with_half_constant(100 + 10 * len(drawn))
        drawn.append(r)
        return r

    filled = fill(rounds_with_half_constant(0), B, more, max_extra_rounds=4)
    assert filled.rounds == 2 and len(drawn) == 1                      # one extra round was enough
    assert len(filled.drawn) == 8 and filled.filtered == 4
    a = assemble(filled.groups, 0, "group", True, False, max_tokens=16)
    assert len(a.batch.prompt_ids) == B * N                               # prompts_per_step x n sequences
    assert all(a.batch.loss_mask) and not bool(a.zero_std.any())
    # without dynamic sampling the same round trains on half its groups
    plain = assemble(rounds_with_half_constant(0), 0, "group", True, False, max_tokens=16)
    assert sum(plain.batch.loss_mask) == B * N // 2


def test_dynamic_sampling_stops_at_the_cap_and_at_the_end_of_data():
    calls = []

    def more():
        calls.append(1)
        return [group(50 + len(calls), [0.0] * N)]

    f = fill([group(0, [1.0, 0.0, 1.0, 1.0])], 4, more, max_extra_rounds=2)
    assert len(calls) == 2 and f.rounds == 3 and len(f.groups) == 1
    f = fill([group(0, [0.0] * N)], 4, lambda: None, max_extra_rounds=0)
    assert f.rounds == 1 and f.groups == []
    assert len(assemble(f.groups, 0, "group", True, False, max_tokens=16).batch.prompt_ids) == 0


def test_every_sample_generated_gets_its_fate_per_policy_version():
    """Dynamic sampling's left-out constant group: zero_variance; filter_zero_std's constant group
    in the batch: zero_variance; a truncated sample under mask_truncated: masked; a sample whose
    verification timed out: timed_out; the rest trained; each under the version that generated it."""
    left_out = group(0, [1.0] * N)
    kept_const = group(1, [0.0] * N)
    cut = group(2, [1.0, 0.0, 0.0, 1.0], lengths=[3, 3, 3, 8])
    cut.samples[3]["finish_reason"] = "length"
    timed = group(3, [1.0, 0.0, 0.0, 0.0])
    timed.verified["verdicts"] = [{"status": "ok"}, {"status": "timeout"}, {"status": "ok"}, {"status": "ok"}]
    timed.version_start = 1
    batch = [kept_const, cut, timed]
    filled = Filled(batch, [left_out, *batch], 2)
    a = assemble(batch, 2, "group", True, True, 8)
    assert sample_fates(filled, a, True) == [(0, "masked", 1), (0, "trained", 3), (0, "zero_variance", 8),
                                             (1, "timed_out", 1), (1, "trained", 3)]
    # without filter_zero_std the constant group is trained on (advantage 0)
    a = assemble(batch, 2, "group", False, True, 8)
    assert sample_fates(filled, a, False) == [(0, "masked", 1), (0, "trained", 7), (0, "zero_variance", 4),
                                              (1, "timed_out", 1), (1, "trained", 3)]


def test_soft_overlong_punishment():
    # DAPO: 0 up to max - buffer, then linear to -1 at max_tokens
    assert [overlong_penalty(n, 20, 5) for n in (10, 15, 16, 18, 20, 25)] == [0, 0, -0.2, -0.6, -1, -1]
    assert overlong_penalty(20, 20, 0) == 0.0 and overlong_penalty(20, 20, 5, factor=0.5) == -0.5
    # equal rewards but different lengths: the long sample gets the lower advantage
    a = assemble([group(0, [1.0, 1.0], lengths=[4, 20])], 0, "none", True, False, max_tokens=20, overlong_buffer=8)
    assert a.batch.advantages == [0.5, -0.5] and a.penalties == [0.0, -1.0]


def test_presets():
    grpo = resolve_preset(load_config(TrainConfig, None, ["rollout.max_tokens=100"]))
    assert (grpo.dapo.dynamic_sampling, grpo.dapo.overlong_buffer) == (False, 0)
    dapo = resolve_preset(load_config(TrainConfig, None, ["rollout.max_tokens=100", "preset=dapo"]))
    assert (dapo.dapo.dynamic_sampling, dapo.dapo.overlong_buffer) == (True, 20)
    own = resolve_preset(load_config(TrainConfig, None, ["preset=dapo", "dapo.dynamic_sampling=false"]))
    assert own.dapo.dynamic_sampling is False


class Stream:
    def batch(self, k, size):
        return [({"id": f"r{k}.{i}"}, 0) for i in range(size)] if k < 100 else None


def test_rounds_resume_where_the_trained_steps_left_off():
    s = Schedule(Stream(), 2, 10, 1, 0)
    launched = []
    s.admit(0, launched.append)                        # steps 0 and 1 (staleness 1): rounds 0, 1
    assert [r.index for r in launched] == [0, 1]
    r0 = s.take(0)
    extra = s.draw()                                   # dynamic sampling: step 0 draws round 2
    s.trained(r0 + [extra])
    state = s.data_state()
    assert state == {"data_cursor": 1, "data_used": [2]}
    again = Schedule(Stream(), 2, 10, 1, 1, state)     # resumed after step 1: round 1, then 3
    assert [again.draw().index, again.draw().index] == [1, 3]
    # without extra rounds, step k trains on round k (prompts [kB, (k+1)B))
    plain = Schedule(Stream(), 2, 10, 0, 3)
    got = []
    plain.admit(3, got.append)
    assert [r.index for r in got] == [3] and got[0].items[0][0]["id"] == "r3.0"


def test_local_ray_gpus_stay_within_the_drivers_devices():
    assert ray_gpu_args(8, "0,1,2,3,4,5")[0] == 6
    assert ray_gpu_args(4, "0,1,2,3,4,5") == (4, None)
    assert ray_gpu_args(None, "0,1") == (None, None)     # Ray's own detection reads the variable
    assert ray_gpu_args(8, None) == (8, None)
    assert ray_gpu_args(2, "")[0] == 0


@pytest.mark.parametrize("bad", ["preset=ppo", "dapo.max_extra_rounds=-1"])
def test_bad_dapo_settings(bad):
    from rlvr.cli import ConfigError
    from rlvr.train.config import check

    with pytest.raises(ConfigError):
        check(load_config(TrainConfig, None, [bad]))


def test_verifier_errors_are_counted_and_named_once():
    from rlvr.train.batch import Assembled, Filled
    from rlvr.train.metrics import Faults, StepTimes, step_metrics

    def judged(i, statuses):
        g = group(i, [1.0 if s == "correct" else 0.0 for s in statuses])
        g.verified["verdicts"] = [{"status": s, "extracted": None, **({"error": f"ZeroDivisionError: case {i}"}
                                                                        if s == "error" else {})} for s in statuses]
        return g

    faults, warned = Faults(), []

    def line(groups):
        filled = Filled(groups, groups)
        a = Assembled(None, None, None, [3] * 4 * len(groups), 0, [0] * 4 * len(groups), [])
        return step_metrics(1, a, filled, {}, StepTimes(step=1.0), faults, queue_depth=0, engines=1,
                            samples_total=0.0, elapsed=1.0, warn=warned.append)

    m = line([judged(0, ["correct", "wrong", "correct", "wrong"])])
    assert m["verify/errors"] == 0.0 and m["faults/verifier_errors"] == 0.0 and not warned
    m = line([judged(1, ["correct", "error", "error", "wrong"]), judged(2, ["error", "wrong", "wrong", "wrong"])])
    assert m["verify/errors"] == 3.0 and m["faults/verifier_errors"] == 3.0
    assert len(warned) == 1 and "'p1'" in warned[0] and "ZeroDivisionError: case 1" in warned[0]
    m = line([judged(3, ["error", "correct", "wrong", "wrong"])])
    assert m["verify/errors"] == 1.0 and m["faults/verifier_errors"] == 4.0 and len(warned) == 1   # once a run
