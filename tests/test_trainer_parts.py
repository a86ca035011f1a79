"""The trainer's parts on their own, without a PolicyTrainer: building the policy in mixed
precision (rlvr.train.trainer_model), log-probs of completions (trainer_forward), the step's
micro-batches and schedule (trainer_step), weights out (trainer_weights) and the checkpoint's
config dtype (trainer_checkpoint), on the tiny model on CPU."""

from __future__ import annotations

import json
import math

import pytest
import torch

from rlvr.train import trainer_checkpoint, trainer_forward, trainer_step, trainer_weights
from rlvr.train.config import TrainerConfig
from rlvr.train.trainer_model import load_policy, load_reference


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from rlvr.tiny import build

    return build(str(tmp_path_factory.mktemp("tiny") / "m"))


def test_policy_in_bf16_keeps_fp32_masters_and_the_reference_is_frozen(tiny):
    cfg = TrainerConfig(dtype="bfloat16", device="cpu")
    full, _, none = load_policy(tiny, cfg, "cpu", torch.float32)
    assert none is None and full.training
    model, tok, master = load_policy(tiny, cfg, "cpu", torch.bfloat16)
    assert tok.eos_token_id is not None and master is not None
    names = dict(full.named_parameters())
    for (name, p), m in zip(model.named_parameters(), master.params):
        assert p.dtype == torch.bfloat16 and m.dtype == torch.float32
        assert torch.equal(m, names[name]) and torch.equal(p, names[name].to(torch.bfloat16))
    ref = load_reference(tiny, "cpu", torch.bfloat16)
    assert not ref.training and all(not p.requires_grad and p.dtype == torch.bfloat16 for p in ref.parameters())


@pytest.mark.parametrize("chunk,packing", [(0, False), (2, False), (2, True)])
def test_logprobs_are_the_models_own_at_the_temperature(tiny, chunk, packing):
    model, _, _ = load_policy(tiny, TrainerConfig(device="cpu"), "cpu", torch.float32)
    prompts, comps = [[5, 6, 7], [8]], [[10, 11], [20, 21, 22]]
    with torch.no_grad():
        logp, ent, mask = trainer_forward.logprobs(model, prompts, comps, pad_id=0, device="cpu", temperature=0.7,
                                                   chunk_size=chunk, packing=packing, with_entropy=True)
        assert mask.tolist() == [[1, 1, 0], [1, 1, 1]]
        for i, (p, c) in enumerate(zip(prompts, comps)):     # each sequence alone, unpadded
            logits = model(input_ids=torch.tensor([p + c])).logits[0, len(p) - 1:-1].float() / 0.7
            want = torch.log_softmax(logits, -1)
            assert torch.allclose(logp[i, :len(c)], want[torch.arange(len(c)), torch.tensor(c)], atol=1e-5)
            h = -(want.exp() * want).sum(-1)
            assert torch.allclose(ent[i, :len(c)], h, atol=1e-5)


def test_micro_batches_cover_each_sequence_once_within_the_budget():
    batch = trainer_step.Batch([[1] * n for n in (3, 1, 5, 2, 2)], [[2] * n for n in (4, 6, 1, 1, 3)], [0.0] * 5)
    by_count = trainer_step.micro_batches([0, 1, 2, 3, 4], batch, TrainerConfig(micro_batch_size=2))
    assert by_count == [[0, 1], [2, 3], [4]]
    cfg = TrainerConfig(max_tokens_per_microbatch=12)
    parts = trainer_step.micro_batches([0, 1, 2, 3, 4], batch, cfg)
    assert parts == [[3, 4], [2], [0], [1]]          # sorted by length, packed while within the budget
    assert sorted(i for part in parts for i in part) == [0, 1, 2, 3, 4]
    for part in parts:
        padded = len(part) * (max(len(batch.prompt_ids[i]) for i in part) + max(len(batch.completion_ids[i])
                                                                                for i in part))
        assert padded <= 12 or len(part) == 1
    # every rank runs as many micro-batches as the busiest: the others get empty ones
    plans = [trainer_step.rank_plan([[0, 1, 2, 3], [4]], batch, TrainerConfig(micro_batch_size=1), r) for r in (0, 1)]
    assert plans == [[[0], [1], [2], [3]], [[4], [], [], []]]


def test_stack_pads_and_the_schedule_warms_up_then_decays():
    like = torch.zeros(2, 3)
    assert trainer_step.stack([[1.0, 2.0], None], like).tolist() == [[1.0, 2.0, 0.0], [0.0, 0.0, 0.0]]
    f = trainer_step.lr_lambda("cosine", 2, 10)
    assert [f(0), f(1), f(2)] == [0.5, 1.0, 1.0] and f(6) == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))
    assert trainer_step.lr_lambda("linear", 0, 4)(3) == pytest.approx(0.25)
    assert trainer_step.lr_lambda("constant", 0, 4)(3) == 1.0


def test_weights_out_send_bf16_bits_exactly_and_leave_the_tied_head_out(tiny):
    model, _, master = load_policy(tiny, TrainerConfig(device="cpu"), "cpu", torch.bfloat16)
    assert model.config.tie_word_embeddings
    sd = trainer_weights.full_state_dict(model, 1, master)
    assert all(sd[n].dtype == torch.float32 for n, _ in model.named_parameters())   # the masters, not the copy
    out = trainer_weights.numpy_weights(sd, model, torch.bfloat16)
    names = [n for n, _, _ in out]
    assert "lm_head.weight" not in names and "model.embed_tokens.weight" in names
    for name, arr, dtype in out:
        assert dtype == "bfloat16"
        assert torch.equal(torch.from_numpy(arr).view(torch.bfloat16), sd[name].to(torch.bfloat16))
    wire = trainer_weights.wire_weights(model, torch.bfloat16, "cpu", rank=0)
    assert [n for n, _ in wire] == [n for n, _ in model.named_parameters() if n != "lm_head.weight"]
    assert trainer_weights.wire_weights(model, torch.bfloat16, "cpu", rank=1) is None


def test_checkpoint_config_names_the_dtype_written(tmp_path):
    (tmp_path / "config.json").write_text(json.dumps({"torch_dtype": "float32", "hidden_size": 8}))
    trainer_checkpoint.set_config_dtype(str(tmp_path), "bf16")
    assert json.loads((tmp_path / "config.json").read_text()) == {"dtype": "bfloat16", "hidden_size": 8}


def _head_grad_error(fn, h, weight, targets, g, ref):
    """Relative error (Frobenius) of the output layer's gradient of sum(g * logp) against `ref`."""
    head = torch.nn.Linear(h.shape[1], weight.shape[0], bias=False, dtype=weight.dtype)
    head.weight = torch.nn.Parameter(weight.clone())
    lp, _ = fn(h, head)
    (lp * g).sum().backward()
    return ((head.weight.grad.double() - ref).norm() / ref.norm()).item()


def test_tied_head_gradient_is_summed_over_chunks_in_fp32():
    """bf16, 64 chunks of 8 tokens: summing each chunk's weight gradient in bf16 rounds at every
    addition; head_logprobs sums them in fp32 and casts once. Against an fp64 reference the
    error falls to about one bf16 rounding of the result."""
    torch.manual_seed(0)
    T, H, V, C = 512, 64, 256, 8
    h = torch.randn(T, H).bfloat16()
    weight = (torch.randn(V, H) / 8).bfloat16()
    targets = torch.randint(0, V, (T,))
    g = torch.rand(T)                                     # one sign: the chunks' gradients add up
    w64 = weight.double().requires_grad_(True)
    lp64 = torch.log_softmax(h.double() @ w64.T / 0.7, -1).gather(1, targets[:, None])[:, 0]
    (lp64 * g.double()).sum().backward()
    ref = w64.grad

    from rlvr.grpo import selective_logprobs

    before = _head_grad_error(lambda x, head: selective_logprobs(x, head.weight, targets, 0.7, C), h, weight,
                              targets, g, ref)
    after = _head_grad_error(lambda x, head: trainer_forward.head_logprobs(x, head, targets, 0.7, C), h, weight,
                             targets, g, ref)
    one_chunk = _head_grad_error(lambda x, head: trainer_forward.head_logprobs(x, head, targets, 0.7, T), h,
                                 weight, targets, g, ref)
    print(f"tied head gradient, relative error vs fp64: bf16 sum {before:.2e}, fp32 sum {after:.2e}, "
          f"one chunk {one_chunk:.2e}")
    assert after < before / 2 and after < 2 * one_chunk
    assert after < 2 ** -8                                # about one bf16 rounding
