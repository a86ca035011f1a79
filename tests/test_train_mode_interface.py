"""The training modes behind one interface (rlvr.train.modes): every registered mode is a Mode
whose hooks keep the interface's signatures, the driver's modules import no mode, a mode's
own config section is checked by check_config (and config.check imports no mode), and a
mode's extend/metrics/sample hooks reach the trainer's batch and the trace lines."""

from __future__ import annotations

import ast
import inspect
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from helpers import REPO

DRIVER = ("loop", "cluster", "fleet", "engine_sync", "trainers", "recorder", "prompts", "processes")


def test_every_registered_mode_is_a_mode_with_the_interfaces_hooks():
    from rlvr.train import modes

    classes = modes.classes()
    assert [c.__name__ for c in classes] == ["SftMode", "DistillMode", "ValidationMode", "JudgeEngineMode"]
    for cls in classes:
        assert issubclass(cls, modes.Mode)
        for name, hook in vars(modes.Mode).items():
            if callable(getattr(hook, "__func__", hook)) and not name.startswith("_"):
                ours = inspect.signature(getattr(cls, name))
                assert list(ours.parameters) == list(inspect.signature(getattr(modes.Mode, name)).parameters), \
                    (cls.__name__, name)


def test_the_driver_imports_no_mode():
    from rlvr.train.modes import MODES

    mode_modules = {path.split(":")[0] for path in MODES.values()}
    for name in DRIVER:
        tree = ast.parse(open(os.path.join(REPO, "rlvr", "train", f"{name}.py")).read())
        imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module}
        imported |= {f"{n.module}.{a.name}" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.module
                     for a in n.names}
        assert not imported & mode_modules, (name, imported & mode_modules)


def test_a_modes_section_is_checked_by_check_config_and_config_check_imports_no_mode():
    from rlvr.config_loader import load_config
    from rlvr.errors import ConfigError
    from rlvr.train.config import TrainConfig, check
    from rlvr.train.modes import check_config

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), ["train.distill.weight=1"])
    check(cfg)                                       # the config's own sections: no teacher needed there
    with pytest.raises(ConfigError, match="train.distill needs a teacher"):
        check_config(cfg)                            # the distillation mode's section
    assert any("no teacher starts" in w for w in check_config(
        load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), ["teacher.model=m"])))
    code = ("import sys; from rlvr.config_loader import load_config; from rlvr.train.config import TrainConfig, check; "
            f"check(load_config(TrainConfig, {os.path.join(REPO, 'configs', 'tiny-cpu.yaml')!r}, [])); "
            "print(sorted(m for m in sys.modules if m in ('rlvr.train.sft', 'rlvr.train.distill', "
            "'rlvr.train.validation', 'rlvr.train.modes', 'rlvr.train.loop')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=REPO))
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_modes_add_to_the_batch_the_metrics_and_the_samples_in_registration_order(monkeypatch):
    from rlvr.train import modes
    from rlvr.train.loop import assemble_batch

    seen = []

    class One(modes.Mode):
        @staticmethod
        def enabled(cfg):
            return True

        def __init__(self, run):
            seen.append("one")

        def extend(self, run, assembled, groups, step):
            assembled.batch.extras["one"] = step

        def metrics(self, metrics):
            metrics["one/x"] = 1.0

        def sample(self, group, rec):
            rec["one"] = True

    class Two(One):
        def __init__(self, run):
            seen.append("two")

        def extend(self, run, assembled, groups, step):
            assembled.batch.extras["two"] = assembled.batch.extras["one"] + 1

        def wants_sync(self, version):
            return version == 3

    monkeypatch.setattr(modes, "classes", lambda: [One, Two])
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [])
    run = SimpleNamespace(cfg=cfg)
    run.modes = modes.Modes(run)
    assert seen == ["one", "two"]
    a = assemble_batch(run, [], 4)
    assert a.batch.extras == {"one": 4, "two": 5}
    metrics, rec = {}, {}
    run.modes.metrics(metrics)
    run.modes.sample(object(), rec)
    assert metrics == {"one/x": 1.0} and rec == {"one": True}
    assert run.modes.wants_sync(3) and not run.modes.wants_sync(2)
    assert modes.alone(cfg) is None and not modes.keeps_question(cfg)
