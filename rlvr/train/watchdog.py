"""Stall reports: when no span has ended for `log.stall_s`, say what is open and where every
process's Python is (RUN_DIR/stalls/<time>.txt and one line on stderr). The run goes on.

    dog = Watchdog(run_dir, cfg.log.stall_s, span_log, poll=feed, stacks=probe.stacks_all)
    dog.start()          # a daemon thread: check() every interval_s
    ...
    dog.stop()

check() is the whole logic and takes its time from `clock` (tests drive it with a fake clock
and no thread): `poll()` (optional) drains the actors into the SpanLog and returns the names of
those that did not answer; when `clock() - log.last_end >= stall_s` a report is written, unless
the picture (the open spans and the silent actors) is the one already reported. Once a span ends
again, a later stall is reported afresh.

The report names the actor everything waits on, when the open spans show one: an actor that did
not answer, else the actor of the oldest open span outside the driver, else the driver itself.

On demand: `request_report(run_dir)` (for `rlvr-train --stacks RUN_DIR`) leaves the file
RUN_DIR/stalls/REQUEST; the running watchdog's next check() writes a report whatever the idle time,
removes the file, and request_report returns the report's path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
import traceback
from typing import Callable

from rlvr.train.spans import SpanLog


REQUEST = "REQUEST"


def request_report(run_dir: str, timeout_s: float = 60.0, poll_s: float = 0.2) -> str:
    """Ask the watchdog of the run writing run_dir for a report now; returns its path. TimeoutError
    when none came within timeout_s (no run is writing there, or its watchdog is off)."""
    d = os.path.join(run_dir, "stalls")
    os.makedirs(d, exist_ok=True)
    req, done = os.path.join(d, REQUEST), os.path.join(d, REQUEST + ".done")
    if os.path.exists(done):
        os.remove(done)
    with open(req, "w") as fh:
        fh.write(f"{time.time()}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with open(done) as fh:
                path = fh.read().strip()
            if path:
                os.remove(done)
                return path
        except FileNotFoundError:
            pass
        time.sleep(poll_s)
    if os.path.exists(req):
        os.remove(req)
    raise TimeoutError(f"{run_dir}: no stall report within {timeout_s:g} s (is a run with log.stall_s > 0 writing there?)")


def python_stacks(pid: int | None = None, py_spy: bool = False) -> str:
    """Every thread's Python stack in this process (sys._current_frames), and py-spy's dump of
    `pid` (native frames too) where py-spy is installed and py_spy is True."""
    names = {t.ident: t.name for t in threading.enumerate()}
    parts = []
    for ident, frame in sys._current_frames().items():
        parts.append(f'Thread {ident} "{names.get(ident, "?")}":\n' + "".join(traceback.format_stack(frame)))
    exe = shutil.which("py-spy") if py_spy else None
    if exe:
        try:
            r = subprocess.run([exe, "dump", "--pid", str(pid or os.getpid())], capture_output=True, text=True,
                               timeout=20)
            parts.append("py-spy dump:\n" + (r.stdout or r.stderr))
        except (OSError, subprocess.TimeoutExpired) as e:
            parts.append(f"py-spy dump failed: {e}")
    return "\n".join(parts)


def blamed(open_spans: list[dict], silent: list[str], now: float) -> tuple[str, str] | None:
    """(actor, why) that everything waits on, or None when nothing is open and all answered."""
    if silent:
        return silent[0], "did not answer when asked for its spans"
    others = [s for s in open_spans if s.get("actor") != "driver"] or list(open_spans)
    if not others:
        return None
    s = min(others, key=lambda r: r["start"])
    step = f" step {s['step']}" if s.get("step") is not None else ""
    return s["actor"], f"{s['kind']}{step} open for {now - s['start']:.0f} s"


class Watchdog:
    def __init__(self, run_dir: str, stall_s: float, log: SpanLog, stacks: Callable[[], dict[str, str]] | None = None,
                 poll: Callable[[], list[str] | None] | None = None, clock: Callable[[], float] = time.time,
                 err=None, interval_s: float | None = None):
        self.dir = os.path.join(run_dir, "stalls")
        self.stall_s = float(stall_s)
        self.log = log
        self.stacks = stacks
        self.poll = poll
        self.clock = clock
        self.err = err
        self.interval_s = interval_s if interval_s is not None else max(0.5, min(10.0, self.stall_s / 6))
        self.reported: frozenset | None = None
        self.reports: list[str] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def check(self) -> str | None:
        """One look; returns the path of the report written, or None."""
        silent = list(self.poll() or ()) if self.poll is not None else []
        now = self.clock()
        idle = now - self.log.last_end
        req = os.path.join(self.dir, REQUEST)
        if os.path.exists(req):
            path = self._report(now, idle, self.log.open_spans(), silent, asked=True)
            with open(req + ".tmp", "w") as fh:
                fh.write(path + "\n")
            os.replace(req + ".tmp", req + ".done")
            os.remove(req)
            return path
        if idle < self.stall_s:
            self.reported = None
            return None
        open_spans = self.log.open_spans()
        picture = frozenset([(s.get("actor"), s.get("kind"), s.get("start")) for s in open_spans]
                            + [("silent", a, None) for a in silent])
        if picture == self.reported:
            return None
        self.reported = picture
        return self._report(now, idle, open_spans, silent)

    def _report(self, now: float, idle: float, open_spans: list[dict], silent: list[str], asked: bool = False) -> str:
        who = blamed(open_spans, silent, now)
        head = ("asked for (rlvr-train --stacks): " if asked else "") + \
            f"no span ended for {idle:.0f} s (log.stall_s {self.stall_s:g})"
        line = head + (f"; waiting on {who[0]} ({who[1]})" if who else "; no span is open")
        lines = [line, "", f"open spans ({len(open_spans)}):"]
        for s in sorted(open_spans, key=lambda r: r["start"]):
            ids = s.get("ids")
            lines.append(f"  {s.get('actor')}: {s.get('kind')} step {s.get('step')} version {s.get('version')}"
                         f" open {now - s['start']:.1f} s" + (f" ids {ids[:8]}" if ids else ""))
        if silent:
            lines.append(f"actors that did not answer: {', '.join(silent)}")
        lines += ["", "== driver ==", python_stacks()]
        if self.stacks is not None:
            try:
                for name, text in self.stacks().items():
                    lines += ["", f"== {name} ==", text]
            except Exception as e:  # noqa: BLE001 - a report with the driver's stacks is still worth writing
                lines.append(f"(actor stacks failed: {type(e).__name__}: {e})")
        os.makedirs(self.dir, exist_ok=True)
        stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime(now))
        path = os.path.join(self.dir, f"{stamp}.txt")
        n = 1
        while os.path.exists(path):
            n += 1
            path = os.path.join(self.dir, f"{stamp}-{n}.txt")
        with open(path, "w") as fh:
            fh.write("\n".join(lines) + "\n")
        print(f"rlvr-train: {'stacks' if asked else 'warning: stall'}: {line}; report: {path}", file=self.err or sys.stderr,
              flush=True)
        self.reports.append(path)
        return path

    def start(self) -> "Watchdog":
        self._thread = threading.Thread(target=self._run, name="rlvr stall watchdog", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                self.check()
            except Exception as e:  # noqa: BLE001 - the watchdog never stops a run
                print(f"rlvr-train: warning: stall watchdog: {type(e).__name__}: {e}", file=self.err or sys.stderr)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=30)
