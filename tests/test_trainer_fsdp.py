"""Data-parallel FSDP trainer ranks (gloo on CPU): two ranks compute the same gradient as one
process on the whole batch (an SFT and a distillation loss beside it included; gradients accumulated over
micro-batches without a reduce in between: one reduce-scatter per update, counted), gradients
reduced in bfloat16 (train.grad_reduce_dtype), float16 with a sharded loss scaler, a two-rank checkpoint is a plain Hugging Face folder
(and rank 0's slow checkpoint write does not trip the other rank's collective timeout), and in bf16 one rank computes the same log-probs as two (logprob/engine_vs_trainer_abs_diff is
the same for 1 and 2 ranks)."""

from __future__ import annotations

import dataclasses
import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from rlvr.train.config import LossConfig, TrainerConfig
from rlvr.train.extras import ExtraBatch
from rlvr.train.trainer import Batch, PolicyTrainer

PROMPTS = [[5, 6, 7], [8, 9], [3], [4, 4, 2], [7]]
COMPS = [[10, 11, 12], [20, 21], [4, 4, 4, 4], [9], [30, 31]]
ADV = [1.0, -0.5, 0.25, 0.7, -1.0]


def batch():
    # the SFT sequences split over the same three mini-batches and both ranks
    sft = ExtraBatch(PROMPTS[:0:-1], COMPS[:0:-1], weight=0.5, micro_batch_size=4)   # rank 1 has none in two
    # a teacher's top 3 at each position of four completions (rlvr.losses.distill_loss), split alike
    top = [[[(7 * i + 5 * t + k) % 300 for k in range(3)] for t in range(len(c))] for i, c in enumerate(COMPS[1:])]
    lps = [[[-0.7, -1.2, -1.6]] * len(c) for c in COMPS[1:]]
    distill = ExtraBatch(PROMPTS[1:], COMPS[1:], weight=0.3, micro_batch_size=1, options={"loss": "jsd", "beta": 0.5},
                         payload={"target_ids": top, "teacher_logprobs": lps,
                                  "teacher_token_logprobs": [[-1.0] * len(c) for c in COMPS[1:]]})
    return Batch(PROMPTS, COMPS, ADV, None, None, extras={"sft": sft, "distill": distill})


# a length mix for the bf16 comparison
P16 = [[5, 6, 7, 9, 9, 3], [8, 9], [3, 4, 5, 6], [4, 4, 2], [7, 1, 1, 1, 1]]
C16 = [[10, 11, 12, 13, 14, 15, 16, 17], [20, 21, 22], [4, 4, 4, 4, 5, 6], [9, 8, 7, 6, 5], [30, 31]]


def bf16_cfg():
    return TrainerConfig(lr=1e-3, dtype="bfloat16", device="cpu", micro_batch_size=2, loss=LossConfig(loss_type="dapo"))


def cfg():
    # three mini-batches (one of a single sequence), micro-batches by a token budget: ranks get
    # uneven numbers of them
    return TrainerConfig(lr=1e-3, micro_batch_size=2, dtype="float32", device="cpu", loss=LossConfig(loss_type="dapo"),
                         mini_batches=3, max_tokens_per_microbatch=9)


def grads_of(t: PolicyTrainer) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in t.model.named_parameters():
        g = p.grad
        if g is not None and hasattr(g, "full_tensor"):
            g = g.full_tensor()
        out[name] = g.detach().clone() if g is not None else None
    return out


def _count_reductions() -> list:
    """Record each FSDP reduce-scatter (one per parameter group and synced backward) as the
    dtype it reduces in."""
    import inspect

    import torch.distributed.fsdp._fully_shard._fsdp_param_group as pg

    seen: list = []
    real = pg.foreach_reduce
    sig = inspect.signature(real)

    def counted(*a, **k):
        args = sig.bind(*a, **k).arguments
        seen.append(args["reduce_dtype"] or args["unsharded_grads"][0].dtype)
        return real(*a, **k)

    pg.foreach_reduce = counted
    return seen


def fsdp_groups(t: PolicyTrainer) -> int:
    from torch.distributed.fsdp import FSDPModule

    return sum(isinstance(m, FSDPModule) for m in t.model.modules())


def _rank(rank, world, port, model, outdir, beh):
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    reductions = _count_reductions()
    m = PolicyTrainer(model, bf16_cfg(), max_tokens=8, total_steps=4, rank=rank, world=world).step(
        Batch(P16, C16, ADV, beh))
    torch.save(m, os.path.join(outdir, f"bf16_rank{rank}.pt"))
    t = PolicyTrainer(model, cfg(), max_tokens=8, total_steps=4, rank=rank, world=world)
    t.opt.step = lambda: None  # keep the gradient to compare
    reductions.clear()
    t.step(batch())
    g = grads_of(t)
    # RL, SFT and distillation micro-batches of each of the 3 updates accumulate unsharded
    # gradients; only the last backward of an update reduce-scatters them, once per FSDP group
    counts = {"fp32": len(reductions), "updates": 3 * fsdp_groups(t)}
    # the SFT loss alone (sft.only): its micro-batches likewise reduce once per update
    reductions.clear()
    sft_only = batch()
    sft_only = Batch([], [], [], [], [], extras={"sft": dataclasses.replace(sft_only.extras["sft"], micro_batch_size=1)})
    t.cfg = dataclasses.replace(t.cfg, mini_batches=1)   # one update: 2 micro-batches a rank
    t.step(sft_only)
    counts["sft_only"] = len(reductions)
    t.cfg = cfg()
    # train.grad_reduce_dtype bfloat16: gradients accumulated and reduce-scattered in bf16
    b = PolicyTrainer(model, dataclasses.replace(cfg(), grad_reduce_dtype="bfloat16"), max_tokens=8, total_steps=4,
                      rank=rank, world=world)
    b.opt.step = lambda: None
    reductions.clear()
    b.step(batch())
    counts["bf16_dtypes"] = sorted({str(d) for d in reductions})
    counts["bf16_reductions"] = len(reductions)
    gb = grads_of(b)
    # float16 compute on several ranks: ShardedGradScaler scales the loss; the ranks agree on the update
    h = PolicyTrainer(model, dataclasses.replace(cfg(), dtype="float16"), max_tokens=8, total_steps=4,
                      rank=rank, world=world)
    before = {n: p.detach().to_local().clone() for n, p in h.model.named_parameters()}   # this rank's shards
    hm = h.step(batch())
    after = {n: p.detach().to_local() for n, p in h.model.named_parameters()}
    counts["fp16"] = {"loss_scale": hm["precision/loss_scale"], "skipped": hm["precision/skipped_updates"],
                      "changed": sum(not torch.equal(before[n], after[n]) for n in before),
                      "finite": all(bool(torch.isfinite(v).all()) for v in after.values())}
    if rank == 0:
        torch.save(g, os.path.join(outdir, "grads.pt"))
        torch.save(gb, os.path.join(outdir, "grads_bf16.pt"))
    torch.save(counts, os.path.join(outdir, f"counts_rank{rank}.pt"))
    t.opt.step = type(t.opt).step.__get__(t.opt)
    t.step(batch())
    # the weights a broadcast sends: gathered by every rank first, kept by rank 0 only
    pairs = t.wire_weights()
    full = t.full_state_dict()
    if rank == 0:
        same = [n for n, w in pairs if torch.equal(w, full[n].to(w.dtype))]
        torch.save({"names": [n for n, _ in pairs], "same": same}, os.path.join(outdir, "wire.pt"))
    else:
        assert pairs is None
    os.makedirs(os.path.join(outdir, "ck"), exist_ok=True)
    t.save(os.path.join(outdir, "ck"), {"step": 2})
    dist.destroy_process_group()


def test_two_ranks_match_one_process(tmp_path):
    from rlvr.tiny import build

    model = build(str(tmp_path / "m"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    # behaviour log-probs from an fp32 "engine" (the same weights): the metric measures bf16's error
    f = PolicyTrainer(model, TrainerConfig(dtype="float32", device="cpu"), max_tokens=8, total_steps=4)
    with torch.no_grad():
        lp, _, _ = f._logprobs(f.model, P16, C16)
    beh = [lp[i, :len(c)].tolist() for i, c in enumerate(C16)]
    mp.spawn(_rank, args=(2, port, model, str(tmp_path), beh), nprocs=2, join=True)
    two = torch.load(tmp_path / "grads.pt")
    t = PolicyTrainer(model, cfg(), max_tokens=8, total_steps=4)
    t.opt.step = lambda: None
    t.step(batch())
    one = grads_of(t)
    assert set(one) == set(two)
    for name, g in one.items():
        assert torch.allclose(g, two[name], rtol=1e-4, atol=1e-7), name
    for r in range(2):
        c = torch.load(tmp_path / f"counts_rank{r}.pt")
        assert c["updates"] >= 3 and c["fp32"] == c["updates"], c      # one reduce-scatter per update and group
        assert c["sft_only"] == c["updates"] // 3, c                   # one update of 2 SFT micro-batches a rank
        assert c["bf16_dtypes"] == ["torch.bfloat16"] and c["bf16_reductions"] == c["updates"], c
        f16 = c["fp16"]
        # the scaler starts at 2**16: an overflowing update is skipped on both ranks and the scale halved
        assert f16["skipped"] < 3 and f16["loss_scale"] == 2.0 ** 16 / 2 ** f16["skipped"], f16
        assert f16["changed"] > 10 and f16["finite"], f16
    bf16 = torch.load(tmp_path / "grads_bf16.pt")
    for name, g in one.items():   # the same gradient at bf16's precision
        assert float((bf16[name] - g).norm()) <= 2e-2 * float(g.norm()), name
    assert any(not torch.equal(bf16[n], two[n]) for n in two)         # reduced in bf16, not fp32
    wire = torch.load(tmp_path / "wire.pt")
    assert "lm_head.weight" not in wire["names"] and wire["same"] == wire["names"] and len(wire["names"]) > 10
    # the two-rank checkpoint: an HF folder, optimizer shards, trainer_state.pt last
    ck = tmp_path / "ck"
    for f in ("model.safetensors", "tokenizer.json", "trainer_state.pt", "optimizer_rank000.pt", "optimizer_rank001.pt"):
        assert (ck / f).exists(), f
    from transformers import AutoModelForCausalLM

    m = AutoModelForCausalLM.from_pretrained(str(ck), dtype=torch.float32)
    base = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32)
    diff = sum(float((a - b).abs().sum()) for a, b in zip(m.parameters(), base.parameters()))
    assert diff > 0  # trained weights were gathered and saved
    # one-rank numerics are the FSDP ranks': bf16 parameters for compute, no autocast islands in
    # fp32 (before, the one-rank metric was 15% off the two ranks' on this batch)
    from rlvr.train.trainer import merge_metrics

    key = "logprob/engine_vs_trainer_abs_diff"
    two_ranks = merge_metrics([torch.load(tmp_path / f"bf16_rank{r}.pt") for r in range(2)])[key]
    one_rank = PolicyTrainer(model, bf16_cfg(), max_tokens=8, total_steps=4).step(Batch(P16, C16, ADV, beh))[key]
    assert one_rank > 1e-4                             # bf16 against fp32: a real difference to compare
    assert one_rank == pytest.approx(two_ranks, rel=1e-3)


SHORT_TIMEOUT_S = 2.0


def _slow_save_rank(rank, world, port, model, outdir):
    import datetime
    import time

    import torch.distributed as dist
    from torch.distributed.distributed_c10d import _set_pg_timeout

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    t = PolicyTrainer(model, cfg(), max_tokens=8, total_steps=4, rank=rank, world=world)
    # from here the default group's collectives time out after 2 s (as NCCL's watchdog after 10 minutes)
    _set_pg_timeout(datetime.timedelta(seconds=SHORT_TIMEOUT_S))
    if rank == 0:   # a slow filesystem: rank 0's weights take 3 timeouts to write
        real = t.model.save_pretrained

        def slow(*a, **kw):
            time.sleep(3 * SHORT_TIMEOUT_S)
            return real(*a, **kw)
        t.model.save_pretrained = slow
    out = {}
    for name, group in (("ck", None), ("control", dist.group.WORLD)):
        if group is not None:
            t.checkpoint_group = group   # the control: waiting on the default group, as before
        os.makedirs(os.path.join(outdir, name), exist_ok=True)
        try:
            t.save(os.path.join(outdir, name), {"step": 1})
            out[name] = "saved"
        except Exception as e:   # noqa: BLE001 - the control's timeout is the result
            out[name] = f"{type(e).__name__}: {e}"
    torch.save(out, os.path.join(outdir, f"slow_rank{rank}.pt"))
    os._exit(0)   # the control left the default group broken: no orderly teardown


def test_a_slow_checkpoint_write_does_not_trip_the_other_ranks_collective_timeout(tmp_path):
    """Rank 1 waits for rank 0's writes on the checkpoint's gloo group (its own long timeout),
    not in a collective of the default group: a write slower than the default group's timeout
    saves; the control (the same write, waited for on the default group) times out."""
    from rlvr.tiny import build

    model = build(str(tmp_path / "m"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_slow_save_rank, args=(2, port, model, str(tmp_path)), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / f"slow_rank{r}.pt") for r in range(2)]
    assert [r["ck"] for r in ranks] == ["saved", "saved"], ranks
    for f in ("model.safetensors", "trainer_state.pt", "optimizer_rank000.pt", "optimizer_rank001.pt"):
        assert (tmp_path / "ck" / f).exists(), f
    assert ranks[1]["control"] != "saved" and "timed out" in ranks[1]["control"].lower(), ranks
    assert not (tmp_path / "control" / "trainer_state.pt").exists()
