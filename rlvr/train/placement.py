"""GPU placement rules of rlvr-train.

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
