"""AllenAI's mixed RLVR datasets (Tulu 3's RLVR-GSM-MATH-IF-Mixed-Constraints, the OLMo 3
RLVR and thinker mixtures): one row a prompt, ``dataset`` naming its verifier.

    rec = convert(row, 0, "train")

A row, as open-instruct reads it (open_instruct/dataset_transformation.py, rlvr_tokenize):
``messages`` (the prompt as chat messages; a trailing assistant message is a reference
answer, dropped) or ``prompt`` (one string), ``ground_truth`` (a string, or a list with one
entry per verifier) and ``dataset`` (the verifier's name, or a list of them). Each row
becomes a record for the rlvr verifier of its kind (open-instruct's ground_truth_utils
names on the left):

  gsm8k, math, strict_math   verifier math: ``answer`` is the ground truth and
                             ``reference_verifier`` the kind, so ``math.mode: allenai``
                             scores the row by AllenAI's own rule (rlvr.verifiers.allenai_rules)
  ifeval (Tulu 3 form)       ``{"func_name": ..., args}`` JSON: verifier if_functions,
                             ``constraint`` the object (rlvr.verifiers.if_functions)
  ifeval (IFEvalG form)      ``[{"instruction_id": [...], "kwargs": [...]}]`` (a Python or
                             JSON literal): verifier if_multi, ``instruction_id_list`` and
                             ``kwargs``
  ifeval_old                 the Tulu 3 form under its newer name
  code                       a list of assert statements (a JSON list, or open-instruct's
                             base64 + zlib encoding of one): verifier code, ``tests``
  code_stdio                 a list of ``{"input": ..., "output": ...}`` tests (the same
                             encodings): verifier code in its stdin/stdout mode,
                             ``stdio_tests``; ``code.mode: allenai`` grades them as
                             open-instruct does (every test runs, outputs compared line by
                             line, the pass rate as ``score``: rlvr.verifiers.code)

A row whose ground truth its verifier would reject (an IFEvalG instruction id or argument it
does not know, a code test that is not valid Python) is refused the same way, naming the
field ``ground_truth``: the check rlvr-verify makes of every record, made when the row is read.

  general-quality,           verifier judge (rlvr.verifiers.judge): the chat kinds of the
  general-quality_ref        thinker mixtures, graded by an LLM judge; ``answer`` is the
                             reference answer when the row has one. rlvr-verify refuses
                             them, at their line, unless a judge is configured (--judge URL;
                             rlvr-train's verify.judge)

Anything else (string matchers, a row graded by several verifiers at once) is refused with a line naming the file, the row
and the kind, never dropped silently; ``--kinds gsm8k,math,ifeval`` (``data.kinds``) selects
the rows of the kinds named, by choice, and keeps each row's id and line number. The record's ``dataset`` is ``allenai/<kind>`` (per-kind
accuracy in summaries), its ``id`` ``allenai/<row id or index>``; the prompt is the chat
messages with --chat (their own system message, unless --system replaces it) and the last
user message as one string without.
"""

from __future__ import annotations

import ast
import base64
import io
import json
import pickle
import zlib

from rlvr.errors import RowError

HUB = "allenai/RLVR-GSM-MATH-IF-Mixed-Constraints"
MATH_KINDS = ("gsm8k", "math", "strict_math")
JUDGE_KINDS = ("general-quality", "general-quality_ref")
KINDS = (*MATH_KINDS, "ifeval", "ifeval_old", "code", "code_stdio", *JUDGE_KINDS)
_WHY_NOT: dict[str, str] = {}


def _prompt(row: dict) -> tuple[list[dict] | None, str]:
    msgs = row.get("messages")
    if msgs is not None:
        if not isinstance(msgs, list) or not msgs or not all(
                isinstance(m, dict) and isinstance(m.get("role"), str) and isinstance(m.get("content"), str)
                for m in msgs):
            raise RowError("'messages' must be a non-empty list of {role, content} objects", "messages")
        if len(msgs) > 1 and msgs[-1]["role"] == "assistant":
            msgs = msgs[:-1]
        users = [m["content"] for m in msgs if m["role"] == "user"]
        if not users:
            raise RowError("'messages' holds no user message", "messages")
        return [{"role": m["role"], "content": m["content"]} for m in msgs], users[-1]
    p = row.get("prompt")
    if not isinstance(p, str) or not p:
        raise RowError("missing field 'messages' (or a 'prompt' string)", "messages")
    return None, p


def _verifier_and_truth(row: dict) -> tuple[object, object]:
    """(dataset, ground_truth) of a single-verifier row: a one-entry ``dataset`` list comes
    with a one-entry ``ground_truth`` list (open-instruct's multi-verifier form); a string
    ``dataset`` takes ``ground_truth`` as it is (a code row's list of tests included)."""
    kind, gt = row.get("dataset"), row.get("ground_truth")
    if isinstance(kind, list):
        if len(kind) != 1:
            raise RowError(f"rows graded by several verifiers ({', '.join(map(str, kind))}) are not supported",
                           "dataset")
        kind = kind[0]
        if isinstance(gt, list):
            if len(gt) != 1:
                raise RowError(f"'ground_truth' has {len(gt)} entries for one verifier", "ground_truth")
            gt = gt[0]
    return kind, gt


def _restricted_loads(data: bytes):
    """Unpickle plain data only (lists, dicts, strings, numbers): a pickle that names any
    class or function is refused rather than run."""

    class Plain(pickle.Unpickler):
        def find_class(self, module, name):
            raise pickle.UnpicklingError(f"refusing {module}.{name}")

    return Plain(io.BytesIO(data)).load()


def _decode_list(value, kind: str, what: str) -> list:
    """A code row's ground truth as a list: the list itself, its JSON text, or open-instruct's
    base64 + zlib + pickle encoding of it (unpickled as plain data only)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            try:
                value = _restricted_loads(zlib.decompress(base64.b64decode(value, validate=True)))
            except Exception as e:  # noqa: BLE001 - any decoding failure is this row's
                raise RowError(f"'ground_truth' is neither a JSON list of {what} nor base64 + zlib of one ({e})",
                               "ground_truth") from None
    if not isinstance(value, list) or not value:
        raise RowError(f"a {kind} row's 'ground_truth' must be a non-empty list of {what}", "ground_truth")
    return value


def decode_tests(value) -> list[str]:
    """A code row's tests: a list of assert statements, its JSON text, or open-instruct's
    base64 + zlib + pickle encoding of one (unpickled as plain data only)."""
    tests = _decode_list(value, "code", "tests")
    if not all(isinstance(t, str) for t in tests):
        raise RowError("a code row's 'ground_truth' must be a non-empty list of assert statements", "ground_truth")
    return tests


def _stdio_text(v, where: str) -> str:
    if isinstance(v, list) and all(isinstance(x, str) for x in v):
        return "\n".join(v)   # a list of lines, as open-instruct's runner joins an input given so
    if not isinstance(v, str):
        raise RowError(f"{where} must be a string, got {type(v).__name__}", "ground_truth")
    return v


def decode_stdio_tests(value) -> list[dict]:
    """A code_stdio row's tests as ``[{"input", "output"}]``: open-instruct's encodings (the
    list, its JSON text, base64 + zlib + pickle of it); other keys of a test are dropped."""
    tests = _decode_list(value, "code_stdio", "stdin/stdout tests")
    out = []
    for k, t in enumerate(tests):
        if not isinstance(t, dict) or "input" not in t or "output" not in t:
            raise RowError(f"stdin/stdout test {k} must be an object with input and output", "ground_truth")
        out.append({"input": _stdio_text(t["input"], f"test {k}'s input"),
                    "output": _stdio_text(t["output"], f"test {k}'s output")})
    return out


def _literal(text: str):
    try:
        return json.loads(text)
    except ValueError:
        pass
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        raise RowError("'ground_truth' of an ifeval row is neither JSON nor a Python literal", "ground_truth") from None


def _ifeval(gt) -> dict:
    value = _literal(gt) if isinstance(gt, str) else gt
    if isinstance(value, list):
        if len(value) != 1:
            raise RowError(f"an ifeval ground truth list must hold one entry, got {len(value)}", "ground_truth")
        value = value[0]
        if isinstance(value, str):
            value = _literal(value)
    if not isinstance(value, dict):
        raise RowError("an ifeval ground truth must be an object", "ground_truth")
    if "func_name" in value:
        from rlvr.verifiers.if_functions import parse_constraint

        try:
            parse_constraint(value)
        except ValueError as e:
            raise RowError(str(e), "ground_truth") from None
        return {"verifier": "if_functions", "constraint": {k: v for k, v in value.items() if v is not None}}
    ids = value.get("instruction_id") or value.get("instruction_id_list")
    if not isinstance(ids, list) or not ids or not all(isinstance(x, str) for x in ids):
        raise RowError("an ifeval ground truth needs func_name or a list of instruction_id", "ground_truth")
    kwargs = value.get("kwargs") or [{} for _ in ids]
    if not isinstance(kwargs, list) or len(kwargs) != len(ids):
        raise RowError(f"'kwargs' must hold one object per instruction ({len(ids)})", "ground_truth")
    kwargs = [{k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs]
    return {"verifier": "if_multi", "instruction_id_list": list(ids), "kwargs": kwargs}


def row_kind(row: dict) -> str | None:
    """A row's kind (its verifier's name, lower case), or None when it has no single one."""
    kind = row.get("dataset")
    if isinstance(kind, list) and len(kind) == 1:
        kind = kind[0]
    return kind.lower() if isinstance(kind, str) else None


def convert(row: dict, i: int, split: str) -> dict:
    """One AllenAI row -> a record (see the module docstring); RowError when rlvr cannot
    verify it, naming the field."""
    kind_raw, gt = _verifier_and_truth(row)
    if not isinstance(kind_raw, str) or not kind_raw:
        raise RowError("missing field 'dataset' (the row's verifier)", "dataset")
    kind = kind_raw.lower()
    if kind not in KINDS:
        why = _WHY_NOT.get(kind, "rlvr has no verifier for it")
        raise RowError(f"kind {kind_raw!r} cannot be verified here: {why} (verifiable kinds: {', '.join(KINDS)})",
                       "dataset")
    if gt is None and kind not in JUDGE_KINDS:
        raise RowError("missing field 'ground_truth'", "ground_truth")
    msgs, question = _prompt(row)
    rid = row.get("id", row.get("key"))
    rid = f"allenai/{rid}" if isinstance(rid, (str, int)) and not isinstance(rid, bool) else f"allenai/{split}/{i}"
    rec: dict = {"id": rid, "dataset": f"allenai/{kind}", "question": question}
    if msgs is not None:
        rec["_messages"] = msgs
    if kind in MATH_KINDS:
        if isinstance(gt, (list, dict)) or str(gt).strip() == "":
            raise RowError(f"a {kind} row's 'ground_truth' must be the answer", "ground_truth")
        rec.update(verifier="math", answer=str(gt), reference_verifier=kind)
    elif kind in ("ifeval", "ifeval_old"):
        rec.update(_ifeval(gt))
    elif kind in JUDGE_KINDS:
        rec["verifier"] = "judge"
        if isinstance(gt, str) and gt.strip():
            rec["answer"] = gt   # the reference answer the rubric shows as {answer}
        return rec
    elif kind == "code_stdio":
        rec.update(verifier="code", stdio_tests=decode_stdio_tests(gt))
    else:
        rec.update(verifier="code", tests=decode_tests(gt))
    return _checked(rec)


def _checked(rec: dict) -> dict:
    """The record, once its verifier accepts its ground truth (the check rlvr-verify makes
    of every record: an IFEvalG instruction id it knows, its arguments, code tests that
    parse); RowError naming ground_truth otherwise, so the row is refused where it is read
    rather than failing verification later."""
    from rlvr.verifiers import get

    problem = get(rec["verifier"]).check_record(rec)
    if problem is not None:
        raise RowError(problem[1], "ground_truth")
    return rec
