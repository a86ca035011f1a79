"""rlvr-report: one static HTML page over run folders and their evaluations (see rlvr.report)."""

from __future__ import annotations

import os

import click

from rlvr.cli import ConfigError, check_output_file, run, with_examples

HELP = with_examples(
    """Write one static HTML page (no server, no network) about one or more run folders.

    Training curves (reward, KL, entropy, completion lengths, the shares of all-correct and
    all-wrong groups, staleness, step time), evaluation per checkpoint (validations inside
    training from RUN/val/, rlvr-eval summaries and lm-eval results from RUN/evals/ or
    --evals folders), pass@k curves and a summary table (median step time, samples/s,
    filtered groups, token staleness); several runs are overlaid, one colour each. Any
    metric of the trace can be drawn from a menu on the page.

    Traces are read as a stream and downsampled (the minimum and maximum of each bucket of
    steps, at most --max-points buckets per metric), so traces of hundreds of MB still make
    a page of a few MB. The summary table uses every step. A run still training is read as
    it is. --evals DIR adds evaluation folders (e.g. rlvr-eval --watch's OUT): a score counts
    for a run when its checkpoint name holds the run folder's name (for a one-run report,
    every score), at the step in that name (step_000100, <run>_step100).
    Prints the page's path on stdout.

    Inside the run: the timeline of traces/spans.jsonl (each actor a lane, spans coloured by
    kind, details on hover) for the steps of --steps (default all; at most --max-spans spans,
    the latest), the step time per kind, the trace's figures (MFU, tokens/s, memory per
    actor, the engines' statistics, queue times, sample fates), the sample fates per policy
    version (traces/fates.jsonl) and the stall reports (RUN/stalls/).

    --serve serves the same page on http://HOST:PORT/ (127.0.0.1 by default; over ssh:
    ssh -L 8765:127.0.0.1:8765 HOST) and the page reloads itself when the run's files
    change (checked every --interval seconds); prints the URL on stdout; Ctrl-C stops it.
    """,
    """
rlvr-report results/tiny-cpu_20261122-101500 -o report.html
rlvr-report results/stale0 results/stale1 --label S=0 --label S=1 -o staleness.html
rlvr-report results/run1 --evals evals/ -o run1.html
rlvr-report results/run1 --steps 100:120 -o steps100-120.html
rlvr-report --serve results/run1 --port 8765
""",
)


def _steps(value: str | None) -> tuple[int | None, int | None]:
    if not value:
        return None, None
    a, sep, b = value.partition(":")
    try:
        lo, hi = (int(a) if a else None), (int(b) if b else None) if sep else int(a)
    except ValueError:
        raise ConfigError(f"--steps: {value!r}: expected FIRST:LAST (either may be left out), e.g. 10:20") from None
    return lo, hi


@click.command(help=HELP)
@click.argument("run_dirs", nargs=-1, required=True, type=click.Path(file_okay=False))
@click.option("-o", "--output", default="report.html", show_default=True, help="The page to write (missing folders are made).")
@click.option("--label", "labels", multiple=True, help="Name per run folder, in order (default: the folder's name).")
@click.option("--evals", "evals", multiple=True, type=click.Path(file_okay=False), metavar="DIR",
              help="Another folder of rlvr-eval or lm-eval results (repeatable).")
@click.option("--max-points", type=click.IntRange(10), default=1000, show_default=True,
              help="Buckets per metric curve (each keeps its minimum and maximum).")
@click.option("--title", help="The page's title.")
@click.option("--steps", metavar="FIRST:LAST", help="The timeline's steps (inclusive; e.g. 10:20, 100:, :5).")
@click.option("--max-spans", type=click.IntRange(0), default=200000, show_default=True,
              help="Most spans the timeline holds (the latest when there are more).")
@click.option("--serve", "--live", "serve", is_flag=True, help="Serve the page on HOST:PORT, refreshed while the run goes on.")
@click.option("--host", default="127.0.0.1", show_default=True, help="--serve: the address to listen on.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="--serve: the port (0: a free one).")
@click.option("--interval", type=click.FloatRange(0.1), default=5.0, show_default=True,
              help="--serve: seconds between the page's checks for new data.")
def cmd(run_dirs, output, labels, evals, max_points, title, steps, max_spans, serve, host, port, interval):
    from rlvr.report import build_report

    if len(labels) > len(run_dirs):
        raise ConfigError(f"{len(labels)} --label for {len(run_dirs)} run folder(s)")
    opts = dict(labels=list(labels), title=title, max_points=max_points, evals=list(evals), steps=_steps(steps),
                max_spans=max_spans)
    if serve:
        from rlvr.report_serve import make_server

        try:
            server = make_server(list(run_dirs), host, port, interval, **opts)
        except OSError as e:
            raise ConfigError(f"--serve: cannot listen on {host}:{port}: {e.strerror or e}") from None
        click.echo(server.url)
        click.echo(f"rlvr-report: serving {server.url} (Ctrl-C stops)", err=True)
        try:
            server.serve_forever()
        finally:
            server.server_close()
        return
    check_output_file(output, "--output")
    if os.path.splitext(output)[1].lower() not in (".html", ".htm"):
        raise ConfigError(f"--output: {output}: the file name must end in .html")
    click.echo(build_report(list(run_dirs), output, **opts))


main = run(cmd)


if __name__ == "__main__":
    main()
