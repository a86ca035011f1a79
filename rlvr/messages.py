"""What rlvr says on stderr besides progress bars: the running program's name, warnings, log lines.

``rlvr.cli.run`` sets the name once, when a command starts (``set_program``); library code
and commands then write ``rlvr-train: ...`` or ``rlvr-verify: warning: ...`` without naming
the program themselves. Outside a command the name is the script's own (sys.argv[0]).
"""

from __future__ import annotations

import os
import sys

_program: str | None = None


def set_program(name: str) -> None:
    global _program
    _program = name


def program() -> str:
    """The running command's name (e.g. rlvr-verify)."""
    return _program or os.path.basename(sys.argv[0] or "") or "rlvr"


def say(message: str, prog: str | None = None) -> None:
    """One line on stderr: 'PROG: message'."""
    print(f"{prog or program()}: {message}", file=sys.stderr, flush=True)


def warn(message: str, prog: str | None = None) -> None:
    """One warning line on stderr: 'PROG: warning: message'."""
    say(f"warning: {message}", prog)


# Run by rlvr.cli.run after the command's last message (its error line included), just before
# the process exits: e.g. closing the copy of stderr that rlvr-train keeps in RUN_DIR/train.log.
_at_end: list = []


def at_end(fn) -> None:
    """Call fn() when the running command ends, after its last message."""
    _at_end.append(fn)


def end() -> None:
    """Run the at_end hooks, newest first (rlvr.cli.run calls this once per command)."""
    while _at_end:
        fn = _at_end.pop()
        try:
            fn()
        except Exception:  # noqa: BLE001 - ending must not turn a result into a crash
            pass


class _TeeText:
    """A text stream writing to another text stream and, as UTF-8, to a binary log."""

    def __init__(self, stream, log):
        self.stream, self.log = stream, log

    def write(self, s: str) -> int:
        n = self.stream.write(s)
        try:
            self.log.write(s.encode("utf-8", "replace"))
        except (OSError, ValueError):
            pass
        return n

    def flush(self) -> None:
        self.stream.flush()

    def __getattr__(self, name: str):
        return getattr(self.stream, name)


class StderrCopy:
    """Copy everything written to stderr into a log file (appended) while it still reaches
    the terminal: Python's messages and those of child processes (which inherit fd 2), e.g.
    Ray and vLLM. Call close() to stop (rlvr-train registers it with at_end)."""

    def __init__(self, path: str):
        self.log = open(path, "ab", buffering=0)
        self.saved: int | None = None
        self.thread = None
        self.swapped = None
        try:
            on_fd2 = sys.stderr.fileno() == 2
        except (AttributeError, ValueError, OSError):
            on_fd2 = False
        if on_fd2:
            import threading

            sys.stderr.flush()
            self.saved = os.dup(2)
            self.r, w = os.pipe()
            os.dup2(w, 2)
            os.close(w)
            self.thread = threading.Thread(target=self._pump, name="rlvr-stderr-copy", daemon=True)
            self.thread.start()
        else:  # stderr is not the process's fd 2 (e.g. captured in-process): copy at the Python level
            self.swapped = sys.stderr
            sys.stderr = _TeeText(sys.stderr, self.log)

    def _pump(self) -> None:
        while True:
            try:
                data = os.read(self.r, 1 << 16)
            except OSError:
                return
            if not data:
                return
            view = memoryview(data)
            while view:
                try:
                    view = view[os.write(self.saved, view):]
                except OSError:
                    break
            try:
                self.log.write(data)
            except (OSError, ValueError):
                pass

    def close(self) -> None:
        if self.swapped is not None:
            sys.stderr = self.swapped
            self.swapped = None
        if self.saved is not None:
            try:
                sys.stderr.flush()
            except (OSError, ValueError):
                pass
            os.dup2(self.saved, 2)  # our end of the pipe closes: the copier sees EOF once
            # children that inherited stderr have exited; one still running keeps the copy going
            self.thread.join(timeout=5)
            if self.thread.is_alive():
                return  # a child still holds the pipe: the copier keeps running until it ends
            os.close(self.r)
            os.close(self.saved)
            self.saved = None
        self.log.close()
