"""The contract every rlvr command keeps: help with examples, current man pages, and for
record readers: empty in -> empty out, a bad line -> exit 3 naming FILE:LINE, JSONL out."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tomllib

import orjson
import pytest

from helpers import REPO, invoke
from rlvr import manpages
from rlvr.commands import COMMANDS

RECORD_READERS = [n for n, c in COMMANDS.items() if c["records"]]


def test_every_command_is_a_console_script():
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as fh:
        scripts = tomllib.load(fh)["project"]["scripts"]
    assert set(scripts) == set(COMMANDS)
    for name, c in COMMANDS.items():
        assert scripts[name] == f"{c['module']}:main"


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_has_examples_and_exit_codes_doc(name):
    r = invoke(name, ["--help"])
    assert r.code == 0, r.stderr
    assert "Examples:" in r.stdout
    assert name in r.stdout or "Usage" in r.stdout


@pytest.mark.parametrize("name", list(COMMANDS))
def test_help_renders_each_example_on_its_own_line(name):
    """Each example of --help is one whole shell line, printed as written: a backslash escape
    such as \\n left to Python (a help text that is not a raw string) splits an example or, with
    a blank line, lets click re-wrap the rest into one run-on paragraph."""
    import importlib
    import shlex

    text = importlib.import_module(COMMANDS[name]["module"]).cmd.help
    examples = [ln.strip() for ln in text.split("\b\nExamples:\n", 1)[1].splitlines()]
    assert examples and all(examples), f"{name}: a blank or missing example line"
    for ex in examples:
        assert not ex.startswith("-"), f"{name}: example continues another: {ex!r}"
        shlex.split(ex, comments=True)   # balanced quotes: a whole command
    r = invoke(name, ["--help"])
    shown = r.stdout.split("Examples:\n", 1)[1].split("\n\n", 1)[0]
    assert [ln.strip() for ln in shown.splitlines()] == examples


def test_man_pages_are_current():
    assert manpages.main(["--check", os.path.join(REPO, "man")]) == 0, "run `make man`"
    for name in COMMANDS:
        page = open(os.path.join(REPO, "man", f"{name}.1")).read()
        assert ".SH EXIT STATUS" in page and ".SH OPTIONS" in page


def test_records_man_page_names_every_field():
    page = open(os.path.join(REPO, "man", "rlvr-records.5")).read()
    for field in ("id", "dataset", "prompt", "verifier", "answer", "tests", "test_setup", "entry_point", "prefix",
                  "instruction_id_list", "kwargs", "completions", "rewards", "verdicts", "status"):
        assert f"\\fB{field}\\fR" in page or f".B {field}" in page, field


@pytest.mark.parametrize("name", RECORD_READERS)
def test_empty_input_gives_empty_output(name):
    r = invoke(name, [], b"")
    assert r.code == 0, r.stderr
    assert r.stdout == ""


@pytest.mark.parametrize("name", RECORD_READERS)
def test_bad_line_exits_3_with_file_and_line(name, tmp_path):
    f = tmp_path / "in.jsonl"
    f.write_text('{"id": "a", "completions": ["1"], "rewards": [1.0]}\n{"id": "b", oops}\n')
    r = invoke(name, [str(f)])
    assert r.code == 3, (r.code, r.stderr)
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith(f"{name}: error: {f}:2: "), line


@pytest.mark.parametrize("name", RECORD_READERS)
def test_bad_field_names_the_field(name):
    r = invoke(name, [], '{"id": 7, "completions": ["x"]}\n')
    assert r.code == 3
    assert "<stdin>:1:" in r.stderr and "(field id)" in r.stderr


@pytest.mark.parametrize("name", RECORD_READERS)
def test_missing_file_is_a_clear_error(name, tmp_path):
    r = invoke(name, [str(tmp_path / "nope.jsonl")])
    assert r.code == 1 and "nope.jsonl: cannot open" in r.stderr and "Traceback" not in r.stderr
    r = invoke(name, [str(tmp_path)])  # a folder
    assert r.code == 1 and str(tmp_path) in r.stderr and "Traceback" not in r.stderr


def test_pipe_closed_early_exits_quietly(tmp_path):
    # The reader leaves after one line while the command still has ~1 MB to write: the
    # command sees EPIPE and must end with status 0 and nothing on stderr.
    big = tmp_path / "big.jsonl"
    big.write_text("".join(f'{{"id": "p{i}", "dataset": "d", "rewards": [1, 0, 1, 0]}}\n' for i in range(20000)))
    p = subprocess.run(f"{sys.executable} -c 'from rlvr.commands.passk import main; main()' --per-prompt {big} "
                       f"| head -n 1; echo status=${{PIPESTATUS[0]}} >&2",
                       shell=True, executable="/bin/bash", capture_output=True, text=True, cwd=REPO, timeout=300)
    assert len(p.stdout.splitlines()) == 1
    assert p.stderr.strip() == "status=0", p.stderr


def test_sigint_exits_130():
    code = ("import sys, time\n"
            "from rlvr.cli import run\n"
            "import click\n"
            "@click.command()\n"
            "def c():\n"
            "    print('ready', flush=True)\n"
            "    while True: time.sleep(1)\n"
            "run(c, 'rlvr-test')([])\n")
    # Readiness, not time: the signal goes only once the child says it is inside the command
    # (readline blocks for as long as start-up takes on a loaded machine). The child never ends
    # by itself, so the bound below only guards against a hang and kills it if one happens.
    # A job started in the background by a script inherits SIGINT ignored, and Python then keeps
    # it ignored: what Ctrl-C does is tested with the terminal's default disposition, given to
    # the child explicitly whatever this process inherited.
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         cwd=REPO, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        assert p.stdout.readline().strip() == "ready"
        p.send_signal(signal.SIGINT)
        _, err = p.communicate(timeout=120)
    finally:
        p.kill()
    assert p.returncode == 130
    assert err.strip() == "rlvr-test: interrupted"


def test_stdout_is_data_only(tmp_path):
    r = invoke("rlvr-data", ["toy", "--limit", "3"])
    assert r.code == 0
    for ln in r.stdout.splitlines():
        orjson.loads(ln)


# Modules that may use click and rlvr.cli: the commands, the CLI helpers, the man-page generator.
CLI_MODULES = ("rlvr/commands/", "rlvr/cli.py", "rlvr/manpages.py")


def _imports(path: str) -> set[str]:
    import ast

    tree = ast.parse(open(path, encoding="utf-8").read(), path)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
    return names


def test_library_never_imports_click_or_the_cli():
    offenders = []
    for root, _, files in os.walk(os.path.join(REPO, "rlvr")):
        for f in files:
            if not f.endswith(".py"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, REPO)
            if rel.startswith(CLI_MODULES):
                continue
            bad = {n for n in _imports(path) if n.split(".")[0] == "click" or n == "rlvr.cli"
                   or n.startswith("rlvr.cli.")}
            if bad:
                offenders.append(f"{rel}: {', '.join(sorted(bad))}")
    assert not offenders, "library modules must raise rlvr.errors, not use click/rlvr.cli:\n" + "\n".join(offenders)


def test_library_errors_carry_their_exit_codes():
    from rlvr import errors, gpu
    from rlvr.engines import CheckpointError, EngineError
    from rlvr.rollout import PromptError
    from rlvr.records import InputFileError, RecordError

    assert EngineError("x").exit_code == errors.EXIT_FAILURE
    assert CheckpointError("x").exit_code == PromptError("x").exit_code == errors.EXIT_USAGE
    assert RecordError("bad", "f.jsonl", 2, "id").exit_code == errors.EXIT_BAD_INPUT
    assert InputFileError("f: cannot open").exit_code == errors.EXIT_FAILURE
    assert gpu.TooFewFree("few", [], 2).exit_code == gpu.EXIT_TOO_FEW == 4
    assert gpu.NoGpuError("none").exit_code == gpu.EXIT_NO_GPU
    assert gpu.GpuError("x").exit_code == errors.EXIT_FAILURE
    # Still what older callers catch.
    assert isinstance(RecordError("m"), ValueError) and isinstance(InputFileError("m"), OSError)


def test_program_name_comes_from_run(tmp_path):
    # Warnings name the running command, which rlvr.cli.run takes from rlvr.commands.COMMANDS.
    r = invoke("rlvr-passk", ["--per-prompt"], '{"id": "a", "rewards": [1]}\n{"id": "a", "rewards": [0]}\n')
    assert r.code == 0 and "rlvr-passk: warning: 1 repeated id(s) counted once" in r.stderr
    from rlvr.cli import command_name
    for name, c in COMMANDS.items():
        mod = __import__(c["module"], fromlist=["cmd"])
        assert command_name(mod.cmd) == name
        assert mod.main.prog == name


def test_one_progress_helper_writes_to_stderr_only(capsys):
    from rlvr import cli
    from rlvr.progress import Progress, progress

    assert cli.progress is progress
    assert list(progress(range(3), "x", enabled=False)) == [0, 1, 2]
    assert capsys.readouterr().err == ""
    assert list(progress(iter(range(3)), "items", total=3, enabled=True)) == [0, 1, 2]
    with Progress(4, "rollout", True, unit="prompt", rate_unit="tok/s") as bar:
        bar.update(1, extra=10)
        bar(3)
    out = capsys.readouterr()
    assert out.out == "" and "items" in out.err and "3/3" in out.err and "4/4" in out.err and "tok/s" in out.err
