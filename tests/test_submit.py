"""rlvr-submit and the in-job entrypoint (rlvr.cloud).

SageMaker, ECR, IAM and STS calls go to moto's server mode (a real HTTP server in its own
process, `moto_server`: CreateTrainingJob, DescribeTrainingJob, ListTrainingJobs, ECR
CreateRepository/DescribeRepositories/DescribeImages/GetAuthorizationToken, IAM GetRole, STS
GetCallerIdentity all ran against it; moto 5 answers StopTrainingJob with HTTP 500, so
stopping is not tested). S3 goes to the S3 test server (tests/s3server.py: Ceph RGW or moto).
docker is tests/fakes/bin/docker, which records its arguments and fails on request (ray is
tests/fakes/bin/ray where a test needs only its command lines). The end-to-end test runs a job
of two simulated SageMaker instances (SageMaker's folders and variables, each instance in its
own mount, PID and hostname namespaces) on the tiny CPU config: one Ray cluster over both,
trainer on the first, engine on the second; then rlvr-s3-sync pull finds the outputs.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from helpers import REPO, invoke
from s3_fixtures import bucket, s3env, s3server  # noqa: F401 - fixtures
import machine_time
import s3server as _s3server

from rlvr.cloud import joblog
from rlvr.cloud.entrypoint import JobEnv, plan
from rlvr.cloud.layout import JobLayout, JobSync
from rlvr.cloud.sagemaker import check_job_name, default_job_name, parse_gpus
from rlvr.cloud.submit import write_opt_ml
from rlvr.errors import Failure, UsageError

TINY = os.path.join(REPO, "configs", "tiny-cpu.yaml")
FAKES = os.path.join(REPO, "tests", "fakes", "bin")
SERVICES = ("SAGEMAKER", "ECR", "IAM", "STS")


@pytest.fixture(scope="module")
def aws_server(tmp_path_factory):
    """moto's server for SageMaker, ECR, IAM and STS (its own process)."""
    srv = _s3server.start(str(tmp_path_factory.mktemp("moto-aws")), "moto")
    yield srv
    srv.stop()


@pytest.fixture
def aws(aws_server, s3env, bucket, monkeypatch, tmp_path):
    """Environment: S3 on the S3 test server, the other services on moto; a role; the fake docker."""
    for svc in SERVICES:
        monkeypatch.setenv(f"AWS_ENDPOINT_URL_{svc}", aws_server.endpoint_url)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("PATH", FAKES + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_DOCKER_LOG", str(tmp_path / "docker.jsonl"))
    monkeypatch.delenv("FAKE_DOCKER_FAIL", raising=False)
    for who in ("USER", "ADMIN"):  # no SageMaker SDK defaults config of this machine's
        monkeypatch.setenv(f"SAGEMAKER_{who}_CONFIG_OVERRIDE", str(tmp_path / f"no-{who.lower()}-config.yaml"))
    import boto3

    def client(svc):
        return boto3.client(svc, endpoint_url=aws_server.endpoint_url, region_name="us-east-1")

    iam = client("iam")
    name = f"sm-{bucket}"
    role = iam.create_role(RoleName=name, AssumeRolePolicyDocument=json.dumps(
        {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Principal": {"Service": "sagemaker.amazonaws.com"},
                                                 "Action": "sts:AssumeRole"}]}))["Role"]["Arn"]

    class Env:
        pass

    e = Env()
    e.role, e.bucket, e.client, e.s3 = role, bucket, client, s3env.client()
    e.s3uri = f"s3://{bucket}/rlvr/"
    e.log = str(tmp_path / "job_log.md")
    e.docker_log = tmp_path / "docker.jsonl"
    e.repo = f"rlvr-{bucket}"
    return e


def docker_calls(e) -> list[dict]:
    if not e.docker_log.exists():
        return []
    return [json.loads(ln) for ln in e.docker_log.read_text().splitlines()]


def jobs(e) -> list[str]:
    return [j["TrainingJobName"] for j in e.client("sagemaker").list_training_jobs(MaxResults=100)["TrainingJobSummaries"]]


def keys(e, prefix="") -> list[str]:
    r = e.s3.list_objects_v2(Bucket=e.bucket, Prefix=prefix)
    return sorted(o["Key"] for o in r.get("Contents", []))


def submit(e, *args):
    return invoke("rlvr-submit", [TINY, "--role", e.role, "--s3", e.s3uri, "--job-log", e.log,
                                  "--image", f"{e.repo}:v1", *args])


# ----------------------------------------------------------------------------- names, log, plan

def test_job_name_rule():
    for ok in ("a", "A1", "annotations-adhoc-20261123-101500", "a--b", "x" * 63):
        assert check_job_name(ok) == ok
    for bad in ("", "-a", "a-", "a_b", "a.b", "a b", "x" * 64, "jöb"):
        with pytest.raises(UsageError, match="SageMaker's rule"):
            check_job_name(bad)
    import datetime as dt

    assert default_job_name("annotations-adhoc", dt.datetime(2026, 11, 23, 10, 15, 0)) == "annotations-adhoc-20261123-101500"
    with pytest.raises(UsageError, match="--prefix"):
        default_job_name("x" * 48)
    with pytest.raises(UsageError, match="--prefix"):
        default_job_name("bad_prefix")
    assert parse_gpus("0-5", "--train-gpus") == [0, 1, 2, 3, 4, 5]
    assert parse_gpus("6,7", "x") == [6, 7] and parse_gpus("0-1,4", "x") == [0, 1, 4]
    with pytest.raises(UsageError):
        parse_gpus("3-1", "x")


def test_job_log_rows(tmp_path):
    path = str(tmp_path / "docs" / "job_log.md")
    joblog.append(path, "rlvr-20261123-101500", "configs/a.yaml", "lr sweep | 1e-6", "sagemaker")
    joblog.append(path, "rlvr-20261123-101501", "configs/b.yaml", "multi\nline", "local")
    text = open(path).read()
    assert text.startswith("# Job log") and text.count("|---|---|---|---|---|\n") == 1
    rows = joblog.rows(path)
    assert [r["job"] for r in rows] == ["rlvr-20261123-101500", "rlvr-20261123-101501"]
    assert rows[0]["description"] == "lr sweep | 1e-6" and rows[1]["description"] == "multi line"
    assert rows[0]["config"] == "configs/a.yaml" and rows[0]["submitted"][:2] == "20"


# ----------------------------------------------------------------------------- usage errors: nothing sent

def test_bad_name_is_refused_before_anything(aws):
    r = submit(aws, "--name", "my_job.v2", "--push", "--build")
    assert r.code == 2 and "SageMaker's rule" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    assert docker_calls(aws) == [] and not os.path.exists(aws.log) and keys(aws) == []
    assert "my_job.v2" not in jobs(aws)


def test_missing_role_and_s3_are_usage_errors(aws, monkeypatch):
    monkeypatch.delenv("RLVR_SAGEMAKER_ROLE", raising=False)
    r = invoke("rlvr-submit", [TINY, "--s3", aws.s3uri, "--job-log", aws.log])
    assert r.code == 2 and "no IAM role" in r.stderr
    # the role from the SageMaker SDK's defaults config: the user's over the administrator's
    cfg = os.path.join(os.path.dirname(aws.log), "sagemaker")
    os.makedirs(cfg)
    with open(os.path.join(cfg, "admin.yaml"), "w") as fh:
        fh.write("SageMaker:\n  TrainingJob:\n    RoleArn: arn:aws:iam::123456789012:role/admins\n")
    with open(os.path.join(cfg, "user.yaml"), "w") as fh:
        fh.write(f"SchemaVersion: '1.0'\nSageMaker:\n  TrainingJob:\n    RoleArn: {aws.role}\n")
    monkeypatch.setenv("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", os.path.join(cfg, "admin.yaml"))
    args = [TINY, "--s3", aws.s3uri, "--job-log", aws.log, "--image", f"{aws.repo}:v1", "--dry-run"]
    r = invoke("rlvr-submit", args)
    assert r.code == 0 and json.loads(r.stdout)["RoleArn"] == "arn:aws:iam::123456789012:role/admins", r.stderr
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", os.path.join(cfg, "user.yaml"))
    r = invoke("rlvr-submit", args)
    assert r.code == 0 and json.loads(r.stdout)["RoleArn"] == aws.role, r.stderr
    for bad in ("SageMaker: [unclosed\n", "SageMaker: [a, b]\n"):
        with open(os.path.join(cfg, "user.yaml"), "w") as fh:
            fh.write(bad)
        r = invoke("rlvr-submit", args)
        assert r.code == 2 and "user.yaml: not a readable SageMaker config" in r.stderr, r.stderr
    monkeypatch.setenv("SAGEMAKER_USER_CONFIG_OVERRIDE", "s3://bucket/sagemaker/config.yaml")
    r = invoke("rlvr-submit", args)
    assert r.code == 2 and "local SageMaker configs only" in r.stderr
    r = invoke("rlvr-submit", [TINY, "--role", aws.role, "--job-log", aws.log])
    assert r.code == 2 and "--s3" in r.stderr
    r = invoke("rlvr-submit", [TINY, "--role", "sagemaker-role", "--s3", aws.s3uri, "--job-log", aws.log])
    assert r.code == 2 and "not an IAM role ARN" in r.stderr
    r = submit(aws, "--set", "train.nope=1")
    assert r.code == 2 and "train.nope" in r.stderr
    r = submit(aws, "--set", "rlvr_config=other.yaml", "--build", "--push")
    assert r.code == 2 and "rlvr_config" in r.stderr
    assert not os.path.exists(aws.log) and keys(aws) == [] and docker_calls(aws) == []


def test_role_that_does_not_exist(aws):
    r = invoke("rlvr-submit", [TINY, "--role", "arn:aws:iam::123456789012:role/nobody", "--s3", aws.s3uri,
                               "--job-log", aws.log, "--name", "no-role-job"])
    assert r.code == 1 and "role" in r.stderr and "does not exist" in r.stderr
    assert "no-role-job" not in jobs(aws) and not os.path.exists(aws.log)


def test_missing_repository_without_push(aws):
    r = submit(aws, "--name", "no-repo-job")
    assert r.code == 1 and f"ECR repository '{aws.repo}' does not exist" in r.stderr and "--push" in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1
    assert "no-repo-job" not in jobs(aws) and keys(aws) == [] and not os.path.exists(aws.log)
    aws.client("ecr").create_repository(repositoryName=aws.repo)  # a repository without the tag
    r = submit(aws, "--name", "no-image-job")
    assert r.code == 1 and "no image tagged 'v1'" in r.stderr
    assert "no-image-job" not in jobs(aws)


def test_no_credentials(aws, monkeypatch):
    for k in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", os.devnull)
    monkeypatch.setenv("AWS_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_FULL_URI", raising=False)
    monkeypatch.delenv("AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", raising=False)
    r = submit(aws, "--name", "no-creds-job", "--push")
    assert r.code == 1 and "no AWS credentials" in r.stderr and docker_calls(aws) == []


def test_no_docker(aws, monkeypatch, tmp_path):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    for args in (["--build"], ["--push"], ["--local"]):
        r = submit(aws, "--name", "no-docker-job", *args)
        assert r.code == 1 and "docker not found on PATH" in r.stderr, (args, r.stderr)
    assert "no-docker-job" not in jobs(aws) and not os.path.exists(aws.log)


# ----------------------------------------------------------------------------- submit, describe, dry run

def test_dry_run_sends_nothing(aws):
    r = submit(aws, "--dry-run", "--name", "dry-job", "--set", "train.lr=1e-6", "--build", "--push", "--instance-count", "2",
               "--eval-config", str(eval_config(aws)), "--train-gpus", "0-5", "--eval-gpus", "6-7")
    assert r.code == 0, r.stderr
    req = json.loads(r.stdout)
    assert req.get("TrainingJobName") == "dry-job", r.stdout
    assert req["AlgorithmSpecification"]["TrainingImage"] == f"123456789012.dkr.ecr.us-east-1.amazonaws.com/{aws.repo}:v1"
    assert req["HyperParameters"] == {"rlvr_config": "tiny-cpu.yaml", "train.lr": "1e-6",
                                      "rlvr_eval_config": "eval.yaml", "rlvr_train_gpus": "0,1,2,3,4,5",
                                      "rlvr_eval_gpus": "6,7"}
    assert req["ResourceConfig"] == {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 2, "VolumeSizeInGB": 500}
    assert req["OutputDataConfig"]["S3OutputPath"] == f"s3://{aws.bucket}/rlvr/checkpoints/"
    assert req["Environment"]["RLVR_JOB_S3"] == f"s3://{aws.bucket}/rlvr/checkpoints/"
    assert req["Environment"]["RAY_AUTH_TOKEN"].startswith("(hidden")  # generated, never printed
    assert "would run: docker build" in r.stderr and "would run: docker push" in r.stderr
    assert docker_calls(aws) == [] and keys(aws) == [] and not os.path.exists(aws.log)
    assert "dry-job" not in jobs(aws)
    with pytest.raises(Exception, match="RepositoryNotFound"):
        aws.client("ecr").describe_repositories(repositoryNames=[aws.repo])


def eval_config(aws) -> str:
    path = os.path.join(os.path.dirname(aws.log), "eval.yaml")
    with open(path, "w") as fh:
        fh.write("benchmarks: [toy]\ninterval: 5\nargs: [--engine, hf, --dtype, float32]\n")
    return path


def test_submit_build_push_describe(aws, monkeypatch):
    aws.s3.put_object(Bucket=aws.bucket, Key="datasets/gsm8k/train.jsonl", Body=b"{}\n")  # the data channel's
    r = submit(aws, "--name", "annotations-adhoc-1", "--build", "--push", "-d", "gsm8k | lr 1e-6",
               "--set", "train.lr=1e-6", "--input", f"data=s3://{aws.bucket}/datasets/")
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    uri = aws.client("ecr").describe_repositories(repositoryNames=[aws.repo])["repositories"][0]["repositoryUri"]
    assert out["job"] == "annotations-adhoc-1" and out["image"] == f"{uri}:v1"
    assert out["s3"] == f"s3://{aws.bucket}/rlvr/checkpoints/annotations-adhoc-1/"
    # docker: build, login with the password on stdin only, tag, push
    calls = docker_calls(aws)
    assert [c["argv"][0] for c in calls] == ["build", "login", "tag", "push"]
    assert calls[0]["argv"][:3] == ["build", "-t", f"{aws.repo}:v1"] and calls[0]["argv"][4].endswith("Dockerfile")
    login = calls[1]
    assert "--password-stdin" in login["argv"] and login["stdin"] and login["stdin"] not in " ".join(login["argv"])
    assert calls[2]["argv"] == ["tag", f"{aws.repo}:v1", f"{uri}:v1"] and calls[3]["argv"] == ["push", f"{uri}:v1"]
    # the job as SageMaker has it
    d = aws.client("sagemaker").describe_training_job(TrainingJobName="annotations-adhoc-1")
    assert d["AlgorithmSpecification"]["TrainingImage"] == f"{uri}:v1"
    assert d["AlgorithmSpecification"]["ContainerEntrypoint"] == ["python3", "-m", "rlvr.cloud.entrypoint"]
    assert d["HyperParameters"] == {"rlvr_config": "tiny-cpu.yaml", "train.lr": "1e-6"}
    assert d["RoleArn"] == aws.role
    assert {c["ChannelName"] for c in d["InputDataConfig"]} == {"config", "data"}
    # the config is in its channel, byte for byte
    key = "rlvr/inputs/annotations-adhoc-1/tiny-cpu.yaml"
    assert keys(aws, "rlvr/") == [key]
    assert aws.s3.get_object(Bucket=aws.bucket, Key=key)["Body"].read() == open(TINY, "rb").read()
    rows = joblog.rows(aws.log)
    assert len(rows) == 1 and rows[0]["job"] == "annotations-adhoc-1" and rows[0]["config"] == TINY
    assert rows[0]["description"] == "gsm8k | lr 1e-6" and "ml.p4de.24xlarge" in rows[0]["where"]
    # describe
    r = invoke("rlvr-submit", ["--describe", "annotations-adhoc-1"])
    assert r.code == 0, r.stderr
    info = json.loads(r.stdout)
    assert info["TrainingJobName"] == "annotations-adhoc-1" and info["TrainingJobStatus"]
    assert info["Image"] == f"{uri}:v1"
    r = invoke("rlvr-submit", ["--describe", "never-submitted"])
    assert r.code == 1 and "no training job named 'never-submitted'" in r.stderr
    # the same name again: refused (ResourceInUse), the first job's config stays, no second row
    r = submit(aws, "--name", "annotations-adhoc-1", "--push")
    assert r.code == 1 and "already exists" in r.stderr, r.stderr
    assert keys(aws, "rlvr/") == [key] and len(joblog.rows(aws.log)) == 1
    assert len(docker_calls(aws)) == 4  # refused before any build or push
    # several instances: their Ray cluster gets a random token through the job's environment
    # (moto keeps no Environment: the requests are read as they are made)
    from rlvr.cloud.submit import Submitter

    sent, spec = [], Submitter.spec
    monkeypatch.setattr(Submitter, "spec", lambda self, uri: sent.append(spec(self, uri)) or sent[-1])
    out = ""
    for name, count in (("annotations-adhoc-2", "2"), ("annotations-adhoc-3", "1")):
        r = submit(aws, "--name", name, "--instance-count", count, "--push")
        assert r.code == 0, r.stderr
        out += r.stdout + r.stderr
    two, one = ([x for x in sent if x.name == n][-1].request()["Environment"]
                for n in ("annotations-adhoc-2", "annotations-adhoc-3"))
    assert re.fullmatch(r"[0-9a-f]{64}", two["RAY_AUTH_TOKEN"]) and two["RAY_AUTH_TOKEN"] not in out
    assert "RAY_AUTH_TOKEN" not in one


def test_failed_push_submits_nothing(aws, monkeypatch):
    # a failed build leaves nothing behind, not even the ECR repository --push would create
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "build")
    r = submit(aws, "--name", "build-fails", "--build", "--push")
    assert r.code == 1 and "docker build" in r.stderr
    with pytest.raises(Exception, match="RepositoryNotFound"):
        aws.client("ecr").describe_repositories(repositoryNames=[aws.repo])
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "push")
    r = submit(aws, "--name", "push-fails", "--push")
    assert r.code == 1 and "docker push" in r.stderr and "failed on request" in r.stderr
    assert "push-fails" not in jobs(aws) and "build-fails" not in jobs(aws)
    assert keys(aws) == [] and not os.path.exists(aws.log)


def json_error(code: str, message: str) -> bytes:
    """A complete HTTP 400 answer of a JSON-protocol AWS service (SageMaker, ECR)."""
    body = json.dumps({"__type": code, "message": message}).encode()
    return (f"HTTP/1.1 400 Bad Request\r\nContent-Type: application/x-amz-json-1.1\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body


def test_refused_create_removes_uploaded_config(aws, aws_server, monkeypatch):
    # SageMaker in front of moto through a relay that answers the first two requests itself:
    # DescribeTrainingJob (the name is free), then CreateTrainingJob refused, as SageMaker
    # refuses e.g. an instance type the account has no quota for.
    from s3server import FaultRelay

    relay = FaultRelay(aws_server.endpoint_url, [
        json_error("ValidationException", "Requested resource not found"),
        json_error("ResourceLimitExceeded", "The account-level service limit 'ml.p4de.24xlarge for training job usage' is 0 Instances")])
    monkeypatch.setenv("AWS_ENDPOINT_URL_SAGEMAKER", relay.endpoint_url)
    try:
        r = submit(aws, "--name", "refused-job", "--push")
    finally:
        relay.close()
    assert relay.injected == 2
    assert r.code == 1 and "CreateTrainingJob refused-job: ResourceLimitExceeded" in r.stderr
    assert keys(aws) == [] and not os.path.exists(aws.log)  # the config that went up is gone again


# ----------------------------------------------------------------------------- --local and the entrypoint's plan

def test_local_runs_the_image_with_sagemakers_layout(aws, tmp_path, monkeypatch):
    local = tmp_path / "results"
    data = tmp_path / "data"
    data.mkdir()
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIASECRETVALUE0001")
    r = invoke("rlvr-submit", [TINY, "--local", "--gpus", "0,1,2,3", "--name", "local-1", "--local-dir", str(local),
                               "--job-log", aws.log, "--build", "--set", "train.steps=3", "--input", f"data={data}",
                               "--eval-config", eval_config(aws), "--train-gpus", "0-2", "--eval-gpus", "3",
                               "--s3", aws.s3uri, "-d", "smoke"])
    assert r.code == 0, r.stderr
    calls = docker_calls(aws)
    assert [c["argv"][0] for c in calls] == ["build", "run"]
    run = calls[1]["argv"]
    opt_ml = str(local / "local-1")
    assert run[run.index("--gpus") + 1] == '"device=0,1,2,3"'
    assert f"{opt_ml}:/opt/ml" in run and f"{data}:/opt/ml/input/data/data:ro" in run
    assert "TRAINING_JOB_NAME=local-1" in run and f"RLVR_JOB_S3=s3://{aws.bucket}/rlvr/checkpoints/" in run
    assert "AWS_ACCESS_KEY_ID" in run and "AKIASECRETVALUE0001" not in " ".join(run)  # passed by name only
    assert run[run.index("--entrypoint") + 1:] == ["python3", "rlvr:latest", "-m", "rlvr.cloud.entrypoint"]
    rows = joblog.rows(aws.log)
    assert rows[-1]["job"] == "local-1" and rows[-1]["where"] == "local gpus 0,1,2,3"
    # the folder is what the entrypoint reads inside the container (as /opt/ml)
    job = JobEnv.read({"RLVR_OPT_ML": opt_ml, "TRAINING_JOB_NAME": "local-1"})
    assert job.job == "local-1" and job.model_dir == os.path.join(opt_ml, "model")
    assert set(job.channels) == {"config", "data"}
    import datetime as dt

    p = plan(job, {"RLVR_JOB_S3": "s3://b/rlvr/checkpoints/", "PATH": "/usr/bin"}, now=dt.datetime(2026, 11, 23, 10, 15))
    assert p.run_dir == os.path.join(opt_ml, "model", "tiny-cpu_20261123-101500")
    assert p.config == os.path.join(opt_ml, "input", "data", "config", "tiny-cpu.yaml")
    assert open(p.config, "rb").read() == open(TINY, "rb").read()
    assert p.train_cmd[1:] == ["-m", "rlvr.commands.train", p.config, "--run-dir", p.run_dir, "--set", "train.steps=3"]
    assert p.train_env["CUDA_VISIBLE_DEVICES"] == "0,1,2"
    assert p.train_env["RLVR_DATA_DIR"] == os.path.join(opt_ml, "input", "data", "data")
    assert p.eval_cmd[1:] == ["-m", "rlvr.commands.eval", "--watch", os.path.join(p.run_dir, "checkpoints", "step_*"),
                              os.path.join(p.run_dir, "evals"), "--interval", "5", "-b", "toy", "--gpus", "3",
                              "--engine", "hf", "--dtype", "float32"]
    assert p.jobs_uri == "s3://b/rlvr/checkpoints/" and p.sync_interval == 10
    # a second run under the same name would mix two jobs in one folder
    r = invoke("rlvr-submit", [TINY, "--local", "--name", "local-1", "--local-dir", str(local), "--job-log", aws.log])
    assert r.code == 2 and "exists" in r.stderr


def test_local_container_failure_is_exit_1(aws, tmp_path, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "run")
    r = invoke("rlvr-submit", [TINY, "--local", "--name", "local-2", "--local-dir", str(tmp_path), "--job-log", aws.log])
    assert r.code == 1 and "container local-2 failed" in r.stderr


def test_entrypoint_reads_the_toolkit_variables(tmp_path):
    chan = tmp_path / "cfg"
    chan.mkdir()
    shutil.copy(TINY, chan / "tiny-cpu.yaml")
    env = {"SM_HPS": json.dumps({"rlvr_config": "tiny-cpu.yaml", "train.lr": 0.001, "rollout.n": 4,
                                 "rlvr_sync_interval": "2", "sagemaker_program": "x"}),
           "SM_CHANNEL_CONFIG": str(chan), "SM_CHANNEL_MODEL": "/opt/ml/input/data/model",
           "SM_MODEL_DIR": str(tmp_path / "model"), "SM_TRAINING_ENV": json.dumps({"job_name": "job-7"}),
           "RLVR_OPT_ML": str(tmp_path / "nothing-here"), "RLVR_RUN_DIR": "/elsewhere"}
    job = JobEnv.read(env)
    assert job.job == "job-7" and job.model_dir == str(tmp_path / "model")
    p = plan(job, env)
    assert p.sync_interval == 2 and p.jobs_uri is None and p.eval_cmd is None and "RLVR_RUN_DIR" not in p.train_env
    assert p.train_cmd[-6:] == ["--set", "rollout.n=4", "--set", "train.lr=0.001", "--set",
                                "model.path=/opt/ml/input/data/model"]
    for bad, msg in ((dict(env, SM_HPS="{}"), "rlvr_config"), (dict(env, SM_HPS='{"rlvr_config": "../x.yaml"}'), "file name"),
                     (dict(env, SM_HPS='{"rlvr_config": "other.yaml"}'), "not in the config channel")):
        with pytest.raises(UsageError, match=msg):
            plan(JobEnv.read(bad), bad)
    with pytest.raises(UsageError, match="no job name"):
        JobEnv.read({k: v for k, v in env.items() if k != "SM_TRAINING_ENV"})
    assert not p.worker and p.ray_start is None and "--ray-address" not in p.train_cmd


def test_entrypoint_plans_one_ray_cluster_over_several_instances(tmp_path):
    write_opt_ml(str(tmp_path), {"rlvr_config": "tiny-cpu.yaml"}, [TINY], [])
    with open(tmp_path / "input" / "config" / "resourceconfig.json", "w") as fh:
        json.dump({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}, fh)
    env = {"RLVR_OPT_ML": str(tmp_path), "TRAINING_JOB_NAME": "multi-1"}
    worker = plan(JobEnv.read(env), env)
    assert worker.worker and worker.nodes == 2
    assert worker.ray_start == ["ray", "start", "--address=algo-1:6379", "--disable-usage-stats"]
    head_env = dict(env, SM_CURRENT_HOST="algo-1")
    head = plan(JobEnv.read(head_env), head_env)
    assert not head.worker and head.ray_start[:3] == ["ray", "start", "--head"]
    assert head.train_cmd[-2:] == ["--ray-address", "algo-1:6379"]
    with pytest.raises(UsageError, match="not among the job's hosts"):
        JobEnv.read(dict(env, SM_CURRENT_HOST="algo-9"))


def test_a_worker_instance_waits_for_the_head_and_stays_until_its_cluster_stops(tmp_path, monkeypatch):
    # ray is tests/fakes/bin/ray: its first `ray start` fails (as one that gave up on its own
    # startup), the second joins; the head is a socket that listens only once the worker has
    # looked for it, and whose closing (the head's `ray stop`) ends the worker.
    import dataclasses
    import socket
    import threading

    from rlvr.cloud import entrypoint

    write_opt_ml(str(tmp_path), {"rlvr_config": "tiny-cpu.yaml"}, [TINY], [])
    with open(tmp_path / "input" / "config" / "resourceconfig.json", "w") as fh:
        json.dump({"current_host": "algo-2", "hosts": ["algo-1", "algo-2"]}, fh)
    env = {"RLVR_OPT_ML": str(tmp_path), "TRAINING_JOB_NAME": "multi-1"}
    head = socket.socket()
    head.bind(("127.0.0.1", 0))
    address = f"127.0.0.1:{head.getsockname()[1]}"
    p = dataclasses.replace(plan(JobEnv.read(env), env), ray_head=address)
    log = tmp_path / "ray.log"
    monkeypatch.setenv("PATH", FAKES + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_RAY_LOG", str(log))
    monkeypatch.setenv("FAKE_RAY_RC", "1,1,0")  # per logged call: start (fails), stop --force, start
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the entry point sets it for the job's processes
    monkeypatch.setattr(time, "sleep", lambda s: threading.Event().wait(min(s, 0.05)))
    refused = threading.Event()
    probe = entrypoint._head_listening

    def watched(a):
        up = probe(a)
        if not up:
            refused.set()
        return up

    monkeypatch.setattr(entrypoint, "_head_listening", watched)
    out = []
    th = threading.Thread(target=lambda: out.append(entrypoint.run(p, JobEnv.read(env))), daemon=True)
    th.start()
    assert refused.wait(300)  # the worker found the head down ...
    assert not log.exists()  # ... and started nothing
    head.listen()

    def serve():  # a head that answers every probe until it closes
        while True:
            try:
                conn, _ = head.accept()
            except OSError:
                return
            conn.close()

    threading.Thread(target=serve, daemon=True).start()
    wait_for("the second ray start", lambda: log.exists() and len(log.read_text().splitlines()) >= 3, 300)
    assert th.is_alive() and len(log.read_text().splitlines()) == 3  # joined: it stays while the head is up
    head.close()
    th.join(300)
    assert out == [0]
    calls = [json.loads(x)["args"] for x in log.read_text().splitlines()]
    start = ["start", "--address=algo-1:6379", "--disable-usage-stats"]
    assert calls == [start, ["stop", "--force"], start, ["stop"]]
    # a head that never comes up, and one that stays up while this host cannot join
    monkeypatch.setattr(entrypoint, "JOIN_TIMEOUT_S", 0.0)
    with pytest.raises(Failure, match="did not come up"):
        entrypoint.run(dataclasses.replace(p, ray_head="127.0.0.1:9"), JobEnv.read(env))
    monkeypatch.setenv("FAKE_RAY_RC", "1")
    monkeypatch.setattr(entrypoint, "_head_listening", lambda a: True)
    with pytest.raises(Failure, match=r"could not join the Ray cluster .* \(ray start exited 1\)"):
        entrypoint.run(p, JobEnv.read(env))


def test_the_head_lends_ray_only_the_training_gpus(tmp_path, monkeypatch):
    # With an eval watcher beside training, the head's `ray start --head` sees only the
    # training GPUs, so no trainer or engine of the cluster lands on the eval GPUs.
    import ray

    from rlvr.cloud import entrypoint

    write_opt_ml(str(tmp_path), {"rlvr_config": "tiny-cpu.yaml", "rlvr_train_gpus": "0-5", "rlvr_eval_gpus": "6,7"},
                 [TINY], [])
    with open(tmp_path / "input" / "config" / "resourceconfig.json", "w") as fh:
        json.dump({"current_host": "algo-1", "hosts": ["algo-1", "algo-2"]}, fh)
    log = tmp_path / "ray.log"
    monkeypatch.setenv("PATH", FAKES + os.pathsep + os.environ["PATH"])
    monkeypatch.setenv("FAKE_RAY_LOG", str(log))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3,4,5,6,7")
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")  # the entry point sets it for the job's processes
    env = dict(os.environ, RLVR_OPT_ML=str(tmp_path), TRAINING_JOB_NAME="multi-1")
    p = plan(JobEnv.read(env), env)
    monkeypatch.setattr(ray, "init", lambda **kw: None)
    monkeypatch.setattr(ray, "shutdown", lambda: None)
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}, {"Alive": True}])
    entrypoint._start_head(p)
    (call,) = [json.loads(x) for x in log.read_text().splitlines()]
    assert call["args"][:2] == ["start", "--head"] and call["cuda"] == "0,1,2,3,4,5"
    # an instance that never joins: the job fails, and the head's Ray is stopped again
    log.unlink()
    monkeypatch.setattr(ray, "nodes", lambda: [{"Alive": True}])
    monkeypatch.setattr(entrypoint, "JOIN_TIMEOUT_S", 0.0)
    with pytest.raises(Failure, match="only 1 of 2 instances joined"):
        entrypoint.run(p, JobEnv.read(env))
    assert [json.loads(x)["args"][:2] for x in log.read_text().splitlines()] == [["start", "--head"], ["stop"]]


# ----------------------------------------------------------------------------- the job's S3 layout

def wait_for(what: str, cond, bound: float = 120.0):
    """Wait until cond() is truthy; the bound (machine seconds, tests/machine_time.py) only
    guards against a hang."""
    return machine_time.wait_for(cond, bound, f"waiting for {what}", poll=0.1)


def s3_text(e, key: str) -> str | None:
    try:
        return e.s3.get_object(Bucket=e.bucket, Key=key)["Body"].read().decode()
    except Exception:  # noqa: BLE001 - not there yet
        return None


def test_job_sync_uploads_traces_live_and_checkpoints_as_they_appear(s3env, bucket, tmp_path):
    run = tmp_path / "model" / "tiny-cpu_20261123-101500"
    (run / "traces").mkdir(parents=True)
    (run / "config.yaml").write_text("train: {steps: 2}\n")
    trace = run / "traces" / "trace.jsonl"
    trace.write_text('{"step": 1}\n')
    layout = JobLayout(f"s3://{bucket}/rlvr/checkpoints/", "job-1", run.name)
    assert layout.checkpoint(10) == f"s3://{bucket}/rlvr/checkpoints/job-1/tiny-cpu_20261123-101500_step10/"

    class E:
        pass

    e = E()
    e.s3, e.bucket = s3env.client(), bucket
    root = "rlvr/checkpoints/job-1/"
    sync = JobSync(str(run), layout, interval=0.2, log=lambda m: None).start()
    try:
        wait_for("the first trace line", lambda: s3_text(e, root + "traces/trace.jsonl") == '{"step": 1}\n')
        # guaranteed, not raced: the config goes up before the traces (one queue, in order)
        assert s3_text(e, root + "config.yaml") == "train: {steps: 2}\n"
        with open(trace, "a") as fh:  # a step later, and a line still being written
            fh.write('{"step": 2}\n{"step": 3')
        wait_for("the second trace line", lambda: s3_text(e, root + "traces/trace.jsonl") == '{"step": 1}\n{"step": 2}\n')
        ck = run / "checkpoints" / "step_000001"
        ck.mkdir(parents=True)
        (ck / "config.json").write_text("{}")
        (ck / "trainer_state.pt").write_bytes(b"state")  # complete: the marker is there
        wait_for("the checkpoint", lambda: s3_text(e, root + f"{run.name}_step1/trainer_state.pt") == "state")
        assert s3_text(e, root + f"{run.name}_step1/config.json") == "{}"
    finally:
        failed = sync.finish(timeout=120)
    assert failed == []
    assert s3_text(e, root + f"{run.name}_final/trainer_state.pt") == "state"


def instance(opt_ml, own_ml, host: str, hosts: list[str], hosts_file, env: dict) -> subprocess.Popen:
    """One simulated SageMaker instance: the entry point in its own mount, PID and hostname
    namespaces (bubblewrap), where /opt/ml (here `opt_ml`) is the instance's own folder
    `own_ml`, the hosts file names the job's hosts, and `ray stop` sees only its processes.
    A job of one instance runs as a plain process (no bubblewrap needed)."""
    cmd = [sys.executable, "-m", "rlvr.cloud.entrypoint", "train"]
    if len(hosts) > 1:
        ns = ["bwrap", "--dev-bind", "/", "/"]
        if own_ml != opt_ml:
            ns += ["--bind", str(own_ml), str(opt_ml)]
        cmd = [*ns, "--ro-bind", str(hosts_file), "/etc/hosts", "--unshare-pid", "--unshare-uts", "--hostname", host,
               "--die-with-parent", "--proc", "/proc", "--", *cmd]
    sm_env = {"job_name": env["TRAINING_JOB_NAME"], "current_host": host, "hosts": hosts}
    return subprocess.Popen(cmd, env=dict(env, SM_TRAINING_ENV=json.dumps(sm_env)), cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_simulated_two_instance_sagemaker_job_end_to_end(s3env, bucket, tmp_path):
    """A job of two instances (--instance-count 2) on this machine, each in its own namespaces
    (see instance()): algo-1 starts the Ray head, waits for algo-2, and runs rlvr-train on the
    tiny CPU config with the trainer beside its run folder and the engine on algo-2, which sees
    neither the run folder nor algo-1's model cache: it fetches the s3:// model into its own.
    algo-2 joins and ends once the head stops the cluster. Then rlvr-s3-sync pull and watch
    find the job's outputs in S3. Without bubblewrap, a job of one instance runs instead (the
    same entry point, run folder, uploads and S3 layout; no second node)."""
    import socket

    from ray._private.services import get_node_ip_address

    from rlvr.tiny import build

    hosts = ["algo-1", "algo-2"] if shutil.which("bwrap") else ["algo-1"]  # scripts/install.sh installs it
    multi = len(hosts) > 1
    opt_ml, algo2_ml = tmp_path / "opt" / "ml", tmp_path / "algo-2" / "ml"
    job = "rlvr-20261123-101500"
    hps = {"rlvr_config": "tiny-cpu.yaml", "train.steps": "1", "checkpoint.every": "1", "rollout.engine": "hf",
           "rollout.prompts_per_step": "8", "rollout.n": "4", "rollout.max_tokens": "12", "rlvr_sync_interval": "1",
           "rollout.num_engines": "1", "train.trainer_num_cpus": "1",
           # more CPUs than algo-1 has left beside the trainer: the engine goes to algo-2
           "rollout.engine_num_cpus": str(os.cpu_count() if multi else 2)}
    model = build(str(tmp_path / "tiny"))
    c = s3env.client()
    for f in os.listdir(model):
        c.upload_file(os.path.join(model, f), bucket, f"models/tiny/{f}")
    hps["model.path"] = f"s3://{bucket}/models/tiny/"
    for ml in (opt_ml, algo2_ml):
        write_opt_ml(str(ml), hps, [TINY], [])
    ip = get_node_ip_address()
    hosts_file = tmp_path / "hosts"
    hosts_file.write_text(open("/etc/hosts").read() + f"\n{ip} algo-1\n{ip} algo-2\n")
    with socket.socket() as sk:
        sk.bind(("", 0))
        port = sk.getsockname()[1]
    jobs = f"s3://{bucket}/rlvr/checkpoints/"
    env = dict(s3env.env(), RLVR_OPT_ML=str(opt_ml), TRAINING_JOB_NAME=job, RLVR_JOB_S3=jobs,
               RLVR_RAY_PORT=str(port), PYTHONPATH=REPO, OMP_NUM_THREADS="1", RAY_USAGE_STATS_ENABLED="0",
               TOKENIZERS_PARALLELISM="false", PATH=os.path.dirname(sys.executable) + os.pathsep + os.environ["PATH"],
               # a worker's raylet ends soon after the head (a busy machine's slow answers are not its end)
               RAY_gcs_rpc_server_reconnect_timeout_s=str(round(machine_time.scaled(5))),
               RLVR_CACHE=str(opt_ml / "cache"))  # on each instance its own /opt/ml/cache
    if multi:
        env["RAY_AUTH_TOKEN"] = os.urandom(32).hex()  # as rlvr-submit sets it for several instances
    head = instance(opt_ml, opt_ml, "algo-1", hosts, hosts_file, env)
    worker = instance(opt_ml, algo2_ml, "algo-2", hosts, hosts_file, env) if multi else None
    out = machine_time.communicate(head, 900, "the head instance")[0].decode(errors="replace")
    assert head.returncode == 0, out[-3000:]
    assert not (opt_ml / "output" / "failure").exists()
    (run,) = os.listdir(opt_ml / "model")
    assert run.startswith("tiny-cpu_")
    man = json.loads((opt_ml / "model" / run / "run.json").read_text())
    (eng,), tr = man["placement"]["engines"], man["placement"]["trainer"]
    assert man["model"]["source"] == "s3" and eng["model"] == tr["model"] == man["base_model"]
    assert tr["model"].startswith(str(opt_ml / "cache"))
    if multi:
        wout = machine_time.communicate(worker, 600, "the worker instance")[0].decode(errors="replace")
        assert worker.returncode == 0 and "this host is done" in wout, wout[-3000:]
        assert "Ray cluster ready: 2 nodes" in out and "without token authentication" not in out + wout
        assert "the run folder is not shared with 1 other node(s)" in out  # found by the probe file
        assert os.listdir(algo2_ml / "model") == []
        assert (eng["host"], tr["host"]) == ("algo-2", "algo-1") and eng["node_id"] != tr["node_id"]
        theirs = algo2_ml / os.path.relpath(tr["model"], opt_ml)  # each instance fetched its own copy
        assert sorted(os.listdir(theirs)) == sorted(os.listdir(tr["model"]))
    # what SageMaker does when the container exits: $SM_MODEL_DIR as output/model.tar.gz
    archive = tmp_path / "model.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(opt_ml / "model" / run, arcname=run)

    class E:
        pass

    e = E()
    e.s3, e.bucket = s3env.client(), bucket
    e.s3.upload_file(str(archive), bucket, f"rlvr/checkpoints/{job}/output/model.tar.gz")
    got = keys(e, f"rlvr/checkpoints/{job}/")
    rel = {k.split(f"{job}/", 1)[1] for k in got}
    for d in (f"{run}_step1", f"{run}_final"):
        assert {f"{d}/trainer_state.pt", f"{d}/config.json"} <= rel, sorted(rel)
    assert {"config.yaml", "run.json", "traces/trace.jsonl", "traces/rollouts.jsonl"} <= rel
    assert not any(".tmp-" in k for k in rel)
    # rlvr-s3-sync pull finds the layout it expects (model.tar.gz unpacked in place)
    dest = tmp_path / "results"
    r = invoke("rlvr-s3-sync", ["pull", job, str(dest), "--src", jobs, "--no-progress"])
    assert r.code == 0, r.stderr
    local = dest / job
    steps = [json.loads(ln)["step"] for ln in (local / "traces" / "trace.jsonl").read_text().splitlines()]
    assert steps == [1]
    assert (local / "config.yaml").exists() and (local / "checkpoints" / "step_000001" / "trainer_state.pt").exists()
    assert (local / f"{run}_final" / "model.safetensors").read_bytes() == \
        (opt_ml / "model" / run / "checkpoints" / "step_000001" / "model.safetensors").read_bytes()
    assert not (local / "output" / "model.tar.gz").exists()
    # and watch follows its traces
    r = invoke("rlvr-s3-sync", ["watch", job, "--src", jobs, "--dest", str(tmp_path / "watched"), "--idle-exit", "0"])
    assert r.code == 0, r.stderr
    assert (tmp_path / "watched" / job / "traces" / "trace.jsonl").read_bytes() == \
        (local / "traces" / "trace.jsonl").read_bytes()


def test_documented_iam_policies_cover_what_submit_calls():
    text = open(os.path.join(REPO, "docs", "cloud.md")).read()
    blocks = [json.loads(b) for b in re.findall(r"```json\n(.*?)```", text, re.S)]
    assert len(blocks) == 2

    def actions(policy):
        out = set()
        for st in policy["Statement"]:
            a = st["Action"]
            out.update([a] if isinstance(a, str) else a)
        return out

    submitter, execution = (actions(b) for b in blocks)
    assert {"ecr:GetAuthorizationToken", "ecr:CreateRepository", "ecr:DescribeRepositories", "ecr:DescribeImages",
            "ecr:PutImage", "sagemaker:CreateTrainingJob", "sagemaker:DescribeTrainingJob",
            "sagemaker:StopTrainingJob", "sagemaker:ListTrainingJobs", "iam:PassRole", "iam:GetRole",
            "s3:PutObject", "s3:DeleteObject", "s3:ListBucket"} <= submitter
    assert {"ecr:BatchGetImage", "s3:GetObject", "s3:PutObject", "logs:PutLogEvents"} <= execution
    passrole = next(st for st in blocks[0]["Statement"] if st["Action"] == "iam:PassRole")
    assert passrole["Condition"]["StringEquals"]["iam:PassedToService"] == "sagemaker.amazonaws.com"


def test_local_dry_run_and_image_names(aws, tmp_path):
    r = invoke("rlvr-submit", [TINY, "--local", "--dry-run", "--name", "local-dry", "--local-dir", str(tmp_path / "r"),
                               "--job-log", aws.log, "--build", "--gpus", "all"])
    assert r.code == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["docker"][:2] == ["run", "--rm"] and out["docker"][out["docker"].index("--gpus") + 1] == "all"
    assert out["hyperparameters"] == {"rlvr_config": "tiny-cpu.yaml"}
    assert "would run: docker build" in r.stderr
    assert docker_calls(aws) == [] and not (tmp_path / "r").exists() and not os.path.exists(aws.log)
    # a full image URI is used as it is (no ECR lookups); --push takes a repository of this account
    r = submit(aws, "--dry-run", "--image", "registry.example.com/team/rlvr:v2")
    assert json.loads(r.stdout)["AlgorithmSpecification"]["TrainingImage"] == "registry.example.com/team/rlvr:v2"
    r = submit(aws, "--image", "registry.example.com/team/rlvr:v2", "--push")
    assert r.code == 2 and "this account's ECR" in r.stderr


def test_job_spec_hyperparameters():
    from rlvr.cloud.sagemaker import JobSpec

    spec = JobSpec(name="j-1", config_name="a.yaml", image="i", role="r", jobs_uri="s3://b/c/", inputs_uri="s3://b/i/",
                   sets=["train.lr=1e-6", "data.source=s3://b/d/x=y"], train_gpus=[0, 1], sync_interval=2.5)
    assert spec.hyperparameters() == {"rlvr_config": "a.yaml", "train.lr": "1e-6", "data.source": "s3://b/d/x=y",
                                      "rlvr_train_gpus": "0,1", "rlvr_sync_interval": "2.5"}
    for bad, msg in ((["rlvr_config=b.yaml"], "reserved"), (["sagemaker_x=1"], "reserved"), (["novalue"], "KEY=VALUE"),
                     ([f"k={'x' * 2501}"], "2500")):
        spec.sets = bad
        with pytest.raises(UsageError, match=msg):
            spec.request()


def test_entrypoint_failure_is_reported_where_sagemaker_looks(tmp_path, monkeypatch):
    from rlvr.cloud import entrypoint

    write_opt_ml(str(tmp_path), {"rlvr_config": "missing.yaml"}, [TINY], [])
    for k in [k for k in os.environ if k.startswith("SM_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("RLVR_OPT_ML", str(tmp_path))
    monkeypatch.setenv("TRAINING_JOB_NAME", "job-fails")
    with pytest.raises(SystemExit) as ex:
        entrypoint.main(["train"])
    assert ex.value.code == 2
    assert "missing.yaml: not in the config channel" in (tmp_path / "output" / "failure").read_text()
    with pytest.raises(SystemExit) as ex:
        entrypoint.main(["serve"])
    assert ex.value.code == 2
    assert invoke("rlvr-submit", []).code == 2


def test_job_sync_failures_are_returned_not_raised(s3env, tmp_path):
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "trace.jsonl").write_text('{"step": 1}\n')
    warnings = []
    sync = JobSync(str(run), JobLayout("s3://rlvr-no-such-bucket-for-tests/x/", "job", "run"), interval=0.1,
                   log=warnings.append).start()
    failed = sync.finish(timeout=120)
    assert failed and all("traces" in p or p.endswith("run") for p, _ in failed)
    assert all("bucket" in m.lower() for _, m in failed), failed


def test_job_sync_tries_failed_uploads_again_and_forgets_what_was_mended(s3env, tmp_path):
    # The bucket appears only after the first uploads failed (a transient failure): the run
    # folder's files and the checkpoint go up at a later poll and the failures are over. A
    # checkpoint deleted meanwhile (checkpoint.keep_last) is let go; a failed run gets no _final.
    import shutil as _shutil

    c = s3env.client()
    name = f"rlvr-late-bucket-{os.getpid()}"
    run = tmp_path / "run"
    (run / "traces").mkdir(parents=True)
    (run / "traces" / "trace.jsonl").write_text('{"step": 1}\n')
    cks = []
    for step in (1, 2):
        ck = run / "checkpoints" / f"step_{step:06d}"
        ck.mkdir(parents=True)
        (ck / "config.json").write_text("{}")
        (ck / "trainer_state.pt").write_bytes(b"state")
        cks.append(ck)
    said = []
    sync = JobSync(str(run), JobLayout(f"s3://{name}/x/", "job", "run"), interval=0.1, log=said.append).start()
    try:
        wait_for("the first failures",
                 lambda: sync._meta.failed and all(u.failed for _, u in sync._checkpoints.values()))
        _shutil.rmtree(cks[1])
        c.create_bucket(Bucket=name)

        def there(key):
            try:
                return c.get_object(Bucket=name, Key=key)["Body"].read()
            except Exception:  # noqa: BLE001 - not yet
                return None

        wait_for("the checkpoint, tried again", lambda: there("x/job/run_step1/trainer_state.pt") == b"state")
        wait_for("the trace, tried again", lambda: there("x/job/traces/trace.jsonl") == b'{"step": 1}\n')
        wait_for("the deleted checkpoint, let go", lambda: any("step_000002 was deleted" in m for m in said))
    finally:
        failed = sync.finish(timeout=120, final=False)
    assert failed == []
    assert any("step_000002 was deleted before its upload ended" in m for m in said), said
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=name).get("Contents", [])}
    assert not any(k.startswith(("x/job/run_step2/", "x/job/run_final/")) for k in keys), keys


# ----------------------------------------------------------------------------- inputs, GPUs, --stop, --list

def test_missing_s3_inputs_are_listed_and_nothing_is_sent(aws, tmp_path, monkeypatch):
    # The model, a data source, a curriculum, a dataset under RLVR_S3_DATASETS and an input
    # channel, all missing on S3: one line each, exit 1, nothing built, uploaded or created.
    b = aws.bucket
    cfg = tmp_path / "inputs.yaml"
    cfg.write_text(open(TINY).read().replace("path: tiny", f"path: s3://{b}/models/qwen/")
                   .replace("dataset: toy", "dataset: null\n  mix: {gsm8k: 0.5, math: 0.5}\n"
                            f"  source: {{math: s3://{b}/data/math.jsonl}}\n"
                            f"  order: {{gsm8k: s3://{b}/curricula/gsm8k.txt}}"))
    args = [str(cfg), "--role", aws.role, "--s3", aws.s3uri, "--job-log", aws.log, "--image", f"{aws.repo}:v1",
            "--name", "inputs-job", "--env", f"RLVR_S3_DATASETS=s3://{b}/datasets/", "--input", f"extra=s3://{b}/extra/"]
    aws.s3.put_object(Bucket=b, Key="models/qwen/README.md", Body=b"not a model")  # a folder without config.json
    r = invoke("rlvr-submit", [*args, "--push", "--build"])
    assert r.code == 1, r.stderr
    lines = r.stderr.strip().splitlines()
    expect = [f"model.path s3://{b}/models/qwen/: holds no config.json (not a model folder)",
              f"data.source.math s3://{b}/data/math.jsonl: no such S3 object or folder",
              f"data.order.gsm8k s3://{b}/curricula/gsm8k.txt: no such S3 object",
              f"dataset gsm8k (RLVR_S3_DATASETS) s3://{b}/datasets/gsm8k/ or s3://{b}/datasets/gsm8k_train/: "
              "nothing under this S3 prefix",
              f"--input extra s3://{b}/extra/: nothing under this S3 prefix"]
    assert [ln.removeprefix("rlvr-submit: ") for ln in lines[:-1]] == expect, r.stderr
    assert lines[-1] == "rlvr-submit: error: 5 input(s) the job would read are not on S3 (listed above): nothing sent"
    assert docker_calls(aws) == [] and keys(aws, "rlvr/") == [] and "inputs-job" not in jobs(aws)
    assert not os.path.exists(aws.log)
    r = invoke("rlvr-submit", [*args, "--dry-run"])  # a dry run says the same
    assert r.code == 1 and len(r.stderr.strip().splitlines()) == 6 and r.stdout == "", r.stderr
    # RLVR_S3_DATASETS set here reaches the job (and is checked) as --env would
    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{b}/datasets/")
    bare = [a for a in args if not a.startswith("RLVR_S3_DATASETS=") and a != "--env"]
    r = invoke("rlvr-submit", [*bare, "--dry-run"])
    assert r.code == 1 and f"s3://{b}/datasets/gsm8k/ or" in r.stderr, r.stderr
    # judged as the job's locate judges them: another split, or a file that names no split, is not there
    where = f"dataset gsm8k (RLVR_S3_DATASETS) s3://{b}/datasets/gsm8k/ or s3://{b}/datasets/gsm8k_train/: "
    aws.s3.put_object(Bucket=b, Key="datasets/gsm8k/test.jsonl", Body=b"{}\n")
    r = invoke("rlvr-submit", [*bare, "--dry-run"])
    assert r.code == 1 and where + "no 'train' split under these S3 prefixes" in r.stderr, r.stderr
    aws.s3.delete_object(Bucket=b, Key="datasets/gsm8k/test.jsonl")
    aws.s3.put_object(Bucket=b, Key="datasets/gsm8k/data.jsonl", Body=b"{}\n")   # stays: gsm8k_train/ wins below
    r = invoke("rlvr-submit", [*bare, "--dry-run"])
    assert r.code == 1 and where + f"s3://{b}/datasets/gsm8k/data.jsonl names no split, so it is not taken as " \
        "the 'train' split" in r.stderr, r.stderr
    for key, body in (("datasets/gsm8k_train/train.jsonl", b"{}\n"), ("datasets/math/train.jsonl", b"{}\n"),
                      ("data/math.jsonl", b"{}\n"), ("curricula/gsm8k.txt", b"a\n"),
                      ("models/qwen/config.json", b"{}"), ("extra/x", b"x")):
        aws.s3.put_object(Bucket=b, Key=key, Body=body)
    r = invoke("rlvr-submit", [*bare, "--dry-run"])
    assert r.code == 0, r.stderr
    assert json.loads(r.stdout)["Environment"]["RLVR_S3_DATASETS"] == f"s3://{b}/datasets/"
    # all there (the dataset in the users' <name>_train/ layout): submitted
    for key in ("models/qwen/config.json", "data/math.jsonl", "curricula/gsm8k.txt",
                "datasets/gsm8k_train/data-00000-of-00001.arrow", "extra/x"):
        aws.s3.put_object(Bucket=b, Key=key, Body=b"{}")
    r = invoke("rlvr-submit", [*args, "--push"])
    assert r.code == 0, r.stderr
    assert "inputs-job" in jobs(aws)
    # a model given as the model channel is not looked for under model.path
    from rlvr.cloud.inputs import job_inputs
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig

    c = load_config(TrainConfig, str(cfg))
    assert [i.what for i in job_inputs(c, {"model": f"s3://{b}/m/", "data": f"s3://{b}/d/"}, {})] == \
        ["data.source.math", "data.order.gsm8k", "--input data", "--input model"]


def test_validation_eval_config_and_teacher_inputs_are_checked_too(aws, tmp_path):
    # validation's sources and benchmarks' datasets, --eval-config's benchmarks and --source
    # values, and an s3:// teacher: one line each when missing, then submitted once all are there
    b = aws.bucket
    cfg = tmp_path / "inputs.yaml"
    cfg.write_text(open(TINY).read() + f"teacher:\n  model: s3://{b}/models/teacher/\n"
                   f"eval:\n  benchmarks: [gsm8k, math500, toy]\n  source: {{math500: s3://{b}/data/math500.jsonl}}\n")
    spec = tmp_path / "watch.yaml"
    spec.write_text(f"benchmarks: [ifeval, if_multi_constraints, gsm8k]\nargs: [--source, 'ifeval=s3://{b}/if/']\n")
    args = [str(cfg), "--role", aws.role, "--s3", aws.s3uri, "--job-log", aws.log, "--image", f"{aws.repo}:v1",
            "--name", "eval-inputs-job", "--env", f"RLVR_S3_DATASETS=s3://{b}/datasets/", "--eval-config", str(spec),
            "--dry-run"]
    r = invoke("rlvr-submit", args)
    ds = f"s3://{b}/datasets"
    assert [ln.removeprefix("rlvr-submit: ") for ln in r.stderr.strip().splitlines()[1:-1]] == [
        f"teacher.model s3://{b}/models/teacher/: no such S3 folder",
        f"eval.source.math500 s3://{b}/data/math500.jsonl: no such S3 object or folder",
        f"--eval-config --source ifeval s3://{b}/if/: no such S3 object or folder",
        f"eval benchmark gsm8k: dataset gsm8k (RLVR_S3_DATASETS) {ds}/gsm8k/ or {ds}/gsm8k_test/: "
        "nothing under this S3 prefix",
        f"--eval-config benchmark if_multi_constraints: dataset if_multi (RLVR_S3_DATASETS) {ds}/if_multi/ or "
        f"{ds}/if_multi_train/ or {ds}/if_multi_constraints/ or {ds}/if_multi_constraints_train/: "
        "nothing under this S3 prefix"], r.stderr
    assert r.code == 1 and "5 input(s) the job would read are not on S3" in r.stderr and r.stdout == ""
    for key in ("models/teacher/config.json", "data/math500.jsonl", "if/train.jsonl", "datasets/gsm8k/test.jsonl",
                "datasets/if_multi_train/part-0.jsonl"):
        aws.s3.put_object(Bucket=b, Key=key, Body=b"{}")
    r = invoke("rlvr-submit", args)
    assert r.code == 0 and json.loads(r.stdout)["TrainingJobName"] == "eval-inputs-job", r.stderr


def test_eval_config_defaults_to_the_last_quarter_of_the_gpus(aws, tmp_path):
    from rlvr.cloud.sagemaker import instance_gpus, split_gpus

    ev = eval_config(aws)

    def hps(*extra):
        r = submit(aws, "--dry-run", "--eval-config", ev, *extra)
        return r, (json.loads(r.stdout)["HyperParameters"] if r.code == 0 else None)

    r, hp = hps()  # ml.p4de.24xlarge: 8 GPUs
    assert (hp["rlvr_train_gpus"], hp["rlvr_eval_gpus"]) == ("0,1,2,3,4,5", "6,7"), r.stderr
    assert "training on GPUs 0-5, evaluating on 6-7 (ml.p4de.24xlarge has 8 GPUs" in r.stderr
    r, hp = hps("--eval-gpus", "7")
    assert (hp["rlvr_train_gpus"], hp["rlvr_eval_gpus"]) == ("0,1,2,3,4,5,6", "7")
    r, hp = hps("--instance-type", "ml.g5.12xlarge")
    assert (hp["rlvr_train_gpus"], hp["rlvr_eval_gpus"]) == ("0,1,2", "3")
    r, hp = hps("--train-gpus", "0-3", "--eval-gpus", "4")  # given: as they are
    assert (hp["rlvr_train_gpus"], hp["rlvr_eval_gpus"]) == ("0,1,2,3", "4") and "training on" not in r.stderr
    for extra, msg in ((["--eval-gpus", "8"], "ml.p4de.24xlarge has 8 GPUs (0-7)"),
                       (["--instance-type", "ml.g5.2xlarge"], "two GPUs or more"),
                       (["--instance-type", "ml.trn1.32xlarge"], "give --train-gpus and --eval-gpus"),
                       (["--train-gpus", "0-7"], "no GPU of ml.p4de.24xlarge is left to evaluate on")):
        r, _ = hps(*extra)
        assert r.code == 2 and msg in r.stderr, (extra, r.stderr)
    r = invoke("rlvr-submit", [TINY, "--local", "--dry-run", "--gpus", "0,1,2,3", "--eval-config", ev, "--name", "lg",
                               "--local-dir", str(tmp_path / "r"), "--job-log", aws.log])
    assert json.loads(r.stdout)["hyperparameters"]["rlvr_eval_gpus"] == "3", r.stderr
    assert instance_gpus("ml.p5.48xlarge") == 8 and instance_gpus("ml.g6.xlarge") == 1
    assert split_gpus(8, None, None, "x")[:2] == ([0, 1, 2, 3, 4, 5], [6, 7])


def test_list_jobs_newest_first_with_their_job_log_rows(aws):
    for name, desc in (("listed-a", "first"), ("listed-b", "second")):
        r = submit(aws, "--name", name, "--push", "-d", desc)
        assert r.code == 0, r.stderr
    r = invoke("rlvr-submit", ["--list", "--prefix", "listed-", "--job-log", aws.log])
    assert r.code == 0, r.stderr
    got = r.records()
    assert sorted(j["job"] for j in got) == ["listed-a", "listed-b"]
    a = next(j for j in got if j["job"] == "listed-a")
    assert a["description"] == "first" and a["config"] == TINY and a["status"] and a["created"] and a["arn"]
    r = invoke("rlvr-submit", ["--list", "--prefix", "listed-", "--list-max", "1", "--job-log", aws.log])
    assert len(r.records()) == 1
    r = invoke("rlvr-submit", ["--list", "--prefix", "listed-", "--status", "InProgress"])
    assert r.code == 0 and r.records() == []  # moto's jobs are Completed at once
    r = invoke("rlvr-submit", ["--list", TINY])
    assert r.code == 2 and "--list takes no CONFIG" in r.stderr
    r = invoke("rlvr-submit", ["--list", "--stop", "listed-a"])
    assert r.code == 2 and "choose one of" in r.stderr


def test_stop_a_job_in_progress_and_leave_an_ended_one(aws, monkeypatch):
    from botocore.stub import Stubber

    from rlvr.cloud import aws as cloud_aws

    r = submit(aws, "--name", "stop-done", "--push")
    assert r.code == 0, r.stderr
    r = invoke("rlvr-submit", ["--stop", "stop-done"])  # moto's job has completed: nothing to stop
    assert r.code == 0 and json.loads(r.stdout) == {"job": "stop-done", "status": "Completed"}, r.stderr
    assert "already Completed, nothing to stop" in r.stderr
    r = invoke("rlvr-submit", ["--stop", "never-submitted"])
    assert r.code == 1 and "no training job named 'never-submitted'" in r.stderr
    # a job in progress (moto has no StopTrainingJob): SageMaker's answers from a botocore stub
    real = cloud_aws.Aws.client
    stubs = []

    def client(self, service):
        c = real(self, service)
        if service == "sagemaker" and not stubs:
            st = Stubber(c)
            base = {"TrainingJobName": "stop-me", "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:"
                    "training-job/stop-me", "AlgorithmSpecification": {"TrainingInputMode": "File"},
                    "ResourceConfig": {"InstanceType": "ml.p4de.24xlarge", "InstanceCount": 1, "VolumeSizeInGB": 500},
                    "StoppingCondition": {"MaxRuntimeInSeconds": 3600}, "CreationTime": "2026-11-23T10:15:00Z",
                    "ModelArtifacts": {"S3ModelArtifacts": ""}, "SecondaryStatus": "Training"}
            st.add_response("describe_training_job", dict(base, TrainingJobStatus="InProgress"),
                            {"TrainingJobName": "stop-me"})
            st.add_response("stop_training_job", {}, {"TrainingJobName": "stop-me"})
            st.add_response("describe_training_job", dict(base, TrainingJobStatus="Stopping", SecondaryStatus="Stopping"),
                            {"TrainingJobName": "stop-me"})
            st.activate()
            stubs.append(st)
        return c

    monkeypatch.setattr(cloud_aws.Aws, "client", client)
    r = invoke("rlvr-submit", ["--stop", "stop-me"])
    assert r.code == 0 and json.loads(r.stdout) == {"job": "stop-me", "status": "Stopping"}, r.stderr
    assert "stop-me: stop requested (Stopping)" in r.stderr
    stubs[0].assert_no_pending_responses()
    r = invoke("rlvr-submit", ["--stop", "bad_name"])
    assert r.code == 2 and "SageMaker's rule" in r.stderr


def test_a_dataset_under_another_of_its_names_counts_as_the_jobs_locate_finds_it():
    """if_multi's rows in the users' if_multi_constraints_train/ folder: the job's locate tries
    every name a dataset goes by, so the submit check does too (it refused the job)."""
    from rlvr.cloud.inputs import _dataset_missing, job_inputs
    from rlvr.config_loader import load_config
    from rlvr.train.config import TrainConfig

    keys = {"datasets/if_multi_constraints_train/train.jsonl"}

    class Pages:
        def paginate(self, Bucket, Prefix):
            return [{"Contents": [{"Key": k} for k in sorted(keys) if k.startswith(Prefix)]}]

    class S3:
        def get_paginator(self, name):
            return Pages()

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), ["data.dataset=if_multi"])
    [inp] = [i for i in job_inputs(cfg, {}, {"RLVR_S3_DATASETS": "s3://bkt/datasets/"}) if i.kind == "dataset"]
    assert "s3://bkt/datasets/if_multi_constraints_train/" in inp.uris
    assert _dataset_missing(S3(), inp) is None
    keys.clear()
    assert _dataset_missing(S3(), inp) is not None
