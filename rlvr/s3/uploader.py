"""The background uploader: files and folders queued by rlvr-train go up on daemon threads.

Two lanes, so that a checkpoint of many GiB never holds back the traces a watcher follows:

- the queue (``submit``): folders and files, one after the other (checkpoints, the run folder);
- the live lane (``live``): a few files (traces) sent again whenever they changed, at most
  every ``interval_s`` seconds, woken by ``tick()`` (one call per training step, which only
  sets an event). The live files are sent by this lane alone: folder uploads skip them.

Where each file goes is a :class:`Layout`: ordered rules from run-folder paths to keys under
the destination prefix.
"""

from __future__ import annotations

import os
import queue
import re
import string
import sys
import threading
import time
from collections.abc import Callable, Iterable, Mapping

from rlvr.errors import S3Error, S3UsageError
from rlvr.s3.checksums import snapshot_size
from rlvr.s3.sync import SyncReport, local_files, push, selected
from rlvr.s3.transfer import Remote, S3Transfer
from rlvr.s3.uri import join_key, parse_uri, validate_key


class Layout:
    """Where the files of a run folder go: ordered rules ``PATTERN -> TEMPLATE`` (first match wins).

    A PATTERN is a path relative to the run folder. One ending in ``/`` (or the empty
    pattern, the whole folder) names a folder: everything below it goes under TEMPLATE, its
    path below the folder appended. Any other pattern names one file, whose key is TEMPLATE.
    ``{step}`` in a pattern matches digits and ``{NAME}`` one path component; templates use
    them with Python's format syntax (``{step}`` is a number: ``{step:06d}`` pads it), plus
    ``{run}`` (the run folder's name) and the `values` given. A TEMPLATE of None drops what
    its pattern matches, and a path that no rule matches is not uploaded::

        Layout({"checkpoints/step_{step}/": "checkpoints/job1/{run}_step{step}/",
                "traces/": "checkpoints/job1/traces/"}, run="grpo_20260101-120000")
    """

    DEFAULT = {"": "{run}/"}  # the run folder as one folder under the prefix (what pull expects)

    def __init__(self, rules: Mapping[str, str | None], **values: str):
        self.values = dict(values)
        self.rules: list[tuple[re.Pattern, bool, str | None, str]] = []
        for pattern, template in rules.items():
            folder = pattern == "" or pattern.endswith("/")
            names: list[str] = []
            rx = ""
            for lit, name, spec, _ in string.Formatter().parse(pattern):
                rx += re.escape(lit)
                if name is not None:
                    if not name.isidentifier() or spec:
                        raise S3UsageError(f"upload layout: bad placeholder {{{name}}} in {pattern!r}")
                    rx += f"(?P<{name}>\\d+)" if name == "step" else f"(?P<{name}>[^/]+)"
                    names.append(name)
            rx = "^" + rx + ("(?P<_rest>.*)" if folder else "") + "$"
            if template is not None:
                try:
                    template.format(**{"run": "r", **self.values, **{n: 1 if n == "step" else "x" for n in names}})
                except (KeyError, IndexError, ValueError) as e:
                    raise S3UsageError(f"upload layout: template {template!r} of {pattern!r}: unknown or bad "
                                       f"placeholder {e}") from None
                if folder and template and not template.endswith("/"):
                    template += "/"
            self.rules.append((re.compile(rx), folder, template, pattern))

    def place(self, rel: str) -> tuple[str, str] | None:
        """(key prefix, rest) for a '/' path relative to the run folder, or None (not uploaded).

        The key is prefix + rest; rest is "" for a file rule, the path below the matched
        folder for a folder rule.
        """
        for rx, folder, template, _ in self.rules:
            m = rx.match(rel)
            if m is None:
                continue
            if template is None:
                return None
            groups = {k: (int(v) if k == "step" else v) for k, v in m.groupdict().items() if k != "_rest"}
            prefix = template.format(**{"run": "", **self.values, **groups})
            return prefix, (m.group("_rest") if folder else "")
        return None


class BackgroundUploader:
    """Uploads files and folders to an S3 prefix on background threads (for rlvr-train).

    ``submit(path)`` returns at once and never blocks the caller; a path under `root` goes to
    dest_uri + its path relative to root, or where `layout` (a :class:`Layout`, paths relative
    to root) puts it (a folder is pushed: unchanged files are skipped). ``live(paths,
    interval_s)`` starts the live lane; ``tick()`` tells it the files may have changed.
    Failures are passed to `on_error` (default: a warning on stderr) and kept in ``.failed``
    until the same path goes up after all (a folder or live file submitted again, a later pass
    of the live lane): ``.failed`` is what is failing now, not every error ever seen.
    ``close(timeout)`` waits for the queue and a last pass of the live lane, and returns the
    failures.
    """

    def __init__(self, dest_uri: str, root: str | None = None, *, transfer: S3Transfer | None = None,
                 endpoint_url: str | None = None, workers: int = 4,
                 on_error: Callable[[str, str], None] | None = None,
                 on_done: Callable[[str, SyncReport], None] | None = None,
                 exclude: Iterable[str] = (), last: Iterable[str] = (), layout: Layout | None = None):
        self.bucket, self.prefix = parse_uri(dest_uri)
        if self.prefix and not self.prefix.endswith("/"):
            self.prefix += "/"
        self.dest_uri = f"s3://{self.bucket}/{self.prefix}"
        self.root = os.path.abspath(root) if root else None
        self.exclude = list(exclude)
        self.last = list(last)
        self.layout = layout or Layout({"": ""})
        self._transfer = transfer
        self._own_transfer: S3Transfer | None = None
        self._endpoint_url = endpoint_url
        self._workers = workers
        self.on_error = on_error or (lambda path, msg: print(f"rlvr: warning: upload of {path} failed: {msg}",
                                                             file=sys.stderr, flush=True))
        self.on_done = on_done
        self._failed: dict[str, str] = {}  # path -> the last error, until that path goes up
        self.uploaded: list[str] = []
        self._q: queue.Queue[str | None] = queue.Queue()
        self._pending: set[str] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._stop = threading.Event()
        self._live: dict[str, tuple[int, int] | None] = {}  # path -> (size, mtime_ns) last sent
        self._live_interval = 0.0
        self._wake = threading.Event()
        self._live_thread: threading.Thread | None = None
        self._thread = threading.Thread(target=self._loop, name="s3-background-upload", daemon=True)
        self._thread.start()

    @property
    def failed(self) -> list[tuple[str, str]]:
        """[(path, message)] of the uploads that failed and have not gone up since."""
        with self._lock:
            return list(self._failed.items())

    def forget(self, path: str) -> None:
        """Drop the failures of `path` and of everything below it (e.g. a folder deleted on purpose)."""
        self._succeeded(os.path.abspath(path))

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

    def live(self, paths: Iterable[str], interval_s: float = 0.0) -> None:
        """Keep these files current in S3: sent when changed, at most every interval_s seconds.

        The lane wakes on ``tick()`` and, with interval_s > 0, also every interval_s seconds.
        """
        if self._live_thread is not None:
            raise RuntimeError("the live lane is already running")
        self._live = {os.path.abspath(p): None for p in paths}
        self._live_interval = max(0.0, float(interval_s))
        self._live_thread = threading.Thread(target=self._live_loop, name="s3-live-upload", daemon=True)
        self._live_thread.start()

    def tick(self) -> None:
        """The live files may have changed (never blocks: sets an event)."""
        self._wake.set()

    # -- shared -------------------------------------------------------------------------------

    def _t(self) -> S3Transfer:
        with self._lock:
            if self._transfer is not None:
                return self._transfer
            if self._own_transfer is None:
                self._own_transfer = S3Transfer(endpoint_url=self._endpoint_url, workers=self._workers)
            return self._own_transfer

    def _rel(self, path: str) -> str:
        if self.root and (path == self.root or path.startswith(self.root + os.sep)):
            rel = os.path.relpath(path, self.root).replace(os.sep, "/")
            return "" if rel == "." else rel
        return os.path.basename(path)

    def _upload_file(self, t: S3Transfer, path: str, key: str, report: SyncReport) -> None:
        validate_key(key)
        size = snapshot_size(path)
        h = t.head(self.bucket, key)
        if h is not None and t.same(path, size, Remote(key, int(h["ContentLength"]),
                                                       str(h.get("ETag", "")).strip('"'), self.bucket)):
            report.skipped += 1
        else:
            report.actions.append(t.upload_file(path, self.bucket, key, size))

    def _send(self, t: S3Transfer, files: list[tuple[str, str]], report: SyncReport, one_by_one: bool = False) -> None:
        """Upload (run-folder '/' path, local path) pairs where the layout puts them: files of a
        folder rule by a push of their folder (one listing), the others (all with one_by_one)
        each on its own (one HEAD)."""
        folders: dict[str, list[tuple[str, str]]] = {}
        for rel, path in files:
            placed = self.layout.place(rel)
            if placed is None:
                continue
            prefix, rest = placed
            key = join_key(self.prefix, prefix + rest)
            if not rest or one_by_one:
                try:
                    self._upload_file(t, path, key, report)
                except (S3Error, OSError) as e:
                    report.failed.append((path, str(e)))
                continue
            folders.setdefault(join_key(self.prefix, prefix) if prefix else self.prefix, []).append((rest, path))
        for dest, pairs in folders.items():
            # list no more of the bucket than needed: the files' common folder becomes the prefix
            common = os.path.commonpath([r for r, _ in pairs]).replace(os.sep, "/") if len(pairs) > 1 else \
                pairs[0][0].rpartition("/")[0]
            if common and all(r.startswith(common + "/") for r, _ in pairs):
                dest, pairs = join_key(dest, common + "/"), [(r[len(common) + 1:], p) for r, p in pairs]
            more = push("", f"s3://{self.bucket}/{dest}", transfer=t, files=pairs)
            report.actions += more.actions
            report.skipped += more.skipped
            report.failed += more.failed

    # -- the queue -------------------------------------------------------------------------------

    def _loop(self) -> None:
        while True:
            path = self._q.get()
            if path is None:
                break
            with self._lock:
                self._pending.discard(path)
            try:
                t = self._t()
                base = self._rel(path)
                base_dir = os.path.isdir(path)
                if base_dir:
                    files = [(f"{base}/{rel}" if base else rel, p, selected(rel, self.last) if self.last else False)
                             for rel, p in local_files(path, exclude=self.exclude) if p not in self._live]
                else:
                    files = [(base, path, False)]
                report = SyncReport()
                # files matching `last` go up in a second pass, after everything else (e.g. a
                # checkpoint's completeness marker after its weights)
                self._send(t, [(r, p) for r, p, late in files if not late], report)
                if not report.failed and any(late for _, _, late in files):
                    self._send(t, [(r, p) for r, p, late in files if late], report)
                if not report.failed and base_dir and (not os.path.isdir(path) or
                                                       (self.last and not any(late for _, _, late in files))):
                    # deleted while listed or sent (checkpoint.keep_last: an rmtree half done lists as an
                    # empty folder), or without the file that marks it complete: not a success
                    report.failed.append((path, f"{path}: deleted, or not complete (no {', '.join(self.last)})"
                                          if self.last else f"{path}: deleted before its upload ended"))
                for p, msg in report.failed:
                    self._fail(p, msg)
                if not report.failed:
                    self._succeeded(path)
                    with self._lock:
                        self.uploaded.append(path)
                if self.on_done:
                    self.on_done(path, report)
            except Exception as e:  # noqa: BLE001 - a failed upload must never kill the thread
                self._fail(path, str(e) if isinstance(e, S3Error) else f"{type(e).__name__}: {e}")
            finally:
                self._q.task_done()

    # -- the live lane ---------------------------------------------------------------------------

    def _live_pass(self) -> None:
        for path, sent in self._live.items():
            try:
                st = os.stat(path)
            except FileNotFoundError:
                continue
            except OSError as e:
                self._fail(path, f"{path}: {e.strerror or e}")
                continue
            now = (snapshot_size(path), st.st_mtime_ns)
            if now == sent:
                continue
            report = SyncReport()
            try:
                self._send(self._t(), [(self._rel(path), path)], report, one_by_one=True)
            except Exception as e:  # noqa: BLE001 - a failed upload must never kill the thread
                report.failed.append((path, str(e) if isinstance(e, S3Error) else f"{type(e).__name__}: {e}"))
            for p, msg in report.failed:
                self._fail(p, msg)
            if not report.failed:
                self._live[path] = now
                self._succeeded(path)
                if self.on_done:
                    self.on_done(path, report)

    def _live_loop(self) -> None:
        last = 0.0
        while not self._stop.is_set():
            self._wake.wait(self._live_interval or None)
            if self._stop.is_set():
                break
            wait_more = last + self._live_interval - time.monotonic()
            if wait_more > 0 and self._stop.wait(wait_more):
                break
            self._wake.clear()
            self._live_pass()
            last = time.monotonic()
        self._live_pass()  # the last state of the live files, after the queue

    # -- end ---------------------------------------------------------------------------------------

    def _fail(self, path: str, msg: str) -> None:
        with self._lock:
            self._failed[path] = msg
        try:
            self.on_error(path, msg)
        except Exception:  # noqa: BLE001
            pass

    def _succeeded(self, path: str) -> None:
        """`path` (a file, or a folder with everything in it) is on S3 now: its old failures are
        over, except those of live files below it, which only the live lane sends."""
        below = path.rstrip(os.sep) + os.sep
        with self._lock:
            for p in [p for p in self._failed if p == path or (p.startswith(below) and p not in self._live)]:
                del self._failed[p]

    def close(self, timeout: float | None = None) -> list[tuple[str, str]]:
        """Wait up to `timeout` seconds (None: no limit) for queued uploads and a last pass of the
        live lane; return the failures.

        Uploads still running after the timeout go on in the daemon threads and are noted in
        the returned list as not finished.
        """
        end = None if timeout is None else time.monotonic() + timeout
        if not self._closed:
            self._closed = True
            self._q.put(None)
        self._thread.join(timeout)
        if not self._stop.is_set():  # the live lane's last pass comes after the queue
            self._stop.set()
            self._wake.set()
        if self._live_thread is not None:
            self._live_thread.join(None if end is None else max(0.0, end - time.monotonic()))
        out = list(self.failed)
        if self._thread.is_alive():
            out += [(p, "not finished before close() timed out") for p in sorted(self._pending)] or [
                ("", "an upload was still running when close() timed out")]
        elif self._live_thread is not None and self._live_thread.is_alive():
            out.append(("", "the last upload of the live files was still running when close() timed out"))
        if not self._thread.is_alive() and not (self._live_thread and self._live_thread.is_alive()) \
                and self._own_transfer is not None:
            self._own_transfer.close()
        return out

    def __enter__(self) -> "BackgroundUploader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
