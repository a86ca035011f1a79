"""rlvr-train's config, the trainer's sections: `train` (with its `loss` and `distill`
subsections), `checkpoint`, `dapo` and `sft`, and the names their choices take (loss types,
dtypes, presets). rlvr.train.config assembles them with the other sections into TrainConfig
and checks them; this module imports nothing of rlvr's, so any module (rlvr.grpo too) may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

LOSS_TYPES = ("grpo", "dapo", "dr_grpo", "gspo", "cispo", "sapo")
"""train.loss.loss_type's choices (rlvr.grpo computes each; docs/train-algorithms.md gives their formulas)."""
ADVANTAGES = ("grpo", "rloo", "reinforce_pp")
"""train.advantage's choices: the baseline and normalisation of the rewards (rlvr.grpo.group_advantages)."""


@dataclass
class LossConfig:
    """The loss's settings (rlvr/grpo.py computes it): rlvr-train's `train.loss` section."""
    loss_type: str = "grpo"
    """grpo (mean per sequence), dapo (token level), dr_grpo (constant normaliser), gspo (sequence-level ratio,
    the geometric mean of the token ratios, clipped per sequence: use clip bounds near 3e-4/4e-4), cispo (the
    clipped ratio, detached, weighting a REINFORCE term; token level) or sapo (a sigmoid-gated soft clip)."""
    clip_low: float = 0.2
    clip_high: float = 0.2
    """PPO clip bounds on pi_theta/pi_old (clip_high > clip_low: DAPO's clip-higher); they act only with
    train.mini_batches > 1 or train.epochs > 1 (with one update per batch the ratio is 1)."""
    beta: float = 0.0
    """KL coefficient to the frozen initial policy (k3); 0 loads no reference model."""
    tis_cap: float | None = 2.0
    """Truncated importance sampling cap on pi_trainer/pi_engine; null turns the correction off."""
    max_tokens: int | None = None
    """dr_grpo's constant normaliser; null = rollout.max_tokens."""
    entropy_coef: float = 0.0
    """Entropy bonus: loss -= entropy_coef x the entropy of the policy at the sampled positions, aggregated as the
    policy loss; 0 = off."""
    entropy_low: float = 0.1
    """The trace's entropy/low_frac counts the tokens whose entropy (nats) lies below this threshold."""
    token_mask: list[float] | None = None
    """[low, high]: tokens whose trainer/engine ratio pi_old/mu lies outside are left out of the policy loss
    (they add 0; the normaliser is unchanged); null = off."""
    seq_mask: list[float] | None = None
    """[low, high]: sequences whose geometric-mean trainer/engine ratio exp(mean_t log pi_old/mu) lies outside
    are left out of the policy loss whole; null = off."""
    sapo_tau_pos: float = 1.0
    """sapo's gate temperature for tokens of positive advantage (the paper's 1.0) ..."""
    sapo_tau_neg: float = 1.05
    """... and of negative advantage (the paper's 1.05: a faster decay off policy)."""
    ratio_to: str = "trainer"
    """What the PPO ratio pi_theta/pi_old is taken against: trainer (pi_old = the trainer's own policy before
    the batch's first update) or engine (pi_old = the engine's behaviour log-probs, rollout.logprobs; the
    ratio then corrects off-policy samples itself and the TIS weight is 1)."""


@dataclass
class DistillConfig:
    """Distillation to a teacher's top-k log-probs (the `teacher` section names the teacher): rlvr-train's
    `train.distill` (rlvr/train/distill.py builds the batch, rlvr/losses.py computes the loss; docs/train-modes.md)."""
    weight: float = 0.0
    """loss/total = loss/rl + weight x loss/distill; 0 = off (their alpha_gkd)."""
    only: bool = False
    """Train on the distillation loss alone (GKD, OPSD): no RL loss; rewards are still computed and traced."""
    loss: str = "jsd"
    """jsd (GKD's generalised Jensen-Shannon divergence with jsd_beta) or kl (forward KL(teacher || student))."""
    jsd_beta: float = 0.5
    """The JSD's mixture weight of the teacher, in (0, 1): m = beta teacher + (1 - beta) student (their jsd_alpha,
    TRL's beta)."""
    only_incorrect: bool = False
    """Distil only the completions the verifier did not judge correct (their discard_perfect_completions)."""
    temperature: float = 1.0
    """Softmax temperature of both distributions in the loss."""
    aggregate: str = "sequence"
    """sequence (the mean over each completion's tokens, then over completions: theirs) or token (over all tokens:
    TRL's)."""


@dataclass
class TrainerConfig:
    steps: int = 30
    lr: float = 1e-6
    lr_schedule: str = "constant"
    """constant, linear or cosine (after warmup_steps)."""
    warmup_steps: int = 0
    weight_decay: float | None = None
    """AdamW's decoupled weight decay; null = the compat preset's (none: 0, torchtitan: 0.1)."""
    adam_beta1: float = 0.9
    adam_beta2: float | None = None
    """null = the compat preset's (none: 0.999, torchtitan: 0.95)."""
    adam_eps: float | None = None
    """AdamW's epsilon; null = 1e-8 (torch's and torchtitan's). 1e-6 to 1e-4 damp the first updates of
    rarely seen parameters (a KL blow-up at 1e-7 without warmup is on record)."""
    grad_clip: float = 1.0
    micro_batch_size: int = 32
    """Sequences per forward/backward (when max_tokens_per_microbatch is null); the gradient is accumulated."""
    scale_rewards: str = "group"
    """group (divide advantages by the group std) or none (Dr. GRPO)."""
    adv_std: str = "unbiased"
    """The group std of scale_rewards group: unbiased (divides by G - 1, torch's and TRL's) or population
    (divides by G); at G = 8 the unbiased advantages are sqrt(7/8) of the population ones, about 6.5% smaller."""
    advantage: str = "grpo"
    """The advantage estimator: grpo (reward minus the group mean, scaled by the group std with scale_rewards
    group), rloo (reward minus the mean of the group's other rewards, scaled alike) or reinforce_pp (REINFORCE++
    baseline: reward minus the group mean, scaled by the whole batch's std with scale_rewards group)."""
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss (rlvr/grpo.py): loss_type, clip_low, clip_high, beta, tis_cap, max_tokens."""
    # -- updates per batch (docs/train-algorithms.md) and memory (docs/train-async.md) --
    mini_batches: int = 1
    """Optimizer steps per rollout batch: the batch is split into this many mini-batches (PPO); > 1 lets the clip act."""
    epochs: int = 1
    """Passes over each rollout batch (PPO epochs); pi_old is the policy before the batch's first update."""
    max_tokens_per_microbatch: int | None = None
    """Token budget per forward/backward (padded prompt + completion tokens, sequences sorted by length);
    null = micro_batch_size sequences."""
    packing: bool = False
    """Padding-free micro-batches: sequences concatenated in one row (position ids restart per sequence, attention
    kept within each: varlen FlashAttention on GPU, per-sequence attention elsewhere), filled to
    max_tokens_per_microbatch real tokens; loss and gradients equal the padded computation."""
    logprob_chunk_size: int = 1024
    """Completion tokens whose full-vocabulary logits are computed at once (log-probs, entropy); 0 = all at once."""
    filter_zero_std: bool = True
    """Drop groups whose rewards are all equal (they carry no gradient in GRPO)."""
    mask_truncated: bool = False
    """Exclude completions cut at max_tokens from the loss."""
    max_staleness: int = 0
    """A token sampled by policy v may train the step producing t+1 only if t - v <= max_staleness (counted per
    token: in sync.mode in_flight one completion may hold several versions); 0 = synchronous."""
    dtype: str = "auto"
    """Compute dtype of the forward/backward (master weights and optimizer state stay float32): auto
    (bfloat16 on GPU, float32 on CPU), bfloat16, float32 or float16 (with a dynamic loss scaler)."""
    device: str = "auto"
    seed: int = 0
    gradient_checkpointing: bool = False
    ref_sync_every: int | None = None
    """Re-sync the KL reference (train.loss.beta > 0) to the current policy every N steps; null = the
    frozen initial policy. The reference lives in the trainer; kl/max in the trace."""
    distill: DistillConfig = field(default_factory=DistillConfig)
    """Distillation to the teacher section's teacher: weight, only, loss, jsd_beta, only_incorrect."""
    num_trainers: int = 1
    """Data-parallel trainer ranks (FSDP-sharded policy; NCCL on GPUs, gloo on CPUs); one GPU each on GPU clusters."""
    trainer_num_cpus: float = 1.0
    trainer_num_gpus: float = 1.0
    """GPUs per trainer rank, at most 1 (a rank computes on one GPU: more GPUs are more ranks, num_trainers);
    a fraction shares its GPU with engines."""
    grad_reduce_dtype: str = "float32"
    """With num_trainers > 1: the dtype FSDP reduce-scatters (and accumulates over micro-batches) gradients in;
    bfloat16 halves the traffic at bf16's precision of the summed gradient."""
    trainer_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources for the trainer actor (placement on a multi-node cluster)."""
    # -- trainer parallelism (rlvr.train.parallel, docs/train-layouts.md) --
    tensor_parallel: int = 1
    """Tensor-parallel degree of the trainer: num_trainers ranks form a (num_trainers / N) x N mesh, FSDP over
    the first dimension, torch's tensor parallelism (heads, MLP and vocabulary split) over groups of N
    consecutive ranks (one node's GPUs). Needs train.logprob_chunk_size > 0 (the vocabulary-parallel log-softmax)."""
    grad_sync: str | None = None
    """per_update (unsharded gradients kept until an update's last micro-batch: one reduce-scatter per update) or
    per_microbatch (reduce-scatter after each micro-batch: sharded gradients only, as verl); null = the plan's
    choice (per_update where the unsharded gradients fit, rlvr.train.plan_parallel)."""
    offload: str | None = None
    """optimizer: AdamW's state and step on the CPU, parameters and gradients on the device (the gradients copied
    to the CPU and the updated parameters back once an update, rlvr.train.parallel.CPUAdamW; any num_trainers);
    params_and_optimizer: FSDP2's CPUOffloadPolicy (sharded parameters, gradients and AdamW's state on the CPU,
    the optimizer step there; needs num_trainers > 1); null = none."""


@dataclass
class CheckpointConfig:
    every: int = 10
    """Save every N steps (and at the end); 0 = only at the end."""
    keep_last: int | None = None
    """Keep only the newest N checkpoints (null keeps all) ..."""
    keep_every: int | None = None
    """... and, besides those, every checkpoint whose step is a multiple of K (null: none), so
    that an evaluation watcher that lags behind still finds them (e.g. every: 50, keep_last: 3,
    keep_every: 50 keeps them all; keep_every: 200 keeps one in four)."""
    upload: str | None = None
    """s3://bucket/prefix/: upload the run folder's checkpoints and traces in the background."""
    dtype: str | None = None
    """dtype of the checkpoint's weights: null = float32 (the master weights), bfloat16 or float16
    (half the disk; a run resumed from it continues from the rounded weights)."""


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


@dataclass
class SftConfig:
    """Supervised fine-tuning beside the RL loss, or alone (`only`): rlvr-train's `sft` section
    (rlvr.train.sft reads the records, rlvr.losses computes the loss; docs/train-modes.md)."""

    data: str | None = None
    """JSONL of {prompt, completion} records (rlvr-select writes them), a local file or s3://; null = off."""
    weight: float = 1.0
    """Each step adds weight x the token-mean NLL of an SFT batch to the loss (their GRPO+SFT runs: 0.001)."""
    batch_size: int | None = None
    """SFT records per step; null = rollout.prompts_per_step."""
    micro_batch_size: int = 8
    """SFT sequences per forward/backward (the gradient is accumulated)."""
    max_tokens: int | None = None
    """Completion tokens kept per record (longer ones are cut); null = rollout.max_tokens."""
    only: bool = False
    """The SFT baseline: train on the SFT data alone through the same trainer, no engines, no rewards."""
    eos: bool = True
    """End each completion the way a generated one ends: its stop string (a record's `stop_reason`), else the
    tokenizer's end-of-sequence token, unless the record says it was cut at max_tokens (`finish_reason`
    length)."""
    epochs: int | None = None
    """Passes over the SFT records; null = as many as the run takes."""
    shuffle: bool = True
    seed: int = 0
    """Each pass is shuffled with (seed, pass)."""


PRESETS = ("grpo", "dapo")
COMPAT = ("none", "torchtitan")
# The optimizer defaults a compat preset sets where the config leaves them null.
COMPAT_DEFAULTS = {
    "none": {"weight_decay": 0.0, "adam_beta2": 0.999, "adam_eps": 1e-8},
    "torchtitan": {"weight_decay": 0.1, "adam_beta2": 0.95, "adam_eps": 1e-8},   # torchtitan's job_config
}
DTYPES = ("auto", "bfloat16", "bf16", "float32", "fp32", "float16", "fp16")
