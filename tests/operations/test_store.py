"""The named statements: every name the code runs exists, none is dead, each says what it does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from operations import store

PACKAGE = Path(store.__file__).parent
SQL_FILE = PACKAGE / "sql" / "queries.sql"


def names_used_in_code() -> set[str]:
    used = set()
    for path in PACKAGE.rglob("*.py"):
        used |= set(re.findall(r"""(?:run|rowcount|_write)\(\s*["']((?:op|watch)_[a-z_]+)["']""", path.read_text()))
    return used


def test_every_statement_the_code_names_exists_and_none_is_dead():
    defined = set(store.QUERIES.names())
    used = names_used_in_code()
    assert used - defined == set()
    assert defined - used == set()


def test_every_statement_says_what_it_does_right_under_its_name():
    lines = SQL_FILE.read_text().splitlines()
    for n, line in enumerate(lines):
        if line.startswith("-- name: "):
            comment = lines[n + 1]
            assert comment.startswith("-- ") and len(comment) > 12, f"{line} has no comment line"


@pytest.mark.parametrize("name", sorted(store.QUERIES.names()))
def test_every_statement_renders_its_fragments(name):
    text = store.QUERIES[name]
    assert "{" not in text.replace("'{", "").replace("{}", ""), text  # no unfilled {fragment}
    assert "operations" in text or name == "op_item_noop"


def test_the_store_has_one_function_per_statement_and_only_it_runs_them():
    for name in store.QUERIES.names():
        function = getattr(store, name.removeprefix("op_"), None)
        assert callable(function), f"operations/store.py has no function for {name}"
        assert name in (function.__doc__ or ""), f"store.{function.__name__} does not say it runs {name}"
    for path in PACKAGE.rglob("*.py"):
        if path.name != "store.py":
            text = path.read_text()
            assert "store.run(" not in text and "queries=" not in text, f"{path.name} runs a statement by name"


@pytest.mark.django_db
def test_an_operation_built_from_a_row_is_the_one_the_orm_reads():
    """to_operation builds instances without Model.__init__: the same values as the ORM's,
    saved (not adding) on the right database, and the columns a row lacks read on access."""
    from django.db import connection

    import operations
    from operations.models import Operation

    started = operations.start("test.ops.tiers", {"units": 2}, owner="alice")
    table = Operation._meta.db_table
    with connection.cursor() as cur:
        cur.execute(f"SELECT {', '.join(store.OP_COLUMNS)} FROM {table} WHERE id = %s", [started.id])
        row = cur.fetchone()
    built = store.to_operation(row)
    read = Operation.objects.get(pk=started.id)
    assert {c: getattr(built, c) for c in store.OP_COLUMNS} == {c: getattr(read, c) for c in store.OP_COLUMNS}
    assert built == read and not built._state.adding and built._state.db == "default"
    with connection.cursor() as cur:
        cur.execute(f"SELECT {', '.join(store.LIGHT_COLUMNS)} FROM {table} WHERE id = %s", [started.id])
        light = store.to_operation(cur.fetchone(), store.LIGHT_COLUMNS)
    assert light.get_deferred_fields() >= {"request", "attempt_log"}
    assert light.request == {"units": 2}  # read from the database on first access
    light.message = "saved through the ORM"
    light.save(update_fields=["message"])
    assert Operation.objects.get(pk=started.id).message == "saved through the ORM"
