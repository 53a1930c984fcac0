"""No import cycle anywhere in the repository, and workqueue never imports operations.

The graph is read from the source (ast), every import statement counted, including those
inside functions (a deferred import that closes a loop is still a cycle, only hidden), but
not those under ``if TYPE_CHECKING:``. ``from pkg import mod`` is an edge to ``pkg.mod``.
A package's ``__init__`` importing its own submodules is not counted as a loop back from them.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

PACKAGES = ("workqueue", "operations")
#: Every folder of Python the repository holds: the apps, the demo project, the benchmark, the
#: scripts (not a package; their modules are named scripts.<name>) and the tests.
REPOSITORY = (*PACKAGES, "project", "bench", "scripts", "tests")


def modules(root: Path, packages=PACKAGES) -> dict[str, Path]:
    found = {}
    for package in packages:
        for path in (root / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = path.relative_to(root).with_suffix("").parts
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _is_type_checking(node: ast.AST) -> bool:
    return isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(tree: ast.AST):
    stack = [tree]
    while stack:
        node = stack.pop()
        if _is_type_checking(node):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """{module: the project modules it imports}, for every module of the packages."""
    mods = modules(root, packages)

    def owner(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        here = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        for node in _imports(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(filter(None, (owner(a.name) for a in node.names)))
                continue
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            for alias in node.names:
                full = f"{base}.{alias.name}"
                target = full if full in mods else owner(base)
                if target:
                    targets.add(target)
        targets.discard(name)
        graph[name] = {t for t in targets if not name.startswith(t + ".")}  # not its own parent packages
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    found = []
    counter = 0
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_checker_finds_a_cycle_hidden_in_a_function(tmp_path):
    pkg = tmp_path / "loopy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from loopy import b\n")
    (pkg / "b.py").write_text("def f():\n    from loopy.a import thing\n")
    (pkg / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from loopy import a\n")
    graph = import_graph(tmp_path, ("loopy",))
    assert graph["loopy.a"] == {"loopy.b"} and graph["loopy.c"] == set()
    assert cycles(graph) == [["loopy.a", "loopy.b"]]


def test_no_import_cycle_in_workqueue_or_operations():
    graph = import_graph(ROOT)
    assert {"workqueue.states", "workqueue.managers", "workqueue.wire.store", "operations.store"} <= set(graph)
    assert cycles(graph) == []


def test_no_import_cycle_anywhere_in_the_repository():
    """The benchmark once had one (runner ↔ history ↔ indexes, through private helpers)."""
    graph = import_graph(ROOT, REPOSITORY)
    assert {
        "bench.runner",
        "bench.harness",
        "bench.sections.history",
        "scripts.embed_check",
        "project.settings",
    } <= set(graph)
    assert cycles(graph) == []


def test_states_imports_nothing_from_the_project_and_workqueue_never_imports_operations():
    graph = import_graph(ROOT)
    assert graph["workqueue.states"] == set()
    leaks = {
        m: sorted(t) for m, ts in graph.items() if m.startswith("workqueue") for t in ts if t.startswith("operations")
    }
    assert not leaks


def test_the_modules_that_were_a_cycle_each_import_first_in_a_fresh_interpreter():
    """What a cycle breaks at run time: importing one of its modules before the others."""
    for name in ("workqueue.states", "workqueue.items", "workqueue.managers", "workqueue.wire.store"):
        done = subprocess.run(
            [sys.executable, "-c", f"import {name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"},
        )
        assert done.returncode == 0, f"import {name}: {done.stderr[-2000:]}"
