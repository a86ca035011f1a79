"""Hostile trees and keys for rlvr-s3-sync: symlinks out of the tree, unreadable folders and
files, file names that are not UTF-8, an object and a folder of the same name, names at the
file-name limit, look-alike temp files. The pure ones need no server; the others use the
session's real S3 server (tests/s3_fixtures.py)."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_fixtures import bucket, s3env, s3server  # noqa: E402,F401

from rlvr import s3  # noqa: E402
from rlvr.errors import S3UsageError  # noqa: E402
from rlvr.s3 import sync  # noqa: E402
from rlvr.s3.transfer import S3Transfer  # noqa: E402
from rlvr.s3.uri import validate_key  # noqa: E402


def _deny(mp, path):
    """Make os.walk's listing of one folder fail as an unreadable folder does (root reads all)."""
    real = os.scandir

    def scandir(p="."):
        if os.fspath(p) == os.fspath(path):
            raise PermissionError(13, "Permission denied", os.fspath(p))
        return real(p)

    mp.setattr(os, "scandir", scandir)


def _tree(tmp_path):
    root = tmp_path / "run"
    (root / "sub").mkdir(parents=True)
    (root / "a.txt").write_text("a")
    (root / "sub" / "b.txt").write_text("b")
    (tmp_path / "secret.txt").write_text("SECRET")
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "o.txt").write_text("o")
    os.symlink(tmp_path / "secret.txt", root / "leak.txt")
    os.symlink(tmp_path / "elsewhere", root / "leakdir")
    os.symlink(root / "a.txt", root / "alias.txt")  # a link inside the tree is content of the tree
    return root


def test_local_files_never_follows_links_out_and_never_misses_a_folder_silently(tmp_path, monkeypatch):
    root = _tree(tmp_path)
    (root / ".env.tmpl").write_text("user file")  # dot files that merely contain '.tmp' are the user's
    (root / ".tmpdata").write_text("user file")
    (root / ".a.txt.0123456789.s3part").write_text("ours")
    (root / ".a.txt.0123456789.s3part.json").write_text("{}")
    (root / ".state.json.tmp12.34").write_text("ours")
    (root / "checkpoints" / ".tmp-step_000003-1-2").mkdir(parents=True)
    (root / "checkpoints" / ".tmp-step_000003-1-2" / "model.safetensors").write_text("half written")
    skipped = []
    got = [rel for rel, _ in sync.local_files(str(root), on_skip=lambda *a: skipped.append(a))]
    assert got == [".env.tmpl", ".tmpdata", "a.txt", "alias.txt", "sub/b.txt"]
    assert sorted((os.path.basename(p), kind) for p, _, kind in skipped) == [("leak.txt", "symlink"),
                                                                           ("leakdir", "symlink")]
    assert all("outside" in msg and "not followed" in msg for _, msg, _ in skipped)

    _deny(monkeypatch, root / "sub")
    skipped.clear()
    got = [rel for rel, _ in sync.local_files(str(root), on_skip=lambda *a: skipped.append(a))]
    assert "sub/b.txt" not in got and ("unreadable" in [k for _, _, k in skipped])
    assert any("cannot read folder" in m and "Permission denied" in m for _, m, _ in skipped)
    with pytest.raises(PermissionError):  # without on_skip a listing never quietly misses a folder
        list(sync.local_files(str(root)))


def test_keys_that_are_not_utf8_are_refused_with_a_readable_line():
    with pytest.raises(S3UsageError, match=r"invalid key 'p/bad\\xff.txt': not valid UTF-8"):
        validate_key("p/bad\udcff.txt")  # how Python names a file whose name has the byte 0xff
    with pytest.raises(S3UsageError, match="not valid UTF-8"):
        validate_key("p/\ud800")


def test_temp_names_stay_within_the_file_name_limit():
    for name in ("a", "n" * 200, "n" * 255, "é" * 127):
        base = S3Transfer._tmp_base(f"/x/{name}")
        assert len(f"{base}0123456789.s3part.json".encode()) <= 255, name
        assert sync._is_ours(f"{base}0123456789.s3part") and sync._is_ours(f"{base}0123456789.s3part.json")
    assert S3Transfer._tmp_base("/x/a") == ".a."
    assert S3Transfer._tmp_base("/x/" + "n" * 250) != S3Transfer._tmp_base("/x/" + "n" * 249 + "m")


def test_push_leaves_out_links_and_unreadable_paths_and_then_deletes_nothing(s3env, bucket, tmp_path, monkeypatch):
    root = _tree(tmp_path)
    os.mkdir(root / "deny")
    (root / "deny" / "kept.txt").write_text("k")
    (root / "locked.txt").write_text("locked")
    with open(os.path.join(os.fsencode(root), b"bad\xff.txt"), "w") as fh:
        fh.write("x")
    c = s3env.client()
    for key in ("p/leak.txt", "p/deny/kept.txt", "p/locked.txt", "p/gone.txt"):  # an earlier push's copies
        c.put_object(Bucket=bucket, Key=key, Body=b"old")
    real = sync.snapshot_size

    def snapshot_size(p):
        if p.endswith("locked.txt"):
            raise PermissionError(13, "Permission denied", p)
        return real(p)

    with monkeypatch.context() as m:
        _deny(m, root / "deny")
        m.setattr(sync, "snapshot_size", snapshot_size)
        rep = s3.push(str(root), f"s3://{bucket}/p/", delete=True)
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="p/")["Contents"]}
    assert {"p/a.txt", "p/alias.txt", "p/sub/b.txt"} <= keys  # the rest went up
    assert c.get_object(Bucket=bucket, Key="p/leak.txt")["Body"].read() == b"old"  # never the secret
    assert not any(k.startswith("p/leakdir") for k in keys)
    failed = " | ".join(m for _, m in rep.failed)
    assert "cannot read folder" in failed and "locked.txt: Permission denied" in failed, failed
    assert "not valid UTF-8" in failed, failed
    # a listing that missed something deletes nothing: deny/kept.txt and gone.txt stay
    assert {"p/deny/kept.txt", "p/locked.txt", "p/gone.txt"} <= keys and rep.count("delete") == 0
    assert any("leak.txt" in n and "not followed" in n for n in rep.notes)

    os.unlink(os.path.join(os.fsencode(root), b"bad\xff.txt"))
    # with nothing failing, --delete removes gone.txt but never the copy of a skipped link
    env = s3env.env()
    r = subprocess.run([sys.executable, "-c", "from rlvr.commands.s3_sync import main; main()", "push", str(root),
                        f"s3://{bucket}/p/", "--delete"], env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert "warning:" in r.stderr and "leak.txt" in r.stderr and "not followed" in r.stderr
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="p/")["Contents"]}
    assert "p/gone.txt" not in keys and "p/leak.txt" in keys


def test_pull_of_hostile_keys_and_trees(s3env, bucket, tmp_path):
    c = s3env.client()
    long_name = "n" * 250  # a legal file name whose temp name would not be
    for key, body in {"j/x": b"file", "j/x/y": b"inner", "j/a": b"A", "j/a.b": b"AB", f"j/{long_name}": b"L",
                      "j/sub/f.txt": b"through", "j/empty": b""}.items():
        c.put_object(Bucket=bucket, Key=key, Body=body)
    dest = tmp_path / "d"
    (dest / "j").mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, dest / "j" / "sub")
    # a resumable partial download of a.b from an earlier, interrupted pull
    partial = dest / "j" / ".a.b.0123456789.s3part"
    partial.write_bytes(b"partial")
    # what a local tree may hold in the way: a folder where the bucket has a file, a file where it has a folder
    (dest / "j" / "empty").mkdir()
    (dest / "j" / "w").write_text("a file")
    c.put_object(Bucket=bucket, Key="j/w/in.txt", Body=b"in")
    rep = s3.pull(f"s3://{bucket}/j", str(dest), include=["a", "x", "x/y", long_name, "sub", "empty", "w"])
    assert partial.exists()  # pulling 'a' leaves the temp files of 'a.b' alone
    assert (dest / "j" / "x" / "y").read_bytes() == b"inner"
    assert (dest / "j" / long_name).read_bytes() == b"L"
    # a folder the user linked elsewhere (checkpoints -> /mnt/big) is written through, as aws s3 sync does:
    # no key can make a link (S3 has none) and unpacking refuses links out of the folder
    assert (outside / "f.txt").read_bytes() == b"through" and os.path.islink(dest / "j" / "sub")
    msgs = " | ".join(m for _, m in rep.failed)
    assert "an object and a folder of the same name" in msgs, msgs
    assert "is a local folder, the object a file" in msgs and "is a local file where the object's path" in msgs
    assert len(rep.failed) == 3, rep.failed
    assert (dest / "j" / "w").read_text() == "a file" and os.path.isdir(dest / "j" / "empty")
    os.rmdir(dest / "j" / "empty")  # out of the way: the zero-byte object arrives
    s3.pull(f"s3://{bucket}/j", str(dest), include=["empty"])
    assert (dest / "j" / "empty").read_bytes() == b""
    assert not [f for f in os.listdir(dest / "j") if f.endswith(".s3part") and f != partial.name]


def test_unpack_never_writes_through_a_symlinked_folder(tmp_path):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in (("run/config.yaml", b"lr: 1\n"), ("run/checkpoints/w.bin", b"w")):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    archive = tmp_path / "model.tar.gz"
    archive.write_bytes(buf.getvalue())
    dest, outside = tmp_path / "job", tmp_path / "outside"
    dest.mkdir()
    outside.mkdir()
    os.symlink(outside, dest / "checkpoints")
    with pytest.raises(s3.S3Error, match="not written through|nothing was written through"):
        sync.unpack_archive(str(archive), str(dest))
    assert os.listdir(outside) == [] and not (dest / "config.yaml").exists()


def test_a_job_named_dot_or_dotdot_never_lands_outside_the_folder(tmp_path):
    assert sync.job_dir_for("s3://bkt/jobs/run1/", str(tmp_path)) == str(tmp_path / "run1")
    for uri in ("s3://bkt/jobs/..", "s3://bkt/jobs/../", "s3://bkt/.", "s3://bkt/jobs/./"):
        with pytest.raises(S3UsageError, match="cannot be a folder under"):
            sync.job_dir_for(uri, str(tmp_path))


def test_watch_writes_through_a_folder_the_user_linked_elsewhere(s3env, bucket, tmp_path):
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/traces/trace.jsonl", Body=b'{"step": 1}\n')
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/config.yaml", Body=b"lr: 1\n")
    dest, outside = tmp_path / "results", tmp_path / "outside"
    (dest / "20260125-a").mkdir(parents=True)
    outside.mkdir()
    os.symlink(outside, dest / "20260125-a" / "traces")
    logs = []
    n = s3.watch("20260125", f"s3://{bucket}/jobs/", str(dest), once=True, log=logs.append)
    assert n == 2 and (dest / "20260125-a" / "config.yaml").read_bytes() == b"lr: 1\n"
    assert (outside / "trace.jsonl").read_bytes() == b'{"step": 1}\n'
