"""Prompt templates: how a record's task text becomes the `prompt` a model sees.

Templates (zero-shot, or k-shot with worked examples from the dataset's few-shot split):
  plain      the task text as it is (instruction following, the toy task)
  qa         "Question: ...\\nAnswer:" (lm-eval's gsm8k format; shots end "The answer is N.")
  boxed      Qwen-style chain of thought: "...Please reason step by step, and put your final
             answer within \\boxed{}." (shots are full solutions ending in \\boxed{})
  minerva    "Problem:\\n...\\n\\nSolution:" with Minerva's "Final Answer: The final answer is
             X. I hope it is correct."
  mbpp       lm-eval's MBPP prompt ("You are an expert Python programmer, ... [BEGIN]"); stop at [DONE]
  humaneval  the function signature and docstring, continued by the model
With chat on, the prompt is a list of chat messages (shots as user/assistant turns); with
chat off (the default, for base models) it is one string.
"""

from __future__ import annotations

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("plain", "qa", "boxed", "minerva", "mbpp", "humaneval")


def _mbpp_text(rec: dict) -> str:
    tests = "\n".join(rec.get("tests", [])[:3])
    return (f"You are an expert Python programmer, and here is your task: {rec['question']} "
            f"Your code should pass these tests:\n\n{tests}\n[BEGIN]\n")


def question_text(template: str, rec: dict) -> str:
    q = rec["question"]
    if template == "plain":
        return q
    if template == "qa":
        return f"Question: {q}\nAnswer:"
    if template == "boxed":
        return f"{q}\n{BOXED_INSTRUCTION}"
    if template == "minerva":
        return f"Problem:\n{q}\n\nSolution:"
    if template == "mbpp":
        return _mbpp_text(rec)
    if template == "humaneval":
        return q
    raise ValueError(f"unknown template {template!r} (known: {', '.join(TEMPLATES)})")


def answer_text(template: str, rec: dict, solution: str) -> str:
    """The worked answer of a few-shot example, in the template's own format."""
    ans = rec.get("answer", "")
    if template == "qa":
        return f" {solution.strip()}"
    if template == "boxed":
        sol = solution.strip()
        return sol if "\\boxed" in sol else f"{sol}\nThe final answer is $\\boxed{{{ans}}}$."
    if template == "minerva":
        return f"\n{solution.strip()}\nFinal Answer: The final answer is {ans}. I hope it is correct."
    if template == "mbpp":
        return f"{rec.get('_code', '').strip()}\n[DONE]"
    return f" {solution.strip()}"


def render(template: str, rec: dict, shots: list[tuple[dict, str]] = (), chat: bool = False):
    """The prompt for rec: a string, or chat messages when chat is on.

    shots: (record, worked solution) pairs of few-shot examples.
    """
    if chat:
        msgs = []
        if template == "boxed":
            msgs.append({"role": "system", "content": BOXED_INSTRUCTION})
        for ex, sol in shots:
            q = ex["question"] if template == "boxed" else question_text(template, ex)
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": answer_text(template, ex, sol).strip()})
        if template == "humaneval":
            content = f"Complete the following Python function:\n```python\n{rec['question']}\n```"
        elif template == "boxed":
            content = rec["question"]
        else:
            content = question_text(template, rec)
        msgs.append({"role": "user", "content": content})
        return msgs
    parts = [question_text(template, ex) + answer_text(template, ex, sol) for ex, sol in shots]
    parts.append(question_text(template, rec))
    sep = "\n" if template == "mbpp" else "\n\n"
    return sep.join(parts)
