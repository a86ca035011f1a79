"""Inside a SageMaker training job (or `rlvr-submit --local`): SageMaker's environment -> rlvr-train.

    python -m rlvr.cloud.entrypoint [train]

What it reads (SageMaker's training-toolkit variables where set, else SageMaker's files):
- the job name: TRAINING_JOB_NAME (set by SageMaker), else SM_TRAINING_ENV's "job_name";
- hyperparameters: SM_HPS (JSON), else /opt/ml/input/config/hyperparameters.json. rlvr_config
  names the config file in the `config` channel; rlvr_eval_config, rlvr_train_gpus,
  rlvr_eval_gpus and rlvr_sync_interval are read here; every other one is an rlvr-train
  `--set KEY=VALUE` override;
- channels: SM_CHANNEL_<NAME>, else /opt/ml/input/data/<name> for the channels in
  inputdataconfig.json. `config` holds the configs; `data` becomes RLVR_DATA_DIR; `model`
  becomes model.path;
- SM_MODEL_DIR (default /opt/ml/model): the run folder is $SM_MODEL_DIR/<config_stem>_<YYYYMMDD-HHMMSS>/,
  which SageMaker archives as model.tar.gz when the job ends;
- RLVR_JOB_S3 (s3://BUCKET/PREFIX/checkpoints/, set by rlvr-submit): checkpoints and traces go
  to RLVR_JOB_S3/<job>/ while the job runs (see rlvr.cloud.layout).

RLVR_OPT_ML replaces /opt/ml in every default path (a SageMaker layout in another folder, as
the tests use). With rlvr_eval_config, `rlvr-eval --watch` runs beside training on
rlvr_eval_gpus (training on rlvr_train_gpus) and finishes the last checkpoints after it; then
the log says which checkpoints were evaluated on which tasks and where, and lists each one
that was not (rlvr.cloud.evaljob.report). An eval-only job (rlvr-submit --eval: rlvr_eval_jobs
and rlvr_eval_results instead of rlvr_config) runs `rlvr-eval --jobs` over the jobs file of the
config channel, its results kept at rlvr_eval_results (rlvr.cloud.evaljob).
On failure the reason is written to /opt/ml/output/failure, where SageMaker shows it.

Several instances (SM_HOSTS / resourceconfig.json's hosts): the first host starts a Ray head,
waits until every instance has joined, and runs rlvr-train on the cluster (--ray-address);
the others wait for the head's port, run `ray start --address=HEAD` (again when it gave up
on its startup) and end when the head stops its cluster (its port closes). rlvr-train keeps
its trainer on the first host, which holds the run folder, and each host loads an s3:// model
into its own cache.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import signal
import subprocess
import sys
from dataclasses import dataclass, field

from rlvr.cloud.sagemaker import (CONFIG_CHANNEL, ENV_JOB_S3, HP_CONFIG, HP_EVAL_CONFIG, HP_EVAL_GPUS, HP_EVAL_JOBS,
                                  HP_EVAL_RESULTS, HP_SYNC_INTERVAL, HP_TRAIN_GPUS, parse_gpus)
from rlvr.errors import Failure, UsageError

PROG = "rlvr-entrypoint"
DEFAULT_SYNC_INTERVAL = 10.0
RAY_PORT = 6379
JOIN_TIMEOUT_S = 900.0  # how long the head waits for the other instances to join its Ray cluster
HEAD_GONE_PROBES = 3  # failed probes of the head's port in a row (5 s apart) that end a worker instance
WATCHER_STOP_S = 600.0  # how long an evaluation watcher may take to stop (it finishes the unit it is on)


def log(msg: str) -> None:
    print(f"{PROG}: {msg}", file=sys.stderr, flush=True)


@dataclass
class JobEnv:
    """SageMaker's view of the job, read from the environment and /opt/ml."""

    job: str
    model_dir: str
    output_dir: str
    hyperparameters: dict[str, str]
    channels: dict[str, str] = field(default_factory=dict)
    current_host: str = "algo-1"
    hosts: list[str] = field(default_factory=lambda: ["algo-1"])

    @classmethod
    def read(cls, environ: dict[str, str] | None = None) -> "JobEnv":
        env = dict(os.environ if environ is None else environ)
        base = env.get("RLVR_OPT_ML", "/opt/ml")
        training_env = _json(env.get("SM_TRAINING_ENV"), "SM_TRAINING_ENV") or {}
        config_dir = env.get("SM_INPUT_CONFIG_DIR", os.path.join(base, "input", "config"))
        if "SM_HPS" in env:
            hps = _json(env["SM_HPS"], "SM_HPS")
        else:
            hps = _json_file(os.path.join(config_dir, "hyperparameters.json")) or training_env.get("hyperparameters") or {}
        if not isinstance(hps, dict):
            raise UsageError("the job's hyperparameters are not a JSON object")
        # SageMaker passes strings; the toolkit's SM_HPS parses them into JSON values
        hps = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in hps.items()}
        channels = {k[len("SM_CHANNEL_"):].lower(): v for k, v in env.items() if k.startswith("SM_CHANNEL_")}
        data_dir = env.get("SM_INPUT_DIR", os.path.join(base, "input"))
        for name in (_json_file(os.path.join(config_dir, "inputdataconfig.json")) or {}):
            channels.setdefault(name.lower(), os.path.join(data_dir, "data", name))
        job = env.get("TRAINING_JOB_NAME") or training_env.get("job_name") or ""
        if not job:
            raise UsageError("no job name: TRAINING_JOB_NAME and SM_TRAINING_ENV's job_name are unset "
                             "(not inside a SageMaker job?)")
        res = _json_file(os.path.join(config_dir, "resourceconfig.json")) or {}
        hosts = _json(env.get("SM_HOSTS"), "SM_HOSTS") or training_env.get("hosts") or res.get("hosts") or ["algo-1"]
        current = env.get("SM_CURRENT_HOST") or training_env.get("current_host") or res.get("current_host") or hosts[0]
        if current not in hosts:
            raise UsageError(f"this host {current!r} is not among the job's hosts {hosts}")
        return cls(job=job, model_dir=env.get("SM_MODEL_DIR", os.path.join(base, "model")),
                   output_dir=env.get("SM_OUTPUT_DIR", os.path.join(base, "output")),
                   hyperparameters=hps, channels=channels, current_host=current, hosts=list(hosts))


def _json(text: str | None, what: str):
    if not text:
        return None
    try:
        return json.loads(text)
    except ValueError:
        raise UsageError(f"{what} is not valid JSON") from None


def _json_file(path: str):
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as fh:
            return json.load(fh)
    except ValueError:
        raise UsageError(f"{path}: not valid JSON") from None


@dataclass
class Plan:
    """The processes the job runs, derived from JobEnv (a pure function: tested without a job)."""

    config: str
    run_dir: str
    train_cmd: list[str]
    train_env: dict[str, str]
    eval_cmd: list[str] | None
    eval_env: dict[str, str] | None
    jobs_uri: str | None
    sync_interval: float
    ray_head: str | None = None       # several instances: head:port of the Ray cluster over the job's hosts
    ray_start: list[str] | None = None
    worker: bool = False              # this host only lends its GPUs to the head's cluster
    nodes: int = 1
    eval_spec: object = None          # rlvr.cloud.evalspec.EvalSpec, with --eval-config
    eval_pattern: str | None = None   # the checkpoints the watcher evaluates (train + eval)
    eval_out: str | None = None       # where the evaluations go
    eval_jobs: str | None = None      # an eval-only job: the rlvr-eval --jobs file (no training)
    eval_results: str | None = None   # an eval-only job: the s3:// prefix of the results


def _eval_only_plan(job: JobEnv, env: dict[str, str], hps: dict[str, str]) -> Plan:
    """An eval-only job (rlvr-submit --eval): rlvr-eval --jobs over the jobs file of the config
    channel, into $SM_MODEL_DIR/evals, results kept at rlvr_eval_results."""
    from rlvr.cloud.evalspec import load_eval_config

    if CONFIG_CHANNEL not in job.channels:
        raise UsageError(f"no '{CONFIG_CHANNEL}' input channel (SM_CHANNEL_CONFIG)")
    jobs = _in_channel(job.channels[CONFIG_CHANNEL], hps.pop(HP_EVAL_JOBS))
    name = hps.pop(HP_EVAL_CONFIG, None)
    if not name:
        raise UsageError(f"hyperparameter {HP_EVAL_CONFIG} (the eval config's file name) is missing")
    spec = load_eval_config(_in_channel(job.channels[CONFIG_CHANNEL], name))
    gpus = parse_gpus(hps.pop(HP_EVAL_GPUS, None), HP_EVAL_GPUS)
    try:
        interval = float(hps.pop(HP_SYNC_INTERVAL, DEFAULT_SYNC_INTERVAL))
    except ValueError:
        raise UsageError(f"hyperparameter {HP_SYNC_INTERVAL}: not a number") from None
    out = os.path.join(job.model_dir, "evals")
    child = {k: v for k, v in env.items() if k != "RLVR_RUN_DIR"}
    if "data" in job.channels:
        child["RLVR_DATA_DIR"] = job.channels["data"]
    return Plan(config="", run_dir=job.model_dir, train_cmd=[], train_env={}, eval_cmd=spec.jobs_command(jobs, out, gpus),
                eval_env=child, jobs_uri=env.get(ENV_JOB_S3) or None, sync_interval=interval, eval_spec=spec,
                eval_out=out, eval_jobs=jobs, eval_results=hps.pop(HP_EVAL_RESULTS, None) or None)


def plan(job: JobEnv, environ: dict[str, str] | None = None, now: _dt.datetime | None = None) -> Plan:
    env = dict(os.environ if environ is None else environ)
    hps = dict(job.hyperparameters)
    if HP_EVAL_JOBS in hps:
        return _eval_only_plan(job, env, hps)
    name = hps.pop(HP_CONFIG, None)
    if not name:
        raise UsageError(f"hyperparameter {HP_CONFIG} (the config's file name) is missing")
    if CONFIG_CHANNEL not in job.channels:
        raise UsageError(f"no '{CONFIG_CHANNEL}' input channel (SM_CHANNEL_CONFIG)")
    config = _in_channel(job.channels[CONFIG_CHANNEL], name)
    eval_name = hps.pop(HP_EVAL_CONFIG, None)
    train_gpus = parse_gpus(hps.pop(HP_TRAIN_GPUS, None), HP_TRAIN_GPUS)
    eval_gpus = parse_gpus(hps.pop(HP_EVAL_GPUS, None), HP_EVAL_GPUS)
    try:
        interval = float(hps.pop(HP_SYNC_INTERVAL, DEFAULT_SYNC_INTERVAL))
    except ValueError:
        raise UsageError(f"hyperparameter {HP_SYNC_INTERVAL}: not a number") from None
    sets = [f"{k}={v}" for k, v in sorted(hps.items()) if not k.startswith("sagemaker_")]
    if "model" in job.channels:
        sets.append(f"model.path={job.channels['model']}")
    stem = os.path.splitext(os.path.basename(name))[0]
    ts = (now or _dt.datetime.now(_dt.timezone.utc)).strftime("%Y%m%d-%H%M%S")
    run_dir = os.path.join(job.model_dir, f"{stem}_{ts}")
    child = {k: v for k, v in env.items() if k != "RLVR_RUN_DIR"}
    if "data" in job.channels:
        child["RLVR_DATA_DIR"] = job.channels["data"]
    train_env = dict(child)
    if train_gpus is not None:
        train_env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, train_gpus))
    train_cmd = [sys.executable, "-m", "rlvr.commands.train", config, "--run-dir", run_dir]
    for s in sets:
        train_cmd += ["--set", s]
    head = ray_start = None
    if len(job.hosts) > 1:
        # one Ray cluster over the instances: the first host is the head and runs rlvr-train
        # (and the uploads); the others join it and lend their GPUs until it stops.
        port = env.get("RLVR_RAY_PORT") or str(RAY_PORT)
        if not port.isdigit():
            raise UsageError(f"RLVR_RAY_PORT={port!r}: expected a port number")
        head = f"{job.hosts[0]}:{port}"
        if job.current_host == job.hosts[0]:
            ray_start = ["ray", "start", "--head", f"--port={port}", "--disable-usage-stats"]
            train_cmd += ["--ray-address", head]
        else:
            ray_start = ["ray", "start", f"--address={head}", "--disable-usage-stats"]
    eval_cmd = eval_env = spec = pattern = out = None
    if eval_name:
        from rlvr.cloud.evalspec import load_eval_config

        spec = load_eval_config(_in_channel(job.channels[CONFIG_CHANNEL], eval_name))
        pattern, out = os.path.join(run_dir, "checkpoints", "step_*"), os.path.join(run_dir, "evals")
        eval_cmd = spec.command(pattern, out, eval_gpus)
        eval_env = dict(child)
    return Plan(config=config, run_dir=run_dir, train_cmd=train_cmd, train_env=train_env, eval_cmd=eval_cmd,
                eval_env=eval_env, jobs_uri=env.get(ENV_JOB_S3) or None, sync_interval=interval, ray_head=head,
                ray_start=ray_start, worker=bool(head) and job.current_host != job.hosts[0], nodes=len(job.hosts),
                eval_spec=spec, eval_pattern=pattern, eval_out=out)


def _in_channel(folder: str, name: str) -> str:
    if os.path.isabs(name) or ".." in name.split("/"):
        raise UsageError(f"{name!r}: a config name must be a file name inside the config channel")
    path = os.path.join(folder, name)
    if not os.path.isfile(path):
        raise UsageError(f"{name}: not in the config channel ({folder})")
    return path


def run(p: Plan, job: JobEnv) -> int:
    """Start training (and the eval watcher), keep S3 current, and return training's exit status."""
    if p.eval_jobs:
        return run_eval_only(p, job)
    if p.ray_start:
        _ray_auth(p)
    if p.worker:
        return _worker(p)
    if p.ray_start:
        try:
            _start_head(p)
        except BaseException:
            subprocess.run(["ray", "stop"])  # the instances that joined end with it
            raise
    os.makedirs(p.run_dir, exist_ok=True)
    sync = None
    if p.jobs_uri:
        from rlvr.cloud.layout import JobLayout, JobSync

        layout = JobLayout(p.jobs_uri, job.job, os.path.basename(p.run_dir))
        sync = JobSync(p.run_dir, layout, p.sync_interval, log=log).start()
        log(f"job {job.job}: run folder {p.run_dir}, uploads to {layout.root} every {p.sync_interval:g} s")
    else:
        log(f"job {job.job}: run folder {p.run_dir} ({ENV_JOB_S3} unset: no live uploads)")
    procs: list[subprocess.Popen] = []

    def forward(signum, frame):  # SageMaker stops a job with SIGTERM: pass it on, then wrap up
        for q in procs:
            if q.poll() is None:
                q.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    rc = 1
    try:
        log("$ " + " ".join(p.train_cmd))
        train = subprocess.Popen(p.train_cmd, env=p.train_env)
        procs.append(train)
        watcher = None
        if p.eval_cmd:
            log("$ " + " ".join(p.eval_cmd))
            watcher = subprocess.Popen(p.eval_cmd, env=p.eval_env)
            procs.append(watcher)
        seen = _Seen(p.eval_pattern, p.sync_interval).start() if watcher is not None else None
        rc = train.wait()
        if watcher is not None:
            # the watcher may be mid-way: stop it, then one pass that evaluates what is left.
            # SIGTERM, not SIGINT: a process started with SIGINT ignored (a background job, some
            # init systems) passes that on to its children, and rlvr's commands handle SIGTERM.
            watcher.send_signal(signal.SIGTERM)
            try:
                watcher.wait(timeout=WATCHER_STOP_S)
            except subprocess.TimeoutExpired:
                log(f"warning: the evaluation watcher did not stop in {WATCHER_STOP_S:g} s; killed")
                watcher.kill()
                watcher.wait()
            if rc == 0:
                last = subprocess.run([*p.eval_cmd, "--once"], env=p.eval_env)
                if last.returncode != 0:
                    log(f"warning: the last evaluation pass exited {last.returncode}")
            try:
                _watch_report(p, seen.stop(), f"{layout.root}evals" if sync is not None else None)
            except Exception as e:  # noqa: BLE001 - the report must not take a finished training down
                log(f"warning: could not report the evaluations ({type(e).__name__}: {e}); see {p.eval_out}")
    finally:
        if p.ray_start:
            subprocess.run(["ray", "stop"])  # its port closes: the other instances leave the cluster
        failed = sync.finish(final=(rc == 0)) if sync is not None else []
    if rc != 0:
        _failure(job, f"rlvr-train exited with status {rc}; see the job's log")
    elif failed:
        why = f"{len(failed)} upload(s) to {p.jobs_uri} failed, e.g. {failed[0][0]}: {failed[0][1]}"
        log(why)
        _failure(job, why)
        rc = 1
    return rc


class _Seen:
    """The checkpoints that appeared while training ran (so that one deleted before the watcher
    reached it is reported, not lost)."""

    def __init__(self, pattern: str, interval: float):
        import threading

        self.pattern, self.interval, self.found = pattern, max(0.5, min(interval, 10.0)), []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="rlvr-checkpoints-seen", daemon=True)

    def poll(self) -> None:
        from rlvr.eval.jobs import find_checkpoints

        try:
            self.found += [c for c in find_checkpoints(self.pattern) if c not in self.found]
        except OSError:   # a checkpoint deleted while it was looked at: the next poll
            pass

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll()

    def start(self) -> "_Seen":
        self._thread.start()
        return self

    def stop(self) -> list[str]:
        self._stop.set()
        self._thread.join()
        self.poll()
        return list(self.found)


def _watch_report(p: Plan, seen: list[str], uri: str | None) -> None:
    """Which checkpoints the watcher evaluated, on which tasks, where the results are, and each
    one it did not (one line each)."""
    from rlvr.cloud.evaljob import report, spec_units

    expected = [(os.path.basename(c), rel, units) for c, rel, units in
                spec_units(p.eval_spec, [(c, None) for c in seen], p.eval_out, pattern=p.eval_pattern)]
    gone = {c for c in seen if not os.path.isdir(c)}
    report(expected, spec_opts_of(p), where=p.eval_out, uri=uri, gone=gone, log=log)


def spec_opts_of(p: Plan):
    from rlvr.cloud.evaljob import spec_opts

    return spec_opts(p.eval_spec)


def run_eval_only(p: Plan, job: JobEnv) -> int:
    """An eval-only job: fetch what earlier jobs finished, run rlvr-eval --jobs with the results
    going up as they come, then report what was evaluated (and what was not)."""
    from rlvr.cloud.evaljob import EvalSync, report, spec_units
    from rlvr.eval.jobs import read_jobs

    os.makedirs(p.eval_out, exist_ok=True)
    sync = None
    if p.eval_results:
        sync = EvalSync(p.eval_out, p.eval_results, p.sync_interval, log=log)
        n = sync.pull_finished()
        log(f"job {job.job}: results in {p.eval_out}, kept at {p.eval_results} "
            f"({n} file(s) of earlier evaluations fetched: finished units are skipped)")
        sync.start()
    else:
        log(f"job {job.job}: results in {p.eval_out} (no {HP_EVAL_RESULTS}: not kept on S3)")
    work = read_jobs(p.eval_jobs)
    rc = 1
    procs: list[subprocess.Popen] = []

    def forward(signum, frame):
        for q in procs:
            if q.poll() is None:
                q.send_signal(signum)

    signal.signal(signal.SIGTERM, forward)
    try:
        log("$ " + " ".join(p.eval_cmd))
        proc = subprocess.Popen(p.eval_cmd, env=p.eval_env)
        procs.append(proc)
        rc = proc.wait()
    finally:
        failed = sync.finish() if sync is not None else []
    expected = spec_units(p.eval_spec, [(j.checkpoint, j.name) for j in work], p.eval_out, jobs=True)
    missing = report(expected, spec_opts_of(p), where=p.eval_out, uri=p.eval_results, log=log)
    if sync is not None:   # the report goes up too
        from rlvr.cloud.evaljob import NOT_UPLOADED, REPORT
        from rlvr.s3 import BackgroundUploader

        last = BackgroundUploader(p.eval_results, root=p.eval_out, exclude=NOT_UPLOADED)
        last.submit(os.path.join(p.eval_out, REPORT))
        failed += last.close(timeout=600)
    if failed:
        why = f"{len(failed)} upload(s) to {p.eval_results} failed, e.g. {failed[0][0]}: {failed[0][1]}"
        log(why)
        _failure(job, why)
        return 1
    if rc != 0 or missing:
        _failure(job, f"rlvr-eval exited with status {rc}; {len(missing)} evaluation(s) not done (see the job's log)")
        return rc or 1
    return 0


def _ray_auth(p: Plan) -> None:
    """Token authentication for the job's Ray cluster (Ray's default mode): every instance has
    the same RAY_AUTH_TOKEN from the job's environment (rlvr-submit generates one for a job of
    several instances); without one the cluster runs without authentication, inside the job's
    network. Set here for `ray start`, this process's ray.init and rlvr-train."""
    mode = os.environ.get("RAY_AUTH_MODE") or ("token" if os.environ.get("RAY_AUTH_TOKEN") else "disabled")
    if mode == "disabled":
        log("no RAY_AUTH_TOKEN in the job's environment: the job's Ray cluster runs without token authentication")
    os.environ["RAY_AUTH_MODE"] = p.train_env["RAY_AUTH_MODE"] = mode


def _head_listening(address: str) -> bool:
    import socket

    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=5):
            return True
    except OSError:  # not resolvable or not listening yet
        return False


def _worker(p: Plan) -> int:
    """Wait until the head's Ray port answers, join its cluster and stay until it stops (then
    the job is over for this host: a node that could not join is reported by the head, which
    counts the nodes). A `ray start` that gives up on its own startup (Ray allows a raylet 30 s
    to register with the head, which a loaded head can miss) is run again while the head is up."""
    import time

    deadline = time.monotonic() + JOIN_TIMEOUT_S
    while not _head_listening(p.ray_head):
        if time.monotonic() > deadline:
            raise Failure(f"the Ray head at {p.ray_head} did not come up in {JOIN_TIMEOUT_S:.0f} s")
        time.sleep(2)
    while True:
        log("$ " + " ".join(p.ray_start))
        rc = subprocess.run(p.ray_start).returncode  # returns once this node runs, or has failed to
        if rc == 0:
            break
        subprocess.run(["ray", "stop", "--force"])  # what the failed start left running
        if not _head_listening(p.ray_head):
            log(f"ray start exited {rc} and the Ray head at {p.ray_head} is gone: this host is done")
            return 0
        if time.monotonic() > deadline:
            raise Failure(f"could not join the Ray cluster at {p.ray_head} in {JOIN_TIMEOUT_S:.0f} s "
                          f"(ray start exited {rc})")
        log(f"ray start exited {rc}: trying again")
        time.sleep(2)
    # The head stops its cluster when training has ended, and its port closes. One probe that
    # fails (a busy head, a name lookup that stalls) is no proof: only HEAD_GONE_PROBES in a row.
    missed = 0
    while missed < HEAD_GONE_PROBES:
        time.sleep(5)
        missed = 0 if _head_listening(p.ray_head) else missed + 1
    subprocess.run(["ray", "stop"])
    log(f"the Ray cluster at {p.ray_head} has stopped: this host is done")
    return 0


def _start_head(p: Plan) -> None:
    """Start the Ray head and wait until every instance has joined."""
    import time

    log("$ " + " ".join(p.ray_start))
    # the head lends Ray only the training GPUs (train_env's CUDA_VISIBLE_DEVICES): with an eval
    # watcher beside training, its GPUs stay out of the cluster
    if subprocess.run(p.ray_start, env=p.train_env).returncode != 0:
        raise Failure("ray start --head failed")
    import ray

    ray.init(address=p.ray_head, logging_level="ERROR", log_to_driver=False)
    try:
        deadline = time.monotonic() + JOIN_TIMEOUT_S
        while (alive := sum(1 for n in ray.nodes() if n.get("Alive"))) < p.nodes:
            if time.monotonic() > deadline:
                raise Failure(f"only {alive} of {p.nodes} instances joined the Ray cluster in {JOIN_TIMEOUT_S:.0f} s")
            time.sleep(2)
        log(f"Ray cluster ready: {alive} nodes")
    finally:
        ray.shutdown()


def _failure(job: JobEnv, reason: str) -> None:
    try:
        os.makedirs(job.output_dir, exist_ok=True)
        with open(os.path.join(job.output_dir, "failure"), "w") as fh:
            fh.write(reason[:1000] + "\n")
    except OSError:
        pass


def main(argv: list[str] | None = None) -> None:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "train":  # SageMaker runs the image as `IMAGE train`
        args = args[1:]
    if args:
        print(f"usage: python -m rlvr.cloud.entrypoint [train]  (unexpected arguments: {' '.join(args)})",
              file=sys.stderr)
        sys.exit(2)
    job = None
    try:
        job = JobEnv.read()
        rc = run(plan(job), job)
    except (UsageError, Failure) as e:
        log(f"error: {e}")
        if job is not None:
            _failure(job, str(e))
        sys.exit(e.exit_code)
    sys.exit(rc)


if __name__ == "__main__":
    main()
