"""Where a model comes from: a local folder, an s3:// folder, a models prefix on S3, or the hub.

    m = resolve_model("s3://bucket/models/Qwen3-1.7B-Base/")   # downloaded once to the cache
    m = resolve_model("Qwen/Qwen3-1.7B-Base")   # $RLVR_S3_MODELS/Qwen/Qwen3-1.7B-Base/ or
                                                # $RLVR_S3_MODELS/Qwen3-1.7B-Base/ first, else the hub
    m.path      # what transformers and the engines load (a local folder, or the hub name)
    m.record()  # {"name", "source": local|s3|hub, "uri"?, "path"}: rlvr-train writes it to run.json
    m.local()   # the same model on another node of a Ray cluster: an s3 source is fetched into
                # that node's own cache, a local folder must be there (shared or copied)

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
    version: dict | None = None  # an s3 source: {key: [etag, size]} of the copy the driver fetched

    def local(self) -> str:
        """What to load on the node this runs on (a Ray actor's, not necessarily the driver's).

        An s3 source: the driver's copy where this node sees it (the driver's node, or a shared
        cache), else this node's download cache (one download per node: the cache's lock makes
        the node's other ranks wait for it), which must hold the same objects as the driver's
        copy (a Failure if the model changed on S3 since). A hub name is left to transformers
        and vLLM. A local folder must exist here, else a ConfigError names the node and the
        ways to fix it."""
        if self.source == "s3":
            from rlvr.errors import Failure
            from rlvr.s3 import cached_folder_version, download_folder_cached

            if self.version is not None and cached_folder_version(self.path) == self.version:
                return self.path
            path = download_folder_cached(self.uri)
            if self.version is not None and cached_folder_version(path) != self.version:
                raise Failure(f"model {self.uri} changed on S3 after the run fetched it: the nodes would load "
                              "different weights; start the run again")
            return path
        if self.source == "local" and not os.path.exists(self.path):
            import socket

            from rlvr.errors import ConfigError

            raise ConfigError(f"model {self.path} is not on node {socket.gethostname()}: put it on a filesystem "
                              "every node of the Ray cluster shares, copy it to the same path on each node, "
                              "or give model.path as s3://BUCKET/PREFIX/ (fetched on each node)")
        return self.path

    def record(self) -> dict:
        out = {"name": self.name, "source": self.source, "path": self.path}
        if self.uri:
            out["uri"] = self.uri
        return out


def lean_transformers() -> None:
    """Keep transformers from importing scikit-learn in a process that loads models.

    transformers imports scikit-learn (about 2 s of a process's start-up on 2 cores: "Process
    start-up" in docs/BENCHMARKS.md) when it is installed, which lm-eval makes it,
    for one feature rlvr never uses: the confidence threshold of assisted (speculative)
    generation. Every engine and trainer process pays it at start-up, so rlvr tells
    transformers it is absent before its generation code is first imported; where that code is
    already imported, or transformers no longer asks this way, nothing changes. scikit-learn
    itself stays importable (lm-eval's metrics import it directly)."""
    import sys

    if "transformers.generation.candidate_generator" in sys.modules:
        return
    try:
        import transformers.utils as tu
        import transformers.utils.import_utils as iu
    except ImportError:
        return
    for mod in (tu, iu):
        if hasattr(mod, "is_sklearn_available"):
            mod.is_sklearn_available = lambda: False


def _hub_style(name: str) -> bool:
    parts = name.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


def local_model(path: str) -> ResolvedModel:
    """A folder on the driver's node, e.g. a checkpoint of the run (must be shared to load elsewhere)."""
    return ResolvedModel(path, path, "local")


def resolve_model(name: str, *, log=None) -> ResolvedModel:
    """A model name as local, S3 or hub source (see the module docstring); never downloads from
    the hub itself (transformers and vLLM do that with the returned name)."""
    from rlvr.s3 import S3Error, cached_folder_version, download_folder_cached

    if name.startswith("s3://"):
        if log:
            log(f"model {name}: fetching into the local cache (only objects that changed)")
        path = download_folder_cached(name)
        return ResolvedModel(name, path, "s3", name.rstrip("/") + "/", cached_folder_version(path))
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
            return ResolvedModel(name, path, "s3", cand, cached_folder_version(path))
        if log:
            log(f"model {name}: not under {base} ({MODELS_ENV}): from the hub")
    return ResolvedModel(name, name, "hub")
