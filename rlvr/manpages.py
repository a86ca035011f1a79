"""Man pages generated from the click definitions (the help text is the one source).

    python -m rlvr.manpages man/          # write man/<cmd>.1 for every command
    python -m rlvr.manpages --check man/  # exit 1 if any page is stale (used by tests)

man/rlvr-records.5 (the record contract) is written by hand and not touched here.
"""

from __future__ import annotations

import os
import sys

import click

from rlvr import __version__
from rlvr.cli import EXIT_CODES
from rlvr.commands import COMMANDS, load
from rlvr.records import atomic_write


def _esc(text: str) -> str:
    out = []
    for line in text.replace("\\", "\\e").splitlines():
        if line.startswith((".", "'")):
            line = "\\&" + line
        out.append(line)
    return "\n".join(out)


def _paragraphs(help_text: str) -> str:
    """click help (with \\b no-rewrap blocks) to roff paragraphs."""
    import inspect

    text = inspect.cleandoc(help_text or "")
    out: list[str] = []
    for block in text.split("\n\n"):
        lines = block.splitlines()
        if not lines:
            continue
        if lines[0].strip() == "\b":
            body = lines[1:]
            if body and body[0].rstrip().endswith(":") and not body[0].startswith(" "):
                out.append(f".SS {_esc(body[0].rstrip(':'))}")
                body = body[1:]
            out.append(".nf\n" + _esc("\n".join(ln.strip() if ln.startswith("  ") else ln for ln in body)) + "\n.fi")
        else:
            out.append(".PP\n" + _esc(" ".join(ln.strip() for ln in lines)))
    return "\n".join(out)


def _walk(cmd: click.Command, path: list[str]) -> list[tuple[list[str], click.Command]]:
    items = [(path, cmd)]
    if isinstance(cmd, click.Group):
        for name in sorted(cmd.commands):
            items += _walk(cmd.commands[name], path + [name])
    return items


def render(name: str) -> str:
    main = load(name)
    cmd: click.Command = main.command
    summary = (cmd.get_short_help_str(limit=200) or "").rstrip(".")
    parts = [
        f'.TH {name.upper()} 1 "" "rlvr {__version__}" "rlvr manual"',
        ".SH NAME",
        f"{name} \\- {_esc(summary)}",
    ]
    for path, sub in _walk(cmd, [name]):
        ctx = click.Context(sub, info_name=" ".join(path))
        title = "SYNOPSIS" if len(path) == 1 else f"COMMAND: {' '.join(path[1:]).upper()}"
        parts.append(f".SH {title}")
        parts.append(".B " + _esc(" ".join(sub.collect_usage_pieces(ctx) and [" ".join(path)] + sub.collect_usage_pieces(ctx))))
        parts.append(".SH DESCRIPTION" if len(path) == 1 else ".SS Description")
        parts.append(_paragraphs(sub.help or ""))
        opts = [p for p in sub.get_params(ctx) if isinstance(p, click.Option) or isinstance(p, click.Argument)]
        rows = []
        for p in opts:
            rec = p.get_help_record(ctx) if isinstance(p, click.Option) else None
            if rec:
                rows.append(f".TP\n.B {_esc(rec[0])}\n{_esc(rec[1])}")
        if rows:
            parts.append(".SH OPTIONS" if len(path) == 1 else ".SS Options")
            parts.extend(rows)
    parts.append(".SH EXIT STATUS")
    for code, what in EXIT_CODES.items():
        parts.append(f".TP\n.B {code}\n{_esc(what)}")
    parts.append(".SH ENVIRONMENT\n.TP\n.B RLVR_DEBUG\nSet to 1 to print tracebacks instead of one-line errors.")
    parts.append(".SH SEE ALSO\nrlvr-records(5); the other rlvr commands are listed in the README.")
    return "\n".join(parts) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    outdir = args[0] if args else "man"
    stale = []
    for name in COMMANDS:
        page = render(name)
        path = os.path.join(outdir, f"{name}.1")
        old = open(path).read() if os.path.exists(path) else None
        if old != page:
            if check:
                stale.append(path)
            else:
                atomic_write(path, page.encode())
    if stale:
        print(f"stale man pages (run `make man`): {', '.join(stale)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
