"""SageMaker training jobs for rlvr-train: job names, the CreateTrainingJob request, the GPUs
of an instance type (--eval-config's default split), describe, stop and list.

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
HP_EVAL_JOBS = "rlvr_eval_jobs"          # an eval-only job: rlvr-eval --jobs over this file of the config channel
HP_EVAL_RESULTS = "rlvr_eval_results"    # an eval-only job: the s3:// prefix of the results (shared by every job)
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


def gpu_ranges(gpus: list[int]) -> str:
    """[0, 1, 2, 5] -> '0-2,5'."""
    out, run = [], []
    for g in sorted(gpus):
        if run and g != run[-1] + 1:
            out.append(run)
            run = []
        run.append(g)
    if run:
        out.append(run)
    return ",".join(f"{r[0]}-{r[-1]}" if len(r) > 1 else str(r[0]) for r in out)


# GPUs per SageMaker training instance type (AWS's instance pages); others: not known here.
_GPUS = {"p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8, "p4d.24xlarge": 8,
         "p4de.24xlarge": 8, "p5.48xlarge": 8, "p5e.48xlarge": 8, "p5en.48xlarge": 8, "p6-b200.48xlarge": 8,
         "g4dn.12xlarge": 4, "g5.12xlarge": 4, "g5.24xlarge": 4, "g5.48xlarge": 8, "g6.12xlarge": 4,
         "g6.24xlarge": 4, "g6.48xlarge": 8, "g6e.12xlarge": 4, "g6e.24xlarge": 4, "g6e.48xlarge": 8}
_ONE_GPU = re.compile(r"^(?:g4dn|g5|g6|g6e)\.(?:xlarge|2xlarge|4xlarge|8xlarge|16xlarge)$")


def instance_gpus(instance_type: str) -> int | None:
    """The number of GPUs of a SageMaker instance type (ml.p4de.24xlarge -> 8), None if unknown."""
    t = instance_type.removeprefix("ml.")
    return _GPUS.get(t) or (1 if _ONE_GPU.match(t) else None)


def split_gpus(count: int | None, train: list[int] | None, evals: list[int] | None,
               where: str, want: int | None = None) -> tuple[list[int], list[int], str | None]:
    """The training and evaluation GPUs of a job with --eval-config on `count` GPUs: the lists
    given, the complement of the one given, or by default the last `want` GPUs (the eval
    config's task groups or num_gpus), else the last quarter (at least one) for evaluation:
    0-5 and 6-7 of 8. Returns (train, eval, the line saying what was chosen, or None when both
    were given)."""
    for gpus, option in ((train, "--train-gpus"), (evals, "--eval-gpus")):
        if gpus and count is not None and max(gpus) >= count:
            raise UsageError(f"{option} {gpu_ranges(gpus)}: {where} has {count} GPUs (0-{count - 1})")
    if train is not None and evals is not None:
        return train, evals, None
    if count is None:
        raise UsageError(f"--eval-config: give --train-gpus and --eval-gpus (the number of GPUs of {where} "
                         "is not known here)")
    if count < 2:
        raise UsageError(f"--eval-config needs two GPUs or more, one to train and one to evaluate: {where} has {count}")
    why = ""
    if train is None and evals is None:
        k = min(want, count - 1) if want else max(1, count // 4)
        why = f"; the eval config evaluates on {want}" if want else ""
        train, evals = list(range(count - k)), list(range(count - k, count))
    elif train is None:
        train = [g for g in range(count) if g not in evals]
    else:
        evals = [g for g in range(count) if g not in train]
    if not train or not evals:
        raise UsageError(f"--eval-config: no GPU of {where} is left to {'train' if not train else 'evaluate'} on")
    return train, evals, (f"--eval-config: training on GPUs {gpu_ranges(train)}, evaluating on {gpu_ranges(evals)} "
                          f"({where} has {count} GPUs{why}; --train-gpus and --eval-gpus choose others)")


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
    eval_jobs_name: str | None = None    # an eval-only job (no training config): its jobs file's name
    eval_results: str | None = None      # an eval-only job: where its results go

    def hyperparameters(self) -> dict[str, str]:
        hp = {HP_CONFIG: self.config_name} if self.config_name else {}
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
        if self.eval_jobs_name:
            hp[HP_EVAL_JOBS] = self.eval_jobs_name
        if self.eval_results:
            hp[HP_EVAL_RESULTS] = self.eval_results
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


ENDED = ("Completed", "Failed", "Stopped")
STATUSES = ("InProgress", "Completed", "Failed", "Stopping", "Stopped")


def stop(aws, name: str, log) -> dict:
    """StopTrainingJob for a job in progress (SageMaker sends its container SIGTERM, then
    SIGKILL after 120 s; the entry point passes SIGTERM on to rlvr-train). A job that has
    ended or is stopping already is left alone and said so. Returns {job, status}."""
    from rlvr.cloud.aws import call

    status = describe(aws, name)["TrainingJobStatus"]
    if status == "InProgress":
        sm = aws.client("sagemaker")
        call(lambda: sm.stop_training_job(TrainingJobName=name), f"sagemaker StopTrainingJob {name}")
        status = describe(aws, name)["TrainingJobStatus"]
        log(f"{name}: stop requested ({status}); its last checkpoint and traces stay on S3")
    else:
        log(f"{name}: already {status}, nothing to stop")
    return {"job": name, "status": status}


def list_jobs(aws, contains: str | None = None, status: str | None = None, limit: int = 50):
    """The account's training jobs in this region, newest first (ListTrainingJobs, paged),
    as {job, status, secondary_status, created, ended, arn}."""
    from rlvr.cloud.aws import call

    sm = aws.client("sagemaker")
    args: dict = {"SortBy": "CreationTime", "SortOrder": "Descending"}
    if contains:
        args["NameContains"] = contains
    if status:
        args["StatusEquals"] = status
    left, token = limit, None
    while left > 0:
        page = call(lambda: sm.list_training_jobs(**args, MaxResults=min(left, 100), **({"NextToken": token} if token else {})),
                    "sagemaker ListTrainingJobs")
        for j in page.get("TrainingJobSummaries", [])[:left]:
            left -= 1
            when = {k: (j[src].isoformat() if isinstance(j.get(src), _dt.datetime) else j.get(src))
                    for k, src in (("created", "CreationTime"), ("ended", "TrainingEndTime"))}
            yield {"job": j["TrainingJobName"], "status": j.get("TrainingJobStatus"),
                   "secondary_status": j.get("SecondaryStatus"), **when, "arn": j.get("TrainingJobArn")}
        token = page.get("NextToken")
        if not token:
            return

