"""The project's image: docker build, ECR (repository, login, push) and docker run for --local.

Everything goes through the docker CLI (`docker build/tag/login/push/run`) and boto3's ECR
client. The ECR password goes to `docker login --password-stdin`, never on a command line.
"""

from __future__ import annotations

import base64
import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rlvr.errors import Failure, UsageError

DEFAULT_IMAGE = "rlvr:latest"
DOCKERFILE = "Dockerfile"
# Credentials and endpoints a --local container inherits by name (docker copies the values;
# they never appear on the command line).
PASS_ENV = ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_DEFAULT_REGION", "AWS_REGION",
            "AWS_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3", "HF_TOKEN")


@dataclass
class ImageRef:
    """An image as the user named it: `repo[:tag]` in this account's ECR, or a full `registry/repo[:tag]`."""

    repository: str
    tag: str
    registry: str | None = None

    @classmethod
    def parse(cls, text: str) -> "ImageRef":
        if not text or any(c.isspace() for c in text) or "@" in text:
            raise UsageError(f"--image {text!r}: expected REPOSITORY[:TAG] or REGISTRY/REPOSITORY[:TAG]")
        registry = None
        first, sep, rest = text.partition("/")
        if sep and ("." in first or ":" in first or first == "localhost"):
            registry, text = first, rest
        repo, _, tag = text.rpartition(":") if ":" in text else (text, "", "latest")
        if not repo or not tag:
            raise UsageError(f"--image {text!r}: expected REPOSITORY[:TAG]")
        return cls(repo, tag, registry)

    @property
    def local(self) -> str:
        """The name the image is built under on this machine."""
        return f"{self.repository}:{self.tag}"

    def uri(self, registry: str | None = None) -> str:
        reg = self.registry or registry
        return f"{reg}/{self.repository}:{self.tag}" if reg else self.local


class Docker:
    """The docker CLI. `dry_run` prints the commands (to stderr) instead of running them."""

    def __init__(self, dry_run: bool = False, log: Callable[[str], None] | None = None):
        self.dry_run = dry_run
        self.log = log or (lambda m: print(m, file=sys.stderr, flush=True))
        self.exe = shutil.which("docker")

    def require(self) -> None:
        if self.exe is None and not self.dry_run:
            raise Failure("docker not found on PATH (install docker, or submit an image already in ECR without "
                          "--build/--push/--local)")

    def run(self, args: Sequence[str], what: str, stdin: bytes | None = None, capture: bool = False) -> str:
        shown = "docker " + " ".join(shlex.quote(a) for a in args)
        if self.dry_run:
            self.log(f"would run: {shown}")
            return ""
        self.require()
        self.log(f"$ {shown}")
        errfd = _fileno(sys.stderr)
        # docker's own output goes to stderr (stdout carries data only), live when stderr is a file
        relay = not capture and errfd is None
        try:
            p = subprocess.run([self.exe, *args], input=stdin,
                               stdout=subprocess.PIPE if capture or relay else errfd,
                               stderr=subprocess.PIPE if capture or relay else None)
        except OSError as e:
            raise Failure(f"{what}: cannot run docker: {e}") from None
        err = (p.stderr or b"").decode("utf-8", "replace")
        if relay:
            sys.stderr.write((p.stdout or b"").decode("utf-8", "replace") + err)
        if p.returncode != 0:
            tail = err.strip().splitlines()[-1:]
            raise Failure(f"{what} failed (docker exit {p.returncode})" + (f": {tail[0]}" if tail else ""))
        return (p.stdout or b"").decode("utf-8", "replace") if capture else ""


def _fileno(stream) -> int | None:
    try:
        return stream.fileno()
    except (AttributeError, ValueError, OSError):
        return None


def build(docker: Docker, image: ImageRef, context: str, dockerfile: str | None = None,
          build_args: Sequence[str] = ()) -> None:
    """docker build -t REPO:TAG -f DOCKERFILE CONTEXT."""
    dockerfile = dockerfile or os.path.join(context, DOCKERFILE)
    if not os.path.isfile(dockerfile):
        raise UsageError(f"--build: no Dockerfile at {dockerfile}")
    args = ["build", "-t", image.local, "-f", dockerfile]
    for a in build_args:
        args += ["--build-arg", a]
    docker.run([*args, context], f"docker build of {image.local}")


def _ecr_missing(aws, name: str) -> str:
    return (f"ECR repository {name!r} does not exist in {aws.region}: run with --push to create it "
            "(and --build to build the image first)")


def ecr_lookup(aws, name: str) -> str | None:
    """The repository's URI (REGISTRY/NAME), or None when it does not exist (read-only)."""
    from rlvr.cloud.aws import call

    ecr = aws.client("ecr")
    missing = _ecr_missing(aws, name)
    try:
        r = call(lambda: ecr.describe_repositories(repositoryNames=[name]), f"ecr DescribeRepositories {name}",
                 {"RepositoryNotFoundException": missing})
    except Failure as e:
        if str(e) == missing:
            return None
        raise
    return r["repositories"][0]["repositoryUri"]


def ecr_repository(aws, name: str, create: bool) -> str:
    """The repository's URI (REGISTRY/NAME); created when missing and `create`, else a Failure."""
    from rlvr.cloud.aws import call

    uri = ecr_lookup(aws, name)
    if uri is not None:
        return uri
    if not create:
        raise Failure(_ecr_missing(aws, name))
    r = call(lambda: aws.client("ecr").create_repository(repositoryName=name,
                                                          imageScanningConfiguration={"scanOnPush": True}),
             f"ecr CreateRepository {name}")
    return r["repository"]["repositoryUri"]


def ecr_require_tag(aws, name: str, tag: str) -> None:
    """Fail with one line when the repository has no image with this tag."""
    from rlvr.cloud.aws import call

    ecr = aws.client("ecr")
    missing = f"ECR repository {name!r} has no image tagged {tag!r}: run with --push (and --build)"
    r = call(lambda: ecr.describe_images(repositoryName=name, imageIds=[{"imageTag": tag}]),
             f"ecr DescribeImages {name}:{tag}", {"ImageNotFoundException": missing})
    if not r.get("imageDetails"):
        raise Failure(missing)


def ecr_login(aws, docker: Docker) -> str:
    """docker login to the account's ECR registry with get_authorization_token; returns the registry."""
    from rlvr.cloud.aws import call

    ecr = aws.client("ecr")
    data = call(lambda: ecr.get_authorization_token(), "ecr GetAuthorizationToken")["authorizationData"][0]
    user, _, password = base64.b64decode(data["authorizationToken"]).decode().partition(":")
    endpoint = data["proxyEndpoint"]
    docker.run(["login", "--username", user, "--password-stdin", endpoint], f"docker login to {endpoint}",
               stdin=password.encode(), capture=True)
    return endpoint.removeprefix("https://").removeprefix("http://").rstrip("/")


def push(docker: Docker, image: ImageRef, uri: str) -> None:
    """docker tag REPO:TAG URI; docker push URI."""
    if uri != image.local:
        docker.run(["tag", image.local, uri], f"docker tag {image.local} {uri}")
    docker.run(["push", uri], f"docker push {uri}")


def local_run_args(image: str, name: str, opt_ml: str, gpus: list[int] | None, env: dict[str, str],
                   mounts: dict[str, str] | None = None, shm_size: str = "64g") -> list[str]:
    """`docker run` arguments for the job's container on this machine, SageMaker's layout under opt_ml.

    The host folder opt_ml is /opt/ml in the container; environment variables in PASS_ENV that
    are set here are passed by name (their values never show on the command line), and
    ~/.aws is mounted read-only when it exists.
    """
    args = ["run", "--rm", "--name", name, "--shm-size", shm_size, "--ipc", "host",
            "-v", f"{os.path.abspath(opt_ml)}:/opt/ml"]
    if gpus:
        args += ["--gpus", f'"device={",".join(map(str, gpus))}"']
    mounts = dict(mounts or {})
    aws_dir = os.path.join(os.path.expanduser("~"), ".aws")
    if os.path.isdir(aws_dir):  # profiles (AWS_PROFILE) work inside as they do here
        mounts[aws_dir] = "/root/.aws"
    for host, inside in sorted(mounts.items()):
        args += ["-v", f"{os.path.abspath(host)}:{inside}:ro"]
    for k, v in sorted(env.items()):
        args += ["-e", f"{k}={v}"]
    for k in PASS_ENV:
        if k in os.environ and k not in env:
            args += ["-e", k]
    from rlvr.cloud.sagemaker import ENTRYPOINT

    return [*args, "--entrypoint", ENTRYPOINT[0], image, *ENTRYPOINT[1:]]
