"""Distillation from a teacher without Ray: the loss (rlvr.losses.distill_loss) against hand
computation, the trainer's forward at the teacher's top-k ids, the teacher's prompts
(templates, the verifier's feedback) and the config checks (rlvr.train.distill). The runs on
the tiny model are in test_train_distill.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from rlvr.config_loader import load_config
from rlvr.errors import ConfigError
from rlvr.losses import EXTRA_LOSSES, distill_loss
from rlvr.train.config import TrainConfig, TrainerConfig
from rlvr.train.modes import check_config as check   # the whole config: its sections and every mode's
from rlvr.train.distill import feedback, render, template_fields
from rlvr.train.extras import ExtraBatch
from rlvr.train.trainer import Batch, PolicyTrainer

LN = math.log


def payload(teacher, student, tokens=None):
    t = torch.tensor(teacher, dtype=torch.float32)
    return {"teacher_logprobs": t, "target_logprobs": torch.tensor(student, dtype=torch.float32),
            "teacher_token_logprobs": torch.tensor(tokens) if tokens is not None else t[..., 0]}


# one sequence, two positions, the teacher's top 2: q = (0.75, 0.25) renormalised, then (1,)
# (its second entry -inf: a teacher that had no more, left out), the student's p at the same ids
TEACHER = [[[LN(0.6), LN(0.2)], [LN(0.5), -math.inf]]]
STUDENT = [[[LN(0.3), LN(0.1)], [LN(0.25), LN(0.5)]]]


def kl_by_hand():
    return [0.75 * LN(0.75 / 0.3) + 0.25 * LN(0.25 / 0.1), LN(1 / 0.25)]


def jsd_by_hand(beta):
    out = []
    for q, p in (((0.75, 0.25), (0.3, 0.1)), ((1.0,), (0.25,))):
        v = 0.0
        for qk, pk in zip(q, p):
            m = beta * qk + (1 - beta) * pk
            v += beta * qk * LN(qk / m) + (1 - beta) * pk * LN(pk / m)
        out.append(v)
    return out


def test_distill_loss_is_the_top_k_kl_or_jsd_by_hand():
    mask = torch.ones(1, 2)
    logp = torch.tensor([[LN(0.3), LN(0.5)]])
    loss, m = distill_loss(logp, mask, 2, payload(TEACHER, STUDENT), 1, loss="kl")
    kl = kl_by_hand()
    assert loss.item() == pytest.approx(sum(kl) / 2, rel=1e-5) and m["distill/kl"] == pytest.approx(sum(kl) / 2, rel=1e-5)
    assert m["loss/distill"] == pytest.approx(loss.item()) and "distill/jsd" not in m
    assert m["distill/teacher_topk_mass"] == pytest.approx((0.8 + 0.5) / 2, rel=1e-5)
    assert m["distill/student_logprob"] == pytest.approx((LN(0.3) + LN(0.5)) / 2, rel=1e-5)
    for beta in (0.1, 0.5, 0.9):
        loss, m = distill_loss(logp, mask, 2, payload(TEACHER, STUDENT), 1, loss="jsd", beta=beta)
        want = jsd_by_hand(beta)
        assert loss.item() == pytest.approx(sum(want) / 2, rel=1e-5), beta
        assert m["distill/jsd"] == pytest.approx(sum(want) / 2, rel=1e-5) and m["distill/kl"] == pytest.approx(sum(kl) / 2, rel=1e-5)
    # the temperature sharpens the teacher's renormalised top-k: q = softmax(log(0.6, 0.2) / 0.5) = (0.9, 0.1)
    _, m = distill_loss(logp, mask, 2, payload(TEACHER, STUDENT), 1, loss="kl", temperature=0.5)
    assert m["distill/kl"] == pytest.approx((0.9 * LN(0.9 / 0.3) + 0.1 * LN(0.1 / 0.1) + LN(4)) / 2, rel=1e-5)
    assert EXTRA_LOSSES["distill"] is distill_loss
    with pytest.raises(ValueError, match="beta"):
        distill_loss(logp, mask, 2, payload(TEACHER, STUDENT), loss="jsd", beta=1.0)


def test_distill_loss_aggregates_and_its_micro_batches_add_up():
    # two sequences of 2 and 1 tokens: sequence means (theirs) differ from the token mean (TRL's)
    teacher = TEACHER * 2
    student = [STUDENT[0], [[LN(0.05), LN(0.05)], [0.0, 0.0]]]
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    logp = torch.zeros(2, 2)
    kl = kl_by_hand()
    kl_b = 0.75 * LN(0.75 / 0.05) + 0.25 * LN(0.25 / 0.05)
    seq, _ = distill_loss(logp, mask, 3, payload(teacher, student), 2, loss="kl")
    tok, m = distill_loss(logp, mask, 3, payload(teacher, student), 2, loss="kl", aggregate="token")
    assert seq.item() == pytest.approx((sum(kl) / 2 + kl_b) / 2, rel=1e-5)
    assert tok.item() == pytest.approx((sum(kl) + kl_b) / 3, rel=1e-5) and m["distill/kl"] == pytest.approx(tok.item())
    for agg in ("sequence", "token"):
        whole = distill_loss(logp, mask, 3, payload(teacher, student), 2, loss="jsd", aggregate=agg)
        parts = [distill_loss(logp[i:i + 1], mask[i:i + 1], 3, payload(teacher[i:i + 1], student[i:i + 1]), 2,
                              loss="jsd", aggregate=agg) for i in range(2)]
        assert sum(p[0].item() for p in parts) == pytest.approx(whole[0].item(), rel=1e-5)
        for key in whole[1]:
            assert sum(p[1][key] for p in parts) == pytest.approx(whole[1][key], rel=1e-5, abs=1e-7), key


@pytest.mark.parametrize("loss", ["kl", "jsd"])
def test_distill_loss_vanishes_where_the_student_is_the_teacher_and_pulls_it_there(loss):
    # a 3-token vocabulary, the teacher's top 3: the student's log-softmax is the policy's
    q = torch.tensor([[[0.5, 0.3, 0.2]]])
    teacher = torch.log(q * 0.9)                                      # any scale: the top-k is renormalised

    def run(z):
        return distill_loss(torch.zeros(1, 1), torch.ones(1, 1), 1,
                            {"teacher_logprobs": teacher, "target_logprobs": torch.log_softmax(z, -1),
                             "teacher_token_logprobs": torch.zeros(1, 1)}, 1, loss=loss, beta=0.3)[0]

    z = torch.log(q).requires_grad_()
    out = run(z)
    out.backward()
    assert out.item() == pytest.approx(0.0, abs=1e-6) and z.grad.abs().max().item() < 1e-6
    z = torch.tensor([[[0.0, 2.0, -1.0]]], requires_grad=True)
    first = run(z).item()
    opt = torch.optim.SGD([z], lr=1.0)
    for _ in range(200):
        opt.zero_grad()
        run(z).backward()
        opt.step()
    assert first > 0.05 and run(z).item() < 1e-4
    assert torch.allclose(torch.softmax(z, -1), q, atol=1e-2)


# -- the trainer: the policy's log-probs at the teacher's ids ------------------------------

P = [[5, 6, 7], [8, 9], [3]]
C = [[10, 11, 12], [20, 21], [4, 4, 4, 4]]


def trainer(path, **kw):
    cfg = TrainerConfig(device="cpu", **{"lr": 1e-2, "micro_batch_size": 2, "dtype": "float32", "grad_clip": 1e9, **kw})
    return PolicyTrainer(path, cfg, max_tokens=8, total_steps=10)


def teacher_rows(k=4, seed=0):
    """A made-up teacher: k ids per position with log-probs of a peaked distribution."""
    rng = np.random.default_rng(seed)
    ids = [rng.integers(0, 300, size=(len(c), k)).astype(np.int32) for c in C]
    lps = [np.log(np.tile(np.array([0.7, 0.15, 0.1, 0.05][:k], dtype=np.float32), (len(c), 1))) for c in C]
    return ids, lps


def distill_batch(ids, lps, mb=2, **opts):
    return ExtraBatch(P, C, weight=1.0, micro_batch_size=mb,
                      payload={"target_ids": ids, "teacher_logprobs": lps,
                               "teacher_token_logprobs": [np.zeros(len(c), np.float32) for c in C]},
                      temperature=opts.get("temperature", 1.0), options={"loss": "kl", **opts})


def test_the_trainer_takes_the_policys_log_probs_at_the_teachers_ids(tiny_model_dir):
    ids, lps = teacher_rows()
    t = trainer(tiny_model_dir)
    # the hand computation: the full log-softmax at the teacher's ids, by a plain forward pass
    want = []
    for p, c, i, lp in zip(P, C, ids, lps):
        with torch.no_grad():
            logits = t.model(torch.tensor([p + c])).logits[0, len(p) - 1:-1].float()
        s = torch.log_softmax(logits / 0.8, -1).gather(-1, torch.as_tensor(i, dtype=torch.long))
        q = torch.softmax(torch.as_tensor(lp) / 0.8, -1)
        want.append(((q * (q.log() - s)).sum(-1)).tolist())
    kl_tok = sum(sum(w) for w in want) / sum(len(c) for c in C)
    grads = []
    for mb, packing in ((1, False), (3, False), (2, True)):     # packing: the padding-free forward
        t = trainer(tiny_model_dir, packing=packing)
        t.opt.step = lambda: None
        m = t.step(Batch([], [], [], [], [], extras={"distill": distill_batch(ids, lps, mb, temperature=0.8)}))
        assert m["distill/kl"] == pytest.approx(kl_tok, rel=1e-4)
        assert m["loss/distill"] == pytest.approx(np.mean([np.mean(w) for w in want]), rel=1e-4)   # sequence mean
        assert m["distill/sequences"] == 3 and m["distill/tokens"] == 9 and "loss/rl" not in m
        grads.append(torch.cat([q.grad.flatten() for q in t.model.parameters() if q.grad is not None]))
    assert grads[0].abs().max() > 0
    for g in grads[1:]:
        assert torch.allclose(grads[0], g, rtol=1e-4, atol=1e-7)
    # a few updates pull the policy toward the teacher's top-k
    t = trainer(tiny_model_dir, lr=3e-3)
    kls = [t.step(Batch([], [], [], [], [], extras={"distill": distill_batch(ids, lps)}))["distill/kl"]
           for _ in range(4)]
    assert kls[-1] < 0.8 * kls[0], kls


# -- the teacher's prompt ------------------------------------------------------------------

def test_template_placeholders_are_checked():
    assert template_fields("{prompt} The answer is {answer}. {{x}}\n{feedback}") == {"prompt", "answer", "feedback"}
    with pytest.raises(ConfigError, match=r"unknown placeholder \{solution\}"):
        template_fields("{question} {solution}")
    with pytest.raises(ConfigError, match="unknown placeholder"):
        template_fields("{answer:>5}")
    with pytest.raises(ConfigError, match="literal braces are doubled"):
        template_fields("{question")


def test_a_template_is_parsed_once_however_many_completions_it_renders(monkeypatch):
    import string

    from rlvr.train import distill

    calls = []
    parse = string.Formatter.parse
    monkeypatch.setattr(string.Formatter, "parse", lambda self, t: calls.append(t) or parse(self, t))
    template = "Q: {question} {{braces}} {answer}{feedback}!"
    rec = {"id": "r1", "question": "What is {x}?", "answer": "7"}
    got = [render(template, rec, {"status": "wrong", "extracted": str(i)}) for i in range(50)]
    assert got[3] == "Q: What is {x}? {braces} 7The final answer 3 is wrong.!"
    assert got == [template.format(question=rec["question"], answer="7",
                                   feedback=f"The final answer {i} is wrong.") for i in range(50)]
    assert len(calls) <= 1 and distill._parsed.cache_info().hits >= 49
    with pytest.raises(ConfigError, match="has no text for"):
        render(template, {"id": "r2", "question": "q"}, None)


def test_feedback_names_what_the_verifier_found_wrong():
    rec = {"id": "if/1", "verifier": "if_multi", "instruction_id_list": ["punctuation:no_comma", "change_case:english_lowercase"],
           "kwargs": [{}, {}], "question": "Write a poem."}
    v = {"status": "wrong", "instructions": rec["instruction_id_list"], "strict": [True, False], "loose": [True, False],
         "score": 0.5}
    text = feedback(rec, v)
    assert text.startswith("- ") and "lowercase" in text.lower() and "comma" not in text.lower()
    assert feedback(rec, {"status": "correct", "instructions": rec["instruction_id_list"], "strict": [True, True]}) == ""
    assert feedback({}, {"status": "wrong", "extracted": "12"}) == "The final answer 12 is wrong."
    assert feedback({}, {"status": "no_answer", "extracted": None}) == "No final answer was found."
    assert feedback({}, {"status": "wrong", "extracted": "def f(): pass", "tests_passed": 1, "tests_total": 3,
                         "error": "AssertionError"}) == "1 of 3 tests passed. AssertionError"
    out = render("{question}\nAnswer: {answer}\n{feedback}\nAgain: {question}", {**rec, "answer": "x"}, v)
    assert out.startswith("Write a poem.\nAnswer: x\n- ") and out.endswith("Again: Write a poem.")
    with pytest.raises(ConfigError, match=r"uses \{answer\}, which record 'if/1'"):
        render("{answer}", rec, v)


# -- config ----------------------------------------------------------------------------------

def cfg_with(*sets):
    return load_config(TrainConfig, None, list(sets))


@pytest.mark.parametrize("sets, message", [
    (["train.distill.weight=1"], "train.distill needs a teacher"),
    (["train.distill.only=true"], "train.distill.only trains on the distillation loss alone: it needs"),
    (["train.distill.weight=1", "teacher.model=policy"], "teacher.model policy needs teacher.template"),
    (["train.distill.weight=1", "teacher.model=m", "train.distill.jsd_beta=1"], "train.distill.jsd_beta: must be in (0, 1)"),
    (["train.distill.weight=1", "teacher.model=m", "train.distill.loss=reverse"], "train.distill.loss: expected one of jsd, kl"),
    (["train.distill.weight=1", "teacher.model=m", 'teacher.template="{solution}"'], "unknown placeholder {solution}"),
    (["train.distill.weight=1", "teacher.model=m", "teacher.top_k=0"], "teacher.top_k, teacher.num_engines and"),
    (["train.distill.weight=1", "teacher.model=m", "train.distill.only=true", "preset=dapo"],
     "with train.distill.only there is none"),
    (["train.distill.weight=1", "teacher.model=m", "sft.only=true", "sft.data=x"], "sft.only starts no engines"),
    (["train.distill.weight=1", "teacher.model=m", "teacher.template='{prompt}'", "data.chat=true"], "use {question}"),
    (["train.distill.weight=1", "teacher.model=policy", "teacher.template='{prompt}'", "sync.mode=in_flight",
      "train.max_staleness=1"], "use sync.mode between_rounds"),
])
def test_config_errors(sets, message):
    with pytest.raises(ConfigError) as e:
        check(cfg_with(*sets))
    assert message in str(e.value)


def test_config_warnings_and_the_plain_modes():
    assert any("no teacher starts" in w for w in check(cfg_with("teacher.model=m")))
    warns = check(cfg_with("train.distill.weight=1", "train.distill.only=true", "teacher.model=m", "rollout.n=1"))
    assert not any("rollout.n < 2" in w for w in warns)      # GKD samples one completion per prompt
    check(cfg_with("train.distill.weight=0.1", "teacher.model=policy", "teacher.template='{question} ({answer})'"))


def test_teacher_ids_the_policy_has_no_row_for_are_left_out_of_the_loss():
    from rlvr.train.distill import _within

    ids = np.array([[3, 600], [700, 1]], dtype=np.int32)
    lps = np.log(np.array([[0.5, 0.3], [0.6, 0.1]], dtype=np.float32))
    tok = np.zeros(2, np.float32)
    got_ids, got_lps, _ = _within((ids, lps, tok), vocab=512)
    assert got_ids.tolist() == [[3, 0], [0, 1]] and np.isneginf(got_lps[0, 1]) and np.isneginf(got_lps[1, 0])
    assert _within((ids, lps, tok), vocab=1000)[0] is ids
    # in the loss such an entry is no part of the teacher's renormalised top-k (nor of the sums)
    _, m = distill_loss(torch.zeros(1, 1), torch.ones(1, 1), 1,
                        {"teacher_logprobs": torch.tensor([[[LN(0.5), -math.inf]]]),
                         "target_logprobs": torch.tensor([[[LN(0.25), LN(0.5)]]]),
                         "teacher_token_logprobs": torch.zeros(1, 1)}, 1, loss="kl")
    assert m["distill/kl"] == pytest.approx(LN(4), rel=1e-5)
    # a position with no entry left adds 0 (no NaN in the loss or its gradient)
    s_log = torch.tensor([[[LN(0.25), LN(0.5)], [LN(0.1), LN(0.2)]]], requires_grad=True)
    for loss in ("kl", "jsd"):
        out, m = distill_loss(torch.zeros(1, 2), torch.ones(1, 2), 2,
                              {"teacher_logprobs": torch.tensor([[[LN(0.5), -math.inf], [-math.inf, -math.inf]]]),
                               "target_logprobs": s_log, "teacher_token_logprobs": torch.zeros(1, 2)}, 1, loss=loss)
        (grad,) = torch.autograd.grad(out, s_log)
        assert math.isfinite(out.item()) and bool(torch.isfinite(grad).all()) and bool((grad[0, 1] == 0).all())
        assert m["distill/kl"] == pytest.approx(LN(4) / 2, rel=1e-5)


@pytest.mark.parametrize("loss,beta", [("kl", 0.5), ("jsd", 0.1), ("jsd", 0.5), ("jsd", 0.9)])
@pytest.mark.parametrize("aggregate", ["sequence", "token"])
def test_out_of_vocabulary_teacher_entries_weigh_as_if_removed(loss, beta, aggregate):
    """A teacher with a larger (padded) vocabulary: its top-k ids past the policy's rows become
    id 0 with log-prob -inf (_within), and the loss and its gradient are those of the same
    top-k with those entries removed, under every divergence (jsd_beta near 1 is near the
    reverse KL), whether or not the policy's id 0 is also a real entry."""
    from rlvr.train.distill import _within

    vocab, k = 50, 5
    g = torch.Generator().manual_seed(7)
    lengths = (3, 2)
    z = torch.randn(len(lengths), 3, vocab, generator=g, requires_grad=True)    # the policy's logits
    ids = torch.randint(1, vocab, (len(lengths), 3, k), generator=g)
    ids[0, 0, 0] = 0                                   # the policy's id 0 as a real entry beside OOV ones
    oov = torch.zeros_like(ids, dtype=torch.bool)
    oov[0, 0, 1], oov[0, 1, 3:], oov[1, 0, 0], oov[1, 1, 4] = True, True, True, True
    ids = torch.where(oov, vocab + torch.arange(k), ids)          # past the policy's rows
    t_lps = torch.log_softmax(torch.randn(len(lengths), 3, k, generator=g) * 2, -1) - 0.3
    rows = [_within((ids[i].numpy().astype(np.int32), t_lps[i].numpy(), np.zeros(3, np.float32)), vocab)
            for i in range(len(lengths))]
    kept_ids = torch.stack([torch.as_tensor(r[0]).long() for r in rows])
    teacher = torch.stack([torch.as_tensor(r[1]) for r in rows])
    assert bool((kept_ids[oov] == 0).all()) and bool(torch.isneginf(teacher[oov]).all())
    mask = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
    opts = {"loss": loss, "beta": beta, "temperature": 0.7, "aggregate": aggregate}

    def policy_logprobs(i, j, cols):
        return torch.log_softmax(z[i, j] / 0.7, -1)[kept_ids[i, j, cols]]

    whole, m = distill_loss(torch.zeros(2, 3), mask, 5, {
        "teacher_logprobs": teacher,
        "target_logprobs": torch.stack([torch.stack([policy_logprobs(i, j, slice(None)) for j in range(3)])
                                        for i in range(2)]),
        "teacher_token_logprobs": torch.zeros(2, 3)}, 2, **opts)
    (grad,) = torch.autograd.grad(whole, z)
    assert math.isfinite(whole.item()) and all(math.isfinite(v) for v in m.values())

    # the same top-k with the OOV entries removed, one position at a time (K differs per position)
    per = torch.zeros(2, 3)
    for i, n in enumerate(lengths):
        for j in range(n):
            cols = (~oov[i, j]).nonzero().flatten()
            per[i, j] = distill_loss(torch.zeros(1, 1), torch.ones(1, 1), 1, {
                "teacher_logprobs": t_lps[i, j, cols][None, None],
                "target_logprobs": policy_logprobs(i, j, cols)[None, None],
                "teacher_token_logprobs": torch.zeros(1, 1)}, 1, **opts)[0]
    want = (per.sum(1) / mask.sum(1)).mean() if aggregate == "sequence" else per.sum() / 5
    (want_grad,) = torch.autograd.grad(want, z)
    assert whole.item() == pytest.approx(want.item(), rel=1e-5, abs=1e-7)
    assert torch.allclose(grad, want_grad, rtol=1e-4, atol=1e-7)


def test_the_teachers_scores_are_gathered_together_and_kept_in_order(monkeypatch):
    """Every teacher engine's scoring call goes out before any is waited for, the calls are
    waited for together (one limit for all), and each completion's rows come back in the
    items' order; an engine that gives no answer is replaced and its share sent again."""
    from types import SimpleNamespace

    import ray

    from rlvr.engines.base import TopK
    from rlvr.train.teacher import Teacher

    events, restarted = [], []

    class Ref:
        def __init__(self, e, prompts, hung):
            self.e, self.prompts, self.hung = e, prompts, hung

    class Engine:
        def __init__(self, e, hung=False):
            self.e, self.hung = e, hung
            self.score = SimpleNamespace(remote=self.remote)

        def remote(self, prompts, comps, k):
            events.append(("send", self.e))
            return Ref(self.e, prompts, self.hung)

    def wait(refs, num_returns, timeout):
        events.append(("wait", sorted(r.e for r in refs)))
        assert num_returns == len(refs) and timeout == 30.0
        return [r for r in refs if not r.hung], [r for r in refs if r.hung]

    def get(ref, timeout=None):
        assert not isinstance(ref, list) and not ref.hung
        # a row per completion whose ids name the prompt it was given (prompt i is [i])
        return TopK.join([(np.full((2, 1), p[0], np.int32), np.zeros((2, 1), np.float32), np.zeros(2, np.float32))
                          for p in ref.prompts], 1, version=ref.e)

    monkeypatch.setattr(ray, "wait", wait)
    monkeypatch.setattr(ray, "get", get)
    d = Teacher.__new__(Teacher)
    d.self_teacher, d.open = False, {}
    d.cfg = SimpleNamespace(sync=SimpleNamespace(generate_timeout_s=30.0))
    d.te = SimpleNamespace(top_k=1)
    d.actors = [Engine(0), Engine(1, hung=True), Engine(2)]

    def restart(run, e, why):
        restarted.append((e, why))
        d.actors[e] = Engine(e)

    d._restart = restart
    prompts = [[i] for i in range(8)]
    rows, versions = d._score(SimpleNamespace(trainers=SimpleNamespace(version=0)), prompts, [[1, 2]] * 8, 0)
    assert [int(r[0][0, 0]) for r in rows] == list(range(8))        # in the items' order
    assert events[:4] == [("send", 0), ("send", 1), ("send", 2), ("wait", [0, 1, 2])]
    assert restarted == [(1, "gave no scores in 30s")] and events[4:] == [("send", 1), ("wait", [1])]
    assert sorted(versions) == [0, 1, 2]


def test_the_teacher_is_checked_before_anything_starts(tiny_model_dir, tmp_path):
    from types import SimpleNamespace

    from transformers import AutoTokenizer

    from rlvr.tiny import build_tokenizer
    from rlvr.train.distill import Distiller

    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    other = tmp_path / "other"
    build_tokenizer(vocab_size=300).save_pretrained(str(other))          # another vocabulary
    stream = SimpleNamespace(by_name={"toy": [{"id": "toy/0", "dataset": "toy", "prompt": "1 plus 6 make"}]})
    cfg = cfg_with("train.distill.weight=1", f"teacher.model={other}")
    with pytest.raises(ConfigError, match="its tokenizer is not the policy's"):
        Distiller(cfg, tok, stream)
    cfg = cfg_with("train.distill.weight=1", f"teacher.model={tiny_model_dir}", "teacher.template='{question}'")
    with pytest.raises(ConfigError, match=r"uses \{question\}, which record 'toy/0' \(dataset toy\) has no text"):
        Distiller(cfg, tok, stream)
    cfg = cfg_with("train.distill.weight=1", "teacher.model=policy", "teacher.template='{prompt}!'",
                   "teacher.top_k=100000")
    with pytest.raises(ConfigError, match="larger than the vocabulary"):
        Distiller(cfg, tok, stream)
    cfg.teacher.top_k = 20
    assert Distiller(cfg, tok, stream).fields == {"prompt"}


def test_the_plan_counts_the_teacher_engines():
    import os

    from helpers import DATA, REPO
    from rlvr.train.plan import Cluster, ModelShape, Node, make_plan, read_model_config

    shape = ModelShape.from_config(read_model_config(os.path.join(DATA, "models", "qwen3-1.7b"))[0])
    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "qwen3-1.7B-gsm8k-grpo-gkd.yaml"))
    p = make_plan(cfg, Cluster([Node(32, 8, 80.0, "n")], "planned"), shape)
    teachers = [a for a in p["actors"] if a["role"] == "teacher"]
    assert p["fits"] and len(teachers) == 1 and teachers[0]["gpus"] == 1
    assert len({tuple(a["gpu_ids"]) for a in p["actors"]}) == 8            # 3 engines, the teacher, 4 trainer ranks
    p = make_plan(cfg, Cluster([Node(32, 7, 80.0, "n")], "planned"), shape)
    assert not p["fits"] and any("teacher" in x for x in p["problems"])
    cfg.teacher.model = "policy"                                           # scores on the rollout engines
    assert not [a for a in make_plan(cfg, Cluster([Node(32, 7, 80.0, "n")], "planned"), shape)["actors"]
                if a["role"] == "teacher"]
