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
