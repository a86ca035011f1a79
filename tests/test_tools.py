"""Multi-turn rollouts with a Python tool (rlvr.tools): a scripted engine writes known code
blocks, so the tool outputs, token spans, loss masks and records are checked exactly;
hostile tool code gets the sandbox's verdicts and the rollout goes on; the tiny model runs
the mechanics on the real engines; the pipe rlvr-rollout --tools python | rlvr-verify; rlvr-train's
engine actor with tools (a deadline, an abort, served in flight) and the in-flight server's tool
turns beside other requests and updates."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import pytest
from fakes.scripted_engine import ScriptedEngine, in_turns
from machine_time import scaled
from test_train import SMALL, base_model, cfg_for, ray_session, run as train_run, trace  # noqa: F401 (fixtures)

from rlvr.engines.base import Sampling, load_tokenizer
from rlvr.records import RecordWriter
from rlvr.rollout import RolloutSettings, run
from rlvr.tools import ToolSettings, cut_output, find_code, loss_mask, tool_stream

PROMPT = "Q: what is 6*7?\nA: "
TURN1 = "Let me compute.\n```python\nprint(6*7)\n```"
TURN2 = "The answer is \\boxed{42}."
TOOLS = ToolSettings(timeout_s=2.0)
FAST = ToolSettings(timeout_s=1.0, max_output_chars=200)


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return load_tokenizer(tiny_model_dir)


def scripted(turns: list[str], prompt: str = PROMPT):
    return in_turns(turns, prompt)


def cli(name: str, *args: str, stdin: bytes = b"") -> subprocess.CompletedProcess:
    r = subprocess.run([sys.executable, "-c", f"from rlvr.commands.{name} import main; main()", *args], input=stdin,
                       capture_output=True, timeout=900)
    assert r.returncode == 0, r.stderr.decode()[-2000:]
    return r


def verify_cmd(stdin: bytes, *args: str) -> list[dict]:
    return [json.loads(x) for x in cli("verify", "--jobs", "1", *args, stdin=stdin).stdout.decode().splitlines()]


def enc(tok, s: str) -> list[int]:
    return tok.encode(s, add_special_tokens=False)


def one(eng, prompt: str, tools: ToolSettings, sampling: Sampling | None = None):
    sampling = sampling or Sampling(max_tokens=512, seed=0, logprobs=True)
    [(h, res)] = list(tool_stream(eng, [(0, enc(eng.tokenizer, prompt), 7)], sampling, tools))
    assert h == 0
    return res.samples


def test_find_code_and_cut():
    m = ToolSettings().markers
    assert find_code("x\n```python\nprint(1)\n```", m) == "print(1)\n"
    assert find_code("<code>print(2)</code>", m) == "print(2)"
    assert find_code("```", m) is None                      # the opening fence itself: not a call
    assert find_code("```text\nhi\n```", m) is None         # another language's block
    assert find_code("```python\na\n```\nthen ```", m) is None   # that block was closed before
    assert cut_output("abcdef", 4) == "abcd\n... [output cut: 2 more characters]"
    with pytest.raises(ValueError, match="unknown tool"):
        ToolSettings(tools=("bash",))
    with pytest.raises(ValueError, match="output"):
        ToolSettings(output_template="no placeholder")


def test_two_turn_trajectory_is_exact(tok):
    eng = ScriptedEngine(tok, scripted([TURN1, TURN2]))
    [s] = one(eng, PROMPT, TOOLS)
    shown = "\n```output\n42\n\n```\n"
    assert s.text == TURN1 + shown + TURN2
    t1, t2 = enc(tok, "```"), enc(tok, "python\nprint(6*7)\n```")
    pre = enc(tok, "Let me compute.\n")
    # turn 1 stopped at the opening fence, went on (same model turn), stopped at the closing one
    model1 = pre + t1 + t2
    tool = enc(tok, shown)
    model2 = enc(tok, TURN2)
    assert s.token_ids == model1 + tool + model2
    a, b = len(model1), len(model1) + len(tool)
    assert [t["role"] for t in s.turns] == ["model", "tool", "model"]
    assert [t["tokens"] for t in s.turns] == [[0, a], [a, b], [b, len(s.token_ids)]]
    assert s.turns[1]["code"] == "print(6*7)\n" and s.turns[1]["output"] == "42\n" and s.turns[1]["status"] == "ok"
    assert s.turns[1]["text"] == shown
    assert loss_mask(s.turns, len(s.token_ids)) == [1] * a + [0] * (b - a) + [1] * (len(s.token_ids) - b)
    assert s.logprobs == [-0.5] * a + [None] * (b - a) + [-0.5] * (len(s.token_ids) - b)
    assert s.versions == [[0, len(s.token_ids)]]
    assert s.finish_reason == "stop"
    # three engine requests: the turn resumed on the prompt plus everything so far
    assert [p for p, _, _ in eng.seen] == [PROMPT, PROMPT + "Let me compute.\n```", PROMPT + TURN1 + shown]
    assert [sp.max_tokens for _, _, sp in eng.seen] == [512, 512 - len(pre + t1), 512 - b]
    assert eng.seen[0][1] == 7 and len({sd for _, sd, _ in eng.seen}) == 3


def test_budget_counts_every_token_and_max_turns(tok):
    eng = ScriptedEngine(tok, scripted([TURN1, TURN2]))
    [s] = one(eng, PROMPT, TOOLS, Sampling(max_tokens=12, seed=0))
    assert len(s.token_ids) == 12 and s.finish_reason == "length"
    # one model turn only: the block it closes is not run
    eng = ScriptedEngine(tok, scripted([TURN1, TURN2]))
    [s] = one(eng, PROMPT, ToolSettings(max_turns=1))
    assert s.text == TURN1 and [t["role"] for t in s.turns] == ["model"] and s.turns[0]["max_turns"]
    # the <code> markers, and a tool error that the next turn sees
    eng = ScriptedEngine(tok, scripted(["<code>1/0</code>", "Oops."]))
    [s] = one(eng, PROMPT, TOOLS)
    assert s.turns[1]["status"] == "error" and s.turns[1]["exit_code"] == 1
    assert "ZeroDivisionError" in s.turns[1]["output"] and s.text.endswith("Oops.")


def test_hostile_tool_code_gets_the_sandboxes_verdicts(tok, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOPSECRET-1234")
    attacks = {
        "read": (f"print(open({str(secret)!r}).read())", None),
        "network": ("import socket\ns = socket.create_connection(('127.0.0.1', 22), timeout=1)\nprint('connected')",
                    None),
        "loop": ("while True:\n    pass", ("cpu", "timeout")),
        "fork": ("import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
                 ("cpu", "timeout", "killed", "error")),
        "flood": ("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)", ("output_limit", "killed")),
    }
    for name, (code, statuses) in attacks.items():
        eng = ScriptedEngine(tok, scripted([f"```python\n{code}\n```", "Done."]))
        [s] = one(eng, PROMPT, FAST)
        tool = s.turns[1]
        assert "TOPSECRET" not in s.text and "connected" not in tool["output"], name
        if statuses is None:
            assert tool["status"] == "error", (name, tool)
        else:
            assert tool["status"] in statuses, (name, tool)
        assert len(tool["output"]) <= FAST.max_output_chars + 50 and tool["output"] in tool["text"], name
        assert s.text.endswith("Done."), name   # the rollout went on


def test_rollout_records_and_verify(tok):
    eng = ScriptedEngine(tok, scripted([TURN1, TURN2]))
    settings = RolloutSettings(model="scripted", engine="scripted", sampling=Sampling(n=2, max_tokens=256),
                               tools=TOOLS, token_ids=True)
    buf = io.BytesIO()
    recs = [{"id": "q1", "prompt": PROMPT, "answer": "42"}, {"id": "q2", "prompt": PROMPT, "answer": "41"}]
    run(recs, settings, RecordWriter(buf), engine=eng, progress=False)
    out = [json.loads(line) for line in buf.getvalue().decode().splitlines()]
    assert [r["id"] for r in out] == ["q1", "q2"]
    r = out[0]
    assert len(r["completions"]) == 2 and len(r["trajectories"]) == 2
    assert r["completions"][0] == TURN1 + "\n```output\n42\n\n```\n" + TURN2
    assert r["completion_tokens"] == [len(x) for x in r["completion_token_ids"]]
    assert [t["role"] for t in r["trajectories"][0]] == ["model", "tool", "model"]
    assert r["generation"]["sampling"]["tools"]["max_turns"] == 4
    # rlvr-verify judges the whole completion (model and tool turns): the boxed answer is in the last turn
    got = verify_cmd(buf.getvalue(), "--verifier", "math")
    assert got[0]["rewards"] == [1.0, 1.0] and got[1]["rewards"] == [0.0, 0.0]


@pytest.mark.parametrize("engine", ["hf_engine", "vllm_engine", "vllm_in_flight"])
def test_tiny_model_on_the_real_engines(engine, request):
    """The real engines (hf, vLLM, and vLLM served in flight by rlvr.train.inflight): markers a
    random model writes often ("a" ... "e": the code is noise, a compile or runtime error) make
    turns stop at the closing marker, run the tool and resume from the prompt plus what came
    before. In flight, with no update, the trajectories are tool_stream's own."""
    from rlvr.train.inflight import InFlightServer

    eng = request.getfixturevalue("vllm_engine" if engine == "vllm_in_flight" else engine)
    # the noise code fails to compile or raises: its wall limit only has to outlast a busy machine
    tools = ToolSettings(markers=(("a", "e"),), max_turns=3, max_output_chars=20, timeout_s=1.0, wall_s=scaled(10))
    sampling = Sampling(n=4, max_tokens=128, seed=0, temperature=1.0, logprobs=True)
    [(_, res)] = list(tool_stream(eng, [(0, enc(eng.tokenizer, "Hello"), 3)], sampling, tools))
    if engine == "vllm_in_flight":
        server = InFlightServer(eng, "recompute", lambda: 0)
        try:
            results, errors, v0 = server.generate([enc(eng.tokenizer, "Hello")], [sampling], [3], tools=tools)
        finally:
            server.close()
        assert not errors and v0 == 0
        assert [s.token_ids for s in results[0].samples] == [s.token_ids for s in res.samples]
        assert [s.turns for s in results[0].samples] == [s.turns for s in res.samples]
        res = results[0]
    assert len(res.samples) == 4
    roles = [[t["role"] for t in s.turns] for s in res.samples]
    assert any(("tool", "model") in set(zip(r, r[1:])) for r in roles), roles   # a turn after a tool turn
    for s in res.samples:
        assert 0 < len(s.token_ids) <= 128 and len(s.logprobs) == len(s.token_ids)
        spans = [t["tokens"] for t in s.turns]
        assert spans[0][0] == 0 and spans[-1][1] == len(s.token_ids)
        assert all(a[1] == b[0] for a, b in zip(spans, spans[1:]))
        assert sum(loss_mask(s.turns, len(s.token_ids))) == sum(1 for x in s.logprobs if x is not None)
        assert sum(t["role"] == "model" for t in s.turns) <= 3
        assert all(t["status"] in ("compile", "error") for t in s.turns if t["role"] == "tool")


def test_pipe_rollout_tools_into_verify(tiny_model_dir, tmp_path):
    src = tmp_path / "p.jsonl"
    src.write_text(json.dumps({"id": "a", "prompt": "2+2=", "answer": "4"}) + "\n")
    roll = cli("rollout", "-m", tiny_model_dir, "--engine", "hf", "--dtype", "float32", "--max-tokens", "16",
               "--tools", "python", "--max-turns", "2", str(src))
    [rec] = verify_cmd(roll.stdout, "--verifier", "math")
    assert rec["generation"]["sampling"]["tools"]["tools"] == ["python"]
    assert len(rec["trajectories"]) == 1 and rec["trajectories"][0][0]["role"] == "model"
    assert len(rec["rewards"]) == 1


def test_in_flight_server_runs_a_tool_beside_other_requests_and_resumes_on_the_new_weights(tok, monkeypatch):
    """rlvr.train.inflight with tools, on the scripted engine: while a sample's tool call runs,
    another call's request is generated and an update lands; the sample's next model turn then
    runs on the new weights, its tool tokens keep the version of the turn they answer and are
    masked out of the loss, and the trajectory is the one tool_stream makes. A server closed
    while a tool runs fails the call that waits on it."""
    import threading

    import rlvr.tools
    from rlvr.train.inflight import InFlightServer

    plain = "Q: say hi\nA: "
    turns = scripted([TURN1, TURN2])
    eng = ScriptedEngine(tok, lambda text: turns(text) if text.startswith(PROMPT) else "Hi.")
    started, proceed = threading.Event(), threading.Event()
    real = rlvr.tools.run_python

    def held(code, tools):
        out = real(code, tools)
        started.set()
        assert proceed.wait(timeout=300)
        return out

    monkeypatch.setattr(rlvr.tools, "run_python", held)
    version = {"v": 0}
    server = InFlightServer(eng, "recompute", lambda: version["v"])
    sampling = Sampling(max_tokens=512, seed=0, logprobs=True)
    out: dict = {}
    worker = threading.Thread(target=lambda: out.update(r=server.generate([enc(tok, PROMPT)], [sampling], [7],
                                                                          tools=TOOLS)))
    try:
        worker.start()
        assert started.wait(timeout=300)
        # the tool is running: the engine serves another call, and takes an update
        other, errors, _ = server.generate([enc(tok, plain)], [sampling], [1])
        assert not errors and other[0].samples[0].text == "Hi." and other[0].samples[0].turns is None

        def load():
            eng.version = version["v"] = 1
        server.run(load)
        proceed.set()
        worker.join(timeout=300)
    finally:
        proceed.set()
        server.close()
    results, errors, v0 = out["r"]
    assert not errors and v0 == 0
    [s] = results[0].samples
    shown = "\n```output\n42\n\n```\n"
    assert s.text == TURN1 + shown + TURN2 and [t["role"] for t in s.turns] == ["model", "tool", "model"]
    (_, a), (_, b) = s.turns[1]["tokens"], s.turns[2]["tokens"]
    assert s.versions == [[0, a], [1, len(s.token_ids) - a]]    # the tool turn: the version of the turn it answers
    assert loss_mask(s.turns, len(s.token_ids)) == [1] * s.turns[1]["tokens"][0] + [0] * (a - s.turns[1]["tokens"][0]) \
        + [1] * (b - a)
    # a server closed while a tool runs fails the call waiting on it (it never hangs)
    started.clear()
    proceed.clear()
    server = InFlightServer(ScriptedEngine(tok, scripted([TURN1, TURN2])), "recompute", lambda: 0)

    def closed_call():
        try:
            server.generate([enc(tok, PROMPT)], [sampling], [7], tools=TOOLS)
        except RuntimeError as e:
            out["closed"] = str(e)
    worker = threading.Thread(target=closed_call)
    worker.start()
    assert started.wait(timeout=300)
    server.close()
    proceed.set()
    worker.join(timeout=300)
    assert not worker.is_alive() and "closed" in out["closed"]
    monkeypatch.setattr(rlvr.tools, "run_python", real)
    [ref] = one(ScriptedEngine(tok, scripted([TURN1, TURN2])), PROMPT, TOOLS)
    assert (s.token_ids, s.turns, s.logprobs) == (ref.token_ids, ref.turns, ref.logprobs)


def test_an_engine_actors_tool_rollouts_stop_at_a_deadline_or_an_abort_and_run_in_flight(tiny_model_dir, tok,
                                                                                         monkeypatch):
    """rlvr-train's engine actor with tools: rollout.timeout_s and sync.abort_in_flight cut a tool
    trajectory between two turns (the prompt comes back as a timeout or as aborted, the finished
    prompt stays); served in flight (sync.mode in_flight) its samples carry their turns."""
    from types import SimpleNamespace

    from rlvr.train import actors
    from rlvr.train.actors import EngineActor

    three = scripted([TURN1, "Again:\n```python\nprint(6+7)\n```", TURN2])
    clock = {"t": 0.0}
    hooks: dict = {}

    def respond(text: str) -> str:
        if text.startswith(PROMPT) and text.count("```output\n") == 1:
            hooks.get("after_one_tool_turn", lambda: None)()
        return three(text) if text.startswith(PROMPT) else "Hi."

    sampling = {"n": 1, "temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_tokens": 256, "tools": TOOLS.to_dict()}
    prompts, seeds = [enc(tok, PROMPT), enc(tok, "Q: say hi\nA: ")], [1, 2]
    actor = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512})
    actor.engine = ScriptedEngine(tok, respond)
    full = actor.generate(prompts, sampling, seeds, abortable=True)
    assert full["aborted"] == full["timeouts"] == [] and full["samples"][1][0]["text"] == "Hi."
    assert [t["role"] for t in full["samples"][0][0]["turns"]] == ["model", "tool", "model", "tool", "model"]
    hooks["after_one_tool_turn"] = lambda: actor.abort_generation(1)   # newer weights on their way
    out = actor.generate(prompts, sampling, seeds, abortable=True)
    assert out["aborted"] == [0] and out["timeouts"] == [] and out["samples"] == [[], full["samples"][1]]
    actor.abort_below = None
    monkeypatch.setattr(actors, "time", SimpleNamespace(monotonic=lambda: clock["t"], time=lambda: 0.0))
    hooks["after_one_tool_turn"] = lambda: clock.update(t=100.0)     # rollout.timeout_s passes mid-trajectory
    out = actor.generate(prompts, sampling, seeds, timeout_s=10.0)
    assert out["timeouts"] == [0] and out["aborted"] == [] and out["samples"] == [[], full["samples"][1]]
    monkeypatch.undo()
    served = EngineActor(tiny_model_dir, "hf", {"dtype": "float32", "max_model_len": 512}, in_flight="recompute")
    try:
        tiny = {**sampling, "n": 2, "max_tokens": 48,
                "tools": ToolSettings(markers=(("a", "e"),), max_turns=2, max_output_chars=10, timeout_s=1.0).to_dict()}
        got = served.generate([enc(tok, "Hello")], tiny, [3])
    finally:
        served.close()
    assert not got["errors"] and len(got["samples"][0]) == 2
    for smp in got["samples"][0]:
        assert smp["turns"][0]["role"] == "model" and smp["turns"][-1]["tokens"][1] == len(smp["token_ids"])
        assert sum(c for _, c in smp["versions"]) == len(smp["token_ids"])


def test_config_checks_tools(tiny_model_dir):
    from rlvr.errors import ConfigError
    from rlvr.train.config import check

    for sets in (["sync.mode=in_flight"], ["rollout.timeout_s=30"], ["sync.abort_in_flight=drop", "train.max_staleness=1"]):
        check(cfg_for(tiny_model_dir, "rollout.tools=[python]", *sets))   # every sync mode runs tool rollouts
    with pytest.raises(ConfigError, match="unknown tool"):
        check(cfg_for(tiny_model_dir, "rollout.tools=[bash]"))
    with pytest.raises(ConfigError, match="OPEN|CLOSE"):
        check(cfg_for(tiny_model_dir, "rollout.tools=[python]", "rollout.tool_markers=nope"))


def test_two_turn_tool_rollouts_in_a_tiny_training_run(ray_session, base_model, tmp_path):
    """rlvr-train with rollout.tools on the hf engine, asynchronous (max_staleness 1) with
    in-flight updates (sync.mode in_flight: the engine actors' server runs the tool turns; the
    between_rounds engine call with tools, synchronous or asynchronous, is tested on its own
    above): the tiny model's random text calls the tool (markers "a" ... "e"); the rollouts
    record the turns and every token's version, and training runs on sequences whose tool
    tokens are masked out of the loss."""
    cfg = cfg_for(base_model, "train.steps=2", "train.max_staleness=1", "checkpoint.every=0", *SMALL,
                  "sync.mode=in_flight",
                  "train.filter_zero_std=false", "train.mask_truncated=false",
                  "rollout.max_tokens=48", "rollout.tools=[python]", "rollout.tool_markers=a|e",
                  "rollout.max_turns=2", "rollout.tool_output_chars=10", "rollout.tool_timeout=1")
    train_run(cfg, tmp_path)
    rows = [r for r in trace(tmp_path) if "loss/policy" in r]
    assert len(rows) == 2 and all(r["loss/policy"] == r["loss/policy"] for r in rows), trace(tmp_path)
    recs = trace(tmp_path, "rollouts.jsonl")
    trajs = [t for r in recs for t in r.get("trajectories") or []]
    assert trajs and any(t[i]["role"] == "tool" for t in trajs for i in range(len(t)))
    for r in recs:
        for t, n, spans in zip(r.get("trajectories") or [], r["completion_tokens"], r["token_versions"]):
            assert t[-1]["tokens"][1] == n and sum(x["role"] == "model" for x in t) <= 2
            assert sum(c for _, c in spans) == n and all(r["step"] - 2 <= v <= r["step"] - 1 for v, _ in spans)


def test_trainer_masks_tool_tokens_out_of_the_loss(tiny_model_dir):
    """Batch.token_mask (from the turns, as batch.assemble builds it) leaves tool tokens out:
    the engine sends 0.0 as their log-prob (not sampled), which would count as a large
    engine-vs-trainer difference, and their count leaves the token total."""
    import torch

    from rlvr.train.batch import Group, assemble
    from rlvr.train.config import TrainerConfig
    from rlvr.train.trainer import PolicyTrainer

    t = PolicyTrainer(tiny_model_dir, TrainerConfig(lr=1e-2, micro_batch_size=2, dtype="float32", device="cpu"),
                      max_tokens=8, total_steps=10)
    p, comp = [5, 6, 7], [10, 11, 12, 13, 14]
    with torch.no_grad():
        lp, _, _ = t._logprobs(t.model, [p], [comp])
    own = [float(x) for x in lp[0, :len(comp)]]
    turns = [{"role": "model", "tokens": [0, 2]}, {"role": "tool", "tokens": [2, 4]}, {"role": "model", "tokens": [4, 5]}]
    engine_lps = own[:2] + [0.0, 0.0] + own[4:]
    samples = [{"token_ids": comp, "logprobs": engine_lps, "finish_reason": "stop", "turns": turns, "versions": []},
               {"token_ids": comp, "logprobs": engine_lps, "finish_reason": "stop", "turns": turns, "versions": []}]
    g = Group({"id": "a", "prompt": "q"}, 0, p, samples, 0, 0, verified={"rewards": [1.0, 0.0]})
    a = assemble([g], 0, "group", False, False, max_tokens=8)
    assert a.batch.token_mask == [[1, 1, 0, 0, 1]] * 2
    m = t.step(a.batch)
    assert m["logprob/engine_vs_trainer_abs_diff"] < 1e-4
    unmasked = PolicyTrainer(tiny_model_dir, t.cfg, max_tokens=8, total_steps=10)
    a.batch.token_mask = None
    assert unmasked.step(a.batch)["logprob/engine_vs_trainer_abs_diff"] > 1.0
