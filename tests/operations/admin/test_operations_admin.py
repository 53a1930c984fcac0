"""The operations admin: list with progress bars and badges, filters, detail, cancel, live stream."""

import pytest
from django.test import Client
from django.urls import reverse

import operations
from operations.admin import STATE_COLORS, progress_bar
from operations.models import Operation, State
from operations.testing import OperationFactory
from project.demo.kinds import ExportRequest


def _op(state, **fields):
    """A demo.export operation in ``state``, written as a worker writes it (OperationFactory)."""
    fields.setdefault("owner", "7")
    return OperationFactory(kind="demo.export", request=ExportRequest(units=3), state=state, **fields)


def test_every_state_has_a_badge_colour_and_a_filter_entry(admin_client):
    assert set(STATE_COLORS) == set(State)
    page = admin_client.get(reverse("admin:operations_operation_changelist"))
    assert page.status_code == 200
    for state in State:
        assert f"state__exact={state.value}" in page.content.decode()


def test_changelist_shows_progress_attempts_and_errors(admin_client):
    running = _op("running", units_total=9, units_done=3, count=4300)
    failed = _op("failed", error_code="no_such_subject", error_message="gone", max_attempts=2)
    counting = _op("running", units_total=None, count=4300)
    html = admin_client.get(reverse("admin:operations_operation_changelist")).content.decode()
    assert running.id in html and failed.id in html
    assert "3 of 9" in html and "4,300 records" in html
    assert "no_such_subject" in html
    assert "1 / 5" in html and "1 / 2" in html
    # No denominator: a count, never a bar pretending to know the end.
    assert "op-progress-fill" not in progress_bar(counting)
    assert "4,300 records" in progress_bar(counting)
    assert "width:33%" in progress_bar(running)


def test_filters_by_state_kind_and_owner(admin_client):
    mine = _op("pending", owner="alice")
    theirs = _op("failed", owner="bob")
    url = reverse("admin:operations_operation_changelist")
    by_state = admin_client.get(url, {"state__exact": "failed"}).content.decode()
    assert theirs.id in by_state and mine.id not in by_state
    by_owner = admin_client.get(url, {"owner": "alice"}).content.decode()
    assert mine.id in by_owner and theirs.id not in by_owner
    by_kind = admin_client.get(url, {"kind": "demo.export"}).content.decode()
    assert mine.id in by_kind and theirs.id in by_kind


def test_detail_page_renders_read_only_with_the_live_panel(admin_client):
    op = _op("running", units_total=4, units_done=1)
    page = admin_client.get(reverse("admin:operations_operation_change", args=[op.id]))
    html = page.content.decode()
    assert page.status_code == 200
    assert 'id="op-live"' in html and reverse("admin:operations_operation_watch", args=[op.id]) in html
    # The panel's code is the app's static file (shipped in the wheel, CSP-friendly), not inline.
    assert f'data-watch-url="{reverse("admin:operations_operation_watch", args=[op.id])}"' in html
    assert 'src="/static/operations/live.js"' in html and "new EventSource" not in html
    # The request, pretty-printed (keys sorted, indented).
    assert "{\n  &quot;records_per_unit&quot;: 1000," in html


def test_the_masked_fields_of_a_request_are_never_rendered(admin_client, settings):
    settings.OPERATIONS = {**settings.OPERATIONS, "ADMIN_MASKED_FIELDS": ["Units"]}
    op = _op("running", units_total=4, units_done=1)
    html = admin_client.get(reverse("admin:operations_operation_change", args=[op.id])).content.decode()
    assert "&quot;units&quot;: &quot;••••&quot;" in html and "&quot;units&quot;: 3" not in html
    assert "&quot;records_per_unit&quot;: 1000" in html  # only the named field


def test_masking_reaches_every_depth_and_refuses_a_bad_setting(settings):
    from operations.admin import masked
    from operations.conf import ops_settings
    from operations.exceptions import OperationsSettingsError

    value = {"a": [{"Token": "t", "b": 1}], "token": {"deep": 1}, "n": None}
    assert masked(value, frozenset({"token"})) == {"a": [{"Token": "••••", "b": 1}], "token": "••••", "n": None}
    settings.OPERATIONS = {**settings.OPERATIONS, "ADMIN_MASKED_FIELDS": "password"}
    with pytest.raises(OperationsSettingsError, match="ADMIN_MASKED_FIELDS"):
        ops_settings()


def test_cancel_action_cancels_pending_and_flags_running(admin_client):
    pending = _op("pending")
    running = _op("running")
    done = _op("succeeded")
    response = admin_client.post(
        reverse("admin:operations_operation_changelist"),
        {"action": "cancel_operations", "_selected_action": [pending.id, running.id, done.id]},
        follow=True,
    )
    assert response.status_code == 200
    assert Operation.objects.get(pk=pending.id).state == "cancelled"
    flagged = Operation.objects.get(pk=running.id)
    assert flagged.state == "running" and flagged.cancel_requested
    assert Operation.objects.get(pk=done.id).state == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_watch_stream_ends_with_the_terminal_snapshot(admin_client):
    op = _op("succeeded")
    response = admin_client.get(reverse("admin:operations_operation_watch", args=[op.id]))
    assert response.status_code == 200 and response["Content-Type"] == "text/event-stream"
    body = b"".join(response.streaming_content).decode()
    assert body.count("event: operation") == 1 and '"done":true' in body


def test_admin_pages_refuse_anonymous_users(db):
    op = _op("pending")
    client = Client()
    for url in (
        reverse("admin:operations_operation_changelist"),
        reverse("admin:operations_operation_change", args=[op.id]),
        reverse("admin:operations_operation_watch", args=[op.id]),
    ):
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"]


def test_the_changelist_reads_no_large_column_and_nothing_per_row(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    ops = [_op("failed", error_code="boom", error_message="x" * 900) for _ in range(3)]
    with CaptureQueriesContext(connection) as ctx:
        html = admin_client.get(reverse("admin:operations_operation_changelist")).content.decode()
    assert all(op.id in html for op in ops)
    table = Operation._meta.db_table
    reads = [q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in (q["sql"] or "")]
    assert reads, "the list read the operations table"
    for column in ("request", "result_detail", "attempt_log", "error_message"):
        assert not [sql for sql in reads if f'"{table}"."{column}"' in sql], column
    # A deferred column touched by a list column would cost one query per row.
    assert not [sql for sql in reads if f'WHERE "{table}"."id" =' in sql]


def test_the_detail_page_reads_the_operation_once(admin_client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    op = _op("failed", error_code="boom", error_message="gone")  # its attempt log names its worker
    with CaptureQueriesContext(connection) as ctx:
        html = admin_client.get(reverse("admin:operations_operation_change", args=[op.id])).content.decode()
    assert "boom" in html and "testing.factory" in html
    table = Operation._meta.db_table
    reads = [q["sql"] for q in ctx.captured_queries if f'FROM "{table}"' in (q["sql"] or "")]
    assert len(reads) == 1, reads


@pytest.fixture
def quiet_threads(transactional_db):
    """End the watcher and listener threads a live panel started, so the database can go."""
    from operations import watcher
    from tests.operations.conftest import _quiet_threads

    if watcher._shared is not None:
        watcher._shared.close()  # a new one, built from the settings the test overrides
    yield from _quiet_threads.__wrapped__()


def _watch(client, op_id):
    return client.get(reverse("admin:operations_operation_watch", args=[op_id]))


@pytest.mark.parametrize("op_id", ["op\x00x", "x" * 201])
def test_watching_a_bad_id_is_a_400_in_the_error_envelope(admin_client, op_id):
    response = _watch(admin_client, op_id)
    assert response.status_code == 400, response.content
    assert response.json()["error"]["type"] == "invalid_request_error"


def test_watching_a_missing_operation_is_a_404_in_the_error_envelope(quiet_threads, admin_client):
    response = _watch(admin_client, "op_missing")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "not_found_error"


def test_too_many_watchers_in_the_admin_is_503_with_retry_after(quiet_threads, admin_client):
    from django.test import override_settings

    ops = [_op("pending"), _op("pending")]
    with override_settings(OPERATIONS={"WATCHER_MAX_SUBSCRIPTIONS": 1}):
        held = _watch(admin_client, ops[0].id)
        assert held.status_code == 200
        next(iter(held.streaming_content))
        refused = _watch(admin_client, ops[1].id)
        held.close()
    assert refused.status_code == 503, refused.content
    assert refused.json()["error"]["type"] == "overloaded_error" and refused["Retry-After"]


def test_the_admin_keeps_an_internal_errors_text(quiet_threads, admin_client):
    from tests.operations.conftest import run_next

    op = operations.start("test.ops.crash", {})
    run_next()
    page = admin_client.get(reverse("admin:operations_operation_change", args=[op.id])).content.decode()
    assert "kaboom on attempt 1" in page
    response = _watch(admin_client, op.id)
    first = next(iter(response.streaming_content)).decode()
    response.close()
    assert "kaboom on attempt 1" in first


def _buttons(client, op) -> list[str]:
    import re

    page = client.get(reverse("admin:operations_operation_change", args=[op.id])).content.decode()
    return re.findall(r'<li><a class="button" href="[^"]+/do/([a-z_]+)/"', page)


def test_the_page_cancels_a_running_operation_after_a_confirmation(admin_client):
    running = _op("running")
    assert _buttons(admin_client, running) == ["cancel"]
    url = reverse("admin:operations_operation_do", args=[running.id, "cancel"])
    confirm = admin_client.get(url).content.decode()
    assert 'method="post"' in confirm and "csrfmiddlewaretoken" in confirm
    assert not Operation.objects.get(pk=running.id).cancel_requested  # the GET changed nothing
    admin_client.post(url)
    assert Operation.objects.get(pk=running.id).cancel_requested
    assert _buttons(admin_client, Operation.objects.get(pk=running.id)) == []


def test_the_page_retries_a_failed_operation_as_a_new_one(admin_client):
    failed = _op("failed", error_code="boom", error_message="gone")
    assert _buttons(admin_client, failed) == ["retry"]
    response = admin_client.post(reverse("admin:operations_operation_do", args=[failed.id, "retry"]), follow=True)
    new = Operation.objects.exclude(pk=failed.id).get()
    assert (new.kind, new.owner, new.request, new.state) == (failed.kind, "7", failed.request, State.PENDING)
    assert [str(m) for m in response.context["messages"]] == [f"Retried {failed.id} as {new.id}."]
    assert Operation.objects.get(pk=failed.id).state == State.FAILED
    assert _buttons(admin_client, _op("succeeded")) == []


def test_a_viewer_sees_no_operation_button_and_a_forged_post_is_403(db, client, django_user_model):
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("opviewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_operation"))
    client.force_login(user)
    running = _op("running")
    assert _buttons(client, running) == []
    assert client.post(reverse("admin:operations_operation_do", args=[running.id, "cancel"])).status_code == 403
    assert not Operation.objects.get(pk=running.id).cancel_requested
