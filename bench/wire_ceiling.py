"""The wire cycle's raw ceiling: the four statements behind a bare WSGI callable.

``gunicorn bench.wire_ceiling:app`` (the same gunicorn, worker class and threads as the
benchmark's real server) answers the four calls of a worker's cycle with one statement each,
the very statements the wire API runs for them (``wire_poll``, ``wire_ack``,
``wire_heartbeat``, ``wire_stop`` of workqueue/sql/wire.sql, with the parameters the API
passes for a plain environment: no caps, no flow control), from one autocommit psycopg
connection per server thread, prepared, as the app prepares them. No Django, no key check,
no poller bookkeeping, no request parsing beyond the path, and a body that only says what
the client loop needs (the polled item's id). What the real API does beyond this is the
framework's share of a cycle (``bench/sections/wire.py`` prints both side by side).

The client (``bench_wire``) sends the same requests to both, so the paths match the API's:
``/v1/environments/{env}/work/poll``, ``…/work/{id}/ack``, ``…/heartbeat``, ``…/stop``.
"""

from __future__ import annotations

import json
import os
import threading

import psycopg

from workqueue.sql import QUERIES as WIRE

RESERVE_S = 60.0  # the client's reclaim_older_than_ms=60000
STARTUP_S = 60.0  # the settings' STARTUP_LEASE default
TTL_S = 60.0  # HEARTBEAT_TTL default
FINALIZE_BATCH = 100

_local = threading.local()


def _conn() -> psycopg.Connection:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = psycopg.connect(os.environ["WIRE_CEILING_CONNINFO"], autocommit=True)  # PGAPPNAME names it
        conn.prepare_threshold = 0  # prepared on first use, as the app's statements are
        _local.conn = conn
    return conn


def _run(name: str, params: dict) -> list[tuple]:
    cur = _conn().execute(WIRE[name], params)
    return cur.fetchall() if cur.pgresult is not None and cur.pgresult.status == 2 else []


def _answer(start_response, body) -> list[bytes]:
    data = json.dumps(body).encode()
    start_response("200 OK", [("Content-Type", "application/json"), ("Content-Length", str(len(data)))])
    return [data]


def app(environ, start_response):
    parts = environ["PATH_INFO"].strip("/").split("/")  # v1 environments {env} work [{id}] {verb}
    env_id, verb = parts[2], parts[-1]
    if verb == "poll":
        rows = _run(
            "wire_poll",
            {
                "environment_id": env_id,
                "reserve_s": RESERVE_S,
                "worker_id": environ.get("HTTP_ANTHROPIC_WORKER_ID", ""),
                "batch": FINALIZE_BATCH,
                "full_queues": [],
                "flow_queues": [],
                "blocked_groups": [],
            },
        )
        handed = [r for r in rows if r[0] == "handed"]
        return _answer(start_response, {"id": handed[0][2]} if handed else None)  # verdict, id, public_id, ...
    work_id = parts[-2]
    common = {"environment_id": env_id, "work_id": work_id}
    if verb == "ack":
        rows = _run(
            "wire_ack",
            {
                **common,
                "startup_s": STARTUP_S,
                "worker_id": environ.get("HTTP_ANTHROPIC_WORKER_ID", ""),
                "queues": [],
                "caps": [],
            },
        )
    elif verb == "heartbeat":
        rows = _run("wire_heartbeat", {**common, "claim": True, "expected": None, "ttl_s": TTL_S})
    elif verb == "stop":
        rows = _run("wire_stop", {**common, "force": True})
    else:
        start_response("404 Not Found", [("Content-Length", "0")])
        return [b""]
    return _answer(start_response, {"ok": bool(rows)})
