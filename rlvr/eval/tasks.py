"""lm-evaluation-harness's standard tasks, built through lm-eval as a library.

    recs = records("gsm8k", shots=8, source="data/gsm8k", limit=50)      # prompt records
    scored = score("gsm8k", recs_with_completions, shots=8, source="data/gsm8k")
    summary = aggregate("gsm8k", scored)

The prompt of each record is the context `lm_eval --tasks TASK --num_fewshot N --seed 42`
builds for that document (lm-eval's own task definition: its few-shot sampler and seed or
fixed exemplars, delimiters), with its stop sequences and generation length; the scores are
lm-eval's own filters, metrics and aggregations run on rlvr's completions (summary keys
`METRIC,FILTER` as in lm-eval's results), beside rlvr's own verifier (`rlvr_verify,none`:
symbolic math equivalence, the sandboxed code grader, the IF checkers).

Data: rows are found as every dataset's are (rlvr.data.sources.locate: `source`, a local file
or folder or s3:// URI, else $RLVR_S3_DATASETS/<dataset>/ or <dataset>_<split>/, else the same
below $RLVR_DATA_DIR, else the Hugging Face hub through rlvr's one loader), and the stock task
is re-pointed at them (a task yaml that `include:`s lm-eval's and sets `dataset_path: json`),
so lm-eval itself never reads the hub. The dataset of a task is its rows' shape: gsm8k
(gsm8k, gsm8k_cot), math (EleutherAI/hendrycks_math rows: problem, level, type, solution,
split by subject for minerva_math, hendrycks_math, math_qwen), mbpp, humaneval, ifeval.

math_qwen is a task of rlvr's own, shipped as an lm-eval task (rlvr/eval/lm_tasks/) so both
paths run it: `Question: ...\\nAnswer:` prompts, 4 chain-of-thought exemplars ending in
\\boxed{}, boxed / "The answer is" extraction, rlvr's symbolic verifier.
"""

from __future__ import annotations

import functools
import hashlib
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from rlvr.errors import UsageError

LM_TASKS_DIR = os.path.join(os.path.dirname(__file__), "lm_tasks")

# lm-eval subtask suffix -> (hendrycks_math config name, the rows' "type")
SUBJECTS = {
    "algebra": ("algebra", "Algebra"),
    "counting_and_prob": ("counting_and_probability", "Counting & Probability"),
    "geometry": ("geometry", "Geometry"),
    "intermediate_algebra": ("intermediate_algebra", "Intermediate Algebra"),
    "num_theory": ("number_theory", "Number Theory"),
    "prealgebra": ("prealgebra", "Prealgebra"),
    "precalc": ("precalculus", "Precalculus"),
}


@dataclass(frozen=True)
class StdTask:
    """One standard task: its lm-eval task name(s), default shots and how rlvr grades it."""

    name: str
    shots: int                      # the default of rlvr-eval (the published baselines' shot count)
    verifier: str                   # rlvr's own grader: math, code, ifeval
    data: str                       # the rlvr dataset of its rows (rlvr.data): gsm8k, math, mbpp, humaneval, ifeval
    metrics: tuple[str, ...]        # the headline lm-eval keys (METRIC,FILTER)
    subjects: bool = False          # MATH: one lm-eval subtask per subject
    splits: tuple[str, ...] = ("test",)   # lm-eval's split names; the first is the evaluated one
    code: bool = False              # runs model-written code (lm-eval: --confirm_run_unsafe_code)
    warning: str | None = None

    def lm_names(self) -> list[str]:
        if self.subjects:
            return [f"{self.name}_{s}" for s in SUBJECTS]
        return [self.name]


IF_KEYS = ("prompt_level_strict_acc,none", "inst_level_strict_acc,none", "prompt_level_loose_acc,none",
           "inst_level_loose_acc,none")
GSM_KEYS = ("exact_match,strict-match", "exact_match,flexible-extract")

STANDARD: dict[str, StdTask] = {t.name: t for t in [
    StdTask("gsm8k", 8, "math", "gsm8k", GSM_KEYS, splits=("test", "train")),
    StdTask("gsm8k_cot", 8, "math", "gsm8k", GSM_KEYS),
    StdTask("minerva_math", 4, "math", "math", ("exact_match,none", "math_verify,none"), subjects=True),
    StdTask("hendrycks_math", 4, "math", "math", ("exact_match,none",), subjects=True, splits=("test", "train"),
            warning="hendrycks_math under-reports: plain 'Problem: ...\\nAnswer:' prompts, bare answers and string "
                    "matching; use math_qwen or minerva_math for numbers comparable with published MATH scores"),
    StdTask("math_qwen", 4, "math", "math", ("exact_match,none",), subjects=True),
    StdTask("mbpp", 3, "code", "mbpp", ("pass_at_1,none",), code=True),
    StdTask("humaneval", 0, "code", "humaneval", ("pass@1,create_test",), code=True),
    StdTask("ifeval", 0, "ifeval", "ifeval", IF_KEYS, splits=("train",)),
]}


def standard(name: str) -> StdTask:
    if name not in STANDARD:
        raise UsageError(f"unknown lm-eval task {name!r} (known: {', '.join(STANDARD)})")
    return STANDARD[name]


# --- lm-eval, offline --------------------------------------------------------------------------

class CodeEval:
    """Stand-in for Hugging Face evaluate's `code_eval` metric (which lm-eval's mbpp and
    humaneval load from the hub when their utils are imported): the same program
    (prediction + "\\n" + reference), run in a fresh interpreter with code_eval's 3 s timeout,
    passed when it exits cleanly. Like code_eval, this runs the code unsandboxed: rlvr's own
    sandboxed verdict is `rlvr_verify,none`."""

    timeout = 3.0

    def _passes(self, program: str) -> bool:
        with tempfile.TemporaryDirectory(prefix="rlvr-code-eval-") as d:
            try:
                r = subprocess.run([sys.executable, "-I", "-c", program], cwd=d, stdin=subprocess.DEVNULL,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=self.timeout)
            except subprocess.TimeoutExpired:
                return False
            return r.returncode == 0

    def compute(self, references, predictions, k=(1,), num_workers=4, timeout=None):
        jobs = [(i, p + "\n" + ref) for i, (cands, ref) in enumerate(zip(predictions, references)) for p in cands]
        with ThreadPoolExecutor(max(1, min(num_workers, len(jobs) or 1))) as pool:
            ok = list(pool.map(lambda j: self._passes(j[1]), jobs))
        per: dict[int, list[bool]] = {}
        for (i, _p), v in zip(jobs, ok):
            per.setdefault(i, []).append(v)
        import numpy as np

        def est(n, c, kk):
            if n - c < kk:
                return 1.0
            return 1.0 - float(np.prod(1.0 - kk / np.arange(n - c + 1, n + 1)))

        scores = {f"pass@{kk}": float(np.mean([est(len(v), sum(v), kk) for v in per.values()]))
                  for kk in k if all(len(v) >= kk for v in per.values())}
        return scores, per


def _offline_code_eval() -> None:
    """lm-eval's code tasks import `evaluate.load("code_eval")` (a hub download): serve CodeEval."""
    import evaluate

    if getattr(evaluate.load, "_rlvr_offline", False):
        return
    real = evaluate.load

    def load(path, *a, **kw):
        if path == "code_eval":
            return CodeEval()
        return real(path, *a, **kw)

    load._rlvr_offline = True
    evaluate.load = load


def nltk_data_dir() -> str:
    """rlvr's packaged NLTK data (lm-eval's ifeval would download punkt_tab at import)."""
    from importlib import resources

    return str(resources.files("rlvr").joinpath("resources", "nltk_data"))


def _packaged_nltk_data() -> None:
    import nltk

    if nltk_data_dir() not in nltk.data.path:
        nltk.data.path.insert(0, nltk_data_dir())


# lm-eval's task folders that hold the standard tasks (and the yamls they include)
STOCK_DIRS = ("gsm8k", "minerva_math", "hendrycks_math", "mbpp", "humaneval", "ifeval")


@functools.lru_cache(maxsize=1)
def task_manager():
    """lm-eval's task index of the standard tasks' folders and rlvr's own (math_qwen), built
    once per process. Only those folders are indexed: lm-eval's whole index (every task it
    ships) costs ~10 s of CPU and holds nothing these tasks need. Local task folders are
    added to it by _add_path."""
    import logging

    import lm_eval
    from lm_eval.tasks import TaskManager

    log = logging.getLogger("lm_eval")
    log.setLevel(logging.ERROR)   # the folders share tags (math_word_problems): lm-eval warns about each
    root = os.path.join(os.path.dirname(lm_eval.__file__), "tasks")
    tm = TaskManager(include_path=[os.path.join(root, d) for d in STOCK_DIRS] + [LM_TASKS_DIR],
                     include_defaults=False)
    log.setLevel(logging.WARNING)
    return tm


def _add_path(tm, path: str) -> None:
    """Index the task yamls of one more folder (what TaskManager(include_path=...) does for it)."""
    from pathlib import Path

    from lm_eval.tasks._index import TaskIndex

    tm._index.update(TaskIndex().build([Path(path)]))
    tm._all_tasks = sorted(tm._index)
    tm._all_subtasks = sorted(set(tm._all_subtasks) | {k for k in tm._index if k.startswith("rlvr_local_")})


# the fields of a row that lm-eval's task reads (its doc_to_text, doc_to_target and metrics)
LM_FIELDS: dict[str, tuple[str, ...]] = {
    "gsm8k": ("question", "answer"),
    "math": ("problem", "solution"),
    "mbpp": ("task_id", "text", "code", "test_list"),
    "humaneval": ("task_id", "prompt", "test", "entry_point"),
    "ifeval": ("key", "prompt", "instruction_id_list", "kwargs"),
}


def check_rows(std: StdTask, rows: list[dict], split: str, where: str) -> None:
    """BadInput naming the row and field of the first row lm-eval could not use (a field its
    task reads is missing or null), before lm-eval sees the rows."""
    from rlvr.data.sources import _split_files
    from rlvr.errors import BadInput

    if os.path.isdir(where) and len(files := _split_files(where, split)) == 1:
        where = files[0]   # a folder with one file of the split: name the file
    for i, row in enumerate(rows, 1):
        if not isinstance(row, dict):
            raise BadInput(f"{where}: row {i}: expected an object (lm-eval task {std.name}, {split} split)")
        for f in LM_FIELDS.get(std.data, ()):
            if row.get(f) is None:
                raise BadInput(f"{where}: row {i}: missing field {f!r} (lm-eval task {std.name}, {split} split, "
                               f"field {f})")


def check_shots(task: str, shots: int, have: int, split: str, where: str) -> None:
    """UsageError when `shots` few-shot examples are asked of a split holding fewer rows."""
    if shots > have:
        raise UsageError(f"{task}: --shots {shots} needs {shots} few-shot examples, but its {split!r} split "
                         f"({where}) has {have} row(s): lower --shots or give a fuller {split} split")


def _rows(std: StdTask, split: str, source: str | None) -> tuple[list[dict], str | None, str]:
    """(rows of one split, why there are none, where they came from): found as every dataset's
    rows are (rlvr.data.raw_rows: `source`, else $RLVR_S3_DATASETS, $RLVR_DATA_DIR, the hub),
    checked for the fields lm-eval reads; a single file given as `source` holds the evaluated
    split only."""
    from rlvr.data import raw_rows
    from rlvr.errors import RlvrError

    main = split == std.splits[0]
    if not main and source is not None and not os.path.isdir(source) and not source.startswith("s3://"):
        return [], f"{source} is one file (the {std.splits[0]!r} split)", source
    try:
        rows, where = raw_rows(std.data, split, source)
    except RlvrError as e:
        if main:
            raise
        return [], e.message, source or "the data found"
    check_rows(std, rows, split, where)
    return rows, None, where


def _write_jsonl(path: str, rows: list[dict]) -> None:
    import orjson

    with open(path, "wb") as fh:
        for r in rows:
            fh.write(orjson.dumps(r, option=orjson.OPT_NON_STR_KEYS) + b"\n")


def rows_key(source: str | None) -> str:
    """What decides where a task's rows come from: the source, else the environment's places."""
    if source is not None:
        return os.path.abspath(source) if "://" not in source else source
    return "\0".join(os.environ.get(v, "") for v in ("RLVR_S3_DATASETS", "RLVR_DATA_DIR"))


def local_tasks(name: str, source: str | None, workdir: str, prefix: str | None = None,
                yaml_for: Callable[[str], str] | None = None, shots: int | None = None) -> dict[str, str]:
    """Write lm-eval task yamls re-pointing `name`'s stock task(s) at rows found by rlvr (from
    `source`, else S3, the local data folder or the hub: see _rows), so that lm-eval never
    reads the hub itself; returns {stock lm-eval name: local task name}. Subjects without
    rows are left out. yaml_for gives the stock yaml of a task (default: this process's
    lm-eval index). At 0 shots the few-shot split is not read."""
    std = standard(name)
    if prefix is None:
        prefix = "rlvr_local_" + hashlib.sha1(f"{name}\0{rows_key(source)}".encode()).hexdigest()[:10] + "_"
    os.makedirs(workdir, exist_ok=True)
    main = std.splits[0]
    data, why, where = {}, {}, {}
    for split in std.splits:
        if split != main and shots == 0:
            data[split], why[split], where[split] = [], "not read at 0 shots", ""
        else:
            data[split], why[split], where[split] = _rows(std, split, source)
    if not data[main]:
        raise UsageError(f"{source or 'the data found'}: no {name} {main} rows")
    if yaml_for is None:   # after the rows: a missing dataset fails before lm-eval's index is built
        index = task_manager().task_index
        yaml_for = lambda lm: str(index[lm].yaml_path)  # noqa: E731
    out: dict[str, str] = {}
    for lm in std.lm_names():
        parts, count = {}, {}
        for split, rows in data.items():
            if std.subjects:
                subj = SUBJECTS[lm[len(name) + 1:]]
                rows = [r for r in rows if (r.get("type") or r.get("subject")) in (subj[1], subj[0])]
            if rows:
                parts[split], count[split] = os.path.abspath(os.path.join(workdir, f"{lm}.{split}.jsonl")), len(rows)
                _write_jsonl(parts[split], rows)
        if main not in parts:
            continue
        for split in std.splits[1:]:   # a shot count given (lm-eval's harness): enough examples?
            if shots and split in parts:
                check_shots(lm, shots, count[split], split, where[split])
        for split in std.splits[1:]:   # the few-shot split: lm-eval opens it even at 0 shots
            if split not in parts:
                if shots != 0:
                    raise UsageError(f"{name}'s few-shot examples come from its {split!r} split, which was not "
                                     f"found ({why[split] or 'no rows of this subject'}): pass a folder holding "
                                     f"{main}.jsonl and {split}.jsonl as --source, put {std.data}_{split}/ beside "
                                     f"{std.data}_{main}/ in $RLVR_S3_DATASETS or $RLVR_DATA_DIR, or use --shots 0")
                parts[split] = parts[main]
        local = f"{prefix}{lm}"
        files = "".join(f"    {s}: {p}\n" for s, p in parts.items())
        with open(os.path.join(workdir, f"{local}.yaml"), "w") as fh:
            fh.write(f"include: {yaml_for(lm)}\ntask: {local}\ntag: []\ndataset_path: json\ndataset_name: null\n"
                     f"dataset_kwargs:\n  data_files:\n{files}")
        out[lm] = local
    return out


def _built(name: str, source: str | None, shots: int | None = None) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(include path, ((stock name, task name), ...)) for a standard task, built once per process
    and place of its rows (a 0-shot build may stand the evaluated rows in for a missing
    few-shot split)."""
    return _built_once(name, rows_key(source), source, shots == 0)


@functools.lru_cache(maxsize=16)
def _built_once(name: str, key: str, source: str | None, zero_shot: bool) -> tuple[str, tuple[tuple[str, str], ...]]:
    workdir = tempfile.mkdtemp(prefix=f"rlvr-lmeval-{name}-")
    prefix = "rlvr_local_" + hashlib.sha1(f"{name}\0{key}\0{zero_shot}".encode()).hexdigest()[:10] + "_"
    return workdir, tuple(local_tasks(name, source, workdir, prefix, shots=0 if zero_shot else None).items())


_ADDED: set[str] = set()


def load(name: str, shots: int | None = None, seed: int = 42, source: str | None = None) -> dict:
    """{stock lm-eval name: configured lm-eval Task} as `lm_eval --num_fewshot N --seed SEED` sets
    it up; built once per process and arguments (build_all_requests rebuilds the instances).
    shots None: rlvr-eval's default count of the task (StdTask.shots, as --harness lm-eval and
    --jobs use; gsm8k 8, where lm-eval's own yaml says 5)."""
    shots = standard(name).shots if shots is None else shots
    key = (name, shots, seed, rows_key(source))
    if key not in _LOADED:
        _LOADED[key] = _load(name, shots, seed, source)
    return _LOADED[key]


_LOADED: dict[tuple, dict] = {}


def _load(name: str, shots: int | None, seed: int, source: str | None) -> dict:
    std = standard(name)
    if std.code:
        _offline_code_eval()
    if std.verifier == "ifeval":
        _packaged_nltk_data()
    include, names = _built(name, source, shots)
    tm = task_manager()
    if include not in _ADDED:
        _add_path(tm, include)
        _ADDED.add(include)
    flat = tm.load([t for _, t in names])["tasks"]
    tasks = {}
    for stock, local in names:
        task = flat[local]
        if shots is not None:
            task.set_config("num_fewshot", shots)
        n = task.config.num_fewshot or 0
        split = task.config.fewshot_split
        if n and split:   # few-shot examples drawn from a split of the rows (not fixed exemplars)
            check_shots(stock, n, len(task.fewshot_docs()), split, source or "the data found")
        task.set_fewshot_seed(seed)
        tasks[stock] = task
    return tasks


# --- prompts -----------------------------------------------------------------------------------

DEFAULT_MAX_GEN_TOKS = 256   # lm-eval's vLLM/HF default when a task's generation_kwargs set none


def records(name: str, shots: int | None = None, seed: int = 42, source: str | None = None,
            limit: int | None = None) -> list[dict]:
    """One prompt record per document, in lm-eval's order (subject by subject for MATH);
    `limit` as lm-eval's --limit (the first N documents of each subtask)."""
    std = standard(name)
    out = []
    for stock, task in load(name, shots, seed, source).items():
        task.set_fewshot_seed(seed)   # a fresh sampler: the same examples on every build
        task.build_all_requests(limit=limit, rank=0, world_size=1)
        for inst in sorted(task.instances, key=lambda i: i.doc_id):
            ctx, gen = inst.args[0], dict(inst.args[1])
            rec = {"id": f"{stock}/{inst.doc_id}", "dataset": name, "verifier": std.verifier, "prompt": ctx,
                   "stop": list(gen.get("until") or []), "max_tokens": int(gen.get("max_gen_toks", DEFAULT_MAX_GEN_TOKS)),
                   "lm_eval": {"task": stock, "doc_id": inst.doc_id, "num_fewshot": task.config.num_fewshot}}
            rec.update(_truth(std, inst.doc))
            if std.subjects:
                rec["subject"] = stock[len(name) + 1:]
            out.append(rec)
    return out


def _truth(std: StdTask, doc: dict) -> dict:
    """The ground-truth fields rlvr's own verifier reads."""
    if std.data == "gsm8k":
        from rlvr.textutil import gsm8k_gold

        return {"answer": gsm8k_gold(str(doc["answer"]))}
    if std.data == "math":
        from rlvr.textutil import last_boxed

        ans = last_boxed(doc.get("solution") or "")
        return {"answer": ans if ans is not None else str(doc.get("answer", ""))}
    if std.data == "mbpp":
        return {"tests": list(doc["test_list"]), "test_setup": doc.get("test_setup_code") or ""}
    if std.data == "humaneval":
        return {"prefix": doc["prompt"], "test": doc["test"], "entry_point": doc["entry_point"]}
    return {"instruction_id_list": list(doc["instruction_id_list"]),
            "kwargs": [{k: v for k, v in (kw or {}).items() if v is not None} for kw in doc["kwargs"]]}


# --- scores ------------------------------------------------------------------------------------

def score(name: str, recs: list[dict], shots: int | None = None, seed: int = 42, source: str | None = None,
          limit: int | None = None) -> list[dict]:
    """lm-eval's per-sample metrics for completed records (first completion of each): its
    filters, then process_results, exactly as lm-eval's evaluator runs them. Returns
    [{"id", "task", "doc_id", "metrics": {"METRIC,FILTER": value}, "filtered": {FILTER: text}}]."""
    tasks = load(name, shots, seed, source)
    by_key = {(r["lm_eval"]["task"], r["lm_eval"]["doc_id"]): r for r in recs}
    out = []
    for stock, task in tasks.items():
        task.set_fewshot_seed(seed)
        task.build_all_requests(limit=limit, rank=0, world_size=1)
        insts = [i for i in task.instances if (stock, i.doc_id) in by_key]
        if not insts:
            continue
        for inst in insts:
            comps = by_key[(stock, inst.doc_id)].get("completions") or [""]
            inst.resps = [comps[0] if comps[0] is not None else ""]
            inst.filtered_resps = {}
        task._instances = insts
        task.apply_filters()
        for inst in sorted(insts, key=lambda i: i.doc_id):
            metrics, filtered = {}, {}
            for fkey, resp in inst.filtered_resps.items():
                for m, v in task.process_results(inst.doc, [resp]).items():
                    metrics[f"{m},{fkey}"] = _plain(v)
                filtered[fkey] = resp if isinstance(resp, str) else str(resp)
            out.append({"id": f"{stock}/{inst.doc_id}", "task": stock, "doc_id": inst.doc_id, "metrics": metrics,
                        "filtered": filtered})
    return out


def _plain(v):
    """numpy scalars (lm-eval's metrics return some) as Python numbers, lists element-wise."""
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if hasattr(v, "item") and type(v) not in (bool, int, float, str):   # numpy.float64 subclasses float
        return v.item()
    return v


def aggregate(name: str, scored: list[dict], rlvr: dict[str, float] | None = None) -> dict:
    """Summary metrics with lm-eval's aggregations: {"METRIC,FILTER": value} over all documents
    (MATH: the size-weighted mean of the subjects, as lm-eval's groups), and per subject."""
    from lm_eval.api.registry import get_aggregation

    std = standard(name)
    agg_fns: dict[str, Callable] = {}
    for m in {k.split(",")[0] for s in scored for k in s["metrics"]}:
        agg_fns[m] = _agg(std, m) or get_aggregation("mean")

    def agg(rows: list[dict]) -> dict:
        keys = list(dict.fromkeys(k for s in rows for k in s["metrics"]))
        return {k: float(agg_fns[k.split(",")[0]]([s["metrics"][k] for s in rows if k in s["metrics"]]))
                for k in keys}

    out = {"all": agg(scored)}
    if std.subjects:
        for subj in SUBJECTS:
            rows = [s for s in scored if s["task"] == f"{name}_{subj}"]
            if rows:
                out[subj] = agg(rows)
    return out


def _agg(std: StdTask, metric: str):
    if metric.startswith("inst_level"):
        from lm_eval.tasks.ifeval.utils import agg_inst_level_acc

        return agg_inst_level_acc
    return None
