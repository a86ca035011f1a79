"""Distillation from a teacher in rlvr-train (the `teacher` section and `train.distill`): which
completions are distilled, the teacher's prompts, the teacher's scores of the student's own
tokens, and the step's distillation batch for the trainer (rlvr.losses.distill_loss).

Each step, after the rollouts are verified, every non-empty completion of the groups the step
trains on (with train.distill.only_incorrect: those the verifier did not judge correct) is
scored by the teacher: the teacher's prompt tokens followed by the completion's own token ids,
never re-tokenised text (the teacher must share the policy's tokenizer), and the teacher
returns its top-k log-probs at each completion position as arrays (rlvr.engines.base.TopK).
Those arrays go to the trainer in the step's batch, where the policy's log-probs at the same
ids are taken by the same kind of forward pass as the RL loss's.

Teachers:
- a model (`teacher.model: PATH`): frozen, on teacher engines of its own (rlvr.train.teacher:
  the rollout engines' actor with its own model; vLLM or transformers), never synced. GKD alone (`train.distill.only`) and GRPO+GKD.
- the policy itself (`teacher.model: policy`): on-policy self-distillation (OPSD). The teacher
  is the current policy with a privileged prompt (`teacher.template`, e.g. the answer or the
  failed constraints shown). It scores on the rollout engines, which hold the policy's
  weights already (synced after every step, as for generation): no second copy of the model
  and no second weight sync, and vLLM's prefill is the cheapest place to score. With
  train.max_staleness 0 and sync.every_steps 1 that is exactly the trainer's policy before
  the step (pi_old); otherwise the engines' version, which lags by at most the staleness the
  config allows (distill/teacher_version in the trace).

The teacher's prompt is `teacher.template` rendered with {prompt} (the student's prompt),
{question} and {answer} (the record's) and {feedback} (what the verifier found wrong with the
completion: the failed instructions, the tests passed, the wrong final answer), or the
student's prompt itself; `teacher.chat` passes it through the teacher tokenizer's chat
template. A completion whose teacher prompt and tokens do not fit the teacher's context is
left out (distill/skipped_too_long).
"""

from __future__ import annotations

import functools
import string
import time

from rlvr.errors import ConfigError, Failure
from rlvr.messages import say
from rlvr.train.extras import ExtraBatch
from rlvr.train.modes import Mode
from rlvr.train.teacher import POLICY, Teacher

FIELDS = ("prompt", "question", "answer", "feedback")
ENGINES = ("vllm", "hf")


def enabled(cfg) -> bool:
    return cfg.train.distill.weight > 0


def uses_question(cfg) -> bool:
    """Whether the teacher's prompt needs the records' task text (rlvr-data drops it otherwise)."""
    return enabled(cfg) and cfg.teacher.template is not None and "question" in template_fields(cfg.teacher.template)


def template_fields(template: str) -> set[str]:
    """The placeholders of a teacher template; ConfigError for a malformed one or an unknown name."""
    return {name for _, name in _parsed(template) if name is not None}


@functools.lru_cache(maxsize=64)
def _parsed(template: str) -> tuple[tuple[str, str | None], ...]:
    """A teacher template as (literal text, placeholder name or None) pieces, parsed and
    checked once per template (a step renders it for every completion)."""
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as e:
        raise ConfigError(f"teacher.template: {e} (literal braces are doubled: {{{{ and }}}})") from None
    pieces = []
    for literal, name, spec, conv in parsed:
        if name is not None and (name not in FIELDS or spec or conv):
            shown = "{" + name + (f"!{conv}" if conv else "") + (f":{spec}" if spec else "") + "}"
            raise ConfigError(f"teacher.template: unknown placeholder {shown} (known: "
                              f"{', '.join('{' + f + '}' for f in FIELDS)}; literal braces are doubled)")
        pieces.append((literal, name))
    return tuple(pieces)


def check_config(cfg) -> list[str]:
    """The teacher section and train.distill (ConfigError on errors); returns warnings."""
    from rlvr.losses import AGGREGATES, DISTILL_LOSSES

    d, te, t = cfg.train.distill, cfg.teacher, cfg.train
    for key, value, allowed in (("train.distill.loss", d.loss, DISTILL_LOSSES),
                                ("train.distill.aggregate", d.aggregate, AGGREGATES),
                                ("teacher.engine", te.engine, (None, *ENGINES))):
        if value not in allowed:
            raise ConfigError(f"{key}: expected one of {', '.join(str(a).lower() for a in allowed)}, got {value!r}")
    if not d.weight >= 0 or not d.temperature > 0:
        raise ConfigError("train.distill.weight must be >= 0 and train.distill.temperature > 0")
    if d.loss == "jsd" and not 0 < d.jsd_beta < 1:
        raise ConfigError(f"train.distill.jsd_beta: must be in (0, 1), got {d.jsd_beta} (jsd_beta -> 0 approaches "
                          f"the forward KL: train.distill.loss kl)")
    if te.top_k < 1 or te.num_engines < 1 or te.tensor_parallel_size < 1 or \
            (te.max_model_len is not None and te.max_model_len < 2):
        raise ConfigError("teacher.top_k, teacher.num_engines and teacher.tensor_parallel_size must be >= 1, "
                          "teacher.max_model_len >= 2 (or null)")
    fields = template_fields(te.template) if te.template is not None else set()
    warnings: list[str] = []
    if not enabled(cfg):
        if d.only:
            raise ConfigError("train.distill.only trains on the distillation loss alone: it needs "
                              "train.distill.weight > 0")
        if te.model is not None:
            warnings.append("teacher.model is set but train.distill.weight is 0: no teacher starts")
        return warnings
    if te.model is None:
        raise ConfigError("train.distill needs a teacher: teacher.model (a model folder or hub name, or policy: "
                          "the policy itself with teacher.template)")
    if te.model == POLICY and te.template is None:
        raise ConfigError("teacher.model policy needs teacher.template (the privileged prompt, e.g. with {answer} "
                          "or {feedback}): with the student's own prompt the teacher is the student")
    if cfg.sft.only:
        raise ConfigError("sft.only starts no engines: distillation needs the policy's own samples "
                          "(set train.distill.weight 0)")
    if te.model == POLICY and cfg.sync.mode == "in_flight":
        raise ConfigError("teacher.model policy scores on the rollout engines between generations, and "
                          "sync.mode in_flight keeps them generating: use sync.mode between_rounds, or a teacher "
                          "model on engines of its own")
    if "prompt" in fields and cfg.data.chat:
        raise ConfigError("teacher.template: {prompt} is the student's prompt text, and data.chat makes it chat "
                          "messages: use {question}")
    if d.only and cfg.dapo.dynamic_sampling:
        raise ConfigError("dapo.dynamic_sampling draws prompts until their rewards differ, for the RL loss: with "
                          "train.distill.only there is none (set dapo.dynamic_sampling false)")
    if d.only and t.loss.beta > 0:
        warnings.append("train.loss.beta is the RL loss's KL weight: with train.distill.only it has no effect, and "
                        "the trainer still holds a reference model (set it to 0)")
    if te.model == POLICY and (te.engine is not None or te.num_engines != 1 or te.max_model_len is not None
                               or te.tensor_parallel_size != 1):
        warnings.append("teacher.model policy scores on the rollout engines: teacher.engine, num_engines, "
                        "tensor_parallel_size and max_model_len are not used")
    return warnings


# -- the teacher's prompt ------------------------------------------------------------------

def _failed_instructions(rec: dict, verdict: dict) -> list[str] | None:
    """The descriptions of the instructions an IF verdict marks as not followed (None: not an
    IF verdict). The graded list is the one the verdict's score was taken from."""
    ids, strict, loose = verdict.get("instructions"), verdict.get("strict"), verdict.get("loose")
    if not (isinstance(ids, list) and isinstance(strict, list) and len(strict) == len(ids)):
        return None
    graded = strict
    score = verdict.get("score")
    if isinstance(loose, list) and len(loose) == len(ids) and ids and isinstance(score, (int, float)) \
            and abs(sum(strict) / len(ids) - score) > 1e-9:
        graded = loose
    from rlvr.verifiers import if_checks

    registry = {"ifeval": "ifeval", "ifbench": "ifbench"}.get(rec.get("verifier"), "if_multi")
    kwargs = rec.get("kwargs") if isinstance(rec.get("kwargs"), list) else [None] * len(ids)
    out = []
    for i, (iid, kw, ok) in enumerate(zip(ids, kwargs, graded)):
        if ok:
            continue
        try:
            checker = if_checks.build(registry, i, iid, kw)
            if_checks.nlp.reset_rng(iid)
            out.append(str(checker.build_description(**{k: v for k, v in (kw or {}).items() if v is not None})))
        except Exception:  # noqa: BLE001 - a description is help, not ground truth: fall back to the id
            out.append(str(iid))
    return out


def feedback(rec: dict, verdict: dict | None) -> str:
    """What the verifier found wrong with a completion, as text for a teacher's prompt ('' when
    it was correct): an IF verdict's failed instructions (their descriptions, one per line),
    a code verdict's tests passed and error, a math verdict's wrong final answer."""
    verdict = verdict if isinstance(verdict, dict) else {}
    status = verdict.get("status")
    if status == "correct":
        return ""
    failed = _failed_instructions(rec, verdict)
    if failed is not None:
        return "\n".join(f"- {x}" for x in failed)
    extracted = verdict.get("extracted")
    if status == "no_answer" or extracted in (None, ""):
        return "No final answer was found."
    if "tests_total" in verdict:
        line = f"{verdict.get('tests_passed', 0)} of {verdict['tests_total']} tests passed."
        err = verdict.get("error")
        return f"{line} {str(err).strip()}" if err else line
    if status == "timeout":
        return "The check ran out of time."
    if status == "wrong":
        return f"The final answer {str(extracted).strip()} is wrong."
    err = verdict.get("error") or verdict.get("message")
    return f"The completion could not be checked: {err}" if err else ""


def render(template: str, rec: dict, verdict: dict | None) -> str:
    """The teacher's prompt text for one completion of `rec` (see the module)."""
    pieces = _parsed(template)
    values = {}
    for name in {name for _, name in pieces if name is not None}:
        values[name] = feedback(rec, verdict) if name == "feedback" else rec.get(name)
        if not isinstance(values[name], str):
            raise _no_text(name, rec)
    return "".join(literal + (values[name] if name is not None else "") for literal, name in pieces)


def _no_text(name: str, rec: dict) -> ConfigError:
    return ConfigError(f"teacher.template uses {{{name}}}, which record {rec.get('id')!r} (dataset "
                       f"{rec.get('dataset')}) has no text for")


TINY = "tiny"


def tiny_teacher(run_dir: str, seed: int):
    """teacher.model tiny: rlvr's tiny model built offline into RUN_DIR/teacher_model, as model.path tiny
    builds the policy (the same tokenizer; other weights: seed + 1), reused on resume."""
    import os

    from rlvr.models import local_model

    path = os.path.join(os.path.abspath(run_dir), "teacher_model")
    if not os.path.exists(os.path.join(path, "config.json")):
        from rlvr.tiny import build

        build(path, seed=seed + 1)
    return local_model(path)


# -- the distillation batch ------------------------------------------------------------------

class Distiller:
    """The run's teacher (its tokenizer and templates; its engines are rlvr.train.teacher's) and
    each step's distillation batch (see the module). Built before Ray starts (templates are
    checked against every prompt record); the engines start once the rollout engines are up."""

    def __init__(self, cfg, tokenizer, stream, log=say, vocab: int | None = None, run_dir: str | None = None):
        self.cfg = cfg
        self.run_dir = run_dir                  # where teacher.model tiny is built
        self.vocab = vocab or len(tokenizer)    # the policy's embedding rows: ids it can score
        self.d, self.te = cfg.train.distill, cfg.teacher
        self.log = log
        self.self_teacher = self.te.model == POLICY
        self.tokenizer = tokenizer              # the student's
        self.teacher_tokenizer = tokenizer
        self.model = None                       # a separate teacher (rlvr.models.ResolvedModel)
        self.metrics: dict = {}                 # the last step's, for the trace
        self.shown: dict[int, str] = {}         # id(group) -> the teacher prompt of its sample 0, last step
        self.fields = template_fields(self.te.template) if self.te.template is not None else set()
        if self.te.top_k > len(tokenizer):
            raise ConfigError(f"teacher.top_k {self.te.top_k} is larger than the vocabulary ({len(tokenizer)} tokens)")
        if not self.self_teacher:
            self._load_teacher()
        self.teacher = Teacher(cfg, self.model, log)   # its engines, started once the rollout engines are up
        needed = self.fields & {"question", "answer", "prompt"}
        for recs in (stream.by_name.values() if stream is not None and needed else ()):
            for rec in recs:
                for name in needed:
                    if not isinstance(rec.get(name), str):
                        raise _no_text(name, rec)

    def _load_teacher(self) -> None:
        from transformers import AutoTokenizer

        from rlvr.models import resolve_model

        if self.te.model == TINY:
            self.model = tiny_teacher(self.run_dir or ".", self.cfg.train.seed)
        else:
            self.model = resolve_model(self.te.model, log=self.log)
        try:
            self.teacher_tokenizer = AutoTokenizer.from_pretrained(self.model.path)
        except Exception as e:  # noqa: BLE001 - transformers raises many types
            raise ConfigError(f"teacher.model: cannot load the tokenizer of {self.te.model}: {type(e).__name__}: "
                              f"{e}") from None
        if self.teacher_tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ConfigError(f"teacher.model {self.te.model}: its tokenizer is not the policy's: the teacher scores "
                              "the student's own token ids, so both must share one vocabulary")
        if (self.te.chat or (self.te.template is None and self.cfg.data.chat)) \
                and not getattr(self.teacher_tokenizer, "chat_template", None):
            why = "teacher.chat" if self.te.chat else "data.chat (the teacher gets the student's chat prompts)"
            raise ConfigError(f"{why}: the tokenizer of {self.te.model} has no chat template")

    # -- a step ----------------------------------------------------------------------------

    def _prompt_ids(self, g, j: int, cache: dict) -> tuple[list[int], str]:
        """The teacher's prompt token ids (and its text) for sample j of group g."""
        from rlvr.engines.base import encode_prompt

        per_sample = "feedback" in self.fields
        key = (id(g), j if per_sample else -1)
        if key not in cache:
            rec = g.record
            if self.te.template is None:   # the student's prompt
                prompt = rec["prompt"]
                if self.teacher_tokenizer is self.tokenizer and not self.te.chat:
                    ids = list(g.prompt_ids)                     # the very tokens the student saw
                elif isinstance(prompt, list) or not self.te.chat:
                    from rlvr.train.prompts import prompt_token_ids

                    ids = prompt_token_ids(self.teacher_tokenizer, rec)   # made as the student's were
                else:
                    ids = encode_prompt(self.teacher_tokenizer, prompt, chat_template=True)
            else:
                verdicts = (g.verified or {}).get("verdicts") or []
                prompt = render(self.te.template, rec, verdicts[j] if j < len(verdicts) else None)
                ids = encode_prompt(self.teacher_tokenizer, prompt, chat_template=self.te.chat)
            cache[key] = (ids, prompt if isinstance(prompt, str) else str(prompt))
        return cache[key]

    def batch(self, run, groups: list, step: int) -> ExtraBatch | None:
        """The step's distillation batch over the completions of `groups` (None: nothing to
        distil); its counts and timing are in self.metrics."""
        t0 = time.monotonic()
        items, cache = [], {}
        correct = too_long = 0
        self.shown = {}
        for g in groups:
            verdicts = (g.verified or {}).get("verdicts") or []
            for j, s in enumerate(g.samples):
                comp = list(s["token_ids"])
                if not comp:
                    continue
                if self.d.only_incorrect and _is_correct(g, j, verdicts):
                    correct += 1
                    continue
                ids, text = self._prompt_ids(g, j, cache)
                if not ids or len(ids) + len(comp) > self.teacher.max_len:
                    too_long += 1
                    continue
                if j == 0:
                    self.shown[id(g)] = text
                items.append((g, ids, comp))
        self.metrics = {"distill/scored": float(len(items)), "distill/skipped_correct": float(correct),
                        "distill/skipped_too_long": float(too_long)}
        if not items:
            self.metrics.update({"time/teacher_s": time.monotonic() - t0, "distill/payload_mb": 0.0})
            return None
        rows, versions = self.teacher._score(run, [ids for _, ids, _ in items], [c for _, _, c in items], step)
        rows = [_within(r, self.vocab) for r in rows]
        payload = {"target_ids": [r[0] for r in rows], "teacher_logprobs": [r[1] for r in rows],
                   "teacher_token_logprobs": [r[2] for r in rows]}
        nbytes = sum(a.nbytes for r in rows for a in r)
        d = self.d
        eb = ExtraBatch([g.prompt_ids for g, _, _ in items], [c for _, _, c in items], weight=d.weight,
                        micro_batch_size=self.cfg.train.micro_batch_size, payload=payload, temperature=d.temperature,
                        options={"loss": d.loss, "beta": d.jsd_beta, "temperature": d.temperature,
                                 "aggregate": d.aggregate})
        self.metrics.update({"time/teacher_s": time.monotonic() - t0, "distill/payload_mb": nbytes / 2**20})
        if not self.self_teacher:
            self.metrics["faults/teacher_restarts"] = float(run.faults["teacher_restarts"])
        if self.self_teacher:
            known = [v for v in versions if v is not None]
            self.metrics["distill/teacher_version"] = float(min(known)) if known else float("nan")
        return eb

def _within(row: tuple, vocab: int) -> tuple:
    """A completion's teacher rows with ids the policy has no row for (a teacher's larger padded
    embedding) marked as no entry: id 0 (a row the policy has) with log-prob -inf, which the
    loss (rlvr.losses.distill_loss) leaves out, as if the teacher had not returned them."""
    import numpy as np

    ids, lps, tok = row
    out = ids >= vocab
    if not out.any():
        return row
    return np.where(out, 0, ids).astype(ids.dtype), np.where(out, -np.inf, lps).astype(lps.dtype), tok


def _is_correct(g, j: int, verdicts: list) -> bool:
    if j < len(verdicts) and isinstance(verdicts[j], dict) and "status" in verdicts[j]:
        return verdicts[j]["status"] == "correct"
    rewards = g.rewards
    return j < len(rewards) and rewards[j] >= 1.0


class DistillMode(Mode):
    """The teacher section and train.distill as a training mode (rlvr.train.modes)."""

    enabled = staticmethod(enabled)
    check = staticmethod(check_config)
    keeps_question = staticmethod(uses_question)

    @staticmethod
    def engine_options(cfg, opts: dict) -> None:
        if cfg.teacher.model == POLICY:   # the policy as its own teacher scores its top-k on the rollout engines
            opts["max_logprobs"] = max(20, cfg.teacher.top_k)

    def __init__(self, run):
        from rlvr.train.sft import vocab_size

        # the teacher's tokenizer and templates are checked before Ray starts
        self.distiller = Distiller(run.cfg, run.tokenizer, run.stream, say,
                                   vocab=vocab_size(run.model.path, run.tokenizer), run_dir=run.run_dir)

    def start(self, run) -> None:
        self.distiller.teacher.start(run)

    def extend(self, run, assembled, groups: list, step: int) -> None:
        """The teacher's scores of the completions; GKD and OPSD alone (train.distill.only) train
        on them without the RL loss."""
        from rlvr.train.trainer import Batch

        eb = self.distiller.batch(run, groups, step)
        if run.cfg.train.distill.only:
            assembled.batch = Batch([], [], [], [], [], extras=assembled.batch.extras)
        if eb is not None:
            assembled.batch.extras["distill"] = eb

    def metrics(self, metrics: dict) -> None:
        metrics.update(self.distiller.metrics)

    def sample(self, group, rec: dict) -> None:
        if id(group) in self.distiller.shown:
            rec["teacher_prompt"] = self.distiller.shown[id(group)]   # what the teacher saw

    def outstanding(self) -> list:
        return self.distiller.teacher.outstanding()

    def close(self) -> None:
        self.distiller.teacher.close()
