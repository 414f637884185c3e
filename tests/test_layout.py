"""The package's import graph: layers point down, with no cycle (docs/design.md, "Layout").

Every import counts, at the top of a module or inside a function (a function-level import
is a cycle waiting for its first caller); imports under ``if TYPE_CHECKING:`` are
annotations and never run. A module importing its own package's ``__init__`` is not a cycle.
"""

import ast
from pathlib import Path

import purejaxppo

ROOT = Path(purejaxppo.__file__).parent


def import_graph() -> dict[str, set[str]]:
    """``module -> modules of the package it imports`` (dotted names, ``__init__`` as its
    package)."""
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    graph = {}
    for name, (path, package) in modules.items():
        tree = ast.parse(path.read_text())
        typing_only = {
            id(node)
            for block in ast.walk(tree)
            if isinstance(block, ast.If) and getattr(block.test, "id", "") == "TYPE_CHECKING"
            for stmt in block.body
            for node in ast.walk(stmt)
        }
        graph[name] = set()
        for node in ast.walk(tree):
            if id(node) in typing_only or not isinstance(node, ast.ImportFrom | ast.Import):
                continue
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                here = name.split(".") if package else name.split(".")[:-1]
                base = here[: len(here) - node.level + 1] if node.level else []
                module = ".".join(base + ([node.module] if node.module else []))
                targets = [module] + [f"{module}.{alias.name}" for alias in node.names]
            graph[name] |= {t for t in targets if t in modules and t != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm),
    ignoring a module's imports of its own enclosing packages."""
    index, low, stack, found = {}, {}, [], []

    def visit(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if v.startswith(w + "."):  # a package's __init__ above it
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while component[-1:] != [v]:
                component.append(stack.pop())
            if len(component) > 1:
                found.append(sorted(component))

    for v in graph:
        if v not in index:
            visit(v)
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    assert len(graph) > 50 and graph["purejaxppo._engine._core"]  # the graph was read
    assert cycles(graph) == []


def test_the_cycle_finder_finds_one():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}, "p": set(), "p.x": {"p"}}
    assert cycles(graph) == [["a", "b", "c"]]


def test_envs_and_the_engine_point_down():
    graph = import_graph()
    for name, targets in graph.items():
        if name.startswith("purejaxppo.envs"):  # the envs know nothing of the trainer
            outside = {t for t in targets if not t.startswith("purejaxppo.envs")}
            assert outside <= {"purejaxppo._errors"}, (name, outside)
        if name.startswith("purejaxppo._engine"):  # the engine never imports its users
            users = {"purejaxppo._sweep", "purejaxppo._pbt", "purejaxppo._train"}
            assert not targets & users, (name, targets & users)
