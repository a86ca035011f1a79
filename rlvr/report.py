"""rlvr-report's library: one static HTML page over run folders and their evaluations.

    build_report(["results/a", "results/b"], "report.html", labels=["S=0", "S=1"])

What a run contributes (read-only; a run still training is read as it is):
- traces/trace.jsonl, read as a stream and downsampled (min and max of each bucket of lines,
  so a spike survives; at most `max_points` buckets per metric), so a trace of hundreds of MB
  still makes a page of a few MB: training curves (reward, KL, entropy, lengths, the shares
  of all-correct and all-wrong groups, staleness, step time), any metric on demand.
- the summary table, from every line (not the downsampled ones): steps, final reward (mean
  of the last 10 steps), median step time, samples/s, filtered groups (share of the groups
  drawn whose rewards were all equal), token staleness (mean policy-version lag).
- evaluations per checkpoint: validations inside training (RUN/val/), rlvr-eval summaries
  and lm-eval results found beside the run (RUN/evals/, where rlvr-eval --watch and the cloud
  jobs write them) or in the folders of `evals` whose checkpoint names hold the run's folder
  name (all of them for a one-run report); each score is placed at the step in its checkpoint
  name (step_000100, <run>_step100). rlvr.eval.table reads them, as rlvr-eval --table does.
- pass@k curves from the summaries' pass@k metrics (first and last evaluated step).
- config.yaml and run.json: model, data, status, commit.
- what the run did inside (rlvr.report_timeline): the timeline of traces/spans.jsonl for a
  chosen step range (each actor a lane, spans coloured by kind, details on hover), the step
  time per kind over the run, the figures of the trace (MFU, tokens/s, memory per actor, the
  engines' statistics, queue times, sample fates), the fates per policy version
  (traces/fates.jsonl) and the stall reports (RUN/stalls/).

The page is self-contained (inline CSS, SVG and a canvas drawn by a small inline script, the
data as JSON in the page), needs no server and no network; several runs are overlaid in one
colour each. rlvr.report_serve serves the same page live (rlvr-report --serve).
"""

from __future__ import annotations

import html
import math
import os
import re
import statistics
from array import array
from collections import deque
from dataclasses import dataclass, field

import orjson

from rlvr.errors import BadInput, Failure

MAX_POINTS = 1000
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
           "#17becf")
# (title, candidate metric names: the first a run has is drawn)
TRAINING = (
    ("reward", ("reward/mean",)),
    ("KL to the reference", ("loss/kl",)),
    ("entropy", ("entropy",)),
    ("completion length (tokens)", ("completions/mean_length",)),
    ("share of all-correct groups", ("reward/frac_all_correct",)),
    ("share of all-wrong groups", ("reward/frac_all_wrong",)),
    ("share of groups with equal rewards", ("reward/frac_zero_std",)),
    ("staleness (policy versions)", ("staleness/token_mean", "staleness/mean")),
    ("truncated completions", ("completions/clipped_ratio",)),
    ("step time (s)", ("time/step_s",)),
    ("samples/s", ("throughput/samples_per_s",)),
)
# the figures of a step (rlvr.train.figures): a chart per metric, a series per run (and actor)
FIGURES = ("mfu/", "throughput/", "memory/", "engine/", "queue/", "fates/")
_STEP_RE = (re.compile(r"(?:^|[/_\-])step_?0*(\d+)(?:$|[/_\-])"), re.compile(r"_step0*(\d+)"))


# --------------------------------------------------------------------------- traces


def count_lines(path: str) -> int:
    n = 0
    with open(path, "rb") as fh:
        while chunk := fh.read(1 << 22):
            n += chunk.count(b"\n")
    return n


class _Decimator:
    """Per metric, the min and max point of each bucket of `size` lines (the last point kept)."""

    def __init__(self, size: int):
        self.size = max(1, size)
        self.out: dict[str, list[tuple[float, float]]] = {}
        self.cur: dict[str, list] = {}       # metric -> [bucket, (x, y) min, (x, y) max, (x, y) last]

    def add(self, line_no: int, x: float, key: str, y: float) -> None:
        b = line_no // self.size
        st = self.cur.get(key)
        if st is None or st[0] != b:
            if st is not None:
                self._flush(key, st)
            self.cur[key] = [b, (x, y), (x, y), (x, y)]
            return
        if y < st[1][1]:
            st[1] = (x, y)
        if y > st[2][1]:
            st[2] = (x, y)
        st[3] = (x, y)

    def _flush(self, key: str, st: list, last: bool = False) -> None:
        pts = {st[1], st[2]} | ({st[3]} if last else set())
        self.out.setdefault(key, []).extend(sorted(pts))

    def result(self) -> dict[str, list[tuple[float, float]]]:
        for key, st in self.cur.items():
            self._flush(key, st, last=True)
        self.cur = {}
        return self.out


@dataclass
class TraceData:
    series: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    lines: int = 0
    steps: int = 0
    step_times: array = field(default_factory=lambda: array("d"))
    last_rewards: deque = field(default_factory=lambda: deque(maxlen=10))
    drawn: float = 0.0
    filtered: float = 0.0
    staleness_sum: float = 0.0
    staleness_n: int = 0
    samples: float | None = None
    elapsed: float | None = None


def _num(v) -> float | None:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return None
    v = float(v)
    return v if math.isfinite(v) else None


def read_trace(path: str, max_points: int = MAX_POINTS) -> TraceData:
    """A trace.jsonl, streamed: downsampled series (x = step) and exact summary statistics.
    A torn last line (being written) is ignored; a line that is not a JSON object is bad input
    at FILE:LINE (exit 3)."""
    total = count_lines(path)
    dec = _Decimator(math.ceil(total / max(1, max_points)) if total else 1)
    td = TraceData(lines=total)
    with open(path, "rb") as fh:
        for n, ln in enumerate(fh):
            if not ln.endswith(b"\n"):
                break
            if not ln.strip():
                continue
            try:
                row = orjson.loads(ln)
            except orjson.JSONDecodeError:
                raise BadInput(f"{path}:{n + 1}: invalid JSON") from None
            if not isinstance(row, dict):
                raise BadInput(f"{path}:{n + 1}: expected a JSON object (one step's metrics)")
            x = _num(row.get("step"))
            if x is None:
                continue
            for k, v in row.items():
                y = _num(v)
                if y is not None and k not in ("step", "policy_version"):
                    dec.add(n, x, k, y)
            if "reward/mean" not in row:      # a validation line: no step statistics
                continue
            td.steps += 1
            if (v := _num(row.get("time/step_s"))) is not None:
                td.step_times.append(v)
            td.last_rewards.append(_num(row.get("reward/mean")))
            td.drawn += _num(row.get("sampling/groups_drawn")) or 0.0
            td.filtered += _num(row.get("sampling/groups_filtered")) or 0.0
            if (v := _num(row.get("staleness/token_mean", row.get("staleness/mean")))) is not None:
                td.staleness_sum += v
                td.staleness_n += 1
            td.samples = _num(row.get("samples/total")) if "samples/total" in row else td.samples
            td.elapsed = _num(row.get("time/elapsed_s")) if "time/elapsed_s" in row else td.elapsed
    td.series = dec.result()
    return td


# --------------------------------------------------------------------------- evaluations


def step_of(label: str) -> int | None:
    """The training step in a checkpoint's name: .../step_000100, <run>_step100; None if none."""
    base = label.rstrip("/")
    for rx in _STEP_RE:
        m = rx.findall(base + "/")
        if m:
            return int(m[-1])
    return None


def evaluations(run_dir: str, run_name: str, extra: list[str], only_run: bool) -> list[dict]:
    """Scores of a run's evaluations: [{source, task, metric, step, value}] (one per step, task,
    metric and source; a later file wins)."""
    from rlvr.eval.table import collect

    found: dict[tuple, float] = {}
    roots = [(os.path.join(run_dir, "val"), "val", True), (os.path.join(run_dir, "evals"), None, True)]
    roots += [(d, None, only_run) for d in extra]
    for root, kind, mine in roots:
        if not os.path.isdir(root):
            continue
        for s in collect(root):
            if s.value is None or not math.isfinite(s.value):
                continue
            if not mine and run_name not in s.checkpoint.split(os.sep) and f"{run_name}_step" not in s.checkpoint:
                continue
            step = step_of(s.checkpoint)
            if step is None:
                continue
            src = kind or ("rlvr-eval" if os.path.basename(s.source) == "summary.json" else "lm-eval")
            found[(src, s.task, s.metric, step)] = s.value
    return [{"source": k[0], "task": k[1], "metric": k[2], "step": k[3], "value": v} for k, v in sorted(found.items())]


# --------------------------------------------------------------------------- the page


def _read_yaml(path: str) -> dict:
    import yaml

    try:
        d = yaml.safe_load(open(path))
        return d if isinstance(d, dict) else {}
    except (OSError, yaml.YAMLError):
        return {}


def _read_json(path: str) -> dict:
    try:
        d = orjson.loads(open(path, "rb").read())
        return d if isinstance(d, dict) else {}
    except (OSError, orjson.JSONDecodeError):
        return {}


def _round(v: float) -> float:
    return float(f"{v:.6g}")


def run_data(run_dir: str, label: str, color: str, max_points: int, extra_evals: list[str], only_run: bool,
             steps: tuple[int | None, int | None] = (None, None), max_spans: int = 200_000) -> dict:
    from rlvr.report_timeline import run_view

    path = os.path.join(run_dir, "traces", "trace.jsonl")
    if not os.path.isdir(run_dir):
        raise Failure(f"{run_dir}: no such run folder")
    td = read_trace(path, max_points) if os.path.exists(path) else TraceData()
    cfg = _read_yaml(os.path.join(run_dir, "config.yaml"))
    man = _read_json(os.path.join(run_dir, "run.json"))
    evals = evaluations(run_dir, os.path.basename(os.path.normpath(run_dir)), extra_evals, only_run)
    if not os.path.exists(path) and not evals:
        raise Failure(f"{run_dir}: no traces/trace.jsonl and no evaluations (not a run folder?)")
    rewards = [r for r in td.last_rewards if r is not None]
    summary = {
        "steps": td.steps,
        "final reward": statistics.fmean(rewards) if rewards else None,
        "median step time (s)": statistics.median(td.step_times) if td.step_times else None,
        "samples/s": td.samples / td.elapsed if td.samples and td.elapsed else None,
        "filtered groups": td.filtered / td.drawn if td.drawn else None,
        "token staleness": td.staleness_sum / td.staleness_n if td.staleness_n else None,
    }
    model = (cfg.get("model") or {}).get("path") if isinstance(cfg.get("model"), dict) else None
    data = cfg.get("data") if isinstance(cfg.get("data"), dict) else {}
    info = {"model": model, "data": data.get("dataset") or data.get("mix"), "status": man.get("status"),
            "started": man.get("start_time"), "ended": man.get("end_time"), "host": man.get("host"),
            "commit": (man.get("git") or {}).get("commit") if isinstance(man.get("git"), dict) else None,
            "trace lines": td.lines}
    series = {k: [[_round(x), _round(y)] for x, y in pts] for k, pts in td.series.items() if not k.startswith("val/")}
    return {"name": label, "path": os.path.abspath(run_dir), "color": color, "series": series,
            "summary": summary, "info": info, "evals": evals, "view": run_view(run_dir, steps, max_spans)}


def _cell(v) -> str:
    if v is None:
        return "&ndash;"
    if isinstance(v, float):
        return f"{v:.4g}"
    if isinstance(v, (dict, list)):
        v = orjson.dumps(v).decode()
    return html.escape(str(v))


def _table(runs: list[dict], key: str) -> str:
    cols = list(dict.fromkeys(k for r in runs for k in r[key]))
    head = "<tr><th>run</th>" + "".join(f"<th>{html.escape(c)}</th>" for c in cols) + "</tr>"
    body = "".join(f'<tr><td><span class="swatch" style="background:{r["color"]}"></span>{html.escape(r["name"])}'
                   "</td>" + "".join(f"<td>{_cell(r[key].get(c))}</td>" for c in cols) + "</tr>" for r in runs)
    return f'<table class="{key}">{head}{body}</table>'


def render(runs: list[dict], title: str, live: dict | None = None) -> bytes:
    from rlvr.train.figures import FATES
    from rlvr.train.spans import KINDS

    payload = {"runs": runs, "training": [[t, list(c)] for t, c in TRAINING], "figures": list(FIGURES),
               "kinds": list(KINDS), "fates": list(FATES), "live": live}
    data = orjson.dumps(payload).replace(b"</", b"<\\/")   # never closes the script element early
    page = (_PAGE.replace("@TITLE@", html.escape(title))
            .replace("@SUMMARY@", _table(runs, "summary"))
            .replace("@INFO@", _table(runs, "info"))
            .replace("@PATHS@", "".join(f"<li>{html.escape(r['path'])}</li>" for r in runs)))
    head, tail = page.split("@DATA@")
    return head.encode() + data + tail.encode()


def page_bytes(run_dirs: list[str], labels: list[str] | None = None, title: str | None = None,
               max_points: int = MAX_POINTS, evals: list[str] | None = None,
               steps: tuple[int | None, int | None] = (None, None), max_spans: int = 200_000,
               live: dict | None = None) -> bytes:
    """The report page of run_dirs; `steps` chooses the timeline's step range (inclusive, None:
    open), `max_spans` caps the spans it holds; `live` ({"interval_s", "stamp"}) makes the page
    poll its server (rlvr.report_serve)."""
    labels = list(labels or [])
    runs = []
    for i, rd in enumerate(run_dirs):
        label = labels[i] if i < len(labels) else os.path.basename(os.path.normpath(rd))
        runs.append(run_data(rd, label, PALETTE[i % len(PALETTE)], max_points, list(evals or []), len(run_dirs) == 1,
                             steps, max_spans))
    return render(runs, title or "rlvr report: " + ", ".join(r["name"] for r in runs), live)


def build_report(run_dirs: list[str], out: str, labels: list[str] | None = None, title: str | None = None,
                 max_points: int = MAX_POINTS, evals: list[str] | None = None,
                 steps: tuple[int | None, int | None] = (None, None), max_spans: int = 200_000) -> str:
    """Write the report page of run_dirs to `out` (atomically); returns out."""
    from rlvr.records import atomic_file

    page = page_bytes(run_dirs, labels, title, max_points, evals, steps, max_spans)
    with atomic_file(out) as fh:
        fh.write(page)
    return out


_PAGE = r"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>@TITLE@</title>
<script>
window.rlvrErrors = [];
window.addEventListener("error", function (e) {
  window.rlvrErrors.push(String(e.message || e));
  document.documentElement.setAttribute("data-errors", String(window.rlvrErrors.length));
});
</script>
<style>
body { font-family: -apple-system, "Segoe UI", Roboto, Helvetica, Arial, sans-serif; margin: 24px; color: #222; background: #fff; }
h1 { font-size: 22px; margin: 0 0 8px; } h2 { font-size: 17px; margin: 28px 0 8px; border-bottom: 1px solid #ddd; padding-bottom: 4px; }
table { border-collapse: collapse; font-size: 13px; margin: 6px 0; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: right; } th { background: #f6f6f6; }
td:first-child, th:first-child { text-align: left; }
.swatch { display: inline-block; width: 10px; height: 10px; margin-right: 6px; border-radius: 2px; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(400px, 1fr)); gap: 12px; }
.chart { border: 1px solid #e3e3e3; border-radius: 4px; padding: 6px; min-width: 0; }
.chart h3 { font-size: 13px; margin: 0 0 4px; font-weight: 600; }
.chart svg { display: block; width: 100%; height: auto; }
h3.sub { font-size: 14px; margin: 18px 0 6px; }
.timeline { border: 1px solid #e3e3e3; border-radius: 4px; padding: 6px; margin-bottom: 12px; position: relative; }
.timeline h3 { font-size: 13px; margin: 0 0 4px; font-weight: 600; }
.tl-row { display: flex; } .tl-lanes { flex: none; font-size: 11px; padding-right: 6px; }
.tl-lanes .lane { height: 18px; line-height: 18px; white-space: nowrap; text-align: right; }
.tl-plot { flex: 1; min-width: 0; } .tl-plot canvas { display: block; }
.tl-controls { font-size: 12px; margin: 4px 0; } .tl-controls input { width: 70px; font-size: 12px; }
.tip { position: absolute; pointer-events: none; background: #fffff0; border: 1px solid #999; font-size: 11px;
       padding: 3px 6px; white-space: pre; display: none; z-index: 2; }
details.stall { font-size: 12px; margin: 4px 0; } details.stall pre { max-height: 400px; overflow: auto; background: #f8f8f8; padding: 6px; }
.live { font-size: 12px; color: #2ca02c; }
.legend { font-size: 11px; color: #444; margin-top: 2px; }
.legend span { margin-right: 10px; white-space: nowrap; }
.readout { font-size: 11px; color: #555; min-height: 14px; }
.note { color: #666; font-size: 12px; } .grid > p.note { grid-column: 1 / -1; }
ul.paths { font-size: 12px; color: #555; }
select { font-size: 13px; }
</style></head>
<body>
<h1>@TITLE@</h1>
<ul class="paths">@PATHS@</ul>
<h2>Summary</h2>
@SUMMARY@
<p class="note">final reward: mean reward of the last 10 steps; samples/s: samples over wall time; filtered groups:
share of the groups drawn whose rewards were all equal; token staleness: mean policy-version lag of the trained samples.</p>
<h2>Training</h2>
<div class="grid" id="training"></div>
<h2>Inside the run</h2>
<p class="live" id="live"></p>
<h3 class="sub">Timeline</h3>
<div id="timelines"></div>
<h3 class="sub">Step time by kind (seconds during which a span of the kind was open)</h3>
<div class="grid" id="breakdown"></div>
<h3 class="sub">Figures: MFU, tokens/s, memory, engines, queue times, sample fates</h3>
<div class="grid" id="figures"></div>
<h3 class="sub">Sample fates per policy version</h3>
<div class="grid" id="fatechart"></div>
<h3 class="sub">Stall reports</h3>
<div id="stalls"></div>
<h2>Evaluation per checkpoint</h2>
<div class="grid" id="evaluation"></div>
<h2>pass@k</h2>
<div class="grid" id="passk"></div>
<h2>Any metric</h2>
<div><select id="pick"></select></div>
<div class="grid" id="explore"></div>
<h2>Runs</h2>
@INFO@
<script type="application/json" id="rlvr-data">@DATA@</script>
<script>
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("rlvr-data").textContent);
  var NS = "http://www.w3.org/2000/svg";
  var W = 420, H = 230, L = 52, R = 10, T = 8, B = 30;
  var drawn = 0;

  function el(tag, attrs, parent) {
    var e = document.createElementNS(NS, tag);
    for (var k in attrs) e.setAttribute(k, attrs[k]);
    if (parent) parent.appendChild(e);
    return e;
  }
  function ticks(lo, hi, n, integer) {
    if (!(hi > lo)) { var d = Math.abs(lo) || 1; lo -= d / 2; hi += d / 2; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
    if (integer && step < 1) step = 1;
    var out = [], start = Math.ceil(lo / step) * step;
    for (var v = start; v <= hi + step * 1e-9; v += step) out.push(Math.abs(v) < step * 1e-9 ? 0 : v);
    return {lo: lo, hi: hi, ticks: out};
  }
  function fmt(v) {
    var a = Math.abs(v);
    if (a !== 0 && (a >= 1e5 || a < 1e-3)) return v.toExponential(1);
    return String(Math.round(v * 1e4) / 1e4);
  }
  // series: [{name, color, points: [[x, y], ...], dash}]
  function chart(parent, title, series, xlabel, logx) {
    series = series.filter(function (s) { return s.points.length > 0; });
    if (!series.length) return null;
    var box = document.createElement("div"); box.className = "chart";
    var h = document.createElement("h3"); h.textContent = title; box.appendChild(h);
    var tx = function (x) { return logx ? Math.log2(x) : x; };
    var xs = [], ys = [];
    series.forEach(function (s) { s.points.forEach(function (p) { xs.push(tx(p[0])); ys.push(p[1]); }); });
    var xmin = Math.min.apply(null, xs), xmax = Math.max.apply(null, xs);
    var ymin = Math.min.apply(null, ys), ymax = Math.max.apply(null, ys);
    var xt = ticks(xmin, xmax, 5, xlabel === "step" || xlabel === "policy version"), yt = ticks(ymin, ymax, 4);
    var sx = function (x) { return L + (tx(x) - xt.lo) / (xt.hi - xt.lo) * (W - L - R); };
    var sy = function (y) { return T + (1 - (y - yt.lo) / (yt.hi - yt.lo)) * (H - T - B); };
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H});
    yt.ticks.forEach(function (v) {
      el("line", {x1: L, x2: W - R, y1: sy(v), y2: sy(v), stroke: "#eee"}, svg);
      var t = el("text", {x: L - 4, y: sy(v) + 3, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg);
      t.textContent = fmt(v);
    });
    xt.ticks.forEach(function (v) {
      var xv = logx ? Math.pow(2, v) : v;
      if (logx && Math.abs(v - Math.round(v)) > 1e-9) return;
      var x = L + (v - xt.lo) / (xt.hi - xt.lo) * (W - L - R);
      el("line", {x1: x, x2: x, y1: T, y2: H - B, stroke: "#f2f2f2"}, svg);
      var t = el("text", {x: x, y: H - B + 13, "text-anchor": "middle", "font-size": 10, fill: "#555"}, svg);
      t.textContent = fmt(xv);
    });
    el("rect", {x: L, y: T, width: W - L - R, height: H - T - B, fill: "none", stroke: "#bbb"}, svg);
    var xl = el("text", {x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle", "font-size": 10, fill: "#333"}, svg);
    xl.textContent = xlabel;
    series.forEach(function (s) {
      var pts = s.points.slice().sort(function (a, b) { return a[0] - b[0]; });
      var d = pts.map(function (p, i) { return (i ? "L" : "M") + sx(p[0]).toFixed(1) + " " + sy(p[1]).toFixed(1); }).join("");
      var attrs = {d: d, fill: "none", stroke: s.color, "stroke-width": 2, "class": "curve"};
      if (s.dash) attrs["stroke-dasharray"] = "5 3";
      el("path", attrs, svg);
      if (pts.length <= 40) pts.forEach(function (p) {
        el("circle", {cx: sx(p[0]), cy: sy(p[1]), r: 2.5, fill: s.color}, svg);
      });
      drawn++;
    });
    box.appendChild(svg);
    var readout = document.createElement("div"); readout.className = "readout"; box.appendChild(readout);
    svg.addEventListener("mousemove", function (ev) {
      var r = svg.getBoundingClientRect(), px = (ev.clientX - r.left) * W / (r.width || W), parts = [];
      series.forEach(function (s) {
        var best = null;
        s.points.forEach(function (p) { if (best === null || Math.abs(sx(p[0]) - px) < Math.abs(sx(best[0]) - px)) best = p; });
        if (best) parts.push(s.name + ": " + fmt(best[1]) + " @ " + fmt(best[0]));
      });
      readout.textContent = parts.join("   ");
    });
    var lg = document.createElement("div"); lg.className = "legend";
    series.forEach(function (s) {
      var sp = document.createElement("span");
      var sw = document.createElement("span"); sw.className = "swatch"; sw.style.background = s.color;
      sp.appendChild(sw); sp.appendChild(document.createTextNode(s.name)); lg.appendChild(sp);
    });
    box.appendChild(lg);
    parent.appendChild(box);
    return box;
  }
  function empty(parent, text) {
    var p = document.createElement("p"); p.className = "note"; p.textContent = text; parent.appendChild(p);
  }

  var runs = DATA.runs;
  // training curves
  var training = document.getElementById("training"), nTraining = 0;
  DATA.training.forEach(function (panel) {
    var series = [], used = [];
    runs.forEach(function (r) {
      for (var i = 0; i < panel[1].length; i++) {
        var pts = r.series[panel[1][i]];
        if (pts && pts.length) { series.push({name: r.name, color: r.color, points: pts}); used.push(panel[1][i]); break; }
      }
    });
    var names = used.filter(function (v, i) { return used.indexOf(v) === i; });
    if (chart(training, panel[0] + (names.length ? " (" + names.join(", ") + ")" : ""), series, "step")) nTraining++;
  });
  if (!nTraining) empty(training, "No training metrics yet.");

  // ---- inside the run: timeline, step time by kind, figures, fates, stalls
  var KCOL = ["#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7", "#9c755f",
              "#bab0ac", "#86bcb6", "#d37295", "#b6992d", "#499894", "#79706e"];
  function kindColor(kind) {
    var j = DATA.kinds.indexOf(kind);
    if (j < 0) { var h = 0; for (var i = 0; i < kind.length; i++) h = (h * 31 + kind.charCodeAt(i)) >>> 0; j = h; }
    return KCOL[j % KCOL.length];
  }
  function div(cls, parent, text) {
    var d = document.createElement("div"); if (cls) d.className = cls;
    if (text !== undefined) d.textContent = text; if (parent) parent.appendChild(d); return d;
  }
  var spansDrawn = 0, LH = 18, AX = 16;
  function timeline(parent, run) {
    var tl = run.view.timeline, S = tl.spans, n = S.a.length;
    if (!n) return false;
    var box = div("timeline", parent); box.setAttribute("data-run", run.name);
    box.setAttribute("data-last-step", tl.steps ? String(tl.steps[1]) : "");
    var h = document.createElement("h3"); box.appendChild(h);
    var ctl = div("tl-controls", box), lo0 = tl.steps ? tl.steps[0] : 0, hi0 = tl.steps ? tl.steps[1] : 0;
    var kept = /steps=(-?\d+):(-?\d+)/.exec(location.hash);   // a range chosen before a (live) reload
    if (kept) { lo0 = Number(kept[1]); hi0 = Number(kept[2]); }
    ctl.appendChild(document.createTextNode("steps "));
    var from = document.createElement("input"), to = document.createElement("input");
    from.type = to.type = "number"; from.value = lo0; to.value = hi0; from.className = "from"; to.className = "to";
    ctl.appendChild(from); ctl.appendChild(document.createTextNode(" to ")); ctl.appendChild(to);
    var btn = document.createElement("button"); btn.textContent = "draw"; ctl.appendChild(btn);
    var row = div("tl-row", box), lanes = div("tl-lanes", row), plot = div("tl-plot", row);
    var laneEls = tl.actors.map(function (a) { var d = div("lane", lanes, a); d.setAttribute("data-actor", a); return d; });
    var canvas = document.createElement("canvas"); plot.appendChild(canvas);
    var lg = div("legend", box);
    tl.kinds.forEach(function (k) {
      var sp = document.createElement("span"), sw = document.createElement("span");
      sw.className = "swatch"; sw.style.background = kindColor(k); sp.appendChild(sw);
      sp.appendChild(document.createTextNode(k)); lg.appendChild(sp);
    });
    var tip = div("tip", box), cur = {idx: [], t0: 0, t1: 1, w: 1};
    function draw(lo, hi) {
      var idx = [], t0 = Infinity, t1 = -Infinity, counts = tl.actors.map(function () { return 0; });
      for (var i = 0; i < n; i++) {
        var st = S.st[i];
        if (st !== null && (st < lo || st > hi)) continue;
        idx.push(i); counts[S.a[i]]++;
        if (S.s[i] < t0) t0 = S.s[i]; if (S.e[i] > t1) t1 = S.e[i];
      }
      if (!(t1 > t0)) { t0 = isFinite(t0) ? t0 : 0; t1 = t0 + 1; }
      var w = Math.max(200, plot.clientWidth || 800), hgt = tl.actors.length * LH + AX, dpr = window.devicePixelRatio || 1;
      canvas.width = w * dpr; canvas.height = hgt * dpr; canvas.style.width = w + "px"; canvas.style.height = hgt + "px";
      var ctx = canvas.getContext("2d"); ctx.scale(dpr, dpr); ctx.clearRect(0, 0, w, hgt);
      for (var l = 0; l < tl.actors.length; l++) { ctx.fillStyle = l % 2 ? "#fafafa" : "#f2f2f2"; ctx.fillRect(0, l * LH, w, LH); }
      var sc = w / (t1 - t0), colors = tl.kinds.map(kindColor);
      idx.forEach(function (i) {
        ctx.globalAlpha = S.n[i] > 1 ? 0.55 : 0.9; ctx.fillStyle = colors[S.k[i]];
        ctx.fillRect((S.s[i] - t0) * sc, S.a[i] * LH + 2, Math.max(1, (S.e[i] - S.s[i]) * sc), LH - 4);
      });
      ctx.globalAlpha = 1; ctx.fillStyle = "#555"; ctx.font = "10px sans-serif";
      var xt = ticks(0, t1 - t0, 6);
      xt.ticks.forEach(function (v) {
        var x = v * sc; if (x < 0 || x > w - 10) return;
        ctx.fillRect(x, tl.actors.length * LH, 1, 4); ctx.fillText(fmt(v) + " s", x + 2, tl.actors.length * LH + 12);
      });
      laneEls.forEach(function (d, j) { d.setAttribute("data-count", String(counts[j])); });
      spansDrawn += idx.length - cur.idx.length;
      cur = {idx: idx, t0: t0, t1: t1, w: w};
      box.setAttribute("data-spans", String(idx.length));
      h.textContent = run.name + ": " + idx.length + " spans, steps " + lo + " to " + hi +
        (tl.total > n ? " (the latest " + n + " of " + tl.total + " spans in the page)" : "");
      document.documentElement.setAttribute("data-spans", String(spansDrawn));
    }
    btn.addEventListener("click", function () {
      draw(Number(from.value), Number(to.value));
      history.replaceState(null, "", "#steps=" + Number(from.value) + ":" + Number(to.value));
    });
    canvas.addEventListener("mousemove", function (ev) {
      var r = canvas.getBoundingClientRect(), px = ev.clientX - r.left, py = ev.clientY - r.top;
      var lane = Math.floor(py / LH), t = cur.t0 + px / cur.w * (cur.t1 - cur.t0), tol = 3 / cur.w * (cur.t1 - cur.t0);
      var best = -1;
      cur.idx.forEach(function (i) {
        if (S.a[i] === lane && S.s[i] <= t + tol && S.e[i] >= t - tol &&
            (best < 0 || S.e[i] - S.s[i] < S.e[best] - S.s[best])) best = i;
      });
      if (best < 0) { tip.style.display = "none"; return; }
      var b = best;
      tip.textContent = tl.actors[S.a[b]] + ": " + tl.kinds[S.k[b]] + "\nstep " + S.st[b] + ", policy version " + S.v[b] +
        "\nstart +" + fmt(S.s[b]) + " s, " + fmt(S.e[b] - S.s[b]) + " s" + (S.n[b] > 1 ? "\noutline of " + S.n[b] + " spans" : "") +
        (S.ids[b] ? "\nids " + S.ids[b] : "");
      var br = box.getBoundingClientRect();
      tip.style.left = (ev.clientX - br.left + 12) + "px"; tip.style.top = (ev.clientY - br.top + 12) + "px";
      tip.style.display = "block";
    });
    canvas.addEventListener("mouseleave", function () { tip.style.display = "none"; });
    draw(lo0, hi0);
    return true;
  }
  var timelines = document.getElementById("timelines"), nTl = 0;
  runs.forEach(function (r) { if (r.view && timeline(timelines, r)) nTl++; });
  if (!nTl) empty(timelines, "No spans (traces/spans.jsonl) in the chosen steps.");
  document.documentElement.setAttribute("data-spans", String(spansDrawn));

  var breakdownEl = document.getElementById("breakdown"), nBd = 0;
  runs.forEach(function (r) {
    var bd = r.view ? r.view.breakdown : null;
    if (!bd || !bd.steps.length) return;
    var series = bd.kinds.map(function (k) {
      return {name: k, color: kindColor(k), points: bd.steps.map(function (s, j) { return [s, bd.seconds[k][j]]; })};
    });
    if (chart(breakdownEl, r.name + ": seconds per step", series, "step")) nBd++;
  });
  if (!nBd) empty(breakdownEl, "No spans with steps yet.");

  var figuresEl = document.getElementById("figures"), groups = {}, glist = [];
  runs.forEach(function (r) {
    Object.keys(r.series).sort().forEach(function (k) {
      if (!DATA.figures.some(function (p) { return k.indexOf(p) === 0; })) return;
      var parts = k.split("/"), g = k, who = r.name;
      if (parts.length >= 3) { g = parts[0] + "/*/" + parts.slice(2).join("/"); who = r.name + " " + parts[1]; }
      if (!(g in groups)) { groups[g] = []; glist.push(g); }
      groups[g].push({name: who, color: r.color, points: r.series[k], dash: groups[g].length % 2 === 1});
    });
  });
  glist.forEach(function (g) { chart(figuresEl, g, groups[g], "step"); });
  if (!glist.length) empty(figuresEl, "No figures in the trace (mfu/, throughput/, memory/, engine/, queue/, fates/).");

  var FCOL = {trained: "#59a14f", zero_variance: "#edc948", stale: "#e15759", timed_out: "#b07aa1", masked: "#bab0ac"};
  function fateChart(parent, run) {
    var rows = run.view ? run.view.fates : [];
    if (!rows.length) return false;
    var box = div("chart", parent); var hh = document.createElement("h3"); hh.textContent = run.name + ": samples per policy version"; box.appendChild(hh);
    var svg = el("svg", {width: W, height: H, viewBox: "0 0 " + W + " " + H}), top = 0;
    rows.forEach(function (r) { var t = 0; DATA.fates.forEach(function (f) { t += r[f] || 0; }); if (t > top) top = t; });
    var yt = ticks(0, top || 1, 4), bw = (W - L - R) / rows.length;
    var sy = function (y) { return T + (1 - (y - yt.lo) / (yt.hi - yt.lo)) * (H - T - B); };
    yt.ticks.forEach(function (v) {
      el("line", {x1: L, x2: W - R, y1: sy(v), y2: sy(v), stroke: "#eee"}, svg);
      el("text", {x: L - 4, y: sy(v) + 3, "text-anchor": "end", "font-size": 10, fill: "#555"}, svg).textContent = fmt(v);
    });
    var every = Math.max(1, Math.ceil(rows.length / 12));
    rows.forEach(function (r, i) {
      var acc = 0, x = L + i * bw;
      DATA.fates.forEach(function (f) {
        var v = r[f] || 0; if (!v) return;
        var rect = el("rect", {x: x + bw * 0.1, width: Math.max(1, bw * 0.8), y: sy(acc + v), height: sy(acc) - sy(acc + v),
                               fill: FCOL[f] || "#888", "class": "fate-bar", "data-version": r.policy_version, "data-fate": f}, svg);
        el("title", {}, rect).textContent = "version " + r.policy_version + ": " + v + " " + f;
        acc += v;
      });
      if (i % every === 0) el("text", {x: x + bw / 2, y: H - B + 13, "text-anchor": "middle", "font-size": 10, fill: "#555"}, svg).textContent = r.policy_version;
    });
    el("text", {x: (L + W - R) / 2, y: H - 3, "text-anchor": "middle", "font-size": 10, fill: "#333"}, svg).textContent = "policy version";
    box.appendChild(svg);
    var lg = div("legend", box);
    DATA.fates.forEach(function (f) {
      var sp = document.createElement("span"), sw = document.createElement("span");
      sw.className = "swatch"; sw.style.background = FCOL[f]; sp.appendChild(sw); sp.appendChild(document.createTextNode(f)); lg.appendChild(sp);
    });
    return true;
  }
  var fateEl = document.getElementById("fatechart"), nF = 0;
  runs.forEach(function (r) { if (fateChart(fateEl, r)) nF++; });
  if (!nF) empty(fateEl, "No sample fates (traces/fates.jsonl).");

  var stallsEl = document.getElementById("stalls"), nS = 0;
  runs.forEach(function (r) {
    (r.view ? r.view.stalls : []).forEach(function (st) {
      var d = document.createElement("details"); d.className = "stall";
      var sm = document.createElement("summary"); sm.textContent = r.name + " " + st.name + ": " + st.text.split("\n")[0];
      var pre = document.createElement("pre"); pre.textContent = st.text;
      d.appendChild(sm); d.appendChild(pre); stallsEl.appendChild(d); nS++;
    });
  });
  if (!nS) empty(stallsEl, "No stall reports.");
  document.documentElement.setAttribute("data-stalls", String(nS));

  if (DATA.live) {
    var liveEl = document.getElementById("live"), stamp = DATA.live.stamp;
    var follow = document.createElement("input"); follow.type = "checkbox"; follow.id = "follow";
    follow.checked = sessionStorage.getItem("rlvr-follow") !== "0";
    follow.addEventListener("change", function () { sessionStorage.setItem("rlvr-follow", follow.checked ? "1" : "0"); });
    var fl = document.createElement("label"); fl.appendChild(follow); fl.appendChild(document.createTextNode(" follow the run"));
    liveEl.textContent = "live: built " + new Date().toLocaleTimeString() + ", checked every " + DATA.live.interval_s + " s ";
    liveEl.appendChild(fl);
    setInterval(function () {
      if (!follow.checked) return;
      fetch("stamp", {cache: "no-store"}).then(function (r) { return r.ok ? r.text() : null; }).then(function (t) {
        if (t && t !== stamp) { stamp = t; location.reload(); }
      }).catch(function () { liveEl.textContent = "live: the server does not answer (the run's page as last seen)"; });
    }, DATA.live.interval_s * 1000);
  }

  // evaluation per checkpoint: one chart per (task, metric), a series per run and source
  var evaluation = document.getElementById("evaluation"), keys = [], byKey = {};
  runs.forEach(function (r) {
    r.evals.forEach(function (e) {
      if (/^pass@\d+$/.test(e.metric) && e.metric !== "pass@1") return;
      var k = e.task + " | " + e.metric;
      if (!(k in byKey)) { byKey[k] = {}; keys.push(k); }
      var sk = r.name + "\u0000" + e.source;
      (byKey[k][sk] = byKey[k][sk] || {name: r.name + " (" + e.source + ")", color: r.color,
                                         dash: e.source !== "val", points: []}).points.push([e.step, e.value]);
    });
  });
  keys.sort();
  keys.forEach(function (k) {
    var s = []; for (var sk in byKey[k]) s.push(byKey[k][sk]);
    chart(evaluation, k, s, "step");
  });
  if (!keys.length) empty(evaluation, "No evaluations found (RUN/val/, RUN/evals/ or --evals).");

  // pass@k: pass@k against k, for the first and the last evaluated step of each run and task
  var passk = document.getElementById("passk"), tasks = {}, tasklist = [];
  runs.forEach(function (r) {
    r.evals.forEach(function (e) {
      var m = /^pass@(\d+)$/.exec(e.metric);
      if (!m) return;
      var key = e.task + "\u0000" + e.source;
      if (!(key in tasks)) { tasks[key] = {}; tasklist.push(key); }
      var t = tasks[key], rk = r.name;
      t[rk] = t[rk] || {color: r.color, steps: {}};
      (t[rk].steps[e.step] = t[rk].steps[e.step] || []).push([Number(m[1]), e.value]);
    });
  });
  var nPassk = 0;
  tasklist.sort().forEach(function (key) {
    var series = [];
    for (var rk in tasks[key]) {
      var st = Object.keys(tasks[key][rk].steps).map(Number).sort(function (a, b) { return a - b; });
      var pick = st.length > 1 ? [st[0], st[st.length - 1]] : st;
      pick.forEach(function (step, i) {
        var pts = tasks[key][rk].steps[step];
        if (pts.length > 1) series.push({name: rk + " step " + step, color: tasks[key][rk].color, dash: i === 0 && pick.length > 1, points: pts});
      });
    }
    var parts = key.split("\u0000");
    if (chart(passk, parts[0] + " (" + parts[1] + ")", series, "k", true)) nPassk++;
  });
  if (!nPassk) empty(passk, "No pass@k results (eval.n in training, or rlvr-eval --pass-at-k).");

  // any metric
  var pick = document.getElementById("pick"), explore = document.getElementById("explore"), all = [];
  runs.forEach(function (r) { for (var k in r.series) if (all.indexOf(k) < 0) all.push(k); });
  all.sort().forEach(function (k) { var o = document.createElement("option"); o.value = o.textContent = k; pick.appendChild(o); });
  function show() {
    explore.innerHTML = "";
    var k = pick.value, s = [];
    runs.forEach(function (r) { if (r.series[k]) s.push({name: r.name, color: r.color, points: r.series[k]}); });
    chart(explore, k, s, "step");
  }
  pick.addEventListener("change", show);
  if (all.length) { pick.value = all.indexOf("reward/mean") >= 0 ? "reward/mean" : all[0]; show(); }
  document.documentElement.setAttribute("data-curves", String(drawn));
  document.documentElement.setAttribute("data-state", "rendered");
})();
</script>
</body></html>
"""
