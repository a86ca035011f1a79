"""The LLM judge: a verifier that asks a model behind an OpenAI-compatible endpoint to grade a
completion against a rubric, alone or combined with the record's own rule verifier.

    verify(record, completion, {"base_url": "http://127.0.0.1:8000/v1", "model": "judge"})
    -> {"status": "correct", "extracted": "8", "score": 0.8,
        "judge": {"model": "judge", "reply": "Score: 8", "cached": false, "attempts": 1}}

Options (``judge.*``: rlvr-verify --judge URL and --set judge.KEY=VALUE; rlvr-train
``verify.judge``):

- ``base_url`` (the ``/v1`` root), ``model``; ``api_key_env`` names the environment variable
  holding the key (sent as a Bearer token; none when unset); ``api``: chat
  (``/chat/completions``, default) or completions (``/completions``).
- ``rubric``: the prompt, a format string with ``{prompt}``, ``{completion}``, ``{answer}``
  (a file path is read); ``rubrics``: {dataset: rubric} for per-dataset templates.
- ``parser``: number (a score on ``min_score``..``max_score``, default 0..10, normalised to
  [0, 1] as ``score``) or yes_no (yes 1, no 0); ``threshold``: the normalised score at or above
  which the status is correct (default 0.5). A reply with no score is ``judge_unparsable``
  (reward from the table, 0 by default), never a silent 0; the reply is kept in the verdict.
- ``mode``: judge (the judge alone), rule (the record's verifier alone; no call), weighted
  (``weight`` x judge + (1 - weight) x rule, as ``score``) or gate (the rule's verdict, turned
  wrong with score 0 when the judge fails it). ``datasets``: judge only these datasets (others
  keep their own verifier); records whose verifier is ``judge`` are always judged.
- ``timeout`` (seconds per call, default 60), ``retries`` (default 3: 5xx, 429, timeouts,
  connection errors and bodies that are not a completion are retried with exponential
  ``backoff``, default 1 s), ``max_tokens`` (default 512), ``temperature`` (default 0).
- ``cache``: a folder where replies are kept, keyed by (model, api, sampling, rubric,
  prompt, completion, answer), so a repeated or resumed verification does not pay twice
  (default ``$XDG_CACHE_HOME/rlvr/judge``; false: none). Replies are parsed when read, so a
  parser change applies to cached replies too; failed calls are not cached.

Concurrency is the verifier pool's: each worker makes one call at a time (``-j`` bounds the
calls in flight). The pool injects ``rules`` (the other verifiers' options) so that weighted
and gate modes run the record's own verifier with its options, in the same worker.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import re
import socket
import tempfile
import time
import urllib.error
import urllib.request

NAME = "judge"
VERSION = "1"
UNPARSABLE = "judge_unparsable"
MODES = ("judge", "rule", "weighted", "gate")
PARSERS = ("number", "yes_no")
APIS = ("chat", "completions")
NOT_CONFIGURED = ("this record is graded by an LLM judge and none is configured "
                  "(rlvr-verify --judge URL; rlvr-train: verify.judge.base_url)")

DEFAULT_RUBRIC = """You are grading a response to a user's request.

Request:
{prompt}

Reference answer (may be empty):
{answer}

Response:
{completion}

Rate how well the response fulfils the request: correct, helpful, coherent and fluent. \
Gibberish, repetition or an empty response scores 0. Reply with one line "Score: N", N an integer from 0 to 10."""

DEFAULTS = {"base_url": None, "model": None, "api_key_env": None, "api": "chat", "rubric": None, "rubrics": {},
            "parser": "number", "min_score": 0.0, "max_score": 10.0, "threshold": 0.5, "mode": "judge",
            "weight": 0.5, "datasets": [], "timeout": 60.0, "retries": 3, "backoff": 1.0, "max_tokens": 512,
            "temperature": 0.0, "cache": None, "rules": {}}


# The options rlvr-verify and rlvr-eval take as flags (rlvr.cli.judge_options); others are judge.KEY=VALUE.
FLAGS = {"base_url": "--judge", "model": "--judge-model", "rubric": "--judge-rubric", "mode": "--judge-mode",
         "cache": "--judge-cache"}

# ----------------------------------------------------------------------------- options


def _rubric_text(value) -> str:
    """A rubric given inline, or the contents of a file when the value names one."""
    if isinstance(value, str) and "{" not in value and "\n" not in value and os.path.isfile(value):
        with open(value, encoding="utf-8") as fh:
            return fh.read()
    return value


def _check_template(text, where: str) -> None:
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{where} must be a non-empty format string (or a file holding one)")
    try:
        text.format(prompt="p", completion="c", answer="a")
    except (KeyError, IndexError, ValueError) as e:
        raise ValueError(f"{where} is not a valid template ({type(e).__name__}: {e}); it may use {{prompt}}, "
                         "{completion} and {answer}, and {{ }} for literal braces") from None


def options(config: dict | None) -> dict:
    """The judge's options: defaults, then ``config``; rubric files read; unknown keys refused."""
    config = dict(config or {})
    unknown = sorted(set(config) - set(DEFAULTS))
    if unknown:
        raise ValueError(f"unknown judge option(s) {', '.join(unknown)} (known: {', '.join(sorted(DEFAULTS))})")
    o = {**DEFAULTS, **{k: v for k, v in config.items() if v is not None}}
    o["rubric"] = _rubric_text(o["rubric"]) if o["rubric"] else DEFAULT_RUBRIC
    o["rubrics"] = {str(k): _rubric_text(v) for k, v in (o["rubrics"] or {}).items()}
    return o


def _num(o: dict, key: str, lo: float | None = None, positive: bool = False) -> float:
    v = o[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise ValueError(f"judge.{key} must be a number, got {v!r}")
    if (positive and v <= 0) or (lo is not None and v < lo):
        raise ValueError(f"judge.{key} must be {'> 0' if positive else f'>= {lo:g}'}, got {v!r}")
    return float(v)


def check_config(config: dict) -> None:
    """ValueError for a bad option (called once in the caller's process by the pool)."""
    o = options(config)
    if o["mode"] not in MODES:
        raise ValueError(f"judge.mode must be one of {', '.join(MODES)}, got {o['mode']!r}")
    if o["mode"] != "rule":
        for key in ("base_url", "model"):
            if not isinstance(o[key], str) or not o[key].strip():
                raise ValueError(f"judge.{key} is required (e.g. --judge http://127.0.0.1:8000/v1 --judge-model NAME)")
        if not o["base_url"].startswith(("http://", "https://")):
            raise ValueError(f"judge.base_url must be an http(s) URL, got {o['base_url']!r}")
    if o["api"] not in APIS:
        raise ValueError(f"judge.api must be one of {', '.join(APIS)}, got {o['api']!r}")
    if o["parser"] not in PARSERS:
        raise ValueError(f"judge.parser must be one of {', '.join(PARSERS)}, got {o['parser']!r}")
    if o["api_key_env"] is not None and o["mode"] != "rule" and not os.environ.get(str(o["api_key_env"])):
        raise ValueError(f"judge.api_key_env names {o['api_key_env']}, which is not set in the environment")
    _check_template(o["rubric"], "judge.rubric")
    for ds, text in o["rubrics"].items():
        _check_template(text, f"judge.rubrics[{ds}]")
    if _num(o, "max_score") <= _num(o, "min_score"):
        raise ValueError("judge.max_score must be above judge.min_score")
    for key in ("threshold", "weight"):
        if not 0.0 <= _num(o, key) <= 1.0:
            raise ValueError(f"judge.{key} must lie in [0, 1], got {o[key]!r}")
    _num(o, "timeout", positive=True)
    _num(o, "backoff", lo=0.0)
    _num(o, "temperature", lo=0.0)
    for key in ("retries", "max_tokens"):
        if isinstance(o[key], bool) or not isinstance(o[key], int) or o[key] < (0 if key == "retries" else 1):
            raise ValueError(f"judge.{key} must be a {'non-negative' if key == 'retries' else 'positive'} integer")
    if not isinstance(o["datasets"], list) or not all(isinstance(d, str) for d in o["datasets"]):
        raise ValueError("judge.datasets must be a list of dataset names")
    if not isinstance(o["rules"], dict):
        raise ValueError("judge.rules must map verifier names to their options")


def timeout_s(config: dict) -> float:
    """The pool's hard limit for one verification: every attempt and its backoff, plus the
    rule verifier's own limit in the combined modes."""
    o = options(config)
    n = int(o["retries"]) + 1
    total = n * float(o["timeout"]) + sum(min(float(o["backoff"]) * 2 ** k, 30.0) * 1.5 for k in range(n - 1)) + 5.0
    if o["mode"] in ("weighted", "gate"):
        total += _rule_budget(o)
    return total


def _rule_budget(o: dict) -> float:
    from rlvr.verifiers import MODULES, get

    worst = 5.0
    for name in MODULES:
        if name == NAME:
            continue
        try:
            mod = get(name)
        except ImportError:
            continue
        fn = getattr(mod, "timeout_s", None)
        t = fn(o["rules"].get(name, {})) if callable(fn) else getattr(mod, "TIMEOUT_S", None)
        if isinstance(t, (int, float)) and t > worst:
            worst = float(t)
    return worst


def judged(record: dict, config: dict) -> bool:
    """Whether the pool routes this record to the judge under these options."""
    if record.get("verifier") == NAME:
        return True
    o = options(config)
    if o["mode"] == "rule":
        return False
    return not o["datasets"] or record.get("dataset") in o["datasets"]


def check_record(record: dict) -> tuple[str, str] | None:
    """A judged record needs a prompt; its reference answer is optional."""
    if not (record.get("prompt") or record.get("question")):
        return "prompt", "the judge needs the record's prompt (field prompt or question)"
    return None


# ----------------------------------------------------------------------------- the call


def prompt_text(record: dict) -> str:
    """The record's prompt as the judge reads it: chat messages as 'role: content' lines."""
    p = record.get("prompt")
    if isinstance(p, list):
        return "\n\n".join(f"{m.get('role')}: {m.get('content')}" for m in p if isinstance(m, dict))
    if isinstance(p, str) and p:
        return p
    return str(record.get("question") or "")


def rubric_for(record: dict, o: dict) -> str:
    return o["rubrics"].get(str(record.get("dataset")), o["rubric"])


def render(record: dict, completion: str, o: dict) -> str:
    answer = record.get("answer")
    answer = "" if answer is None else answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False)
    return rubric_for(record, o).format(prompt=prompt_text(record), completion=completion, answer=answer)


def cache_key(o: dict, rubric: str, text: str) -> str:
    """(judge, rubric, prompt, completion): the rendered rubric holds prompt, completion and answer."""
    ident = {"model": o["model"], "api": o["api"], "max_tokens": o["max_tokens"], "temperature": o["temperature"],
             "rubric": rubric, "text": text}
    return hashlib.sha256(json.dumps(ident, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def cache_dir(o: dict) -> str | None:
    c = o["cache"]
    if c is False or c == "" or (isinstance(c, str) and c.lower() in ("false", "none", "off")):
        return None
    if c is None or c is True:
        base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
        return os.path.join(base, "rlvr", "judge")
    return str(c)


def cache_get(folder: str | None, key: str) -> str | None:
    if folder is None:
        return None
    try:
        with open(os.path.join(folder, key[:2], key + ".json"), encoding="utf-8") as fh:
            reply = json.load(fh).get("reply")
        return reply if isinstance(reply, str) else None
    except (OSError, ValueError):
        return None


def cache_put(folder: str | None, key: str, reply: str, model: str) -> None:
    """Write atomically (several workers share the folder); a failure to write only costs the cache."""
    if folder is None:
        return
    sub = os.path.join(folder, key[:2])
    try:
        os.makedirs(sub, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=sub, suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"model": model, "reply": reply}, fh, ensure_ascii=False)
        os.replace(tmp, os.path.join(sub, key + ".json"))
    except OSError:
        pass


class CallError(Exception):
    """A call that failed for good: ``status`` is timeout or error."""

    def __init__(self, message: str, status: str = "error", attempts: int = 1):
        super().__init__(message)
        self.status, self.attempts = status, attempts


def _post(url: str, body: dict, key: str | None, timeout: float) -> dict:
    headers = {"Content-Type": "application/json"}
    if key:
        headers["Authorization"] = f"Bearer {key}"
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")
    with urllib.request.urlopen(req, timeout=timeout) as resp:  # noqa: S310 - the configured judge
        return json.loads(resp.read())


def _reply_of(data, api: str) -> str:
    try:
        choice = data["choices"][0]
        text = choice["message"]["content"] if api == "chat" else choice["text"]
    except (KeyError, IndexError, TypeError):
        raise ValueError(f"the reply is not a {api} completion: {str(data)[:200]}") from None
    if not isinstance(text, str):
        raise ValueError("the reply's content is not text")
    return text


def call(text: str, o: dict, sleep=time.sleep) -> tuple[str, int]:
    """(the judge's reply, attempts): POST to the endpoint, retrying 5xx, 429, timeouts,
    connection errors and malformed bodies with exponential backoff; CallError when every
    attempt failed or the server refused the request (other 4xx: not retried)."""
    base = o["base_url"].rstrip("/")
    if o["api"] == "chat":
        url, body = base + "/chat/completions", {"messages": [{"role": "user", "content": text}]}
    else:
        url, body = base + "/completions", {"prompt": text}
    body.update(model=o["model"], max_tokens=o["max_tokens"], temperature=o["temperature"])
    key = os.environ.get(o["api_key_env"]) if o["api_key_env"] else None
    attempts = int(o["retries"]) + 1
    last, status = "", "error"
    for k in range(attempts):
        if k:
            delay = min(float(o["backoff"]) * 2 ** (k - 1), 30.0)
            sleep(delay * (1.0 + 0.5 * random.random()))
        try:
            return _reply_of(_post(url, body, key, float(o["timeout"])), o["api"]), k + 1
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace") if e.fp else ""
            last, status = f"HTTP {e.code} from {url}: {detail}".strip(), "error"
            if e.code < 500 and e.code != 429:
                raise CallError(last, "error", k + 1) from None
        except (TimeoutError, socket.timeout) as e:
            last, status = f"no reply within {o['timeout']:g} s from {url} ({e})", "timeout"
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                last, status = f"no reply within {o['timeout']:g} s from {url}", "timeout"
            else:
                last, status = f"cannot reach {url}: {e.reason}", "error"
        except (ConnectionError, OSError) as e:
            last, status = f"connection to {url} failed: {type(e).__name__}: {e}", "error"
        except ValueError as e:  # not JSON, or not a completion
            last, status = f"bad reply from {url}: {e}", "error"
    raise CallError(f"{last} (after {attempts} attempt{'s' if attempts > 1 else ''})", status, attempts)


# ----------------------------------------------------------------------------- parsing


_SCORE = re.compile(r"(?:score|rating|grade)\s*(?:is|of)?\s*[:=]?\s*\**\s*(-?\d+(?:\.\d+)?)", re.I)
_BARE = re.compile(r"^\W*(-?\d+(?:\.\d+)?)\s*(?:/\s*\d+(?:\.\d+)?)?\W*$")
_YESNO = re.compile(r"^\W*(yes|no)\b", re.I)
_YESNO_TAGGED = re.compile(r"(?:answer|verdict|judgement|judgment)\s*[:=]\s*\**\s*(yes|no)\b", re.I)


def parse(reply: str, o: dict) -> tuple[float, str] | None:
    """(normalised score in [0, 1], what was read) from a reply, or None when it holds none."""
    if o["parser"] == "yes_no":
        m = _YESNO_TAGGED.findall(reply)
        word = m[-1] if m else (_YESNO.match(reply).group(1) if _YESNO.match(reply) else None)
        if word is None:
            return None
        return (1.0 if word.lower() == "yes" else 0.0), word.lower()
    m = _SCORE.findall(reply)
    raw = m[-1] if m else (_BARE.match(reply).group(1) if _BARE.match(reply) else None)
    if raw is None:
        return None
    value, lo, hi = float(raw), float(o["min_score"]), float(o["max_score"])
    if not lo <= value <= hi:
        return None
    return (value - lo) / (hi - lo), raw


# ----------------------------------------------------------------------------- the verdict


def _rule_score(v: dict) -> float:
    s = v.get("score")
    if isinstance(s, (int, float)) and not isinstance(s, bool) and math.isfinite(s) and v.get("status") in ("correct", "wrong"):
        return min(max(float(s), 0.0), 1.0)
    return 1.0 if v.get("status") == "correct" else 0.0


def _rule_verdict(record: dict, completion: str, o: dict) -> dict:
    from rlvr.verifiers import get

    name = record.get("verifier")
    if not name or name == NAME:
        return {"status": "error", "extracted": None,
                "error": f"judge.mode {o['mode']} needs the record's own verifier (field verifier)"}
    try:
        v = get(name).verify(record, completion, o["rules"].get(name, {}))
    except KeyError:
        return {"status": "error", "extracted": None, "error": f"unknown verifier {name!r} (field verifier)"}
    v = dict(v)
    v["verifier"] = name
    return v


def ask(record: dict, completion: str, o: dict) -> dict:
    """The judge's own verdict (status, extracted, score, judge: reply and call details)."""
    rubric = rubric_for(record, o)
    text = render(record, completion, o)
    folder = cache_dir(o)
    key = cache_key(o, rubric, text)
    info: dict = {"model": o["model"]}
    reply = cache_get(folder, key)
    if reply is not None:
        info.update(cached=True, attempts=0)
    else:
        try:
            reply, attempts = call(text, o)
        except CallError as e:
            info.update(cached=False, attempts=e.attempts)
            return {"status": e.status, "extracted": None, "error": str(e), "judge": info}
        info.update(cached=False, attempts=attempts)
        cache_put(folder, key, reply, o["model"])
    info["reply"] = reply[:4000]
    got = parse(reply, o)
    if got is None:
        return {"status": UNPARSABLE, "extracted": None, "judge": info,
                "error": f"no {'yes/no' if o['parser'] == 'yes_no' else 'score'} in the judge's reply"}
    score, raw = got
    return {"status": "correct" if score >= float(o["threshold"]) else "wrong", "extracted": raw,
            "score": round(score, 6), "judge": info}


def verify(record: dict, completion: str, config: dict) -> dict:
    """The verdict for one completion under the judge's mode (see the module docstring)."""
    if not config or (not config.get("base_url") and config.get("mode", "judge") != "rule"):
        return {"status": "error", "extracted": None, "error": NOT_CONFIGURED}
    o = options(config)
    if o["mode"] == "rule":
        return _rule_verdict(record, completion, o)
    if o["mode"] == "judge" or record.get("verifier") in (None, NAME):
        return ask(record, completion, o)
    rule = _rule_verdict(record, completion, o)
    if rule["status"] not in ("correct", "wrong") or (o["mode"] == "gate" and rule["status"] != "correct"):
        # the rule cannot grade it (no answer, timeout, error), or a gate that is shut anyway:
        # the rule's verdict stands and no call is paid
        return rule
    j = ask(record, completion, o)
    if j["status"] not in ("correct", "wrong"):
        return {**j, "rule": rule}
    if o["mode"] == "gate":
        passed = j["status"] == "correct"
        out = {**rule, "judge": j["judge"], "judge_score": j["score"], "gated": not passed}
        out["status"] = rule["status"] if passed else "wrong"
        out["score"] = _rule_score(rule) if passed else 0.0
        return out
    w = float(o["weight"])
    score = w * j["score"] + (1 - w) * _rule_score(rule)
    return {"status": "correct" if score >= float(o["threshold"]) else "wrong", "extracted": rule.get("extracted"),
            "score": round(score, 6), "rule": rule, "judge": j["judge"], "judge_score": j["score"]}
