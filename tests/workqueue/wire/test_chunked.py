"""A request body is acted on only once it has been read, whatever its framing (issue 25, item 8).

Django reads a WSGI body by its Content-Length: a ``Transfer-Encoding: chunked`` body has none,
so ``request.body`` was empty and a chunked metadata patch answered 200 having written nothing,
and a chunked ``{"force": true}`` stop was taken as a graceful one. Behind a server that
de-chunks and terminates the input (gunicorn sets ``wsgi.input_terminated``) the body is read
to its end; behind one that does not (Django's own server) the answer is 411 and nothing
changes. The official SDK sends Content-Length, so it never meets either.
"""

from __future__ import annotations

import json

import httpx
import pytest
from django.db.models.functions import Now

from tests.workqueue.wire.helpers import by_key, enqueue, snapshot
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)


def chunked(payload: dict):
    """A body httpx sends chunked: a generator has no length."""
    data = json.dumps(payload).encode()
    return iter([data[:5], data[5:]])


def make_active(item) -> None:
    WorkItem.objects.filter(pk=item.id).update(
        state="active", lease_token="00000000-0000-0000-0000-000000000001", lease_expires_at=Now(), started_at=Now()
    )


def test_a_chunked_body_is_read_to_its_end_behind_gunicorn(gunicorn, env, api_key):
    server = gunicorn(threads=4)
    patched, stopped = enqueue(env, 2, metadata={"a": "1"})
    make_active(stopped)
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    base = f"{server.url}/v1/environments/{env.id}/work"
    with httpx.Client(timeout=30) as http:
        response = http.post(f"{base}/{patched.public_id}", headers=headers, content=chunked({"metadata": {"b": "2"}}))
        assert response.request.headers.get("transfer-encoding") == "chunked"
        assert response.status_code == 200, response.text
        assert by_key("sess_0").metadata == {"a": "1", "b": "2"}
        response = http.post(f"{base}/{stopped.public_id}/stop", headers=headers, content=chunked({"force": True}))
        assert response.status_code == 200, response.text
        assert response.json()["state"] == "stopped"  # forced: not a graceful "stopping"
    assert by_key("sess_1").state == "stopped"


def test_a_chunked_body_a_server_cannot_read_is_411_and_changes_nothing(live_server, env, api_key):
    (patched, stopped) = enqueue(env, 2, metadata={"a": "1"})
    make_active(stopped)
    before = snapshot()
    headers = {"Authorization": f"Bearer {api_key}", "Content-Type": "application/json"}
    base = f"{live_server.url}/v1/environments/{env.id}/work"
    for path, payload in (
        (f"{base}/{patched.public_id}", {"metadata": {"b": "2"}}),
        (f"{base}/{stopped.public_id}/stop", {"force": True}),
    ):
        with httpx.Client(timeout=30) as http:  # one connection each: the unread body is left on it
            response = http.post(path, headers=headers, content=chunked(payload))
        assert response.status_code == 411, response.text
        error = response.json()["error"]
        assert error["type"] == "invalid_request_error" and "Content-Length" in error["message"]
    assert snapshot() == before
