"""Run the operations statements and turn their rows into ``Operation`` instances.

One function per statement in ``sql/queries.sql``; each is one round trip on Django's
connection, so it joins the caller's transaction.
"""

from __future__ import annotations

import json
from pathlib import Path

from django.db import DEFAULT_DB_ALIAS

from operations.conf import configured_table, ops_settings
from operations.models import Operation
from workqueue import sql
from workqueue.sql import Statements

OP_COLUMNS = [f.attname for f in Operation._meta.concrete_fields]
LIGHT_COLUMNS = [c for c in OP_COLUMNS if c not in ("request", "attempt_log")]
RUN_COLUMNS = [c for c in OP_COLUMNS if c != "attempt_log"]  # what begin hands the runner
_JSON = {"request", "result_detail", "attempt_log"}
ATTEMPT_LOG_LIMIT = 20

_close = (
    "CASE WHEN jsonb_array_length(o.attempt_log) = 0 THEN o.attempt_log "
    "ELSE jsonb_set(o.attempt_log, ARRAY[(jsonb_array_length(o.attempt_log) - 1)::text], "
    "(o.attempt_log -> -1) || jsonb_build_object('finished_at', now()) || {extra}) END"
)

WATCHES_TABLE = f"{configured_table()}_watches"


def _notify(op_id_expression: str) -> str:
    return (
        "(SELECT pg_notify(%(channel)s::text, '') WHERE %(channel)s::text <> '' AND EXISTS ("
        f"SELECT 1 FROM {WATCHES_TABLE} AS watch WHERE watch.op_id = {op_id_expression} "
        "AND watch.until > now())) AS notified"
    )


QUERIES = Statements(
    Path(__file__).with_name("sql") / "queries.sql",
    {
        # workqueue's work-item fragments and state sets: every work_items write is theirs.
        **sql.shared_fragments(),
        "table": configured_table(),
        "watches": WATCHES_TABLE,
        "op_light": ", ".join(f"o.{c}" for c in LIGHT_COLUMNS),
        "op": ", ".join(f"o.{c}" for c in OP_COLUMNS),
        "op_run": ", ".join(f"o.{c}" for c in RUN_COLUMNS),
        "notify": _notify,
        "open_attempt": (
            f"(CASE WHEN jsonb_array_length(o.attempt_log) >= {ATTEMPT_LOG_LIMIT} THEN o.attempt_log - 0 "
            "ELSE o.attempt_log END) || jsonb_build_array(jsonb_build_object("
            "'number', o.attempts + 1, 'worker_id', %(worker_id)s::text, 'started_at', now()))"
        ),
        "close_attempt": _close.format(extra="%(attempt)s::jsonb"),
        "close_released": _close.format(extra="jsonb_build_object('outcome', 'released')"),
    },
)


def run(name: str, params: dict, *, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """Run an operations statement (the notify channel is filled in)."""
    params.setdefault("channel", ops_settings().notify_channel)
    return sql.run(name, params, using=using, queries=QUERIES)


def to_operation(row, columns=OP_COLUMNS, *, using: str = DEFAULT_DB_ALIAS) -> Operation:
    """Build an Operation from a statement's row (extra trailing columns are ignored)."""
    values = list(row[: len(columns)])
    for i, name in enumerate(columns):
        if name in _JSON and isinstance(values[i], str):
            values[i] = json.loads(values[i])
    return Operation.from_db(using, columns, values)


def first_operation(rows, *, using: str = DEFAULT_DB_ALIAS) -> Operation | None:
    return to_operation(rows[0], using=using) if rows else None


def get_many(ids: list[str], *, using: str = DEFAULT_DB_ALIAS) -> dict[str, Operation]:
    """Read many operations in one statement, without request and attempt log."""
    if not ids:
        return {}
    rows = sql.run("op_get_many", {"ids": ids}, using=using, queries=QUERIES)
    return {r[0]: to_operation(r, LIGHT_COLUMNS, using=using) for r in rows}


def may_relax(using: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether a soft write (begin, a progress flush) may commit relaxed: only in its own
    transaction, never inside a caller's (it would relax the caller's commit too)."""
    from django.db import transaction

    return not transaction.get_connection(using).in_atomic_block
