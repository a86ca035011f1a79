"""push and pull: a local folder against an S3 prefix, new and changed files only (size and
checksum), with include/exclude filters, --delete, dry runs and model.tar.gz unpacking."""

from __future__ import annotations

import copy
import dataclasses
import fnmatch
import os
import re
import shutil
import tarfile
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from typing import Any

from rlvr.errors import S3Error, S3UsageError
from rlvr.progress import Progress
from rlvr.s3._util import human, read_json, unlink_quiet, within, write_json
from rlvr.s3.checksums import DEFAULT_PART_SIZE, snapshot_size
from rlvr.s3.client import AUTH_CODES
from rlvr.s3.transfer import TMP_SUFFIX, Action, Remote, S3Transfer
from rlvr.s3.uri import join_key, parse_uri, safe_relpath, validate_key
from rlvr.s3.watch import WATCH_LOCK, WATCH_STATE

UNPACK = ("model.tar.gz",)  # archives that pull unpacks into the job folder


@dataclasses.dataclass
class SyncReport:
    """What a push or pull did (or, with dry_run, would do)."""

    actions: list[Action] = dataclasses.field(default_factory=list)
    skipped: int = 0
    failed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    dry_run: bool = False
    notes: list[str] = dataclasses.field(default_factory=list)  # what was left out on purpose, and why

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
        tail = f", {human(self.reused_bytes)} resumed" if self.reused_bytes else ""
        return f"{', '.join(parts)}; {verb} {human(self.bytes)}{tail}"



def _bytes_bar(total: int, desc: str, enabled: bool | None) -> Progress:
    """A byte progress bar on stderr (thread-safe: transfer threads advance it), or nothing."""
    return Progress(total, desc, enabled, unit="B", unit_scale=True, unit_divisor=1024)


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


# Names rlvr itself leaves in local folders while it works (never synced): a download's
# `.NAME.<tag>.s3part` (and its `.json`), an atomic write's `.NAME.tmp<pid>.<thread>`, the
# staging folder of an unpacked archive and a checkpoint still being written (rlvr.runs).
_OURS_FILE = re.compile(r"^\..+\.[0-9a-f]{10}" + re.escape(TMP_SUFFIX) + r"(\.json)?$|^\..+\.tmp\d+\.\d+$")
_OURS_DIR = re.compile(r"^\..+\.unpack\.tmp$|^\.tmp-step_")


def _is_ours(name: str) -> bool:
    """Temp and state files this module leaves in local folders (never synced)."""
    return bool(_OURS_FILE.match(name)) or name in (STATE_FILE, WATCH_STATE, WATCH_LOCK)


def local_files(root: str, include: Iterable[str] = (), exclude: Iterable[str] = (),
                on_skip: Callable[[str, str, str], None] | None = None) -> Iterator[tuple[str, str]]:
    """(relative '/' path, absolute path) of the regular files under root, sorted, filtered.

    Symlinked folders are not entered; a symlinked file is listed only when its target lies
    inside root. `on_skip(path, message, kind)` hears of what is left out for a reason the
    user must know: kind "symlink" (a symlink to a file or folder outside root, never
    followed) or "unreadable" (a folder that cannot be listed). Where on_skip
    is None an unreadable folder raises its OSError: a listing never silently misses files
    (which --delete would then remove from the other side).
    """
    root = os.path.abspath(root)
    root_real = os.path.realpath(root)

    def walk_error(e: OSError) -> None:
        if on_skip is None:
            raise e
        on_skip(e.filename or root, f"cannot read folder {e.filename or root}: {e.strerror or e}", "unreadable")

    def outside(p: str) -> bool:
        if os.path.islink(p) and not within(root_real, p):
            if on_skip is not None:
                on_skip(p, f"{p}: a symlink to {os.path.realpath(p)}, outside {root}: not followed", "symlink")
            return True
        return False

    for d, dirs, files in os.walk(root, onerror=walk_error):
        dirs[:] = sorted(x for x in dirs if not _OURS_DIR.match(x) and not outside(os.path.join(d, x)))
        for f in sorted(files):
            p = os.path.join(d, f)
            if _is_ours(f) or not os.path.isfile(p):
                continue
            rel = os.path.relpath(p, root).replace(os.sep, "/")
            if not selected(rel, include, exclude):
                continue
            if not outside(p):
                yield rel, p


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
                    if e.code in AUTH_CODES or e.code in ("NoCredentials", "NoSuchBucket"):
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
         progress: bool | None = False, on_action: Callable[[Action], None] | None = None,
         files: Iterable[tuple[str, str]] | None = None) -> SyncReport:
    """Upload the new and changed files under local_dir to s3_uri (a prefix): local/a/b -> prefix/a/b.

    Unchanged files (same size and checksum) are skipped; with delete, objects under the
    prefix that no longer exist locally (and pass the filters) are deleted. Failures of single
    files are collected in report.failed; the others go on. `files` ((relative key, local
    path) pairs) replaces the walk of local_dir when given (the filters still apply).
    """
    bucket, prefix = parse_uri(s3_uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    if files is None and not os.path.isdir(local_dir):
        raise S3UsageError(f"not a folder: {local_dir}")
    t = transfer or S3Transfer(endpoint_url=endpoint_url, workers=workers, part_size=part_size)
    include, exclude = list(include), list(exclude)
    report = SyncReport(dry_run=dry_run)
    remote = {o.key[len(prefix):]: o for o in t.list(bucket, prefix)}
    todo: list[tuple[str, str, int]] = []
    local_rels = set()
    root = os.path.abspath(local_dir)

    def skip(path: str, msg: str, kind: str) -> None:
        if kind == "symlink":  # left out on purpose: noted, and its remote copy is not --delete'd
            report.notes.append(msg)
            local_rels.add(os.path.relpath(path, root).replace(os.sep, "/"))
        else:  # an unreadable folder: a failure (which also stops --delete)
            report.failed.append((path, msg))

    pairs = local_files(local_dir, include, exclude, on_skip=skip) if files is None else \
        [(rel, path) for rel, path in files if selected(rel, include, exclude)]
    for rel, path in pairs:
        local_rels.add(rel)
        try:
            validate_key(join_key(prefix, rel))
        except S3UsageError as e:
            report.failed.append((path, str(e)))
            continue
        r = remote.get(rel)
        try:
            size = snapshot_size(path)
            if r is not None and t.same(path, size, r):
                report.skipped += 1
                continue
        except OSError as e:  # unreadable, or gone since the listing: this file fails, the others go on
            report.failed.append((path, f"{path}: {e.strerror or e}"))
            continue
        todo.append((rel, path, size))
    stale = sorted(k for k in remote if k not in local_rels and selected(k, include, exclude)) if delete else []
    if dry_run:
        for rel, path, size in todo:
            act = Action("upload", path, f"s3://{bucket}/{join_key(prefix, rel)}", size, dry_run=True)
            report.actions.append(act)
            on_action and on_action(act)
    else:
        bar = _bytes_bar(sum(s for _, _, s in todo), "push", progress)
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
    if name in (".", ".."):  # a literal key part, but as a folder name it would leave local_dir
        raise S3UsageError(f"{s3_uri}: a job named {name!r} cannot be a folder under {local_dir}")
    return os.path.join(local_dir, name) if name else local_dir


def _local_clash(job_dir: str, local_rel: str) -> str | None:
    """Why an object cannot land at job_dir/local_rel: a local folder where it is a file, or a
    local file where its path needs a folder (None when it can)."""
    dest = os.path.join(job_dir, local_rel)
    if os.path.isdir(dest) and not os.path.islink(dest):
        return f"{dest} is a local folder, the object a file"
    parent = os.path.dirname(local_rel)
    while parent:
        p = os.path.join(job_dir, parent)
        if os.path.lexists(p) and not os.path.isdir(p):
            return f"{p} is a local file where the object's path needs a folder"
        parent = os.path.dirname(parent)
    return None


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
    state = read_json(state_path)
    archives: dict[str, dict] = state.get("archives", {}) if isinstance(state.get("archives"), dict) else {}
    objects = list(t.list(bucket, prefix))
    todo: list[tuple[Remote, str, str]] = []  # (object, relative path, local path)
    keep: set[str] = set()
    # A key that is also a "folder" of other keys (a and a/b) cannot be both locally.
    folders = {rel[:i] for rel in (o.key[len(prefix):] for o in objects) for i, c in enumerate(rel) if c == "/"}
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
        if rel in folders:
            report.failed.append((o.key, f"s3://{bucket}/{o.key}: an object and a folder of the same name "
                                         f"(s3://{bucket}/{o.key}/...): only the folder can be a local path; skipped"))
            continue
        dest = os.path.join(job_dir, local_rel)
        clash = _local_clash(job_dir, local_rel)
        if clash:
            report.failed.append((o.key, f"s3://{bucket}/{o.key}: {clash}; skipped"))
            continue
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
        try:
            if os.path.isfile(dest) and t.same(dest, os.path.getsize(dest), o):
                report.skipped += 1
                continue
        except OSError as e:  # an unreadable local copy: this file fails, the others go on
            report.failed.append((o.key, f"{dest}: {e.strerror or e}"))
            continue
        todo.append((o, rel, dest))
    for a in archives.values():
        if isinstance(a, dict):
            keep.update(a.get("files", []))
    from rlvr.runs import step_sort_key

    todo.sort(key=lambda it: step_sort_key(it[1]))   # checkpoints oldest step first, whatever their spelling
    stale: list[str] = []
    if delete and os.path.isdir(job_dir):
        stale = [rel for rel, _ in local_files(job_dir, include, exclude,
                                                on_skip=lambda p, msg, kind: kind == "unreadable"
                                                and report.failed.append((p, msg)))
                 if rel not in keep]
    if dry_run:
        for o, rel, dest in todo:
            act = Action("download", f"s3://{bucket}/{o.key}", dest, o.size, dry_run=True)
            report.actions.append(act)
            on_action and on_action(act)
    else:
        bar = _bytes_bar(sum(o.size for o, _, _ in todo), "pull", progress)
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
                write_json(state_path, {"archives": archives})
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
                unlink_quiet(os.path.join(job_dir, *rel.split("/")))
            act = Action("delete", "", os.path.join(job_dir, *rel.split("/")), dry_run=dry_run)
            report.actions.append(act)
            on_action and on_action(act)
    return report


# tarfile's extraction filters arrived in Python 3.11.4 (3.12 everywhere); Debian 12 ships 3.11.2.
HAVE_TAR_FILTERS = hasattr(tarfile, "data_filter")


def safe_extractall(tf: tarfile.TarFile, dest: str) -> None:
    """Extract every member of tf below dest under the rules of tarfile's 'data' filter.

    Where the filter exists it is used; on older Pythons the same rules are applied here
    before anything is written: the whole archive is refused (ValueError naming the member)
    when a member has an absolute path or a '..' component, is a device, FIFO or other special
    file, or is a link whose target is absolute or lies outside dest. Files get the owner's
    read/write bits and lose set-id, sticky and group/other write bits; owners are not restored.
    """
    if HAVE_TAR_FILTERS:
        tf.extractall(dest, filter="data")
        return
    root = os.path.realpath(dest)

    def inside(path: str) -> bool:
        return os.path.commonpath([root, os.path.realpath(path)]) == root

    members = []
    for m in tf.getmembers():
        name = m.name.lstrip("/" + os.sep)
        if os.path.isabs(name) or ".." in name.replace(os.sep, "/").split("/") or not inside(os.path.join(root, name)):
            raise ValueError(f"member {m.name!r} would land outside the destination")
        if not (m.isfile() or m.isdir() or m.issym() or m.islnk()):
            raise ValueError(f"member {m.name!r} is a special file")
        if m.issym() or m.islnk():
            base = os.path.dirname(os.path.join(root, name)) if m.issym() else root
            if os.path.isabs(m.linkname) or not inside(os.path.join(base, m.linkname)):
                raise ValueError(f"member {m.name!r} links outside the destination ({m.linkname!r})")
        m = copy.copy(m)  # (TarInfo.replace is 3.11.4+ too)
        m.name, m.uid, m.gid, m.uname, m.gname = name, os.getuid(), os.getgid(), "", ""
        if m.isfile() or m.islnk():
            mode = (m.mode | 0o600) & 0o755
            m.mode = mode if mode & 0o100 else mode & 0o644
        elif m.isdir():
            m.mode = (m.mode | 0o700) & 0o755
        members.append(m)
    tf.extractall(dest, members=members, numeric_owner=True)


def unpack_archive(archive: str, dest_dir: str, markers: tuple[str, ...] = ("config.yaml", "traces", "checkpoints")) -> list[str]:
    """Unpack a .tar.gz into dest_dir, stripping wrapper folders; return the files' relative paths.

    Members are checked under the rules of tarfile's 'data' filter (safe_extractall: no
    absolute paths, no '..', no links out of the tree, on every Python rlvr supports).
    Wrapper folders are stripped while the archive holds one top folder and none of
    `markers` at its top. Files merge into dest_dir, each replacing its namesake.
    """
    staging = os.path.join(os.path.dirname(os.path.abspath(archive)), f".{os.path.basename(archive)}.unpack.tmp")
    shutil.rmtree(staging, ignore_errors=True)
    os.makedirs(staging)
    try:
        try:
            with tarfile.open(archive, "r:*") as tf:
                safe_extractall(tf, staging)
        except (tarfile.TarError, OSError, EOFError, ValueError) as e:
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
        dest_real = os.path.realpath(dest_dir)
        for rel in files:  # never write through a symlinked folder of dest_dir that leads elsewhere
            parent = os.path.dirname(os.path.join(dest_dir, *rel.split("/")))
            if not within(dest_real, parent):
                raise S3Error(f"cannot unpack {archive}: {parent} is a symlink to {os.path.realpath(parent)}, "
                              f"outside {dest_dir}; nothing was written through it")
        for rel in files:  # merge file by file: each replaces the one of the same name
            target = os.path.join(dest_dir, *rel.split("/"))
            os.makedirs(os.path.dirname(target), exist_ok=True)
            if os.path.isdir(target) and not os.path.islink(target):
                shutil.rmtree(target)
            os.replace(os.path.join(top, *rel.split("/")), target)
        return sorted(files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
