"""Results tables: rlvr summaries and lm-eval result files alike, checkpoint x task x metric.

    scores = collect("evals")                  # every rlvr summary.json and lm-eval results file below
    print(render(scores, "markdown", baseline=load_baseline("configs/baselines/qwen3-1.7B-base.yaml")))

Sources, found anywhere below the folder:

- rlvr's ``summary.json`` (rlvr-eval): the task is the benchmark with its shot count
  (``gsm8k_8shot``; the benchmark alone when none is recorded; ``_1024tok`` added when the
  generation length was not the benchmark's own; ``-pass@N`` added in pass@k mode), the metrics are every number in ``metrics`` under its own key, whatever the
  naming (``accuracy`` or lm-eval's ``exact_match,strict-match``).
- lm-eval's results files, ``results_<date>.json`` (``{"results": {task: {"metric,filter":
  x, "metric_stderr,filter": ...}}, "n-shot": {task: N}, "configs": ...}``, any JSON file of
  that shape): one task per entry of ``results`` (a group's
  subtasks are left out when the group itself has scores), every ``metric,filter`` number but
  the standard errors (``sample_len`` and other fields are not metrics). When a folder holds
  several (reruns), the newest name counts.

- OLMES's ``metrics-all.jsonl`` (rlvr-eval --harness olmes): one task per line, named by its
  alias (``gsm8k::tulu``; suite aggregates such as ``minerva_math::tulu`` too), every number
  in its ``metrics`` (``primary_score``, ``exact_match``, ...). A folder rlvr-eval ran OLMES
  in (it holds ``olmes.json``) is a task group's folder, left out of the checkpoint name.

The checkpoint of a score is its folder's path below the table's root, without the task's
own folder (``<output_name>/gsm8k_8shot/`` -> ``<output_name>``) and without lm-eval's
model folder; a file with no such path left is named by the checkpoint it records.

A baseline (``load_baseline``) is a small YAML file of reference scores:

    name: Qwen3-1.7B-Base
    unit: percent            # or fraction (the default); tables show fractions
    scores:
      gsm8k_8shot: {"exact_match,strict-match": 69.60, "exact_match,flexible-extract": 70.13}

With one, the table gets a baseline row and, after each column the baseline scores, the
difference of each checkpoint to it (``Δ``).
"""

from __future__ import annotations

import csv
import glob
import io
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

import orjson

from rlvr.errors import BadInput, UsageError
from rlvr.messages import warn
from rlvr.records import atomic_write

FORMATS = ("markdown", "csv")


@dataclass(frozen=True)
class Score:
    checkpoint: str
    task: str
    metric: str
    value: float | None
    source: str = ""


@dataclass
class Baseline:
    name: str
    scores: dict[tuple[str, str], float] = field(default_factory=dict)   # (task, metric) -> fraction


# --------------------------------------------------------------------------- reading


def _number(v) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _label(folder: str, root: str, task_folders: set[str], drop: Iterable[str] = ()) -> str | None:
    """The checkpoint name of a result in `folder`: its path below root without lm-eval's
    model folder (names in drop) and the task's own folder; None when nothing is left."""
    for name in drop:
        if name and os.path.basename(folder) == name:
            folder = os.path.dirname(folder)
    if os.path.basename(folder) in task_folders:
        folder = os.path.dirname(folder)
    rel = os.path.relpath(folder, root)
    return None if rel in (".", "") or rel.startswith("..") else rel


def _shots(summary: dict) -> int | None:
    settings = summary.get("settings") if isinstance(summary.get("settings"), dict) else {}
    for where in (summary, settings):
        for key in ("shots", "num_fewshot", "n_shot", "n-shot"):
            v = where.get(key)
            if isinstance(v, int) and not isinstance(v, bool):
                return v
    return None


def read_summary(path: str, root: str, data: dict) -> list[Score]:
    """The scores of one rlvr summary.json."""
    bench = str(data.get("benchmark") or os.path.basename(os.path.dirname(path)))
    shots = _shots(data)
    task = bench if shots is None else f"{bench}_{shots}shot"
    settings = data.get("settings") if isinstance(data.get("settings"), dict) else {}
    n, default = settings.get("max_tokens"), settings.get("max_tokens_default")
    if isinstance(n, int) and isinstance(default, int) and n != default:
        task = f"{task}_{n}tok"   # a generation length other than the benchmark's: say so
    mode = data.get("mode")
    if isinstance(mode, str) and mode.startswith("pass@"):
        task = f"{task}-{mode}"
    folders = {task, bench, f"{bench}-{mode}", f"{bench}_{shots}shot", f"{bench}_{shots}shot-{mode}"}
    label = _label(os.path.dirname(path), root, folders) or str(data.get("checkpoint") or path)
    metrics = data.get("metrics") if isinstance(data.get("metrics"), dict) else {}
    return [Score(label, task, str(m), _number(v), path) for m, v in metrics.items() if "_stderr" not in str(m)]


def _lm_eval_model(data: dict) -> str | None:
    if isinstance(data.get("model_name"), str) and data["model_name"]:
        return data["model_name"]
    args = (data.get("config") or {}).get("model_args") if isinstance(data.get("config"), dict) else None
    if isinstance(args, str):
        m = re.search(r"(?:^|,)\s*pretrained=([^,]+)", args)
        if m:
            return m.group(1)
    return None


def read_lm_eval(path: str, root: str, data: dict) -> list[Score]:
    """The scores of one lm-eval results file."""
    results = data.get("results") or {}
    nshot = data.get("n-shot") if isinstance(data.get("n-shot"), dict) else {}
    groups = data.get("group_subtasks") if isinstance(data.get("group_subtasks"), dict) else {}
    hidden = {sub for g, subs in groups.items() if isinstance(subs, list) and _metrics(results.get(g)) for sub in subs}
    tasks: dict[str, str] = {}
    for name in results:
        if name in hidden:
            continue
        n = nshot.get(name)
        task = _stock_name(name)
        tasks[name] = f"{task}_{n}shot" if isinstance(n, int) and not isinstance(n, bool) else task
    folders = set(tasks) | set(tasks.values())
    label = (_label(os.path.dirname(path), root, folders, drop=[str(data.get("model_name_sanitized") or "")])
             or _lm_eval_model(data) or path)
    out = []
    for name, task in tasks.items():
        out += [Score(label, task, key, v, path) for key, v in _metrics(results[name])]
    return out


def _stock_name(name: str) -> str:
    """A task of `rlvr-eval --harness lm-eval` (`local_<task>`: the stock task re-pointed at the rows
    rlvr found) under the stock task's name, so that its column is the one rlvr's own path fills."""
    from rlvr.eval.tasks import STANDARD

    stock = name[len("local_"):] if name.startswith("local_") else None
    return stock if stock and any(stock in t.lm_names() or stock == t.name for t in STANDARD.values()) else name


def _metrics(entry) -> list[tuple[str, float]]:
    """The "metric,filter" numbers of an lm-eval results entry (no standard errors, and
    none of its other fields: alias, name, sample_len)."""
    if not isinstance(entry, dict):
        return []
    return [(k, float(v)) for k, v in entry.items()
            if "," in k and "_stderr" not in k.split(",")[0] and _number(v) is not None]


def read_olmes(path: str, root: str) -> list[Score]:
    """The scores of one OLMES metrics-all.jsonl."""
    from rlvr.eval.harness import OLMES_META, olmes_alias

    folder = os.path.dirname(path)
    meta = _load(os.path.join(folder, OLMES_META))
    label = _label(folder, root, {os.path.basename(folder)} if isinstance(meta, dict) else set())
    if label is None:
        label = str((meta or {}).get("checkpoint") if isinstance(meta, dict) else "") or path
    out = []
    try:
        with open(path, "rb") as fh:
            entries = [orjson.loads(ln) for ln in fh if ln.strip()]
    except (OSError, orjson.JSONDecodeError):
        return []
    for e in entries:
        if not isinstance(e, dict) or not isinstance(e.get("metrics"), dict):
            continue
        task = olmes_alias(e)
        out += [Score(label, task, str(k), _number(v), path) for k, v in e["metrics"].items()
                if _number(v) is not None and "_stderr" not in str(k)]
    return out


def _is_lm_eval(data) -> bool:
    return isinstance(data, dict) and isinstance(data.get("results"), dict) and \
        any(k in data for k in ("configs", "n-shot", "versions", "config"))


_DATED = re.compile(r"^(.*)_\d{4}-\d{2}-\d{2}T[\d.\-]+\.json$")   # lm-eval's <stem>_<isoformat date>.json


def collect(root: str) -> list[Score]:
    """Every score below root: rlvr summary.json files, lm-eval results files (any JSON
    file shaped like one: results_<date>.json, or <stem>_<date>.json for an --output_path
    ending in .json; of several dated ones in a folder, the newest) and OLMES's
    metrics-all.jsonl files. Files that do not parse or are none of these are skipped."""
    scores: list[Score] = []
    for p in sorted(glob.glob(os.path.join(root, "**", "metrics-all.jsonl"), recursive=True)):
        scores += read_olmes(p, root)
    for p in sorted(glob.glob(os.path.join(root, "**", "summary.json"), recursive=True)):
        data = _load(p)
        if isinstance(data, dict) and "metrics" in data and "benchmark" in data:
            scores += read_summary(p, root, data)
    newest: dict[tuple[str, str], str] = {}
    for p in sorted(glob.glob(os.path.join(root, "**", "*.json"), recursive=True)):
        name = os.path.basename(p)
        if name in ("summary.json", "pass_at_k.json", "metrics.json", "olmes.json") or name.startswith("task-"):
            continue
        m = _DATED.match(name)                 # sorted: <stem>_<timestamp> names, the newest last
        newest[(os.path.dirname(p), m.group(1) if m else name)] = p
    for p in newest.values():
        data = _load(p)
        if _is_lm_eval(data):
            scores += read_lm_eval(p, root, data)
    return scores


def _load(path: str):
    try:
        with open(path, "rb") as fh:
            return orjson.loads(fh.read())
    except (OSError, orjson.JSONDecodeError):
        return None


# --------------------------------------------------------------------------- baselines


def load_baseline(path: str) -> Baseline:
    """A baseline YAML file (see the module docstring). BadInput names FILE:LINE and the field."""
    import yaml

    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except OSError as e:
        raise UsageError(f"--baseline: cannot read {path}: {e.strerror or e}") from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        raise BadInput(f"{path}:{mark.line + 1 if mark else 1}: not YAML ({getattr(e, 'problem', e)})") from None

    def line(*keys: str) -> int:
        n = node
        for k in keys:
            if not isinstance(n, yaml.MappingNode):
                break
            nxt = next((v for kn, v in n.value if kn.value == k), None)
            if nxt is None:
                break
            n = nxt
        return (n.start_mark.line + 1) if n is not None else 1

    if not isinstance(data, dict):
        raise BadInput(f"{path}:1: a baseline is a mapping with name, unit and scores")
    unknown = sorted(set(data) - {"name", "unit", "source", "scores", "settings"})
    if unknown:
        raise BadInput(f"{path}:{line(unknown[0])}: field {unknown[0]}: unknown (known: name, unit, source, "
                       "settings, scores)")
    unit = data.get("unit", "fraction")
    if unit not in ("fraction", "percent"):
        raise BadInput(f"{path}:{line('unit')}: field unit: must be fraction or percent, not {unit!r}")
    scale = 100.0 if unit == "percent" else 1.0
    scores = data.get("scores")
    if not isinstance(scores, dict) or not scores:
        raise BadInput(f"{path}:{line('scores')}: field scores: must map tasks to {{metric: score}}")
    out = Baseline(str(data.get("name") or os.path.splitext(os.path.basename(path))[0]))
    for task, metrics in scores.items():
        if not isinstance(metrics, dict):
            raise BadInput(f"{path}:{line('scores', str(task))}: field scores.{task}: must map metrics to scores")
        for metric, v in metrics.items():
            if _number(v) is None:
                raise BadInput(f"{path}:{line('scores', str(task), str(metric))}: field scores.{task}.{metric}: "
                               f"not a number: {v!r}")
            out.scores[(str(task), str(metric))] = float(v) / scale
    return out


# --------------------------------------------------------------------------- rendering


def _cell(v: float | None) -> str:
    return "" if v is None else f"{v:.4f}"


def _delta(v: float | None, b: float | None) -> str:
    return "" if v is None or b is None else f"{v - b:+.4f}"


def rows(scores: Iterable[Score], baseline: Baseline | None = None) -> tuple[list[str], list[list[str]]]:
    """(header, body) of the wide table: one row per checkpoint (the baseline's first), one
    column per (task, metric), each followed by its difference to the baseline when it has
    one. Columns: the baseline's in its order, then the others sorted by task and metric."""
    from rlvr.runs import checkpoint_key, step_sort_key

    table: dict[str, dict[tuple[str, str], float | None]] = {}
    for s in scores:
        table.setdefault(s.checkpoint, {})[(s.task, s.metric)] = s.value
    first: dict[object, str] = {}   # one row per step: x/step100 and x/step_000100 are one checkpoint
    for ck in sorted(table, key=step_sort_key):
        row = first.setdefault(checkpoint_key(ck) or ck, ck)
        if row != ck:
            clash = []
            for col, v in table.pop(ck).items():
                if table[row].setdefault(col, v) != v:
                    clash.append(f"{col[0]} {col[1]}")
            if clash:
                warn(f"{row} and {ck} are one checkpoint with different scores for {', '.join(clash)}: "
                     f"{row}'s shown")
    seen = {c for t in table.values() for c in t}
    base = baseline.scores if baseline is not None else {}
    # the baseline's columns first, in its order (those nobody measured left out), then the rest sorted
    cols = [c for c in base if c in seen] or list(base)
    cols += sorted(c for c in seen if c not in base)
    header = ["checkpoint"]
    for c in cols:
        header.append(f"{c[0]} {c[1]}")
        if c in base:
            header.append("Δ")
    body = []
    if baseline is not None:
        line = [f"baseline: {baseline.name}"]
        for c in cols:
            line.append(_cell(base.get(c)))
            if c in base:
                line.append("")
        body.append(line)
    for ck in sorted(table, key=step_sort_key):
        line = [ck]
        for c in cols:
            v = table[ck].get(c)
            line.append(_cell(v))
            if c in base:
                line.append(_delta(v, base[c]))
        body.append(line)
    return header, body


def render(scores: Iterable[Score], fmt: str = "markdown", baseline: Baseline | None = None) -> str:
    """The table as Markdown or CSV (fractions with 4 decimals; Δ signed)."""
    if fmt not in FORMATS:
        raise UsageError(f"unknown table format {fmt!r} (known: {', '.join(FORMATS)})")
    header, body = rows(scores, baseline)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(header)
        w.writerows(body)
        return buf.getvalue()
    from rlvr.textutil import md_cell

    lines = ["| " + " | ".join(map(md_cell, header)) + " |", "|" + "|".join(["---"] + ["---:"] * (len(header) - 1)) + "|"]
    lines += ["| " + " | ".join(map(md_cell, r)) + " |" for r in body]
    return "\n".join(lines) + "\n"


def write_tables(root: str) -> None:
    """Refresh root/results.md and root/results.csv from the results below root."""
    if not os.path.isdir(root):
        return
    scores = collect(root)
    atomic_write(os.path.join(root, "results.md"), render(scores, "markdown").encode())
    atomic_write(os.path.join(root, "results.csv"), render(scores, "csv").encode())
