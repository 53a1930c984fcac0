"""Load the named statements of ``sql/queries.sql`` once and run them on Django's connection.

Statements run on the connection Django already holds for the thread, so they join the
caller's ``transaction.atomic()``. They go through a server-side-binding psycopg cursor
wrapped in Django's cursor wrapper: Django's error translation, ``execute_wrapper`` hooks
and query logging all still apply, and the hot statements are prepared once per connection
(``WORKQUEUE["PREPARED_STATEMENTS"]``; turn it off behind a transaction-mode pooler that
cannot keep prepared statements).
"""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg.pq import ExecStatus

from workqueue import states

_TUPLES_OK = ExecStatus.TUPLES_OK
SQL_DIR = Path(__file__).with_name("sql")

_NAME = re.compile(r"^-- name: ([a-z0-9_]+)\s*$", re.M)

# The columns every Item is read from, in Item's field order (see workqueue.items).
ITEM_COLUMNS = (
    "id",
    "public_id",
    "queue",
    "key",
    "environment_id",
    "state",
    "outcome",
    "priority",
    "run_after",
    "attempts",
    "max_attempts",
    "lease_token",
    "lease_expires_at",
    "reclaimed",
    "metadata",
    "trace_context",
    "created_at",
    "started_at",
    "last_error",
    "claimed_by",
    "wire",
    "handed_out",
    "acknowledged_at",
    "last_heartbeat_at",
    "stop_requested_at",
    "stopped_at",
)


_CALL = re.compile(r"\{(\w+):([^{}]+)\}")
_PLAIN = re.compile(r"\{(\w+)\}")
_FRAGMENT = re.compile(r"^-- fragment: ([a-z0-9_]+)\(([a-z0-9_, ]*)\)\s*$", re.M)
_ARG = re.compile(r"\$([a-z_][a-z0-9_]*)")


def split_args(text: str) -> list[str]:
    """Split a placeholder's argument text on the commas outside parentheses and quotes."""
    parts, depth, quoted, start = [], 0, False, 0
    for i, ch in enumerate(text):
        if ch == "'":
            quoted = not quoted
        elif quoted:
            continue
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    parts.append(text[start:].strip())
    return parts


def _strip_comments(body: str) -> str:
    return "\n".join(line for line in body.strip().splitlines() if not line.lstrip().startswith("--"))


def render(body: str, fragments: dict) -> str:
    """Fill ``{name}`` and ``{name:args}`` placeholders, innermost first, until none is left
    that ``fragments`` knows (a fragment's text may hold placeholders of its own)."""
    for _ in range(20):
        before = body
        body = _CALL.sub(
            lambda m: fragments[m.group(1)](m.group(2).strip()) if m.group(1) in fragments else m.group(0), body
        )
        body = _PLAIN.sub(lambda m: value if isinstance(value := fragments.get(m.group(1)), str) else m.group(0), body)
        if body == before:
            return body
    raise ValueError(f"placeholders nest too deep (a fragment that names itself?): {body[:200]}")


class Fragment:
    """A piece of SQL from a ``-- fragment: name(arg, ...)`` block, called as ``{name:a, b}``.

    Each ``$arg`` in its text is replaced by the SQL text given for that argument; the
    result is rendered again, so a fragment may use the shared fragments (``{states:live}``).
    """

    def __init__(self, name: str, params: list[str], text: str):
        self.name, self.params, self.text = name, params, text

    def __call__(self, args: str = "") -> str:
        values = split_args(args) if self.params else []
        if len(values) != len(self.params):
            raise ValueError(f"fragment {self.name} takes ({', '.join(self.params)}), got {args!r}")
        given = dict(zip(self.params, values, strict=True))
        return _ARG.sub(lambda m: given[m.group(1)], self.text)


def load_fragments(path: Path) -> dict[str, Fragment | str]:
    """The ``-- fragment:`` blocks of a ``.sql`` file; one without arguments is plain text."""
    parts = _FRAGMENT.split(path.read_text())
    found: dict[str, Fragment | str] = {}
    for name, params, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        if name in found:
            raise ValueError(f"{path.name}: fragment {name!r} is defined twice")
        names = [p.strip() for p in params.split(",") if p.strip()]
        found[name] = Fragment(name, names, _strip_comments(body)) if names else _strip_comments(body)
    return found


class Statements:
    """The named statements of one ``.sql`` file, with ``{fragment}`` placeholders filled.

    A fragment is a string (``{name}``) or a function of the text after the colon
    (``{name:argument}``); see ``shared_fragments()`` for the ones every file may use.
    """

    def __init__(self, path: Path, fragments: dict | None = None):
        self.path = path
        text = path.read_text()
        fragments = fragments or {}
        parts = _NAME.split(text)
        self._sql: dict[str, str] = {}
        for name, body in zip(parts[1::2], parts[2::2], strict=True):
            if name in self._sql:
                raise ValueError(f"{path.name}: statement {name!r} is defined twice")
            self._sql[name] = render(_strip_comments(body), fragments).strip().rstrip(";")

    def __getitem__(self, name: str) -> str:
        return self._sql[name]

    def __contains__(self, name: str) -> bool:
        return name in self._sql

    def names(self) -> list[str]:
        return sorted(self._sql)


# What a claim hands back: the leading columns of ITEM_COLUMNS, through last_error, in Item's
# field order (so Item.from_claimed passes the row straight to Item), with started_at left
# NULL: a handler does not read it, and one timestamp less to parse per row. run_after is
# read (the claim sorts its rows on it); the columns after last_error stay empty.
CLAIMED_COLUMNS = ITEM_COLUMNS[: ITEM_COLUMNS.index("last_error") + 1]
_NOT_CLAIMED = {"started_at": "NULL::timestamptz AS started_at"}

ITEM_FRAGMENT = ", ".join(f"w.{c}" for c in ITEM_COLUMNS)
CLAIMED_FRAGMENT = ", ".join(_NOT_CLAIMED.get(c, f"w.{c}") for c in CLAIMED_COLUMNS)

# An extra output column that, when %(relaxed)s is true, lets this statement's transaction
# commit without waiting for its WAL to reach disk (synchronous_commit = off, transaction-
# local). Only for soft transitions that are safe to lose in a server crash: a claim, a
# lease renewal, an operation's begin or progress. Losing one reverts the row to a state the
# queue already recovers from, and since WAL is written in order, any later durable commit
# (the handler's own writes, the completion) makes it durable too. Enqueue, completion,
# failure and every terminal write stay synchronous.
RELAXED_FRAGMENT = "(SELECT set_config('synchronous_commit', 'off', true) WHERE %(relaxed)s::bool) AS relaxed_commit"


def cap_lock(queue: str) -> str:
    """``{cap_lock:QUEUE}``: take the transaction-scoped advisory lock under which ``max_running``
    of the queue named by the SQL expression QUEUE is checked (claim, poll and ack alike)."""
    return f"pg_advisory_xact_lock(hashtextextended('workqueue.max_running:' || {queue}, 0))"


def slots_used(args: str) -> str:
    """``{slots_used:QUEUE, WIRE}``: the one definition of what counts against ``max_running``.

    Items of the queue held under a live lease (starting, active, stopping; lapsed holders do
    not count), plus, when the SQL boolean WIRE is true (an ``over_wire`` queue), live poll
    reservations: queued wire items whose reservation has not lapsed, each one ack away from
    holding a slot. Claim, poll and ack all count with it, under ``cap_lock``. The holders are
    read through work_items_held_idx (few rows); reservations through the live (queue, key)
    index, so a queue that is not served over the wire skips that count.
    """
    queue, wire = (part.strip() for part in args.split(",", 1))
    return (
        f"((SELECT count(*) FROM work_items slot_h WHERE slot_h.queue = {queue}"
        f" AND slot_h.state IN {states.render_states('held')} AND slot_h.lease_expires_at > now())"
        f" + CASE WHEN {wire} THEN (SELECT count(*) FROM work_items slot_r WHERE slot_r.queue = {queue}"
        " AND slot_r.state = 'queued' AND slot_r.wire AND slot_r.lease_expires_at > now()) ELSE 0 END)"
    )


def flow_gated(queue: str) -> str:
    """``{flow_gated:QUEUE}``: true when an operator's controls row gives the queue named by the
    SQL expression QUEUE anything to enforce (paused, or any limit). The plain claim, which
    takes no per-queue lock for such a queue, claims nothing from it: the caller's cached
    view of the controls was stale, and the next claim takes the flow path (controls.sql)."""
    return (
        f"EXISTS (SELECT 1 FROM work_queue_controls fg WHERE fg.queue = {queue} AND (fg.paused"
        " OR fg.max_running IS NOT NULL OR fg.max_running_per_group IS NOT NULL"
        " OR fg.rate_count IS NOT NULL OR fg.rate_per_group_count IS NOT NULL))"
    )


def starts_used(args: str) -> str:
    """``{starts_used:QUEUE, SECONDS, WIRE}``: what counts against a queue's ``rate``: its starts
    in the sliding window of the last SECONDS (work_queue_starts: a claim or a wire ack each),
    plus, on an ``over_wire`` queue, live poll reservations (each one ack away from a start)."""
    queue, period, wire = (part.strip() for part in args.split(",", 2))
    return (
        f"((SELECT count(*) FROM work_queue_starts st WHERE st.queue = {queue}"
        f" AND st.started_at > now() - make_interval(secs => {period}))"
        f" + CASE WHEN {wire} THEN (SELECT count(*) FROM work_items st_r WHERE st_r.queue = {queue}"
        " AND st_r.state = 'queued' AND st_r.wire AND st_r.lease_expires_at > now()) ELSE 0 END)"
    )


def groups_full(q: str) -> str:
    """``{groups_full:Q}``: the groups of the queue row Q (columns name, wire, group_cap,
    group_rate_n, group_rate_s) with no room left: as many live holders (plus live wire
    reservations) as ``max_running_per_group``, or as many starts in the window as
    ``rate_per_group``. A text[]; the scans under it are skipped when the limit is unset."""
    return (
        "coalesce((SELECT array_agg(DISTINCT full_g.group_key) FROM ("
        " SELECT gh.group_key FROM ("
        f"  SELECT h.group_key FROM work_items h WHERE {q}.group_cap IS NOT NULL AND h.queue = {q}.name"
        f"   AND h.state IN {states.render_states('held')} AND h.lease_expires_at > now()"
        "   AND h.group_key IS NOT NULL"
        "  UNION ALL"
        f"  SELECT r.group_key FROM work_items r WHERE {q}.group_cap IS NOT NULL AND {q}.wire AND r.queue = {q}.name"
        "   AND r.state = 'queued' AND r.wire AND r.lease_expires_at > now() AND r.group_key IS NOT NULL"
        f" ) gh GROUP BY gh.group_key HAVING count(*) >= {q}.group_cap"
        " UNION ALL"
        f" SELECT gs.group_key FROM work_queue_starts gs WHERE {q}.group_rate_n IS NOT NULL AND gs.queue = {q}.name"
        f"  AND gs.group_key IS NOT NULL AND gs.started_at > now() - make_interval(secs => {q}.group_rate_s)"
        f" GROUP BY gs.group_key HAVING count(*) >= {q}.group_rate_n"
        ") full_g), '{}'::text[])"
    )


def group_room(args: str) -> str:
    """``{group_room:Q, GROUP}``: how many more items of group GROUP the queue row Q (as in
    groups_full) may start now: NULL when neither per-group limit is set."""
    q, group = (part.strip() for part in args.split(",", 1))
    return (
        "least("
        f"CASE WHEN {q}.group_cap IS NOT NULL THEN {q}.group_cap"
        f" - (SELECT count(*) FROM work_items h WHERE h.queue = {q}.name AND h.group_key = {group}"
        f"     AND h.state IN {states.render_states('held')} AND h.lease_expires_at > now())"
        f" - CASE WHEN {q}.wire THEN (SELECT count(*) FROM work_items r WHERE r.queue = {q}.name"
        f"     AND r.group_key = {group} AND r.state = 'queued' AND r.wire AND r.lease_expires_at > now())"
        "   ELSE 0 END END, "
        f"CASE WHEN {q}.group_rate_n IS NOT NULL THEN {q}.group_rate_n"
        f" - (SELECT count(*) FROM work_queue_starts gs WHERE gs.queue = {q}.name AND gs.group_key = {group}"
        f"     AND gs.started_at > now() - make_interval(secs => {q}.group_rate_s)) END)"
    )


def flow_wire_gate(r: str) -> str:
    """``{flow_wire_gate:R}``: a wire poll's candidate row R passes the flow checks made under
    the locks just before (queue_flow_blocked: %(blocked_groups)s), and is not of a queue an
    operator put under control since the caller last looked (%(flow_queues)s were checked)."""
    return (
        f"({r}.group_key IS NULL OR ({r}.queue || chr(31) || {r}.group_key) <> ALL (%(blocked_groups)s::text[]))"
        f" AND ({r}.queue = ANY (%(flow_queues)s::text[]) OR NOT {flow_gated(r + '.queue')})"
    )


def shared_fragments() -> dict:
    """The fragments every statement file may use, workqueue's and operations' alike:
    ``{item}``, ``{claimed}``, ``{relaxed}``, ``{cap_lock:...}``, ``{slots_used:...}``, the
    state and outcome sets (``{states:live}``, ``{outcomes:charted}``, see workqueue.states)
    and the work-item fragments of ``sql/fragments.sql`` (each documented at its top)."""
    base = {
        "item": ITEM_FRAGMENT,
        "claimed": CLAIMED_FRAGMENT,
        "relaxed": RELAXED_FRAGMENT,
        "cap_lock": cap_lock,
        "slots_used": slots_used,
        "states": states.render_states,
        "outcomes": states.render_outcomes,
        "flow_gated": flow_gated,
        "starts_used": starts_used,
        "groups_full": groups_full,
        "group_room": group_room,
        "flow_wire_gate": flow_wire_gate,
    }
    return {**base, **load_fragments(SQL_DIR / "fragments.sql")}


def load(filename: str) -> Statements:
    """Load ``workqueue/sql/<filename>`` with the shared fragments."""
    return Statements(SQL_DIR / filename, shared_fragments())


QUERIES = load("queries.sql")
CONTROLS = load("controls.sql")


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


def run(name: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS, queries=QUERIES) -> list[tuple]:
    """Run the statement called ``name`` and return its rows ([] when it returns none)."""
    params = {"relaxed": False, **(params or {})}
    cur = _cursor(using)
    cur.execute(queries[name], params)
    # Ask the result's status, not cursor.description (which builds a Column per column).
    result = cur.cursor.pgresult
    return cur.fetchall() if result is not None and result.status == _TUPLES_OK else []


def rowcount(name: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS, queries=QUERIES) -> int:
    """Run the statement called ``name`` and return how many rows it touched."""
    cur = _cursor(using)
    cur.execute(queries[name], params or {})
    return cur.rowcount
