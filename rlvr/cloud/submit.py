"""rlvr-submit's logic: check everything, then build/push the image, then send one request.

Order of work, so that a failure leaves nothing half-submitted: (1) local checks (job name,
config, eval config, GPUs, role and S3 prefix given), (2) docker and credentials present,
(3) read-only AWS checks (name free, role, bucket, the job's s3:// inputs, ECR repository
and tag), (4) docker build and push,
(5) the config uploaded to s3://.../inputs/<job>/, (6) CreateTrainingJob (on failure the
uploaded config is deleted again), (7) the job log row. --dry-run stops before (4) and sends
nothing. --local runs the same image with docker on this machine, SageMaker's folders under
LOCAL_DIR/<job>/ mounted as /opt/ml.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field

from rlvr.cloud import image as img
from rlvr.cloud import joblog
from rlvr.cloud.sagemaker import (CONFIG_CHANNEL, DEFAULT_INSTANCE, DEFAULT_PREFIX, JobSpec, check_job_name,
                                  default_job_name, gpu_list, instance_gpus, parse_gpus, split_gpus)
from rlvr.errors import Failure, UsageError

ROLE_RE = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/[\w+=,.@/-]{1,512}$")
CHANNEL_RE = re.compile(r"^[A-Za-z0-9\.\-_]{1,64}$")
ROLE_ENV = "RLVR_SAGEMAKER_ROLE"
S3_ENV = "RLVR_SAGEMAKER_S3"


@dataclass
class SubmitOptions:
    config: str | None
    name: str | None = None
    prefix: str = DEFAULT_PREFIX
    description: str = ""
    job_log: str = joblog.DEFAULT_LOG
    role: str | None = None
    s3: str | None = None                # s3://BUCKET/PREFIX/: jobs under PREFIX/checkpoints/, inputs under PREFIX/inputs/
    image: str = img.DEFAULT_IMAGE
    instance_type: str = DEFAULT_INSTANCE
    instance_count: int = 1
    volume_gb: int = 500
    max_hours: float = 120
    sets: list[str] = field(default_factory=list)
    env: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    eval_config: str | None = None
    train_gpus: str | None = None
    eval_gpus: str | None = None
    sync_interval: float | None = None
    build: bool = False
    push: bool = False
    dockerfile: str | None = None
    context: str | None = None
    local: bool = False
    gpus: str | None = None
    local_dir: str = "results"
    dry_run: bool = False
    region: str | None = None
    profile: str | None = None
    eval_checkpoints: list[str] = field(default_factory=list)   # --eval: an eval-only job over these


# Taken into the job's environment from the submitter's unless --env gives them.
PASSED_ENV = ("RLVR_S3_DATASETS", "RLVR_S3_MODELS")


def _pairs(items: list[str], option: str) -> dict[str, str]:
    out = {}
    for it in items:
        k, sep, v = it.partition("=")
        if not sep or not k.strip():
            raise UsageError(f"{option} {it!r}: expected NAME=VALUE")
        out[k.strip()] = v
    return out


def _s3_parts(uri: str, option: str) -> tuple[str, str]:
    from rlvr.s3 import parse_uri

    try:
        bucket, prefix = parse_uri(uri)
    except Exception as e:  # noqa: BLE001 - rlvr.s3's usage error, whatever its class
        raise UsageError(f"{option}: {e}") from None
    return bucket, prefix.strip("/")


def jobs_uri(s3: str) -> str:
    bucket, prefix = _s3_parts(s3, "--s3")
    return f"s3://{bucket}/{prefix + '/' if prefix else ''}checkpoints/"


def inputs_uri(s3: str, job: str) -> str:
    bucket, prefix = _s3_parts(s3, "--s3")
    return f"s3://{bucket}/{prefix + '/' if prefix else ''}inputs/{job}/"


def sagemaker_config_role() -> str | None:
    """SageMaker.TrainingJob.RoleArn of the SageMaker Python SDK's defaults config, where the SDK
    looks: the user's file ($SAGEMAKER_USER_CONFIG_OVERRIDE, else config.yaml in platformdirs'
    user config folder for "sagemaker": ~/.config/sagemaker/ or $XDG_CONFIG_HOME/sagemaker/ on
    Linux) over the administrator's ($SAGEMAKER_ADMIN_CONFIG_OVERRIDE, else the site config
    folder: /etc/xdg/sagemaker/). Local files only (the SDK also reads s3:// ones); None when
    no file names a role."""
    import yaml

    try:
        import platformdirs

        user_dir, site_dir = platformdirs.user_config_dir("sagemaker"), platformdirs.site_config_dir("sagemaker")
    except ImportError:
        user_dir = os.path.join(os.environ.get("XDG_CONFIG_HOME") or os.path.expanduser("~/.config"), "sagemaker")
        site_dir = os.path.join((os.environ.get("XDG_CONFIG_DIRS") or "/etc/xdg").split(":")[0], "sagemaker")
    for var, default in (("SAGEMAKER_USER_CONFIG_OVERRIDE", user_dir), ("SAGEMAKER_ADMIN_CONFIG_OVERRIDE", site_dir)):
        path = os.environ.get(var) or default
        if path.startswith("s3://"):
            raise UsageError(f"{var}={path}: rlvr-submit reads local SageMaker configs only: give --role")
        if os.path.isdir(path):
            path = os.path.join(path, "config.yaml")
        if not os.path.isfile(path):
            continue
        try:
            with open(path, encoding="utf-8") as fh:
                doc = yaml.safe_load(fh) or {}
            role = ((doc.get("SageMaker") or {}).get("TrainingJob") or {}).get("RoleArn")
        except (OSError, yaml.YAMLError, AttributeError) as e:
            raise UsageError(f"{path}: not a readable SageMaker config ({type(e).__name__})") from None
        if role:
            return str(role)
    return None


class Submitter:
    def __init__(self, o: SubmitOptions, out: Callable[[str], None], log: Callable[[str], None]):
        self.o = o
        self.out = out
        self.log = log

    # -- (1) local checks

    def check(self) -> None:
        o = self.o
        self.eval_only = bool(o.eval_checkpoints)
        cfg = None
        if self.eval_only:
            if not o.eval_config:
                raise UsageError("--eval CHECKPOINTS... needs --eval-config FILE (the tasks to run)")
            for flag, v in (("--set", o.sets), ("--train-gpus", o.train_gpus)):
                if v:
                    raise UsageError(f"--eval: no {flag} (an eval-only job trains nothing)")
            if o.instance_count > 1:
                raise UsageError("--eval runs on one instance (--instance-count 1)")
        else:
            if not os.path.isfile(o.config):
                raise UsageError(f"{o.config}: no such config file")
            from rlvr.config_loader import load_config
            from rlvr.train.config import TrainConfig

            cfg = load_config(TrainConfig, o.config, list(o.sets))  # bad keys and values: exit 2 here, not in the job
            path = str(cfg.model.path or "")
            if not o.local and path not in ("tiny",) and not path.startswith("s3://") and os.path.exists(path):
                self.log(f"warning: model.path {path} is a local path: the job cannot see this machine's files "
                         "(use s3://... or a hub name, or --input model=s3://...)")
        self.name = check_job_name(o.name) if o.name else default_job_name(o.prefix)
        self.eval_spec = None
        if o.eval_config:
            from rlvr.cloud.evalspec import load_eval_config

            self.eval_spec = load_eval_config(o.eval_config)
        self.train_gpus = parse_gpus(o.train_gpus, "--train-gpus")
        self.eval_gpus = parse_gpus(o.eval_gpus, "--eval-gpus")
        if o.eval_gpus and not o.eval_config:
            raise UsageError("--eval-gpus needs --eval-config")
        if self.train_gpus and self.eval_gpus and set(self.train_gpus) & set(self.eval_gpus):
            raise UsageError(f"--train-gpus {gpu_list(self.train_gpus)} and --eval-gpus {gpu_list(self.eval_gpus)} overlap")
        self.local_gpus = parse_gpus(o.gpus, "--gpus") if o.gpus not in (None, "all") else None
        if o.gpus and not o.local:
            raise UsageError("--gpus is for --local (on SageMaker the instance type decides)")
        if o.eval_config and not self.eval_only:  # by default the last quarter evaluates: 0-5 train, 6-7 of 8
            if o.local:
                count, where = (len(self.local_gpus), f"--gpus {o.gpus}") if self.local_gpus else (None, "--local")
            else:
                count, where = instance_gpus(o.instance_type), o.instance_type
            self.train_gpus, self.eval_gpus, chosen = split_gpus(count, self.train_gpus, self.eval_gpus, where,
                                                                 self.eval_spec.eval_gpus)
            if chosen:
                self.log(chosen)
        self.env = _pairs(o.env, "--env")
        for name in PASSED_ENV:  # where the job finds s3:// datasets and models, as it is found here
            if os.environ.get(name) and name not in self.env:
                self.env[name] = os.environ[name]
        if o.instance_count > 1:  # the instances' Ray cluster authenticates with it (rlvr.cloud.entrypoint)
            self.env.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
        self.channels = _pairs(o.inputs, "--input")
        for n, uri in self.channels.items():
            if n == CONFIG_CHANNEL or not CHANNEL_RE.match(n):
                raise UsageError(f"--input {n}: channel names are 1-64 of A-Z a-z 0-9 . - _ and not {CONFIG_CHANNEL!r}")
            if o.local and uri.startswith("s3://"):
                raise UsageError(f"--input {n}={uri}: with --local, inputs are local folders")
            if not o.local and not uri.startswith("s3://"):
                raise UsageError(f"--input {n}={uri}: expected an s3:// prefix")
            if o.local and not os.path.isdir(uri):
                raise UsageError(f"--input {n}={uri}: no such folder")
        from rlvr.cloud.inputs import job_inputs

        self.inputs = job_inputs(cfg, self.channels, self.env, self.eval_spec)  # checked on S3 before anything is sent
        self.image = img.ImageRef.parse(o.image)
        self.role = o.role or os.environ.get(ROLE_ENV) or (None if o.local else sagemaker_config_role())
        if not o.local:
            if not self.role:
                raise UsageError(f"no IAM role for the job: give --role ARN, set {ROLE_ENV}, or set "
                                 "SageMaker.TrainingJob.RoleArn in the SageMaker SDK's defaults config "
                                 "(~/.config/sagemaker/config.yaml)")
            if not ROLE_RE.match(self.role):
                raise UsageError(f"--role {self.role!r} is not an IAM role ARN (arn:aws:iam::ACCOUNT:role/NAME)")
            if not o.s3:
                raise UsageError(f"no S3 prefix for the job's inputs and outputs: give --s3 s3://BUCKET/PREFIX/ "
                                 f"or set {S3_ENV}")
        if o.s3:
            self.jobs_uri = jobs_uri(o.s3)
            self.inputs_uri = inputs_uri(o.s3, self.name)
        else:
            self.jobs_uri = self.inputs_uri = None
        if o.push and self.image.registry:
            raise UsageError(f"--push pushes to this account's ECR: give --image REPOSITORY[:TAG], not {o.image}")
        if o.local and o.instance_count > 1:
            raise UsageError("--instance-count is for SageMaker; --local runs one container")
        if o.eval_config and not self.eval_only and os.path.basename(o.eval_config) == os.path.basename(o.config):
            raise UsageError("the config and --eval-config need different file names (they share the config channel)")
        self.files = [o.config, *([o.eval_config] if o.eval_config else [])]
        if self.eval_only:
            self._eval_jobs()
        self.spec(self.image.local).request()  # hyperparameters within SageMaker's limits, before any work

    def _eval_jobs(self) -> None:
        """--eval: the checkpoints, as rlvr-eval --jobs' file (beside the eval config in the config
        channel); with --local, local checkpoints are mounted read-only into the container."""
        import tempfile

        from rlvr.cloud.evaljob import JOBS_NAME, expand_checkpoints, jobs_file, results_uri

        o = self.o
        if os.path.basename(o.eval_config) == JOBS_NAME:
            raise UsageError(f"--eval-config: name it anything but {JOBS_NAME} (the job's list of checkpoints)")
        try:
            found = expand_checkpoints(list(o.eval_checkpoints), jobs_uri=self.jobs_uri, local=o.local)
        except (UsageError, Failure):
            raise
        except Exception as e:  # noqa: BLE001 - S3 listing: no credentials, no bucket, access denied
            raise Failure(f"--eval: cannot list the checkpoints on S3: {type(e).__name__}: {e}") from None
        self.mounts = {f.path: f"/opt/ml/input/data/checkpoint-{i}" for i, f in enumerate(found)
                       if not f.path.startswith("s3://")}
        folder = tempfile.mkdtemp(prefix="rlvr-eval-job-")
        path = os.path.join(folder, JOBS_NAME)
        with open(path, "w", encoding="utf-8") as fh:
            fh.write(jobs_file(found, self.mounts))
        self.files = [o.eval_config, path]
        self.eval_results = results_uri(o.s3) if o.s3 else None
        self.log(f"--eval: {len(found)} checkpoint(s): " + ", ".join(f.name for f in found)
                 + (f"; results at {self.eval_results} (units finished there are skipped)" if self.eval_results else ""))

    def spec(self, image_uri: str) -> JobSpec:
        o = self.o
        if self.eval_only:
            from rlvr.cloud.evaljob import JOBS_NAME

            return JobSpec(name=self.name, config_name="", image=image_uri, role=self.role or "",
                           jobs_uri=self.jobs_uri or "", inputs_uri=self.inputs_uri or "",
                           instance_type=o.instance_type, volume_gb=o.volume_gb, max_runtime_s=int(o.max_hours * 3600),
                           env=self.env, channels=self.channels if not o.local else {},
                           eval_config_name=os.path.basename(o.eval_config), eval_gpus=self.eval_gpus,
                           sync_interval=o.sync_interval, eval_jobs_name=JOBS_NAME, eval_results=self.eval_results)
        return JobSpec(name=self.name, config_name=os.path.basename(o.config), image=image_uri, role=self.role or "",
                       jobs_uri=self.jobs_uri or "", inputs_uri=self.inputs_uri or "",
                       instance_type=o.instance_type, instance_count=o.instance_count, volume_gb=o.volume_gb,
                       max_runtime_s=int(o.max_hours * 3600), sets=list(o.sets), env=self.env,
                       channels=self.channels if not o.local else {},
                       eval_config_name=os.path.basename(o.eval_config) if o.eval_config else None,
                       train_gpus=self.train_gpus, eval_gpus=self.eval_gpus, sync_interval=o.sync_interval)

    # -- the whole flow

    def run(self) -> dict:
        self.check()
        docker = img.Docker(dry_run=self.o.dry_run, log=self.log)
        if self.o.build or self.o.push or self.o.local:
            docker.require()
        if self.o.local:
            return self._local(docker)
        return self._sagemaker(docker)

    def _check_inputs(self, aws=None, dry_run: bool = False) -> None:
        """The job's s3:// inputs exist (rlvr.cloud.inputs): one line per missing one, then
        exit 1 with nothing sent. A dry run or --local without credentials skips it, saying so."""
        if not self.inputs:
            return
        from rlvr.cloud.aws import Aws
        from rlvr.cloud.inputs import missing
        from rlvr.s3 import make_client

        aws = aws or Aws(self.o.region, self.o.profile)
        if dry_run:
            try:
                aws.require_credentials()
            except (Failure, UsageError) as e:
                self.log(f"cannot check the job's S3 inputs ({e})")
                return
        s3 = make_client(region=aws.region, profile=self.o.profile)
        lines = missing(self.inputs, s3, self.log)
        for line in lines:
            self.log(line)
        if lines:
            raise Failure(f"{len(lines)} input(s) the job would read are not on S3 (listed above): nothing sent")

    def _build(self, docker: img.Docker) -> None:
        if not self.o.build:
            return
        context = self.o.context or _project_root()
        img.build(docker, self.image, context, self.o.dockerfile)

    def _sagemaker(self, docker: img.Docker) -> dict:
        from rlvr.cloud.aws import Aws, as_failure, call, error_code

        o = self.o
        aws = Aws(o.region, o.profile)
        if o.dry_run:
            try:
                registry = f"{aws.account()}.dkr.ecr.{aws.require_region()}.amazonaws.com"
            except (Failure, UsageError) as e:
                self.log(f"dry run: cannot look up the account ({e}); the image URI shows ACCOUNT and REGION")
                registry = f"ACCOUNT.dkr.ecr.{aws.region or 'REGION'}.amazonaws.com"
            uri = self.image.uri(registry)
            self._check_inputs(aws, dry_run=True)
            self._build(docker)
            if o.push:
                docker.run(["login", "--username", "AWS", "--password-stdin", f"https://{uri.split('/')[0]}"], "login")
                img.push(docker, self.image, uri)
            request = self.spec(uri).request()
            self.log(f"would upload {' and '.join(self.files)} to {self.inputs_uri}")
            if self.eval_only:
                self.log(f"{os.path.basename(self.files[-1])}: {open(self.files[-1], encoding='utf-8').read().strip()}")
            shown = json.loads(json.dumps(request))
            if "RAY_AUTH_TOKEN" in shown["Environment"]:
                shown["Environment"]["RAY_AUTH_TOKEN"] = "(hidden: a random token for the job's Ray cluster)"
            self.out(json.dumps(shown, indent=2))
            return request
        aws.require_region()
        aws.require_credentials()
        # (3) read-only checks
        iam = aws.client("iam")
        role_name = self.role.split(":role/", 1)[1].rsplit("/", 1)[-1]
        try:
            iam.get_role(RoleName=role_name)
        except Exception as e:  # noqa: BLE001
            code = error_code(e)
            if code == "NoSuchEntity":
                raise Failure(f"IAM role {self.role} does not exist (see docs/cloud.md for the role SageMaker needs)") from None
            if code in ("AccessDenied", "AccessDeniedException"):
                self.log(f"warning: cannot check the role ({code}: iam:GetRole not allowed); SageMaker will")
            else:
                raise as_failure(e, "iam GetRole") from None
        sm = aws.client("sagemaker")
        try:
            sm.describe_training_job(TrainingJobName=self.name)
            taken = True
        except Exception as e:  # noqa: BLE001
            if error_code(e) not in ("ValidationException", "ResourceNotFound"):
                raise as_failure(e, f"sagemaker DescribeTrainingJob {self.name}") from None
            taken = False
        if taken:
            raise Failure(f"a training job named {self.name} already exists (names are unique per account "
                          "and region: choose another --name)")
        from rlvr.s3 import make_client

        bucket, _ = _s3_parts(o.s3, "--s3")
        s3 = make_client(region=aws.region, profile=o.profile)  # the same account and region as the job
        call(lambda: s3.head_bucket(Bucket=bucket), f"s3 HeadBucket {bucket}",
             {"404": f"S3 bucket {bucket} does not exist (--s3 {o.s3})", "NoSuchBucket": f"S3 bucket {bucket} does not exist",
              "403": f"S3 bucket {bucket}: access denied"})
        self._check_inputs(aws)
        repo_uri = None
        if self.image.registry is None:  # a repository of this account's ECR
            # read-only: with --push a missing repository is created only after the build
            repo_uri = (img.ecr_lookup(aws, self.image.repository) if o.push
                        else img.ecr_repository(aws, self.image.repository, create=False))
            if not o.push:
                img.ecr_require_tag(aws, self.image.repository, self.image.tag)
        # (4) image
        self._build(docker)
        if self.image.registry is None:
            if repo_uri is None:
                repo_uri = img.ecr_repository(aws, self.image.repository, create=True)
            uri = f"{repo_uri}:{self.image.tag}"
        else:  # a full image URI: SageMaker pulls it as it is
            uri = self.image.uri()
        if o.push:
            img.ecr_login(aws, docker)
            img.push(docker, self.image, uri)
        # (5) inputs, (6) the request
        spec = self.spec(uri)
        request = spec.request()
        ib, ip = _s3_parts(self.inputs_uri, "--s3")
        uploaded = []
        try:
            for path in self.files:
                key = f"{ip}/{os.path.basename(path)}"
                with open(path, "rb") as fh:
                    call(lambda: s3.put_object(Bucket=ib, Key=key, Body=fh.read()), f"s3 PutObject s3://{ib}/{key}")
                uploaded.append(key)
            arn = call(lambda: sm.create_training_job(**request), f"sagemaker CreateTrainingJob {self.name}",
                       {"ResourceInUse": f"a training job named {self.name} already exists (choose another --name)"})
        except BaseException:
            for key in uploaded:
                try:
                    s3.delete_object(Bucket=ib, Key=key)
                except Exception:  # noqa: BLE001 - best effort: the failure being raised matters more
                    pass
            raise
        arn = arn["TrainingJobArn"]
        # (7) the job log
        where = f"sagemaker {aws.region} {o.instance_type} x{o.instance_count}"
        joblog.append(o.job_log, self.name, o.config or o.eval_config, o.description, where)
        result = {"job": self.name, "arn": arn, "image": uri, "s3": f"{self.jobs_uri}{self.name}/",
                  "job_log": o.job_log}
        self.out(json.dumps(result))
        self.log(f"submitted {self.name}; follow it with: rlvr-s3-sync watch {self.name} --src {self.jobs_uri} "
                 f"--dest results/   fetch it with: rlvr-s3-sync pull {self.name} results/ --src {self.jobs_uri}")
        return result

    def _local(self, docker: img.Docker) -> dict:
        o = self.o
        opt_ml = os.path.join(o.local_dir, self.name)
        spec = self.spec(self.image.local)
        hps = spec.hyperparameters()
        env = {"TRAINING_JOB_NAME": self.name, **self.env}
        if self.jobs_uri:
            env["RLVR_JOB_S3"] = self.jobs_uri
        mounts = {path: f"/opt/ml/input/data/{n}" for n, path in self.channels.items()}
        mounts.update(getattr(self, "mounts", {}))
        args = img.local_run_args(self.image.local, self.name, opt_ml, self.local_gpus, env, mounts)
        if o.gpus == "all":
            i = args.index("--entrypoint")
            args[i:i] = ["--gpus", "all"]
        self._check_inputs(dry_run=True)  # without credentials the container cannot read them either
        if o.dry_run:
            self._build(docker)
            shown = {"job": self.name, "opt_ml": opt_ml, "hyperparameters": hps, "docker": args}
            if self.eval_only:
                shown["eval_jobs"] = json.loads(open(self.files[-1], encoding="utf-8").read())
            self.out(json.dumps(shown, indent=2))
            return {"docker": args}
        if os.path.exists(opt_ml):
            raise UsageError(f"{opt_ml} exists: choose another --name or --local-dir")
        self._build(docker)
        write_opt_ml(opt_ml, hps, self.files, list(self.channels))
        where = "local " + (f"gpus {o.gpus}" if o.gpus else "cpu")
        joblog.append(o.job_log, self.name, o.config or o.eval_config, o.description, where)
        self.out(json.dumps({"job": self.name, "opt_ml": opt_ml, "run_folder": os.path.join(opt_ml, "model")}))
        docker.run(args, f"the job's container {self.name}")
        return {"job": self.name, "opt_ml": opt_ml}


def write_opt_ml(opt_ml: str, hps: dict[str, str], configs: list[str], channels: list[str]) -> None:
    """SageMaker's /opt/ml layout for one host: input/config/*.json, the config channel, model/, output/."""
    cfg_dir = os.path.join(opt_ml, "input", "config")
    chan = os.path.join(opt_ml, "input", "data", CONFIG_CHANNEL)
    for d in (cfg_dir, chan, os.path.join(opt_ml, "model"), os.path.join(opt_ml, "output")):
        os.makedirs(d, exist_ok=True)
    for path in configs:
        shutil.copyfile(path, os.path.join(chan, os.path.basename(path)))

    def dump(name: str, obj) -> None:
        with open(os.path.join(cfg_dir, name), "w") as fh:
            json.dump(obj, fh, indent=2)

    dump("hyperparameters.json", hps)
    dump("inputdataconfig.json", {n: {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated"}
                                  for n in [CONFIG_CHANNEL, *channels]})
    dump("resourceconfig.json", {"current_host": "algo-1", "hosts": ["algo-1"]})


def _project_root() -> str:
    from rlvr.runs import code_repo

    root = code_repo()
    if root is None or not os.path.isfile(os.path.join(root, img.DOCKERFILE)):
        here = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        if os.path.isfile(os.path.join(here, img.DOCKERFILE)):
            return here
        raise UsageError("--build: cannot find the project's Dockerfile; give --context DIR")
    return root


def describe(name: str, region: str | None = None, profile: str | None = None) -> dict:
    from rlvr.cloud.sagemaker import describe as sm_describe

    return sm_describe(_aws(region, profile), name)


def _aws(region: str | None, profile: str | None):
    from rlvr.cloud.aws import Aws

    aws = Aws(region, profile)
    aws.require_region()
    aws.require_credentials()
    return aws


def stop(name: str, region: str | None, profile: str | None, log: Callable[[str], None]) -> dict:
    from rlvr.cloud.sagemaker import stop as sm_stop

    return sm_stop(_aws(region, profile), check_job_name(name), log)


def list_jobs(region: str | None, profile: str | None, contains: str | None = None, status: str | None = None,
              limit: int = 50, job_log: str | None = None):
    """The account's training jobs, newest first, each with the config and description of its
    job log row when the job log has one."""
    from rlvr.cloud.sagemaker import list_jobs as sm_list

    rows = {}
    if job_log and os.path.isfile(job_log):
        rows = {r["job"]: r for r in joblog.rows(job_log)}
    for j in sm_list(_aws(region, profile), contains, status, limit):
        row = rows.get(j["job"])
        if row:
            j.update(config=row.get("config"), description=row.get("description"))
        yield j

