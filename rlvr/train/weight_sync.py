"""How the trainer's weights reach the rollout engines after each optimizer step (sync.method).

- ``object_store``: trainer rank 0 returns its weights as numpy arrays (bf16 as int16 bits),
  Ray's object store hands them to every engine actor, which loads them (vLLM: one
  safetensors blob through an RPC to its workers). Works for every engine and device; on
  GPUs it copies the weights through host memory several times per engine.
- ``nccl``: trainer rank 0 broadcasts the weights in buckets of sync.bucket_mb straight from
  its GPU to every vLLM worker over NCCL, through vLLM's weight-transfer API
  (rlvr.engines.transfer). No host copy.
- ``gloo``: the same broadcast over a gloo group on CPU tensors (CPU engines; it is also how
  the broadcast is tested without GPUs).

``auto`` picks nccl when the engines are vLLM on CUDA and the trainer is on CUDA, else
object_store. Either way the driver checks the version every engine ends up with, and every
sync has a wall-clock limit (sync.timeout_s). A broadcast sync is waited for by the driver
(the trainer is inside the broadcast until every engine has received); an engine first
finishes the generate calls queued before it. A restarted engine cannot join the old group:
the group is rebuilt with all engines and the current weights are broadcast again.
"""

from __future__ import annotations

import time

from rlvr.errors import Failure, UsageError

METHODS = ("auto", "nccl", "gloo", "object_store")


def choose(method: str, engine: str, engine_devices: list[str], trainer_device: str) -> str:
    """The sync path: `method` unless auto; auto is nccl for vLLM engines on CUDA with a CUDA
    trainer, object_store otherwise. A broadcast needs vLLM engines."""
    if method not in METHODS:
        raise UsageError(f"sync.method: expected one of {', '.join(METHODS)}, got {method!r}")
    on_cuda = bool(engine_devices) and all(d.startswith("cuda") for d in engine_devices)
    if method == "auto":
        return "nccl" if engine == "vllm" and on_cuda and trainer_device.startswith("cuda") else "object_store"
    if method in ("nccl", "gloo") and engine != "vllm":
        raise UsageError(f"sync.method {method} needs rollout.engine vllm (the {engine} engine loads weights "
                         f"through the object store only)")
    if method == "nccl" and not (on_cuda and trainer_device.startswith("cuda")):
        raise UsageError(f"sync.method nccl needs the engines and the trainer on CUDA (engines: "
                         f"{', '.join(sorted(set(engine_devices)))}; trainer: {trainer_device})")
    return method


class ObjectStoreSync:
    """Weights through Ray's object store (the CPU path)."""

    blocking = False

    def __init__(self, trainers: list, engines: list):
        self.trainers, self.engines = trainers, engines
        self.weights_ref = None

    def push(self, version: int) -> dict:
        """Start a sync to `version`; {engine index: ref of its update}."""
        # every rank takes part in gathering the full weights; rank 0 returns them
        self.weights_ref = [t.weights.remote() for t in self.trainers][0]
        return {e: eng.update_weights.remote(self.weights_ref, version) for e, eng in enumerate(self.engines)}

    def restore(self, e: int, version: int, timeout_s: float) -> None:
        """Bring a restarted engine (built from the base model) to the last synced weights."""
        import ray

        if self.weights_ref is not None:
            ray.get(self.engines[e].update_weights.remote(self.weights_ref, version), timeout=timeout_s)

    def close(self) -> None:
        pass


class BroadcastSync:
    """Bucketed broadcast from trainer rank 0 to every vLLM worker (nccl or gloo)."""

    blocking = True

    def __init__(self, trainers: list, engines: list, transport: str, bucket_mb: float, timeout_s: float,
                 tensor_parallel_size: int = 1):
        self.trainers, self.engines = trainers, engines
        self.transport = transport
        self.bucket_bytes = max(1, int(bucket_mb * 2**20))
        self.timeout_s = timeout_s
        self.tp = tensor_parallel_size
        self.info: dict | None = None     # names, dtypes, shapes: the same for every sync
        self.synced = False
        self.generation = 0

    def _open(self) -> None:
        """(Re)build the group: trainer rank 0 is group rank 0, engine e's workers follow."""
        import ray

        from rlvr.engines.transfer import Rendezvous

        if self.info is not None:
            self._close(quiet=True)
        address, port = ray.get(self.trainers[0].address.remote(), timeout=self.timeout_s)
        rdv = Rendezvous(self.transport, address, port, 1 + self.tp * len(self.engines), self.bucket_bytes,
                         self.timeout_s)
        trainer_refs = [t.transfer_open.remote(rdv) for t in self.trainers]
        engine_refs = [eng.transfer_init.remote(rdv.worker_init(1 + e * self.tp)) for e, eng in enumerate(self.engines)]
        try:
            infos = ray.get(trainer_refs + engine_refs, timeout=self.timeout_s)
        except ray.exceptions.GetTimeoutError:
            raise Failure(f"the weight-transfer group ({self.transport}) did not form within {self.timeout_s:.0f}s") from None
        self.info = infos[0]
        self.generation += 1

    def push(self, version: int) -> dict:
        """Start a sync to `version`: the engines' receive calls and the trainer ranks' send
        calls, {engine index or "trainer-<rank>": ref}; all must finish (the driver waits)."""
        if self.info is None:
            self._open()
        refs: dict = {e: eng.receive_weights.remote(self.info, version) for e, eng in enumerate(self.engines)}
        refs.update({f"trainer-{r}": t.transfer_send.remote(version) for r, t in enumerate(self.trainers)})
        self.synced = True
        return refs

    def restore(self, e: int, version: int, timeout_s: float) -> None:
        """A restarted engine: rebuild the group with it and broadcast the trainer's current
        weights (those of `version`) to every engine again."""
        import ray

        if not self.synced:
            return   # engines hold the initial weights; the group forms at the first sync
        self._open()
        ray.get(list(self.push(version).values()), timeout=timeout_s)

    def _close(self, quiet: bool = False) -> None:
        import ray

        refs = [t.transfer_close.remote() for t in self.trainers] + [e.transfer_close.remote() for e in self.engines]
        try:
            ray.get(refs, timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 - a dead member is why the group is rebuilt
            if not quiet:
                raise

    def close(self) -> None:
        if self.info is not None:
            self._close(quiet=True)
            self.info = None


def make(cfg, trainers: list, engines: list, log=None):
    """The sync object for a run: probes where the trainer and the engines compute, applies
    sync.method, and says which path it took."""
    import ray

    deadline = time.monotonic() + cfg.sync.timeout_s
    trainer_device = ray.get(trainers[0].device.remote(), timeout=cfg.sync.timeout_s)
    engine_devices = ray.get([e.device.remote() for e in engines], timeout=max(1.0, deadline - time.monotonic()))
    method = choose(cfg.sync.method, cfg.rollout.engine, engine_devices, trainer_device)
    if log is not None:
        extra = f", buckets of {cfg.sync.bucket_mb:g} MiB" if method != "object_store" else ""
        log(f"weight sync: {method} (trainer on {trainer_device}, engines on {', '.join(sorted(set(engine_devices)))}{extra})")
    if method == "object_store":
        return ObjectStoreSync(trainers, engines)
    return BroadcastSync(trainers, engines, method, cfg.sync.bucket_mb,
                         cfg.sync.timeout_s + cfg.sync.generate_timeout_s, cfg.rollout.tensor_parallel_size)
