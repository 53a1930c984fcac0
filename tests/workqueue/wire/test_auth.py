"""Keys: which kind each endpoint takes; 401 for the wrong kind, 404 for another environment."""

from __future__ import annotations

import anthropic
import pytest

from tests.workqueue.wire.helpers import by_key, enqueue, snapshot
from workqueue.environments import rotate_environment_key
from workqueue.models import ApiKey, Environment

pytestmark = pytest.mark.django_db(transaction=True)


def endpoints(env_id: str, work_id: str) -> list[tuple[str, str, dict, str]]:
    """(method, path, request kwargs, which key it takes) for every wire endpoint."""
    base = f"/v1/environments/{env_id}/work"
    return [
        ("GET", f"{base}/poll", {}, "environment"),
        ("GET", base, {}, "environment"),
        ("GET", f"{base}/stats", {}, "either"),
        ("GET", f"{base}/{work_id}", {}, "api"),
        ("POST", f"{base}/{work_id}", {"json": {"metadata": {"x": "y"}}}, "api"),
        ("POST", f"{base}/{work_id}/ack", {}, "environment"),
        ("POST", f"{base}/{work_id}/heartbeat", {"params": {"expected_last_heartbeat": "NO_HEARTBEAT"}}, "environment"),
        ("POST", f"{base}/{work_id}/stop", {"json": {"force": True}}, "either"),
    ]


def test_missing_or_unknown_key_is_401_everywhere(http, env):
    (item,) = enqueue(env, 1)
    before = snapshot()
    for headers in (
        {},
        {"Authorization": "Bearer wqenv_not-a-real-key"},
        {"Authorization": "Basic abc"},
        {"X-Api-Key": "wqkey_nope"},
        {"Authorization": "Bearer sk-ant-something"},
    ):
        for method, path, kwargs, _takes in endpoints(env.id, item.public_id):
            response = http.request(method, path, headers=headers, **kwargs)
            assert response.status_code == 401, (method, path, headers, response.text)
            body = response.json()
            assert body["type"] == "error" and body["error"]["type"] == "authentication_error"
            assert "wqenv_not-a-real-key" not in response.text
    assert snapshot() == before


def test_another_environments_key_is_404_never_403(http, env, other_env):
    (item,) = enqueue(env, 1)
    before = snapshot()
    for method, path, kwargs, takes in endpoints(env.id, item.public_id):
        if takes == "api":
            continue  # an environment key is the wrong kind there: 401 (see below)
        response = http.request(method, path, headers={"Authorization": f"Bearer {other_env.key}"}, **kwargs)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["details"]["error_code"] == "environment_not_found"
        assert response.headers["x-should-retry"] == "false"
    assert snapshot() == before


def test_own_key_on_another_environments_item_is_404(sdk, env, other_env, api_key):
    (item,) = enqueue(env, 1)
    with pytest.raises(anthropic.NotFoundError):
        sdk(other_env.key).beta.environments.work.ack(item.public_id, environment_id=other_env.id)
    with pytest.raises(anthropic.NotFoundError):
        sdk(api_key).beta.environments.work.retrieve(item.public_id, environment_id=other_env.id)
    with pytest.raises(anthropic.NotFoundError) as caught:
        sdk(api_key).beta.environments.work.stats("env_doesnotexist")
    assert caught.value.error_code == "environment_not_found"


def test_environment_key_is_refused_for_metadata_update_and_get(sdk, env):
    (item,) = enqueue(env, 1, metadata={"a": "1"})
    work = sdk(env.key).beta.environments.work
    with pytest.raises(anthropic.AuthenticationError):
        work.update(item.public_id, environment_id=env.id, metadata={"a": "2"})
    with pytest.raises(anthropic.AuthenticationError):
        work.retrieve(item.public_id, environment_id=env.id)
    assert by_key("sess_0").metadata == {"a": "1"}


def test_api_key_is_refused_where_the_environment_key_is_needed(sdk, env, api_key):
    (item,) = enqueue(env, 1)
    control = sdk(api_key).beta.environments.work
    for call in (
        lambda: control.poll(env.id),
        lambda: control.ack(item.public_id, environment_id=env.id),
        lambda: control.heartbeat(item.public_id, environment_id=env.id, expected_last_heartbeat="NO_HEARTBEAT"),
        lambda: list(control.list(env.id)),
    ):
        with pytest.raises(anthropic.AuthenticationError):
            call()
    assert by_key("sess_0").handed_out is False


def test_either_key_stops_and_reads_stats_and_x_api_key_works(sdk, env, api_key, live_server):
    enqueue(env, 2)
    assert sdk(env.key).beta.environments.work.stats(env.id).depth == 2
    via_header = anthropic.Anthropic(base_url=live_server.url, api_key=api_key)  # sent as X-Api-Key
    try:
        assert via_header.beta.environments.work.stats(env.id).depth == 2
        assert via_header.beta.environments.work.stop(by_key("sess_0").public_id, environment_id=env.id).state == (
            "stopped"
        )
    finally:
        via_header.close()
    assert sdk(env.key).beta.environments.work.stop(by_key("sess_1").public_id, environment_id=env.id).state == (
        "stopped"
    )


def test_revoked_and_rotated_keys_stop_working(sdk, env, api_key):
    ApiKey.objects.update(revoked=True)
    with pytest.raises(anthropic.AuthenticationError):
        sdk(api_key).beta.environments.work.stats(env.id)
    new_key = rotate_environment_key(Environment.objects.get(pk=env.id))
    with pytest.raises(anthropic.AuthenticationError):
        sdk(env.key).beta.environments.work.poll(env.id)
    assert sdk(new_key).beta.environments.work.poll(env.id) is None


def test_an_api_key_limited_to_environments_is_404_outside_them(http, env, other_env):
    from workqueue.environments import create_api_key

    scoped = create_api_key("edge-only", environments=[env.id])[1]
    site_wide = create_api_key("everywhere")[1]
    (mine,) = enqueue(env, 1)
    (theirs,) = enqueue(other_env, 1, prefix="other")
    before = snapshot()
    for method, path, kwargs, takes in endpoints(other_env.id, theirs.public_id):
        if takes == "environment":
            continue
        response = http.request(method, path, headers={"Authorization": f"Bearer {scoped}"}, **kwargs)
        assert response.status_code == 404, (method, path, response.text)
        assert response.json()["error"]["details"]["error_code"] == "environment_not_found"
    assert snapshot() == before
    headers = {"Authorization": f"Bearer {scoped}"}
    assert http.get(f"/v1/environments/{env.id}/work/{mine.public_id}", headers=headers).status_code == 200
    # A key with no environments is site-wide.
    everywhere = {"Authorization": f"Bearer {site_wide}"}
    assert http.get(f"/v1/environments/{other_env.id}/work/{theirs.public_id}", headers=everywhere).status_code == 200
    assert http.get(f"/v1/environments/{env.id}/work/{mine.public_id}", headers=everywhere).status_code == 200


def test_deleting_its_only_environment_never_widens_a_scoped_key(http, env, other_env, django_user_model):
    """Issue 25, item 1: a key limited to C, C deleted (through the admin, as an operator
    would), must not turn into a site-wide key that reads and changes B's items."""
    from django.test import Client
    from django.urls import reverse

    from workqueue.environments import create_api_key, create_environment

    doomed, _key = create_environment("doomed", "self_hosted")
    scoped = create_api_key("doomed-only", environments=[doomed.id])[1]
    (theirs,) = enqueue(other_env, 1, prefix="other", metadata={"a": "1"})
    headers = {"Authorization": f"Bearer {scoped}"}
    assert http.get(f"/v1/environments/{other_env.id}/work/stats", headers=headers).status_code == 404

    admin = Client()
    admin.force_login(django_user_model.objects.create_superuser("boss", "boss@example.com", "pw"))
    deleted = admin.post(reverse("admin:workqueue_environment_delete", args=[doomed.pk]), {"post": "yes"})
    assert deleted.status_code == 302 and not Environment.objects.filter(pk=doomed.pk).exists()

    before = snapshot()
    for method, path, kwargs, takes in [
        *endpoints(other_env.id, theirs.public_id),
        *endpoints(doomed.id, theirs.public_id),
    ]:
        if takes == "environment":
            continue
        response = http.request(method, path, headers=headers, **kwargs)
        assert response.status_code == 401, (method, path, response.text)
        body = response.json()["error"]
        assert body["type"] == "authentication_error" and "no environment" in body["message"], body
    assert snapshot() == before
    assert by_key("other_0").metadata == {"a": "1"} and by_key("other_0").state == "queued"

    # The admin says what the key can do now: nothing, not "all environments".
    listing = admin.get(reverse("admin:workqueue_apikey_changelist")).content.decode()
    assert "no environments" in listing and "all environments" not in listing
