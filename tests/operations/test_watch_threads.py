"""Watch streams cannot starve a threaded (WSGI) server (issue 25, item 3).

A real gunicorn (gthread, 1 worker × 16 threads, as the README recommends). Under WSGI each
open stream holds a server thread: before, the cap was per owner key only, and the admin's
live panel counted under another key than the API, so one user held 8 threads and four users
held all 16 — the login page, the wire and every other request then hung. A client that hung up
kept its thread until the next keep-alive (15 s). Now a process holds at most
``WATCH_MAX_THREADS`` (8) streams (503 past it), one user's admin and API streams count
together against ``WATCH_MAX_PER_OWNER``, and an idle WSGI stream writes every
``SSE_WSGI_KEEPALIVE`` (1 s), so a hang-up frees its thread within about two seconds.
"""

from __future__ import annotations

import json
import time

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client
from django.urls import reverse

import operations
from operations.store import WATCHES_TABLE
from tests.conftest import wait_until
from workqueue.environments import create_api_key, create_environment

pytestmark = pytest.mark.django_db(transaction=True)

THREADS = 16
MAX_THREADS = 8  # OPERATIONS["WATCH_MAX_THREADS"]'s default
PER_OWNER = 4  # OPERATIONS["WATCH_MAX_PER_OWNER"]'s default
# No keep-alive for five minutes: only the hang-up check can notice a client that went away.
SERVER_OPERATIONS = {"SSE_KEEPALIVE": 300}


def cookies_of(name: str) -> dict[str, str]:
    user = get_user_model().objects.create_superuser(name, f"{name}@example.com", "pw")
    client = Client()
    client.force_login(user)
    return {"user": str(user.pk), **{k: m.value for k, m in client.cookies.items()}}


def followed() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(*) FROM {WATCHES_TABLE}")
        return cursor.fetchone()[0]


class Watch:
    """One watch stream, kept open once its first snapshot arrived (the thread is then held)."""

    def __init__(self, base: str, cookies: dict, path: str):
        self.http = httpx.Client(base_url=base, cookies=cookies, timeout=10)
        self.stream = self.http.stream("GET", path)
        self.response = self.stream.__enter__()
        self.status = self.response.status_code
        if self.status == 200:
            lines = self.response.iter_lines()
            while not next(lines).startswith("data: "):
                pass
            self._lines = lines  # kept: dropping it would close the connection

    def close(self) -> None:
        self.stream.__exit__(None, None, None)
        self.http.close()


def open_watches(server, users: list[dict], ops: dict) -> list[Watch]:
    """Each user opens PER_OWNER API streams, then PER_OWNER admin live panels."""
    watches = []
    for cookies in users:
        op = ops[cookies["user"]]
        for path in [f"/api/operations/{op.id}/watch"] * PER_OWNER + [
            reverse("admin:operations_operation_watch", args=[op.id])
        ] * PER_OWNER:
            watches.append(Watch(server.url, {k: v for k, v in cookies.items() if k != "user"}, path))
    return watches


def test_watchers_cannot_take_every_thread_and_a_hang_up_frees_its_thread(gunicorn):
    server = gunicorn(threads=THREADS, env={"TESTS_OPERATIONS": json.dumps(SERVER_OPERATIONS)})
    users = [cookies_of(f"watcher{n}") for n in range(5)]
    ops = {u["user"]: operations.start("test.ops.count", {}, owner=u["user"]) for u in users}
    env, _key = create_environment("edge", "self_hosted")
    api_key = create_api_key("control")[1]

    watches = open_watches(server, users, ops)  # 40 attempts, each answered (none waits for a thread)
    try:
        statuses = [w.status for w in watches]
        assert statuses.count(200) == MAX_THREADS, statuses
        assert set(statuses) <= {200, 429, 503}, statuses
        # The first user's admin panels come after their 4 API streams: one user's streams count together.
        assert statuses[PER_OWNER : 2 * PER_OWNER] == [429] * PER_OWNER, statuses
        assert 503 in statuses  # the process's own cap
        refused = next(w for w in watches if w.status == 503)
        assert refused.response.headers["Retry-After"] and refused.response.headers["content-type"] == (
            "application/json"
        )

        # With every watch slot taken, the rest of the site still answers at once.
        began = time.monotonic()
        login = httpx.get(f"{server.url}/admin/login/", timeout=10)
        login_took = time.monotonic() - began
        assert login.status_code == 200
        stats = httpx.get(
            f"{server.url}/v1/environments/{env.id}/work/stats",
            headers={"Authorization": f"Bearer {api_key}"},
            timeout=10,
        )
        assert stats.status_code == 200
        print(f"login page with {len(watches)} watchers ({statuses.count(200)} open): {login_took * 1000:.0f} ms")
    finally:
        for watch in watches:  # every client hangs up
            watch.close()

    # The server notices the hang-ups long before any keep-alive is due (300 s here): the
    # follow rows go, and the first user can open as many streams as before.
    wait_until(lambda: followed() == 0, timeout=15, message="the hung-up streams to be noticed")
    first = users[0]
    again = [
        Watch(
            server.url,
            {k: v for k, v in first.items() if k != "user"},
            f"/api/operations/{ops[first['user']].id}/watch",
        )
        for _ in range(PER_OWNER)
    ]
    try:
        assert [w.status for w in again] == [200] * PER_OWNER
    finally:
        for watch in again:
            watch.close()
