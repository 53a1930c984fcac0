"""Run SQL text on Django's connection through a server-binding, optionally preparing, cursor.

Statements run on the connection Django already holds for the thread, so they join the
caller's ``transaction.atomic()``. They go through a server-side-binding psycopg cursor
wrapped in Django's cursor wrapper: Django's error translation, ``execute_wrapper`` hooks
and query logging all still apply, and the hot statements are prepared once per connection
(``WORKQUEUE["PREPARED_STATEMENTS"]``; turn it off behind a transaction-mode pooler that
cannot keep prepared statements).
"""

from __future__ import annotations

import datetime as dt

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.pq import ExecStatus

_TUPLES_OK = ExecStatus.TUPLES_OK


class _PreparedCursor(psycopg.Cursor):
    """A server-binding cursor that asks for every statement to be prepared."""

    def execute(self, query, params=None, *, prepare=None, binary=None):
        return super().execute(query, params, prepare=True, binary=binary)


# psycopg's own timestamptz loader (C). Django's wraps it in Python to set the tzinfo it wants,
# which cost a worker ~1.5 us per timestamp it reads; when Django wants UTC and the session's
# TimeZone is UTC, psycopg's loader already gives exactly that (datetime.timezone.utc).
_TIMESTAMPTZ_OID = psycopg.adapters.types["timestamptz"].oid
_found_loader = psycopg.adapters.get_loader(_TIMESTAMPTZ_OID, psycopg.pq.Format.TEXT)
assert _found_loader is not None  # psycopg registers a timestamptz loader for every format
_C_TZ_LOADER = _found_loader


def _driver_cursor(conn, prepared: bool) -> psycopg.Cursor:
    """This connection's cursor for our statements: made once per driver connection (and kept on
    it) rather than per statement, which spares a copy of the adapters map every time."""
    raw = conn.connection
    kept = getattr(raw, "_workqueue_cursor", None)
    if kept is not None and kept[0] is prepared and not kept[1].closed:
        return kept[1]
    if prepared:
        # Django turns automatic preparing off (prepare_threshold=None), which also
        # disables explicit prepares; a very high threshold keeps Django's own queries
        # unprepared while ours ask for it.
        if raw.prepare_threshold is None:
            raw.prepare_threshold = 1 << 30
        cur: psycopg.Cursor = _PreparedCursor(raw)
    else:
        cur = psycopg.Cursor(raw)
    if conn.timezone is dt.UTC and raw.pgconn.parameter_status(b"TimeZone") == b"UTC":
        cur.adapters.register_loader(_TIMESTAMPTZ_OID, _C_TZ_LOADER)
    raw._workqueue_cursor = (prepared, cur)
    return cur


def _cursor(using: str):
    from workqueue.conf import wq_settings

    conn = connections[using]
    conn.ensure_connection()
    cur = _driver_cursor(conn, wq_settings().prepared_statements)
    # Django's wrapper, per statement: its error translation, execute_wrapper hooks and query
    # logging apply. Not closed after use: closing it would close the kept driver cursor.
    # The stubs say these take Django's CursorWrapper; Django passes them the driver's cursor.
    return conn.make_debug_cursor(cur) if conn.queries_logged else conn.make_cursor(cur)  # type: ignore[arg-type]


def execute(text: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """Run the SQL ``text`` and return its rows ([] when it returns none)."""
    params = {"relaxed": False, **(params or {})}
    cur = _cursor(using)
    cur.execute(text, params)
    # Ask the result's status, not cursor.description (which builds a Column per column).
    result = cur.cursor.pgresult
    return cur.fetchall() if result is not None and result.status == _TUPLES_OK else []


def execute_rowcount(text: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Run the SQL ``text`` and return how many rows it touched."""
    cur = _cursor(using)
    cur.execute(text, params or {})
    return cur.rowcount
