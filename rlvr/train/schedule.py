"""What the engines generate, and when: data rounds and admission by staleness.

A round is prompts_per_step prompts of the stream, numbered in the order drawn (round i holds
prompts [iB, (i+1)B)). Step k's batch starts with one round, admitted to the engines only once
the weights they will generate with have version v >= k - max_staleness, so every sample obeys
t - v <= max_staleness at the step t that uses it. With dynamic sampling a step may draw extra
rounds; without it, step k trains on round k exactly.

The checkpoint stores where the data stands (`data_state`): the first round no trained step
used, and the later rounds trained steps did use, so a resumed run draws exactly the rounds it
had not trained on, in the same order.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class Round:
    index: int
    items: list                     # [(record, epoch)] of the stream
    chunks: list = field(default_factory=list)   # what the engines were sent (rlvr.train.prompts.Chunk)
    dropped: list = field(default_factory=list)  # [(record, epoch, prompt tokens)]: too long, never sent


class Schedule:
    def __init__(self, stream, prompts_per_step: int, total_steps: int, max_staleness: int, start_step: int,
                 data_state: dict | None = None):
        self.stream = stream
        self.size = prompts_per_step
        self.total = total_steps
        self.max_staleness = max_staleness
        self.next_step = start_step                  # the next step whose first round is launched
        self.launched: dict[int, list[Round]] = {}   # step -> its rounds, in flight or done
        state = data_state or {}
        self.cursor = int(state.get("data_cursor", start_step))
        self.base = self.cursor                      # every round below it was trained on
        self.used: set[int] = set(int(i) for i in state.get("data_used", ()))  # rounds >= cursor already trained

    def draw(self) -> Round | None:
        """The next round of the stream; None when the stream has ended."""
        while self.cursor in self.used:
            self.cursor += 1
        items = self.stream.batch(self.cursor, self.size)
        if not items:
            return None
        r = Round(self.cursor, items)
        self.cursor += 1
        return r

    def admit(self, synced_version: int, launch: Callable[[Round], None]) -> None:
        """Launch the first round of every step the staleness bound allows now."""
        while self.next_step < self.total and self.next_step <= synced_version + self.max_staleness:
            r = self.draw()
            if r is None:
                break
            launch(r)
            self.launched[self.next_step] = [r]
            self.next_step += 1

    def has(self, step: int) -> bool:
        return step in self.launched

    def in_flight(self) -> int:
        """Steps launched ahead of the one being collected."""
        return max(0, len(self.launched) - 1)

    def take(self, step: int) -> list[Round]:
        return self.launched.pop(step)

    def trained(self, rounds: list[Round]) -> None:
        """Mark the rounds a trained step used."""
        self.used.update(r.index for r in rounds)

    def data_state(self) -> dict:
        """Where a run resumed after the latest trained step continues."""
        first = self.base
        while first in self.used:
            first += 1
        return {"data_cursor": first, "data_used": sorted(i for i in self.used if i > first)}
