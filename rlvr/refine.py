"""Feedback loops as a pipeline step: verified records in, new prompt records out for the
completions that failed, each asking the model again with its failed answer and what the
verifier said about it (rlvr-refine).

    for rec in refine(records, Refiner(per_prompt=1)):
        ...   # a prompt record: rlvr-rollout's input

A completion fails when its reward is below ``threshold`` (1.0: anything short of full
marks). Completions whose verdict is ``error`` (the verifier could not grade: nothing the
model can fix) are skipped. Of a record's failed completions the ``per_prompt`` best
(highest reward first, then in order) each give one record: the original record's own fields
(verifier, answer, tests, constraints: so rlvr-verify grades the new answer the same way)
without what rollout and verification added, and

- ``prompt``: the template with ``{prompt}`` (the original prompt; with chat messages, the
  last user message, which the rendering replaces), ``{completion}`` (the failed answer, its
  thinking cut off), ``{feedback}`` (the verifier's verdict in words) and ``{status}``;
- ``id``: ``<id>/refine-<k>`` (k the completion's index), unique, stable, and readable back
  to its origin, so ``rlvr-select`` can keep refined successes for SFT (STaR);
- ``refine``: ``{"of": <id>, "root": <first id>, "completion_index": k, "round": n,
  "status": ..., "reward": ..., "prompt": <the first record's prompt>}``, n counting refine
  rounds; ``rlvr-select --original-prompt`` pairs a refined success with that prompt.

The feedback says what the verifier measured, never the reference answer: the instructions
not followed (instruction following), the failing test and the program's output (code), that
the answer is wrong or missing and the expected format (math, choice), the judge's score and
reply (the LLM judge), an unfinished thinking block.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator

from rlvr.records import is_error_record
from rlvr.verification.thinking import record_mode, split

DEFAULT_TEMPLATE = """{prompt}

A previous answer to this request was:

{completion}

It was not accepted: {feedback}

Write a new, complete answer that fixes this."""

# what rlvr-rollout, rlvr-verify and rlvr-train's traces/rollouts.jsonl add to a prompt record:
# not part of a new prompt
GENERATED = ("completions", "finish_reasons", "stop_reasons", "prompt_tokens", "completion_tokens", "logprobs",
             "completion_token_ids", "prompt_token_ids", "generation", "rewards", "verdicts", "token_versions",
             "policy_version", "policy_version_end", "step", "epoch")


def check_template(text: str) -> str:
    """The template, once it formats with the four fields; ValueError naming the problem."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the refine template is empty")
    try:
        text.format(prompt="p", completion="c", feedback="f", status="s")
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"the refine template is not valid ({type(e).__name__}: {e}); it may use {{prompt}}, "
                         "{completion}, {feedback}, {status}, and {{ }} for literal braces") from None
    return text


def _instruction(iid: str, kw) -> str:
    words = iid.split(":", 1)[-1].replace("_", " ")
    args = ", ".join(f"{k}={v}" for k, v in (kw or {}).items() if v is not None) if isinstance(kw, dict) else ""
    return f"{words} ({iid}{': ' + args if args else ''})"


def feedback(rec: dict, verdict: dict) -> str:
    """The verifier's verdict on one completion, in words for the model."""
    status = verdict.get("status")
    if status == "unfinished_thinking":
        return "the reasoning never finished (the thinking block was not closed), so there was no answer."
    if status == "no_answer":
        if rec.get("verifier") == "math":
            return "no final answer was found. End with the final answer in \\boxed{}."
        if rec.get("verifier") == "choice":
            return f"no answer letter was found. Answer with one of {verdict.get('letters') or 'the letters given'}."
        return "the answer was empty."
    if status == "judge_unparsable":
        return "the grader could not score it."
    j = verdict.get("judge")
    if isinstance(j, dict) and "score" in verdict and "rule" not in verdict and "gated" not in verdict:
        reply = (j.get("reply") or "").strip()
        return f"a grader scored it {verdict['score']:.2f} out of 1" + (f" and said: {reply[:1000]}" if reply else ".")
    parts: list[str] = []
    ids = verdict.get("instructions") or rec.get("instruction_id_list")
    graded = verdict.get("strict")
    if isinstance(ids, list) and isinstance(graded, list) and len(graded) == len(ids):
        kws = rec.get("kwargs") if isinstance(rec.get("kwargs"), list) else [None] * len(ids)
        missed = [_instruction(i, kws[n] if n < len(kws) else None) for n, (i, ok) in enumerate(zip(ids, graded))
                  if not ok]
        if missed:
            parts.append("these instructions were not followed:\n" + "\n".join(f"- {m}" for m in missed))
    elif verdict.get("function") and isinstance(rec.get("constraint"), dict):
        args = {k: v for k, v in rec["constraint"].items() if k != "func_name"}
        parts.append(f"the response does not satisfy the constraint {verdict['function']}"
                     + (f" ({json.dumps(args, ensure_ascii=False)})" if args else "") + ".")
    elif "tests_total" in verdict or rec.get("verifier") == "code":
        if status == "timeout":
            parts.append("the program ran out of time.")
        if "tests_total" in verdict:
            parts.append(f"{verdict.get('tests_passed', 0)} of {verdict['tests_total']} tests passed.")
        if verdict.get("error"):
            parts.append(f"The first failure: {str(verdict['error'])[:1000]}")
        if verdict.get("output_tail"):
            parts.append(f"The program's output ended with:\n{str(verdict['output_tail'])[-500:]}")
    elif rec.get("verifier") == "math":
        got = verdict.get("extracted")
        parts.append(f"the final answer {got} is not correct." if got else "the final answer is not correct.")
        parts.append("Give the final answer in \\boxed{}.")
    elif rec.get("verifier") == "choice":
        parts.append(f"the answer {verdict.get('extracted')} is not correct.")
    if verdict.get("gated"):
        reply = ((verdict.get("judge") or {}).get("reply") or "").strip()
        parts.append("A grader rejected the response" + (f": {reply[:1000]}" if reply else "."))
    if not parts:
        detail = verdict.get("error") or verdict.get("message")
        parts.append(f"the verifier's verdict was {status}" + (f": {str(detail)[:1000]}" if detail else "."))
    return "\n".join(parts)


class Refiner:
    """Options of a refine round: template (see DEFAULT_TEMPLATE), threshold (a reward at or
    above it is a success), per_prompt (failed completions per record that give a prompt,
    best first; None: all), think_markers (the thinking cut from a failed completion)."""

    def __init__(self, template: str | None = None, threshold: float = 1.0, per_prompt: int | None = 1,
                 think_markers: tuple[str, str] = ("<think>", "</think>")):
        self.template = check_template(template) if template is not None else DEFAULT_TEMPLATE
        self.threshold = float(threshold)
        if per_prompt is not None and per_prompt < 1:
            raise ValueError("per_prompt must be >= 1 (or None for all)")
        self.per_prompt = per_prompt
        self.markers = think_markers
        self.stats = {"records": 0, "failed": 0, "prompts": 0, "skipped_error": 0, "solved": 0}

    def failed(self, rec: dict) -> list[int]:
        """Indices of the completions to refine, best first."""
        verdicts, rewards = rec.get("verdicts") or [], rec.get("rewards") or []
        out = []
        for k, (v, r) in enumerate(zip(verdicts, rewards)):
            if r >= self.threshold:
                continue
            if (v or {}).get("status") == "error":
                self.stats["skipped_error"] += 1
                continue
            out.append(k)
        self.stats["failed"] += len(out)
        out.sort(key=lambda k: -rewards[k])
        return out if self.per_prompt is None else out[:self.per_prompt]

    def answer_text(self, rec: dict, text: str) -> str:
        sp = split(text, record_mode(rec), self.markers)
        return text if sp is None or sp.answer is None else sp.answer.strip()

    def make(self, rec: dict, k: int) -> dict:
        """The new prompt record for completion k of rec."""
        verdict = rec["verdicts"][k]
        fb = feedback(rec, verdict)
        completion = self.answer_text(rec, rec["completions"][k])
        out = {key: v for key, v in rec.items() if key not in GENERATED and key != "refine"}
        prompt = rec["prompt"]
        if isinstance(prompt, list):
            last = max(i for i, m in enumerate(prompt) if m["role"] == "user")
            text = self.template.format(prompt=prompt[last]["content"], completion=completion, feedback=fb,
                                        status=verdict.get("status"))
            out["prompt"] = [*prompt[:last], {"role": "user", "content": text}, *prompt[last + 1:]]
        else:
            out["prompt"] = self.template.format(prompt=prompt, completion=completion, feedback=fb,
                                                 status=verdict.get("status"))
        prev = rec.get("refine") if isinstance(rec.get("refine"), dict) else {}
        out["id"] = f"{rec['id']}/refine-{k}"
        out["refine"] = {"of": rec["id"], "root": prev.get("root", rec["id"]), "completion_index": k,
                         "round": int(prev.get("round", 0)) + 1, "status": verdict.get("status"),
                         "reward": rec["rewards"][k]}
        if "prompt" in prev or not prev:   # (a refined record from before refine.prompt: unknown)
            out["refine"]["prompt"] = prev.get("prompt", prompt)
        return out


def check_record(rec: dict) -> tuple[str, str] | None:
    """(field, problem) for a record rlvr-refine cannot use (reported at FILE:LINE); the record
    contract (rlvr.records) has checked the lists' lengths and types already."""
    if not isinstance(rec.get("id"), str) or not rec["id"]:
        return "id", "rlvr-refine needs each record's id (the new prompts are named after it)"
    p = rec.get("prompt")
    if not p or (isinstance(p, list) and not any(m.get("role") == "user" for m in p)):
        return "prompt", "rlvr-refine needs the original prompt (a string, or chat messages with a user message)"
    return None


def refine(records: Iterable[dict], refiner: Refiner) -> Iterator[dict]:
    """New prompt records for the failed completions of each verified record, in input order;
    error records pass through."""
    for rec in records:
        if is_error_record(rec):
            yield rec
            continue
        refiner.stats["records"] += 1
        todo = refiner.failed(rec)
        if rec.get("rewards") and any(r >= refiner.threshold for r in rec["rewards"]):
            refiner.stats["solved"] += 1
        for k in todo:
            refiner.stats["prompts"] += 1
            yield refiner.make(rec, k)
