"""Where raw dataset rows come from: local files and folders, s3:// URIs, the HF hub.

    rows = load_rows("path/to/test.jsonl")                  # jsonl, json, parquet, arrow, .gz
    rows = load_rows("path/to/folder", split="test")        # a folder holding split files
    rows = load_rows("s3://bucket/data/test.parquet")       # cached locally (rlvr.s3)
    rows = load_rows("s3://bucket/data/gsm8k/", split="test")   # an S3 folder (save_to_disk too)
    rows = load_rows("openai/gsm8k", split="test", config="main")   # the Hugging Face hub
    where = locate(["gsm8k"], "train")      # --source, $RLVR_S3_DATASETS, $RLVR_DATA_DIR, or the hub

`locate` is the one resolution of where a dataset's rows come from, for every dataset and
every command (rlvr-data, rlvr-eval and its lm-eval tasks, rlvr-train, the job image): the
source given (`--source`), else $RLVR_S3_DATASETS/NAME/ and then $RLVR_S3_DATASETS/NAME_<split>/
(the layout of `datasets.save_to_disk` folders of one split, e.g. `gsm8k_train/`), else the same
two below $RLVR_DATA_DIR (a $RLVR_DATA_DIR that is no folder is one error line, for every
command), else the Hugging Face hub. A NAME/ folder counts only when it holds the split asked
for. A source named after the split (NAME_<split>/, NAME/<split>.jsonl, a saved DatasetDict with
the split) wins, wherever it is, over a NAME/ folder whose one file names no split
(NAME/data.jsonl) or a saved Dataset of no split; such a split-less copy serves a split only
for a dataset of one split (HumanEval) or whose rows say their split (MBPP), else it is one
error line naming the file and the split: the same rows never serve two splits (train on
test). An S3 folder's listing is checked for the split first, and only the split's files are
fetched. Every loader returns a list of plain dicts. A hub name that cannot be
reached fails with one line saying where else rows were looked for and how to pass a local
copy; the hub libraries' own retries and warnings never reach the terminal.
"""

from __future__ import annotations

import contextlib
import glob
import json
import logging
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from rlvr.errors import Failure

EXTS = (".jsonl", ".jsonl.gz", ".json", ".json.gz", ".parquet", ".arrow")
SPLIT_WORDS = ("train", "test", "valid", "dev", "prompt")   # a file named with none of these is a whole dataset


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


def _all_files(folder: str) -> list[str]:
    return sorted(f for f in glob.glob(os.path.join(folder, "**", "*"), recursive=True)
                  if f.endswith(EXTS) and os.path.isfile(f) and "/." not in f)


def _one_format(files: list[str]) -> list[str]:
    """The files of the first format of EXTS present: a folder with test.jsonl and
    test-0000.parquet holds one split twice."""
    for ext in EXTS:
        same = [f for f in files if f.endswith(ext)]
        if same:
            return same
    return []


def _stem(f: str) -> str:
    return os.path.basename(f).split(".")[0]


def _has_word(name: str, word: str) -> bool:
    """Whether a file name holds `word` not as the tail of a longer word: gsm8k_test.jsonl,
    test-00000.parquet and testset.jsonl hold "test"; latest.jsonl and contest.jsonl do not,
    nor does pretrain.jsonl hold "train"."""
    return re.search(rf"(?<![a-z]){re.escape(word.lower())}", name.lower()) is not None


def _named_split(files: Sequence[str], split: str) -> list[str]:
    """The files of `split` among data files (test.jsonl, test-00000-of-00001.parquet, a name
    holding the split's name), of one format."""
    low = split.lower()
    found = [f for f in files if _stem(f).lower() == low or _stem(f).lower().startswith(f"{low}-")]
    if not found:
        found = [f for f in files if _has_word(os.path.basename(f), split)]
    return _one_format(found)


def _splitless(files: Sequence[str]) -> str | None:
    """The dataset's one data file when its name names no split (data.jsonl, mbpp.jsonl,
    HumanEval.jsonl), else None."""
    if len(files) == 1 and not any(_has_word(_stem(files[0]), w) for w in SPLIT_WORDS):
        return files[0]
    return None


def _split_files(folder: str, split: str | None, splitless: bool = True) -> list[str]:
    """The data files of `split` below a folder; with `splitless`, the folder's one file whose
    name names no split when no file names the split."""
    files = _all_files(folder)
    if not files:
        return []
    if split is None:
        return files if len(files) == 1 else []
    found = _named_split(files, split)
    if not found and splitless and _splitless(files):
        found = files   # the dataset's one file (mbpp.jsonl, HumanEval.jsonl)
    return found


def _data_files(folder: str) -> list[str]:
    """Every data file below a folder that holds one split."""
    return _one_format(_all_files(folder))


def _is_saved(folder: str) -> bool:
    return any(os.path.exists(os.path.join(folder, f)) for f in ("dataset_info.json", "dataset_dict.json"))


def _saved_split(folder: str) -> str | None:
    """The split a `Dataset.save_to_disk` folder says it holds (state.json's _split), if any."""
    try:
        with open(os.path.join(folder, "state.json"), encoding="utf-8") as fh:
            split = json.load(fh).get("_split")
    except (OSError, ValueError, AttributeError):
        return None
    return split if isinstance(split, str) and split else None


NAMED, SPLITLESS = "named", "splitless"


def split_status(folder: str, split: str) -> str | None:
    """How a local folder holds rows of `split`: NAMED (a file named after the split, a saved
    DatasetDict with it, a saved Dataset whose state says it is that split), SPLITLESS (its one
    data file names no split, or a saved Dataset says no split: rows of no split in particular),
    or None (not at all)."""
    if os.path.isfile(os.path.join(folder, "dataset_dict.json")):
        try:
            with open(os.path.join(folder, "dataset_dict.json"), encoding="utf-8") as fh:
                return NAMED if split in (json.load(fh).get("splits") or []) else None
        except (OSError, ValueError, AttributeError):
            return None
    if os.path.isfile(os.path.join(folder, "dataset_info.json")):
        saved = _saved_split(folder)
        return NAMED if saved == split else SPLITLESS if saved is None else None
    files = _all_files(folder)
    if _named_split(files, split):
        return NAMED
    return SPLITLESS if _splitless(files) else None


def splitless_error(what: str, split: str, dataset: str) -> SourceError:
    """The one line for a split-less file (or saved Dataset) asked for one split of a dataset
    that has several."""
    saved = not what.endswith(EXTS)
    why = "a saved Dataset that records no split" if saved else "its name says no split"
    fix = (f"save it as a DatasetDict with a {split!r} split, or name its folder {dataset}_{split}/" if saved else
           f"name it {split}.jsonl (or {split}-*.parquet ...), put it in a {dataset}_{split}/ folder, "
           "or give the file itself with --source")
    return SourceError(f"{what}: {why}, so it is not taken as {dataset}'s {split!r} split "
                       f"(a dataset with several splits): {fix}")


def looks_like_path(source: str) -> bool:
    """Whether a --source value is meant as a local path rather than a hub name: it starts with
    '.', '/' or '~', has a data file suffix (data/tset.jsonl), or more than one '/' (a hub
    name is ORG/NAME)."""
    if source.startswith("s3://"):
        return False
    return (source.startswith((".", "/", "~")) or source.lower().endswith((*EXTS, ".csv", ".tsv", ".txt", ".gz"))
            or (os.sep in source and not _looks_like_hub_name(source)))


def check_local(source: str) -> None:
    """SourceError "no such file or folder" for a --source that looks like a local path
    (looks_like_path) and does not exist; hub names and s3:// URIs pass."""
    if looks_like_path(source) and not os.path.exists(source):
        raise SourceError(f"{source}: no such file or folder")


def check_data_dir() -> None:
    """SourceError when $RLVR_DATA_DIR is set but is no folder (a sweep checks this before any
    child starts, rather than each child falling through to the hub)."""
    local = os.environ.get("RLVR_DATA_DIR", "").strip()
    if local and not os.path.isdir(local):
        raise SourceError(f"RLVR_DATA_DIR={local}: no such folder")


def load_rows(source: str, split: str | None = None, config: str | None = None, whole: bool = False,
              dataset: str = "NAME", splitless: bool = True) -> list[dict]:
    """Raw rows of a dataset from a file, folder, s3:// URI or hub name (in that order). With
    `whole`, a folder holds the split's rows only (NAME_<split>/): all of its rows are read.
    Without `splitless`, a folder's one file whose name names no split (or a saved Dataset of
    no split) does not serve `split` (splitless_error). An s3:// folder has its listing checked
    for the split first: only the split's files are fetched. A value that looks like a path
    (looks_like_path) and does not exist is "no such file or folder", never a hub name;
    `dataset` names the folders the hub's failure suggests."""
    label = source
    if source.startswith("s3://"):
        source = _fetch_s3(source, split, whole, splitless, dataset)
    if os.path.isfile(source):
        return _read_file(source)
    if os.path.isdir(source):
        if _is_saved(source):
            if not whole and split is not None and not splitless and split_status(source, split) == SPLITLESS:
                raise splitless_error(label, split, dataset)
            return _load_from_disk(source, None if whole else split)
        files = _data_files(source) if whole else _split_files(source, split, splitless)
        if not files:
            one = _splitless(_all_files(source)) if split is not None else None
            if one is not None:
                raise splitless_error(one if label == source else label.rstrip("/") + "/" + os.path.relpath(one, source),
                                      split, dataset)
            raise SourceError(f"{label}: no data file for split {split!r} (looked for {split}.jsonl, "
                              f"{split}-*.parquet, ... below the folder)")
        rows: list[dict] = []
        for f in files:
            rows.extend(_read_file(f))
        return rows
    check_local(source)
    return load_hub(source, split, config, dataset=dataset)


def _looks_like_hub_name(s: str) -> bool:
    parts = s.split("/")
    return len(parts) == 2 and all(p and not p.startswith(".") for p in parts)


def _load_from_disk(path: str, split: str | None) -> list[dict]:
    import datasets

    saved = _saved_split(path) if not os.path.isfile(os.path.join(path, "dataset_dict.json")) else None
    if split is not None and saved is not None and saved != split:
        raise SourceError(f"{path}: a saved {saved!r} split, not {split!r} (choose it with --split {saved})")
    if split is not None and split_status(path, split) == NAMED and os.path.isdir(os.path.join(path, split)) \
            and os.path.isfile(os.path.join(path, "dataset_dict.json")):
        path = os.path.join(path, split)    # that split alone (the others need not have been fetched)
    with _quiet_hub():
        ds = datasets.load_from_disk(path)
    if isinstance(ds, datasets.DatasetDict):
        if split is None or split not in ds:
            raise SourceError(f"{path}: saved DatasetDict has splits {sorted(ds)}; choose one with --split")
        ds = ds[split]
    return ds.to_list()


# --------------------------------------------------------------------------- where rows come from


@dataclass(frozen=True)
class Location:
    """Where the rows of one split come from: a local file or folder (an S3 one already
    fetched into the local cache), or the hub (path None)."""

    path: str | None
    label: str                   # what messages name: the --source, the s3:// folder, the local folder
    whole: bool = False          # a NAME_<split>/ folder: every row in it is the split's
    tried: tuple[str, ...] = field(default=())   # the places that held nothing for the split


def _data_keys(keys: Sequence[str]) -> list[str]:
    return [k for k in keys if k.endswith(EXTS) and not any(p.startswith(".") for p in k.split("/"))]


def probe_keys(keys: Sequence[str], split: str | None, whole: bool,
               saved_split: Callable[[], str | None]) -> tuple[str | None, list[str], str]:
    """How a remote folder holds `split`, from its listing (`keys`, relative to it): (NAMED,
    SPLITLESS or None, the keys to fetch for it, the split-less key, or "" for a saved Dataset
    of no split). saved_split(): the split a saved Dataset's state.json records, asked only for
    such a folder. `whole`: a NAME_<split>/ folder, every key of it is the split's."""
    if not keys:
        return None, [], ""
    if whole or split is None:
        return NAMED, list(keys), ""
    if "dataset_dict.json" in keys:
        mine = [k for k in keys if k.startswith(f"{split}/")]
        return (NAMED, ["dataset_dict.json", *mine], "") if mine else (None, [], "")
    if "dataset_info.json" in keys:
        saved = saved_split()
        status = NAMED if saved == split else SPLITLESS if saved is None else None
        return status, list(keys) if status else [], ""
    data = _data_keys(keys)
    named = _named_split(data, split)
    if named:
        return NAMED, named, ""
    one = _splitless(data)
    return (SPLITLESS, [one], one) if one else (None, [], "")


def _s3_probe(uri: str, split: str | None, whole: bool) -> tuple[str | None, list[str], str]:
    """probe_keys of an S3 folder (a saved Dataset's state.json is the one file fetched to
    tell its split); the split-less thing named by its URI."""
    from rlvr.s3 import download_folder_cached

    from rlvr.s3 import list_folder

    uri = uri.rstrip("/") + "/"
    keys = list_folder(uri)

    def saved() -> str | None:
        return _saved_split(download_folder_cached(uri, only=[k for k in ("state.json", "dataset_info.json")
                                                               if k in keys]))

    status, needed, what = probe_keys(keys, split, whole, saved)
    return status, needed, uri + what


def _fetch_s3(source: str, split: str | None, whole: bool, splitless: bool, dataset: str) -> str:
    """The local copy of an s3:// object, or of the files of `split` in an s3:// folder (its
    listing checked first: a split it lacks is one line before any download)."""
    from rlvr.s3 import download_cached, download_folder_cached, list_folder
    from rlvr.s3.transfer import S3Transfer
    from rlvr.s3.uri import parse_uri

    bucket, key = parse_uri(source)
    if key and not key.endswith("/"):
        t = S3Transfer(workers=1)
        try:
            if t.head(bucket, key) is not None:
                return download_cached(source, transfer=t)
        finally:
            t.close()
    status, needed, what = _s3_probe(source, split, whole)
    if status is None:
        if not list_folder(source.rstrip("/") + "/"):
            from rlvr.s3 import S3Error

            raise S3Error(f"not found: nothing under {source.rstrip('/')}/", "NoSuchKey")
        raise SourceError(f"{source}: no data file for split {split!r} (looked for {split}.jsonl, "
                          f"{split}-*.parquet, ... below the folder)")
    if status == SPLITLESS and not splitless:
        raise splitless_error(what, split or "", dataset)
    return download_folder_cached(source.rstrip("/") + "/", only=needed)


def locate(names: Sequence[str], split: str, source: str | None = None, splitless: bool = False) -> Location:
    """Where the rows of `split` of the dataset called `names` (its name first, then other
    names it goes by) come from: `source` when given, else $RLVR_S3_DATASETS/NAME/ (when it
    holds the split) or $RLVR_S3_DATASETS/NAME_<split>/, else the same below $RLVR_DATA_DIR,
    else the hub (a Location whose path is None, listing the places tried).

    A folder whose files are named after the split (NAME_<split>/, NAME/<split>.jsonl, a saved
    DatasetDict with the split) wins, wherever it is, over a NAME/ folder whose one file names
    no split (NAME/data.jsonl) or a saved Dataset of no split: that serves `split` only when
    `splitless` (the dataset has one split, or its rows say their split), else it is one
    SourceError naming the file and the split. From S3 only the split's files are fetched."""
    if source is not None:
        # a folder named NAME_<split> holds that split alone, given or found (gsm8k_train/, a saved Dataset)
        base = source.rstrip("/").rsplit("/", 1)[-1]
        return Location(source, source, any(base == f"{n}_{split}" for n in names))
    check_data_dir()
    tried: list[str] = []
    fallback: tuple[str, str, Callable[[], str]] | None = None    # (where, the split-less file, fetch it)
    s3 = os.environ.get("RLVR_S3_DATASETS", "").strip()
    local = os.environ.get("RLVR_DATA_DIR", "").strip()
    for base, on_s3 in ((s3.rstrip("/") + "/" if s3 else "", True), (local, False)):
        if not base:
            continue
        for name in names:
            for folder, whole in ((name, False), (f"{name}_{split}", True)):
                if on_s3:
                    where = base + folder + "/"
                    status, needed, what = _s3_probe(where, split, whole)

                    def fetch(where=where, needed=needed) -> str:
                        from rlvr.s3 import download_folder_cached

                        return download_folder_cached(where, only=needed)
                else:
                    where = os.path.join(base, folder)
                    status = None if not os.path.isdir(where) else NAMED if whole else split_status(where, split)
                    what = (_splitless(_all_files(where)) or where) if status == SPLITLESS else ""
                    fetch = (lambda where=where: where)
                if status == NAMED:
                    return Location(fetch(), where, whole)
                if status == SPLITLESS and fallback is None:
                    fallback = (where, what, fetch)
                tried.append(where)
    if fallback is not None:
        where, what, fetch = fallback
        if not splitless:
            raise splitless_error(what, split, names[0])
        return Location(fetch(), where, True)
    return Location(None, "hub", tried=tuple(tried))


@contextlib.contextmanager
def _quiet_hub() -> Iterator[None]:
    """The hub libraries log every failed request and retry ("... thrown while requesting HEAD
    ..."): silence them; a failure reaches the user as one line of ours."""
    names = ("huggingface_hub", "datasets", "fsspec", "urllib3")
    loggers = [logging.getLogger(n) for n in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


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


def _offline_hint(tried: Sequence[str], dataset: str) -> str:
    where = f" (nothing for this split in {', '.join(tried)})" if tried else ""
    return (f"{where}; offline? pass a local copy with --source FILE_OR_FOLDER, or put it in "
            f"$RLVR_S3_DATASETS/{dataset}/ or $RLVR_DATA_DIR/{dataset}/")


def load_hub(name: str, split: str | None, config: str | None, tried: Sequence[str] = (),
             dataset: str = "NAME") -> list[dict]:
    """Rows of a hub dataset, or one SourceError line naming the places tried (rlvr's
    `dataset` folders) and how to pass a local copy."""
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "10")
    if os.environ.get("HF_HUB_OFFLINE", "0").lower() in ("0", "", "false", "no", "off"):
        why = _hub_reachable()
        if why is not None:
            raise SourceError(f"cannot load {name!r} from the Hugging Face hub (unreachable: {why})"
                              + _offline_hint(tried, dataset))
    try:
        import datasets

        with _quiet_hub():
            ds = datasets.load_dataset(name, config, split=split or "test")
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one actionable line
        msg = str(e).splitlines()[0][:200] if str(e) else type(e).__name__
        raise SourceError(f"cannot load {name!r} from the Hugging Face hub ({msg})"
                          + _offline_hint(tried, dataset)) from None
    return ds.to_list()

