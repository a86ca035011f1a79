"""S3 transfer: the one home of rlvr's object-store code (push, pull, watch, cache, background uploads).

Used by ``rlvr-s3-sync`` (push/pull/watch), by rlvr-data for ``s3://`` sources
(:func:`download_cached`) and by rlvr-train to upload checkpoints off the training thread
(:class:`BackgroundUploader`)::

    push("results/run1", "s3://bucket/jobs/run1/", exclude=["*.tmp"])
    pull("s3://bucket/jobs/run1", "results/")            # -> results/run1/...
    path = download_cached("s3://bucket/data/train.jsonl")
    with BackgroundUploader("s3://bucket/jobs/run1/", root="results/run1") as up:
        up.submit("results/run1/checkpoints/step_100")   # returns at once

What it guarantees:
- Change detection by size and checksum. The checksum is the S3 ETag computed locally: the
  MD5 of the bytes for a single PUT, the MD5 of the parts' MD5s plus ``-N`` for a multipart
  upload (the part size is stored in the ``rlvr-part-size`` metadata; objects written by
  other tools are matched by trying the usual part sizes). Buckets whose ETags are not MD5
  based (SSE-KMS, SSE-C) look always changed, so files are re-sent: safe, not minimal.
- Uploads send Content-MD5 with every PUT and part (the server rejects corrupted bytes) and
  compare the returned ETags with the local checksums, including the final multipart ETag.
- Files of ``multipart_threshold`` bytes or more go up in parts, in parallel; an upload left
  unfinished (a crash, Ctrl-C) is resumed by the next push: parts already on the server with
  the right MD5 are not sent again. Downloads of large objects use parallel ranged GETs and
  resume from a ``.NAME.<etag>.s3part`` file.
- Downloads land in a hidden temporary file in the destination folder, are verified, fsynced
  and renamed: a reader never sees a partial file. A ``.jsonl`` file that is being appended
  to is uploaded only up to its last newline, so a reader never sees a torn line either.
- Transient failures (connection resets and refusals, timeouts, throttling, HTTP 5xx) are
  retried with exponential backoff and jitter; other errors stop at once with one clear
  line. Credentials come from boto3's usual chain and never appear in messages.
"""

from __future__ import annotations

import base64
import dataclasses
import fnmatch
import hashlib
import http.client
import ipaddress
import json
import os
import queue
import random
import re
import shutil
import sys
import tarfile
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import FIRST_EXCEPTION, Future, ThreadPoolExecutor, as_completed, wait
from typing import Any
from urllib.parse import urlsplit, urlunsplit

MiB = 1024 * 1024
DEFAULT_PART_SIZE = 8 * MiB  # also the AWS CLI's, so ETags of objects it wrote match ours
DEFAULT_THRESHOLD = 8 * MiB
MIN_PART_SIZE = 5 * MiB
MAX_PARTS = 10_000
PART_SIZE_META = "rlvr-part-size"
TMP_SUFFIX = ".s3part"
UNPACK = ("model.tar.gz",)  # archives that pull unpacks into the job folder
WATCH_FILES = ("traces/trace.jsonl", "config.yaml")
_READ = 1 * MiB

_TRANSIENT_CODES = {
    "SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "TooManyRequests",
    "RequestLimitExceeded", "RequestTimeout", "InternalError", "ServiceUnavailable",
    "BadDigest", "XAmzContentSHA256Mismatch", "OperationAborted",
}
_AUTH_CODES = {
    "InvalidAccessKeyId", "SignatureDoesNotMatch", "AccessDenied", "InvalidToken",
    "ExpiredToken", "TokenRefreshRequired", "AuthorizationHeaderMalformed", "InvalidSecurity",
    "RequestTimeTooSkewed", "AllAccessDisabled",
}


# ----------------------------------------------------------------------------- errors, URIs

class S3Error(Exception):
    """A failed S3 operation, as one line that names the object and never a credential."""

    def __init__(self, message: str, code: str | None = None, transient: bool = False):
        super().__init__(message)
        self.code = code
        self.transient = transient


class S3UsageError(S3Error):
    """A bad URI, bucket or key name, or a bad option value (a usage error, not a runtime one)."""


_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


def validate_bucket(name: str) -> str:
    """Check an S3 bucket name against the naming rules; return it or raise S3UsageError."""
    why = None
    if not 3 <= len(name) <= 63:
        why = "must be 3 to 63 characters long"
    elif not _BUCKET_RE.match(name):
        why = "may hold only lowercase letters, digits, '.' and '-', and must start and end with a letter or digit"
    elif ".." in name or ".-" in name or "-." in name:
        why = "must not contain '..', '.-' or '-.'"
    elif name.startswith(("xn--", "sthree-")) or name.endswith(("-s3alias", "--ol-s3")):
        why = "uses a reserved prefix or suffix"
    else:
        try:
            ipaddress.IPv4Address(name)
            why = "must not look like an IP address"
        except ValueError:
            pass
    if why:
        raise S3UsageError(f"invalid bucket name {name!r}: {why}")
    return name


def validate_key(key: str, what: str = "key") -> str:
    """Check an object key (or prefix): at most 1024 UTF-8 bytes, no control characters."""
    if len(key.encode("utf-8", "surrogatepass")) > 1024:
        raise S3UsageError(f"invalid {what} {key[:60]!r}...: longer than 1024 bytes")
    bad = next((c for c in key if ord(c) < 32 or ord(c) == 127), None)
    if bad is not None:
        raise S3UsageError(f"invalid {what} {key!r}: contains the control character {bad!r}")
    return key


def parse_uri(uri: str) -> tuple[str, str]:
    """'s3://bucket/some/key' -> ('bucket', 'some/key'); validates both parts."""
    if not isinstance(uri, str) or not uri.startswith("s3://"):
        raise S3UsageError(f"not an s3:// URI: {uri!r} (expected s3://BUCKET/KEY)")
    bucket, _, key = uri[5:].partition("/")
    if not bucket:
        raise S3UsageError(f"no bucket in {uri!r} (expected s3://BUCKET/KEY)")
    return validate_bucket(bucket), validate_key(key)


def join_key(prefix: str, rel: str) -> str:
    if not prefix:
        return rel
    return prefix + rel if prefix.endswith("/") else f"{prefix}/{rel}"


def safe_relpath(rel: str) -> str | None:
    """A remote relative key as a safe local relative path, or None (absolute, '..', empty parts)."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        return None
    if os.sep != "/" and any(os.sep in p for p in parts):
        return None
    return os.path.join(*parts)


def _redact_url(url: str | None) -> str:
    if not url:
        return "AWS S3"
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


# ----------------------------------------------------------------------------- checksums

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
            buf = fh.read(min(_READ, n))
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


def _looks_like_md5_etag(etag: str) -> bool:
    return bool(re.fullmatch(r"[0-9a-f]{32}(-\d+)?", etag))


class _EtagCache:
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
                  cache: _EtagCache | None = None) -> bool:
    """True when the first `size` bytes of a local file are the remote object (size and ETag)."""
    if size != remote_size:
        return False
    etag = etag.strip('"')
    if not _looks_like_md5_etag(etag):
        return False
    cache = cache or _EtagCache()
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


# ----------------------------------------------------------------------------- client + retries

def make_client(endpoint_url: str | None = None, region: str | None = None, profile: str | None = None,
                max_pool: int = 16, connect_timeout: float = 5, read_timeout: float = 60):
    """A boto3 S3 client from the standard credential chain (env, profile, instance role).

    `endpoint_url` (or AWS_ENDPOINT_URL / AWS_ENDPOINT_URL_S3) points at any S3-compatible
    store; such stores get path-style addressing. boto3's own retries are off: S3Transfer
    retries whole requests itself, with backoff.
    """
    import boto3
    from botocore.config import Config

    endpoint_url = endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or None
    try:
        session = boto3.session.Session(profile_name=profile) if profile else boto3.session.Session()
    except Exception as e:  # an unknown profile
        raise S3UsageError(f"cannot set up the S3 client: {type(e).__name__}: {_scrub(str(e))}") from None
    # Every upload carries Content-MD5, which SigV4 signs and the server checks: no SHA-256 of
    # the body as well (botocore otherwise hashes every byte twice on plain-http endpoints).
    s3cfg = {"addressing_style": os.environ.get("RLVR_S3_ADDRESSING", "path" if endpoint_url else "auto"),
             "payload_signing_enabled": False}
    cfg = Config(
        retries={"total_max_attempts": 1},
        max_pool_connections=max_pool,
        connect_timeout=connect_timeout,
        read_timeout=read_timeout,
        s3=s3cfg,
        # Content-MD5 already protects every upload; the newer CRC trailers (aws-chunked) are
        # not understood by every S3-compatible store. boto3's own variables still decide.
        request_checksum_calculation=os.environ.get("AWS_REQUEST_CHECKSUM_CALCULATION", "when_required"),
        response_checksum_validation=os.environ.get("AWS_RESPONSE_CHECKSUM_VALIDATION", "when_required"),
        tcp_keepalive=True,
    )
    region = region or session.region_name or ("us-east-1" if endpoint_url else None)
    try:
        return session.client("s3", endpoint_url=endpoint_url, region_name=region, config=cfg)
    except Exception as e:  # a malformed endpoint URL, an unknown profile
        raise S3UsageError(f"cannot set up the S3 client: {type(e).__name__}: {_scrub(str(e))}") from None


def _scrub(text: str) -> str:
    """Remove anything credential-like from an error message before it is shown."""
    for var in ("AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_ACCESS_KEY_ID"):
        v = os.environ.get(var)
        if v and len(v) >= 4:
            text = text.replace(v, "***")
    text = re.sub(r"([a-zA-Z][a-zA-Z0-9+.-]*://)[^/@\s\"']+@", r"\1", text)  # user:password@ in URLs
    return re.sub(r"(Credential=)[^,\s/]+", r"\1***", text)


def _is_transient(e: BaseException) -> bool:
    from botocore.exceptions import ClientError, HTTPClientError, IncompleteReadError, ResponseStreamingError
    from botocore.exceptions import ConnectionError as BotoConnectionError
    from botocore.parsers import ResponseParserError

    try:
        from urllib3.exceptions import HTTPError as Urllib3Error
    except ImportError:  # pragma: no cover
        Urllib3Error = ()  # type: ignore[assignment,misc]
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        return err.get("Code") in _TRANSIENT_CODES or status >= 500 or status == 429
    return isinstance(e, (HTTPClientError, BotoConnectionError, ResponseStreamingError, IncompleteReadError,
                          ResponseParserError, Urllib3Error, http.client.HTTPException, ConnectionError,
                          TimeoutError))


def _describe(e: BaseException, what: str, endpoint: str) -> S3Error:
    """Turn a boto3/botocore exception into one clear S3Error line."""
    from botocore.exceptions import ClientError, NoCredentialsError, PartialCredentialsError

    if isinstance(e, S3Error):
        return e
    if isinstance(e, (NoCredentialsError, PartialCredentialsError)):
        return S3Error("no usable AWS credentials found (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, "
                       "or AWS_PROFILE, or run where an instance role is available)", "NoCredentials")
    if isinstance(e, ClientError):
        err = e.response.get("Error", {})
        code = str(err.get("Code") or "")
        status = e.response.get("ResponseMetadata", {}).get("HTTPStatusCode") or 0
        if code in _AUTH_CODES or status == 403:
            hint = {
                "InvalidAccessKeyId": "the access key is not known to the server",
                "SignatureDoesNotMatch": "the secret key does not match the access key",
                "RequestTimeTooSkewed": "the local clock is too far off",
            }.get(code, "the credentials lack permission or were rejected")
            return S3Error(f"access denied for {what} at {endpoint} ({code or status}): {hint}; "
                           "check AWS_PROFILE / AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY", code or "AccessDenied")
        if code == "NoSuchUpload":
            return S3Error(f"{what}: the multipart upload is gone (NoSuchUpload)", code)
        if code == "NoSuchBucket":
            return S3Error(f"no such bucket for {what} at {endpoint}", code)
        if code in ("NoSuchKey", "404", "NotFound") or status == 404:
            return S3Error(f"not found: {what}", "NoSuchKey")
        msg = err.get("Message") or ""
        return S3Error(f"{what}: {code or status}{': ' + _scrub(str(msg)) if msg else ''}", code or str(status),
                       transient=_is_transient(e))
    if _is_transient(e):
        return S3Error(f"{what}: cannot reach {endpoint}: {type(e).__name__}: {_scrub(str(e))}", type(e).__name__, True)
    return S3Error(f"{what}: {type(e).__name__}: {_scrub(str(e))}", type(e).__name__)


@dataclasses.dataclass
class Remote:
    """One object in a listing."""

    key: str
    size: int
    etag: str
    bucket: str = ""


@dataclasses.dataclass
class Action:
    """One planned or finished transfer: what moved where (the JSONL line rlvr-s3-sync prints)."""

    action: str  # upload | download | delete | unpack
    src: str
    dst: str
    bytes: int = 0
    reused_bytes: int = 0  # bytes a resumed transfer did not send again
    dry_run: bool = False

    def record(self) -> dict:
        d = dataclasses.asdict(self)
        if not self.dry_run:
            d.pop("dry_run")
        if not self.reused_bytes:
            d.pop("reused_bytes")
        return d


@dataclasses.dataclass
class SyncReport:
    """What a push or pull did (or, with dry_run, would do)."""

    actions: list[Action] = dataclasses.field(default_factory=list)
    skipped: int = 0
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    dry_run: bool = False

    @property
    def bytes(self) -> int:
        return sum(a.bytes for a in self.actions if a.action in ("upload", "download"))

    @property
    def reused_bytes(self) -> int:
        return sum(a.reused_bytes for a in self.actions)

    def count(self, action: str) -> int:
        return sum(1 for a in self.actions if a.action == action)

    def summary(self) -> str:
        verb = "would move" if self.dry_run else "moved"
        parts = [f"{self.count(a)} {a}{'d' if a.endswith('e') else 'ed'}" for a in ("upload", "download", "unpack", "delete")
                 if self.count(a)]
        parts.append(f"{self.skipped} unchanged")
        if self.failed:
            parts.append(f"{len(self.failed)} failed")
        tail = f", {_human(self.reused_bytes)} resumed" if self.reused_bytes else ""
        return f"{', '.join(parts)}; {verb} {_human(self.bytes)}{tail}"


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # pragma: no cover


class _Progress:
    """A byte progress bar on stderr (thread-safe), or nothing."""

    def __init__(self, total: int, desc: str, enabled: bool | None):
        self.bar = None
        self.lock = threading.Lock()
        if enabled is None:
            enabled = sys.stderr.isatty()
        if enabled and total > 0:
            from tqdm import tqdm

            self.bar = tqdm(total=total, desc=desc, unit="B", unit_scale=True, unit_divisor=1024,
                            file=sys.stderr, dynamic_ncols=True, mininterval=0.5)

    def __call__(self, n: int) -> None:
        if self.bar is not None:
            with self.lock:
                self.bar.update(n)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


# ----------------------------------------------------------------------------- transfers

class S3Transfer:
    """Object transfers with retries, checksums, multipart, resume and atomic local writes.

    One instance holds one boto3 client (thread-safe) and may be shared between threads.
    `retries` counts attempts after the first; the wait doubles from `backoff` seconds up to
    `max_backoff`, with jitter. `on_bytes(n)` is called as bytes move (for progress bars).
    """

    def __init__(self, client=None, *, endpoint_url: str | None = None, workers: int = 8,
                 part_size: int = DEFAULT_PART_SIZE, multipart_threshold: int = DEFAULT_THRESHOLD,
                 retries: int | None = None, backoff: float = 0.5, max_backoff: float = 20.0,
                 on_bytes: Callable[[int], None] | None = None, profile: str | None = None):
        if part_size < MIN_PART_SIZE:
            raise S3UsageError(f"part size must be at least 5 MiB, got {part_size} bytes")
        if workers < 1:
            raise S3UsageError("workers must be at least 1")
        self.workers = workers
        self.client = client or make_client(endpoint_url, profile=profile, max_pool=2 * workers + 4)
        self.endpoint = _redact_url(self.client.meta.endpoint_url)
        self.part_size = part_size
        self.threshold = max(multipart_threshold, 1)
        if retries is None:
            try:
                retries = int(os.environ.get("RLVR_S3_RETRIES", 8))
            except ValueError:
                raise S3UsageError(f"RLVR_S3_RETRIES={os.environ['RLVR_S3_RETRIES']!r} is not an integer") from None
        self.retries = max(0, retries)
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.on_bytes = on_bytes
        self.etags = _EtagCache()
        self.retried = 0  # how many requests were retried (for tests and logs)
        self._parts_pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._count_lock = threading.Lock()
        self._aborted = threading.Event()

    def abort(self) -> None:
        """Stop: requests not yet sent and retries not yet made fail at once (after Ctrl-C)."""
        self._aborted.set()

    # -- plumbing

    def _bytes(self, n: int) -> None:
        if self.on_bytes is not None and n:
            self.on_bytes(n)

    def call(self, op: str, what: str, **kw: Any) -> Any:
        """Call one S3 API operation, retrying transient errors with backoff."""
        fn = getattr(self.client, op)
        return self._retry(lambda: fn(**kw), what)

    def _retry(self, fn: Callable[[], Any], what: str) -> Any:
        attempt = 0
        while True:
            if self._aborted.is_set():
                raise S3Error(f"{what}: interrupted", "Interrupted")
            try:
                return fn()
            except S3Error as e:
                if not e.transient or attempt >= self.retries:
                    raise
                err: BaseException = e
            except Exception as e:  # noqa: BLE001 - classified just below
                if not _is_transient(e) or attempt >= self.retries:
                    raise _describe(e, what, self.endpoint) from None
                err = e
            delay = min(self.max_backoff, self.backoff * 2 ** attempt) * random.uniform(0.5, 1.0)
            attempt += 1
            with self._count_lock:
                self.retried += 1
            if os.environ.get("RLVR_S3_DEBUG"):
                print(f"rlvr.s3: retry {attempt}/{self.retries} of {what} in {delay:.1f}s: "
                      f"{type(err).__name__}: {_scrub(str(err))[:200]}", file=sys.stderr)
            self._aborted.wait(delay)

    def parts_pool(self) -> ThreadPoolExecutor:
        with self._pool_lock:
            if self._parts_pool is None:
                self._parts_pool = ThreadPoolExecutor(self.workers, thread_name_prefix="s3-part")
            return self._parts_pool

    def close(self) -> None:
        """Wait for the part transfers in flight, then free the threads (the client stays usable)."""
        with self._pool_lock:
            pool, self._parts_pool = self._parts_pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    # -- listing

    def list(self, bucket: str, prefix: str = "") -> Iterator[Remote]:
        """Every object under prefix (all pages), in key order."""
        token = None
        while True:
            kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix}
            if token:
                kw["ContinuationToken"] = token
            page = self.call("list_objects_v2", f"list s3://{bucket}/{prefix}", **kw)
            for o in page.get("Contents", []) or []:
                yield Remote(o["Key"], int(o["Size"]), str(o.get("ETag", "")).strip('"'), bucket)
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def list_dirs(self, bucket: str, prefix: str = "") -> Iterator[str]:
        """The 'folder' names directly under prefix (common prefixes with '/'), all pages."""
        token = None
        while True:
            kw: dict[str, Any] = {"Bucket": bucket, "Prefix": prefix, "Delimiter": "/"}
            if token:
                kw["ContinuationToken"] = token
            page = self.call("list_objects_v2", f"list s3://{bucket}/{prefix}", **kw)
            for p in page.get("CommonPrefixes", []) or []:
                yield p["Prefix"][len(prefix):].rstrip("/")
            token = page.get("NextContinuationToken")
            if not page.get("IsTruncated") or not token:
                return

    def head(self, bucket: str, key: str) -> dict | None:
        """HEAD an object: its metadata, or None when it does not exist."""
        try:
            return self.call("head_object", f"s3://{bucket}/{key}", Bucket=bucket, Key=key)
        except S3Error as e:
            if e.code in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def same(self, path: str, size: int, remote: Remote) -> bool:
        """True when the first `size` bytes of a local file are the remote object (size, ETag).

        A multipart ETag is checked with the usual part sizes first; only when the sizes agree
        and none of them fits is the object's own part size fetched (one HEAD).
        """
        if size != remote.size:
            return False
        if local_matches(path, size, remote.etag, remote.size, [part_size_for(size, self.part_size)], self.etags):
            return True
        if _looks_like_md5_etag(remote.etag) and "-" in remote.etag:
            h = self.head(remote.bucket, remote.key) if remote.bucket else None
            hint = _int_or_none(((h or {}).get("Metadata") or {}).get(PART_SIZE_META))
            return bool(hint) and local_matches(path, size, remote.etag, remote.size, [hint], self.etags)
        return False

    # -- upload

    def upload_file(self, path: str, bucket: str, key: str, size: int | None = None) -> Action:
        """Upload the first `size` bytes of a file (default: snapshot_size) and verify the ETag."""
        size = snapshot_size(path) if size is None else size
        uri = f"s3://{bucket}/{key}"
        if size < self.threshold:
            with open(path, "rb") as fh:
                data = fh.read(size)
            if len(data) != size:
                raise S3Error(f"{path}: shrank while being read ({len(data)} of {size} bytes)")
            md5 = hashlib.md5(data, usedforsecurity=False)
            resp = self.call("put_object", f"upload {uri}", Bucket=bucket, Key=key, Body=data,
                             ContentMD5=base64.b64encode(md5.digest()).decode())
            got = str(resp.get("ETag", "")).strip('"')
            if _looks_like_md5_etag(got) and got != md5.hexdigest():
                raise S3Error(f"checksum mismatch after uploading {uri}: sent {md5.hexdigest()}, server has {got}")
            self._bytes(size)
            return Action("upload", path, uri, size)
        return self._upload_multipart(path, bucket, key, size)

    def _existing_upload(self, bucket: str, key: str) -> str | None:
        """The newest unfinished multipart upload of this exact key, if any."""
        ups: list[dict] = []
        kw: dict[str, Any] = {"Bucket": bucket, "Prefix": key}
        for _ in range(100):  # pages of 1,000 uploads under this key prefix
            try:
                resp = self.call("list_multipart_uploads", f"list uploads of s3://{bucket}/{key}", **kw)
            except S3Error as e:
                if e.code in ("NotImplemented", "AccessDenied", "InvalidRequest"):
                    return None
                raise
            ups += [u for u in resp.get("Uploads", []) or [] if u.get("Key") == key]
            if not resp.get("IsTruncated") or not resp.get("NextKeyMarker"):
                break
            kw.update(KeyMarker=resp["NextKeyMarker"], UploadIdMarker=resp.get("NextUploadIdMarker", ""))
        if not ups:
            return None
        ups.sort(key=lambda u: u.get("Initiated") or 0)
        return ups[-1]["UploadId"]

    def _list_parts(self, bucket: str, key: str, upload_id: str) -> dict[int, tuple[str, int]]:
        parts: dict[int, tuple[str, int]] = {}
        marker = 0
        while True:
            resp = self.call("list_parts", f"list parts of s3://{bucket}/{key}", Bucket=bucket, Key=key,
                             UploadId=upload_id, PartNumberMarker=marker)
            for p in resp.get("Parts", []) or []:
                parts[int(p["PartNumber"])] = (str(p["ETag"]).strip('"'), int(p["Size"]))
            if not resp.get("IsTruncated"):
                return parts
            marker = int(resp.get("NextPartNumberMarker") or max(parts, default=0))

    def _upload_multipart(self, path: str, bucket: str, key: str, size: int) -> Action:
        uri = f"s3://{bucket}/{key}"
        ps = part_size_for(size, self.part_size)
        nparts = max(1, -(-size // ps))
        upload_id = self._existing_upload(bucket, key)
        have: dict[int, tuple[str, int]] = {}
        if upload_id:
            try:
                have = self._list_parts(bucket, key, upload_id)
            except S3Error as e:
                if e.code not in ("NoSuchUpload", "NoSuchKey"):
                    raise
                upload_id = None
            # Parts of another part size belong to another layout: drop that upload, start over.
            if upload_id and (any(n < nparts and s != ps for n, (_, s) in have.items()) or any(n > nparts for n in have)):
                try:
                    self.call("abort_multipart_upload", f"abort an old upload of {uri}", Bucket=bucket, Key=key,
                              UploadId=upload_id)
                except S3Error:
                    pass  # it only costs storage until a lifecycle rule removes it
                upload_id, have = None, {}
        for attempt in range(2):
            if upload_id is None:
                resp = self.call("create_multipart_upload", f"upload {uri}", Bucket=bucket, Key=key,
                                 Metadata={PART_SIZE_META: str(ps)})
                upload_id = resp["UploadId"]
                have = {}
            try:
                return self._send_parts(path, bucket, key, size, ps, nparts, upload_id, have)
            except S3Error as e:
                if e.code != "NoSuchUpload" or attempt:
                    raise
                upload_id, have = None, {}  # aborted under us (lifecycle rule, another client)
        raise AssertionError("unreachable")

    def _send_parts(self, path: str, bucket: str, key: str, size: int, ps: int, nparts: int,
                    upload_id: str, have: dict[int, tuple[str, int]]) -> Action:
        uri = f"s3://{bucket}/{key}"
        digests: dict[int, bytes] = {}
        reused = [0]
        lock = threading.Lock()

        def one(n: int) -> None:
            off = (n - 1) * ps
            length = min(ps, size - off)
            with open(path, "rb") as fh:
                fh.seek(off)
                data = fh.read(length)
            if len(data) != length:
                raise S3Error(f"{path}: shrank while being uploaded")
            md5 = hashlib.md5(data, usedforsecurity=False)
            old = have.get(n)
            if old is not None and old == (md5.hexdigest(), length):
                with lock:
                    digests[n] = md5.digest()
                    reused[0] += length
                return
            resp = self.call("upload_part", f"upload part {n}/{nparts} of {uri}", Bucket=bucket, Key=key,
                             UploadId=upload_id, PartNumber=n, Body=data,
                             ContentMD5=base64.b64encode(md5.digest()).decode())
            got = str(resp.get("ETag", "")).strip('"')
            if _looks_like_md5_etag(got) and got != md5.hexdigest():
                raise S3Error(f"checksum mismatch for part {n} of {uri}", "BadDigest", transient=False)
            with lock:
                digests[n] = md5.digest()
            self._bytes(length)

        pool = self.parts_pool()
        futures = [pool.submit(one, n) for n in range(1, nparts + 1)]
        try:
            done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            for f in pending:
                f.cancel()
            for f in futures:
                if f.done() and not f.cancelled() and f.exception() is not None:
                    raise f.exception()  # type: ignore[misc]
        except BaseException:
            for f in futures:
                f.cancel()
            raise
        expected = f"{hashlib.md5(b''.join(digests[n] for n in range(1, nparts + 1)), usedforsecurity=False).hexdigest()}-{nparts}"
        parts = [{"PartNumber": n, "ETag": f'"{digests[n].hex()}"'} for n in range(1, nparts + 1)]
        resp = self.call("complete_multipart_upload", f"complete {uri}", Bucket=bucket, Key=key, UploadId=upload_id,
                         MultipartUpload={"Parts": parts})
        got = str(resp.get("ETag", "") or "").strip('"')
        if not got:  # some servers (Ceph RGW 16) leave it out of the response
            h = self.head(bucket, key)
            got = str((h or {}).get("ETag", "")).strip('"')
        if _looks_like_md5_etag(got) and got != expected:
            raise S3Error(f"checksum mismatch after uploading {uri}: expected {expected}, server has {got}")
        return Action("upload", path, uri, size - reused[0], reused_bytes=reused[0])

    # -- download

    def download(self, bucket: str, key: str, dest: str, remote: Remote | None = None) -> Action:
        """Download an object to `dest` atomically (temp file, verify, fsync, rename); resumable."""
        uri = f"s3://{bucket}/{key}"
        for attempt in range(3):
            if remote is None:
                h = self.head(bucket, key)
                if h is None:
                    raise S3Error(f"not found: {uri}", "NoSuchKey")
                remote = Remote(key, int(h["ContentLength"]), str(h.get("ETag", "")).strip('"'))
                meta = h.get("Metadata") or {}
            else:
                meta = None
            try:
                return self._download(bucket, key, dest, remote, meta)
            except S3Error as e:
                if e.code not in ("PreconditionFailed", "412", "Changed") or attempt == 2:
                    raise
                remote = None  # the object changed while we read it: start again with the new one
        raise AssertionError("unreachable")

    def _tmp_path(self, dest: str, etag: str) -> str:
        d, name = os.path.split(os.path.abspath(dest))
        tag = hashlib.sha1(etag.encode(), usedforsecurity=False).hexdigest()[:10]
        return os.path.join(d, f".{name}.{tag}{TMP_SUFFIX}")

    def _download(self, bucket: str, key: str, dest: str, remote: Remote, meta: dict | None) -> Action:
        uri = f"s3://{bucket}/{key}"
        d = os.path.dirname(os.path.abspath(dest))
        os.makedirs(d, exist_ok=True)
        tmp = self._tmp_path(dest, remote.etag)
        state_path = tmp + ".json"
        for stale in os.listdir(d):  # temp files of older versions of this object
            base = f".{os.path.basename(dest)}."
            if stale.startswith(base) and TMP_SUFFIX in stale and not os.path.join(d, stale).startswith(tmp):
                try:
                    os.unlink(os.path.join(d, stale))
                except OSError:
                    pass
        if_match = {"IfMatch": f'"{remote.etag}"'} if remote.etag else {}
        part_hint: int | None = None
        reused = 0
        computed: str | None = None  # the ETag of the bytes received, when the layout allows it
        if remote.size < self.threshold:
            def get_all() -> str:
                r = self.client.get_object(Bucket=bucket, Key=key, **if_match)
                n = 0
                h = hashlib.md5(usedforsecurity=False)
                with open(tmp, "wb") as out:
                    for piece in r["Body"].iter_chunks(_READ):
                        out.write(piece)
                        h.update(piece)
                        n += len(piece)
                    out.flush()
                    os.fsync(out.fileno())
                if n != remote.size:
                    raise S3Error(f"short read of {uri}: {n} of {remote.size} bytes", "ShortRead", transient=True)
                nonlocal part_hint
                part_hint = _int_or_none((r.get("Metadata") or {}).get(PART_SIZE_META))
                return h.hexdigest()

            md5 = self._retry(get_all, f"download {uri}")
            if "-" not in remote.etag:
                computed = md5
            self._bytes(remote.size)
        else:
            if meta is None:
                h = self.head(bucket, key)
                if h is None:
                    raise S3Error(f"not found: {uri}", "NoSuchKey")
                if str(h.get("ETag", "")).strip('"') != remote.etag or int(h["ContentLength"]) != remote.size:
                    raise S3Error(f"{uri} changed while listing", "Changed")
                meta = h.get("Metadata") or {}
            part_hint = _int_or_none(meta.get(PART_SIZE_META))
            # Chunks on the upload's part boundaries: each chunk's MD5 is then a part's MD5 and
            # the ETag is checked from them, in parallel, without reading the file again.
            chunk = part_hint if part_hint and part_hint >= MIN_PART_SIZE else self.part_size
            state = _read_json(state_path)
            done: dict[int, str] = {}
            if (os.path.exists(tmp) and state.get("etag") == remote.etag and state.get("size") == remote.size
                    and state.get("chunk") == chunk and os.path.getsize(tmp) == remote.size
                    and isinstance(state.get("done"), dict)):
                done = {int(i): str(v) for i, v in state["done"].items()}
            else:
                with open(tmp, "wb") as out:
                    out.truncate(remote.size)
            nchunks = -(-remote.size // chunk)
            reused = sum(min(chunk, remote.size - i * chunk) for i in done if i < nchunks)
            lock = threading.Lock()
            fd = os.open(tmp, os.O_WRONLY)

            def one(i: int) -> None:
                start = i * chunk
                end = min(remote.size, start + chunk) - 1

                def get() -> str:
                    r = self.client.get_object(Bucket=bucket, Key=key, Range=f"bytes={start}-{end}", **if_match)
                    pos = start
                    h = hashlib.md5(usedforsecurity=False)
                    for piece in r["Body"].iter_chunks(_READ):
                        os.pwrite(fd, piece, pos)
                        h.update(piece)
                        pos += len(piece)
                    if pos != end + 1:
                        raise S3Error(f"short read of {uri} bytes {start}-{end}", "ShortRead", transient=True)
                    return h.hexdigest()

                digest = self._retry(get, f"download {uri} bytes {start}-{end}")
                with lock:
                    done[i] = digest
                    _write_json(state_path, {"etag": remote.etag, "size": remote.size, "chunk": chunk,
                                             "done": {str(k): v for k, v in sorted(done.items())}}, sync=False)
                self._bytes(end + 1 - start)

            try:
                todo = [i for i in range(nchunks) if i not in done]
                pool = self.parts_pool()
                futures = [pool.submit(one, i) for i in todo]
                _, pending = wait(futures, return_when=FIRST_EXCEPTION)
                for f in futures:
                    if f.done() and not f.cancelled() and f.exception() is not None:
                        for p in pending:
                            p.cancel()
                        wait([p for p in pending if not p.cancelled()])
                        raise f.exception()  # type: ignore[misc]
                os.fsync(fd)
            finally:
                os.close(fd)
            # After a resume the earlier chunks are checked by reading them back (they may predate a crash).
            if not reused and "-" in remote.etag and remote.etag.endswith(f"-{nchunks}") and chunk == part_hint:
                digests = b"".join(bytes.fromhex(done[i]) for i in range(nchunks))
                computed = f"{hashlib.md5(digests, usedforsecurity=False).hexdigest()}-{nchunks}"
        # Verifiable: a plain MD5 ETag, or a multipart one whose part size we know.
        verifiable = _looks_like_md5_etag(remote.etag) and ("-" not in remote.etag or part_hint is not None)
        if computed is not None:
            ok = computed == remote.etag
        else:
            hints = [part_hint] if part_hint else [self.part_size]
            ok = local_matches(tmp, os.path.getsize(tmp), remote.etag, remote.size, hints)
        if not ok and verifiable:
            _unlink(tmp)
            _unlink(state_path)
            raise S3Error(f"checksum mismatch after downloading {uri} (ETag {remote.etag}); the partial file was removed",
                          "BadDigest")
        os.replace(tmp, dest)
        _unlink(state_path)
        return Action("download", uri, dest, remote.size - reused, reused_bytes=reused)

    def delete(self, bucket: str, keys: list[str]) -> None:
        for i in range(0, len(keys), 1000):
            batch = keys[i:i + 1000]
            resp = self.call("delete_objects", f"delete under s3://{bucket}/", Bucket=bucket,
                             Delete={"Objects": [{"Key": k} for k in batch], "Quiet": True})
            errs = resp.get("Errors") or []
            if errs:
                e = errs[0]
                raise S3Error(f"delete s3://{bucket}/{e.get('Key')}: {e.get('Code')} {e.get('Message') or ''}".strip(),
                              e.get("Code"))


def _int_or_none(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _read_json(path: str) -> dict:
    try:
        with open(path) as fh:
            v = json.load(fh)
        return v if isinstance(v, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_json(path: str, obj: dict, sync: bool = True) -> None:
    if sync:
        from rlvr.records import atomic_write

        atomic_write(path, json.dumps(obj, sort_keys=True).encode())
        return
    tmp = f"{path}.tmp{os.getpid()}.{threading.get_ident()}"
    with open(tmp, "w") as fh:
        json.dump(obj, fh, sort_keys=True)
    os.replace(tmp, path)


def _unlink(path: str) -> None:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass


# ----------------------------------------------------------------------------- selection

def selected(rel: str, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> bool:
    """Glob filters on a '/'-separated relative path.

    A pattern matches the whole path (``*`` crosses '/'), its file name, or any leading
    folder (``checkpoints`` selects everything under checkpoints/). A path is selected when it
    matches some --include (or there are none) and no --exclude.
    """
    def hit(pat: str) -> bool:
        pat = pat.rstrip("/") or pat
        if fnmatch.fnmatchcase(rel, pat) or ("/" not in pat and fnmatch.fnmatchcase(rel.rsplit("/", 1)[-1], pat)):
            return True
        parts = rel.split("/")
        return any(fnmatch.fnmatchcase("/".join(parts[:i]), pat) for i in range(1, len(parts)))

    include, exclude = list(include), list(exclude)
    if include and not any(hit(p) for p in include):
        return False
    return not any(hit(p) for p in exclude)


def _is_ours(name: str) -> bool:
    """Temp and state files this module leaves in local folders (never synced)."""
    return (name.startswith(".") and (TMP_SUFFIX in name or ".tmp" in name)) or name in (
        STATE_FILE, WATCH_STATE, WATCH_LOCK)


def local_files(root: str, include: Iterable[str] = (), exclude: Iterable[str] = ()) -> Iterator[tuple[str, str]]:
    """(relative '/' path, absolute path) of the regular files under root, sorted, filtered."""
    root = os.path.abspath(root)
    for d, dirs, files in os.walk(root):
        dirs.sort()
        for f in sorted(files):
            p = os.path.join(d, f)
            if _is_ours(f) or not os.path.isfile(p):
                continue
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if selected(rel, include, exclude):
                yield rel, p


# ----------------------------------------------------------------------------- push / pull

def _run_parallel(items: list, fn: Callable[[Any], Action | list[Action] | None], t: S3Transfer, report: SyncReport,
                  on_action: Callable[[Action], None] | None, label: Callable[[Any], str]) -> None:
    if not items:
        return
    with ThreadPoolExecutor(t.workers, thread_name_prefix="s3-file") as pool:
        futs: dict[Future, Any] = {pool.submit(fn, it): it for it in items}
        try:
            for f in as_completed(futs):
                it = futs[f]
                try:
                    act = f.result()
                except S3UsageError:
                    raise
                except S3Error as e:
                    report.failed.append((label(it), str(e)))
                    if e.code in _AUTH_CODES or e.code in ("NoCredentials", "NoSuchBucket"):
                        raise  # every other file would fail the same way
                    continue
                except OSError as e:
                    report.failed.append((label(it), f"{label(it)}: {e.strerror or e}"))
                    continue
                for a in (act if isinstance(act, list) else [act] if act is not None else []):
                    report.actions.append(a)
                    if on_action:
                        on_action(a)
        except BaseException as e:
            for f in futs:
                f.cancel()
            if isinstance(e, (KeyboardInterrupt, SystemExit)):
                t.abort()  # Ctrl-C: no new requests, no more retries; the ones in flight end
            raise


def push(local_dir: str, s3_uri: str, include: Iterable[str] = (), exclude: Iterable[str] = (),
         delete: bool = False, dry_run: bool = False, *, transfer: S3Transfer | None = None,
         endpoint_url: str | None = None, workers: int = 8, part_size: int = DEFAULT_PART_SIZE,
         progress: bool | None = False, on_action: Callable[[Action], None] | None = None) -> SyncReport:
    """Upload the new and changed files under local_dir to s3_uri (a prefix): local/a/b -> prefix/a/b.

    Unchanged files (same size and checksum) are skipped; with delete, objects under the
    prefix that no longer exist locally (and pass the filters) are deleted. Failures of single
    files are collected in report.failed; the others go on.
    """
    bucket, prefix = parse_uri(s3_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if not os.path.isdir(local_dir):
        raise S3UsageError(f"not a folder: {local_dir}")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=workers, part_size=part_size)
    include, exclude = list(include), list(exclude)
    report = SyncReport(dry_run=dry_run)
    remote = {o.key[len(prefix):]: o for o in t.list(bucket, prefix)}
    todo: list[tuple[str, str, int]] = []
    local_rels = set()
    for rel, path in local_files(local_dir, include, exclude):
        local_rels.add(rel)
        try:
            validate_key(join_key(prefix, rel))
        except S3UsageError as e:
            report.failed.append((path, str(e)))
            continue
        size = snapshot_size(path)
        r = remote.get(rel)
        if r is not None and t.same(path, size, r):
            report.skipped += 1
            continue
        todo.append((rel, path, size))
    stale = sorted(k for k in remote if k not in local_rels and selected(k, include, exclude)) if delete else []
    if dry_run:
        for rel, path, size in todo:
            act = Action("upload", path, f"s3://{bucket}/{join_key(prefix, rel)}", size, dry_run=True)
            report.actions.append(act)
            on_action and on_action(act)
    else:
        bar = _Progress(sum(s for _, _, s in todo), "push", progress)
        saved_on_bytes = t.on_bytes
        if bar.bar is not None:
            t.on_bytes = bar
        try:
            _run_parallel(todo, lambda it: t.upload_file(it[1], bucket, join_key(prefix, it[0]), it[2]),
                          t, report, on_action, lambda it: it[1])
        finally:
            bar.close()
            t.on_bytes = saved_on_bytes
            if transfer is None:
                t.close()
    if stale and not report.failed:
        if not dry_run:
            t.delete(bucket, [prefix + k for k in stale])
        for k in stale:
            act = Action("delete", "", f"s3://{bucket}/{prefix}{k}", dry_run=dry_run)
            report.actions.append(act)
            on_action and on_action(act)
    return report


STATE_FILE = ".rlvr-s3-sync.json"  # pull: archives already unpacked (key -> etag, files)


def job_dir_for(s3_uri: str, local_dir: str) -> str:
    """Where pull puts s3://b/prefix/JOB: local_dir/JOB (local_dir itself for a bare bucket)."""
    _, prefix = parse_uri(s3_uri)
    name = prefix.rstrip("/").rsplit("/", 1)[-1] if prefix.strip("/") else ""
    return os.path.join(local_dir, name) if name else local_dir


def _prune_empty(d: str, stop: str) -> None:
    """Remove empty folders from d up to (not including) stop."""
    d, stop = os.path.abspath(d), os.path.abspath(stop)
    while d.startswith(stop + os.sep):
        try:
            os.rmdir(d)
        except OSError:
            return
        d = os.path.dirname(d)


def pull(s3_uri: str, local_dir: str, include: Iterable[str] = (), exclude: Iterable[str] = (),
         delete: bool = False, dry_run: bool = False, *, unpack: bool = True, transfer: S3Transfer | None = None,
         endpoint_url: str | None = None, workers: int = 8, part_size: int = DEFAULT_PART_SIZE,
         progress: bool | None = False, on_action: Callable[[Action], None] | None = None) -> SyncReport:
    """Download s3://bucket/prefix/JOB into local_dir/JOB/: new and changed objects only.

    A ``model.tar.gz`` anywhere in the job is unpacked into local_dir/JOB/ (wrapper folders
    stripped, so config.yaml, traces/ and checkpoints/ sit directly there) instead of being
    kept; its ETag is remembered so an unchanged archive is not fetched again. With delete,
    local files that are no longer in the bucket (and pass the filters) are removed.
    """
    bucket, prefix = parse_uri(s3_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    job_dir = job_dir_for(s3_uri, local_dir)
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=workers, part_size=part_size)
    include, exclude = list(include), list(exclude)
    report = SyncReport(dry_run=dry_run)
    state_path = os.path.join(job_dir, STATE_FILE)
    state = _read_json(state_path)
    archives: dict[str, dict] = state.get("archives", {}) if isinstance(state.get("archives"), dict) else {}
    objects = list(t.list(bucket, prefix))
    todo: list[tuple[Remote, str, str]] = []  # (object, relative path, local path)
    keep: set[str] = set()
    for o in objects:
        rel = o.key[len(prefix):]
        if not rel or rel.endswith("/"):
            continue  # folder markers
        local_rel = safe_relpath(rel)
        if local_rel is None:
            report.failed.append((o.key, f"s3://{bucket}/{o.key}: key is not a safe local path; skipped"))
            continue
        if not selected(rel, include, exclude):
            continue
        dest = os.path.join(job_dir, local_rel)
        if unpack and rel.rsplit("/", 1)[-1] in UNPACK:
            a = archives.get(o.key)
            if isinstance(a, dict) and a.get("etag") == o.etag and all(
                    os.path.exists(os.path.join(job_dir, f)) for f in a.get("files", [])):
                report.skipped += 1
                keep.update(a.get("files", []))
                continue
            todo.append((o, rel, dest))
            continue
        keep.add(rel)
        if os.path.isfile(dest) and t.same(dest, os.path.getsize(dest), o):
            report.skipped += 1
            continue
        todo.append((o, rel, dest))
    for a in archives.values():
        if isinstance(a, dict):
            keep.update(a.get("files", []))
    stale: list[str] = []
    if delete and os.path.isdir(job_dir):
        stale = [rel for rel, _ in local_files(job_dir, include, exclude) if rel not in keep]
    if dry_run:
        for o, rel, dest in todo:
            act = Action("download", f"s3://{bucket}/{o.key}", dest, o.size, dry_run=True)
            report.actions.append(act)
            on_action and on_action(act)
    else:
        bar = _Progress(sum(o.size for o, _, _ in todo), "pull", progress)
        saved_on_bytes = t.on_bytes
        if bar.bar is not None:
            t.on_bytes = bar
        lock = threading.Lock()

        def fetch(item: tuple[Remote, str, str]) -> Action | list[Action]:
            o, rel, dest = item
            if not (unpack and rel.rsplit("/", 1)[-1] in UNPACK):
                return t.download(bucket, o.key, dest, o)
            act = t.download(bucket, o.key, dest, o)
            files = unpack_archive(dest, job_dir)
            os.unlink(dest)
            _prune_empty(os.path.dirname(dest), job_dir)
            with lock:
                archives[o.key] = {"etag": o.etag, "files": files}
                _write_json(state_path, {"archives": archives})
            return [act, Action("unpack", dest, job_dir)]

        try:
            _run_parallel(todo, fetch, t, report, on_action, lambda it: f"s3://{bucket}/{it[0].key}")
        finally:
            bar.close()
            t.on_bytes = saved_on_bytes
            if transfer is None:
                t.close()
    if stale and not report.failed:
        for rel in stale:
            if not dry_run:
                _unlink(os.path.join(job_dir, *rel.split("/")))
            act = Action("delete", "", os.path.join(job_dir, *rel.split("/")), dry_run=dry_run)
            report.actions.append(act)
            on_action and on_action(act)
    return report


def unpack_archive(archive: str, dest_dir: str, markers: tuple[str, ...] = ("config.yaml", "traces", "checkpoints")) -> list[str]:
    """Unpack a .tar.gz into dest_dir, stripping wrapper folders; return the files' relative paths.

    Members are checked with tarfile's 'data' filter (no absolute paths, no '..', no links
    out of the tree). Wrapper folders are stripped while the archive holds one top folder and
    none of `markers` at its top. Files merge into dest_dir, each replacing its namesake.
    """
    staging = os.path.join(os.path.dirname(os.path.abspath(archive)), f".{os.path.basename(archive)}.unpack.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        try:
            with tarfile.open(archive, "r:*") as tf:
                tf.extractall(staging, filter="data")
        except (tarfile.TarError, OSError, EOFError) as e:
            raise S3Error(f"cannot unpack {archive}: {e}") from None
        top = staging
        while True:
            entries = [e for e in os.listdir(top) if e not in (".", "..")]
            if len(entries) == 1 and os.path.isdir(os.path.join(top, entries[0])) and entries[0] not in markers:
                top = os.path.join(top, entries[0])
                continue
            break
        os.makedirs(dest_dir, exist_ok=True)
        files = []
        for d, _, fs in os.walk(top):
            for f in fs:
                files.append(os.path.relpath(os.path.join(d, f), top).replace(os.sep, "/"))
        for rel in files:  # merge file by file: each replaces the one of the same name
            target = os.path.join(dest_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            os.replace(os.path.join(top, *rel.split("/")), target)
        return sorted(files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


# ----------------------------------------------------------------------------- watch

WATCH_STATE = ".rlvr-s3-sync-watch.json"
WATCH_LOCK = ".rlvr-s3-sync-watch.lock"


class LockHeld(Exception):
    """Another process holds the watch lock."""


class WatchLock:
    """An exclusive flock on a file (released when the process ends, even by kill -9)."""

    def __init__(self, path: str):
        self.path = path
        self.fh = None

    def acquire(self) -> "WatchLock":
        import fcntl

        os.makedirs(os.path.dirname(os.path.abspath(self.path)), exist_ok=True)
        fh = open(self.path, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            holder = fh.read().strip()
            fh.close()
            raise LockHeld(f"another watch holds {self.path}" + (f" (pid {holder})" if holder.isdigit() else "")) from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        self.fh = fh
        return self

    def release(self) -> None:
        if self.fh is not None:
            self.fh.close()
            self.fh = None

    def __enter__(self) -> "WatchLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


def watch(pattern: str, src_uri: str, dest: str, *, files: Iterable[str] = WATCH_FILES, interval: float = 60,
          idle_exit: float | None = 3600, once: bool = False, transfer: S3Transfer | None = None,
          endpoint_url: str | None = None, on_action: Callable[[Action], None] | None = None,
          log: Callable[[str], None] | None = None, stop: threading.Event | None = None) -> int:
    """Poll src_uri for job folders whose name contains `pattern`; download `files` of each when changed.

    Files land in dest/JOB/FILE atomically. Returns the number of downloads. Stops after
    `idle_exit` seconds without a change (None: never), after one poll with `once`, or when
    `stop` is set. The caller holds the lock (see WatchLock).
    """
    bucket, prefix = parse_uri(src_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    files = [f.strip("/") for f in files]
    for f in files:
        if safe_relpath(f) is None:
            raise S3UsageError(f"--file {f!r} is not a relative path")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=4)
    state_path = os.path.join(dest, WATCH_STATE)
    state: dict[str, str] = {k: v for k, v in _read_json(state_path).items() if isinstance(v, str)}
    log = log or (lambda msg: None)
    stop = stop or threading.Event()
    total = 0
    last_change = time.monotonic()
    try:
        while True:
            jobs = sorted(j for j in t.list_dirs(bucket, prefix) if pattern in j and safe_relpath(j) is not None)
            changed = 0
            for job in jobs:
                for f in files:
                    key = f"{prefix}{job}/{f}"
                    local = os.path.join(dest, job, *f.split("/"))
                    h = t.head(bucket, key)
                    if h is None:
                        continue
                    r = Remote(key, int(h["ContentLength"]), str(h.get("ETag", "")).strip('"'))
                    sk = f"{job}/{f}"
                    if state.get(sk) == r.etag and os.path.isfile(local) and os.path.getsize(local) == r.size:
                        continue
                    hint = _int_or_none((h.get("Metadata") or {}).get(PART_SIZE_META))
                    if os.path.isfile(local) and local_matches(local, os.path.getsize(local), r.etag, r.size, [hint], t.etags):
                        state[sk] = r.etag
                        continue
                    act = t.download(bucket, key, local, r)
                    state[sk] = r.etag
                    _write_json(state_path, state)
                    changed += 1
                    log(f"{job}: {f} updated ({_human(r.size)})")
                    if on_action:
                        on_action(act)
            total += changed
            now = time.monotonic()
            if changed:
                last_change = now
            if once or stop.is_set():
                return total
            if idle_exit is not None and now - last_change >= idle_exit:
                log(f"no changes for {idle_exit:g} s: exiting ({len(jobs)} job(s) matched {pattern!r})")
                return total
            wait_s = interval if idle_exit is None else min(interval, max(0.0, idle_exit - (now - last_change)))
            if stop.wait(wait_s):
                return total
    finally:
        if transfer is None:
            t.close()


# ----------------------------------------------------------------------------- cache, background

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
        m = _read_json(meta_path)
        if os.path.isfile(path):
            st = os.stat(path)
            if m.get("etag") == r.etag and m.get("size") == r.size == st.st_size and m.get("mtime_ns") == st.st_mtime_ns:
                return path
        t.download(bucket, key, path, r)
        st = os.stat(path)
        _write_json(meta_path, {"etag": r.etag, "size": r.size, "mtime_ns": st.st_mtime_ns})
        return path
    finally:
        if transfer is None:
            t.close()


class BackgroundUploader:
    """Uploads files and folders to an S3 prefix on a background thread (for rlvr-train).

    ``submit(path)`` returns at once and never blocks the caller; a path under `root` goes to
    dest_uri + its path relative to root (a folder is pushed: unchanged files are skipped).
    Failures are kept in ``.failed`` and passed to `on_error` (default: a warning on stderr);
    ``close(timeout)`` waits for the queue and returns the failures.
    """

    def __init__(self, dest_uri: str, root: str | None = None, *, transfer: S3Transfer | None = None,
                 endpoint_url: str | None = None, workers: int = 4,
                 on_error: Callable[[str, str], None] | None = None,
                 on_done: Callable[[str, SyncReport], None] | None = None,
                 exclude: Iterable[str] = (), last: Iterable[str] = ()):
        self.bucket, self.prefix = parse_uri(dest_uri)
        if self.prefix and not self.prefix.endswith("/"):
            self.prefix += "/"
        self.dest_uri = f"s3://{self.bucket}/{self.prefix}"
        self.root = os.path.abspath(root) if root else None
        self.exclude = list(exclude)
        self.last = list(last)
        self._transfer = transfer
        self._endpoint_url = endpoint_url
        self._workers = workers
        self.on_error = on_error or (lambda path, msg: print(f"rlvr: warning: upload of {path} failed: {msg}",
                                                             file=sys.stderr, flush=True))
        self.on_done = on_done
        self.failed: list[tuple[str, str]] = []
        self.uploaded: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._thread = threading.Thread(target=self._loop, name="s3-background-upload", daemon=True)
        self._thread.start()

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._pending)

    def submit(self, path: str) -> None:
        """Queue a file or folder for upload (a path already queued is not queued twice)."""
        if self._closed:
            raise RuntimeError("BackgroundUploader is closed")
        path = os.path.abspath(path)
        with self._lock:
            if path in self._pending:
                return
            self._pending.add(path)
        self._q.put(path)

    def _dest(self, path: str) -> str:
        if self.root and (path == self.root or path.startswith(self.root + os.sep)):
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            rel = "" if rel == "." else rel
        else:
            rel = os.path.basename(path)
        return f"s3://{self.bucket}/{join_key(self.prefix, rel) if rel else self.prefix}"

    def _loop(self) -> None:
        t = None
        while True:
            path = self._q.get()
            if path is None:
                break
            with self._lock:
                self._pending.discard(path)
            try:
                if t is None:
                    t = self._transfer or S3Transfer(endpoint_url=self._endpoint_url, workers=self._workers)
                dest = self._dest(path)
                if os.path.isdir(path):
                    d = dest if dest.endswith("/") else dest + "/"
                    # files matching `last` go up in a second pass, after everything else (e.g.
                    # a checkpoint's completeness marker after its weights)
                    report = push(path, d, exclude=self.exclude + self.last, transfer=t)
                    if self.last and not report.failed:
                        more = push(path, d, include=self.last, exclude=self.exclude, transfer=t)
                        report.actions += more.actions
                        report.failed += more.failed
                    for p, msg in report.failed:
                        self._fail(p, msg)
                else:
                    b, k = parse_uri(dest)
                    report = SyncReport()
                    size = snapshot_size(path)
                    h = t.head(b, k)
                    if h is not None and t.same(path, size, Remote(k, int(h["ContentLength"]),
                                                                    str(h.get("ETag", "")).strip('"'), b)):
                        report.skipped += 1
                    else:
                        report.actions.append(t.upload_file(path, b, k, size))
                if not report.failed:
                    with self._lock:
                        self.uploaded.append(path)
                if self.on_done:
                    self.on_done(path, report)
            except Exception as e:  # noqa: BLE001 - a failed upload must never kill the thread
                self._fail(path, str(e) if isinstance(e, S3Error) else f"{type(e).__name__}: {e}")
            finally:
                self._q.task_done()
        if t is not None and self._transfer is None:
            t.close()

    def _fail(self, path: str, msg: str) -> None:
        with self._lock:
            self.failed.append((path, msg))
        try:
            self.on_error(path, msg)
        except Exception:  # noqa: BLE001
            pass

    def close(self, timeout: float | None = None) -> list[tuple[str, str]]:
        """Wait up to `timeout` seconds (None: no limit) for queued uploads; return the failures.

        Uploads still running after the timeout go on in the daemon thread and are noted in
        the returned list as not finished.
        """
        if not self._closed:
            self._closed = True
            self._q.put(None)
        self._thread.join(timeout)
        out = list(self.failed)
        if self._thread.is_alive():
            out += [(p, "not finished before close() timed out") for p in sorted(self._pending)] or [
                ("", "an upload was still running when close() timed out")]
        return out

    def __enter__(self) -> "BackgroundUploader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
