"""Edges of the pipeline contract: per-record stop strings, prompts that cannot be generated
for, upstream error records, unreadable inputs, per-prompt pass@k N in -> N out."""

from __future__ import annotations

import gzip

import orjson

from helpers import invoke, jsonl


def rollout(model, stdin, *extra):
    return invoke("rlvr-rollout", ["--engine", "hf", "--model", model, "--max-tokens", "12", "--temperature", "1.0",
                                   "--dtype", "float32", *extra], stdin)


def test_record_stop_strings_apply(tiny_model_dir):
    free = rollout(tiny_model_dir, jsonl({"id": "a", "prompt": "the answer is"}), "-n", "4")
    texts = free.records()[0]["completions"]
    # pick a character the unconstrained samples produce, then make it a record's stop string
    ch = next(c for t in texts for c in t if c.strip())
    out = rollout(tiny_model_dir, jsonl({"id": "a", "prompt": "the answer is", "stop": [ch]}), "-n", "4")
    assert out.code == 0, out.stderr
    rec = out.records()[0]
    assert all(ch not in t for t in rec["completions"])
    assert "stop" in rec["finish_reasons"]


def test_unusable_prompts_keep_their_place(tiny_model_dir):
    recs = [{"id": "a", "prompt": "hi"}, {"id": "b", "prompt": ""}, {"id": "c", "prompt": []}, {"id": "d", "prompt": "yo"}]
    out = rollout(tiny_model_dir, jsonl(*recs), "--chat-template", "auto")
    assert out.code == 0, out.stderr
    got = out.records()
    assert [r["id"] for r in got] == ["a", "b", "c", "d"]
    assert got[1]["generation"]["status"] == "empty_prompt" and got[1]["completions"] == []
    assert got[2]["generation"]["status"] in ("empty_prompt", "bad_prompt")
    assert got[0]["generation"]["status"] == "ok" and len(got[3]["completions"]) == 1
    assert "prompt(s) empty came out without completions (generation.status empty_prompt)" in out.stderr
    assert "prompt_too_long" not in out.stderr


def test_upstream_error_records_pass_through_rollout(tiny_model_dir):
    err = {"error": {"file": "x.jsonl", "line": 7, "message": "m", "field": "prompt"}}
    out = rollout(tiny_model_dir, jsonl({"id": "1", "prompt": "a"}, err))
    assert out.code == 0, out.stderr
    assert out.records()[1] == err


def test_bad_stop_field_is_bad_input():
    r = invoke("rlvr-passk", [], jsonl({"id": "a", "stop": 5, "rewards": []}))
    assert r.code == 3 and "(field stop)" in r.stderr


def test_broken_gzip_names_the_file(tmp_path):
    f = tmp_path / "in.jsonl.gz"
    f.write_bytes(gzip.compress(b'{"id": "a", "rewards": [1]}\n' * 100)[:40])
    r = invoke("rlvr-passk", [str(f)])
    assert r.code == 1 and str(f) in r.stderr and "Traceback" not in r.stderr


def test_per_prompt_keeps_error_records():
    r = invoke("rlvr-passk", ["--per-prompt", "--keep-going"], jsonl({"id": "a", "rewards": [1, 0]}) + "oops\n")
    rows = r.records()
    assert r.code == 0 and len(rows) == 2 and "error" in rows[1]
    r = invoke("rlvr-passk", ["--per-prompt"], jsonl({"id": "a", "rewards": []}))   # a row: not "no records"
    assert r.code == 0 and r.records()[0]["n"] == 0 and "no records" not in r.stderr
    r = invoke("rlvr-passk", ["--per-prompt"], "")
    assert r.code == 0 and r.stdout == "" and "no records" in r.stderr


def test_prompts_without_samples_keep_their_row_and_their_dataset():
    recs = [{"id": "a", "dataset": "d1", "rewards": []}, {"id": "b", "dataset": "d2", "rewards": [1, 0]}]
    r = invoke("rlvr-passk", ["--per-prompt", "--k", "1"], jsonl(*recs))
    assert r.code == 0 and r.records() == [{"id": "a", "dataset": "d1", "n": 0, "c": 0, "pass@1": None},
                                           {"id": "b", "dataset": "d2", "n": 2, "c": 1, "pass@1": 0.5}]
    s = orjson.loads(invoke("rlvr-passk", [], jsonl(*recs)).stdout)
    assert s["prompts_with_no_samples"] == 1 and list(s["per_dataset"]) == ["d1", "d2"]
    assert s["per_dataset"]["d1"] == {"n_prompts": 0, "n_samples": 0, "prompts_with_no_samples": 1}


def test_passk_rejects_non_finite_threshold_and_huge_k():
    assert invoke("rlvr-passk", ["--threshold", "nan"], jsonl({"id": "a", "rewards": [1]})).code == 2
    assert invoke("rlvr-passk", ["--k", "99999999999999999999"], jsonl({"id": "a", "rewards": [1]})).code == 2


def test_data_bad_json_source_and_gsm8k_without_final_answer(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("[1,2")
    r = invoke("rlvr-data", ["gsm8k", "--source", str(bad)])
    assert r.code == 3 and f"{bad}:1:" in r.stderr
    g = tmp_path / "g.jsonl"
    g.write_text(orjson.dumps({"question": "q", "answer": "no final"}).decode() + "\n")
    r = invoke("rlvr-data", ["gsm8k", "--source", str(g)])
    assert r.code == 3 and "####" in r.stderr
    g.write_text(orjson.dumps({"question": "q", "answer": "work\n#### "}).decode() + "\n")
    r = invoke("rlvr-data", ["gsm8k", "--source", str(g)])
    assert r.code == 3 and "nothing after '####'" in r.stderr and "field answer)" in r.stderr and not r.stdout
    for w in ("inf", "nan", "0", "-1"):
        r = invoke("rlvr-data", ["--mix", f"gsm8k:{w},math500:1"])
        assert r.code == 2 and "positive finite" in r.stderr, (w, r.stderr)


def test_output_paths_that_cannot_be_written_fail_before_any_work(tmp_path):
    rec = jsonl({"id": "a", "completions": ["#### 7"], "answer": "7", "verifier": "math"})
    f = tmp_path / "file"
    f.write_text("x")
    for path, words in ((tmp_path, "is a folder"), (f / "s.json", "is a file, not a folder")):
        r = invoke("rlvr-verify", [f"--summary={path}"], rec)
        assert r.code == 2 and words in r.stderr and not r.stdout, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["file"]   # nothing created, no temp file left
    r = invoke("rlvr-plot", [str(tmp_path), "-o", str(f / "x.png")])
    assert r.code == 2 and "is a file, not a folder" in r.stderr
    r = invoke("rlvr-rollout", ["--model", "m", "--output", str(f / "sub" / "o.jsonl")], jsonl({"id": "a", "prompt": "x"}))
    assert r.code == 2 and "is a file, not a folder" in r.stderr
    r = invoke("rlvr-eval", ["ckpt", str(f), "--benchmark", "toy"])
    assert r.code == 2 and "is a file, not a folder" in r.stderr
    # a missing folder is made, as before
    r = invoke("rlvr-verify", [f"--summary={tmp_path / 'new' / 'deeper' / 's.json'}"], rec)
    assert r.code == 0 and orjson.loads((tmp_path / "new" / "deeper" / "s.json").read_bytes())["all"]["records"] == 1


def test_eval_table_of_a_missing_folder_fails_and_names_with_pipes_stay_cells(tmp_path):
    r = invoke("rlvr-eval", ["--table", str(tmp_path / "nope")])
    assert r.code == 2 and "is not a folder" in r.stderr
    r = invoke("rlvr-eval", ["--table", str(tmp_path)])
    assert r.code == 0 and "no rlvr summaries or lm-eval results" in r.stderr
    recs = [{"id": "a", "dataset": "x|y", "rewards": [1, 0]}, {"id": "b", "dataset": "z", "rewards": [0, 0]}]
    r = invoke("rlvr-passk", ["--format", "markdown"], jsonl(*recs))
    assert r.code == 0, r.stderr
    rows = [ln for ln in r.stdout.splitlines() if ln.startswith("| x")]
    assert rows == [rows[0]] and "x\\|y" in rows[0]
    # every row has as many unescaped cell separators as the header
    seps = [len(ln.replace("\\|", "")) - len(ln.replace("\\|", "").replace("|", "")) for ln in r.stdout.splitlines()]
    assert len(set(seps)) == 1


def test_rollout_output_that_holds_the_prompts_themselves_is_refused_untouched(tmp_path):
    # `rlvr-rollout --output prompts.jsonl prompts.jsonl`: records without `generation` are not done work
    import pytest

    from rlvr.rollout import PromptError, RolloutSettings, run_to_file

    recs = [{"id": f"p{i}", "prompt": f"q{i}"} for i in range(3)]
    path = tmp_path / "prompts.jsonl"
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs) + b'{"id": "p3", "pro')
    before = path.read_bytes()
    with pytest.raises(PromptError, match=r"prompts\.jsonl:1: a record without `generation`"):
        run_to_file(recs, RolloutSettings(model="unused"), str(path))   # fails before any engine is built
    assert path.read_bytes() == before
    path.write_bytes(before[:before.rindex(b"\n") + 1])
    before = path.read_bytes()
    out = invoke("rlvr-rollout", ["-m", "unused", "--max-model-len", "64", "--output", str(path), str(path)])
    assert out.code == 2 and "without `generation`" in out.stderr and path.read_bytes() == before


def test_rollout_resume_refuses_another_models_records(tmp_path):
    import pytest

    from rlvr.rollout import PromptError, resume_point

    (tmp_path / "m1").mkdir()
    (tmp_path / "m2").mkdir()
    done = [{"id": "a", "generation": {"model": str(tmp_path / "m1"), "sampling": {"n": 2}}}]
    todo = [{"id": "a"}, {"id": "b"}]
    with pytest.raises(PromptError, match=r"out\.jsonl:1: generated by another model"):
        resume_point(done, todo, "out.jsonl", {"n": 2}, str(tmp_path / "m2"))
    assert resume_point(done, todo, "out.jsonl", {"n": 2}, str(tmp_path / "m1") + "/") == 1   # the same folder
    assert resume_point(done, todo, "out.jsonl", {"n": 2}) == 1
    odd = [{"id": "a", "generation": {"sampling": "n=2"}}]   # a hand-edited file: refused, never a crash
    with pytest.raises(PromptError, match="other generation settings"):
        resume_point(odd, todo, "out.jsonl", {"n": 2})


def test_a_records_own_max_tokens_over_the_context_names_itself(tiny_model_dir):
    out = rollout(tiny_model_dir, jsonl({"id": "a", "prompt": "hello", "max_tokens": 100000}), "--max-model-len", "64")
    # rollout() gives --max-tokens 12: a record's own max_tokens counts only without it
    assert out.code == 0 and out.records()[0]["generation"]["status"] == "ok", out.stderr
    out = invoke("rlvr-rollout", ["--engine", "hf", "--model", tiny_model_dir, "--dtype", "float32", "--max-model-len",
                                  "64"], jsonl({"id": "a", "prompt": "hello", "max_tokens": 100000}))
    gen = out.records()[0]["generation"]
    assert out.code == 0 and gen["status"] == "prompt_too_long", out.stderr
    assert "over the limit of 0 (max_model_len 64 - the record's max_tokens 100000;" in gen["error"]
    # records that all carry their own max_tokens never use the default 1024: a short context is fine
    out = invoke("rlvr-rollout", ["--engine", "hf", "--model", tiny_model_dir, "--dtype", "float32", "--max-model-len",
                                  "64"], jsonl({"id": "a", "prompt": "hello", "max_tokens": 8}))
    assert out.code == 0, out.stderr
    assert out.records()[0]["generation"]["status"] == "ok" and out.records()[0]["completion_tokens"][0] <= 8


def test_a_dataset_named_twice_in_a_mixture_is_refused():
    out = invoke("rlvr-data", ["--mix", "toy:1,toy:3", "--limit", "2"])
    assert out.code == 2 and "toy is named twice" in out.stderr and out.stdout == ""


def test_a_prompt_over_the_context_under_a_larger_max_prompt_len_keeps_its_place(tiny_model_dir):
    long = {"id": "long", "prompt": " ".join(["word"] * 80)}
    out = invoke("rlvr-rollout", ["--engine", "hf", "--model", tiny_model_dir, "--dtype", "float32", "--max-model-len",
                                  "64", "--max-prompt-len", "1000", "--max-tokens", "8"],
                 jsonl({"id": "a", "prompt": "hi"}, long))
    assert out.code == 0, out.stderr
    a, b = out.records()
    assert a["generation"]["status"] == "ok" and b["generation"]["status"] == "prompt_too_long"
    assert "over the limit of 63 (max_model_len 64, less one token to generate)" in b["generation"]["error"]


def test_an_empty_source_is_said_on_stderr(tmp_path):
    empty = tmp_path / "gsm8k.jsonl"
    empty.write_bytes(b"")   # a zero-byte file left by an interrupted copy
    out = invoke("rlvr-data", ["gsm8k", "--source", str(empty)])
    assert out.code == 0 and out.stdout == "" and f"gsm8k: {empty} holds no rows" in out.stderr


def test_per_prompt_rows_of_records_without_dataset_read_back():
    # rlvr-passk --per-prompt writes "dataset": null for them; a null dataset is no dataset, as everywhere
    r = invoke("rlvr-passk", ["--per-prompt"], jsonl({"id": "a", "rewards": [1, 0]}))
    row = r.records()[0]
    assert row["dataset"] is None
    r = invoke("rlvr-passk", [], jsonl({**row, "rewards": [1]}))
    assert r.code == 0 and "unknown" in orjson.loads(r.stdout)["per_dataset"], r.stderr
    r = invoke("rlvr-passk", [], jsonl({"id": "a", "dataset": 3, "rewards": [1]}))
    assert r.code == 3 and "must be a string or null (field dataset)" in r.stderr


def test_rollout_output_another_run_is_writing_is_refused_at_once(tmp_path):
    from rlvr.records import open_resumable

    out_file = tmp_path / "out.jsonl"
    _, held = open_resumable(str(out_file), exclusive=True)   # a run of the same command, still writing
    try:
        out = invoke("rlvr-rollout", ["-m", "unused", "--max-model-len", "64", "--output", str(out_file)],
                     jsonl({"id": "a", "prompt": "hi"}))
    finally:
        held.close()
    assert out.code == 1 and "another process is writing this file" in out.stderr
