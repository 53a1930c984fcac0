"""The wire's named statements: each one exists, is used, and the hot reads use their indexes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import ROOT
from workqueue.wire.store import WIRE

WIRE_CODE = [Path("workqueue/wire/store.py"), Path("workqueue/wire/auth.py")]


def used_names() -> set[str]:
    text = "\n".join((ROOT / p).read_text() for p in WIRE_CODE)
    return set(re.findall(r'"(wire_[a-z_]+)"', text))


def test_every_statement_the_code_names_exists_and_every_statement_is_used():
    assert used_names() == set(WIRE.names())


def test_every_statement_has_a_comment_saying_what_it_does():
    text = (ROOT / "workqueue/sql/wire.sql").read_text()
    for name in WIRE.names():
        after = text.split(f"-- name: {name}\n", 1)[1]
        assert after.startswith("-- "), name


@pytest.mark.django_db
def test_list_page_walks_the_wire_list_index():
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(
            "EXPLAIN "
            + WIRE["wire_list_page"]
            .replace("%(environment_id)s", "'env_x'")
            .replace("%(before_created)s", "'infinity'")
            .replace("%(before_id)s", "9")
            .replace("%(limit)s", "21")
            .replace("{item}", "w.id")
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "work_items_wire_list_idx" in plan, plan
