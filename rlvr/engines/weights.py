"""Weight updates: turn what a caller sends into named tensors and check them against the
model's checkpoint before anything is touched (names, completeness, shapes)."""

from __future__ import annotations

import os
from typing import Any

from rlvr.engines import checkpoint
from rlvr.engines.base import untouched


def named_tensors(weights: Any) -> dict[str, Any]:
    """{name: tensor} from a mapping or an iterable of (name, tensor) pairs (torch or numpy)."""
    import numpy as np
    import torch

    items = weights.items() if hasattr(weights, "items") else weights
    out = {}
    for name, t in items:
        if isinstance(t, np.ndarray):
            t = torch.from_numpy(t)
        if not isinstance(t, torch.Tensor):
            raise untouched(f"weight {name!r} is a {type(t).__name__}, not a tensor")
        out[str(name)] = t.detach()
    return out


def check_weights(given: dict[str, tuple], specs: dict[str, tuple[str, tuple]] | None) -> None:
    """Refuse (before touching the model) unknown names, missing names and wrong shapes.

    A tied output layer ("lm_head.weight" absent from the checkpoint) may be sent and is
    ignored. specs None (weights that are not safetensors) skips the check.
    """
    if specs is None:
        return
    extra = [n for n in given if n not in specs and n != "lm_head.weight"]
    if extra:
        raise untouched(f"{len(extra)} weight name(s) unknown to this model (e.g. {extra[0]!r})")
    missing = [n for n in specs if n not in given]
    if missing:
        raise untouched(f"partial weight update refused: {len(missing)} of {len(specs)} tensors missing "
                        f"(e.g. {missing[0]!r})")
    for n, shape in given.items():
        if n in specs and tuple(shape) != tuple(specs[n][1]):
            raise untouched(f"weight {n!r} has shape {tuple(shape)}, the model expects {tuple(specs[n][1])}")


def unshared(tensors: dict[str, Any]) -> dict[str, Any]:
    """CPU, contiguous, no two tensors sharing storage (as safetensors requires)."""
    seen: set[int] = set()
    out = {}
    for n, t in tensors.items():
        t = t.to("cpu").contiguous()
        ptr = t.untyped_storage().data_ptr()
        if ptr in seen:
            t = t.clone()
        seen.add(ptr)
        out[n] = t
    return out


def load_update(weights: Any, specs: dict | None) -> dict[str, Any]:
    """{name: tensor} for an update given as tensors or as a folder / .safetensors path,
    checked against specs (the model's checkpoint table); a tied "lm_head.weight" is dropped."""
    if isinstance(weights, (str, os.PathLike)):
        path = str(weights)
        if os.path.isdir(path):
            path = checkpoint.resolve(path, tokenizer="-")
        elif not os.path.isfile(path):
            raise untouched(f"{weights}: no such file or folder")
        given = checkpoint.tensor_specs(path)
        if not given:
            raise untouched(f"{weights}: no .safetensors weights to load")
        check_weights({n: s for n, (_, s) in given.items()}, specs)
        from safetensors.torch import load_file

        files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in sorted(os.listdir(path))
                                                     if f.endswith(".safetensors")]
        tensors: dict[str, Any] = {}
        for f in files:
            tensors.update(load_file(f))
    else:
        tensors = named_tensors(weights)
        check_weights({n: tuple(t.shape) for n, t in tensors.items()}, specs)
    if specs is not None:
        tensors = {n: t for n, t in tensors.items() if n in specs}
    return tensors
