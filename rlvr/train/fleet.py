"""The engine fleet: the rollout engines as Ray actors (rlvr.train.actors.EngineActor) and
everything the driver does with them: launch them, send a round's prompts (prompt i to engine
i mod E), collect the groups, and replace an engine that died or hung.

A dead or hung engine (no answer within sync.generate_timeout_s) is killed, restarted from the
base model, brought to the current weights, and its prompts are sent again (counted as
faults/requeued_prompts); training goes on. A prompt that cannot fit the engine's context is
never sent (faults/dropped_prompts), and a request the engine refuses fails that prompt only
(faults/failed_prompts): neither restarts an engine. Both go to traces/rollouts.jsonl with
their status. With a broadcast sync the other engines first finish their queued calls
(`drain`), so that the weight-transfer group is rebuilt once, with every engine replaced.
The weight syncs themselves are rlvr.train.engine_sync's.

sync.mode in_flight (rlvr.train.inflight) is how these engines take weights, so the fleet holds
it: each engine takes several calls at once (its running batch), a generate call waits on the
engine for the version sent last, and rollout.max_num_seqs defaults to one round per engine.
"""

from __future__ import annotations

import time

from rlvr.engines.base import prompt_seed
from rlvr.errors import ConfigError, Failure
from rlvr.messages import say
from rlvr.train.batch import Group
from rlvr.train.cluster import actor_env, asks
from rlvr.train.config_rollout import tool_settings
from rlvr.train.metrics import unusable_record
from rlvr.train.prompts import Chunk, prompt_max_tokens, prompt_stops, prompt_token_ids
from rlvr.train.schedule import Round
from rlvr.train import ray_calls


def log(msg: str) -> None:
    say(msg)


class EngineFleet:
    def __init__(self, cfg, cluster, faults, trainers=None, tokenizer=None, end_of_turn: list[int] | None = None):
        self.cfg, self.cluster, self.faults, self.trainers = cfg, cluster, faults, trainers
        self.tokenizer, self.end_of_turn = tokenizer, end_of_turn or []
        self.engines: list = []                  # one list for the run: weight_sync holds it too
        self.count = 0                           # engine actors ever made (names stay unique)
        self.base = None                         # the model a new engine loads (rlvr.models.ResolvedModel)
        self.where: dict[int, dict] = {}         # id(engine actor) -> its placement (node, pid)
        self.last_done: dict[int, float] = {}    # engine -> when it last delivered
        self.outstanding: set = set()            # generate calls not yet collected (Chunk)
        self.pending_syncs: dict[int, object] = {}   # engine -> an update not yet confirmed (async mode)
        self.synced_version = 0                  # the version the engines hold (or will, once synced)
        self.engine_len = 0                      # the engines' context (tokens)
        self.weight_sync = None                  # rlvr.train.weight_sync's, once the engines are up
        self.others = list                       # () -> [(ref, actor)]: the modes' calls queued on engines

    @property
    def in_flight(self) -> bool:
        return self.cfg.sync.mode == "in_flight"

    @property
    def max_prompt_len(self) -> int:
        """The longest prompt that fits an engine's context."""
        return self.engine_len - self.cfg.rollout.max_tokens

    # -- the engines ------------------------------------------------------------------------

    def options(self) -> dict:
        """The rollout engines' rlvr.engines options."""
        from rlvr.train.modes import engine_options

        r = self.cfg.rollout
        dtype = r.dtype
        if dtype == "auto":
            half = "float16" if self.cfg.train.dtype in ("float16", "fp16") else "bfloat16"  # the trainer's
            dtype = half if self.cluster.has_gpus() else "float32"
        # the plan caps the fraction where an engine shares its GPU with a trainer rank
        fraction = (self.cluster.plan or {}).get("engine_gpu_memory_utilization") or r.gpu_memory_utilization
        opts = {"dtype": dtype, "max_model_len": r.max_model_len, "gpu_memory_utilization": fraction,
                "tensor_parallel_size": r.tensor_parallel_size, "enforce_eager": r.enforce_eager, "seed": r.seed,
                "logprobs_mode": r.logprobs}
        seqs = r.max_num_seqs
        if seqs is None and self.in_flight:
            # one round per engine: the round the trainer needs next runs at full speed (first come, first
            # served), the next one's requests take the slots its finished sequences free
            seqs = -(-r.prompts_per_step // max(1, r.num_engines)) * r.n
        if seqs and r.engine == "vllm":
            opts["extra"] = {"max_num_seqs": seqs}
        if self.cfg.log.engine_stats and r.engine == "vllm":
            opts.setdefault("extra", {})["disable_log_stats"] = False   # LLM.get_metrics(): log.engine_stats
        engine_options(self.cfg, opts)   # what the modes need of the rollout engines (rlvr.train.modes)
        return opts

    def resources(self) -> dict:
        r = self.cfg.rollout
        res: dict = {"num_cpus": r.engine_num_cpus}
        if self.cluster.has_gpus():
            res["num_gpus"] = r.engine_num_gpus * r.tensor_parallel_size
        if r.engine_resources:
            res["resources"] = dict(r.engine_resources)
        return res

    def new_engine(self, model, index: int):
        """Engine `index` (its spans' lane: engine-<index>) from `model`."""
        import ray

        from rlvr.train.actors import EngineActor
        from rlvr.train.observe import OBSERVE_GROUPS

        r = self.cfg.rollout
        res = self.resources()
        self.count += 1
        name = f"rlvr-engine-{self.count}-{self.cluster.tag}"
        # in flight: several generate calls share the engine's running batch, and updates come in beside them.
        # At most max_staleness + 2 generate calls wait on an engine (the rounds admitted ahead, a dynamic-
        # sampling round); the rest of the threads keep weight updates from ever queueing behind them.
        calls = max(32, self.cfg.train.max_staleness + 16)
        kv, calls = (self.cfg.sync.in_flight_kv, calls) if self.in_flight else (None, 1)
        # sync.abort_in_flight: abort_generation runs beside a generate call, in a concurrency group of its own
        groups = {**OBSERVE_GROUPS, "signal": 1} if self.cfg.sync.abort_in_flight != "off" else OBSERVE_GROUPS
        h = ray.remote(max_restarts=0, max_concurrency=calls, concurrency_groups=groups,
                       **res)(EngineActor).options(name=name).remote(model, r.engine, self.options(), actor_env(), kv)
        h.observe_as.remote(f"engine-{index}", self.cfg.log.spans)
        return h

    def start(self, base) -> dict:
        """Launch rollout.num_engines engines from the base model, which every node can load (a
        checkpoint is in the run folder, perhaps on this node only), and wait for them beside
        the trainer ranks; returns the placement for run.json."""
        cfg = self.cfg
        self.base = base
        for e in range(cfg.rollout.num_engines):
            self.engines.append(self.new_engine(base, e))
        ranks = self.trainers.ranks
        engine_asks = asks(self.resources())
        nodes = self.cluster.startup([e.node.remote() for e in self.engines] + self.trainers.node_calls(),
                                     "starting the rollout engines",
                                     [f"engine {e} ({engine_asks})" for e in range(len(self.engines))]
                                     + [f"trainer rank {r}" for r in range(len(ranks))])
        ne = len(self.engines)
        for e, where in zip(self.engines, nodes[:ne]):
            self.where[id(e)] = where
        return {"engines": nodes[:ne], "trainer": nodes[ne], "trainer_ranks": nodes[ne:]}

    def measure(self) -> None:
        """The engines' context (engine_len): a prompt must leave room for rollout.max_tokens."""
        import ray

        self.engine_len = min(ray_calls.get([e.max_model_len.remote() for e in self.engines]))
        if self.max_prompt_len < 1:
            raise ConfigError(f"rollout.max_tokens {self.cfg.rollout.max_tokens} leaves no room for a prompt in the "
                              f"engines' context ({self.engine_len} tokens): raise "
                              "rollout.max_model_len or lower rollout.max_tokens")

    def close(self) -> None:
        """The end of a run: engines close their vLLM engine (bounded: its engine-core process
        leaves with it), then every actor is killed, with any process an engine left behind."""
        from rlvr.train.processes import close_engines

        close_engines(self.engines, self.where)
        self.engines.clear()

    # -- rollouts ---------------------------------------------------------------------------

    def sampling(self) -> dict:
        r = self.cfg.rollout
        out = {"n": r.n, "temperature": r.temperature, "top_p": r.top_p, "top_k": r.top_k,
               "max_tokens": r.max_tokens, "stop": list(r.stop)}
        tools = tool_settings(r)
        if tools is not None:   # multi-turn rollouts with tool turns (rlvr.tools)
            out["tools"] = tools.to_dict()
        return out

    def launch(self, rnd: Round, step: int | None = None, n: int | None = None, offset: int = 0) -> None:
        """Send a round's prompts to the engines (prompt i to engine i mod E); prompts too long
        for the engines' context are kept back, as rlvr-rollout does. step: the trace's step
        that will train on them (the engines' generate spans carry it)."""
        items = []
        for rec, ep in rnd.items:
            ids = prompt_token_ids(self.tokenizer, rec)
            if len(ids) > self.engine_len - prompt_max_tokens(rec, self.cfg.rollout.max_tokens):
                rnd.dropped.append((rec, ep, len(ids)))
                continue
            items.append((rec, ep, ids, prompt_stops(rec, self.cfg.rollout.stop)))
        ne = len(self.engines)
        rnd.chunks = [self.submit(e, items[e::ne], step, n, offset) for e in range(ne) if items[e::ne]]

    def submit(self, e: int, items, step: int | None = None, n: int | None = None, offset: int = 0,
               positions: list | None = None) -> Chunk:
        """Send prompts to engine e: rollout.n samples each, or n of them seeded from sample `offset` on
        (adaptive sampling's later rounds: rlvr.train.adaptive). step: the trace's step (for spans);
        positions: the items' places in their round, where they are not a whole chunk of it (Chunk.position)."""
        seeds = [prompt_seed(self.cfg.rollout.seed, rec["id"], ep) + offset for rec, ep, _, _ in items]
        if not self.cfg.rollout.seeded:
            seeds = None
        lengths = [prompt_max_tokens(rec, self.cfg.rollout.max_tokens) for rec, _, _, _ in items]
        # in flight the engine takes the call at once: it starts once the weights sent last are in
        sampling = self.sampling() if n is None else {**self.sampling(), "n": n}
        ref = self.engines[e].generate.remote([ids for _, _, ids, _ in items], sampling, seeds,
                                              [stops for _, _, _, stops in items],
                                              [self.end_of_turn if isinstance(rec.get("prompt"), list) else []
                                               for rec, _, _, _ in items],
                                              self.synced_version if self.in_flight else None,
                                              lengths if any(n != self.cfg.rollout.max_tokens for n in lengths) else None,
                                              step, [rec.get("id") for rec, _, _, _ in items],
                                              self.cfg.rollout.timeout_s, self.cfg.sync.abort_in_flight != "off")
        chunk = Chunk(e, ref, items, time.monotonic(), self.engines[e], n, offset, positions)
        self.outstanding.add(chunk)
        return chunk

    def collect(self, rnd: Round, traces, step: int, times) -> list[Group]:
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
            ready, _ = ray_calls.wait([c.ref for c in pending], num_returns=1, timeout=5.0)
            now = time.monotonic()
            nxt = []
            for c in pending:
                current = c.actor is self.engines[c.engine]
                if c.ref in ready or not current:
                    self.outstanding.discard(c)
                if c.ref in ready:
                    try:
                        res = ray_calls.get(c.ref)
                    except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError,
                            ray.exceptions.RayTaskError) as ex:
                        if current:  # else: queued on an engine already replaced, just resend
                            self.restart_engine(c.engine, f"failed ({type(ex).__name__})")
                        self.faults.add("requeued_prompts", len(c.items))
                        nxt.append(self.submit(c.engine, c.items, version, c.n, c.offset, c.positions))
                        continue
                    self.last_done[c.engine] = now
                    times.engine_busy += res["seconds"]
                    errors = res.get("errors") or {}
                    again = self.aborted(c, res.get("aborted") or (), traces, version)
                    if again is not None:
                        nxt.append(again)
                    for j in res.get("timeouts") or ():   # rollout.timeout_s: aborted, out of the loss
                        rec, ep, ids, _ = c.items[j]
                        self.faults.add("timeout_prompts")
                        traces.rollout(unusable_record(rec, ep, version, "timeout",
                                                       f"still generating {self.cfg.rollout.timeout_s:g}s after its "
                                                       f"engine started the call (rollout.timeout_s): aborted", len(ids)))
                    for j, ((rec, ep, ids, _), samples) in enumerate(zip(c.items, res["samples"])):
                        if j in (res.get("timeouts") or ()) or j in (res.get("aborted") or ()):
                            continue
                        if j in errors:  # this request failed, the engine did not
                            self.faults.add("failed_prompts")
                            traces.rollout(unusable_record(rec, ep, version, "generation_error", errors[j], len(ids)))
                            continue
                        out[c.position(j, ne)] = Group(rec, ep, ids, samples, res["version_start"],
                                                       res["version_end"], generated_at=res.get("done_at"))
                # A chunk queued behind others on its engine is timed from when the engine
                # last delivered, not from its submission.
                elif current and now - max(c.submitted, self.last_done.get(c.engine, 0.0)) > limit:
                    self.outstanding.discard(c)
                    self.restart_engine(c.engine, f"gave no answer in {limit:.0f}s")
                    self.faults.add("requeued_prompts", len(c.items))
                    nxt.append(self.submit(c.engine, c.items, version, c.n, c.offset, c.positions))
                elif not current:
                    self.faults.add("requeued_prompts", len(c.items))
                    nxt.append(self.submit(c.engine, c.items, version, c.n, c.offset, c.positions))
                else:
                    nxt.append(c)
            pending = nxt
        return [out[i] for i in sorted(out)]

    def abort_stale(self, version: int) -> int:
        """sync.abort_in_flight, as the weights of `version` are sent: the engines with calls not yet
        collected stop those generating with older weights (rlvr.train.actors.EngineActor.abort_generation);
        returns how many engines were told."""
        if self.cfg.sync.abort_in_flight == "off":
            return 0
        actors = {id(c.actor): c.actor for c in self.outstanding if c.actor is not None}
        for a in actors.values():
            a.abort_generation.options(concurrency_group="signal").remote(version)
        return len(actors)

    def aborted(self, c: Chunk, idx, traces, version: int) -> Chunk | None:
        """A call's prompts stopped by sync.abort_in_flight: sent again (resubmit: they queue behind the
        weight update, so they generate with the new weights) or recorded with status aborted (drop)."""
        if not idx:
            return None
        self.faults.add("aborted_in_flight", len(idx))
        items = [c.items[j] for j in idx]
        if self.cfg.sync.abort_in_flight == "resubmit":   # in their places in the round, not the call's first ones
            self.faults.add("resubmitted_in_flight", len(items))
            return self.submit(c.engine, items, version, c.n, c.offset, [c.position(j, len(self.engines)) for j in idx])
        for rec, ep, ids, _ in items:
            self.faults.add("dropped_in_flight")
            traces.rollout(unusable_record(rec, ep, version, "aborted", "still generating at a weight sync "
                                           "(sync.abort_in_flight drop)", len(ids)))
        return None

    # -- replacing engines ------------------------------------------------------------------

    def drain(self, skip: set) -> set:
        """Before a broadcast group is rebuilt: let every engine not in `skip` (those being
        restarted) finish the calls queued on it -- rollouts, and the modes' calls: validations,
        a policy teacher's scoring (their results wait in Ray until collected) -- so that each
        joins the new group at once instead of leaving the others in vLLM's rendezvous, which
        times out. Returns the engines that did not finish within sync.generate_timeout_s: hung
        as well."""
        import ray

        refs = {c.ref: c.engine for c in self.outstanding
                if c.engine not in skip and c.actor is self.engines[c.engine]}
        index = {id(a): e for e, a in enumerate(self.engines)}
        for ref, actor in self.others():
            e = index.get(id(actor))
            if e is not None and e not in skip:
                refs[ref] = e
        if not refs:
            return set()
        limit = self.cfg.sync.generate_timeout_s
        log(f"waiting for {len(refs)} queued engine call(s) before the weight-transfer group is rebuilt")
        _, late = ray_calls.wait(list(refs), num_returns=len(refs), timeout=limit)
        return {refs[r] for r in late}

    def restart_engine(self, e: int, why: str) -> None:
        self.restart_engines({e: why})

    def restart_engines(self, why: dict) -> None:
        """Replace the engines in `why` ({index: reason}): each is killed and started again from
        the base model, then brought to the current weights. With a broadcast sync the other
        engines first finish their queued calls (drain); one that does not within
        sync.generate_timeout_s is hung too and is replaced with them, so that any number of
        engines hung at once are restarted and the group is rebuilt once, with all of them."""
        import ray

        restarted: list[int] = []
        starting: list = []   # the new actors' first calls: they load while the others drain
        todo = dict(why)
        limit = self.cfg.sync.generate_timeout_s
        while todo:
            starting += self.replace_engines(todo)
            restarted += sorted(todo)
            todo = {}
            if self.weight_sync.blocking:
                todo = {e: f"did not finish its queued calls in {limit:.0f}s (hung?)"
                        for e in self.drain(set(restarted))}
        nodes = self.cluster.startup(starting, f"restarting engine{'s' if len(restarted) > 1 else ''} "
                                     f"{', '.join(map(str, restarted))}", [f"engine {e}" for e in restarted])
        for e, where in zip(restarted, nodes):
            self.where[id(self.engines[e])] = where
        if self.weight_sync.blocking and self.synced_version:
            # a broadcast sends the trainer's current weights to every engine (with sync.every_steps
            # k > 1 those may be newer than the last synced version: fresher, within the bound)
            self.synced_version = self.trainers.version
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

    def replace_engines(self, why: dict) -> list:
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
            self.engines[e] = self.new_engine(self.base, e)
        return [self.engines[e].node.remote() for e in sorted(why)]
