"""Cloud runs: submit rlvr-train (or rlvr-eval over checkpoints) to SageMaker (or the same image under local docker) and host it there.

    rlvr.cloud.submit      rlvr-submit's flow: checks first, then build/push, upload the config, one request
    rlvr.cloud.sagemaker   job names, the CreateTrainingJob request, instance GPUs, describe/stop/list (boto3)
    rlvr.cloud.inputs      the s3:// inputs a job reads (model, data, curricula, channels), checked before submitting
    rlvr.cloud.image       docker build, ECR repository + login + push, docker run for --local
    rlvr.cloud.joblog      the job log (docs/job_log.md): opaque job name -> config, description, time
    rlvr.cloud.layout      the job's S3 layout and the live uploads of a run folder into it
    rlvr.cloud.entrypoint  inside the job: SageMaker's environment -> rlvr-train (and rlvr-eval --watch)
    rlvr.cloud.evalspec    --eval-config: the rlvr-eval --watch that runs beside training (any of three forms)
    rlvr.cloud.evaljob     eval-only jobs (--eval): which checkpoints, S3 results, the report of what was evaluated
    rlvr.cloud.aws         boto3 sessions and clients with rlvr's one-line errors

rlvr-submit (rlvr/commands/submit.py) is the command line; docs/cloud.md the whole flow.
"""
