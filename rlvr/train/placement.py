"""Placement rules of rlvr-train: GPUs, and the run folder on nodes that share no filesystem.

Every engine and trainer rank is a Ray actor that asks Ray for its GPUs (rollout.engine_num_gpus
x tensor_parallel_size per engine, train.trainer_num_gpus per rank); Ray sets
CUDA_VISIBLE_DEVICES in the actor to the GPUs it assigned, so each actor sees its own devices
only (as cuda:0, cuda:1, ...). The driver never copies its own CUDA_VISIBLE_DEVICES into an
actor: that would overwrite Ray's assignment and put every actor on the same devices.

A driver-side CUDA_VISIBLE_DEVICES is the set a local Ray may use: Ray is started with at most
that many GPUs and numbers them by the listed physical ids, so with
`CUDA_VISIBLE_DEVICES=0,1,2,3,4,5 rlvr-train ...` nothing is placed on GPUs 6 and 7. A running
cluster (ray.address) has its GPUs fixed when its nodes started: start them under the
variable instead.
"""

from __future__ import annotations

from rlvr.train import ray_calls


def visible_devices(value: str | None) -> list[str] | None:
    """The entries of a CUDA_VISIBLE_DEVICES value; None when unset (all devices)."""
    if value is None:
        return None
    return [d.strip() for d in value.split(",") if d.strip()]


def ray_gpu_args(num_gpus: float | None, cuda_visible: str | None) -> tuple[float | None, str | None]:
    """num_gpus for a local ray.init (None: Ray's own detection) and a note for the log.

    Ray itself takes the GPU ids of a local node from the driver's CUDA_VISIBLE_DEVICES; it
    refuses more GPUs than the variable lists, so a larger request is capped to it."""
    visible = visible_devices(cuda_visible)
    if visible is None or num_gpus is None:
        return num_gpus, None
    if num_gpus > len(visible):
        return float(len(visible)), (f"ray.num_gpus {num_gpus:g} capped to the {len(visible)} device(s) of "
                                     f"CUDA_VISIBLE_DEVICES={cuda_visible}")
    return num_gpus, None


def shared_gpus(members: list[tuple[str, dict]]) -> list[str]:
    """The GPUs more than one member uses, one description each ("GPU 0 of node 1a2b3c4d5e6f:
    trainer rank 0, engine 0"). members: (label, placement) pairs, placement as an actor's
    rlvr.train.actors.placement() reports it ({"node_id", "ray_gpu_ids"}): the GPU ids Ray
    assigned, which are a node's own device ids (logical GPUs declared with ray.init(num_gpus=N)
    behave the same way). Fractional GPU requests (rollout.engine_num_gpus 0.5) are what puts
    two members on one device."""
    users: dict[tuple[str, str], list[str]] = {}
    for label, where in members:
        for gpu in where.get("ray_gpu_ids") or []:
            users.setdefault((str(where.get("node_id")), str(gpu)), []).append(label)
    return [f"GPU {gpu} of node {node[:12]}: {', '.join(labels)}"
            for (node, gpu), labels in sorted(users.items()) if len(labels) > 1]


def join_in_token_mode(environ: dict) -> bool:
    """Before joining a running Ray cluster: Ray (2.60) starts clusters with token
    authentication by default, but a driver sends the token only with RAY_AUTH_MODE=token. With
    the mode unset and a token at hand (RAY_AUTH_TOKEN, the file RAY_AUTH_TOKEN_PATH, or
    ~/.ray/auth_token, which `ray start` writes), set the mode to token (such a driver also
    joins a cluster without authentication). True when it did."""
    import os

    if environ.get("RAY_AUTH_MODE"):
        return False
    path = environ.get("RAY_AUTH_TOKEN_PATH") or os.path.join(os.path.expanduser("~"), ".ray", "auth_token")
    if environ.get("RAY_AUTH_TOKEN") or os.path.isfile(path):
        environ["RAY_AUTH_MODE"] = "token"
        return True
    return False


# -- the run folder on a cluster without a shared filesystem -----------------------------------
#
# The trainer ranks write checkpoints into the run folder (and a resumed run's ranks read
# them there), so they must run where the driver's run folder is. On a Ray cluster whose nodes
# do not share it (SageMaker instances, nodes with their own disks), the ranks are pinned to the
# driver's node; engines may run anywhere, as they load the base model (an s3:// model through
# each node's own cache) and take every later weight from the trainer.


def _holds(path: str, token: str) -> bool:
    try:
        with open(path) as f:
            return f.read() == token
    except OSError:
        return False


def nodes_not_seeing(folder: str) -> dict[str, str]:
    """The alive nodes of the Ray cluster (other than the driver's) on which `folder` is not the
    driver's folder, {node id: address}: a probe file written here is looked for on each node.
    No probe on a one-node cluster."""
    import os
    import uuid

    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    me = ray.get_runtime_context().get_node_id()
    others = [n for n in ray.nodes() if n.get("Alive") and n["NodeID"] != me]
    if not others:
        return {}
    token = uuid.uuid4().hex
    probe = os.path.join(folder, f".rlvr-node-probe-{token}")
    with open(probe, "w") as f:
        f.write(token)
    try:
        check = ray.remote(num_cpus=0)(_holds)
        seen = ray_calls.get([check.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False))
                        .remote(probe, token) for n in others])
    finally:
        os.unlink(probe)
    return {n["NodeID"]: n.get("NodeManagerAddress") or n["NodeID"][:12] for n, ok in zip(others, seen) if not ok}


def on_this_node(ranks: int, per_rank: dict, run_dir: str, blind: dict[str, str]):
    """A scheduling strategy that keeps `ranks` actors of `per_rank` resources ({"num_cpus",
    "num_gpus"}) on the driver's node; a ConfigError when that node cannot hold them (Ray would
    wait for them forever)."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rlvr.errors import ConfigError

    me = ray.get_runtime_context().get_node_id()
    have = next((n.get("Resources") or {}) for n in ray.nodes() if n["NodeID"] == me)
    for key, res in (("num_cpus", "CPU"), ("num_gpus", "GPU")):
        need = ranks * float(per_rank.get(key) or 0)
        if need > have.get(res, 0):
            raise ConfigError(f"the run folder {run_dir} is not on a filesystem shared with the Ray cluster's other "
                              f"node(s) ({', '.join(sorted(blind.values()))}), so the trainer must run on this node, "
                              f"which has {have.get(res, 0):g} {res} for the {ranks} rank(s)' {need:g}: put the run "
                              "folder on a shared filesystem, or run rlvr-train on a node that can hold the trainer")
    return NodeAffinitySchedulingStrategy(me, soft=False)
