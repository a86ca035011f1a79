"""The trusted side of the sandbox boundary: values, handles and errors that cross it.

Values travel as tagged JSON (``{"$t": [...]}`` for a tuple, ``{"$d": [[k, v], ...]}`` for a
dict, ``{"$i": "0x..."}`` for a big int, ...). Decoding builds plain built-in objects
only (None, bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set,
frozenset, Decimal, Fraction): no code and no method of the candidate's ever runs on this
side. Anything else the candidate returns (a generator, an instance of its own class, a
function) stays in the sandbox and is represented here by a ``Remote`` handle: calling
it, reading or setting an attribute, indexing, ``len``, ``str``, ``bool`` and iteration
are forwarded as requests whose answers are again plain values or handles. Equality and
ordering are never forwarded: a handle equals only itself, so an object whose ``__eq__``
always returns True is just an object that equals nothing. Membership (``x in handle``)
iterates the handle here, so the value looked for never enters the sandbox.

Exceptions raised by candidate code come back as the nearest built-in exception class
(a candidate ``ValueError`` is a ValueError here, so tests that expect it still work);
SystemExit and friends become ``CandidateExit``, a SandboxStop that no ``except
Exception`` in test code can swallow.
"""

from __future__ import annotations

import builtins
import collections
import importlib
import json
import sys
import time
from decimal import Decimal
from fractions import Fraction

from rlvr.sandbox.server import ProtocolError, SandboxStop, SandboxTimeout, Session

SMALL_INT = 1 << 62
# Bounds on values read back (beyond them a reply is malformed): a Decimal's exponent (int()
# of a Decimal is quadratic in its digits: 0.2 s at 10**100000, 20 s at 10**999999, which the
# default context allows), a Fraction's terms (2**18 bits: 79,000 digits; Fraction() takes
# their gcd, 0.2 s at this size and quadratic beyond).
MAX_EXPONENT = 100_000
MAX_FRACTION_BITS = 1 << 18


class CandidateExit(SandboxStop):
    reason = "exit"


class RemoteException(Exception):
    """Raised (mixed into the matching built-in class) when candidate code raised."""

    remote_type = "Exception"


_EXC_CLASSES: dict[str, type] = {}


class CandidateStopIteration(RuntimeError, RemoteException):
    """StopIteration raised by the candidate anywhere but a ``next()`` of its own iterator.
    Python ends a ``map``, ``filter`` or ``zip`` quietly when a function it calls raises
    StopIteration, so ``all(map(f, xs))`` would hold for an ``f`` that only raises it; like
    PEP 479 in generators, it becomes a RuntimeError here."""


def remote_exception(rep: dict, op: str | None = None) -> BaseException:
    """The exception a reply reports; op: the request it answers (StopIteration stays one
    only for "next")."""
    exc = _remote_exception(rep)
    if op != "next" and isinstance(exc, (StopIteration, StopAsyncIteration)):
        stray = CandidateStopIteration(f"the program raised {exc.remote_type}" + (f": {exc}" if str(exc) else ""))
        stray.remote_type = exc.remote_type
        return stray
    return exc


def _remote_exception(rep: dict) -> BaseException:
    x = rep.get("x")
    if not (isinstance(x, list) and len(x) == 2 and all(isinstance(s, str) for s in x)):
        return ProtocolError("malformed error reply")
    name, msg = x
    if rep.get("fatal"):
        return CandidateExit(f"{name}: {msg}" if msg else name)
    base = rep.get("base") if isinstance(rep.get("base"), str) else "Exception"
    cls = _EXC_CLASSES.get(base)
    if cls is None:
        builtin = getattr(builtins, base, None)
        cls = RemoteException
        if isinstance(builtin, type) and issubclass(builtin, Exception) and builtin is not Exception:
            try:
                cls = type(base, (builtin, RemoteException), {"__module__": "sandbox"})
            except TypeError:
                cls = RemoteException
        _EXC_CLASSES[base] = cls
    text = msg if name == base else (f"{name}: {msg}" if msg else name)
    try:
        exc = cls(text)
    except Exception:  # noqa: BLE001 - built-ins with special constructors
        exc = RemoteException(text)
    exc.remote_type = name
    return exc


class Link:
    """Encodes requests, decodes replies, turns error replies into exceptions."""

    def __init__(self, session: Session):
        self.session = session
        self.calls = 0
        self.batched = 0
        self.memo: collections.deque = collections.deque()  # (key, reply) of calls made up front
        self.handle_names: dict[int, str] = {}

    def call(self, hid: int, args: tuple, kwargs: dict):
        a = [encode(x, self) for x in args]
        k = [[n, encode(v, self)] for n, v in kwargs.items()]
        if self.memo:
            key = _call_key(self.handle_names.get(hid), a, k)
            if key == self.memo[0][0]:
                self.calls += 1
                self.batched += 1
                return self._reply(self.memo.popleft()[1])
            self.memo.clear()  # the test went another way: no more batched answers
        return self.ask({"op": "call", "h": hid, "a": a, "k": k})

    def _reply(self, rep, op: str | None = None):
        if not isinstance(rep, dict):
            raise self.session._stop(ProtocolError("malformed reply"))
        if "x" in rep:
            raise remote_exception(rep, op)
        if "v" not in rep:
            raise self.session._stop(ProtocolError("reply without a value"))
        return decode(rep["v"], self)

    def ask(self, msg: dict):
        self.calls += 1
        return self._reply(self.session.request(msg), msg.get("op"))

    def load(self, source: str, want: list[str] = (), calls: list = ()) -> tuple[list[str], dict]:
        """Run the candidate program; return the global names it defined, and the
        functions, classes and modules among `want` (resolved as get() would). `calls`,
        (name, args, kwargs) with literal arguments, are made right after, in order, and
        their answers kept for call() to hand out when the test makes the same calls."""
        enc_calls = [[n, [encode(x, self) for x in a], [[kn, encode(v, self)] for kn, v in k]] for n, a, k in calls]
        rep = self.session.request({"op": "load", "src": source, "want": list(want), "calls": enc_calls})
        if "x" in rep:
            raise remote_exception(rep)
        names, got, results = rep.get("names"), rep.get("got", {}), rep.get("results", [])
        if not (isinstance(names, list) and all(isinstance(n, str) for n in names) and isinstance(got, dict)
                and isinstance(results, list) and len(results) <= len(enc_calls)):
            raise self.session._stop(ProtocolError("malformed load reply"))
        known = {k: self._value(v) for k, v in got.items() if k in want and isinstance(v, dict)}
        for name, value in known.items():
            if type(value) is Remote:
                self.handle_names[object.__getattribute__(value, "_rlvr_id")] = name
        self.memo.extend((_call_key(*c), r) for c, r in zip(enc_calls, results))
        return names, known

    def get(self, name: str):
        """The candidate's global `name`: a plain value, a handle, or (for a standard-library
        module it imported) the trusted side's own import of that module."""
        rep = self.session.request({"op": "get", "name": name})
        return self._value(rep)

    def _value(self, rep: dict):
        if "x" in rep:
            raise remote_exception(rep)
        mod = rep.get("module")
        if isinstance(mod, str) and mod.split(".")[0] in sys.stdlib_module_names:
            try:
                return importlib.import_module(mod)
            except ImportError:
                pass
        if "v" not in rep:
            raise self.session._stop(ProtocolError("reply without a value"))
        return decode(rep["v"], self)


def _call_key(name, args, kwargs) -> str:
    return json.dumps([name, args, kwargs], separators=(",", ":"), allow_nan=True, sort_keys=True)


def decode(x, link: Link):
    """Tagged JSON -> plain built-in values and Remote handles."""
    t = type(x)
    if x is None or t is bool or t is str or t is int or t is float:
        return x
    if t is list:
        return [decode(i, link) for i in x]
    if t is not dict or len(x) not in (1, 2):
        raise link.session._stop(ProtocolError(f"bad value of type {t.__name__}"))
    try:
        if "$h" in x:
            h = x["$h"]
            if type(h) is not int:
                raise ValueError
            tname = x.get("t")
            return Remote(link, h, tname if isinstance(tname, str) else "object")
        if len(x) != 1:
            raise ValueError
        (tag, val), = x.items()
        if tag == "$t":
            return tuple(decode(i, link) for i in val)
        if tag == "$d":
            return _built({}, ((decode(k, link), decode(v, link)) for k, v in val), link)
        if tag == "$s":
            return _built(set(), ((decode(i, link),) for i in val), link)
        if tag == "$f":
            return frozenset(_built(set(), ((decode(i, link),) for i in val), link))
        if tag == "$i":
            return int(val, 16)
        if tag == "$u":
            return bytes.fromhex(val).decode("utf-8", "surrogatepass")
        if tag == "$b":
            return bytes.fromhex(val)
        if tag == "$y":
            return bytearray.fromhex(val)
        if tag == "$c":
            re_, im = val
            if type(re_) is not float or type(im) is not float:
                raise ValueError
            return complex(re_, im)
        if tag == "$D":
            dec = Decimal(val)
            if dec.is_finite() and dec and not -MAX_EXPONENT <= dec.adjusted() <= MAX_EXPONENT:
                raise ValueError  # int() or round() of it here would run for hours
            return dec
        if tag == "$F":
            n, d = (decode(v, link) for v in val)
            if type(n) is not int or type(d) is not int or max(n.bit_length(), d.bit_length()) > MAX_FRACTION_BITS:
                raise ValueError  # Fraction() takes their gcd, quadratic in their length
            return Fraction(n, d)
    except SandboxStop:
        raise
    except (ValueError, TypeError, ArithmeticError, RecursionError, AttributeError):
        pass
    raise link.session._stop(ProtocolError("malformed value"))


def _built(into, items, link: Link):
    """A set or dict filled from (element,) or (key, value) pairs, watching the check's wall
    clock: elements whose hashes all collide (multiples of 2**61 - 1 among ints) make each
    insertion as slow as the container is long, and must not hold this process past it."""
    add = into.add if isinstance(into, set) else into.__setitem__
    deadline = link.session.deadline or float("inf")  # (0: a session not started, as in codec tests)
    for n, item in enumerate(items):
        add(*item)
        if not n & 63 and n and time.monotonic() > deadline:
            raise link.session._stop(SandboxTimeout(f"no answer within {link.session.limits.wall:g} s of wall clock "
                                                    "(a reply too slow to read)"))
    return into


def encode(v, link: Link):
    """A trusted value -> tagged JSON for the sandbox (TypeError for what cannot cross)."""
    t = type(v)
    if v is None or t is bool or t is float:
        return v
    if t is str:
        return v if v.isascii() else _text(v)
    if t is int:
        return v if -SMALL_INT < v < SMALL_INT else {"$i": hex(v)}
    if t is list:
        return [encode(x, link) for x in v]
    if t is tuple:
        return {"$t": [encode(x, link) for x in v]}
    if t is dict:
        return {"$d": [[encode(k, link), encode(x, link)] for k, x in v.items()]}
    if t is set:
        return {"$s": [encode(x, link) for x in v]}
    if t is frozenset:
        return {"$f": [encode(x, link) for x in v]}
    if t is bytes:
        return {"$b": v.hex()}
    if t is bytearray:
        return {"$y": v.hex()}
    if t is complex:
        return {"$c": [v.real, v.imag]}
    if t is Remote:
        if object.__getattribute__(v, "_rlvr_link") is not link:
            raise TypeError("a handle from another check cannot be passed")
        return {"$h": object.__getattribute__(v, "_rlvr_id")}
    if t is Decimal:
        return {"$D": str(v)}
    if t is Fraction:
        return {"$F": [encode(v.numerator, link), encode(v.denominator, link)]}
    for base in (bool, int, float, str, tuple, list, dict, frozenset, set, bytes):
        if isinstance(v, base):
            return encode(base(v), link)
    ref = _named(v)
    if ref is not None:
        return ref
    raise TypeError(f"cannot pass a {t.__name__} into the sandbox")


def _text(s: str):
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:  # lone surrogates: JSON would pair them up
        return {"$u": s.encode("utf-8", "surrogatepass").hex()}


def _named(v):
    """A built-in (``int``, ``len``) or a standard-library attribute (``math.sqrt``,
    ``collections.Counter``) travels by name and is looked up again in the sandbox."""
    name = getattr(v, "__name__", None)
    if isinstance(name, str) and getattr(builtins, name, None) is v:
        return {"$n": name}
    mod, qual = getattr(v, "__module__", None), getattr(v, "__qualname__", None)
    if not (isinstance(mod, str) and isinstance(qual, str)) or mod.split(".")[0] not in sys.stdlib_module_names:
        return None
    try:
        obj = importlib.import_module(mod)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return {"$m": [mod, qual]} if obj is v else None


class Remote:
    """A handle on an object that lives in the sandbox (see the module docstring)."""

    __slots__ = ("_rlvr_link", "_rlvr_id", "_rlvr_type")

    def __init__(self, link: Link, hid: int, tname: str):
        object.__setattr__(self, "_rlvr_link", link)
        object.__setattr__(self, "_rlvr_id", hid)
        object.__setattr__(self, "_rlvr_type", tname[:80])

    def _ask(self, op: str, **kw):
        link = object.__getattribute__(self, "_rlvr_link")
        return link.ask({"op": op, "h": object.__getattribute__(self, "_rlvr_id"), **kw})

    def __repr__(self) -> str:
        return f"<sandbox {object.__getattribute__(self, '_rlvr_type')} object>"

    def __call__(self, *args, **kwargs):
        link = object.__getattribute__(self, "_rlvr_link")
        return link.call(object.__getattribute__(self, "_rlvr_id"), args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return self._ask("getattr", name=name)

    def __setattr__(self, name: str, value) -> None:
        self._ask("setattr", name=name, value=encode(value, object.__getattribute__(self, "_rlvr_link")))

    def __delattr__(self, name: str) -> None:
        self._ask("delattr", name=name)

    def __getitem__(self, key):
        return self._ask("getitem", key=encode(key, object.__getattribute__(self, "_rlvr_link")))

    def __setitem__(self, key, value) -> None:
        link = object.__getattribute__(self, "_rlvr_link")
        self._ask("setitem", key=encode(key, link), value=encode(value, link))

    def __delitem__(self, key) -> None:
        self._ask("delitem", key=encode(key, object.__getattribute__(self, "_rlvr_link")))

    def __len__(self) -> int:
        n = self._ask("len")
        if type(n) is not int:
            raise TypeError("len() of a sandbox object did not give an int")
        return n

    def __iter__(self):
        items = self._ask("iter")
        if type(items) is not list:
            raise TypeError("iterating a sandbox object did not give a list")
        return iter(items)

    def __next__(self):
        return self._ask("next")

    def __bool__(self) -> bool:
        return self._ask("bool") is True

    def __str__(self) -> str:
        s = self._ask("str")
        if type(s) is not str:
            raise TypeError("str() of a sandbox object did not give a str")
        return s

    def __int__(self) -> int:
        v = self._ask("int")
        if type(v) is not int:
            raise TypeError("int() of a sandbox object did not give an int")
        return v

    def __index__(self) -> int:
        v = self._ask("index")
        if type(v) is not int:
            raise TypeError("__index__ of a sandbox object did not give an int")
        return v

    def __float__(self) -> float:
        v = self._ask("float")
        if type(v) is not float:
            raise TypeError("float() of a sandbox object did not give a float")
        return v

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce_ex__(self, protocol):
        raise TypeError("sandbox handles cannot be pickled")

    __eq__ = object.__eq__
    __ne__ = object.__ne__
    __hash__ = object.__hash__
