"""Where raw dataset rows come from: local files and folders, s3:// URIs, the HF hub.

    rows = load_rows("path/to/test.jsonl")                  # jsonl, json, parquet, arrow, .gz
    rows = load_rows("path/to/folder", split="test")        # a folder holding split files
    rows = load_rows("s3://bucket/data/test.parquet")       # cached locally (rlvr.s3)
    rows = load_rows("s3://bucket/data/gsm8k/", split="test")   # an S3 folder (save_to_disk too)
    rows = load_rows("openai/gsm8k", split="test", config="main")   # the Hugging Face hub

Every loader returns a list of plain dicts. A hub name that cannot be reached fails with one
line saying how to pass a local file instead.
"""

from __future__ import annotations

import glob
import json
import os

from rlvr.errors import Failure

EXTS = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet", ".arrow")


class SourceError(Failure):
    pass


def _read_file(path: str) -> list[dict]:
    if path.endswith((".jsonl", ".jsonl.gz")):
        from rlvr.records import read_records

        return list(read_records([path], validate=False))
    if path.endswith((".json", ".json.gz")):
        import gzip

        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8-sig") as fh:
            text = fh.read()
        try:
            data = json.loads(text)
        except json.JSONDecodeError as first:
            # Some ".json" files are really JSON lines.
            try:
                return [json.loads(ln) for ln in text.splitlines() if ln.strip()]
            except json.JSONDecodeError:
                raise SourceError(f"{path}:{first.lineno}: invalid JSON: {first.msg}", code=3) from None
        if isinstance(data, dict):
            for key in ("data", "rows", "examples", "train", "test"):
                if isinstance(data.get(key), list):
                    return data[key]
            raise SourceError(f"{path}: a JSON object without a list of rows (expected a list, or a 'data' list)")
        if not isinstance(data, list):
            raise SourceError(f"{path}: expected a JSON list of rows")
        return data
    if path.endswith(".parquet"):
        import pyarrow.parquet as pq

        return pq.read_table(path).to_pylist()
    if path.endswith(".arrow"):
        import pyarrow as pa

        with open(path, "rb") as fh:
            try:
                reader = pa.ipc.open_stream(fh)
            except pa.ArrowInvalid:
                fh.seek(0)
                reader = pa.ipc.open_file(fh)
            return reader.read_all().to_pylist()
    raise SourceError(f"{path}: unsupported file type (use one of {', '.join(EXTS)})")


def _split_files(folder: str, split: str | None) -> list[str]:
    files = sorted(f for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
                   if f.endswith(EXTS) and os.path.isfile(f) and "/." not in f)
    if not files:
        return []
    if split is None:
        return files if len(files) == 1 else []
    base = lambda f: os.path.basename(f).split(".")[0]  # noqa: E731
    found = [f for f in files if base(f) == split or base(f).startswith(f"{split}-")]
    if not found:
        found = [f for f in files if split in os.path.basename(f)]
    # One format only: a folder with test.jsonl and test-0000.parquet holds one split twice.
    for ext in EXTS:
        same = [f for f in found if f.endswith(ext)]
        if same:
            return same
    return []


def load_rows(source: str, split: str | None = None, config: str | None = None) -> list[dict]:
    """Raw rows of a dataset from a file, folder, s3:// URI or hub name (in that order)."""
    if source.startswith("s3://"):
        from rlvr.s3 import fetch_cached

        # an object (a file), or a folder: split files or a datasets.save_to_disk folder
        source = fetch_cached(source)
    if os.path.isfile(source):
        return _read_file(source)
    if os.path.isdir(source):
        if os.path.exists(os.path.join(source, "dataset_info.json")) or os.path.exists(os.path.join(source, "dataset_dict.json")):
            return _load_from_disk(source, split)
        files = _split_files(source, split)
        if not files:
            raise SourceError(f"{source}: no data file for split {split!r} (looked for {split}.jsonl, "
                              f"{split}-*.parquet, ... below the folder)")
        rows: list[dict] = []
        for f in files:
            rows.extend(_read_file(f))
        return rows
    if os.sep in source and not _looks_like_hub_name(source) or source.startswith((".", "/")):
        raise SourceError(f"{source}: no such file or folder")
    return _load_hub(source, split, config)


def _looks_like_hub_name(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


def _load_from_disk(path: str, split: str | None) -> list[dict]:
    import datasets

    ds = datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
        if split is None or split not in ds:
            raise SourceError(f"{path}: saved DatasetDict has splits {sorted(ds)}; choose one with --split")
        ds = ds[split]
    return ds.to_list()


def _hub_reachable(timeout: float = 3.0) -> str | None:
    """None if the hub answers a TCP connect, else why not (checked once, fast)."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        socket.create_connection((url.hostname, url.port or 443), timeout=timeout).close()
    except OSError as e:
        return str(e) or type(e).__name__
    return None


def _load_hub(name: str, split: str | None, config: str | None) -> list[dict]:
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    if os.environ.get("HF_HUB_OFFLINE", "0") in ("0", "", "false"):
        why = _hub_reachable()
        if why is not None:
            raise SourceError(f"cannot load {name!r} from the Hugging Face hub (unreachable: {why}); offline? pass a "
                              f"local copy with --source FILE_OR_FOLDER or set RLVR_DATA_DIR")
    try:
        import datasets

        ds = datasets.load_dataset(name, config, split=split or "test")
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one actionable line
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise SourceError(
            f"cannot load {name!r} from the Hugging Face hub ({msg}); offline? pass a local copy with "
            f"--source FILE_OR_FOLDER or set RLVR_DATA_DIR"
        ) from None
    return ds.to_list()
