"""The import graph of rlvr/ has no circle: every module's imports (top-level and inside
functions alike) are read with `ast`, relative and `from pkg import module` forms resolved, and
a cycle anywhere fails with the modules of the cycle printed in order.

An import inside a function still makes two modules responsible for each other, so it counts.
Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` too, but only the module named is
an edge: a package's `__init__` importing its own submodules is not a circle by itself. A
module named in a string (importlib.import_module, as registries of verifiers do) is no edge.
"""

from __future__ import annotations

import ast
import os

import pytest

ROOT = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "rlvr")


def modules(root: str = ROOT) -> dict[str, str]:
    """Dotted name -> file for every .py under root (a package is named by its folder)."""
    top = os.path.basename(root)
    out = {}
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            if not f.endswith(".py"):
                continue
            parts = [top, *os.path.relpath(folder, root).split(os.sep)]
            parts = [p for p in parts if p != "."]
            if f != "__init__.py":
                parts.append(f[:-3])
            out[".".join(parts)] = os.path.join(folder, f)
    return out


def imports(name: str, path: str, known: set[str]) -> set[str]:
    """The modules of `known` that module `name` (file `path`) imports, anywhere in its body."""
    with open(path, encoding="utf-8") as fh:
        tree = ast.parse(fh.read(), filename=path)
    package = name if path.endswith("__init__.py") else name.rpartition(".")[0]
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for a in node.names:
                sub = f"{source}.{a.name}"
                if sub in known:  # from pkg import module
                    out.add(sub)
                elif source in known:  # from module import name
                    out.add(source)
    out.discard(name)
    return out


def graph(root: str = ROOT) -> dict[str, set[str]]:
    mods = modules(root)
    return {name: imports(name, path, set(mods)) for name, path in mods.items()}


def components(g: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module: modules that all reach
    each other through their imports (Tarjan)."""
    index, low, stack, on, comps = {}, {}, [], set(), []

    def visit(v: str) -> None:  # recursive: rlvr's import chains are far shorter than the recursion limit
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                comps.append(comp)

    for v in sorted(g):
        if v not in index:
            visit(v)
    return comps


def cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (the shortest through its first module) for each circle of modules."""
    return [shortest_cycle(g, comp) for comp in components(g)]


def shortest_cycle(g: dict[str, set[str]], comp: set[str]) -> list[str]:
    """The shortest cycle through the alphabetically first module of a component (breadth first)."""
    start = min(comp)
    prev, frontier = {start: None}, [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in sorted(g[v] & comp):
                if w == start:
                    path = [v]
                    while prev[path[-1]] is not None:
                        path.append(prev[path[-1]])
                    return [*reversed(path), start]
                if w not in prev:
                    prev[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start} in {sorted(comp)}")


def test_graph_reads_every_import_form(tmp_path):
    pkg = tmp_path / "pkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from pkg.sub import b\n")
    (pkg / "a.py").write_text("def f():\n    from .sub import b\n")  # relative, inside a function
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "b.py").write_text("from ..c import X\n")  # from module import name, two levels up
    (pkg / "c.py").write_text("import pkg.a\nX = 1\n")
    g = graph(str(pkg))
    assert g == {"pkg": {"pkg.sub.b"}, "pkg.a": {"pkg.sub.b"}, "pkg.sub": set(),
                 "pkg.sub.b": {"pkg.c"}, "pkg.c": {"pkg.a"}}
    assert cycles(g) == [["pkg.a", "pkg.sub.b", "pkg.c", "pkg.a"]]


def test_acyclic_graph_has_no_cycles(tmp_path):
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from pkg import a, b\n")
    (pkg / "a.py").write_text("from pkg.b import X\n")
    (pkg / "b.py").write_text("X = 1\n")
    assert cycles(graph(str(pkg))) == []


def test_rlvr_has_no_import_cycle():
    g = graph()
    found = components(g)
    if found:
        pytest.fail("import cycles in rlvr/:\n" + "\n".join(
            f"  {' -> '.join(shortest_cycle(g, comp))}  (the circle: {', '.join(sorted(comp))})" for comp in found))


def test_config_is_a_leaf():
    """rlvr-train's config imports nothing of the train package but its own section modules,
    nor the loss (rlvr.grpo): any module of rlvr.train may read it without a circle."""
    g = graph()
    sections = {"rlvr.train.config_rollout", "rlvr.train.config_trainer"}
    for name in ("rlvr.train.config", *sorted(sections)):
        train = {m for m in g[name] if m.startswith("rlvr.train.") or m == "rlvr.grpo"}
        assert train <= sections, f"{name} imports {sorted(train - sections)}"
