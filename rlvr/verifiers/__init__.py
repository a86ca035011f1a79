"""Verifiers: one module per verifier name, each exposing

    NAME: str          # the record's `verifier` value
    VERSION: str       # bumped whenever a verdict could change
    def verify(record: dict, completion: str, config: dict) -> dict

``verify`` returns a verdict dict with at least ``status`` (correct / wrong / no_answer /
timeout / error; the LLM judge also judge_unparsable) and ``extracted`` (what was graded, or None); it may add ``score`` (a
fraction in [0, 1], e.g. instructions met) and verifier-specific details. The pool
(rlvr.verification.pool) adds ``verifier``, ``version``, ``duration_s`` and maps status (or
score) to reward through the reward table. It runs verify in killable worker processes,
so verify itself need not guard against hangs.

Optional module attributes the pool uses: ``TIMEOUT_S`` (the default per-verification
timeout, else 5 s), ``timeout_s(options: dict)`` (that timeout when it depends on the
verifier's options; called in the worker, preferred to TIMEOUT_S), ``warmup()`` (run once per worker after import, before any clock
starts: import heavy libraries there), ``check_config(options: dict)`` (raise ValueError
for a bad option; called once in the caller's process). ``config`` passed to verify is
this verifier's own options (e.g. {"mode": "strict-match"} for math).
"""

from __future__ import annotations

import importlib

MODULES = {
    "math": "rlvr.verifiers.math",
    "code": "rlvr.verifiers.code",
    "ifeval": "rlvr.verifiers.ifeval",
    "if_multi": "rlvr.verifiers.ifeval",
    "ifbench": "rlvr.verifiers.ifbench",
    "if_functions": "rlvr.verifiers.if_functions",
    "choice": "rlvr.verifiers.choice",
    "judge": "rlvr.verifiers.judge",
}


def get(name: str):
    """The verifier module for a record's `verifier` value (KeyError if unknown)."""
    return importlib.import_module(MODULES[name])
