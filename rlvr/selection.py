"""SFT records from verified rollouts: rlvr-select's logic.

    sel = Selection(min_pass=0.0, max_pass=0.5, threshold=1.0, seed=0)
    for rec in read_records(files, required=("completions", "rewards")):
        out = sel.add(rec)          # an SFT record, the error record itself, or None
    sel.summary()                   # how many prompts were kept, and why the others were not

A prompt's pass rate is the fraction of its completions whose reward is >= threshold (the
rule of rlvr-passk). A prompt is kept when min_pass <= rate < max_pass (a max_pass of 1 also
keeps rate 1) and at least one completion is correct; it then gives one SFT record: the
prompt record's own fields (id, dataset, prompt, ground truth, generation...) without the
per-completion lists, plus `completion` (one correct completion, drawn with a generator seeded
by (seed, id), so the choice does not depend on the order, batch or shard a record comes in),
its `finish_reason`, `stop_reason` and `completion_token_ids` when the record has them (what
rlvr-train's sft section needs to end the completion as the engine did), its `reward` and
`verdict`, `completion_index`, `pass_rate`, `n_samples` and `n_correct`.

A repeated id is used once (its first record); error records (--keep-going) pass through.

With ``original_prompt`` (rlvr-select --original-prompt), a record from rlvr-refine (its
``refine`` field) is kept as an answer to the prompt it was refined from (STaR's
rationalization): the SFT record's ``prompt`` and ``id`` are the first record's
(``refine.prompt``, ``refine.root``), the prompt the completion answered is kept as
``refined_prompt``, and one record is kept per original prompt (a later one with the same id
counts as repeated).
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

import orjson

from rlvr.records import is_error_record

# Fields with one entry per completion: the SFT record keeps the chosen entry under the singular name.
PER_COMPLETION = {"completions": "completion", "rewards": "reward", "finish_reasons": "finish_reason",
                  "stop_reasons": "stop_reason", "completion_token_ids": "completion_token_ids",
                  "verdicts": "verdict", "completion_tokens": None, "logprobs": None}

REASONS = (("below", "below --min-pass"), ("above", "at or above --max-pass"),
           ("no_correct", "with no correct completion"), ("no_samples", "without samples"),
           ("repeated", "repeated ids"))


@dataclass
class Selection:
    min_pass: float = 0.0
    max_pass: float = 0.5
    threshold: float = 1.0
    seed: int = 0
    original_prompt: bool = False
    counts: Counter = field(default_factory=Counter)
    seen: set = field(default_factory=set)
    kept: set = field(default_factory=set)   # ids written, with original_prompt

    def in_range(self, rate: float) -> bool:
        return self.min_pass <= rate and (rate < self.max_pass or rate == self.max_pass == 1.0)

    def rng(self, rec: dict) -> random.Random:
        """The chooser of a prompt: seeded by (seed, id), or by the prompt itself without an id."""
        key = rec["id"] if isinstance(rec.get("id"), str) else orjson.dumps(rec.get("prompt")).decode()
        return random.Random(f"{self.seed}\x00{key}")

    def add(self, rec: dict) -> dict | None:
        """The SFT record of a verified record, or None (counted under its reason); an error
        record is returned as it is."""
        if is_error_record(rec):
            self.counts["errors"] += 1
            return rec
        self.counts["prompts"] += 1
        rid = rec.get("id")
        if rid is not None:
            if rid in self.seen:
                self.counts["repeated"] += 1
                return None
            self.seen.add(rid)
        rewards = rec.get("rewards") or []
        if not rewards:
            self.counts["no_samples"] += 1
            return None
        correct = [j for j, r in enumerate(rewards) if r >= self.threshold]
        rate = len(correct) / len(rewards)
        if not self.in_range(rate):
            self.counts["below" if rate < self.min_pass else "above"] += 1
            return None
        if not correct:
            self.counts["no_correct"] += 1
            return None
        j = self.rng(rec).choice(correct)
        out = {k: v for k, v in rec.items() if k not in PER_COMPLETION}
        for many, one in PER_COMPLETION.items():
            vals = rec.get(many)
            if one is not None and isinstance(vals, list) and j < len(vals):
                out[one] = vals[j]
        out.update({"completion_index": j, "pass_rate": rate, "n_samples": len(rewards), "n_correct": len(correct)})
        if self.original_prompt:
            ref = rec.get("refine")
            if isinstance(ref, dict) and "prompt" in ref and isinstance(ref.get("root"), str):
                out.update(prompt=ref["prompt"], id=ref["root"], refined_prompt=rec.get("prompt"))
            if out.get("id") is not None:
                if out["id"] in self.kept:
                    self.counts["repeated"] += 1
                    return None
                self.kept.add(out["id"])
        self.counts["kept"] += 1
        return out

    def summary(self) -> str:
        """One line: prompts kept of those read, and why the others were not."""
        c = self.counts
        hi = "1]" if self.max_pass == 1.0 else f"{self.max_pass:g})"
        line = f"kept {c['kept']} of {c['prompts']} prompts with a pass rate in [{self.min_pass:g}, {hi}"
        why = [f"{c[k]} {text}" for k, text in REASONS if c[k]]
        if why:
            line += "; not kept: " + ", ".join(why)
        if c["errors"]:
            line += f"; {c['errors']} error record(s) passed through"
        return line
