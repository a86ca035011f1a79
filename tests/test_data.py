"""rlvr-data: loaders for every format, templates, selection, mixtures, curricula, errors."""

from __future__ import annotations

import os

import orjson
import pytest

from helpers import DATA, invoke
from rlvr.data import load_records, mix, select

D = os.path.join(DATA, "datasets")


def data(*args):
    r = invoke("rlvr-data", list(args))
    assert r.code == 0, r.stderr
    return r.records()


def test_gsm8k_records_carry_gold_and_verifier():
    recs = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl")
    assert len(recs) == 20
    r = recs[0]
    assert r["id"] == "gsm8k/test/0" and r["answer"] == "18" and r["verifier"] == "math"
    assert r["prompt"].startswith("Question: Janet") and r["prompt"].endswith("\nAnswer:")
    assert len({x["id"] for x in recs}) == 20


def test_folder_split_and_parquet_agree():
    a = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--limit", "6")
    b = data("gsm8k", "--source", f"{D}/gsm8k/test-00000-of-00001.parquet")
    assert a == b


def test_save_to_disk_folder(tmp_path):
    import datasets

    rows = [orjson.loads(ln) for ln in open(f"{D}/gsm8k/test.jsonl")][:3]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    recs = data("gsm8k", "--source", str(tmp_path / "ds"), "--split", "test")
    assert [r["answer"] for r in recs] == ["18", "3", "70000"]


def test_fewshot_from_train_split_in_folder():
    recs = data("gsm8k", "--source", f"{D}/gsm8k", "--split", "test", "--shots", "2", "--limit", "1")
    p = recs[0]["prompt"]   # lm-eval's gsm8k: two train solutions ending "#### N", then the question
    assert p.count("Question:") == 3 and p.count("\n#### ") == 2 and p.endswith("Answer:")
    assert recs[0]["stop"] == ["Question:", "</s>", "<|im_end|>"] and recs[0]["max_tokens"] == 256


def test_fewshot_without_source_is_config_error():
    r = invoke("rlvr-data", ["gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--shots", "2"])
    assert r.code == 2 and "few-shot examples come from its 'train' split" in r.stderr


def test_math500_boxed_chat_template():
    recs = data("math500", "--source", f"{D}/math500/test.jsonl", "--chat", "--limit", "1")
    msgs = recs[0]["prompt"]
    assert msgs[0]["role"] == "system" and "\\boxed{}" in msgs[0]["content"]
    assert msgs[-1]["role"] == "user" and recs[0]["answer"] == "\\left( 3, \\frac{\\pi}{2} \\right)"
    assert recs[0]["id"] == "math500/test/precalculus/807.json"


def test_math_answer_from_boxed_solution(tmp_path):
    f = tmp_path / "m.jsonl"
    f.write_text(orjson.dumps({"problem": "1+1?", "solution": "So $\\boxed{\\frac{1}{2}}$.", "level": "Level 1"}).decode() + "\n")
    assert data("math", "--source", str(f))[0]["answer"] == "\\frac{1}{2}"


def test_mbpp_split_by_task_id_and_lm_eval_prompt():
    recs = data("mbpp", "--source", f"{D}/mbpp/mbpp.jsonl")
    assert [r["id"] for r in recs] == [f"mbpp/{i}" for i in range(11, 16)]
    r = recs[0]
    assert r["prompt"].startswith("You are an expert Python programmer, and here is your task: ")
    assert r["prompt"].endswith("[BEGIN]\n") and r["stop"] == ["[DONE]"] and len(r["tests"]) == 3
    shots = data("mbpp", "--source", f"{D}/mbpp/mbpp.jsonl", "--shots", "3", "--limit", "1")[0]["prompt"]
    assert shots.count("[BEGIN]") == 4 and shots.count("[DONE]") == 3


def test_humaneval_prefix_and_check():
    r = data("humaneval", "--source", f"{D}/humaneval/HumanEval.jsonl", "--limit", "1")[0]
    assert r["id"] == "HumanEval/0" and r["prefix"] == r["prompt"] and r["entry_point"] == "has_close_elements"
    assert "def check(candidate)" in r["test"]


def test_if_datasets_keep_ground_truth():
    r = data("ifeval", "--source", f"{D}/ifeval/input_data.jsonl", "--limit", "1")[0]
    assert r["id"] == "ifeval/1000" and r["verifier"] == "ifeval"
    assert r["instruction_id_list"][0] == "punctuation:no_comma" and len(r["kwargs"]) == 3
    b = data("ifbench", "--source", f"{D}/ifbench/IFBench_test.jsonl")
    assert len(b) == 10 and all(x["verifier"] == "ifbench" for x in b)


def test_if_multi_ground_truth_string(tmp_path, monkeypatch):
    f = tmp_path / "ifm.jsonl"
    row = {"key": "k1", "messages": [{"role": "user", "content": "Write X."}],
           "ground_truth": '[{"instruction_id": ["punctuation:no_comma"], "kwargs": [{"x": null}]}]'}
    f.write_text(orjson.dumps(row).decode() + "\n")
    r = data("if_multi", "--source", str(f))[0]
    assert r == {"id": "if_multi/k1", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}],
                 "dataset": "if_multi", "verifier": "if_multi", "prompt": "Write X."}
    # the users' name of it, and their folder layout (<name>_<split>/, any file name) in RLVR_DATA_DIR
    folder = tmp_path / "data" / "if_multi_constraints_train"
    folder.mkdir(parents=True)
    f.rename(folder / "part-0.jsonl")
    assert data("if_multi_constraints", "--source", str(folder / "part-0.jsonl")) == [r]
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("RLVR_S3_DATASETS", raising=False)
    assert data("if_multi_constraints") == data("if_multi") == data("--mix", "if_multi_constraints:1") == [r]
    assert load_records("if_multi_constraints", split="train")[0]["dataset"] == "if_multi"


@pytest.mark.parametrize("alias", ["if_multi", "if_multi_constraints"])
def test_every_name_option_order_file_and_config_take_both_names_of_a_dataset(tmp_path, alias):
    from rlvr.data.configs import data_section
    from rlvr.eval.runner import parse_sources

    f = tmp_path / "ifm.jsonl"
    f.write_text("".join(orjson.dumps({"key": k, "messages": [{"role": "user", "content": f"Write {k}."}],
                                       "ground_truth": '[{"instruction_id": ["punctuation:no_comma"], "kwargs": [{}]}]'}
                                      ).decode() + "\n" for k in ("k1", "k2", "k3")))
    order = tmp_path / "order.txt"
    order.write_text(f"{alias}/k3\n{alias}/k1\n")      # the users' curricula name ids either way
    other = "if_multi_constraints" if alias == "if_multi" else "if_multi"
    gsm = f"{D}/gsm8k/test.jsonl"
    recs = data("--mix", f"{other}:1,gsm8k:1", "--source", f"{alias}={f}", "--source", f"gsm8k={gsm}",
                "--order", f"{alias}={order}", "--max-tokens", f"{alias}=77", "--template", f"{alias}=Q: {{question}}",
                "--filter", f"{alias}.verifier=if_multi", "--stop", f"{alias}=END", "--limit", "30")
    ifm = [r for r in recs if r["dataset"] == "if_multi"]
    assert [r["id"] for r in ifm] == ["if_multi/k3", "if_multi/k1"]
    assert all(r["max_tokens"] == 77 and r["prompt"] == f"Q: Write {r['id'][-2:]}." and r["stop"] == ["END"] for r in ifm)
    assert all("max_tokens" not in r for r in recs if r["dataset"] == "gsm8k")
    # one dataset named one way, its options the other way; a whole-output order file
    one = data(other, "--source", f"{alias}={f}", "--order", str(order))
    assert [r["id"] for r in one] == ["if_multi/k3", "if_multi/k1"]
    # rlvr-eval's --source, and a training config's per-dataset keys
    assert parse_sources([f"{alias}={f}"], ["if_multi"]) == {"if_multi": str(f)}
    section = data_section({"mix": {alias: 1}, "source": {alias: "x"}, "order": {alias: "o"},
                            "template": {alias: "T"}, "filters": {alias: {"f": [1]}}, "assistant_prefix": {alias: "A"}})
    assert all(section[k] == {"if_multi": v} for k, v in
               (("mix", 1), ("source", "x"), ("order", "o"), ("template", "T"), ("filters", {"f": [1]}),
                ("assistant_prefix", "A")))


def test_shuffle_limit_shard_partition():
    full = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--shuffle", "--seed", "3", "--limit", "10")
    again = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--shuffle", "--seed", "3", "--limit", "10")
    assert full == again
    assert [r["id"] for r in full] != [f"gsm8k/test/{i}" for i in range(10)]
    shards = [data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--shuffle", "--seed", "3", "--limit", "10",
                   "--shard", f"{i}/3") for i in range(3)]
    ids = sorted(r["id"] for s in shards for r in s)
    assert ids == sorted(r["id"] for r in full)


def test_mixture_weights_and_determinism():
    a = [{"id": f"a{i}"} for i in range(400)]
    b = [{"id": f"b{i}"} for i in range(400)]
    out = list(mix({"a": a, "b": b}, {"a": 0.25, "b": 0.75}, seed=0))
    assert len(out) == 800
    first = out[:200]
    frac_a = sum(r["id"].startswith("a") for r in first) / 200
    assert 0.15 < frac_a < 0.35
    assert out == list(mix({"a": a, "b": b}, {"a": 0.25, "b": 0.75}, seed=0))
    assert out != list(mix({"a": a, "b": b}, {"a": 0.25, "b": 0.75}, seed=1))


def test_mix_command(tmp_path):
    recs = data("--mix", "gsm8k:1,math500:1", "--source", f"gsm8k={D}/gsm8k/test.jsonl",
                "--source", f"math500={D}/math500/test.jsonl", "--seed", "2")
    assert len(recs) == 40 and {r["dataset"] for r in recs} == {"gsm8k", "math500"}


def test_order_file_curriculum(tmp_path):
    order = tmp_path / "order.txt"
    order.write_text("# hardest last\ngsm8k/test/5\n\ngsm8k/test/2\n{\"id\": \"gsm8k/test/9\"}\n")
    recs = data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--order", str(order))
    assert [r["id"] for r in recs] == ["gsm8k/test/5", "gsm8k/test/2", "gsm8k/test/9"]
    order.write_text("gsm8k/test/5\nnope\n")
    r = invoke("rlvr-data", ["gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--order", str(order)])
    assert r.code == 3 and f"{order}:2:" in r.stderr and "(field id)" in r.stderr
    order.write_text("# nothing yet\n")
    r = invoke("rlvr-data", ["gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--order", str(order)])
    assert r.code == 2 and "lists no prompt ids" in r.stderr
    order.write_bytes(b"\xef\xbb\xbfgsm8k/test/2\r\ngsm8k/test/5\r\n")   # saved by a Windows editor
    assert [r["id"] for r in data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--order", str(order))] == \
        ["gsm8k/test/2", "gsm8k/test/5"]
    order.write_text("gsm8k/test/5\ngsm8k/test/2\ngsm8k/test/5\n")   # one id twice: ids must stay unique
    r = invoke("rlvr-data", ["gsm8k", "--source", f"{D}/gsm8k/test.jsonl", "--order", str(order)])
    assert r.code == 3 and f"{order}:3:" in r.stderr and "twice (first on line 1)" in r.stderr and not r.stdout


def test_offline_hub_name_fails_with_one_clear_line(monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # nothing listens on the discard port
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    r = invoke("rlvr-data", ["gsm8k"])
    assert r.code == 1
    assert r.stderr.count("\n") == 1 and "--source" in r.stderr and "Traceback" not in r.stderr


def test_rlvr_data_dir(monkeypatch):
    monkeypatch.setenv("RLVR_DATA_DIR", D)
    recs = load_records("gsm8k", split="test")
    assert len(recs) == 20


def test_bad_rows_name_the_row(tmp_path):
    f = tmp_path / "g.jsonl"
    f.write_text('{"question": "q", "answer": "#### 1"}\n{"question": "q2"}\n')
    r = invoke("rlvr-data", ["gsm8k", "--source", str(f)])
    assert r.code == 3 and "row 2" in r.stderr and "'answer'" in r.stderr


def test_missing_source_and_usage_errors(tmp_path):
    r = invoke("rlvr-data", ["gsm8k", "--source", str(tmp_path / "none.jsonl")])
    assert r.code == 1 and "no such file" in r.stderr
    assert invoke("rlvr-data", []).code == 2
    assert invoke("rlvr-data", ["gsm8k", "--shard", "3/2"]).code == 2


def test_a_mistyped_relative_path_is_no_such_file_and_the_hub_hint_names_the_dataset(tmp_path, monkeypatch):
    from rlvr.eval.runner import check_source_paths, parse_sources

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    monkeypatch.delenv("RLVR_S3_DATASETS", raising=False)
    for args in (["gsm8k", "--source", "data/tset.jsonl"], ["gsm8k", "--source", "gsm8k=data/tset.jsonl"],
                 ["gsm8k", "--source", "tset.jsonl"], ["gsm8k", "--shots", "2", "--source", "data/tset.jsonl"]):
        r = invoke("rlvr-data", args)
        assert r.code == 1 and r.stderr.strip().endswith("tset.jsonl: no such file or folder"), (args, r.stderr)
        assert "hub" not in r.stderr
    r = invoke("rlvr-data", ["gsm8k", "--source", "someorg/gsm8k-copy"])   # a hub name is still a hub name
    assert r.code == 1 and "cannot load 'someorg/gsm8k-copy' from the Hugging Face hub" in r.stderr
    assert "$RLVR_S3_DATASETS/gsm8k/ or $RLVR_DATA_DIR/gsm8k/" in r.stderr and "NAME" not in r.stderr
    with pytest.raises(Exception, match="--source data/tset.jsonl: no such file or folder"):
        check_source_paths(parse_sources(["gsm8k=data/tset.jsonl"], ["gsm8k", "ifeval"]))
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "test.jsonl").write_text("")
    check_source_paths({"gsm8k": "data/test.jsonl", "math": "org/hub-name", "ifeval": "s3://b/none/"})


def test_toy_task_is_deterministic():
    a = select(load_records("toy"), limit=5)
    assert a == select(load_records("toy"), limit=5)
    assert all(r["answer"] == "7" and r["verifier"] == "math" for r in a)


def test_hendrycks_math_from_the_hub_loads_every_subject(monkeypatch):
    """EleutherAI/hendrycks_math has one configuration per subject and none for all: the seven
    are asked for one by one and concatenated in a fixed order (the hub is faked here)."""
    import datasets

    from rlvr.data.catalog import MATH_SUBJECTS

    asked = []

    def fake_load_dataset(name, config=None, split=None, **kw):
        asked.append((name, config, split))
        if config is None:
            raise ValueError("Config name is missing.")  # what the real hub answers
        return datasets.Dataset.from_list([
            {"problem": f"{config} problem {i}", "level": "Level 1", "type": config,
             "solution": f"so \\boxed{{{len(config) + i}}}"} for i in range(2)])

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # no reachability probe: the loader is faked
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    recs = load_records("math", split="test")
    assert asked == [("EleutherAI/hendrycks_math", s, "test") for s in MATH_SUBJECTS]
    assert len(MATH_SUBJECTS) == 7 and len(recs) == 14 and len({r["id"] for r in recs}) == 14
    assert [r["type"] for r in recs[::2]] == list(MATH_SUBJECTS)
    assert recs[0]["answer"] == str(len("algebra")) and recs[0]["prompt"].count("algebra problem 0") == 1


def test_each_dataset_of_a_mixture_may_have_its_own_order(tmp_path):
    order = tmp_path / "g.txt"
    order.write_text("gsm8k/test/7\ngsm8k/test/3\ngsm8k/test/11\ngsm8k/test/0\n")
    args = ["--mix", "gsm8k:1,math500:3", "--source", f"gsm8k={D}/gsm8k/test.jsonl",
            "--source", f"math500={D}/math500/test.jsonl", "--shuffle", "--seed", "3"]
    recs = data(*args, "--order", f"gsm8k={order}")
    plain = data(*args)
    assert [r["id"] for r in recs if r["dataset"] == "gsm8k"] == ["gsm8k/test/7", "gsm8k/test/3", "gsm8k/test/11",
                                                                   "gsm8k/test/0"]
    # the other dataset keeps its (shuffled) order, and the weights still interleave the two
    assert [r for r in recs if r["dataset"] == "math500"] == [r for r in plain if r["dataset"] == "math500"]
    assert sum(r["dataset"] == "gsm8k" for r in recs[:8]) <= 4 and len(recs) == 24
    r = invoke("rlvr-data", [*args, "--order", str(order), "--order", str(order)])
    assert r.code == 2 and "--order" in r.stderr
    r = invoke("rlvr-data", [*args, "--order", f"mbpp={order}"])
    assert r.code == 2 and "mbpp is not a dataset of this run" in r.stderr


def test_training_stream_orders_datasets_one_by_one(tmp_path):
    from rlvr.errors import UsageError
    from rlvr.train.config import DataConfig
    from rlvr.train.stream import PromptStream

    order = tmp_path / "g.txt"
    order.write_text("gsm8k/test/5\ngsm8k/test/2\ngsm8k/test/5\n")  # a repeat trains as its own copy
    cfg = DataConfig(dataset=None, mix={"gsm8k": 0.25, "math500": 0.75}, split="test",
                     source={"gsm8k": f"{D}/gsm8k/test.jsonl", "math500": f"{D}/math500/test.jsonl"},
                     order={"gsm8k": str(order)}, seed=1)
    s = PromptStream(cfg)
    ep = s.epoch(0)
    assert [r["id"] for r in ep if r["dataset"] == "gsm8k"] == ["gsm8k/test/5", "gsm8k/test/2", "gsm8k/test/5#2"]
    assert len(ep) == 23 and sorted(r["id"] for r in ep if r["dataset"] == "math500") == \
        sorted(r["id"] for r in load_records("math500", source=f"{D}/math500/test.jsonl"))
    assert [r["id"] for r in ep] == [r["id"] for r in PromptStream(cfg).epoch(0)]  # deterministic
    with pytest.raises(UsageError, match="not a dataset of this run"):
        PromptStream(DataConfig(dataset="gsm8k", source={"gsm8k": f"{D}/gsm8k/test.jsonl"}, split="test",
                                order={"math500": str(order)}))


def test_shipped_mix_config_and_its_curricula():
    from rlvr.config_loader import load_config
    from rlvr.data import read_order
    from rlvr.train.config import TrainConfig

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = load_config(TrainConfig, os.path.join(root, "configs", "qwen3-1.7B-mix.yaml"))
    assert set(cfg.data.order) == {"gsm8k", "mbpp"} and set(cfg.data.order) <= set(cfg.data.mix)
    ids = {n: [i for i, _ in read_order(os.path.join(root, p))] for n, p in cfg.data.order.items()}
    assert sorted(ids["gsm8k"]) == sorted(f"gsm8k/train/{i}" for i in range(7473))  # the whole train split
    assert sorted(ids["mbpp"]) == sorted(f"mbpp/{i}" for i in range(601, 975))  # task ids of the train split


def _gsm8k_rows(n: int, start: int = 0) -> str:
    rows = [orjson.loads(ln) for ln in open(f"{D}/gsm8k/test.jsonl")][start:start + n]
    return "".join(orjson.dumps(r).decode() + "\n" for r in rows)


def test_a_split_less_file_never_serves_two_splits(tmp_path, monkeypatch):
    """DATA/gsm8k/data.jsonl names no split: gsm8k has two, so it serves neither (one line naming
    the file and the split), and a split-named folder anywhere wins over it; a dataset of one
    split (humaneval) or whose rows say their split (mbpp) is still served by its one file."""
    root = tmp_path / "data"
    (root / "gsm8k").mkdir(parents=True)
    (root / "gsm8k" / "data.jsonl").write_text(_gsm8k_rows(4))
    monkeypatch.setenv("RLVR_DATA_DIR", str(root))
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("RLVR_S3_DATASETS", raising=False)
    for split in ("test", "train"):
        r = invoke("rlvr-data", ["gsm8k", "--split", split])
        lines = r.stderr.strip().splitlines()
        assert r.code == 1 and not r.stdout and len(lines) == 1, r.stderr
        assert f"{root}/gsm8k/data.jsonl" in lines[0] and f"gsm8k's {split!r} split" in lines[0], r.stderr
        assert "hub" not in lines[0]
    # the same folder given with --source: the same rule; the file itself is the caller's choice
    r = invoke("rlvr-data", ["gsm8k", "--split", "test", "--source", str(root / "gsm8k")])
    assert r.code == 1 and f"{root}/gsm8k/data.jsonl" in r.stderr and "'test' split" in r.stderr
    assert len(data("gsm8k", "--split", "test", "--source", str(root / "gsm8k" / "data.jsonl"))) == 4
    # latest.jsonl names no split either (it is not "test"); a save_to_disk Dataset of no split neither
    (root / "gsm8k" / "data.jsonl").rename(root / "gsm8k" / "latest.jsonl")
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 1 and f"{root}/gsm8k/latest.jsonl: its name says no split" in r.stderr, r.stderr
    import datasets

    datasets.Dataset.from_list([orjson.loads(ln) for ln in _gsm8k_rows(2).splitlines()]).save_to_disk(
        str(root / "saved" / "gsm8k"))
    monkeypatch.setenv("RLVR_DATA_DIR", str(root / "saved"))
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 1 and f"{root}/saved/gsm8k: a saved Dataset that records no split" in r.stderr, r.stderr
    assert "name its folder gsm8k_test/" in r.stderr
    # ... which, named gsm8k_<split>, is that split, found or given with --source
    os.rename(root / "saved" / "gsm8k", root / "saved" / "gsm8k_test")
    assert len(data("gsm8k", "--split", "test")) == 2
    assert len(data("gsm8k", "--split", "test", "--source", str(root / "saved" / "gsm8k_test"))) == 2
    r = invoke("rlvr-data", ["gsm8k", "--split", "train", "--source", str(root / "saved" / "gsm8k_test")])
    assert r.code == 1 and "records no split" in r.stderr, r.stderr
    monkeypatch.setenv("RLVR_DATA_DIR", str(root))
    # a split-named source wins although NAME/ is looked in first; the other split still fails
    (root / "gsm8k_test").mkdir()
    (root / "gsm8k_test" / "part-0.jsonl").write_text(_gsm8k_rows(2, start=10))
    recs = data("gsm8k", "--split", "test")
    assert len(recs) == 2 and recs[0]["answer"] == data("gsm8k", "--source", f"{D}/gsm8k/test.jsonl")[10]["answer"]
    assert invoke("rlvr-data", ["gsm8k", "--split", "train"]).code == 1
    (root / "gsm8k" / "train.jsonl").write_text(_gsm8k_rows(3))
    assert len(data("gsm8k", "--split", "train")) == 3
    # one split, or rows that say their split: the one file serves
    (root / "humaneval").mkdir()
    (root / "humaneval" / "HumanEval.jsonl").write_text(open(f"{D}/humaneval/HumanEval.jsonl").read())
    assert data("humaneval") == data("humaneval", "--source", f"{D}/humaneval/HumanEval.jsonl")
    r = invoke("rlvr-data", ["humaneval", "--split", "train"])
    assert r.code == 1 and "HumanEval.jsonl" in r.stderr and "'train' split" in r.stderr
    (root / "mbpp").mkdir()
    (root / "mbpp" / "mbpp.jsonl").write_text(open(f"{D}/mbpp/mbpp.jsonl").read())
    assert data("mbpp", "--split", "test", "--limit", "2") == \
        data("mbpp", "--split", "test", "--limit", "2", "--source", f"{D}/mbpp/mbpp.jsonl")


def test_rlvr_data_dir_is_read_by_every_command(tmp_path, monkeypatch):
    """$RLVR_DATA_DIR is part of the one locate: rlvr-data and a single rlvr-eval run read it, and
    a mistyped one is the same one line from both (never a fall through to the hub)."""
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.delenv("RLVR_S3_DATASETS", raising=False)
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path / "nodata"))
    for name, args in (("rlvr-data", ["gsm8k"]), ("rlvr-eval", ["tiny", str(tmp_path / "out"), "-b", "gsm8k_0shot_qa"])):
        r = invoke(name, args)
        assert r.code == 1 and r.stderr.strip() == f"{name}: error: RLVR_DATA_DIR={tmp_path}/nodata: no such folder", \
            r.stderr
    assert not (tmp_path / "out").exists()
    (tmp_path / "rows" / "gsm8k_test").mkdir(parents=True)
    (tmp_path / "rows" / "gsm8k_test" / "x.jsonl").write_text(_gsm8k_rows(3))
    monkeypatch.setenv("RLVR_DATA_DIR", str(tmp_path / "rows"))
    assert [r["id"] for r in data("gsm8k")] == ["gsm8k/test/0", "gsm8k/test/1", "gsm8k/test/2"]
