"""Test helpers: run an rlvr command in-process with bytes stdin and captured stdout/stderr."""

from __future__ import annotations

import io
import os
import sys
from dataclasses import dataclass

import orjson

from rlvr.commands import load

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(REPO, "tests", "data")


@dataclass
class Result:
    code: int
    stdout: str
    stderr: str

    def records(self) -> list[dict]:
        return [orjson.loads(ln) for ln in self.stdout.splitlines() if ln.strip()]


def invoke(name: str, args: list[str], input: str | bytes = b"") -> Result:
    """Run command `name` with args, feeding `input` on stdin; never raises SystemExit."""
    if isinstance(input, str):
        input = input.encode()
    out, err = io.BytesIO(), io.StringIO()
    old = sys.stdin, sys.stdout, sys.stderr
    sys.stdin = stdin = io.TextIOWrapper(io.BytesIO(input), encoding="utf-8")
    sys.stdout = stdout = io.TextIOWrapper(out, encoding="utf-8", write_through=True)
    sys.stderr = err
    code = 0
    try:
        load(name)(list(args))
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    finally:
        try:
            sys.stdout.flush()
        except ValueError:
            pass
        sys.stdin, sys.stdout, sys.stderr = old
        stdout.detach()
        stdin.detach()
    return Result(code, out.getvalue().decode("utf-8"), err.getvalue())


def jsonl(*recs: dict) -> str:
    return "".join(orjson.dumps(r).decode() + "\n" for r in recs)
