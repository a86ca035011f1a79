"""The rollout pipeline behind rlvr-rollout (and rlvr-eval): prompt records in, the same
records out with completions and generation metadata, in input order.

    settings = RolloutSettings(model="ckpt", sampling=Sampling(n=8, temperature=1.0))
    stats = run(records, settings, writer)            # builds the engine(s) itself
    stats = run(records, settings, writer, engine=e)  # or uses one you hold

What a generated record gains (documented in docs/rollout.md):
``completions`` (n strings), ``finish_reasons`` (stop | length), ``prompt_tokens``,
``completion_tokens`` (one per completion), with --logprobs ``logprobs`` and
``completion_token_ids`` (one float / id per completion token), and ``generation``: model,
engine, engine_version, sampling (n, temperature, top_p, top_k, max_tokens, stop, seed,
logprobs, chat_template, when set system, thinking, chat_template_file and its sha256,
max_prompt_len), prompt_seed, status ("ok" or
"prompt_too_long", with ``error`` saying why). With tools (rlvr.tools) each completion is
a whole trajectory (model and tool turns) and ``trajectories`` gives its turns. Old
``rewards``/``verdicts``/``trajectories`` are dropped (they belonged to other completions). Error records (--keep-going) pass through untouched.
A record's ``thinking`` (true/false: the template's enable_thinking) and ``chat_template``
(a template file) apply to its prompt; the settings' system, thinking and template file
apply to every record and are written into each (``thinking``, ``chat_template``).

Selection (select): --shuffle permutes the whole input with --seed, then --shard I/N takes
every N-th record from I. Resume (resume_point): an output file holds a prefix of the
selected input in order, so a rerun skips that prefix after checking its ids and settings.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any, BinaryIO

from rlvr.engines.base import (EngineError, EngineOptions, PromptIds, Result, Sampling, encode_prompt, end_of_turn_ids,
                               prompt_seed)
from rlvr.data.templates import template_text
from rlvr.errors import UsageError
from rlvr.progress import Progress
from rlvr.records import RecordWriter, is_error_record, read_records

CHAT_MODES = ("auto", "on", "off")
CHAT_KEYS = {"system", "thinking", "chat_template_file", "chat_template_sha256"}   # in generation.sampling when set


class PromptError(UsageError, ValueError):
    """A record whose prompt cannot be used with these settings (names the record)."""


@dataclass
class RolloutSettings:
    model: str
    sampling: Sampling = field(default_factory=Sampling)
    engine: str = "vllm"
    options: EngineOptions = field(default_factory=EngineOptions)
    chat_template: str = "auto"        # auto: messages templated, strings as is | on | off
    max_prompt_len: int | None = None  # None: max_model_len - max_tokens
    token_ids: bool = False            # write completion_token_ids (implied by logprobs)
    gpus: list[str] | None = None      # one engine process per entry (CUDA_VISIBLE_DEVICES values)
    record_max_tokens: bool = True     # a record's own `max_tokens` replaces sampling.max_tokens for it
    system: str | None = None          # a system message first in every prompt (strings become chat)
    thinking: bool | None = None       # enable_thinking for every prompt (None: each record's `thinking`)
    template_file: str | None = None   # a chat template file replacing the tokenizer's (and the records')
    tools: Any = None                  # rlvr.tools.ToolSettings: multi-turn rollouts with a Python tool

    def __post_init__(self) -> None:
        if self.chat_template not in CHAT_MODES:
            raise ValueError(f"chat_template must be one of {', '.join(CHAT_MODES)}")
        if self.chat_template == "off" and (self.system is not None or self.template_file is not None):
            raise ValueError("a system prompt or chat template file needs the chat template (not --chat-template off)")
        if self.template_file is not None:
            from rlvr.data.templates import read_template, resolve_template

            read_template(self.template_file)
            self.template_file = resolve_template(self.template_file)


@dataclass
class Stats:
    records: int = 0
    generated: int = 0
    unusable: Counter = field(default_factory=Counter)   # generation.status -> prompts without completions
    passed: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    seconds: float = 0.0


def read_prompts(files: Iterable[str], keep_going: bool = False) -> list[dict]:
    """All input records (the whole input is read first: --shuffle and the ETA need it).

    A malformed line stops the read with its FILE:LINE (exit 3) as soon as it is seen; a
    well-formed record without a `prompt` is reported, with its FILE:LINE, once the whole
    input has parsed. With keep_going both become error records that pass through.
    """
    # Error records from an upstream stage pass through; this input's own malformed lines stop
    # the read (exit 3) unless keep_going turns them into error records too.
    return list(read_records(files, keep_going=keep_going, required=("prompt",), defer_required=True))


def select(records: list[dict], shard: tuple[int, int] | None = None, shuffle: bool = False,
           seed: int | None = 0) -> list[dict]:
    """Deterministic split of a dataset over workers: shuffle (with seed) then every N-th."""
    out = list(records)
    if shuffle:
        random.Random(0 if seed is None else seed).shuffle(out)
    if shard is not None:
        i, n = shard
        out = out[i::n]
    return out


def _same_model(a: Any, b: str) -> bool:
    """The same model: the same name, or the same folder however its path is written."""
    if a == b:
        return True
    return isinstance(a, str) and os.path.exists(a) and os.path.exists(b) and os.path.samefile(a, b)


def resume_point(done: list[dict], todo: list[dict], path: str, sampling: dict | None = None,
                 model: str | None = None) -> int:
    """How many leading records of `todo` the output file already holds; refuses a file that
    belongs to another input, to other generation settings (the keys of `sampling`) or to
    another model."""
    if len(done) > len(todo):
        raise PromptError(f"{path} holds {len(done)} records but the input has {len(todo)}: "
                          "it is the output of another input; use a new --output")
    for i, (a, b) in enumerate(zip(done, todo)):
        if not is_error_record(a) and not isinstance(a.get("generation"), dict):
            raise PromptError(f"{path}:{i + 1}: a record without `generation`, not one rlvr-rollout wrote (the "
                              "input itself?); use a new --output")
        if a.get("id") != b.get("id"):
            raise PromptError(f"{path}:{i + 1}: id {a.get('id')!r} where the input has {b.get('id')!r}: the file "
                              "belongs to another input or other --shard/--shuffle settings; use a new --output")
    if sampling is not None:
        for i, a in enumerate(done):
            old = (a.get("generation") or {}).get("sampling")
            if old is not None and not isinstance(old, dict):
                old = {}
            keys = set(sampling) | (set(old) & CHAT_KEYS if isinstance(old, dict) else set())
            diff = sorted(k for k in keys if old is not None and old.get(k) != sampling.get(k))
            if diff:
                raise PromptError(f"{path}:{i + 1}: written with other generation settings ({', '.join(diff)}); "
                                  "use a new --output or the same settings")
    if model:
        for i, a in enumerate(done):
            old = (a.get("generation") or {}).get("model")
            if old is not None and not _same_model(old, model):
                raise PromptError(f"{path}:{i + 1}: generated by another model ({old}, not {model}); use a new "
                                  "--output or the same --model")
    return len(done)


class Prompter:
    """Record -> prompt token ids, with the chat-template rule, the chat options (the
    settings', else the record's) and the length limit."""

    def __init__(self, tokenizer: Any, chat_template: str, limit: int, settings: RolloutSettings | None = None):
        self.tokenizer = tokenizer
        self.mode = chat_template
        self.limit = limit
        self.settings = settings or RolloutSettings(model="", chat_template=chat_template)

    def ids(self, rec: dict) -> PromptIds:
        from rlvr.data.templates import read_template

        prompt = rec.get("prompt")
        if prompt is None:
            raise PromptError(f"record {rec.get('id')!r}: no prompt")
        if isinstance(prompt, list) and self.mode == "off":
            raise PromptError(f"record {rec.get('id')!r} has chat messages but the chat template is off "
                              "(use --chat-template auto or on)")
        st = self.settings
        path = st.template_file or rec.get("chat_template")
        thinking = st.thinking if st.thinking is not None else rec.get("thinking")
        try:
            template = read_template(path) if path else None
        except ValueError as e:   # an unreadable template file (the record's or the settings')
            raise PromptError(f"record {rec.get('id')!r}: {e}") from None
        try:
            return encode_prompt(self.tokenizer, prompt, self.mode == "on", system=st.system, template=template,
                                 thinking=thinking if isinstance(thinking, bool) else None)
        except EngineError as e:
            raise PromptError(f"record {rec.get('id')!r}: {e}") from None


@contextlib.contextmanager
def record_stdout() -> Iterator[BinaryIO]:
    """The stream records go to. When stdout is a real file descriptor, fd 1 is pointed at
    stderr for the duration, so that nothing else (a library's print, an engine's worker
    process) can slip a line into the JSONL; records go to a private copy of it."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):
        yield sys.stdout.buffer
        return
    sys.stdout.flush()
    saved = os.dup(fd)
    os.dup2(sys.stderr.fileno(), fd)
    out = os.fdopen(os.dup(saved), "wb")
    try:
        yield out
    finally:
        try:
            out.flush()
        except BrokenPipeError:
            pass
        finally:
            try:
                out.close()
            except BrokenPipeError:
                pass
            os.dup2(saved, fd)
            os.close(saved)


def build_engine(settings: RolloutSettings, warn: Callable[[str], None] | None = None) -> Any:
    """One engine, or an EnginePool when settings.gpus names devices."""
    if settings.gpus:
        from rlvr.engines.pool import EnginePool

        tp = settings.options.tensor_parallel_size
        if len(settings.gpus) % tp:
            raise ValueError(f"{len(settings.gpus)} GPUs do not split into engines of tensor parallel size {tp}")
        groups = [",".join(settings.gpus[i:i + tp]) for i in range(0, len(settings.gpus), tp)]
        return EnginePool(settings.engine, settings.model, settings.options, groups, warn=warn)
    from rlvr.engines import create

    return create(settings.engine, settings.model, settings.options, warn=warn)


MODEL_LEN_STEP = 256   # a fitted context is rounded up to whole multiples of this


def _model_max_len(model: str) -> int | None:
    """The model's own context (config.json's max_position_embeddings), when it says one."""
    import json

    try:
        with open(os.path.join(model, "config.json"), encoding="utf-8") as fh:
            cfg = json.load(fh)
    except (OSError, ValueError):
        return None
    cfg = cfg.get("text_config", cfg) if isinstance(cfg, dict) else {}
    n = cfg.get("max_position_embeddings")
    return int(n) if isinstance(n, int) and n > 0 else None


def fitted_max_model_len(records: list[dict], settings: RolloutSettings) -> tuple[int, int, int] | None:
    """(context, longest prompt, largest max_tokens) for an engine that has to hold these prompts and no more: the
    longest prompt in tokens (as the engine will tokenize it, chat template included; or
    --max-prompt-len when given) plus max_tokens (each record's own when it has one), rounded
    up to a multiple of 256, at most the
    model's own context (a longer prompt then comes out as prompt_too_long). None when no record
    needs generation. A model's own context (32K for Qwen3) would make vLLM plan memory for
    sequences no prompt here comes near."""
    todo = [r for r in records if not is_error_record(r)]
    if not todo:
        return None
    from rlvr.engines import checkpoint

    model = checkpoint.resolve(settings.model, tokenizer=settings.options.tokenizer)   # a bad folder: its one line
    longest = settings.max_prompt_len
    # a record's own max_tokens (rlvr-data writes them per dataset) counts for that record
    lengths = [record_sampling(r, settings.sampling, settings.record_max_tokens).max_tokens for r in todo]
    want = (longest or 0) + max(lengths)
    if longest is None:
        from rlvr.engines.base import load_tokenizer

        tok = load_tokenizer(model, settings.options.tokenizer)
        longest, want = 1, 1 + max(lengths)
        for rec, n in zip(todo, lengths):
            prompt = rec.get("prompt")
            if prompt is None or (isinstance(prompt, list) and settings.chat_template == "off"):
                continue   # the run reports these records
            try:
                k = len(encode_prompt(tok, prompt, settings.chat_template == "on"))
            except (EngineError, ValueError, TypeError):
                continue
            longest, want = max(longest, k), max(want, k + n)
    fitted = -(-want // MODEL_LEN_STEP) * MODEL_LEN_STEP
    own = _model_max_len(model)
    return (min(fitted, own) if own else fitted), longest, max(lengths)


def sampling_meta(settings: RolloutSettings, limit: int | None = None) -> dict:
    """The `generation.sampling` object records carry (also what a resume must match)."""
    s = settings.sampling.to_dict()
    s["chat_template"] = settings.chat_template
    if settings.system is not None:
        s["system"] = settings.system
    if settings.thinking is not None:
        s["thinking"] = settings.thinking
    if settings.template_file is not None:
        from rlvr.data.templates import template_sha256

        s["chat_template_file"] = settings.template_file
        s["chat_template_sha256"] = template_sha256(settings.template_file)
    if limit is not None:
        s["max_prompt_len"] = limit
    if settings.tools is not None:
        s["tools"] = settings.tools.to_dict()
    return s


def _chat_fields(out: dict, meta: dict) -> dict:
    """The settings' thinking switch and template file, written into the record."""
    s = meta.get("sampling") or {}
    if s.get("thinking") is not None:
        out["thinking"] = s["thinking"]
    if s.get("chat_template_file"):
        out["chat_template"] = s["chat_template_file"]
    return out


def annotate(rec: dict, res: Result, meta: dict, seed: int | None, want_ids: bool) -> dict:
    out = _chat_fields({k: v for k, v in rec.items() if k not in ("rewards", "verdicts", "trajectories")}, meta)
    samples = res.samples
    out["completions"] = [s.text for s in samples]
    out["finish_reasons"] = [s.finish_reason for s in samples]
    out["prompt_tokens"] = res.prompt_tokens
    out["completion_tokens"] = [len(s.token_ids) for s in samples]
    if samples and samples[0].logprobs is not None:
        out["logprobs"] = [s.logprobs for s in samples]
    if want_ids:
        out["completion_token_ids"] = [s.token_ids for s in samples]
    if any(s.turns is not None for s in samples):
        out["trajectories"] = [s.turns or [] for s in samples]
    gen = dict(meta)
    gen["prompt_seed"] = seed
    if res.version is not None:
        gen["policy_version"] = res.version
    gen["status"] = "ok"
    out["generation"] = gen
    return out


def unusable(rec: dict, meta: dict, status: str, error: str) -> dict:
    """A record that cannot be generated for keeps its place, with a status saying why."""
    out = _chat_fields({k: v for k, v in rec.items() if k not in ("rewards", "verdicts", "trajectories")}, meta)
    out.update(completions=[], finish_reasons=[], prompt_tokens=0, completion_tokens=[])
    out["generation"] = dict(meta, prompt_seed=None, status=status, error=error)
    return out


def too_long(rec: dict, n_tokens: int, limit: int, meta: dict, why: str) -> dict:
    out = _chat_fields({k: v for k, v in rec.items() if k not in ("rewards", "verdicts", "trajectories")}, meta)
    out.update(completions=[], finish_reasons=[], prompt_tokens=n_tokens, completion_tokens=[])
    gen = dict(meta)
    gen["prompt_seed"] = None
    gen["status"] = "prompt_too_long"
    gen["error"] = f"prompt has {n_tokens} tokens, over the limit of {limit} ({why})"
    out["generation"] = gen
    return out


def run(records: list[dict], settings: RolloutSettings, writer: RecordWriter, *, engine: Any = None,
        progress: bool | None = None, warn: Callable[[str], None] | None = None) -> Stats:
    """Generate for every record (in order) and write each as soon as its predecessors are out.

    The engine is built only when some record needs generation (an empty or fully resumed
    input never loads a model). An engine passed in is not closed.
    """
    stats = Stats(records=len(records))
    t0 = time.monotonic()
    if not any(not is_error_record(r) for r in records):
        for r in records:
            writer.write(r)
        stats.passed = len(records)
        return stats
    own = engine is None
    if own:
        engine = build_engine(settings, warn)
    bar = None
    try:
        sampling = settings.sampling
        max_len = int(engine.max_model_len)
        limit = settings.max_prompt_len or max_len - sampling.max_tokens
        # the common max_tokens matters only when a record uses it (not one with its own max_tokens)
        if limit < 1 and any(record_sampling(r, sampling, settings.record_max_tokens).max_tokens == sampling.max_tokens
                             for r in records if not is_error_record(r)):
            raise PromptError(f"max_tokens {sampling.max_tokens} leaves no room for a prompt under max_model_len "
                              f"{max_len}; lower --max-tokens or raise --max-model-len")
        limit = max(0, limit)
        meta = {"model": settings.model, "engine": settings.engine,
                "engine_version": getattr(engine, "engine_version", "unknown"),
                "sampling": sampling_meta(settings, limit)}
        why = (f"--max-prompt-len {limit}" if settings.max_prompt_len else
               f"max_model_len {max_len} - max_tokens {sampling.max_tokens}; raise --max-model-len or "
               "--max-prompt-len, or lower --max-tokens")
        prompter = Prompter(engine.tokenizer, settings.chat_template, limit, settings)
        # a chat prompt's completion also ends at the template's end-of-turn token (<|im_end|>),
        # which a base model's EOS (<|endoftext|>) is not: as in rlvr-train's rollouts
        eot = tuple(end_of_turn_ids(engine.tokenizer, template_text(settings.template_file)))
        want_ids = settings.token_ids or sampling.logprobs
        ready: dict[int, dict] = {}
        seeds: dict[int, int | None] = {}
        nxt = 0
        bar = Progress(sum(1 for r in records if not is_error_record(r)), "rollout", progress, unit="prompt",
                       rate_unit="tok/s")

        def requests() -> Iterator[tuple[int, PromptIds, int | None]]:
            for pos, rec in enumerate(records):
                if is_error_record(rec):
                    ready[pos] = rec
                    stats.passed += 1
                    continue
                try:
                    ids = prompter.ids(rec)
                except PromptError:
                    raise  # a setting that fits no record (e.g. chat messages with the template off)
                except ValueError as e:  # this record's prompt (e.g. an empty conversation)
                    ready[pos] = unusable(rec, meta, "bad_prompt", str(e))
                    stats.unusable["bad_prompt"] += 1
                    continue
                if not ids:
                    ready[pos] = unusable(rec, meta, "empty_prompt", "the prompt has no tokens")
                    stats.unusable["empty_prompt"] += 1
                    continue
                own = record_sampling(rec, sampling, settings.record_max_tokens)
                if eot and isinstance(rec.get("prompt"), list) and not set(eot) <= set(own.stop_token_ids or ()):
                    own = replace(own, stop_token_ids=tuple(dict.fromkeys((*(own.stop_token_ids or ()), *eot))))
                rec_limit, rec_why = limit, why
                if own.max_tokens != sampling.max_tokens and not settings.max_prompt_len:
                    rec_limit = max(0, max_len - own.max_tokens)
                    rec_why = (f"max_model_len {max_len} - the record's max_tokens {own.max_tokens}; raise "
                               "--max-model-len, or give --max-tokens for every record")
                if rec_limit > max_len - 1:   # a --max-prompt-len beyond the context: no engine takes such a prompt
                    rec_limit, rec_why = max_len - 1, f"max_model_len {max_len}, less one token to generate"
                if len(ids) > rec_limit:
                    ready[pos] = too_long(rec, len(ids), rec_limit, meta, rec_why)
                    stats.unusable["prompt_too_long"] += 1
                    bar.update(1)
                    continue
                key = rec.get("id")
                seed = None if sampling.seed is None else prompt_seed(sampling.seed, key if isinstance(key, str) else ids)
                seeds[pos] = seed
                if own is not sampling:
                    yield pos, ids, seed, own
                else:
                    yield pos, ids, seed

        def flush() -> None:
            nonlocal nxt
            while nxt in ready:
                writer.write(ready.pop(nxt))
                nxt += 1

        if settings.tools is None:
            results = engine.stream(requests(), sampling)
        elif getattr(engine, "runs_tools", False):   # an engine pool, rlvr-train's engine actors: their own tool loop
            results = engine.stream(requests(), sampling, tools=settings.tools)
        else:
            from rlvr.tools import tool_stream

            results = tool_stream(engine, requests(), sampling, settings.tools)
        for pos, res in results:
            ready[pos] = annotate(records[pos], res, meta, seeds.pop(pos, None), want_ids)
            stats.generated += 1
            stats.prompt_tokens += res.prompt_tokens
            toks = sum(res.completion_tokens)
            stats.completion_tokens += toks
            bar.update(1, extra=toks)
            flush()
        flush()
        if nxt != len(records):
            raise EngineError(f"{len(records) - nxt} record(s) got no result")
    finally:
        if bar is not None:
            bar.close()
        if own:
            engine.close()
    stats.seconds = time.monotonic() - t0
    return stats


def record_sampling(rec: dict, sampling: Sampling, own_max_tokens: bool = True) -> Sampling:
    """The sampling of one record: its own stop strings (e.g. MBPP's [DONE]) join the
    common ones, and its own `max_tokens` (a dataset's generation length) replaces the
    common one when own_max_tokens. Returns `sampling` itself when nothing changes."""
    out = sampling
    extra = rec.get("stop")
    if isinstance(extra, str):
        extra = [extra]
    if extra:
        out = replace(out, stop=tuple(dict.fromkeys(tuple(sampling.stop) + tuple(s for s in extra if s))))
    mt = rec.get("max_tokens")
    if own_max_tokens and isinstance(mt, int) and not isinstance(mt, bool) and mt > 0 and mt != sampling.max_tokens:
        out = replace(out, max_tokens=mt)
    return out


def run_to_file(records: list[dict], settings: RolloutSettings, path: str, *, engine: Any = None,
                progress: bool | None = None, warn: Callable[[str], None] | None = None,
                same_model: bool = False, exclusive: bool = False) -> tuple[int, Stats]:
    """run() into an append-only file that resumes: records already in `path` (a prefix of
    `records`, checked) are skipped, a torn last line is cut. same_model: the records there
    must also come from settings.model; exclusive: a second process writing `path` fails at
    once (both for rlvr-rollout --output; an evaluation's folder is its checkpoint's by name,
    and its claims give it one writer). Returns (skipped, stats)."""
    from rlvr.records import open_resumable

    meta = sampling_meta(settings)
    skips: list[int] = []

    def check(done: list[dict]) -> None:  # before the file is touched: another run's file stays as it is
        skips.append(resume_point(done, records, path, meta, settings.model if same_model else None))

    _, fh = open_resumable(path, check=check, exclusive=exclusive)
    with fh:
        skip = skips[0]
        if skip and warn is not None:
            warn(f"{path}: {skip} of {len(records)} record(s) already done; resuming")
        stats = run(records[skip:], settings, RecordWriter(fh), engine=engine, progress=progress, warn=warn)
    return skip, stats

