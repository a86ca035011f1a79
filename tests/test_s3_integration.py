"""S3 inside the other commands: rlvr-data reads s3:// sources and curricula, and rlvr-train
uploads its run folder (checkpoints, traces) in the background, against the real test server."""

from __future__ import annotations

import os
import sys

import orjson
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from s3_fixtures import bucket, s3env, s3server  # noqa: E402,F401

from helpers import DATA, REPO, invoke  # noqa: E402


def test_rlvr_data_reads_s3_sources_and_orders(s3env, bucket, tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    c = s3env.client()
    c.upload_file(os.path.join(DATA, "datasets", "gsm8k", "test.jsonl"), bucket, "data/gsm8k/test.jsonl")
    c.put_object(Bucket=bucket, Key="curricula/easy.txt", Body=b"gsm8k/test/3\ngsm8k/test/1\n")
    local = invoke("rlvr-data", ["gsm8k", "--source", os.path.join(DATA, "datasets", "gsm8k", "test.jsonl")]).records()
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/gsm8k/test.jsonl"])
    assert r.code == 0, r.stderr
    assert r.records() == local
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/gsm8k/test.jsonl",
                             "--order", f"s3://{bucket}/curricula/easy.txt"])
    assert [x["id"] for x in r.records()] == ["gsm8k/test/3", "gsm8k/test/1"]
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/data/nope.jsonl"])
    assert r.code != 0 and "nope.jsonl" in r.stderr and "Traceback" not in r.stderr


def _upload_folder(client, folder, bucket, prefix):
    for d, _, files in os.walk(folder):
        for f in files:
            p = os.path.join(d, f)
            client.upload_file(p, bucket, prefix + os.path.relpath(p, folder).replace(os.sep, "/"))


def test_rlvr_data_reads_s3_folders_and_the_default_prefix(s3env, bucket, tmp_path, monkeypatch):
    import datasets

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    c = s3env.client()
    src = os.path.join(DATA, "datasets", "gsm8k")
    rows = [orjson.loads(ln) for ln in open(os.path.join(src, "test.jsonl"))]
    datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)}).save_to_disk(str(tmp_path / "ds"))
    _upload_folder(c, tmp_path / "ds", bucket, "datasets/gsm8k/")           # a save_to_disk folder
    c.upload_file(os.path.join(src, "test.jsonl"), bucket, "plain/gsm8k/test.jsonl")  # a folder of split files
    local = invoke("rlvr-data", ["gsm8k", "--source", os.path.join(src, "test.jsonl")]).records()
    for uri in (f"s3://{bucket}/datasets/gsm8k", f"s3://{bucket}/datasets/gsm8k/", f"s3://{bucket}/plain/gsm8k/"):
        r = invoke("rlvr-data", ["gsm8k", "--source", uri, "--split", "test"])
        assert r.code == 0 and r.records() == local, (uri, r.stderr)
    # RLVR_S3_DATASETS: S3 first, then RLVR_DATA_DIR, then the hub
    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{bucket}/datasets/")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # the hub is never asked
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 0 and r.records() == local, r.stderr
    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{bucket}/nothing-here/")
    monkeypatch.setenv("RLVR_DATA_DIR", os.path.join(DATA, "datasets"))
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 0 and r.records() == local, r.stderr
    monkeypatch.delenv("RLVR_DATA_DIR")
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 1 and "hub" in r.stderr and "Traceback" not in r.stderr
    # the users' layout: one save_to_disk folder per split, <name>_<split>/, beside <name>/ (test only here);
    # lm-eval's tasks take both of their splits from there too
    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{bucket}/datasets/")
    train = [orjson.loads(ln) for ln in open(os.path.join(DATA, "lmeval", "gsm8k", "train.jsonl"), "rb")]
    datasets.Dataset.from_list(train, split="train").save_to_disk(str(tmp_path / "train"))
    _upload_folder(c, tmp_path / "train", bucket, "datasets/gsm8k_train/")
    r = invoke("rlvr-data", ["gsm8k", "--split", "train"])
    assert r.code == 0 and len(r.records()) == len(train) and r.records()[0]["id"] == "gsm8k/train/0", r.stderr
    both = tmp_path / "both"
    both.mkdir()
    (both / "test.jsonl").write_bytes(open(os.path.join(src, "test.jsonl"), "rb").read())
    (both / "train.jsonl").write_bytes(open(os.path.join(DATA, "lmeval", "gsm8k", "train.jsonl"), "rb").read())
    r = invoke("rlvr-data", ["gsm8k", "--shots", "3", "--limit", "2"])
    assert r.code == 0, r.stderr
    assert r.records() == invoke("rlvr-data", ["gsm8k", "--shots", "3", "--limit", "2", "--source", str(both)]).records()
    assert "Question:" in r.records()[0]["prompt"] and len(r.records()) == 2
    r = invoke("rlvr-data", ["gsm8k", "--source", f"s3://{bucket}/nothing-here/", "--split", "test"])
    assert r.code == 1 and "nothing under" in r.stderr


def test_s3_dataset_folders_fetch_only_the_split_asked(s3env, bucket, tmp_path, monkeypatch):
    """The listing is checked for the split first: only its files are downloaded, a split that is
    not there is one line before any download, and a split-less file serves no split of gsm8k."""
    import datasets

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLVR_DATA_DIR", raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    cache = tmp_path / "cache" / "rlvr" / "s3" / bucket
    c = s3env.client()
    test, train = os.path.join(DATA, "lmeval", "gsm8k", "test.jsonl"), os.path.join(DATA, "lmeval", "gsm8k", "train.jsonl")
    c.upload_file(test, bucket, "datasets/gsm8k/test.jsonl")
    c.upload_file(train, bucket, "datasets/gsm8k/train.jsonl")
    rows = [orjson.loads(ln) for ln in open(train, "rb")]
    datasets.DatasetDict({"train": datasets.Dataset.from_list(rows), "test": datasets.Dataset.from_list(rows[:2])}
                         ).save_to_disk(str(tmp_path / "dd"))
    _upload_folder(c, tmp_path / "dd", bucket, "saved/gsm8k/")
    c.put_object(Bucket=bucket, Key="loose/gsm8k/data.jsonl", Body=open(test, "rb").read())

    def files(prefix):
        top = cache / prefix
        return sorted(os.path.relpath(os.path.join(d, f), top) for d, _, fs in os.walk(top) for f in fs
                      if not f.startswith(".")) if top.exists() else []

    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{bucket}/datasets/")
    want = invoke("rlvr-data", ["gsm8k", "--source", test]).records()
    r = invoke("rlvr-data", ["gsm8k", "--split", "test"])
    assert r.code == 0 and r.records() == want, r.stderr
    assert files("datasets/gsm8k") == ["test.jsonl"]               # train.jsonl is not fetched
    r = invoke("rlvr-data", ["gsm8k", "--split", "train"])
    assert r.code == 0 and len(r.records()) == len(rows), r.stderr
    assert files("datasets/gsm8k") == ["test.jsonl", "train.jsonl"]   # the test copy stays
    assert invoke("rlvr-data", ["gsm8k", "--split", "test"]).records() == want
    # a saved DatasetDict: dataset_dict.json and the split's folder only
    r = invoke("rlvr-data", ["gsm8k", "--split", "test", "--source", f"s3://{bucket}/saved/gsm8k/"])
    assert r.code == 0 and len(r.records()) == 2, r.stderr
    assert files("saved/gsm8k")[0] == "dataset_dict.json" and all(f.startswith("test/") for f in files("saved/gsm8k")[1:])
    # a split that is not there: one line, nothing downloaded
    for uri in (f"s3://{bucket}/saved/gsm8k/", f"s3://{bucket}/datasets/gsm8k/"):
        before = files(uri.split(bucket + "/")[1].rstrip("/"))
        r = invoke("rlvr-data", ["gsm8k", "--split", "validation", "--source", uri])
        assert r.code == 1 and r.stderr.count("\n") == 1 and "'validation'" in r.stderr, r.stderr
        assert files(uri.split(bucket + "/")[1].rstrip("/")) == before
    # a split-less file: refused for gsm8k before it is fetched, under RLVR_S3_DATASETS and as --source
    monkeypatch.setenv("RLVR_S3_DATASETS", f"s3://{bucket}/loose/")
    for args in (["gsm8k", "--split", "test"], ["gsm8k", "--split", "test", "--source", f"s3://{bucket}/loose/gsm8k/"]):
        r = invoke("rlvr-data", args)
        assert r.code == 1 and f"s3://{bucket}/loose/gsm8k/data.jsonl" in r.stderr and "'test' split" in r.stderr, r.stderr
    assert files("loose/gsm8k") == []


def test_models_come_from_s3_once_and_hub_names_look_there_first(s3env, bucket, tmp_path, monkeypatch):
    from rlvr.models import resolve_model
    from rlvr.s3 import S3Transfer, download_folder_cached
    from rlvr.tiny import build

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("RLVR_CACHE", raising=False)
    c = s3env.client()
    model = build(str(tmp_path / "tiny"))
    _upload_folder(c, model, bucket, "models/tiny-qwen/")
    names = sorted(os.listdir(model))
    t = S3Transfer(workers=2)
    gets = []
    t.client.meta.events.register("before-call.s3.GetObject", lambda **kw: gets.append(1))
    path = download_folder_cached(f"s3://{bucket}/models/tiny-qwen/", transfer=t)
    assert sorted(os.listdir(path)) == names and len(gets) == len(names)
    for n in names:
        assert open(os.path.join(path, n), "rb").read() == open(os.path.join(model, n), "rb").read()
    assert download_folder_cached(f"s3://{bucket}/models/tiny-qwen", transfer=t) == path and len(gets) == len(names)
    c.put_object(Bucket=bucket, Key="models/tiny-qwen/config.json", Body=b'{"changed": true}')
    c.delete_object(Bucket=bucket, Key="models/tiny-qwen/generation_config.json")
    assert download_folder_cached(f"s3://{bucket}/models/tiny-qwen/", transfer=t) == path
    assert len(gets) == len(names) + 1 and open(os.path.join(path, "config.json"), "rb").read() == b'{"changed": true}'
    assert "generation_config.json" not in os.listdir(path)
    t.close()
    _upload_folder(c, model, bucket, "models/tiny-qwen/")
    m = resolve_model(f"s3://{bucket}/models/tiny-qwen/")
    assert (m.source, m.path, m.uri) == ("s3", path, f"s3://{bucket}/models/tiny-qwen/")
    # a hub-style name: under $RLVR_S3_MODELS (Org/Name/ or Name/) first, then the hub
    monkeypatch.setenv("RLVR_S3_MODELS", f"s3://{bucket}/models/")
    m = resolve_model("Qwen/tiny-qwen")
    assert (m.source, m.path, m.record()["uri"]) == ("s3", path, f"s3://{bucket}/models/tiny-qwen/")
    assert resolve_model("Qwen/not-on-s3").record() == {"name": "Qwen/not-on-s3", "source": "hub",
                                                        "path": "Qwen/not-on-s3"}
    assert resolve_model(model).source == "local"
    # the engines load it: rlvr-rollout -m s3://...
    r = invoke("rlvr-rollout", ["-m", f"s3://{bucket}/models/tiny-qwen/", "--engine", "hf", "--dtype", "float32",
                                "-n", "1", "--max-tokens", "3", "--seed", "1"], '{"id": "p1", "prompt": "1 2 3"}\n')
    assert r.code == 0, r.stderr
    assert [x["id"] for x in r.records()] == ["p1"] and len(r.records()[0]["completions"]) == 1


def test_each_node_loads_the_model_the_driver_fetched(s3env, bucket, tmp_path, monkeypatch):
    # ResolvedModel.local() as a Ray actor on another node runs it: the driver's copy where it
    # is visible (no S3 call), else this node's own cache, holding the same objects.
    from rlvr.errors import Failure
    from rlvr.models import resolve_model
    from rlvr.tiny import build

    c = s3env.client()
    _upload_folder(c, build(str(tmp_path / "tiny")), bucket, "models/m/")
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "driver"))
    m = resolve_model(f"s3://{bucket}/models/m/")
    assert m.path.startswith(str(tmp_path / "driver")) and "config.json" in m.version
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # nothing listens: any S3 call would fail
    assert m.local() == m.path
    monkeypatch.setenv("AWS_ENDPOINT_URL", s3env.endpoint_url)
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "node2"))
    hidden = m.path + ".hidden"
    os.rename(m.path, hidden)  # another node: the driver's folder is not there
    other = m.local()
    assert other.startswith(str(tmp_path / "node2")) and sorted(os.listdir(other)) == sorted(os.listdir(hidden))
    c.put_object(Bucket=bucket, Key="models/m/config.json", Body=b'{"changed": true}')
    monkeypatch.setenv("RLVR_CACHE", str(tmp_path / "node3"))
    with pytest.raises(Failure, match="changed on S3 after the run fetched it"):
        m.local()


@pytest.fixture(scope="module")
def ray_local():  # one local Ray for the training tests of this module
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, include_dashboard=False, logging_level="ERROR", log_to_driver=False)
    yield
    ray.shutdown()


def test_train_traces_reach_s3_before_the_next_checkpoint(s3env, bucket, tmp_path, ray_local, monkeypatch):
    """A watcher sees step N's trace while training runs, before the checkpoint that follows it,
    with the uploads mapped to another layout (the one of a SageMaker job); checkpoints being
    written never go up, and the run folder's final state does (rlvr.s3.Layout's default
    layout is tested in test_s3_sync.py)."""
    from machine_time import wait_for

    from rlvr.config_loader import load_config, to_yaml
    from rlvr.s3 import BackgroundUploader, watch
    from rlvr.tiny import build
    from rlvr.train.config import TrainConfig
    from rlvr.train.loop import train

    cfg = load_config(TrainConfig, os.path.join(REPO, "configs", "tiny-cpu.yaml"), [
        "train.steps=3", "checkpoint.every=2", "rollout.engine=hf", "rollout.prompts_per_step=4", "rollout.n=4",
        "rollout.max_tokens=8", f"checkpoint.upload=s3://{bucket}/sm/", "upload.trace_interval_s=0"])
    cfg.upload.layout = {"checkpoints/step_000003/": "checkpoints/job1/{run}_final/",
                         "checkpoints/step_{step}/": "checkpoints/job1/{run}_step{step}/",
                         "traces/": "checkpoints/job1/traces/", "": "checkpoints/job1/{run}/"}
    c = s3env.client()
    _upload_folder(c, build(str(tmp_path / "tiny")), bucket, "models/tiny/")
    cfg.model.path = f"s3://{bucket}/models/tiny/"  # fetched into the cache before the engines start
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    run_dir = tmp_path / "runs" / "r1"
    seen = []
    tick = BackgroundUploader.tick

    def watched_tick(self):
        tick(self)
        # the training thread waits here (bounded only against a hang) until a watcher finds
        # this step's trace in S3; then no checkpoint may be there yet
        step = len((run_dir / "traces" / "trace.jsonl").read_bytes().splitlines())
        local = tmp_path / "watched" / "job1" / "traces" / "trace.jsonl"

        def arrived():
            if local.exists() and len(local.read_bytes().splitlines()) == step:
                return True
            watch("job1", f"s3://{bucket}/sm/checkpoints/", str(tmp_path / "watched"), once=True)

        wait_for(arrived, 180, f"step {step}'s trace in S3", poll=0.2)  # machine seconds
        listed = c.list_objects_v2(Bucket=bucket, Prefix="sm/checkpoints/job1/r1_")
        ckpts = [o["Key"] for o in listed.get("Contents", [])]
        seen.append((orjson.loads(local.read_bytes().splitlines()[-1])["step"], ckpts))

    monkeypatch.setattr(BackgroundUploader, "tick", watched_tick)
    train(cfg, str(run_dir), ["rlvr-train"], to_yaml(cfg))
    assert [s for s, _ in seen] == [1, 2, 3]
    assert seen[0][1] == [] and seen[1][1] == []  # steps 1 and 2 were in S3 before checkpoint 2 existed
    keys = {o["Key"] for o in c.list_objects_v2(Bucket=bucket, Prefix="sm/")["Contents"]}
    for k in ("sm/checkpoints/job1/r1_step2/model.safetensors", "sm/checkpoints/job1/r1_step2/trainer_state.pt",
              "sm/checkpoints/job1/r1_final/trainer_state.pt", "sm/checkpoints/job1/traces/samples.jsonl",
              "sm/checkpoints/job1/r1/run.json", "sm/checkpoints/job1/r1/config.yaml"):
        assert k in keys, k
    assert not any(k.startswith("sm/checkpoints/job1/r1/checkpoints/") or "/.tmp-" in k for k in keys)
    remote = c.get_object(Bucket=bucket, Key="sm/checkpoints/job1/traces/trace.jsonl")["Body"].read()
    assert remote == (run_dir / "traces" / "trace.jsonl").read_bytes()
    remote = orjson.loads(c.get_object(Bucket=bucket, Key="sm/checkpoints/job1/r1/run.json")["Body"].read())
    assert remote["status"] == "completed"
    man = orjson.loads((run_dir / "run.json").read_bytes())
    assert man["model"]["source"] == "s3" and man["model"]["uri"] == f"s3://{bucket}/models/tiny/"
    assert man["base_model"] == man["model"]["path"] and man["base_model"].startswith(str(tmp_path / "cache"))
