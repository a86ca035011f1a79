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

The page is self-contained (inline CSS, SVG drawn by a small inline script, the data as JSON
in the page), needs no server and no network; several runs are overlaid in one colour each.
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


def run_data(run_dir: str, label: str, color: str, max_points: int, extra_evals: list[str], only_run: bool) -> dict:
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
            "summary": summary, "info": info, "evals": evals}


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


def render(runs: list[dict], title: str) -> bytes:
    payload = {"runs": runs, "training": [[t, list(c)] for t, c in TRAINING]}
    data = orjson.dumps(payload).replace(b"</", b"<\\/")   # never closes the script element early
    page = (_PAGE.replace("@TITLE@", html.escape(title))
            .replace("@SUMMARY@", _table(runs, "summary"))
            .replace("@INFO@", _table(runs, "info"))
            .replace("@PATHS@", "".join(f"<li>{html.escape(r['path'])}</li>" for r in runs)))
    head, tail = page.split("@DATA@")
    return head.encode() + data + tail.encode()


def build_report(run_dirs: list[str], out: str, labels: list[str] | None = None, title: str | None = None,
                 max_points: int = MAX_POINTS, evals: list[str] | None = None) -> str:
    """Write the report page of run_dirs to `out` (atomically); returns out."""
    from rlvr.records import atomic_file

    labels = list(labels or [])
    runs = []
    for i, rd in enumerate(run_dirs):
        label = labels[i] if i < len(labels) else os.path.basename(os.path.normpath(rd))
        runs.append(run_data(rd, label, PALETTE[i % len(PALETTE)], max_points, list(evals or []), len(run_dirs) == 1))
    page = render(runs, title or "rlvr report: " + ", ".join(r["name"] for r in runs))
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
.grid { display: flex; flex-wrap: wrap; gap: 12px; }
.chart { border: 1px solid #e3e3e3; border-radius: 4px; padding: 6px; width: 420px; }
.chart h3 { font-size: 13px; margin: 0 0 4px; font-weight: 600; }
.chart svg { display: block; }
.legend { font-size: 11px; color: #444; margin-top: 2px; }
.legend span { margin-right: 10px; white-space: nowrap; }
.readout { font-size: 11px; color: #555; min-height: 14px; }
.note { color: #666; font-size: 12px; }
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
  function ticks(lo, hi, n) {
    if (!(hi > lo)) { var d = Math.abs(lo) || 1; lo -= d / 2; hi += d / 2; }
    var step = Math.pow(10, Math.floor(Math.log10((hi - lo) / n)));
    var err = (hi - lo) / n / step;
    if (err >= 7.5) step *= 10; else if (err >= 3.5) step *= 5; else if (err >= 1.5) step *= 2;
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
    var xt = ticks(xmin, xmax, 5), yt = ticks(ymin, ymax, 4);
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
      var r = svg.getBoundingClientRect(), px = ev.clientX - r.left, parts = [];
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
