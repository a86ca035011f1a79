"""A grid of rlvr-train runs under one parent folder: the staleness ablation as one command.

    rlvr-train CONFIG --ablate sync.mode=between_rounds,in_flight --ablate train.max_staleness=0,1,2,4 --seeds 3

runs every combination of the --ablate values, for each of --seeds seeds (seed i adds i to the
config's train.seed, rollout.seed and data.seed), one after the other with seeds outermost (a
drift in the machine's load then touches every setting alike), in one Ray session. Each run is
an ordinary run folder PARENT/<setting>,seed=<i>/ (config.yaml, run.json, traces, checkpoints,
train.log). PARENT/ablation.json is the manifest: the base config, the axes, the seeds and each
run's settings, folder and status; PARENT/config.yaml is the base config resolved once, so a
changed CONFIG file cannot change a grid half-way.

Running the same command again (same --run-dir), or `rlvr-train --resume PARENT`, skips the
completed runs and resumes the others from their last checkpoint (a run that never saved one
starts again). A failed run does not stop the grid: the rest run, and the command ends with
status 1 naming the failed ones. `rlvr-plot PARENT` draws and tabulates the grid.
"""

from __future__ import annotations

import datetime as _dt
import itertools
import os

import yaml

from rlvr.errors import ConfigError, Failure, RlvrError
from rlvr.records import loads, write_json

MANIFEST = "ablation.json"
SEED_KEYS = ("train.seed", "rollout.seed", "data.seed")


def split_values(raw: str) -> list[str]:
    """'a,b,[c,d]' -> ['a', 'b', '[c,d]']: commas inside brackets, braces or quotes do not split."""
    out, cur, depth, quote = [], "", 0, None
    for ch in raw:
        if quote:
            quote = None if ch == quote else quote
        elif ch in "'\"":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
            continue
        cur += ch
    out.append(cur.strip())
    return out


def parse_axes(items: list[str]) -> list[tuple[str, list[str]]]:
    """--ablate KEY=V1,V2,... (repeatable) -> [(key, [values])] in order."""
    axes: list[tuple[str, list[str]]] = []
    for item in items:
        key, sep, raw = item.partition("=")
        key = key.strip()
        values = split_values(raw) if sep else []
        if not key or not values or any(v == "" for v in values):
            raise ConfigError(f"--ablate {item!r}: expected KEY=VALUE,VALUE,..., e.g. train.max_staleness=0,1,2")
        if key in SEED_KEYS:
            raise ConfigError(f"--ablate {key}: seeds are set by --seeds")
        if any(key == k for k, _ in axes):
            raise ConfigError(f"--ablate {key}: given twice")
        if len(set(values)) != len(values):
            raise ConfigError(f"--ablate {key}: a value is given twice")
        axes.append((key, values))
    return axes


def _label(key: str, keys: list[str]) -> str:
    """A key's last component, unless another axis ends the same way."""
    leaf = key.rsplit(".", 1)[-1]
    return leaf if sum(k.rsplit(".", 1)[-1] == leaf for k in keys) == 1 else key


def run_name(settings: dict[str, str], seed: int) -> str:
    keys = list(settings)
    parts = [f"{_label(k, keys)}={v}" for k, v in settings.items()] + [f"seed={seed}"]
    return ",".join(p.replace(os.sep, "_") for p in parts)


def plan(base: dict, axes: list[tuple[str, list[str]]], seeds: int) -> list[dict]:
    """The grid's runs, seeds outermost: {name, settings, seed, sets}."""
    runs = []
    for seed in range(seeds):
        for combo in itertools.product(*[values for _, values in axes]):
            settings = {k: v for (k, _), v in zip(axes, combo)}
            sets = [f"{k}={v}" for k, v in settings.items()]
            sets += [f"{k}={_get(base, k) + seed}" for k in SEED_KEYS]
            runs.append({"name": run_name(settings, seed), "settings": settings, "seed": seed, "sets": sets})
    return runs


def _get(tree: dict, key: str):
    for part in key.split("."):
        tree = tree[part]
    return tree


def status_of(run_dir: str) -> str:
    """pending (no folder yet), completed, failed, interrupted, or unfinished (ended without a word: killed)."""
    path = os.path.join(run_dir, "run.json")
    if not os.path.exists(path):
        return "pending"
    try:
        return str(loads(open(path, "rb").read()).get("status") or "unfinished")
    except (OSError, ValueError):
        return "unfinished"


class Grid:
    """The manifest of a grid and the runs it holds."""

    def __init__(self, parent: str, manifest: dict):
        self.parent, self.m = os.path.abspath(parent), manifest

    @classmethod
    def create(cls, parent: str, config_path: str, sets: list[str], ablate: list[str], seeds: int) -> "Grid":
        """A new grid in `parent`, or the one already there when it is the same grid."""
        from rlvr.config_loader import load_config, to_dict, to_yaml
        from rlvr.train.config import TrainConfig
        from rlvr.train.modes import check_config as check

        if seeds < 1:
            raise ConfigError(f"--seeds: expected at least 1, got {seeds}")
        axes = parse_axes(ablate)
        base = load_config(TrainConfig, config_path, list(sets))
        text = to_yaml(base)   # as given: a preset on an axis still fills its own defaults
        runs = plan(to_dict(base), axes, seeds)
        for r in runs:   # every run's config is valid before anything starts
            try:
                check(load_config(TrainConfig, config_path, [*sets, *r["sets"]]))
            except ConfigError as e:
                raise ConfigError(f"ablation run {r['name']}: {e.message}") from None
        manifest = {"config": os.path.abspath(config_path), "sets": list(sets),
                    "axes": [{"key": k, "values": v} for k, v in axes], "seeds": seeds,
                    "runs": [dict(r, dir=r["name"]) for r in runs]}
        path = os.path.join(parent, MANIFEST)
        if os.path.exists(path):
            old = cls.load(parent)
            mine = {k: manifest[k] for k in ("axes", "seeds")}
            if {k: old.m[k] for k in ("axes", "seeds")} != mine or old.base_yaml() != text:
                raise ConfigError(f"{parent} holds another grid ({MANIFEST}: other axes, seeds or base config); "
                                  f"give another --run-dir, or rlvr-train --resume {parent} to finish that one")
            return old
        os.makedirs(parent, exist_ok=True)
        from rlvr.records import atomic_write

        atomic_write(os.path.join(parent, "config.yaml"), text.encode())
        manifest["created"] = _now()
        grid = cls(parent, manifest)
        grid.save()
        return grid

    @classmethod
    def load(cls, parent: str) -> "Grid":
        path = os.path.join(parent, MANIFEST)
        try:
            m = loads(open(path, "rb").read())
        except OSError as e:
            raise ConfigError(f"{parent}: not an ablation folder (no readable {MANIFEST}: {e.strerror})") from None
        except ValueError:
            raise ConfigError(f"{path}: invalid JSON") from None
        if not isinstance(m, dict) or not isinstance(m.get("runs"), list):
            raise ConfigError(f"{path}: not an ablation manifest (field runs)")
        return cls(parent, m)

    def base_yaml(self) -> str:
        return open(os.path.join(self.parent, "config.yaml")).read()

    def run_dir(self, run: dict) -> str:
        return os.path.join(self.parent, run["dir"])

    def refresh(self) -> None:
        for r in self.m["runs"]:
            r["status"] = status_of(self.run_dir(r))

    def save(self) -> None:
        self.refresh()
        self.m["updated"] = _now()
        write_json(os.path.join(self.parent, MANIFEST), self.m)

    def settings(self) -> list[tuple[str, list[dict]]]:
        """The runs by setting (seeds together), in grid order: [(label, [run, ...])]."""
        out: dict[str, list[dict]] = {}
        for r in self.m["runs"]:
            label = ",".join(f"{k}={v}" for k, v in r["settings"].items()) or "base"
            out.setdefault(label, []).append(r)
        return list(out.items())


def _now() -> str:
    return _dt.datetime.now().astimezone().isoformat(timespec="seconds")


def run_grid(grid: Grid, argv: list[str], log, ray_address: str | None = None, ray_temp_dir: str | None = None) -> dict:
    """Run the grid's unfinished runs in order; returns {run name: status}. Raises Failure when
    some failed (after trying all of them)."""
    from rlvr.messages import StderrCopy
    from rlvr.train.cluster import Cluster
    from rlvr.train.config import resolve
    from rlvr.train.loop import train
    from rlvr.train.modes import check as check_modes

    base = os.path.join(grid.parent, "config.yaml")
    grid.save()
    todo = [r for r in grid.m["runs"] if r["status"] != "completed"]
    log(f"ablation {grid.parent}: {len(grid.m['runs'])} runs, {len(grid.m['runs']) - len(todo)} completed, "
        f"{len(todo)} to run")
    failed = []
    started_ray = False
    for i, r in enumerate(todo, 1):
        run_dir = grid.run_dir(r)
        cfg, warnings, text = resolve(base, r["sets"], ray_address, ray_temp_dir)
        warnings += check_modes(cfg)
        if not started_ray:
            # One Ray for the whole grid, started before any run's train.log takes stderr over
            # (Ray's own processes keep the terminal's stderr).
            Cluster(cfg, run_dir, "").init()
            started_ray = True
        resume = os.path.exists(os.path.join(run_dir, "config.yaml"))
        log(f"ablation run {i}/{len(todo)}: {r['name']}" + (" (resumed)" if resume else ""))
        os.makedirs(run_dir, exist_ok=True)
        copy = StderrCopy(os.path.join(run_dir, "train.log"))
        try:
            for w in warnings:
                log(f"warning: {w}")
            train(cfg, run_dir, [*argv, *(a for s in r["sets"] for a in ("--set", s))], text, resume=resume)
        except KeyboardInterrupt:
            grid.save()
            raise
        except RlvrError as e:
            failed.append(r["name"])
            log(f"ablation run {r['name']} failed: {e.message}")
        except Exception as e:  # noqa: BLE001 - one run's failure must not stop the grid
            failed.append(r["name"])
            log(f"ablation run {r['name']} failed: {type(e).__name__}: {str(e).strip()[:300]}")
        finally:
            copy.close()
            grid.save()
    if failed:
        raise Failure(f"{len(failed)} of {len(grid.m['runs'])} ablation runs failed ({', '.join(failed)}): "
                      f"rerun the command, or rlvr-train --resume {grid.parent}, to resume them")
    log(f"ablation {grid.parent}: all {len(grid.m['runs'])} runs completed; rlvr-plot {grid.parent} draws them")
    return {r["name"]: r["status"] for r in grid.m["runs"]}


def describe(grid: Grid) -> str:
    """The grid as YAML (for --print-config)."""
    return yaml.safe_dump({"axes": grid.m["axes"], "seeds": grid.m["seeds"],
                           "runs": [{"name": r["name"], "set": r["sets"]} for r in grid.m["runs"]]}, sort_keys=False)


def command(config: str, sets: list[str], ablate: list[str], seeds: int | None, run_dir: str | None,
            resume_dir: str | None, argv: list[str], log, ray_address: str | None = None,
            ray_temp_dir: str | None = None, print_config: bool = False) -> bool:
    """rlvr-train's grid mode: True when this call was a grid (--ablate, --seeds, or --resume of a
    grid folder) and has been handled."""
    import sys

    from rlvr.runs import new_run_dir

    if resume_dir and (ablate or seeds is not None):
        raise ConfigError("--resume takes no --ablate or --seeds: a grid folder resumes with its own")
    if resume_dir:
        if not os.path.exists(os.path.join(resume_dir, MANIFEST)):
            return False
        grid = Grid.load(resume_dir)
    elif ablate or seeds is not None:
        if print_config:   # nothing is written
            import tempfile

            with tempfile.TemporaryDirectory() as tmp:
                sys.stdout.write(describe(Grid.create(tmp, config, sets, ablate, seeds or 1)))
            return True
        parent = run_dir or new_run_dir(os.path.splitext(config)[0] + "-ablation")
        grid = Grid.create(parent, config, sets, ablate, seeds or 1)
    else:
        return False
    run_grid(grid, argv, log, ray_address, ray_temp_dir)
    return True
