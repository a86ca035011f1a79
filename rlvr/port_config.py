"""Convert the users' training configs (halflearned/rlvr-experiments) into rlvr-train configs.

    port = port_config(yaml.safe_load(open("their.yaml")), source="configs/their.yaml")
    sys.stdout.write(port.yaml())          # the rlvr config, with what did not port as comments
    port.entries                           # every key of theirs and where it went

Every key of their config ends in one of four ways (`Entry.kind`):

- ``mapped``: written as the rlvr key(s) with the same meaning (``training.max_steps`` ->
  ``train.steps``; ``prompts_per_rollout_sync / prompts_per_optim_step`` -> ``sync.every_steps``);
- ``implied``: rlvr already behaves that way, nothing to write (``buffer.max_reads: 1``: every
  rollout trains once), or the key is a detail of their runtime that rlvr sets itself;
- ``pending``: the rlvr key is one this rlvr-train does not accept (an older rlvr-train, or a
  value such as float16 training it cannot take); it is written as a comment to uncomment.
  Whether a key is accepted is read from rlvr.train.config at run time, so the entries switch on
  by themselves once rlvr-train accepts them;
- ``unmapped``: no equivalent, with why. A key this port does not know at all is also a warning
  (``Port.warnings``: the file and the key path).

The values it maps are type-checked against rlvr-train's fields (and their numeric keys against
what their code reads): a wrong one raises BadInput naming the file and their key.

Their code's silent defaults are ported too, as entries named ``(their default) ...``: no
``loss.name`` means Dr. GRPO with C = 2048; each dataset's own ``max_completion_len`` overrides
``sampling.max_tokens``; each dataset's own prompt format; GRPO always refills the batch with
informative groups (dynamic sampling, without DAPO's overlong punishment); the PPO ratio is
taken against the engine's log-probs; group advantages use the population std; torchtitan's
AdamW defaults (weight decay 0.1, beta2 0.95); no chat template.
"""

from __future__ import annotations

import dataclasses
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field

PENDING = "not accepted by this rlvr-train"

# Their dataset names -> rlvr's (None: rlvr has no such dataset here).
DATASETS: dict[str, str | None] = {
    "gsm8k": "gsm8k", "math": "math", "deepscaler": "deepscaler", "humaneval": "humaneval", "mbpp": "mbpp",
    "apps": "apps", "ifeval": "rlvr_ifeval", "if_multi_constraints": "if_multi", "aime": "aime",
    "beyondaime": "beyondaime", "allenai_rlvr": "allenai", "allenai_gsm8k_mini": None, "dummy": None,
}
# Their loaders' prompt formats (src/rlvr_experiments/data.py) as rlvr templates.
PROBLEM = "Problem:\n{question}\n\nSolution:"
TEMPLATES = {"gsm8k": "Q: {question}\nA:", "math": PROBLEM, "deepscaler": PROBLEM, "aime": PROBLEM,
             "beyondaime": PROBLEM, "mbpp": "mbpp", "humaneval": "humaneval", "apps": "plain",
             "rlvr_ifeval": "plain", "if_multi": "plain"}
# Their loaders' max_completion_len, which overrides sampling.max_tokens per prompt.
# Their allenai_rlvr loader's length per kind of row (rlvr's per-kind keys: the records' `dataset`).
ALLENAI_MAX_COMPLETION_LEN = {"allenai/gsm8k": 512, "allenai/math": 1024, "allenai/ifeval": 2048}
MAX_COMPLETION_LEN = {"gsm8k": 512, "math": 1024, "deepscaler": 1024, "aime": 1024, "beyondaime": 1024,
                      "mbpp": 512, "humaneval": 512, "apps": 512, "rlvr_ifeval": 2048, "if_multi": 2048}
# torchtitan's AdamW defaults, which their optimizer sections leave implicit.
TORCHTITAN = {"train.weight_decay": 0.1, "train.adam_beta2": 0.95, "train.grad_clip": 1.0}
NEVER = 1_000_000   # their "prompts_per_reference_sync: 9999999" means never


@dataclass
class Entry:
    their: str
    kind: str                      # mapped | implied | pending | unmapped
    rlvr: list[str] = field(default_factory=list)
    why: str = ""
    value: object = None


_MISSING = object()


def hint(key: str):
    """The type of rlvr-train's dotted config key (read from rlvr.train.config), or _MISSING."""
    from rlvr.train.config import TrainConfig

    cls, tp = TrainConfig, _MISSING
    for p in key.split("."):
        if not dataclasses.is_dataclass(cls):
            return _MISSING
        hints = typing.get_type_hints(cls)
        if p not in hints:
            return _MISSING
        tp = hints[p]
        args = [a for a in typing.get_args(tp) if dataclasses.is_dataclass(a)]
        cls = tp if dataclasses.is_dataclass(tp) else (args[0] if args else None)
    return tp


def _admits_none(key: str) -> bool:
    tp = hint(key)
    return tp is _MISSING or type(None) in typing.get_args(tp)


def accepts(key: str) -> bool:
    """Whether rlvr-train's config has this dotted key (read from rlvr.train.config)."""
    return hint(key) is not _MISSING


def accepts_value(key: str, value) -> bool:
    """Values an accepted key may not take: float16 training where rlvr-train has no loss scaler."""
    if key in ("train.dtype", "rollout.dtype") and str(value) in ("float16", "fp16", "half"):
        import rlvr.train.config as tc

        return "float16" in getattr(tc, "DTYPES", ())
    return True


class Port:
    """A config being ported: the rlvr config so far and an entry per key of theirs."""

    def __init__(self, their: dict, source: str = "", accepted: Callable[[str], bool] = accepts):
        self.their = their
        self.source = source
        self.accepted = accepted
        self.config: dict = {}
        self.pending: dict[str, tuple[object, str]] = {}
        self.entries: list[Entry] = []
        self.done: set[str] = set()
        self.warnings: list[str] = []
        self.changed: list[str] = []       # their keys ported to a different meaning (the summary names them)

    # -- recording --------------------------------------------------------------------------

    def get(self, path: str, default=None):
        """Their value at a dotted path (roles.NAME.config... addresses a role by name)."""
        node = self.their
        parts = path.split(".")
        if parts[0] == "roles" and len(parts) > 1:
            node, parts = {"config": _role(self, parts[1]).get("config") or {}}, parts[2:]
        for p in parts:
            if not isinstance(node, dict) or p not in node:
                return default
            node = node[p]
        return node

    def set(self, key: str, value, their: str | None = None) -> bool:
        """Write an rlvr key (True), or keep it pending when rlvr-train does not accept it (False).
        A value of the wrong type for the key raises BadInput naming the file and `their` key."""
        if not self.accepted(key) or not accepts_value(key, value):
            self.pending[key] = (value, PENDING)
            return False
        tp = hint(key)
        if tp is not _MISSING:
            from rlvr.config_loader import _fix_floats

            self.check(their or key, _fix_floats(value), tp, f" (rlvr's {key})" if their and their != key else "")
        node = self.config
        parts = key.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = value
        return True

    def check(self, their: str, value, tp, note: str = "") -> None:
        """value must be of type tp (a config field's type): else BadInput, "FILE: KEY: expected ..."."""
        from rlvr.config_loader import _coerce
        from rlvr.errors import BadInput, ConfigError

        try:
            _coerce(value, tp, f"{self.source or 'their config'}: {their}{note}")
        except ConfigError as e:
            raise BadInput(str(e)) from None

    def get_ours(self, key: str, default=None):
        """The rlvr value written so far at a dotted key."""
        node = self.config
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                return default
            node = node[part]
        return node

    def is_set(self, key: str) -> bool:
        return self.get_ours(key, _MISSING) is not _MISSING

    def map(self, their: str, values: dict[str, object], why: str = "", value=None) -> None:
        """their -> the rlvr keys in values; pending when any of them is not accepted yet."""
        ok = [self.set(k, v, their) for k, v in values.items()]
        kind = "mapped" if all(ok) else "pending"
        notes = [f"{k}: {self.pending[k][1]}" for k, good in zip(values, ok) if not good]
        self.entries.append(Entry(their, kind, list(values), "; ".join([why, *notes]).strip("; "), value))
        self.done.add(their)

    def imply(self, their: str, why: str, value=None) -> None:
        self.entries.append(Entry(their, "implied", [], why, value))
        self.done.add(their)

    def unmap(self, their: str, why: str, value=None) -> None:
        self.entries.append(Entry(their, "unmapped", [], why, value))
        self.done.add(their)

    # -- output -----------------------------------------------------------------------------

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in ("mapped", "implied", "pending", "unmapped")}
        for e in self.entries:
            out[e.kind] += 1
        return out

    def ordered(self) -> dict:
        """The config in rlvr-train's own section and field order."""
        from rlvr.train.config import TrainConfig

        def walk(cls, node: dict) -> dict:
            order = [f.name for f in dataclasses.fields(cls)] if dataclasses.is_dataclass(cls) else []
            hints = typing.get_type_hints(cls) if order else {}
            out = {}
            for k in sorted(node, key=lambda k: order.index(k) if k in order else len(order)):
                v = node[k]
                sub = hints.get(k)
                out[k] = walk(sub, v) if isinstance(v, dict) and dataclasses.is_dataclass(sub) else v
            return out

        return walk(TrainConfig, self.config)

    def yaml(self) -> str:
        head = [f"# rlvr-train config ported by rlvr-port-config from {self.source or 'their config'}",
                "# (every key of theirs and where it went: the comments at the end)"]
        head += [f"# WARNING: {w}" for w in self.warnings]
        body = dump_yaml(self.ordered())
        tail = []
        if self.pending:
            tail += ["", "# Not accepted by this rlvr-train; once it is, run with:"]
            for key, (value, why) in self.pending.items():
                tail.append(f"#   --set {key}={_flow(value)}    ({why})")
        for kind, title in (("unmapped", "Their keys without an rlvr equivalent"),
                            ("implied", "Their keys rlvr needs no setting for"),
                            ("mapped", "Their keys and the rlvr keys they became")):
            rows = [e for e in self.entries if e.kind == kind]
            if rows:
                tail += ["", f"# {title}:"]
                for e in rows:
                    where = f" -> {', '.join(e.rlvr)}" if e.rlvr else ""
                    why = f": {e.why}" if e.why else ""
                    tail.append(f"#   {e.their}{where}{why}")
        pend = [e for e in self.entries if e.kind == "pending"]
        if pend:
            tail += ["", "# Their keys waiting for those rlvr keys:"]
            tail += [f"#   {e.their} -> {', '.join(e.rlvr)}" for e in pend]
        return "\n".join(head) + "\n" + body + "\n".join(tail) + "\n"

    def report(self) -> list[dict]:
        return [dataclasses.asdict(e) for e in self.entries]


def dump_yaml(data) -> str:
    """Block-style YAML; strings with line breaks or tabs double-quoted with escapes ("Q:\\n")."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper, s: str):
        style = '"' if any(c in s for c in "\n\t\r") else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", s, style=style)

    Dumper.add_representer(str, text)
    return yaml.dump(data, Dumper=Dumper, sort_keys=False, default_flow_style=False, allow_unicode=True, width=100)


def _flow(v) -> str:
    """A value as --set takes it (YAML flow: JSON)."""
    import json

    return json.dumps(v)


def _leaves(d: dict, prefix: str = "") -> list[tuple[str, object]]:
    """(dotted path, value) of every leaf; `roles` by role name; some mappings are one leaf."""
    out = []
    for k, v in d.items():
        path = f"{prefix}{k}"
        if path == "roles" and isinstance(v, list):
            for r in v:
                if isinstance(r, dict):
                    name = r.get("name", "?")
                    out.append((f"roles.{name}.kind", r.get("kind")))
                    out += _leaves(r.get("config") or {}, f"roles.{name}.config.")
            continue
        if isinstance(v, dict) and v and path not in LEAF_MAPPINGS:
            out += _leaves(v, path + ".")
        else:
            out.append((path, v))
    return out


LEAF_MAPPINGS = {"training.completions_per_micro_batch", "training.adaptive_sampling"}


# --------------------------------------------------------------------------- the mapping table
#
# One-to-one keys: theirs -> rlvr's (a function turns their value into rlvr's where needed).
SIMPLE: dict[str, tuple[str, Callable | None]] = {
    "model.path": ("model.path", None),
    "training.max_steps": ("train.steps", None),
    "training.checkpoint_interval": ("checkpoint.every", None),
    "training.max_staleness": ("train.max_staleness", None),
    "training.num_epochs": ("data.epochs", None),
    "training.teacher_top_k": ("teacher.top_k", None),
    "training.teacher_use_chat_template": ("teacher.chat", None),
    "training.jsd_alpha": ("train.distill.jsd_beta", None),
    "training.opsd_loss_type": ("train.distill.loss", None),
    "training.discard_perfect_completions": ("train.distill.only_incorrect", None),
    "training.sft.micro_batch_size": ("sft.micro_batch_size", None),
    "training.sft.completion_len_buckets": ("sft.max_tokens", max),
    "training.minibatch_size": ("train.micro_batch_size", None),
    "verifier.num_workers": ("verify.jobs", None),
    "verifier.timeout": ("verify.timeout", float),
    "sampling.temperature": ("rollout.temperature", float),
    "sampling.top_p": ("rollout.top_p", float),
    "sampling.top_k": ("rollout.top_k", None),
    "sampling.n": ("rollout.n", None),
    "sampling.max_tokens": ("rollout.max_tokens", None),
    "sampling.stop": ("rollout.stop", list),
    "data.seed": ("data.seed", None),
    "data.split": ("data.split", None),
    "sft_data.path": ("sft.data", None),
    "roles.trainer.config.optimizer.lr": ("train.lr", float),
    "roles.trainer.config.optimizer.eps": ("train.adam_eps", float),
    "roles.trainer.config.lr_scheduler.warmup_steps": ("train.warmup_steps", None),
    "roles.trainer.config.seed": ("train.seed", None),
    "roles.trainer.config.training.dtype": ("train.dtype", None),
    "roles.rollout.config.tensor_parallel_size": ("rollout.tensor_parallel_size", None),
    "roles.rollout.config.data_parallel_size": ("rollout.num_engines", None),
    "roles.rollout.config.max_model_len": ("rollout.max_model_len", None),
    "roles.rollout.config.gpu_memory_utilization": ("rollout.gpu_memory_utilization", float),
    "roles.rollout.config.dtype": ("rollout.dtype", None),
    "roles.teacher.config.model": ("teacher.model", None),
    "roles.teacher.config.data_parallel_size": ("teacher.num_engines", None),
    "sync.chunk_mb": ("sync.bucket_mb", float),
}

# Keys rlvr needs no setting for: rlvr behaves so already, or sets it itself.
IMPLIED: dict[str, str] = {
    "sampling.logprobs": "rlvr always has the engines return the sampled tokens' log-probs",
    "buffer.max_reads": "every rollout trains once in rlvr (max_reads 1)",
    "buffer.maxsize": "rlvr's buffer is bounded by train.max_staleness",
    "training.prompts_per_forward_backward": "their gradient-accumulation chunk; rlvr accumulates over the step's "
                                             "micro-batches (train.micro_batch_size): the same gradient, except that "
                                             "a token-level mean (dapo) is taken per chunk there, per step here",
    "tokenizer.pretrained_model_name_or_path": "rlvr loads the tokenizer from model.path",
    "roles.trainer.kind": "rlvr's trainer actor (torch, FSDP)",
    "roles.rollout.kind": "rlvr's vLLM engine actors",
    "roles.reference.kind": "rlvr's KL reference is the initial policy, held by the trainer (train.loss.beta > 0)",
    "roles.teacher.kind": "rlvr's teacher engines (teacher.model)",
    "roles.rollout.config.model": "the engines start from model.path",
    "roles.trainer.config.model.name": "from model.path",
    "roles.trainer.config.model.flavor": "from model.path",
    "roles.trainer.config.model.hf_assets_path": "from model.path",
    "roles.trainer.config.trainable": "the trainer trains",
    "roles.trainer.config.optimizer.name": "rlvr's optimizer is AdamW",
    "roles.trainer.config.training.mixed_precision_param": "rlvr computes in train.dtype over float32 master weights",
    "roles.trainer.config.training.seq_len": "sequences are at most rollout.max_model_len tokens",
    "roles.trainer.config.parallelism.context_parallel_degree": "no context parallelism (1)",
    "roles.trainer.config.parallelism.disable_loss_parallel": "with train.tensor_parallel > 1 the log-softmax is "
                                                              "always vocabulary-parallel (no full-vocabulary logits)",
    "roles.trainer.config.parallelism.fsdp_reshard_after_forward": "rlvr's FSDP settings",
    "roles.trainer.config.checkpoint.enable": "rlvr-train always writes checkpoints (checkpoint.every)",
    "roles.trainer.config.checkpoint.folder": "checkpoints go to RUN_DIR/checkpoints/",
    "roles.trainer.config.checkpoint.initial_load_in_hf": "rlvr loads Hugging Face folders",
    "roles.trainer.config.checkpoint.interval": "their trainer-internal checkpoints; rlvr's are checkpoint.every",
    "roles.trainer.config.checkpoint.last_save_model_only": "rlvr checkpoints hold the model and the optimizer",
    "roles.trainer.config.checkpoint.async_mode": "rlvr writes checkpoints atomically",
    "roles.trainer.config.metrics.log_freq": "rlvr writes every step to traces/trace.jsonl",
    "sync.wiring": "rlvr sends the trainer's weights to the engines (and the teacher keeps its own)",
    "data_iter.system_prompt": "empty: no system prompt",
    "data_iter.assistant_prefix": "empty: no assistant prefix",
    "sft_data_iter.system_prompt": "the SFT prompts use the RL prompts' format",
    "sft_data_iter.assistant_prefix": "the SFT prompts use the RL prompts' format",
    "sft_data_iter.skip_chat_template": "the SFT prompts use the RL prompts' format",
    "sft_data.dataset": "sft.data is a JSONL of {prompt, completion} records",
    "run.port_start": "rlvr's processes meet through Ray, not fixed ports",
}

# Keys without an equivalent, and why.
UNMAPPED: dict[str, str] = {
    "run.name": "rlvr names the run folder after the config file and the time (rlvr-train --run-dir to choose)",
    "tokenizer.use_fast": "rlvr uses the model's fast tokenizer",
    "training.seq_len_buckets": "padding buckets: rlvr pads each micro-batch to its longest sequence "
                                "(train.max_tokens_per_microbatch packs micro-batches by tokens)",
    "training.completion_len_buckets": "padding buckets: rlvr pads each micro-batch to its longest completion",
    "training.sft.seq_len_buckets": "padding buckets (see training.seq_len_buckets)",
    "training.max_concurrent_tasks": "their producer's concurrency; rlvr sends each round's prompts to the engines "
                                      "at once",
    "training.completions_per_micro_batch_reference": "their reference engine's batch; rlvr's reference is in the "
                                                      "trainer (train.micro_batch_size)",
    "data.num_samples": "their synthetic 'dummy' dataset's size (no such dataset in rlvr)",
    "training.resume_step": "rlvr-train --resume RUN_DIR resumes from the run's newest checkpoint",
    "training.rollout_timeout_s": "their per-request timeout drops a slow prompt; rlvr's sync.generate_timeout_s "
                                  "(a round's wall-clock limit, default 1800 s) stops the run instead: keep it",
    "verifier.max_concurrent": "Docker containers per worker: rlvr's code sandbox runs one check at a time per "
                               "pool worker (verify.jobs)",
    "roles.trainer.config.compile.enable": "rlvr does not torch.compile the trainer",
    "roles.trainer.config.compile.components": "rlvr does not torch.compile the trainer",
    "roles.trainer.config.checkpoint.export_dtype": "rlvr writes checkpoints in the model's dtype",
    "roles.trainer.config.profiling.enable_profiling": "no profiler hook in rlvr-train",
    "roles.trainer.config.profiling.save_traces_folder": "no profiler hook in rlvr-train",
    "roles.trainer.config.profiling.profile_freq": "no profiler hook in rlvr-train",
    "roles.trainer.config.activation_checkpoint.selective_ac_option": "rlvr checkpoints whole layers "
                                                                      "(train.gradient_checkpointing)",
}
# Their keys this port computes with (the others are checked as the rlvr key they become).
THEIR_NUMBERS: dict[str, object] = {
    **{f"training.{k}": int | None for k in ("batch_size", "prompts_per_optim_step", "prompts_per_rollout_sync",
                                            "sync_every_n_steps", "prompts_per_reference_sync")},
    "training.completions_per_micro_batch": int | dict[int, int] | None,
    **{f"training.{k}": float for k in ("alpha_grpo", "alpha_sft", "alpha_gkd")},
    **{f"loss.{k}": float for k in ("beta", "eps", "eps_low", "eps_high")},
    "loss.C": float,
    "sampling.n": int,
    "run.seed": int,
    "roles.trainer.config.lr_scheduler.decay_ratio": float | None,
    "roles.trainer.config.parallelism.data_parallel_shard_degree": int | None,
    "roles.trainer.config.parallelism.data_parallel_replicate_degree": int | None,
}
VLLM_KNOBS = ("max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
              "max_concurrent_per_replica")


# their sections that their code reads as mappings (a null one is absent), and the lists of mappings
SECTIONS = ("run", "model", "tokenizer", "training", "verifier", "loss", "data", "data_iter", "sft_data", "sampling",
            "buffer", "sync")


def _shape_error(source: str, key: str, want: str, value) -> Exception:
    from rlvr.errors import BadInput

    got = type(value).__name__
    shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:37] + "..."
    return BadInput(f"{source or 'their config'}: {key}: expected {want}, got {got} {shown}")


def check_shapes(their: dict, source: str = "") -> None:
    """BadInput "FILE: KEY: expected a mapping, got int 5" for a section of theirs that is not
    of the shape their code reads (data: 5, roles: [1, 2], a role whose config is a list),
    before any value is ported."""
    mapping = "a mapping (KEY: {...})"
    for key in SECTIONS:
        value = their.get(key)
        if value is not None and not isinstance(value, dict):
            raise _shape_error(source, key, mapping, value)
    roles = their.get("roles")
    if roles is not None and not isinstance(roles, list):
        raise _shape_error(source, "roles", "a list of roles (- name: trainer ...)", roles)
    for i, r in enumerate(roles or []):
        if not isinstance(r, dict):
            raise _shape_error(source, f"roles[{i}]", "a role mapping (name, kind, config)", r)
        if r.get("config") is not None and not isinstance(r["config"], dict):
            raise _shape_error(source, f"roles[{i}].config", mapping, r["config"])
    datasets = (their.get("data") or {}).get("datasets")
    if datasets is not None and not isinstance(datasets, list):
        raise _shape_error(source, "data.datasets", "a list of datasets (- name: gsm8k ...)", datasets)
    for i, e in enumerate(datasets or []):
        if not isinstance(e, dict):
            raise _shape_error(source, f"data.datasets[{i}]", "a dataset mapping (name, weight, order)", e)


def port_config(their: dict, source: str = "", accepted: Callable[[str], bool] = accepts) -> Port:
    """Port one of their configs (a parsed YAML mapping)."""
    if not isinstance(their, dict):
        raise ValueError("their config must be a YAML mapping")
    check_shapes(their, source)
    p = Port(their, source, accepted)
    for path, value in _leaves(their):   # the numbers their code reads and this port computes with
        tp = THEIR_NUMBERS.get(re.sub(r"\.datasets\[\d+\]\.", ".datasets[].", path))
        if tp is not None:
            from rlvr.config_loader import _fix_floats

            p.check(path, _fix_floats(value), tp)
    for i, e in enumerate((their.get("data") or {}).get("datasets") or []):
        if isinstance(e, dict) and "weight" in e:
            from rlvr.config_loader import _fix_floats

            p.check(f"data.datasets[{i}].weight", _fix_floats(e["weight"]), float)
    sft_only = not their.get("data") and bool(their.get("sft_data"))
    if sft_only:   # their train_sft_only.py: no RL data, loss or sampling
        if not p.set("sft.only", True):
            p.set("data.dataset", None)
            p.warnings.append("their run is SFT alone; rlvr-train runs it once it accepts sft.only")
        p.entries.append(Entry("(their default) no data section", "mapped" if p.is_set("sft.only") else "pending",
                               ["sft.only"], "SFT alone (their train_sft_only.py)", True))
        names = []
    else:
        names = _data(p)
    _steps(p)
    if not sft_only:
        _loss(p)
    _schedule(p)
    _trainer(p)
    _engines(p)
    _sft_and_distill(p)
    _tensorboard(p)
    for path, value in _leaves(their):
        if path in p.done:
            continue
        if path in SIMPLE and value is None and not _admits_none(SIMPLE[path][0]):
            p.imply(path, "null: the default applies", value)
        elif path in SIMPLE:
            key, fn = SIMPLE[path]
            try:
                ours = fn(value) if fn else value
            except (TypeError, ValueError):
                ours = value    # the type check of p.map names the key and the value
            p.map(path, {key: ours}, value=value)
        elif path in IMPLIED:
            p.imply(path, IMPLIED[path], value)
        elif path in UNMAPPED:
            p.unmap(path, UNMAPPED[path], value)
        elif path.startswith("roles.reference.config."):
            p.imply(path, "rlvr's KL reference is the initial policy in the trainer (no reference engine)", value)
        elif path.rsplit(".", 1)[-1] in VLLM_KNOBS:
            p.unmap(path, "a vLLM scheduler setting rlvr's engines choose themselves", value)
        elif path.startswith("roles.teacher.config."):
            p.unmap(path, "teacher engines beyond teacher.model and teacher.num_engines take the rollout "
                          "engines' settings", value)
        else:
            p.unmap(path, "not known to this port", value)
            p.warnings.append(f"{source or 'their config'}: {path}: a key this port does not know; not ported")
    # their GKD and OPSD entry points have no RL loss: none of its defaults (dynamic sampling, the ratio)
    _defaults(p, names, rl=not sft_only and (p.get("loss") or {}).get("name") != "opsd")
    return p


def _tensorboard(p: Port) -> None:
    """Their trainer's TensorBoard switch: rlvr's log.trackers (event files in RUN_DIR/tensorboard/)."""
    m = "roles.trainer.config.metrics."
    on = p.get(m + "enable_tensorboard")
    if on is None:
        return
    p.check(m + "enable_tensorboard", on, bool)
    if on:
        p.map(m + "enable_tensorboard", {"log.trackers": ["tensorboard"]},
              "TensorBoard event files in RUN_DIR/tensorboard/ (pip install rlvr[tensorboard])", on)
    else:
        p.imply(m + "enable_tensorboard", "no experiment tracker (rlvr's default; traces/trace.jsonl always)", on)
    if p.get(m + "save_tb_folder") is not None:
        p.imply(m + "save_tb_folder", "rlvr's TensorBoard folder is RUN_DIR/tensorboard/" if on
                else "no TensorBoard", p.get(m + "save_tb_folder"))


def _data(p: Port) -> list[str]:
    """data, data_iter: the datasets, mixture, filters, orders, templates; returns rlvr's names."""
    d = p.get("data") or {}
    name = d.get("dataset")
    entries = d.get("datasets") if name == "mixed" else [dict({k: v for k, v in d.items() if k not in (
        "dataset", "seed", "split")}, name=name)] if name else []
    names, weights, orders, filters, splits = [], {}, {}, {}, set()
    for i, e in enumerate(entries or []):
        theirs = e.get("name")
        ours = DATASETS.get(theirs, theirs)
        if ours is None and _known_dataset(theirs):   # rlvr has since gained a dataset of that name
            ours = theirs
        where = f"data.datasets[{i}]" if name == "mixed" else "data.dataset"
        if ours is None or not _known_dataset(ours):
            p.unmap(f"{where}.name" if name == "mixed" else where,
                    f"rlvr has no dataset {theirs!r} here", theirs)
            continue
        names.append(ours)
        if ours == "allenai":
            if "parse_kshot" in e:
                p.unmap(f"{where}.parse_kshot" if name == "mixed" else "data.parse_kshot",
                        "their loader splits a k-shot prompt into user/assistant turns; rlvr-data allenai keeps "
                        "each row's messages as published", e["parse_kshot"])
            p.unmap(f"(their default) {theirs} prompts",
                    "their loader rewrites AllenAI's GSM8K rows (Q:/A:, 4 of the 8 shots, 'The answer is', assistant "
                    "prefix 'A:'); rlvr-data allenai keeps the rows' own prompts (each kind's own length is ported: "
                    "rollout.max_tokens_by_dataset)", theirs)
            if e.get("datasets"):
                p.map(f"{where}.datasets" if name == "mixed" else "data.datasets",
                      {"data.kinds": [str(k).lower() for k in e["datasets"]]}, "the kinds of rows kept", e["datasets"])
        weights[ours] = float(e.get("weight", 1.0))
        if e.get("order"):
            orders[ours] = e["order"]
        for f in ("level", "difficulty"):
            if e.get(f) is not None:
                filters.setdefault(ours, {})[f] = e[f] if isinstance(e[f], list) else [e[f]]
        if e.get("split"):
            splits.add(e["split"])
        if e.get("count") is not None:
            p.unmap(f"{where}.count", "sequential counts: write the order with data.order", e["count"])
    if name == "mixed":
        p.imply("data.dataset", "'mixed': their marker of a mixture (data.datasets)", name)
        if len(names) == 1:
            p.map("data.datasets", {"data.dataset": names[0]}, "a mixture of one dataset", entries)
        elif names:
            p.map("data.datasets", {"data.dataset": None, "data.mix": weights}, value=entries)
        mode = d.get("mode", "weighted")
        if mode != "weighted":
            p.unmap("data.mode", "sequential mixtures: one data.order file listing the prompts in sequence", mode)
        else:
            p.imply("data.mode", "rlvr interleaves a mixture by weight", mode)
    elif names:
        p.map("data.dataset", {"data.dataset": names[0]}, f"their {name!r} is rlvr's {names[0]!r}", name)
    p.done.update({"data.dataset", "data.datasets"})
    if not names:   # never rlvr's default dataset in its place: rlvr-train refuses until one is set
        p.set("data.dataset", None)
        p.warnings.append("none of their datasets exists in rlvr: set data.dataset or data.mix before training")
    prefix = "data.datasets[]." if name == "mixed" else "data."
    if orders:
        p.map(prefix + "order", {"data.order": orders if len(names) > 1 else orders[names[0]]}, value=orders)
    if filters:
        p.map(prefix + "level/difficulty", {"data.filters": filters if len(names) > 1 else filters[names[0]]},
              value=filters)
        for f in ("level", "difficulty"):
            if name != "mixed" and f in d:
                p.imply(f"data.{f}", "ported as data.filters", d[f])
    if splits:
        if len(splits) == 1:
            p.set("data.split", splits.pop())
        else:
            p.unmap("data.datasets[].split", f"rlvr reads one split for all datasets ({sorted(splits)})")
    it = p.get("data_iter") or {}
    if "skip_chat_template" in it:
        p.map("data_iter.skip_chat_template", {"data.chat": not it["skip_chat_template"]}, value=it["skip_chat_template"])
    if it.get("system_prompt"):
        if it.get("skip_chat_template", True):
            p.unmap("data_iter.system_prompt", "without a chat template their loader writes the system prompt and a "
                    "blank line before each prompt; rlvr's data.system goes with data.chat only", it["system_prompt"])
        else:
            p.map("data_iter.system_prompt", {"data.system": it["system_prompt"]}, "the chat prompts' system message",
                  it["system_prompt"])
    if it.get("assistant_prefix"):
        p.map("data_iter.assistant_prefix", {"data.assistant_prefix": it["assistant_prefix"]}, value=it["assistant_prefix"])
    if it.get("chat_template"):
        _chat_template(p, it["chat_template"])
    return names


# Their named chat formats (src/rlvr_experiments/chat_templates.py) and the template rlvr ships for each.
CHAT_TEMPLATES = {"tulu_thinker_r1_style": "tulu_thinker_r1_style"}


def _chat_template(p: Port, theirs) -> None:
    """data_iter.chat_template: one of their named formats, applied to the rows' own messages
    (their chat path ignores skip_chat_template). The R1-style format opens the thinking
    block in the prompt, so every completion is judged on what follows its </think>."""
    ours = CHAT_TEMPLATES.get(theirs)
    if ours is None:
        p.unmap("data_iter.chat_template", f"rlvr ships no template for their format {theirs!r} "
                                           f"(data.chat_template takes a Jinja file)", theirs)
        return
    p.map("data_iter.chat_template", {"data.chat": True, "data.chat_template": ours, "data.thinking": True},
          "rlvr's copy of that format (rlvr/resources/chat_templates); its prompt ends in '<think>', so the "
          "completions are judged on the answer after '</think>'", theirs)


def _known_dataset(name: str) -> bool:
    from rlvr.data.catalog import SPECS

    return name in SPECS


def _steps(p: Port) -> None:
    """Prompts per step, weight sync and reference sync in steps."""
    t = p.get("training") or {}
    n = (p.get("sampling") or {}).get("n", 1) or 1
    optim = t.get("prompts_per_optim_step")
    if optim is None and t.get("batch_size"):
        optim = max(1, int(t["batch_size"]) // n)
        p.map("training.batch_size", {"rollout.prompts_per_step": optim},
              f"{t['batch_size']} completions per step / sampling.n {n}", t["batch_size"])
    elif optim is not None:
        p.map("training.prompts_per_optim_step", {"rollout.prompts_per_step": optim}, value=optim)
    if t.get("prompts_per_rollout_sync") is not None:
        k = max(1, int(t["prompts_per_rollout_sync"]) // int(optim or 1))
        if k > 1:
            p.map("training.prompts_per_rollout_sync", {"sync.every_steps": k},
                  f"{t['prompts_per_rollout_sync']} / prompts_per_optim_step {optim}", t["prompts_per_rollout_sync"])
        else:
            p.imply("training.prompts_per_rollout_sync", "weights reach the engines after every step (rlvr's default)",
                    t["prompts_per_rollout_sync"])
    if t.get("sync_every_n_steps") is not None:
        k = int(t["sync_every_n_steps"])
        if k > 1:
            p.map("training.sync_every_n_steps", {"sync.every_steps": k}, value=k)
        else:
            p.imply("training.sync_every_n_steps", "weights reach the engines after every step (rlvr's default)", k)
    ref = t.get("prompts_per_reference_sync")
    if ref is not None:
        beta = (p.get("loss") or {}).get("beta", 0)
        k = max(1, int(ref) // int(optim or 1))
        if ref >= NEVER or not beta:
            p.imply("training.prompts_per_reference_sync", "a frozen KL reference, the initial policy (rlvr's default)"
                    if beta else "no KL term (loss.beta 0)", ref)
        else:
            p.map("training.prompts_per_reference_sync", {"train.ref_sync_every": k},
                  f"{ref} / prompts_per_optim_step {optim}", ref)
    cpm = t.get("completions_per_micro_batch")
    if isinstance(cpm, dict) and cpm:
        p.map("training.completions_per_micro_batch", {"train.micro_batch_size": int(min(cpm.values()))},
              "their smallest micro-batch (the one their longest sequences needed)", cpm)
    elif isinstance(cpm, int):
        p.map("training.completions_per_micro_batch", {"train.micro_batch_size": cpm}, value=cpm)
    _adaptive(p, t, n)
    if t.get("abort_in_flight") is not None:
        if t["abort_in_flight"] and int(t.get("max_staleness") or 0) >= 1:
            p.map("training.abort_in_flight", {"sync.abort_in_flight": "resubmit"},
                  "generations on older weights at a sync are aborted and sent again", True)
        elif t["abort_in_flight"]:
            p.imply("training.abort_in_flight", "with max_staleness 0 nothing generates at a weight sync in rlvr: "
                    "nothing to abort", True)
        else:
            p.imply("training.abort_in_flight", "generations in flight finish (rlvr's behaviour)", False)
    for key, value, why in (("alpha_grpo", 1.0, "the RL loss at weight 1"),):
        if key in t:
            if float(t[key]) == value:
                p.imply(f"training.{key}", why, t[key])
            elif float(t[key]) == 0 and p.get("sft_data"):
                p.map(f"training.{key}", {"sft.only": True}, "no RL loss: the SFT baseline", t[key])
            else:
                p.unmap(f"training.{key}", "rlvr weighs the RL loss 1 (the extra losses carry their own weights)",
                        t[key])


def _adaptive(p: Port, t: dict, n: int) -> None:
    """training.adaptive_sampling {k_success, k_failure, max_completions, chunk_size} -> rollout.adaptive
    (rlvr.train.adaptive). Their first round is chunk_size completions, rlvr's rollout.n (the group the loss sees);
    their max_total_tokens has no counterpart."""
    a = t.get("adaptive_sampling")
    if not isinstance(a, dict) or not a:
        return
    max_n = int(a.get("max_completions") or n)
    ours = {"rollout.adaptive.max_n": max(max_n, n), "rollout.adaptive.k_pos": int(a.get("k_success") or 0),
            "rollout.adaptive.k_neg": int(a.get("k_failure") or 0)}
    if a.get("chunk_size"):
        ours["rollout.adaptive.chunk"] = int(a["chunk_size"])
    why = "more completions per prompt until k successes and k failures, a balanced group of rollout.n for the loss"
    if a.get("max_total_tokens") is not None:
        why += "; their max_total_tokens (a token budget per prompt) has no counterpart: max_n bounds it"
    p.map("training.adaptive_sampling", ours, why, a)


def _loss(p: Port) -> None:
    """loss: grpo / drgrpo (their default, C = 2048) / dapo, beta, eps, and their ratio."""
    loss = p.get("loss") or {}
    name = loss.get("name")
    beta = float(loss.get("beta", 0.0))
    values: dict[str, object] = {"train.loss.beta": beta}
    if name in (None, "drgrpo"):
        eps = float(loss.get("eps", 0.0))
        values.update({"train.loss.loss_type": "dr_grpo", "train.loss.max_tokens": int(float(loss.get("C", 2048))),
                       "train.scale_rewards": "none"})
        why = "Dr. GRPO: mean-centred advantages, the token sum divided by C"
    elif name == "grpo":
        eps = float(loss.get("eps", 0.2))
        values.update({"train.loss.loss_type": "grpo", "train.scale_rewards": "group"})
        why = "GRPO: group-normalised advantages, each sequence's token mean"
    elif name == "dapo":
        eps = None
        values.update({"train.loss.loss_type": "dapo", "train.scale_rewards": "group",
                       "train.loss.clip_low": float(loss.get("eps_low", 0.2)),
                       "train.loss.clip_high": float(loss.get("eps_high", 0.28))})
        why = "DAPO: token-level mean, clip-higher"
    else:
        for k, v in loss.items():
            p.unmap(f"loss.{k}", f"their {name!r} loss (distillation, not an RL loss): see training.*", v)
        return
    if eps is not None:
        # their eps 0 (Dr. GRPO's default) clips nothing: a lower bound of 0 and an upper one never reached
        values.update({"train.loss.clip_low": eps if eps > 0 else 1.0, "train.loss.clip_high": eps if eps > 0 else 1e9})
    p.map("loss.name" if name else "(their default) loss.name", values, why, name)
    for k in ("beta", "eps", "eps_low", "eps_high", "C"):
        if k in loss:
            p.imply(f"loss.{k}", "ported with loss.name", loss[k])


def _schedule(p: Port) -> None:
    tr = "roles.trainer.config."
    decay = p.get(tr + "lr_scheduler.decay_ratio")
    if decay is not None:
        if float(decay) == 0:
            p.map(tr + "lr_scheduler.decay_ratio", {"train.lr_schedule": "constant"}, "no decay after warm-up", decay)
        else:
            p.map(tr + "lr_scheduler.decay_ratio", {"train.lr_schedule": "linear"},
                  "torchtitan decays over the last decay_ratio of the steps; rlvr's linear decays over all steps "
                  "after warm-up", decay)


def _trainer(p: Port) -> None:
    tr = "roles.trainer.config."
    par = p.get(tr + "parallelism") or {}
    if par:
        n = int(par.get("data_parallel_shard_degree", 1) or 1) * int(par.get("data_parallel_replicate_degree", 1) or 1)
        tp = max(1, int(par.get("tensor_parallel_degree", 1) or 1))
        # every GPU they gave: n data-parallel x tp tensor-parallel ranks (rlvr.train.parallel's mesh)
        p.map(tr + "parallelism.data_parallel_shard_degree", {"train.num_trainers": max(1, n) * tp},
              "trainer ranks: data-parallel (shard x replicate) x tensor-parallel" if tp > 1 else
              "data-parallel ranks (shard x replicate)", n)
        if tp > 1 and _billions(p) is not None and _billions(p) <= SMALL_MODEL_B:
            # a small model: FSDP over the same GPUs beats TP (no per-layer all-reduces); each rank
            # then takes its own micro-batch, cut by tp to keep a rank's activations
            mb = p.get_ours("train.micro_batch_size")
            values: dict[str, object] = {"train.num_trainers": max(1, n) * tp}
            if isinstance(mb, int):
                values["train.micro_batch_size"] = max(1, mb // tp)
            p.map(tr + "parallelism.tensor_parallel_degree", values,
                  f"meaning changed: a {_billions(p):g}B model trains faster as {max(1, n) * tp} FSDP ranks than "
                  f"in TP groups of {tp}: the same GPUs, each rank its own micro-batch"
                  + (f" (train.micro_batch_size {mb} / {tp})" if isinstance(mb, int) else ""), tp)
            p.changed.append(tr + "parallelism.tensor_parallel_degree")
        elif "tensor_parallel_degree" in par:
            p.map(tr + "parallelism.tensor_parallel_degree", {"train.tensor_parallel": tp},
                  "TP groups of consecutive trainer ranks; train.num_trainers counts all of them (dp x tp GPUs), "
                  "FSDP over the data-parallel dimension", par["tensor_parallel_degree"])
        if "data_parallel_replicate_degree" in par:
            p.imply(tr + "parallelism.data_parallel_replicate_degree", "counted in train.num_trainers",
                    par["data_parallel_replicate_degree"])
    mode = p.get(tr + "activation_checkpoint.mode")
    if mode is not None:
        p.map(tr + "activation_checkpoint.mode", {"train.gradient_checkpointing": mode not in ("none", None)},
              value=mode)
    reduce = p.get(tr + "training.mixed_precision_reduce")
    if reduce is not None:   # FSDP's gradient reduce-scatter dtype (their torchtitan's default: float32)
        if str(reduce) in ("float32", "bfloat16"):
            p.map(tr + "training.mixed_precision_reduce", {"train.grad_reduce_dtype": str(reduce)},
                  "the dtype FSDP ranks reduce-scatter gradients in", reduce)
        else:
            p.unmap(tr + "training.mixed_precision_reduce", "rlvr's FSDP ranks reduce gradients in float32 or "
                    "bfloat16 (train.grad_reduce_dtype)", reduce)
    for role in _role_names(p):
        lpm = (_role(p, role).get("config") or {}).get("logprobs_mode")
        if lpm is not None:
            value = "raw" if "raw" in str(lpm) else "processed"
            temp = (p.get("sampling") or {}).get("temperature")
            hot = isinstance(temp, (int, float)) and not isinstance(temp, bool) and float(temp) not in (0.0, 1.0)
            if role == "rollout" and value == "raw" and hot:   # (a wrong-typed temperature is refused below)
                # their PPO ratio compared vLLM's log-probs before the temperature with the trainer's at it
                p.map(f"roles.{role}.config.logprobs_mode", {"rollout.logprobs": "processed"},
                      f"meaning changed: raw log-probs at temperature {float(temp):g} against the trainer's at that "
                      "temperature made their importance ratio compare two distributions; rlvr takes the engine's "
                      "log-probs at the temperature (processed)", lpm)
                p.changed.append(f"roles.{role}.config.logprobs_mode")
            elif role == "rollout":
                p.map(f"roles.{role}.config.logprobs_mode", {"rollout.logprobs": value}, value=lpm)
            else:
                p.imply(f"roles.{role}.config.logprobs_mode", "the policy's log-probs come from the rollout engines", lpm)


SMALL_MODEL_B = 4.0   # up to this many billion parameters, their TP degrees port to FSDP ranks


def _billions(p: Port) -> float | None:
    """The model's size in billions of parameters from their trainer's model.flavor ("1.7B")
    or their model.path (".../Qwen3-32B"); None when neither says."""
    for text in (p.get("roles.trainer.config.model.flavor"), p.get("model.path")):
        m = re.search(r"(\d+(?:\.\d+)?)B\b", str(text or ""))
        if m:
            return float(m.group(1))
    return None


def _role_names(p: Port) -> list[str]:
    return [r.get("name") for r in p.their.get("roles") or [] if isinstance(r, dict)]


def _role(p: Port, name: str) -> dict:
    return next((r for r in p.their.get("roles") or [] if isinstance(r, dict) and r.get("name") == name), {})


def _engines(p: Port) -> None:
    for role in _role_names(p):
        if role not in ("trainer", "rollout", "reference", "teacher"):
            for path, value in _leaves({"roles": [_role(p, role)]}):
                p.unmap(path, f"rlvr has no actor for their role {role!r}", value)


def _sft_and_distill(p: Port) -> None:
    t = p.get("training") or {}
    if not p.get("sft_data"):
        for k in (t.get("sft") or {}):
            p.imply(f"training.sft.{k}", "no sft_data: no SFT loss", t["sft"][k])
    if "alpha_sft" in t:
        if p.get("sft_data"):
            p.map("training.alpha_sft", {"sft.weight": float(t["alpha_sft"])}, value=t["alpha_sft"])
        else:
            p.imply("training.alpha_sft", "no sft_data: no SFT loss", t["alpha_sft"])
    alone = (p.get("loss") or {}).get("name") == "opsd"   # their train_gkd.py / train_opsd.py: no RL loss
    kind = t.get("opsd_loss_type", "kl")                   # train_opsd.py's default
    if "opsd_loss_type" in t:
        if kind in ("jsd", "kl"):
            p.map("training.opsd_loss_type", {"train.distill.loss": kind}, value=kind)
        else:
            p.unmap("training.opsd_loss_type", f"their {kind!r} loss: their entry point names a loss it does not "
                    "define; rlvr's are jsd and kl (train.distill.loss)", kind)
            p.warnings.append(f"their opsd_loss_type {kind!r} has no rlvr equivalent: this config distils with "
                              "train.distill.loss jsd (set kl for their top-k KL)")
    if "alpha_gkd" in t:
        p.map("training.alpha_gkd", {"train.distill.weight": float(t["alpha_gkd"])}, "GRPO + GKD", t["alpha_gkd"])
    elif alone:
        p.map("(their default) loss.name opsd", {"train.distill.weight": 1.0, "train.distill.only": True,
                                                 **({"train.distill.loss": kind} if kind in ("jsd", "kl") else {})},
              "distillation alone (their GKD and OPSD entry points)", "opsd")
    if alone or "alpha_gkd" in t:
        _teacher(p, t, alone)
    if (p.get("loss") or {}).get("name") == "opsd" and "train.distill.weight" in p.pending:
        p.warnings.append("their run trains by distillation alone; until rlvr-train accepts train.distill "
                          "this config trains with rlvr's RL loss instead")


# Their OPSD teacher prompts where the policy is its own teacher (train_opsd.py): GSM8K shows the
# answer first, then asks again; instruction following appends the failed constraints.
SELF_TEACHER = {
    "gsm8k": "Q: {question}\nA: {answer}\n\nSolution:\nQ: {question}\nA:",
    "if_multi_constraints": "{prompt}\n\nIMPORTANT: In a previous attempt, you failed to satisfy these constraints. "
                            "Please make sure to follow them this time:\n{feedback}\n\nWrite your answer now.",
}


def _teacher(p: Port, t: dict, alone: bool) -> None:
    """The teacher their distillation runs use: a teacher role (its prompt through its chat
    template unless teacher_use_chat_template is false), or, for OPSD without one, the policy
    under their privileged prompt for the dataset; OPSD's default keeps only wrong completions."""
    if _role(p, "teacher"):
        if "teacher_use_chat_template" not in t:
            p.map("(their default) teacher_use_chat_template", {"teacher.chat": True},
                  "their teacher reads the student's prompt through its chat template", True)
    elif alone:
        name = (p.get("data") or {}).get("dataset")
        if name in SELF_TEACHER:
            p.map("(their default) no teacher role", {"teacher.model": "policy", "teacher.template": SELF_TEACHER[name]},
                  "the policy teaches itself on the rollout engines under their privileged prompt", None)
        else:
            p.warnings.append(f"their self-distillation has a privileged prompt for gsm8k and if_multi_constraints "
                              f"only, not {name!r}: set teacher.model policy and teacher.template yourself")
    if alone and "discard_perfect_completions" not in t:
        p.map("(their default) discard_perfect_completions", {"train.distill.only_incorrect": True},
              "their OPSD distils only the completions that were not perfect", True)


def _allenai_lengths(p: Port) -> dict[str, int]:
    """Their allenai_rlvr lengths per kind. Their loop shortens a prompt's length to the room
    its prompt leaves in the context; rlvr's lengths are fixed (a prompt that does not fit is
    dropped), so a kind's length that leaves no room at all (2,048 in a 1,280-token context)
    becomes sampling.max_tokens, the room every other prompt has."""
    ctx = p.get("roles.rollout.config.max_model_len")
    default = (p.get("sampling") or {}).get("max_tokens")
    return {k: (n if not isinstance(ctx, int) or n < ctx or not isinstance(default, int) else default)
            for k, n in ALLENAI_MAX_COMPLETION_LEN.items()}


def _defaults(p: Port, names: list[str], rl: bool = True) -> None:
    """Their code's behaviour where the config is silent (rl: an RL run, not SFT alone)."""
    if names:
        templates = {n: TEMPLATES[n] for n in names if n in TEMPLATES}
        if templates:
            p.map("(their default) prompt format per dataset",
                  {"data.template": templates if len(names) > 1 else templates[names[0]]},
                  "their loaders' prompts (src/rlvr_experiments/data.py)", templates)
        lens = {n: MAX_COMPLETION_LEN[n] for n in names if n in MAX_COMPLETION_LEN}
        if "allenai" in names:
            lens.update(_allenai_lengths(p))
            p.map("(their default) allenai_rlvr verifiers", {"verify.verifier_config": {"math.mode": "allenai"}},
                  "their allenai_gsm8k and allenai_math verifiers are AllenAI's rules (GSM8K: the last number)",
                  "allenai")
        if lens:
            p.map("(their default) max_completion_len per dataset", {"rollout.max_tokens_by_dataset": lens},
                  "each dataset's own length overrides sampling.max_tokens" + (
                      "; allenai's per kind, one that leaves no room for a prompt in the context as "
                      "sampling.max_tokens (their loop shortens it to each prompt's room)" if "allenai" in names
                      else ""), lens)
    if not p.is_set("train.steps") and "train.steps" not in p.pending:
        p.map("(their default) no training.max_steps", {"train.steps": NEVER},
              "train until the data ends (data.epochs)", None)
        if not p.is_set("data.epochs"):
            p.set("data.epochs", 1)
    if rl:
        p.map("(their default) refill the batch with informative groups",
              {"dapo.dynamic_sampling": True, "dapo.max_extra_rounds": 0, "dapo.overlong_buffer": 0},
              "groups whose rewards are all equal are dropped and more prompts drawn, without a cap and without "
              "DAPO's overlong punishment", True)
        ratio = p.accepted("train.loss.ratio_to")
        p.map("(their default) PPO ratio against the engine's log-probs",
              {"train.loss.ratio_to": "engine", **({"train.loss.tis_cap": None} if ratio else {})},
              "their loss clips pi_theta / pi_vllm; rlvr's TIS correction is off then"
              if ratio else "until then rlvr keeps its TIS correction (train.loss.tis_cap)", "vllm logprobs")
    if rl and (p.get("loss") or {}).get("name") in ("grpo", "dapo"):
        p.map("(their default) population std of the group", {"train.adv_std": "population"},
              "std with unbiased=False", "population")
    opt = "roles.trainer.config.optimizer"
    if p.get(opt) is not None:
        if p.accepted("compat"):
            p.map("(their default) torchtitan AdamW", {"compat": "torchtitan"},
                  "weight decay 0.1, beta2 0.95, grad clip 1.0", "torchtitan")
        else:
            p.map("(their default) torchtitan AdamW", dict(TORCHTITAN), "weight decay 0.1, beta2 0.95, grad clip 1.0",
                  "torchtitan")
    seed = (p.get("run") or {}).get("seed", 42)
    for key in ("data.seed", "rollout.seed", "train.seed"):
        if not p.is_set(key):
            p.set(key, int(seed))
    p.imply("(their default) seed", f"{seed} for data order, sampling and the trainer", seed)
    if not p.is_set("data.chat"):
        p.map("(their default) data_iter.skip_chat_template", {"data.chat": False}, "no chat template", True)
