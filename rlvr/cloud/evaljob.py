"""Evaluation in cloud jobs: which checkpoints an eval-only job evaluates, its S3 results, and
the report of what was (and was not) evaluated.

Eval-only jobs (``rlvr-submit --eval CHECKPOINTS... --eval-config FILE``)::

    jobs = expand_checkpoints(["s3://b/rlvr/checkpoints/job-1/", "job-2", "s3://b/x/run_step*"],
                              jobs_uri="s3://b/rlvr/checkpoints/", local=False)
    # [Job("s3://b/rlvr/checkpoints/job-1/run_step10/", "job-1/run_step10"), ...]

A checkpoint is given as a folder holding a model (config.json), a folder of checkpoints (a
job's S3 root: its <run>_step<N>/ folders, <run>_final/ left out where steps are there; a
run folder: its checkpoints/step_*), a glob over either (``s3://.../run_step*``; quote it), or
a run name (a job of this --s3 prefix: ``s3://BUCKET/PREFIX/checkpoints/NAME/``). Local paths
work with --local only (the container mounts them); SageMaker reads s3:// ones.

The job runs ``rlvr-eval --jobs jobs.json $SM_MODEL_DIR/evals`` (rlvr.cloud.entrypoint) and keeps
its results at ``s3://BUCKET/PREFIX/evals/<output_name>/<task>/`` (``results_uri``), the same place
for every job: before it starts, the units already finished there are fetched (a summary.json
or lm-eval's results file makes a unit done), so a job submitted again evaluates only what is
left; while it runs, the folder goes up every few seconds (EvalSync).

``report`` says, for every checkpoint and task, whether it was evaluated and where the results
are, and lists each one that was not (failed, deleted before its turn, never reached): one line
each in the job's log and the whole of it in evaluated.json beside the results.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass

from rlvr.errors import UsageError

REPORT = "evaluated.json"
JOBS_NAME = "jobs.json"     # the eval-only job's rlvr-eval --jobs file, in the config channel
NOT_UPLOADED = (".rlvr-claim.*", ".rlvr-s3-sync*")   # claim files and pull's state stay in the job


def results_uri(s3: str) -> str:
    """s3://BUCKET/PREFIX/evals/: where every eval-only job of this prefix keeps its results."""
    from rlvr.s3 import parse_uri

    bucket, prefix = parse_uri(s3)
    prefix = prefix.strip("/")
    return f"s3://{bucket}/{prefix + '/' if prefix else ''}evals/"


# --------------------------------------------------------------------------- which checkpoints


@dataclass(frozen=True)
class Found:
    path: str       # s3://.../ or a local folder
    name: str       # the output name: <job or run>/<checkpoint folder>


def _is_s3(spec: str) -> bool:
    return spec.startswith("s3://")


def _s3_folders(prefix_uri: str, list_folder) -> list[str]:
    """The folders below an s3:// prefix that hold a config.json (relative, '' for the prefix itself)."""
    keys = list_folder(prefix_uri)
    return sorted({os.path.dirname(k) for k in keys if os.path.basename(k) == "config.json"})


def _pick(folders: list[str]) -> list[str]:
    """Checkpoints among model folders: <run>_final/ only where its run has no step folders
    (it is a copy of the last one)."""
    from rlvr.runs import checkpoint_step, step_sort_key

    steps = {os.path.dirname(f) for f in folders if checkpoint_step(f) is not None}
    out = [f for f in folders if not (f.rstrip("/").endswith("_final") and os.path.dirname(f) in steps)]
    return sorted(out, key=step_sort_key)


def _name(parts: list[str]) -> str:
    """<job or run>/<checkpoint>: the last two meaningful parts (checkpoints/ skipped)."""
    parts = [p for p in parts if p and p != "checkpoints"]
    return "/".join(parts[-2:]) if parts else "checkpoint"


def expand_checkpoints(specs: list[str], *, jobs_uri: str | None, local: bool,
                       list_folder: Callable[[str], list[str]] | None = None) -> list[Found]:
    """The checkpoints the specs name (see the module's docstring), in order, without repeats;
    UsageError for a spec that names none. list_folder: rlvr.s3.list_folder (a stand-in in tests)."""
    if list_folder is None:
        from rlvr.s3 import list_folder
    out: list[Found] = []
    for spec in specs:
        found: list[Found] = []
        if not _is_s3(spec) and not os.path.exists(spec) and not glob.has_magic(spec) and "/" not in spec:
            if not jobs_uri:
                raise UsageError(f"--eval {spec}: not a folder here; as a run name it needs --s3 (its job's checkpoints "
                                 "are under s3://BUCKET/PREFIX/checkpoints/NAME/)")
            spec = f"{jobs_uri.rstrip('/')}/{spec}/"
        if _is_s3(spec):
            if glob.has_magic(spec):
                fixed = spec[:min(spec.index(c) for c in "*?[" if c in spec)]
                base = fixed[:fixed.rfind("/") + 1]
                pat = spec.rstrip("/")
                rel = [f for f in _s3_folders(base, list_folder) if fnmatch.fnmatchcase(f"{base}{f}", pat)]
            else:
                base = spec.rstrip("/") + "/"
                rel = _s3_folders(base, list_folder)
            for f in _pick(rel):
                uri = f"{base}{f}/" if f else base
                found.append(Found(uri, _name(uri[len("s3://"):].rstrip("/").split("/")[1:])))
        else:
            if not local:
                raise UsageError(f"--eval {spec}: a local path; the SageMaker job cannot see this machine's files "
                                 "(give its s3:// copy: rlvr-s3-sync push, or run with --local)")
            folders = []
            for m in sorted(glob.glob(spec)) or []:
                if os.path.isfile(os.path.join(m, "config.json")):
                    folders.append(m)
                elif os.path.isdir(m):
                    below = sorted(glob.glob(os.path.join(glob.escape(m), "checkpoints", "*", "config.json"))
                                   + glob.glob(os.path.join(glob.escape(m), "*", "config.json")))
                    folders += [os.path.dirname(c) for c in below]
            for f in _pick([os.path.abspath(x) for x in folders]):
                found.append(Found(f, _name(f.split(os.sep))))
        if not found:
            raise UsageError(f"--eval {spec}: no checkpoint there (a folder with config.json, a job's or run's "
                             "checkpoints, or a glob over them)")
        out += [f for f in found if f.path not in {o.path for o in out}]
    names: dict[str, int] = {}
    fixed_names = []
    for f in out:   # two checkpoints of one name (step_000001 of two runs): number the second
        n = names.get(f.name, 0)
        names[f.name] = n + 1
        fixed_names.append(Found(f.path, f.name if n == 0 else f"{f.name}-{n + 1}"))
    return fixed_names


def jobs_file(found: list[Found], paths: dict[str, str] | None = None) -> str:
    """rlvr-eval --jobs' JSON list; paths maps a checkpoint to where the job sees it (--local mounts)."""
    return json.dumps([{"checkpoint_path": (paths or {}).get(f.path, f.path), "output_name": f.name}
                       for f in found], indent=1) + "\n"


# --------------------------------------------------------------------------- S3 results


class EvalSync:
    """Keeps s3://.../evals/ current with the job's evals folder (every `interval` s, and at the end)."""

    def __init__(self, out: str, uri: str, interval: float = 10.0, log: Callable[[str], None] = print):
        from rlvr.s3 import BackgroundUploader

        self.out, self.uri, self.interval, self.log = os.path.abspath(out), uri, interval, log
        self.up = BackgroundUploader(uri, root=self.out, exclude=NOT_UPLOADED)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlvr-eval-sync", daemon=True)

    def pull_finished(self) -> int:
        """Fetch what earlier jobs left in S3 (finished units are then skipped, interrupted ones
        resume); returns the number of files fetched."""
        from rlvr.s3 import pull

        parent = os.path.dirname(self.out)
        if os.path.basename(self.out) != self.uri.rstrip("/").rsplit("/", 1)[-1]:
            raise UsageError(f"{self.out}: the evals folder must be named like {self.uri}")
        rep = pull(self.uri, parent, exclude=NOT_UPLOADED, unpack=False)
        if rep.failed:
            self.log(f"warning: {len(rep.failed)} earlier result file(s) could not be fetched from {self.uri}, "
                     f"e.g. {rep.failed[0][0]}: {rep.failed[0][1]} (their units run again)")
        return rep.count("download")

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            if os.path.isdir(self.out):
                self.up.submit(self.out)

    def start(self) -> "EvalSync":
        self._thread.start()
        return self

    def finish(self, timeout: float | None = 3600) -> list[tuple[str, str]]:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        if os.path.isdir(self.out):
            self.up.submit(self.out)
        return self.up.close(timeout=timeout)


# --------------------------------------------------------------------------- the report


def spec_opts(spec):
    """The EvalOptions that decide a unit's folder and when it is done, for an EvalSpec."""
    from rlvr.eval.runner import EvalOptions

    args = list(spec.args)
    k = args[args.index("--pass-at-k") + 1] if "--pass-at-k" in args[:-1] else None
    return EvalOptions(harness=spec.harness, pass_at_k=int(k) if k else None)


def spec_units(spec, ckpts: list[tuple[str, str | None]], out: str, *, pattern: str | None = None,
               jobs: bool = False) -> list[tuple[str, str, list]]:
    """(checkpoint, results folder relative to out, [jobs.Unit]) for each checkpoint: named
    (--jobs' output_name) or, with None, placed as --watch places it (below the pattern)."""
    from rlvr.eval import jobs as sweep

    names = (spec.job_benchmarks or spec.benchmarks) if jobs else spec.benchmarks
    tasks = [sweep.Task(b) for b in names] if spec.harness == "olmes" else sweep.sweep_tasks(names, spec.harness)
    opts = spec_opts(spec)
    rows = []
    for c, name in ckpts:
        rel = name or sweep.checkpoint_id(c, pattern)
        rows.append((c, rel, [sweep.Unit(c, sweep.task_dir(os.path.join(out, rel), t, opts), t) for t in tasks]))
    return rows


def report(expected: list[tuple[str, str, list]], opts, *, where: str, uri: str | None,
           gone: set[str] = frozenset(), log: Callable[[str], None] = print) -> list[dict]:
    """Log, per checkpoint, the tasks evaluated and where their results are, and one line per
    (checkpoint, task) not evaluated, with why; write REPORT in `where`. expected: (checkpoint
    label, results folder relative to `where`, [jobs.Unit]); gone: checkpoints deleted before
    the end. Returns the rows not evaluated."""
    from rlvr.eval import jobs as sweep

    rows, missing = [], []
    for label, rel, units in expected:
        done = [u for u in units if sweep.unit_done(u, opts)]
        loc = os.path.join(where, rel) + (f" ({uri.rstrip('/')}/{rel}/)" if uri else "")
        if done:
            log(f"evaluated {label}: {' '.join(str(u.task) for u in done)} -> {loc}")
        for u in units:
            ok = u in done
            row = {"checkpoint": label, "task": str(u.task), "evaluated": ok, "results": u.out}
            if not ok:
                why = ("deleted before it was evaluated" if u.checkpoint in gone else
                       "its evaluation failed: see " + os.path.join(u.out, sweep.LOG)
                       if os.path.exists(os.path.join(u.out, sweep.LOG)) else "never evaluated")
                row["why"] = why
                missing.append(row)
                log(f"NOT evaluated: {label} on {u.task}: {why}")
            rows.append(row)
    os.makedirs(where, exist_ok=True)
    with open(os.path.join(where, REPORT), "w", encoding="utf-8") as fh:
        json.dump({"results": uri, "units": rows}, fh, indent=1)
    n = len({r["checkpoint"] for r in rows})
    log(f"{n} checkpoint(s), {len(rows) - len(missing)} of {len(rows)} evaluation(s) done; results in {where}"
        + (f" and {uri}" if uri else "") + (f"; {len(missing)} NOT evaluated (listed above)" if missing else ""))
    return missing
