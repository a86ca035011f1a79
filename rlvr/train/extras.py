"""The trainer's side of the extra losses (rlvr.losses): their sequences in a step's batch and
their backward passes beside the RL loss's.

A step's batch (rlvr.train.trainer.Batch) carries `extras`: {loss name: ExtraBatch}. Each
ExtraBatch is split like the RL sequences: into the step's train.mini_batches mini-batches (in
order; every optimizer update takes its share and repeats it each of train.epochs passes),
each mini-batch over the trainer ranks (rank r takes every world-th sequence), each rank's
share into micro-batches of `micro_batch_size` sequences. Every rank runs as many micro-batches
as the rank with the most (FSDP's collectives need all ranks): a rank with fewer runs empty
ones. The loss of a micro-batch is normalised by its whole mini-batch's tokens, so the
gradient does not depend on how the sequences are split.

Log-probs are taken at the ExtraBatch's temperature (1 unless the loss sets another: maximum
likelihood of the model's own distribution, as SFT is defined), by the same forward pass as
the RL loss's. A loss that needs the policy's log-probs at other ids too (a teacher's top-k)
puts them in its payload as `target_ids` ([L_i, K] per sequence): the same forward pass
then also gathers the log-probs at those ids, and the loss gets them as
payload["target_logprobs"] [N, L, K].
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from rlvr.losses import EXTRA_LOSSES


@dataclass
class ExtraBatch:
    """The sequences an extra loss trains on in one step, tokenised by the driver exactly as
    the RL path tokenises prompts (rlvr.engines.base.encode_prompt)."""
    prompt_ids: list[list[int]]
    completion_ids: list[list[int]]
    weight: float = 1.0                     # the loss's weight in loss/total
    micro_batch_size: int = 8               # sequences per forward/backward
    payload: dict[str, list] = field(default_factory=dict)   # name -> one array [L_i, ...] per sequence
    temperature: float = 1.0                # of the policy's log-probs
    options: dict = field(default_factory=dict)   # keyword arguments of the loss function

    def __len__(self) -> int:
        return len(self.prompt_ids)


def split(n: int, k: int) -> list[list[int]]:
    """0..n-1 in k consecutive parts as even as can be (as the RL mini-batches are cut)."""
    return [list(range(j * n // k, (j + 1) * n // k)) for j in range(k)]


def plan(shares: list[list[int]], size: int, rank: int) -> list[list[int]]:
    """This rank's micro-batches of `size` sequences over its share (shares[rank]), padded with
    empty ones to the count of the rank with the most."""
    per = [[s[i:i + size] for i in range(0, len(s), size)] for s in shares]
    n = max((len(p) for p in per), default=0)
    return per[rank] + [[] for _ in range(n - len(per[rank]))]


def collate(rows: list, like: torch.Tensor, example=None) -> torch.Tensor:
    """Per-sequence arrays [L_i, ...] (lists, numpy arrays or tensors) right-padded with zeros
    into [N, L, ...] on like's device, where like is [N, L] (an empty micro-batch: all zeros,
    shaped and typed like `example`, one sequence's array, when given)."""
    arrs = [torch.as_tensor(r) for r in rows]
    ref = next((a for a in arrs if a.numel()), None)
    if ref is None and example is not None:
        ref = torch.as_tensor(example)
    rest, dtype = (tuple(ref.shape[1:]), ref.dtype) if ref is not None else ((), like.dtype)
    out = torch.zeros((like.shape[0], like.shape[1], *rest), dtype=dtype)
    for j, a in enumerate(arrs):
        n = min(len(a), like.shape[1])
        out[j, :n] = a[:n]
    return out.to(like.device)


def _shape(eb: ExtraBatch, part: list[int], device) -> torch.Tensor:
    """A [N, L] placeholder of a micro-batch's completion shape, as the trainer pads it (an
    empty micro-batch is one dummy sequence of one token)."""
    n = max(1, len(part))
    length = max([1, *(len(eb.completion_ids[i]) for i in part)])
    return torch.empty((n, length), device=device)


def micro_batch_count(extras: dict[str, ExtraBatch], j: int, k: int, world: int, rank: int) -> int:
    """How many backward passes backward() runs for mini-batch j of k on this rank (every rank
    runs as many)."""
    n = 0
    for eb in extras.values():
        mini = split(len(eb), k)[j]
        n += len(plan([mini[r::world] for r in range(world)], max(1, eb.micro_batch_size), rank))
    return n


def backward(trainer, extras: dict[str, ExtraBatch], j: int, k: int, n_updates: int, acc: dict) -> None:
    """Mini-batch j of k of every extra loss: forward, loss, weighted backward (the gradient adds
    to the RL loss's). Its metrics, like its loss, are each micro-batch's share of the
    mini-batch's value: they are summed over micro-batches (and, by merge_metrics, over ranks)
    into acc, as means over the step's n_updates updates."""
    for name, eb in extras.items():
        fn = EXTRA_LOSSES[name]
        mini = split(len(eb), k)[j]
        shares = [mini[r::trainer.world] for r in range(trainer.world)]
        tokens_total = float(sum(len(eb.completion_ids[i]) for i in mini))
        examples = {key: next((v for v in vals if len(v)), None) for key, vals in eb.payload.items()}
        for part in plan(shares, max(1, eb.micro_batch_size), trainer.rank):
            like = _shape(eb, part, trainer.device)
            payload = {key: collate([vals[i] for i in part], like, examples[key]) for key, vals in eb.payload.items()}
            target_ids = payload.get("target_ids")
            logp, _, mask = trainer._forward(trainer.model, part, eb, with_entropy=False, temperature=eb.temperature,
                                             extra_ids=target_ids)
            if target_ids is not None:
                logp, payload["target_logprobs"] = logp[..., 0], logp[..., 1:]       # [N, L], [N, L, K]
            loss, m = fn(logp, mask, tokens_total, payload, sequences_total=len(mini), **eb.options)
            # normalised by the whole mini-batch, summed over ranks: FSDP averages, hence the factor
            trainer._backward(loss * (eb.weight * trainer.world))
            for key, v in m.items():
                acc[key] = acc.get(key, 0.0) + v / n_updates


def finish(acc: dict, extra_acc: dict, extras: dict[str, ExtraBatch], k: int, rank: int, world: int) -> None:
    """The step's metrics with its extra losses' (k mini-batches; extra_acc from backward()):
    loss/rl (the RL loss, when there was one), loss/total with each extra loss's weighted
    share, and each loss's sequence and token counts on this rank. Losses and counts are this
    rank's shares: merge_metrics adds them up over ranks."""
    acc.update(extra_acc)
    total = acc.get("loss/total")
    if total is not None:
        acc["loss/rl"] = total
    total = total or 0.0
    for name, eb in extras.items():
        mine = [i for mini in split(len(eb), k) for i in mini[rank::world]]
        acc.setdefault(f"loss/{name}", 0.0)
        total += eb.weight * acc[f"loss/{name}"]
        acc[f"{name}/sequences"] = float(len(mine))
        acc[f"{name}/tokens"] = float(sum(len(eb.completion_ids[i]) for i in mine))
    acc["loss/total"] = total
