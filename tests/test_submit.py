"""rlvr-submit and the in-job entrypoint (rlvr.cloud).

SageMaker, ECR, IAM and STS calls go to moto's server mode (a real HTTP server in its own
process, `moto_server`: CreateTrainingJob, DescribeTrainingJob, ListTrainingJobs, ECR
CreateRepository/DescribeRepositories/DescribeImages/GetAuthorizationToken, IAM GetRole, STS
GetCallerIdentity all ran against it; moto 5 answers StopTrainingJob with HTTP 500, so
stopping is not tested). S3 goes to the S3 test server (tests/s3server.py: Ceph RGW or moto).
docker is tests/fakes/bin/docker, which records its arguments and fails on request. The
end-to-end test runs the entrypoint in a simulated SageMaker container (SageMaker's folders
and variables in a tmp dir) on the tiny CPU config and finds its outputs with rlvr-s3-sync pull.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import time

import pytest

from helpers import REPO, invoke
from s3_fixtures import bucket, s3env, s3server  # noqa: F401 - fixtures
import s3server as _s3server

from rlvr.cloud import joblog
from rlvr.cloud.entrypoint import JobEnv, plan
from rlvr.cloud.layout import JobLayout, JobSync
from rlvr.cloud.sagemaker import check_job_name, default_job_name, parse_gpus
from rlvr.cloud.submit import write_opt_ml
from rlvr.errors import UsageError

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
    r = invoke("rlvr-submit", [TINY, "--role", aws.role, "--job-log", aws.log])
    assert r.code == 2 and "--s3" in r.stderr
    r = invoke("rlvr-submit", [TINY, "--role", "sagemaker-role", "--s3", aws.s3uri, "--job-log", aws.log])
    assert r.code == 2 and "not an IAM role ARN" in r.stderr
    r = submit(aws, "--set", "train.nope=1")
    assert r.code == 2 and "train.nope" in r.stderr
    assert not os.path.exists(aws.log) and keys(aws) == []


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


def test_submit_build_push_describe(aws):
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
    assert keys(aws) == [key]
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
    assert keys(aws) == [key] and len(joblog.rows(aws.log)) == 1
    assert len(docker_calls(aws)) == 4  # refused before any build or push


def test_failed_push_submits_nothing(aws, monkeypatch):
    monkeypatch.setenv("FAKE_DOCKER_FAIL", "push")
    r = submit(aws, "--name", "push-fails", "--push")
    assert r.code == 1 and "docker push" in r.stderr and "failed on request" in r.stderr
    assert "push-fails" not in jobs(aws) and keys(aws) == [] and not os.path.exists(aws.log)


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
