"""Checksums: the ETag S3 gives a file (plain or multipart MD5), part sizes, and the bytes of a
file that may be sent (a .jsonl being appended to is cut at its last newline)."""

from __future__ import annotations

import hashlib
import os
import re
import threading
from collections.abc import Iterable

MiB = 1024 * 1024
DEFAULT_PART_SIZE = 8 * MiB  # also the AWS CLI's, so ETags of objects it wrote match ours
DEFAULT_THRESHOLD = 8 * MiB
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000
PART_SIZE_META = "rlvr-part-size"
READ_CHUNK = 1 * MiB


def part_size_for(size: int, base: int = DEFAULT_PART_SIZE) -> int:
    """The part size used for a file: `base`, doubled until the file fits in 10,000 parts."""
    ps = max(int(base), MIN_PART_SIZE)
    while -(-size // ps) > MAX_PARTS:
        ps *= 2
    return ps


def file_etag(path: str, size: int, part_size: int | None) -> str:
    """The ETag S3 gives the first `size` bytes of a file: plain MD5, or MD5-of-MD5s-N for parts."""
    def md5_of(fh, n: int):
        h = hashlib.md5(usedforsecurity=False)
        while n > 0:
            buf = fh.read(min(READ_CHUNK, n))
            if not buf:
                break
            h.update(buf)
            n -= len(buf)
        return h

    with open(path, "rb") as fh:
        if part_size is None:
            return md5_of(fh, size).hexdigest()
        digests = []
        left = size
        while left > 0:
            n = min(part_size, left)
            digests.append(md5_of(fh, n).digest())
            left -= n
    return f"{hashlib.md5(b''.join(digests), usedforsecurity=False).hexdigest()}-{len(digests)}"


def _candidate_part_sizes(size: int, nparts: int, hints: Iterable[int | None]) -> list[int]:
    out: list[int] = []
    for ps in [*hints, DEFAULT_PART_SIZE, 5 * MiB, 16 * MiB, 64 * MiB, 100 * MiB]:
        if ps and ps > 0:
            ps = part_size_for(size, ps)
            if -(-size // ps) == nparts and ps not in out:
                out.append(ps)
    if nparts > 0:  # the smallest whole-MiB part size that gives nparts parts
        ps = -(-size // nparts)
        ps = -(-ps // MiB) * MiB
        if -(-size // ps) == nparts and ps not in out:
            out.append(ps)
    return out


def looks_like_md5_etag(etag: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-f]{32}(-\d+)?", etag))


class EtagCache:
    """Local ETags per (path, size, mtime, part size): each file is hashed at most once per run."""

    def __init__(self) -> None:
        self._d: dict[tuple, str] = {}
        self._lock = threading.Lock()

    def get(self, path: str, size: int, part_size: int | None) -> str:
        try:
            st = os.stat(path)
            k = (path, size, st.st_mtime_ns, st.st_size, part_size)
        except OSError:
            k = None
        if k is not None:
            with self._lock:
                if k in self._d:
                    return self._d[k]
        et = file_etag(path, size, part_size)
        if k is not None:
            with self._lock:
                self._d[k] = et
        return et


def local_matches(path: str, size: int, etag: str, remote_size: int, hints: Iterable[int | None] = (),
                  cache: EtagCache | None = None) -> bool:
    """True when the first `size` bytes of a local file are the remote object (size and ETag)."""
    if size != remote_size:
        return False
    etag = etag.strip('"')
    if not looks_like_md5_etag(etag):
        return False
    cache = cache or EtagCache()
    if "-" not in etag:
        return cache.get(path, size, None) == etag
    nparts = int(etag.rsplit("-", 1)[1])
    return any(cache.get(path, size, ps) == etag for ps in _candidate_part_sizes(size, nparts, hints))


def snapshot_size(path: str) -> int:
    """Bytes of a local file to transfer: all of it, or up to the last newline for a .jsonl file."""
    size = os.path.getsize(path)
    if not path.endswith(".jsonl") or size == 0:
        return size
    with open(path, "rb") as fh:
        end = size
        while end > 0:
            start = max(0, end - 64 * 1024)
            fh.seek(start)
            buf = fh.read(end - start)
            i = buf.rfind(b"\n")
            if i >= 0:
                return start + i + 1
            end = start
    return 0
