"""The SQL layer: one template language (loader), the statements of every file, `sqlshow`, the
reviewed snapshots, and the claim's use of its index."""

from __future__ import annotations

import io
import re

import pytest
from django.core.management import CommandError, call_command
from django.db import connection

from tests.conftest import ROOT
from workqueue.exceptions import SqlTemplateError
from workqueue.sql import QUERIES, Catalog, loader, registry, split_args

SQL_FILES = sorted([*ROOT.glob("workqueue/sql/*.sql"), *ROOT.glob("operations/sql/*.sql")])
SNAPSHOTS = ROOT / "tests" / "sql_snapshots"


def load(tmp_path, files: dict[str, str], **kwargs) -> Catalog:
    paths = []
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        paths.append(tmp_path / name)
    return Catalog.load("t", paths, **kwargs)


# -- the files ------------------------------------------------------------------------------


def test_every_sql_file_parses_and_each_block_says_what_it_does_right_under_its_header():
    assert len(SQL_FILES) == 8
    for path in SQL_FILES:
        text = path.read_text()
        blocks = loader.parse(text, path.name)
        assert blocks, path
        for block in blocks:
            header = "-- name: " + block.name if block.kind == "statement" else f"-- fragment: {block.name}("
            after = text.split(header, 1)[1].split("\n", 1)[1]
            assert after.startswith("-- "), f"{path.name}: {block.name} has no comment saying what it does"


def test_every_app_looks_its_statements_up_by_name_across_its_files():
    from operations.store import QUERIES as OPERATIONS

    assert {"item_claim", "item_claim_flow", "wire_poll", "queue_stats"} <= set(QUERIES.names())
    assert {s.source.split(":")[0] for s in QUERIES.statements.values()} == {
        f"workqueue/sql/{f}.sql" for f in ("queries", "controls", "dashboard", "stats", "wire")
    }
    assert set(OPERATIONS.names()) == {s.name for s in OPERATIONS.statements.values()}
    assert not set(QUERIES.names()) & set(OPERATIONS.names())
    # Operations composes workqueue's fragments; workqueue sees none of operations'.
    assert "item_insert" in OPERATIONS.fragments and "notify" not in QUERIES.fragments


# -- the template language ------------------------------------------------------------------


def test_a_fragment_takes_its_arguments_split_by_one_rule_and_may_use_fragments(tmp_path):
    catalog = load(
        tmp_path,
        {
            "f.sql": "-- fragment: pick(a, b)\n-- what it does\ncoalesce($a, $b) IN {states_held}\n"
            "-- fragment: pair(x)\n-- a pair\n{pick:$x, 'q,(r)'}\n"
            "-- fragment: flat()\n-- one\nSELECT 1\n"
            "-- name: s\n-- a statement\nSELECT {pair:f(w.x, [1, 2])}, {flat};\n",
        },
        generated={"states_held": "('starting', 'active', 'stopping')"},
    )
    assert split_args("f(a, b), 'c, d', e, x[1, 2], {g:h, i}") == ["f(a, b)", "'c, d'", "e", "x[1, 2]", "{g:h, i}"]
    assert catalog.fragments["pair"].text == "coalesce($x, 'q,(r)') IN ('starting', 'active', 'stopping')"
    assert catalog["s"] == "SELECT coalesce(f(w.x, [1, 2]), 'q,(r)') IN ('starting', 'active', 'stopping'), SELECT 1"


def test_an_argument_is_expanded_before_it_goes_in_and_nothing_put_in_is_scanned_again(tmp_path):
    catalog = load(
        tmp_path,
        {
            "f.sql": "-- fragment: wrap(x)\n-- wraps\n($x)\n"
            "-- name: s\n-- nests\nSELECT {wrap:{wrap:1}}, {wrap:'{}'::text[]}, {g}, {wrap:$$x$$}\n",
        },
        generated={"g": "'{nope}'"},  # put in place, never read again for placeholders
    )
    assert catalog["s"] == "SELECT ((1)), ('{}'::text[]), '{nope}', ($$x$$)"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("-- name: s\n-- x\nSELECT {nope}\n", r"f.sql:1: unknown placeholder \{nope\}"),
        ("-- name: s\n-- x\nSELECT {two:1}\n", r"two takes \(a, b\), got '1'"),
        ("-- name: s\n-- x\nSELECT {two}\n", r"\{two\} takes \(a, b\)"),
        ("-- name: s\n-- x\nSELECT {one:1}\n", r"one takes no arguments: write \{one\}"),
        ("-- name: s\n-- x\nSELECT {two:1, }\n", r"two takes \(a, b\), got '1,'"),
        ("-- name: s\n-- x\nSELECT {two:(1, 2}\n", r"a placeholder is not closed"),
        ("-- name: s\n-- x\nSELECT $a\n", r"\$a outside a fragment"),
        ("-- fragment: bad(a)\n-- x\n$b\n", r"f.sql:1: \$b is not an argument of bad"),
        ("-- fragment: bad(a, b)\n-- x\n$a\n", r"bad never uses its argument \$b"),
        ("-- fragment: loop()\n-- x\n{loop}\n", r"fragments use each other: loop -> loop"),
        ("-- name: one\n-- x\nSELECT 2\n", r"f.sql:1: 'one' is defined twice \(first at \S*base.sql:5\)"),
        ("SELECT 1\n-- name: s\n-- x\nSELECT 1\n", r"SQL before the first"),
        ("-- name: Bad\n-- x\nSELECT 1\n", r"a statement is named in lower case"),
        ("-- fragment: nope\n-- x\nSELECT 1\n", r"a fragment header reads"),
        ("-- name: s\n-- only a comment\n", r"s has no SQL"),
    ],
)
def test_a_template_error_is_refused_when_the_files_load_naming_file_and_line(tmp_path, text, error):
    base = "-- fragment: two(a, b)\n-- x\n$a + $b\n\n-- fragment: one()\n-- x\n1\n"
    (tmp_path / "base.sql").write_text(base)
    (tmp_path / "f.sql").write_text(text)
    with pytest.raises(SqlTemplateError, match=error):
        Catalog.load("t", [tmp_path / "base.sql", tmp_path / "f.sql"])


def test_a_statement_name_in_two_files_or_a_fragment_of_the_base_redefined_is_refused(tmp_path):
    files = {"a.sql": "-- name: s\n-- x\nSELECT 1\n", "b.sql": "-- name: s\n-- y\nSELECT 2\n"}
    with pytest.raises(SqlTemplateError, match=r"b.sql:1: 's' is defined twice \(first at "):
        load(tmp_path, files)
    with pytest.raises(SqlTemplateError, match=r"'item_insert' is defined twice .*fragments.sql"):
        load(tmp_path, {"c.sql": "-- fragment: item_insert()\n-- x\nSELECT 1\n"}, base=QUERIES)
    with pytest.raises(SqlTemplateError, match=r"'item' is defined twice"):
        load(tmp_path, {"d.sql": "-- name: t\n-- x\nSELECT 1\n"}, base=QUERIES, generated={"item": "x"})


def test_multi_line_text_keeps_its_line_breaks_indented_to_its_place(tmp_path):
    catalog = load(
        tmp_path,
        {
            "f.sql": "-- fragment: sub(rows)\n-- x\nSELECT a,\n       b\nFROM $rows AS r\n"
            "-- name: s\n-- x\nWITH t AS (\n    {sub:(\n        SELECT 1\n    )}\n)\n"
            "SELECT x = {sub:y}\n",
        },
    )
    assert catalog["s"] == (
        "WITH t AS (\n"
        "    SELECT a,\n"
        "           b\n"
        "    FROM (\n"
        "        SELECT 1\n"
        "    ) AS r\n"
        ")\n"
        "SELECT x = SELECT a,\n"
        "           b\n"
        "    FROM y AS r"
    )


def test_the_claims_expand_to_readable_sql():
    for name in ("item_claim", "item_claim_capped", "item_claim_flow", "wire_poll"):
        lines = QUERIES[name].splitlines()
        assert max(len(line) for line in lines) < 160, name
    assert len(QUERIES["item_claim_flow"].splitlines()) > 150  # its fragments' own line breaks kept


# -- sqlshow and the snapshots --------------------------------------------------------------


def sqlshow(*args) -> str:
    out = io.StringIO()
    call_command("sqlshow", *args, stdout=out)
    return out.getvalue()


def test_sqlshow_prints_a_statement_of_either_app_or_a_fragment_expanded():
    assert (
        sqlshow("item_claim") == f"-- item_claim, from workqueue/sql/queries.sql (expanded)\n{QUERIES['item_claim']};\n"
    )
    shown = sqlshow("op_begin")
    assert shown.startswith("-- op_begin, from operations/sql/queries.sql") and "{" not in shown.replace("'{}'", "")
    assert (
        sqlshow("by_pkey")
        == "-- fragment: by_pkey(w, ids), from workqueue/sql/fragments.sql\n$w.id = ANY (ARRAY($ids))\n"
    )
    with pytest.raises(CommandError, match="no statement or fragment named 'item_clam'; did you mean item_claim"):
        sqlshow("item_clam")


def test_sqlshow_lists_every_statement_and_fragment_with_its_file():
    listed = dict(line.split() for line in sqlshow("--list").splitlines())
    assert listed["item_claim_flow"] == "workqueue/sql/controls.sql"
    assert listed["op_start"] == "operations/sql/queries.sql"
    assert len(listed) == sum(len(c.names()) for c in registry.catalogs())
    fragments = sqlshow("--list", "--fragments")
    assert re.search(r"^claim_walk +workqueue/sql/fragments.sql$", fragments, re.M)
    assert re.search(r"^states_live +generated \(workqueue\)$", fragments, re.M)
    assert re.search(r"^notify +operations/sql/fragments.sql$", fragments, re.M)


def test_every_statement_matches_its_reviewed_snapshot():
    """The expanded SQL of every statement, as reviewed. A change to a fragment changes these
    files: regenerate them with `manage.py sqlshow --write-snapshots tests/sql_snapshots`."""
    wanted = registry.snapshots()
    assert len(wanted) == sum(len(c.names()) for c in registry.catalogs()) > 80
    on_disk = {p.relative_to(SNAPSHOTS): p.read_text() for p in SNAPSHOTS.glob("*/*.sql")}
    stale = sorted(str(p) for p in set(on_disk) - set(wanted))
    missing = sorted(str(p) for p in set(wanted) - set(on_disk))
    changed = sorted(str(p) for p in set(wanted) & set(on_disk) if wanted[p] != on_disk[p])
    hint = "run `manage.py sqlshow --write-snapshots tests/sql_snapshots` and review the diff"
    assert (stale, missing, changed) == ([], [], []), hint


def test_write_snapshots_writes_each_statement_and_removes_stale_files(tmp_path):
    (tmp_path / "workqueue").mkdir()
    (tmp_path / "workqueue" / "item_gone.sql").write_text("old\n")
    (tmp_path / "workqueue" / "item_claim.sql").write_text("old\n")
    out = sqlshow("--write-snapshots", str(tmp_path))
    total = sum(len(c.names()) for c in registry.catalogs())
    assert out.strip() == f"{total} statements in {tmp_path}: {total} changed, 1 removed"
    assert (tmp_path / "workqueue" / "item_claim.sql").read_text() == sqlshow("item_claim")
    assert not (tmp_path / "workqueue" / "item_gone.sql").exists()
    assert sqlshow("--write-snapshots", str(tmp_path)).strip().endswith(": 0 changed, 0 removed")


# -- the claim's plan -----------------------------------------------------------------------


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
