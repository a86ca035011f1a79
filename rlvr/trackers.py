"""Experiment trackers (TensorBoard, Weights & Biases, MLflow) fed from rlvr-train's trace writer.

    trackers = Trackers(["tensorboard", "wandb"], run_dir, resume=False, start_step=0)
    trackers.open(config_dict, manifest_dict)       # the run's parameters
    trackers.log({"step": 1, "reward/mean": 0.4, ...})   # every line of traces/trace.jsonl
    trackers.close("completed")

traces/trace.jsonl stays the source of truth; a tracker mirrors it: every numeric field of
every line under the same name, the line's `step` as the x axis, the resolved config and
run.json as the run's parameters, the run folder's name as the run's name.

- tensorboard: event files in RUN_DIR/tensorboard/ (torch.utils.tensorboard, which needs the
  `tensorboard` package); the config and run.json as text.
- wandb: wandb.init with the project from WANDB_PROJECT (default "rlvr"), its other variables
  honoured as wandb reads them (WANDB_MODE=offline, WANDB_ENTITY, WANDB_NAME and WANDB_RUN_ID
  when set, WANDB_DIR: default the run folder). Every metric is plotted against `step` (wandb's own step counter only counts calls),
  so a validation line logged after later steps still lands at its own step.
- mlflow: a run in the experiment MLFLOW_EXPERIMENT_NAME (default "rlvr") of the store at
  MLFLOW_TRACKING_URI, by default the local folder `mlruns/` beside the run folder (results/mlruns:
  `mlflow ui --backend-store-uri results/mlruns`); MLFLOW_RUN_ID, when set, names a run made
  beforehand. The config is flattened into parameters
  (`rollout.n`), run.json under `run.`; both files are also logged as artifacts. MLflow allows
  only letters, digits and `_-. :/` in metric names: any other character becomes `_`
  (`val/toy/pass@4` -> `val/toy/pass_4`).

The libraries are optional (`pip install rlvr[tensorboard]`, `rlvr[wandb]`, `rlvr[mlflow]`) and
imported only when asked for. The trackers run on a thread of their own, so a slow or
unreachable server never holds up a training step; a tracker that is missing or fails is
dropped with one warning line and training goes on.

Resume: the tracker runs' ids are kept in RUN_DIR/trackers.json. `rlvr-train --resume`
continues the same wandb run (resume="allow") and the same MLflow run, and TensorBoard hides
the events of the steps after the checkpoint (purge_step); wandb and MLflow cannot delete the
points of those lost steps, so they show the old and the new values there.
"""

from __future__ import annotations

import os
import queue
import re
import secrets
import threading
import time
import urllib.parse
from collections.abc import Callable

from rlvr.records import loads, write_json

TRACKERS = ("tensorboard", "wandb", "mlflow")
STATE_FILE = "trackers.json"
INSTALL = {"tensorboard": "rlvr[tensorboard]", "wandb": "rlvr[wandb]", "mlflow": "rlvr[mlflow]"}


def check_names(names) -> list[str]:
    """The tracker names, checked (ValueError names the unknown one); duplicates dropped."""
    out = []
    for n in names:
        if n not in TRACKERS:
            raise ValueError(f"unknown tracker {n!r} (known: {', '.join(TRACKERS)})")
        if n not in out:
            out.append(n)
    return out


def numeric(metrics: dict) -> dict[str, float]:
    """The fields a tracker plots: numbers (bools as 0/1), never the step itself."""
    out = {}
    for k, v in metrics.items():
        if k == "step" or isinstance(v, str) or v is None:
            continue
        if isinstance(v, bool):
            v = float(v)
        if isinstance(v, (int, float)):
            out[k] = float(v)
    return out


def flatten(d, prefix: str = "") -> dict[str, str]:
    """{"rollout": {"n": 8}} -> {"rollout.n": "8"}; lists and scalars as their text."""
    out: dict[str, str] = {}
    if isinstance(d, dict):
        for k, v in d.items():
            key = f"{prefix}.{k}" if prefix else str(k)
            if isinstance(v, dict) and v:
                out.update(flatten(v, key))
            else:
                out[key] = "null" if v is None else str(v)
    return out


_MLFLOW_BAD = re.compile(r"[^A-Za-z0-9_\-. :/]")


def mlflow_name(name: str, file_store: bool = False) -> str:
    """A trace metric's name as MLflow takes it: characters MLflow refuses become '_'; in a
    local folder store, where each metric is a file at its name's path, '/' becomes '.' too
    (else `kl` and `kl/max` would need `kl` to be a file and a folder at once)."""
    name = _MLFLOW_BAD.sub("_", name)
    return name.replace("/", ".") if file_store else name


class Tracker:
    """One tracker: start (returns what a resume needs), log, close."""

    name = "tracker"

    def start(self, run_dir: str, run_name: str, config: dict, manifest: dict, state: dict | None,
              start_step: int) -> dict:
        raise NotImplementedError

    def log(self, step: int, values: dict[str, float]) -> None:
        raise NotImplementedError

    def close(self, status: str) -> None:
        pass


class TensorBoard(Tracker):
    name = "tensorboard"

    def start(self, run_dir, run_name, config, manifest, state, start_step):
        from torch.utils.tensorboard import SummaryWriter  # needs the tensorboard package

        import yaml

        # purge_step: on resume, events of the steps after the checkpoint are hidden
        self.w = SummaryWriter(log_dir=os.path.join(run_dir, "tensorboard"),
                               purge_step=start_step + 1 if start_step else None)
        if not start_step:
            for tag, obj in (("config", config), ("run", manifest)):
                text = yaml.safe_dump(obj, sort_keys=False, default_flow_style=False)
                self.w.add_text(tag, "    " + text.replace("\n", "\n    "), 0)  # a code block in markdown
        return {"log_dir": os.path.join(run_dir, "tensorboard")}

    def log(self, step, values):
        for k, v in values.items():
            self.w.add_scalar(k, v, step)
        self.w.flush()

    def close(self, status):
        self.w.close()


class WandB(Tracker):
    name = "wandb"

    def start(self, run_dir, run_name, config, manifest, state, start_step):
        import wandb

        # wandb ids: [a-z0-9]; WANDB_RUN_ID and WANDB_NAME, when set, win as wandb documents them
        run_id = (state or {}).get("id") or os.environ.get("WANDB_RUN_ID") or secrets.token_hex(4)
        kw = {}
        if not os.environ.get("WANDB_DIR"):
            kw["dir"] = run_dir
        self.run = wandb.init(project=os.environ.get("WANDB_PROJECT") or "rlvr",
                              name=os.environ.get("WANDB_NAME") or run_name, id=run_id,
                              resume="allow", config={**config, "run": manifest},
                              settings=wandb.Settings(console="off"), reinit="create_new", **kw)
        self.run.define_metric("step")
        self.run.define_metric("*", step_metric="step")
        return {"id": run_id, "project": self.run.project}

    def log(self, step, values):
        self.run.log({"step": step, **values})

    def close(self, status):
        self.run.finish(exit_code=0 if status == "completed" else 1)


class MLflow(Tracker):
    name = "mlflow"
    BATCH = 1000

    @staticmethod
    def tracking_uri(run_dir: str) -> str:
        uri = os.environ.get("MLFLOW_TRACKING_URI", "").strip()
        if not uri:
            uri = "file:" + os.path.join(os.path.dirname(os.path.abspath(run_dir)), "mlruns")
        return uri

    @staticmethod
    def is_file_store(uri: str) -> bool:
        """A local folder (file:..., a path); not a server, a database or Databricks ("databricks",
        "databricks-uc", "databricks://PROFILE"), which MLflow names without "://"."""
        if uri.split(":", 1)[0].split("://", 1)[0] in ("databricks", "databricks-uc", "uc"):
            return False
        scheme = urllib.parse.urlparse(uri).scheme
        return scheme in ("", "file")

    def start(self, run_dir, run_name, config, manifest, state, start_step):
        uri = self.tracking_uri(run_dir)
        self.file_store = self.is_file_store(uri)
        if self.file_store:
            # a local folder: MLflow 3 keeps its file store but asks to be told so
            os.environ.setdefault("MLFLOW_ALLOW_FILE_STORE", "true")
        from mlflow.entities import Param
        from mlflow.tracking import MlflowClient

        self.c = MlflowClient(tracking_uri=uri)
        if state and state.get("run_id") and state.get("tracking_uri") == uri:
            self.run_id = state["run_id"]
            self.c.update_run(self.run_id, status="RUNNING")
            return dict(state)
        if os.environ.get("MLFLOW_RUN_ID"):   # a run made beforehand (as mlflow.start_run honours it)
            self.run_id = os.environ["MLFLOW_RUN_ID"]
            exp_id = self.c.get_run(self.run_id).info.experiment_id
            self.c.update_run(self.run_id, status="RUNNING")
        else:
            name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or "rlvr"
            exp = self.c.get_experiment_by_name(name)
            exp_id = exp.experiment_id if exp is not None else self.c.create_experiment(name)
            self.run_id = self.c.create_run(exp_id, run_name=run_name).info.run_id
        params = {**flatten(config), **flatten(manifest, "run")}
        items = [Param(k[:250], v[:6000]) for k, v in params.items()]
        for i in range(0, len(items), 100):
            self.c.log_batch(self.run_id, params=items[i:i + 100])
        for f in ("config.yaml", "run.json"):
            p = os.path.join(run_dir, f)
            if os.path.exists(p):
                self.c.log_artifact(self.run_id, p)
        return {"run_id": self.run_id, "experiment_id": exp_id, "tracking_uri": uri}

    def log(self, step, values):
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        items = [Metric(mlflow_name(k, self.file_store), v, now, step) for k, v in values.items()]
        for i in range(0, len(items), self.BATCH):
            self.c.log_batch(self.run_id, metrics=items[i:i + self.BATCH])

    def close(self, status):
        self.c.set_terminated(self.run_id, status={"completed": "FINISHED", "interrupted": "KILLED"}.get(
            status, "FAILED"))


CLASSES: dict[str, type[Tracker]] = {"tensorboard": TensorBoard, "wandb": WandB, "mlflow": MLflow}


class Trackers:
    """The trackers of one run, fed on a thread of their own (see the module docstring)."""

    def __init__(self, names, run_dir: str, resume: bool = False, start_step: int = 0,
                 warn: Callable[[str], None] | None = None):
        from rlvr.messages import warn as default_warn

        self.names = check_names(names)
        self.run_dir = os.path.abspath(run_dir)
        self.resume = resume
        self.start_step = start_step
        self.warn = warn or default_warn
        self.live: dict[str, Tracker] = {}
        self.q: queue.Queue = queue.Queue()
        self.thread: threading.Thread | None = None

    def __bool__(self) -> bool:
        return bool(self.names)

    def _state_path(self) -> str:
        return os.path.join(self.run_dir, STATE_FILE)

    def _saved(self) -> dict:
        try:
            return loads(open(self._state_path(), "rb").read()) if self.resume else {}
        except (OSError, ValueError):
            return {}

    def _failed(self, name: str, what: str, ex: BaseException) -> None:
        self.live.pop(name, None)
        if isinstance(ex, ImportError):
            why = f"not installed (pip install '{INSTALL[name]}')"
        else:
            why = f"{type(ex).__name__}: {str(ex).strip().splitlines()[0][:300] if str(ex).strip() else ''}"
        self.warn(f"tracker {name} {what} failed, training goes on without it: {why}")

    def open(self, config: dict, manifest: dict) -> "Trackers":
        if not self.names:
            return self
        self.thread = threading.Thread(target=self._work, args=(config, manifest), name="rlvr-trackers",
                                       daemon=True)
        self.thread.start()
        return self

    def log(self, metrics: dict) -> None:
        """Mirror one trace line (called by the trace writer; returns at once)."""
        if self.thread is not None and isinstance(metrics.get("step"), int):
            self.q.put(("log", metrics))

    __call__ = log

    def close(self, status: str = "completed", timeout: float = 120.0) -> None:
        """Send what is queued (waiting at most `timeout` seconds) and end the tracker runs."""
        if self.thread is None:
            return
        self.q.put(("close", status))
        self.thread.join(timeout)
        if self.thread.is_alive():
            self.warn(f"trackers still busy after {timeout:.0f}s at the end of the run: left behind")
        self.thread = None

    def _work(self, config: dict, manifest: dict) -> None:
        saved = self._saved()
        state = dict(saved)
        name = os.path.basename(self.run_dir)
        for n in self.names:
            t = CLASSES[n]()
            try:
                state[n] = t.start(self.run_dir, name, config, manifest, saved.get(n), self.start_step)
                self.live[n] = t
            except BaseException as ex:  # noqa: BLE001 - a tracker never stops training
                self._failed(n, "start", ex)
        if self.live:
            try:
                write_json(self._state_path(), state)
            except OSError:
                pass
        while True:
            kind, item = self.q.get()
            if kind == "close":
                for n, t in list(self.live.items()):
                    try:
                        t.close(item)
                    except BaseException as ex:  # noqa: BLE001
                        self._failed(n, "close", ex)
                return
            values = numeric(item)
            for n, t in list(self.live.items()):
                try:
                    t.log(item["step"], values)
                except BaseException as ex:  # noqa: BLE001
                    self._failed(n, "logging", ex)


def read_yaml(path: str) -> dict:
    import yaml

    try:
        with open(path) as fh:
            d = yaml.safe_load(fh)
        return d if isinstance(d, dict) else {}
    except (OSError, yaml.YAMLError):
        return {}


def read_json(path: str) -> dict:
    try:
        d = loads(open(path, "rb").read())
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def for_run(names, run_dir: str, resume: bool, start_step: int, warn=None) -> Trackers:
    """The trackers of a run folder, opened with its config.yaml and run.json as parameters."""
    t = Trackers(names, run_dir, resume=resume, start_step=start_step, warn=warn)
    if t:
        t.open(read_yaml(os.path.join(run_dir, "config.yaml")), read_json(os.path.join(run_dir, "run.json")))
    return t
