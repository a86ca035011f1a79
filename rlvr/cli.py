"""Shared behaviour of every rlvr command: exit codes, errors, pipes, progress.

A command module defines a click command and exports ``main = run(cmd)``:

    @click.command(...)
    @input_options
    def cmd(files, keep_going, ...): ...
    main = run(cmd)

``run`` names the program after the command's entry in rlvr.commands.COMMANDS (so that
warnings and errors say ``rlvr-passk: ...`` without a literal in each module), turns
exceptions into one-line messages (``rlvr-passk: error: FILE:LINE: ...``) and the
documented exit codes (rlvr.errors: the library raises only those, never click's), ends
quietly when stdout is closed (``| head``), and exits 130 on Ctrl-C. Set RLVR_DEBUG=1 to
see tracebacks.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from typing import Any

import click

from rlvr.errors import (  # noqa: F401 - re-exported: commands name them through rlvr.cli
    EXIT_BAD_INPUT,
    EXIT_CODES,
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_USAGE,
    BadInput,
    ConfigError,
    Failure,
    RlvrError,
    UsageError,
)
from rlvr.messages import end, program, say, set_program, warn  # noqa: F401 - re-exported for commands
from rlvr.progress import progress  # noqa: F401 - re-exported: the one progress helper


def check_output_file(path: str, option: str) -> None:
    """Fail before any work when a file to be written later cannot be: the path is a
    folder, or a part of it is a file. Missing folders are fine (the writer creates them)."""
    if os.path.isdir(path):
        raise ConfigError(f"{option}: {path} is a folder, not a file")
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    if not os.path.isdir(parent):
        raise ConfigError(f"{option}: cannot write {path}: {parent} is a file, not a folder")


def check_output_dir(path: str, what: str) -> None:
    """Fail before any work when a folder to write into is an existing file."""
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"{what} {path} is a file, not a folder")


def err(prog: str, message: str) -> None:
    click.echo(f"{prog}: {message}", err=True)


def _quiet_stdout() -> None:
    # stdout's reader went away: point fd 1 at /dev/null so the final flush is silent.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass


def _sigterm(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def command_name(cmd: click.Command) -> str:
    """The program name of a command module's click command, from rlvr.commands.COMMANDS."""
    from rlvr.commands import COMMANDS

    module = getattr(cmd.callback, "__module__", None) or ""
    spec = getattr(sys.modules.get(module), "__spec__", None)
    module = spec.name if spec is not None and module == "__main__" else module  # python -m rlvr.commands.X
    for name, entry in COMMANDS.items():
        if entry["module"] == module:
            return name
    return cmd.name or os.path.basename(sys.argv[0]) or "rlvr"


def run(cmd: click.Command, prog: str | None = None) -> Callable[..., None]:
    """Wrap a click command into a console-script entry point with rlvr's error contract.

    prog: the program name; by default the command's name in rlvr.commands.COMMANDS.
    """
    prog = prog or command_name(cmd)

    def main(argv: list[str] | None = None) -> None:
        set_program(prog)
        debug = bool(os.environ.get("RLVR_DEBUG"))
        if sys.stdout is None:  # started with stdout closed (`>&-`)
            click.echo(f"{prog}: error: standard output is closed", err=True)
            sys.exit(EXIT_FAILURE)
        signal.signal(signal.SIGTERM, _sigterm)
        code = EXIT_OK
        try:
            try:
                # make_context + invoke rather than cmd.main: click's main turns a broken pipe
                # into exit 1, where `| head` must end quietly with 0.
                args = list(sys.argv[1:] if argv is None else argv)
                with cmd.make_context(prog, args) as ctx:
                    cmd.invoke(ctx)
            except click.exceptions.Exit as e:
                code = e.exit_code
            except click.Abort:
                err(prog, "interrupted")
                code = EXIT_INTERRUPTED
            except click.UsageError as e:
                if e.ctx is not None:
                    click.echo(e.ctx.get_usage(), err=True)
                    click.echo(f"Try '{prog} --help' for help.", err=True)
                err(prog, f"error: {e.format_message()}")
                code = EXIT_USAGE
            except click.ClickException as e:
                if debug:
                    raise
                err(prog, f"error: {e.format_message()}")
                code = e.exit_code
            except RlvrError as e:  # every library error: UsageError 2, BadInput 3, Failure 1 (or its own code)
                if debug:
                    raise
                err(prog, f"error: {e}")
                code = e.exit_code
            except KeyboardInterrupt:
                err(prog, "interrupted")
                code = EXIT_INTERRUPTED
            except BrokenPipeError:
                _quiet_stdout()
                code = EXIT_OK
            except Exception as e:  # noqa: BLE001 - the one place that turns crashes into one line
                if debug:
                    raise
                err(prog, f"error: {type(e).__name__}: {e} (set RLVR_DEBUG=1 for a traceback)")
                code = EXIT_FAILURE
        except BaseException:  # RLVR_DEBUG=1 re-raised: the at_end hooks still run
            end()
            raise
        end()  # at_end hooks, after the last message (e.g. rlvr-train's copy of stderr)
        try:
            sys.stdout.flush()
        except BrokenPipeError:
            _quiet_stdout()
        except ValueError:
            pass
        sys.exit(code)

    main.command = cmd  # type: ignore[attr-defined]
    main.prog = prog  # type: ignore[attr-defined]
    return main


def input_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """FILES... ('-' = stdin, default) and --keep-going, shared by every record reader."""
    f = click.option(
        "--keep-going",
        is_flag=True,
        help="Turn a malformed line into an error record ({\"error\": {...}}) and go on, instead of stopping with exit 3.",
    )(f)
    f = click.argument("files", nargs=-1, type=click.Path(allow_dash=True))(f)
    return f


def progress_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--progress/--no-progress",
        default=None,
        help="Progress bar on stderr (default: on when stderr is a terminal).",
    )(f)


def tool_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--tools and its settings (rlvr.tools), shared by rlvr-rollout and rlvr-eval; the command
    gets tools, max_turns, tool_markers, tool_output_chars, tool_timeout (tool_settings)."""
    for opt in reversed((
        click.option("--tools", "tools", multiple=True, type=click.Choice(["python"]), help="Multi-turn rollouts: a closed code block runs in the sandbox and its output is appended as a tool turn (see docs/rollout.md)."),
        click.option("--max-turns", type=click.IntRange(min=1), default=4, show_default=True, help="With --tools: the most model turns per completion."),
        click.option("--tool-markers", default="both", show_default=True, metavar="both|markdown|code|OPEN|CLOSE", help="With --tools: the code blocks that call the tool: ```python ... ``` (markdown), <code> ... </code> (code), both, or a custom pair OPEN|CLOSE."),
        click.option("--tool-output-chars", type=click.IntRange(min=1), default=2000, show_default=True, help="With --tools: the tool output the model sees is cut to this many characters."),
        click.option("--tool-timeout", type=click.FloatRange(min=0, min_open=True), default=5.0, show_default=True, help="With --tools: CPU seconds of one tool call (its wall clock: twice that)."),
    )):
        f = opt(f)
    return f


def tool_settings(tools: tuple[str, ...], max_turns: int, tool_markers: str, tool_output_chars: int,
                  tool_timeout: float):
    """tool_options' values as rlvr.tools.ToolSettings; None without --tools (ConfigError on bad values)."""
    if not tools:
        return None
    from rlvr.tools import ToolSettings, parse_markers

    try:
        return ToolSettings(tools=tuple(dict.fromkeys(tools)), markers=parse_markers(tool_markers),
                            max_turns=max_turns, max_output_chars=tool_output_chars, timeout_s=tool_timeout)
    except ValueError as e:
        raise ConfigError(str(e)) from None


# The LLM judge's options (rlvr.verifiers.judge, its FLAGS), one definition for rlvr-verify and
# rlvr-eval: {key in the judge's options: click keywords}. Its other options are judge.KEY=VALUE.
JUDGE_OPTIONS = {
    "base_url": {"metavar": "BASE_URL", "help": "An OpenAI-compatible endpoint (its /v1 root) for the LLM judge."},
    "model": {"metavar": "NAME", "help": "The judge's model name at that endpoint."},
    "rubric": {"metavar": "TEXT|FILE", "help": "The judge's prompt: a format string with {prompt}, {completion}, "
                                               "{answer}, or a file holding one  [default: a 0-10 quality rubric]"},
    "mode": {"type": click.Choice(["judge", "rule", "weighted", "gate"]),
             "help": "judge: the judge alone; rule: the record's verifier alone; weighted: judge.weight x judge + the "
                     "rest x rule (as score); gate: the rule's verdict, wrong when the judge fails it  [default: judge]"},
    "cache": {"metavar": "DIR|false", "help": "Folder of cached judge replies  [default: $XDG_CACHE_HOME/rlvr/judge]"},
}


def judge_options(f: Callable[..., Any]) -> Callable[..., Any]:
    """--judge BASE_URL, --judge-model, --judge-rubric, --judge-mode, --judge-cache; the command
    gets them as one argument `judge`: {key: value} of the options given ({} for none)."""
    import functools

    from rlvr.verifiers.judge import FLAGS

    @functools.wraps(f)
    def wrapper(*args: Any, **kw: Any) -> Any:
        given = {key: kw.pop(f"judge_{key}") for key in JUDGE_OPTIONS}
        return f(*args, judge={k: v for k, v in given.items() if v is not None}, **kw)

    wrapper.__click_params__ = list(getattr(f, "__click_params__", []))  # type: ignore[attr-defined]
    for key, kw in reversed(JUDGE_OPTIONS.items()):
        wrapper = click.option(FLAGS[key], f"judge_{key}", **kw)(wrapper)
    return wrapper


def parse_shard(value: str | None) -> tuple[int, int] | None:
    """'I/N' -> (I, N) with 0 <= I < N; None passes through."""
    if value is None:
        return None
    try:
        i, n = (int(x) for x in value.split("/"))
    except ValueError:
        raise click.BadParameter(f"{value!r} is not I/N (e.g. 0/4)") from None
    if n < 1 or not 0 <= i < n:
        raise click.BadParameter(f"{value!r}: need 0 <= I < N")
    return i, n


def shard_callback(ctx: click.Context, param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    return parse_shard(value)


def int_list(value: str | None) -> list[int] | None:
    if value is None or value == "":
        return None
    try:
        return [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise click.BadParameter(f"{value!r} is not a comma-separated list of integers") from None


def with_examples(text: str, examples: str) -> str:
    """Help text followed by an Examples section that click prints verbatim."""
    import inspect

    lines = "\n".join(f"  {ln}" if ln else "" for ln in examples.strip("\n").splitlines())
    # cleandoc: click does not dedent help= text, so indented continuation lines would
    # otherwise show up as runs of spaces in --help.
    return f"{inspect.cleandoc(text)}\n\n\b\nExamples:\n{lines}\n"


def stdout_writer():
    from rlvr.records import RecordWriter

    return RecordWriter(sys.stdout.buffer)
