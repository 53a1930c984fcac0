"""Both apps: every statement has exactly one store function, each store function runs one
statement and is used, and no other module runs a statement by name.

Read from the source (ast): a store function is one whose body names a statement (a string
constant that is one of the app's statement names); anything else in the store is a helper.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from operations import store as operations_store
from tests.conftest import ROOT
from workqueue import store as workqueue_store
from workqueue.sql import QUERIES

APPS = {
    "workqueue": (ROOT / "workqueue" / "store.py", QUERIES),
    "operations": (ROOT / "operations" / "store.py", operations_store.QUERIES),
}
RUNNERS = {"run", "rowcount", "execute", "execute_rowcount", "_run", "_count"}
# The runners themselves, which only a store calls: workqueue's by name, and operations' own.
FORBIDDEN = {("sql", r) for r in RUNNERS} | {("store", "run"), ("store", "_run")}


def app_modules(app: str) -> list[Path]:
    return [p for p in sorted((ROOT / app).rglob("*.py")) if "migrations" not in p.parts]


def store_functions(path: Path, names: set[str]) -> dict[str, list[str]]:
    """{function: the statement names its body holds} for the store's top-level functions."""
    found = {}
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef):
            body = ast.Module(body=node.body[1:] if ast.get_docstring(node) else node.body, type_ignores=[])
            held = [n.value for n in ast.walk(body) if isinstance(n, ast.Constant) and n.value in names]
            if held:
                found[node.name] = held
    return found


@pytest.mark.parametrize("app", sorted(APPS))
def test_every_statement_has_exactly_one_store_function_that_says_it_runs_it(app):
    path, catalog = APPS[app]
    names = set(catalog.names())
    functions = store_functions(path, names)
    assert {f: held for f, held in functions.items() if len(held) != 1} == {}, "one statement per function"
    owners: dict[str, list[str]] = {}
    for function, (statement,) in functions.items():
        owners.setdefault(statement, []).append(function)
    assert sorted(names - set(owners)) == [], f"statements with no function in {path.name}"
    assert {s: fs for s, fs in owners.items() if len(fs) > 1} == {}
    module = workqueue_store if app == "workqueue" else operations_store
    for function, (statement,) in functions.items():
        doc = getattr(module, function).__doc__ or ""
        assert doc.startswith(f"``{statement}``: "), f"{path.name}: {function} does not say it runs {statement}"


def test_workqueue_store_functions_are_named_after_their_statement_and_take_exactly_its_parameters():
    import inspect

    for function, (statement,) in store_functions(APPS["workqueue"][0], set(QUERIES.names())).items():
        assert function == statement
        taken = set(inspect.signature(getattr(workqueue_store, function)).parameters) - {"using"}
        wanted = set(re.findall(r"%\((\w+)\)[sb]", QUERIES[statement]))
        assert taken == wanted, function


@pytest.mark.parametrize("app", sorted(APPS))
def test_no_module_but_the_store_and_the_sql_layer_runs_a_statement_by_name(app):
    names = {n for _path, catalog in APPS.values() for n in catalog.names()}
    allowed = {ROOT / "workqueue" / "store.py", ROOT / "operations" / "store.py"}
    offenders = []
    for path in app_modules(app):
        if path in allowed or path.parent == ROOT / "workqueue" / "sql":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call):
                func = node.func
                called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if called in RUNNERS and node.args and getattr(node.args[0], "value", None) in names:
                    offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {called}({node.args[0].value!r})")
            elif isinstance(node, ast.Subscript) and getattr(node.slice, "value", None) in names:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} [{node.slice.value!r}]")
            elif isinstance(node, ast.Attribute) and (getattr(node.value, "id", ""), node.attr) in FORBIDDEN:
                offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.value.id}.{node.attr}")
            elif isinstance(node, ast.ImportFrom) and node.module == "workqueue.sql":
                offenders += [
                    f"{path.relative_to(ROOT)}:{node.lineno} imports {a.name}" for a in node.names if a.name in RUNNERS
                ]
    assert offenders == []


@pytest.mark.parametrize("app", sorted(APPS))
def test_every_store_function_is_used_by_the_app(app):
    path, catalog = APPS[app]
    functions = set(store_functions(path, set(catalog.names())))
    called = set()
    for module in app_modules(app):
        if module != path:
            called |= set(re.findall(r"\bstore\.([a-z_]+)\b", module.read_text()))
    assert sorted(functions - called) == [], f"store functions nobody calls (dead statements) in {app}"
