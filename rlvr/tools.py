"""Multi-turn rollouts with a Python tool: the model writes a code block, the code runs in
rlvr's sandbox, its output comes back as a tool turn, and generation resumes.

    tools = ToolSettings(max_turns=4)
    for handle, result in tool_stream(engine, requests, sampling, tools):
        result.samples[j].turns   # [{"role": "model", ...}, {"role": "tool", ...}, ...]

tool_stream takes the same requests as Engine.stream ((handle, prompt ids, seed[, sampling]))
and yields the same (handle, Result), one per request once all its n samples are done; each
sample is a whole trajectory. A sample's generation stops at a closing marker (a stop string:
```` ``` ```` or ``</code>`` by default); when the text since the last tool turn holds an
opening marker (```` ```python ````, ``<code>``) with code after it, the code runs in the
sandbox (run_python: the code verifier's sandbox and limits) and its output, cut to
max_output_chars and put through output_template, is appended as tokens the model did not
sample (a tool turn); the next model turn is generated from the prompt plus everything so far.
A closing marker with no code open (the opening fence itself, another language's block) is
not a call: generation simply goes on in the same model turn. It ends with the model's own
end (EOS or the caller's stop strings), after max_turns model turns, or when the sample's
max_tokens (model and tool tokens together) is spent.

Each sample's token_ids are the whole trajectory (model tokens as sampled, tool tokens
encoded here); ``turns`` gives each turn's token span [start, end), and loss_mask(turns)
the per-token 1 (model) / 0 (tool) mask a trainer applies. logprobs hold None at tool
tokens; versions (run-length weight versions) give tool tokens the version of the model
turn they answer, so per-token staleness holds across turns (each model turn carries the
version it was sampled on).

The turn logic is Trajectory's (request, after_model, after_tool, sample): tool_stream drives
it on one thread, and rlvr-train's in-flight server (rlvr.train.inflight) drives the same
trajectories with tool calls on a thread of their own.
"""

from __future__ import annotations

import signal as _signal
from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.engines.base import Result, Sample, Sampling, prompt_seed

TOOLS = ("python",)
MARKERS = {   # name -> (opening marker, closing marker)
    "markdown": ("```python", "```"),
    "code": ("<code>", "</code>"),
}


def parse_markers(value: str) -> tuple[tuple[str, str], ...]:
    """--tool-markers / rollout.tool_markers: both (default), markdown, code, or one custom
    pair written OPEN|CLOSE (e.g. "<python>|</python>")."""
    if value == "both":
        return tuple(MARKERS.values())
    if value in MARKERS:
        return (MARKERS[value],)
    opening, sep, closing = value.partition("|")
    if not sep or not opening or not closing:
        raise ValueError(f"tool markers: expected both, {', '.join(MARKERS)} or OPEN|CLOSE, got {value!r}")
    return ((opening, closing),)


def format_markers(markers: tuple[tuple[str, str], ...]) -> str:
    """The --tool-markers value that parse_markers turns into `markers`."""
    for name in ("both", *MARKERS):
        if parse_markers(name) == tuple(markers):
            return name
    if len(markers) != 1:
        raise ValueError(f"tool markers: {len(markers)} custom pairs have no --tool-markers form")
    return "|".join(markers[0])


OUTPUT_TEMPLATE = "\n```output\n{output}\n```\n"
STATUSES = ("ok", "error", "compile", "timeout", "cpu", "output_limit", "killed", "sandbox_error")


@dataclass(frozen=True)
class ToolSettings:
    """What a tool rollout does (defaults: both marker styles, 4 model turns, 2000
    characters of output, the code verifier's sandbox limits of 5 CPU seconds / 1 GiB)."""

    tools: tuple[str, ...] = ("python",)
    markers: tuple[tuple[str, str], ...] = (MARKERS["markdown"], MARKERS["code"])
    max_turns: int = 4                  # model turns (so at most max_turns - 1 tool calls)
    output_template: str = OUTPUT_TEMPLATE
    max_output_chars: int = 2000        # the tool output the model sees is cut to this
    timeout_s: float = 5.0              # CPU seconds of the code (the sandbox's RLIMIT_CPU)
    wall_s: float | None = None         # wall clock of one call (2 x timeout_s when None)
    memory_mb: int = 1024
    sandbox: str = "auto"               # SandboxConfig.mode

    def __post_init__(self) -> None:
        bad = [t for t in self.tools if t not in TOOLS]
        if bad or not self.tools:
            raise ValueError(f"unknown tool(s) {', '.join(bad) or '(none)'}: the tools are {', '.join(TOOLS)}")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")
        if self.max_output_chars < 1:
            raise ValueError("max_output_chars must be at least 1")
        if not self.markers or any(not o or not c for o, c in self.markers):
            raise ValueError("each tool marker needs an opening and a closing string")
        if "{output}" not in self.output_template:
            raise ValueError("the tool output template must contain {output}")

    @property
    def closers(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(c for _, c in self.markers))

    @classmethod
    def from_dict(cls, d: dict) -> "ToolSettings":
        """The inverse of to_dict (how the settings travel to a rollout actor)."""
        d = dict(d)
        return cls(tools=tuple(d.pop("tools")), markers=tuple(tuple(m) for m in d.pop("markers")), **d)

    def cli_args(self) -> list[str]:
        """The command-line options (rlvr-rollout, rlvr-eval) that give these settings; the
        output template, wall clock, memory and sandbox mode are the library's defaults."""
        return [*(x for t in self.tools for x in ("--tools", t)), "--max-turns", str(self.max_turns),
                "--tool-markers", format_markers(self.markers), "--tool-output-chars", str(self.max_output_chars),
                "--tool-timeout", f"{self.timeout_s:g}"]

    def to_dict(self) -> dict:
        """What generation.sampling.tools records (and a resume must match)."""
        return {"tools": list(self.tools), "markers": [list(m) for m in self.markers], "max_turns": self.max_turns,
                "output_template": self.output_template, "max_output_chars": self.max_output_chars,
                "timeout_s": self.timeout_s, "wall_s": self.wall_s, "memory_mb": self.memory_mb, "sandbox": self.sandbox}


def find_code(text: str, markers: Iterable[tuple[str, str]]) -> str | None:
    """The code of a block closed at the end of `text` (the text of a model turn so far,
    ending with a closing marker): what follows the last opening marker whose closing
    marker ends the text. None when no block is open there (not a call)."""
    best: tuple[int, str] | None = None
    for opening, closing in markers:
        if not text.endswith(closing):
            continue
        body = text[: len(text) - len(closing)]
        i = body.rfind(opening)
        if i < 0:
            continue
        code = body[i + len(opening):]
        if closing in code:   # this block was closed earlier; the closing marker here ends something else
            continue
        if best is None or i > best[0]:
            best = (i, code)
    if best is None:
        return None
    code = best[1]
    return code[1:] if code.startswith("\n") else code


def cut_output(text: str, limit: int) -> str:
    """The output the model sees: at most `limit` characters, the cut said."""
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [output cut: {len(text) - limit} more characters]"


def run_python(code: str, tools: ToolSettings) -> dict:
    """Run model-written code once in the sandbox (as __main__, stdin empty) under the code
    verifier's isolation and the tool's limits. {"status", "output" (stdout then stderr),
    and where known "exit_code", "signal"}; never raises for anything the code does."""
    from rlvr.sandbox import Limits, SandboxConfig, SandboxError, SandboxStop, SandboxTimeout, get_sandbox
    from rlvr.sandbox.server import ChildNotStarted

    limits = Limits(timeout_s=tools.timeout_s, wall_s=tools.wall_s, memory_mb=tools.memory_mb,
                    max_output_bytes=max(4 * tools.max_output_chars, 1 << 16))
    wall = limits.wall

    def work(session) -> dict:
        try:
            rep = session.request({"op": "stdio_load", "src": code})
            if "x" in rep:
                x = rep.get("x")
                name, msg = (x[0], x[1]) if isinstance(x, list) and len(x) == 2 else ("Error", "")
                session.finish()
                return {"status": "compile", "output": f"{name}: {msg}"}
            rep = session.request({"op": "stdio_run", "input": "", "wall_s": wall,
                                   "max_output": limits.max_output_bytes})
        except SandboxTimeout as e:
            fin = session.finish(wait=True)
            return {"status": "timeout", "output": (fin.output_tail or "") + f"\n[timeout: {e}]"}
        except SandboxStop as e:
            fin = session.finish(wait=True)
            return {"status": "killed", "output": (fin.output_tail or "") + f"\n[{e.reason}: {e}]"}
        if "infra" in rep:
            raise ChildNotStarted(str(rep["infra"])[:300])
        fin = session.finish()
        out = rep.get("out") if isinstance(rep.get("out"), str) else ""
        err = fin.output_tail or ""
        sig, code_ = rep.get("signal"), rep.get("exit")
        res: dict = {"output": out + err}
        if rep.get("timeout"):
            res["status"] = "timeout"
            res["output"] += f"\n[timeout: no exit within {wall:g} s]"
        elif rep.get("output_limit"):
            res["status"] = "output_limit"
            res["output"] += f"\n[output limit: over {limits.max_output_bytes} bytes]"
        elif sig == _signal.SIGXCPU:
            res["status"] = "cpu"
            res["output"] += f"\n[CPU time limit: {tools.timeout_s:g} s]"
        elif isinstance(sig, int):
            res.update(status="killed", signal=sig)
            res["output"] += f"\n[killed by signal {sig}]"
        elif isinstance(code_, int) and code_ != 0:
            res.update(status="error", exit_code=code_)
        else:
            res["status"] = "ok"
        return res

    try:
        sandbox = get_sandbox(SandboxConfig(mode=tools.sandbox))
        try:
            with sandbox.session(limits) as session:
                return work(session)
        except ChildNotStarted:
            with sandbox.session(limits) as session:
                return work(session)
    except (SandboxError, OSError) as e:
        return {"status": "sandbox_error", "output": f"[sandbox: {e}]"}


def loss_mask(turns: list[dict], n_tokens: int) -> list[int]:
    """Per completion token: 1 where the model sampled it, 0 in a tool turn."""
    mask = [1] * n_tokens
    for t in turns:
        if t.get("role") == "tool":
            a, b = t["tokens"]
            mask[a:b] = [0] * (b - a)
    return mask


@dataclass
class Trajectory:
    """One sample's trajectory, turn by turn (what tool_stream and rlvr.train.inflight's
    server both drive): request() gives the next model turn's request, after_model() takes
    its one-sample result and says what follows, after_tool() appends the tool's output."""

    prompt: list[int]
    sampling: Sampling      # the sample's own (its n is the request's; each turn asks for one)
    seed: int | None        # the request's seed; sample j starts from seed + j
    index: int = 0          # j, the sample's index in its request
    ids: list[int] = field(default_factory=list)
    logprobs: list[float | None] = field(default_factory=list)
    versions: list[list] = field(default_factory=list)
    turns: list[dict] = field(default_factory=list)
    model_turns: int = 0
    requests: int = 0
    finish: str = "stop"
    stop_reason: Any = None

    def left(self) -> int:
        return self.sampling.max_tokens - len(self.ids)

    def request(self, tools: ToolSettings) -> tuple[list[int], int | None, Sampling]:
        """The next model turn: (the prompt plus everything so far, its seed, its sampling: one
        sample, the closing markers as stop strings, the token budget left)."""
        stop = tuple(dict.fromkeys((*self.sampling.stop, *tools.closers)))
        sp = replace(self.sampling, n=1, stop=stop, max_tokens=self.left())
        seed = None
        if self.seed is not None:
            j = self.seed + self.index
            seed = j if self.requests == 0 else prompt_seed(j, "tool-turn", epoch=self.requests)
        self.requests += 1
        return self.prompt + self.ids, seed, sp

    def add(self, role: str, text: str, ids: list[int], lps: list | None, versions: list[list], **extra) -> None:
        start = len(self.ids)
        self.ids += ids
        self.logprobs += lps if lps is not None else [None] * len(ids)
        for v, k in versions:
            if self.versions and self.versions[-1][0] == v:
                self.versions[-1][1] += k
            elif k:
                self.versions.append([v, k])
        last = self.turns[-1] if self.turns else None
        if role == "model" and last is not None and last["role"] == "model":   # a continuation
            last["text"] += text
            last["tokens"][1] = len(self.ids)
            return
        self.turns.append({"role": role, "text": text, "tokens": [start, len(self.ids)], **extra})

    def model_text(self) -> str:
        return self.turns[-1]["text"] if self.turns and self.turns[-1]["role"] == "model" else ""

    def after_model(self, s: Sample, tools: ToolSettings) -> tuple[str, str | None]:
        """Append a model turn (the engine's one sample for request()). Returns ("call", code)
        when it closed a code block the tool runs, ("resume", None) when generation goes on in
        the same turn (a closing marker with no block open), ("done", None) when the sample ends."""
        closers = tools.closers
        text = s.text
        called = s.finish_reason == "stop" and isinstance(s.stop_reason, str) and s.stop_reason in closers \
            and s.stop_reason not in self.sampling.stop
        if called:
            text += s.stop_reason   # the engine cuts the stop string from the text (its tokens stay)
        if not self.turns or self.turns[-1]["role"] != "model":
            self.model_turns += 1
        self.add("model", text, list(s.token_ids), s.logprobs, s.versions or [])
        self.finish, self.stop_reason = s.finish_reason, s.stop_reason
        if not called:
            return "done", None
        if self.left() <= 0:
            self.finish, self.stop_reason = "length", None
            return "done", None
        code = find_code(self.model_text(), tools.markers)
        if code is None:   # the closing marker closed no code block: go on in this turn
            return "resume", None
        if self.model_turns >= tools.max_turns:
            self.turns[-1]["max_turns"] = True   # the last turn's call is not run
            return "done", None
        return "call", code

    def after_tool(self, code: str, out: dict, tools: ToolSettings, tokenizer: Any, version: Any) -> bool:
        """Append the tool turn for `code` (run_python's `out`), its tokens tagged with the
        version of the model turn it answers (`version` when there is none). Whether the
        sample goes on (False: the budget is spent)."""
        output = cut_output(out["output"], tools.max_output_chars)
        shown = tools.output_template.replace("{output}", output)
        ids = list(tokenizer.encode(shown, add_special_tokens=False))
        last_v = self.versions[-1][0] if self.versions else version
        cut = len(ids) > self.left()
        ids = ids[: self.left()]
        extra = {k: out[k] for k in ("exit_code", "signal") if k in out}
        self.add("tool", shown if not cut else tokenizer.decode(ids), ids, None, [[last_v, len(ids)]],
                 tool="python", code=code, status=out["status"], output=output, **extra)
        if cut or self.left() <= 0:
            self.finish, self.stop_reason = "length", None
            return False
        return True

    def sample(self) -> Sample:
        return Sample(text="".join(t["text"] for t in self.turns), token_ids=list(self.ids), finish_reason=self.finish,
                      stop_reason=self.stop_reason, logprobs=list(self.logprobs) if self.sampling.logprobs else None,
                      versions=[list(v) for v in self.versions], turns=self.turns)


def tool_stream(engine: Any, requests: Iterable[tuple], sampling: Sampling, tools: ToolSettings,
                window: int | None = None, each_step: bool = False) -> Iterator[tuple[Any, Result]]:
    """Engine.stream with tool turns (see the module docstring): each of a request's n
    samples is its own trajectory, generated turn by turn; (handle, Result) once all n are
    done. Tool code runs here, between engine steps, one call at a time. each_step: the
    source is asked again after every engine step (Engine.stream's; a caller's deadline)."""
    tok = engine.tokenizer
    pending: deque = deque()
    state: dict[tuple, Trajectory] = {}
    done: dict[Any, list] = {}
    firsts: dict[Any, Result] = {}
    src = iter(requests)

    def source() -> Iterator:
        while True:
            if pending:
                yield pending.popleft()
                continue
            try:
                item = next(src)
            except StopIteration:
                if not state:
                    return
                yield None   # waiting for turns in flight
                continue
            if item is None:
                yield None
                continue
            handle, ids, seed = item[:3]
            own = item[3] if len(item) > 3 else sampling
            done[handle] = [None] * own.n
            for j in range(own.n):
                tr = Trajectory(prompt=list(ids), sampling=own, seed=seed, index=j)
                state[(handle, j)] = tr
                yield ((handle, j), *tr.request(tools))

    for (handle, j), res in engine.stream(source(), sampling, window=window, each_step=each_step):
        tr = state[(handle, j)]
        firsts.setdefault(handle, res)
        action, code = tr.after_model(res.samples[0], tools)
        if action == "call":
            action = "resume" if tr.after_tool(code, run_python(code, tools), tools, tok, res.version) else "done"
        if action == "resume":
            pending.append(((handle, j), *tr.request(tools)))
            continue
        del state[(handle, j)]
        done[handle][j] = tr.sample()
        if all(x is not None for x in done[handle]):
            first = firsts.pop(handle)
            out_res = Result(prompt_token_ids=list(first.prompt_token_ids), samples=done.pop(handle),
                             version=res.version)
            yield handle, out_res
