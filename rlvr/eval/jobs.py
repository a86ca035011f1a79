"""Sweeps: many checkpoints x the standard tasks, spread over the GPUs of a node.

    jobs = read_jobs("jobs.json")                 # [{"checkpoint_path": ..., "output_name": ...}, ...]
    devices = pick_gpus(None, "auto", "absolute", warn)      # the node's free GPUs
    failed = run_jobs(select_jobs(jobs, shard=(0, 2)), "evals", DEFAULT_TASKS, EvalOptions(), devices=devices)
    watch("results/run_*/checkpoints/step_*", "evals", [Task("gsm8k", 8)], EvalOptions(), devices=["0", "1"])

The unit of work is one task of one checkpoint (a ``Unit``): it runs in its own child
process, ``rlvr-eval CKPT DIR -b TASK [--shots N] --gpu G``, on one GPU (never tensor
parallelism), so the tasks of one checkpoint spread over the free GPUs as well as the
checkpoints do. A unit whose folder holds a summary.json is done and skipped; an
interrupted one resumes from its completions.jsonl. A task is a benchmark name and a shot
count (``Task("gsm8k", 8)``, written ``gsm8k:8`` on the command line); its folder is
``<name>_<N>shot`` (``<name>`` without a shot count), the folder name lm-eval's runs use.
With ``EvalOptions.harness == "lm-eval"`` a unit is lm-eval's own run
(``rlvr-eval --harness lm-eval``), done when its results file is there.

Several processes, on one node or on several that share the filesystem, may run the same
jobs or watch at once: a unit runs where its claim was taken (rlvr.eval.claims), so they split
the work as their GPUs free up and take over the units of a process that died. Each unit's
child process writes its log to ``<unit folder>/eval.log``.

Layout: ``run_jobs`` writes OUT/<output_name>/<task folder>/; ``watch`` writes
OUT/<checkpoint>/<task folder>/, <checkpoint> being the checkpoint's path below the
pattern's fixed prefix. Both keep OUT/results.md and OUT/results.csv current
(rlvr.eval.table).

GPUs are named by physical index (``absolute``, nvidia-smi's numbering) or by position in
this process's CUDA_VISIBLE_DEVICES (``visible``); ``resolve_gpus`` turns either into the
value each child gets as its CUDA_VISIBLE_DEVICES.
"""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass

from rlvr.eval import runner as ev
from rlvr.eval.claims import Claims
from rlvr.errors import BadInput, Failure, UsageError

GPU_MODES = ("absolute", "visible")


# --------------------------------------------------------------------------- tasks


@dataclass(frozen=True)
class Task:
    """A benchmark and its number of few-shot examples (None: the benchmark's default)."""

    name: str
    shots: int | None = None

    @property
    def folder(self) -> str:
        if ":" in self.name or "," in self.name:   # an OLMES task group: gsm8k::tulu,ifeval::tulu
            from rlvr.eval.harness import olmes_folder

            return olmes_folder(self.name)
        return self.name if self.shots is None else f"{self.name}_{self.shots}shot"

    def __str__(self) -> str:
        return self.name if self.shots is None else f"{self.name}:{self.shots}"


# gsm8k 8-shot, gsm8k 4-shot, math_qwen 4-shot, ifeval 0-shot, mbpp 3-shot
DEFAULT_TASKS = (Task("gsm8k", 8), Task("gsm8k", 4), Task("math_qwen", 4), Task("ifeval", 0), Task("mbpp", 3))

_TASK = re.compile(r"^(?P<name>[A-Za-z0-9_.\-]+?)(?::(?P<shots>\d+)|_(?P<folder_shots>\d+)shot)?$")


def parse_task(text: str) -> Task:
    """'gsm8k' / 'gsm8k:8' / 'gsm8k_8shot' -> Task. UsageError for anything else."""
    m = _TASK.match(text.strip())
    if not m:
        raise UsageError(f"{text!r} is not a task (NAME, NAME:SHOTS or NAME_<SHOTS>shot, e.g. gsm8k:8)")
    shots = m.group("shots") or m.group("folder_shots")
    return Task(m.group("name"), int(shots) if shots is not None else None)


def check_tasks(tasks: Sequence[Task], known: Collection[str], shots_supported: bool) -> None:
    """UsageError for a task rlvr-eval cannot run: an unknown benchmark, or a shot count
    where the evaluation takes none."""
    for t in tasks:
        if t.name not in known:
            raise UsageError(f"unknown benchmark {t.name!r} (known: {', '.join(known)})")
        if t.shots is not None and not shots_supported:
            raise UsageError(f"task {t}: this rlvr-eval has no --shots; name the benchmark alone (-b {t.name})")
    folders = [t.folder for t in tasks]
    dup = next((f for f in folders if folders.count(f) > 1), None)
    if dup:
        raise UsageError(f"task {dup} is given twice")


def sweep_tasks(benchmarks: Sequence[str], harness: str = "rlvr") -> list[Task]:
    """The tasks of a sweep: -b values (NAME or NAME:SHOTS), else the standard task set; checked
    (UsageError). Under --harness lm-eval every task is lm-eval's, with its shot count made
    explicit (lm-eval's folder is always <task>_<N>shot)."""
    tasks = [parse_task(b) for b in dict.fromkeys(benchmarks)] or list(DEFAULT_TASKS)
    try:
        check_tasks(tasks, ev.known_benchmarks(), shots_supported=True)
    except UsageError as e:
        if benchmarks:
            raise
        raise UsageError(f"the standard task set ({' '.join(map(str, tasks))}) cannot run here: {e}; "
                         "name the tasks with -b") from None
    if harness == "lm-eval":
        from rlvr.eval.tasks import STANDARD

        other = [t.name for t in tasks if t.name not in STANDARD]
        if other:
            raise UsageError(f"--harness lm-eval runs lm-eval's tasks ({', '.join(STANDARD)}), not {other[0]}")
        tasks = [Task(t.name, STANDARD[t.name].shots if t.shots is None else t.shots) for t in tasks]
        check_tasks(tasks, ev.known_benchmarks(), shots_supported=True)
    return tasks


# --------------------------------------------------------------------------- jobs files


@dataclass(frozen=True)
class Job:
    """One checkpoint of a sweep and the folder name its results go to."""

    checkpoint: str
    name: str


JOB_FIELDS = ("checkpoint_path", "output_name")


def _json_items(text: str, path: str) -> list[tuple[int, object]]:
    """(line, value) for each element of a JSON list, or each line of a JSON-lines file."""
    dec = json.JSONDecoder()
    ws = re.compile(r"\s*")
    line = lambda pos: text.count("\n", 0, pos) + 1  # noqa: E731
    i = ws.match(text).end()
    if not text.startswith("[", i):
        out = []
        for n, raw in enumerate(text.splitlines(), 1):
            if raw.strip():
                try:
                    out.append((n, json.loads(raw)))
                except json.JSONDecodeError as e:
                    raise BadInput(f"{path}:{n}: not a JSON object ({e.msg})") from None
        return out
    out, i = [], i + 1
    while True:
        i = ws.match(text, i).end()
        if text.startswith("]", i):
            break
        start = i
        try:
            value, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as e:
            raise BadInput(f"{path}:{line(e.pos)}: invalid JSON ({e.msg})") from None
        out.append((line(start), value))
        i = ws.match(text, i).end()
        if text.startswith(",", i):
            i += 1
        elif not text.startswith("]", i):
            raise BadInput(f"{path}:{line(i)}: invalid JSON (expected ',' or ']' after a job)")
    return out


def read_jobs(path: str) -> list[Job]:
    """The jobs of a file: a JSON list (or JSON lines) of {"checkpoint_path", "output_name"}.
    BadInput names FILE:LINE and the field; output names must be distinct relative folders."""
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"--jobs: cannot read {path}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise BadInput(f"{path}:1: not UTF-8 text") from None
    jobs: list[Job] = []
    seen: dict[str, int] = {}
    for n, item in _json_items(text, path):
        if not isinstance(item, dict):
            raise BadInput(f"{path}:{n}: a job must be an object with {' and '.join(JOB_FIELDS)}")
        extra = sorted(set(item) - set(JOB_FIELDS))
        if extra:
            raise BadInput(f"{path}:{n}: field {extra[0]}: unknown (a job has {' and '.join(JOB_FIELDS)})")
        for f in JOB_FIELDS:
            v = item.get(f)
            if not isinstance(v, str) or not v.strip():
                raise BadInput(f"{path}:{n}: field {f}: " + ("missing" if f not in item else "must be a non-empty string"))
        name = os.path.normpath(item["output_name"])
        if os.path.isabs(name) or name == "." or name.split(os.sep)[0] == "..":
            raise BadInput(f"{path}:{n}: field output_name: {item['output_name']!r} must be a folder below OUT_DIR")
        if name in seen:
            raise BadInput(f"{path}:{n}: field output_name: {name!r} is already used at line {seen[name]}")
        seen[name] = n
        jobs.append(Job(item["checkpoint_path"], name))
    if not jobs:
        raise BadInput(f"{path}:1: no jobs")
    return jobs


def parse_range(value: str | None) -> tuple[int | None, int | None] | None:
    """'A:B' -> jobs A to B-1 (0-based, either end may be left out, as a Python slice)."""
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d*)\s*:\s*(\d*)\s*", value)
    if not m:
        raise UsageError(f"--range {value!r} is not START:END (0-based, END excluded, e.g. 0:8 or 8:)")
    a, b = (int(x) if x else None for x in m.groups())
    if a is not None and b is not None and b <= a:
        raise UsageError(f"--range {value!r} selects no job (END must be above START)")
    return a, b


def select_jobs(jobs: Sequence[Job], span: tuple[int | None, int | None] | None = None,
                shard: tuple[int, int] | None = None) -> list[Job]:
    """The jobs of one node: the range START:END of the file's list, then every N-th from I."""
    out = list(jobs)
    if span is not None:
        out = out[span[0]:span[1]]
    if shard is not None:
        out = out[shard[0]::shard[1]]
    return out


# --------------------------------------------------------------------------- GPUs


def resolve_gpus(ids: Sequence[str], mode: str, visible: str | None) -> tuple[list[str], list[str]]:
    """(CUDA_VISIBLE_DEVICES value per device, warnings) for GPU ids given in `mode`:
    absolute ids are physical indices (or UUIDs) and pass through; visible ids index the
    entries of `visible` (this process's CUDA_VISIBLE_DEVICES; unset: every GPU, so the ids
    are physical)."""
    if mode not in GPU_MODES:
        raise UsageError(f"--gpu-mode must be absolute or visible, not {mode!r}")
    entries = None if visible is None else [e.strip() for e in visible.split(",") if e.strip()]
    warnings: list[str] = []
    if mode == "absolute":
        if entries and all(e.isdigit() for e in entries):
            outside = [i for i in ids if i.isdigit() and i not in entries]
            if outside:
                warnings.append(f"GPU {','.join(outside)} is outside CUDA_VISIBLE_DEVICES={visible} (--gpu-mode absolute "
                                "takes physical ids; --gpu-mode visible counts within CUDA_VISIBLE_DEVICES)")
        return list(ids), warnings
    if entries is None:
        return list(ids), warnings
    out = []
    for i in ids:
        if not i.isdigit() or int(i) >= len(entries):
            raise UsageError(f"--gpu-mode visible: GPU {i!r} is not a position in CUDA_VISIBLE_DEVICES={visible} "
                             f"(0 to {len(entries) - 1})")
        out.append(entries[int(i)])
    return out, warnings


def pick_gpus(gpu: str | None, gpus: str | None, mode: str, warn: Callable[[str], None],
              default: str | None = None, wait: bool = False) -> list[str] | None:
    """--gpu N / --gpus 0,1,... / --gpus auto -> the CUDA_VISIBLE_DEVICES value of each device;
    None: no choice (the machine as it is). auto asks rlvr.gpu for the free GPUs (physical
    ids whatever the mode); on a machine without NVIDIA GPUs it warns and returns None, and
    with GPUs but none free it fails (exit 4), or with `wait` returns [] (a scheduler that
    asks free_now() again). `default` stands in for a missing --gpus."""
    from rlvr import gpu as gpu_state

    if gpu is not None:
        ids = [gpu]
    else:
        gpus = gpus if gpus is not None else default
        if gpus is None:
            return None
        if gpus == "auto":
            try:
                return [str(i) for i in gpu_state.free_gpus()]
            except gpu_state.TooFewFree as e:
                if wait:
                    return []
                raise Failure(f"--gpus auto: {e}", gpu_state.EXIT_TOO_FEW) from None
            except gpu_state.GpuError as e:
                warn(f"--gpus auto: {e}; running on this machine as it is")
                return None
        ids = [g.strip() for g in gpus.split(",") if g.strip()]
        if not ids:
            raise UsageError(f"--gpus {gpus!r} names no GPU")
    out, warnings = resolve_gpus(ids, mode, os.environ.get("CUDA_VISIBLE_DEVICES"))
    for w in warnings:
        warn(w)
    return out


def free_now() -> list[str]:
    """The free GPUs of this node now (physical ids, as --gpus auto gives them); [] when none
    is free or they cannot be read."""
    from rlvr import gpu as gpu_state

    try:
        return [str(i) for i in gpu_state.free_gpus()]
    except gpu_state.GpuError:
        return []


GPU_RECHECK_S = 30.0


# --------------------------------------------------------------------------- units and the scheduler


@dataclass(frozen=True)
class Unit:
    """One task of one checkpoint, evaluated into its own folder."""

    checkpoint: str
    out: str
    task: Task


def task_dir(base: str, task: Task, opts: ev.EvalOptions) -> str:
    return os.path.join(base, ev.leaf(task.folder, opts))


LOG = "eval.log"   # each unit's log (its child's stderr), beside its results


def unit_done(unit: Unit, opts: ev.EvalOptions) -> bool:
    """rlvr's summary.json, or under --harness lm-eval, lm-eval's own results file."""
    if opts.harness == "lm-eval":
        return bool(glob.glob(os.path.join(glob.escape(unit.out), "**", "results_*.json"), recursive=True))
    return ev.is_done(unit.out)


def unit_command(unit: Unit, opts: ev.EvalOptions, device: str | None) -> list[str]:
    """The rlvr-eval command line that evaluates one unit in a child process (under --harness
    lm-eval: lm-eval itself, which names the unit's folder <task>_<N>shot below the checkpoint's)."""
    t = unit.task
    if opts.harness == "olmes":
        cmd = [sys.executable, "-m", "rlvr.commands.eval", unit.checkpoint, unit.out, "--harness", "olmes",
               "--dtype", opts.dtype, "--benchmark", t.name]
        for flag, v in (("--harness-python", opts.harness_python), ("--max-model-len", opts.max_model_len),
                        ("--limit", opts.limit), ("--model-args", opts.model_args), ("--shots", opts.shots),
                        ("--gpu", device)):
            if v is not None:
                cmd += [flag, str(v)]
        return cmd
    lm_eval = opts.harness == "lm-eval"
    out = os.path.dirname(unit.out) if lm_eval else unit.out
    cmd = [sys.executable, "-m", "rlvr.commands.eval", unit.checkpoint, out]
    if lm_eval:
        cmd += ["--harness", "lm-eval"]
        cmd += ["--harness-python", opts.harness_python] if opts.harness_python else []
        cmd += ["--model-args", opts.model_args] if opts.model_args else []
    else:
        cmd += ["--engine", opts.engine]
    cmd += ["--dtype", opts.dtype, "--benchmark", t.name]
    if t.shots is not None:
        cmd += ["--shots", str(t.shots)]
    src = ev.source_for(t.name, opts.source)
    if src is not None:
        cmd += ["--source", f"{t.name}={src}"]
    flags = (("--max-model-len", opts.max_model_len), ("--limit", opts.limit), ("--max-tokens", opts.max_tokens))
    if not lm_eval:
        flags += (("--kv-cache-gib", opts.kv_cache_gib), ("--pass-at-k", opts.pass_at_k),
                  ("--verify-jobs", opts.verify_jobs))
    for flag, v in flags:
        if v is not None:
            cmd += [flag, str(v)]
    if t.name in opts.max_tokens_by:
        cmd += ["--max-tokens", f"{t.name}={opts.max_tokens_by[t.name]}"]
    if opts.chat:
        cmd += ["--chat"]
    if opts.system is not None:
        cmd += ["--system", opts.system]
    if opts.thinking is not None:
        cmd += ["--thinking" if opts.thinking else "--no-thinking"]
    if opts.chat_template is not None:
        cmd += ["--chat-template", opts.chat_template]
    if opts.tools is not None:
        cmd += opts.tools.cli_args()
    if opts.judge:   # the LLM judge's options, as the unit's command line takes them
        from rlvr.verifiers.judge import FLAGS

        cmd += [a for key, v in opts.judge.items() for a in (FLAGS[key], str(v))]
    if device is not None:
        cmd += ["--gpu", device]
    return cmd


# Run in a child before the unit's command: SIGTERM when the scheduler dies (even by SIGKILL),
# so that no orphan evaluation writes into a unit that another process takes over. (A launcher
# rather than Popen's preexec_fn, which is unsafe beside the heartbeat thread.)
_LAUNCH = ("import ctypes, os, signal, sys\n"
           "try:\n    ctypes.CDLL(None).prctl(1, int(signal.SIGTERM))  # PR_SET_PDEATHSIG\n"
           "except Exception:\n    pass\n"
           "if os.getppid() != int(sys.argv[1]):\n    sys.exit(143)\n"
           "os.execvp(sys.argv[2], sys.argv[2:])\n")


def _start(unit: Unit, cmd: list[str], device: str | None) -> tuple[subprocess.Popen, object]:
    """Start a unit's child: stdout (its JSON line) is ours, stderr goes to its own log."""
    import datetime as _dt
    import shlex
    import socket

    os.makedirs(unit.out, exist_ok=True)
    log = open(os.path.join(unit.out, LOG), "ab")
    when = _dt.datetime.now().astimezone().isoformat(timespec="seconds")
    log.write(f"== {when} {socket.gethostname()} pid {os.getpid()}"
              f"{f' GPU {device}' if device is not None else ''}: {shlex.join(cmd)}\n".encode())
    log.flush()
    if sys.platform.startswith("linux"):
        cmd = [sys.executable, "-c", _LAUNCH, str(os.getpid()), *cmd]
    proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stderr=log)
    return proc, log


def _tail(path: str) -> str:
    """The last line of a unit's log (what a failed unit said last)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(max(0, os.path.getsize(path) - 4096))
            lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""


def run_units(scan: Callable[[], list[Unit]], devices: Sequence[str | None], opts: ev.EvalOptions, *,
              interval: float = 60.0, once: bool = True, idle_exit: float | None = None,
              after: Callable[[], None] | None = None, log: Callable[[str], None] = print,
              command: Callable[[Unit, ev.EvalOptions, str | None], list[str]] = unit_command,
              claims: Claims | None = None, free: Callable[[], list[str]] | None = None,
              recheck: float = GPU_RECHECK_S) -> int:
    """Run the units scan() returns, one child process per device at a time (devices: the
    CUDA_VISIBLE_DEVICES value of each, or [None] for the machine as it is), in scan order.

    A unit runs only once this process holds its claim (rlvr.eval.claims), so processes on
    several nodes that share the filesystem split the same units as their GPUs free up, and a
    unit whose owner died is taken over. Each child's stderr goes to the unit's own log
    (<unit>/eval.log). scan() runs every `interval` s and whenever a device frees up; it
    returns the units not done yet (running and failed ones are left out here). once: stop
    when nothing is left, including units other processes hold (they may still die and need
    taking over); idle_exit: stop after that many seconds without work. after() runs when a
    unit ends. Returns the number of failed units (each is retried at the next start, not now,
    by this process; another process may take it at once).

    free (--gpus auto): the node's free GPUs now (free_now). The devices are then those free
    GPUs plus the ones running this process's units, asked again whenever a unit ends and
    every `recheck` s while a unit waits for a device: a GPU freed later (by anyone) takes the
    next unit, and `devices` may start empty (every GPU busy: the units wait, with one line)."""
    own = claims is None
    claims = claims or Claims(log=log)
    if own:
        claims.__enter__()
    failed: set[Unit] = set()
    running: dict[str | None, tuple[subprocess.Popen, Unit, object]] = {}
    queue: list[Unit] = []
    elsewhere: set[Unit] = set()
    said_waiting = False
    pool = list(devices)
    next_gpus = time.monotonic() + recheck if pool else 0.0
    said_no_gpu = False
    next_scan = 0.0
    last_work = time.monotonic()
    n_failed = 0
    try:
        while True:
            freed = False
            for dev, (proc, unit, fh) in list(running.items()):
                if proc.poll() is None:
                    if claims.lost(unit.out):
                        proc.terminate()   # another process owns the unit now
                    continue
                del running[dev]
                fh.close()
                freed = True
                bad = proc.returncode != 0 or not unit_done(unit, opts)
                if bad and not claims.lost(unit.out):
                    failed.add(unit)
                    n_failed += 1
                    last = _tail(os.path.join(unit.out, LOG))
                    why = f"exit {proc.returncode}" if proc.returncode != 0 else "exit 0 without results"
                    log(f"{unit.checkpoint} on {unit.task}: evaluation failed ({why})" + (f": {last}" if last else "")
                        + f"; log {os.path.join(unit.out, LOG)}; skipped until the next start")
                claims.release(unit.out, failed=bad)
                if after is not None:
                    after()
            now = time.monotonic()
            if freed or now >= next_scan:
                busy = {u for _, u, _ in running.values()}
                queue = [u for u in scan() if u not in failed and u not in busy]
                elsewhere = {u for u in elsewhere if u in queue}
                next_scan = now + interval
            if free is not None and queue and all(d in running for d in pool) and (freed or now >= next_gpus):
                found = free()
                pool = list(dict.fromkeys([*(d for d in pool if d in running), *found]))
                next_gpus = now + recheck
                if all(d in running for d in pool) and not running and not said_no_gpu:
                    log(f"{len(queue)} unit(s) to run and no free GPU; waiting for one (checking every {recheck:g} s)")
                    said_no_gpu = True
                elif any(d not in running for d in pool):
                    said_no_gpu = False
            for dev in pool:
                while dev not in running and queue:
                    unit = queue.pop(0)
                    if not claims.acquire(unit.out):
                        elsewhere.add(unit)
                        continue
                    elsewhere.discard(unit)
                    if unit_done(unit, opts):   # finished and released by another process since the scan
                        claims.release(unit.out)
                        continue
                    cmd = command(unit, opts, dev)
                    log(f"evaluating {unit.checkpoint} on {unit.task}" + (f" (GPU {dev})" if dev is not None else "")
                        + f"; log {os.path.join(unit.out, LOG)}")
                    proc, fh = _start(unit, cmd, dev)
                    running[dev] = (proc, unit, fh)
            if queue or running or elsewhere:
                last_work = now
            if not running and not queue:
                if elsewhere and not said_waiting:
                    log(f"{len(elsewhere)} unit(s) held by other processes; waiting for them to finish (a unit "
                        "whose owner stops is taken over)")
                    said_waiting = True
                if not elsewhere and (once or (idle_exit is not None and now - last_work >= idle_exit)):
                    if after is not None:
                        after()
                    return n_failed
                time.sleep(max(0.0, min(next_scan - time.monotonic(), 5.0)))
            else:
                time.sleep(0.2)
    finally:
        for proc, _, _ in running.values():  # interrupted: stop the children (they resume next time)
            proc.terminate()
        for proc, unit, fh in running.values():
            proc.wait()
            fh.close()
            claims.release(unit.out)
        if own:
            claims.__exit__(None, None, None)


def job_units(jobs: Sequence[Job], out_root: str, tasks: Sequence[Task], opts: ev.EvalOptions) -> list[Unit]:
    """The units of the jobs not done yet, job by job in the file's order."""
    units = []
    for j in jobs:
        for t in tasks:
            u = Unit(j.checkpoint, task_dir(os.path.join(out_root, j.name), t, opts), t)
            if not unit_done(u, opts):
                units.append(u)
    return units


def run_jobs(jobs: Sequence[Job], out_root: str, tasks: Sequence[Task], opts: ev.EvalOptions, *,
             devices: Sequence[str | None], log: Callable[[str], None] = print,
             free: Callable[[], list[str]] | None = None) -> int:
    """Evaluate every job on every task (finished units are skipped); returns failed units."""
    from rlvr.eval.table import write_tables

    left = job_units(jobs, out_root, tasks, opts)
    log(f"{len(jobs)} job(s) x {len(tasks)} task(s): {len(left)} to run on " + where_run(devices, free))
    return run_units(lambda: job_units(jobs, out_root, tasks, opts), devices, opts,
                     after=lambda: write_tables(out_root), log=log, free=free)


def where_run(devices: Sequence[str | None], free: Callable[[], list[str]] | None) -> str:
    """'GPU 0,2 (and the GPUs that free up)', 'this machine as it is', ... for the first line."""
    if devices == [None]:
        return "this machine as it is"
    if not devices:
        return "the GPUs as they free up (none is free now)"
    return f"GPU {','.join(str(d) for d in devices)}" + (" and the GPUs that free up" if free is not None else "")


# --------------------------------------------------------------------------- the watch loop


def fixed_prefix(pattern: str) -> str:
    """The leading path components of a glob pattern that hold no wildcard."""
    parts = []
    for p in pattern.split(os.sep):
        if glob.has_magic(p):
            break
        parts.append(p)
    return os.sep.join(parts)


def checkpoint_id(ckpt: str, pattern: str) -> str:
    rel = os.path.relpath(ckpt, fixed_prefix(pattern) or ".")
    return rel if not rel.startswith("..") else os.path.basename(os.path.normpath(ckpt))


def find_checkpoints(pattern: str) -> list[str]:
    """Folders matching pattern that hold a loadable model (hidden temporary folders never match),
    by step within each run (step9 before step10; step100, step_000100 and <run>_step100 name
    steps alike: rlvr.runs.checkpoint_step); of two spellings of one step in one folder, the first."""
    from rlvr.engines import checkpoint
    from rlvr.runs import checkpoint_key, step_sort_key

    out, seen = [], set()
    for p in sorted(glob.glob(pattern), key=step_sort_key):
        key = checkpoint_key(p)
        if not os.path.isdir(p) or (key is not None and key in seen):
            continue
        try:
            checkpoint.resolve(p)
        except checkpoint.CheckpointError:
            continue
        seen.add(key)
        out.append(p)
    return out


def watch_units(pattern: str, out_root: str, tasks: Sequence[Task], opts: ev.EvalOptions,
                shard: tuple[int, int] | None = None) -> list[Unit]:
    """The units not done yet of every checkpoint matching pattern; shard I/N splits the
    checkpoint list (the same order on every node) so several nodes share a sweep."""
    ckpts = find_checkpoints(pattern)
    if shard is not None:
        ckpts = ckpts[shard[0]::shard[1]]
    units = []
    for c in ckpts:
        base = os.path.join(out_root, checkpoint_id(c, pattern))
        units += [u for t in tasks if not unit_done(u := Unit(c, task_dir(base, t, opts), t), opts)]
    return units


def watch(pattern: str, out_root: str, tasks: Sequence[Task], opts: ev.EvalOptions, *,
          devices: Sequence[str | None], interval: float = 60.0, once: bool = False, idle_exit: float | None = None,
          shard: tuple[int, int] | None = None, log: Callable[[str], None] = print,
          free: Callable[[], list[str]] | None = None) -> int:
    """Evaluate every checkpoint matching pattern once per task as they appear, the tasks of
    each spread over the devices (and the GPUs that free up, with free); returns the number
    of failed units."""
    from rlvr.eval.table import write_tables

    return run_units(lambda: watch_units(pattern, out_root, tasks, opts, shard), devices, opts, interval=interval,
                     once=once, idle_exit=idle_exit, after=lambda: write_tables(out_root), log=log, free=free)
