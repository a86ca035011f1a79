"""What a step writes: the metrics line of traces/trace.jsonl and its rollout records.

Metric names are namespaced: reward/, loss/, clip/, completions/, time/, throughput/,
staleness/, sync/, queue/, idle/, faults/, verify/ (verifier errors), sampling/ (dynamic sampling), dapo/ (overlong punishment),
thinking/ (answer-only judging: closed share, thinking and answer lengths; only when
verdicts were judged that way, rlvr.verification.thinking).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from rlvr.messages import say


@dataclass
class StepTimes:
    rollout: float = 0.0
    reward: float = 0.0
    train: float = 0.0
    sync: float = 0.0
    step: float = 0.0
    engine_busy: float = 0.0      # seconds the engines spent generating this step's work


@dataclass
class Faults:
    """Run-long counters, reported as faults/<name>."""
    counts: Counter = field(default_factory=Counter)

    def add(self, name: str, n: int = 1) -> None:
        self.counts[name] += n

    def __getitem__(self, name: str) -> int:
        return self.counts[name]

    def as_dict(self) -> dict:
        return dict(self.counts)


def group_outcome(g) -> str:
    """all_correct (every sample's verdict is correct), all_wrong (none is), or mixed; by the
    rewards (all >= 1 / all <= 0) where verdicts are missing."""
    verdicts = (g.verified or {}).get("verdicts") or []
    if verdicts and len(verdicts) == len(g.rewards):
        ok = [isinstance(v, dict) and v.get("status") == "correct" for v in verdicts]
    else:
        ok = [r >= 1.0 for r in g.rewards] if g.rewards and (min(g.rewards) >= 1.0 or max(g.rewards) <= 0.0) else []
    if not ok:
        return "mixed"
    return "all_correct" if all(ok) else "all_wrong" if not any(ok) else "mixed"


def verifier_errors(drawn, faults: Faults, warn: Callable[[str], None]) -> int:
    """How many of the step's verdicts are verifier errors (status "error": the sample gets the
    error reward, 0 by default, though nobody judged it). faults counts them over the run; the
    first one of the run is named in a warning."""
    errors = [(g, v) for g in drawn for v in (g.verified or {}).get("verdicts") or []
              if isinstance(v, dict) and v.get("status") == "error"]
    if errors and not faults["verifier_errors"]:
        g, v = errors[0]
        why = str(v.get("error") or "no message").strip().splitlines()
        warn(f"warning: the verifier failed on a completion of prompt {g.verified.get('id')!r} "
             f"(dataset {g.verified.get('dataset') or 'unknown'}): {why[-1][:300] if why else 'no message'}; "
             "such samples get the error reward (verify/errors in the trace counts them; this warning is shown once)")
    faults.add("verifier_errors", len(errors))
    return len(errors)


def step_metrics(version: int, a, filled, trainer: dict, times: StepTimes, faults: Faults, *,
                 queue_depth: int, engines: int, samples_total: float, elapsed: float,
                 warn: Callable[[str], None] = say) -> dict:
    """One line of trace.jsonl. a: rlvr.train.batch.Assembled; filled: rlvr.train.batch.Filled."""
    drawn = filled.drawn
    n_errors = verifier_errors(drawn, faults, warn)
    all_rewards = [x for g in drawn for x in g.rewards]
    zero = [not g.informative for g in drawn]
    m = {
        "step": version, "policy_version": version,
        "reward/mean": float(np.mean(all_rewards)) if all_rewards else 0.0,
        "reward/std": float(np.std(all_rewards, ddof=1)) if len(all_rewards) > 1 else 0.0,
        "reward/frac_zero_std": float(np.mean(zero)) if zero else 0.0,
        "reward/frac_all_correct": float(np.mean([group_outcome(g) == "all_correct" for g in drawn])) if drawn else 0.0,
        "reward/frac_all_wrong": float(np.mean([group_outcome(g) == "all_wrong" for g in drawn])) if drawn else 0.0,
    }
    per_ds = defaultdict(list)
    for g in drawn:
        per_ds[g.verified.get("dataset") or "unknown"].extend(g.rewards)
    for ds, rs in per_ds.items():
        m[f"reward/{ds}/mean"] = float(np.mean(rs))
    from rlvr.verification.thinking import thinking_metrics

    m.update(thinking_metrics(v for g in drawn for v in g.verified.get("verdicts") or []))
    m.update(trainer)
    wall = times.step
    lengths = a.lengths
    hist = Counter(a.staleness)
    tokens = sum(a.token_lags.values())
    m.update({
        "completions/mean_length": float(np.mean(lengths)) if lengths else 0.0,
        "completions/clipped_ratio": a.truncated / max(1, len(lengths)),
        "time/rollout_s": times.rollout, "time/reward_s": times.reward, "time/train_s": times.train,
        "time/sync_s": times.sync, "time/step_s": wall,
        "throughput/tokens_per_s": sum(lengths) / wall if wall > 0 else 0.0,
        "throughput/samples_per_s": len(lengths) / wall if wall > 0 else 0.0,
        "staleness/mean": float(np.mean(a.staleness)) if a.staleness else 0.0,
        "staleness/max": float(max(a.staleness, default=0)),
        **{f"staleness/count_{k}": float(v) for k, v in sorted(hist.items())},
        # per trained token: how many versions behind the step the weights that sampled it were
        "staleness/token_mean": (sum(k * n for k, n in a.token_lags.items()) / tokens) if tokens else 0.0,
        "staleness/token_max": float(max(a.token_lags, default=0)),
        # generated samples whose tokens came from more than one version (an update landed mid-request)
        "sync/in_flight_requests": float(sum(len(s.get("versions") or ()) > 1 for g in drawn for s in g.samples)),
        "queue/batches_in_flight": float(queue_depth),
        "idle/trainer_s": max(0.0, wall - times.train),
        # engine time not spent generating, summed over engines (approximate in async mode,
        # where a step collects work that started during the previous one)
        "idle/engines_s": max(0.0, engines * wall - times.engine_busy),
        "faults/engine_restarts": float(faults["engine_restarts"]),
        "faults/requeued_prompts": float(faults["requeued_prompts"]),
        "faults/dropped_prompts": float(faults["dropped_prompts"]),
        "faults/failed_prompts": float(faults["failed_prompts"]),
        "faults/timeout_prompts": float(faults["timeout_prompts"]),            # rollout.timeout_s
        **{f"faults/{k}_in_flight": float(faults[f"{k}_in_flight"]) for k in ("aborted", "resubmitted", "dropped")},
        "verify/errors": float(n_errors),
        "faults/verifier_errors": float(faults["verifier_errors"]),
        "sampling/rounds": float(filled.rounds),
        "sampling/groups_drawn": float(len(drawn)),
        "sampling/groups_filtered": float(filled.filtered),
        "sampling/groups_trained": float(len(filled.groups)),
        "dapo/overlong_penalty_mean": float(np.mean(a.penalties)) if a.penalties else 0.0,
        "dapo/frac_overlong": float(np.mean([p < 0 for p in a.penalties])) if a.penalties else 0.0,
        "samples/total": samples_total,
        "time/elapsed_s": elapsed,
    })
    return m


def rollout_record(g, version: int) -> dict:
    """A generated group as traces/rollouts.jsonl writes it (the record format of rlvr-verify)."""
    out = dict(g.verified)
    out.update({"step": version, "policy_version": g.version_start, "policy_version_end": g.version_end,
                "epoch": g.epoch, "finish_reasons": [s.get("finish_reason") for s in g.samples],
                "stop_reasons": [s.get("stop_reason") for s in g.samples],
                "completion_tokens": [len(s["token_ids"]) for s in g.samples],
                # per completion, the policy versions of its tokens, run-length: [[version, count], ...]
                "token_versions": [s.get("versions") or [] for s in g.samples]})
    if any(s.get("turns") for s in g.samples):   # tool rollouts (rlvr.tools): each completion's turns
        out["trajectories"] = [s.get("turns") or [] for s in g.samples]
    return out


def sample_record(g, version: int) -> dict:
    v = g.verified
    return {"step": version, "id": v["id"], "prompt": v["prompt"],
            "completion": v["completions"][0] if v["completions"] else "",
            "reward": v["rewards"][0] if v["rewards"] else None,
            "verdict": v["verdicts"][0] if v.get("verdicts") else None}


def unusable_record(rec: dict, epoch: int, version: int, status: str, error: str, prompt_tokens: int | None) -> dict:
    """A prompt that was not trained on (too long to fit, or its request failed), with why."""
    out = {k: v for k, v in rec.items() if k not in ("rewards", "verdicts")}
    out.update({"completions": [], "finish_reasons": [], "step": version, "epoch": epoch,
                "generation": {"status": status, "error": error, "prompt_tokens": prompt_tokens}})
    return out
