"""vLLM worker extension: in-place weight loading with a policy version, run inside each
vLLM worker process (one per tensor-parallel rank).

The vLLM engine passes ``worker_extension_cls="rlvr.engines.vllm_worker.WeightSync"`` to
``vllm.LLM`` and calls these methods with ``LLM.collective_rpc``. Loading goes through
vLLM's own ``model_runner.reload_weights`` (checkpoint-format names, layer-wise
processing, so repacked CPU kernels are rebuilt). One gap in it is closed here: with tied
input/output embeddings the output layer is skipped by the reload, and on CPU it keeps a
packed copy of the old embedding; it is re-processed after every load.

Weights broadcast by a trainer (rlvr.engines.transfer) arrive through vLLM's own worker
methods (init_weight_transfer_engine, start_weight_update, update_weights); the update is
closed by rlvr_finish_weight_update, which applies the same tied-head refresh and version.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from typing import Any


def _iter_safetensors(path: str) -> Iterator[tuple[str, Any]]:
    from safetensors import safe_open

    files = [path] if os.path.isfile(path) else sorted(
        os.path.join(path, f) for f in os.listdir(path) if f.endswith(".safetensors"))
    for f in files:
        with safe_open(f, framework="pt") as fh:
            for name in fh.keys():
                yield name, fh.get_tensor(name)


class _TiedHeadOnly(logging.Filter):
    """Drops vLLM's "Failed to load weights" warning for the one layer that has nothing to load
    by design: the output layer of a model with tied embeddings (its weights are the input
    embedding's, refreshed after the load). The same warning for any other layer, a weight
    the update did not carry, goes through."""

    def __init__(self, skipped: tuple[str, ...]):
        super().__init__()
        self.skipped = skipped

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.msg == "%s: Failed to load weights" and record.args
                    and record.args[0] in self.skipped)


@contextlib.contextmanager
def _quiet_layerwise(worker=None):
    log = logging.getLogger("vllm.model_executor.model_loader.reload.layerwise")
    text_cfg = getattr(getattr(getattr(worker, "model_runner", None), "model_config", None), "hf_text_config", None)
    tied = getattr(text_cfg, "tie_word_embeddings", False)
    quiet = _TiedHeadOnly(("ParallelLMHead",) if tied else ())
    log.addFilter(quiet)
    try:
        yield
    finally:
        log.removeFilter(quiet)


# Parameters read back after every load and compared with what was sent: stored by vLLM under
# the checkpoint's own name and layout (no fused or repacked kernel), so the model's tensor
# must equal the one given, cast to its dtype.
READ_BACK = ("model.embed_tokens.weight", "model.norm.weight", "model.layers.0.input_layernorm.weight")


class _ReadBack:
    """Keeps what the update gives for the READ_BACK names as it streams past, then compares it
    with what the model holds after the load: bytes received but not loaded (a load that
    skipped or misplaced them) fail the update, naming the parameter."""

    def __init__(self, weights):
        self.weights, self.sent = weights, {}

    def __iter__(self):
        for name, t in self.weights:
            if name in READ_BACK:
                self.sent[name] = t.detach().clone()
            yield name, t

    def check(self, model) -> None:
        import torch

        params = dict(model.named_parameters())
        for name, want in self.sent.items():
            got = params.get(name)
            if got is None:
                continue
            got = got.detach()
            if got.shape != want.shape:
                # a vocabulary padded to vLLM's multiple (extra rows after the real ones) compares
                # on the real rows; a tensor-parallel shard (fewer rows) is not compared
                if got.dim() != want.dim() or got.shape[1:] != want.shape[1:] or got.shape[0] < want.shape[0]:
                    continue
                got = got[: want.shape[0]]
            if not torch.equal(got.cpu(), want.to(got.dtype).cpu()):
                raise RuntimeError(f"the weights loaded differ from those sent: {name} (read back after the load)")


try:  # the gloo transport of rlvr.engines.transfer, known to this worker's vLLM factories
    from rlvr.engines.transfer import register as _register_transports

    _register_transports()
except ImportError:  # a vLLM without the weight-transfer API: update_weights still works
    pass


class WeightSync:
    """Mixed into vLLM's worker class; `self` is the worker."""

    def rlvr_load_weights(self, blob: bytes | None, path: str | None, version: Any) -> Any:
        """Load all weights from a safetensors blob or a folder/file path; return version."""
        if blob is not None:
            from safetensors.torch import load

            weights: Any = iter(load(bytes(blob)).items())
        elif path is not None:
            weights = _iter_safetensors(path)
        else:
            raise ValueError("rlvr_load_weights needs a blob or a path")
        reload = getattr(self, "reload_weights", None) or self.model_runner.reload_weights
        probe = _ReadBack(weights)
        with _quiet_layerwise(self):
            reload(weights_iterator=iter(probe), is_checkpoint_format=True)
        self._rlvr_refresh_tied_head()
        probe.check(self.model_runner.get_model())
        self._rlvr_version = version
        return version

    def rlvr_update_weights(self, update_info: dict) -> int:
        """vLLM's update_weights (receive a broadcast and load it), returning the checksum
        (rlvr.engines.weights.Checksum) of every tensor received, taken as it reaches the
        model's load_weights (on the stream that received it; the trainer compares it with
        its own)."""
        from rlvr.engines.weights import Checksum

        model = self.weight_transfer_engine.model
        real = model.load_weights
        acc = Checksum()

        probe = self._rlvr_probe = getattr(self, "_rlvr_probe", None) or _ReadBack(())

        def load_weights(weights, *args, **kwargs):
            weights = list(weights)
            acc.add_all(weights)
            probe.weights = weights
            return real(list(probe), *args, **kwargs)

        model.load_weights = load_weights   # this update only: the instance attribute shadows the method
        try:
            self.update_weights(update_info)
        finally:
            del model.load_weights
        return acc.value()

    def rlvr_finish_weight_update(self, version: Any) -> Any:
        """End a broadcast update (vLLM's finish_weight_update: layerwise processing of what
        update_weights received), then the same tied-head refresh as after a load."""
        with _quiet_layerwise(self):
            self.finish_weight_update()
        self._rlvr_refresh_tied_head()
        probe, self._rlvr_probe = getattr(self, "_rlvr_probe", None), None
        if probe is not None:
            probe.check(self.model_runner.get_model())
        self._rlvr_version = version
        return version

    def _rlvr_refresh_tied_head(self) -> None:
        model = self.model_runner.get_model()
        text_cfg = getattr(self.model_runner.model_config, "hf_text_config", None)
        if not getattr(text_cfg, "tie_word_embeddings", False):
            return
        head = getattr(model, "lm_head", None)
        method = getattr(head, "quant_method", None)
        if head is not None and hasattr(method, "process_weights_after_loading"):
            method.process_weights_after_loading(head)

    def rlvr_version(self) -> Any:
        return getattr(self, "_rlvr_version", None)
