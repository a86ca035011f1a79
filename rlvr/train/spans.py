"""Spans: what each actor and the driver was doing, and when (traces/spans.jsonl).

A span is one piece of work of one actor: {"actor", "kind", "start", "end", "step", "version",
"ids"} (times in seconds since the epoch, time.time(); "ids" the prompt or request ids it
concerns, at most MAX_IDS of them plus "n_ids" when there were more). Each process records its
own spans in a `Recorder`, cheaply (two clock reads and one list append under a lock; measured by
`python -m rlvr.train.spans`), and the driver collects them into a `SpanLog`:

    from rlvr.train import spans
    spans.set_actor("engine-0")                     # once per process (default: "driver")
    with spans.span("generate", step=s, version=v, ids=ids):
        ...
    tok = spans.begin("verify", step=s); ...; spans.end(tok)
    with spans.span("verify", step=s, actor="verifier"):   # on behalf of another lane
    spans.drain()       # {"spans": [closed since the last drain], "open": [still open]}

An actor hands its spans over when the driver asks (rlvr.train.observe's `Observed.drain_spans`,
served on a thread of its own so that a busy actor still answers); the driver's SpanLog writes
them, keeps the open ones for the stall watchdog (rlvr.train.watchdog) and bounds the file: the
first `full_mb` MB hold every span; past that, every `sample_every`-th step keeps all its spans
and the other steps keep an outline, one span per (step, actor, kind) from the first start to the
last end with "n" (how many) and "busy" (their summed seconds), so every step still shows
who did what when.
"""

from __future__ import annotations

import itertools
import os
import threading
import time

import orjson

MAX_IDS = 64
KINDS = ("generate", "verify", "pi_old", "forward_backward", "optimizer", "weight_gather", "weight_send",
         "weight_receive", "weight_load", "checkpoint_save", "checkpoint_upload", "validation", "teacher",
         "judge", "step")
"""The kinds rlvr records (a span may carry any other kind; the page colours these in this order)."""


def _ids(ids) -> tuple[list | None, int | None]:
    if ids is None:
        return None, None
    if not isinstance(ids, (list, tuple)):
        ids = list(ids)
    if len(ids) > MAX_IDS:
        return list(ids[:MAX_IDS]), len(ids)
    return ids, None


MAX_HELD = 200_000
"""Closed spans a recorder holds between two drains; past it the oldest go (counted in `dropped`),
so a process nobody drains stays bounded."""


class Recorder:
    """The spans of one process: open ones by token, closed ones until drained. Thread-safe.
    `enabled = False` (log.spans: false) makes begin/end do nothing."""

    def __init__(self, actor: str = "driver", clock=time.time):
        self.actor = actor
        self.clock = clock
        self.enabled = True
        self.dropped = 0
        self._lock = threading.Lock()
        self._open: dict[int, dict] = {}
        self._closed: list[dict] = []
        self._tokens = itertools.count()

    def begin(self, kind: str, step: int | None = None, version: int | None = None, ids=None, **extra) -> int | None:
        if not self.enabled:
            return None
        rec = {"actor": self.actor, "kind": kind, "start": self.clock(), "step": step, "version": version}
        ids, n = _ids(ids)
        if ids is not None:
            rec["ids"] = ids
        if n is not None:
            rec["n_ids"] = n
        if extra:
            rec.update(extra)
        tok = next(self._tokens)
        with self._lock:
            self._open[tok] = rec
        return tok

    def end(self, token: int | None, **extra) -> dict | None:
        if token is None:
            return None
        t = self.clock()
        with self._lock:
            rec = self._open.pop(token, None)
            if rec is None:
                return None
            rec["end"] = t
            if extra:
                rec.update(extra)
            self._closed.append(rec)
            if len(self._closed) > MAX_HELD:
                cut = len(self._closed) - MAX_HELD // 2
                del self._closed[:cut]
                self.dropped += cut
        return rec

    def span(self, kind: str, step: int | None = None, version: int | None = None, ids=None, **extra) -> "_Span":
        return _Span(self, kind, step, version, ids, extra)

    def reset(self, actor: str = "driver") -> None:
        """Start afresh as `actor`: the spans held so far (closed or open) are dropped. A run's
        driver calls it as the run starts, so that what this process recorded before (an earlier
        run in the same process, a library call of an actor's method) is not written as the run's."""
        with self._lock:
            self.actor = actor
            self._open.clear()
            self._closed = []
            self.dropped = 0

    def drain(self) -> dict:
        """{"spans": the spans closed since the last drain, "open": copies of the open ones}."""
        with self._lock:
            closed, self._closed = self._closed, []
            still = [dict(r) for r in self._open.values()]
        return {"spans": closed, "open": still}


class _Span:
    __slots__ = ("rec", "args", "tok")

    def __init__(self, rec, kind, step, version, ids, extra):
        self.rec, self.args, self.tok = rec, (kind, step, version, ids, extra), None

    def __enter__(self):
        kind, step, version, ids, extra = self.args
        self.tok = self.rec.begin(kind, step, version, ids, **extra)
        return self

    def __exit__(self, et, ev, tb):
        self.rec.end(self.tok, **({"error": et.__name__} if et is not None else {}))
        return False


_recorder = Recorder()


def recorder() -> Recorder:
    return _recorder


def set_actor(name: str, enabled: bool = True) -> Recorder:
    """Name this process's spans (an actor calls it once, when it starts); enabled False: record none."""
    _recorder.actor = name
    _recorder.enabled = enabled
    return _recorder


def span(kind: str, step: int | None = None, version: int | None = None, ids=None, **extra) -> _Span:
    return _recorder.span(kind, step, version, ids, **extra)


def begin(kind: str, step: int | None = None, version: int | None = None, ids=None, **extra) -> int:
    return _recorder.begin(kind, step, version, ids, **extra)


def end(token: int, **extra) -> dict | None:
    return _recorder.end(token, **extra)


def drain() -> dict:
    return _recorder.drain()


# --------------------------------------------------------------------------- the driver's file


class SpanLog:
    """RUN_DIR/traces/spans.jsonl, written by the driver from every actor's drained spans.

    add(actor_drain) writes closed spans (or folds them into their step's outline once the file
    is past `full_mb`) and keeps each actor's open spans; end_step(step) writes the outlines of
    the steps up to `step`; `open_spans()` and `last_end` feed the stall watchdog."""

    def __init__(self, run_dir: str, full_mb: float = 100.0, sample_every: int = 10, clock=time.time):
        self.path = os.path.join(run_dir, "traces", "spans.jsonl")
        os.makedirs(os.path.dirname(self.path), exist_ok=True)
        self.fh = open(self.path, "ab")
        self.full_bytes = int(full_mb * 2**20)
        self.sample_every = max(1, int(sample_every))
        self.written = self.fh.tell()
        self.lock = threading.Lock()
        self.open: dict[str, list[dict]] = {}
        self.outlines: dict[tuple, dict] = {}
        self.last_end = clock()
        self.spans = 0

    def _keep(self, rec: dict) -> bool:
        step = rec.get("step")
        return self.written < self.full_bytes or step is None or step % self.sample_every == 0

    def add(self, actor: str, drained: dict) -> None:
        """One actor's drain ({"spans", "open"}); its open list replaces the one held before."""
        out = []
        with self.lock:
            for rec in drained.get("spans") or ():
                end = rec.get("end")
                if isinstance(end, (int, float)) and end > self.last_end:
                    self.last_end = end
                if self._keep(rec):
                    out.append(orjson.dumps(rec, option=orjson.OPT_SERIALIZE_NUMPY))
                    continue
                key = (rec.get("step"), rec["actor"], rec["kind"])
                o = self.outlines.get(key)
                busy = rec["end"] - rec["start"]
                if o is None:
                    self.outlines[key] = {"actor": rec["actor"], "kind": rec["kind"], "start": rec["start"],
                                          "end": rec["end"], "step": rec.get("step"), "version": rec.get("version"),
                                          "n": 1, "busy": busy, "outline": True}
                else:
                    o["start"], o["end"] = min(o["start"], rec["start"]), max(o["end"], rec["end"])
                    o["n"] += 1
                    o["busy"] += busy
            self.open[actor] = list(drained.get("open") or ())
            self._write(out)

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        data = b"\n".join(lines) + b"\n"
        self.fh.write(data)
        self.fh.flush()
        self.written += len(data)
        self.spans += len(lines)

    def end_step(self, step: int) -> None:
        """Write the outlines of the steps <= step (a span of a later step arriving afterwards for
        one of them starts a new outline line)."""
        with self.lock:
            done = [k for k in self.outlines if k[0] is None or k[0] <= step]
            self._write([orjson.dumps(self.outlines.pop(k)) for k in done])

    def open_spans(self) -> list[dict]:
        with self.lock:
            return [r for rs in self.open.values() for r in rs]

    def close(self) -> None:
        with self.lock:
            self._write([orjson.dumps(o) for o in self.outlines.values()])
            self.outlines = {}
            self.fh.close()


def read_spans(path: str, steps: tuple[int | None, int | None] = (None, None)) -> list[dict]:
    """The spans of a spans.jsonl whose step lies in steps (inclusive; None: open ended; spans
    without a step are kept). A torn last line is skipped; a bad line is skipped too (the file is
    a diagnostic, never a reason to fail a report)."""
    from rlvr.records import complete_objects

    lo, hi = steps
    out = []
    for r in complete_objects(path):
        if not isinstance(r.get("start"), (int, float)) or not isinstance(r.get("end"), (int, float)):
            continue
        s = r.get("step")
        if isinstance(s, int) and ((lo is not None and s < lo) or (hi is not None and s > hi)):
            continue
        out.append(r)
    return out


def benchmark(n: int = 200_000) -> dict:
    """CPU seconds per span (time.process_time, so that other processes on a busy machine do not
    count) of Recorder.span (enter + exit, 8 ids) and of begin/end."""
    rec = Recorder("bench")
    ids = list(range(8))
    t0 = time.process_time()
    for i in range(n):
        with rec.span("generate", step=i, version=i, ids=ids):
            pass
    t1 = time.process_time()
    rec.drain()
    t2 = time.process_time()
    for i in range(n):
        rec.end(rec.begin("verify", step=i))
    t3 = time.process_time()
    drained = rec.drain()
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        log = SpanLog(d)
        t4 = time.process_time()
        log.add("bench", drained)
        log.close()
        t5 = time.process_time()
    return {"span_with_s": (t1 - t0) / n, "begin_end_s": (t3 - t2) / n, "write_s": (t5 - t4) / n, "n": n}


if __name__ == "__main__":
    b = benchmark()
    print(f"{b['n']} spans: with span(): {b['span_with_s'] * 1e6:.2f} us/span; "
          f"begin/end: {b['begin_end_s'] * 1e6:.2f} us/span; written by the driver: {b['write_s'] * 1e6:.2f} us/span "
          "(CPU time)")
