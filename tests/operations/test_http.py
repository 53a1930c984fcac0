"""The HTTP surface at /api/: list, get, cancel (both spellings), watch (SSE), owner-scoped."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth import get_user_model
from django.test import Client, override_settings

import operations
from operations.models import Operation
from tests.operations.conftest import in_thread, op_row, run_next
from tests.testapp.models import OperationRun

pytestmark = pytest.mark.django_db

SHAPE = {
    "id",
    "kind",
    "state",
    "done",
    "owner",
    "progress",
    "result",
    "error",
    "attempts",
    "cancelRequested",
    "revision",
    "createdAt",
    "updatedAt",
    "startedAt",
    "finishedAt",
    "parent",
    "position",
    "follows",
    "children",
}
SECRET = "s3cr3t-request-value"


@pytest.fixture
def other_client() -> Client:
    client = Client()
    client.force_login(get_user_model().objects.create_user("bob"))
    return client


def start_for(user, kind: str = "test.ops.count", request=None, **options):
    return operations.start(kind, request if request is not None else {"secret": SECRET}, owner=str(user.pk), **options)


def assert_error(response, status: int, kind: str) -> dict:
    assert response.status_code == status, response.content
    body = response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind and body["error"]["message"]
    return body


def sse_events(response) -> list[tuple[str, str | None, str]]:
    """Read a whole event stream: [(event, id, data), ...] (keep-alive comments skipped)."""
    text = b"".join(response.streaming_content).decode()
    events = []
    for block in text.split("\n\n"):
        if not block or block.startswith(":"):
            continue
        fields = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((fields["event"], fields.get("id"), fields["data"]))
    return events


def test_get_renders_the_operation_without_its_request(client, user):
    op = start_for(user)
    response = client.get(f"/api/operations/{op.id}")
    assert response.status_code == 200
    body = response.json()
    assert set(body) == SHAPE
    assert (body["id"], body["kind"], body["state"], body["done"], body["owner"]) == (
        op.id,
        "test.ops.count",
        "pending",
        False,
        str(user.pk),
    )
    assert body["progress"] == {
        "unitsTotal": None,
        "unitsDone": 0,
        "unit": "",
        "message": "",
        "countLabel": "records",
        "count": 0,
    }
    assert body["result"] is None and body["error"] is None and body["startedAt"] is None
    assert body["createdAt"].endswith("Z")
    assert SECRET not in response.content.decode()


def test_list_is_owner_scoped_and_never_renders_requests(client, other_client, user):
    mine = [start_for(user).id for _ in range(3)]
    other_client.get("/api/operations")  # bob has none
    theirs = operations.start("test.ops.count", {"secret": SECRET}, owner="someone-else")
    response = client.get("/api/operations")
    assert response.status_code == 200
    body = response.json()
    assert [o["id"] for o in body["operations"]] == list(reversed(mine))
    assert theirs.id not in response.content.decode() and SECRET not in response.content.decode()
    assert body["nextPageToken"] is None
    assert other_client.get("/api/operations").json()["operations"] == []


def test_list_pages_by_keyset_and_filters_by_kind_and_state(client, user):
    ids = [start_for(user).id for _ in range(5)]
    start_for(user, "test.ops.tiers", {})
    operations.cancel(ids[0])
    seen, token = [], ""
    while True:
        body = client.get("/api/operations", {"kind": "test.ops.count", "page_size": 2, "page_token": token}).json()
        seen += [o["id"] for o in body["operations"]]
        token = body["nextPageToken"]
        if not token:
            break
    assert seen == list(reversed(ids))
    cancelled = client.get("/api/operations", {"state": "cancelled"}).json()["operations"]
    assert [o["id"] for o in cancelled] == [ids[0]]
    both = client.get("/api/operations?state=cancelled,pending").json()["operations"]
    assert len(both) == 6


@pytest.mark.parametrize(
    "query",
    [
        {"page_size": "0"},
        {"page_size": "ten"},
        {"page_size": "100000"},
        {"state": "bogus"},
        {"state": "pending,nope"},
        {"page_token": "garbage!"},
    ],
)
def test_bad_list_arguments_are_400_in_the_error_envelope(client, user, query):
    start_for(user)
    assert_error(client.get("/api/operations", query), 400, "invalid_request_error")


def test_anonymous_requests_are_401_everywhere():
    anonymous = Client()
    op = operations.start("test.ops.count", {}, owner="7")
    for response in (
        anonymous.get("/api/operations"),
        anonymous.get(f"/api/operations/{op.id}"),
        anonymous.post(f"/api/operations/{op.id}:cancel"),
        anonymous.post(f"/api/operations/{op.id}/cancel"),
        anonymous.get(f"/api/operations/{op.id}/watch"),
    ):
        assert_error(response, 401, "authentication_error")
    assert op_row(op.id).state == "pending"


def test_another_users_operation_is_404_and_untouched(client, other_client, user):
    op = start_for(user)
    for response in (
        other_client.get(f"/api/operations/{op.id}"),
        other_client.post(f"/api/operations/{op.id}:cancel"),
        other_client.post(f"/api/operations/{op.id}/cancel"),
        other_client.get(f"/api/operations/{op.id}/watch"),
        client.get("/api/operations/op_missing"),
    ):
        assert_error(response, 404, "not_found_error")
    row = op_row(op.id)
    assert (row.state, row.cancel_requested) == ("pending", False)


def owner_from_header(request):
    return request.headers.get("X-Owner")


@override_settings(
    OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, "OWNER_RESOLVER": "tests.operations.test_http.owner_from_header"}
)
def test_the_owner_resolver_is_configurable_and_an_empty_owner_is_401():
    op = operations.start("test.ops.count", {}, owner="tenant-1")
    assert Client(headers={"X-Owner": "tenant-1"}).get(f"/api/operations/{op.id}").json()["id"] == op.id
    assert_error(Client(headers={"X-Owner": "tenant-2"}).get(f"/api/operations/{op.id}"), 404, "not_found_error")
    assert_error(Client(headers={"X-Owner": ""}).get("/api/operations"), 401, "authentication_error")
    assert_error(Client().get("/api/operations"), 401, "authentication_error")


@pytest.mark.parametrize("path", ["{id}:cancel", "{id}/cancel"])
def test_cancel_by_either_path_cancels_a_pending_operation(client, user, path):
    op = start_for(user)
    response = client.post("/api/operations/" + path.format(id=op.id))
    assert response.status_code == 200, response.content
    body = response.json()
    assert (body["state"], body["done"], body["cancelRequested"]) == ("cancelled", True, True)
    assert SECRET not in response.content.decode()
    again = client.post("/api/operations/" + path.format(id=op.id)).json()
    assert (again["state"], again["revision"]) == ("cancelled", body["revision"])  # terminal: unchanged


def test_methods_are_checked(client, user):
    op = start_for(user)
    assert_error(client.get(f"/api/operations/{op.id}:cancel"), 405, "invalid_request_error")
    assert_error(client.post(f"/api/operations/{op.id}"), 405, "invalid_request_error")
    assert client.get(f"/api/operations/{op.id}/cancel").status_code == 405
    assert client.post("/api/operations").status_code == 405
    assert op_row(op.id).state == "pending"


def test_cancel_keeps_djangos_csrf_check_under_session_auth(user):
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    op = start_for(user)
    assert strict.post(f"/api/operations/{op.id}:cancel").status_code == 403
    assert strict.post(f"/api/operations/{op.id}/cancel").status_code == 403
    assert op_row(op.id).state == "pending"


def test_a_csrf_refusal_is_the_apis_json_error_envelope(user):
    """Issue 25, item 9: Django's HTML 403 page is not what an API client can read."""
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(user)
    op = start_for(user)
    for path in (f"/api/operations/{op.id}:cancel", f"/api/operations/{op.id}/cancel"):
        response = strict.post(path)
        assert response["Content-Type"] == "application/json"
        body = assert_error(response, 403, "permission_error")
        assert "CSRF" in body["error"]["message"]
    assert op_row(op.id).state == "pending" and not op_row(op.id).cancel_requested
    # With the token (as a page of the site sends it) the same POST cancels.
    strict.get("/admin/login/")  # sets the CSRF cookie
    token = strict.cookies["csrftoken"].value
    done = strict.post(f"/api/operations/{op.id}:cancel", headers={"X-CSRFToken": token})
    assert done.status_code == 200 and done.json()["state"] == "cancelled"


@pytest.mark.django_db(transaction=True)
def test_watch_streams_snapshots_and_ends_with_the_terminal_one(client, user):
    op = start_for(user, "test.ops.tiers", {"units": 3, "per_unit": 10, "pause": 0.3})
    worker = in_thread(run_next)
    response = client.get(f"/api/operations/{op.id}/watch")
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/event-stream")
    assert response["Cache-Control"] == "no-cache"
    events = sse_events(response)
    worker.join(10)
    assert {event for event, _id, _data in events} == {"operation"}
    snapshots = [json.loads(data) for _event, _id, data in events]
    assert [int(event_id) for _e, event_id, _d in events] == [s["revision"] for s in snapshots]
    revisions = [s["revision"] for s in snapshots]
    assert revisions == sorted(set(revisions))
    assert snapshots[0]["state"] in ("pending", "running")
    assert snapshots[-1]["state"] == "succeeded" and snapshots[-1]["done"] is True
    assert snapshots[-1]["progress"]["unitsDone"] == 3
    assert all(set(s) == SHAPE for s in snapshots)
    assert all("request" not in data and SECRET not in data for _e, _i, data in events)
    assert OperationRun.objects.filter(op_id=op.id, event="returned").exists()


@pytest.mark.django_db(transaction=True)
def test_watching_a_finished_operation_sends_its_terminal_snapshot_and_closes(client, user):
    op = start_for(user)
    operations.cancel(op.id)
    events = sse_events(client.get(f"/api/operations/{op.id}/watch"))
    assert len(events) == 1
    event, event_id, data = events[0]
    assert event == "operation" and json.loads(data)["state"] == "cancelled"
    assert int(event_id) == op_row(op.id).revision


@pytest.mark.django_db(transaction=True)
def test_watching_a_reaped_operation_ends_with_gone(client, user):
    op = start_for(user)
    response = client.get(f"/api/operations/{op.id}/watch")
    stream = iter(response.streaming_content)
    first = next(stream).decode()
    assert first.startswith("event: operation\n")
    Operation.objects.filter(pk=op.id).delete()
    rest = b"".join(stream).decode()
    # (keep-alive comments may come first: under WSGI an idle stream writes one every second)
    *comments, last = [block for block in rest.split("\n\n") if block]
    assert last == "event: gone\ndata: {}" and set(comments) <= {":"} and rest.endswith("\n\n")


@pytest.mark.django_db(transaction=True)
def test_too_many_watchers_is_503_with_retry_after(client, user):
    ops = [start_for(user) for _ in range(2)]
    with override_settings(OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, "WATCHER_MAX_SUBSCRIPTIONS": 1}):
        held = client.get(f"/api/operations/{ops[0].id}/watch")
        assert held.status_code == 200
        next(iter(held.streaming_content))  # the stream is open and following
        refused = client.get(f"/api/operations/{ops[1].id}/watch")
        assert_error(refused, 503, "overloaded_error")
        assert refused["Retry-After"]
        held.close()


@pytest.mark.django_db(transaction=True)
def test_an_idle_watch_stream_sends_keepalive_comments_until_the_end(client, user):
    with override_settings(OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, "SSE_KEEPALIVE": 0.1}):
        op = start_for(user)
        response = client.get(f"/api/operations/{op.id}/watch")
        stream = iter(response.streaming_content)
        assert next(stream).startswith(b"event: operation\n")
        assert next(stream) == b":\n\n"  # nothing changed: a comment keeps proxies from closing it
        operations.cancel(op.id)
        rest = b"".join(stream).decode()
    *comments, last = [block for block in rest.split("\n\n") if block]
    assert set(comments) <= {":"}
    assert last.startswith("event: operation\n") and '"state":"cancelled"' in last


@pytest.mark.django_db(transaction=True)
def test_watch_over_a_real_server_streams_until_the_worker_finishes(live_server, client, user):
    import httpx

    from tests.operations.conftest import InlineWorker

    op = start_for(user, "test.ops.tiers", {"units": 3, "per_unit": 10, "pause": 0.2})
    cookies = {name: morsel.value for name, morsel in client.cookies.items()}
    events = []
    with InlineWorker("live"), httpx.Client(base_url=live_server.url, cookies=cookies, timeout=30) as http:
        assert http.get(f"/api/operations/{op.id}").json()["id"] == op.id
        with http.stream("GET", f"/api/operations/{op.id}/watch") as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            for line in response.iter_lines():
                if line.startswith("data: "):
                    events.append(json.loads(line.removeprefix("data: ")))
        cancelled = http.post(f"/api/operations/{op.id}/cancel")  # no CSRF token: refused
        assert cancelled.status_code == 403
    assert events[-1]["state"] == "succeeded" and events[-1]["progress"]["unitsDone"] == 3
    assert [e["revision"] for e in events] == sorted({e["revision"] for e in events})
    assert op_row(op.id).worker_id == "live"


# -- bad input, outages and methods (issue 9, item 14) -----------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/operations/op%00x",
        "/api/operations/op%00x:cancel",
        "/api/operations/op%00x/cancel",
        "/api/operations/op%00x/watch",
        "/api/operations/" + "x" * 201,
    ],
)
def test_a_bad_operation_id_is_400_in_the_error_envelope(client, user, path):
    op = start_for(user)
    method = client.post if "cancel" in path else client.get
    body = assert_error(method(path), 400, "invalid_request_error")
    assert "id" in body["error"]["message"]
    assert op_row(op.id).state == "pending"


@pytest.mark.parametrize(
    "query",
    [
        {"kind": "test.ops\x00count"},
        {"kind": "x" * 300},
        {"page_token": "a\x00b"},
        {"state": "pending\x00"},
        {"page_size": "1\x00"},
    ],
)
def test_nul_bytes_and_oversize_filters_are_400_not_500(client, user, query):
    start_for(user)
    assert_error(client.get("/api/operations", query), 400, "invalid_request_error")


def test_a_page_token_that_decodes_to_a_nul_id_is_400(client, user):
    import base64

    token = base64.urlsafe_b64encode(json.dumps(["2026-01-01T00:00:00+00:00", "op\x00x"]).encode()).decode()
    start_for(user)
    assert_error(client.get("/api/operations", {"page_token": token}), 400, "invalid_request_error")


@pytest.mark.parametrize(
    "method, path",
    [
        ("post", "/api/operations"),
        ("delete", "/api/operations/{id}"),
        ("get", "/api/operations/{id}/cancel"),
        ("post", "/api/operations/{id}/watch"),
        ("put", "/api/operations/{id}:cancel"),
    ],
)
def test_a_wrong_method_is_a_json_405_naming_the_allowed_ones(client, user, method, path):
    op = start_for(user)
    response = getattr(client, method)(path.format(id=op.id))
    assert_error(response, 405, "invalid_request_error")
    assert response["Allow"]
    assert op_row(op.id).state == "pending"


@pytest.fixture
def database_down():
    """Point the default connection at a port nothing listens on (a real refused connection)."""
    from django.db import connection

    def down():
        connection.close()
        connection.settings_dict["PORT"] = "1"

    original = connection.settings_dict["PORT"]
    yield down
    connection.close()
    connection.settings_dict["PORT"] = original


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "method, path",
    [
        ("get", "/api/operations"),
        ("get", "/api/operations/{id}"),
        ("post", "/api/operations/{id}:cancel"),
        ("post", "/api/operations/{id}/cancel"),
        ("get", "/api/operations/{id}/watch"),
    ],
)
def test_a_database_outage_is_503_with_a_retry_hint(client, user, database_down, method, path):
    op = start_for(user)
    database_down()
    response = getattr(client, method)(path.format(id=op.id))
    body = assert_error(response, 503, "api_error")  # the wire's Unavailable, reused
    assert "retry" in body["error"]["message"]
    assert response["Retry-After"] and response["x-should-retry"] == "true"


# -- internal error text (issue 9, item 17) ----------------------------------------------


def test_an_internal_errors_text_is_not_shown_to_the_owner(client, user):
    from tests.operations.conftest import run_to_end

    op = start_for(user, "test.ops.crash", {})
    run_next()
    shown = client.get(f"/api/operations/{op.id}").json()["error"]
    assert shown["code"] == "internal" and "kaboom" not in shown["message"] and shown["message"]
    listed = client.get("/api/operations").json()["operations"][0]["error"]
    assert "kaboom" not in listed["message"]
    run_to_end(op.id)
    shown = client.get(f"/api/operations/{op.id}").json()["error"]
    assert shown["code"] == "attempts_exhausted" and "kaboom" not in shown["message"]
    assert "2 attempts" in shown["message"]
    # The detail stays where operators look: the attempt log (the admin shows it).
    row = op_row(op.id)
    assert "kaboom on attempt 2" in row.attempt_log[-1]["error_message"]
    assert "kaboom on attempt 2" in row.error.message


def test_a_classified_failures_message_is_still_shown(client, user):
    from tests.operations.conftest import run_to_end

    op = start_for(user, "test.ops.fail", {})
    run_to_end(op.id)
    shown = client.get(f"/api/operations/{op.id}").json()["error"]
    assert shown["code"] == "attempts_exhausted" and "the upstream was down" in shown["message"]


# -- watch streams: per-owner cap, maximum duration, reconnect hint (issue 9, item 12) --


def _settings(**extra):
    return override_settings(OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, **extra})


@pytest.mark.django_db(transaction=True)
def test_watch_streams_are_capped_per_owner_with_a_429(client, other_client, user):
    ops = [start_for(user) for _ in range(3)]
    with _settings(WATCH_MAX_PER_OWNER=2):
        held = [client.get(f"/api/operations/{op.id}/watch") for op in ops[:2]]
        for response in held:
            assert response.status_code == 200
            next(iter(response.streaming_content))
        refused = client.get(f"/api/operations/{ops[2].id}/watch")
        body = assert_error(refused, 429, "rate_limit_error")
        assert "WATCH_MAX_PER_OWNER" in body["error"]["message"] and refused["Retry-After"]
        # Another owner has streams of their own (and gets a 404 for ada's operation).
        assert_error(other_client.get(f"/api/operations/{ops[2].id}/watch"), 404, "not_found_error")
        held[0].close()  # the client went away: its stream is given back
        again = client.get(f"/api/operations/{ops[2].id}/watch")
        assert again.status_code == 200
        again.close()
        held[1].close()


@pytest.mark.django_db(transaction=True)
def test_a_stream_that_never_started_gives_its_slot_back_when_closed(client, user):
    op = start_for(user)
    with _settings(WATCH_MAX_PER_OWNER=1):
        client.get(f"/api/operations/{op.id}/watch").close()  # closed before a byte was read
        response = client.get(f"/api/operations/{op.id}/watch")
        assert response.status_code == 200
        response.close()


@pytest.mark.django_db(transaction=True)
def test_a_watch_ends_after_its_maximum_duration_and_tells_the_client_to_reconnect(client, user):
    op = start_for(user)
    with _settings(WATCH_MAX_DURATION=0.5, SSE_KEEPALIVE=0.1):
        response = client.get(f"/api/operations/{op.id}/watch")
        text = b"".join(response.streaming_content).decode()  # ends by itself
    blocks = [block for block in text.split("\n\n") if block]
    first = dict(line.split(": ", 1) for line in blocks[0].splitlines())
    assert first["event"] == "operation" and int(first["retry"]) > 0
    assert json.loads(first["data"])["done"] is False  # cut short, not finished: the client reconnects
    assert all(block == ":" for block in blocks[1:])
    assert op_row(op.id).state == "pending"


@pytest.mark.django_db(transaction=True)
def test_a_watch_that_will_404_writes_no_follow_row(client, other_client, user):
    from operations.store import WATCHES_TABLE
    from tests.conftest import statements_run

    op = start_for(user)
    with statements_run() as texts:  # SQL text on Django 5.2 too (CaptureQueriesContext has none there)
        assert_error(other_client.get(f"/api/operations/{op.id}/watch"), 404, "not_found_error")
        assert_error(client.get("/api/operations/op_missing/watch"), 404, "not_found_error")
    assert texts, "no statement was seen: the check below would pass vacuously"
    assert [sql for sql in texts if WATCHES_TABLE in sql] == []
