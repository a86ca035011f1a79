"""The download cache: s3:// objects kept locally and fetched again only when they change."""

from __future__ import annotations

import os
from collections.abc import Collection

from rlvr.errors import S3Error, S3UsageError
from rlvr.s3._util import read_json, write_json
from rlvr.s3.transfer import Remote, S3Transfer
from rlvr.s3.uri import parse_uri, safe_relpath


def _cache_root(cache_dir: str | None) -> str:
    if cache_dir:
        return cache_dir
    base = os.environ.get("RLVR_CACHE") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "rlvr")
    return os.path.join(base, "s3")


def download_cached(uri: str, cache_dir: str | None = None, *, transfer: S3Transfer | None = None,
                    endpoint_url: str | None = None) -> str:
    """Download an s3:// object into a local cache and return its path.

    The copy is re-downloaded only when the object's ETag or size changed (one HEAD per call);
    writes are atomic, so concurrent readers see the old file or the new one. The cache lives
    in cache_dir, else $RLVR_CACHE/s3, else ~/.cache/rlvr/s3, as BUCKET/KEY.
    """
    bucket, key = parse_uri(uri)
    if not key or key.endswith("/"):
        raise S3UsageError(f"{uri}: not an object (the URI names no key or a folder)")
    rel = safe_relpath(key)
    if rel is None:
        raise S3UsageError(f"{uri}: the key is not a safe local path")
    path = os.path.join(_cache_root(cache_dir), bucket, rel)
    meta_path = os.path.join(os.path.dirname(path), f".{os.path.basename(path)}.etag")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
    try:
        h = t.head(bucket, key)
        if h is None:
            raise S3Error(f"not found: {uri}", "NoSuchKey")
        r = Remote(key, int(h["ContentLength"]), str(h.get("ETag", "")).strip('"'))
        m = read_json(meta_path)
        if os.path.isfile(path):
            st = os.stat(path)
            if m.get("etag") == r.etag and m.get("size") == r.size == st.st_size and m.get("mtime_ns") == st.st_mtime_ns:
                return path
        t.download(bucket, key, path, r)
        st = os.stat(path)
        write_json(meta_path, {"etag": r.etag, "size": r.size, "mtime_ns": st.st_mtime_ns})
        return path
    finally:
        if transfer is None:
            t.close()


def list_folder(uri: str, *, transfer: S3Transfer | None = None, endpoint_url: str | None = None) -> list[str]:
    """The keys below an s3:// prefix (a folder), relative to it, in key order; folder markers
    left out; [] when nothing is there. One LIST (all pages)."""
    bucket, key = parse_uri(uri)
    prefix = key.rstrip("/") + "/" if key.strip("/") else ""
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
    try:
        return [o.key[len(prefix):] for o in t.list(bucket, prefix)
                if o.key[len(prefix):] and not o.key.endswith("/")]
    finally:
        if transfer is None:
            t.close()


def download_folder_cached(uri: str, cache_dir: str | None = None, *, transfer: S3Transfer | None = None,
                           endpoint_url: str | None = None, only: Collection[str] | None = None) -> str:
    """Download every object under an s3:// prefix (a folder) into the cache; return the folder.

    For a model (``s3://bucket/models/Qwen3-1.7B-Base/``) or a ``datasets.save_to_disk``
    folder. One LIST per call; objects whose ETag and size are those of the copy in the cache
    are not fetched again, each download is verified and renamed into place, files that the
    prefix no longer holds are removed, and the folder is marked complete only once all of it
    is there. Processes that share the cache wait for each other (a lock file beside the
    folder), so a node's ranks download a model once. Raises S3Error when nothing is there.

    `only`: the keys (relative to the prefix) to fetch, e.g. one split of a dataset folder; the
    others are not downloaded (copies of them fetched before stay while the prefix still holds
    them unchanged), and S3Error NoSuchKey is raised, before any download, when the prefix
    holds none of them.
    """
    import fcntl

    bucket, key = parse_uri(uri)
    prefix = key.rstrip("/")
    rel = safe_relpath(prefix) if prefix else None
    if rel is None:
        raise S3UsageError(f"{uri}: name a folder below the bucket (s3://BUCKET/PREFIX/)")
    prefix += "/"
    folder = os.path.join(_cache_root(cache_dir), bucket, rel)
    parent, name = os.path.split(folder)
    os.makedirs(parent, exist_ok=True)
    marker = os.path.join(parent, f".{name}.s3folder.json")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
    try:
        objects = []
        for o in t.list(bucket, prefix):
            sub = o.key[len(prefix):]
            if not sub or sub.endswith("/"):
                continue  # folder markers
            local = safe_relpath(sub)
            if local is None:
                raise S3Error(f"s3://{bucket}/{o.key}: the key is not a safe local path")
            objects.append((sub, local, o))
        if not objects:
            raise S3Error(f"not found: nothing under {uri.rstrip('/')}/", "NoSuchKey")
        listed = objects
        if only is not None:
            wanted = set(only)
            objects = [x for x in objects if x[0] in wanted]
            if not objects:
                raise S3Error(f"not found: none of {', '.join(sorted(only)) or 'the keys asked'} under "
                              f"{uri.rstrip('/')}/", "NoSuchKey")
        want = {sub: {"etag": o.etag, "size": o.size} for sub, _, o in listed}
        with open(os.path.join(parent, f".{name}.s3folder.lock"), "a") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes (or the process dies)
            done = read_json(marker)
            files = done.get("files") if isinstance(done.get("files"), dict) else {}
            for sub, local, o in objects:
                path = os.path.join(folder, local)
                had = files.get(sub)
                if isinstance(had, dict) and {k: had.get(k) for k in ("etag", "size")} == want[sub] \
                        and os.path.isfile(path) and os.stat(path).st_mtime_ns == had.get("mtime_ns") \
                        and os.path.getsize(path) == o.size:
                    continue
                files.pop(sub, None)
                t.download(bucket, o.key, path, o)
                files[sub] = {**want[sub], "mtime_ns": os.stat(path).st_mtime_ns}
                write_json(marker, {"uri": f"s3://{bucket}/{prefix}", "files": files, "complete": False})
            # kept: what this call fetched, and earlier copies of objects the prefix still holds unchanged
            files = {k: v for k, v in files.items() if k in want and isinstance(v, dict)
                     and {f: v.get(f) for f in ("etag", "size")} == want[k]}
            keep = {os.path.join(folder, local) for sub, local, _ in listed if sub in files}
            for d, _, fs in os.walk(folder):
                for f in fs:
                    p = os.path.join(d, f)
                    if p not in keep and not f.startswith("."):
                        os.unlink(p)  # the prefix no longer holds it (a shard of an older version)
            write_json(marker, {"uri": f"s3://{bucket}/{prefix}", "files": files,
                                "complete": len(files) == len(want)})
        return folder
    finally:
        if transfer is None:
            t.close()


def fetch_cached(uri: str, cache_dir: str | None = None, *, transfer: S3Transfer | None = None,
                 endpoint_url: str | None = None) -> str:
    """The local copy of an s3:// object (download_cached) or, when the URI ends in '/' or names
    no object but a prefix, of the folder below it (download_folder_cached)."""
    bucket, key = parse_uri(uri)
    if key and not key.endswith("/"):
        t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
        try:
            if t.head(bucket, key) is not None:
                return download_cached(uri, cache_dir, transfer=t)
            return download_folder_cached(uri, cache_dir, transfer=t)
        finally:
            if transfer is None:
                t.close()
    return download_folder_cached(uri, cache_dir, transfer=transfer, endpoint_url=endpoint_url)


def cached_folder_version(folder: str) -> dict[str, list] | None:
    """What a complete folder of the cache (a download_folder_cached result) holds: {relative
    key: [etag, size]}, as listed when it was fetched; None when the folder is not a complete
    copy here (absent on this node, or its download was cut short)."""
    parent, name = os.path.split(folder.rstrip(os.sep))
    done = read_json(os.path.join(parent, f".{name}.s3folder.json"))
    files = done.get("files")
    if done.get("complete") is not True or not isinstance(files, dict):
        return None
    out = {}
    for sub, f in files.items():
        path = os.path.join(folder, safe_relpath(sub) or "")
        if not isinstance(f, dict) or not os.path.isfile(path) or os.path.getsize(path) != f.get("size"):
            return None
        out[sub] = [f.get("etag"), f.get("size")]
    return out
