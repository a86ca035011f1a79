"""From generated groups to the trainer's batch: rewards, DAPO's dynamic sampling and soft
overlong punishment, group-relative advantages, loss masks.

A group is the rollout.n samples of one prompt. Groups whose rewards are all equal carry no
signal: with `filter_zero_std` they stay in the batch but out of the loss; with dynamic
sampling (DAPO) they are left out and more prompts are drawn until the batch holds
prompts_per_step informative groups (`fill`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

GT_FIELDS = ("answer", "tests", "test_setup", "test", "entry_point", "prefix", "instruction_id_list", "kwargs",
             "thinking", "constraint", "reference_verifier")


@dataclass
class Group:
    record: dict
    epoch: int
    prompt_ids: list[int]
    samples: list[dict]        # per sample: text, token_ids, finish_reason, logprobs
    version_start: int
    version_end: int
    verified: dict | None = None
    generated_at: float | None = None   # time.time() when its engine finished it (queue times)

    @property
    def rewards(self) -> list[float]:
        return list(self.verified["rewards"]) if self.verified else []

    @property
    def informative(self) -> bool:
        r = self.rewards
        return bool(r) and max(r) != min(r)


def verify(pool, groups: list[Group]) -> None:
    """Rewards from the verifier pool (rlvr-verify's code), stored on each group."""
    recs = []
    for g in groups:
        r = {k: g.record[k] for k in ("id", "dataset", "verifier", "prompt", *GT_FIELDS) if k in g.record}
        r["completions"] = [s["text"] for s in g.samples]
        recs.append(r)
    for g, v in zip(groups, pool.verify_records(iter(recs))):
        g.verified = v


@dataclass
class Filled:
    """The groups a step trains on, and what dynamic sampling drew to get them."""
    groups: list[Group]
    drawn: list[Group] = field(default_factory=list)   # every group generated for the step
    rounds: int = 1
    adaptive: dict = field(default_factory=dict)       # adaptive sampling's trace metrics (rlvr.train.adaptive)

    @property
    def filtered(self) -> int:
        return sum(1 for g in self.drawn if not g.informative)


def fill(first: list[Group], need: int, more: Callable[[], list[Group] | None], max_extra_rounds: int) -> Filled:
    """DAPO's dynamic sampling: keep the informative groups of `first`, call more() for
    another verified round while fewer than `need` are kept (at most max_extra_rounds times;
    0 = no cap; more() returns None when the data has ended); the first `need` are trained."""
    drawn = list(first)
    kept = [g for g in first if g.informative]
    rounds = 1
    while len(kept) < need and (max_extra_rounds == 0 or rounds - 1 < max_extra_rounds):
        extra = more()
        if extra is None:
            break
        rounds += 1
        drawn += extra
        kept += [g for g in extra if g.informative]
    return Filled(kept[:need], drawn, rounds)


def sample_fates(filled: Filled, a: "Assembled", filter_zero_std: bool) -> list[tuple[int, str, int]]:
    """The fate of every sample a step generated, as (policy version that generated it, fate, n):
    trained; zero_variance (a group of equal rewards: left out by dynamic sampling, or kept out
    of the loss by filter_zero_std); masked (kept out of the loss otherwise: a truncated sample
    under mask_truncated); timed_out (its verification timed out; it may have been trained on
    with reward 0). An informative group dynamic sampling drew beyond prompts_per_step has no
    fate (neither trained on nor filtered), nor does a sample of a step whose RL batch a mode
    replaced (distillation alone). `a` is assemble()'s batch of filled.groups."""
    counts: Counter = Counter()
    trained = {id(g) for g in filled.groups}
    for g in filled.drawn:
        if id(g) not in trained and not g.informative:
            counts[(g.version_start, "zero_variance")] += len(g.samples)
    if len(a.batch.loss_mask or []) != sum(len(g.samples) for g in filled.groups):
        # a mode replaced the RL batch (distillation alone): no sample went into an RL loss
        return [(v, fate, n) for (v, fate), n in sorted(counts.items())]
    k = 0
    for i, g in enumerate(filled.groups):
        verdicts = (g.verified or {}).get("verdicts") or []
        for j in range(len(g.samples)):
            if a.batch.loss_mask[k]:
                timed = j < len(verdicts) and (verdicts[j] or {}).get("status") == "timeout"
                fate = "timed_out" if timed else "trained"
            else:
                fate = "zero_variance" if filter_zero_std and bool(a.zero_std[i]) else "masked"
            counts[(g.version_start, fate)] += 1
            k += 1
    return [(v, fate, n) for (v, fate), n in sorted(counts.items())]


def overlong_penalty(length: int, max_tokens: int, buffer: int, factor: float = 1.0) -> float:
    """DAPO's soft overlong punishment: 0 up to max_tokens - buffer tokens, then falling
    linearly to -factor at max_tokens (and beyond)."""
    if buffer <= 0:
        return 0.0
    start = max_tokens - buffer
    if length <= start:
        return 0.0
    return -factor * min(1.0, (length - start) / buffer)


@dataclass
class Assembled:
    batch: object               # rlvr.train.trainer.Batch
    rewards: object             # [B, G] verifier rewards (torch)
    zero_std: object            # [B] bool
    lengths: list[int]
    truncated: int
    staleness: list[int]        # per sequence: step - the version its generation started with
    penalties: list[float]
    token_lags: Counter = field(default_factory=Counter)   # versions behind -> completion tokens


def token_lags(samples: list[dict], step: int) -> Counter:
    """How many versions each generated token is behind the step that trains on it: {lag: tokens}.
    A sample's "versions" are run-length ([[version, count], ...]); in_flight mode mixes several."""
    lags: Counter = Counter()
    for s in samples:
        for v, n in s.get("versions") or ():
            lags[step - v] += n
    return lags


def assemble(groups: list[Group], step: int, scale_rewards: str, filter_zero_std: bool, mask_truncated: bool,
             max_tokens: int | list[int], overlong_buffer: int = 0, overlong_factor: float = 1.0,
             adv_std: str = "unbiased", advantage: str = "grpo") -> Assembled:
    """The trainer's batch: one sequence per sample, advantages relative to its group
    (train.advantage: rlvr.grpo.group_advantages' estimator), each sequence's dataset beside it.
    max_tokens: the generation length (the overlong punishment's reference), or one per group."""
    import torch

    from rlvr.grpo import group_advantages
    from rlvr.train.trainer import Batch

    G = max((len(g.samples) for g in groups), default=1)
    rewards = torch.tensor([g.rewards for g in groups], dtype=torch.float32).reshape(len(groups), G)   # [B, G]
    limits = max_tokens if isinstance(max_tokens, list) else [max_tokens] * len(groups)
    penalties = [[overlong_penalty(len(s["token_ids"]), m, overlong_buffer, overlong_factor)
                  for s in g.samples] for g, m in zip(groups, limits)]
    shaped = rewards + torch.tensor(penalties, dtype=torch.float32).reshape(len(groups), G)
    adv, zero_std = group_advantages(shaped, scale_rewards, std=adv_std, estimator=advantage)  # [B, G], [B]
    b = Batch([], [], [], [], [], datasets=[])
    lengths, truncated, stale = [], 0, []
    for i, g in enumerate(groups):
        for j, s in enumerate(g.samples):
            b.prompt_ids.append(g.prompt_ids)
            b.completion_ids.append(list(s["token_ids"]))
            b.advantages.append(float(adv[i, j]))
            b.behaviour_logprobs.append(list(s.get("logprobs") or []))
            b.datasets.append(str(g.record.get("dataset", "")))
            cut = s.get("finish_reason") == "length"
            truncated += cut
            lengths.append(len(s["token_ids"]))
            keep = not (filter_zero_std and bool(zero_std[i]))
            if mask_truncated and cut:
                keep = False
            b.loss_mask.append(keep)
            stale.append(step - g.version_start)
    if any(s.get("turns") for g in groups for s in g.samples):   # tool rollouts: tool tokens train nothing
        from rlvr.tools import loss_mask

        b.token_mask = [loss_mask(s.get("turns") or [], len(s["token_ids"])) for g in groups for s in g.samples]
    lags = token_lags([s for g in groups for s in g.samples], step)
    return Assembled(b, rewards, zero_std, lengths, truncated, stale, [p for ps in penalties for p in ps], lags)
