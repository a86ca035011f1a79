"""A real S3 server in its own processes on 127.0.0.1, for rlvr's S3 tests and benchmark.

Ceph's RADOS Gateway (a production S3 implementation with real SigV4 auth) when Debian's
ceph-mon, ceph-osd and radosgw packages are installed (scripts/ceph_rgw_up.sh starts it);
otherwise moto's server mode behind a small TCP relay that can be killed like a server.
RLVR_TEST_S3=ceph|moto forces one. moto runs without authentication (any key is accepted:
its SigV4 check, when switched on, rejects valid requests whose path or query holds '/',
'+' or non-ASCII characters), so the wrong-credentials test needs Ceph.

    srv = start(workdir)          # S3Server: endpoint_url, access_key, secret_key, kind
    srv.kill(); srv.restart()     # the S3 front end dies (connections reset) and comes back
    srv.stop()                    # every process it started, also run from atexit

FaultRelay puts canned HTTP errors (503 SlowDown, 500, 403) in front of a running server.
A watchdog process stops the daemons if the test process dies without cleaning up.
Run as a script: ``python tests/s3server.py relay PORT UPSTREAM_PORT`` (the moto relay) or
``python tests/s3server.py reap PID DIR`` (the watchdog).
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import machine_time  # (beside this file)

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CEPH_SCRIPT = os.path.join(ROOT, "scripts", "ceph_rgw_up.sh")
CEPH_BINARIES = ("ceph-mon", "ceph-osd", "radosgw", "radosgw-admin", "ceph-authtool", "monmaptool", "ceph")


def ceph_available() -> bool:
    return all(shutil.which(b) for b in CEPH_BINARIES)


def choose_kind() -> str:
    kind = os.environ.get("RLVR_TEST_S3", "auto")
    if kind not in ("auto", "ceph", "moto"):
        raise ValueError(f"RLVR_TEST_S3={kind!r}: use ceph, moto or auto")
    if kind == "auto":
        kind = "ceph" if ceph_available() else "moto"
    return kind


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_http(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=1)
            return
        except urllib.error.HTTPError:
            return  # any HTTP answer means it serves
        except OSError:
            if time.monotonic() > deadline:
                raise RuntimeError(f"no answer from {url} after {timeout:.0f} s") from None
            time.sleep(0.1)


class S3Server:
    """One running server; `describe` says which implementation it is."""

    def __init__(self, kind: str, workdir: str):
        self.kind = kind
        self.workdir = workdir
        self.endpoint_url = ""
        self.access_key = ""
        self.secret_key = ""
        self.describe = kind
        self._procs: list[subprocess.Popen] = []
        self._pgids: set[int] = set()
        self._front: subprocess.Popen | None = None
        self._front_port = 0
        self._upstream_port = 0
        self._stopped = False

    # -- helpers for tests

    def env(self) -> dict[str, str]:
        """Environment for a command run against this server (standard boto3 variables)."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update({"AWS_ENDPOINT_URL": self.endpoint_url, "AWS_ACCESS_KEY_ID": self.access_key,
                    "AWS_SECRET_ACCESS_KEY": self.secret_key, "AWS_DEFAULT_REGION": "us-east-1",
                    "AWS_CONFIG_FILE": os.devnull, "AWS_SHARED_CREDENTIALS_FILE": os.devnull,
                    "AWS_EC2_METADATA_DISABLED": "true"})
        return env

    def client(self, **kw):
        import boto3
        from botocore.config import Config

        return boto3.client("s3", endpoint_url=self.endpoint_url, aws_access_key_id=self.access_key,
                            aws_secret_access_key=self.secret_key, region_name="us-east-1",
                            config=Config(s3={"addressing_style": "path"}, retries={"total_max_attempts": 1},
                                          request_checksum_calculation="when_required",
                                          response_checksum_validation="when_required", **kw))

    # -- lifecycle

    def _spawn(self, args: list[str], **kw) -> subprocess.Popen:
        p = subprocess.Popen(args, start_new_session=True, **kw)
        self._procs.append(p)
        self._pgids.add(p.pid)
        with open(os.path.join(self.workdir, "pgids"), "a") as fh:  # for the watchdog
            fh.write(f"{p.pid}\n")
        return p

    def start(self) -> "S3Server":
        os.makedirs(self.workdir, exist_ok=True)
        atexit.register(self.stop)
        self._spawn([sys.executable, os.path.abspath(__file__), "reap", str(os.getpid()), self.workdir],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            self._start_ceph() if self.kind == "ceph" else self._start_moto()
        except BaseException:
            self.stop()
            raise
        return self

    def _start_ceph(self) -> None:
        d = os.path.join(self.workdir, "ceph")
        log = open(os.path.join(self.workdir, "ceph_up.log"), "wb")
        p = self._spawn(["bash", CEPH_SCRIPT, "up", d], stdout=subprocess.PIPE, stderr=log)
        out, _ = machine_time.communicate(p, 180, "scripts/ceph_rgw_up.sh up")  # 12.7 s on a quiet machine
        if p.returncode != 0:
            tail = open(os.path.join(self.workdir, "ceph_up.log"), errors="replace").read()[-2000:]
            raise RuntimeError(f"Ceph RGW did not start (exit {p.returncode}):\n{tail}")
        vals = dict(line.split("=", 1) for line in out.decode().split() if "=" in line)
        self.endpoint_url = vals["S3_ENDPOINT_URL"]
        self.access_key, self.secret_key = vals["S3_ACCESS_KEY"], vals["S3_SECRET_KEY"]
        ver = subprocess.run(["radosgw", "--version"], capture_output=True, text=True).stdout.split()
        self.describe = f"ceph radosgw {ver[2] if len(ver) > 2 else '?'} (MemStore, SigV4)"

    def _start_moto(self) -> None:
        self._upstream_port = free_port()
        env = {k: v for k, v in os.environ.items() if k != "INITIAL_NO_AUTH_ACTION_COUNT"}
        exe = shutil.which("moto_server") or os.path.join(os.path.dirname(sys.executable), "moto_server")
        self._spawn([exe, "-H", "127.0.0.1", "-p", str(self._upstream_port)], env=env,
                    stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.workdir, "moto.log"), "wb"))
        wait_http(f"http://127.0.0.1:{self._upstream_port}/moto-api/", 60)
        self.access_key, self.secret_key = "AKIARLVRTESTMOTO0000", "moto-accepts-any-secret-" + os.urandom(8).hex()
        self._front_port = free_port()
        self._start_relay()
        self.endpoint_url = f"http://127.0.0.1:{self._front_port}"
        import moto

        self.describe = f"moto {moto.__version__} server (no auth) behind a TCP relay"

    def _start_relay(self) -> None:
        self._front = self._spawn([sys.executable, os.path.abspath(__file__), "relay", str(self._front_port),
                                   str(self._upstream_port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_http(f"http://127.0.0.1:{self._front_port}/moto-api/", 30)

    def kill(self) -> str:
        """SIGKILL the S3 front end (radosgw, or moto's relay): open connections are reset."""
        if self.kind == "ceph":
            pidfile = os.path.join(self.workdir, "ceph", "run", "rgw.pid")
            pid = int(open(pidfile).read())
            os.kill(pid, signal.SIGKILL)
            _wait_dead(pid)
            return f"radosgw pid {pid}"
        assert self._front is not None
        self._front.kill()
        self._front.wait()
        return f"moto relay pid {self._front.pid}"

    def restart(self) -> None:
        """Start the front end again on the same port and wait until it answers."""
        if self.kind == "ceph":
            p = self._spawn(["bash", CEPH_SCRIPT, "rgw", os.path.join(self.workdir, "ceph")],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            _, err = machine_time.communicate(p, 120, "scripts/ceph_rgw_up.sh rgw")
            if p.returncode != 0:
                raise RuntimeError(f"radosgw restart failed: {err.decode(errors='replace')[-500:]}")
        else:
            self._start_relay()

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        if self.kind == "ceph":
            subprocess.run(["bash", CEPH_SCRIPT, "down", os.path.join(self.workdir, "ceph")],
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=30)
        for pg in self._pgids:
            try:
                os.killpg(pg, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        for p in self._procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass


def _wait_dead(pid: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as fh:
                if fh.read().rsplit(")", 1)[1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.02)


def start(workdir: str, kind: str | None = None) -> S3Server:
    return S3Server(kind or choose_kind(), workdir).start()


def s3_error(status: int, code: str) -> bytes:
    """A complete HTTP response carrying an S3 XML error (and closing the connection)."""
    reason = {403: "Forbidden", 500: "Internal Server Error", 503: "Slow Down"}.get(status, "Error")
    body = (f'<?xml version="1.0" encoding="UTF-8"?><Error><Code>{code}</Code>'
            f"<Message>injected by the test relay</Message></Error>").encode()
    return (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\nContent-Length: {len(body)}\r\n"
            f"Connection: close\r\n\r\n").encode() + body


class FaultRelay:
    """A TCP relay in front of a running server, in a thread of the test process.

    The first connections get the canned HTTP responses in `faults` (one each, after the
    request has been read in full); every later connection is relayed byte for byte, so
    SigV4 signatures still verify upstream. `endpoint_url` is the relay's address.
    """

    def __init__(self, upstream_url: str, faults: list[bytes]):
        import socketserver
        import threading
        from urllib.parse import urlsplit

        up = urlsplit(upstream_url)
        self.faults = list(faults)
        self.injected = 0
        lock = threading.Lock()
        relay = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                with lock:
                    fault = relay.faults.pop(0) if relay.faults else None
                    relay.injected += fault is not None
                if fault is not None:
                    _read_request(self.request)
                    self.request.sendall(fault)
                    return
                upstream = socket.create_connection((up.hostname, up.port))
                t = threading.Thread(target=_pump, args=(upstream, self.request), daemon=True)
                t.start()
                _pump(self.request, upstream)
                t.join()

        class Server(socketserver.ThreadingTCPServer):
            daemon_threads = True
            allow_reuse_address = True

        self._server = Server(("127.0.0.1", 0), Handler)
        self.endpoint_url = f"http://127.0.0.1:{self._server.server_address[1]}"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def _read_request(sock: socket.socket) -> None:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        if not chunk:
            return
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":", 1)[1])
    while len(body) < length:
        chunk = sock.recv(65536)
        if not chunk:
            return
        body += chunk


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        try:
            dst.shutdown(socket.SHUT_WR)
        except OSError:
            pass


# ----------------------------------------------------------------------------- script modes

def _relay(port: int, upstream: int) -> None:
    import asyncio

    async def pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while data := await reader.read(1 << 16):
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def handle(cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        try:
            ur, uw = await asyncio.open_connection("127.0.0.1", upstream)
        except OSError:
            cw.close()
            return
        await asyncio.gather(pipe(cr, uw), pipe(ur, cw))

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, reuse_address=True)
        async with server:
            await server.serve_forever()

    asyncio.run(main())


def _reap(parent: int, workdir: str) -> None:
    """Wait for the test process to end, then stop the daemons it left (kill -9 safety)."""
    while True:
        try:
            os.kill(parent, 0)
        except ProcessLookupError:
            break
        time.sleep(1)
    d = os.path.join(workdir, "ceph")
    if os.path.isdir(d):
        subprocess.run(["bash", CEPH_SCRIPT, "down", d], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pgids = [int(x) for x in open(os.path.join(workdir, "pgids")).read().split()]
    except (OSError, ValueError):
        pgids = []
    for pg in pgids:
        if pg != os.getpgrp():
            try:
                os.killpg(pg, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"]:
        _relay(int(sys.argv[2]), int(sys.argv[3]))
    elif sys.argv[1:2] == ["reap"]:
        _reap(int(sys.argv[2]), sys.argv[3])
    else:
        sys.exit(__doc__)
