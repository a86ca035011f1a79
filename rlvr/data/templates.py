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
  mmlu       "Question: ...\nChoices:\n(A) ...\n(B) ...\nAnswer: (" (a letter follows)
A template may also be a format string with the record's fields, e.g. "Q: {question}\nA:"
(`{question}` is the task text without surrounding whitespace; few-shot examples are
followed by " " and their worked solution).
With chat on, the prompt is a list of chat messages (shots as user/assistant turns); with
chat off (the default, for base models) it is one string.

Chat controls (the same in rlvr-data, rlvr-rollout, rlvr-eval and rlvr-train; ChatOptions):
  system         a system prompt: the first message of every chat prompt (it replaces a
                 template's own system message; the boxed template's instruction then
                 moves into the user message)
  thinking       Qwen3's enable_thinking switch, passed to the chat template, and the
                 record's `thinking` field, which makes verification judge the answer after
                 the thinking only (rlvr.verification.thinking); None leaves both alone
  chat_template  a chat template file (Jinja, as in tokenizer_config.json) that replaces
                 the tokenizer's, or the name of one rlvr ships (SHIPPED_TEMPLATES:
                 tulu_thinker_r1_style, the R1-style thinker format of OLMES and
                 open-instruct); records carry its absolute path in `chat_template`
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from functools import lru_cache

BOXED_INSTRUCTION = "Please reason step by step, and put your final answer within \\boxed{}."
TEMPLATES = ("plain", "qa", "boxed", "minerva", "mbpp", "humaneval", "mmlu")


def is_format(template: str) -> bool:
    """A format-string template ("Q: {question}\nA:") rather than a template name."""
    return isinstance(template, str) and template not in TEMPLATES and "{" in template


def check_format(template: str, rec: dict) -> None:
    """ValueError naming the placeholder when the template cannot be filled from rec."""
    import string

    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(template) if f is not None]
    except ValueError as e:
        raise ValueError(f"template {template!r}: {e}") from None
    for f in fields:
        if not f or not f.isidentifier():
            raise ValueError(f"template {template!r}: use named fields such as {{question}} (got {{{f}}})")
        if f not in rec:
            known = ", ".join(sorted(k for k in rec if not k.startswith("_")))
            raise ValueError(f"template {template!r}: the records have no field {f!r} (fields: {known})")


def _format(template: str, rec: dict) -> str:
    fields = {k: v for k, v in rec.items() if not k.startswith("_")}
    fields["question"] = str(rec["question"]).strip()
    return template.format_map(fields)


def _mmlu_text(rec: dict) -> str:
    opts = "\n".join(f"({chr(65 + i)}) {c}" for i, c in enumerate(rec.get("choices") or []))
    return f"Question: {rec['question'].strip()}\nChoices:\n{opts}\nAnswer: ("


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
    if template == "mmlu":
        return _mmlu_text(rec)
    if is_format(template):
        return _format(template, rec)
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
    if template == "mmlu":
        return f"{ans})"
    return f" {solution.strip()}"


@dataclass(frozen=True)
class ChatOptions:
    """How prompts meet a chat template (see the module docstring)."""

    system: str | None = None
    thinking: bool | None = None
    chat_template: str | None = None     # path of a template file

    def check(self, chat: bool = True) -> "ChatOptions":
        """These options with the template path made absolute; ValueError when they cannot
        apply (a system prompt or template file without chat prompts, an unreadable file)."""
        if self.thinking is not None and not isinstance(self.thinking, bool):
            raise ValueError(f"thinking must be true, false or null, got {self.thinking!r}")
        if not chat and self.system is not None:
            raise ValueError("a system prompt goes into chat prompts: turn chat on (--chat, data.chat: true)")
        if not chat and self.chat_template is not None:
            raise ValueError("a chat template file applies to chat prompts: turn chat on (--chat, data.chat: true)")
        if self.chat_template is None:
            return self
        read_template(self.chat_template)
        return ChatOptions(self.system, self.thinking, resolve_template(self.chat_template))

    def manifest(self) -> dict:
        """What run.json and rlvr-eval's summaries record."""
        out: dict = {"system": self.system, "thinking": self.thinking, "chat_template": self.chat_template}
        if self.chat_template is not None:
            out["chat_template_sha256"] = template_sha256(self.chat_template)
        return out


SHIPPED_DIR = os.path.join(os.path.dirname(os.path.dirname(__file__)), "resources", "chat_templates")


def shipped_templates() -> list[str]:
    """The names of the chat templates rlvr ships (rlvr/resources/chat_templates/NAME.jinja)."""
    try:
        return sorted(f[:-len(".jinja")] for f in os.listdir(SHIPPED_DIR) if f.endswith(".jinja"))
    except OSError:
        return []


def resolve_template(path: str) -> str:
    """The absolute path of a chat template: a file that exists, else a template rlvr ships
    named NAME or NAME.jinja (e.g. tulu_thinker_r1_style); a path that is neither comes back
    absolute, for read_template to report."""
    if not os.path.exists(path) and os.sep not in path:
        name = path[:-len(".jinja")] if path.endswith(".jinja") else path
        if name in shipped_templates():
            return os.path.join(SHIPPED_DIR, name + ".jinja")
    return os.path.abspath(path)


@lru_cache(maxsize=32)
def _read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


def read_template(path: str) -> str:
    """The text of a chat template file (cached); ValueError naming the file when it cannot
    be read or is empty. A tokenizer_config.json-style JSON file gives its chat_template."""
    try:
        text = _read(resolve_template(path))
    except (OSError, UnicodeDecodeError) as e:
        shipped = f" (nor a template rlvr ships: {', '.join(shipped_templates())})" if os.sep not in path else ""
        raise ValueError(f"chat template {path}: cannot read it: {getattr(e, 'strerror', None) or e}{shipped}") \
            from None
    if path.endswith(".json"):
        import json

        try:
            text = json.loads(text).get("chat_template") or ""
        except (ValueError, AttributeError):
            raise ValueError(f"chat template {path}: a .json file must hold a \"chat_template\" string") from None
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"chat template {path}: empty")
    return text


def template_text(path: str | None) -> str | None:
    """A chat template file's text, or None (none given, or unreadable: the prompts built with
    it report that)."""
    try:
        return read_template(path) if path else None
    except ValueError:
        return None


def template_sha256(path: str) -> str:
    return hashlib.sha256(read_template(path).encode()).hexdigest()


def with_system(messages: list[dict], system: str | None) -> list[dict]:
    """Chat messages whose first message is `system` (replacing a system message there)."""
    if system is None:
        return list(messages)
    rest = list(messages[1:]) if messages and messages[0].get("role") == "system" else list(messages)
    return [{"role": "system", "content": system}, *rest]


def render(template: str, rec: dict, shots: list[tuple[dict, str]] = (), chat: bool = False,
           system: str | None = None):
    """The prompt for rec: a string, or chat messages when chat is on.

    shots: (record, worked solution) pairs of few-shot examples. system: a system prompt
    (chat only) replacing the template's own.
    """
    if chat:
        msgs = []
        inline = template == "boxed" and system is not None   # the instruction moves into the user turn
        if rec.get("_messages") and not shots:
            return with_system(rec["_messages"], system)      # a dataset that comes as chat messages
        if template == "boxed" and not inline:
            msgs.append({"role": "system", "content": BOXED_INSTRUCTION})
        for ex, sol in shots:
            q = ex["question"] if template == "boxed" and not inline else question_text(template, ex)
            msgs.append({"role": "user", "content": q})
            msgs.append({"role": "assistant", "content": answer_text(template, ex, sol).strip()})
        if template == "humaneval":
            content = f"Complete the following Python function:\n```python\n{rec['question']}\n```"
        elif template == "boxed" and not inline:
            content = rec["question"]
        else:
            content = question_text(template, rec)
        msgs.append({"role": "user", "content": content})
        return with_system(msgs, system)
    parts = [question_text(template, ex) + answer_text(template, ex, sol) for ex, sol in shots]
    parts.append(question_text(template, rec))
    sep = "\n" if template == "mbpp" else "\n\n"
    return sep.join(parts)
