"""The ``indexes`` section: what a drained item's index entries cost the server.

Every state change of a work item is a new row version with an entry in each index whose
predicate it matches (none is a HOT update: the partial indexes name ``state``). This section
runs the raw-SQL drain (``item_claim`` + ``item_complete_many`` from a tight psycopg loop,
``bench.rawsql``) on the table as shipped and on the same table without the three indexes
whose guarantees a drain does not need itself — the unique ``public_id`` (ids found by index
for the wire API and the admin, unique across the table), the unsettled-key index
(cancel-by-key across queues) and the stopped index (a reap that reads only what it deletes,
the dashboard's last hour) — alternating run by run, and prints both with their CPU per item.
It answers "what would dropping a guarantee buy" with a figure; the indexes are put back
before it returns, whatever happens.
"""

from __future__ import annotations

import statistics

from django.db import connection

from bench import cpu, rawsql

#: (index or constraint name, is a unique constraint) the second configuration goes without.
DROPPABLE = (
    ("work_items_public_id_uniq", True),
    ("work_items_unsettled_keyed_idx", False),
    ("work_items_stopped_idx", False),
)


def _drop() -> None:
    with connection.cursor() as cur:
        for name, constraint in DROPPABLE:
            if constraint:
                cur.execute(f'ALTER TABLE work_items DROP CONSTRAINT IF EXISTS "{name}"')
            else:
                cur.execute(f'DROP INDEX IF EXISTS "{name}"')


def _restore() -> None:
    """Put back what ``_drop`` dropped from the model's own declarations, through the schema
    editor, so each comes back with the SQL its migration ran (the same definition, to the text)."""
    from workqueue.models import WorkItem

    declared = {obj.name: obj for obj in (*WorkItem._meta.indexes, *WorkItem._meta.constraints)}
    with connection.cursor() as cur:
        cur.execute("SELECT indexname FROM pg_indexes WHERE tablename = 'work_items'")
        present = {row[0] for row in cur.fetchall()}
    with connection.schema_editor() as editor:
        for name, constraint in DROPPABLE:
            if name in present:
                continue
            if constraint:
                editor.add_constraint(WorkItem, declared[name])
            else:
                editor.add_index(WorkItem, declared[name])


def bench_indexes(opts, db, report) -> None:
    from bench.harness import reset
    from workqueue.models import WorkItem

    count = max(opts.workers)
    cases = {"as shipped": [], "without the three": []}
    spent = {name: cpu.Cpu(0.0, 0.0) for name in cases}
    items = dict.fromkeys(cases, 0)
    try:
        for _ in range(opts.runs):
            for name in cases:
                if name == "as shipped":
                    _restore()
                else:
                    _drop()
                reset()
                WorkItem.objects.enqueue_many([("raw.drain", f"i-{i}") for i in range(opts.drain_items)])
                n, rate, run_spent = rawsql.drain(db.conninfo, "raw.drain", connections=count, batch=opts.batch)
                cases[name].append(rate)
                spent[name] += run_spent
                items[name] += n
    finally:
        _restore()
    shipped = statistics.median(cases["as shipped"])
    report.add(
        f"indexes: raw drain, {count} connections, work_items as shipped",
        shipped,
        "items/s",
        note="the raw-SQL loop; CPU columns: the loop's and its backends'",
        spent=spent["as shipped"],
        spent_items=items["as shipped"],
    )
    report.add(
        f"indexes: raw drain, {count} connections, without public_id, unsettled-key, stopped",
        statistics.median(cases["without the three"]),
        "items/s",
        shipped,
        "ratio to the table as shipped: what those three guarantees cost a drain",
        spent=spent["without the three"],
        spent_items=items["without the three"],
    )
