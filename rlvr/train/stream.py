"""The training prompt stream: rlvr-data's records, epoch after epoch, in a fixed order.

Batch k of a run holds prompts [k*B, (k+1)*B) of the stream, so a resumed run continues at
exactly the next unseen prompt (the checkpoint stores the step). Each epoch is shuffled with
(seed, epoch) unless a curriculum order file fixes the order: one for the whole stream, or
one per dataset of a mixture (data.order: {gsm8k: FILE, ...}), whose datasets are then each
in their own order while the mixture's weights still decide which dataset comes next.
"""

from __future__ import annotations

import random

from rlvr.errors import ConfigError
from rlvr.data import ChatOptions, apply_order, load_records, mix, read_order


def per_dataset_options(dcfg, rollout, name: str, names: list[str]) -> dict:
    """load_records' per-dataset options from data.template / filters / assistant_prefix (one
    value, or one per dataset) and rollout.stop_by_dataset / max_tokens_by_dataset (whose
    allenai/gsm8k-style keys give one kind of a mixed dataset's rows their own length)."""
    from rlvr.data.filters import per_dataset

    def pick(value, key: str):
        if isinstance(value, dict):
            unknown = set(value) - set(names)
            if unknown:
                raise ConfigError(f"data.{key}: {sorted(unknown)[0]} is not a dataset of this run")
            return value.get(name)
        return value

    out = {"template": pick(dcfg.template, "template"), "assistant_prefix": pick(dcfg.assistant_prefix, "assistant_prefix"),
           "filters": per_dataset(dcfg.filters, names).get(name)}
    if rollout is not None:
        from rlvr.data import split_kind_keys

        out["stop"] = rollout.stop_by_dataset.get(name)
        whole, kinds = split_kind_keys(rollout.max_tokens_by_dataset, names, "rollout.max_tokens_by_dataset")
        out["max_tokens"] = whole.get(name)
        out["kind_max_tokens"] = kinds.get(name)
    return out


class PromptStream:
    def __init__(self, dcfg, rollout=None, keep_question: bool = False):
        self.cfg = dcfg
        names = [dcfg.dataset] if dcfg.dataset else list(dcfg.mix or {})
        src = dcfg.source or {}
        unknown = set(src) - set(names)
        if unknown:
            raise ConfigError(f"data.source: {sorted(unknown)[0]} is not a dataset of this run")
        chat = ChatOptions(dcfg.system, dcfg.thinking, dcfg.chat_template)
        try:
            self.chat = chat.check(dcfg.chat)          # what run.json records
        except ValueError as e:
            raise ConfigError(f"data: {e}") from None
        self.by_name = {n: load_records(n, split=dcfg.split, source=src.get(n), shots=dcfg.shots, chat=dcfg.chat,
                                        chat_options=chat, kinds=dcfg.kinds if n == "allenai" else None,
                                        keep_question=keep_question, **per_dataset_options(dcfg, rollout, n, names))
                        for n in names}
        for n, recs in self.by_name.items():
            if dcfg.limit is not None:
                self.by_name[n] = recs[:dcfg.limit]
            if not self.by_name[n]:
                raise ConfigError(f"data: dataset {n} has no prompts")
        # data.order: one file for the whole stream, or one per dataset of a mixture (each
        # dataset's prompts in its own order, interleaved by the mixture's weights)
        orders = dcfg.order if isinstance(dcfg.order, dict) else {}
        unknown = set(orders) - set(names)
        if unknown:
            raise ConfigError(f"data.order: {sorted(unknown)[0]} is not a dataset of this run")
        self.orders = {n: (p, read_order(p)) for n, p in orders.items()}
        self.order = read_order(dcfg.order) if isinstance(dcfg.order, str) and dcfg.order else None
        self._epochs: dict[int, list[dict]] = {}
        for path, ids in [(dcfg.order, self.order)] * (self.order is not None) + list(self.orders.values()):
            if not ids:
                raise ConfigError(f"data.order: {path} lists no prompt ids")
        if self.order is not None or self.orders:
            self.epoch(0)  # an unknown id fails now, before Ray and the engines start

    def epoch(self, e: int) -> list[dict]:
        if e not in self._epochs:
            self._epochs = {k: v for k, v in self._epochs.items() if k >= e - 1}
            seed = self.cfg.seed * 100003 + e
            streams = {}
            for n, recs in self.by_name.items():
                recs = list(recs)
                if n in self.orders:
                    path, ids = self.orders[n]
                    recs = apply_order(recs, ids, path, unique=False)
                elif self.cfg.shuffle and self.order is None:
                    random.Random(seed).shuffle(recs)
                streams[n] = recs
            if self.cfg.mix:
                out = list(mix(streams, self.cfg.mix, seed=seed))
            else:
                out = streams[self.cfg.dataset]
            if self.order is not None:
                out = apply_order(out, self.order, self.cfg.order, unique=False)
            self._epochs[e] = out
        return self._epochs[e]

    def batch(self, k: int, size: int) -> list[tuple[dict, int]] | None:
        """Prompts of batch k as (record, epoch) pairs; None when the stream has ended."""
        out = []
        n0 = len(self.epoch(0))
        for pos in range(k * size, (k + 1) * size):
            e, i = divmod(pos, n0)
            if e >= self.cfg.epochs:
                return out or None
            recs = self.epoch(e)
            out.append((recs[i % len(recs)], e))
        return out
