"""rlvr-s3-sync: push run folders to S3, pull job results, watch running jobs' traces (see rlvr.s3)."""

from __future__ import annotations

import os
import sys

import click

from rlvr.cli import Failure, run, say, warn, with_examples
from rlvr.records import RecordWriter

CRON = "*/10 * * * * rlvr-s3-sync watch $(date +\\%Y\\%m\\%d) --src s3://bucket/jobs/ --dest $HOME/results >> $HOME/results/watch.log 2>&1"

HELP = with_examples(
    """Sync run folders with an S3 bucket (AWS or any S3-compatible store).

    push uploads new and changed files (size and checksum), pull downloads a job's results,
    watch keeps local copies of running jobs' traces fresh (cron-safe). Each transfer prints
    one JSON line on stdout ({"action", "src", "dst", "bytes"}); progress and the summary go
    to stderr.

    Credentials come from boto3's standard chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY,
    AWS_PROFILE, instance roles) and are never printed. --endpoint-url or AWS_ENDPOINT_URL
    selects an S3-compatible store (Ceph RGW, MinIO, ...). Transient errors are retried
    with backoff (RLVR_S3_RETRIES, default 8); downloads are renamed into place only when
    complete and verified; an interrupted push or pull resumes where it stopped.
    """,
    f"""
rlvr-s3-sync push results/run1 s3://bucket/jobs/run1/ --exclude '*.tmp'
rlvr-s3-sync push results/run1 s3://bucket/jobs/run1/ --delete --dry-run
rlvr-s3-sync pull s3://bucket/jobs/run1 results/          # -> results/run1/
rlvr-s3-sync pull s3://bucket/jobs/run1 results/ --include 'traces/*'
rlvr-s3-sync watch 20260125 --src s3://bucket/jobs/ --dest results/ --interval 60
rlvr-s3-sync push out/ s3://bucket/x/ --endpoint-url http://127.0.0.1:7480
# crontab line: sync today's jobs' traces every 10 minutes (overlaps exit 0)
{CRON}
""",
)


def transfer_options(f):
    f = click.option("--progress/--no-progress", default=None,
                     help="Byte progress bar on stderr (default: on when stderr is a terminal).")(f)
    f = click.option("--part-size", type=click.IntRange(5, 512), default=8, show_default=True, metavar="MIB",
                     help="Multipart part size in MiB (files this large or larger go up in parts).")(f)
    f = click.option("--workers", type=click.IntRange(1, 64), default=8, show_default=True,
                     help="Parallel transfers (files and parts).")(f)
    f = click.option("--dry-run", is_flag=True, help="Print what would move; move nothing.")(f)
    f = click.option("--delete", is_flag=True,
                     help="Also delete what the source no longer has (only paths that pass the filters).")(f)
    f = click.option("--exclude", multiple=True, metavar="GLOB",
                     help="Skip matching paths (repeatable); matches the path, file name or a leading folder.")(f)
    f = click.option("--include", multiple=True, metavar="GLOB",
                     help="Only matching paths (repeatable; default: all).")(f)
    return endpoint_option(f)


def endpoint_option(f):
    return click.option("--endpoint-url", metavar="URL", default=None,
                        help="S3-compatible endpoint (default: AWS_ENDPOINT_URL, else AWS S3).")(f)


def _transfer(endpoint_url, workers=8, part_size=8):
    from rlvr.s3 import S3Transfer

    mib = part_size * 1024 * 1024
    return S3Transfer(endpoint_url=endpoint_url, workers=workers, part_size=mib, multipart_threshold=mib)


def _finish(report, verb: str) -> None:
    for note in report.notes:
        warn(note)
    say(f"{verb}: {report.summary()}")
    if report.failed:
        for path, msg in report.failed[:5]:
            say(f"failed: {msg}")
        raise Failure(f"{len(report.failed)} transfer(s) failed; run again to retry them")


@click.group(help=HELP)
def cmd():
    pass


@cmd.command(help=with_examples(
    "Upload the new and changed files of LOCAL_DIR to the prefix S3_URI (LOCAL_DIR/a/b -> S3_URI/a/b).",
    """
rlvr-s3-sync push results/run1 s3://bucket/jobs/run1/
rlvr-s3-sync push results/run1 s3://bucket/jobs/run1/ --include 'traces/*' --include config.yaml
rlvr-s3-sync push results/run1 s3://bucket/jobs/run1/ --delete --dry-run
"""))
@click.argument("local_dir", type=click.Path(exists=True, file_okay=False))
@click.argument("s3_uri")
@transfer_options
def push(local_dir, s3_uri, endpoint_url, include, exclude, delete, dry_run, workers, part_size, progress):
    from rlvr.s3 import push as do_push

    out = RecordWriter(sys.stdout.buffer)
    report = do_push(local_dir, s3_uri, include, exclude, delete, dry_run,
                     transfer=_transfer(endpoint_url, workers, part_size), progress=progress,
                     on_action=lambda a: out.write(a.record()))
    _finish(report, "push")


@cmd.command(help=with_examples(
    "Download the job S3_URI (s3://bucket/prefix/JOB, or a job name JOB under --src) into DIR/JOB/; a "
    "model.tar.gz is unpacked there (wrapper folders stripped) so config.yaml, traces/ and checkpoints/ sit "
    "directly in DIR/JOB/.",
    """
rlvr-s3-sync pull s3://bucket/jobs/run1 results/        # -> results/run1/
rlvr-s3-sync pull s3://bucket/jobs/run1 results/ --exclude checkpoints
RLVR_S3_JOBS=s3://bucket/rlvr/checkpoints/ rlvr-s3-sync pull annotations-adhoc-20261123-101500 results/
"""))
@click.argument("s3_uri", metavar="S3_URI|JOB")
@click.argument("dir", type=click.Path(file_okay=False))
@click.option("--src", envvar="RLVR_S3_JOBS", default=None, metavar="S3_URI",
              help="Prefix holding one folder per job, for a JOB given by name (env RLVR_S3_JOBS).")
@transfer_options
@click.option("--no-unpack", is_flag=True, help="Keep model.tar.gz as a file instead of unpacking it.")
def pull(s3_uri, dir, src, endpoint_url, include, exclude, delete, dry_run, workers, part_size, progress, no_unpack):
    from rlvr.s3 import pull as do_pull

    if "://" not in s3_uri:  # a job name: under --src / RLVR_S3_JOBS
        if not s3_uri.strip() or "/" in s3_uri or s3_uri.strip() in (".", ".."):
            raise click.BadParameter("expected s3://bucket/prefix/JOB or a job name", param_hint="S3_URI|JOB")
        if not src:
            raise click.BadParameter(f"a job name ({s3_uri}) needs --src or RLVR_S3_JOBS (the prefix of the jobs)",
                                     param_hint="S3_URI|JOB")
        s3_uri = f"{src.rstrip('/')}/{s3_uri}"

    out = RecordWriter(sys.stdout.buffer)
    report = do_pull(s3_uri, dir, include, exclude, delete, dry_run, unpack=not no_unpack,
                     transfer=_transfer(endpoint_url, workers, part_size), progress=progress,
                     on_action=lambda a: out.write(a.record()))
    if not (report.actions or report.skipped or report.failed):
        warn(f"nothing under {s3_uri.rstrip('/')}/ (pull takes a prefix: s3://bucket/prefix/JOB)")
    _finish(report, "pull")


@cmd.command(help=with_examples(
    "Poll the jobs under --src whose folder name contains PATTERN (a date, a job name) and download their "
    "traces/trace.jsonl and config.yaml to DEST/JOB/ whenever they change; exit 0 after --idle-exit seconds "
    "without a change. A lock file (DEST/.rlvr-s3-sync-watch.lock) keeps cron runs from overlapping: a second "
    "run exits 0 with a message.",
    f"""
rlvr-s3-sync watch 20260125 --src s3://bucket/jobs/ --dest results/
RLVR_S3_JOBS=s3://bucket/jobs/ rlvr-s3-sync watch grpo-math --interval 30 --idle-exit 600
# crontab line:
{CRON}
"""))
@click.argument("pattern")
@click.option("--src", envvar="RLVR_S3_JOBS", required=True, metavar="S3_URI",
              help="Prefix holding one folder per job (env RLVR_S3_JOBS).")
@click.option("--dest", default="results", show_default=True, type=click.Path(file_okay=False),
              help="Local folder for DEST/JOB/... copies.")
@click.option("--interval", type=click.FloatRange(0.05), default=60, show_default=True, help="Seconds between polls.")
@click.option("--idle-exit", type=click.FloatRange(0), default=3600, show_default=True,
              help="Exit after this many seconds without a change (0: after the first poll).")
@click.option("--file", "files", multiple=True, metavar="PATH",
              help="Job-relative files to fetch (repeatable; default: traces/trace.jsonl and config.yaml).")
@click.option("--lock", type=click.Path(dir_okay=False), default=None, help="Lock file (default: in DEST).")
@endpoint_option
def watch(pattern, src, dest, interval, idle_exit, files, lock, endpoint_url):
    from rlvr.s3 import WATCH_FILES, WATCH_LOCK, LockHeld, WatchLock
    from rlvr.s3 import watch as do_watch

    if not pattern.strip() or "/" in pattern:
        raise click.BadParameter("must be a non-empty part of a job folder name (no '/')", param_hint="PATTERN")
    try:
        held = WatchLock(lock or os.path.join(dest, WATCH_LOCK)).acquire()
    except LockHeld as e:
        say(f"{e}; exiting")
        return
    out = RecordWriter(sys.stdout.buffer)
    try:
        n = do_watch(pattern, src, dest, files=files or WATCH_FILES, interval=interval, idle_exit=idle_exit,
                     transfer=_transfer(endpoint_url, 4), on_action=lambda a: out.write(a.record()),
                     log=say)
        say(f"watch: {n} download(s)")
    finally:
        held.release()


main = run(cmd)
