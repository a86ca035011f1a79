"""The transformers engine: ``model.generate`` one prompt at a time, for checking vLLM and for
machines without vLLM.

Sampling is explicit: the model's generation_config.json is replaced by a neutral one that
keeps only its special token ids, and every sampling field is passed (top_k 0 and top_p 1
unless set, so transformers' silent top_k=50 never applies). The n samples of a prompt are
drawn as one batch after seeding a private RNG stream with the prompt's seed, so a prompt's
samples depend on (seed, key, n) only, never on the other prompts; the caller's torch RNG
state is left as it was. Samples differ from vLLM's for the same seed (different RNGs).
Log-probabilities follow the same definition as the vLLM engine (see rlvr.engines.base).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from rlvr.engines import checkpoint
from rlvr.engines.base import (Engine, EngineError, EngineOptions, PromptIds, Result, Sample, Sampling, TopK, Weights,
                               cut_at_stop, load_tokenizer, untouched)
from rlvr.engines.weights import load_update

_DTYPES = {"bfloat16": "bfloat16", "float16": "float16", "float32": "float32"}


def rng_devices(device: str) -> list[int]:
    """The CUDA devices whose generators a seeded request forks (and gives back), none on the CPU."""
    import torch

    return [torch.device(device).index or 0] if device.startswith("cuda") else []


class HFEngine(Engine):
    kind = "hf"
    default_window = 1

    def __init__(self, model: str, options: EngineOptions | None = None, warn=None):
        options = options or EngineOptions()
        super().__init__(model, options)
        import torch
        from transformers import AutoModelForCausalLM, GenerationConfig

        if options.tensor_parallel_size != 1:
            raise EngineError("the hf engine runs on one device: use tensor_parallel_size 1 or the vllm engine")
        self.path = checkpoint.resolve(model, warn=warn, tokenizer=options.tokenizer)
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # no "Loading weights" bar on a command's stderr
        if options.device == "auto":
            self.device = "cuda" if torch.cuda.is_available() else "cpu"
        else:
            self.device = options.device
        dtype = getattr(torch, _DTYPES[options.dtype]) if options.dtype != "auto" else "auto"
        try:
            self.hf = AutoModelForCausalLM.from_pretrained(self.path, dtype=dtype, **options.extra).to(self.device)
        except Exception as e:  # noqa: BLE001 - transformers raises many types
            raise EngineError(f"transformers could not load {model}: {type(e).__name__}: {e}") from e
        self.hf.eval()
        self.tokenizer = load_tokenizer(self.path, options.tokenizer)
        old = self.hf.generation_config
        eos = old.eos_token_id if old.eos_token_id is not None else self.tokenizer.eos_token_id
        eos_list = [eos] if isinstance(eos, int) else list(eos or [])
        if self.tokenizer.eos_token_id is not None and self.tokenizer.eos_token_id not in eos_list:
            eos_list.append(self.tokenizer.eos_token_id)
        if not eos_list:
            raise EngineError(f"{model}: no end-of-sequence token id in generation_config.json or the tokenizer")
        pad = old.pad_token_id if old.pad_token_id is not None else self.tokenizer.pad_token_id
        self.eos_ids = set(eos_list)
        self.pad_id = eos_list[0] if pad is None else pad
        # A neutral default config: only special ids survive from the model's own.
        self.hf.generation_config = GenerationConfig(eos_token_id=eos_list, pad_token_id=self.pad_id,
                                                     bos_token_id=old.bos_token_id)
        self._specs = checkpoint.tensor_specs(self.path)
        self._queue: deque = deque()
        self.engine_version = _transformers_version()

    @property
    def max_model_len(self) -> int:
        if self.options.max_model_len:
            return int(self.options.max_model_len)
        cfg = self.hf.config.get_text_config() if hasattr(self.hf.config, "get_text_config") else self.hf.config
        return int(getattr(cfg, "max_position_embeddings", 0) or 2048)

    # --- generation ------------------------------------------------------------------------

    def _submit(self, handle: Any, prompt_ids: PromptIds, seed: int | None, sampling: Sampling) -> None:
        self._queue.append((handle, list(prompt_ids), seed, sampling))

    def _poll(self) -> list[tuple[Any, Result]]:
        handle, ids, seed, sampling = self._queue.popleft()
        return [(handle, self._generate_one(ids, seed, sampling))]

    def _abort(self, handles: list) -> None:
        wanted = set(handles)
        self._queue = deque(r for r in self._queue if r[0] not in wanted)

    def _generate_one(self, ids: PromptIds, seed: int | None, sampling: Sampling) -> Result:
        import torch
        from transformers import GenerationConfig

        room = self.max_model_len - len(ids)
        if room < 1:
            raise EngineError(f"prompt of {len(ids)} tokens leaves no room under max_model_len {self.max_model_len}")
        greedy = sampling.greedy
        rows = 1 if greedy else sampling.n
        want_lp = sampling.logprobs
        raw = self.options.logprobs_mode == "raw"
        # The sampling warpers are ours, in transformers' order (temperature, top-k, top-p), so
        # that the recorder can sit before them (raw) or after them (processed) and keep only
        # the chosen tokens' log-probs: no step's full-vocabulary scores outlive the next step.
        gc = GenerationConfig(
            do_sample=not greedy, num_return_sequences=rows, max_new_tokens=min(sampling.max_tokens, room),
            temperature=1.0, top_k=None if greedy else 0, top_p=1.0, min_p=None, typical_p=1.0, repetition_penalty=1.0,
            eos_token_id=sorted(self.eos_ids | set(sampling.stop_token_ids)), pad_token_id=self.pad_id,
            return_dict_in_generate=True,
        )
        from transformers import LogitsProcessorList

        warpers = [] if greedy else _warpers(sampling)
        rec = _ChosenLogprobs() if want_lp else None
        procs = ([rec] + warpers if raw else warpers + [rec]) if rec is not None else warpers
        inp = torch.tensor([ids], device=self.device)
        kw: dict[str, Any] = {"attention_mask": torch.ones_like(inp), "logits_processor": LogitsProcessorList(procs)}
        if sampling.stop:
            from transformers import StoppingCriteriaList

            kw["stopping_criteria"] = StoppingCriteriaList([_StopOnText(self.tokenizer, sampling.stop, len(ids))])
        with torch.no_grad(), torch.random.fork_rng(devices=rng_devices(self.device), enabled=seed is not None):
            if seed is not None:
                torch.manual_seed(seed)
            out = self.hf.generate(inp, generation_config=gc, **kw)
        seqs = out.sequences[:, len(ids):].tolist()
        steps = rec.finish(out.sequences[:, -1]) if rec is not None else None     # [T, rows]
        samples = [self._sample(seqs[r], r, steps, sampling) for r in range(rows)]
        if greedy and sampling.n > 1:
            samples = [samples[0]] + [Sample(**vars(samples[0])) for _ in range(sampling.n - 1)]
        return Result(prompt_token_ids=list(ids), samples=samples)

    def _sample(self, seq: list[int], row: int, steps: Any, sampling: Sampling) -> Sample:
        ends = self.eos_ids | set(sampling.stop_token_ids)
        end = next((k for k, t in enumerate(seq) if t in ends), None)
        toks = seq[: end + 1] if end is not None else seq
        finish = "stop" if end is not None else "length"
        # vLLM's stop_reason: the stop token's id (None for the model's own EOS)
        reason = toks[-1] if end is not None and toks[-1] not in self.eos_ids else None
        # as vLLM: the model's EOS never shows; a stop token shows unless it is a special token
        text = self.tokenizer.decode([t for t in toks if t not in self.eos_ids], skip_special_tokens=True)
        if sampling.stop:
            cut, which = cut_at_stop(text, sampling.stop)
            if which is not None:
                toks = toks[: self._stop_len(toks, sampling.stop)]
                text, finish, reason = cut, "stop", which
        lps = None
        if steps is not None:
            lps = steps[:len(toks), row].tolist()
        return Sample(text=text, token_ids=toks, finish_reason=finish, stop_reason=reason, logprobs=lps)

    def _stop_len(self, toks: list[int], stop: tuple[str, ...]) -> int:
        """The fewest leading tokens whose text contains a stop string (binary search)."""
        lo, hi = 1, len(toks)
        while lo < hi:
            mid = (lo + hi) // 2
            if cut_at_stop(self.tokenizer.decode(toks[:mid], skip_special_tokens=True), stop)[1] is not None:
                hi = mid
            else:
                lo = mid + 1
        return lo

    # --- scoring ---------------------------------------------------------------------------

    def _score(self, prompts: list[PromptIds], completions: list[PromptIds], top_k: int) -> TopK:
        """One forward pass per sequence; the log-softmax of the positions that predict the
        completion's tokens, in float32."""
        import torch

        k = min(top_k, int(self.hf.get_output_embeddings().weight.shape[0]))
        parts = []
        with torch.no_grad():
            for p, c in zip(prompts, completions):
                ids = torch.tensor([p + c], device=self.device)
                logits = self.hf(input_ids=ids, logits_to_keep=len(c) + 1, use_cache=False).logits[0, :len(c)]
                lp = torch.log_softmax(logits.float(), dim=-1)                       # [L, V]
                top = torch.topk(lp, k, dim=-1)                                      # sorted, most likely first
                tok = lp.gather(-1, torch.tensor(c, device=lp.device).unsqueeze(-1)).squeeze(-1)   # [L]
                parts.append((top.indices.cpu().numpy(), top.values.cpu().numpy(), tok.cpu().numpy()))
        return TopK.join(parts, k)

    # --- weights ---------------------------------------------------------------------------

    def _prepare_weights(self, weights: Weights) -> dict:
        tensors = load_update(weights, self._specs)
        state = self.hf.state_dict()
        missing = [n for n in tensors if n not in state]
        if missing:
            raise untouched(f"weight {missing[0]!r} is not a parameter of the loaded model")
        return tensors

    def _load_weights(self, tensors: dict, version: Any) -> None:
        import torch

        state = self.hf.state_dict()
        with torch.no_grad():
            for n, t in tensors.items():
                state[n].copy_(t.to(state[n].device))

    def close(self) -> None:
        self.hf = None


def _warpers(sampling: Sampling) -> list:
    """transformers' sampling warpers for `sampling`, as generate builds them (same classes, order, conditions)."""
    from transformers import TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    out = []
    if sampling.temperature != 1.0:
        out.append(TemperatureLogitsWarper(sampling.temperature))
    if sampling.top_k:
        out.append(TopKLogitsWarper(top_k=sampling.top_k, min_tokens_to_keep=1))
    if sampling.top_p < 1.0:
        out.append(TopPLogitsWarper(top_p=sampling.top_p, min_tokens_to_keep=1))
    return out


class _ChosenLogprobs:
    """A logits processor that changes nothing and keeps, per generation step, only the log-prob
    of the token each row chose: at step t it sees the token chosen at t - 1 (the last column of
    input_ids) and takes its log-prob from the one step of log-softmax it holds; `finish`
    takes the last step's from the final tokens. Memory: one [rows, V] step, not one per step."""

    def __init__(self):
        self.prev = None                 # [rows, V] log-softmax of the last step's scores
        self.chosen: list = []           # per step: [rows]

    def _take(self, tokens):
        self.chosen.append(self.prev.gather(-1, tokens.to(self.prev.device).unsqueeze(-1)).squeeze(-1).cpu())

    def __call__(self, input_ids, scores):
        import torch

        if self.prev is not None:
            self._take(input_ids[:, -1])
        self.prev = torch.log_softmax(scores.float(), dim=-1)
        return scores

    def finish(self, last_tokens):
        """-> [T, rows] float32: the chosen tokens' log-probs of every step."""
        import torch

        if self.prev is not None:
            self._take(last_tokens)
            self.prev = None
        return torch.stack(self.chosen) if self.chosen else torch.zeros((0, len(last_tokens)))


class _StopOnText:
    """Stop a row once its decoded text contains a stop string (vLLM's rule). transformers'
    own stop_strings matches token strings and misfires on some tokenizers (Metaspace)."""

    def __init__(self, tokenizer: Any, stop: tuple[str, ...], prompt_len: int):
        self.tokenizer, self.stop, self.start = tokenizer, stop, prompt_len
        self.window = max(len(s) for s in stop) + 8  # tokens: enough to hold any stop string

    def __call__(self, input_ids: Any, scores: Any, **kwargs: Any) -> Any:
        import torch

        tails = self.tokenizer.batch_decode(input_ids[:, self.start:][:, -self.window:], skip_special_tokens=True)
        return torch.tensor([any(s in t for s in self.stop) for t in tails], device=input_ids.device)


def _transformers_version() -> str:
    import transformers

    return str(transformers.__version__)
