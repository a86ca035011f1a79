"""The rlvr commands: one thin click module each, wired in pyproject's [project.scripts].

COMMANDS is the one list the contract tests, the man-page generator and the docs walk.
``records`` says whether the command reads JSONL records from files or stdin (and so must
pass the shared input contract: empty in -> empty out, a bad line -> exit 3 with FILE:LINE).
"""

from __future__ import annotations

import importlib

COMMANDS: dict[str, dict] = {
    "rlvr-data": {"module": "rlvr.commands.data", "records": False},
    "rlvr-passk": {"module": "rlvr.commands.passk", "records": True},
    "rlvr-verify": {"module": "rlvr.commands.verify", "records": True},
    "rlvr-gpu-free": {"module": "rlvr.commands.gpu_free", "records": False},
    "rlvr-train": {"module": "rlvr.commands.train", "records": False},
    "rlvr-plot": {"module": "rlvr.commands.plot", "records": False},
    "rlvr-s3-sync": {"module": "rlvr.commands.s3_sync", "records": False},
    "rlvr-rollout": {"module": "rlvr.commands.rollout", "records": True},
    "rlvr-eval": {"module": "rlvr.commands.eval", "records": False},
    "rlvr-submit": {"module": "rlvr.commands.submit", "records": False},
    "rlvr-report": {"module": "rlvr.commands.report", "records": False},
    "rlvr-select": {"module": "rlvr.commands.select", "records": True},
    "rlvr-refine": {"module": "rlvr.commands.refine", "records": True},
    "rlvr-port-config": {"module": "rlvr.commands.port_config", "records": False},
}


def load(name: str):
    """The console-script entry point (rlvr.cli.run wrapper) of a command."""
    return importlib.import_module(COMMANDS[name]["module"]).main
