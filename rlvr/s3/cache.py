"""The download cache: s3:// objects kept locally and fetched again only when they change."""

from __future__ import annotations

import os

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
