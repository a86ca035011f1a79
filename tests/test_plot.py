"""rlvr-plot: reward curves of run folders."""

from __future__ import annotations

import orjson

from helpers import invoke


def make_run(root, name, rewards):
    d = root / name / "traces"
    d.mkdir(parents=True)
    with open(d / "trace.jsonl", "wb") as fh:
        for i, r in enumerate(rewards, 1):
            fh.write(orjson.dumps({"step": i, "reward/mean": r, "samples/total": 128 * i, "time/elapsed_s": 0.5 * i}) + b"\n")
        fh.write(b'{"step": 99, "rew')  # a line still being written is ignored
    return str(root / name)


def test_plot_two_runs(tmp_path):
    a = make_run(tmp_path, "a", [0.1, 0.2, 0.5])
    b = make_run(tmp_path, "b", [0.1, 0.3, 0.6])
    out = tmp_path / "r.png"
    r = invoke("rlvr-plot", [a, b, "--label", "S=0", "--label", "S=1", "--smooth", "2", "-o", str(out)])
    assert r.code == 0, r.stderr
    assert r.stdout.strip() == str(out)
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000


def test_not_a_run_folder(tmp_path):
    r = invoke("rlvr-plot", [str(tmp_path), "-o", str(tmp_path / "x.png")])
    assert r.code == 1 and "no traces/trace.jsonl" in r.stderr


def test_unknown_metric(tmp_path):
    a = make_run(tmp_path, "a", [0.1])
    r = invoke("rlvr-plot", [a, "--metric", "nope", "-o", str(tmp_path / "x.png")])
    assert r.code == 1 and "'nope'" in r.stderr


def test_bad_trace_lines_name_file_line_and_field(tmp_path):
    a = make_run(tmp_path, "a", [0.1, 0.2])
    trace = tmp_path / "a" / "traces" / "trace.jsonl"
    good = trace.read_bytes().rsplit(b"\n", 1)[0] + b"\n"
    for line, words in ((b"5", "expected a JSON object"), (b'{"step": 3, "reward/mean": "0.5"}', "(field reward/mean)"),
                        (b'{"step": "x", "reward/mean": 0.5}', "(field step)"),
                        (b'{"step": 3, "reward/mean": {"a": 1}}', "(field reward/mean)"), (b"{oops", "invalid JSON")):
        trace.write_bytes(good + b"\n" + line + b"\n")   # a blank line is skipped
        r = invoke("rlvr-plot", [a, "-o", str(tmp_path / "x.png")])
        assert r.code == 3 and f"{trace}:4: " in r.stderr and words in r.stderr and "Traceback" not in r.stderr, r.stderr
    trace.write_bytes(good + b'{"step": 3, "loss": 1.0}\n{"step": 4, "reward/mean": null}\n')   # steps without it: skipped
    assert invoke("rlvr-plot", [a, "-o", str(tmp_path / "x.png")]).code == 0


def test_bad_output_name_and_extra_labels_are_usage_errors(tmp_path):
    a = make_run(tmp_path, "a", [0.1])
    r = invoke("rlvr-plot", [a, "-o", str(tmp_path / "x.txt")])
    assert r.code == 2 and ".png" in r.stderr
    r = invoke("rlvr-plot", [a, "--label", "A", "--label", "B", "-o", str(tmp_path / "x.png")])
    assert r.code == 2 and "2 --label for 1 run folder" in r.stderr
    r = invoke("rlvr-plot", [a, "-o", str(tmp_path / "new" / "x.pdf")])   # a missing folder is made
    assert r.code == 0 and (tmp_path / "new" / "x.pdf").read_bytes()[:4] == b"%PDF"
