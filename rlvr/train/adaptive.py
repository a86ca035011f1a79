"""Adaptive sampling (Reinforce-Ada: Xiong et al. 2025, "Reinforce-Ada: An Adaptive Sampling
Framework for Reinforce-Style LLM Training", arXiv:2510.04996): per prompt, keep sampling in
rounds until it has at least `k_pos` successes and `k_neg` failures or reaches `max_n`
completions; the group the loss sees is a balanced, seeded draw of rollout.n of them; a prompt
that reached max_n with one outcome only is dropped (DAPO's filter: no signal).

The rounds go through the same path as DAPO's dynamic sampling (rlvr.train.loop): a top-up round
sends the still-open prompts again with `n` = the round's size and seeds continuing where the
prompt's samples so far ended (prompt_seed + the count already drawn), so a run stays a function
of its seeds (between_rounds runs reproduce bit for bit). This module holds the decisions, on
verified groups (rlvr.train.batch.Group); the driver supplies the generation.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field


def success(reward: float) -> bool:
    """A completion counts as a success when its reward is positive (a failure otherwise)."""
    return reward > 0


def counts(rewards: list[float]) -> tuple[int, int]:
    pos = sum(1 for r in rewards if success(r))
    return pos, len(rewards) - pos


def satisfied(rewards: list[float], k_pos: int, k_neg: int) -> bool:
    pos, neg = counts(rewards)
    return pos >= k_pos and neg >= k_neg


def draw_seed(seed: int, key: str, epoch: int) -> int:
    """The seed of a prompt's balanced draw: depends on (seed, prompt id, epoch) only."""
    h = hashlib.blake2b(f"{seed}\x00{key}\x00{epoch}".encode(), digest_size=8).digest()
    return int.from_bytes(h, "little")


def select(rewards: list[float], n: int, seed: int) -> list[int] | None:
    """Which of a prompt's sampled completions form its group of n: as balanced as the samples allow
    (n // 2 successes and n - n // 2 failures, the short side's deficit taken from the other), each
    side drawn at random under `seed`; returned in sampling order. None: one outcome only (dropped).
    Fewer than n samples: all of them."""
    pos = [i for i, r in enumerate(rewards) if success(r)]
    neg = [i for i, r in enumerate(rewards) if not success(r)]
    if not pos or not neg:
        return None
    if len(rewards) <= n:
        return list(range(len(rewards)))
    want_pos = min(len(pos), max(n // 2, n - len(neg)))
    want_neg = n - want_pos
    rng = random.Random(seed)
    return sorted(rng.sample(pos, want_pos) + rng.sample(neg, want_neg))


def merge(parts: list) -> object:
    """One group from a prompt's rounds (rlvr.train.batch.Group, in round order): the samples and the
    verifier's per-completion fields joined; versions from the first round's start to the last's end."""
    g0 = parts[0]
    if len(parts) == 1:
        return g0
    samples = [s for g in parts for s in g.samples]
    v = dict(g0.verified or {})
    for key, val in (g0.verified or {}).items():
        if isinstance(val, list) and len(val) == len(g0.samples):
            v[key] = [x for g in parts for x in (g.verified or {}).get(key, [])]
    return type(g0)(g0.record, g0.epoch, g0.prompt_ids, samples, min(g.version_start for g in parts),
                    max(g.version_end for g in parts), v)


def subset(g, idx: list[int]):
    """The group restricted to the completions idx (samples and per-completion verifier fields)."""
    if len(idx) == len(g.samples):
        return g
    v = dict(g.verified or {})
    for key, val in (g.verified or {}).items():
        if isinstance(val, list) and len(val) == len(g.samples):
            v[key] = [val[i] for i in idx]
    return type(g)(g.record, g.epoch, g.prompt_ids, [g.samples[i] for i in idx], g.version_start,
                   g.version_end, v)


@dataclass
class Adapted:
    """A round's groups after adaptive sampling."""
    groups: list                    # the kept prompts, each a balanced group of n
    drawn: list                     # every prompt with all its completions (for the rollouts trace)
    dropped: int = 0                # prompts that reached max_n with one outcome
    rounds: int = 1                 # generation rounds (1: the first round satisfied every prompt)
    samples: int = 0                # completions generated
    per_kept: list[float] = field(default_factory=list)   # completions sampled per kept prompt


def adapt(first: list, n: int, k_pos: int, k_neg: int, max_n: int, chunk: int, seed: int,
          more: Callable[[list, int, int], list]) -> Adapted:
    """Adaptive sampling over a verified round `first` (each group holding n completions).
    more(groups, offset, size) generates and verifies `size` more completions for each of those
    prompts, seeds starting at sample `offset`, and returns their groups (a prompt whose request
    failed is missing). Rounds continue while a prompt is short of k_pos successes or k_neg
    failures and below max_n completions."""
    parts: dict[int, list] = {i: [g] for i, g in enumerate(first)}
    drawn = sum(len(g.samples) for g in first)
    have = {i: len(g.samples) for i, g in enumerate(first)}
    rounds = 1

    def rewards(i: int) -> list[float]:
        return [r for g in parts[i] for r in g.rewards]

    while True:
        open_ = [i for i in parts if have[i] < max_n and not satisfied(rewards(i), k_pos, k_neg)]
        if not open_:
            break
        # prompts still open have all been drawn equally often (same start, same round sizes)
        offset = min(have[i] for i in open_)
        size = min(chunk, max_n - offset)
        batch = [i for i in open_ if have[i] == offset]
        by_key = {(first[i].record.get("id"), first[i].epoch): i for i in batch}
        got = more([first[i] for i in batch], offset, size)
        rounds += 1
        for g in got:
            i = by_key.get((g.record.get("id"), g.epoch))
            if i is not None:
                parts[i].append(g)
                drawn += len(g.samples)
        for i in batch:
            have[i] = offset + size   # a failed request is not drawn again
    out = Adapted([], [], rounds=rounds, samples=drawn)
    for i in sorted(parts):
        g = merge(parts[i])
        out.drawn.append(g)
        idx = select(g.rewards, n, draw_seed(seed, str(g.record.get("id")), g.epoch))
        if idx is None:
            if not satisfied(g.rewards, k_pos, k_neg):   # max_n reached (or its requests failed), one outcome
                out.dropped += 1
                continue
            idx = list(range(min(n, len(g.samples))))   # satisfied with one outcome (k_pos or k_neg 0)
        out.groups.append(subset(g, idx))
        out.per_kept.append(float(len(g.samples)))
    return out


def metrics(a: Adapted, prompts: int, seconds: float) -> dict:
    """What the trace records of a step's adaptive sampling."""
    m = {"adaptive/rounds": float(a.rounds), "adaptive/samples": float(a.samples),
         "adaptive/dropped_share": a.dropped / prompts if prompts else 0.0,
         "adaptive/completions_per_kept": sum(a.per_kept) / len(a.per_kept) if a.per_kept else 0.0}
    if seconds > 0:
        m["adaptive/samples_per_s"] = a.samples / seconds
    return m
