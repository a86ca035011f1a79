"""The trainer group: the PolicyTrainer ranks as Ray actors (rlvr.train.actors.TrainerActor),
their start-up and placement, their calls (a dead or failing rank ends the run with one line
naming the last complete checkpoint and the --resume command), and checkpoints.

    trainers = TrainerGroup(cfg, run_dir, cluster)
    trainers.start(model, base, blind)          # load the policy (and the reference) on every rank
    metrics = trainers.step(batch, step)        # one optimizer step on the batch, merged over ranks
    trainers.checkpoint(step, state, uploader)  # atomic: written to a hidden folder, then renamed
"""

from __future__ import annotations

import os
import time

from rlvr.errors import ConfigError, Failure
from rlvr.messages import say
from rlvr.runs import (COMPLETE, checkpoint_dir, commit_checkpoint, latest_checkpoint, prune_checkpoints,
                       tmp_checkpoint_dir, update_manifest)
from rlvr.train.cluster import actor_env, asks
from rlvr.train import ray_calls


def log(msg: str) -> None:
    say(msg)


class TrainerGroup:
    def __init__(self, cfg, run_dir: str, cluster):
        self.cfg, self.run_dir, self.cluster = cfg, run_dir, cluster
        self.ranks: list = []      # the actors, rank 0 first
        self.version = 0           # the weight version the trainer holds (the steps trained)
        self.loading = None        # the ranks' model loads start() sent, until ready() waits for them

    @property
    def rank0(self):
        return self.ranks[0]

    def start(self, model, ref, blind: dict[str, str]) -> None:
        """The trainer ranks, loading `model` (the base, or the checkpoint resumed from) with
        `ref` as the reference. blind: the nodes that do not see the run folder, where no
        rank may write its checkpoints (see rlvr.train.placement)."""
        import ray

        from rlvr.train.actors import TrainerActor
        from rlvr.train.observe import OBSERVE_GROUPS
        from rlvr.train.placement import on_this_node

        t = self.cluster.trainer_config()   # train.grad_sync null: the plan's choice
        res: dict = {"num_cpus": t.trainer_num_cpus}
        if self.cluster.has_gpus():
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
            strategies = self.cluster.trainer_group(world, res, t.tensor_parallel)
        labels = [f"trainer rank {r} ({asks(res)})" for r in range(world)]
        self.ranks = actors = []   # known at once: a start-up failure kills those already made
        for r in range(world):
            opts = dict(res, **({"scheduling_strategy": strategies[r]} if strategies[r] is not None else {}))
            actors.append(ray.remote(concurrency_groups=OBSERVE_GROUPS, **opts)(TrainerActor)
                          .options(name=f"rlvr-trainer-{r}-{self.cluster.tag}").remote(actor_env()))
            actors[-1].observe_as.remote(f"trainer-{r}", self.cfg.log.spans)
        startup = self.cluster.startup
        placed = startup([a.node.remote() for a in actors], "placing the trainer", labels)
        for r, where in enumerate(placed):
            if where["node_id"] in blind:
                raise ConfigError(f"trainer rank {r} was placed (train.trainer_resources) on node "
                                  f"{blind[where['node_id']]}, which does not see the run folder {self.run_dir}: "
                                  "put the run folder on a filesystem every node shares, or place the trainer "
                                  "on this node")
        master = startup(actors[0].address.remote(), "starting the trainer", labels[:1]) if world > 1 else None
        layout = dict(self.cluster.layout) if strategies[0] is not None else \
            {"placement": "driver node" if "scheduling_strategy" in res else "one rank",
             "driver_node": ray.get_runtime_context().get_node_id()}
        update_manifest(self.run_dir, mesh=mesh_record(placed, ray.nodes(), t.tensor_parallel, layout, master))
        # sent, not waited for: the engines start while the ranks load the model (ready() waits)
        self.loading = ([a.setup.remote(model, t, self.cfg.rollout.max_tokens, t.steps,
                                        self.cfg.model.trust_remote_code, ref, self.cfg.rollout.temperature, r,
                                        world, master) for r, a in enumerate(actors)], labels)

    def ready(self) -> None:
        """Wait for the model loads start() sent (bounded by ray.startup_timeout_s, an error in a
        rank one line, as every start-up call)."""
        if self.loading is not None:
            refs, labels = self.loading
            self.loading = None
            self.cluster.startup(refs, "loading the model into the trainer", labels)

    def node_calls(self) -> list:
        """Each rank's placement call (rlvr.train.actors: node, pid)."""
        return [t.node.remote() for t in self.ranks]

    def load_state(self, path: str):
        """A resumed run: every rank loads the checkpoint's optimizer state; returns the data
        stream's state saved with it."""
        states = self.call([t.load_state.remote(path) for t in self.ranks], "loading the checkpoint")
        return states[0].get("data")

    def step(self, batch, step: int) -> dict:
        """One step on `batch` on every rank; the ranks' metrics merged."""
        from rlvr.train.trainer import merge_metrics

        ms = self.call([t.step.remote(batch) for t in self.ranks], f"step {step + 1}")
        return merge_metrics([m for m in ms if not m.pop("_tp_copy", 0.0)])   # one rank per TP group

    def call(self, ref, what: str):
        """ray.get on a trainer call; a dead or failing trainer ends the run with one clear line."""
        import ray

        try:
            return ray_calls.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.RayTaskError) as ex:
            self.failed(ex, what)

    def failed(self, ex: BaseException, what: str):
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

    def alive(self, what: str) -> None:
        """Ends the run when the trainer is dead (the weights come from it: tell a dead trainer
        from a dead engine)."""
        self.call(self.rank0.version.remote(), what)

    def checkpoint(self, step: int, state: dict, uploader) -> None:
        """Every rank saves into a hidden folder, rank 0 writes the completeness marker last; the
        folder is then renamed into place, old ones pruned, and the run folder uploaded."""
        t0 = time.monotonic()
        tmp = tmp_checkpoint_dir(self.run_dir, step)
        self.call([t.save.remote(tmp, state, self.cfg.checkpoint.dtype) for t in self.ranks],
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

    def kill(self) -> None:
        if not self.ranks:
            return
        import ray

        for a in self.ranks:
            try:
                ray.kill(a)
            except Exception:  # noqa: BLE001
                pass
        self.ranks = []


def mesh_record(placed: list[dict], nodes: list[dict], tensor_parallel: int, layout: dict,
                master: tuple[str, int] | None) -> dict:
    """run.json's `mesh`: the trainer's world, tensor- and data-parallel degrees, the nodes its
    ranks run on (Ray node id, address, ranks) in order of their first rank, which node holds
    rank 0 and whether it is the driver's (the run folder's), how they were placed (STRICT_PACK:
    one node; PACK: over several nodes; driver node: pinned beside a run folder other nodes do
    not see) and the ranks' rendezvous (rank 0's node address). placed: each rank's
    rlvr.train.processes.placement(), rank 0 first; nodes: ray.nodes()."""
    world, tp = len(placed), max(1, int(tensor_parallel or 1))
    address = {n["NodeID"]: n.get("NodeManagerAddress") for n in nodes}
    by_node: dict[str, list[int]] = {}
    for r, where in enumerate(placed):
        by_node.setdefault(where["node_id"], []).append(r)
    rank0 = placed[0]["node_id"]
    return {"world": world, "tensor_parallel": tp, "data_parallel": world // tp, **layout,
            "rank0_node": rank0, "rank0_on_driver_node": rank0 == layout.get("driver_node"),
            "rendezvous": f"{master[0]}:{master[1]}" if master else None,
            "nodes": [{"node_id": n, "address": address.get(n), "ranks": ranks} for n, ranks in by_node.items()]}
