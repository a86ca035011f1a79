"""Benchmark of rlvr's S3 transfers (rlvr.s3 push/pull) against boto3's s3transfer.

    python bench/bench_s3.py               # writes docs/bench/s3.md
    python bench/bench_s3.py --big-mib 64  # quicker

The server is the one the tests use (tests/s3server.py): Ceph RGW on 127.0.0.1 where its
Debian packages are installed, else moto's server. The reference is s3transfer's
TransferManager, the engine of ``aws s3 cp --recursive`` and of boto3's
``upload_file``/``download_file``, given the same concurrency and part size, with every
file of a workload submitted at once (parallel across files, like the AWS CLI).

Workloads: one large file (multipart) and many small files, pushed and pulled; then a
second push of the unchanged folder (rlvr compares sizes and checksums and sends nothing;
s3transfer has no change detection and sends everything again). rlvr also verifies every
upload and download against the ETag (MD5); s3transfer's uploads are covered by botocore's
SHA-256 body signature over plain HTTP, its downloads by nothing. The hashing is included
in both sides' figures. Each figure is the best of --reps runs (the machine is shared).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "tests"))

import s3server  # noqa: E402

from rlvr import s3  # noqa: E402

MiB = 1024 * 1024


def cpu_model() -> str:
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def loadavg() -> str:
    try:
        return open("/proc/loadavg").read().split()[0]
    except OSError:
        return "?"


def make_workloads(root: str, big_mib: int, n_small: int, small_kib: int) -> dict[str, str]:
    big = os.path.join(root, "big")
    os.makedirs(big)
    with open(os.path.join(big, "model.safetensors"), "wb") as fh:
        for _ in range(big_mib):
            fh.write(os.urandom(MiB))
    small = os.path.join(root, "small")
    for i in range(n_small):
        d = os.path.join(small, f"shard_{i % 10}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, f"f{i:05d}.bin"), "wb") as fh:
            fh.write(os.urandom(small_kib * 1024))
    return {"big": big, "small": small}


def files_of(d: str) -> list[tuple[str, str]]:
    return [(rel, p) for rel, p in s3.local_files(d)]


def ref_upload(tm, d: str, bucket: str, prefix: str) -> None:
    futs = [tm.upload(p, bucket, prefix + rel) for rel, p in files_of(d)]
    for f in futs:
        f.result()


def ref_download(tm, client, bucket: str, prefix: str, dest: str) -> None:
    futs = []
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for o in page.get("Contents", []):
            p = os.path.join(dest, o["Key"][len(prefix):])
            os.makedirs(os.path.dirname(p), exist_ok=True)
            futs.append(tm.download(bucket, o["Key"], p))
    for f in futs:
        f.result()


def best_interleaved(cases: list[tuple[str, object, object]], reps: int) -> dict[str, float]:
    """Best wall time of each (name, fn, setup) case; the cases take turns, rep after rep."""
    out: dict[str, list[float]] = {name: [] for name, _, _ in cases}
    for _ in range(reps):
        for name, fn, setup in cases:
            if setup:
                setup()
            t = time.perf_counter()
            fn()
            out[name].append(time.perf_counter() - t)
    return {k: min(v) for k, v in out.items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big-mib", type=int, default=256)
    ap.add_argument("--small", type=int, default=500)
    ap.add_argument("--small-kib", type=int, default=64)
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--out", default=os.path.join(ROOT, "docs", "bench", "s3.md"))
    args = ap.parse_args(argv)

    from boto3.s3.transfer import TransferConfig
    from s3transfer.manager import TransferManager

    work = tempfile.mkdtemp(prefix="rlvr-bench-s3-")
    load_before = loadavg()
    os.environ.setdefault("CEPH_MEMSTORE_BYTES", str(8 << 30))  # deleted multipart data is freed late
    srv = s3server.start(os.path.join(work, "server"))
    try:
        os.environ.update({k: v for k, v in srv.env().items() if k.startswith("AWS_")})
        data = make_workloads(os.path.join(work, "data"), args.big_mib, args.small, args.small_kib)
        client = srv.client(max_pool_connections=2 * args.workers + 4)
        cfg = TransferConfig(max_concurrency=args.workers, multipart_threshold=8 * MiB, multipart_chunksize=8 * MiB)
        # Warm-up, not timed: the first writes create the gateway's data and index pools.
        client.create_bucket(Bucket="bench-warm")
        client.put_object(Bucket="bench-warm", Key="small", Body=b"x")
        s3.S3Transfer(client=client).upload_file(os.path.join(data["big"], "model.safetensors"), "bench-warm", "big")
        rows = []
        for name, d in data.items():
            nbytes = sum(os.path.getsize(p) for _, p in files_of(d))
            nfiles = len(files_of(d))
            bucket_r, bucket_t = f"bench-rlvr-{name}", f"bench-ref-{name}"
            for b in (bucket_r, bucket_t):
                client.create_bucket(Bucket=b)

            def clear(b):
                keys = [o.key for o in s3.S3Transfer(client=client).list(b)]
                if keys:
                    s3.S3Transfer(client=client).delete(b, keys)

            t = s3.S3Transfer(workers=args.workers)
            tm = TransferManager(client, cfg)
            dest = os.path.join(work, "pulled")
            fresh = lambda: shutil.rmtree(dest, ignore_errors=True)  # noqa: E731
            b = best_interleaved([
                ("up_r", lambda: s3.push(d, f"s3://{bucket_r}/x/", transfer=t), lambda: clear(bucket_r)),
                ("up_t", lambda: ref_upload(tm, d, bucket_t, "x/"), lambda: clear(bucket_t)),
            ], args.reps)
            b.update(best_interleaved([
                # a fresh S3Transfer, as a new command would start: no checksum remembered
                ("noop_r", lambda: s3.push(d, f"s3://{bucket_r}/x/", transfer=s3.S3Transfer(client=t.client)), None),
                ("down_r", lambda: s3.pull(f"s3://{bucket_r}/x", dest, transfer=t), fresh),
                ("down_t", lambda: ref_download(tm, client, bucket_t, "x/", dest), fresh),
            ], args.reps))
            up_r, up_t, noop_r, down_r, down_t = b["up_r"], b["up_t"], b["noop_r"], b["down_r"], b["down_t"]
            fresh()
            s3.pull(f"s3://{bucket_r}/x", dest, transfer=t)
            same = s3.pull(f"s3://{bucket_r}/x", dest, transfer=t).skipped == nfiles
            t.close()
            tm.shutdown()
            clear(bucket_r)
            clear(bucket_t)
            rows.append((name, nfiles, nbytes, up_r, up_t, noop_r, down_r, down_t, same))
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)

    def rate(n, s):
        return f"{n / MiB / s:,.0f} MiB/s"

    when = datetime.date.today().isoformat()
    cmd = "python bench/bench_s3.py" + (" " + " ".join(argv if argv is not None else sys.argv[1:])).rstrip()
    lines = [
        "## S3 transfers (rlvr-s3-sync, rlvr.s3)",
        "",
        f"Produced by `{cmd}` on {when}, `nproc`: {os.cpu_count()}, {cpu_model()}, Python {platform.python_version()}; "
        f"load average {load_before} before, {loadavg()} after (a shared machine: best of {args.reps} runs each, "
        f"the contenders taking turns).",
        "",
        f"Server: {srv.describe}, on the same machine over 127.0.0.1 (so the figures measure the client and the "
        f"server's CPU, not a network). Reference: boto3's s3transfer TransferManager (the engine of "
        f"`aws s3 cp --recursive`), all files submitted at once; both with {args.workers} concurrent requests and "
        f"8 MiB parts. Integrity: rlvr sends Content-MD5 with every upload (the server checks it), compares the "
        f"ETags returned and checks every download against the ETag; for s3transfer over plain HTTP, botocore "
        f"signs each request body with SHA-256 (the server checks it) and downloads are not checked.",
        "",
        "| workload | files | MiB | push rlvr | upload s3transfer | re-push unchanged, rlvr | pull rlvr | download s3transfer |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, nfiles, nbytes, up_r, up_t, noop_r, down_r, down_t, same in rows:
        label = "one large file" if name == "big" else f"{nfiles} files of {args.small_kib} KiB"
        lines.append(
            f"| {label} | {nfiles} | {nbytes / MiB:,.0f} | {up_r:.2f} s ({rate(nbytes, up_r)}) | {up_t:.2f} s ({rate(nbytes, up_t)}) "
            f"| {noop_r:.2f} s (0 B sent) | {down_r:.2f} s ({rate(nbytes, down_r)}) | {down_t:.2f} s ({rate(nbytes, down_t)}) |")
    lines += [
        "",
        "A second push or pull of an unchanged folder sends nothing: one listing, then a local MD5 of each file "
        "whose size matches (s3transfer has no change detection: it would send everything again, as in its "
        "upload column). " + ("A second pull found every file unchanged." if all(r[-1] for r in rows) else
                              "WARNING: a second pull did not find every file unchanged."),
        "",
    ]
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
