"""S3 transfer: the one home of rlvr's object-store code (push, pull, watch, cache, background uploads).

Used by ``rlvr-s3-sync`` (push/pull/watch), by rlvr-data for ``s3://`` sources
(:func:`download_cached`) and by rlvr-train to upload checkpoints off the training thread
(:class:`BackgroundUploader`)::

    push("results/run1", "s3://bucket/jobs/run1/", exclude=["*.tmp"])
    pull("s3://bucket/jobs/run1", "results/")            # -> results/run1/...
    path = download_cached("s3://bucket/data/train.jsonl")
    with BackgroundUploader("s3://bucket/jobs/run1/", root="results/run1") as up:
        up.submit("results/run1/checkpoints/step_100")   # returns at once

One concern per module; the public names are importable from ``rlvr.s3`` itself:

    uri        s3:// URIs, bucket and key rules, safe local paths
    checksums  local ETags (plain and multipart MD5), part sizes, .jsonl snapshots
    client     the boto3 client, and its errors classified (transient or not) as one line
    transfer   S3Transfer: list, HEAD, upload and download single objects with retries
    sync       push and pull of folders (filters, --delete, dry runs, model.tar.gz unpacking)
    watch      watch: keep local copies of running jobs' traces fresh; the cron lock
    cache      download_cached, download_folder_cached: s3:// objects and folders (models, datasets)
               in a local cache, fetched again only when changed; cached_folder_version;
               list_folder, and download_folder_cached(only=...) for the files of one split
    uploader   BackgroundUploader: uploads for rlvr-train on a daemon thread

Errors are rlvr.errors.S3Error (a Failure, exit 1) and S3UsageError (a UsageError, exit 2).

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

from rlvr.errors import S3Error, S3UsageError
from rlvr.s3.cache import cached_folder_version, download_cached, download_folder_cached, fetch_cached, list_folder
from rlvr.s3.checksums import (DEFAULT_PART_SIZE, DEFAULT_THRESHOLD, MAX_PARTS, MIN_PART_SIZE, PART_SIZE_META, MiB,
                               file_etag, local_matches, part_size_for, snapshot_size)
from rlvr.s3.client import make_client
from rlvr.s3.sync import STATE_FILE, UNPACK, SyncReport, job_dir_for, local_files, pull, push, selected, unpack_archive
from rlvr.s3.transfer import TMP_SUFFIX, Action, Remote, S3Transfer
from rlvr.s3.uploader import BackgroundUploader, Layout
from rlvr.s3.uri import join_key, parse_uri, safe_relpath, validate_bucket, validate_key
from rlvr.s3.watch import WATCH_FILES, WATCH_LOCK, WATCH_STATE, LockHeld, WatchLock, watch

__all__ = [
    "S3Error", "S3UsageError", "cached_folder_version", "download_cached", "download_folder_cached", "fetch_cached",
    "list_folder",
    "DEFAULT_PART_SIZE",
    "DEFAULT_THRESHOLD", "MAX_PARTS", "MIN_PART_SIZE", "PART_SIZE_META", "MiB", "file_etag", "local_matches",
    "part_size_for", "snapshot_size", "make_client", "STATE_FILE", "UNPACK", "SyncReport", "job_dir_for",
    "local_files", "pull", "push", "selected", "unpack_archive", "TMP_SUFFIX", "Action", "Remote", "S3Transfer",
    "BackgroundUploader", "Layout", "join_key", "parse_uri", "safe_relpath", "validate_bucket", "validate_key",
    "WATCH_FILES", "WATCH_LOCK", "WATCH_STATE", "LockHeld", "WatchLock", "watch",
]
