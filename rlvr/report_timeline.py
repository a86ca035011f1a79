"""The run report's view into a run (rlvr.report calls it): the timeline of its spans, the
step-time breakdown, the sample fates per policy version and the stall reports.

    run_view("results/run", steps=(10, 20), max_spans=200_000)
    -> {"timeline": {...}, "breakdown": {...}, "fates": [...], "stalls": [...]}

- timeline: the spans of traces/spans.jsonl (rlvr.train.spans) whose step is in `steps`, as
  columns (lane = actor, kind, start and end in seconds from the first start, step, version, how
  many spans an outline stands for, the first ids), at most `max_spans` of them (the latest
  ones when there are more);
- breakdown: per step and kind, the seconds during which at least one span of that kind was open
  (the union over actors, so parallel engines count once), from every span of the file;
- fates: traces/fates.jsonl summed per policy version;
- stalls: RUN_DIR/stalls/*.txt (the newest MAX_STALLS, each cut at MAX_STALL_CHARS).
"""

from __future__ import annotations

import os
from collections import defaultdict

from rlvr.records import complete_objects
from rlvr.train.figures import FATES
from rlvr.train.spans import KINDS, read_spans

MAX_STALLS = 20
MAX_STALL_CHARS = 20000
_LANE_ORDER = ("driver", "trainer", "engine", "verif", "teacher", "judge")


def _lane_key(name: str) -> tuple:
    for i, p in enumerate(_LANE_ORDER):
        if name.startswith(p):
            return (i, len(name), name)
    return (len(_LANE_ORDER), len(name), name)


def _union(intervals: list[tuple[float, float]]) -> float:
    total, cur_s, cur_e = 0.0, None, None
    for s, e in sorted(intervals):
        if cur_e is None or s > cur_e:
            if cur_e is not None:
                total += cur_e - cur_s
            cur_s, cur_e = s, e
        elif e > cur_e:
            cur_e = e
    return total + (cur_e - cur_s if cur_e is not None else 0.0)


def breakdown(spans: list[dict]) -> dict:
    """{"kinds": [...], "steps": [...], "seconds": {kind: [per step]}} (kind "step" left out: it is
    the whole)."""
    by: dict[tuple, list] = defaultdict(list)
    for r in spans:
        if isinstance(r.get("step"), int) and r["kind"] != "step":
            by[(r["step"], r["kind"])].append((r["start"], r["end"]))
    steps = sorted({k[0] for k in by})
    kinds = _kinds({k[1] for k in by})
    return {"kinds": kinds, "steps": steps,
            "seconds": {k: [round(_union(by.get((s, k), [])), 4) for s in steps] for k in kinds}}


def _kinds(found) -> list[str]:
    return [k for k in KINDS if k in found] + sorted(set(found) - set(KINDS))


def timeline(spans: list[dict], steps: tuple[int | None, int | None], max_spans: int) -> dict:
    lo, hi = steps
    sel = [r for r in spans if not isinstance(r.get("step"), int)
           or ((lo is None or r["step"] >= lo) and (hi is None or r["step"] <= hi))]
    total = len(sel)
    sel.sort(key=lambda r: r["start"])
    sel = sel[-max_spans:] if max_spans > 0 else []
    actors = sorted({r["actor"] for r in sel}, key=_lane_key)
    kinds = _kinds({r["kind"] for r in sel})
    lane = {a: i for i, a in enumerate(actors)}
    kind = {k: i for i, k in enumerate(kinds)}
    t0 = sel[0]["start"] if sel else 0.0
    cols = {"a": [], "k": [], "s": [], "e": [], "st": [], "v": [], "n": [], "ids": []}
    for r in sel:
        cols["a"].append(lane[r["actor"]])
        cols["k"].append(kind[r["kind"]])
        cols["s"].append(round(r["start"] - t0, 4))
        cols["e"].append(round(r["end"] - t0, 4))
        cols["st"].append(r.get("step"))
        cols["v"].append(r.get("version"))
        cols["n"].append(r.get("n", 1))
        ids = r.get("ids")
        cols["ids"].append(", ".join(map(str, ids[:4])) + (" ..." if len(ids) > 4 or r.get("n_ids") else "")
                           if ids else "")
    st = [s for s in cols["st"] if isinstance(s, int)]
    return {"t0": t0, "actors": actors, "kinds": kinds, "spans": cols, "total": total,
            "steps": [min(st), max(st)] if st else None}


def fates(path: str) -> list[dict]:
    """traces/fates.jsonl summed per policy version: [{"policy_version", <fate>: n}]."""
    per: dict[int, dict] = {}
    for r in complete_objects(path):
        v = r.get("policy_version")
        if not isinstance(v, int):
            continue
        row = per.setdefault(v, dict.fromkeys(FATES, 0))
        for f in FATES:
            if isinstance(r.get(f), (int, float)):
                row[f] += r[f]
    return [{"policy_version": v, **c} for v, c in sorted(per.items())]


def stalls(run_dir: str) -> list[dict]:
    d = os.path.join(run_dir, "stalls")
    if not os.path.isdir(d):
        return []
    names = sorted(n for n in os.listdir(d) if n.endswith(".txt"))[-MAX_STALLS:]
    out = []
    for n in names:
        with open(os.path.join(d, n), errors="replace") as fh:
            text = fh.read(MAX_STALL_CHARS + 1)
        out.append({"name": n, "text": text[:MAX_STALL_CHARS] + ("\n[...]" if len(text) > MAX_STALL_CHARS else "")})
    return out


def run_view(run_dir: str, steps: tuple[int | None, int | None] = (None, None), max_spans: int = 200_000) -> dict:
    tr = os.path.join(run_dir, "traces")
    sp = os.path.join(tr, "spans.jsonl")
    spans = read_spans(sp) if os.path.exists(sp) else []
    fp = os.path.join(tr, "fates.jsonl")
    return {"timeline": timeline(spans, steps, max_spans), "breakdown": breakdown(spans),
            "fates": fates(fp) if os.path.exists(fp) else [], "stalls": stalls(run_dir)}


def stamp(run_dirs: list[str]) -> str:
    """Changes whenever a file the page reads changes (sizes and times of the traces and stalls)."""
    parts = []
    for rd in run_dirs:
        for sub in ("traces", "stalls", "val", "evals"):
            d = os.path.join(rd, sub)
            if not os.path.isdir(d):
                continue
            for name in sorted(os.listdir(d)):
                try:
                    st = os.stat(os.path.join(d, name))
                except OSError:
                    continue
                parts.append(f"{sub}/{name}:{st.st_size}:{st.st_mtime_ns}")
    import hashlib

    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:16]
