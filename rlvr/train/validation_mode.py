"""Validation inside training as a training mode (rlvr.train.modes): the eval section checked,
validations (rlvr.train.validation) started on the rollout engines between steps, a validated
step's weights synced whatever sync.every_steps says."""

from __future__ import annotations

import time

from rlvr.errors import ConfigError
from rlvr.messages import say
from rlvr.train.config_rollout import tool_settings
from rlvr.train.modes import Mode
from rlvr.train.validation import Validation, clear_after


def check_eval(cfg) -> None:
    """The eval section: known benchmarks, sources of listed ones, sane counts (ConfigError)."""
    from rlvr.eval.runner import known_benchmarks

    e = cfg.eval
    known = known_benchmarks()
    for b in e.benchmarks:
        if b not in known:
            raise ConfigError(f"eval.benchmarks: unknown benchmark {b!r} (known: {', '.join(known)})")
    for b in e.source:
        if b not in e.benchmarks:
            raise ConfigError(f"eval.source: {b!r} is not one of eval.benchmarks")
    if e.every < 0 or (e.limit is not None and e.limit < 1) or (e.n is not None and e.n < 1) \
            or (e.shots is not None and e.shots < 0):
        raise ConfigError("eval.every must be >= 0, eval.limit and eval.n >= 1 (or null), eval.shots >= 0")
    if e.max_tokens is not None and not 0 < e.max_tokens < cfg.rollout.max_model_len:
        raise ConfigError(f"eval.max_tokens {e.max_tokens} must be >= 1 and leave room for a prompt in "
                          f"rollout.max_model_len {cfg.rollout.max_model_len}")


class ValidationMode(Mode):
    """The eval section as a training mode (rlvr.train.modes): validations on the rollout
    engines between steps; a validated step's weights are synced whatever sync.every_steps."""

    @staticmethod
    def enabled(cfg) -> bool:
        return bool(cfg.eval.benchmarks)

    @staticmethod
    def check(cfg) -> list[str]:
        check_eval(cfg)
        return []

    def __init__(self, run):
        self.v: Validation | None = None

    def connect(self, run) -> None:
        """The prompts are loaded (and checked) before any engine starts."""
        cfg = run.cfg
        clear_after(run.run_dir, run.start_step)
        self.v = Validation(cfg.eval, run.run_dir, engine=cfg.rollout.engine, dtype=run.fleet.options()["dtype"],
                            max_model_len=cfg.rollout.max_model_len, verify_jobs=cfg.verify.jobs,
                            total_steps=cfg.train.steps, base_model=run.base.path, log=say,
                            tools=tool_settings(cfg.rollout))   # rollout.tools: validation uses the tool loop too

    def begin(self, run, traces) -> None:
        """Attach the engines; validate the starting weights when due (before_training, or a
        resumed run whose last validation did not finish)."""
        fleet, v = run.fleet, self.v
        v.attach(lambda: list(fleet.engines), run.tokenizer, fleet.options(), fleet.engine_len,
                 on_done=lambda e: fleet.last_done.__setitem__(e, time.monotonic()),
                 min_version=lambda: fleet.synced_version if fleet.in_flight else None)
        if v.due(run.start_step) and not v.done(run.start_step):
            v.start(run.start_step)

    def wants_sync(self, version: int) -> bool:
        return self.v.due(version)

    def after_step(self, run, traces, metrics: dict) -> None:
        self.v.after_step(traces, metrics)

    def end(self, run, traces, last: dict) -> None:
        step = last.get("step")
        if step and self.v.due(step, last=True) and run.fleet.synced_version != step:
            run.sync(step, wait=True)   # the data ran out at a step sync.every_steps skips
        self.v.finish(traces, step, last.get("samples/total", 0.0), last.get("time/elapsed_s", 0.0))

    def outstanding(self) -> list:
        return self.v.outstanding() if self.v is not None else []

    def close(self) -> None:
        if self.v is not None:
            self.v.close()
