"""Stand-ins at the hardware boundary, so that rlvr's CUDA-only branches run on a CPU in tests.

- `CudaReporting`: a CPU tensor that answers `is_cuda` True (what every op on it returns is one too);
- `install_varlen()`: torch's `varlen_attn` bound to the installed function's exact signature (a
  wrong keyword raises TypeError as on a GPU), then torch's own wrapper run with only its
  FlashAttention op replaced by a CPU reference (`varlen_op_standin`): the wrapper reads the
  arguments as on a GPU (`window_size == (-1, 0)` is causal, so a list is not; `enable_gqa` is
  required for fewer key/value heads), the reference computes scaled-dot-product attention per
  `cu_seqlens` segment in float32, causal when told `is_causal` (stricter than FlashAttention-2,
  which also reads a window (-1, 0) as causal: a list is refused here whatever the kernel does);
- `CudaRecorder`: `torch.cuda` functions (synchronize, streams, memory statistics) as no-ops that
  record the order they were called in.
"""

from __future__ import annotations

import inspect

import torch
import torch.nn.functional as F


class CudaReporting(torch.Tensor):
    """A CPU tensor that reports CUDA (`is_cuda`) where a branch asks."""

    @property
    def is_cuda(self):  # noqa: D401 - a property mirroring torch.Tensor.is_cuda
        return True


def cuda_reporting(t: torch.Tensor) -> torch.Tensor:
    return t.as_subclass(CudaReporting)


def real_varlen():
    from torch.nn.attention.varlen import varlen_attn

    return varlen_attn


def segment_attention(q, k, v, cu, causal: bool, scale=None):
    """Reference: q [T, H, D], k/v [T, H_kv, D] -> [T, H, D] float32, attention inside each segment."""
    groups = q.shape[1] // k.shape[1]
    outs = []
    bounds = [int(x) for x in cu.tolist()]
    for a, b in zip(bounds, bounds[1:]):
        qs, ks, vs = (x[a:b].transpose(0, 1).float().as_subclass(torch.Tensor) for x in (q, k, v))   # [H, n, D]
        if groups > 1:
            ks, vs = ks.repeat_interleave(groups, dim=0), vs.repeat_interleave(groups, dim=0)
        outs.append(F.scaled_dot_product_attention(qs, ks, vs, is_causal=causal, scale=scale).transpose(0, 1))
    return torch.cat(outs, dim=0)


def varlen_op_standin(calls: list | None = None):
    """torch's FlashAttention op behind varlen_attn (torch.ops.torch_attn._varlen_attn) on the CPU:
    the arguments bound to the op's own schema, attention per segment in float32, causal when the
    op is told so (`is_causal`, which torch's wrapper derives as `window_size == (-1, 0)`)."""
    names = [a.name for a in torch.ops.torch_attn._varlen_attn.default._schema.arguments]

    def op(*args):
        if len(args) != len(names):
            raise TypeError(f"torch_attn::_varlen_attn takes {len(names)} arguments, got {len(args)}")
        a = dict(zip(names, args))
        if calls is not None:
            calls.append(a)
        q, k, v, cu_q, cu_k = a["query"], a["key"], a["value"], a["cu_seq_q"], a["cu_seq_k"]
        if q.dtype not in (torch.bfloat16, torch.float16) or k.dtype != q.dtype or v.dtype != q.dtype:
            raise RuntimeError("FlashAttention only supports fp16 and bf16")
        if cu_q.dtype != torch.int32 or cu_q.device != q.device or not torch.equal(cu_q, cu_k):
            raise RuntimeError("cu_seqlens: int32 on the query's device, the same for queries and keys")
        if q.shape[1] % k.shape[1] or (q.shape[1] != k.shape[1] and not a["enable_gqa"]):
            raise RuntimeError(f"heads: {q.shape[1]} query, {k.shape[1]} key/value, enable_gqa={a['enable_gqa']}")
        longest = int((cu_q[1:] - cu_q[:-1]).max())
        if longest > a["max_q"] or longest > a["max_k"]:
            raise RuntimeError(f"max_q/max_k {a['max_q']}/{a['max_k']} below the longest segment {longest}")
        if list(a["window_size"]) not in ([-1, -1], [-1, 0]):
            raise NotImplementedError(f"stand-in: sliding window {a['window_size']!r}")
        out = segment_attention(q, k, v, cu_q, bool(a["is_causal"]), a["scale"]).to(q.dtype)
        lse = torch.zeros((q.shape[1], q.shape[0]), dtype=torch.float32)
        return out, lse, torch.zeros(2, dtype=torch.int64)

    return op


def install_varlen(monkeypatch, calls: list | None = None, op_calls: list | None = None):
    """A stand-in for torch.nn.attention.varlen.varlen_attn: each call is bound to the installed
    function's exact signature (a keyword it lacks raises TypeError, as on a GPU) and appended to
    `calls`, then torch's own wrapper runs with only its kernel op replaced (varlen_op_standin)."""
    real = real_varlen()
    sig = inspect.signature(real)
    monkeypatch.setattr(torch.ops.torch_attn, "_varlen_attn", varlen_op_standin(op_calls))

    def varlen_attn(*args, **kwargs):
        bound = sig.bind(*args, **kwargs)
        if calls is not None:
            calls.append(dict(bound.arguments))
        return real(*bound.args, **bound.kwargs)

    varlen_attn.__signature__ = sig
    return varlen_attn


class CudaRecorder:
    """torch.cuda's functions as no-ops that record their order (`events`); memory statistics as
    fixed numbers of bytes."""

    def __init__(self, allocated: int = 3 * 2**30, reserved: int = 4 * 2**30, name: str = "Stand-in GPU",
                 device_index: int = 0):
        self.events: list[str] = []
        self.allocated, self.reserved, self.name, self.index = allocated, reserved, name, device_index

    def install(self, monkeypatch, available: bool = True) -> "CudaRecorder":
        rec = self

        class Stream:
            def __init__(self, device=None):
                rec.events.append("Stream")

            def synchronize(self):
                rec.events.append("stream.synchronize")

            def wait_stream(self, other):
                rec.events.append("stream.wait_stream")

        def note(name, value=None):
            def f(*a, **k):
                rec.events.append(name)
                return value
            return f

        class _Ctx:
            def __enter__(self):
                rec.events.append("stream.enter")

            def __exit__(self, *exc):
                rec.events.append("stream.exit")

        c = torch.cuda
        monkeypatch.setattr(c, "is_available", lambda: available)
        monkeypatch.setattr(c, "device_count", lambda: 1 if available else 0)
        monkeypatch.setattr(c, "get_device_name", lambda i=0: self.name)
        monkeypatch.setattr(c, "current_device", note("current_device", self.index))
        monkeypatch.setattr(c, "set_device", note("set_device"))
        monkeypatch.setattr(c, "synchronize", note("synchronize"))
        monkeypatch.setattr(c, "empty_cache", note("empty_cache"))
        monkeypatch.setattr(c, "reset_peak_memory_stats", note("reset_peak_memory_stats"))
        monkeypatch.setattr(c, "max_memory_allocated", note("max_memory_allocated", self.allocated))
        monkeypatch.setattr(c, "max_memory_reserved", note("max_memory_reserved", self.reserved))
        monkeypatch.setattr(c, "Stream", Stream)
        monkeypatch.setattr(c, "stream", lambda s: _Ctx())
        monkeypatch.setattr(c, "current_stream", lambda device=None: Stream(device))
        return self
