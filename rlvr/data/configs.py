"""A training config's `data` section as the users write it, mapped onto rlvr's.

    data = data_section({"dataset": "mixed", "seed": 42, "datasets": [
        {"name": "gsm8k", "split": "train", "weight": 0.25},
        {"name": "math", "split": "train", "weight": 0.75, "order": "curricula/math.txt"}]})
    # -> {"seed": 42, "dataset": None, "mix": {"gsm8k": 0.25, "math": 0.75}, "split": "train",
    #     "order": {"math": "curricula/math.txt"}}

The users' mixture form (``dataset: mixed``, ``mode: weighted``, ``datasets: [{name, weight,
order, split}]``) becomes ``data.mix`` (weights, 1 when not given) and ``data.order`` (one
curriculum file per dataset); one dataset alone becomes ``data.dataset`` (with its ``order``).
Other names of a dataset (``if_multi_constraints``) become its own name everywhere in the
section. What rlvr cannot do as written (``mode: sequential`` with ``count``, per-dataset
filters such as ``level``, different splits per dataset) is refused with one line that names
the key and shows the rlvr form of the rest.
"""

from __future__ import annotations

from rlvr.data.catalog import canonical
from rlvr.errors import ConfigError

ENTRY_KEYS = ("name", "weight", "order", "split")


def _canonical_keys(value):
    if not isinstance(value, dict):
        return value
    return {canonical(k) if isinstance(k, str) else k: v for k, v in value.items()}


def _flow(section: dict) -> str:
    import yaml

    return "data: " + yaml.safe_dump({k: v for k, v in section.items() if v is not None},
                                     default_flow_style=True, sort_keys=False, width=10_000).strip()


def data_section(data: dict, where: str = "data") -> dict:
    """The `data` section in rlvr's form (see the module docstring); ConfigError for what cannot map."""
    if not isinstance(data, dict):
        return data
    out = dict(data)
    if isinstance(out.get("dataset"), str):
        out["dataset"] = canonical(out["dataset"])
    for key in ("mix", "source", "order", "template", "filters", "assistant_prefix"):
        out[key] = _canonical_keys(out.get(key)) if key in out else None
    out = {k: v for k, v in out.items() if k in data or v is not None}
    if out.get("dataset") != "mixed":
        return out
    items = out.pop("datasets", None)
    mode = out.pop("mode", "weighted")
    if not isinstance(items, list) or not items:
        raise ConfigError(f"{where}.datasets: expected a non-empty list of {{name, weight, order}} with dataset: mixed "
                          "(or write data: {mix: {NAME: WEIGHT, ...}})")
    for k in ("mix", "order"):
        if out.get(k) is not None:
            raise ConfigError(f"{where}.{k}: give the mixture once: as data.{k} or as dataset: mixed with datasets")
    mix: dict[str, float] = {}
    order: dict[str, str] = {}
    splits: dict[str, str] = {}
    problems: list[str] = []
    for i, entry in enumerate(items):
        w = f"{where}.datasets[{i}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            raise ConfigError(f"{w}: expected a mapping with a dataset name (name: gsm8k)")
        name = canonical(entry["name"])
        if name in mix:
            raise ConfigError(f"{w}.name: {name} is listed twice")
        weight = entry.get("weight", 1.0)
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not 0 < weight < float("inf"):
            raise ConfigError(f"{w}.weight: expected a positive number, got {weight!r}")
        mix[name] = float(weight)
        if entry.get("order"):
            if not isinstance(entry["order"], str):
                raise ConfigError(f"{w}.order: expected a file of prompt ids (local or s3://), got {entry['order']!r}")
            order[name] = entry["order"]
        if "split" in entry:
            splits[name] = str(entry["split"])
        extra = [k for k in entry if k not in ENTRY_KEYS]
        if extra:
            problems.append(f"{w}.{extra[0]}: rlvr has no per-dataset {extra[0]} (a dataset of a mixture takes "
                            f"{', '.join(ENTRY_KEYS)}; filter the rows into a file and pass it as data.source)")
    # a dataset without a split trains on data.split (train by default): the others must agree
    if splits and len(splits) < len(mix) and set(splits.values()) != {out.get("split") or "train"}:
        missing = [n for n in mix if n not in splits]
        problems.append(f"{where}.datasets: {', '.join(f'{n}: {s}' for n, s in splits.items())} but no split for "
                        f"{', '.join(missing)}: one split for every dataset of a mixture in rlvr (data.split); give "
                        "each dataset the same split, or train on the others' rows from a file (data.source)")
        splits = {}
    if len(set(splits.values())) > 1:
        problems.append(f"{where}.datasets: one split for every dataset of a mixture in rlvr (data.split), not "
                        + ", ".join(f"{n}: {s}" for n, s in splits.items()))
    elif splits:
        split = next(iter(splits.values()))
        if out.get("split") not in (None, split) and "split" in data:
            problems.append(f"{where}.split: {out['split']!r}, but the datasets say {split!r}")
        out["split"] = split
    if mode != "weighted":
        problems.insert(0, f"{where}.mode: {mode!r}: rlvr interleaves a mixture by weight (mode: weighted); for one "
                           "dataset after another, give each its share as a weight or train one run per dataset")
    if len(mix) == 1:
        out["dataset"], out["mix"] = next(iter(mix)), None
        out["order"] = next(iter(order.values()), None)
    else:
        out["dataset"], out["mix"], out["order"] = None, mix, order or None
    if problems:
        raise ConfigError(f"{problems[0]}; rlvr's form of the rest: {_flow(out)}")
    return out
