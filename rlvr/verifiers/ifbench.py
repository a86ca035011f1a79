"""The `ifbench` verifier: AllenAI's IFBench (58 out-of-distribution constraints).

Ground truth is the record's ``instruction_id_list`` and ``kwargs`` (IFBench's data uses
IFEval's format; null values are dropped). The registry is IFBench's: its 58 new
constraint types plus the IFEval types it reuses. The verdict has the same fields as the
``ifeval`` verifier's (``strict``, ``loose``, ``score``, ``instructions``), and so is
its option, ``ifbench.loose``; see ``rlvr.verifiers.if_checks`` for the evaluator and the
vendored checkers.
"""

from __future__ import annotations

from rlvr.verifiers import if_checks

NAME = "ifbench"
VERSION = "3"   # 2: sentences split as the published labels split them (key 163); 3: kwargs of the wrong kind are bad ground truth, keywords literal
TIMEOUT_S = 10.0


def check_config(config: dict) -> None:
    if_checks.check_config(NAME, config)


def warmup() -> None:
    if_checks.warmup()


def check_record(record: dict) -> tuple[str, str] | None:
    """(field, problem) when the record's instructions cannot be built."""
    return if_checks.check_record("ifbench", record)


def verify(record: dict, completion: str, config: dict | None = None) -> dict:
    """Verdict for one completion of an IFBench record."""
    return if_checks.verify("ifbench", record, completion, config)
