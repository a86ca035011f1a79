"""Tensor-parallel trainer ranks (gloo on CPU, 4 processes): a 2 x 2 mesh (FSDP x TP, the
tiny Qwen3's heads, MLP and vocabulary split over 2 ranks, the log-softmax vocabulary-parallel)
computes the same loss, gradients and updated weights as one process on the same batch; the
weights a broadcast sends are the trainer's full tensors; a TP checkpoint is a plain Hugging
Face folder that transformers loads, vLLM loads (the same greedy tokens and log-probs as
transformers on the folder), and a TP trainer resumes from. Per-micro-batch gradient
sync (train.grad_sync) gives the same update as one reduce-scatter per update, and so does
AdamW's state on the CPU (train.offload optimizer), whose optimizer shards save and resume."""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from test_trainer_fsdp import grads_of
from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.trainer import Batch, PolicyTrainer

PROMPTS = [[5, 6, 7], [8, 9], [3], [4, 4, 2], [7], [9, 9]]
COMPS = [[10, 11, 12], [20, 21], [4, 4, 4, 4], [9], [30, 31], [40, 41, 42]]
ADV = [1.0, -0.5, 0.25, 0.7, -1.0, 0.4]


def cfg(**kw):
    # two mini-batches (two updates), two micro-batches a rank in each; beta > 0 loads the
    # reference (sharded alike). AdamW's eps above the gradients keeps its update linear in
    # them: a gradient of ~1e-9 that differs in the last float bits would otherwise flip the
    # sign of an lr-sized update
    return TrainerConfig(lr=1e-2, adam_eps=1e-2, micro_batch_size=1, dtype="float32", device="cpu", mini_batches=2,
                         logprob_chunk_size=3, loss=LossConfig(loss_type="dapo", beta=0.1), **kw)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank, world, port, model, outdir):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    out = {}
    t = PolicyTrainer(model, cfg(tensor_parallel=2), max_tokens=8, total_steps=4, rank=rank, world=world)
    out["coords"] = (t.data_rank, t.data_world, t.reports)
    out["q_local"] = tuple(t.model.model.layers[0].self_attn.q_proj.weight.to_local().shape)
    real_step = t.opt.step
    t.opt.step = lambda: None  # keep the gradient to compare
    out["metrics"] = t.step(Batch(PROMPTS, COMPS, ADV, None, None))
    g = grads_of(t)                # a collective: every rank joins
    if rank == 0:
        out["grads"] = g
    t.opt.step = real_step
    t.step(Batch(PROMPTS, COMPS, ADV, None, None))
    out["weights"] = {k: v.clone() for k, v in t.full_state_dict().items()}
    pairs = t.wire_weights()
    if rank == 0:
        out["wire"] = {n: w.clone() for n, w in pairs}
    else:
        assert pairs is None
    ck = os.path.join(outdir, "ck")
    os.makedirs(ck, exist_ok=True)
    t.save(ck, {"step": 2})
    # resume: a fresh TP trainer on the checkpoint takes its optimizer shards and steps on
    r = PolicyTrainer(ck, cfg(tensor_parallel=2), max_tokens=8, total_steps=4, rank=rank, world=world,
                      ref_path=model)   # the KL reference stays the initial policy
    out["resumed_version"] = r.load_state(ck)["step"], r.version
    r.step(Batch(PROMPTS, COMPS, ADV, None, None))
    t.step(Batch(PROMPTS, COMPS, ADV, None, None))
    a, b = r.full_state_dict(), t.full_state_dict()
    if rank == 0:     # the full state dict is gathered onto rank 0
        out["resume_diff"] = max(float((a[k] - b[k]).abs().max()) for k in a)
    torch.save(out, os.path.join(outdir, f"rank{rank}.pt"))
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def tp_run(tmp_path_factory):
    """The 2 x 2 mesh's run (_rank on 4 gloo processes): (its folder, the base model, each rank's outputs)."""
    from rlvr.tiny import build

    tmp_path = tmp_path_factory.mktemp("tp")
    model = build(str(tmp_path / "m"))
    mp.spawn(_rank, args=(4, free_port(), model, str(tmp_path)), nprocs=4, join=True)
    return tmp_path, model, [torch.load(tmp_path / f"rank{r}.pt") for r in range(4)]


def test_tp_mesh_matches_one_process(tp_run):
    tmp_path, model, outs = tp_run
    # ranks 0,1 and 2,3 are TP groups; data-parallel coordinates 0 and 1; the first of each reports
    assert [o["coords"] for o in outs] == [(0, 2, True), (0, 2, False), (1, 2, True), (1, 2, False)]
    # q_proj: 2 heads x 64 rows, one head per TP rank, its rows sharded again over the 2 FSDP ranks
    assert outs[0]["q_local"] == (32, 128)
    one = PolicyTrainer(model, cfg(), max_tokens=8, total_steps=4)
    real_step = one.opt.step
    one.opt.step = lambda: None
    m1 = one.step(Batch(PROMPTS, COMPS, ADV, None, None))
    g1 = grads_of(one)
    from rlvr.train.trainer_step import merge_metrics

    assert [bool(o["metrics"].get("_tp_copy")) for o in outs] == [False, True, False, True]
    merged = merge_metrics([o["metrics"] for o in outs if not o["metrics"].get("_tp_copy")])
    for k in ("loss/total", "loss/kl"):
        if k in m1:
            assert abs(merged[k] - m1[k]) < 1e-5, (k, merged[k], m1[k])
    # the gradients as rank 0 assembles them (full_tensor of each 2-D sharded gradient)
    assert set(outs[0]["grads"]) == set(g1)
    for name, g in g1.items():
        assert torch.allclose(g, outs[0]["grads"][name], rtol=1e-4, atol=1e-6), name
    one.opt.step = real_step
    one.step(Batch(PROMPTS, COMPS, ADV, None, None))
    w1 = one.full_state_dict()
    assert set(w1) == set(outs[0]["weights"])
    for k, v in w1.items():
        assert torch.allclose(v, outs[0]["weights"][k], rtol=1e-4, atol=1e-6), k
    # the broadcast's weights: full tensors equal to the trainer's, the tied output layer left out
    wire = outs[0]["wire"]
    assert "lm_head.weight" not in wire and len(wire) > 10
    for n, w in wire.items():
        assert torch.equal(w, outs[0]["weights"][n].to(w.dtype)), n
    from transformers import AutoModelForCausalLM

    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ck"), dtype=torch.float32)
    for n, p in hf.state_dict().items():
        if n in outs[0]["weights"]:
            assert p.shape == outs[0]["weights"][n].shape, n
    assert all(o["resumed_version"][0] == 2 for o in outs)
    assert outs[0]["resume_diff"] < 1e-5, outs[0]["resume_diff"]


def _sync_rank(rank, world, port, model, outdir):
    import torch.distributed as dist

    from test_trainer_fsdp import _count_reductions, fsdp_groups

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    reductions = _count_reductions()
    out = {}
    for sync in ("per_update", "per_microbatch"):
        t = PolicyTrainer(model, cfg(grad_sync=sync), max_tokens=8, total_steps=4, rank=rank, world=world)
        reductions.clear()
        t.step(Batch(PROMPTS, COMPS, ADV, None, None))
        out[sync] = {"weights": t.full_state_dict(), "reductions": len(reductions), "groups": fsdp_groups(t)}
    # train.offload optimizer on the FSDP shards: the same update; its optimizer shards save and resume
    t = PolicyTrainer(model, cfg(offload="optimizer"), max_tokens=8, total_steps=4, rank=rank, world=world)
    t.step(Batch(PROMPTS, COMPS, ADV, None, None))
    out["offload"] = {"weights": t.full_state_dict(), "host_state": len(t.opt.host.state),
                      "device_state": len(t.opt.state)}
    ck = os.path.join(outdir, "ck_offload")
    os.makedirs(ck, exist_ok=True)
    t.save(ck, {"step": 1})
    t.step(Batch(PROMPTS, COMPS, ADV, None, None))
    r = PolicyTrainer(ck, cfg(offload="optimizer"), max_tokens=8, total_steps=4, rank=rank, world=world,
                      ref_path=model)
    r.load_state(ck)
    r.step(Batch(PROMPTS, COMPS, ADV, None, None))
    a, b = r.full_state_dict(), t.full_state_dict()
    if rank == 0:
        out["offload"]["resume_diff"] = max(float((a[k] - b[k]).abs().max()) for k in a)
    torch.save(out, os.path.join(outdir, f"sync{rank}.pt"))
    dist.destroy_process_group()


def test_per_microbatch_sync_gives_the_same_update(tmp_path):
    """train.grad_sync per_microbatch reduce-scatters after every micro-batch (2 ranks, 2 updates
    of 2 micro-batches each a rank: 4 x the FSDP groups), per_update once per update (2 x), and
    the updated weights agree; so do those of train.offload optimizer (AdamW's state on the
    CPU, rlvr.train.parallel.CPUAdamW, over the FSDP shards), whose per-rank optimizer shards
    save and resume to the weights of the trainer that went on."""
    from safetensors.torch import load_file

    from rlvr.tiny import build

    model = build(str(tmp_path / "m"))
    mp.spawn(_sync_rank, args=(2, free_port(), model, str(tmp_path)), nprocs=2, join=True)
    for r in range(2):
        o = torch.load(tmp_path / f"sync{r}.pt")
        g = o["per_update"]["groups"]
        assert o["per_update"]["reductions"] == 2 * g and o["per_microbatch"]["reductions"] == 4 * g, o
    o = torch.load(tmp_path / "sync0.pt")            # the full weights are gathered onto rank 0
    a, b = o["per_update"]["weights"], o["per_microbatch"]["weights"]
    assert set(a) == set(b) and len(a) > 10
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-5, atol=1e-6), k
    off = o["offload"]
    assert off["device_state"] == 0 and off["host_state"] > 10      # AdamW's moments on the host only
    for k in a:
        assert torch.allclose(a[k], off["weights"][k], rtol=1e-5, atol=1e-6), k
    assert off["resume_diff"] < 1e-6, off["resume_diff"]
    base = load_file(os.path.join(model, "model.safetensors"))
    assert any(not torch.equal(a[k], v) for k, v in base.items() if k in a)     # an update happened


def test_a_tp_checkpoint_loads_in_vllm_as_in_transformers(tp_run, vllm_engine, tiny_model_dir):
    """The TP trainer's checkpoint folder (weights gathered from 2-D shards, the tied output
    layer left out) loaded by vLLM's workers into the session's engine (the same tiny
    architecture): its greedy tokens are transformers' argmax on the same folder at every
    position, with the same log-probs, and differ in log-probs from the base model's."""
    from transformers import AutoModelForCausalLM

    from rlvr.engines import Sampling

    tmp_path, _, _ = tp_run
    prompt = [5, 6, 7, 8, 9]
    greedy = Sampling(n=1, temperature=0, max_tokens=6, logprobs=True)
    base = vllm_engine.generate([prompt], greedy)[0].samples[0]
    try:
        vllm_engine.update_weights(str(tmp_path / "ck"), version=None)     # a folder: read by vLLM's loader
        got = vllm_engine.generate([prompt], greedy)[0].samples[0]
    finally:
        vllm_engine.update_weights(tiny_model_dir, version=None)
    hf = AutoModelForCausalLM.from_pretrained(str(tmp_path / "ck"), dtype=torch.float32).eval()
    ids = torch.tensor([prompt + list(got.token_ids)])
    with torch.no_grad():
        logp = torch.log_softmax(hf(ids).logits[0, len(prompt) - 1:-1].float(), -1)    # [n, V]
    assert len(got.token_ids) > 0
    assert logp.argmax(-1).tolist() == list(got.token_ids)
    want = [float(logp[i, t]) for i, t in enumerate(got.token_ids)]
    assert max(abs(a - b) for a, b in zip(got.logprobs, want)) < 1e-3, (got.logprobs, want)
    n = min(len(base.logprobs), len(got.logprobs))
    assert list(base.token_ids) != list(got.token_ids) or \
        max(abs(a - b) for a, b in zip(base.logprobs[:n], got.logprobs[:n])) > 1e-3     # the trained weights
