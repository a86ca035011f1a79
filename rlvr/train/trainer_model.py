"""The trainer's model: building the policy (and the KL reference) on its device, in its
compute dtype, sharded over the trainer ranks with FSDP2 or, on one rank, with fp32 master
weights beside the compute copy (MasterWeights), the same numerics either way.

rlvr.train.trainer.PolicyTrainer builds its models here; nothing here knows of a step or a
loss.
"""

from __future__ import annotations

import torch


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def resolve_dtype(dtype: str, device: str) -> torch.dtype:
    if dtype == "auto":
        return torch.bfloat16 if device.startswith("cuda") else torch.float32
    return {"bfloat16": torch.bfloat16, "bf16": torch.bfloat16, "float32": torch.float32, "fp32": torch.float32,
            "float16": torch.float16, "fp16": torch.float16}[dtype]


def shard(model, compute_dtype: torch.dtype, reduce_dtype: torch.dtype = torch.float32, mesh=None,
          offload: str | None = None) -> None:
    """FSDP2 (with tensor parallelism over mesh["tp"] where the mesh has one): each decoder
    layer, then the rest of the model, parameters cast to compute_dtype for forward/backward,
    gradients reduced in reduce_dtype (rlvr.train.parallel.shard)."""
    from rlvr.train.parallel import shard as parallel_shard

    parallel_shard(model, compute_dtype, reduce_dtype, mesh, offload)


class MasterWeights:
    """Mixed precision on one rank the way FSDP's MixedPrecisionPolicy does it on several: the
    model's parameters hold the compute dtype (bf16), so the whole forward and backward run in
    it (residual stream, norms, rotary, as vLLM and the FSDP ranks compute them, not autocast's
    fp32 islands), while an fp32 master copy of every parameter takes the gradients
    (accumulated in fp32 over micro-batches, moved there as each parameter's gradient is
    complete) and the optimizer's update, and is copied back into the compute copy after
    each step."""

    def __init__(self, model: torch.nn.Module, dtype: torch.dtype):
        self.pairs: list[tuple[torch.nn.Parameter, torch.Tensor]] = []
        for p in model.parameters():          # a tied parameter once
            master = p.detach().clone().float().requires_grad_(True)
            p.data = p.data.to(dtype)         # parameters only: buffers (rotary inv_freq) stay fp32
            p.register_post_accumulate_grad_hook(self._mover(master))
            self.pairs.append((p, master))
        self.params = [m for _, m in self.pairs]
        self.by_param = {id(p): m for p, m in self.pairs}

    @staticmethod
    def _mover(master: torch.Tensor):
        def hook(p: torch.Tensor) -> None:
            if master.grad is None:
                master.grad = p.grad.to(torch.float32)
            else:
                master.grad.add_(p.grad)      # accumulated in fp32, no fp32 copy of p.grad
            p.grad = None
        return hook

    @torch.no_grad()
    def copy_to_model(self) -> None:
        for p, m in self.pairs:
            p.copy_(m)

    def state_dict(self, model: torch.nn.Module) -> dict:
        """The model's state dict with every parameter replaced by its fp32 master."""
        sd = model.state_dict()
        names = {n: p for n, p in model.named_parameters(remove_duplicate=False)}
        return {k: (self.by_param[id(names[k])] if k in names else v) for k, v in sd.items()}


CHECKPOINT_TIMEOUT_S = 4 * 3600.0
"""How long the ranks wait for rank 0's checkpoint writes (a 1.7B model's fp32 weights and its
optimizer state are ~20 GB; a network filesystem may take many minutes for them)."""


def checkpoint_group(timeout_s: float = CHECKPOINT_TIMEOUT_S):
    """A gloo group of every trainer rank with its own long timeout, for the waits around
    checkpoint writes: a barrier on the default NCCL group would trip its watchdog (the
    group's timeout, 10 minutes) while rank 0 writes to a slow filesystem; gloo waits on the
    CPU, off the GPU streams, for as long as it is told. A collective call: every rank calls it
    at the same point."""
    import datetime

    import torch.distributed as dist

    return dist.new_group(backend="gloo", timeout=datetime.timedelta(seconds=timeout_s))


def synchronize(device: str) -> None:
    """Wait for every kernel queued on the device's current stream (no-op on CPU)."""
    if str(device).startswith("cuda"):
        torch.cuda.current_stream(torch.device(device)).synchronize()


def _from_pretrained(path: str, dtype: torch.dtype, trust_remote_code: bool):
    from rlvr.models import lean_transformers

    lean_transformers()
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(path, dtype=dtype, trust_remote_code=trust_remote_code)


def load_policy(model_path: str, tcfg, device: str, dtype: torch.dtype, world: int = 1,
                trust_remote_code: bool = False, mesh=None):
    """(model, tokenizer, master): the policy from model_path, loaded in float32 on `device`, in
    training mode. With world > 1 (torch.distributed initialised by the caller) it is sharded
    (`shard`, tensor parallel over mesh["tp"] where `mesh` has one, offloaded as train.offload
    asks), its gradients reduced in train.grad_reduce_dtype; on one rank with a compute
    dtype other than float32 its parameters are cast to it and `master` holds the fp32 copy
    (MasterWeights), else master is None. train.gradient_checkpointing is applied."""
    from transformers import AutoTokenizer

    model = _from_pretrained(model_path, torch.float32, trust_remote_code).to(device)
    tokenizer = AutoTokenizer.from_pretrained(model_path, trust_remote_code=trust_remote_code)
    if tcfg.gradient_checkpointing:
        model.gradient_checkpointing_enable()
    master: MasterWeights | None = None
    if world > 1:
        shard(model, dtype, resolve_dtype(getattr(tcfg, "grad_reduce_dtype", "float32"), device), mesh,
              getattr(tcfg, "offload", None))
    elif dtype != torch.float32:
        master = MasterWeights(model, dtype)
    model.train()
    return model, tokenizer, master


def load_reference(path: str, device: str, dtype: torch.dtype, world: int = 1, trust_remote_code: bool = False,
                   mesh=None):
    """The frozen KL reference (train.loss.beta > 0), in evaluation mode without gradients: on
    one rank held in the compute dtype (no update, no master); with several, sharded and cast
    as the policy is."""
    ref = _from_pretrained(path, torch.float32 if world > 1 else dtype, trust_remote_code).to(device).eval()
    for p in ref.parameters():
        p.requires_grad_(False)
    if world > 1:
        shard(ref, dtype, mesh=mesh)
    return ref
