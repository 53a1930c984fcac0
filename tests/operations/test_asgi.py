"""The watch stream under a real ASGI server (uvicorn): streamed as it happens, capped per
owner, and released when the client hangs up (issue 9, item 12)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import Client

import operations
from operations.store import WATCHES_TABLE
from tests.conftest import ROOT, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MAX_PER_OWNER = 4  # OPERATIONS["WATCH_MAX_PER_OWNER"]'s default


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def asgi_server(subprocess_env):
    """``uvicorn project.asgi:application`` on a free port, against the test database."""
    port = _free_port()
    log = tempfile.NamedTemporaryFile(prefix="uvicorn-", suffix=".log", delete=False)  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "project.asgi:application", "--host", "127.0.0.1", "--port", str(port)],
        cwd=ROOT,
        env={**subprocess_env, "CONN_MAX_AGE": "0"},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"

    def answers() -> bool:
        assert proc.poll() is None, Path(log.name).read_text()
        try:
            httpx.get(url + "/api/operations", timeout=2)
            return True
        except httpx.TransportError:
            return False

    wait_until(answers, timeout=60, message="uvicorn to answer")
    yield url
    proc.terminate()
    try:
        proc.wait(15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)
    log.close()  # left open, its ResourceWarning surfaced in whichever test ran at the next GC (test_chaos)


@pytest.fixture
def owner_cookies():
    user = get_user_model().objects.create_user("ada")
    client = Client()
    client.force_login(user)
    return str(user.pk), {name: morsel.value for name, morsel in client.cookies.items()}


def followed() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT op_id FROM {WATCHES_TABLE}")
        return {row[0] for row in cursor.fetchall()}


def server_connections() -> int:
    """Backends connected to the test database other than this test's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def first_event(lines) -> dict:
    for line in lines:
        if line.startswith("data: "):
            return json.loads(line.removeprefix("data: "))
    raise AssertionError("the stream ended before its first snapshot")


@pytest.mark.direct_db(reason="counts the ASGI server's backends in pg_stat_activity; a pooler's are its own")
def test_an_asgi_watch_streams_at_once_and_a_hang_up_releases_it(asgi_server, owner_cookies):
    owner, cookies = owner_cookies
    ops = [operations.start("test.ops.count", {}, owner=owner) for _ in range(MAX_PER_OWNER)]
    clients = [httpx.Client(base_url=asgi_server, cookies=cookies, timeout=20) for _ in ops]
    try:
        streams = []
        for http, op in zip(clients, ops, strict=True):
            stream = http.stream("GET", f"/api/operations/{op.id}/watch")
            response = stream.__enter__()
            assert response.status_code == 200
            # Under ASGI the first snapshot arrives while the operation is still pending:
            # nothing buffers the stream to its end.
            lines = response.iter_lines()  # kept: dropping it closes the connection
            assert first_event(lines)["state"] == "pending"
            streams.append((stream, lines))
        assert followed() == {op.id for op in ops}
        # An open ASGI stream holds no database connection of its own (only the process's
        # watcher and listener hold one, shared by every stream).
        assert server_connections() <= 2

        with httpx.Client(base_url=asgi_server, cookies=cookies, timeout=20) as http:
            refused = http.get(f"/api/operations/{ops[0].id}/watch")
        assert refused.status_code == 429, refused.text
        assert refused.json()["error"]["type"] == "rate_limit_error" and refused.headers["Retry-After"]

        for stream, _lines in streams:  # the clients hang up mid-stream
            stream.__exit__(None, None, None)
    finally:
        for http in clients:
            http.close()

    # The server noticed: every subscription let go of its follow row ...
    wait_until(lambda: not followed(), timeout=30, message="the follow rows to go")
    # ... and the owner's streams were given back: as many can be opened again.
    with httpx.Client(base_url=asgi_server, cookies=cookies, timeout=20) as http:
        for op in ops:
            with http.stream("GET", f"/api/operations/{op.id}/watch") as response:
                assert response.status_code == 200
                assert first_event(response.iter_lines())["id"] == op.id


def test_an_asgi_watch_ends_with_the_terminal_snapshot(asgi_server, owner_cookies):
    owner, cookies = owner_cookies
    op = operations.start("test.ops.count", {}, owner=owner)
    with (
        httpx.Client(base_url=asgi_server, cookies=cookies, timeout=20) as http,
        http.stream("GET", f"/api/operations/{op.id}/watch") as response,
    ):
        lines = response.iter_lines()
        assert first_event(lines)["state"] == "pending"
        operations.cancel(op.id)
        rest = [json.loads(line[6:]) for line in lines if line.startswith("data: ")]
    assert rest and rest[-1]["state"] == "cancelled"
    wait_until(lambda: not followed(), timeout=30, message="the follow row to go")
