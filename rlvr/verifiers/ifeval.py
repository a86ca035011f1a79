"""The `ifeval` and `if_multi` verifiers: Google's IFEval and open-instruct's IFEvalG.

A record carries the ground truth in IFEval's own fields: ``instruction_id_list`` and
``kwargs`` (one object per instruction; null values, as in the Hugging Face copy of
IFEval, are dropped). ``verifier: ifeval`` uses IFEval's 25 instruction types;
``verifier: if_multi`` (and a record without a ``verifier`` field) uses the extended
registry open-instruct trains its RLVR instruction-following models with: IFEval's 25,
same code, plus 29 more (several constraints per prompt, same format).

The verdict carries ``strict`` and ``loose`` (one bool per instruction), ``score`` (the
fraction followed) and ``instructions`` (the ids), so prompt-level and instruction-level
accuracy can both be computed; status is ``correct`` when every instruction is followed.
Option: ``loose`` (see ``rlvr.verifiers.if_checks.verify``), e.g.
``ifeval.loose=true``. The checkers and the evaluator live in ``rlvr.verifiers.if_checks``.
"""

from __future__ import annotations

from rlvr.verifiers import if_checks

NAME = "ifeval"
VERSION = "3"  # 2: kwargs of the wrong kind are bad ground truth; keywords literal; JSON too deep to parse is not followed; 3: if_multi's own keyword and phrase checks literal too
TIMEOUT_S = 10.0  # a 100k-character response with sentence and word counts takes ~1-2 s


def check_config(config: dict) -> None:
    if_checks.check_config(NAME, config)


def warmup() -> None:
    if_checks.warmup()


def _registry(record: dict) -> str:
    """``verifier: ifeval`` records get IFEval's registry only; others the if_multi one."""
    return "ifeval" if record.get("verifier") == "ifeval" else "if_multi"


def check_record(record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record's instructions cannot be built."""
    return if_checks.check_record(_registry(record), record)


def verify(record: dict, completion: str, config: dict | None = None) -> dict:
    """Verdict for one completion (see _registry)."""
    return if_checks.verify(_registry(record), record, completion, config)
