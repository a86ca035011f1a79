"""The sandbox's two wire codecs agree: rlvr.sandbox.remote (the trusted side) and the
stdlib-only copy in rlvr.sandbox.zygote (which runs inside bubblewrap and cannot import
rlvr). Every value that may cross is encoded on one side, sent as a frame and decoded on
the other, both ways; a tag added or changed on one side only fails here."""

from __future__ import annotations

import json
import math
import os
import sys
from decimal import Decimal
from fractions import Fraction

import pytest

from rlvr.sandbox import remote, zygote
from rlvr.sandbox.server import Limits, Session

VALUES = [
    None, True, False, 0, -7, 2**62 - 1, 2**62, -(2**62), 2**200, -(3**90), 1.5, -0.0, math.inf, -math.inf,
    "", "ascii", "naïve ∑ 😀", "lone \ud800 surrogate", [1, [2, [3]]], (1, "a", (2.5,)), (), {"k": 1, 2: (3, 4)},
    {1, 2, 3}, frozenset({"a", "b"}), b"\x00\xffbytes", bytearray(b"ba"), complex(1.5, -2.0), Decimal("3.14159"),
    Fraction(-22, 7), Fraction(2**70, 3), {"nested": [{"t": (b"x", {frozenset({1})})}]}, [[], {}, set()],
]


def same(a, b) -> bool:
    """Equal with the same type at every level (NaN-free values)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return len(a) == len(b) and all(k in b and same(v, b[k]) for k, v in a.items()) and \
            all(same(k, next(k2 for k2 in b if k2 == k)) for k in a)
    if isinstance(a, float) and a == 0:
        return math.copysign(1, a) == math.copysign(1, b)
    return a == b


@pytest.fixture
def sides():
    link = remote.Link(Session(None, Limits()))
    saved = sys.modules.get("solution")
    agent = zygote.Agent(-1)
    yield link, agent
    if saved is None:
        sys.modules.pop("solution", None)
    else:
        sys.modules["solution"] = saved


def through_frame(obj):
    """Send obj as the zygote frames it and read it back as the trusted side parses frames."""
    r, w = os.pipe()
    try:
        zygote.send_frame(w, {"v": obj})
        os.close(w)
        w = -1
        data = b""
        while chunk := os.read(r, 1 << 16):
            data += chunk
    finally:
        os.close(r)
        if w >= 0:
            os.close(w)
    s = Session(None, Limits())
    s.buf = bytearray(data)
    frame = s._frame()
    assert frame is not None and not s.buf
    return frame["v"]


def to_zygote(obj):
    """What the trusted side sends (JSON text, as Session.request writes it), as the zygote reads it."""
    r, w = os.pipe()
    data = json.dumps({"v": obj}, separators=(",", ":"), allow_nan=True).encode()
    os.write(w, len(data).to_bytes(4, "big") + data)
    os.close(w)
    try:
        return zygote.recv_frame(r)["v"]
    finally:
        os.close(r)


@pytest.mark.parametrize("value", VALUES, ids=[f"{type(v).__name__}-{i}" for i, v in enumerate(VALUES)])
def test_trusted_to_sandbox_and_back(sides, value):
    link, agent = sides
    inside = agent.dec(to_zygote(remote.encode(value, link)))
    assert same(inside, value), (inside, value)
    back = remote.decode(through_frame(agent.encode(inside)), link)
    assert same(back, value), (back, value)


def test_nan_crosses_both_ways(sides):
    link, agent = sides
    assert math.isnan(agent.dec(to_zygote(remote.encode(math.nan, link))))
    assert math.isnan(remote.decode(through_frame(agent.encode(math.nan)), link))


def test_names_and_handles_cross(sides):
    link, agent = sides
    # Built-ins and standard-library attributes travel by name and are the same object inside.
    assert agent.dec(to_zygote(remote.encode(len, link))) is len
    assert agent.dec(to_zygote(remote.encode(math.sqrt, link))) is math.sqrt
    # What the sandbox cannot send as a value comes out as a handle, which goes back as itself.
    gen = (i for i in range(3))
    h = remote.decode(through_frame(agent.encode(gen)), link)
    assert isinstance(h, remote.Remote)
    assert agent.dec(to_zygote(remote.encode(h, link))) is gen


def test_every_tag_the_trusted_side_writes_the_sandbox_reads(sides):
    # Tags each side writes, found by encoding VALUES (plus names and a handle): the reader on
    # the other side must know every one of them.
    link, agent = sides

    def tags(x, out):
        if isinstance(x, list):
            for i in x:
                tags(i, out)
        elif isinstance(x, dict):
            for k, v in x.items():
                if k.startswith("$"):
                    out.add(k)
                tags(v, out)
        return out

    out_trusted = tags([remote.encode(v, link) for v in VALUES] + [remote.encode(len, link)], set())
    out_sandbox = tags([agent.encode(v) for v in VALUES] + [agent.encode(iter(()))], set())
    assert {"$t", "$d", "$s", "$f", "$i", "$u", "$b", "$y", "$c", "$D", "$F", "$n"} <= out_trusted
    assert {"$t", "$d", "$s", "$f", "$i", "$u", "$b", "$y", "$c", "$D", "$F", "$h"} <= out_sandbox


# --------------------------------------------------------------------------- replies built to be slow to read
#
# The program controls its replies (it can patch the agent that encodes them), so reading a
# reply must stay within the check's wall clock whatever it holds.

M61 = (1 << 61) - 1  # ints that are multiples of it all hash alike


def test_colliding_set_and_dict_stop_at_the_wall_clock():
    """Distinct elements with one hash make each insertion as slow as the container is long
    (20,000 took 18 s); past the check's deadline the reading stops as a timeout."""
    import time

    from rlvr.sandbox.server import SandboxTimeout

    link = remote.Link(Session(None, Limits(wall_s=1.0)))
    colliding = [{"$i": hex(M61 * (k + 3))} for k in range(2000)]
    assert len(remote.decode({"$s": colliding}, link)) == 2000  # a session not started has no deadline
    link.session.deadline = time.monotonic() - 1  # the check's wall clock has run out
    for reply in ({"$s": colliding}, {"$f": colliding}, {"$d": [[k, 0] for k in colliding]}):
        with pytest.raises(SandboxTimeout):
            remote.decode(reply, link)
    link = remote.Link(Session(None, Limits()))
    link.session.deadline = time.monotonic() - 1
    assert remote.decode({"$s": list(range(63))}, link) == set(range(63))  # small ones are not timed


def test_values_too_costly_to_read_are_malformed():
    """A Fraction's gcd is quadratic in its terms' length (4 million bits: minutes); int() of a
    Decimal is quadratic in its digits (10**999999: 20 s). Such replies are malformed;
    Decimals with exponents up to 100,000 and Fractions of 79,000 digits still cross."""
    from rlvr.sandbox.server import ProtocolError

    link = remote.Link(Session(None, Limits()))
    big = hex((1 << (remote.MAX_FRACTION_BITS + 1)) - 1)
    for reply in ({"$F": [{"$i": big}, 3]}, {"$F": [1, {"$i": big}]}, {"$D": "1e100001"}, {"$D": "9.99E+999999"}, {"$D": "-7E-1000001"}):
        with pytest.raises(ProtocolError):
            remote.decode(reply, link)
    ok = hex((1 << remote.MAX_FRACTION_BITS) - 1)
    assert remote.decode({"$F": [{"$i": ok}, 2]}, link) == Fraction((1 << remote.MAX_FRACTION_BITS) - 1, 2)
    for text in ("9.99E+100000", "-1E-100000", "0E-1000000000", "NaN", "-Infinity", "123.456"):
        d = remote.decode({"$D": text}, link)
        assert str(d) == str(Decimal(text)) or d.is_nan()


@pytest.fixture
def tmpfs_path(tmp_path):
    """A directory on a tmpfs where there is one (the sandbox's /tmp is one; deep trees are
    slow to make and remove on a disk), else tmp_path."""
    import tempfile
    from pathlib import Path

    if not (os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK)):
        yield tmp_path
        return
    path = tempfile.mkdtemp(prefix="rlvr-test-wipe-", dir="/dev/shm")
    try:
        yield Path(path)
    finally:
        zygote.wipe(path)
        os.rmdir(path)


def test_wipe_removes_any_tree_and_follows_no_link(tmpfs_path):
    """The server's cleanup after a check: a tree deeper than the recursion limit and than
    PATH_MAX (a recursive walk died on it and took the server down), read-only and
    unreadable directories, links to outside (never followed); `keep` survives; a deadline
    stops it with work left."""
    outside = tmpfs_path / "outside"
    outside.mkdir()
    (outside / "canary").write_text("keep me")
    root = tmpfs_path / "root"
    (root / "w").mkdir(parents=True)
    (root / "w" / "kept").write_text("x")
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(1100):  # "ddddd/" * 1100: 6,600 characters of path below root
            os.mkdir("ddddd", dir_fd=fd)
            sub = os.open("ddddd", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = sub
        with open(os.open("deep", os.O_CREAT | os.O_WRONLY, 0o600, dir_fd=fd), "w") as fh:
            fh.write("x")
    finally:
        os.close(fd)
    (root / "ro").mkdir()
    (root / "ro" / "f").write_text("x")
    (root / "ro").chmod(0o500)
    (root / "closed").mkdir()
    (root / "closed" / "f").write_text("x")
    (root / "closed").chmod(0)
    os.symlink(outside, root / "link")
    os.symlink(outside / "canary", root / "flink")
    assert zygote.wipe(str(root), keep=str(root / "w"), deadline=0.0) is False  # out of time at once
    assert zygote.wipe(str(root), keep=str(root / "w")) is True
    assert sorted(os.listdir(root)) == ["w"] and os.listdir(root / "w") == ["kept"]
    assert (outside / "canary").read_text() == "keep me"


def test_wipe_reports_a_tree_it_could_not_finish(tmpfs_path, monkeypatch):
    """A directory moved away while wipe works below it (another process of the sandbox uid,
    without a PID namespace): the climb back reaches another directory, wipe stops there and
    says the tree is not clean, so the server does not reuse it."""
    root, away = tmpfs_path / "root", tmpfs_path / "away"
    (root / "a" / "b").mkdir(parents=True)
    (root / "a" / "b" / "f").write_text("x")
    (root / "a" / "g").write_text("x")
    away.mkdir()
    real_open = os.open
    moved = []

    def open_moving(name, flags, *args, **kwargs):
        if name == ".." and not moved:  # climbing back from b: move b out from under a first
            os.rename(root / "a" / "b", away / "b")
            moved.append(True)
        return real_open(name, flags, *args, **kwargs)

    monkeypatch.setattr(zygote.os, "open", open_moving)
    assert zygote.wipe(str(root)) is False
    monkeypatch.setattr(zygote.os, "open", real_open)
    assert moved and os.listdir(root) == ["a"]  # it stopped: nothing above b was touched
    assert zygote.wipe(str(root)) is True and os.listdir(root) == []


def test_wipe_of_a_path_that_is_not_a_directory(tmp_path):
    """A path that is gone is clean; a file where the directory should be is not."""
    assert zygote.wipe(str(tmp_path / "missing")) is True
    (tmp_path / "file").write_text("x")
    assert zygote.wipe(str(tmp_path / "file")) is False


def test_a_test_process_that_cannot_be_forked_is_retried_then_reported(monkeypatch):
    """run_stdio (the agent's side of one stdin/stdout test): a fork failing with EAGAIN is
    tried again; one that keeps failing is reported as the sandbox's failure ("infra"),
    which the caller raises as ChildNotStarted (a retried check, then a sandbox error),
    never as a malformed reply graded wrong."""
    import errno

    from rlvr.sandbox import stdio
    from rlvr.sandbox.server import ChildNotStarted

    real_fork, calls = os.fork, []

    def failing_fork(times):
        def fork():
            calls.append(1)
            if len(calls) <= times:
                raise BlockingIOError(errno.EAGAIN, "Resource temporarily unavailable")
            return real_fork()
        return fork

    program = compile("print(int(input()) * 2)", "<solution>", "exec")
    monkeypatch.setattr(zygote, "FORK_TRIES", 3)
    monkeypatch.setattr(zygote.os, "fork", failing_fork(2))  # fails twice, then works
    rep = zygote.run_stdio(program, "21\n", 60.0, 1 << 16)
    assert len(calls) == 3 and rep.get("exit") == 0 and rep["out"] == "42\n", rep
    calls.clear()
    monkeypatch.setattr(zygote.os, "fork", failing_fork(99))
    rep = zygote.run_stdio(program, "21\n", 60.0, 1 << 16)
    assert len(calls) == 3 and "Resource temporarily unavailable" in rep["infra"] and "out" not in rep, rep

    class Session:  # the caller's side, given that reply
        def request(self, msg):
            return {"v": None} if msg["op"] == "stdio_load" else rep

    with pytest.raises(ChildNotStarted, match="test 1: cannot start the test process"):
        stdio.run_tests(Session(), "print(2)", [("21\n", "42\n")], 10.0, 1 << 16)


def test_a_check_whose_test_process_never_starts_is_an_error_after_one_retry(monkeypatch):
    """The code verifier's side: the check is made twice, then graded as the sandbox's error."""
    import contextlib

    from rlvr.sandbox import stdio
    from rlvr.sandbox.server import ChildNotStarted
    from rlvr.verifiers import code

    class Sandbox:
        mode, isolation = "process", ["rlimits"]

        @contextlib.contextmanager
        def session(self, limits):
            yield object()

    tries = []

    def run_tests(session, *args, **kwargs):
        tries.append(1)
        raise ChildNotStarted("test 1: cannot start the test process: [Errno 11] Resource temporarily unavailable")

    monkeypatch.setattr(code, "get_sandbox", lambda config: Sandbox())
    monkeypatch.setattr(stdio, "run_tests", run_tests)
    v = code.verify({"stdio_tests": [{"input": "1\n", "output": "2\n"}]}, "print(2)", {})
    assert len(tries) == 2 and v["status"] == "error" and "Resource temporarily unavailable" in v["error"], v
