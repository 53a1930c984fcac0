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
