"""What the driver sends an engine for one prompt: its token ids (rlvr-rollout's tokenisation),
its generation length and its stop strings, and the Chunk that tracks a generate call.

A leaf: the engine fleet (rlvr.train.fleet), SFT (rlvr.train.sft) and distillation
(rlvr.train.distill) all tokenise prompts here, so none of them imports the driver.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(eq=False)   # compared and hashed by identity (the fleet keeps a set of them)
class Chunk:
    engine: int
    ref: object
    items: list        # [(record, epoch, prompt ids, stop strings)]
    submitted: float
    actor: object = None  # the engine actor it was sent to (a restarted engine is a new actor)
    n: int | None = None  # samples per prompt when not rollout.n (adaptive sampling's later rounds)
    offset: int = 0       # their seeds start at sample `offset` of each prompt (rlvr.train.adaptive)
    positions: list | None = None   # the round positions of its items where not item j = prompt j x engines + engine
                                    # (the prompts of a call sent again after sync.abort_in_flight stopped them)

    def position(self, j: int, engines: int) -> int:
        """Where item j of this call stands in its round (chunk e of a round holds prompts e, e + E, ...)."""
        return self.positions[j] if self.positions is not None else j * engines + self.engine


def prompt_token_ids(tokenizer, rec: dict) -> list[int]:
    """The same tokenisation rlvr-rollout uses: chat messages through the chat template (the
    record's template file and thinking switch, rlvr.data.templates), strings as they are."""
    from rlvr.rollout import Prompter

    return Prompter(tokenizer, "auto", 0).ids(rec)


def prompt_max_tokens(rec: dict, default: int) -> int:
    """A prompt's generation length: the record's own `max_tokens` (rollout.max_tokens_by_dataset
    writes it), else the config's."""
    n = rec.get("max_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else default


def prompt_stops(rec: dict, default: list[str]) -> list[str]:
    """The stop strings of a prompt: the config's, then the record's own (as rlvr-rollout)."""
    extra = rec.get("stop") or []
    if isinstance(extra, str):
        extra = [extra]
    return list(dict.fromkeys([*default, *(s for s in extra if s)]))
