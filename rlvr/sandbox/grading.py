"""Grade a candidate program by running the dataset's test code on the trusted side.

The candidate program runs only in the sandbox. The test code (MBPP's ``test_setup`` and
``assert`` lines; HumanEval's prompt helpers and ``def check(candidate)``) runs here, in
the caller's process, in a fresh namespace per check. Every name the test code takes from
the candidate (the function under test, a class it must define, a global it must set)
resolves to a ``Remote`` handle (rlvr.sandbox.remote): a call crosses into the sandbox
with its arguments and comes back as plain values. So the asserts, their comparisons,
loops, tolerances and helper functions all run here, on plain built-in values, and the
expected values never enter the sandbox; only call arguments do.

Hardening on top of the test code's own semantics:

- ``assert`` statements are rewritten into explicit checks (so ``python -O`` cannot drop
  them) that count passes and stop at the first failure.
- Inside an ``assert``, ``==`` and ``!=`` keep Python's meaning on the plain values that
  come back from the sandbox (``True == 1``, as in the reference harnesses); a handle to an
  object left in the sandbox equals only itself, so no ``__eq__`` of the candidate ever
  runs. With ``strict_types`` (off by default) they compare strictly instead: the types
  must match exactly at every level (``True`` is not ``1``, ``(1, 2)`` is not ``[1, 2]``,
  dict keys and set members must match in type too; an int and a float compare by value
  only when ``numeric_cross`` is on). See docs/verify.md for what that covers.
- Built-in names (``abs``, ``len``, ``sorted``, ``set``, ...) used by the test code are
  always the real built-ins, even when the candidate defines a function of that name;
  the one exception is the function under test itself (the record's ``entry_point``, or,
  for assert-style tests without one, a built-in name that the tests call while calling
  no other candidate function: MBPP task 126 names its function ``sum``).
- HumanEval helpers defined by the prompt (``poly``, ``encode_cyclic``) come from the
  trusted prompt, not from the candidate program, which could redefine them; only the
  entry point's name refers to the candidate's function.

For speed, the test's leading run of calls with literal arguments is made in one batch
when the program loads (see ``_upfront_calls``).
"""

from __future__ import annotations

import ast
import builtins
import hashlib
from collections import OrderedDict
from dataclasses import dataclass, field
from types import ModuleType

from rlvr.sandbox.remote import Link, Remote
from rlvr.sandbox.server import SandboxStop

_BUILTINS = builtins.__dict__


class TestFailure(AssertionError):
    """An assert of the test code failed."""

    def __init__(self, line: int, source: str, message=None):
        self.line, self.source, self.message = line, source, message
        text = f"line {line}: {source}" if source else f"line {line}"
        if message is not None:
            text += f" ({message})"
        super().__init__(text)


class PlanError(ValueError):
    """The record's test code cannot be used (a dataset problem, not the candidate's)."""


# --------------------------------------------------------------------------- strict comparison


def _tkey(x):
    """A hashable key that keeps types apart (1, 1.0 and True are three different keys)."""
    t = type(x)
    if t is tuple:
        return (t, tuple(_tkey(i) for i in x))
    if t is frozenset:
        return (t, frozenset(_tkey(i) for i in x))
    if t is Remote:
        return (t, id(x))
    return (t, x)


def python_eq(a, b) -> bool:
    """Python's ``==`` on plain values; a handle (an object left in the sandbox) equals only itself."""
    if type(a) is Remote or type(b) is Remote:
        return a is b
    return bool(a == b)


def strict_eq(a, b, numeric_cross: bool = True) -> bool:
    """Equality that never runs a candidate's __eq__ and requires equal types throughout."""
    ta, tb = type(a), type(b)
    if ta is Remote or tb is Remote:
        return a is b
    if ta is not tb:
        if numeric_cross and ta in (int, float) and tb in (int, float):
            return a == b
        return False
    if ta is list or ta is tuple:
        return len(a) == len(b) and all(strict_eq(x, y, numeric_cross) for x, y in zip(a, b))
    if ta is dict:
        if len(a) != len(b):
            return False
        try:
            kb = {_tkey(k): v for k, v in b.items()}
            for k, v in a.items():
                tk = _tkey(k)
                if tk not in kb or not strict_eq(v, kb[tk], numeric_cross):
                    return False
        except TypeError:
            return False
        return True
    if ta is set or ta is frozenset:
        try:
            return len(a) == len(b) and {_tkey(x) for x in a} == {_tkey(x) for x in b}
        except TypeError:
            return False
    return a == b


_OPS = {
    "Eq": None, "NotEq": None,
    "Lt": lambda a, b: a < b, "LtE": lambda a, b: a <= b, "Gt": lambda a, b: a > b, "GtE": lambda a, b: a >= b,
    "Is": lambda a, b: a is b, "IsNot": lambda a, b: a is not b,
    "In": lambda a, b: a in b, "NotIn": lambda a, b: a not in b,
}


# --------------------------------------------------------------------------- rewriting asserts


class _EqRewriter(ast.NodeTransformer):
    def visit_Compare(self, node: ast.Compare):
        self.generic_visit(node)
        names = [type(op).__name__ for op in node.ops]
        if not any(n in ("Eq", "NotEq") for n in names):
            return node
        if len(names) == 1:
            call = ast.Call(ast.Name("__rlvr_eq__", ast.Load()), [node.left, node.comparators[0]], [])
            return ast.UnaryOp(ast.Not(), call) if names[0] == "NotEq" else call
        lazies = [ast.Lambda(ast.arguments([], [], None, [], [], None, []), c) for c in node.comparators]
        return ast.Call(ast.Name("__rlvr_chain__", ast.Load()),
                        [node.left, ast.Tuple([ast.Constant(n) for n in names], ast.Load()),
                         ast.Tuple(lazies, ast.Load())], [])


class _AssertRewriter(ast.NodeTransformer):
    def __init__(self, lines: list[str]):
        self.lines = lines

    def visit_Assert(self, node: ast.Assert):
        test = _EqRewriter().visit(node.test)
        src = self.lines[node.lineno - 1].strip() if 0 < node.lineno <= len(self.lines) else ""
        ok = ast.Expr(ast.Call(ast.Name("__rlvr_pass__", ast.Load()), [], []))
        fail = ast.Expr(ast.Call(ast.Name("__rlvr_fail__", ast.Load()),
                                 [ast.Constant(node.lineno), ast.Constant(src[:300]),
                                  node.msg if node.msg is not None else ast.Constant(None)], []))
        return ast.copy_location(ast.If(test, [ok], [fail]), node)


def compile_test(source: str, filename: str) -> object:
    """Compile trusted test code with its asserts rewritten (SyntaxError -> PlanError; so is
    a NUL byte, a ValueError on some Python 3.11 releases, and a lone surrogate)."""
    try:
        tree = ast.parse(source, filename)
    except SyntaxError as e:
        raise PlanError(f"{filename}: {e.msg} (line {e.lineno})") from None
    except ValueError as e:
        raise PlanError(f"{filename}: {e}") from None
    tree = _AssertRewriter(source.splitlines()).visit(tree)
    ast.fix_missing_locations(tree)
    return compile(tree, filename, "exec", dont_inherit=True, optimize=0)


def _compile_plain(source: str, filename: str) -> object:
    try:
        return compile(source, filename, "exec", dont_inherit=True, optimize=0)
    except (SyntaxError, ValueError) as e:
        raise PlanError(f"{filename}: {e}") from None


# --------------------------------------------------------------------------- plans


@dataclass
class Plan:
    """How one record is graded (built once per distinct test, then cached)."""

    kind: str  # "asserts" (MBPP-style list) or "check" (HumanEval-style)
    setup: object | None = None
    units: list[tuple[str, object]] = field(default_factory=list)
    entry_point: str | None = None
    shadow: frozenset = frozenset()
    want: list[str] = field(default_factory=list)  # names the test code may take from the candidate
    calls: list = field(default_factory=list)  # (name, args, kwargs) made up front, in order
    notes: list[str] = field(default_factory=list)


def _called_names(sources: list[str]) -> set[str]:
    out = set()
    for s in sources:
        try:
            tree = ast.parse(s)
        except SyntaxError:
            continue
        for n in ast.walk(tree):
            if isinstance(n, ast.Call) and isinstance(n.func, ast.Name):
                out.add(n.func.id)
    return out


def _free_names(sources: list[str], shadow: frozenset) -> list[str]:
    names = set()
    for s in sources:
        try:
            tree = ast.parse(s)
        except SyntaxError:
            continue
        names.update(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load))
    return sorted(n for n in names if n not in _BUILTINS or n in shadow)


def _build(kind: str, tests: tuple, setup: str, test: str, entry_point: str | None, prefix: str) -> Plan:
    plan = _build_plan(kind, tests, setup, test, entry_point, prefix)
    plan.want = _free_names([setup, test, *tests], plan.shadow)
    if entry_point and entry_point not in plan.want:
        plan.want.append(entry_point)
    try:
        plan.calls = _upfront_calls(plan, tests, setup, test, prefix)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        plan.calls = []
    return plan


# --------------------------------------------------------------------------- calls made up front
#
# Most tests are straight lines of `assert f(<literal>) == <literal>`. Their calls into the
# candidate are made in one batch, in source order, right after the program loads (one
# round trip instead of one per call), and the test code then consumes the results in
# order. Only a leading run of such calls qualifies: it ends at the first statement that
# uses the candidate in any other way (a call with computed arguments, a loop, a branch,
# a short-circuit, the candidate passed around). A call the test makes that does not match
# the next batched one, in name and arguments, turns batching off for the rest of the check.
# The one visible difference: calls after a failing assert are made (their results unused).

_LAZY = (ast.BoolOp, ast.IfExp, ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp,
         ast.Await, ast.Yield, ast.YieldFrom, ast.NamedExpr)


class _NotUpfront(Exception):
    pass


def _literal(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        raise _NotUpfront from None


def _calls_in(expr: ast.AST, targets: dict[str, str]) -> list[tuple[str, list, list]]:
    """Calls of target names in evaluation order; _NotUpfront if a target is used otherwise."""
    out: list = []

    def visit(node: ast.AST) -> None:
        if isinstance(node, _LAZY):
            if any(isinstance(n, ast.Name) and n.id in targets for n in ast.walk(node)):
                raise _NotUpfront
            return
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in targets:
            if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
                raise _NotUpfront
            args = [_literal(a) for a in node.args]
            kwargs = [[k.arg, _literal(k.value)] for k in node.keywords]
            out.append((targets[node.func.id], args, kwargs))
            return
        if isinstance(node, ast.Name) and node.id in targets:
            raise _NotUpfront
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(expr)
    return out


def _statement_calls(stmts: list[ast.stmt], targets: dict[str, str], calls: list) -> bool:
    """Append the upfront calls of stmts; False once a statement ends the run."""
    for st in stmts:
        if isinstance(st, (ast.Import, ast.ImportFrom, ast.Pass)):
            continue
        if isinstance(st, ast.Assert):
            exprs = [st.test]
        elif isinstance(st, ast.Expr):
            exprs = [st.value]
        elif isinstance(st, ast.Assign) and all(isinstance(t, ast.Name) and t.id not in targets for t in st.targets):
            exprs = [st.value]
        else:
            if any(isinstance(n, ast.Name) and n.id in targets for n in ast.walk(st)):
                return False
            continue
        try:
            found = [c for e in exprs for c in _calls_in(e, targets)]
        except _NotUpfront:
            return False
        calls.extend(found)
    return True


def _defined(tree: ast.Module) -> set[str]:
    names = set()
    for st in tree.body:
        if isinstance(st, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(st.name)
        elif isinstance(st, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in st.names)
        elif isinstance(st, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            for t in (st.targets if isinstance(st, ast.Assign) else [st.target]):
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
    return names


def _upfront_calls(plan: Plan, tests: tuple, setup: str, test: str, prefix: str) -> list:
    calls: list = []
    if plan.kind == "asserts":
        trusted = _defined(ast.parse(setup)) if setup.strip() else set()
        targets = {n: n for n in plan.want if n not in trusted}
        for t in tests:
            if not _statement_calls(ast.parse(t).body, targets, calls):
                break
        return calls
    tree = ast.parse(test)
    check = next((st for st in tree.body if isinstance(st, ast.FunctionDef) and st.name == "check"), None)
    if check is None or len(check.args.args) != 1:
        return []
    trusted = _defined(tree)
    if prefix.strip():
        try:
            trusted |= _defined(ast.parse(prefix))
        except SyntaxError:
            return []
    param = check.args.args[0].arg
    targets = {param: plan.entry_point, plan.entry_point: plan.entry_point}
    # Any other name the check may take from the candidate ends the run where it is used.
    local = {n.id for n in ast.walk(check) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store)}
    local |= {a.asname or a.name for n in ast.walk(check) if isinstance(n, (ast.Import, ast.ImportFrom)) for a in n.names}
    for n in ast.walk(check):
        if isinstance(n, ast.Name) and n.id not in targets and n.id not in local and n.id not in trusted \
                and n.id not in _BUILTINS:
            targets[n.id] = n.id  # used other than as a literal call: ends the run
    _statement_calls(check.body, targets, calls)
    return calls


def _build_plan(kind: str, tests: tuple, setup: str, test: str, entry_point: str | None, prefix: str) -> Plan:
    if kind == "asserts":
        plan = Plan("asserts", entry_point=entry_point)
        if setup.strip():
            plan.setup = _compile_plain(setup, "<test_setup>")
        for i, t in enumerate(tests):
            plan.units.append((t, compile_test(t, f"<test {i + 1}>")))
        if not any(_asserts(t) for t in tests):
            raise PlanError("the tests contain no assert: any program would pass them")
        if entry_point:
            plan.shadow = frozenset([entry_point])
        else:
            called = _called_names(list(tests))
            if called and all(n in _BUILTINS for n in called):
                plan.shadow = frozenset(called)
        return plan
    plan = Plan("check", entry_point=entry_point, shadow=frozenset([entry_point]))
    if prefix.strip():
        try:
            plan.setup = _compile_plain(prefix, "<prompt>")
        except PlanError:
            plan.notes.append("the prompt does not compile on its own: its helpers resolve to the candidate's")
    code = compile_test(test, "<test>")
    if not any(isinstance(st, ast.FunctionDef) and st.name == "check" for st in ast.parse(test).body):
        raise PlanError("the test code defines no check(candidate) function")
    if not _asserts(test):
        raise PlanError("the test code contains no assert or raise: any program would pass it")
    plan.units.append(("check", code))
    return plan


def _asserts(source: str) -> bool:
    """Whether test code can fail a program: an assert or a raise somewhere in it."""
    try:
        return any(isinstance(n, (ast.Assert, ast.Raise)) for n in ast.walk(ast.parse(source)))
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return True  # compile_test has already judged the source; do not second-guess it here


_CACHE: OrderedDict = OrderedDict()
_CACHE_MAX = 2048


def plan_for(record: dict) -> Plan:
    """The grading plan of a code record (PlanError when it has no usable tests)."""
    tests = record.get("tests")
    test = record.get("test")
    setup = record.get("test_setup") or ""
    prefix = record.get("prefix") or ""
    ep = record.get("entry_point") or None
    if tests:
        key = ("asserts", tuple(tests), setup, ep)
    elif test:
        if not ep:
            raise PlanError("a record with `test` (HumanEval style) needs `entry_point`")
        key = ("check", test, setup, ep, prefix)
    else:
        raise PlanError("no tests: the record needs `tests` (assert lines) or `test` + `entry_point`")
    digest = hashlib.sha256(repr(key).encode("utf-8", "surrogatepass")).digest()
    plan = _CACHE.get(digest)
    if plan is None:
        plan = _build(key[0], tuple(tests or ()), setup, test or "", ep, prefix)
        _CACHE[digest] = plan
        if len(_CACHE) > _CACHE_MAX:
            _CACHE.popitem(last=False)
    else:
        _CACHE.move_to_end(digest)
    return plan


# --------------------------------------------------------------------------- running


class _Names(dict):
    """The builtins mapping of the test namespace: real built-ins first, then the candidate.

    Functions, classes and modules taken from the candidate are kept once resolved; plain
    values are asked for at every use (the candidate may change its globals)."""

    def __init__(self, resolve, shadow: frozenset, known: dict):
        super().__init__(_BUILTINS)
        for n in shadow:
            self.pop(n, None)
        self.update(known)
        self.resolve = resolve

    def __missing__(self, name):
        value = self.resolve(name)
        if isinstance(value, (Remote, ModuleType)):
            self[name] = value
        return value


@dataclass
class Outcome:
    total: int = 0
    passed: int = 0
    asserts_passed: int = 0
    failure: str | None = None
    stop: SandboxStop | None = None


def run_plan(plan: Plan, link: Link, defined: list[str], known: dict | None = None,
             numeric_cross: bool = True, strict_types: bool = False) -> Outcome:
    """Run the plan's test code against the loaded candidate (``defined``: its global names;
    ``known``: names already resolved at load); stop early on a SandboxStop. ``==`` inside
    asserts is Python's, or strict_eq with strict_types."""
    out = Outcome(total=len(plan.units) if plan.kind == "asserts" else 1)
    defined_set = set(defined)

    def resolve(name: str):
        if name in plan.shadow and name not in defined_set and name in _BUILTINS:
            return _BUILTINS[name]
        return link.get(name)

    def passed() -> None:
        out.asserts_passed += 1

    def fail(line, src, msg=None):
        raise TestFailure(line, src, msg)

    def eq(a, b):
        return strict_eq(a, b, numeric_cross) if strict_types else python_eq(a, b)

    def chain(left, ops, lazies):
        for op, lazy in zip(ops, lazies):
            right = lazy()
            if op == "Eq":
                ok = eq(left, right)
            elif op == "NotEq":
                ok = not eq(left, right)
            else:
                ok = _OPS[op](left, right)
            if not ok:
                return False
            left = right
        return True

    g = {"__builtins__": _Names(resolve, plan.shadow, known or {}), "__name__": "__test__",
         "__rlvr_pass__": passed, "__rlvr_fail__": fail, "__rlvr_eq__": eq, "__rlvr_chain__": chain}

    def describe(e: BaseException) -> str:
        return f"{type(e).__name__}: {e}" if not isinstance(e, TestFailure) else f"assertion failed at {e}"

    try:
        if plan.setup is not None:
            exec(plan.setup, g)
        if plan.kind == "check":
            g.pop(plan.entry_point, None)  # the prompt's stub: the name means the candidate's function
            exec(plan.units[0][1], g)
            check = g.get("check")
            if not callable(check):
                raise PlanError("the test code defines no check(candidate) function")
            candidate = g["__builtins__"][plan.entry_point]
            check(candidate)
            out.passed = 1
            return out
    except SandboxStop as e:
        out.stop = e
        return out
    except PlanError:
        raise
    except (Exception, SystemExit) as e:  # noqa: BLE001 - any failure of the test code is a failed test
        out.failure = ("setup: " if plan.kind == "asserts" else "") + describe(e)
        return out
    for i, (src, code) in enumerate(plan.units):
        try:
            exec(code, g)
            out.passed += 1
        except SandboxStop as e:
            out.stop = e
            break
        except (Exception, SystemExit) as e:  # noqa: BLE001
            if out.failure is None:
                out.failure = f"test {i + 1}: {describe(e)}" if not isinstance(e, TestFailure) else \
                    f"test {i + 1} failed: {src.strip()[:300]}" + (f" ({e.message})" if e.message else "")
    return out
