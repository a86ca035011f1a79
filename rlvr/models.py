"""Where a model comes from: a local folder, an s3:// folder, a models prefix on S3, or the hub.

    m = resolve_model("s3://bucket/models/Qwen3-1.7B-Base/")   # downloaded once to the cache
    m = resolve_model("Qwen/Qwen3-1.7B-Base")   # $RLVR_S3_MODELS/Qwen/Qwen3-1.7B-Base/ or
                                                # $RLVR_S3_MODELS/Qwen3-1.7B-Base/ first, else the hub
    m.path      # what transformers and the engines load (a local folder, or the hub name)
    m.record()  # {"name", "source": local|s3|hub, "uri"?, "path"}: rlvr-train writes it to run.json

S3 folders go through rlvr.s3's download cache (verified, atomic, fetched again only when an
object changed; $RLVR_CACHE/s3, default ~/.cache/rlvr/s3).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

MODELS_ENV = "RLVR_S3_MODELS"


@dataclass(frozen=True)
class ResolvedModel:
    name: str          # as given
    path: str          # a local folder, or the hub name
    source: str        # local | s3 | hub
    uri: str | None = None  # the s3:// folder it came from

    def record(self) -> dict:
        out = {"name": self.name, "source": self.source, "path": self.path}
        if self.uri:
            out["uri"] = self.uri
        return out


def _hub_style(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


def resolve_model(name: str, *, log=None) -> ResolvedModel:
    """A model name as local, S3 or hub source (see the module docstring); never downloads from
    the hub itself (transformers and vLLM do that with the returned name)."""
    from rlvr.s3 import S3Error, download_folder_cached

    if name.startswith("s3://"):
        if log:
            log(f"model {name}: fetching into the local cache (only objects that changed)")
        return ResolvedModel(name, download_folder_cached(name), "s3", name.rstrip("/") + "/")
    if os.path.exists(name) or not _hub_style(name):
        return ResolvedModel(name, name, "local")
    prefix = os.environ.get(MODELS_ENV, "").strip()
    if prefix:
        base = prefix.rstrip("/") + "/"
        for cand in (f"{base}{name}/", f"{base}{name.split('/')[1]}/"):
            try:
                path = download_folder_cached(cand)
            except S3Error as e:
                if e.code == "NoSuchKey":
                    continue  # not under the prefix: the next candidate, then the hub
                raise
            if log:
                log(f"model {name}: from {cand} ({MODELS_ENV})")
            return ResolvedModel(name, path, "s3", cand)
        if log:
            log(f"model {name}: not under {base} ({MODELS_ENV}): from the hub")
    return ResolvedModel(name, name, "hub")
