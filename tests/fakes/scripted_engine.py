"""A scripted engine for the tool-rollout tests: a real tokenizer, and text that a function
of the prompt decides, cut at stop strings the way vLLM cuts it (the text stops before the
stop string, its tokens include it), so rollouts over it are exact.

    eng = ScriptedEngine(tokenizer, respond=lambda prompt_text: "...")
    eng = ScriptedEngine(tokenizer, in_turns(["turn 1 with a code block", "turn 2"], prompt))
"""

from __future__ import annotations

from collections import deque
from typing import Any, Callable

from rlvr.engines.base import Engine, EngineOptions, Result, Sample, cut_at_stop


class ScriptedEngine(Engine):
    kind = "scripted"
    engine_version = "scripted"

    def __init__(self, tokenizer: Any, respond: Callable[[str], str], max_len: int = 4096, logprob: float = -0.5):
        super().__init__("scripted", EngineOptions(dtype="float32"))
        self.tokenizer = tokenizer
        self.respond = respond
        self.max_len = max_len
        self.logprob = logprob
        self.version = 0
        self.seen: list[tuple[str, int | None, Any]] = []   # (prompt text, seed, sampling) of every request
        self._queue: deque = deque()

    @property
    def max_model_len(self) -> int:
        return self.max_len

    def _submit(self, handle: Any, prompt_ids, seed: int | None, sampling) -> None:
        self._queue.append((handle, list(prompt_ids), seed, sampling))

    def _poll(self) -> list[tuple[Any, Result]]:
        handle, ids, seed, sampling = self._queue.popleft()
        prompt = self.tokenizer.decode(ids)
        self.seen.append((prompt, seed, sampling))
        text = self.respond(prompt)
        cut, which = cut_at_stop(text, sampling.stop)
        kept = text if which is None else cut + which
        toks = self.tokenizer.encode(kept, add_special_tokens=False)
        finish, reason = ("stop", which) if which is not None else ("stop", None)
        if len(toks) > sampling.max_tokens:
            toks = toks[: sampling.max_tokens]
            cut, finish, reason = self.tokenizer.decode(toks), "length", None
        elif which is None:
            cut = text
        lps = [self.logprob] * len(toks) if sampling.logprobs else None
        return [(handle, Result(prompt_token_ids=ids, samples=[Sample(text=cut, token_ids=toks, finish_reason=finish,
                                                                        stop_reason=reason, logprobs=lps)]))]

    def _abort(self, handles: list) -> None:
        self._queue = deque(q for q in self._queue if q[0] not in handles)

    def close(self) -> None:
        pass


def in_turns(turns: list[str], prompt: str):
    """respond(prompt text) for tool rollouts: the rest of the model turn that is due (turn k
    after k tool outputs in the default output template), given what of it the prompt holds."""
    def respond(text: str) -> str:
        done = text[len(prompt):]
        k = done.count("```output\n")
        tail = done[done.rindex("```output\n"):].split("\n```\n", 1)[1] if k else done
        return turns[min(k, len(turns) - 1)][len(tail):]
    return respond
