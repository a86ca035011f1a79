"""Training modes: what runs beside (or instead of) the RL step, behind one interface.

A mode is a class with the hooks below, registered in MODES by its module path. The driver
(rlvr.train.loop) calls every enabled mode's hook at its point of the run and never names a
mode; adding one is its own module plus one line in MODES. Each mode validates its own config
section (`check`), called by `check_config` for the whole config.

    at start-up  open (before Ray starts: read and check its data) -> connect (Ray is up, before
                 any actor) -> start (the engines and the trainer are up) -> begin (before the
                 first step: the traces are open)
    each step    extend (add to the trainer's batch: rlvr.train.extras.ExtraBatch under
                 batch.extras, or replace the RL batch) -> metrics (add to the step's line)
                 -> sample (add to a sample record) -> wants_sync (a version the engines must
                 get) -> after_step (write its own lines)
    at the end   end (the last step is done) -> close (however the run ended)

A mode that trains alone (`alone(cfg)`: the run starts no engines and has no RL loss) runs its
own steps (`steps`) on the same trainer, records and checkpoints.
"""

from __future__ import annotations

import importlib

# name -> "module:class", in the order their hooks are called
MODES = {
    "sft": "rlvr.train.sft:SftMode",
    "distill": "rlvr.train.distill:DistillMode",
    "validation": "rlvr.train.validation_mode:ValidationMode",
    "judge_engine": "rlvr.train.judge_engines:JudgeEngineMode",
}


class Mode:
    """The interface (every hook a no-op): a mode overrides those it needs."""

    @staticmethod
    def enabled(cfg) -> bool:
        """Whether the run has this mode (its config section asks for it)."""
        return False

    @staticmethod
    def check(cfg) -> list[str]:
        """Validate the mode's own config section: ConfigError on an error; returns warnings."""
        return []

    @staticmethod
    def alone(cfg) -> bool:
        """Whether the mode trains alone: no engines, no RL data, `steps` instead of RL's."""
        return False

    @staticmethod
    def keeps_question(cfg) -> bool:
        """Whether the mode needs the prompt records' task text (rlvr-data drops it otherwise)."""
        return False

    @staticmethod
    def engine_options(cfg, opts: dict) -> None:
        """What the mode needs of the rollout engines' options (called whether or not enabled)."""

    def __init__(self, run):
        """open: before Ray starts (run.tokenizer, run.stream, run.model are known)."""

    def connect(self, run) -> None:
        """Ray is up, before any actor exists."""

    def start(self, run) -> None:
        """The engines and the trainer are up."""

    def begin(self, run, traces) -> None:
        """Before the first step."""

    def extend(self, run, assembled, groups: list, step: int) -> None:
        """Add to the trainer's batch (assembled.batch) for the step's groups."""

    def metrics(self, metrics: dict) -> None:
        """Add to the step's metrics line."""

    def sample(self, group, rec: dict) -> None:
        """Add to a sample record of the step (traces/samples.jsonl)."""

    def wants_sync(self, version: int) -> bool:
        """Whether the engines must get `version` whatever sync.every_steps says."""
        return False

    def after_step(self, run, traces, metrics: dict) -> None:
        """The step's line is written: write the mode's own."""

    def end(self, run, traces, last: dict) -> None:
        """The last step is done."""

    def outstanding(self) -> list:
        """(ref, engine actor) of the mode's calls still queued on the rollout engines."""
        return []

    def close(self) -> None:
        """The run ended (completed or not): stop what the mode started."""

    def steps(self, run, recorder, start_step: int) -> dict:
        """A mode that trains alone: its steps; returns the last step's metrics."""
        raise NotImplementedError


def classes() -> list[type]:
    out = []
    for path in MODES.values():
        module, name = path.split(":")
        out.append(getattr(importlib.import_module(module), name))
    return out


def check(cfg) -> list[str]:
    """Every mode's own section (ConfigError on an error); returns their warnings."""
    return [w for cls in classes() for w in cls.check(cfg)]


def check_config(cfg) -> list[str]:
    """The whole config: rlvr.train.config.check's sections, then every mode's."""
    from rlvr.train.config import check as check_sections

    return check_sections(cfg) + check(cfg)


def engine_options(cfg, opts: dict) -> None:
    for cls in classes():
        cls.engine_options(cfg, opts)


def alone(cfg):
    """The mode class that trains alone in this run, or None (RL steps)."""
    return next((cls for cls in classes() if cls.enabled(cfg) and cls.alone(cfg)), None)


def keeps_question(cfg) -> bool:
    return any(cls.enabled(cfg) and cls.keeps_question(cfg) for cls in classes())


class Modes:
    """The run's enabled modes, each hook called on all of them in MODES order."""

    def __init__(self, run):
        self.all: list[Mode] = []
        for cls in classes():
            if cls.enabled(run.cfg):
                self.all.append(cls(run))   # appended as made: a failure closes those already open

    def __iter__(self):
        return iter(self.all)

    def connect(self, run) -> None:
        for m in self.all:
            m.connect(run)

    def start(self, run) -> None:
        for m in self.all:
            m.start(run)

    def begin(self, run, traces) -> None:
        for m in self.all:
            m.begin(run, traces)

    def extend(self, run, assembled, groups: list, step: int) -> None:
        for m in self.all:
            m.extend(run, assembled, groups, step)

    def metrics(self, metrics: dict) -> None:
        for m in self.all:
            m.metrics(metrics)

    def sample(self, group, rec: dict) -> None:
        for m in self.all:
            m.sample(group, rec)

    def wants_sync(self, version: int) -> bool:
        return any([m.wants_sync(version) for m in self.all])

    def after_step(self, run, traces, metrics: dict) -> None:
        for m in self.all:
            m.after_step(run, traces, metrics)

    def end(self, run, traces, last: dict) -> None:
        for m in self.all:
            m.end(run, traces, last)

    def outstanding(self) -> list:
        return [item for m in self.all for item in m.outstanding()]

    def close(self) -> None:
        for m in self.all:
            m.close()
