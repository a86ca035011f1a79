"""The teacher's engines in distillation (rlvr.train.distill): a separate frozen teacher on
engine actors of its own (rlvr.train.actors.EngineActor with the teacher's model, never
synced), or the policy itself scoring on the rollout engines (teacher.model: policy). Either
way `_score` returns the teacher's top-k log-probs at every position of the given completions;
a dead or hung engine is restarted and its share of the completions sent again.
"""

from __future__ import annotations

import time

from rlvr.errors import Failure
from rlvr.messages import say
from rlvr.train import ray_calls

POLICY = "policy"


class Teacher:
    """The teacher engines of a run (model: the teacher's rlvr.models.ResolvedModel, None for
    the policy itself)."""

    def __init__(self, cfg, model=None, log=say):
        self.cfg, self.te, self.model, self.log = cfg, cfg.teacher, model, log
        self.self_teacher = self.te.model == POLICY
        self.actors: list = []                  # its engine actors
        self.where: dict[int, dict] = {}        # id(actor) -> its placement at start (rlvr.train.actors.retire)
        self.max_len = None                     # the teacher's context (prompt + completion)
        self.open: dict = {}                    # scoring calls not yet collected: ref -> engine actor
        self.restarts = 0

    def engine_options(self, run) -> dict:
        te = self.te
        opts = run.fleet.options()
        opts.pop("extra", None)   # the rollout engines' own (their in-flight batch size)
        dtype = te.dtype
        if dtype == "auto":
            dtype = opts["dtype"]
        opts.update(dtype=dtype, max_model_len=te.max_model_len or self.cfg.rollout.max_model_len,
                    gpu_memory_utilization=(run.cluster.plan or {}).get("teacher_gpu_memory_utilization")
                    or te.gpu_memory_utilization, tensor_parallel_size=te.tensor_parallel_size,
                    max_logprobs=max(20, te.top_k))
        return opts

    def _new_actor(self, run, n: int, index: int):
        """Teacher engine `index` (its spans' lane: teacher-<index>), the n-th made."""
        import ray

        from rlvr.train.actors import EngineActor
        from rlvr.train.cluster import actor_env
        from rlvr.train.observe import OBSERVE_GROUPS

        te = self.te
        res: dict = {"num_cpus": te.engine_num_cpus}
        if run.cluster.has_gpus():
            res["num_gpus"] = te.engine_num_gpus * te.tensor_parallel_size
        if te.engine_resources:
            res["resources"] = dict(te.engine_resources)
        name = f"rlvr-teacher-{n}-{run.cluster.tag}"
        h = ray.remote(max_restarts=0, max_concurrency=1, concurrency_groups=OBSERVE_GROUPS,
                       **res)(EngineActor).options(name=name).remote(
            self.model, te.engine or self.cfg.rollout.engine, self.engine_options(run), actor_env())
        h.observe_as.remote(f"teacher-{index}", self.cfg.log.spans)
        return h

    def start(self, run) -> None:
        """Start the teacher engines (a separate teacher), or take the rollout engines' context
        (the policy); run.json names the teacher."""
        import ray

        from rlvr.runs import update_manifest

        if self.self_teacher:
            self.max_len = run.fleet.engine_len          # the rollout engines' context
            update_manifest(run.run_dir, teacher={"model": POLICY, "engines": "the rollout engines"})
            return
        t0 = time.monotonic()
        self.actors = [self._new_actor(run, i, i) for i in range(self.te.num_engines)]
        nodes = run.cluster.startup([a.node.remote() for a in self.actors], "starting the teacher engines",
                             [f"teacher engine {e}" for e in range(len(self.actors))])
        self.where = {id(a): where for a, where in zip(self.actors, nodes)}
        self.max_len = min(ray_calls.get([a.max_model_len.remote() for a in self.actors]))
        update_manifest(run.run_dir, teacher={"model": self.model.record(), "engines": nodes})
        self.log(f"{len(self.actors)} teacher engine(s) on {self.te.model} ready in {time.monotonic() - t0:.1f}s")

    def close(self) -> None:
        """As the rollout engines end: each closes its engine (vLLM's engine-core process leaves
        with it), then the actor is killed with whatever processes it left behind."""
        from rlvr.train.processes import close_engines

        close_engines(self.actors, self.where)
        self.actors = []

    def _score(self, run, prompts: list, comps: list, step: int) -> tuple[list, list]:
        """The teacher's (ids, logprobs, token_logprobs) arrays of every (prompt, completion), in
        the items' order, and the weight versions that scored them. Engine e takes items e,
        e + E, ... in one call; a dead or hung engine is restarted and its share sent again."""
        from rlvr.train import spans

        with spans.span("teacher", step=step + 1, version=run.trainers.version, n_items=len(prompts)):
            return self._score_all(run, prompts, comps, step)

    def _score_all(self, run, prompts: list, comps: list, step: int) -> tuple[list, list]:
        import ray

        ne = len(run.fleet.engines if self.self_teacher else self.actors)
        shares = {e: list(range(e, len(prompts), ne)) for e in range(min(ne, len(prompts)))}
        limit = self.cfg.sync.generate_timeout_s
        rows: list = [None] * len(prompts)
        versions = []
        while shares:
            actors = run.fleet.engines if self.self_teacher else self.actors
            sent = {e: actors[e] for e in shares}
            refs = {e: sent[e].score.remote([prompts[i] for i in idx], [comps[i] for i in idx], self.te.top_k)
                    for e, idx in shares.items()}
            self.open = {ref: sent[e] for e, ref in refs.items()}
            # every engine's call is out: wait for them together, within one limit
            done, _ = ray_calls.wait(list(refs.values()), num_returns=len(refs), timeout=limit)
            done = set(done)
            failed = {}
            for e, ref in refs.items():
                if ref not in done:
                    failed[e] = f"gave no scores in {limit:.0f}s"
                    continue
                try:
                    topk = ray_calls.get(ref)
                except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError) as ex:
                    failed[e] = f"failed ({type(ex).__name__})"
                    continue
                except ray.exceptions.RayTaskError as ex:
                    cause = str(ex).strip().splitlines()[-1][:300] if str(ex).strip() else type(ex).__name__
                    raise Failure(f"step {step + 1}: the teacher could not score: {cause}") from None
                self.open.pop(ref, None)   # answered (a failed engine's call goes with its restart)
                versions.append(topk.version)
                for j, i in enumerate(shares[e]):
                    rows[i] = topk.rows(j)
            for e, why in failed.items():
                if actors[e] is sent[e]:   # else already replaced (a restart found it hung too): resend
                    self._restart(run, e, why)
            self.open = {}
            shares = {e: shares[e] for e in failed}
        return rows, versions

    def outstanding(self) -> list:
        """(ref, engine actor) of the policy teacher's scoring calls still queued on the rollout
        engines (a restart mid-scoring drains them before a broadcast group is rebuilt)."""
        return list(self.open.items()) if self.self_teacher else []

    def _restart(self, run, e: int, why: str) -> None:
        if self.self_teacher:
            run.fleet.restart_engine(e, why)   # the rollout engine, with the current weights
            return
        from rlvr.train.actors import retire

        self.log(f"teacher engine {e} {why}: restarting it")
        run.faults.add("teacher_restarts")
        self.restarts += 1
        if self.restarts > 5 * len(self.actors):
            raise Failure("teacher engines keep failing (more than 5 restarts each): giving up")
        old = self.actors[e]
        retire(old, self.where.pop(id(old), None))   # with vLLM's engine-core process, which may hold the GPU
        self.actors[e] = self._new_actor(run, len(self.actors) + self.restarts, e)
        self.where[id(self.actors[e])] = run.cluster.startup(self.actors[e].node.remote(), f"restarting teacher engine {e}",
                                                      [f"teacher engine {e}"])
