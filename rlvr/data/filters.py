"""Row filters of a dataset: keep the records whose field takes one of the given values.

    keep = compile_filters({"level": [3, 4, 5]}, "math")      # MATH levels 3-5
    recs = [r for r in recs if keep(r)]
    parse_filter("difficulty=introductory,interview")         # --filter on the command line

Values compare as text, case-insensitively, and a value written as a number also matches
the dataset's "Level N" (MATH writes `level: "Level 3"`): `level: [3, 4, 5]` keeps Levels 3
to 5. A field that no record of the dataset has is an error (a typo would keep nothing), and so
is a filter that keeps no record (`difficulty=bogus`): the message names the field, the values
asked for and the values the records have. A value among several that matches no record
(`difficulty=interview,bogus`) is a warning on stderr naming the same.
Config form (rlvr-train `data.filters`): `{FIELD: [VALUES]}` for one dataset, or
`{DATASET: {FIELD: [VALUES]}}` per dataset of a mixture.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from rlvr.data.catalog import canonical
from rlvr.errors import ConfigError

_LEVEL = re.compile(r"^\s*level\s*(\d+)\s*$", re.I)


def _norm(v) -> str:
    s = str(v).strip()
    m = _LEVEL.match(s)
    if m:
        return m.group(1)
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return s.lower()


def _values(field: str, values, where: str) -> set[str]:
    if isinstance(values, (str, int, float)) and not isinstance(values, bool):
        values = [values]
    if not isinstance(values, (list, tuple)) or not values or any(isinstance(v, (dict, list, bool)) for v in values):
        raise ConfigError(f"{where}: filter {field!r} needs a value or a non-empty list of values")
    return {_norm(v) for v in values}


def compile_filters(spec: dict | None, dataset: str, where: str = "data.filters") -> Callable[[dict], bool] | None:
    """A predicate for one dataset's records, or None when there is nothing to filter."""
    if not spec:
        return None
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping of field to values")
    wanted = {str(f): _values(str(f), v, where) for f, v in spec.items()}

    def keep(rec: dict) -> bool:
        for f, allowed in wanted.items():
            if f not in rec or _norm(rec[f]) not in allowed:
                return False
        return True

    keep.fields = list(wanted)  # type: ignore[attr-defined]
    keep.wanted = wanted  # type: ignore[attr-defined]
    keep.dataset = dataset  # type: ignore[attr-defined]
    return keep


def apply(recs: list[dict], keep: Callable[[dict], bool] | None, where: str = "data.filters") -> list[dict]:
    if keep is None:
        return recs
    for f in keep.fields:  # type: ignore[attr-defined]
        if recs and not any(f in r for r in recs):
            known = sorted({k for r in recs[:50] for k in r if not k.startswith("_") and k not in ("prompt", "question")})
            raise ConfigError(f"{where}: {keep.dataset} records have no field {f!r} "  # type: ignore[attr-defined]
                              f"(fields: {', '.join(known)})")
    kept = [r for r in recs if keep(r)]
    if not recs:
        return kept
    for f, allowed in keep.wanted.items():  # type: ignore[attr-defined]
        have = {_norm(r[f]) for r in recs if f in r}
        missing = sorted(allowed - have)
        if missing and (not kept or not allowed & have):
            raise ConfigError(f"{where}: no {keep.dataset} record has {f} {', '.join(missing)}; "  # type: ignore[attr-defined]
                              f"its values: {_listing(have)}")
        if missing:
            from rlvr.messages import warn

            warn(f"{where}: no {keep.dataset} record has {f} {', '.join(missing)} "  # type: ignore[attr-defined]
                 f"(its values: {_listing(have)}); kept {len(kept)} of {len(recs)}")
    if not kept:
        raise ConfigError(f"{where}: no {keep.dataset} record passes all of the filters "  # type: ignore[attr-defined]
                          f"({'; '.join(f'{f}: ' + ', '.join(sorted(v)) for f, v in keep.wanted.items())})")
    return kept


def _listing(values: set[str], most: int = 20) -> str:
    ordered = sorted(values, key=lambda v: (not v.isdigit(), int(v) if v.isdigit() else 0, v))
    return ", ".join(ordered[:most]) + (f" ... ({len(ordered)} values)" if len(ordered) > most else "")


def per_dataset(spec: dict | None, names: list[str], where: str = "data.filters") -> dict[str, dict]:
    """{dataset: {field: values}} from either config form (see the module docstring)."""
    if not spec:
        return {}
    if not isinstance(spec, dict):
        raise ConfigError(f"{where}: expected a mapping")
    if all(k in names and isinstance(v, dict) for k, v in spec.items()):
        return dict(spec)
    if any(isinstance(v, dict) for v in spec.values()):
        bad = next(k for k, v in spec.items() if isinstance(v, dict) and k not in names)
        raise ConfigError(f"{where}: {bad} is not a dataset of this run")
    if len(names) != 1:
        raise ConfigError(f"{where}: with several datasets write {{DATASET: {{FIELD: VALUES}}}}")
    return {names[0]: dict(spec)}


def parse_filter(text: str) -> tuple[str | None, str, list[str]]:
    """'[DATASET.]FIELD=V1,V2' -> (dataset or None, field, values)."""
    key, sep, vals = text.partition("=")
    values = [v.strip() for v in vals.split(",") if v.strip()]
    if not sep or not key.strip() or not values:
        raise ConfigError(f"--filter {text!r}: expected [DATASET.]FIELD=VALUE[,VALUE...]")
    ds, dot, field = key.strip().rpartition(".")
    return (canonical(ds) or None) if dot else None, field, values
