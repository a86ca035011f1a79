"""rlvr-train's configuration: every field, its default and what it means.

A YAML file sets any subset; `--set section.key=value` overrides it; unknown keys and wrong
types are errors. The resolved config is saved as config.yaml in every run folder.

The sections live in two modules that import nothing of rlvr.train: rlvr.train.config_rollout
(model, data, rollout, verify, sync, eval, teacher) and rlvr.train.config_trainer (train,
checkpoint, dapo, sft); this one adds upload, log and ray, assembles TrainConfig and checks it.
Every name is importable from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rlvr.train.config_rollout import (SYNC_METHODS, SYNC_MODES, DataConfig, EvalConfig, ModelConfig,  # noqa: F401
                                       RolloutConfig, SyncConfig, TeacherConfig, VerifyConfig)
from rlvr.train.config_trainer import (ADVANTAGES, COMPAT, COMPAT_DEFAULTS, DTYPES, LOSS_TYPES, PRESETS,  # noqa: F401
                                       CheckpointConfig, DapoConfig, DistillConfig, LossConfig, SftConfig,
                                       TrainerConfig)


@dataclass
class UploadConfig:
    """How the run folder reaches checkpoint.upload (see docs/s3.md, "Uploads while training")."""

    live: list[str] = field(default_factory=lambda: ["traces/trace.jsonl", "traces/samples.jsonl"])
    """Run-folder files sent while training runs, whenever they changed (at most every trace_interval_s)."""
    trace_interval_s: float = 10.0
    """Least seconds between two uploads of the live files; 0 = after every step. Off the training thread."""
    layout: dict[str, str | None] = field(default_factory=dict)
    """Run-folder path -> key under checkpoint.upload, first match wins, e.g. {"checkpoints/step_{step}/":
    "ckpt/{run}_step{step}/", "traces/": "ckpt/traces/"}; empty = everything under <run folder name>/."""


@dataclass
class LogConfig:
    samples_per_step: int = 2
    """Full samples per step written to traces/samples.jsonl."""
    stdout: bool = False
    """Also print each step's metrics line to stdout (always in traces/trace.jsonl)."""
    trackers: list[str] = field(default_factory=list)
    """Experiment trackers mirroring every trace line: any of tensorboard, wandb, mlflow (rlvr/trackers.py;
    optional packages: pip install rlvr[tensorboard] and so on; --tracker NAME)."""
    spans: bool = True
    """Record spans (who did what when: generate, verify, the trainer's phases, weight sync, checkpoints)
    in traces/spans.jsonl (rlvr/train/spans.py; about a microsecond each)."""
    spans_full_mb: float = 100.0
    """spans.jsonl keeps every span up to this size; past it, every spans_sample_every-th step keeps all
    its spans and the others one outline span per (step, actor, kind)."""
    spans_sample_every: int = 10
    """Past spans_full_mb: the steps that still keep every span (step % spans_sample_every == 0)."""
    stall_s: float = 600.0
    """Stall report (RUN_DIR/stalls/<time>.txt and a stderr line: the open spans and every process's Python
    stacks) when no span has ended for this many seconds; longer than the longest span expected (a
    checkpoint save, a validation); 0 = no watchdog. The run goes on."""
    engine_stats: bool = False
    """vLLM engines keep their own statistics (KV-cache usage, running and waiting requests, preemptions,
    prefix-cache hits), added to each step as engine/<engine>/...: vLLM's disable_log_stats false, which
    also makes vLLM print its periodic statistics lines on stderr (hence off by default)."""


@dataclass
class RayConfig:
    address: str | None = None
    """A cluster to join (host:port, or auto); local: always a Ray of rlvr-train's own; null: RAY_ADDRESS,
    else the cluster `ray start` left running on this machine, else a Ray of its own (rlvr/train/ray_cluster.py)."""
    num_cpus: float | None = None
    temp_dir: str | None = None
    """Ray's temporary folder (logs, sockets, object spilling) when rlvr-train starts Ray, e.g.
    on NVMe when the root filesystem is small (--ray-temp-dir). null: Ray's default (/tmp/ray).
    A `ray start --temp-dir DIR` cluster there is the one joined; a joined cluster keeps its own
    folder (a warning says so when it is another)."""
    num_gpus: float | None = None
    """GPUs a local Ray may use (null: every GPU the driver sees); never more than the driver's
    CUDA_VISIBLE_DEVICES lists. Declaring GPUs on a CPU machine makes logical GPU resources."""
    startup_timeout_s: float = 900.0
    """Longest wait for the actors to be placed and loaded (engines, trainer ranks, their placement group);
    past it the run stops naming what did not start. The resources asked for are checked against the
    cluster before any actor is created."""




@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    train: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    upload: UploadConfig = field(default_factory=UploadConfig)
    log: LogConfig = field(default_factory=LogConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    preset: str = "grpo"
    """grpo or dapo: the defaults of the dapo section's null options."""
    dapo: DapoConfig = field(default_factory=DapoConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    """Validation inside training: benchmarks, every, before_training, limit, n (pass@k)."""
    sft: SftConfig = field(default_factory=SftConfig)
    teacher: TeacherConfig = field(default_factory=TeacherConfig)
    """The teacher of train.distill: model (or policy), top_k, template, chat, engines."""
    compat: str = "none"
    """none or torchtitan: the optimizer defaults of train's null options (torchtitan: weight decay 0.1,
    beta2 0.95, eps 1e-8; grad clip 1.0 either way), for configs ported from torchtitan-based code."""


def optimizer_args(t: TrainerConfig, compat: str = "none") -> dict:
    """AdamW's keyword arguments from train's settings, null ones from the compat preset."""
    d = COMPAT_DEFAULTS[compat]
    pick = {k: getattr(t, k) if getattr(t, k) is not None else v for k, v in d.items()}
    return {"lr": t.lr, "weight_decay": pick["weight_decay"], "betas": (t.adam_beta1, pick["adam_beta2"]),
            "eps": pick["adam_eps"]}


def resolve_preset(cfg: TrainConfig) -> TrainConfig:
    """Fill the dapo section's null options from cfg.preset and train's null optimizer options
    from cfg.compat (in place; returns cfg)."""
    from rlvr.errors import ConfigError

    if cfg.preset not in PRESETS:
        raise ConfigError(f"preset: expected one of {', '.join(PRESETS)}, got {cfg.preset!r}")
    if cfg.compat not in COMPAT:
        raise ConfigError(f"compat: expected one of {', '.join(COMPAT)}, got {cfg.compat!r}")
    for k, v in COMPAT_DEFAULTS[cfg.compat].items():
        if getattr(cfg.train, k) is None:
            setattr(cfg.train, k, v)
    on = cfg.preset == "dapo"
    d = cfg.dapo
    if d.dynamic_sampling is None:
        d.dynamic_sampling = on
    if d.overlong_buffer is None:
        d.overlong_buffer = cfg.rollout.max_tokens // 5 if on else 0
    if d.max_extra_rounds < 0 or d.overlong_buffer < 0 or d.overlong_buffer > cfg.rollout.max_tokens:
        raise ConfigError("dapo.max_extra_rounds must be >= 0 and dapo.overlong_buffer in [0, rollout.max_tokens]")
    return cfg


def check(cfg: TrainConfig) -> list[str]:
    """Validate cross-field constraints; return warnings (raise ConfigError on errors)."""
    from rlvr.errors import ConfigError

    t, r = cfg.train, cfg.rollout
    if t.loss.loss_type not in LOSS_TYPES:
        raise ConfigError(f"train.loss.loss_type: expected one of {', '.join(LOSS_TYPES)}, got {t.loss.loss_type!r}")
    if t.mini_batches < 1 or t.epochs < 1 or t.logprob_chunk_size < 0 or (t.max_tokens_per_microbatch or 1) < 1:
        raise ConfigError("train.mini_batches and train.epochs must be >= 1, train.max_tokens_per_microbatch >= 1 "
                          "(or null), train.logprob_chunk_size >= 0")
    if t.scale_rewards not in ("group", "none"):
        raise ConfigError(f"train.scale_rewards: expected group or none, got {t.scale_rewards!r}")
    if t.advantage not in ADVANTAGES:
        raise ConfigError(f"train.advantage: expected one of {', '.join(ADVANTAGES)}, got {t.advantage!r}")
    for key in ("token_mask", "seq_mask"):
        band = getattr(t.loss, key)
        if band is not None and not (len(band) == 2 and 0 <= band[0] <= 1 <= band[1]):
            raise ConfigError(f"train.loss.{key}: expected [low, high] with 0 <= low <= 1 <= high, got {band!r}")
    if t.loss.entropy_coef < 0 or min(t.loss.sapo_tau_pos, t.loss.sapo_tau_neg) <= 0:
        raise ConfigError("train.loss.entropy_coef must be >= 0 and sapo_tau_pos, sapo_tau_neg > 0")
    if t.lr_schedule not in ("constant", "linear", "cosine"):
        raise ConfigError(f"train.lr_schedule: expected constant, linear or cosine, got {t.lr_schedule!r}")
    if r.engine not in ("vllm", "hf"):
        raise ConfigError(f"rollout.engine: expected vllm or hf, got {r.engine!r}")
    if r.max_num_seqs is not None and r.max_num_seqs < 1:
        raise ConfigError(f"rollout.max_num_seqs: must be >= 1 (or null), got {r.max_num_seqs}")
    if r.n < 1 or r.prompts_per_step < 1 or t.steps < 0 or t.max_staleness < 0:
        raise ConfigError("rollout.n and rollout.prompts_per_step must be >= 1; train.steps and train.max_staleness >= 0")
    _check_tools(cfg)
    if (cfg.data.dataset is None) == (cfg.data.mix is None) and not cfg.sft.only:  # sft.only reads no RL data
        raise ConfigError("data: set exactly one of dataset and mix")
    ck = cfg.checkpoint
    if (ck.keep_last is not None and ck.keep_last < 0) or (ck.keep_every is not None and ck.keep_every < 1):
        raise ConfigError("checkpoint.keep_last must be >= 0 and checkpoint.keep_every >= 1 (or null)")
    if cfg.verify.reward_mode not in ("binary", "fraction"):
        raise ConfigError(f"verify.reward_mode: expected binary or fraction, got {cfg.verify.reward_mode!r}")
    from rlvr.trackers import check_names

    try:
        check_names(cfg.log.trackers)
    except ValueError as e:
        raise ConfigError(f"log.trackers: {e}") from None
    if cfg.upload.trace_interval_s < 0:
        raise ConfigError("upload.trace_interval_s must be >= 0")
    if cfg.upload.layout:
        from rlvr.s3 import Layout

        Layout(cfg.upload.layout, run="run")  # a bad pattern or template fails before anything starts
    if cfg.sync.method not in SYNC_METHODS:
        raise ConfigError(f"sync.method: expected one of {', '.join(SYNC_METHODS)}, got {cfg.sync.method!r}")
    if cfg.sync.method in ("nccl", "gloo") and r.engine != "vllm":
        raise ConfigError(f"sync.method {cfg.sync.method} needs rollout.engine vllm")
    if cfg.sync.mode not in SYNC_MODES:
        raise ConfigError(f"sync.mode: expected one of {', '.join(SYNC_MODES)}, got {cfg.sync.mode!r}")
    if cfg.sync.in_flight_kv not in ("recompute", "keep"):
        raise ConfigError(f"sync.in_flight_kv: expected recompute or keep, got {cfg.sync.in_flight_kv!r}")
    if cfg.sync.bucket_mb is not None and not cfg.sync.bucket_mb > 0:
        raise ConfigError(f"sync.bucket_mb: must be > 0 (or null), got {cfg.sync.bucket_mb}")
    if t.trainer_num_gpus > 1:
        raise ConfigError(f"train.trainer_num_gpus {t.trainer_num_gpus:g}: a trainer rank computes on one GPU and "
                          f"would leave the others idle; for {t.trainer_num_gpus:g} GPUs set train.num_trainers "
                          f"{int(t.trainer_num_gpus) * max(1, t.num_trainers)} (FSDP ranks) and trainer_num_gpus 1")
    if r.engine_num_gpus > 1:
        raise ConfigError(f"rollout.engine_num_gpus {r.engine_num_gpus:g}: an engine worker computes on one GPU; "
                          "for several GPUs per engine set rollout.tensor_parallel_size")
    if t.trainer_num_gpus < 0 or r.engine_num_gpus < 0 or cfg.ray.startup_timeout_s <= 0:
        raise ConfigError("train.trainer_num_gpus and rollout.engine_num_gpus must be >= 0, ray.startup_timeout_s > 0")
    if t.grad_reduce_dtype not in ("float32", "bfloat16"):
        raise ConfigError(f"train.grad_reduce_dtype: expected float32 or bfloat16, got {t.grad_reduce_dtype!r}")
    _check_parallel(t)
    resolve_preset(cfg)
    if any(not s for s in r.stop) or any(not s for ss in r.stop_by_dataset.values() for s in ss):
        raise ConfigError("rollout.stop: stop strings must be non-empty")
    names = [cfg.data.dataset] if cfg.data.dataset else list(cfg.data.mix or {})
    for name in r.stop_by_dataset:
        if name not in names:
            raise ConfigError(f"rollout.stop_by_dataset: {name} is not a dataset of this run ({', '.join(names)})")
    from rlvr.data import split_kind_keys

    split_kind_keys(r.max_tokens_by_dataset, names, "rollout.max_tokens_by_dataset")   # allenai/gsm8k: a kind
    for name, n in r.max_tokens_by_dataset.items():
        if n < 1 or n < (cfg.dapo.overlong_buffer or 0):
            raise ConfigError(f"rollout.max_tokens_by_dataset.{name}: must be >= 1 and >= dapo.overlong_buffer "
                              f"({cfg.dapo.overlong_buffer}), got {n}")
    if r.logprobs == "raw" and t.loss.ratio_to == "engine" and r.temperature not in (0.0, 1.0) and not cfg.sft.only:
        raise ConfigError(f"train.loss.ratio_to engine with rollout.logprobs raw and rollout.temperature "
                          f"{r.temperature:g}: the ratio would compare the engine's log-probs before the temperature "
                          f"with the trainer's at it; set rollout.logprobs processed or rollout.temperature 1")
    if r.timeout_s is not None and (not r.timeout_s > 0 or cfg.sync.mode != "between_rounds"):
        raise ConfigError(f"rollout.timeout_s {r.timeout_s}: must be > 0 (or null), and needs sync.mode "
                          f"between_rounds (in_flight requests share a running batch), got {cfg.sync.mode}")
    if cfg.sync.abort_in_flight not in ("off", "resubmit", "drop"):
        raise ConfigError(f"sync.abort_in_flight: expected off, resubmit or drop, got {cfg.sync.abort_in_flight!r}")
    if cfg.sync.abort_in_flight != "off" and (cfg.sync.mode != "between_rounds" or t.max_staleness < 1):
        raise ConfigError(f"sync.abort_in_flight {cfg.sync.abort_in_flight}: needs sync.mode between_rounds with "
                          f"train.max_staleness >= 1 (got {cfg.sync.mode}, {t.max_staleness}): nothing else runs "
                          "on older weights at a sync")
    a = r.adaptive
    if a.max_n and a.max_n < r.n:
        raise ConfigError(f"rollout.adaptive.max_n {a.max_n}: must be >= rollout.n ({r.n}), or 0 (off)")
    if a.max_n < 0 or a.k_pos < 0 or a.k_neg < 0 or (a.chunk is not None and a.chunk < 1):
        raise ConfigError("rollout.adaptive.max_n, k_pos and k_neg must be >= 0, chunk >= 1 (or null)")
    warnings = _check_modes(cfg)
    if r.top_p < 1.0 or r.top_k not in (-1, 0):
        warnings.append("rollout.top_p < 1 or top_k set: truncated sampling biases the importance ratio "
                        "(the trainer's log-probs are over the full vocabulary)")
    if r.n < 2 and not t.distill.only:
        warnings.append("rollout.n < 2: group-relative advantages are all zero")
    default = LossConfig()
    if t.mini_batches * t.epochs == 1 and t.loss.ratio_to == "trainer" and \
            (t.loss.clip_low, t.loss.clip_high) != (default.clip_low, default.clip_high):
        warnings.append(f"train.loss.clip_low/clip_high set ({t.loss.clip_low}/{t.loss.clip_high}) but they cannot act: "
                        "with one update per batch (train.mini_batches 1, train.epochs 1) the PPO ratio is always 1; "
                        "set train.mini_batches > 1 for the clip to bound the policy's change")
    return warnings


def _check_tools(cfg: TrainConfig) -> None:
    """rollout.tools (multi-turn rollouts, rlvr.tools): valid settings (every sync mode runs them)."""
    from rlvr.errors import ConfigError
    from rlvr.train.config_rollout import tool_settings

    try:
        tool_settings(cfg.rollout)
    except ValueError as e:
        raise ConfigError(f"rollout.tools: {e}") from None


def _check_parallel(t) -> None:
    """train.tensor_parallel, grad_sync and offload (rlvr.train.parallel)."""
    from rlvr.errors import ConfigError

    tp, world = max(1, t.tensor_parallel), max(1, t.num_trainers)
    if t.tensor_parallel < 1 or world % tp:
        raise ConfigError(f"train.tensor_parallel {t.tensor_parallel} must divide train.num_trainers {world}")
    if tp > 1 and not t.logprob_chunk_size:
        raise ConfigError("train.tensor_parallel > 1 takes log-probs vocabulary-parallel, chunk by chunk: "
                          "set train.logprob_chunk_size > 0")
    if t.grad_sync not in (None, "per_update", "per_microbatch"):
        raise ConfigError(f"train.grad_sync must be per_update, per_microbatch or null, got {t.grad_sync!r}")
    if t.offload not in (None, "optimizer", "params_and_optimizer"):
        raise ConfigError(f"train.offload must be optimizer, params_and_optimizer or null, got {t.offload!r}")
    if tp > 1 and t.loss.entropy_coef:
        raise ConfigError("train.loss.entropy_coef with train.tensor_parallel > 1: the vocabulary-parallel "
                          "log-softmax gives the entropy without its gradient; set one of them back")
    if t.offload == "params_and_optimizer" and world < 2:
        raise ConfigError("train.offload params_and_optimizer offloads FSDP's shards: it needs train.num_trainers > 1 "
                          "(train.offload optimizer runs on one rank too)")


def _check_modes(cfg: TrainConfig) -> list[str]:
    """The precision, optimizer and sync knobs (docs/train-algorithms.md, docs/train-async.md); returns warnings."""
    from rlvr.errors import ConfigError

    t, r, sft = cfg.train, cfg.rollout, cfg.sft
    choices = [("train.loss.ratio_to", t.loss.ratio_to, ("trainer", "engine")),
               ("rollout.logprobs", r.logprobs, ("processed", "raw")),
               ("train.adv_std", t.adv_std, ("unbiased", "population")),
               ("train.dtype", t.dtype, DTYPES),
               ("checkpoint.dtype", cfg.checkpoint.dtype, (None, "float32", "bfloat16", "float16"))]
    for key, value, allowed in choices:
        if value not in allowed:
            raise ConfigError(f"{key}: expected one of {', '.join(str(a).lower() for a in allowed)}, got {value!r}")
    if not (t.adam_eps or 0) > 0 or not 0 <= (t.adam_beta2 or 0) < 1 or not 0 <= t.adam_beta1 < 1:
        raise ConfigError("train.adam_eps must be > 0 and train.adam_beta1, train.adam_beta2 in [0, 1)")
    if t.ref_sync_every is not None:
        if t.ref_sync_every < 1:
            raise ConfigError(f"train.ref_sync_every: must be >= 1 (or null: never), got {t.ref_sync_every}")
        if not t.loss.beta > 0:
            raise ConfigError("train.ref_sync_every re-syncs the KL reference, which exists only with "
                              "train.loss.beta > 0")
    k = cfg.sync.every_steps
    if k < 1:
        raise ConfigError(f"sync.every_steps: must be >= 1, got {k}")
    if k - 1 > t.max_staleness and not sft.only:
        raise ConfigError(f"sync.every_steps {k} needs train.max_staleness >= {k - 1}: between two syncs the "
                          f"engines generate with weights up to {k - 1} steps old (got max_staleness "
                          f"{t.max_staleness})")
    # each training mode's own section is checked by rlvr.train.modes.check (check_config: the whole config)
    warnings: list[str] = []
    if r.logprobs == "raw" and r.temperature not in (0.0, 1.0) and not sft.only:
        warnings.append(f"rollout.logprobs raw reports log-probs before the temperature ({r.temperature}); the "
                        "trainer's are at the temperature, so the TIS weight compares different distributions "
                        "(with train.loss.ratio_to engine the combination is refused)")
    return warnings


def resolve(path: str, sets: list[str], ray_address: str | None = None, ray_temp_dir: str | None = None,
            trackers: list[str] | None = None) -> tuple[TrainConfig, list[str], str]:
    """A run's config: the file, the --set overrides and rlvr-train's Ray and tracker options,
    checked: (config, warnings, the resolved YAML saved with the run)."""
    from rlvr.config_loader import load_config, to_yaml

    cfg = load_config(TrainConfig, path, list(sets))
    if ray_address:
        cfg.ray.address = ray_address
    if ray_temp_dir:
        cfg.ray.temp_dir = ray_temp_dir
    if trackers:
        cfg.log.trackers = list(dict.fromkeys([*cfg.log.trackers, *trackers]))
    warnings = check(cfg)
    return cfg, warnings, to_yaml(cfg)
