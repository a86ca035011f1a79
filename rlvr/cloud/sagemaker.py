"""SageMaker training jobs for rlvr-train: job names, the CreateTrainingJob request, submit, describe.

The job runs the project's image with ``python -m rlvr.cloud.entrypoint`` (see
rlvr.cloud.entrypoint); the config travels as the ``config`` input channel, --set overrides
as hyperparameters, and the S3 root of the job's outputs as the RLVR_JOB_S3 environment
variable. SageMaker's own output (the run folder, as model.tar.gz at the end) goes to the
same place, so everything of job J lives under ``s3://BUCKET/PREFIX/checkpoints/J/``.
"""

from __future__ import annotations

import datetime as _dt
import re
from dataclasses import dataclass, field

from rlvr.errors import UsageError

# SageMaker's rule for training job names (CreateTrainingJob TrainingJobName).
JOB_NAME_RE = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}$")
JOB_NAME_RULE = "1 to 63 letters, digits and hyphens, starting and ending with a letter or digit"
DEFAULT_INSTANCE = "ml.p4de.24xlarge"
DEFAULT_PREFIX = "rlvr"
ENTRYPOINT = ["python3", "-m", "rlvr.cloud.entrypoint"]
CONFIG_CHANNEL = "config"
# Hyperparameters the entrypoint reads itself; every other one is a --set override.
HP_CONFIG = "rlvr_config"
HP_EVAL_CONFIG = "rlvr_eval_config"
HP_TRAIN_GPUS = "rlvr_train_gpus"
HP_EVAL_GPUS = "rlvr_eval_gpus"
HP_SYNC_INTERVAL = "rlvr_sync_interval"
ENV_JOB_S3 = "RLVR_JOB_S3"
_MAX_HP_VALUE = 2500  # SageMaker's limit on one hyperparameter value


def check_job_name(name: str) -> str:
    """Return `name` if SageMaker accepts it as a training job name, else raise UsageError."""
    if not JOB_NAME_RE.match(name or "") or len(name) > 63:  # the pattern alone lets hyphens run past 63
        why = ("longer than 63 characters" if len(name) > 63 else
               "empty" if not name else f"not {JOB_NAME_RULE}")
        raise UsageError(f"job name {name!r} is {why} (SageMaker's rule: [a-zA-Z0-9](-*[a-zA-Z0-9]){{0,62}})")
    return name


def default_job_name(prefix: str = DEFAULT_PREFIX, now: _dt.datetime | None = None) -> str:
    """`<prefix>-YYYYMMDD-HHMMSS` (UTC), checked against SageMaker's rule."""
    now = now or _dt.datetime.now(_dt.timezone.utc)
    if not prefix:
        raise UsageError("--prefix must not be empty")
    name = f"{prefix}-{now.strftime('%Y%m%d-%H%M%S')}"
    try:
        return check_job_name(name)
    except UsageError:
        raise UsageError(f"--prefix {prefix!r} gives the job name {name!r}, which SageMaker refuses "
                         f"({JOB_NAME_RULE}; the prefix may have at most 47 characters)") from None


def parse_gpus(value: str | None, option: str) -> list[int] | None:
    """'0-5' or '0,1,2' or '0-3,6' -> sorted GPU indices; None passes through."""
    if value is None or value == "":
        return None
    out: set[int] = set()
    try:
        for part in value.split(","):
            part = part.strip()
            if not part:
                continue
            lo, sep, hi = part.partition("-")
            a, b = int(lo), int(hi) if sep else int(lo)
            if a < 0 or b < a:
                raise ValueError
            out.update(range(a, b + 1))
    except ValueError:
        raise UsageError(f"{option} {value!r}: expected GPU indices like 0,1,2 or 0-5") from None
    if not out:
        raise UsageError(f"{option} {value!r}: no GPU given")
    return sorted(out)


def gpu_list(gpus: list[int] | None) -> str:
    return ",".join(map(str, gpus or []))


@dataclass
class JobSpec:
    """Everything a submission needs; `request()` turns it into CreateTrainingJob arguments."""

    name: str
    config_name: str            # the config file's name in the config channel (its stem names the run folder)
    image: str                  # full image URI
    role: str
    jobs_uri: str               # s3://BUCKET/PREFIX/checkpoints/ (job J's outputs under J/)
    inputs_uri: str             # s3://BUCKET/PREFIX/inputs/J/ (the config channel)
    instance_type: str = DEFAULT_INSTANCE
    instance_count: int = 1
    volume_gb: int = 500
    max_runtime_s: int = 5 * 86400
    sets: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    channels: dict[str, str] = field(default_factory=dict)   # name -> s3:// prefix
    eval_config_name: str | None = None
    train_gpus: list[int] | None = None
    eval_gpus: list[int] | None = None
    sync_interval: float | None = None

    def hyperparameters(self) -> dict[str, str]:
        hp = {HP_CONFIG: self.config_name}
        for s in self.sets:
            key, sep, value = s.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"--set {s!r}: expected KEY=VALUE")
            if key.startswith(("rlvr_", "sagemaker_")):
                raise UsageError(f"--set {s!r}: keys starting with rlvr_ or sagemaker_ are reserved")
            if len(value) > _MAX_HP_VALUE:
                raise UsageError(f"--set {key}: the value is longer than SageMaker's {_MAX_HP_VALUE} characters")
            hp[key.strip()] = value
        if self.eval_config_name:
            hp[HP_EVAL_CONFIG] = self.eval_config_name
        if self.train_gpus is not None:
            hp[HP_TRAIN_GPUS] = gpu_list(self.train_gpus)
        if self.eval_gpus is not None:
            hp[HP_EVAL_GPUS] = gpu_list(self.eval_gpus)
        if self.sync_interval is not None:
            hp[HP_SYNC_INTERVAL] = f"{self.sync_interval:g}"
        return hp

    def environment(self) -> dict[str, str]:
        return {**self.env, ENV_JOB_S3: self.jobs_uri}

    def request(self) -> dict:
        """The keyword arguments of sagemaker.create_training_job."""
        def channel(name: str, uri: str) -> dict:
            return {"ChannelName": name, "InputMode": "File",
                    "DataSource": {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": uri,
                                                    "S3DataDistributionType": "FullyReplicated"}}}

        req = {
            "TrainingJobName": check_job_name(self.name),
            "AlgorithmSpecification": {"TrainingImage": self.image, "TrainingInputMode": "File",
                                       "ContainerEntrypoint": list(ENTRYPOINT)},
            "RoleArn": self.role,
            "HyperParameters": self.hyperparameters(),
            "InputDataConfig": [channel(CONFIG_CHANNEL, self.inputs_uri)]
            + [channel(n, u) for n, u in sorted(self.channels.items())],
            "OutputDataConfig": {"S3OutputPath": self.jobs_uri},
            "ResourceConfig": {"InstanceType": self.instance_type, "InstanceCount": self.instance_count,
                               "VolumeSizeInGB": self.volume_gb},
            "StoppingCondition": {"MaxRuntimeInSeconds": self.max_runtime_s},
            "Environment": self.environment(),
        }
        return req


def describe(aws, name: str) -> dict:
    """The job's describe_training_job answer, reduced to what a user follows (JSON-ready)."""
    from rlvr.cloud.aws import call

    sm = aws.client("sagemaker")
    missing = f"no training job named {name!r} in {aws.region}"
    d = call(lambda: sm.describe_training_job(TrainingJobName=check_job_name(name)),
             f"sagemaker DescribeTrainingJob {name}", {"ValidationException": missing, "ResourceNotFound": missing})
    keep = ("TrainingJobName", "TrainingJobArn", "TrainingJobStatus", "SecondaryStatus", "FailureReason",
            "CreationTime", "TrainingStartTime", "TrainingEndTime", "HyperParameters", "ModelArtifacts",
            "OutputDataConfig", "ResourceConfig", "RoleArn")
    out = {k: d[k] for k in keep if k in d}
    out["Image"] = d.get("AlgorithmSpecification", {}).get("TrainingImage")
    for k, v in list(out.items()):
        if isinstance(v, _dt.datetime):
            out[k] = v.isoformat()
    return out
