"""The import graph of ``src/brace`` (docs/architecture.md): no cycles, and the layers
import downwards only.

Every ``import`` / ``from … import`` statement is read with ``ast``, wherever it stands
(module level or inside a function: a deferred import is still a dependency), and
resolved to the most specific module of the package it names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import brace

ROOT = Path(brace.__file__).resolve().parent


def _modules(root: Path) -> dict[str, tuple[Path, bool]]:
    """``{dotted name: (path, is_package)}`` for every module under ``root``."""
    out = {}
    for p in sorted(root.rglob("*.py")):
        parts = list(p.relative_to(root.parent).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        if is_pkg:
            parts = parts[:-1]
        out[".".join(parts)] = (p, is_pkg)
    return out


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """``{module: modules of the package it imports}``."""
    mods = _modules(root)
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for name, (path, is_pkg) in mods.items():
        pkg = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                for a in node.names:
                    parts = a.name.split(".")
                    for k in range(len(parts), 0, -1):  # `import a.b.c`: deepest module
                        if ".".join(parts[:k]) in mods:
                            edges[name].add(".".join(parts[:k]))
                            break
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")[: len(pkg.split(".")) - node.level + 1]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for a in node.names:
                    if f"{target}.{a.name}" in mods:  # `from pkg import module`
                        edges[name].add(f"{target}.{a.name}")
                    elif target in mods:
                        edges[name].add(target)
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module, or a module that
    imports itself (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(edges):
        if start in index:
            continue
        work = [(start, iter(sorted(edges[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(edges.get(w, ())))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1 or v in edges.get(v, ()):
                    found.append(sorted(comp))
    return found


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for w in edges[todo.pop()]:
            if w not in seen:
                seen.add(w)
                todo.append(w)
    return seen


def _within(module: str, *packages: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _describe(edges: dict[str, set[str]], comp: list[str]) -> str:
    return "; ".join(f"{m} -> {sorted(edges[m] & set(comp))}" for m in comp)


def test_cycle_finder_finds_planted_cycles():
    g = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set(), "e": {"e"}, "f": {"d"}}
    assert sorted(cycles(g)) == [["a", "b", "c"], ["e"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    assert reachable(g, "f") == {"d"}


def test_graph_resolves_relative_and_deferred_imports():
    edges = import_graph()
    assert "brace.gates.dense" in edges["brace.memory"]  # `from .gates.dense import …`
    assert "brace.gates.dask" in edges["brace.uq._bankstats"]  # inside a function
    assert "brace.memory" in edges["brace"]
    assert len(edges) > 40 and sum(map(len, edges.values())) > 100


def test_no_import_cycles():
    edges = import_graph()
    found = cycles(edges)
    assert not found, "import cycles: " + " | ".join(_describe(edges, c) for c in found)


def test_gate_package_does_not_import_the_memory():
    edges = import_graph()
    gates = [m for m in edges if _within(m, "brace.gates")]
    assert len(gates) >= 5
    for m in gates:
        above = reachable(edges, m) & {"brace", "brace.memory"}
        assert not above, f"{m} imports {sorted(above)} (directly or through another module)"


def test_core_never_imports_the_cli_or_the_experiments():
    edges = import_graph()
    outer = ("brace.cli", "brace.experiments", "brace.serve")
    for m, deps in edges.items():
        if _within(m, *outer):
            continue
        bad = {w for w in deps if _within(w, *outer)}
        assert not bad, f"{m} imports {sorted(bad)}"
