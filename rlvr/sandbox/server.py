"""Start and drive the sandbox fork server (rlvr/sandbox/zygote.py) from the caller's process.

    sb = get_sandbox(SandboxConfig())          # one warm server per process and config
    with sb.session(Limits(timeout_s=5)) as s:  # one forked, confined child per check
        s.request({"op": "load", "src": code})
        ...
    sb.isolation  -> ["bwrap", "pidns", "netns", "uid", "rlimits"] (what was really obtained)

Modes: ``bwrap`` runs the server inside bubblewrap (read-only system directories, the
base interpreter's standard library without site-packages, a private size-capped /tmp,
its own PID, IPC, UTS and network namespaces, no environment but a few fixed variables).
``process`` (bubblewrap missing or unusable) runs it as a plain child with a clean
environment, a private working directory and, as root, its own network namespace.
``auto`` tries bwrap, then falls back to process with a warning on stderr. In both
modes, as root, the checked code runs under the unprivileged ``rlvr-sandbox`` user
(``nobody`` when that user is missing, with a warning); as any other user it runs under
the caller's uid and ``uid`` is absent from ``isolation``. The server refuses to run code
as root without an unprivileged user.

Everything here talks to untrusted processes: reads are capped and bounded by deadlines,
never wait for EOF, and a child that floods its output is killed past the cap.
"""

from __future__ import annotations

import atexit
import json
import os
import pwd
import select
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field

ZYGOTE_SRC_PATH = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zygote.py")
MODES = ("auto", "bwrap", "process")
START_TIMEOUT_S = 20.0
CTL_TIMEOUT_S = 10.0
# As root, each server's checks run under a uid of their own: UID_BASE + a free slot (_claim_uid),
# far above the uids of accounts and of user-namespace ranges (subuid), below 2**31.
UID_BASE = 1_900_000_000
UID_SLOTS = 4096
# Seconds the bubblewrap server spends emptying /tmp and /dev/shm after a check; a check that
# left more (a million files) costs a fresh server (0.1-0.2 s) instead of the next check's time.
# The wipe looks at the clock every 256 entries, so a check that left fewer never meets it; it
# removes ~100,000 files a second on a quiet 2-core machine, ~20,000 with four CPU-bound
# processes beside it (a server start stayed 0.1-0.2 s), so a busy machine does not turn
# ordinary checks into restarts (measured: none in the sandbox and code-verifier tests).
WIPE_S = 1.0
# Standard-library modules imported once in the server, so checks that use them start warm.
PREIMPORT = ("math", "cmath", "re", "collections", "itertools", "functools", "heapq", "bisect", "string",
             "typing", "random", "copy", "operator", "datetime", "fractions", "decimal", "statistics",
             "array", "hashlib", "json", "dataclasses", "enum", "abc", "numbers", "textwrap", "unicodedata")


class SandboxError(RuntimeError):
    """The sandbox could not be started or driven (an infrastructure problem, not the code's fault)."""


class ChildNotStarted(SandboxError):
    """The server gave no confined child for a check (it died, e.g. after the previous check),
    or the child could not start a stdin/stdout test's process (fork failed after retries):
    nothing the program did decided the check, so it can be made again from the start."""


class SandboxStop(BaseException):
    """The checked program can no longer answer. A BaseException so that test code's own
    ``except Exception`` cannot swallow it."""

    reason = "stopped"


class SandboxTimeout(SandboxStop):
    reason = "timeout"


class SandboxGone(SandboxStop):
    reason = "exited"


class OutputLimit(SandboxStop):
    reason = "output_limit"


class ProtocolError(SandboxStop):
    reason = "protocol"


@dataclass(frozen=True)
class Limits:
    """Per-check limits. timeout_s caps the CPU time of each process of the program (so a
    busy machine does not turn a slow honest program into a timeout); wall_s caps the whole
    check on the wall clock (sleeping, blocking, many processes; 2 x timeout_s if unset)."""

    timeout_s: float = 5.0
    wall_s: float | None = None
    memory_mb: int = 1024
    nproc: int = 64
    fsize_mb: int = 16
    nofile: int = 64
    max_output_bytes: int = 1 << 20
    # One reply of the program (a returned value): its JSON becomes 10-25 times as many bytes
    # of objects here, and is read in one piece.
    max_message_bytes: int = 16 << 20

    @property
    def wall(self) -> float:
        return self.wall_s if self.wall_s is not None else 2.0 * self.timeout_s


@dataclass(frozen=True)
class SandboxConfig:
    """How the server is confined (fixed for the server's life)."""

    mode: str = "auto"
    user: str = "rlvr-sandbox"
    network: bool = False
    tmpfs_mb: int = 64
    site_packages: bool = False


@dataclass
class Finished:
    """What the server reports once a check's processes are gone."""

    exit: int | None = None
    signal: int | None = None
    cpu_s: float | None = None
    backstop: bool = False
    output_bytes: int = 0
    output_tail: str = ""
    stopped: str | None = None
    extra: dict = field(default_factory=dict)


def _ancestors(path: str) -> list[str]:
    out = []
    p = os.path.dirname(path)
    while p not in ("/", ""):
        out.append(p)
        p = os.path.dirname(p)
    return out[::-1]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


class Sandbox:
    """A warm fork server confined as configured; create through get_sandbox()."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        if self.config.mode not in MODES:
            raise ValueError(f"sandbox mode must be one of {', '.join(MODES)}, got {self.config.mode!r}")
        self.lock = threading.Lock()
        self.proc: subprocess.Popen | None = None
        self.ctl: socket.socket | None = None
        self.pid = os.getpid()
        self.mode: str | None = None
        self.isolation: list[str] = []
        self.missing: list[str] = []
        self.info: dict = {}
        self.workroot: str | None = None
        self._errfile = None
        self._warned = False
        self._gone = False  # the server closed its end (it exits by itself, e.g. for a fresh tmpfs)
        self.uid: int | None = None
        self._uid_lock: int | None = None  # the flock on this server's uid slot (_claim_uid)
        self._uid_slot: int | None = None
        self.seq = 0  # checks started on this server
        self.replies: dict[tuple[str, int], dict] = {}  # control replies not yet claimed

    # ------------------------------------------------------------------ confinement plan

    def _identity(self) -> tuple[bool, int | None, int | None, list[str]]:
        """(drop, uid, gid, notes): whom the checked code runs as."""
        notes: list[str] = []
        if os.geteuid() != 0:
            notes.append("uid: not root, so the code runs under the caller's own uid (no RLIMIT_NPROC; "
                         "without a PID namespace it could read the caller's /proc/<pid>/environ)")
            return False, None, None, notes
        for name in (self.config.user, "nobody"):
            try:
                pw = pwd.getpwnam(name)
            except KeyError:
                continue
            if pw.pw_uid == 0:
                continue
            if name != self.config.user:
                notes.append(f"uid: user {self.config.user!r} is missing, using {name!r}'s group "
                             "(create the user with scripts/install.sh)")
            uid = self._claim_uid()
            if uid is None:
                notes.append(f"uid: no free sandbox uid slot, using {name!r}'s own (shared with other sandboxes)")
                uid = pw.pw_uid
            return True, uid, pw.pw_gid, notes
        raise SandboxError(f"running as root but neither {self.config.user!r} nor 'nobody' exists: "
                           "refusing to run untrusted code as root (create the user with scripts/install.sh)")

    def _claim_uid(self) -> int | None:
        """A uid of this server's own, UID_BASE + the first free slot (an flock held for the
        server's life, released by close() or the process's end): RLIMIT_NPROC counts a uid's
        processes machine-wide, so checks under one shared uid would share it, and a fork bomb
        in one sandbox would starve every other sandbox on the machine (their programs could
        not start a process); a kill(-1) would also reach them without a PID namespace.
        The uid has no passwd entry and owns nothing outside the check's own folder."""
        if self._uid_lock is not None:
            return self._uid_slot
        import fcntl

        for folder in ("/run/lock", tempfile.gettempdir()):
            lockdir = os.path.join(folder, "rlvr-sandbox-uids")
            try:
                os.makedirs(lockdir, mode=0o700, exist_ok=True)
                if os.lstat(lockdir).st_uid != 0:
                    continue
            except OSError:
                continue
            for slot in range(UID_SLOTS):
                try:
                    fd = os.open(os.path.join(lockdir, str(slot)), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
                except OSError:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    os.close(fd)
                    continue
                self._uid_lock, self._uid_slot = fd, UID_BASE + slot
                return self._uid_slot
            return None
        return None

    def _release_uid(self) -> None:
        if self._uid_lock is not None:
            try:
                os.close(self._uid_lock)
            except OSError:
                pass
            self._uid_lock = self._uid_slot = None

    def _python(self) -> tuple[str, list[str]]:
        exe = os.path.realpath(getattr(sys, "_base_executable", None) or sys.executable)
        roots = sorted({os.path.realpath(sys.base_prefix), os.path.realpath(sys.base_exec_prefix)})
        return exe, roots

    def _site_paths(self) -> list[str]:
        if not self.config.site_packages:
            return []
        import site

        paths = [p for p in site.getsitepackages() if os.path.isdir(p)]
        return [os.path.realpath(p) for p in paths]

    def _bwrap_argv(self, drop: bool, zcfg: dict) -> list[str]:
        bwrap = shutil.which("bwrap")
        if not bwrap:
            raise SandboxError("bubblewrap (bwrap) is not installed")
        exe, roots = self._python()
        argv = [bwrap]
        if drop:
            # Root: no user namespace (the code drops to the sandbox uid instead); the server
            # keeps only the capabilities it needs to set up, drop and kill its children.
            argv += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
            if not self.config.network:
                argv += ["--unshare-net"]
            argv += ["--cap-drop", "ALL"]
            for cap in ("CAP_SETUID", "CAP_SETGID", "CAP_KILL", "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER"):
                argv += ["--cap-add", cap]
        else:
            argv += ["--unshare-all"] + (["--share-net"] if self.config.network else [])
        # The server is the PID namespace's init (no bwrap reaper in between): the kernel
        # delivers to an init no signal from inside its namespace that it has no handler for,
        # so the checked code cannot kill or stop the server even where it shares its uid
        # (without root), kill(-1) included.
        argv += ["--as-pid-1", "--die-with-parent", "--new-session", "--clearenv", "--hostname", "sandbox"]
        for k, v in zcfg["env"].items():
            argv += ["--setenv", k, v]
        argv += ["--ro-bind", "/usr", "/usr"]
        for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
            if os.path.islink(top):
                argv += ["--symlink", os.readlink(top), top]
            elif os.path.isdir(top):
                argv += ["--ro-bind", top, top]
        extra = [r for r in roots if not _under(r, "/usr")] + [p for p in zcfg["sys_path"] if not _under(p, "/usr")]
        made: set[str] = set()
        for path in extra:
            for anc in _ancestors(path):
                if anc not in made and anc not in ("/usr",):
                    argv += ["--perms", "0755", "--dir", anc]
                    made.add(anc)
        for path in extra:
            argv += ["--ro-bind", path, path]
        # Hide the base interpreter's own site-packages (the venv's are never mounted unless asked).
        for r in roots:
            sp = os.path.join(r, "lib", f"python{sys.version_info.major}.{sys.version_info.minor}", "site-packages")
            if os.path.isdir(sp) and sp not in zcfg["sys_path"]:
                argv += ["--tmpfs", sp]
        size = str(self.config.tmpfs_mb << 20)
        argv += ["--proc", "/proc", "--dev", "/dev", "--perms", "01777", "--size", size, "--tmpfs", "/dev/shm",
                 "--size", size, "--tmpfs", "/tmp", "--chdir", "/tmp"]
        return argv + [exe]

    # ------------------------------------------------------------------ start / stop

    def _start(self, mode: str) -> None:
        drop, uid, gid, notes = self._identity()
        self.uid = uid
        site_paths = self._site_paths()
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "PYTHONHASHSEED": "0", "HOME": "/tmp"}
        parent_sock, child_sock = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            host_pidns = os.readlink("/proc/self/ns/pid")
        except OSError:
            host_pidns = None
        zcfg = {"drop": drop, "uid": uid, "gid": gid, "pidns": mode == "bwrap" and host_pidns is not None,
                "host_pidns": host_pidns, "ctl_fd": child_sock.fileno(),
                "preimport": list(PREIMPORT), "sys_path": site_paths, "env": env,
                # Without a private filesystem the standard library may be unreadable to the
                # sandbox uid (an interpreter under /root): import what the program names first.
                "import_first": mode == "process" and drop,
                "unshare_net": mode == "process" and os.geteuid() == 0 and not self.config.network}
        if mode == "bwrap":
            zcfg["workroot"] = "/tmp"
            zcfg["wipe"] = ["/tmp", "/dev/shm"]
            zcfg["wipe_s"] = WIPE_S
            argv = self._bwrap_argv(drop, zcfg)
            cwd = "/"
        else:
            self.workroot = tempfile.mkdtemp(prefix="rlvr-sandbox-")
            os.chmod(self.workroot, 0o711)
            zcfg["workroot"] = self.workroot
            zcfg["wipe"] = []
            argv = [self._python()[0]]
            cwd = self.workroot
        with open(ZYGOTE_SRC_PATH, encoding="utf-8") as fh:
            src = fh.read()
        argv += ["-S", "-s", "-P", "-c", src, json.dumps(zcfg)]
        self._errfile = tempfile.TemporaryFile()
        try:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                         stderr=self._errfile, pass_fds=(child_sock.fileno(),), cwd=cwd,
                                         env=env, start_new_session=True)
        except OSError as e:
            parent_sock.close()
            child_sock.close()
            raise SandboxError(f"cannot start the sandbox server: {e}") from None
        child_sock.close()
        self.ctl = parent_sock
        self._gone = False
        try:
            info = self._ctl_recv(START_TIMEOUT_S)
        except SandboxError as e:
            err = self._stderr_text()
            self.close()
            raise SandboxError(f"{mode} sandbox did not start: {err or e}") from None
        if not info.get("ready"):
            self.close()
            raise SandboxError(f"{mode} sandbox did not start: {info.get('error')}")
        self.info = info
        self.mode = mode
        self.isolation, self.missing = self._assess(mode, drop, info, notes)

    def _assess(self, mode: str, drop: bool, info: dict, notes: list[str]) -> tuple[list[str], list[str]]:
        """What confinement was really obtained, from the server's own report."""
        iso, missing = [], list(notes)

        def mine(ns: str) -> str | None:
            try:
                return os.readlink(f"/proc/self/ns/{ns}")
            except OSError:
                return None

        if mode == "bwrap":
            iso.append("bwrap")
        else:
            missing.append("bwrap: bubblewrap not used, so the code sees the host filesystem (read access "
                           "as its uid allows; world-writable host directories are writable)")
        if info.get("pidns_kill") and info.get("pid_ns") and info.get("pid_ns") != mine("pid"):
            iso.append("pidns")
        else:
            missing.append("pidns: no PID namespace; daemons are found by walking /proc from a child "
                           "subreaper, which a process that escapes the server's subtree would evade")
            if not drop:
                missing.append("signals: the code runs under your own uid outside a PID namespace, so it can "
                               "signal every process of yours (kill(-1) included), the verifier's too; install "
                               "bubblewrap or run as root")
            elif self._uid_slot is None:
                missing.append("signals: checks running at the same time on other servers (other verifier "
                               "workers) share the sandbox uid, so one check's kill(-1) ends theirs (they are "
                               "graded as programs that exited) and can reach their working directories; "
                               "install bubblewrap")
        ifaces = info.get("net_ifaces")
        if info.get("net_ns") and info.get("net_ns") != mine("net") and ifaces is not None and set(ifaces) <= {"lo"}:
            iso.append("netns")
        elif self.config.network:
            missing.append("netns: network allowed by configuration")
        else:
            missing.append("netns: no network namespace; the code can open network connections")
        if drop:
            iso.append("uid")
        iso.append("rlimits")
        return iso, missing

    def _stderr_text(self) -> str:
        if self._errfile is None:
            return ""
        try:
            self._errfile.seek(0)
            return self._errfile.read(4000).decode("utf-8", "replace").strip().splitlines()[-1:][0]
        except (OSError, IndexError):
            return ""

    def start(self) -> None:
        """Start the server if it is not running (or was inherited through fork)."""
        if self.pid != os.getpid():
            # A forked copy of this object: the server belongs to the parent. Forget it.
            self.proc, self.ctl, self.pid, self.workroot = None, None, os.getpid(), None
            if self._uid_lock is not None:   # the parent's slot: its lock stays the parent's
                try:
                    os.close(self._uid_lock)
                except OSError:
                    pass
                self._uid_lock = self._uid_slot = None
        if self.proc is not None and self.proc.poll() is None and self.ctl is not None:
            return
        self.close()
        mode = self.config.mode
        reason = None
        if mode == "process":
            self._start("process")
        else:
            try:
                self._start("bwrap")
            except SandboxError as e:
                if mode == "bwrap":
                    raise
                reason = str(e)
                self._start("process")
        if not self._warned:
            # Say once, loudly, when the confinement is weaker than it should be.
            self._warned = True
            if reason is not None:
                print(f"rlvr: warning: code sandbox: {reason}; falling back to a plain process "
                      f"(missing: {', '.join(m.split(':')[0] for m in self.missing)})", file=sys.stderr)
            for m in self.missing:
                if m.startswith("uid: user"):
                    print(f"rlvr: warning: code sandbox: {m}", file=sys.stderr)

    def close(self) -> None:
        if self.pid != os.getpid():
            return
        self.replies.clear()
        if self.ctl is not None:
            try:
                self.ctl.close()
            except OSError:
                pass
            self.ctl = None
        if self.proc is not None:
            try:
                # A server that left by itself may still be freeing its tmpfs (a check's million
                # files): no need to wait for that.
                self.proc.wait(timeout=0.1 if self._gone else 2)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
            self.proc = None
        if self._errfile is not None:
            self._errfile.close()
            self._errfile = None
        if self.workroot:
            # The zygote's own wipe: iterative, so a tree thousands of directories deep left
            # by the code goes too (shutil.rmtree recurses), and never through a link.
            from rlvr.sandbox.zygote import wipe

            wipe(self.workroot)
            try:
                os.rmdir(self.workroot)
            except OSError:
                pass
            self.workroot = None
        if self.proc is None:
            self._release_uid()

    # ------------------------------------------------------------------ control channel

    def _ctl_recv(self, timeout: float) -> dict:
        assert self.ctl is not None
        r, _, _ = select.select([self.ctl], [], [], timeout)
        if not r:
            raise SandboxError(f"no answer from the sandbox server in {timeout:g} s")
        try:
            data = self.ctl.recv(1 << 20)
        except OSError as e:
            self._gone = True  # (a reset: it left with our request unread)
            raise SandboxError(f"sandbox server: {e}") from None
        if not data:
            self._gone = True
            raise SandboxError("the sandbox server exited")
        return json.loads(data)

    # The server answers every "run" (with the child's pid, or an error) and every "stop"
    # (with the exit status, once everything is dead), in order. Nobody waits for those
    # answers on the common path: they are filed here and claimed when needed.

    def _file(self, rep: dict) -> None:
        kind = "done" if rep.get("done") else "run"
        n = rep.get("n")
        if isinstance(n, int):
            self.replies[(kind, n)] = rep
        if len(self.replies) > 64:  # answers nobody will claim (checks that did not wait)
            for k in sorted(self.replies, key=lambda k: k[1])[:32]:
                del self.replies[k]

    def _ctl_poll(self) -> None:
        """File whatever answers have arrived, without waiting."""
        while self.ctl is not None:
            r, _, _ = select.select([self.ctl], [], [], 0)
            if not r:
                return
            self._file(self._ctl_recv(0))

    def _ctl_claim(self, kind: str, n: int, timeout: float) -> dict:
        end = time.monotonic() + timeout
        while (kind, n) not in self.replies:
            self._file(self._ctl_recv(max(0.0, end - time.monotonic())))
        return self.replies.pop((kind, n))

    def describe(self) -> dict:
        """Mode, isolation obtained and what is missing (starts the server if needed)."""
        with self.lock:
            self.start()
        return {"mode": self.mode, "isolation": list(self.isolation), "missing": list(self.missing),
                "python": self.info.get("python")}

    def session(self, limits: Limits) -> "Session":
        return Session(self, limits)


class Session:
    """One check: a fresh confined child, talked to directly over its own socket."""

    def __init__(self, sandbox: Sandbox, limits: Limits):
        self.sb = sandbox
        self.limits = limits
        self.rpc: socket.socket | None = None
        self.out: int | None = None
        self.output_bytes = 0
        self.tail = bytearray()
        self.stopped: SandboxStop | None = None
        self.buf = bytearray()
        self.finished: Finished | None = None
        self.child_pid: int | None = None
        self.deadline = 0.0
        self.hello: dict | None = None
        self.n = 0

    def __enter__(self) -> "Session":
        self.sb.lock.acquire()
        try:
            self._begin()
        except BaseException:
            self.sb.lock.release()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.finish()
        finally:
            self.sb.lock.release()

    def _begin(self) -> None:
        """Ask the server for a child; do not wait (its hello comes with the first reply)."""
        for attempt in (0, 1):
            self.sb.start()
            a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            r, w = os.pipe()
            lim = self.limits
            self.sb.seq += 1
            self.n = self.sb.seq
            req = {"op": "run", "n": self.n, "backstop_s": lim.wall + CTL_TIMEOUT_S,
                   "limits": {"cpu_s": lim.timeout_s, "as_bytes": lim.memory_mb << 20, "nproc": lim.nproc,
                              "fsize_bytes": lim.fsize_mb << 20, "nofile": lim.nofile}}
            try:
                self.sb._ctl_poll()
                socket.send_fds(self.sb.ctl, [json.dumps(req).encode()], [b.fileno(), w])
            except (OSError, SandboxError) as e:
                for fd in (a, b):
                    fd.close()
                os.close(r)
                os.close(w)
                self.sb.close()
                if attempt:
                    raise SandboxError(f"sandbox server failed: {e}") from None
                continue
            b.close()
            os.close(w)
            self.rpc, self.out = a, r
            a.setblocking(False)
            os.set_blocking(r, False)
            self.hello = None
            self.deadline = time.monotonic() + CTL_TIMEOUT_S  # until the child says hello
            return

    def _on_hello(self, rep: dict) -> None:
        ids = rep.get("hello")
        want = self.sb.uid
        if not (isinstance(ids, list) and len(ids) == 4 and all(type(i) is int for i in ids)) or \
                (want is not None and ids[:2] != [want, want]):
            raise SandboxError(f"the sandboxed child runs as {ids!r}, expected uid {want}")
        self.hello = rep
        self.child_pid = ids[3]
        self.deadline = time.monotonic() + self.limits.wall

    def _no_child(self, why: str) -> ChildNotStarted:
        """The child died or hung before its hello: a server problem, not the program's."""
        try:
            rep = self.sb._ctl_claim("run", self.n, 2.0)
            detail = rep.get("error") or f"child {rep.get('pid')} gave no hello"
        except SandboxError as e:
            detail = str(e)
        self.sb.close()
        return ChildNotStarted(f"the sandboxed child did not start ({why}; {detail})")

    # ------------------------------------------------------------------ output

    def _drain(self) -> None:
        assert self.out is not None
        while True:
            try:
                chunk = os.read(self.out, 65536)
            except BlockingIOError:
                return
            except OSError:
                return
            if not chunk:
                return
            self.output_bytes += len(chunk)
            self.tail += chunk
            if len(self.tail) > 4096:
                del self.tail[:-2048]
            if self.output_bytes > self.limits.max_output_bytes:
                raise self._stop(OutputLimit(f"output passed {self.limits.max_output_bytes} bytes"))

    def _stop(self, exc: SandboxStop) -> SandboxStop:
        if self.stopped is None:
            self.stopped = exc
        return self.stopped

    # ------------------------------------------------------------------ requests

    def request(self, msg: dict) -> dict:
        """Send one request and wait for its reply (raises a SandboxStop when it cannot come)."""
        if self.stopped is not None:
            raise self.stopped
        data = json.dumps(msg, separators=(",", ":"), allow_nan=True).encode()
        data = struct.pack(">I", len(data)) + data
        if self.hello is None:
            try:
                rep = self._exchange(data)
            except SandboxStop as e:
                self.stopped = None
                raise self._no_child(str(e)) from None
            self._on_hello(rep)
            data = b""
        return self._exchange(data)

    def _exchange(self, out: bytes) -> dict:
        """Send out (may be empty) and return the next frame, draining output meanwhile."""
        assert self.rpc is not None and self.out is not None
        data = memoryview(out)
        frame = None
        rfd, outfd = self.rpc.fileno(), self.out
        while True:
            if frame is None:
                frame = self._frame()  # frames can arrive together: parse what is buffered first
                if frame is not None and data and self.hello is not None:
                    raise self._stop(ProtocolError("reply before the request was sent"))
            if frame is not None and not data:
                return frame
            left = self.deadline - time.monotonic()
            if left <= 0:
                raise self._stop(SandboxTimeout(f"no answer within {self.limits.wall:g} s of wall clock"))
            r, w, _ = select.select([rfd, outfd] if frame is None else [outfd], [rfd] if data else [], [], left)
            if outfd in r:
                self._drain()
            if w:
                try:
                    data = data[self.rpc.send(data):]
                except BlockingIOError:
                    pass
                except OSError:
                    raise self._stop(SandboxGone("the program exited")) from None
            if rfd in r:
                try:
                    chunk = self.rpc.recv(1 << 20)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    raise self._stop(SandboxGone("the program exited"))
                self.buf += chunk

    def _frame(self) -> dict | None:
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack(">I", self.buf[:4])
        if n > self.limits.max_message_bytes:
            raise self._stop(ProtocolError(f"reply of {n} bytes is over the cap"))
        if len(self.buf) < 4 + n:
            return None
        payload = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        try:
            rep = json.loads(payload)
        except (ValueError, RecursionError):
            raise self._stop(ProtocolError("malformed reply")) from None
        if not isinstance(rep, dict):
            raise self._stop(ProtocolError("malformed reply"))
        return rep

    def finish(self, wait: bool = False) -> Finished:
        """End the check: the server kills everything it started. With wait, also collect
        the exit status and the last output (the server is done when this returns);
        without, the server cleans up while the caller goes on (the next check queues)."""
        if self.finished is not None:
            return self.finished
        fin = Finished()
        sb = self.sb
        try:
            if sb.ctl is not None:
                sb.ctl.send(b'{"op":"stop"}')
                if wait:
                    rep = sb._ctl_claim("done", self.n, CTL_TIMEOUT_S)
                    fin.exit, fin.signal = rep.get("exit"), rep.get("signal")
                    fin.cpu_s, fin.backstop = rep.get("cpu_s"), bool(rep.get("backstop"))
        except (OSError, SandboxError):
            sb.close()  # the next check starts a fresh server
            fin.extra["server"] = "lost"
        if self.out is not None:
            end = time.monotonic() + (0.5 if wait else 0.0)
            try:
                while True:
                    r, _, _ = select.select([self.out], [], [], max(0.0, end - time.monotonic()))
                    if not r:
                        break
                    before = self.output_bytes
                    self._drain()
                    if self.output_bytes == before:
                        break
            except SandboxStop:
                pass
            os.close(self.out)
            self.out = None
        if self.rpc is not None:
            self.rpc.close()
            self.rpc = None
        fin.output_bytes = self.output_bytes
        fin.output_tail = bytes(self.tail[-1000:]).decode("utf-8", "replace")
        fin.stopped = self.stopped.reason if self.stopped is not None else None
        self.finished = fin
        return fin


_SANDBOXES: dict[tuple, Sandbox] = {}
_REGISTRY_LOCK = threading.Lock()


def get_sandbox(config: SandboxConfig | None = None) -> Sandbox:
    """The process's warm sandbox for this configuration (started on first use)."""
    config = config or SandboxConfig()
    key = (os.getpid(), config)
    with _REGISTRY_LOCK:
        sb = _SANDBOXES.get(key)
        if sb is None:
            for k in [k for k in _SANDBOXES if k[0] != os.getpid()]:
                del _SANDBOXES[k]  # inherited through fork: those servers belong to the parent
            sb = _SANDBOXES[key] = Sandbox(config)
        return sb


def _after_fork_in_child() -> None:
    # Servers belong to the process that started them; a forked child starts its own.
    global _REGISTRY_LOCK
    _REGISTRY_LOCK = threading.Lock()
    for k in [k for k in _SANDBOXES if k[0] != os.getpid()]:
        del _SANDBOXES[k]


os.register_at_fork(after_in_child=_after_fork_in_child)


@atexit.register
def _close_all() -> None:
    for (pid, _), sb in list(_SANDBOXES.items()):
        if pid == os.getpid():
            try:
                sb.close()
            except Exception:  # noqa: BLE001 - best effort at exit
                pass
