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

``auto`` picks nccl when the engines are vLLM on CUDA and the trainer is on CUDA and no
two members of the group (trainer rank 0, every engine worker) share a GPU (NCCL refuses
two ranks on one device: "Duplicate GPU detected"), else object_store; an explicit nccl with
shared GPUs is refused before anything is sent. Either way the driver checks the version
every engine ends up with, and every sync has a wall-clock limit (sync.timeout_s).

A broadcast's group is built once, at start-up, while the engines are idle. A sync is
waited for by the driver (the trainer is inside the broadcast until every engine has
received); an engine first finishes the generate calls queued before it. The trainer ranks
gather the complete weights before rank 0 sends anything (rlvr.train.trainer.PolicyTrainer.
wire_weights), and the checksum of what the trainer sent must equal what every engine
received. A restarted engine cannot join the old group: once the other engines have finished
what was queued on them, the group is rebuilt with all engines and the current weights are
broadcast again. A member that refuses, dies or fails to join ends the sync at once with one
line naming it.
"""

from __future__ import annotations

import time

from rlvr.errors import Failure, UsageError
from rlvr.train.config_rollout import SYNC_METHODS as METHODS  # sync.method's names live with the config
from rlvr.train import ray_calls


def choose(method: str, engine: str, engine_devices: list[str], trainer_device: str,
           shared: list[str] | tuple[str, ...] = ()) -> str:
    """The sync path: `method` unless auto; auto is nccl for vLLM engines on CUDA with a CUDA
    trainer and no GPU shared by two members of the group (`shared`: the GPUs that are, as
    rlvr.train.placement.shared_gpus names them), object_store otherwise. A broadcast needs
    vLLM engines; nccl needs distinct GPUs."""
    if method not in METHODS:
        raise UsageError(f"sync.method: expected one of {', '.join(METHODS)}, got {method!r}")
    on_cuda = bool(engine_devices) and all(d.startswith("cuda") for d in engine_devices)
    if method == "auto":
        return "nccl" if (engine == "vllm" and on_cuda and trainer_device.startswith("cuda") and not shared) \
            else "object_store"
    if method in ("nccl", "gloo") and engine != "vllm":
        raise UsageError(f"sync.method {method} needs rollout.engine vllm (the {engine} engine loads weights "
                         f"through the object store only)")
    if method == "nccl" and not (on_cuda and trainer_device.startswith("cuda")):
        raise UsageError(f"sync.method nccl needs the engines and the trainer on CUDA (engines: "
                         f"{', '.join(sorted(set(engine_devices)))}; trainer: {trainer_device})")
    if method == "nccl" and shared:
        raise UsageError(f"sync.method nccl needs a GPU of its own for trainer rank 0 and every engine worker "
                         f"(NCCL refuses two ranks on one device), but {'; '.join(shared)}: use sync.method "
                         "object_store (or auto), or whole GPUs (rollout.engine_num_gpus, train.trainer_num_gpus 1)")
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

    def restore(self, engines: list[int], version: int, timeout_s: float) -> None:
        """Bring restarted engines (built from the base model) to the last synced weights."""
        import ray

        if self.weights_ref is not None and engines:
            ray_calls.get([self.engines[e].update_weights.remote(self.weights_ref, version) for e in engines],
                    timeout=timeout_s)

    def check(self, results: dict) -> int | None:
        """Nothing to compare: the engines load the very arrays the trainer returned."""
        return None

    def close(self) -> None:
        pass


class BroadcastSync:
    """Bucketed broadcast from trainer rank 0 to every vLLM worker (nccl or gloo)."""

    blocking = True

    def __init__(self, trainers: list, engines: list, transport: str, bucket_mb: float | None, timeout_s: float,
                 tensor_parallel_size: int = 1):
        from rlvr.engines.transfer import DEFAULT_BUCKET_BYTES

        self.trainers, self.engines = trainers, engines
        self.transport = transport
        # null: at least the largest tensor (the embedding: 594 MiB at Qwen3-1.7B), else 512 MiB
        self.bucket_bytes = max(1, int(bucket_mb * 2**20)) if bucket_mb else None
        self.default_bucket = DEFAULT_BUCKET_BYTES
        self.timeout_s = timeout_s
        self.tp = tensor_parallel_size
        self.info: dict | None = None     # names, dtypes, shapes: the same for every sync
        self.synced = False
        self.generation = 0

    def open(self) -> None:
        """(Re)build the group: trainer rank 0 is group rank 0, engine e's workers follow. Done
        at start-up, while the engines are idle, and after an engine restart once the others
        have drained their queues (the caller's job): every member then joins at once, long
        before vLLM's rendezvous wait expires. A member that cannot join fails with one line."""
        import ray

        from rlvr.engines.transfer import Rendezvous

        if self.info is not None:
            self._close(quiet=True)
            self.info = None
        address, port = ray_calls.get(self.trainers[0].address.remote(), timeout=self.timeout_s)
        if self.bucket_bytes is None:
            self.bucket_bytes = max(self.default_bucket,
                                    int(ray_calls.get(self.trainers[0].largest_tensor_bytes.remote(), timeout=self.timeout_s)))
        rdv = Rendezvous(self.transport, address, port, 1 + self.tp * len(self.engines), self.bucket_bytes,
                         self.timeout_s)
        trainer_refs = [t.transfer_open.remote(rdv) for t in self.trainers]
        engine_refs = [eng.transfer_init.remote(rdv.worker_init(1 + e * self.tp)) for e, eng in enumerate(self.engines)]
        names = [f"trainer rank {r}" for r in range(len(self.trainers))] + \
                [f"engine {e}" for e in range(len(self.engines))]
        infos = wait_all(dict(zip(names, trainer_refs + engine_refs)), self.timeout_s,
                         f"the weight-transfer group ({self.transport}) could not be formed")
        self.info = infos["trainer rank 0"]
        self.generation += 1

    def push(self, version: int) -> dict:
        """Start a sync to `version`: the engines' receive calls and the trainer ranks' send
        calls, {engine index or "trainer-<rank>": ref}; all must finish (the driver waits)."""
        if self.info is None:
            self.open()
        refs: dict = {e: eng.receive_weights.remote(self.info, version) for e, eng in enumerate(self.engines)}
        refs.update({f"trainer-{r}": t.transfer_send.remote(version) for r, t in enumerate(self.trainers)})
        self.synced = True
        return refs

    def check(self, results: dict) -> int:
        """After a sync: what every engine received must be what trainer rank 0 sent, and what it
        sent must be its weights after the step (checksums, rlvr.engines.weights.Checksum).
        Returns the number of engines verified; a mismatch is a Failure naming the engine."""
        sent = results.get("trainer-0") or {}
        want = sent.get("sent")
        if want is None:
            return 0
        if sent.get("weights") is not None and sent["weights"] != want:
            raise Failure("trainer rank 0 sent weights that differ from its own after the optimizer step "
                          f"(checksums {want} sent, {sent['weights']} held): the send read tensors still being written")
        ok = 0
        for key, res in sorted((k, v) for k, v in results.items() if isinstance(k, int)):
            got = (res or {}).get("checksum") if isinstance(res, dict) else None
            if got is None:
                continue
            if got != want:
                raise Failure(f"engine {key} received weights that differ from those trainer rank 0 sent "
                              f"(checksums {got} and {want}): the broadcast is corrupted")
            ok += 1
        return ok

    def restore(self, engines: list[int], version: int, timeout_s: float) -> None:
        """Restarted engines: rebuild the group once, with all of them, and, once a sync has
        happened, broadcast the trainer's current weights (those of `version`) to every engine
        again. The caller first lets the other engines finish the generate calls queued on them."""
        self.open()
        if not self.synced:
            return   # every engine holds the initial weights
        refs = self.push(version)
        results = wait_all({str(k): r for k, r in refs.items()}, timeout_s,
                           f"the weight sync to version {version} after restarting engine "
                           f"{', '.join(map(str, engines))} failed")
        self.check({(int(k) if k.isdigit() else k): v for k, v in results.items()})

    def _close(self, quiet: bool = False) -> None:
        import ray

        refs = [t.transfer_close.remote() for t in self.trainers] + [e.transfer_close.remote() for e in self.engines]
        try:
            ray_calls.get(refs, timeout=self.timeout_s)
        except Exception:  # noqa: BLE001 - a dead member is why the group is rebuilt
            if not quiet:
                raise

    def close(self) -> None:
        if self.info is not None:
            self._close(quiet=True)
            self.info = None


def wait_all(refs: dict, timeout_s: float, what: str) -> dict:
    """ray.get of several members' calls ({name: ref}) that fails at the first error or at the
    deadline, with one line naming the member (never a traceback, never the whole limit
    waited out once a member has failed)."""
    import ray

    deadline = time.monotonic() + timeout_s
    pending = {ref: name for name, ref in refs.items()}
    out: dict = {}
    while pending:
        ready, _ = ray_calls.wait(list(pending), num_returns=1, timeout=max(0.0, deadline - time.monotonic()))
        if not ready:
            raise Failure(f"{what}: {', '.join(sorted(pending.values()))} did not answer within {timeout_s:.0f}s")
        for ref in ready:
            name = pending.pop(ref)
            try:
                out[name] = ray_calls.get(ref)
            except (ray.exceptions.RayActorError, ray.exceptions.ActorUnavailableError):
                raise Failure(f"{what}: {name} died") from None
            except ray.exceptions.RayTaskError as ex:
                raise Failure(f"{what}: {name} failed ({cause_line(ex)})") from None
    return out


def cause_line(ex: BaseException) -> str:
    """The last line of a Ray task error's cause, e.g. "DistStoreError: ... timed out"."""
    cause = getattr(ex, "cause", None)
    if isinstance(cause, BaseException):
        lines = str(cause).strip().splitlines()
        return f"{type(cause).__name__}: {lines[-1][:300]}" if lines else type(cause).__name__
    lines = str(ex).strip().splitlines()
    return lines[-1][:300] if lines else type(ex).__name__


def make(cfg, trainers: list, engines: list, log=None, placement: dict | None = None):
    """The sync object for a run: probes where the trainer and the engines compute and which
    GPUs they share (placement: run.json's, {"engines": [...], "trainer_ranks": [...]}), applies
    sync.method, says which path it took, and builds a broadcast's group now, while the
    engines are idle."""
    import ray

    from rlvr.train.placement import shared_gpus

    deadline = time.monotonic() + cfg.sync.timeout_s
    trainer_device = ray_calls.get(trainers[0].device.remote(), timeout=cfg.sync.timeout_s)
    engine_devices = ray_calls.get([e.device.remote() for e in engines], timeout=max(1.0, deadline - time.monotonic()))
    shared = []
    if placement:
        members = [("trainer rank 0", placement["trainer_ranks"][0])] + \
                  [(f"engine {e}", p) for e, p in enumerate(placement["engines"])]
        shared = shared_gpus(members)
    method = choose(cfg.sync.method, cfg.rollout.engine, engine_devices, trainer_device, shared)
    if log is not None:
        extra = ""
        if method != "object_store":
            extra = f", buckets of {cfg.sync.bucket_mb:g} MiB" if cfg.sync.bucket_mb else ", buckets fit the largest tensor"
        why = f"; shared GPUs: {'; '.join(shared)}" if shared and cfg.sync.method == "auto" and \
            engine_devices and all(d.startswith("cuda") for d in engine_devices) else ""
        log(f"weight sync: {method} (trainer on {trainer_device}, engines on {', '.join(sorted(set(engine_devices)))}"
            f"{extra}{why})")
    if method == "object_store":
        return ObjectStoreSync(trainers, engines)
    sync = BroadcastSync(trainers, engines, method, cfg.sync.bucket_mb,
                         cfg.sync.timeout_s + cfg.sync.generate_timeout_s, cfg.rollout.tensor_parallel_size)
    sync.open()
    return sync
