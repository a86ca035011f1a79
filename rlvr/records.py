"""The JSONL record contract shared by every rlvr command.

One JSON object per line, one line per prompt (see man/rlvr-records.5). This module is
the one place that reads, validates and writes records:

    for rec in read_records(["a.jsonl", "-"], keep_going=False):
        ...
    with RecordWriter(sys.stdout.buffer) as out:
        out.write(rec)

Reading yields plain dicts; unknown fields pass through untouched. A malformed line raises
RecordError carrying FILE:LINE and the offending field; with keep_going it becomes an
error record ``{"error": {...}}`` that downstream commands pass through unchanged, so N
records in always gives N records out.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from typing import Any, BinaryIO

import orjson

from rlvr.errors import BadInput, Failure
from rlvr.verifiers import MODULES as _VERIFIER_MODULES  # the verifier names (a plain mapping)

VERIFIERS = tuple(_VERIFIER_MODULES)
STATUSES = ("correct", "wrong", "no_answer", "timeout", "error", "unfinished_thinking", "judge_unparsable")

# Known fields and the check each must pass when present. Anything else passes through.
_MSG_ROLES = {"system", "user", "assistant", "tool", "developer"}


class InputFileError(Failure, OSError):
    """An input file that cannot be opened or read (missing, a folder, a broken .gz): exit 1."""


class RecordError(BadInput, ValueError):
    """A malformed input line: knows where it is and which field is wrong."""

    def __init__(self, message: str, path: str = "<stdin>", line: int = 0, field: str | None = None):
        self.message = message
        self.path = path
        self.line = line
        self.field = field
        super().__init__(str(self))
        self.message = message  # RlvrError set it to the whole line

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}: " if self.line else f"{self.path}: "
        tail = f" (field {self.field})" if self.field else ""
        return f"{where}{self.message}{tail}"

    def as_record(self, raw: str | bytes | None = None) -> dict:
        err: dict[str, Any] = {"file": self.path, "line": self.line, "message": self.message}
        if self.field:
            err["field"] = self.field
        if raw is not None:
            text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else raw
            err["raw"] = text[:1000]
        return {"error": err}


def is_error_record(rec: dict) -> bool:
    """True for the error records that --keep-going emits in place of bad lines."""
    return "error" in rec and isinstance(rec.get("error"), dict) and "id" not in rec


def _is_str_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def is_number(v: Any) -> bool:
    """A JSON number (a bool is not one)."""
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def check_record(rec: Any, replaced: tuple[str, ...] = ()) -> tuple[str, str] | None:
    """Return (field, problem) for the first contract violation in rec, or None. Fields in
    `replaced` are not looked at (the reading stage overwrites them, e.g. stale rewards)."""
    if not isinstance(rec, dict):
        return "", f"expected a JSON object, got {type(rec).__name__}"
    if "id" in rec and not isinstance(rec["id"], str):
        return "id", f"must be a string, got {type(rec['id']).__name__}"
    if "dataset" in rec and rec["dataset"] is not None and not isinstance(rec["dataset"], str):
        return "dataset", "must be a string or null"
    if "prompt" in rec:
        p = rec["prompt"]
        if isinstance(p, list):
            for i, m in enumerate(p):
                if not (isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)):
                    return f"prompt[{i}]", 'chat messages must be objects with string "role" and "content"'
                if m["role"] not in _MSG_ROLES:
                    return f"prompt[{i}].role", f"unknown role {m['role']!r}"
        elif not isinstance(p, str):
            return "prompt", "must be a string or a list of chat messages"
    if "verifier" in rec and rec["verifier"] is not None and rec["verifier"] not in VERIFIERS:
        return "verifier", f"unknown verifier {rec['verifier']!r} (known: {', '.join(VERIFIERS)})"
    if "thinking" in rec and rec["thinking"] is not None and not isinstance(rec["thinking"], bool):
        return "thinking", "must be true, false or null"
    if "chat_template" in rec and rec["chat_template"] is not None and not isinstance(rec["chat_template"], str):
        return "chat_template", "must be the path of a chat template file"
    if "stop" in rec and rec["stop"] is not None and not _is_str_list(rec["stop"]):
        return "stop", "must be a list of strings"
    if "tests" in rec and not _is_str_list(rec["tests"]):
        return "tests", "must be a list of strings"
    if "stdio_tests" in rec and rec["stdio_tests"] is not None:
        t = rec["stdio_tests"]
        if not (isinstance(t, list) and all(isinstance(x, dict) and "input" in x and "output" in x for x in t)):
            return "stdio_tests", "must be a list of {input, output} objects"
    if "max_tokens" in rec and rec["max_tokens"] is not None and not (
            isinstance(rec["max_tokens"], int) and not isinstance(rec["max_tokens"], bool) and rec["max_tokens"] > 0):
        return "max_tokens", "must be a positive integer"
    for f in ("test_setup", "test", "entry_point", "prefix"):
        if f in rec and rec[f] is not None and not isinstance(rec[f], str):
            return f, "must be a string"
    if "instruction_id_list" in rec:
        if not _is_str_list(rec["instruction_id_list"]):
            return "instruction_id_list", "must be a list of strings"
        kw = rec.get("kwargs")
        if kw is not None:
            if not (isinstance(kw, list) and all(isinstance(k, dict) or k is None for k in kw)):
                return "kwargs", "must be a list of objects"
            if len(kw) != len(rec["instruction_id_list"]):
                return "kwargs", f"has {len(kw)} entries for {len(rec['instruction_id_list'])} instructions"
    n = None
    if "completions" in rec:
        if not _is_str_list(rec["completions"]):
            return "completions", "must be a list of strings"
        n = len(rec["completions"])
    if "rewards" in rec and "rewards" not in replaced:
        r = rec["rewards"]
        if not (isinstance(r, list) and all(is_number(x) for x in r)):
            return "rewards", "must be a list of numbers"
        if n is not None and len(r) != n:
            return "rewards", f"has {len(r)} entries for {n} completions"
    if "verdicts" in rec and "verdicts" not in replaced:
        v = rec["verdicts"]
        if not isinstance(v, list):
            return "verdicts", "must be a list of objects"
        for i, d in enumerate(v):
            if not isinstance(d, dict) or "status" not in d:
                return f"verdicts[{i}]", 'must be an object with a "status"'
            if d["status"] not in STATUSES:
                return f"verdicts[{i}].status", f"unknown status {d['status']!r} (known: {', '.join(STATUSES)})"
        if n is not None and len(v) != n:
            return "verdicts", f"has {len(v)} entries for {n} completions"
    return None


def require(rec: dict, *fields: str) -> tuple[str, str] | None:
    """Return (field, problem) for the first field in fields that rec lacks."""
    for f in fields:
        if f not in rec or rec[f] is None:
            return f, "required field is missing"
    return None


def _open(path: str) -> tuple[str, BinaryIO]:
    if path in ("-", ""):
        if sys.stdin is None:   # started with standard input closed (`<&-`)
            raise InputFileError("<stdin>: cannot read: standard input is closed")
        return "<stdin>", sys.stdin.buffer
    if path.endswith(".gz"):
        import gzip

        return path, gzip.open(path, "rb")  # type: ignore[return-value]
    return path, open(path, "rb")


def _lines(fh, name: str):
    """Numbered lines of an open input; read errors (a folder, a truncated .gz) name the file."""
    lineno = 0
    while True:
        try:
            raw = fh.readline()
        except (OSError, EOFError) as e:
            raise InputFileError(f"{name}: cannot read: {getattr(e, 'strerror', None) or e}") from None
        if not raw:
            return
        lineno += 1
        yield lineno, raw


def read_records(
    paths: Iterable[str] | None = None,
    keep_going: bool = False,
    required: tuple[str, ...] = (),
    validate: bool = True,
    defer_required: bool = False,
    check: Callable[[dict], tuple[str, str] | None] | None = None,
    replaced: tuple[str, ...] = (),
) -> Iterator[dict]:
    """Yield records from JSONL files ('-' or none = stdin), in order.

    Blank lines are skipped. A malformed line raises RecordError(FILE:LINE ...) unless
    keep_going, in which case an error record is yielded in its place. Error records from an
    upstream stage pass through. defer_required: a record lacking a required field is
    reported only after the whole input has parsed (a malformed line is reported first).
    check: a caller's own test of each record, (field, problem) or None, reported like a
    malformed line. replaced: fields this stage overwrites, not validated.
    """
    paths = list(paths or ["-"]) or ["-"]
    missing: RecordError | None = None
    for p in paths:
        try:
            name, fh = _open(p)
        except InputFileError:
            raise
        except OSError as e:
            raise InputFileError(f"{p}: cannot open: {e.strerror or e}") from None
        try:
            for lineno, raw in _lines(fh, name):
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]  # a UTF-8 byte order mark (files saved by some Windows editors)
                if not raw.strip():
                    continue
                try:
                    rec = loads(raw)  # integers beyond 64 bits kept exact (unknown fields pass untouched)
                except (orjson.JSONDecodeError, ValueError) as e:
                    err = RecordError(f"invalid JSON: {e.args[0].split(':')[0]}", name, lineno)
                    if not keep_going:
                        raise err from None
                    yield err.as_record(raw)
                    continue
                problem = check_record(rec, replaced) if validate else None
                if problem is None and required and not is_error_record(rec):
                    problem = require(rec, *required)
                    if problem is not None and defer_required and not keep_going:
                        # a missing field is reported once the whole input has parsed, so
                        # that a malformed line anywhere is reported first
                        missing = missing or RecordError(problem[1], name, lineno, problem[0])
                        continue
                if problem is None and check is not None and not is_error_record(rec):
                    problem = check(rec)
                if problem is not None:
                    field, what = problem
                    err = RecordError(what, name, lineno, field or None)
                    if not keep_going:
                        raise err
                    yield err.as_record(raw)
                    continue
                yield rec
        finally:
            if p not in ("-", ""):
                fh.close()
    if missing is not None:
        raise missing


_BIG_INT = re.compile(rb"\d{19,}")
_SURROGATE = re.compile("[\ud800-\udfff]")


def _bad(message: str, text: str = "", pos: int = 0) -> orjson.JSONDecodeError:
    return orjson.JSONDecodeError(message, text, pos)


def _no_constant(name: str) -> Any:
    raise _bad(f"{name} is not valid JSON")


def _finite(text: str) -> float:
    value = float(text)
    if math.isinf(value):
        raise _bad("number is infinity when parsed as double")
    return value


def _no_lone_surrogates(value: Any) -> None:
    todo = [value]
    while todo:
        v = todo.pop()
        if isinstance(v, str):
            if _SURROGATE.search(v):
                raise _bad("a lone surrogate in a string is not valid UTF-8")
        elif isinstance(v, dict):
            todo.extend(v)
            todo.extend(v.values())
        elif isinstance(v, list):
            todo.extend(v)


def loads(raw: bytes) -> Any:
    """One JSON value. orjson reads integers beyond 64 bits as floats: such text goes through
    the standard library, which keeps them exact, and refuses what orjson refuses (NaN and
    Infinity, numbers beyond a double, invalid UTF-8, lone surrogates, deep nesting) with an
    orjson.JSONDecodeError, so that a line's fate never depends on an unrelated big integer."""
    if not _BIG_INT.search(raw):
        return orjson.loads(raw)
    import json

    try:
        text = bytes(raw).decode("utf-8")
    except UnicodeDecodeError as e:
        raise _bad("str is not valid UTF-8", "", e.start) from None
    try:
        value = json.loads(text, parse_constant=_no_constant, parse_float=_finite)
    except json.JSONDecodeError as e:
        raise _bad(e.msg, e.doc, e.pos) from None
    except RecursionError:
        raise _bad("recursion limit reached", text) from None
    except ValueError as e:   # an integer of more digits than Python converts (sys.get_int_max_str_digits)
        raise _bad(str(e).split(":")[0], text) from None
    _no_lone_surrogates(value)
    return value


def _plain(v: Any) -> Any:
    """v as orjson writes it, for the standard library: numpy values as numbers and NaN or
    Infinity as null (standard JSON has no word for them)."""
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "tolist"):  # numpy scalars and arrays
        return _plain(v.tolist())
    return v


def to_json(obj: Any, indent: bool = False) -> bytes:
    """JSON bytes, compact (or indented by two spaces): rlvr's one JSON writer, for records,
    summaries and manifests alike. Integers beyond 64 bits (which orjson refuses) are
    written exactly; numpy values are written as numbers."""
    option = orjson.OPT_SERIALIZE_NUMPY | (orjson.OPT_INDENT_2 if indent else 0)
    try:
        return orjson.dumps(obj, option=option)
    except TypeError as e:
        if "64-bit" not in str(e):
            raise
    import json

    layout: dict[str, Any] = {"indent": 2} if indent else {"separators": (",", ":")}
    obj = _plain(obj)  # numpy values and NaN, as orjson writes them
    text = json.dumps(obj, ensure_ascii=False, **layout)
    try:
        return text.encode()
    except UnicodeEncodeError:  # a lone surrogate: escaped, so the line stays valid UTF-8
        return json.dumps(obj, **layout).encode()


def dumps(rec: dict) -> bytes:
    """One record as a JSONL line (bytes, newline-terminated)."""
    return to_json(rec) + b"\n"


class RecordWriter:
    """Writes records as JSONL, flushed per record (so pipes and `tail -f` see them)."""

    def __init__(self, fh: BinaryIO | None = None, flush: bool = True, close: bool | None = None):
        self.fh = fh if fh is not None else sys.stdout.buffer
        self.flush_each = flush
        # Close the handle at the end only if it is a file we were given to own.
        self.close_fh = (fh is not None and fh is not sys.stdout.buffer) if close is None else close
        self.count = 0

    def write(self, rec: dict) -> None:
        self.fh.write(dumps(rec))
        if self.flush_each:
            self.fh.flush()
        self.count += 1

    def close(self) -> None:
        try:
            self.fh.flush()
        except (BrokenPipeError, ValueError):
            pass
        if self.close_fh:
            self.fh.close()

    def __enter__(self) -> "RecordWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def open_resumable(path: str, check: Callable[[list[dict]], Any] | None = None,
                   exclusive: bool = False) -> tuple[list[dict], BinaryIO]:
    """Open an append-only JSONL output for resuming.

    Returns the complete records already in the file and a handle positioned to append. With
    `exclusive` the handle holds a lock on the file until it is closed: a second writer (the
    same command started twice) fails at once instead of interleaving its records. A torn last
    line (from a crash or kill -9) is cut off so the file stays valid JSONL; so is everything
    from a line that is not a JSON object on. `check` sees the records before the file is
    changed at all: what it raises leaves a file that is not this run's untouched.
    """
    import fcntl

    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fh = open(path, "ab")
    try:
        try:
            if exclusive:
                fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Failure(f"{path}: another process is writing this file (wait for it, or use another output; "
                          "after a killed run, a process it left behind may hold it: rlvr-gpu-free --kill-zombies)") from None
        except OSError:
            pass   # a file system without locks (some network mounts): written as before, unguarded
        done, good_end = _complete_records(path)
        if check is not None:
            check(done)
        if good_end != os.path.getsize(path):
            fh.truncate(good_end)
    except BaseException:
        fh.close()
        raise
    return done, fh


def _complete_records(path: str) -> tuple[list[dict], int]:
    """The records of a file's leading complete lines, and where they end."""
    done: list[dict] = []
    good_end = 0
    with open(path, "rb") as fh:
        pos = 0
        for raw in fh:
            end = pos + len(raw)
            if raw.endswith(b"\n"):
                if raw.strip():
                    try:
                        rec = loads(raw)
                    except orjson.JSONDecodeError:
                        break  # corrupt middle: keep what precedes it
                    if not isinstance(rec, dict):
                        break
                    done.append(rec)
                good_end = end
            pos = end
    return done, good_end


def complete_objects(path: str) -> Iterator[dict]:
    """The JSON objects of a diagnostic JSONL file a writer may still be appending to: lines up
    to the first torn (unterminated) one; lines that are not an object are skipped."""
    with open(path, "rb") as fh:
        for ln in fh:
            if not ln.endswith(b"\n"):
                return
            try:
                r = orjson.loads(ln)
            except orjson.JSONDecodeError:
                continue
            if isinstance(r, dict):
                yield r


@contextlib.contextmanager
def atomic_file(path: str, sync: bool = True) -> Iterator[BinaryIO]:
    """A binary file handle whose content appears at `path` only when the block ends without
    error: written to a temp file in the same folder (one per process and thread), fsynced
    unless `sync` is False (state a crash may lose, written often), renamed over `path`.
    rlvr's one atomic write (manifests, summaries, tables, trainer state, transfer state)."""
    d = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, f".{os.path.basename(path)}.tmp{os.getpid()}.{threading.get_ident()}")
    try:
        with open(tmp, "wb") as fh:
            yield fh
            fh.flush()
            if sync:
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def atomic_write(path: str, data: bytes, sync: bool = True) -> None:
    """Write a whole file atomically (see atomic_file)."""
    with atomic_file(path, sync) as fh:
        fh.write(data)


def write_json(path: str, obj: Any) -> None:
    """An indented JSON file (summary.json, run.json, ...), written atomically with to_json."""
    atomic_write(path, to_json(obj, indent=True) + b"\n")
