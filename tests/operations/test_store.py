"""The operations statements: each says what it does and renders its fragments, and a row builds
the Operation the ORM reads. (One store function per statement, and no other module running
one by name, is tests/test_statements.py's, for both apps.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from operations import store

PACKAGE = Path(store.__file__).parent
SQL_FILE = PACKAGE / "sql" / "queries.sql"


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
