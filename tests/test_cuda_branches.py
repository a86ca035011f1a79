"""Every place where rlvr's behaviour depends on the device, and a CPU test that runs each.

BRANCHES lists them: (file, function, what the branch does, the test that executes its code).
`test_every_device_dependent_function_is_listed` scans rlvr/ for the constructs that make code
device-dependent (see `constructs`) and fails when one appears in a function the table does
not list, or when a listed function no longer has one, so a new CUDA-only branch is noticed in
review and comes with its test. The tests below run the branches on the CPU with stand-ins only
at the hardware boundary (tests/cuda_standins.py): `torch.cuda`'s functions as recorders,
tensors that report CUDA, the move of a model onto a CUDA device, vLLM's platform probe and
its LLM constructor, torch.distributed's group set-up, vLLM's NCCL trainer engine. What only a
GPU can settle is listed in docs/gpu.md ("What only a GPU can settle").

GPU selection (CUDA_VISIBLE_DEVICES, Ray's GPU ids, nvidia-smi readings) is not in the scan: it
is string and id handling that runs the same on a CPU, tested with fakes (tests/fakes).
"""

from __future__ import annotations

import ast
import os
import re
from types import SimpleNamespace

import pytest
import torch

from cuda_standins import CudaRecorder
from helpers import REPO

# (file, function, what the branch does on CUDA, the test that executes it)
BRANCHES = [
    ("rlvr/train/packing.py", "varlen_attention",
     "bf16/fp16 tensors on CUDA: torch's varlen_attn (FlashAttention), causal window (-1, 0), enable_gqa",
     "tests/test_packing.py::test_packed_attention_on_cuda_is_causal_within_each_segment"),
    ("rlvr/train/trainer_model.py", "resolve_device", "device auto: cuda when torch.cuda.is_available()",
     "tests/test_cuda_branches.py::test_trainer_device_and_dtype_follow_cuda"),
    ("rlvr/train/trainer_model.py", "resolve_dtype", "dtype auto: bfloat16 on cuda, float32 elsewhere",
     "tests/test_cuda_branches.py::test_trainer_device_and_dtype_follow_cuda"),
    ("rlvr/train/trainer_model.py", "synchronize", "waits for the device's current CUDA stream (no-op on the CPU)",
     "tests/test_cuda_branches.py::test_trainer_clock_waits_for_the_cuda_stream"),
    ("rlvr/train/trainer.py", "PolicyTrainer.__init__", "an FSDP rank on cuda takes cuda:<current device>",
     "tests/test_cuda_branches.py::test_fsdp_trainer_rank_moves_to_its_current_cuda_device"),
    ("rlvr/train/parallel.py", "build_mesh", "a trainer on cuda builds its (dp, tp) mesh on cuda devices",
     "tests/test_cuda_branches.py::test_trainer_mesh_and_offload_follow_cuda"),
    ("rlvr/train/parallel.py", "shard", "train.offload params_and_optimizer pins the CPU copies when CUDA is there",
     "tests/test_cuda_branches.py::test_trainer_mesh_and_offload_follow_cuda"),
    ("rlvr/train/parallel.py", "CPUAdamW.__init__",
     "train.offload optimizer: host copies and gradient buffers pinned when the parameters are on CUDA",
     "tests/test_cuda_branches.py::test_offloaded_adamw_pins_its_buffers_and_waits_for_the_copies_on_cuda"),
    ("rlvr/train/parallel.py", "CPUAdamW.step",
     "CUDA parameters: asynchronous copies, the stream waited for before the host step reads the gradients",
     "tests/test_cuda_branches.py::test_offloaded_adamw_pins_its_buffers_and_waits_for_the_copies_on_cuda"),
    ("rlvr/train/actors.py", "EngineActor.device", "a vLLM engine on a CUDA build reports cuda",
     "tests/test_cuda_branches.py::test_engine_actor_reports_cuda_for_a_cuda_vllm_build"),
    ("rlvr/train/actors.py", "TrainerActor.setup", "several CUDA ranks: set_device(0), then an NCCL group",
     "tests/test_cuda_branches.py::test_cuda_trainer_ranks_join_an_nccl_group_on_their_own_gpu"),
    ("rlvr/train/config_rollout.py", "<module>", "SYNC_METHODS names nccl",
     "tests/test_train_weight_sync.py::test_auto_picks_nccl_only_for_cuda_vllm_engines_and_a_cuda_trainer"),
    ("rlvr/train/weight_sync.py", "choose", "auto is nccl for vLLM engines and trainer on CUDA, no GPU shared",
     "tests/test_train_weight_sync.py::test_auto_picks_nccl_only_for_cuda_vllm_engines_and_a_cuda_trainer"),
    ("rlvr/train/weight_sync.py", "make", "names the shared GPUs that kept auto off nccl (CUDA engines only)",
     "tests/test_cuda_branches.py::test_sync_says_which_shared_gpus_kept_it_off_nccl"),
    ("rlvr/train/config.py", "check", "sync.method nccl/gloo needs rollout.engine vllm",
     "tests/test_train_weight_sync.py::test_sync_config_is_checked"),
    ("rlvr/train/plan.py", "make_plan", "GPU clusters: bf16 weights, nccl unless a GPU is shared",
     "tests/test_train_plan.py::test_shared_gpu_caps_the_engine_or_refuses_with_the_arithmetic"),
    ("rlvr/engines/base.py", "EngineOptions.__post_init__", "device: auto, cuda or cpu",
     "tests/test_cuda_branches.py::test_engine_options_take_cuda_and_refuse_other_devices"),
    ("rlvr/engines/hf_engine.py", "HFEngine.__init__", "device auto: the model moves to cuda when available",
     "tests/test_cuda_branches.py::test_hf_engine_auto_device_moves_the_model_to_cuda"),
    ("rlvr/engines/hf_engine.py", "rng_devices", "a seeded request forks its CUDA device's generator",
     "tests/test_cuda_branches.py::test_hf_engine_forks_the_generator_of_its_cuda_device"),
    ("rlvr/engines/vllm_engine.py", "VLLMEngine.__init__",
     "a CUDA build: NCCL weight transfer, CUDA graphs, chunked prefill, engine core in its own process",
     "tests/test_cuda_branches.py::test_vllm_engine_on_a_cuda_build_asks_for_nccl_and_its_own_process"),
    ("rlvr/engines/transfer.py", "<module>", "TRANSPORTS names nccl",
     "tests/test_weight_transfer.py::test_nccl_payloads_are_what_vllms_nccl_engines_parse"),
    ("rlvr/engines/transfer.py", "update_info", "the per-sync message is vLLM's NCCL update info",
     "tests/test_weight_transfer.py::test_nccl_payloads_are_what_vllms_nccl_engines_parse"),
    ("rlvr/engines/transfer.py", "Rendezvous.worker_init", "nccl: vLLM's NCCL init payload for the workers",
     "tests/test_weight_transfer.py::test_nccl_payloads_are_what_vllms_nccl_engines_parse"),
    ("rlvr/engines/transfer.py", "Sender.__init__", "nccl: vLLM's NCCL trainer engine on trainer rank 0",
     "tests/test_cuda_branches.py::test_nccl_sender_builds_vllms_nccl_trainer_engine"),
    ("rlvr/runs.py", "_devices", "the run manifest names the CUDA devices",
     "tests/test_cuda_branches.py::test_run_manifest_names_the_cuda_devices"),
    ("rlvr/train/figures.py", "memory", "a CUDA device: torch's peak allocated/reserved, then the peaks reset",
     "tests/test_cuda_branches.py::test_peak_memory_on_cuda_reads_and_resets_torchs_peaks"),
    ("rlvr/train/recorder.py", "Throughput.__init__", "GPU clusters: the peak FLOP/s of the driver's GPU, by name, for MFU",
     "tests/test_cuda_branches.py::test_mfu_takes_the_peak_of_the_gpu_by_name"),
]

_WORD = re.compile(r"\b(cuda|nccl)\b")
_NCCL_CALL = re.compile(r"^NCCL")


def _dotted(node) -> str | None:
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        parts.append(node.id)
        return ".".join(reversed(parts))
    return None


def constructs(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, what) of each device-dependent construct: `.is_cuda`, `torch.cuda.*`,
    `torch.version.cuda`, vLLM's `current_platform` and an engine's `.on_cpu`, a call of an NCCL*
    class, and a string naming cuda or nccl outside documentation (a docstring, or a string
    standing alone as a statement)."""
    docs = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Expr) and isinstance(n.value, ast.Constant)}
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            d = _dotted(node) or ""
            if node.attr in ("is_cuda", "on_cpu"):
                out.append((node.lineno, node.attr))
            elif d.startswith("torch.cuda.") or d == "torch.version.cuda" or d.endswith("current_platform"):
                out.append((node.lineno, d))
        elif isinstance(node, ast.Call):
            name = _dotted(node.func) or ""
            if _NCCL_CALL.match(name.rsplit(".", 1)[-1]):
                out.append((node.lineno, name + "()"))
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs:
            if _WORD.search(node.value):
                out.append((node.lineno, repr(node.value)))
    return out


def _functions(tree: ast.AST) -> list[tuple[int, int, str]]:
    spans = []

    def visit(node, prefix):
        for ch in ast.iter_child_nodes(node):
            if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                spans.append((ch.lineno, ch.end_lineno, prefix + ch.name))
                visit(ch, prefix + ch.name + ".")
            elif isinstance(ch, ast.ClassDef):
                visit(ch, prefix + ch.name + ".")
            else:
                visit(ch, prefix)
    visit(tree, "")
    return spans


def scan(root: str) -> dict[tuple[str, str], list[str]]:
    """{(file, function): constructs} for the Python files under root (function: the innermost
    def holding the construct, "<module>" outside any)."""
    found: dict[tuple[str, str], list[str]] = {}
    for dirpath, _, files in os.walk(os.path.join(REPO, root)):
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            path = os.path.join(dirpath, name)
            tree = ast.parse(open(path).read())
            spans = _functions(tree)
            for line, what in constructs(tree):
                inner = [s for s in spans if s[0] <= line <= s[1]]
                owner = max(inner)[2] if inner else "<module>"
                found.setdefault((os.path.relpath(path, REPO), owner), []).append(f"{line}: {what}")
    return found


def test_every_device_dependent_function_is_listed():
    found = scan("rlvr")
    listed = {(f, fn) for f, fn, _, _ in BRANCHES}
    new = {k: v for k, v in found.items() if k not in listed}
    assert not new, ("device-dependent code not listed in tests/test_cuda_branches.py BRANCHES (add it with a CPU "
                     f"test that runs it): {new}")
    stale = listed - set(found)
    assert not stale, f"listed in BRANCHES but no longer device-dependent: {sorted(stale)}"


def test_the_scan_sees_each_kind_of_construct():
    src = '''
def a(x):
    """cuda in a docstring does not count"""
    return x.is_cuda
def b():
    import torch
    torch.cuda.synchronize()
def c(d):
    return d.startswith("cuda")
def d(info):
    return NCCLTrainerInitInfo(info)
def e(engine):
    "nccl"
    return engine.on_cpu
def f():
    return "a cpu thing"
'''
    got = {fn for fn in ("a", "b", "c", "d", "e", "f")
           if any(lo <= line <= hi for line, _ in constructs(ast.parse(src))
                  for lo, hi, name in _functions(ast.parse(src)) if name == fn)}
    assert got == {"a", "b", "c", "d", "e"}


def test_each_listed_branch_names_a_test_that_exists():
    for _, _, what, test in BRANCHES:
        path, name = test.split("::")
        tree = ast.parse(open(os.path.join(REPO, path)).read())
        assert name in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}, (what, test)


# --- rlvr.train.trainer ------------------------------------------------------------------------

def test_trainer_device_and_dtype_follow_cuda(monkeypatch):
    from rlvr.train.trainer import resolve_device, resolve_dtype

    CudaRecorder().install(monkeypatch, available=True)
    assert resolve_device("auto") == "cuda" and resolve_device("cpu") == "cpu"
    assert resolve_dtype("auto", "cuda") == torch.bfloat16 and resolve_dtype("auto", "cuda:1") == torch.bfloat16
    assert resolve_dtype("auto", "cpu") == torch.float32 and resolve_dtype("fp16", "cuda") == torch.float16
    CudaRecorder().install(monkeypatch, available=False)
    assert resolve_device("auto") == "cpu"


def test_trainer_clock_waits_for_the_cuda_stream(monkeypatch):
    """Timing a phase on a GPU waits for the kernels queued on the device's current stream."""
    from rlvr.train.trainer import synchronize
    from rlvr.train.trainer_step import clock

    rec = CudaRecorder().install(monkeypatch)
    synchronize("cpu")
    assert rec.events == []
    synchronize("cuda:0")
    assert rec.events == ["Stream", "stream.synchronize"]
    before = len(rec.events)
    assert clock("cuda") > 0 and rec.events[before:] == ["Stream", "stream.synchronize"]


class _Moved(Exception):
    pass


def _stop_at_cuda_move(monkeypatch) -> list:
    """torch.nn.Module.to as the hardware boundary: a move to a CUDA device is recorded and stops
    there (this torch has no CUDA); moves of dtype or to the CPU happen."""
    moved = []
    real = torch.nn.Module.to

    def to(self, *args, **kwargs):
        dev = kwargs.get("device", args[0] if args else None)
        if isinstance(dev, (str, torch.device)) and str(dev).startswith("cuda"):
            moved.append(str(dev))
            raise _Moved(str(dev))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(torch.nn.Module, "to", to)
    return moved


def test_fsdp_trainer_rank_moves_to_its_current_cuda_device(monkeypatch, tiny_model_dir):
    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import PolicyTrainer

    rec = CudaRecorder(device_index=3).install(monkeypatch)
    moved = _stop_at_cuda_move(monkeypatch)
    with pytest.raises(_Moved):
        PolicyTrainer(tiny_model_dir, TrainerConfig(device="cuda"), max_tokens=8, total_steps=1, rank=1, world=2)
    assert moved == ["cuda:3"] and "current_device" in rec.events
    moved.clear()
    with pytest.raises(_Moved):
        PolicyTrainer(tiny_model_dir, TrainerConfig(device="auto"), max_tokens=8, total_steps=1)
    assert moved == ["cuda"]


# --- rlvr.train.actors and weight_sync ------------------------------------------------------

def test_engine_actor_reports_cuda_for_a_cuda_vllm_build():
    from rlvr.train.actors import EngineActor

    a = EngineActor.__new__(EngineActor)
    a.engine = SimpleNamespace(on_cpu=False)
    assert a.device() == "cuda"
    a.engine = SimpleNamespace(on_cpu=True)
    assert a.device() == "cpu"
    a.engine = SimpleNamespace(device="cuda:1")        # the transformers engine
    assert a.device() == "cuda"


class _NoGroup(Exception):
    pass


def test_cuda_trainer_ranks_join_an_nccl_group_on_their_own_gpu(monkeypatch):
    """Each rank selects its GPU (Ray shows it as cuda:0) before NCCL's group is made; CPU ranks
    meet over gloo."""
    import torch.distributed as dist

    from rlvr.train.actors import TrainerActor

    rec = CudaRecorder().install(monkeypatch)
    groups = []

    def init_process_group(backend, **kw):
        rec.events.append(f"init_process_group {backend}")
        groups.append((backend, kw["rank"], kw["world_size"], kw["init_method"]))
        raise _NoGroup

    monkeypatch.setattr(dist, "init_process_group", init_process_group)
    actor = TrainerActor.__new__(TrainerActor)
    for device, backend in (("cuda", "nccl"), ("cpu", "gloo")):
        rec.events.clear()
        with pytest.raises(_NoGroup):
            actor.setup("m", SimpleNamespace(device=device), 8, 1, False, None, rank=1, world=2,
                        master=("10.0.0.2", 29500))
        assert groups[-1] == (backend, 1, 2, "tcp://10.0.0.2:29500")
        want = ["set_device", "init_process_group nccl"] if backend == "nccl" else ["init_process_group gloo"]
        assert rec.events == want


def test_sync_says_which_shared_gpus_kept_it_off_nccl(monkeypatch):
    import ray

    from rlvr.train import weight_sync

    monkeypatch.setattr(ray, "get", lambda x, timeout=None: x)   # the actors below answer at once

    def actor(device):
        return SimpleNamespace(device=SimpleNamespace(remote=lambda: device))

    cfg = SimpleNamespace(sync=SimpleNamespace(method="auto", timeout_s=5.0, bucket_mb=None, generate_timeout_s=5.0),
                          rollout=SimpleNamespace(engine="vllm", tensor_parallel_size=1))
    where = {"node_id": "b" * 56, "ray_gpu_ids": ["0"]}
    placement = {"trainer_ranks": [where], "engines": [where]}
    for device, why in (("cuda", True), ("cpu", False)):
        lines = []
        sync = weight_sync.make(cfg, [actor(device)], [actor(device)], log=lines.append, placement=placement)
        assert isinstance(sync, weight_sync.ObjectStoreSync)
        assert lines[0].startswith("weight sync: object_store")
        assert ("shared GPUs: GPU 0 of node bbbbbbbbbbbb: trainer rank 0, engine 0" in lines[0]) is why, lines


# --- rlvr.engines -------------------------------------------------------------------------

def test_engine_options_take_cuda_and_refuse_other_devices():
    from rlvr.engines.base import EngineOptions

    assert EngineOptions(device="cuda").device == "cuda"
    with pytest.raises(ValueError, match="auto, cuda or cpu"):
        EngineOptions(device="cuda:0")


def test_hf_engine_auto_device_moves_the_model_to_cuda(monkeypatch, tiny_model_dir):
    from rlvr.engines.base import EngineError, EngineOptions
    from rlvr.engines.hf_engine import HFEngine

    CudaRecorder().install(monkeypatch, available=True)
    moved = _stop_at_cuda_move(monkeypatch)
    with pytest.raises(EngineError, match="_Moved"):
        HFEngine(tiny_model_dir, EngineOptions(device="auto", dtype="float32"))
    assert moved == ["cuda"]


def test_hf_engine_forks_the_generator_of_its_cuda_device():
    from rlvr.engines.hf_engine import rng_devices

    assert rng_devices("cuda") == [0] and rng_devices("cuda:2") == [2] and rng_devices("cpu") == []


class _Built(Exception):
    pass


def test_vllm_engine_on_a_cuda_build_asks_for_nccl_and_its_own_process(monkeypatch, tiny_model_dir):
    """With vLLM's platform reporting CUDA, the engine asks vLLM's LLM for the NCCL weight
    transfer, CUDA graphs (no enforce_eager), vLLM's own chunked prefill and the engine core in
    a process of its own; a device the build cannot serve is refused."""
    from rlvr.engines import vllm_engine
    from rlvr.engines.base import EngineError, EngineOptions

    built = []

    def build(LLM, kw, in_process, set_env=True):
        built.append((dict(kw), in_process))
        raise _Built

    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING", raising=False)
    monkeypatch.setattr(vllm_engine, "_platform_is_cpu", lambda: False)
    monkeypatch.setattr(vllm_engine, "_build_llm", build)
    with pytest.raises(EngineError, match="_Built"):
        vllm_engine.VLLMEngine(tiny_model_dir, EngineOptions(device="cuda"))
    kw, in_process = built[-1]
    assert in_process is False and "distributed_executor_backend" not in kw
    assert kw["enforce_eager"] is False and "enable_chunked_prefill" not in kw
    assert "kv_cache_memory_bytes" not in kw
    if vllm_engine._has_weight_transfer():
        assert kw["weight_transfer_config"] == {"backend": "nccl"}
    with pytest.raises(EngineError, match="CUDA build"):
        vllm_engine.VLLMEngine(tiny_model_dir, EngineOptions(device="cpu"))
    monkeypatch.setattr(vllm_engine, "_platform_is_cpu", lambda: True)
    with pytest.raises(EngineError, match="_Built"):
        vllm_engine.VLLMEngine(tiny_model_dir, EngineOptions(device="auto"))
    kw, in_process = built[-1]
    assert in_process is True and kw["enforce_eager"] is True
    if vllm_engine._has_weight_transfer():
        assert kw["weight_transfer_config"] == {"backend": "rlvr_gloo"}


def test_nccl_sender_builds_vllms_nccl_trainer_engine(monkeypatch):
    """Trainer rank 0 of an nccl sync hands vLLM's trainer factory an NCCL init info (the
    factory's NCCL engine needs a GPU: it is the stand-in here)."""
    from vllm.distributed.weight_transfer.factory import WeightTransferTrainerFactory
    from vllm.distributed.weight_transfer.nccl_engine import NCCLTrainerInitInfo

    from rlvr.engines.transfer import GlooTrainerInitInfo, Prepared, Rendezvous, Sender

    made = []
    monkeypatch.setattr(WeightTransferTrainerFactory, "trainer_init",
                        classmethod(lambda cls, info, client=None, source=None: made.append(info) or
                                    SimpleNamespace(source=source)))
    src = Prepared([("model.norm.weight", torch.ones(4, dtype=torch.bfloat16))])
    s = Sender(Rendezvous("nccl", "10.0.0.1", 29555, 3, bucket_bytes=2**20), src, rank=0)
    info = made[-1]
    assert type(info) is NCCLTrainerInitInfo
    assert (info.master_address, info.master_port, info.world_size) == ("10.0.0.1", 29555, 3)
    assert info.packed and info.packed_buffer_size_bytes == 2**20
    assert [m.name for m in s.meta] == ["model.norm.weight"]
    Sender(Rendezvous("gloo", "10.0.0.1", 29555, 3), src, rank=0)
    assert type(made[-1]) is GlooTrainerInitInfo


# --- rlvr.runs -----------------------------------------------------------------------------

def test_run_manifest_names_the_cuda_devices(monkeypatch):
    from rlvr import runs

    CudaRecorder(name="Stand-in H200").install(monkeypatch, available=True)
    assert runs._devices()["cuda"] == ["Stand-in H200"]
    CudaRecorder().install(monkeypatch, available=False)
    assert "cuda" not in runs._devices()



# --- rlvr.train.figures --------------------------------------------------------------------

def test_peak_memory_on_cuda_reads_and_resets_torchs_peaks(monkeypatch):
    from rlvr.train.figures import memory

    rec = CudaRecorder(allocated=3 * 2**30, reserved=5 * 2**30).install(monkeypatch)
    assert memory("cuda:0") == {"allocated_gb": 3.0, "reserved_gb": 5.0}
    assert rec.events == ["max_memory_allocated", "max_memory_reserved", "reset_peak_memory_stats"]
    rec.events.clear()
    assert set(memory("cpu")) == {"rss_gb"} and rec.events == []


def test_mfu_takes_the_peak_of_the_gpu_by_name(monkeypatch, tmp_path):
    """On a GPU cluster the step's MFU divides by the named GPU's peak (an H100: 989 TFLOP/s);
    without GPUs (or an unknown one) there is no MFU, tokens/s only."""
    import json

    from rlvr.train.figures import Shape, flops_per_token
    from rlvr.train.recorder import Throughput

    (tmp_path / "config.json").write_text(json.dumps({
        "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2,
        "intermediate_size": 128, "vocab_size": 1000}))
    batch = SimpleNamespace(prompt_ids=[[1] * 6, [1] * 6], completion_ids=[[2] * 10, []], loss_mask=[True, True])
    a, times = SimpleNamespace(batch=batch), SimpleNamespace(train=2.0, engine_busy=0.0)
    CudaRecorder(name="NVIDIA H100 80GB HBM3").install(monkeypatch, available=True)
    m = Throughput(str(tmp_path), 1, 1, gpus=True).metrics(a, [], times)
    f = flops_per_token(Shape.from_model_dir(str(tmp_path)), 16 / 2, True)
    assert m["throughput/trainer_tokens_per_s"] == 8.0                 # 16 tokens (the empty completion: none)
    assert m["mfu/trainer"] == 8.0 * f / 989e12
    assert "mfu/trainer" not in Throughput(str(tmp_path), 1, 1, gpus=False).metrics(a, [], times)


def test_trainer_mesh_and_offload_follow_cuda(monkeypatch):
    """build_mesh on a cuda device asks torch for a cuda mesh of (world / tp, tp) named (dp, tp);
    shard with train.offload params_and_optimizer gives FSDP2 a pinned CPUOffloadPolicy where
    CUDA is available (torch's init_device_mesh and fully_shard recorded, not run)."""
    import torch.distributed.device_mesh as dm
    import torch.distributed.fsdp as fsdp

    from rlvr.train import parallel

    made = []
    monkeypatch.setattr(dm, "init_device_mesh", lambda dev, shape, mesh_dim_names: made.append((dev, shape,
                                                                                               mesh_dim_names)))
    parallel.build_mesh(8, 4, "cuda:3")
    parallel.build_mesh(2, 1, "cpu")
    assert made == [("cuda", (2, 4), ("dp", "tp")), ("cpu", (2, 1), ("dp", "tp"))]
    sharded = []
    monkeypatch.setattr(fsdp, "fully_shard", lambda m, **kw: sharded.append(kw))
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    model = torch.nn.Sequential(torch.nn.Linear(2, 2))
    parallel.shard(model, torch.bfloat16, offload="params_and_optimizer")
    assert sharded and sharded[-1]["offload_policy"].pin_memory is True
    sharded.clear()
    parallel.shard(model, torch.bfloat16)
    assert "offload_policy" not in sharded[-1]


def test_offloaded_adamw_pins_its_buffers_and_waits_for_the_copies_on_cuda(monkeypatch):
    """CPUAdamW over parameters that report CUDA: its host copy and gradient buffer are pinned
    (page-locked, for asynchronous copies), and a step waits for the device's stream before the
    host AdamW reads the copied gradients; the update is torch's AdamW's."""
    from cuda_standins import cuda_reporting

    from rlvr.train.parallel import CPUAdamW

    rec = CudaRecorder().install(monkeypatch)
    pinned = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self: pinned.append(tuple(self.shape)) or self)
    torch.manual_seed(0)
    data = torch.randn(3, 2)
    p = cuda_reporting(data.clone()).requires_grad_()
    ref = data.clone().requires_grad_()
    opt, want = CPUAdamW([p], lr=0.1), torch.optim.AdamW([ref], lr=0.1)
    assert opt.pinned and pinned == [(3, 2)] and rec.events == []
    p.grad, ref.grad = torch.ones(3, 2), torch.ones(3, 2)
    opt.step()
    want.step()
    assert pinned == [(3, 2), (3, 2)]               # the gradient buffer, made at the first step
    assert rec.events == ["Stream", "stream.synchronize"]
    assert torch.allclose(p.detach().as_subclass(torch.Tensor), ref.detach())
    cpu = CPUAdamW([torch.zeros(2, requires_grad=True)], lr=0.1)
    assert not cpu.pinned
