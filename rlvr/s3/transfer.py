"""Object transfers (S3Transfer): listing, HEAD, uploads (single or multipart, resumed, checked)
and downloads (ranged, resumed, verified, atomic), each request retried with backoff."""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import os
import random
import re
import sys
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from typing import Any

from rlvr.errors import S3Error, S3UsageError
from rlvr.s3._util import int_or_none, read_json, unlink_quiet, write_json
from rlvr.s3.checksums import (READ_CHUNK, DEFAULT_PART_SIZE, DEFAULT_THRESHOLD, MIN_PART_SIZE, PART_SIZE_META,
                               EtagCache, looks_like_md5_etag, local_matches, part_size_for, snapshot_size)
from rlvr.s3.client import describe_error, is_transient, scrub, make_client
from rlvr.s3.uri import redact_url

TMP_SUFFIX = ".s3part"


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
        self.endpoint = redact_url(self.client.meta.endpoint_url)
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
        self.etags = EtagCache()
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
                if not is_transient(e) or attempt >= self.retries:
                    raise describe_error(e, what, self.endpoint) from None
                err = e
            delay = min(self.max_backoff, self.backoff * 2 ** attempt) * random.uniform(0.5, 1.0)
            attempt += 1
            with self._count_lock:
                self.retried += 1
            if os.environ.get("RLVR_S3_DEBUG"):
                print(f"rlvr.s3: retry {attempt}/{self.retries} of {what} in {delay:.1f}s: "
                      f"{type(err).__name__}: {scrub(str(err))[:200]}", file=sys.stderr)
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
        if looks_like_md5_etag(remote.etag) and "-" in remote.etag:
            h = self.head(remote.bucket, remote.key) if remote.bucket else None
            hint = int_or_none(((h or {}).get("Metadata") or {}).get(PART_SIZE_META))
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
            if looks_like_md5_etag(got) and got != md5.hexdigest():
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
            if looks_like_md5_etag(got) and got != md5.hexdigest():
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
        if looks_like_md5_etag(got) and got != expected:
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

    @staticmethod
    def _tmp_base(dest: str) -> str:
        """The start of a download's temp names in dest's folder: '.NAME.', or '.<hash>.' when
        NAME is so long that the temp names (tag, suffix, '.json') would pass the file-name limit."""
        name = os.path.basename(os.path.abspath(dest))
        if len(f".{name}.0123456789{TMP_SUFFIX}.json".encode("utf-8", "surrogateescape")) > 255:
            name = "~" + hashlib.sha1(name.encode("utf-8", "surrogateescape"), usedforsecurity=False).hexdigest()
        return f".{name}."

    def _tmp_path(self, dest: str, etag: str) -> str:
        tag = hashlib.sha1(etag.encode(), usedforsecurity=False).hexdigest()[:10]
        return os.path.join(os.path.dirname(os.path.abspath(dest)), f"{self._tmp_base(dest)}{tag}{TMP_SUFFIX}")

    def _download(self, bucket: str, key: str, dest: str, remote: Remote, meta: dict | None) -> Action:
        uri = f"s3://{bucket}/{key}"
        d = os.path.dirname(os.path.abspath(dest))
        os.makedirs(d, exist_ok=True)
        tmp = self._tmp_path(dest, remote.etag)
        state_path = tmp + ".json"
        # temp files of older versions of this object (only this one's: '.a.' also starts '.a.b.<tag>...')
        mine = re.compile(re.escape(self._tmp_base(dest)) + "[0-9a-f]{10}" + re.escape(TMP_SUFFIX) + r"(\.json)?")
        for stale in os.listdir(d):
            if mine.fullmatch(stale) and not os.path.join(d, stale).startswith(tmp):
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
                    for piece in r["Body"].iter_chunks(READ_CHUNK):
                        out.write(piece)
                        h.update(piece)
                        n += len(piece)
                    out.flush()
                    os.fsync(out.fileno())
                if n != remote.size:
                    raise S3Error(f"short read of {uri}: {n} of {remote.size} bytes", "ShortRead", transient=True)
                nonlocal part_hint
                part_hint = int_or_none((r.get("Metadata") or {}).get(PART_SIZE_META))
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
            part_hint = int_or_none(meta.get(PART_SIZE_META))
            # Chunks on the upload's part boundaries: each chunk's MD5 is then a part's MD5 and
            # the ETag is checked from them, in parallel, without reading the file again.
            chunk = part_hint if part_hint and part_hint >= MIN_PART_SIZE else self.part_size
            state = read_json(state_path)
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
                    for piece in r["Body"].iter_chunks(READ_CHUNK):
                        os.pwrite(fd, piece, pos)
                        h.update(piece)
                        pos += len(piece)
                    if pos != end + 1:
                        raise S3Error(f"short read of {uri} bytes {start}-{end}", "ShortRead", transient=True)
                    return h.hexdigest()

                digest = self._retry(get, f"download {uri} bytes {start}-{end}")
                with lock:
                    done[i] = digest
                    write_json(state_path, {"etag": remote.etag, "size": remote.size, "chunk": chunk,
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
        verifiable = looks_like_md5_etag(remote.etag) and ("-" not in remote.etag or part_hint is not None)
        if computed is not None:
            ok = computed == remote.etag
        else:
            hints = [part_hint] if part_hint else [self.part_size]
            ok = local_matches(tmp, os.path.getsize(tmp), remote.etag, remote.size, hints)
        if not ok and verifiable:
            unlink_quiet(tmp)
            unlink_quiet(state_path)
            raise S3Error(f"checksum mismatch after downloading {uri} (ETag {remote.etag}); the partial file was removed",
                          "BadDigest")
        os.replace(tmp, dest)
        unlink_quiet(state_path)
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
