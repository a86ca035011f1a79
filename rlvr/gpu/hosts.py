"""Other nodes: run ``rlvr-gpu-free --json`` over ssh on each host and read its GPU records.

The remote command defaults to this installation's own rlvr-gpu-free by absolute path (the
console script beside this interpreter), never a bare name: a non-interactive ssh shell has
no virtualenv on its PATH. Nodes that share the filesystem (or have rlvr at the same path)
need nothing more; others name theirs with --remote-cmd.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from rlvr.gpu.classify import GpuState
from rlvr.gpu.common import DEFAULT_INTERVAL, DEFAULT_MAX_MEM_MIB, DEFAULT_SAMPLES, EXIT_NO_GPU, GpuError, NoGpuError


DEFAULT_SSH = "ssh -o BatchMode=yes -o ConnectTimeout=10"


def default_remote() -> str:
    """This installation's rlvr-gpu-free by absolute path: the console script beside this
    interpreter, else this interpreter running the command's module."""
    script = os.path.join(os.path.dirname(sys.executable), "rlvr-gpu-free")
    if os.path.isfile(script) and os.access(script, os.X_OK):
        return shlex.quote(script)
    return f"{shlex.quote(sys.executable)} -m rlvr.commands.gpu_free"


DEFAULT_REMOTE = default_remote()


def read_hosts(hosts: Iterable[str], hosts_file: str | None = None) -> list[str]:
    """Hosts from --host values (comma lists allowed) and a file (one per line, # comments)."""
    out: list[str] = []
    for h in hosts:
        out += [x.strip() for x in h.split(",") if x.strip()]
    if hosts_file:
        with open(hosts_file) as fh:
            for line in fh:
                line = line.split("#", 1)[0].strip()
                if line:
                    out.append(line.split()[0])
    return list(dict.fromkeys(out))


def query_host(host: str, remote_args: Sequence[str], ssh_cmd: str = DEFAULT_SSH, remote_cmd: str = DEFAULT_REMOTE,
               timeout: float = 120.0) -> list[GpuState]:
    """Run `remote_cmd --json remote_args` on host through ssh_cmd and read its GPU records.

    Raises NoGpuError when the host has no GPU (remote exit 5), GpuError on any other failure.
    """
    remote = f"{remote_cmd} --json {shlex.join(remote_args)}".strip()
    argv = shlex.split(ssh_cmd) + [host, remote]
    try:
        p = subprocess.run(argv, capture_output=True, timeout=timeout, stdin=subprocess.DEVNULL)
    except FileNotFoundError:
        raise GpuError(f"{host}: ssh command not found: {argv[0]!r}") from None
    except subprocess.TimeoutExpired:
        raise GpuError(f"{host}: no answer in {timeout:g} s") from None
    err = p.stderr.decode("utf-8", "replace").strip().splitlines()
    last = err[-1] if err else f"exit status {p.returncode}"
    if p.returncode == EXIT_NO_GPU:
        raise NoGpuError(f"{host}: {last}")
    if p.returncode != 0:
        raise GpuError(f"{host}: {last} (exit status {p.returncode})")
    states = []
    for n, line in enumerate(p.stdout.splitlines(), 1):
        if not line.strip():
            continue
        try:
            states.append(GpuState.from_record(orjson.loads(line), host=host))
        except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
            raise GpuError(f"{host}: output line {n} is not a GPU record ({e}): {line[:120]!r}") from None
    return states


class Hosts:
    """Other nodes as one: ``window()`` runs rlvr-gpu-free --json on each over ssh (see query_host)."""

    def __init__(self, hosts: Sequence[str], warn: Callable[[str], None], samples: int = DEFAULT_SAMPLES,
                 interval: float = DEFAULT_INTERVAL, max_mem_mib: float = DEFAULT_MAX_MEM_MIB, backend: str = "auto",
                 ssh_cmd: str = DEFAULT_SSH, remote_cmd: str = DEFAULT_REMOTE):
        self.hosts, self.warn, self.ssh_cmd, self.remote_cmd = list(hosts), warn, ssh_cmd, remote_cmd
        self.args = ["--samples", str(samples), "--interval", str(interval), "--max-mem", str(max_mem_mib)]
        self.args += ["--backend", backend] if backend != "auto" else []
        self.timeout = samples * interval + 120

    def window(self) -> list[GpuState]:
        return query_hosts(self.hosts, self.args, self.warn, ssh_cmd=self.ssh_cmd, remote_cmd=self.remote_cmd,
                           timeout=self.timeout)


def query_hosts(hosts: Sequence[str], remote_args: Sequence[str], warn: Callable[[str], None],
                **kw: Any) -> list[GpuState]:
    """GPU states of several hosts, queried in parallel; a host that fails is warned about and
    left out. GpuError when every host failed."""
    with ThreadPoolExecutor(max_workers=min(32, len(hosts))) as ex:
        futures = [ex.submit(query_host, h, remote_args, **kw) for h in hosts]
    out: list[GpuState] = []
    failed = []
    for h, f in zip(hosts, futures):
        try:
            out += f.result()
        except GpuError as e:
            warn(str(e))
            failed.append(h)
    if failed and len(failed) == len(hosts):
        raise GpuError(f"no host answered: {', '.join(failed)}")
    return out
