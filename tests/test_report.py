"""rlvr-report: the page's data (downsampled curves that keep spikes, exact summary statistics,
evaluations placed at their steps, pass@k), bad input, and the page in a real headless
browser (Chromium): it renders without script errors and a screenshot shows the curves."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import subprocess

import orjson
import pytest

from helpers import invoke
from rlvr.report import PALETTE, TRAINING, read_trace, step_of


def make_run(root, name, steps=40, speed=10.0, spike_at=None, evals=True):
    d = root / name
    (d / "traces").mkdir(parents=True)
    with open(d / "traces" / "trace.jsonl", "wb") as fh:
        for s in range(1, steps + 1):
            r = 1 - math.exp(-s / speed)
            fh.write(orjson.dumps({
                "step": s, "policy_version": s, "reward/mean": 100.0 if s == spike_at else r, "kl": 0.0, "loss/kl": 0.01 * s,
                "entropy": 2 - s / steps, "completions/mean_length": 50 + s, "reward/frac_all_correct": r / 2,
                "reward/frac_all_wrong": (1 - r) / 2, "staleness/mean": 1.0 if s % 2 else 0.0, "time/step_s": float(s),
                "sampling/groups_drawn": 8, "sampling/groups_filtered": 2, "samples/total": 32.0 * s,
                "time/elapsed_s": 2.0 * s}) + b"\n")
            if evals and s % 20 == 0:   # a validation line, as rlvr-train writes it
                fh.write(orjson.dumps({"step": s, "val/toy/accuracy": r / 2, "time/val_s": 1.0}) + b"\n")
        fh.write(b'{"step": 999, "rew')   # a line still being written
    if evals:
        for s in (20, 40):
            v = d / "val" / f"step_{s:06d}" / "toy-pass@4"
            v.mkdir(parents=True)
            m = {"accuracy": s / 100, "pass@1": s / 100, "pass@2": s / 80, "pass@4": s / 60}
            (v / "summary.json").write_text(json.dumps({"benchmark": "toy", "mode": "pass@4", "metrics": m}))
        lm = d / "evals" / "step_000040" / "gsm8k_8shot"
        lm.mkdir(parents=True)
        (lm / "results_2026-11-25T10-00-00.json").write_text(json.dumps(
            {"results": {"gsm8k": {"exact_match,strict-match": 0.25, "exact_match_stderr,strict-match": 0.01}},
             "n-shot": {"gsm8k": 8}, "configs": {}}))
    (d / "config.yaml").write_text("model:\n  path: tiny\ndata:\n  dataset: toy\n")
    (d / "run.json").write_text(json.dumps({"status": "completed", "git": {"commit": "abc123"}}))
    return str(d)


def page_data(path) -> dict:
    text = open(path, encoding="utf-8").read()
    m = re.search(r'<script type="application/json" id="rlvr-data">(.*?)</script>', text, re.S)
    return json.loads(m.group(1))


def test_step_names():
    assert step_of("step_000100") == 100 and step_of("run_x/checkpoints/step_000020") == 20
    assert step_of("tiny-cpu_20261122-101500_step40") == 40 and step_of("step_0") == 0
    assert step_of("final") is None and step_of("Qwen3-1.7B") is None


def test_a_long_trace_is_downsampled_but_keeps_its_spike_and_exact_statistics(tmp_path):
    run = make_run(tmp_path, "long", steps=20000, speed=3000, spike_at=12345, evals=False)
    td = read_trace(os.path.join(run, "traces", "trace.jsonl"), max_points=200)
    pts = td.series["reward/mean"]
    assert len(pts) <= 2 * 200 + 2
    assert (12345.0, 100.0) in pts                       # a spike survives downsampling
    assert pts[-1][0] == 20000                           # and the last step
    assert td.steps == 20000 and statistics_ok(td)


def test_the_charts_draw_the_reference_kl_and_token_staleness(tmp_path):
    """"KL to the reference" is loss/kl (the trace's "kl" is the size of each update, pi_old to
    pi, 0 with one update per batch); staleness is counted per token where the trace has it."""
    charts = dict(TRAINING)
    assert charts["KL to the reference"] == ("loss/kl",)
    assert charts["staleness (policy versions)"][0] == "staleness/token_mean"
    p = tmp_path / "trace.jsonl"
    p.write_bytes(b"".join(orjson.dumps({"step": s, "reward/mean": 0.5, "kl": 0.0, "loss/kl": 0.1 * s,
                                         "staleness/mean": 1.0, "staleness/token_mean": 0.25}) + b"\n"
                           for s in (1, 2)))
    td = read_trace(str(p))
    assert td.staleness_sum / td.staleness_n == 0.25 and td.series["loss/kl"] == [(1.0, 0.1), (2.0, 0.2)]


def statistics_ok(td) -> bool:
    import statistics

    return statistics.median(td.step_times) == 10000.5 and td.filtered / td.drawn == 0.25 \
        and td.staleness_sum / td.staleness_n == 0.5 and td.samples / td.elapsed == 16.0


def test_page_data_runs_evaluations_and_bad_input(tmp_path):
    a, b = make_run(tmp_path, "run_a"), make_run(tmp_path, "run_b", speed=20.0)
    out = tmp_path / "r" / "report.html"
    r = invoke("rlvr-report", [a, b, "--label", "A", "-o", str(out)])
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == str(out)
    data = page_data(out)
    ra, rb = data["runs"]
    assert (ra["name"], rb["name"], ra["color"], rb["color"]) == ("A", "run_b", PALETTE[0], PALETTE[1])
    assert ra["summary"] == {"steps": 40, "final reward": pytest.approx(sum(1 - math.exp(-s / 10) for s in range(31, 41)) / 10),
                             "median step time (s)": 20.5, "samples/s": 16.0, "filtered groups": 0.25,
                             "token staleness": 0.5}
    assert ra["info"]["commit"] == "abc123" and ra["info"]["model"] == "tiny"
    assert [p[0] for p in ra["series"]["reward/mean"]] == list(range(1, 41))
    assert not any(k.startswith("val/") for k in ra["series"])   # evaluations come from their summaries
    got = {(e["source"], e["task"], e["metric"], e["step"]): e["value"] for e in ra["evals"]}
    assert got[("val", "toy-pass@4", "pass@4", 40)] == pytest.approx(40 / 60)
    assert got[("val", "toy-pass@4", "accuracy", 20)] == 0.2
    assert got[("lm-eval", "gsm8k_8shot", "exact_match,strict-match", 40)] == 0.25
    html = out.read_text()
    assert "</script>" not in html.split('id="rlvr-data">')[1].split("</script>")[0]
    # --evals: another folder's scores count for the run whose name its checkpoints hold
    other = tmp_path / "evals" / "run_a" / "checkpoints" / "step_000030" / "toy"
    other.mkdir(parents=True)
    (other / "summary.json").write_text(json.dumps({"benchmark": "toy", "mode": "greedy", "metrics": {"accuracy": 0.5}}))
    r = invoke("rlvr-report", [a, b, "--evals", str(tmp_path / "evals"), "-o", str(out)])
    assert r.code == 0, r.stderr
    ra, rb = page_data(out)["runs"]
    assert {"source": "rlvr-eval", "task": "toy", "metric": "accuracy", "step": 30, "value": 0.5} in ra["evals"]
    assert all(e["step"] != 30 for e in rb["evals"])
    # bad input: a broken line is named by file and line; not a run folder; usage
    with open(os.path.join(a, "traces", "trace.jsonl"), "r+b") as fh:
        fh.seek(0)
        fh.write(b"[1,2,3]\n")
    r = invoke("rlvr-report", [a, "-o", str(out)])
    assert r.code == 3 and "trace.jsonl:1: expected a JSON object" in r.stderr
    r = invoke("rlvr-report", [str(tmp_path / "nothing"), "-o", str(out)])
    assert r.code == 1 and "no such run folder" in r.stderr
    r = invoke("rlvr-report", [b, "-o", str(tmp_path / "x.png")])
    assert r.code == 2


BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome", "google-chrome-stable")


def browser() -> str | None:
    """Headless Chromium: $RLVR_CHROMIUM, else one of BROWSERS on PATH (Debian: chromium or
    chromium-headless-shell)."""
    env = os.environ.get("RLVR_CHROMIUM")
    if env:
        return env
    return next((p for p in map(shutil.which, BROWSERS) if p), None)


def chromium(args: list[str], tmp_path) -> subprocess.CompletedProcess:
    exe = browser()
    if exe is None:
        pytest.skip("no headless Chromium (apt-get install chromium-headless-shell, or set RLVR_CHROMIUM)")
    cmd = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--enable-logging=stderr",
           "--v=0", f"--user-data-dir={tmp_path / 'profile'}", "--run-all-compositor-stages-before-draw",
           "--virtual-time-budget=10000", *args]
    return subprocess.run(cmd, capture_output=True, timeout=300, stdin=subprocess.DEVNULL)


def test_the_page_renders_in_a_real_browser(tmp_path):
    a, b = make_run(tmp_path, "run_a"), make_run(tmp_path, "run_b", speed=20.0)
    out = tmp_path / "report.html"
    assert invoke("rlvr-report", [a, b, "-o", str(out)]).code == 0
    url = out.as_uri()
    dom = chromium(["--dump-dom", url], tmp_path)
    console = dom.stderr.decode("utf-8", "replace")
    assert dom.returncode == 0, console[-2000:]
    assert "Uncaught" not in console, console
    html = dom.stdout.decode()
    head = re.search(r"<html[^>]*>", html).group(0)
    assert 'data-state="rendered"' in head and "data-errors" not in head, head
    # the 8 training panels these runs have metrics for x 2 runs, 3 evaluation charts x 2 runs, one
    # pass@k chart with the first and last step of 2 runs, the chosen metric x 2
    curves = int(re.search(r'data-curves="(\d+)"', head).group(1))
    assert curves == 8 * 2 + 3 * 2 + 4 + 2, curves
    assert html.count('class="curve"') == curves

    shot = tmp_path / "shot.png"
    r = chromium([f"--screenshot={shot}", "--window-size=1400,2400", url], tmp_path)
    assert r.returncode == 0 and shot.exists(), r.stderr.decode()[-2000:]
    import numpy as np
    from PIL import Image

    img = np.asarray(Image.open(shot).convert("RGB")).astype(int)

    def mask(hexcolor):
        want = np.array([int(hexcolor[i:i + 2], 16) for i in (1, 3, 5)])
        return (np.abs(img - want) <= 12).all(axis=2)

    blue, orange = mask(PALETTE[0]), mask(PALETTE[1])
    assert blue.sum() > 2000 and orange.sum() > 2000, (blue.sum(), orange.sum())   # both runs' curves are drawn
    # the reward chart (the first panel, top left) holds a rising blue curve: its pixels on the
    # right sit higher on the page than on the left
    ys, xs = np.nonzero(blue[:700, :480])
    assert len(set(xs)) > 100, len(set(xs))
    lo, hi = np.percentile(xs, 25), np.percentile(xs, 75)
    left, right = ys[xs <= lo].mean(), ys[xs >= hi].mean()
    assert right < left - 50, (left, right)


def test_all_correct_and_all_wrong_group_shares():
    """The step metrics reward/frac_all_correct and reward/frac_all_wrong that the page draws."""
    from rlvr.train.batch import Group
    from rlvr.train.metrics import group_outcome

    def g(rewards, statuses=None):
        v = {"rewards": rewards}
        if statuses is not None:
            v["verdicts"] = [{"status": s} for s in statuses]
        return Group({}, 0, [], [], 0, 0, v)

    assert group_outcome(g([1.0, 1.0], ["correct", "correct"])) == "all_correct"
    assert group_outcome(g([0.0, -0.1], ["wrong", "no_answer"])) == "all_wrong"
    assert group_outcome(g([1.0, 0.0], ["correct", "wrong"])) == "mixed"
    assert group_outcome(g([0.5, 0.5], ["wrong", "wrong"])) == "all_wrong"     # partial credit is not correct
    assert group_outcome(g([1.0, 1.0])) == "all_correct" and group_outcome(g([0.0, 0.0])) == "all_wrong"
    assert group_outcome(g([0.5, 0.5])) == "mixed"                            # no verdicts, no clear outcome


# --------------------------------------------------------------------------- inside the run


def make_spans(run, steps: int, per: int, t0: float = 1.7e9, first: int = 1) -> dict:
    """A synthetic traces/spans.jsonl (appended to): per step a driver step span, `per` generate
    spans on each of two engines, `per` verify spans, the trainer's three phases and a weight
    load. Returns the count of spans written per actor."""
    counts: dict[str, int] = {}
    t = t0 + (first - 1) * 10

    def w(fh, rec):
        counts[rec["actor"]] = counts.get(rec["actor"], 0) + 1
        fh.write(orjson.dumps(rec) + b"\n")

    with open(os.path.join(run, "traces", "spans.jsonl"), "ab") as fh:
        for s in range(first, first + steps):
            w(fh, {"actor": "driver", "kind": "step", "start": t, "end": t + 10, "step": s, "version": s - 1})
            for e in range(2):
                for i in range(per):
                    a = t + i * 5 / per
                    w(fh, {"actor": f"engine-{e}", "kind": "generate", "start": a, "end": a + 4 / per, "step": s,
                           "version": s - 1, "ids": [f"p{s}-{i}-{j}" for j in range(8)]})
            for i in range(per):
                a = t + 5 + i * 2 / per
                w(fh, {"actor": "verifier", "kind": "verify", "start": a, "end": a + 1.5 / per, "step": s,
                       "version": s - 1})
            for k, (a, b) in (("pi_old", (6, 7)), ("forward_backward", (7, 9)), ("optimizer", (9, 9.5))):
                w(fh, {"actor": "trainer-0", "kind": k, "start": t + a, "end": t + b, "step": s, "version": s - 1})
            w(fh, {"actor": "engine-0", "kind": "weight_load", "start": t + 9.6, "end": t + 9.9, "step": s,
                   "version": s})
            t += 10
    return counts


def inside_run(tmp_path, steps=6, per=5):
    run = make_run(tmp_path, "inside", steps=steps, evals=False)
    counts = make_spans(run, steps, per)
    with open(os.path.join(run, "traces", "fates.jsonl"), "wb") as fh:
        for s in range(1, steps + 1):
            for v in (s - 1, s - 2):
                if v >= 0:
                    fh.write(orjson.dumps({"step": s, "policy_version": v, "trained": 10 if v == s - 1 else 2,
                                           "zero_variance": 4, "stale": 1 if v == s - 2 else 0, "timed_out": 0,
                                           "masked": 0}) + b"\n")
    os.makedirs(os.path.join(run, "stalls"))
    with open(os.path.join(run, "stalls", "20261129-040000.txt"), "w") as fh:
        fh.write("no span ended for 700 s (log.stall_s 600); waiting on engine-1 (generate step 3 open for 690 s)\n")
    return run, counts


def test_the_page_holds_the_timeline_breakdown_fates_and_stalls(tmp_path):
    run, counts = inside_run(tmp_path)
    out = tmp_path / "p.html"
    assert invoke("rlvr-report", [run, "-o", str(out)]).code == 0
    view = page_data(out)["runs"][0]["view"]
    tl = view["timeline"]
    assert tl["actors"] == ["driver", "trainer-0", "engine-0", "engine-1", "verifier"]
    assert tl["kinds"] == ["generate", "verify", "pi_old", "forward_backward", "optimizer", "weight_load", "step"]
    S = tl["spans"]
    assert len(S["a"]) == tl["total"] == sum(counts.values()) and tl["steps"] == [1, 6]
    assert {a: S["a"].count(i) for i, a in enumerate(tl["actors"])} == counts
    assert S["s"] == sorted(S["s"]) and S["s"][0] == 0.0 and all(e >= s for s, e in zip(S["s"], S["e"]))
    first_gen = S["k"].index(tl["kinds"].index("generate"))
    assert S["ids"][first_gen] == "p1-0-0, p1-0-1, p1-0-2, p1-0-3 ..."
    bd = view["breakdown"]
    assert bd["steps"] == [1, 2, 3, 4, 5, 6] and "step" not in bd["kinds"]
    # engine-0 and engine-1 generate at the same times: counted once (5 spans of 0.8 s, 1 s apart)
    assert bd["seconds"]["generate"] == [pytest.approx(4.0)] * 6
    assert bd["seconds"]["forward_backward"] == [pytest.approx(2.0)] * 6
    assert view["fates"][0] == {"policy_version": 0, "trained": 12, "zero_variance": 8, "stale": 1, "timed_out": 0,
                                "masked": 0}
    assert [s["name"] for s in view["stalls"]] == ["20261129-040000.txt"]
    # --steps chooses the timeline's steps (the breakdown stays over the run); --max-spans keeps the latest
    assert invoke("rlvr-report", [run, "--steps", "2:3", "-o", str(out)]).code == 0
    tl = page_data(out)["runs"][0]["view"]["timeline"]
    assert set(tl["spans"]["st"]) == {2, 3} and tl["total"] == sum(counts.values()) // 3
    assert invoke("rlvr-report", [run, "--steps", "4", "--max-spans", "7", "-o", str(out)]).code == 0
    tl = page_data(out)["runs"][0]["view"]["timeline"]
    assert len(tl["spans"]["a"]) == 7 and tl["total"] == sum(counts.values()) // 6 and set(tl["spans"]["st"]) == {4}
    r = invoke("rlvr-report", [run, "--steps", "a:b", "-o", str(out)])
    assert r.code == 2 and "--steps" in r.stderr


def test_the_timeline_renders_its_lanes_and_spans_in_a_real_browser(tmp_path):
    run, counts = inside_run(tmp_path, steps=4)
    out = tmp_path / "p.html"
    assert invoke("rlvr-report", [run, "-o", str(out)]).code == 0
    dom = chromium(["--dump-dom", out.as_uri()], tmp_path)
    assert dom.returncode == 0 and "Uncaught" not in dom.stderr.decode("utf-8", "replace")
    html = dom.stdout.decode()
    head = re.search(r"<html[^>]*>", html).group(0)
    assert 'data-state="rendered"' in head and "data-errors" not in head, head
    assert f'data-spans="{sum(counts.values())}"' in head and 'data-stalls="1"' in head
    lanes = dict(re.findall(r'<div class="lane" data-actor="([^"]+)" data-count="(\d+)"', html))
    assert {a: int(n) for a, n in lanes.items()} == counts
    assert html.count('class="fate-bar"') == 3 * 3 + 2    # versions 0-2: trained, zero_variance, stale; 3: two
    # the step axes of the reward chart tick at whole steps only (4 steps: never 2.5)
    svg = html.split("reward (reward/mean)")[1].split("</svg>")[0]
    xticks = re.findall(r'<text x="[\d.]+" y="213"[^>]*>([^<]+)</text>', svg)
    assert xticks == ["1", "2", "3", "4"], xticks


class Cdp:
    """Headless Chromium driven over the DevTools protocol on a pipe (--remote-debugging-pipe:
    commands on fd 3, answers on fd 4, each a JSON message ended by a NUL byte)."""

    def __init__(self, tmp_path, width=1400, height=1000):
        exe = browser()
        if exe is None:
            pytest.skip("no headless Chromium (apt-get install chromium-headless-shell, or set RLVR_CHROMIUM)")
        import fcntl

        def high(fd):   # above fds 3 and 4, which the shell below points at the pipes
            moved = fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 10)
            os.close(fd)
            return moved

        to_r, self.to_w = map(high, os.pipe())
        self.from_r, from_w = map(high, os.pipe())
        args = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--remote-debugging-pipe",
                f"--user-data-dir={tmp_path / 'cdp-profile'}", f"--window-size={width},{height}", "about:blank"]
        self.proc = subprocess.Popen(["bash", "-c", f'exec "$0" "$@" 3<&{to_r} 4>&{from_w} {to_r}<&- {from_w}>&-',
                                      *args], pass_fds=(to_r, from_w), stdin=subprocess.DEVNULL,
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        os.close(to_r)
        os.close(from_w)
        self.buf = b""
        self.n = 0
        self.session = None

    def call(self, method, params=None, session=True):
        self.n += 1
        msg = {"id": self.n, "method": method, "params": params or {}}
        if session and self.session:
            msg["sessionId"] = self.session
        os.write(self.to_w, json.dumps(msg).encode() + b"\0")
        while True:
            got = self._recv()
            if got.get("id") == self.n:
                if "error" in got:
                    raise RuntimeError(f"{method}: {got['error']}")
                return got["result"]

    def _recv(self):
        import select

        while b"\0" not in self.buf:
            ready, _, _ = select.select([self.from_r], [], [], 120)
            if not ready:
                raise AssertionError("Chromium did not answer the DevTools protocol in 120 s")
            chunk = os.read(self.from_r, 1 << 20)
            if not chunk:
                raise AssertionError("Chromium closed the DevTools pipe")
            self.buf += chunk
        msg, self.buf = self.buf.split(b"\0", 1)
        return json.loads(msg)

    def open(self, url):
        target = self.call("Target.createTarget", {"url": url}, session=False)["targetId"]
        self.session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                 session=False)["sessionId"]

    def eval(self, expr):
        r = self.call("Runtime.evaluate", {"expression": expr, "returnByValue": True})
        return r["result"].get("value")

    def close(self):
        try:
            self.call("Browser.close", session=False)
        except (AssertionError, OSError, RuntimeError):
            pass
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        os.close(self.to_w)
        os.close(self.from_r)


def test_the_live_page_follows_new_spans_and_fills_a_wide_window(tmp_path):
    """rlvr-report --serve's page, in a real browser: it reloads itself when spans are added to
    the run, and its charts fill a wide window (no half-empty rows)."""
    import threading

    from machine_time import wait_for
    from rlvr.report_serve import make_server

    run, counts = inside_run(tmp_path, steps=3)
    server = make_server([run], "127.0.0.1", 0, interval_s=0.2)
    assert server.url.startswith("http://127.0.0.1:")
    th = threading.Thread(target=server.serve_forever, daemon=True)
    th.start()
    cdp = Cdp(tmp_path)
    try:
        cdp.open(server.url)
        n0 = sum(counts.values())
        wait_for(lambda: cdp.eval("document.documentElement.getAttribute('data-spans')") == str(n0), 120,
                 "the live page's first drawing")
        assert cdp.eval("document.getElementById('live').textContent").startswith("live:")
        # the charts of a row fill the grid's width
        row = cdp.eval("""(function () {
            var g = document.getElementById('training').getBoundingClientRect(), top = null, right = 0, n = 0;
            document.querySelectorAll('#training .chart').forEach(function (c) {
              var r = c.getBoundingClientRect(); if (top === null) top = r.top;
              if (Math.abs(r.top - top) < 2) { right = Math.max(right, r.right); n++; } });
            return [g.left, g.right, right, n]; })()""")
        left, gright, right, per_row = row
        assert per_row >= 3 and right >= gright - 2, row
        more = make_spans(run, 2, 5, first=4)
        n1 = n0 + sum(more.values())
        wait_for(lambda: cdp.eval("document.documentElement.getAttribute('data-spans')") == str(n1), 120,
                 "the live page showing the new spans")
        lanes = cdp.eval("Array.from(document.querySelectorAll('.lane')).map(function (d) {"
                         " return [d.getAttribute('data-actor'), Number(d.getAttribute('data-count'))]; })")
        assert dict(lanes) == {a: counts[a] + more[a] for a in counts}
        # a step range chosen on the page is kept when the page reloads for new spans
        cdp.eval("document.querySelector('.from').value = 2; document.querySelector('.to').value = 3;"
                 "document.querySelector('.tl-controls button').click()")
        per_step = n0 // 3
        assert cdp.eval("document.documentElement.getAttribute('data-spans')") == str(2 * per_step)
        make_spans(run, 1, 5, first=6)
        wait_for(lambda: cdp.eval("document.documentElement.getAttribute('data-state') === 'rendered' && "
                                  "document.querySelector('.timeline').getAttribute('data-last-step')") == "6",
                 120, "the reload after step 6's spans")
        assert cdp.eval("document.documentElement.getAttribute('data-spans')") == str(2 * per_step)
        assert cdp.eval("location.hash") == "#steps=2:3"
    finally:
        cdp.close()
        server.shutdown()
        server.server_close()
