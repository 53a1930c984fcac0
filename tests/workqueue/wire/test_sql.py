"""The wire's named statements: each says what it does, and the hot reads use their indexes."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.conftest import ROOT
from workqueue.sql import QUERIES

WIRE_NAMES = [n for n in QUERIES.names() if QUERIES.statements[n].source.startswith("workqueue/sql/wire.sql:")]


def test_every_wire_statement_says_what_it_does():
    assert len(WIRE_NAMES) > 10 and all(n.startswith("wire_") for n in WIRE_NAMES)
    text = (ROOT / "workqueue/sql/wire.sql").read_text()
    for name in WIRE_NAMES:
        after = text.split(f"-- name: {name}\n", 1)[1]
        assert after.startswith("-- "), name


@pytest.mark.django_db
def test_list_page_walks_the_wire_list_index():
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off")
        cur.execute(
            "EXPLAIN "
            + QUERIES["wire_list_page"]
            .replace("%(environment_id)s", "'env_x'")
            .replace("%(before_created)s", "'infinity'")
            .replace("%(before_id)s", "9")
            .replace("%(limit)s", "21")
        )
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "work_items_wire_list_idx" in plan, plan
