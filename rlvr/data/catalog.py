"""The datasets rlvr-data knows: where each lives and how a raw row becomes a record.

Each Spec turns one raw row (the dataset's own field names, as on the Hugging Face hub or in
the original release files) into a record with `id`, `dataset`, `verifier`, the ground truth
fields of the record contract, and a `question` (the task text the prompt templates wrap).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.errors import RowError  # noqa: F401 - rlvr.data.catalog.RowError, as before
from rlvr.textutil import gsm8k_gold, last_boxed


@dataclass(frozen=True)
class Spec:
    name: str
    hub: str
    hub_config: str | None
    verifier: str
    default_split: str
    convert: Callable[[dict, int, str], dict]
    template: str = "plain"          # default prompt template
    fewshot_split: str | None = None
    hub_splits: dict[str, str] = field(default_factory=dict)  # our split -> hub split
    split_filter: Callable[[dict, str], bool] | None = None   # rows of a split inside one file
    solution: Callable[[dict], str] | None = None            # worked solution, for few-shot
    hub_configs: tuple[str, ...] = ()  # hub configurations loaded one by one and concatenated
    aliases: tuple[str, ...] = ()      # other names of the dataset (configs, folders on S3 and in RLVR_DATA_DIR)
    splits: tuple[str, ...] = ()       # its splits, when it has more than default_split: a file whose name names
    #                                    no split (gsm8k/data.jsonl) then serves none of them (rlvr.data.sources)

    def serves_splitless(self, split: str) -> bool:
        """Whether a file whose name names no split may hold `split`'s rows: the dataset has that
        one split, or its rows say their split (split_filter: MBPP's one file)."""
        return self.split_filter is not None or (not self.splits and split == self.default_split)


def _get(row: dict, *names: str):
    for n in names:
        if n in row and row[n] is not None:
            return row[n]
    raise RowError(f"missing field {' or '.join(names)!r}", names[0])


# --- math -----------------------------------------------------------------------------------

def _gsm8k(row: dict, i: int, split: str) -> dict:
    ans = _get(row, "answer")
    if "####" not in str(ans):
        raise RowError("'answer' has no '#### N' final answer", "answer")
    if not gsm8k_gold(str(ans)).strip():
        raise RowError("'answer' has nothing after '####'", "answer")
    return {"id": f"gsm8k/{split}/{i}", "question": _get(row, "question"), "answer": gsm8k_gold(str(ans))}


def _gsm8k_solution(row: dict) -> str:
    sol = str(row["answer"])
    body, _, _ = sol.rpartition("####")
    return f"{body.strip()}\nThe answer is {gsm8k_gold(sol)}."


def _math(row: dict, i: int, split: str) -> dict:
    sol = row.get("solution") or ""
    ans = row.get("answer")
    if ans is None:
        ans = last_boxed(sol)
    if ans is None:
        raise RowError("no 'answer' and no \\boxed{} in 'solution'", "answer")
    rid = row.get("unique_id") or f"{split}/{i}"
    rec = {"id": f"math/{rid}", "question": _get(row, "problem"), "answer": str(ans)}
    for k in ("level", "subject", "type"):
        if row.get(k) is not None:
            rec[k] = row[k]
    return rec


def _math500(row: dict, i: int, split: str) -> dict:
    rec = _math(row, i, split)
    rec["id"] = "math500/" + rec["id"].split("/", 1)[1]
    return rec


def _math_solution(row: dict) -> str:
    return str(row.get("solution") or "")


# --- code -----------------------------------------------------------------------------------

def _mbpp(row: dict, i: int, split: str) -> dict:
    tests = _get(row, "test_list")
    return {"id": f"mbpp/{_get(row, 'task_id')}", "question": _get(row, "text", "prompt"), "tests": list(tests),
            "test_setup": row.get("test_setup_code") or "", "stop": ["[DONE]"], "_code": row.get("code")}


def _mbpp_split(row: dict, split: str) -> bool:
    tid = int(row.get("task_id", 0))
    ranges = {"prompt": (1, 10), "test": (11, 510), "validation": (511, 600), "train": (601, 974)}
    lo, hi = ranges.get(split, (0, 10**9))
    return lo <= tid <= hi


def _humaneval(row: dict, i: int, split: str) -> dict:
    prompt = _get(row, "prompt")
    return {"id": _get(row, "task_id"), "question": prompt, "prefix": prompt, "test": _get(row, "test"),
            "entry_point": _get(row, "entry_point")}


# --- instruction following ------------------------------------------------------------------

def _clean_kwargs(kwargs: list) -> list[dict]:
    return [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]


def _ifeval(row: dict, i: int, split: str, name: str = "ifeval") -> dict:
    key = row.get("key", i)
    return {"id": f"{name}/{key}", "question": _get(row, "prompt"),
            "instruction_id_list": list(_get(row, "instruction_id_list")), "kwargs": _clean_kwargs(_get(row, "kwargs"))}


def _ifbench(row: dict, i: int, split: str) -> dict:
    return _ifeval(row, i, split, "ifbench")


def _if_multi(row: dict, i: int, split: str) -> dict:
    if "instruction_id_list" in row:
        return _ifeval(row, i, split, "if_multi")
    gt = _get(row, "ground_truth")
    if isinstance(gt, str):
        gt = json.loads(gt)
    if isinstance(gt, list):
        gt = gt[0]
    ids = gt.get("instruction_id") or gt.get("instruction_id_list")
    kwargs = gt.get("kwargs") or [{} for _ in ids]
    msgs = row.get("messages")
    question = msgs[-1]["content"] if msgs else _get(row, "prompt")
    return {"id": f"if_multi/{row.get('key', i)}", "question": question, "instruction_id_list": list(ids),
            "kwargs": _clean_kwargs(kwargs)}


# --- the users' training and evaluation sets --------------------------------------------------

def _deepscaler(row: dict, i: int, split: str) -> dict:
    """agentica-org/DeepScaleR-Preview-Dataset: problem, answer (and a solution)."""
    return {"id": f"deepscaler/{split}/{i}", "question": str(_get(row, "problem")).strip(),
            "answer": str(_get(row, "answer"))}


def _competition(name: str):
    """AIME-style rows (problem, answer; AI-MO/aimo-validation-aime, ByteDance-Seed/BeyondAIME)."""

    def convert(row: dict, i: int, split: str) -> dict:
        rid = row.get("id", i)
        return {"id": f"{name}/{rid}", "question": str(_get(row, "problem")).strip(), "answer": str(_get(row, "answer"))}

    return convert


def _apps(row: dict, i: int, split: str) -> dict | None:
    """codeparrot/apps: stdin/stdout or call-based tests (rlvr.data.apps); rows without tests are skipped."""
    from rlvr.data import apps

    try:
        tests = apps.tests_for(row)
    except (ValueError, TypeError) as e:
        raise RowError(f"unreadable input_output: {e}", "input_output") from None
    if tests is None:
        return None
    rid = row.get("problem_id", row.get("id", i))
    starter = row.get("starter_code") or ""
    rec = {"id": f"apps/{split}/{rid}", "question": apps.prompt_text(str(_get(row, "question")), starter),
           "difficulty": row.get("difficulty") or "unknown", **tests}
    if starter.strip():
        rec["starter_code"] = starter
    return rec


def _rlvr_ifeval(row: dict, i: int, split: str) -> dict:
    """allenai/RLVR-IFeval: a user message and a `func_name` ground truth, written as the record's
    `constraint` (the if_functions verifier, as AllenAI's mixture's IF rows)."""
    from rlvr.verifiers.if_functions import parse_constraint

    msgs = _get(row, "messages")
    user = [m.get("content") for m in msgs if isinstance(m, dict) and m.get("role") == "user"]
    if not user:
        raise RowError("no user message", "messages")
    try:
        c = parse_constraint(_get(row, "ground_truth"))
    except ValueError as e:
        raise RowError(str(e), "ground_truth") from None
    rec = {"id": f"rlvr_ifeval/{split}/{i}", "question": user[0],
           "constraint": {k: v for k, v in c.items() if v is not None}}
    if row.get("constraint_type"):
        rec["constraint_type"] = row["constraint_type"]
    return rec


LETTERS = "ABCDEFGHIJ"


def _mmlu(row: dict, i: int, split: str) -> dict:
    """cais/mmlu: question, subject, choices, answer (the choice's index)."""
    choices = list(_get(row, "choices"))
    ans = _get(row, "answer")
    if isinstance(ans, str) and ans.strip().upper() in LETTERS[:len(choices)]:
        idx = LETTERS.index(ans.strip().upper())
    elif isinstance(ans, int) and not isinstance(ans, bool) and 0 <= ans < len(choices):
        idx = ans
    else:
        raise RowError(f"answer {ans!r} names none of {len(choices)} choices", "answer")
    if not 2 <= len(choices) <= len(LETTERS):
        raise RowError(f"{len(choices)} choices (2 to {len(LETTERS)} are supported)", "choices")
    return {"id": f"mmlu/{row.get('subject') or 'all'}/{split}/{i}", "question": str(_get(row, "question")).strip(),
            "choices": [str(c) for c in choices], "answer": LETTERS[idx], "subject": row.get("subject") or "unknown"}


# --- AllenAI's mixed RLVR data: each row names its own verifier (rlvr.data.allenai) -------------

def _allenai(row: dict, i: int, split: str) -> dict:
    from rlvr.data.allenai import convert

    return convert(row, i, split)


# --- the toy task of the CPU demo -----------------------------------------------------------

def toy_rows(n: int = 512, seed: int = 0) -> list[dict]:
    """Synthetic prompts whose verifiable answer is always 7 (graded by the math verifier's
    last-number extraction): a task a tiny random model can learn in minutes on a CPU."""
    import random

    rng = random.Random(seed)
    words = "apples pears plums figs stars boats cats dogs".split()
    rows = []
    for i in range(n):
        a = rng.randint(0, 7)
        rows.append({"id": i, "question": f"{a} {rng.choice(words)} plus {7 - a} {rng.choice(words)} make", "answer": "7"})
    return rows


def _toy(row: dict, i: int, split: str) -> dict:
    return {"id": f"toy/{split}/{row.get('id', i)}", "question": _get(row, "question"), "answer": str(_get(row, "answer"))}


MATH_SUBJECTS = ("algebra", "counting_and_probability", "geometry", "intermediate_algebra", "number_theory",
                 "prealgebra", "precalculus")

SPECS: dict[str, Spec] = {s.name: s for s in [
    Spec("gsm8k", "openai/gsm8k", "main", "math", "test", _gsm8k, template="qa", fewshot_split="train",
         solution=_gsm8k_solution, splits=("train", "test")),
    # one hub configuration per subject, none for all: the seven are loaded in this order
    Spec("math", "EleutherAI/hendrycks_math", None, "math", "test", _math, template="boxed", fewshot_split="train",
         solution=_math_solution, hub_configs=MATH_SUBJECTS, splits=("train", "test")),
    Spec("math500", "HuggingFaceH4/MATH-500", None, "math", "test", _math500, template="boxed",
         solution=_math_solution),
    Spec("mbpp", "google-research-datasets/mbpp", "full", "code", "test", _mbpp, template="mbpp",
         fewshot_split="prompt", split_filter=_mbpp_split,
         splits=("train", "test", "validation", "prompt")),
    Spec("humaneval", "openai/openai_humaneval", None, "code", "test", _humaneval, template="humaneval"),
    Spec("ifeval", "google/IFEval", None, "ifeval", "train", _ifeval),
    Spec("if_multi", "allenai/IF_multi_constraints_upto5", None, "if_multi", "train", _if_multi,
         aliases=("if_multi_constraints",)),
    Spec("ifbench", "allenai/IFBench_test", None, "ifbench", "train", _ifbench),
    Spec("deepscaler", "agentica-org/DeepScaleR-Preview-Dataset", None, "math", "train", _deepscaler,
         template="boxed"),
    Spec("aime", "AI-MO/aimo-validation-aime", None, "math", "train", _competition("aime"), template="minerva"),
    Spec("beyondaime", "ByteDance-Seed/BeyondAIME", None, "math", "test", _competition("beyondaime"),
         template="minerva"),
    Spec("apps", "codeparrot/apps", None, "code", "test", _apps, template="plain", splits=("train", "test")),
    Spec("rlvr_ifeval", "allenai/RLVR-IFeval", None, "if_functions", "train", _rlvr_ifeval),
    Spec("mmlu", "cais/mmlu", "all", "choice", "test", _mmlu, template="mmlu",
         splits=("test", "validation", "dev", "auxiliary_train")),
    Spec("toy", "", None, "math", "train", _toy, template="plain"),
    # the verifier is each row's own (its `dataset` column); --source names any of AllenAI's mixtures
    Spec("allenai", "allenai/RLVR-GSM-MATH-IF-Mixed-Constraints", None, "", "train", _allenai, template="plain"),
]}

ALIASES: dict[str, str] = {a: s.name for s in SPECS.values() for a in s.aliases}


def canonical(name: str) -> str:
    """A dataset's own name for any name it goes by (if_multi_constraints -> if_multi)."""
    return ALIASES.get(name, name)


def split_name(value: str, sep: str = "=") -> tuple[str, str, str]:
    """value.partition(sep) with the key under its dataset's own name: the one place where every
    NAME=VALUE option (--source, --order, --template, --max-tokens, ...) maps a dataset's other
    names (a bare VALUE, with no separator, is left as it is)
    (``if_multi_constraints=f.jsonl`` -> ``("if_multi", "=", "f.jsonl")``)."""
    key, s, rest = value.partition(sep)
    return (canonical(key) if s else key), s, rest


def benchmark_name(bench: str) -> str:
    """A -b value (NAME or NAME:SHOTS) under its dataset's own name (if_multi_constraints:0 ->
    if_multi:0)."""
    name, sep, shots = bench.partition(":")
    return canonical(name) + sep + shots


def canonical_id(rid: str) -> str:
    """A prompt id under its dataset's own name (an order file's ``if_multi_constraints/k2`` ->
    ``if_multi/k2``, the id rlvr's records carry)."""
    head, s, rest = rid.partition("/")
    return f"{canonical(head)}/{rest}" if s and head in ALIASES else rid
