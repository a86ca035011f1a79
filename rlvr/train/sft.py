"""Supervised fine-tuning in rlvr-train (the `sft` section): SFT records to the token sequences
of each step's SFT batch, and the SFT-only run (`sft.only`).

An SFT record is a JSONL line with `prompt` (a string, or chat messages, as rlvr-data writes
it) and `completion` (the text to learn); rlvr-select writes them from verified rollouts.
Tokenisation is the RL path's, so the prompt/completion boundary is where generation starts:
the prompt through rlvr.engines.base.encode_prompt (what the engines get), the completion on
its own after it. The completion ends the way a generated one ends (sft.eos): with its stop
string when the record's `stop_reason` names one (the engine's tokens include it), else with
the end-of-sequence token, unless `finish_reason` is `length` (it was cut). A record carrying
the engine's own `completion_token_ids` is trained on exactly those tokens.

Prompts use the RL data's template: a record whose `id` is one of the run's RL prompts is
trained on that prompt (the RL data's template, few-shot and chat settings), whatever prompt
it carries. Records longer than rollout.max_model_len tokens are left out; completions are cut
to sft.max_tokens. What was kept and why the rest was not is said once on stderr.

Step k's SFT batch is records [kB, (k+1)B) of the record stream, each pass over the records
shuffled with (sft.seed, pass): a pure function of k, so a resumed run continues where it
stopped.
"""

from __future__ import annotations

import random
import time

from rlvr.errors import ConfigError
from rlvr.messages import say
from rlvr.records import RecordError, is_error_record, read_records
from rlvr.train.extras import ExtraBatch
from rlvr.train.modes import Mode


def _token_id(t, vocab: int | None) -> bool:
    return isinstance(t, int) and not isinstance(t, bool) and 0 <= t and (vocab is None or t < vocab)


def _checker(vocab: int | None):
    """The test of one SFT record's fields (vocab: the tokenizer's size, the bound of token ids)."""
    def check(rec: dict) -> tuple[str, str] | None:
        if not isinstance(rec.get("completion"), str):
            return "completion", "must be a string"
        ids = rec.get("completion_token_ids")
        if ids is not None and not (isinstance(ids, list) and all(_token_id(t, vocab) for t in ids)):
            return "completion_token_ids", f"must be a list of token ids (integers from 0 to {vocab - 1})" \
                if vocab else "must be a list of token ids (integers >= 0)"
        stop = rec.get("stop_reason")
        if stop is not None and not (isinstance(stop, str) or _token_id(stop, vocab)):
            return "stop_reason", "must be a stop string, a token id or null"
        return None
    return check


def read_sft_records(uri: str, vocab: int | None = None) -> list[dict]:
    """The SFT records of a local file or an s3:// object (fetched into the download cache);
    a bad line stops with FILE:LINE and the field."""
    path = uri
    if uri.startswith("s3://"):
        from rlvr.s3 import download_cached

        path = download_cached(uri)
    try:
        recs = list(read_records([path], required=("prompt", "completion"), check=_checker(vocab)))
    except RecordError as e:
        raise RecordError(e.message, uri, e.line, e.field) from None
    for rec in recs:
        if is_error_record(rec):
            err = rec["error"]
            raise RecordError(f"an error record ({err.get('file')}:{err.get('line')}: {err.get('message')}): an "
                              "earlier stage could not read that line; drop it or fix its input", uri)
    return recs


def completion_ids(tokenizer, rec: dict, eos: bool) -> list[int]:
    """The completion's token ids as the engine would have produced them (see the module)."""
    if rec.get("completion_token_ids") is not None:
        return list(rec["completion_token_ids"])
    text = rec["completion"]
    stop = rec.get("stop_reason")
    cut = rec.get("finish_reason") == "length"
    if eos and isinstance(stop, str) and not cut:
        text += stop
    ids = list(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else []
    if eos and not cut and not isinstance(stop, str):
        end = stop if isinstance(stop, int) else tokenizer.eos_token_id
        if end is not None:
            ids.append(int(end))
    return ids


def rl_prompts(stream) -> dict[str, dict] | None:
    """id -> prompt record of the run's RL data (rlvr.train.stream.PromptStream; None: no RL
    data): its prompt and the chat settings it carries (template file, thinking switch)."""
    if stream is None:
        return None
    return {r["id"]: r for recs in stream.by_name.values() for r in recs if "id" in r}


def vocab_size(model_path: str, tokenizer) -> int:
    """The bound of the token ids a model takes: its embedding's rows (often more than the
    tokenizer knows: engines may sample the padding rows), at least the tokenizer's size."""
    from transformers import AutoConfig

    try:
        c = AutoConfig.from_pretrained(model_path)
    except (OSError, ValueError):
        return len(tokenizer)
    c = getattr(c, "text_config", None) or c
    return max(len(tokenizer), int(getattr(c, "vocab_size", 0) or 0))


class SftData:
    """The run's SFT sequences and their per-step batches (see the module). vocab: the bound of
    token ids (rlvr.train.sft.vocab_size; default the tokenizer's size)."""

    def __init__(self, cfg, tokenizer, rl_prompts: dict[str, dict] | None = None, log=say,
                 vocab: int | None = None):
        from rlvr.train.prompts import prompt_token_ids

        s = cfg.sft
        self.cfg = s
        self.size = s.batch_size or cfg.rollout.prompts_per_step
        self.epochs = s.epochs
        limit = cfg.rollout.max_model_len
        max_tokens = s.max_tokens or cfg.rollout.max_tokens
        recs = read_sft_records(s.data, vocab or len(tokenizer))
        self.prompts: list[list[int]] = []
        self.completions: list[list[int]] = []
        too_long = empty = no_prompt = cut = replaced = own = 0
        for rec in recs:
            rl = (rl_prompts or {}).get(rec.get("id"))
            if rl is not None and not isinstance(rl, dict):
                rl = {"prompt": rl}
            if rl is not None and rl["prompt"] != rec["prompt"]:
                replaced += 1
            own += rl_prompts is not None and rl is None
            # tokenised as rlvr-rollout does, with the RL record's prompt and chat settings where the id is one
            p = prompt_token_ids(tokenizer, rl if rl is not None else rec)
            c = completion_ids(tokenizer, rec, s.eos)
            if not p:   # nothing for the first completion token to follow (rlvr-rollout refuses these too)
                no_prompt += 1
                continue
            if not c:
                empty += 1
                continue
            if len(c) > max_tokens:
                c, cut = c[:max_tokens], cut + 1
            if len(p) + len(c) > limit:
                too_long += 1
                continue
            self.prompts.append(p)
            self.completions.append(c)
        why = [f"{too_long} longer than rollout.max_model_len ({limit} tokens)" if too_long else "",
               f"{empty} with an empty completion" if empty else "",
               f"{no_prompt} with an empty prompt" if no_prompt else ""]
        why = [w for w in why if w]
        notes = [f"{cut} cut to sft.max_tokens ({max_tokens})" if cut else "",
                 f"{replaced} trained on the RL data's prompt for their id (its template)" if replaced else "",
                 f"{own} on their own prompt (their id is not one of the RL data's)" if own else ""]
        notes = [n for n in notes if n]
        log(f"sft: {len(self.prompts)} of {len(recs)} records from {s.data} kept"
            + (f"; left out: {', '.join(why)}" if why else "") + (f"; {'; '.join(notes)}" if notes else ""))
        if not self.prompts:
            raise ConfigError(f"sft.data: {s.data} has no usable records")
        self._order: dict[int, list[int]] = {}

    def __len__(self) -> int:
        return len(self.prompts)

    def order(self, e: int) -> list[int]:
        """The record order of pass e."""
        if e not in self._order:
            self._order = {k: v for k, v in self._order.items() if k >= e - 1}
            idx = list(range(len(self.prompts)))
            if self.cfg.shuffle:
                random.Random(self.cfg.seed * 100003 + e).shuffle(idx)
            self._order[e] = idx
        return self._order[e]

    def batch(self, step: int) -> ExtraBatch | None:
        """Step `step`'s SFT batch (0-based); None once sft.epochs passes are used up."""
        n = len(self.prompts)
        picked = []
        for pos in range(step * self.size, (step + 1) * self.size):
            e, i = divmod(pos, n)
            if self.epochs is not None and e >= self.epochs:
                break
            picked.append(self.order(e)[i])
        if not picked:
            return None
        return ExtraBatch([self.prompts[i] for i in picked], [self.completions[i] for i in picked],
                          weight=self.cfg.weight, micro_batch_size=self.cfg.micro_batch_size)


class SftMode(Mode):
    """The `sft` section as a training mode (rlvr.train.modes): each step's SFT batch beside the
    RL loss, or (sft.only) the SFT baseline alone."""

    @staticmethod
    def enabled(cfg) -> bool:
        return bool(cfg.sft.data)

    @staticmethod
    def check(cfg) -> list[str]:
        """The sft section (docs/train-modes.md)."""
        sft = cfg.sft
        if sft.data is None and sft.only:
            raise ConfigError("sft.only needs sft.data (a JSONL file of {prompt, completion} records)")
        if sft.only and cfg.eval.benchmarks:
            raise ConfigError("eval.benchmarks: validation runs on the rollout engines, which sft.only does not "
                              "start; drop the eval section and run rlvr-eval on the checkpoints")
        if sft.data is not None:
            if not sft.weight > 0 or sft.micro_batch_size < 1 or (sft.batch_size or 1) < 1 \
                    or (sft.max_tokens or 1) < 1 or (sft.epochs or 1) < 1:
                raise ConfigError("sft.weight must be > 0, sft.micro_batch_size >= 1, sft.batch_size, sft.max_tokens "
                                  "and sft.epochs >= 1 (or null)")
        if sft.only and cfg.train.loss.beta > 0:
            return ["train.loss.beta is the RL loss's KL weight: with sft.only it has no effect, and the trainer "
                    "still holds a reference model (set it to 0)"]
        return []

    @staticmethod
    def alone(cfg) -> bool:
        return cfg.sft.only

    def __init__(self, run):
        # read and tokenised before Ray starts
        self.data = SftData(run.cfg, run.tokenizer, rl_prompts(run.stream),
                            vocab=vocab_size(run.model.path, run.tokenizer))

    def extend(self, run, assembled, groups: list, step: int) -> None:
        eb = self.data.batch(step)
        if eb is not None:
            assembled.batch.extras["sft"] = eb   # trained beside the RL loss (rlvr.losses)

    def steps(self, run, recorder, start_step: int) -> dict:
        return run_only(run, self.data, recorder, start_step)


def run_only(run, data: SftData, recorder, start_step: int) -> dict:
    """sft.only: the SFT baseline through rlvr-train's trainer, no engines and no rewards. Each
    step is one SFT batch (train.mini_batches optimizer updates); the trace has the trainer's
    metrics (loss/sft, loss/total, grad/norm, lr, sft/sequences, sft/tokens) and the times."""
    from rlvr.train.trainer import Batch

    cfg = run.cfg
    total, every = cfg.train.steps, cfg.checkpoint.every
    last: dict = {}
    trained = start_step
    t_start = time.monotonic()
    samples = 0.0
    for step in range(start_step, total):
        eb = data.batch(step)
        if eb is None:
            say(f"sft data ended after {step} steps (sft.epochs {cfg.sft.epochs})")
            break
        t0 = time.monotonic()
        batch = Batch([], [], [], [], [], extras={"sft": eb})
        m = run.trainers.step(batch, step)
        for k in ("train/sequences", "train/tokens", "logprob/engine_vs_trainer_abs_diff"):
            m.pop(k, None)  # the RL batch's, empty here
        dt = time.monotonic() - t0
        version = run.trainers.version = step + 1
        samples += len(eb)
        metrics = {"step": version, "policy_version": version, **m, "time/train_s": dt, "time/step_s": dt,
                   "throughput/tokens_per_s": m.get("sft/tokens", 0.0) / dt if dt > 0 else 0.0,
                   "throughput/samples_per_s": len(eb) / dt if dt > 0 else 0.0,
                   "samples/total": samples, "time/elapsed_s": time.monotonic() - t_start}
        recorder.write(metrics, [], version)
        recorder.tick()
        done = version - start_step
        eta = (time.monotonic() - t_start) / done * (total - version)
        say(f"step {version}/{total} loss/sft {m.get('loss/sft', float('nan')):.4f} "
            f"grad/norm {m.get('grad/norm', 0.0):.3f} step {dt:.2f}s ETA {eta:.0f}s")
        last, trained = metrics, version
        if version == total or (every and version % every == 0):
            run.checkpoint(version, recorder.uploader)
    if trained > start_step and trained != total and not (every and trained % every == 0):
        run.checkpoint(trained, recorder.uploader)
    return last
