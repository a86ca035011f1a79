"""rlvr-train's driver: data stream -> engine actors -> verifier pool -> trainer actor -> weights.

One loop serves the synchronous and the asynchronous mode; each concern has its own module:
rlvr.train.schedule (which prompts go to the engines, and when: staleness), rlvr.train.batch
(rewards, dynamic sampling, advantages, the trainer's batch), rlvr.train.metrics (what a step
writes). A step reads:

    admit rounds the staleness bound allows -> collect this step's groups -> verify
    -> dynamic sampling (draw more) -> assemble the batch -> train -> sync weights
    -> metrics and traces -> checkpoint

Weights go from the trainer to every engine after each step, tagged with the new version.
Engine calls run in order per actor, so an update lands between two generate calls. A dead or
hung engine (no answer within sync.generate_timeout_s) is killed, restarted from the current
weights and its prompts are requeued (counted as faults/requeued_prompts); training goes on. A
prompt that cannot fit the engine's context is never sent (faults/dropped_prompts), and a
request the engine refuses fails that prompt only (faults/failed_prompts): neither restarts an
engine. Both are written to traces/rollouts.jsonl with their status.
"""

from __future__ import annotations

import os
import re
import sys
import time
from dataclasses import dataclass

from rlvr.engines.base import end_of_turn_ids, prompt_seed
from rlvr.errors import ConfigError, Failure
from rlvr.messages import say
from rlvr.runs import (COMPLETE, Traces, checkpoint_dir, commit_checkpoint, end_manifest, init_run_dir,
                       latest_checkpoint, prune_checkpoints, tmp_checkpoint_dir, truncate_traces, update_manifest)
from rlvr.train.batch import Filled, Group, assemble, fill, verify
from rlvr.train.config import TrainConfig, resolve_preset
from rlvr.train.metrics import Faults, StepTimes, rollout_record, sample_record, step_metrics, unusable_record
from rlvr.train.schedule import Round, Schedule
from rlvr.train.trainer import Batch, merge_metrics


def log(msg: str) -> None:
    say(msg)  # "rlvr-train: msg", named by rlvr.cli.run


@dataclass(eq=False)   # compared and hashed by identity (the driver keeps a set of them)
class Chunk:
    engine: int
    ref: object
    items: list        # [(record, epoch, prompt ids, stop strings)]
    submitted: float
    actor: object = None  # the engine actor it was sent to (a restarted engine is a new actor)


def prompt_token_ids(tokenizer, rec: dict) -> list[int]:
    """The same tokenisation rlvr-rollout uses: chat messages through the chat template (the
    record's template file and thinking switch, rlvr.data.templates), strings as they are."""
    from rlvr.rollout import Prompter

    return Prompter(tokenizer, "auto", 0).ids(rec)


def prompt_max_tokens(rec: dict, default: int) -> int:
    """A prompt's generation length: the record's own `max_tokens` (rollout.max_tokens_by_dataset
    writes it), else the config's."""
    n = rec.get("max_tokens")
    return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else default


def prompt_stops(rec: dict, default: list[str]) -> list[str]:
    """The stop strings of a prompt: the config's, then the record's own (as rlvr-rollout)."""
    extra = rec.get("stop") or []
    if isinstance(extra, str):
        extra = [extra]
    return list(dict.fromkeys([*default, *(s for s in extra if s)]))


class Run:
    def __init__(self, cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool):
        self.cfg = resolve_preset(cfg)
        # absolute: the trainer actors write checkpoints into it, and a Ray worker's working
        # directory is not the driver's on a cluster joined with --ray-address
        self.run_dir = os.path.abspath(run_dir)
        self.argv = argv
        self.config_yaml = config_yaml
        self.resume = resume
        self.faults = Faults()
        self.tokenizer = None
        self.trainers: list = []
        self.trainer = None
        self.engines: list = []
        self.engine_count = 0                    # engine actors ever made (names stay unique)
        self.base = None                         # the base model (rlvr.models.ResolvedModel)
        self.max_prompt_len: int | None = None   # longest prompt that fits an engine's context
        self.schedule: Schedule | None = None
        self.synced_version = 0                  # the version the engines hold (or will, once synced)
        self.trained_version = 0                 # the version the trainer holds
        self.sft = None                          # rlvr.train.sft.SftData with an `sft` section
        self.distill = None                      # rlvr.train.distill.Distiller with train.distill.weight > 0
        self.pending_syncs: dict[int, object] = {}   # engine -> an update not yet confirmed (async mode)
        self.last_done: dict[int, float] = {}    # engine -> when it last delivered
        self.times = StepTimes()
        self.validation = None                   # rlvr.train.validation.Validation (the eval section)
        self.plan: dict | None = None            # rlvr.train.plan's, made against the live cluster
        self.groups: list = []                   # placement groups to remove at the end
        self.outstanding: set = set()            # generate calls not yet collected (Chunk)
        self.where: dict[int, dict] = {}         # id(engine actor) -> its placement (node, pid)
        self.sync_verified: int | None = None    # engines whose received weights matched the trainer's
        self.end_of_turn: list[int] = []         # the chat template's end-of-turn token(s)

    # -- set-up ------------------------------------------------------------------------------

    def _base_model(self):
        """The base model as a ResolvedModel: each actor loads it through .local() on its own node."""
        from rlvr.models import local_model, resolve_model

        path = self.cfg.model.path
        if path == "tiny":
            path = os.path.join(self.run_dir, "base_model")
            if not os.path.exists(os.path.join(path, "config.json")):
                from rlvr.tiny import build

                build(path, seed=self.cfg.train.seed)
            return local_model(path)
        # s3://... (and Org/Name under $RLVR_S3_MODELS) -> a local folder, before any engine starts
        m = resolve_model(path, log=log)
        update_manifest(self.run_dir, model=m.record())
        return m

    def _env(self) -> dict:
        # CUDA_VISIBLE_DEVICES is not passed on: Ray sets it in each actor to the GPUs it
        # assigned to that actor (copying the driver's would give every actor the same ones).
        keep = ("OMP_NUM_THREADS", "VLLM_CPU_KVCACHE_SPACE", "TOKENIZERS_PARALLELISM", "CUDA_DEVICE_ORDER",
                "HF_HUB_OFFLINE", "VLLM_LOGGING_LEVEL", "PYTHONPATH")
        env = {k: os.environ[k] for k in keep if k in os.environ}
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("TOKENIZERS_PARALLELISM", "false")
        return env

    def _ray_address(self) -> str:
        """The Ray cluster to join, "" for a Ray of our own: ray.address, else RAY_ADDRESS (set
        by `ray job submit`), else a cluster `ray start` left running on this machine
        (rlvr.train.ray_cluster; `local` in either asks for a Ray of our own)."""
        from rlvr.train import ray_cluster

        if getattr(self, "ray_choice", None) is None:
            self.ray_choice = ray_cluster.choose(self.cfg.ray.address, self.cfg.ray.temp_dir, os.environ)
        return self.ray_choice.address or ""

    def _ray_init(self) -> None:
        from rlvr.train import ray_cluster
        from rlvr.train.placement import join_in_token_mode, ray_gpu_args

        address = self._ray_address()
        if address:
            join_in_token_mode(os.environ)  # takes effect only before Ray is first imported
        import ray

        os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
        if ray.is_initialized():
            self.ray_info = ray_cluster.describe(None)
            return
        if self.ray_choice.line():
            log(self.ray_choice.line())
        # Actor logs (vLLM's start-up chatter) reach stderr only with RLVR_DEBUG=1; errors
        # raised in actors always surface through ray.get.
        kw: dict = {"include_dashboard": False, "log_to_driver": bool(os.environ.get("RLVR_DEBUG")),
                    "logging_level": "ERROR"}
        if address:
            if os.environ.get("CUDA_VISIBLE_DEVICES") is not None:
                log("CUDA_VISIBLE_DEVICES does not limit a running Ray cluster: start its nodes with it "
                    "(ray start under CUDA_VISIBLE_DEVICES=...)")
            ray.init(address=address, **kw)
            note = ray_cluster.temp_dir_note(self.cfg.ray.temp_dir, ray_cluster.connected()[1])
            if note:
                log(note)
        else:
            if self.cfg.ray.temp_dir:  # e.g. NVMe when / is small; Ray wants an absolute path
                os.makedirs(self.cfg.ray.temp_dir, exist_ok=True)
                kw["_temp_dir"] = os.path.abspath(self.cfg.ray.temp_dir)
            gpus, note = ray_gpu_args(self.cfg.ray.num_gpus, os.environ.get("CUDA_VISIBLE_DEVICES"))
            if note:
                log(note)
            if gpus is not None:
                kw["num_gpus"] = gpus
            ray.init(address="local", num_cpus=self.cfg.ray.num_cpus or os.cpu_count(), **kw)
        self.ray_info = ray_cluster.describe(self.ray_choice)

    def _has_gpus(self) -> bool:
        import ray

        return ray.cluster_resources().get("GPU", 0) > 0

    def _engine_options(self) -> dict:
        r = self.cfg.rollout
        dtype = r.dtype
        if dtype == "auto":
            half = "float16" if self.cfg.train.dtype in ("float16", "fp16") else "bfloat16"  # the trainer's
            dtype = half if self._has_gpus() else "float32"
        # the plan caps the fraction where an engine shares its GPU with a trainer rank
        fraction = (self.plan or {}).get("engine_gpu_memory_utilization") or r.gpu_memory_utilization
        opts = {"dtype": dtype, "max_model_len": r.max_model_len, "gpu_memory_utilization": fraction,
                "tensor_parallel_size": r.tensor_parallel_size, "enforce_eager": r.enforce_eager, "seed": r.seed,
                "logprobs_mode": r.logprobs}
        seqs = r.max_num_seqs
        if seqs is None and self._in_flight():
            # one round per engine: the round the trainer needs next runs at full speed (first come, first
            # served), the next one's requests take the slots its finished sequences free
            seqs = -(-r.prompts_per_step // max(1, r.num_engines)) * r.n
        if seqs and r.engine == "vllm":
            opts["extra"] = {"max_num_seqs": seqs}
        if self.cfg.teacher.model == "policy":   # the policy as its own teacher scores its top-k here (rlvr.train.distill)
            opts["max_logprobs"] = max(20, self.cfg.teacher.top_k)
        return opts

    def _engine_resources(self) -> dict:
        r = self.cfg.rollout
        res: dict = {"num_cpus": r.engine_num_cpus}
        if self._has_gpus():
            res["num_gpus"] = r.engine_num_gpus * r.tensor_parallel_size
        if r.engine_resources:
            res["resources"] = dict(r.engine_resources)
        return res

    def _preflight(self, base) -> dict | None:
        """rlvr-train --plan's checks against the cluster this run joined or started, before any
        actor exists (rlvr.train.plan): too many GPUs or CPUs asked, a GPU shared under nccl,
        a trainer or shared GPU whose memory cannot hold what is planned stop the run here
        with the arithmetic (exit 2); the plan goes to run.json. A model whose config.json
        cannot be read (an unusual layout) skips the memory part."""
        from rlvr.train import plan as planning

        cluster = planning.cluster_from_ray(address=self._ray_address() or None)
        try:
            raw, _ = planning.read_model_config(base.path)
            shape = planning.ModelShape.from_config(raw, name=self.cfg.model.path)
        except Exception as ex:  # noqa: BLE001 - the run itself will say what is wrong with the model
            log(f"the plan's memory estimates are skipped: {ex}")
            shape = None
        p = planning.make_plan(self.cfg, cluster, shape)
        update_manifest(self.run_dir, plan={k: v for k, v in p.items() if k != "actors"})
        for note in p["notes"]:
            log(note)
        if not p["fits"]:
            raise ConfigError("the run does not fit its Ray cluster (rlvr-train CONFIG --plan shows the plan): "
                              + "; ".join(p["problems"]))
        return p

    def _new_engine(self, model):
        import ray

        from rlvr.train.actors import EngineActor

        r = self.cfg.rollout
        res = self._engine_resources()
        self.engine_count += 1
        name = f"rlvr-engine-{self.engine_count}-{os.getpid()}-{id(self):x}"
        # in flight: several generate calls share the engine's running batch, and updates come in beside them.
        # At most max_staleness + 2 generate calls wait on an engine (the rounds admitted ahead, a dynamic-
        # sampling round); the rest of the threads keep weight updates from ever queueing behind them.
        calls = max(32, self.cfg.train.max_staleness + 16)
        kv, calls = (self.cfg.sync.in_flight_kv, calls) if self._in_flight() else (None, 1)
        return ray.remote(max_restarts=0, max_concurrency=calls, **res)(EngineActor).options(name=name).remote(
            model, r.engine, self._engine_options(), self._env(), kv)

    def _in_flight(self) -> bool:
        return self.cfg.sync.mode == "in_flight"

    def _new_trainers(self, model, ref, blind: dict[str, str]) -> list:
        """The trainer ranks, loading `model` (the base, or the checkpoint resumed from) with
        `ref` as the reference. blind: the nodes that do not see the run folder, where no
        rank may write its checkpoints (see rlvr.train.placement)."""
        import ray

        from rlvr.train.actors import TrainerActor
        from rlvr.train.placement import on_this_node

        t = self.cfg.train
        res: dict = {"num_cpus": t.trainer_num_cpus}
        if self._has_gpus():
            res["num_gpus"] = t.trainer_num_gpus
        if t.trainer_resources:
            res["resources"] = dict(t.trainer_resources)
        world = max(1, t.num_trainers)
        strategies = [None] * world
        if blind and not t.trainer_resources:
            # the ranks write checkpoints into the run folder, which only this node holds
            res["scheduling_strategy"] = on_this_node(world, res, self.run_dir, blind)
            log(f"the run folder is not shared with {len(blind)} other node(s) ({', '.join(sorted(blind.values()))}): "
                f"the trainer runs on this node")
        elif world > 1:
            strategies = self._trainer_group(world, res)
        labels = [f"trainer rank {r} ({self._asks(res)})" for r in range(world)]
        self.trainers = actors = []   # known at once: a start-up failure kills those already made
        for r in range(world):
            opts = dict(res, **({"scheduling_strategy": strategies[r]} if strategies[r] is not None else {}))
            actors.append(ray.remote(**opts)(TrainerActor).options(name=f"rlvr-trainer-{r}-{os.getpid()}-{id(self):x}")
                          .remote(self._env()))
        if blind:
            for r, where in enumerate(self._startup([a.node.remote() for a in actors], "placing the trainer",
                                                    labels)):
                if where["node_id"] in blind:
                    raise ConfigError(f"trainer rank {r} was placed (train.trainer_resources) on node "
                                      f"{blind[where['node_id']]}, which does not see the run folder {self.run_dir}: "
                                      "put the run folder on a filesystem every node shares, or place the trainer "
                                      "on this node")
        master = self._startup(actors[0].address.remote(), "starting the trainer", labels[:1]) if world > 1 else None
        self._startup([a.setup.remote(model, t, self.cfg.rollout.max_tokens, t.steps, self.cfg.model.trust_remote_code,
                                      ref, self.cfg.rollout.temperature, r, world, master)
                       for r, a in enumerate(actors)], "loading the model into the trainer", labels)
        return actors

    @staticmethod
    def _asks(res: dict) -> str:
        parts = [f"{res.get('num_gpus', 0):g} GPU", f"{res.get('num_cpus', 0):g} CPU"]
        parts += [f"{v:g} {k}" for k, v in (res.get("resources") or {}).items()]
        return ", ".join(parts)

    def _trainer_group(self, world: int, res: dict) -> list:
        """The trainer ranks' scheduling: one STRICT_PACK placement group (all ranks on one node,
        so FSDP's collectives stay on its links) where the plan found a node that holds them,
        else PACK; waited for within ray.startup_timeout_s."""
        import ray
        from ray.util.placement_group import placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        bundle = {"CPU": float(res.get("num_cpus") or 0), "GPU": float(res.get("num_gpus") or 0),
                  **(res.get("resources") or {})}
        bundle = {k: v for k, v in bundle.items() if v}
        together = (self.plan or {}).get("trainers_together", True)
        pg = placement_group([dict(bundle) for _ in range(world)], strategy="STRICT_PACK" if together else "PACK",
                             name=f"rlvr-trainers-{os.getpid()}-{id(self):x}")
        self.groups.append(pg)
        limit = self.cfg.ray.startup_timeout_s
        ready, _ = ray.wait([pg.ready()], timeout=limit)
        if not ready:
            raise Failure(f"the trainer's placement group ({world} x {self._asks(res)}, "
                          f"{'STRICT_PACK' if together else 'PACK'}) was not placed within {limit:.0f}s "
                          f"(ray.startup_timeout_s); free: {self._free()}")
        return [PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=r) for r in range(world)]

    @staticmethod
    def _free() -> str:
        import ray

        have = ray.available_resources()
        return ", ".join(f"{have.get(k, 0):g} {k}" for k in ("GPU", "CPU"))

    def _startup(self, refs, what: str, labels: list[str] | None = None):
        """ray.get for the start-up calls, bounded by ray.startup_timeout_s: an actor that was not
        placed or not loaded in time ends the run with one line naming it (labels: one per
        ref), and an error raised in an actor (one of rlvr's, e.g. a model missing on its node,
        or any other) with one line, not a traceback."""
        import ray

        from rlvr import errors

        single = not isinstance(refs, list)
        many = [refs] if single else list(refs)
        limit = self.cfg.ray.startup_timeout_s
        try:
            ready, late = ray.wait(many, num_returns=len(many), timeout=limit)
            if late:
                names = [labels[i] if labels and i < len(labels) else f"call {i}"
                         for i, ref in enumerate(many) if ref in set(late)]
                raise Failure(f"{what}: {', '.join(names)} did not start within {limit:.0f}s (ray.startup_timeout_s); "
                              f"the cluster has {self._free()} free (rlvr-train CONFIG --plan shows what the run "
                              "asks for; RLVR_DEBUG=1 shows the actors' logs)")
            out = ray.get(many)
            return out[0] if single else out
        except errors.RlvrError as ex:  # a task's error is also an instance of its cause
            cls = next(c for c in type(ex).__mro__
                       if issubclass(c, errors.RlvrError) and c.__module__.startswith("rlvr."))
            raise cls(ex.message) from None
        except ray.exceptions.RayError as ex:
            # an actor whose creation failed: its cause is the last line of the message
            last = str(ex).strip().splitlines()[-1] if str(ex).strip() else type(ex).__name__
            m = re.match(r"rlvr\.errors\.(\w+): (.*)", last)
            cls = getattr(errors, m.group(1), None) if m else None
            if isinstance(cls, type) and issubclass(cls, errors.RlvrError):
                raise cls(m.group(2)) from None
            raise Failure(f"{what} failed: {last[:300]}") from None


    # -- the run -----------------------------------------------------------------------------

    def run(self) -> dict:
        from rlvr.train.placement import join_in_token_mode

        if self._ray_address():
            join_in_token_mode(os.environ)  # Ray reads the mode once, when it is first imported
        import ray
        from transformers import AutoTokenizer

        from rlvr.train.stream import PromptStream

        cfg = self.cfg
        init_run_dir(self.run_dir, self.config_yaml, self.argv)
        from rlvr.models import local_model
        from rlvr.train.placement import nodes_not_seeing

        base = self._base_model()
        start_step, model = 0, base
        if self.resume:
            ck = latest_checkpoint(self.run_dir)
            if ck is not None:
                start_step, model = ck[0], local_model(ck[1])
                truncate_traces(self.run_dir, start_step)
                log(f"resuming from {ck[1]} (step {start_step})")
            else:
                log("no complete checkpoint to resume from: starting at step 0")
                truncate_traces(self.run_dir, 0)
        from rlvr.train import distill

        stream = None if cfg.sft.only else PromptStream(cfg.data, cfg.rollout, keep_question=distill.uses_question(cfg))
        update_manifest(self.run_dir, base_model=base.path, resumed_from_step=start_step if self.resume else None,
                        chat=stream.chat.manifest() if stream is not None else None)
        self.tokenizer = AutoTokenizer.from_pretrained(model.path)
        if cfg.sft.data:  # SFT beside RL, or alone: read and tokenised before Ray starts (rlvr.train.sft)
            from rlvr.train.sft import SftData, rl_prompts, vocab_size

            self.sft = SftData(cfg, self.tokenizer, rl_prompts(stream), vocab=vocab_size(model.path, self.tokenizer))
        if distill.enabled(cfg):  # the teacher's tokenizer and templates are checked before Ray starts
            from rlvr.train.sft import vocab_size

            self.distill = distill.Distiller(cfg, self.tokenizer, stream, log,
                                             vocab=vocab_size(model.path, self.tokenizer))
        # a chat prompt's completion also ends at the template's end-of-turn token (<|im_end|>),
        # which a base model's EOS (<|endoftext|>) is not
        from rlvr.data.templates import template_text

        self.end_of_turn = end_of_turn_ids(self.tokenizer, template_text(cfg.data.chat_template))
        self._ray_init()
        update_manifest(self.run_dir, ray=self.ray_info)  # joined or its own, the address, the temp folder
        log(f"run folder {self.run_dir}")
        self._validation_setup(base.path, start_step)
        t0 = time.monotonic()
        self.plan = self._preflight(base)
        self.base = base
        self.trainers = self._new_trainers(model, base, nodes_not_seeing(self.run_dir))
        self.trainer = self.trainers[0]
        data_state = None
        if start_step:
            states = self._trainer_call([t.load_state.remote(model.path) for t in self.trainers],
                                        "loading the checkpoint")
            data_state = states[0].get("data")
        self.trained_version = start_step
        if cfg.sft.only:  # the SFT baseline: the same trainer, no engines (rlvr.train.sft)
            from rlvr.train.sft import run_only

            nodes = self._startup([t.node.remote() for t in self.trainers], "starting the trainer")
            update_manifest(self.run_dir, placement={"engines": [], "trainer": nodes[0], "trainer_ranks": nodes})
            return self._supervise(lambda traces, uploader: run_only(self, traces, start_step, uploader),
                                   start_step)
        # Engines start from the base model, which every node can load (a checkpoint is in the
        # run folder, perhaps on this node only); a resumed run's weights are pushed below.
        for _ in range(cfg.rollout.num_engines):
            self.engines.append(self._new_engine(base))
        engine_asks = self._asks(self._engine_resources())
        nodes = self._startup([e.node.remote() for e in self.engines] + [t.node.remote() for t in self.trainers],
                              "starting the rollout engines",
                              [f"engine {e} ({engine_asks})" for e in range(len(self.engines))]
                              + [f"trainer rank {r}" for r in range(len(self.trainers))])
        ne = len(self.engines)
        for e, where in zip(self.engines, nodes[:ne]):
            self.where[id(e)] = where
        placement = {"engines": nodes[:ne], "trainer": nodes[ne], "trainer_ranks": nodes[ne:]}
        update_manifest(self.run_dir, placement=placement)
        self.engine_len = min(ray.get([e.max_model_len.remote() for e in self.engines]))
        self.max_prompt_len = self.engine_len - cfg.rollout.max_tokens
        if self.max_prompt_len < 1:
            raise ConfigError(f"rollout.max_tokens {cfg.rollout.max_tokens} leaves no room for a prompt in the "
                              f"engines' context ({self.max_prompt_len + cfg.rollout.max_tokens} tokens): raise "
                              "rollout.max_model_len or lower rollout.max_tokens")
        if self.distill is not None:
            self.distill.start(self)   # teacher engines (rlvr.train.distill)
        log(f"{len(self.engines)} engine(s) and the trainer ready in {time.monotonic() - t0:.1f}s")
        self.synced_version = start_step
        from rlvr.train import weight_sync

        self.weight_sync = weight_sync.make(cfg, self.trainers, self.engines, log, placement)
        # A resumed run: the engines hold the base model; send them the checkpoint's weights.
        if start_step:
            self._sync(start_step, wait=True)
        self.schedule = Schedule(stream, cfg.rollout.prompts_per_step, cfg.train.steps, cfg.train.max_staleness,
                                 start_step, data_state)
        from rlvr.verification.pool import VerifierPool

        vcfg = cfg.verify
        pool = VerifierPool(jobs=vcfg.jobs, timeout=vcfg.timeout, config=dict(vcfg.verifier_config),
                            reward_table=dict(vcfg.reward_table) or None, reward_mode=vcfg.reward_mode,
                            thinking=vcfg.thinking, think_markers=tuple(vcfg.think_markers))

        def loop(traces, uploader) -> dict:
            with pool:
                if self.validation is not None:
                    self._validation_start(start_step, traces)
                last = self._loop(pool, traces, start_step, uploader)
                if self.validation is not None:
                    step = last.get("step")
                    if step and self.validation.due(step, last=True) and self.synced_version != step:
                        self._sync(step, wait=True)   # the data ran out at a step sync.every_steps skips
                    self.validation.finish(traces, last.get("step"), last.get("samples/total", 0.0),
                                           last.get("time/elapsed_s", 0.0))
                return last
        return self._supervise(loop, start_step)

    def _supervise(self, loop, start_step: int) -> dict:
        """Run loop(traces, uploader) and, however it ends, close the traces and the trackers,
        record the outcome in run.json, stop the actors and finish the uploads."""
        import ray

        from rlvr.trackers import for_run

        uploader = self._uploader()
        trackers = for_run(self.cfg.log.trackers, self.run_dir, self.resume, start_step,
                           warn=lambda m: log(f"warning: {m}"))
        traces = Traces(self.run_dir, [trackers.log] if trackers else [])
        status = "failed"
        last: dict = {}
        try:
            last = loop(traces, uploader)
            status = "completed"
        except KeyboardInterrupt:
            status = "interrupted"
            raise
        finally:
            traces.close()
            trackers.close(status)
            if self.validation is not None:
                self.validation.close()
            end_manifest(self.run_dir, status, final_metrics=last, faults=self.faults.as_dict())
            if self.distill is not None:
                self.distill.close()
            self._shutdown()
            if uploader is not None:
                uploader.submit(os.path.abspath(self.run_dir))  # the final traces and run.json
                failed = uploader.close(timeout=600)
                if failed:
                    log(f"{len(failed)} upload(s) to {self.cfg.checkpoint.upload} failed: {failed[0][1]}")
        return last

    def _validation_setup(self, base_path: str, start_step: int) -> None:
        """The eval section: its prompts are loaded (and checked) before any engine starts."""
        if not self.cfg.eval.benchmarks:
            return
        from rlvr.train.validation import Validation, clear_after

        clear_after(self.run_dir, start_step)
        self.validation = Validation(self.cfg.eval, self.run_dir, engine=self.cfg.rollout.engine,
                                     dtype=self._engine_options()["dtype"], max_model_len=self.cfg.rollout.max_model_len,
                                     verify_jobs=self.cfg.verify.jobs, total_steps=self.cfg.train.steps,
                                     base_model=base_path, log=log)

    def _validation_start(self, start_step: int, traces) -> None:
        """Attach the engines; validate the starting weights when due (before_training, or a
        resumed run whose last validation did not finish)."""
        v = self.validation
        v.attach(lambda: list(self.engines), self.tokenizer, self._engine_options(),
                 self.max_prompt_len + self.cfg.rollout.max_tokens, on_done=lambda e: self.last_done.__setitem__(e, time.monotonic()),
                 min_version=lambda: self.synced_version if self._in_flight() else None)
        if v.due(start_step) and not v.done(start_step):
            v.start(start_step)

    def _uploader(self):
        if not self.cfg.checkpoint.upload:
            return None
        from rlvr.s3 import BackgroundUploader, Layout

        # Default: s3://bucket/prefix/ + <run folder name>/..., the layout rlvr-s3-sync pull
        # expects (upload.layout maps it otherwise). Checkpoints being written (hidden .tmp-*
        # folders) stay local; a checkpoint's completeness marker goes up after its weights, so
        # a remote copy is never falsely complete. The live files (traces) go up on their own
        # thread as steps end, never behind a checkpoint.
        u = self.cfg.upload
        run_dir = os.path.abspath(self.run_dir)
        up = BackgroundUploader(self.cfg.checkpoint.upload, root=run_dir,
                                layout=Layout(u.layout or Layout.DEFAULT, run=os.path.basename(run_dir)),
                                exclude=["*/.tmp-*"], last=["trainer_state.pt"])
        up.live([os.path.join(run_dir, p) for p in u.live], u.trace_interval_s)
        return up

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self, pool, traces, start_step: int, uploader) -> dict:
        cfg = self.cfg
        total, every = cfg.train.steps, cfg.checkpoint.every
        last: dict = {}
        t_start = time.monotonic()
        trained = start_step
        for step in range(start_step, total):
            t_step = time.monotonic()
            self.times = StepTimes()
            self.schedule.admit(self.synced_version, self._launch)
            if not self.schedule.has(step):
                log(f"data stream ended after {step} steps")
                break
            queue_depth = self.schedule.in_flight()
            rounds = self.schedule.take(step)
            first = self._rollout(rounds[0], pool, traces, step)
            self._confirm_syncs(step)
            filled = self._dynamic_sampling(first, rounds, pool, traces, step)
            a = self._assemble(filled.groups, step)
            t0 = time.monotonic()
            m = merge_metrics(self._trainer_call([t.step.remote(a.batch) for t in self.trainers], f"step {step + 1}"))
            self.times.train = time.monotonic() - t0
            version = self.trained_version = step + 1
            self.schedule.trained(rounds)
            # sync.every_steps k: the engines skip k - 1 versions, never one that is validated
            if version % cfg.sync.every_steps == 0 or (self.validation is not None and self.validation.due(version)):
                self.sync_verified = None
                self.times.sync = self._sync(version, wait=(cfg.train.max_staleness == 0))
            self.times.step = time.monotonic() - t_step
            samples = last.get("samples/total", 0.0) + len(a.lengths)
            metrics = step_metrics(version, a, filled, m, self.times, self.faults, queue_depth=queue_depth,
                                   engines=len(self.engines), samples_total=samples,
                                   elapsed=time.monotonic() - t_start, warn=log)
            metrics["sync/engine_version"] = float(self.synced_version)
            if self.distill is not None:
                metrics.update(self.distill.metrics)
            if self.sync_verified is not None:   # a broadcast: engines whose checksum equals the trainer's
                metrics["sync/verified_engines"] = float(self.sync_verified)
            self._write(traces, metrics, filled.drawn, version)
            if self.validation is not None:
                self.validation.after_step(traces, metrics)  # after the weights of `version` were sent
            if uploader is not None:
                uploader.tick()  # the live traces changed: sent on the uploader's thread
            self._progress(metrics, version, start_step, total, t_start)
            last, trained = metrics, version
            if version == total or (every and version % every == 0):
                self._checkpoint(version, uploader)
        if trained > start_step and trained != total and not (every and trained % every == 0):
            self._checkpoint(trained, uploader)  # the data ran out before train.steps
        return last

    def _rollout(self, rnd: Round, pool, traces, step: int) -> list[Group]:
        """Collect a round's groups and their rewards; write its unusable prompts to the trace."""
        t0 = time.monotonic()
        groups = self._collect(rnd, traces, step)
        self.times.rollout += time.monotonic() - t0
        t0 = time.monotonic()
        verify(pool, groups)
        self.times.reward += time.monotonic() - t0
        return groups

    def _dynamic_sampling(self, first: list[Group], rounds: list[Round], pool, traces, step: int) -> Filled:
        """Without dynamic sampling: the round as it is. With it: more rounds until the batch
        holds prompts_per_step informative groups (rlvr.train.batch.fill)."""
        d = self.cfg.dapo
        if not d.dynamic_sampling:
            return Filled(first, first, 1)

        def more() -> list[Group] | None:
            r = self.schedule.draw()
            if r is None:
                return None
            self._launch(r)
            rounds.append(r)
            return self._rollout(r, pool, traces, step)

        filled = fill(first, self.cfg.rollout.prompts_per_step, more, d.max_extra_rounds)
        if len(filled.groups) < self.cfg.rollout.prompts_per_step:
            log(f"step {step + 1}: {len(filled.groups)} informative groups of {self.cfg.rollout.prompts_per_step} "
                f"after {filled.rounds} rounds (dapo.max_extra_rounds {d.max_extra_rounds})")
        return filled

    def _assemble(self, groups: list[Group], step: int):
        cfg, d = self.cfg, self.cfg.dapo
        t = cfg.train
        a = assemble(groups, step, t.scale_rewards, t.filter_zero_std, t.mask_truncated,
                     [prompt_max_tokens(g.record, cfg.rollout.max_tokens) for g in groups],
                     d.overlong_buffer or 0, d.overlong_penalty, adv_std=t.adv_std)
        a.batch.samples_per_batch = cfg.rollout.prompts_per_step * cfg.rollout.n   # dr_grpo's constant
        sft = self.sft.batch(step) if self.sft is not None else None
        if sft is not None:
            a.batch.extras["sft"] = sft   # trained beside the RL loss (rlvr.losses)
        if self.distill is not None:      # the teacher's scores of the completions (rlvr.train.distill)
            eb = self.distill.batch(self, groups, step)
            if t.distill.only:            # GKD, OPSD: no RL loss
                a.batch = Batch([], [], [], [], [], extras=a.batch.extras)
            if eb is not None:
                a.batch.extras["distill"] = eb
        worst = max([*a.staleness, *a.token_lags], default=0)
        if worst > t.max_staleness:
            raise Failure(f"internal error: staleness {worst} > max_staleness {t.max_staleness} at step {step}")
        return a

    def _write(self, traces, metrics: dict, groups: list[Group], version: int) -> None:
        traces.metrics(metrics)
        for i, g in enumerate(groups):
            traces.rollout(rollout_record(g, version))
            if i < self.cfg.log.samples_per_step:
                rec = sample_record(g, version)
                if self.distill is not None and id(g) in self.distill.shown:
                    rec["teacher_prompt"] = self.distill.shown[id(g)]   # what the teacher saw
                traces.sample(rec)
        if self.cfg.log.stdout:
            from rlvr.records import dumps

            sys.stdout.buffer.write(dumps(metrics))
            sys.stdout.flush()

    def _progress(self, metrics: dict, version: int, start_step: int, total: int, t_start: float) -> None:
        done = version - start_step
        eta = (time.monotonic() - t_start) / done * (total - version) if done else 0
        log(f"step {version}/{total} reward {metrics['reward/mean']:.3f} "
            f"len {metrics['completions/mean_length']:.1f} tok/s {metrics['throughput/tokens_per_s']:.0f} "
            f"staleness {metrics['staleness/mean']:.2f} step {metrics['time/step_s']:.2f}s ETA {eta:.0f}s")

    # -- engines -----------------------------------------------------------------------------

    def _sampling(self) -> dict:
        r = self.cfg.rollout
        return {"n": r.n, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
                "max_tokens": r.max_tokens, "stop": list(r.stop)}

    def _launch(self, rnd: Round) -> None:
        """Send a round's prompts to the engines (prompt i to engine i mod E); prompts too long
        for the engines' context are kept back, as rlvr-rollout does."""
        items = []
        for rec, ep in rnd.items:
            ids = prompt_token_ids(self.tokenizer, rec)
            if len(ids) > self.engine_len - prompt_max_tokens(rec, self.cfg.rollout.max_tokens):
                rnd.dropped.append((rec, ep, len(ids)))
                continue
            items.append((rec, ep, ids, prompt_stops(rec, self.cfg.rollout.stop)))
        ne = len(self.engines)
        rnd.chunks = [self._submit(e, items[e::ne]) for e in range(ne) if items[e::ne]]

    def _submit(self, e: int, items) -> Chunk:
        seeds = [prompt_seed(self.cfg.rollout.seed, rec["id"], ep) for rec, ep, _, _ in items]
        if not self.cfg.rollout.seeded:
            seeds = None
        lengths = [prompt_max_tokens(rec, self.cfg.rollout.max_tokens) for rec, _, _, _ in items]
        # in flight the engine takes the call at once: it starts once the weights sent last are in
        ref = self.engines[e].generate.remote([ids for _, _, ids, _ in items], self._sampling(), seeds,
                                              [stops for _, _, _, stops in items],
                                              [self.end_of_turn if isinstance(rec.get("prompt"), list) else []
                                               for rec, _, _, _ in items],
                                              self.synced_version if self._in_flight() else None,
                                              lengths if any(n != self.cfg.rollout.max_tokens for n in lengths) else None)
        chunk = Chunk(e, ref, items, time.monotonic(), self.engines[e])
        self.outstanding.add(chunk)
        return chunk

    def _shutdown(self) -> None:
        """The end of a run: engines close their vLLM engine (bounded: its engine-core process
        leaves with it), then every actor is killed, with any process an engine left behind;
        the trainer's placement group is removed."""
        from rlvr.train.actors import retire

        if not (self.engines or self.trainers or self.groups):
            return
        import ray

        try:
            if self.engines:
                ray.wait([e.close.remote() for e in self.engines], num_returns=len(self.engines), timeout=30)
        except Exception:  # noqa: BLE001 - closing is best effort; the kill below is not
            pass
        for e in self.engines:
            retire(e, self.where.pop(id(e), None))
        for a in self.trainers:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        for pg in self.groups:
            try:
                ray.util.remove_placement_group(pg)
            except Exception:  # noqa: BLE001
                pass
        self.engines, self.trainers, self.groups = [], [], []

    def _drain(self, skip: set) -> set:
        """Before a broadcast group is rebuilt: let every engine not in `skip` (those being
        restarted) finish the calls queued on it -- rollouts, validations, a policy teacher's
        scoring (their results wait in Ray until collected) -- so that each joins the new group
        at once instead of leaving the others in vLLM's rendezvous, which times out. Returns the
        engines that did not finish within sync.generate_timeout_s: hung as well."""
        import ray

        refs = {c.ref: c.engine for c in self.outstanding
                if c.engine not in skip and c.actor is self.engines[c.engine]}
        index = {id(a): e for e, a in enumerate(self.engines)}
        for side in (self.validation, self.distill):
            for ref, actor in (side.outstanding() if side is not None else []):
                e = index.get(id(actor))
                if e is not None and e not in skip:
                    refs[ref] = e
        if not refs:
            return set()
        limit = self.cfg.sync.generate_timeout_s
        log(f"waiting for {len(refs)} queued engine call(s) before the weight-transfer group is rebuilt")
        _, late = ray.wait(list(refs), num_returns=len(refs), timeout=limit)
        return {refs[r] for r in late}

    def _restart_engine(self, e: int, why: str) -> None:
        self._restart_engines({e: why})

    def _restart_engines(self, why: dict) -> None:
        """Replace the engines in `why` ({index: reason}): each is killed and started again from
        the base model, then brought to the current weights. With a broadcast sync the other
        engines first finish their queued calls (_drain); one that does not within
        sync.generate_timeout_s is hung too and is replaced with them, so that any number of
        engines hung at once are restarted and the group is rebuilt once, with all of them."""
        import ray

        restarted: list[int] = []
        starting: list = []   # the new actors' first calls: they load while the others drain
        todo = dict(why)
        limit = self.cfg.sync.generate_timeout_s
        while todo:
            starting += self._replace_engines(todo)
            restarted += sorted(todo)
            todo = {}
            if self.weight_sync.blocking:
                todo = {e: f"did not finish its queued calls in {limit:.0f}s (hung?)"
                        for e in self._drain(set(restarted))}
        nodes = self._startup(starting, f"restarting engine{'s' if len(restarted) > 1 else ''} "
                              f"{', '.join(map(str, restarted))}", [f"engine {e}" for e in restarted])
        for e, where in zip(restarted, nodes):
            self.where[id(self.engines[e])] = where
        if self.weight_sync.blocking and self.synced_version:
            # a broadcast sends the trainer's current weights to every engine (with sync.every_steps
            # k > 1 those may be newer than the last synced version: fresher, within the bound)
            self.synced_version = self.trained_version
        restarted.sort()
        names = ", ".join(str(e) for e in restarted)
        try:
            self.weight_sync.restore(restarted, self.synced_version, timeout_s=self.cfg.sync.timeout_s + 300)
        except (ray.exceptions.GetTimeoutError, ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
            raise Failure(f"engine {names} could not be restarted ({type(ex).__name__}: "
                          f"{str(ex).strip().splitlines()[-1][:200]})") from None
        except Failure as ex:
            raise Failure(f"engine {names} could not be restarted: {ex.message}") from None
        now = time.monotonic()
        for e in restarted:
            self.last_done[e] = now

    def _replace_engines(self, why: dict) -> list:
        """Kill the engines in `why` and make new ones from the base model (a resumed run's
        checkpoint folder may since have been pruned). Returns their first calls (where each
        runs), in index order, for the caller to wait on."""
        from rlvr.train.actors import retire

        for e, reason in sorted(why.items()):
            log(f"engine {e} {reason}: restarting it")
            self.faults.add("engine_restarts")
            if self.faults["engine_restarts"] > 5 * max(1, len(self.engines)):
                raise Failure("rollout engines keep failing (more than 5 restarts each): giving up")
            old = self.engines[e]
            retire(old, self.where.pop(id(old), None))   # with vLLM's engine-core process, which may hold the GPU
            self.pending_syncs.pop(e, None)  # died with the old actor; the new one is synced after
            self.engines[e] = self._new_engine(self.base)
        return [self.engines[e].node.remote() for e in sorted(why)]

    def _collect(self, rnd: Round, traces, step: int) -> list[Group]:
        """Wait for a round's chunks; requeue those of engines that died or hung. Returns the
        groups in the round's prompt order (chunk e holds prompts e, e+E, ... of those sent);
        prompts kept back or refused by the engine go to the rollouts trace with their status."""
        import ray

        version = step + 1
        for rec, ep, n_tokens in rnd.dropped:
            self.faults.add("dropped_prompts")
            traces.rollout(unusable_record(rec, ep, version, "prompt_too_long",
                                           f"prompt has {n_tokens} tokens, over the limit of "
                                           f"{self.engine_len - prompt_max_tokens(rec, self.cfg.rollout.max_tokens)} "
                                           f"(max_model_len - its max_tokens)", n_tokens))
        ne = len(self.engines)
        out: dict[int, Group] = {}
        pending = list(rnd.chunks)
        limit = self.cfg.sync.generate_timeout_s
        while pending:
            ready, _ = ray.wait([c.ref for c in pending], num_returns=1, timeout=5.0)
            now = time.monotonic()
            nxt = []
            for c in pending:
                current = c.actor is self.engines[c.engine]
                if c.ref in ready or not current:
                    self.outstanding.discard(c)
                if c.ref in ready:
                    try:
                        res = ray.get(c.ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                            ray.exceptions.RayTaskError) as ex:
                        if current:  # else: queued on an engine already replaced, just resend
                            self._restart_engine(c.engine, f"failed ({type(ex).__name__})")
                        self.faults.add("requeued_prompts", len(c.items))
                        nxt.append(self._submit(c.engine, c.items))
                        continue
                    self.last_done[c.engine] = now
                    self.times.engine_busy += res["seconds"]
                    errors = res.get("errors") or {}
                    for j, ((rec, ep, ids, _), samples) in enumerate(zip(c.items, res["samples"])):
                        if j in errors:  # this request failed, the engine did not
                            self.faults.add("failed_prompts")
                            traces.rollout(unusable_record(rec, ep, version, "generation_error", errors[j], len(ids)))
                            continue
                        out[j * ne + c.engine] = Group(rec, ep, ids, samples, res["version_start"],
                                                       res["version_end"])
                # A chunk queued behind others on its engine is timed from when the engine
                # last delivered, not from its submission.
                elif current and now - max(c.submitted, self.last_done.get(c.engine, 0.0)) > limit:
                    self.outstanding.discard(c)
                    self._restart_engine(c.engine, f"gave no answer in {limit:.0f}s")
                    self.faults.add("requeued_prompts", len(c.items))
                    nxt.append(self._submit(c.engine, c.items))
                elif not current:
                    self.faults.add("requeued_prompts", len(c.items))
                    nxt.append(self._submit(c.engine, c.items))
                else:
                    nxt.append(c)
            pending = nxt
        return [out[i] for i in sorted(out)]

    def _sync(self, version: int, wait: bool) -> float:
        t0 = time.monotonic()
        refs = self.weight_sync.push(version)   # {engine index: ref} (a broadcast: + the trainer ranks')
        self.synced_version = version
        if wait or self.weight_sync.blocking:
            # a broadcast waits for the engines' queued generate calls too when the loop is asynchronous
            self._await_sync(refs, version, self.cfg.sync.timeout_s + (0 if wait else self.cfg.sync.generate_timeout_s))
        else:
            self.pending_syncs = refs
        return time.monotonic() - t0

    def _await_sync(self, refs: dict, version: int, limit: float) -> None:
        """Wait for a sync's calls ({engine index or "trainer-<rank>": ref}) as they finish, and
        compare what the engines received with what the trainer sent (weight_sync's check).
        An engine that refused the weights, a trainer that failed, and (in a broadcast, which
        cannot go on without every member) an engine that died end the run at once, naming
        it; with the object store a dead engine is restarted once the others have finished,
        which brings it to `version`. A sync past the limit ends the run naming who is late."""
        import ray

        from rlvr.train.weight_sync import cause_line

        deadline = time.monotonic() + limit
        pending = {ref: key for key, ref in refs.items()}
        results, dead = {}, []
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
            if not ready:
                late = sorted(f"engine {k}" if isinstance(k, int) else k.replace("-", " rank ") for k in pending.values())
                raise Failure(f"weight sync to version {version} took longer than {limit:.0f}s (sync.timeout_s): "
                              f"{', '.join(late)} did not finish (hung?)")
            for ref in ready:
                key = pending.pop(ref)
                try:
                    results[key] = ray.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                        ray.exceptions.RayTaskError) as ex:
                    died = not isinstance(ex, ray.exceptions.RayTaskError)
                    if isinstance(key, str):       # a trainer rank: its error is the run's
                        self._trainer_failed(ex, f"the weight sync to version {version}")
                    if died and not self.weight_sync.blocking:
                        dead.append(key)
                        continue
                    what = "died during" if died else f"refused ({cause_line(ex)})"
                    raise Failure(f"weight sync to version {version} failed: engine {key} {what} the "
                                  f"{'broadcast' if self.weight_sync.blocking else 'update'}") from None
        if dead:
            # The weights come from the trainer: tell a dead trainer from a dead engine.
            self._trainer_call(self.trainer.version.remote(), f"the weight sync to version {version}")
        for e in dead:
            self._restart_engine(e, "died during a weight sync")
        self.sync_verified = self.weight_sync.check(results)

    def _confirm_syncs(self, step: int) -> None:
        """Async mode: the updates sent after the previous step must have landed by now."""
        import ray

        cfg = self.cfg
        for e, ref in list(self.pending_syncs.items()):
            try:
                ray.get(ref, timeout=cfg.sync.timeout_s + cfg.sync.generate_timeout_s)
            except ray.exceptions.GetTimeoutError:
                self._restart_engine(e, "did not apply a weight update in time")
            except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
                # the weights come from the trainer: a dead trainer ends the run
                self._trainer_call(self.trainer.version.remote(), f"the weight sync to version {step}")
                self._restart_engine(e, f"failed a weight update ({type(ex).__name__})")
        self.pending_syncs = {}

    def _trainer_call(self, ref, what: str):
        """ray.get on a trainer call; a dead or failing trainer ends the run with one clear line."""
        import ray

        try:
            return ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
            self._trainer_failed(ex, what)

    def _trainer_failed(self, ex: BaseException, what: str):
        """End the run for a trainer call's error: one line naming the step, the last complete
        checkpoint and the --resume command."""
        import ray

        if isinstance(ex, ray.exceptions.RayTaskError):
            cause = ex.as_instanceof_cause() if hasattr(ex, "as_instanceof_cause") else ex
            why = f"the trainer failed during {what}: {type(cause).__name__}: {str(cause).strip().splitlines()[-1][:300]}"
        else:
            why = f"the trainer process died during {what} ({type(ex).__name__})"
        ck = latest_checkpoint(self.run_dir)
        where = f"the last complete checkpoint is {ck[1]} (step {ck[0]}); continue with --resume {self.run_dir}" \
            if ck else "no checkpoint was completed"
        raise Failure(f"{why}; {where}")

    def _checkpoint(self, step: int, uploader) -> None:
        t0 = time.monotonic()
        tmp = tmp_checkpoint_dir(self.run_dir, step)
        state = {"step": step, "config": self.config_yaml,
                 "data": self.schedule.data_state() if self.schedule is not None else None}
        self._trainer_call([t.save.remote(tmp, state, self.cfg.checkpoint.dtype) for t in self.trainers],
                           f"saving checkpoint {step}")
        if not os.path.exists(os.path.join(tmp, COMPLETE)):  # written last, by trainer rank 0
            raise Failure(f"checkpoint {step}: the trainer reported it saved, but {tmp} holds no {COMPLETE} on "
                          "this node: the trainer's node does not share the run folder")
        final = checkpoint_dir(self.run_dir, step)
        commit_checkpoint(tmp, final)
        prune_checkpoints(self.run_dir, self.cfg.checkpoint.keep_last, self.cfg.checkpoint.keep_every)
        log(f"checkpoint {final} ({time.monotonic() - t0:.1f}s)")
        if uploader is not None:
            uploader.submit(os.path.abspath(self.run_dir))  # off this thread; unchanged files are skipped


def train(cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool = False) -> dict:
    run = Run(cfg, run_dir, argv, config_yaml, resume)
    try:
        return run.run()
    finally:
        # a run that failed while starting (a plan that does not fit, an actor that did not
        # start) takes down the actors it made, with their processes; after a finished run
        # there is nothing left to do
        run._shutdown()
