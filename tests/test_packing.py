"""Padding-free micro-batches (train.packing) on the tiny model, no Ray: log-probs, entropy,
loss and gradients equal the padded computation for every loss type, with truncated
importance sampling and chunked log-probs; packs hold at most the token budget; the model
keeps its own attention setting (checkpoints load anywhere). The CUDA branch (torch's varlen_attn)
runs here too, with only its FlashAttention op stood in (tests/cuda_standins.py): causal within
each packed segment, with grouped-query heads, for one attention call and for a whole bf16 step."""

from __future__ import annotations

import json
import os

import pytest
import torch

from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.packing import pack, plan
from rlvr.train.trainer import Batch, PolicyTrainer

# prompts and completions of different lengths (the padded path left-pads prompts, right-pads completions)
P = [[5, 6, 7], [8, 9], [3], [4, 4, 2, 9, 9], [7], [6, 5], [11, 12, 13, 14, 15, 16], [2]]
C = [[10, 11, 12], [20, 21], [4, 4, 4, 4], [9], [30, 31, 32, 33, 34, 35, 36, 37], [12, 13], [8], [40, 41, 42]]
A = [1.0, -0.5, 0.25, -1.0, 0.8, -0.6, 0.3, -0.2]


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlvr.tiny import build

    torch.set_num_threads(1)
    return build(str(tmp_path_factory.mktemp("tiny") / "m"))


def make(tiny, packing, chunk, loss_type, **kw):
    cfg = TrainerConfig(lr=1e-2, dtype="float32", device="cpu", packing=packing, logprob_chunk_size=chunk,
                        loss=LossConfig(loss_type=loss_type, tis_cap=1.5), **kw)
    return PolicyTrainer(tiny, cfg, max_tokens=8, total_steps=10, temperature=0.7)


def behaviour(t):
    """Engine log-probs a little off the trainer's, so that TIS weights vary and some are capped."""
    with torch.no_grad():
        lp, _, mask = t._logprobs(t.model, P, C)
    g = torch.Generator().manual_seed(0)
    noisy = lp + 0.6 * torch.randn(lp.shape, generator=g)
    return [noisy[i, :len(c)].tolist() for i, c in enumerate(C)]


@pytest.mark.parametrize("loss_type", ["grpo", "dr_grpo", "dapo"])
def test_packed_micro_batches_give_the_padded_loss_and_gradient(tiny, loss_type):
    beh = behaviour(make(tiny, False, 0, loss_type))
    out = []
    # padded (3 sequences per micro-batch) vs packed by a token budget, chunked and unchunked log-probs,
    # two mini-batches so that pi_old is its own forward pass and the ratio leaves 1
    for packing, chunk, kw in ((False, 3, {"micro_batch_size": 3}), (True, 3, {"max_tokens_per_microbatch": 16}),
                               (True, 0, {"max_tokens_per_microbatch": 16}), (True, 5, {"micro_batch_size": 8}),
                               # gradient checkpointing recomputes each layer in backward: packed there too
                               (True, 3, {"max_tokens_per_microbatch": 16, "gradient_checkpointing": True})):
        t = make(tiny, packing, chunk, loss_type, mini_batches=2, **kw)
        lp, ent, mask = t._logprobs(t.model, P, C, with_entropy=True)
        t.opt.step = lambda: None     # keep the accumulated gradients of both updates to compare
        m = t.step(Batch(P, C, A, beh, None))
        g = torch.cat([q.grad.flatten() for q in t.model.parameters() if q.grad is not None])
        out.append((lp * mask, ent * mask, m, g))
    (lp0, e0, m0, g0) = out[0]
    assert g0.abs().max() > 0 and 0 < m0["tis/frac_capped"] < 1
    for lp, e, m, g in out[1:]:
        assert torch.allclose(lp0, lp, rtol=1e-5, atol=1e-6) and torch.allclose(e0, e, rtol=1e-5, atol=1e-6)
        for k in ("loss/policy", "loss/total", "tis/weight_mean", "tis/frac_capped", "ratio/mean", "entropy", "kl"):
            assert m[k] == pytest.approx(m0[k], rel=1e-4, abs=1e-7), k
        assert torch.allclose(g0, g, rtol=1e-4, atol=1e-7)


def test_packs_hold_real_tokens_within_the_budget():
    lengths = {i: len(p) + len(c) for i, (p, c) in enumerate(zip(P, C))}
    for budget in (1, 9, 16, 1000):
        parts = plan(lengths, budget)
        assert sorted(i for part in parts for i in part) == list(range(len(P)))
        assert all(sum(lengths[i] for i in part) <= budget or len(part) == 1 for part in parts)
    assert len(plan(lengths, 1000)) == 1 and len(plan(lengths, 16)) == 3   # first-fit decreasing: 46 tokens
    p = pack(P[:3], C[:3])
    assert p.input_ids.tolist() == [[5, 6, 7, 10, 11, 12, 8, 9, 20, 21, 3, 4, 4, 4, 4]]
    assert p.position_ids.tolist() == [[0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 0, 1, 2, 3, 4]]
    assert p.cu_seqlens.tolist() == [0, 6, 10, 15] and p.max_len == 6
    assert p.keep.tolist() == [2, 3, 4, 7, 8, 10, 11, 12, 13]   # each position predicts the next token
    assert p.targets.tolist() == [10, 11, 12, 20, 21, 4, 4, 4, 4]


def test_a_packed_step_attends_per_sequence_and_leaves_the_models_attention_setting_alone(tiny, tmp_path,
                                                                                          monkeypatch):
    from rlvr.train import packing

    seen = []
    sdpa = torch.nn.functional.scaled_dot_product_attention

    def spy(q, *a, **kw):
        seen.append(q.shape[2])
        return sdpa(q, *a, **kw)

    monkeypatch.setattr(packing.F, "scaled_dot_product_attention", spy)
    t = make(tiny, True, 3, "grpo", max_tokens_per_microbatch=1000)
    before = t.model.config._attn_implementation
    t.step(Batch(P, C, A, None, None))
    # one packed row of all 8 sequences: attention ran on each sequence alone, never on the whole row
    assert sorted(set(seen)) == sorted({len(p) + len(c) for p, c in zip(P, C)})
    assert t.model.config._attn_implementation == before != "rlvr_varlen"
    t.save(str(tmp_path), {})
    assert "rlvr_varlen" not in open(os.path.join(tmp_path, "config.json")).read()
    assert json.load(open(os.path.join(tmp_path, "config.json")))["model_type"] == "qwen3"


# -- the CUDA branch (torch's varlen_attn), run on the CPU with only the kernel op stood in --

def _qkv(heads, kv_heads, cu, dim=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    T = cu[-1]
    return [torch.randn((1, h, T, dim), generator=g, dtype=torch.float64) for h in (heads, kv_heads, kv_heads)]


def _reference(q, k, v, cu, causal, scale):
    """Per-segment attention in float64 with an explicit mask: [1, T, H, D]."""
    groups = q.shape[1] // k.shape[1]
    k, v = k.repeat_interleave(groups, dim=1), v.repeat_interleave(groups, dim=1)
    outs = []
    for a, b in zip(cu, cu[1:]):
        s = q[0, :, a:b] @ k[0, :, a:b].transpose(-1, -2) * scale
        if causal:
            s = s.masked_fill(torch.ones(b - a, b - a, dtype=torch.bool).triu(1), float("-inf"))
        outs.append(s.softmax(-1) @ v[0, :, a:b])
    return torch.cat(outs, dim=1).transpose(0, 1).unsqueeze(0)


def _packed_on_cuda(monkeypatch, q, k, v, cu, scale, grad=False):
    from rlvr.train import packing
    from cuda_standins import cuda_reporting, install_varlen

    calls, op_calls = [], []
    kernel = install_varlen(monkeypatch, calls, op_calls)
    monkeypatch.setattr(packing, "_varlen_kernel", lambda: kernel)
    leaves = [x.to(torch.bfloat16).requires_grad_(grad) for x in (q, k, v)]
    out, _ = packing.varlen_attention(None, *(cuda_reporting(x) for x in leaves), None, scaling=scale,
                                      cu_seq_lens_q=torch.tensor(cu, dtype=torch.int32),
                                      max_length_q=max(b - a for a, b in zip(cu, cu[1:])))
    return out, leaves, calls, op_calls


@pytest.mark.parametrize("heads,kv_heads", [(4, 4), (4, 2), (6, 1)])
def test_packed_attention_on_cuda_is_causal_within_each_segment(monkeypatch, heads, kv_heads):
    """The kernel branch (bf16 tensors that report CUDA) calls torch's varlen_attn as its installed
    signature allows (no is_causal; the causal window as a tuple; enable_gqa for grouped heads) and
    equals causal attention inside each packed segment, forward and backward."""
    cu, scale = [0, 3, 8, 9, 15], 0.35
    q, k, v = _qkv(heads, kv_heads, cu)
    out, leaves, calls, op_calls = _packed_on_cuda(monkeypatch, q, k, v, cu, scale, grad=True)
    assert len(calls) == 1 and len(op_calls) == 1, "the kernel branch was not taken"
    assert out.shape == (1, cu[-1], heads, q.shape[-1]) and out.dtype == torch.bfloat16
    want = _reference(q, k, v, cu, causal=True, scale=scale)
    full = _reference(q, k, v, cu, causal=False, scale=scale)
    err = (out.double() - want).abs().max().item()
    assert err < 0.03 < (full - want).abs().max().item(), err   # bf16 rounding, far below the non-causal gap
    assert calls[0]["window_size"] == (-1, 0) and op_calls[0]["is_causal"] is True
    assert calls[0].get("enable_gqa", False) == (heads != kv_heads)
    # backward: the gradient of the packed branch is the causal per-segment one
    w = torch.randn(out.shape, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    (out.double() * w).sum().backward()
    ref = [x.detach().clone().requires_grad_(True) for x in (q, k, v)]
    (_reference(*ref, cu, causal=True, scale=scale) * w).sum().backward()
    for got, exp in zip(leaves, ref):
        assert (got.grad.double() - exp.grad).abs().max().item() < 0.05 * exp.grad.abs().max().item()


def test_the_varlen_stand_in_refuses_is_causal_and_a_window_list(monkeypatch):
    """What makes the test above fail on a wrong call: torch 2.13's varlen_attn has no is_causal
    (TypeError, as the first packed step on a GPU raised), and a window list is not (-1, 0) to
    torch's wrapper, which then tells the kernel is_causal False (the stand-in attends across
    each whole segment; what FlashAttention itself does then, make gpu-check reports)."""
    from cuda_standins import install_varlen

    cu, scale = [0, 4, 9], 0.5
    q, k, v = (x[0].transpose(0, 1).to(torch.bfloat16) for x in _qkv(2, 2, cu))
    cu_t = torch.tensor(cu, dtype=torch.int32)
    kernel = install_varlen(monkeypatch)
    with pytest.raises(TypeError):
        kernel(q, k, v, cu_t, cu_t, 5, 5, is_causal=True, scale=scale)
    causal = kernel(q, k, v, cu_t, cu_t, 5, 5, scale=scale, window_size=(-1, 0))
    listed = kernel(q, k, v, cu_t, cu_t, 5, 5, scale=scale, window_size=[-1, 0])
    assert (causal.float() - listed.float()).abs().max() > 0.1
    with pytest.raises(ValueError, match="enable_gqa"):
        kernel(q, k[:, :1], v[:, :1], cu_t, cu_t, 5, 5, scale=scale, window_size=(-1, 0))


def test_packed_attention_takes_the_kernel_only_for_cuda_half_precision(monkeypatch):
    """fp32 on CUDA and bf16 on the CPU go the per-sequence SDPA way (the kernel is FlashAttention:
    fp16/bf16 on CUDA only); the installed torch's varlen_attn is the kernel the branch uses."""
    from rlvr.train import packing
    from cuda_standins import cuda_reporting, real_varlen

    assert packing._varlen_kernel() is real_varlen()
    cu = [0, 3, 7]
    q, k, v = _qkv(2, 1, cu)
    used = []
    monkeypatch.setattr(packing, "_varlen_kernel", lambda: (lambda *a, **kw: used.append(1)))
    for cast in (lambda x: cuda_reporting(x.float()), lambda x: x.to(torch.bfloat16)):
        out, _ = packing.varlen_attention(None, *(cast(x) for x in (q, k, v)), None, scaling=0.3,
                                          cu_seq_lens_q=torch.tensor(cu, dtype=torch.int32))
        assert (out.double() - _reference(q, k, v, cu, True, 0.3)).abs().max() < 0.03
    assert not used


def test_a_packed_trainer_step_through_the_cuda_kernel_equals_the_padded_step(tiny, monkeypatch):
    """The whole packed path as a GPU runs it, on the CPU: a bf16 trainer (fp32 masters) whose
    packed attention reports CUDA tensors to rlvr's attention function, so transformers' kwargs
    (scaling, cu_seq_lens_q, max_length_q) go through the kernel branch into torch's varlen_attn
    (its FlashAttention op stood in): log-probs, loss, gradient norm and gradient equal the padded
    step's within bf16 rounding (a non-causal window moves the gradient by ~85%)."""
    from transformers import AttentionInterface

    from cuda_standins import cuda_reporting, install_varlen
    from rlvr.train import packing

    calls = []
    kernel = install_varlen(monkeypatch, calls)
    monkeypatch.setattr(packing, "_varlen_kernel", lambda: kernel)
    packing.register()

    def on_cuda(module, query, key, value, mask, **kw):
        out, w = packing.varlen_attention(module, *(cuda_reporting(x) for x in (query, key, value)), mask, **kw)
        return out.as_subclass(torch.Tensor), w

    monkeypatch.setitem(AttentionInterface._global_mapping, packing.NAME, on_cuda)
    out = []
    for packed, kw in ((False, {"micro_batch_size": 3}), (True, {"max_tokens_per_microbatch": 16})):
        cfg = TrainerConfig(lr=1e-2, dtype="bfloat16", device="cpu", packing=packed,
                            loss=LossConfig(loss_type="grpo"), **kw)
        t = PolicyTrainer(tiny, cfg, max_tokens=8, total_steps=10, temperature=0.7)
        with torch.no_grad():
            lp, _, mask = t._logprobs(t.model, P, C)
        t.opt.step = lambda: None
        m = t.step(Batch(P, C, A, None, None))
        g = torch.cat([q.grad.flatten() for q in t.master.params if q.grad is not None])
        out.append((lp.float() * mask, m, g))
    assert len(calls) >= 2 * 4 and all(c["scale"] == pytest.approx(64 ** -0.5) for c in calls)
    (lp0, m0, g0), (lp1, m1, g1) = out
    assert (lp0 - lp1).abs().max() < 0.05 and lp0.abs().max() > 1
    assert m1["loss/policy"] == pytest.approx(m0["loss/policy"], rel=1e-3, abs=1e-6)
    assert m1["grad/norm"] == pytest.approx(m0["grad/norm"], rel=0.02)
    assert (g1 - g0).norm() < 0.05 * g0.norm()
