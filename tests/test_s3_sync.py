"""Tests of rlvr-s3-sync and rlvr.s3 against a real S3 server in its own processes.

The server is Ceph's RADOS Gateway where Debian's Ceph packages are installed, else moto's
server mode with IAM auth; the test ids say which (``[ceph]`` / ``[moto]``). Nothing here
mocks S3: failures are real (a killed server, wrong keys, an interrupted transfer).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
import threading
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_fixtures import bucket, s3env, s3server  # noqa: E402,F401
import machine_time  # noqa: E402

from rlvr import s3  # noqa: E402
from rlvr.s3 import MiB, S3Transfer  # noqa: E402
from rlvr.s3.client import is_transient  # noqa: E402

CLI = [sys.executable, "-c", "from rlvr.commands.s3_sync import main; main()"]


def cli(args, env, timeout=120, **kw):  # (the timeout in machine seconds: a hang guard)
    return machine_time.run(CLI + [str(a) for a in args], env=env, capture_output=True, text=True,
                            timeout=timeout, **kw)


def records(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.strip()]


def tree(root) -> dict[str, str]:
    """relative path -> sha256 of every regular file under root (hidden temp files included)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            out[os.path.relpath(p, root)] = hashlib.sha256(open(p, "rb").read()).hexdigest()
    return out


def make_run(root, big=12 * MiB):
    os.makedirs(f"{root}/traces", exist_ok=True)
    os.makedirs(f"{root}/checkpoints/step_10", exist_ok=True)
    with open(f"{root}/config.yaml", "w") as fh:
        fh.write("model: tiny\nlr: 3e-3\n")
    with open(f"{root}/traces/trace.jsonl", "w") as fh:
        for i in range(50):
            fh.write(json.dumps({"id": f"p{i}", "rewards": [1.0, 0.0]}) + "\n")
    with open(f"{root}/checkpoints/step_10/model.safetensors", "wb") as fh:
        fh.write(os.urandom(big))
    open(f"{root}/empty.txt", "w").close()
    with open(f"{root}/résumé ünïcode.txt", "w") as fh:
        fh.write("é")


def get(srv, b, key) -> bytes:
    return srv.client().get_object(Bucket=b, Key=key)["Body"].read()


# ----------------------------------------------------------------------------- pure functions

def test_selected_globs():
    assert s3.selected("checkpoints/step_1/model.pt")
    assert not s3.selected("checkpoints/step_1/model.pt", exclude=["*.pt"])
    assert not s3.selected("checkpoints/step_1/model.pt", exclude=["checkpoints"])
    assert not s3.selected("checkpoints/step_1/model.pt", exclude=["checkpoints/"])
    assert s3.selected("traces/trace.jsonl", include=["traces/*"])
    assert not s3.selected("config.yaml", include=["traces/*"])
    assert s3.selected("a/config.yaml", include=["config.yaml"])  # a bare name matches the file name
    assert not s3.selected("traces/x.tmp", include=["traces"], exclude=["*.tmp"])


def test_names_are_validated():
    for bad, why in [("s3://ab/x", "3 to 63"), ("s3://Bad_Bucket/x", "lowercase"), ("s3://a..b/x", ".."),
                     ("s3://192.168.1.1/x", "IP address"), ("gs://bucket/x", "not an s3:// URI"),
                     ("s3:///x", "no bucket"), ("s3://bucket/a\nb", "control character"),
                     ("s3://bucket/" + "k" * 1025, "1024 bytes")]:
        with pytest.raises(s3.S3UsageError, match=why):
            s3.parse_uri(bad)
    assert s3.parse_uri("s3://my.bucket-1/a/b/") == ("my.bucket-1", "a/b/")
    assert s3.safe_relpath("a/../../etc/passwd") is None and s3.safe_relpath("/abs") is None
    assert s3.safe_relpath("a//b") is None and s3.safe_relpath("a/b") == os.path.join("a", "b")
    # one error vocabulary: a bad name is a usage error (exit 2), a failed transfer a Failure (exit 1)
    from rlvr.errors import Failure, UsageError

    assert issubclass(s3.S3UsageError, UsageError) and issubclass(s3.S3UsageError, s3.S3Error)
    assert issubclass(s3.S3Error, Failure) and s3.S3UsageError("x").exit_code == 2 and s3.S3Error("x").exit_code == 1


def test_bad_names_exit_2_without_touching_the_network(tmp_path):
    env = dict(os.environ, AWS_ENDPOINT_URL="http://127.0.0.1:9", AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y")
    r = cli(["push", tmp_path, "s3://Bad_Bucket/x/"], env)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines()[-1].startswith("rlvr-s3-sync: error: invalid bucket name 'Bad_Bucket'")
    r = cli(["pull", "http://bucket/x", tmp_path], env)
    assert r.returncode == 2 and "not an s3:// URI" in r.stderr
    r = cli(["watch", "a/b", "--src", "s3://bucket/jobs/", "--dest", tmp_path], env)
    assert r.returncode == 2 and "PATTERN" in r.stderr


def test_transient_errors_are_classified():
    from botocore.exceptions import ClientError, EndpointConnectionError

    def ce(code, status):
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": {"HTTPStatusCode": status}}, "PutObject")

    assert is_transient(ce("SlowDown", 503)) and is_transient(ce("InternalError", 500))
    assert is_transient(ce("Whatever", 502)) and is_transient(EndpointConnectionError(endpoint_url="x"))
    assert not is_transient(ce("AccessDenied", 403)) and not is_transient(ce("NoSuchBucket", 404))


def test_file_etag_matches_the_server_for_single_and_multipart(s3env, bucket, tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(os.urandom(11 * MiB + 7))
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="single", Body=p.read_bytes())
    assert c.head_object(Bucket=bucket, Key="single")["ETag"].strip('"') == s3.file_etag(str(p), p.stat().st_size, None)
    t = S3Transfer(workers=2, part_size=5 * MiB, multipart_threshold=5 * MiB)
    act = t.upload_file(str(p), bucket, "multi")
    h = c.head_object(Bucket=bucket, Key="multi")
    assert h["ETag"].strip('"') == s3.file_etag(str(p), p.stat().st_size, 5 * MiB)
    assert h["ETag"].strip('"').endswith("-3") and h["Metadata"][s3.PART_SIZE_META] == str(5 * MiB)
    assert act.bytes == p.stat().st_size
    t.close()


# ----------------------------------------------------------------------------- push / pull

def test_push_pull_round_trip_is_byte_identical_and_incremental(s3env, bucket, tmp_path):
    run = tmp_path / "run1"
    make_run(run)
    env = s3env.env()
    uri = f"s3://{bucket}/jobs/run1/"
    r = cli(["push", run, uri, "--part-size", "5", "--workers", "4", "--progress"], env)
    assert r.returncode == 0, r.stderr
    assert "push: 100%" in r.stderr and "5 uploaded" in r.stderr  # progress and summary: stderr only
    acts = records(r.stdout)  # stdout: one JSON line per transfer
    assert sorted(a["dst"] for a in acts) == sorted(f"{uri}{k}" for k in tree(run))
    assert all(a["action"] == "upload" for a in acts)
    etag = s3env.client().head_object(Bucket=bucket, Key="jobs/run1/checkpoints/step_10/model.safetensors")["ETag"]
    assert etag.strip('"').endswith("-3")  # 12 MiB in 5 MiB parts

    r = cli(["pull", f"s3://{bucket}/jobs/run1", tmp_path / "local"], env)
    assert r.returncode == 0, r.stderr
    assert tree(tmp_path / "local" / "run1") == tree(run)  # no temp files left either

    r = cli(["push", run, uri, "--part-size", "5"], env)  # nothing changed: nothing moves
    assert r.returncode == 0 and r.stdout == "" and "5 unchanged" in r.stderr, r.stderr
    # same size, new bytes: found by checksum, not size
    (run / "config.yaml").write_text("model: tiny\nlr: 9e-3\n")
    with open(run / "traces/trace.jsonl", "a") as fh:
        fh.write('{"id": "p50", "rewards": [1.0]}\n{"id": "p51", "rewa')  # a line still being written
    r = cli(["push", run, uri, "--part-size", "5"], env)
    assert sorted(a["dst"].rsplit("/", 1)[1] for a in records(r.stdout)) == ["config.yaml", "trace.jsonl"]
    trace = get(s3env, bucket, "jobs/run1/traces/trace.jsonl")
    assert trace.endswith(b'"p50", "rewards": [1.0]}\n'), "a torn last line is held back"

    r = cli(["pull", f"s3://{bucket}/jobs/run1", tmp_path / "local"], env)
    assert sorted(a["dst"].rsplit("/", 1)[1] for a in records(r.stdout)) == ["config.yaml", "trace.jsonl"]
    assert (tmp_path / "local/run1/config.yaml").read_bytes() == (run / "config.yaml").read_bytes()


def test_dry_run_and_delete_and_filters(s3env, bucket, tmp_path):
    run = tmp_path / "run"
    make_run(run, big=1000)
    env = s3env.env()
    uri = f"s3://{bucket}/r/"
    r = cli(["push", run, uri, "--dry-run"], env)
    assert r.returncode == 0 and len(records(r.stdout)) == 5 and all(a["dry_run"] for a in records(r.stdout))
    assert s3env.client().list_objects_v2(Bucket=bucket).get("KeyCount") == 0
    r = cli(["push", run, uri, "--exclude", "checkpoints", "--exclude", "*.txt"], env)
    keys = sorted(o["Key"] for o in s3env.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["r/config.yaml", "r/traces/trace.jsonl"], r.stderr
    cli(["push", run, uri], env)
    os.unlink(run / "empty.txt")
    r = cli(["push", run, uri, "--delete", "--dry-run"], env)
    assert [a["action"] for a in records(r.stdout)] == ["delete"] and "empty.txt" in r.stdout
    assert len(s3env.client().list_objects_v2(Bucket=bucket)["Contents"]) == 5
    r = cli(["push", run, uri, "--delete", "--exclude", "*.txt"], env)  # filtered out: kept
    assert r.stdout == ""
    r = cli(["push", run, uri, "--delete"], env)
    assert records(r.stdout) == [{"action": "delete", "src": "", "dst": f"{uri}empty.txt", "bytes": 0}]
    assert len(s3env.client().list_objects_v2(Bucket=bucket)["Contents"]) == 4


def test_pull_goes_through_checkpoints_by_step_whatever_their_spelling(s3env, bucket, tmp_path):
    c = s3env.client()
    for name in ("grpo_step100", "grpo_step20", "step_000010", "step9", "grpo_step3"):
        c.put_object(Bucket=bucket, Key=f"jobs/j1/{name}/config.json", Body=b"{}")
    r = cli(["pull", f"s3://{bucket}/jobs/j1", tmp_path, "--dry-run", "--workers", "1"], s3env.env())
    assert r.returncode == 0, r.stderr
    assert [a["src"].split("/")[-2] for a in records(r.stdout)] == ["step9", "step_000010", "grpo_step3",
                                                                    "grpo_step20", "grpo_step100"]


def test_listing_paginates_past_1000_keys(s3env, bucket, tmp_path):
    run = tmp_path / "many"
    for i in range(1030):
        d = run / f"d{i % 7}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i:04d}.txt").write_text(str(i))
    t = S3Transfer(workers=16)
    calls = []
    t.client.meta.events.register("before-call.s3.ListObjectsV2", lambda **kw: calls.append(1))
    rep = s3.push(str(run), f"s3://{bucket}/many/", transfer=t)
    assert rep.count("upload") == 1030 and not rep.failed
    calls.clear()
    listed = list(t.list(bucket, "many/"))
    assert len(listed) == 1030 and len(calls) >= 2  # more than one page
    assert len({o.key for o in listed}) == 1030
    rep = s3.pull(f"s3://{bucket}/many/", str(tmp_path / "back"), transfer=t, dry_run=True)
    assert rep.count("download") == 1030 and not (tmp_path / "back").exists()
    rep = s3.pull(f"s3://{bucket}/many/", str(tmp_path / "back"), transfer=t)
    assert rep.count("download") == 1030
    assert tree(tmp_path / "back" / "many") == tree(run)
    rep = s3.push(str(run), f"s3://{bucket}/many/", transfer=t)
    assert rep.skipped == 1030 and rep.count("upload") == 0
    t.close()


def test_pull_unpacks_and_flattens_model_tar_gz(s3env, bucket, tmp_path):
    buf = io.BytesIO()
    files = {"job-7/config.yaml": b"lr: 1\n", "job-7/traces/trace.jsonl": b'{"id": "a"}\n',
             "job-7/checkpoints/step_1/model.safetensors": os.urandom(3000)}
    with tarfile.open(fileobj=buf, mode="w:gz") as tf:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tf.addfile(info, io.BytesIO(data))
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="jobs/job-7/output/model.tar.gz", Body=buf.getvalue())
    c.put_object(Bucket=bucket, Key="jobs/job-7/run.json", Body=b"{}")
    r = cli(["pull", f"s3://{bucket}/jobs/job-7", tmp_path], s3env.env())
    assert r.returncode == 0, r.stderr
    job = tmp_path / "job-7"
    assert (job / "config.yaml").read_bytes() == b"lr: 1\n"
    assert (job / "traces/trace.jsonl").read_bytes() == b'{"id": "a"}\n'
    assert (job / "checkpoints/step_1/model.safetensors").read_bytes() == files["job-7/checkpoints/step_1/model.safetensors"]
    assert (job / "run.json").exists() and not (job / "output").exists()
    assert "unpack" in [a["action"] for a in records(r.stdout)]
    r = cli(["pull", f"s3://{bucket}/jobs/job-7", tmp_path], s3env.env())  # unchanged archive: not fetched again
    assert r.returncode == 0 and r.stdout == "" and "2 unchanged" in r.stderr
    # a job by its name, under the jobs' prefix (--src, RLVR_S3_JOBS)
    r = cli(["pull", "job-7", tmp_path / "by-name"], dict(s3env.env(), RLVR_S3_JOBS=f"s3://{bucket}/jobs/"))
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "by-name" / "job-7" / "config.yaml").read_bytes() == b"lr: 1\n"
    env = {k: v for k, v in s3env.env().items() if k != "RLVR_S3_JOBS"}
    for args, msg in ((["job-7"], "needs --src or RLVR_S3_JOBS"), (["jobs/job-7", "--src", "s3://b/"], "job name"),
                      (["..", "--src", "s3://b/", "--delete"], "job name")):
        r = cli(["pull", *args, tmp_path / "x"], env)
        assert r.returncode == 2 and msg in r.stderr, r.stderr


def test_pull_refuses_keys_that_escape_the_folder(s3env, bucket, tmp_path):
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="j/ok.txt", Body=b"ok")
    c.put_object(Bucket=bucket, Key="j/../../evil.txt", Body=b"x")
    rep = s3.pull(f"s3://{bucket}/j", str(tmp_path / "d"))
    assert (tmp_path / "d/j/ok.txt").read_bytes() == b"ok"
    assert not list(tmp_path.rglob("evil.txt")) and "not a safe local path" in rep.failed[0][1]


# ----------------------------------------------------------------------------- failures

def test_wrong_credentials_give_a_clear_error_and_never_print_the_secret(s3env, bucket, tmp_path):
    if s3env.kind != "ceph":
        pytest.skip("moto accepts any credentials: this test needs Ceph RGW (scripts/install.sh installs it)")
    (tmp_path / "a.txt").write_text("a")
    env = s3env.env()
    secret = "wRoNg/SeCrEt+value0123456789abcdefghijkl"
    r = cli(["push", tmp_path, f"s3://{bucket}/x/"], dict(env, AWS_SECRET_ACCESS_KEY=secret))
    assert r.returncode == 1
    assert "access denied" in r.stderr and "SignatureDoesNotMatch" in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and r.stdout == ""
    r2 = cli(["pull", f"s3://{bucket}/x", tmp_path], dict(env, AWS_ACCESS_KEY_ID="AKIAUNKNOWNKEY000000",
                                                          AWS_SECRET_ACCESS_KEY=secret))
    assert r2.returncode == 1 and "InvalidAccessKeyId" in r2.stderr, r2.stderr
    for out in (r.stdout, r.stderr, r2.stdout, r2.stderr):
        assert secret not in out and secret[:12] not in out and s3env.secret_key not in out


def test_missing_credentials_and_bucket_give_clear_errors(s3env, tmp_path):
    (tmp_path / "a.txt").write_text("a")
    env = s3env.env()
    nocreds = {k: v for k, v in env.items() if k not in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")}
    r = cli(["push", tmp_path, "s3://some-bucket/x/"], nocreds)
    assert r.returncode == 1 and "no usable AWS credentials" in r.stderr, r.stderr
    r = cli(["push", tmp_path, "s3://no-such-bucket-rlvr/x/"], env)
    assert r.returncode == 1 and "no such bucket" in r.stderr, r.stderr
    assert s3env.secret_key not in r.stderr + r.stdout


def test_unreachable_endpoint_is_retried_then_fails_cleanly(tmp_path):
    (tmp_path / "a.txt").write_text("a")
    env = dict(os.environ, AWS_ACCESS_KEY_ID="x", AWS_SECRET_ACCESS_KEY="y", RLVR_S3_RETRIES="1")
    r = cli(["push", tmp_path, "s3://bucket/x/", "--endpoint-url", "http://user:s3cr3tpw@127.0.0.1:9"], env)
    assert r.returncode == 1 and "cannot reach http://127.0.0.1:9" in r.stderr, r.stderr
    assert "s3cr3tpw" not in r.stderr and "user" not in r.stderr


def test_throttling_and_5xx_are_retried_but_access_denied_is_not(s3env, bucket, tmp_path, monkeypatch):
    from s3server import FaultRelay, s3_error

    (tmp_path / "a.txt").write_bytes(b"payload")
    relay = FaultRelay(s3env.endpoint_url, [s3_error(503, "SlowDown"), s3_error(500, "InternalError")])
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint_url)
        t = S3Transfer(backoff=0.05)
        t.upload_file(str(tmp_path / "a.txt"), bucket, "a.txt")
        assert relay.injected == 2 and t.retried == 2
        assert get(s3env, bucket, "a.txt") == b"payload"
    finally:
        relay.close()
    relay = FaultRelay(s3env.endpoint_url, [s3_error(403, "AccessDenied")])
    try:
        monkeypatch.setenv("AWS_ENDPOINT_URL", relay.endpoint_url)
        t = S3Transfer(backoff=0.05)
        with pytest.raises(s3.S3Error, match=r"access denied .*\(AccessDenied\)"):
            t.upload_file(str(tmp_path / "a.txt"), bucket, "b.txt")
        assert relay.injected == 1 and t.retried == 0
    finally:
        relay.close()


def test_server_killed_mid_multipart_upload_is_retried_without_a_partial_object(s3env, bucket, tmp_path):
    p = tmp_path / "ckpt.bin"
    p.write_bytes(os.urandom(25 * MiB))  # 5 parts
    probe = s3env.client()
    seen: dict = {}
    lock = threading.Lock()
    restarted = threading.Event()

    def restart_later():
        time.sleep(1.0)
        with lock:  # no part can report (and be probed for) until the server is back
            s3env.restart()
            restarted.set()

    def on_bytes(n):  # called by the part threads as parts finish
        with lock:
            if "killed" not in seen:
                seen["killed"] = s3env.kill()  # the other part in flight gets a reset connection
                threading.Thread(target=restart_later, daemon=True).start()
            elif "head" not in seen and restarted.is_set():
                # parts are going up again; the upload is not complete, so no object may exist
                try:
                    probe.head_object(Bucket=bucket, Key="ckpt.bin")
                    seen["head"] = "visible"
                except probe.exceptions.ClientError as e:
                    seen["head"] = e.response["Error"]["Code"]
                seen["listed"] = probe.list_objects_v2(Bucket=bucket).get("KeyCount", 0)

    t = S3Transfer(workers=2, part_size=5 * MiB, multipart_threshold=5 * MiB, backoff=0.2, retries=10, on_bytes=on_bytes)
    act = t.upload_file(str(p), bucket, "ckpt.bin")
    t.close()
    assert restarted.wait(60)
    assert seen["killed"] and t.retried >= 1, (seen, t.retried)
    assert seen["head"] == "404" and seen["listed"] == 0, seen  # no partial object while parts were going up
    assert get(s3env, bucket, "ckpt.bin") == p.read_bytes() and act.bytes == 25 * MiB
    assert probe.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_interrupted_push_resumes_without_resending_finished_parts(s3env, bucket, tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    data = os.urandom(22 * MiB)  # 5 parts of 5 MiB
    (run / "ckpt.bin").write_bytes(data)

    class Interrupted(Exception):
        pass

    sent = []

    def stop_after_two_parts(n):
        sent.append(n)
        if len(sent) == 2:
            raise Interrupted

    t = S3Transfer(workers=1, part_size=5 * MiB, multipart_threshold=5 * MiB, on_bytes=stop_after_two_parts)
    with pytest.raises(Interrupted):
        s3.push(str(run), f"s3://{bucket}/j/", transfer=t)
    t.close()
    c = s3env.client()
    assert c.list_objects_v2(Bucket=bucket).get("KeyCount", 0) == 0  # nothing half-visible
    ups = c.list_multipart_uploads(Bucket=bucket)["Uploads"]
    assert len(ups) == 1
    done = sum(p["Size"] for p in c.list_parts(Bucket=bucket, Key="j/ckpt.bin", UploadId=ups[0]["UploadId"])["Parts"])
    assert 10 * MiB <= done < len(data)  # the parts sent before the interruption (a third may have been in flight)
    # the first part changes before the resume: it must be sent again, the others not
    data = b"X" + data[1:]
    (run / "ckpt.bin").write_bytes(data)
    t2 = S3Transfer(workers=2, part_size=5 * MiB, multipart_threshold=5 * MiB)
    rep = s3.push(str(run), f"s3://{bucket}/j/", transfer=t2)
    t2.close()
    assert rep.reused_bytes == done - 5 * MiB and rep.bytes == len(data) - done + 5 * MiB
    assert get(s3env, bucket, "j/ckpt.bin") == data
    assert c.list_multipart_uploads(Bucket=bucket).get("Uploads", []) == []


def test_interrupted_pull_resumes_and_never_shows_a_partial_file(s3env, bucket, tmp_path):
    data = os.urandom(17 * MiB)
    s3env.client().put_object(Bucket=bucket, Key="j/big.bin", Body=data)

    class Interrupted(Exception):
        pass

    def stop(n):
        raise Interrupted

    t = S3Transfer(workers=1, part_size=5 * MiB, multipart_threshold=5 * MiB, on_bytes=stop)
    with pytest.raises(Interrupted):
        s3.pull(f"s3://{bucket}/j", str(tmp_path), transfer=t)
    t.close()
    names = os.listdir(tmp_path / "j")
    assert "big.bin" not in names and any(n.startswith(".big.bin.") and n.endswith(".s3part") for n in names)
    state = json.loads(next((tmp_path / "j").glob(".big.bin.*.s3part.json")).read_text())
    done = sum(min(5 * MiB, len(data) - int(i) * 5 * MiB) for i in state["done"])
    assert 5 * MiB <= done < len(data)  # the chunks fetched before the interruption
    t2 = S3Transfer(workers=2, part_size=5 * MiB, multipart_threshold=5 * MiB)
    rep = s3.pull(f"s3://{bucket}/j", str(tmp_path), transfer=t2)
    t2.close()
    assert rep.reused_bytes == done and rep.bytes == len(data) - done
    assert (tmp_path / "j/big.bin").read_bytes() == data
    assert os.listdir(tmp_path / "j") == ["big.bin"]


# ----------------------------------------------------------------------------- watch, cache, background

def test_watch_follows_changing_traces_and_exits_when_idle(s3env, bucket, tmp_path):
    c = s3env.client()
    versions = [b"".join(json.dumps({"id": f"p{i}", "step": v}).encode() + b"\n" for i in range(20 * v + 1))
                for v in range(3)]
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/config.yaml", Body=b"lr: 1\n")
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/traces/trace.jsonl", Body=versions[0])
    c.put_object(Bucket=bucket, Key="jobs/20260125-b/config.yaml", Body=b"lr: 2\n")
    c.put_object(Bucket=bucket, Key="jobs/20260124-c/traces/trace.jsonl", Body=b"{}\n")
    dest = tmp_path / "results"
    args = ["watch", "20260125", "--src", f"s3://{bucket}/jobs/", "--dest", dest, "--interval", "0.2", "--idle-exit", "600"]
    proc = subprocess.Popen(CLI + [str(a) for a in args], env=s3env.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    local = dest / "20260125-a/traces/trace.jsonl"
    bad_reads: list[bytes] = []
    stop = threading.Event()

    def reader():  # a reader must only ever see whole versions
        while not stop.is_set():
            try:
                got = local.read_bytes()
            except FileNotFoundError:
                continue
            if got not in versions:
                bad_reads.append(got)

    lines: list[str] = []

    def trace_records() -> list[dict]:
        return [a for a in records("".join(lines)) if a["dst"].endswith("20260125-a/traces/trace.jsonl")]

    def wait_for(content, n, timeout=300):  # a guard against a hang, not a time limit
        # the file in place and its download's record on stdout (written just after the rename)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and proc.poll() is None:
            if local.exists() and local.read_bytes() == content and len(trace_records()) >= n:
                return True
            time.sleep(0.05)
        return local.exists() and local.read_bytes() == content

    th = threading.Thread(target=reader, daemon=True)
    th.start()
    errs: list[str] = []
    out_th = threading.Thread(target=lambda: lines.extend(iter(proc.stdout.readline, "")), daemon=True)
    err_th = threading.Thread(target=lambda: errs.append(proc.stderr.read()), daemon=True)
    out_th.start()
    err_th.start()
    try:
        assert wait_for(versions[0], 1), "watch never fetched the first trace"
        for n, v in enumerate(versions[1:], 2):
            c.put_object(Bucket=bucket, Key="jobs/20260125-a/traces/trace.jsonl", Body=v)
            assert wait_for(v, n), "watch missed a change"
        # Stopped by SIGTERM rather than --idle-exit: how long a loaded machine takes between two
        # changes must not decide the outcome. The idle exit is checked below, with no changes.
        proc.terminate()
        proc.wait(timeout=300)
        out_th.join(timeout=300)
        err_th.join(timeout=300)
        err = "".join(errs)
    finally:
        stop.set()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, err
    assert not bad_reads
    assert len(trace_records()) == 3
    assert (dest / "20260125-b/config.yaml").read_bytes() == b"lr: 2\n"
    assert not (dest / "20260124-c").exists()
    again = cli(args[:-2] + ["--idle-exit", "0"], s3env.env())  # a later cron run: nothing changed
    assert again.returncode == 0 and again.stdout == "" and "0 download(s)" in again.stderr
    assert "no changes for 0 s: exiting" in again.stderr


def test_watch_lock_makes_an_overlapping_cron_run_exit_0(s3env, bucket, tmp_path):
    dest = tmp_path / "results"
    args = ["watch", "2026", "--src", f"s3://{bucket}/jobs/", "--dest", dest, "--interval", "0.2"]
    # (an idle exit far past the test's few seconds, on a busy machine too: the test ends it)
    first = subprocess.Popen(CLI + [str(a) for a in args + ["--idle-exit", "900"]], env=s3env.env(),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lock = dest / s3.WATCH_LOCK
    try:
        deadline = time.monotonic() + 300  # a guard against a hang: the lock appears at start-up
        while not (lock.exists() and lock.read_text() == str(first.pid)) and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        second = cli(args + ["--idle-exit", "0"], s3env.env())
        assert second.returncode == 0 and second.stdout == "", second.stderr
        assert f"another watch holds {lock} (pid {first.pid}); exiting" in second.stderr
    finally:
        first.terminate()
        _, err = first.communicate(timeout=300)
    assert first.returncode == 130 and "interrupted" in err  # SIGTERM: the documented exit status
    third = cli(args + ["--idle-exit", "0"], s3env.env())  # the lock died with its holder
    assert third.returncode == 0 and "0 download(s)" in third.stderr, third.stderr


def test_the_cron_recipe_fetches_todays_traces_with_the_venvs_command(s3env, bucket, tmp_path):
    """bin/s3-trace-cron.sh as cron runs it: a bare PATH (no rlvr-s3-sync on it), settings in the
    environment; it finds the installation's own command and exits 0 once idle."""
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/traces/trace.jsonl", Body=b'{"step": 1}\n')
    c.put_object(Bucket=bucket, Key="jobs/20260125-a/config.yaml", Body=b"lr: 1\n")
    c.put_object(Bucket=bucket, Key="jobs/20260124-b/config.yaml", Body=b"lr: 2\n")
    home = tmp_path / "home"
    home.mkdir()
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(repo, "bin", "s3-trace-cron.sh")
    path = "/usr/bin:/bin"   # cron's; the script falls back to the checkout's .venv (else it must be on PATH)
    if not os.path.exists(os.path.join(repo, ".venv", "bin", "rlvr-s3-sync")):
        path = os.path.dirname(sys.executable) + ":" + path
    env = {**{k: v for k, v in s3env.env().items() if k.startswith("AWS_")}, "PATH": path,
           "HOME": str(home), "RLVR_S3_JOBS": f"s3://{bucket}/jobs/", "RLVR_S3_INTERVAL": "0.2",
           "RLVR_S3_IDLE_EXIT": "0"}
    r = subprocess.run(["bash", script, "20260125"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert (home / "results" / "20260125-a" / "traces" / "trace.jsonl").read_bytes() == b'{"step": 1}\n'
    assert (home / "results" / "20260125-a" / "config.yaml").exists() and not (home / "results" / "20260124-b").exists()
    assert "watch 20260125" in r.stderr and "2 download(s)" in r.stderr
    r = subprocess.run(["bash", script], env={**env, "RLVR_S3_JOBS": ""},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode != 0 and "set RLVR_S3_JOBS=s3://bucket/jobs/" in r.stderr


def test_download_cached_fetches_only_when_changed(s3env, bucket, tmp_path):
    c = s3env.client()
    c.put_object(Bucket=bucket, Key="data/train.jsonl", Body=b'{"id": "1"}\n')
    t = S3Transfer(workers=2)
    gets = []
    t.client.meta.events.register("before-call.s3.GetObject", lambda **kw: gets.append(1))
    uri = f"s3://{bucket}/data/train.jsonl"
    p1 = s3.download_cached(uri, str(tmp_path), transfer=t)
    assert open(p1, "rb").read() == b'{"id": "1"}\n' and len(gets) == 1
    assert s3.download_cached(uri, str(tmp_path), transfer=t) == p1 and len(gets) == 1
    c.put_object(Bucket=bucket, Key="data/train.jsonl", Body=b'{"id": "2"}\n')
    assert s3.download_cached(uri, str(tmp_path), transfer=t) == p1 and len(gets) == 2
    assert open(p1, "rb").read() == b'{"id": "2"}\n'
    with pytest.raises(s3.S3Error, match="not found"):
        s3.download_cached(f"s3://{bucket}/data/missing.jsonl", str(tmp_path), transfer=t)
    t.close()


def test_background_uploader_never_blocks_the_caller_and_reports_failures(s3env, bucket, tmp_path):
    run = tmp_path / "run"
    make_run(run, big=2000)
    gate = threading.Event()
    t = S3Transfer(workers=2, on_bytes=lambda n: gate.wait(30))
    up = s3.BackgroundUploader(f"s3://{bucket}/jobs/run/", root=str(run), transfer=t)
    up.submit(str(run / "checkpoints" / "step_10"))
    up.submit(str(run / "config.yaml"))
    up.submit(str(run / "config.yaml"))  # already queued: once
    # we are here while the upload thread is stuck inside its first transfer
    assert not gate.is_set() and up.pending >= 1
    gate.set()
    assert up.close(timeout=60) == []
    keys = sorted(o["Key"] for o in s3env.client().list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["jobs/run/checkpoints/step_10/model.safetensors", "jobs/run/config.yaml"]
    assert get(s3env, bucket, "jobs/run/config.yaml") == (run / "config.yaml").read_bytes()
    t.close()

    errors = []
    bad = s3.BackgroundUploader("s3://no-such-bucket-rlvr/x/", root=str(run), on_error=lambda p, m: errors.append(m))
    bad.submit(str(run / "config.yaml"))
    failed = bad.close(timeout=60)
    assert len(failed) == 1 and "no such bucket" in failed[0][1] and errors == [failed[0][1]]


def test_layout_maps_run_folder_paths_to_keys():
    lay = s3.Layout({"checkpoints/step_000003/": "ckpt/job1/{run}_final/",
                     "checkpoints/step_{step}/": "ckpt/job1/{run}_step{step}/",
                     "traces/": "ckpt/job1/traces", "config.yaml": "ckpt/job1/{run}.yaml", "patches/": None},
                    run="r1")
    assert lay.place("checkpoints/step_000010/model.safetensors") == ("ckpt/job1/r1_step10/", "model.safetensors")
    assert lay.place("checkpoints/step_000003/sub/x.json") == ("ckpt/job1/r1_final/", "sub/x.json")  # first match
    assert lay.place("traces/trace.jsonl") == ("ckpt/job1/traces/", "trace.jsonl")
    assert lay.place("config.yaml") == ("ckpt/job1/r1.yaml", "")
    assert lay.place("patches/git_diff.patch") is None and lay.place("run.json") is None  # dropped, unmatched
    assert s3.Layout({"checkpoints/step_{step}/": "s{step:06d}/"}).place("checkpoints/step_7/a") == ("s000007/", "a")
    assert s3.Layout(s3.Layout.DEFAULT, run="r").place("traces/t.jsonl") == ("r/", "traces/t.jsonl")
    for bad in ({"x/": "{nope}/"}, {"x_{a:3}/": "y/"}, {"x/": "{"}):
        with pytest.raises(s3.S3UsageError, match="upload layout"):
            s3.Layout(bad)


def test_upload_settings_in_a_training_config(tmp_path):
    from rlvr.config_loader import load_config
    from rlvr.errors import UsageError
    from rlvr.train.config import TrainConfig, check

    path = tmp_path / "c.yaml"
    path.write_text('upload:\n  trace_interval_s: 0\n  layout:\n    "checkpoints/step_{step}/": "ck/{run}_step{step}/"'
                    '\n    "": "ck/{run}/"\n')
    cfg = load_config(TrainConfig, str(path))
    check(cfg)
    assert cfg.upload.layout == {"checkpoints/step_{step}/": "ck/{run}_step{step}/", "": "ck/{run}/"}
    assert cfg.upload.live == ["traces/trace.jsonl", "traces/samples.jsonl"] and cfg.upload.trace_interval_s == 0
    path.write_text('upload:\n  layout:\n    "traces/": "{job}/traces/"\n')
    with pytest.raises(UsageError, match="upload layout"):  # before anything starts
        check(load_config(TrainConfig, str(path)))


def test_live_traces_go_up_while_a_checkpoint_upload_is_stuck(s3env, bucket, tmp_path):
    """The live lane delivers every step's trace although the queue is busy with a checkpoint."""
    run = tmp_path / "run1"
    make_run(run, big=3000)
    trace = run / "traces" / "trace.jsonl"
    trace.write_bytes(b"")
    gate = threading.Event()
    t = S3Transfer(workers=2)
    # push's file workers wait on the gate before they send: the checkpoint upload in the queue is stuck
    def stuck(**kw):
        if threading.current_thread().name.startswith("s3-file"):
            gate.wait(120)

    t.client.meta.events.register("before-call.s3.PutObject", stuck)
    lay = s3.Layout({"checkpoints/step_{step}/": "ck/job1/{run}_step{step}/", "traces/": "ck/job1/traces/"},
                    run="run1")
    up = s3.BackgroundUploader(f"s3://{bucket}/out/", root=str(run), transfer=t, layout=lay)
    up.live([str(trace)], interval_s=0)
    up.submit(str(run / "checkpoints" / "step_10"))
    c = s3env.client()
    for step in (1, 2, 3):
        with open(trace, "ab") as fh:
            fh.write(json.dumps({"step": step}).encode() + b"\n")
        up.tick()
        deadline = time.monotonic() + 120  # guards against a hang only
        while True:
            try:
                body = get(s3env, bucket, "out/ck/job1/traces/trace.jsonl")
            except c.exceptions.NoSuchKey:
                body = b""
            if body == trace.read_bytes():
                break
            assert time.monotonic() < deadline, f"step {step} never reached S3"
            time.sleep(0.1)
        assert up.pending == 0 and not gate.is_set()  # the checkpoint is still stuck in its upload
        assert "Contents" not in c.list_objects_v2(Bucket=bucket, Prefix="out/ck/job1/run1_step10/")
    with open(trace, "ab") as fh:
        fh.write(b'{"step": 4}\n{"step": 5, "torn')  # a line being written never goes up
    gate.set()
    up.submit(str(run))  # the whole run folder: only what the layout maps, live files by their lane
    assert up.close(timeout=120) == []
    keys = sorted(o["Key"] for o in c.list_objects_v2(Bucket=bucket)["Contents"])
    assert keys == ["out/ck/job1/run1_step10/model.safetensors", "out/ck/job1/traces/trace.jsonl"]
    assert get(s3env, bucket, "out/ck/job1/traces/trace.jsonl").endswith(b'{"step": 4}\n')
    t.close()


def _archive(path, members) -> str:
    """A .tar.gz of (TarInfo fields, data) pairs, written as given (no tarfile sanitising)."""
    with tarfile.open(path, "w:gz") as tf:
        for fields, data in members:
            info = tarfile.TarInfo(fields.pop("name"))
            for k, v in fields.items():
                setattr(info, k, v)
            if data is not None:
                info.size = len(data)
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return str(path)


@pytest.mark.parametrize("filters", [True, False], ids=["tarfile-filter", "fallback"])
def test_unpack_archive_is_safe_with_and_without_tarfiles_filters(tmp_path, monkeypatch, filters):
    # Debian 12's Python 3.11.2 has no extraction filters: the fallback must apply the same rules.
    from rlvr.s3 import sync

    if filters and not sync.HAVE_TAR_FILTERS:
        pytest.skip("this Python has no tarfile extraction filters")
    monkeypatch.setattr(sync, "HAVE_TAR_FILTERS", filters)
    good = _archive(tmp_path / "good.tar.gz", [
        ({"name": "run/checkpoints", "type": tarfile.DIRTYPE, "mode": 0o777}, None),
        ({"name": "run/checkpoints/w.bin", "mode": 0o4777}, b"weights"),
        ({"name": "run/config.yaml", "mode": 0o600}, b"lr: 1\n"),
        ({"name": "run/latest", "type": tarfile.SYMTYPE, "linkname": "checkpoints/w.bin"}, None),
    ])
    dest = tmp_path / "out"
    assert sync.unpack_archive(good, str(dest)) == ["checkpoints/w.bin", "config.yaml", "latest"]
    assert (dest / "latest").read_bytes() == b"weights" and os.path.islink(dest / "latest")
    mode = os.stat(dest / "checkpoints" / "w.bin").st_mode
    assert not mode & 0o7000 and not mode & 0o022  # no set-id bits, no group/other write
    outside = tmp_path / "outside"
    # an absolute name loses its leading slash and lands inside
    absolute = _archive(tmp_path / "absolute.tar.gz", [({"name": str(outside / "abs")}, b"x")])
    assert sync.unpack_archive(absolute, str(tmp_path / "out-abs")) == ["abs"] and not outside.exists()
    for name, members in {
        "dotdot": [({"name": "run/../../outside/dd"}, b"x")],
        "symlink-absolute": [({"name": "l", "type": tarfile.SYMTYPE, "linkname": "/etc/passwd"}, None)],
        "symlink-out": [({"name": "run/l", "type": tarfile.SYMTYPE, "linkname": "../../outside"}, None)],
        "hardlink-out": [({"name": "h", "type": tarfile.LNKTYPE, "linkname": "../outside/x"}, None)],
        "fifo": [({"name": "f", "type": tarfile.FIFOTYPE}, None)],
        "device": [({"name": "d", "type": tarfile.CHRTYPE, "devmajor": 1, "devminor": 3}, None)],
    }.items():
        bad = _archive(tmp_path / f"{name}.tar.gz", members)
        with pytest.raises(s3.S3Error, match="cannot unpack"):
            sync.unpack_archive(bad, str(tmp_path / f"out-{name}"))
        assert not outside.exists(), name
        assert not (tmp_path / f"out-{name}").exists() or not os.listdir(tmp_path / f"out-{name}"), name
