"""rlvr-submit: run rlvr-train CONFIG (or rlvr-eval over checkpoints, --eval) as a SageMaker job, or in the same image locally (see rlvr.cloud)."""

from __future__ import annotations

import json
import sys

import click

from rlvr.cli import UsageError, run, say, with_examples


HELP = with_examples(
    """Submit rlvr-train CONFIG as a SageMaker training job in the project's image.

    The job runs `python -m rlvr.cloud.entrypoint`, which runs `rlvr-train CONFIG` (with the
    --set overrides, sent as hyperparameters) in $SM_MODEL_DIR/<config_stem>_<time>/ and
    uploads checkpoints and traces while it runs to s3://BUCKET/PREFIX/checkpoints/JOB/
    (<run>_step<N>/, <run>_final/, traces/, and SageMaker's output/model.tar.gz at the end),
    where `rlvr-s3-sync watch JOB --src s3://BUCKET/PREFIX/checkpoints/` follows it and
    `rlvr-s3-sync pull s3://BUCKET/PREFIX/checkpoints/JOB results/` fetches it. The config
    itself goes to s3://BUCKET/PREFIX/inputs/JOB/ as the job's `config` channel.

    The job name (--name, default <prefix>-YYYYMMDD-HHMMSS) is checked against SageMaker's
    rule [a-zA-Z0-9](-*[a-zA-Z0-9]){0,62} before anything is sent. Every submission appends
    a row (job, config, --description, time, where) to the job log (docs/job_log.md).

    --build builds the Dockerfile of the project (CUDA vLLM + rlvr); --push pushes it to
    this account's ECR (the repository is created when missing; docker logs in with
    GetAuthorizationToken). Without --push the image must already be in ECR. --local runs
    the same image with docker on this machine (--gpus), SageMaker's folders under
    LOCAL_DIR/JOB/. --eval-config runs `rlvr-eval --watch` beside training in the same job,
    on --eval-gpus (training on --train-gpus; by default the last quarter of the instance's
    GPUs evaluates: 0-5 train and 6-7 evaluate on an 8-GPU instance). Before anything is
    sent, the s3:// inputs the job would read (model.path, data.source, data.order, datasets
    under RLVR_S3_DATASETS given with --env, --input channels) are checked: one line per
    missing input, exit 1. --dry-run prints the request (JSON, stdout) and the docker
    commands (stderr) and sends nothing.

    --eval CHECKPOINTS... --eval-config FILE submits an eval-only job instead: `rlvr-eval
    --jobs` over the checkpoints, on the config's tasks, in the same image (--local: docker
    here). A checkpoint is a folder holding a model, a job's or run's checkpoints (a job's
    S3 root: its <run>_step<N>/), a glob over them (quote it), or a run name (the job NAME
    under --s3's checkpoints/). s3:// ones on SageMaker; local ones with --local (mounted
    read-only). Results go to s3://BUCKET/PREFIX/evals/<job>/<checkpoint>/<task>/ as they
    finish; a job submitted again fetches them first and skips the finished units. The job's
    log lists every checkpoint and task evaluated, and each one not evaluated.

    --describe JOB prints a job's status (JSON); --stop JOB stops a job in progress (its
    checkpoints and traces stay on S3); --list prints the account's training jobs, newest
    first, one JSON line each, with the config and description of their job log rows
    (--list-max, --status; names containing --prefix when it is given).

    Credentials and region come from boto3's chain (AWS_PROFILE, AWS_ACCESS_KEY_ID, ...,
    --region). The IAM permissions needed are in docs/cloud.md. Exit status: 0 submitted
    (or the local container succeeded), 1 docker or AWS failed (no docker, no credentials, a
    missing role, bucket, repository, image or input, a refused request), 2 bad usage (a bad job
    name, no --role or --s3, a bad config), 130 interrupted. Nothing is sent before the
    checks pass, and a failed CreateTrainingJob removes the uploaded config again.
    """,
    """
rlvr-submit configs/qwen3-1.7B-gsm8k.yaml --role arn:aws:iam::123456789012:role/sagemaker --s3 s3://bucket/rlvr/
export RLVR_SAGEMAKER_ROLE=arn:aws:iam::123456789012:role/sagemaker RLVR_SAGEMAKER_S3=s3://bucket/rlvr/
rlvr-submit configs/qwen3-1.7B-math.yaml --build --push --prefix annotations-adhoc -d "math, lr 1e-6"
rlvr-submit configs/qwen3-1.7B-gsm8k.yaml --set train.lr=1e-6 --instance-type ml.p5.48xlarge --dry-run
rlvr-submit configs/qwen3-1.7B-mix.yaml --eval-config configs/eval-watch.yaml --train-gpus 0-5 --eval-gpus 6-7
rlvr-submit configs/qwen3-1.7B-gsm8k.yaml --local --gpus 0,1,2,3 --build
rlvr-submit --eval s3://bucket/rlvr/checkpoints/annotations-adhoc-20261123-101500/ --eval-config configs/eval/lm_eval_watch.yaml
rlvr-submit --eval annotations-adhoc-20261123-101500 's3://bucket/rlvr/checkpoints/other-job/*_step1*' --eval-config eval.yaml
rlvr-submit --eval results/run1 --eval-config configs/eval/lm_eval_watch.yaml --local --gpus 0,1
rlvr-submit --describe annotations-adhoc-20261123-101500
rlvr-submit --stop annotations-adhoc-20261123-101500
rlvr-submit --list --prefix annotations-adhoc --status InProgress
""",
)


@click.command(help=HELP)
@click.argument("paths", nargs=-1, metavar="CONFIG | --eval CHECKPOINTS...")
@click.option("--eval", "eval_only", is_flag=True, help="An eval-only job: rlvr-eval --jobs over the CHECKPOINTS "
              "given (folders, s3:// prefixes, run names or globs), on --eval-config's tasks.")
@click.option("--name", help="Job name (default: PREFIX-YYYYMMDD-HHMMSS, UTC).")
@click.option("--prefix", envvar="RLVR_JOB_PREFIX", default="rlvr", show_default=True,
              help="Prefix of the default job name (env RLVR_JOB_PREFIX), e.g. annotations-adhoc.")
@click.option("-d", "--description", default="", help="What the job is for: goes into the job log.")
@click.option("--job-log", envvar="RLVR_JOB_LOG", default="docs/job_log.md", show_default=True,
              type=click.Path(dir_okay=False), help="Markdown job log to append to (env RLVR_JOB_LOG).")
@click.option("--role", metavar="ARN", help="IAM role SageMaker runs the job as (env RLVR_SAGEMAKER_ROLE, else "
              "SageMaker.TrainingJob.RoleArn of the SageMaker SDK's ~/.config/sagemaker/config.yaml).")
@click.option("--s3", "s3", metavar="S3_URI", envvar="RLVR_SAGEMAKER_S3",
              help="s3://BUCKET/PREFIX/ for the job's outputs (PREFIX/checkpoints/JOB/) and inputs (env RLVR_SAGEMAKER_S3).")
@click.option("--image", envvar="RLVR_IMAGE", default="rlvr:latest", show_default=True,
              help="REPOSITORY[:TAG] in this account's ECR, or a full image URI (env RLVR_IMAGE).")
@click.option("--instance-type", default="ml.p4de.24xlarge", show_default=True, help="SageMaker instance type.")
@click.option("--instance-count", type=click.IntRange(1), default=1, show_default=True,
              help="Number of instances (above 1: one Ray cluster over them, authenticated by a random "
                   "RAY_AUTH_TOKEN in the job's environment).")
@click.option("--volume-gb", type=click.IntRange(1), default=500, show_default=True, help="Instance storage (GB).")
@click.option("--max-hours", type=click.FloatRange(0, min_open=True), default=120, show_default=True,
              help="Stop the job after this many hours.")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
              help="rlvr-train config override, sent as a hyperparameter (repeatable).")
@click.option("--env", "env", multiple=True, metavar="NAME=VALUE",
              help="Environment variable in the job, e.g. RLVR_S3_MODELS=s3://... (repeatable).")
@click.option("--input", "inputs", multiple=True, metavar="NAME=URI",
              help="Input channel (s3:// prefix; a folder with --local): data -> RLVR_DATA_DIR, model -> model.path.")
@click.option("--eval-config", type=click.Path(dir_okay=False), metavar="FILE",
              help="Run rlvr-eval --watch beside training, or the tasks of --eval (YAML: rlvr's form, benchmarks, "
                   "interval, args; the users' lm-eval watch config; or an OLMES watch config; see docs/cloud.md).")
@click.option("--train-gpus", metavar="LIST", help="GPUs for training with --eval-config, e.g. 0-5 (default: all but "
              "--eval-gpus, else the first three quarters).")
@click.option("--eval-gpus", metavar="LIST", help="GPUs for evaluation with --eval-config, e.g. 6-7 (default: the "
              "GPUs not training, else the last quarter).")
@click.option("--sync-interval", type=click.FloatRange(0.5), metavar="SECONDS",
              help="Seconds between uploads of the traces to S3 in the job (default 10).")
@click.option("--build", is_flag=True, help="docker build the project's Dockerfile first.")
@click.option("--push", is_flag=True, help="Push the image to ECR first (creates the repository when missing).")
@click.option("--dockerfile", type=click.Path(dir_okay=False), help="--build: Dockerfile (default: the project's).")
@click.option("--context", type=click.Path(file_okay=False), help="--build: build context (default: the project).")
@click.option("--local", is_flag=True, help="Run the image with docker on this machine instead of SageMaker.")
@click.option("--gpus", metavar="LIST|all", help="--local: GPUs for the container, e.g. 0,1,2,3.")
@click.option("--local-dir", default="results", show_default=True, type=click.Path(file_okay=False),
              help="--local: SageMaker's /opt/ml for job J is LOCAL_DIR/J/.")
@click.option("--region", help="AWS region (default: boto3's, e.g. AWS_DEFAULT_REGION).")
@click.option("--profile", help="AWS profile (default: boto3's, e.g. AWS_PROFILE).")
@click.option("--dry-run", is_flag=True, help="Print the request and the docker commands; send and run nothing.")
@click.option("--describe", "describe_job", metavar="JOB", help="Print the status of a submitted job (JSON) and exit.")
@click.option("--stop", "stop_job", metavar="JOB", help="Stop a training job in progress (StopTrainingJob) and exit.")
@click.option("--list", "list_jobs", is_flag=True, help="List the account's training jobs, newest first (JSON lines).")
@click.option("--list-max", type=click.IntRange(1), default=50, show_default=True, help="--list: at most this many jobs.")
@click.option("--status", type=click.Choice(["InProgress", "Completed", "Failed", "Stopping", "Stopped"]),
              help="--list: only jobs in this status.")
@click.pass_context
def cmd(ctx, paths, eval_only, describe_job, stop_job, list_jobs, list_max, status, **kw):
    from rlvr.cloud import submit

    ops = [o for o, on in (("--describe", describe_job), ("--stop", stop_job), ("--list", list_jobs)) if on]
    if len(ops) > 1:
        raise UsageError(f"choose one of {', '.join(ops)}")
    if ops and paths:
        raise UsageError(f"{ops[0]} takes {'no CONFIG' if list_jobs else 'a job name, not a CONFIG'}")
    if status and not list_jobs:
        raise UsageError("--status is for --list")
    if describe_job:
        sys.stdout.write(json.dumps(submit.describe(describe_job, kw["region"], kw["profile"]), indent=2) + "\n")
        return
    if stop_job:
        sys.stdout.write(json.dumps(submit.stop(stop_job, kw["region"], kw["profile"], say)) + "\n")
        return
    if list_jobs:
        given = ctx.get_parameter_source("prefix") != click.core.ParameterSource.DEFAULT
        for job in submit.list_jobs(kw["region"], kw["profile"], kw["prefix"] if given else None, status, list_max,
                                    kw["job_log"]):
            sys.stdout.write(json.dumps(job) + "\n")
        return
    if not paths:
        raise UsageError("missing CHECKPOINTS (after --eval)" if eval_only else
                         "missing CONFIG (or --eval CHECKPOINTS..., --describe JOB, --stop JOB, --list)")
    if not eval_only and len(paths) > 1:
        raise UsageError(f"one CONFIG, not {len(paths)} (--eval takes several CHECKPOINTS)")
    kw = {k: (list(v) if isinstance(v, tuple) else v) for k, v in kw.items()}
    config, ckpts = (None, list(paths)) if eval_only else (paths[0], [])
    submit.Submitter(submit.SubmitOptions(config=config, eval_checkpoints=ckpts, **kw), out=lambda s: sys.stdout.write(s + "\n"), log=say).run()


main = run(cmd)


if __name__ == "__main__":
    main()
