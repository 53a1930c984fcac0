"""The named statements: every name the code runs exists once, and the claim uses its index."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from django.db import connection

from tests.conftest import ROOT
from workqueue.sql import QUERIES, Statements

SQL_FILES = sorted([*ROOT.glob("workqueue/sql/*.sql"), *ROOT.glob("operations/sql/*.sql")])
CORE_QUERIES = ROOT / "workqueue" / "sql" / "queries.sql"
NAME = re.compile(r"^[a-z][a-z0-9_]*$")


def statement_names(path: Path) -> set[str]:
    return set(Statements(path).names())


def used_names() -> list[tuple[Path, int, str, bool]]:
    """(file, line, name, passes queries=) for each run/rowcount/QUERIES[...] with a literal name."""
    found = []
    for path in sorted([*ROOT.glob("workqueue/**/*.py"), *ROOT.glob("operations/**/*.py")]):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                func = node.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                if name not in ("run", "rowcount", "_run") or not node.args:
                    continue
                first = node.args[0]
                explicit = any(k.arg == "queries" for k in node.keywords)
            elif isinstance(node, ast.Subscript) and getattr(node.value, "id", "") in ("QUERIES", "WIRE", "STATEMENTS"):
                first, explicit = node.slice, True
            else:
                continue
            if isinstance(first, ast.Constant) and isinstance(first.value, str) and NAME.match(first.value):
                found.append((path, node.lineno, first.value, explicit))
    return found


def test_every_sql_file_loads_with_each_name_defined_once_and_commented():
    assert CORE_QUERIES in SQL_FILES
    for path in SQL_FILES:
        text = path.read_text()
        names = re.findall(r"^-- name: (\S+)\s*$", text, re.M)
        assert len(names) == len(set(names)), f"{path.name} defines {[n for n in names if names.count(n) > 1]} twice"
        assert statement_names(path) == set(names)
        for name in names:
            after = text.split(f"-- name: {name}\n", 1)[1].splitlines()[0]
            assert after.startswith("-- "), f"{path.name}: {name} has no comment saying what it does"


def test_a_name_defined_twice_is_refused(tmp_path):
    dup = tmp_path / "dup.sql"
    dup.write_text("-- name: a\n-- one\nSELECT 1;\n-- name: a\n-- two\nSELECT 2;\n")
    with pytest.raises(ValueError, match="'a' is defined twice"):
        Statements(dup)


def test_every_statement_name_the_code_uses_exists():
    core = statement_names(CORE_QUERIES)
    everything = set().union(*(statement_names(p) for p in SQL_FILES))
    used = used_names()
    assert {"item_claim", "item_enqueue", "item_complete_many", "item_extend_many"} <= {n for *_, n, _ in used}
    missing = []
    for path, line, name, explicit in used:
        rel = path.relative_to(ROOT)
        core_module = rel.parts[0] == "workqueue" and rel.parts[1] not in ("wire", "dashboard.py")
        known = core if core_module and not explicit else everything
        if name not in known:
            missing.append(f"{rel}:{line} {name}")
    assert not missing, missing


def test_the_core_statements_are_all_used():
    used = {n for *_, n, _ in used_names()}
    unused = sorted(statement_names(CORE_QUERIES) - used)
    assert not unused, f"statements nobody runs: {unused}"


@pytest.mark.django_db(transaction=True)
def test_explain_of_the_claim_uses_the_claim_index_on_100k_rows():
    with connection.cursor() as cur:
        # 100,000 rows: mostly stopped history, 1% queued over three queues, a few held.
        cur.execute(
            """
            INSERT INTO work_items (public_id, queue, key, state, outcome, priority, run_after, attempts,
                                    max_attempts, metadata, wire, reclaimed, handed_out, last_error,
                                    claimed_by, created_at, stopped_at, lease_expires_at, lease_token)
            SELECT 'work_x' || g, (ARRAY['test.noop', 'test.other', 'test.capped'])[g % 3 + 1], 'k' || g,
                   s.state, CASE WHEN s.state = 'stopped' THEN 'succeeded' END, g % 5,
                   now() - make_interval(secs => g % 1000), 1, 5, '{}', false, false, false, '', '',
                   now(), CASE WHEN s.state = 'stopped' THEN now() END,
                   CASE WHEN s.state = 'active' THEN now() + interval '1 minute' END,
                   CASE WHEN s.state = 'active' THEN gen_random_uuid() END
            FROM generate_series(1, 100000) AS g,
                 LATERAL (SELECT CASE WHEN g % 100 = 0 THEN 'queued'
                                      WHEN g % 1000 = 1 THEN 'active'
                                      ELSE 'stopped' END AS state) AS s
            """
        )
        cur.execute("ANALYZE work_items")
        cur.execute("SELECT count(*), count(*) FILTER (WHERE state = 'queued') FROM work_items")
        assert cur.fetchone() == (100000, 1000)
        # wires: a capped over_wire queue also counts live wire reservations against its cap.
        for name, caps, wires in (
            ("item_claim", [None, None], [False, False]),
            ("item_claim_capped", [None, 3], [False, False]),
            ("item_claim_capped", [None, 3], [False, True]),
        ):
            cur.execute(
                "EXPLAIN " + QUERIES[name],
                {
                    "queues": ["test.noop", "test.capped"],
                    "limits": [10, 10],
                    "leases": [60.0, 60.0],
                    "caps": caps,
                    "wires": wires,
                    "limit": 10,
                    "worker_id": "explain",
                    "relaxed": True,
                },
            )
            plan = "\n".join(r[0] for r in cur.fetchall())
            assert "work_items_claim_idx" in plan, plan
            assert "Seq Scan on work_items" not in plan, plan
