"""The verification engine: a pool of killable worker processes with hard timeouts.

    with VerifierPool(jobs=8, timeout=None, config={"math": {"mode": "default"}}) as pool:
        for rec in pool.verify_records(records):      # same order, N in -> N out
            rec["rewards"], rec["verdicts"]

rlvr-verify, rlvr-eval and rlvr-train's reward stage all call this one class; keep one
pool alive across many calls (workers import their verifier once and stay warm).

How it works. Workers are plain ``python`` subprocesses (no fork of the caller, no
signals in the caller's thread, so it runs from a Ray driver thread too), each in its own
process group, talking length-prefixed JSON over two private pipes; a verifier's own
prints cannot corrupt the protocol. Work goes out as tasks of one verifier and at most
``chunk_size`` completions (small records are batched, large ones split); each worker
keeps PIPELINE tasks queued so it never waits for the parent. A worker answers each task
with "begin" (its verifier is loaded) and then one verdict per completion as each
finishes. Every verification has its own deadline, counted from the previous verdict (or
the "begin"): a worker past it is killed with its process group and replaced; the stuck
completion gets status ``timeout``, finished ones are kept and the rest go, in order, to a
fresh worker. A worker that dies (segfault, os._exit, out of memory) costs the completion
it was on an ``error`` verdict, never a record or the stream. Output order equals input
order; at most ``window`` records are in flight, so memory stays flat on any input size.
Deadlines are checked while the caller pulls records, so a consumer that stops pulling
can only make timeouts more lenient, never stricter. Workers exit when the caller dies.

The LLM judge (rlvr.verifiers.judge) is a verifier like the others; with judge options in
``config`` the pool routes to it every record it takes (``route``: all, or its ``datasets``;
``verifier: judge`` records always) and hands it the other verifiers' options, so its
weighted and gate modes run the record's own verifier in the same worker.

Timeouts: ``timeout`` (seconds, for every verifier) or a dict {verifier: seconds,
"default": seconds}; a verifier left out uses its module's own limit (``timeout_s(options)``
where it has one: code's follows its time limits; else ``TIMEOUT_S``, math 3 s) or 5 s.
"""

from __future__ import annotations

import collections
import math
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from rlvr.records import STATUSES, is_error_record, loads, to_json
from rlvr.verifiers import MODULES
from rlvr.verification.rewards import RewardTable
from rlvr.verification.thinking import UNFINISHED, check_markers, record_mode, split

DEFAULT_TIMEOUT_S = 5.0
STARTUP_TIMEOUT_S = 120.0  # python start + verifier import + warmup, on a loaded machine
_HDR = struct.Struct("<I")
_ERR_TAIL = 4000


def _module_timeout(mod, cfg: dict) -> float | None:
    """A verifier's own limit for one verification: its timeout_s(options) where it has one
    (the code verifier's depends on its time limits), else its TIMEOUT_S."""
    fn = getattr(mod, "timeout_s", None)
    if callable(fn):
        try:
            return float(fn(cfg))
        except Exception:  # noqa: BLE001 - bad options get their error verdicts from verify
            pass
    return getattr(mod, "TIMEOUT_S", None)


def default_jobs() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def normalize_config(config: Mapping | None, verifiers: Iterable[str]) -> dict[str, dict]:
    """{verifier: {key: value}} from nested ({"math": {"mode": ...}}), dotted
    ({"math.mode": ...}) or prefixed ({"math_mode": ...}) forms."""
    names = sorted(set(verifiers), key=len, reverse=True)
    out: dict[str, dict] = {}
    for key, value in (config or {}).items():
        if key in names:
            if not isinstance(value, Mapping):
                raise ValueError(f"verifier options for {key!r} must be a mapping, got {type(value).__name__}")
            out.setdefault(key, {}).update(value)
            continue
        if "." in key:
            name, opt = key.split(".", 1)
        else:
            name = next((n for n in names if key.startswith(n + "_")), None)
            opt = key[len(name) + 1:] if name else ""
        if name not in names or not opt:
            raise ValueError(f"unknown verifier option {key!r} (expected VERIFIER.OPTION, verifiers: {', '.join(sorted(names))})")
        out.setdefault(name, {})[opt] = value
    return out


# ----------------------------------------------------------------------------- framing


def _frame(obj) -> bytes:
    b = to_json(obj)   # integers beyond 64 bits (a field of the record) travel exactly
    return _HDR.pack(len(b)) + b


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


# ----------------------------------------------------------------------------- worker side


def _read_exact(fh, n: int) -> bytes | None:
    data = fh.read(n)
    if data is None or len(data) < n:
        return None
    return data


def _watch_parent(parent: int) -> None:
    while True:
        time.sleep(1.0)
        if os.getppid() != parent:
            os._exit(1)


def _worker_main(rfd: int, wfd: int) -> None:
    """Entry point of a worker process (started by VerifierPool, never by hand)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    parent = os.getppid()
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    rin = os.fdopen(rfd, "rb")

    def send(obj) -> None:
        try:
            data = _frame(obj)
        except TypeError as e:  # a verdict that is not JSON: report it instead of dying
            v = {"status": "error", "extracted": None, "error": f"verdict is not JSON-serialisable: {e}"}
            data = _frame({**obj, "v": v})
        _write_all(wfd, data)

    def recv():
        head = _read_exact(rin, _HDR.size)
        if head is None:
            return None
        body = _read_exact(rin, _HDR.unpack(head)[0])
        return None if body is None else loads(body)

    init = recv()
    if init is None:
        return
    for p in reversed(init.get("sys_path", [])):
        if p not in sys.path:
            sys.path.insert(0, p)
    mem = init.get("memory_mb")
    if mem:
        import resource

        lim = int(mem) * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    modules: dict = init["modules"]
    config: dict = init.get("config", {})
    loaded: dict[str, tuple] = {}

    def load(name: str):
        if name not in loaded:
            import importlib

            try:
                mod = importlib.import_module(modules[name])
                warm = getattr(mod, "warmup", None)
                if warm is not None:
                    warm()
                loaded[name] = (mod, None)
            except BaseException as e:  # noqa: BLE001 - a broken verifier module is reported, not fatal
                if isinstance(e, KeyboardInterrupt):
                    raise
                loaded[name] = (None, f"verifier {name!r} is not available ({modules.get(name)}): {type(e).__name__}: {e}")
        return loaded[name]

    for name in init.get("preload", []):
        load(name)
    send({"op": "ready", "pid": os.getpid()})
    while True:
        msg = recv()
        if msg is None:
            return
        tid, name = msg["tid"], msg["verifier"]
        mod, err = load(name)
        if mod is None:
            send({"op": "begin", "tid": tid, "error": err})
            continue
        cfg = config.get(name, {})
        send({"op": "begin", "tid": tid, "version": str(getattr(mod, "VERSION", "?")),
              "timeout": _module_timeout(mod, cfg)})
        k = 0
        for rec, completions in msg["items"]:
            for completion in completions:
                t0 = time.perf_counter()
                try:
                    v = mod.verify(rec, completion, cfg)
                    if not isinstance(v, dict) or v.get("status") not in STATUSES:
                        v = {"status": "error", "extracted": None,
                             "error": f"verifier returned an invalid verdict: {str(v)[:200]}"}
                except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of verify is a verdict
                    v = {"status": "error", "extracted": None, "error": f"{type(e).__name__}: {str(e)[:500]}"}
                v["duration_s"] = round(time.perf_counter() - t0, 6)
                send({"op": "v", "tid": tid, "k": k, "v": v})
                k += 1


# ----------------------------------------------------------------------------- parent side


class WorkerStartError(RuntimeError):
    """A worker process could not start (bad environment): the pool cannot work."""


class _Slot:
    """One record on its way through: verdicts fill in as they arrive. texts: what the
    verifier grades of each completion (its answer, rlvr.verification.thinking); think: the
    thinking split of each completion (None where no thinking is involved)."""

    __slots__ = ("rec", "verdicts", "left", "texts", "think")

    def __init__(self, rec, n: int):
        self.rec, self.verdicts, self.left = rec, [None] * n, n
        self.texts: list[str] = []
        self.think: list[dict | None] = [None] * n


class _Chunk:
    """Completions idx of one record, for one verifier."""

    __slots__ = ("slot", "name", "idx", "payload")

    def __init__(self, slot: _Slot, name: str, idx: list[int], payload: dict):
        self.slot, self.name, self.idx, self.payload = slot, name, idx, payload


class _Task:
    """What one message to a worker asks for: chunks of one verifier, verified in order."""

    __slots__ = ("tid", "name", "chunks", "targets", "done", "begun")

    def __init__(self, tid: int, name: str, chunks: list[_Chunk]):
        self.tid, self.name, self.chunks = tid, name, chunks
        self.targets = [(ch, i) for ch in chunks for i in ch.idx]
        self.done = 0
        self.begun = False  # "begin" arrived: the verifier is loaded, the clock runs per verification


class _Worker:
    __slots__ = ("proc", "wfd", "rfd", "efd", "buf", "err", "tasks", "deadline", "ready", "loaded")

    def __init__(self, proc, wfd, rfd, efd):
        self.proc, self.wfd, self.rfd, self.efd = proc, wfd, rfd, efd
        self.buf, self.err = bytearray(), bytearray()
        self.tasks: collections.deque[_Task] = collections.deque()
        self.deadline: float | None = None
        self.ready = False
        self.loaded: dict[str, tuple] = {}  # verifier -> (version, timeout) once it has begun a task


def _describe_exit(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


class VerifierPool:
    """Worker processes that verify records; see the module docstring.

    jobs: worker processes (default: the usable cores). timeout: seconds per verification,
    a {verifier: seconds} dict, or None for each verifier's own default. config: verifier
    options (nested, dotted or prefixed, see normalize_config). reward_table/reward_mode:
    see rlvr.verification.rewards. verifier: force this verifier for every record.
    chunk_size: completions per message to a worker (small records are batched, large ones
    split). window: records in flight (memory bound). memory_mb: address-space limit per
    worker (None: none). modules: verifier name -> module (default rlvr.verifiers.MODULES).
    thinking: answer-only judging for every record (True), for none (False), or per record
    (None: its ``thinking`` field, else the text decides); think_markers: the (open, close)
    pair (rlvr.verification.thinking).
    """

    PIPELINE = 2  # tasks queued per worker, so it never waits for the parent

    def __init__(self, jobs: int | None = None, timeout: float | Mapping | None = None,
                 config: Mapping | None = None, reward_table: Mapping | RewardTable | None = None,
                 reward_mode: str = "binary", verifier: str | None = None, *, chunk_size: int = 8,
                 window: int | None = None, memory_mb: int | None = 4096, modules: Mapping | None = None,
                 startup_timeout: float = STARTUP_TIMEOUT_S, thinking: bool | None = None,
                 think_markers: tuple[str, str] | None = None):
        self.jobs = int(jobs) if jobs else default_jobs()
        if self.jobs < 1:
            raise ValueError("jobs must be >= 1")
        self.modules = dict(modules if modules is not None else MODULES)
        if verifier is not None and verifier not in self.modules:
            raise ValueError(f"unknown verifier {verifier!r} (known: {', '.join(sorted(self.modules))})")
        self.force = verifier
        if thinking is not None and not isinstance(thinking, bool):
            raise ValueError(f"thinking must be true, false or null, got {thinking!r}")
        self.thinking = thinking
        self.think_markers = check_markers(think_markers)
        self._record_checks: dict[str, Any] = {}
        self.timeouts = self._timeouts(timeout)
        self.config = normalize_config(config, self.modules)
        self._judge_rules()
        self._check_config()
        self.rewards = reward_table if isinstance(reward_table, RewardTable) else RewardTable(reward_table, reward_mode)
        self.chunk_size = max(1, int(chunk_size))
        self.window = int(window) if window else max(64, 16 * self.jobs)
        self.memory_mb = memory_mb
        self.startup_timeout = startup_timeout
        self._workers: list[_Worker] = []
        self._queue: collections.deque[_Chunk] = collections.deque()
        self._sel = selectors.DefaultSelector()
        self._tid = 0
        self._busy = False
        self._closed = False
        self._unavailable: dict[str, str] = {}
        self._seen: set[str] = set()
        self._debug = bool(os.environ.get("RLVR_DEBUG"))
        self.stats = collections.Counter()

    # -- configuration -------------------------------------------------------------------

    def _timeouts(self, timeout) -> dict[str, float]:
        if timeout is None:
            return {}
        if isinstance(timeout, Mapping):
            out = {}
            for k, v in timeout.items():
                if k != "default" and k not in self.modules:
                    raise ValueError(f"timeout for unknown verifier {k!r}")
                out[k] = self._seconds(v)
            return out
        return {"__all__": self._seconds(timeout)}

    @staticmethod
    def _seconds(v) -> float:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise ValueError(f"timeout must be a positive number of seconds, got {v!r}")
        return float(v)

    def _judge_rules(self) -> None:
        """With a judge configured (rlvr.verifiers.judge), hand it the other verifiers' options:
        its weighted and gate modes run the record's own verifier in the same worker."""
        if "judge" in self.config and "judge" in self.modules:
            rules = {n: dict(o) for n, o in self.config.items() if n != "judge"}
            self.config["judge"] = {**self.config["judge"], "rules": {**rules, **self.config["judge"].get("rules", {})}}

    def route(self, rec: dict) -> str | None:
        """The verifier a record goes to: the forced one, else the judge where one is
        configured and takes this record (rlvr.verifiers.judge.judged), else its own."""
        if self.force:
            return self.force
        if "judge" in self.config and "judge" in self.modules:
            from rlvr.verifiers.judge import judged

            if judged(rec, self.config["judge"]):
                return "judge"
        return rec.get("verifier")

    def _check_config(self) -> None:
        import importlib

        for name, opts in self.config.items():
            try:
                mod = importlib.import_module(self.modules[name])
            except ImportError as e:
                raise ValueError(f"options given for verifier {name!r}, which is not available: {e}") from None
            check = getattr(mod, "check_config", None)
            if check is not None:
                check(opts)

    @property
    def unavailable(self) -> dict[str, str]:
        """{verifier name: why} for verifiers whose module failed to load in a worker."""
        return dict(self._unavailable)

    def check_record(self, rec: dict) -> tuple[str, str] | None:
        """(field, problem) when a record with completions cannot be graded whatever they say:
        an unknown verifier, or reference fields its verifier rejects (the module's optional
        ``check_record``). For callers that report bad input at its FILE:LINE (rlvr-verify);
        the pool itself turns the same problems into error verdicts."""
        if not isinstance(rec, dict) or is_error_record(rec) or not rec.get("completions"):
            return None
        name = self.route(rec)
        if not name:
            return None  # reported once for the whole input (use --verifier)
        if name not in self.modules:
            return "verifier", f"unknown verifier {name!r} (known: {', '.join(sorted(self.modules))})"
        if name == "judge":
            from rlvr.verifiers.judge import NOT_CONFIGURED

            if "judge" not in self.config:
                return "verifier", NOT_CONFIGURED
            own = rec.get("verifier")
            if self.config["judge"].get("mode") in ("weighted", "gate") and own and own != "judge":
                problem = self._check_with(own, rec)  # the rule verifier grades it too
                if problem is not None:
                    return problem
        return self._check_with(name, rec)

    def _check_with(self, name: str, rec: dict) -> tuple[str, str] | None:
        if name not in self.modules:
            return "verifier", f"unknown verifier {name!r} (known: {', '.join(sorted(self.modules))})"
        check = self._record_checks.get(name, False)
        if check is False:
            import importlib

            try:
                check = getattr(importlib.import_module(self.modules[name]), "check_record", None)
            except Exception:  # noqa: BLE001 - unavailable here: the workers' verdicts say why
                check = None
            self._record_checks[name] = check
        if check is None:
            return None
        try:
            return check(rec)
        except Exception:  # noqa: BLE001 - e.g. tests too deep to parse: the worker's error verdict says so
            return None

    def timeout_for(self, name: str, module_default: float | None = None) -> float:
        """The per-verification timeout of a verifier: the caller's, else the module's
        TIMEOUT_S, else DEFAULT_TIMEOUT_S."""
        if "__all__" in self.timeouts:
            return self.timeouts["__all__"]
        if name in self.timeouts:
            return self.timeouts[name]
        if isinstance(module_default, (int, float)) and not isinstance(module_default, bool) and module_default > 0:
            return float(module_default)
        return self.timeouts.get("default", DEFAULT_TIMEOUT_S)

    # -- lifecycle -----------------------------------------------------------------------

    def __enter__(self) -> "VerifierPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def close(self) -> None:
        """Stop every worker (end of input first, then SIGKILL to the process group)."""
        if self._closed:
            return
        self._closed = True
        for w in list(self._workers):
            try:
                os.close(w.wfd)  # EOF: an idle worker exits by itself
            except OSError:
                pass
            w.wfd = -1
        end = time.monotonic() + 0.5
        for w in list(self._workers):
            try:
                w.proc.wait(timeout=max(0.0, end - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
            self._kill(w)
        try:
            self._sel.close()
        except Exception:  # noqa: BLE001
            pass

    def _spawn(self) -> _Worker:
        import rlvr

        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        root = os.path.dirname(os.path.dirname(os.path.abspath(rlvr.__file__)))
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.setdefault("OMP_NUM_THREADS", "1")
        code = "import sys; from rlvr.verification.pool import _worker_main; _worker_main(int(sys.argv[1]), int(sys.argv[2]))"
        try:
            proc = subprocess.Popen([sys.executable, "-c", code, str(r1), str(w2)], pass_fds=(r1, w2),
                                    stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                                    start_new_session=True, env=env, close_fds=True)
        except OSError as e:
            for fd in (r1, w1, r2, w2):
                os.close(fd)
            raise WorkerStartError(f"cannot start a verifier worker: {e}") from None
        os.close(r1)
        os.close(w2)
        efd = proc.stderr.fileno()
        os.set_blocking(r2, False)
        os.set_blocking(efd, False)
        w = _Worker(proc, w1, r2, efd)
        self._sel.register(r2, selectors.EVENT_READ, (w, "out"))
        self._sel.register(efd, selectors.EVENT_READ, (w, "err"))
        self._workers.append(w)
        self.stats["workers_started"] += 1
        init = {"sys_path": [p for p in sys.path if p and os.path.isdir(p)], "modules": self.modules,
                "config": self.config, "preload": sorted(self._seen - set(self._unavailable)),
                "memory_mb": self.memory_mb}
        if not self._send(w, init):
            raise WorkerStartError(f"a verifier worker exited at start ({_describe_exit(w.proc.poll())})")
        return w

    def _kill(self, w: _Worker) -> None:
        if w in self._workers:
            self._workers.remove(w)
        for fd in (w.rfd, w.efd):
            try:
                self._sel.unregister(fd)
            except (KeyError, ValueError, OSError):
                pass
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            w.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        for fd in (w.wfd, w.rfd):
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
        w.wfd = w.rfd = -1
        try:
            w.proc.stderr.close()
        except OSError:
            pass

    def _send(self, w: _Worker, obj) -> bool:
        try:
            _write_all(w.wfd, _frame(obj))
            return True
        except OSError:  # BrokenPipeError included: the worker is gone
            return False

    # -- the public call -----------------------------------------------------------------

    def verify_records(self, records: Iterable[dict]) -> Iterator[dict]:
        """Yield each record (a shallow copy) with ``rewards`` and ``verdicts``, in input
        order. Records without completions get empty lists; --keep-going error records
        pass through untouched. An exception raised by ``records`` itself (a bad input
        line) is re-raised after the records read before it have been yielded."""
        if self._closed:
            raise RuntimeError("the verifier pool is closed")
        if self._busy:
            raise RuntimeError("the verifier pool is already verifying (one call at a time)")
        self._busy = True
        pending: collections.deque[_Slot] = collections.deque()
        it = iter(records)
        exhausted = False
        failure: BaseException | None = None
        polled = time.monotonic()
        try:
            while True:
                while not exhausted and len(pending) < self.window:
                    t_read = time.monotonic()
                    try:
                        rec = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    except KeyboardInterrupt:
                        # Ctrl-C while waiting for input: what is already verified comes out first
                        self._step(block=False)
                        while pending and pending[0].left == 0:
                            yield self._finish(pending.popleft())
                        raise
                    except Exception as e:  # noqa: BLE001 - re-raised once earlier records are out
                        failure = e
                        exhausted = True
                        break
                    pending.append(self._admit(rec))
                    # When the input trickles in (a slow upstream stage), verify meanwhile:
                    # results are collected and finished records go out as each next record
                    # arrives. A fast input fills the window first (larger tasks per worker).
                    now = time.monotonic()
                    if now - t_read > 0.01 or now - polled > 0.05:
                        polled = now
                        self._step(block=False)
                        while pending and pending[0].left == 0:
                            yield self._finish(pending.popleft())
                while pending and pending[0].left == 0:
                    yield self._finish(pending.popleft())
                if not pending:
                    if exhausted:
                        break
                    continue
                self._step()
                polled = time.monotonic()
        finally:
            self._busy = False
            if pending or self._queue or any(w.tasks for w in self._workers):
                self._abandon()
        if failure is not None:
            raise failure

    def verify_all(self, records: Iterable[dict]) -> list[dict]:
        """verify_records as a list."""
        return list(self.verify_records(records))

    # -- admission and results -----------------------------------------------------------

    def _admit(self, rec) -> _Slot:
        if not isinstance(rec, dict) or is_error_record(rec):
            s = _Slot(rec, 0)
            s.verdicts = None  # passes through untouched
            return s
        out = dict(rec)
        comps = out.get("completions") or []
        name = self.route(out)
        slot = _Slot(out, len(comps))
        if not comps:
            return slot
        bad = None
        if not isinstance(comps, list) or not all(isinstance(c, str) for c in comps):
            bad = "completions must be a list of strings"
        elif not name:
            bad = "record has no verifier (set its verifier field or force one)"
        elif name not in self.modules:
            bad = f"unknown verifier {name!r} (known: {', '.join(sorted(self.modules))})"
        elif name in self._unavailable:
            bad = self._unavailable[name]
        elif name == "judge" and "judge" not in self.config:
            from rlvr.verifiers.judge import NOT_CONFIGURED

            bad = NOT_CONFIGURED
        payload = {k: v for k, v in out.items() if k not in ("completions", "rewards", "verdicts")}
        if bad is None:
            try:
                _frame(payload)
            except TypeError as e:
                bad = f"record is not JSON-serialisable: {e}"
        if bad is not None:
            for i in range(len(comps)):
                slot.verdicts[i] = self._verdict({"status": "error", "extracted": None, "error": bad}, name, None)
            slot.left = 0
            return slot
        self._seen.add(name)
        # answer-only judging (rlvr.verification.thinking): the verifier sees the answer of
        # each completion; one whose thinking never closed gets its verdict here
        mode = record_mode(out, self.thinking)
        idx = []
        for i, c in enumerate(comps):
            sp = split(c, mode, self.think_markers)
            slot.texts.append(c if sp is None else (sp.answer or ""))
            if sp is None:
                idx.append(i)
                continue
            slot.think[i] = sp.info()
            if sp.closed:
                idx.append(i)
            else:
                self._set_slot(slot, i, {"status": UNFINISHED, "extracted": None,
                                         "message": "the thinking never closed: no answer to judge"}, None)
        for a in range(0, len(idx), self.chunk_size):
            self._queue.append(_Chunk(slot, name, idx[a:a + self.chunk_size], payload))
        return slot

    def _finish(self, slot: _Slot):
        if slot.verdicts is None:
            return slot.rec
        slot.rec["verdicts"] = slot.verdicts
        slot.rec["rewards"] = [self.rewards.reward(v) for v in slot.verdicts]
        return slot.rec

    def _verdict(self, v: dict, name: str | None, version) -> dict:
        v["verifier"] = name
        v["version"] = version
        v.setdefault("duration_s", 0.0)
        self.stats[v["status"]] += 1
        return v

    def _set(self, ch: _Chunk, i: int, v: dict, version) -> None:
        self._set_slot(ch.slot, i, v, version, ch.name)

    def _set_slot(self, slot: _Slot, i: int, v: dict, version, name: str | None = None) -> None:
        if slot.verdicts[i] is None:
            if slot.think[i] is not None:
                v["thinking"] = slot.think[i]
            slot.verdicts[i] = self._verdict(v, name or self.force or slot.rec.get("verifier"), version)
            slot.left -= 1

    def _fail(self, targets, message: str, status: str = "error", version=None, duration: float = 0.0) -> None:
        for ch, i in targets:
            self._set(ch, i, {"status": status, "extracted": None, "duration_s": round(duration, 6),
                              "error": message}, version)

    # -- scheduling ----------------------------------------------------------------------

    def _next_task(self) -> _Task | None:
        """Queued chunks of one verifier, up to chunk_size completions, as one task."""
        if not self._queue:
            return None
        first = self._queue.popleft()
        chunks, n = [first], len(first.idx)
        while self._queue and self._queue[0].name == first.name and n + len(self._queue[0].idx) <= self.chunk_size:
            ch = self._queue.popleft()
            chunks.append(ch)
            n += len(ch.idx)
        self._tid += 1
        return _Task(self._tid, first.name, chunks)

    def _head_deadline(self, w: _Worker, now: float) -> None:
        """Start the clock of the worker's head task (if any)."""
        if not w.tasks:
            w.deadline = None
            return
        t = w.tasks[0]
        known = w.loaded.get(t.name)
        w.deadline = now + (known[1] if known and t.begun else self.startup_timeout)

    def _dispatch(self) -> None:
        while self._queue:
            idle = [w for w in self._workers if not w.tasks]
            if idle:
                w = idle[0]
            elif len(self._workers) < self.jobs:
                w = self._spawn()
            else:
                w = min(self._workers, key=lambda x: len(x.tasks))
                if len(w.tasks) >= self.PIPELINE:
                    return
            task = self._next_task()
            w.tasks.append(task)
            if len(w.tasks) == 1:
                self._head_deadline(w, time.monotonic())
            msg = {"tid": task.tid, "verifier": task.name,
                   "items": [[ch.payload, [ch.slot.texts[i] for i in ch.idx]] for ch in task.chunks]}
            if not self._send(w, msg):
                self._read(w)
                if w in self._workers:
                    self._dead(w)

    def _step(self, block: bool = True) -> None:
        """Dispatch queued work, wait for one round of events (not at all unless block),
        enforce deadlines."""
        self._dispatch()
        busy = [w for w in self._workers if w.tasks]
        if not busy:
            return
        now = time.monotonic()
        wait = max(0.0, min(w.deadline for w in busy) - now)
        for key, _ in self._sel.select(timeout=(min(wait, 1.0) + 0.001) if block else 0):
            w, kind = key.data
            if w not in self._workers:
                continue
            if kind == "err":
                self._drain_err(w)
            else:
                self._read(w)
        now = time.monotonic()
        for w in [w for w in self._workers if w.tasks and w.deadline is not None and now > w.deadline]:
            self._read(w)  # a verdict may have landed since select returned
            if w in self._workers and w.tasks and w.deadline is not None and now > w.deadline:
                self._expire(w)

    # -- worker messages -----------------------------------------------------------------

    def _drain_err(self, w: _Worker) -> None:
        try:
            data = os.read(w.efd, 65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            data = b""
        if not data:
            try:
                self._sel.unregister(w.efd)
            except (KeyError, ValueError):
                pass
            return
        if self._debug:
            sys.stderr.buffer.write(data)
            sys.stderr.flush()
        w.err += data
        if len(w.err) > _ERR_TAIL:
            del w.err[:-_ERR_TAIL]

    def _read(self, w: _Worker) -> None:
        while True:
            try:
                data = os.read(w.rfd, 1 << 20)
            except (BlockingIOError, InterruptedError):
                break
            except OSError:
                data = b""
            if not data:
                self._dead(w)
                return
            w.buf += data
            if len(data) < (1 << 20):
                break
        buf, pos = w.buf, 0
        while len(buf) - pos >= _HDR.size:
            (n,) = _HDR.unpack_from(buf, pos)
            if len(buf) - pos - _HDR.size < n:
                break
            msg = loads(bytes(buf[pos + _HDR.size:pos + _HDR.size + n]))
            pos += _HDR.size + n
            self._handle(w, msg)
            if w not in self._workers:
                return
        del buf[:pos]

    def _handle(self, w: _Worker, msg: dict) -> None:
        op = msg.get("op")
        if op == "ready":
            w.ready = True
            return
        if not w.tasks or msg.get("tid") != w.tasks[0].tid:
            return  # cannot happen with an in-order worker; ignore rather than misattribute
        t = w.tasks[0]
        now = time.monotonic()
        if op == "begin":
            w.ready = t.begun = True
            if msg.get("error"):
                if self.memory_mb and "MemoryError" in msg["error"]:
                    raise WorkerStartError(f"verifier {t.name!r} cannot load within the worker memory limit of "
                                           f"{self.memory_mb} MB (MemoryError): raise it (--memory-limit; 0 = none)")
                self._unavailable[t.name] = msg["error"]
                self._fail(t.targets[t.done:], msg["error"])
                w.tasks.popleft()
                self._head_deadline(w, now)
                return
            w.loaded[t.name] = (msg.get("version"), self.timeout_for(t.name, msg.get("timeout")))
            w.deadline = now + w.loaded[t.name][1]
        elif op == "v":
            ch, i = t.targets[msg["k"]]
            self._set(ch, i, msg["v"], w.loaded[t.name][0])
            t.done += 1
            if t.done >= len(t.targets):
                w.tasks.popleft()
                self._head_deadline(w, now)
            else:
                w.deadline = now + w.loaded[t.name][1]

    # -- failures --------------------------------------------------------------------------

    def _requeue(self, w: _Worker, t: _Task, start: int) -> None:
        """Put back, in order and at the front, what a lost worker had not done."""
        regroup: list[_Chunk] = []
        for ch, i in t.targets[start:]:
            if regroup and regroup[-1].slot is ch.slot and regroup[-1].payload is ch.payload:
                regroup[-1].idx.append(i)
            else:
                regroup.append(_Chunk(ch.slot, ch.name, [i], ch.payload))
        for later in w.tasks:
            if later is not t:
                regroup.extend(_Chunk(ch.slot, ch.name, list(ch.idx), ch.payload) for ch in later.chunks)
        w.tasks.clear()
        self._queue.extendleft(reversed(regroup))

    def _expire(self, w: _Worker) -> None:
        t = w.tasks[0]
        self._kill(w)
        self.stats["workers_killed"] += 1
        if not t.begun:
            self._fail(t.targets[t.done:], f"the verifier did not start within {self.startup_timeout:g} s "
                                           "(worker start, import or warm-up hung)")
            self._requeue(w, t, len(t.targets))
            return
        version, timeout = w.loaded[t.name]
        self._fail([t.targets[t.done]], f"no verdict within {timeout:g} s: the worker was killed",
                   "timeout", version, timeout)
        self._requeue(w, t, t.done + 1)

    def _dead(self, w: _Worker) -> None:
        self._kill(w)
        why = _describe_exit(w.proc.returncode)
        tail = bytes(w.err).decode("utf-8", "replace").strip()
        if not w.ready:
            raise WorkerStartError(f"a verifier worker failed to start ({why})" + (f": {tail[-800:]}" if tail else ""))
        self.stats["workers_crashed"] += 1
        if not w.tasks:
            return
        t = w.tasks[0]
        last = tail.splitlines()[-1][:300] if tail else ""
        detail = f" ({why})" + (f": {last}" if last else "")
        if not t.begun:
            self._fail(t.targets[t.done:], "the worker died before verifying" + detail)
            self._requeue(w, t, len(t.targets))
            return
        self._fail([t.targets[t.done]], "the worker died while verifying" + detail, version=w.loaded[t.name][0])
        self._requeue(w, t, t.done + 1)

    def _abandon(self) -> None:
        """The caller stopped early (or failed): drop queued work, kill busy workers."""
        self._queue.clear()
        for w in [w for w in self._workers if w.tasks]:
            self._kill(w)
