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
