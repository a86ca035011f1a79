"""rlvr-train's driver: data stream -> engine actors -> verifier pool -> trainer actor -> weights.

`train` starts a run's parts and runs its steps; `rl_steps` is the algorithm, one synchronous or
asynchronous loop:

    admit the rounds the staleness bound allows -> collect this step's groups -> verify
    -> dynamic sampling (draw more) -> assemble the batch (+ the modes' parts) -> train
    -> sync weights -> record -> checkpoint

Each part has a module of its own: rlvr.train.cluster (Ray, the plan, start-up supervision),
rlvr.train.fleet (the rollout engines: launch, collect, restart), rlvr.train.engine_sync
(weight syncs and their confirmations), rlvr.train.trainers (the trainer ranks, their
failures, checkpoints), rlvr.train.recorder (traces, progress, uploads, run.json),
rlvr.train.schedule (which prompts go to the engines, and when: staleness), rlvr.train.batch
(rewards, dynamic sampling, advantages, the trainer's batch), rlvr.train.metrics (what a step
writes). rlvr.train.observe's RunObserver (made once the actors are up) writes the spans of
every actor and of the driver (a `step` span around each step, a `verify` span per pool
batch), answers the stall watchdog, and adds each step's figures (memory, engines, MFU and
tokens/s, queue times, sample fates). The training modes beside RL (SFT, distillation,
validation) plug in through rlvr.train.modes; the code here never names one.
"""

from __future__ import annotations

import os
import time

from rlvr.engines.base import end_of_turn_ids
from rlvr.errors import Failure
from rlvr.messages import say
from rlvr.runs import init_run_dir, latest_checkpoint, truncate_traces, update_manifest
from rlvr.train import spans
from rlvr.train.batch import Filled, Group, assemble, fill, sample_fates, verify
from rlvr.train.cluster import Cluster
from rlvr.train.config import TrainConfig, resolve_preset
from rlvr.train.engine_sync import EngineSync, check_agreement
from rlvr.train.figures import queue_stats
from rlvr.train.fleet import EngineFleet
from rlvr.train.metrics import Faults, StepTimes, step_metrics
from rlvr.train.prompts import Chunk, prompt_max_tokens, prompt_stops, prompt_token_ids  # noqa: F401 - their home
from rlvr.train.recorder import Recorder, Throughput, observer
from rlvr.train.schedule import Round, Schedule
from rlvr.train.trainers import TrainerGroup


def log(msg: str) -> None:
    say(msg)  # "rlvr-train: msg", named by rlvr.cli.run


class Run:
    """One run's parts and what they share; `train` fills them in as they start."""

    def __init__(self, cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool):
        self.cfg = resolve_preset(cfg)
        # absolute: the trainer actors write checkpoints into it, and a Ray worker's working
        # directory is not the driver's on a cluster joined with --ray-address
        self.run_dir = os.path.abspath(run_dir)
        self.argv, self.config_yaml, self.resume = argv, config_yaml, resume
        self.faults = Faults()
        self.cluster = Cluster(self.cfg, self.run_dir, f"{os.getpid()}-{id(self):x}")
        self.trainers = TrainerGroup(self.cfg, self.run_dir, self.cluster)
        self.fleet = EngineFleet(self.cfg, self.cluster, self.faults, self.trainers)
        self.syncs: EngineSync | None = None
        self.modes = None                    # rlvr.train.modes.Modes: the enabled ones
        self.tokenizer = None
        self.stream = None                   # rlvr.train.stream.PromptStream (None: no RL data)
        self.base = self.model = None        # the base model, and the one loaded (a checkpoint's on resume)
        self.start_step = 0
        self.schedule: Schedule | None = None
        self.obs = None                      # rlvr.train.observe.RunObserver, once the actors are up

    def sync(self, version: int, wait: bool) -> float:
        return self.syncs.push(version, wait)

    def checkpoint(self, step: int, uploader) -> None:
        state = {"step": step, "config": self.config_yaml,
                 "data": self.schedule.data_state() if self.schedule is not None else None}
        self.trainers.checkpoint(step, state, uploader)

    def shutdown(self) -> None:
        """Engines, then trainer ranks, then placement groups (see each part's close)."""
        self.fleet.close()
        self.trainers.kill()
        self.cluster.close()


def train(cfg: TrainConfig, run_dir: str, argv: list[str], config_yaml: str, resume: bool = False) -> dict:
    run = Run(cfg, run_dir, argv, config_yaml, resume)
    try:
        return start(run)
    finally:
        # a run that failed while starting (a plan that does not fit, an actor that did not
        # start) takes down the actors it made, with their processes; after a finished run
        # there is nothing left to do
        run.shutdown()


def base_model(cfg, run_dir: str):
    """The base model as a ResolvedModel: each actor loads it through .local() on its own node."""
    from rlvr.models import local_model, resolve_model

    path = cfg.model.path
    if path == "tiny":
        path = os.path.join(run_dir, "base_model")
        if not os.path.exists(os.path.join(path, "config.json")):
            from rlvr.tiny import build

            build(path, seed=cfg.train.seed)
        return local_model(path)
    # s3://... (and Org/Name under $RLVR_S3_MODELS) -> a local folder, before any engine starts
    m = resolve_model(path, log=log)
    update_manifest(run_dir, model=m.record())
    return m


def start(run: Run) -> dict:
    """Start the run's parts in order (data and modes before Ray, the trainer, the engines, the
    weight sync), then run its steps under `supervise`."""
    run.cluster.prepare()
    from transformers import AutoTokenizer

    from rlvr.data.templates import template_text
    from rlvr.models import local_model
    from rlvr.train import modes, weight_sync
    from rlvr.train.placement import nodes_not_seeing
    from rlvr.train.stream import PromptStream

    cfg = run.cfg
    init_run_dir(run.run_dir, run.config_yaml, run.argv)
    base = base_model(cfg, run.run_dir)
    start_step, model = 0, base
    if run.resume:
        ck = latest_checkpoint(run.run_dir)
        if ck is not None:
            start_step, model = ck[0], local_model(ck[1])
            truncate_traces(run.run_dir, start_step)
            log(f"resuming from {ck[1]} (step {start_step})")
        else:
            log("no complete checkpoint to resume from: starting at step 0")
            truncate_traces(run.run_dir, 0)
    alone = modes.alone(cfg)   # a mode that trains without RL data or engines
    stream = None if alone else PromptStream(cfg.data, cfg.rollout, keep_question=modes.keeps_question(cfg))
    update_manifest(run.run_dir, base_model=base.path, resumed_from_step=start_step if run.resume else None,
                    chat=stream.chat.manifest() if stream is not None else None)
    run.tokenizer = run.fleet.tokenizer = AutoTokenizer.from_pretrained(model.path)
    run.stream, run.base, run.model, run.start_step = stream, base, model, start_step
    run.modes = modes.Modes(run)   # their data and teachers are checked before Ray starts
    run.fleet.others = run.modes.outstanding
    # a chat prompt's completion also ends at the template's end-of-turn token (<|im_end|>),
    # which a base model's EOS (<|endoftext|>) is not
    run.fleet.end_of_turn = end_of_turn_ids(run.tokenizer, template_text(cfg.data.chat_template))
    run.cluster.init()
    update_manifest(run.run_dir, ray=run.cluster.info)  # joined or its own, the address, the temp folder
    log(f"run folder {run.run_dir}")
    run.modes.connect(run)
    t0 = time.monotonic()
    run.cluster.preflight(base, prompts=[r for recs in stream.by_name.values() for r in recs] if stream else None,
                          tokenizer=run.tokenizer)
    run.trainers.start(model, base, nodes_not_seeing(run.run_dir))   # the ranks load while the engines start
    if run.cluster.has_gpus() and (cfg.train.trainer_num_gpus % 1 or cfg.rollout.engine_num_gpus % 1):
        run.trainers.ready()   # a GPU shared by trainer and engine: vLLM measures its free memory alone
    run.trainers.version = start_step
    if alone is not None:
        run.trainers.ready()
        if start_step:
            run.trainers.load_state(model.path)   # the optimizer state; a mode keeps its own data order
        nodes = run.cluster.startup(run.trainers.node_calls(), "starting the trainer")
        update_manifest(run.run_dir, placement={"engines": [], "trainer": nodes[0], "trainer_ranks": nodes})
        run.obs = observer(run)
        mode = next(m for m in run.modes if isinstance(m, alone))
        return supervise(run, lambda rec: mode.steps(run, rec, start_step))
    placement = run.fleet.start(base)
    run.trainers.ready()
    data_state = run.trainers.load_state(model.path) if start_step else None
    update_manifest(run.run_dir, placement=placement)
    run.fleet.measure()
    run.modes.start(run)
    run.obs = observer(run)   # now: start-up is no stall
    log(f"{len(run.fleet.engines)} engine(s) and the trainer ready in {time.monotonic() - t0:.1f}s")
    run.fleet.synced_version = start_step
    run.fleet.weight_sync = weight_sync.make(cfg, run.trainers.ranks, run.fleet.engines, log, placement)
    run.syncs = EngineSync(cfg, run.fleet, run.trainers, run.fleet.weight_sync)
    if start_step:   # the engines hold the base model: send them the checkpoint's weights
        run.sync(start_step, wait=True)
    run.schedule = Schedule(stream, cfg.rollout.prompts_per_step, cfg.train.steps, cfg.train.max_staleness,
                            start_step, data_state)
    from rlvr.verification.pool import VerifierPool

    v = cfg.verify
    pool = VerifierPool(jobs=v.jobs, timeout=v.timeout, config=dict(v.verifier_config),
                        reward_table=dict(v.reward_table) or None, reward_mode=v.reward_mode,
                        thinking=v.thinking, think_markers=tuple(v.think_markers))

    def steps(rec: Recorder) -> dict:
        with pool:
            run.modes.begin(run, rec.traces)
            last = rl_steps(run, rec, pool)
            run.modes.end(run, rec.traces, last)
            return last
    return supervise(run, steps)


def supervise(run: Run, steps) -> dict:
    """Run steps(recorder) and, however it ends, close the traces and the trackers, record the
    outcome in run.json, close the modes, stop the actors and finish the uploads."""
    rec = Recorder(run.cfg, run.run_dir, run.resume, run.start_step)
    status, last = "failed", {}
    try:
        last = steps(rec)
        status = "completed"
    except KeyboardInterrupt:
        status = "interrupted"
        raise
    finally:
        if run.obs is not None:
            run.obs.close()   # the watchdog stops; the actors' last spans are written
        rec.close(status, last, run.faults.as_dict())
        run.modes.close()
        run.shutdown()
        rec.finish_uploads()
    return last


def rl_steps(run: Run, rec: Recorder, pool) -> dict:
    """The RL steps from run.start_step to train.steps (or until the data ends); returns the
    last step's metrics."""
    cfg, fleet, schedule, modes, obs = run.cfg, run.fleet, run.schedule, run.modes, run.obs
    total, every = cfg.train.steps, cfg.checkpoint.every
    last: dict = {}
    t_start = time.monotonic()
    trained = run.start_step
    r = cfg.rollout
    perf = Throughput(run.model.path, len(run.trainers.ranks),
                      r.engine_num_gpus * r.tensor_parallel_size, run.cluster.has_gpus())
    for step in range(run.start_step, total):
        t_step, times = time.monotonic(), StepTimes()
        sp = spans.begin("step", step=step + 1, version=run.trainers.version)
        # a round admitted now trains at the step the schedule launches next (its engines' spans carry it)
        schedule.admit(fleet.synced_version, lambda rnd: fleet.launch(rnd, schedule.next_step + 1))
        if not schedule.has(step):
            spans.end(sp)
            log(f"data stream ended after {step} steps")
            break
        queue_depth = schedule.in_flight()
        rounds = schedule.take(step)
        first = rollout(run, rounds[0], pool, rec.traces, step, times)
        run.syncs.confirm(step)
        filled = dynamic_sampling(run, first, rounds, pool, rec.traces, step, times)
        a = assemble_batch(run, filled.groups, step)
        t0 = time.monotonic()
        now = time.time()   # the engines' clock (the same machine's, or a node's kept close)
        waits = [now - g.generated_at for g in filled.groups if g.generated_at is not None for _ in g.samples]
        m = run.trainers.step(a.batch, step)
        times.train = time.monotonic() - t0
        if step == run.start_step:
            check_agreement(cfg, m, step)   # the engines sample from the trainer's weights
        version = run.trainers.version = step + 1
        schedule.trained(rounds)
        # sync.every_steps k: the engines skip k - 1 versions, never one a mode needs (a validated one)
        if version % cfg.sync.every_steps == 0 or modes.wants_sync(version):
            times.sync = run.sync(version, wait=(cfg.train.max_staleness == 0))
        times.step = time.monotonic() - t_step
        metrics = step_metrics(version, a, filled, m, times, run.faults, queue_depth=queue_depth,
                               engines=len(fleet.engines), samples_total=last.get("samples/total", 0.0) + len(a.lengths),
                               elapsed=time.monotonic() - t_start, warn=log)
        metrics["sync/engine_version"] = float(fleet.synced_version)
        metrics.update(filled.adaptive)
        modes.metrics(metrics)
        if run.syncs.verified is not None:   # a broadcast: engines whose checksum equals the trainer's
            metrics["sync/verified_engines"] = float(run.syncs.verified)
        metrics.update(obs.step_figures())
        metrics.update(perf.metrics(a, filled.drawn, times))
        metrics.update(queue_stats(waits))
        for v, fate, n in sample_fates(filled, a, cfg.train.filter_zero_std):
            obs.fates.add(v, fate, n)
        metrics.update(obs.end_step(version))
        rec.write(metrics, filled.drawn, version, modes.sample)
        modes.after_step(run, rec.traces, metrics)  # after the weights of `version` were sent
        rec.tick()
        rec.progress(metrics, version, run.start_step, total, t_start)
        last, trained = metrics, version
        if version == total or (every and version % every == 0):
            run.checkpoint(version, rec.uploader)
        spans.end(sp)
    if trained > run.start_step and trained != total and not (every and trained % every == 0):
        run.checkpoint(trained, rec.uploader)  # the data ran out before train.steps
    return last


def rollout(run: Run, rnd: Round, pool, traces, step: int, times: StepTimes) -> list[Group]:
    """Collect a round's groups and their rewards; its unusable prompts go to the trace."""
    t0 = time.monotonic()
    groups = run.fleet.collect(rnd, traces, step, times)
    times.rollout += time.monotonic() - t0
    t0 = time.monotonic()
    with spans.span("verify", step=step + 1, version=min((g.version_start for g in groups), default=None),
                    ids=[g.record.get("id") for g in groups], actor="verifier"):
        verify(pool, groups)
    times.reward += time.monotonic() - t0
    return groups


def dynamic_sampling(run: Run, first: list[Group], rounds: list[Round], pool, traces, step: int,
                     times: StepTimes) -> Filled:
    """Without dynamic sampling: the round as it is. With it: more rounds until the batch
    holds prompts_per_step informative groups (rlvr.train.batch.fill)."""
    d, want = run.cfg.dapo, run.cfg.rollout.prompts_per_step
    adapted = Adaptive(run, pool, traces, step, times)
    first = adapted(first, rounds[0])
    if not d.dynamic_sampling:
        return adapted.filled(Filled(first, first, 1))

    def more() -> list[Group] | None:
        r = run.schedule.draw()
        if r is None:
            return None
        run.fleet.launch(r, step + 1)
        rounds.append(r)
        return adapted(rollout(run, r, pool, traces, step, times), r)

    filled = adapted.filled(fill(first, want, more, d.max_extra_rounds))
    if len(filled.groups) < want:
        log(f"step {step + 1}: {len(filled.groups)} informative groups of {want} "
            f"after {filled.rounds} rounds (dapo.max_extra_rounds {d.max_extra_rounds})")
    return filled


class Adaptive:
    """rollout.adaptive (rlvr.train.adaptive) over each verified round of a step: later rounds of the
    same prompts on the same engines, seeded on from the samples drawn so far; off: rounds pass as they are."""

    def __init__(self, run: Run, pool, traces, step: int, times: StepTimes):
        self.run, self.pool, self.traces, self.step, self.times = run, pool, traces, step, times
        self.cfg = run.cfg.rollout.adaptive
        self.done: list = []              # rlvr.train.adaptive.Adapted per round

    def __call__(self, groups: list[Group], rnd: Round) -> list[Group]:
        from rlvr.train.adaptive import adapt

        if not self.cfg.max_n:
            return groups
        r = self.run.cfg.rollout

        def more(gs: list[Group], offset: int, size: int) -> list[Group]:
            again = Round(rnd.index, [(g.record, g.epoch) for g in gs])
            self.run.fleet.launch(again, self.step + 1, size, offset)
            return rollout(self.run, again, self.pool, self.traces, self.step, self.times)

        a = adapt(groups, r.n, self.cfg.k_pos, self.cfg.k_neg, self.cfg.max_n, self.cfg.chunk or r.n, r.seed, more)
        self.done.append(a)
        return a.groups

    def filled(self, f: Filled) -> Filled:
        """With adaptive sampling: every completion drawn goes to the trace, and its metrics to the step's."""
        from rlvr.train.adaptive import Adapted, metrics

        if not self.done:
            return f
        a = Adapted([g for x in self.done for g in x.groups], [g for x in self.done for g in x.drawn],
                    sum(x.dropped for x in self.done), sum(x.rounds for x in self.done),
                    sum(x.samples for x in self.done), [c for x in self.done for c in x.per_kept])
        f.drawn = a.drawn
        f.adaptive = metrics(a, len(a.drawn), self.times.rollout)
        return f


def assemble_batch(run: Run, groups: list[Group], step: int):
    """The trainer's batch for the step's groups (rlvr.train.batch.assemble), with what the
    modes add (SFT sequences, the teacher's scores)."""
    cfg, d, t = run.cfg, run.cfg.dapo, run.cfg.train
    a = assemble(groups, step, t.scale_rewards, t.filter_zero_std, t.mask_truncated,
                 [prompt_max_tokens(g.record, cfg.rollout.max_tokens) for g in groups],
                 d.overlong_buffer or 0, d.overlong_penalty, adv_std=t.adv_std, advantage=t.advantage)
    a.batch.samples_per_batch = cfg.rollout.prompts_per_step * cfg.rollout.n   # dr_grpo's constant
    run.modes.extend(run, a, groups, step)
    worst = max([*a.staleness, *a.token_lags], default=0)
    if worst > t.max_staleness:
        raise Failure(f"internal error: staleness {worst} > max_staleness {t.max_staleness} at step {step}")
    return a
