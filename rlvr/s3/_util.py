"""Small helpers shared by the S3 modules: JSON state files, sizes for humans."""

from __future__ import annotations

import json
import os
from typing import Any


def int_or_none(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def read_json(path: str) -> dict:
    try:
        with open(path) as fh:
            v = json.load(fh)
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}


def write_json(path: str, obj: dict, sync: bool = True) -> None:
    """Transfer state as sorted JSON, written with rlvr's one atomic write (fsynced when `sync`)."""
    from rlvr.records import atomic_write

    atomic_write(path, json.dumps(obj, sort_keys=True).encode(), sync)


def within(root_real: str, path: str) -> bool:
    """True when path, all symlinks resolved, lies in the folder root_real (itself resolved)."""
    return os.path.commonpath([root_real, os.path.realpath(path)]) == root_real


def unlink_quiet(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass



def human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover
