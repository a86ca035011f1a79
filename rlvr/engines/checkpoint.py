"""Model folders: find what to load, check it, and repair the classic shard-index mismatch.

    path = resolve("results/run1/checkpoints/step100", warn=print)   # what to hand to an engine
    specs = tensor_specs(path)                                        # {name: (dtype, shape)}

A Hugging Face model folder (or a checkpoint written by rlvr-train, which uses the same
layout) needs config.json, weights (*.safetensors, with model.safetensors.index.json when
sharded, or pytorch_model*.bin) and tokenizer files. When model.safetensors.index.json
names shards that do not exist (e.g. it says model-00001-of-00001.safetensors but the folder
holds model.safetensors) and the .safetensors files present hold every tensor the index
lists, the folder still loads: a corrected copy of the index goes into a cache folder of
symbolic links (the original folder is never modified) and a warning says how to fix the
folder. Otherwise loading fails with one line that says what is missing and how to fix it.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable

from rlvr.errors import UsageError
from rlvr.records import to_json

INDEX = "model.safetensors.index.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class CheckpointError(UsageError, ValueError):
    """A model folder that cannot be loaded; the message says how to fix it."""


def _looks_like_hub_id(path: str) -> bool:
    return bool(re.fullmatch(r"[A-Za-z0-9][\w.-]*/[\w.-]+", path)) and not path.startswith((".", "/"))


def safetensors_header(path: str) -> dict[str, dict]:
    """The tensor table of a .safetensors file ({name: {dtype, shape, data_offsets}})."""
    try:
        with open(path, "rb") as fh:
            n = int.from_bytes(fh.read(8), "little")
            if n <= 0 or n > 100_000_000:
                raise CheckpointError(f"{path}: not a safetensors file (bad header length)")
            head = json.loads(fh.read(n))
    except (OSError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        raise CheckpointError(f"{path}: unreadable safetensors header ({e})") from None
    head.pop("__metadata__", None)
    return head


def _weight_files(folder: str) -> tuple[list[str], list[str]]:
    names = sorted(os.listdir(folder))
    st = [n for n in names if n.endswith(".safetensors")]
    pt = [n for n in names if re.fullmatch(r"pytorch_model.*\.bin", n)]
    return st, pt


def resolve(path: str, warn: Callable[[str], None] | None = None, tokenizer: str | None = None) -> str:
    """The path an engine should load for the model folder `path` (or a hub id, passed on).

    Raises CheckpointError with a one-line fix for folders that cannot load.
    """
    if not os.path.exists(path):
        if _looks_like_hub_id(path):
            return path
        raise CheckpointError(f"{path}: no such model folder")
    if not os.path.isdir(path):
        raise CheckpointError(f"{path}: is a file; pass the model folder that holds config.json")
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise CheckpointError(f"{path}: not a model folder (no config.json)")
    if tokenizer is None and not any(os.path.isfile(os.path.join(path, f)) for f in TOKENIZER_FILES):
        raise CheckpointError(f"{path}: no tokenizer files (tokenizer.json, tokenizer_config.json, ...); "
                              "copy them from the base model or pass --tokenizer")
    st, pt = _weight_files(path)
    index_path = os.path.join(path, INDEX)
    if not os.path.isfile(index_path):
        if not st and not pt:
            raise CheckpointError(f"{path}: no weights (*.safetensors or pytorch_model*.bin)")
        return path
    try:
        with open(index_path) as fh:
            weight_map: dict[str, str] = json.load(fh)["weight_map"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise CheckpointError(f"{path}: unreadable {INDEX} ({type(e).__name__}: {e}); "
                              "fix it or delete it if one .safetensors file holds the whole model") from None
    named = sorted(set(weight_map.values()))
    missing = [f for f in named if not os.path.isfile(os.path.join(path, f))]
    if not missing:
        return path
    # Where does each tensor actually live?
    where: dict[str, str] = {}
    for f in st:
        for name in safetensors_header(os.path.join(path, f)):
            where.setdefault(name, f)
    lost = [t for t in weight_map if t not in where]
    shown = ", ".join(missing[:2]) + (f" and {len(missing) - 2} more" if len(missing) > 2 else "")
    if lost:
        raise CheckpointError(
            f"{path}: {INDEX} names shards that do not exist ({shown}) and the .safetensors files present "
            f"lack {len(lost)} of its {len(weight_map)} tensors (e.g. {lost[0]}); copy the missing shards, "
            "or re-save the model")
    fixed = _shadow_folder(path, {t: where[t] for t in weight_map})
    if warn is not None:
        present = ", ".join(sorted(set(where[t] for t in weight_map)))
        warn(f"{path}: {INDEX} names {shown}, which does not exist; loading {present} instead "
             f"(fix the folder: delete {INDEX} or rename the file to match it)")
    return fixed


def _cache_root() -> str:
    base = os.environ.get("RLVR_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "rlvr")
    return os.path.join(base, "fixed-checkpoints")


def _shadow_folder(path: str, weight_map: dict[str, str]) -> str:
    """A folder of links to `path`'s files with a corrected index (rebuilt when path changes)."""
    src = os.path.abspath(path)
    entries = sorted(os.listdir(src))
    sig = [src] + [f"{e}:{os.stat(os.path.join(src, e)).st_mtime_ns}" for e in entries]
    key = hashlib.sha1("\n".join(sig).encode()).hexdigest()[:16]
    dest = os.path.join(_cache_root(), f"{os.path.basename(src.rstrip('/'))}-{key}")
    if os.path.isfile(os.path.join(dest, INDEX)):
        return dest
    tmp = f"{dest}.tmp{os.getpid()}"
    os.makedirs(tmp, exist_ok=True)
    for e in entries:
        if e != INDEX:
            os.symlink(os.path.join(src, e), os.path.join(tmp, e))
    with open(os.path.join(src, INDEX)) as fh:
        index = json.load(fh)
    index["weight_map"] = weight_map
    with open(os.path.join(tmp, INDEX), "wb") as fh:
        fh.write(to_json(index, indent=True))
    try:
        os.rename(tmp, dest)
    except OSError:  # another process made it first
        import shutil

        shutil.rmtree(tmp, ignore_errors=True)
    return dest


def tensor_specs(path: str) -> dict[str, tuple[str, tuple[int, ...]]] | None:
    """{name: (safetensors dtype, shape)} of a folder's (or one file's) safetensors weights;
    None when the weights are not safetensors (no check possible without loading them)."""
    files = [path] if os.path.isfile(path) else [os.path.join(path, f) for f in _weight_files(path)[0]]
    if not files:
        return None
    specs: dict[str, tuple[str, tuple[int, ...]]] = {}
    for f in files:
        for name, meta in safetensors_header(f).items():
            specs[name] = (meta["dtype"], tuple(meta["shape"]))
    return specs

