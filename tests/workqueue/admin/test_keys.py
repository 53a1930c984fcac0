"""Environment and API key admin: a key is shown once, only its hash is stored, rotation and revocation."""

from __future__ import annotations

import re

import pytest
from django.contrib.admin.utils import quote
from django.urls import reverse

from workqueue.environments import create_api_key, create_environment
from workqueue.models import ApiKey, Environment
from workqueue.wire import keys

pytestmark = pytest.mark.django_db

ENV_KEY = re.compile(r"wqenv_[A-Za-z0-9_-]{20,}")
API_KEY = re.compile(r"wqkey_[A-Za-z0-9_-]{20,}")


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def stored_values(obj) -> list[str]:
    return [str(getattr(obj, f.attname)) for f in type(obj)._meta.concrete_fields]


def test_adding_an_environment_shows_its_key_once_and_stores_only_the_hash(admin_client):
    response = admin_client.post(reverse("admin:workqueue_environment_add"), {"name": "edge", "kind": "self_hosted"})
    assert response.status_code == 200
    shown = ENV_KEY.findall(response.content.decode())
    assert len(shown) == 1
    key = shown[0]
    env = Environment.objects.get(name="edge")
    assert env.kind == "self_hosted" and env.id.startswith("env_")
    assert env.key_hash == keys.digest(key) and env.key_hint == keys.hint(key)
    assert key not in stored_values(env)
    # Shown once: neither the next page nor the environment's own page has it.
    assert key not in admin_client.get(reverse("admin:workqueue_environment_changelist")).content.decode()
    page = admin_client.get(reverse("admin:workqueue_environment_change", args=[env.pk])).content.decode()
    assert key not in page and env.key_hint in page and env.key_hash not in page


def test_a_bad_environment_is_refused_and_nothing_is_written(admin_client):
    create_environment("taken", "cloud")
    for data in ({"name": "taken", "kind": "cloud"}, {"name": "new", "kind": "moon"}, {"name": "", "kind": "cloud"}):
        response = admin_client.post(reverse("admin:workqueue_environment_add"), data)
        assert response.status_code == 200 and response.context["adminform"].form.errors, data
    assert list(Environment.objects.values_list("name", flat=True)) == ["taken"]


def test_rotating_a_key_asks_first_then_shows_the_new_key_once(admin_client):
    env, old_key = create_environment("edge", "self_hosted")
    url = reverse("admin:workqueue_environment_rotate_key", args=[quote(env.pk)])
    change_url = reverse("admin:workqueue_environment_change", args=[quote(env.pk)])
    assert url in admin_client.get(change_url).content.decode()

    confirm = admin_client.get(url)
    assert confirm.status_code == 200 and "stops working at once" in confirm.content.decode()
    env.refresh_from_db()
    assert keys.matches(old_key, env.key_hash)  # asking changed nothing

    response = admin_client.post(url)
    assert response.status_code == 200 and change_url in response.content.decode()
    (new_key,) = ENV_KEY.findall(response.content.decode())
    env.refresh_from_db()
    assert keys.matches(new_key, env.key_hash) and not keys.matches(old_key, env.key_hash)
    assert env.key_rotated_at is not None
    assert new_key not in stored_values(env)
    assert new_key not in admin_client.get(change_url).content.decode()


def test_rotating_takes_the_change_permission(viewer_client):
    env, old_key = create_environment("edge", "self_hosted")
    url = reverse("admin:workqueue_environment_rotate_key", args=[env.pk])
    assert viewer_client.post(url).status_code == 403
    env.refresh_from_db()
    assert keys.matches(old_key, env.key_hash)


def test_renaming_an_environment_keeps_its_key_and_kind(admin_client):
    env, key = create_environment("edge", "self_hosted")
    response = admin_client.post(
        reverse("admin:workqueue_environment_change", args=[env.pk]), {"name": "edge-2", "kind": "cloud"}
    )
    assert response.status_code == 302
    env.refresh_from_db()
    assert (env.name, env.kind) == ("edge-2", "self_hosted")
    assert keys.matches(key, env.key_hash)


def test_adding_an_api_key_shows_it_once_and_stores_only_the_hash(admin_client):
    response = admin_client.post(reverse("admin:workqueue_apikey_add"), {"name": "ci", "site_wide": "on"})
    (key,) = API_KEY.findall(response.content.decode())
    api_key = ApiKey.objects.get(name="ci")
    assert api_key.key_hash == keys.digest(key) and not api_key.revoked and api_key.site_wide
    assert key not in stored_values(api_key)
    page = admin_client.get(reverse("admin:workqueue_apikey_change", args=[api_key.pk])).content.decode()
    assert key not in page and api_key.key_hint in page


def test_revoking_api_keys_says_how_many(admin_client):
    a, _ = create_api_key("a")
    b, _ = create_api_key("b")
    keep, _ = create_api_key("keep")
    ApiKey.objects.filter(pk=b.pk).update(revoked=True)
    response = admin_client.post(
        reverse("admin:workqueue_apikey_changelist"),
        {"action": "revoke", "_selected_action": [a.pk, b.pk], "index": 0},
        follow=True,
    )
    assert messages_of(response) == ["Revoked 1 API key."]
    assert set(ApiKey.objects.filter(revoked=True).values_list("name", flat=True)) == {"a", "b"}
    keep.refresh_from_db()
    assert not keep.revoked


def _cookies_and_sessions(client) -> str:
    """Everything the browser or the session store keeps, decoded where it is signed."""
    from django.contrib.messages.storage.cookie import CookieStorage
    from django.contrib.sessions.models import Session
    from django.http import HttpRequest

    found = []
    for name, morsel in client.cookies.items():
        found.append(morsel.value)
        if name == "messages":
            found.extend(str(m) for m in CookieStorage(HttpRequest())._decode(morsel.value) or [])
    found.extend(str(s.get_decoded()) for s in Session.objects.all())
    return " ".join(found)


@pytest.mark.parametrize(
    "url, data, pattern",
    [
        ("admin:workqueue_environment_add", {"name": "edge", "kind": "self_hosted"}, ENV_KEY),
        ("admin:workqueue_apikey_add", {"name": "ci", "site_wide": "on"}, API_KEY),
    ],
)
def test_a_new_key_is_shown_on_the_response_page_and_kept_in_no_cookie(admin_client, url, data, pattern):
    response = admin_client.post(reverse(url), data)
    assert response.status_code == 200
    (key,) = pattern.findall(response.content.decode())
    assert "no-store" in response["Cache-Control"]
    assert key not in _cookies_and_sessions(admin_client)
    # Nothing queued to show it again on the next page either.
    assert key not in admin_client.get(reverse("admin:index")).content.decode()


def test_a_rotated_key_is_shown_on_the_response_page_and_kept_in_no_cookie(admin_client):
    env, _old = create_environment("edge", "self_hosted")
    response = admin_client.post(reverse("admin:workqueue_environment_rotate_key", args=[quote(env.pk)]))
    assert response.status_code == 200
    (key,) = ENV_KEY.findall(response.content.decode())
    env.refresh_from_db()
    assert keys.matches(key, env.key_hash)
    assert "no-store" in response["Cache-Control"]
    assert key not in _cookies_and_sessions(admin_client)


def test_an_api_keys_environments_are_chosen_shown_and_edited_in_the_admin(admin_client):
    edge, _ = create_environment("edge", "self_hosted")
    core, _ = create_environment("core", "self_hosted")
    response = admin_client.post(reverse("admin:workqueue_apikey_add"), {"name": "ci", "environments": [edge.pk]})
    assert response.status_code == 200, response.content
    api_key = ApiKey.objects.get(name="ci")
    assert list(api_key.environments.values_list("pk", flat=True)) == [edge.pk]
    listing = admin_client.get(reverse("admin:workqueue_apikey_changelist")).content.decode()
    assert "edge" in listing
    change_url = reverse("admin:workqueue_apikey_change", args=[api_key.pk])
    response = admin_client.post(change_url, {"name": "ci", "environments": [edge.pk, core.pk]})
    assert response.status_code == 302, response.content
    assert set(api_key.environments.values_list("pk", flat=True)) == {edge.pk, core.pk}
    admin_client.post(change_url, {"name": "ci", "environments": []})
    assert not api_key.environments.exists()
    # Narrowed to nothing it acts on nothing: a scoped key never turns site-wide (issue 25, item 1).
    listing = admin_client.get(reverse("admin:workqueue_apikey_changelist")).content.decode()
    assert "no environments" in listing and "all environments" not in listing
    api_key.refresh_from_db()
    assert not api_key.site_wide


def test_a_new_api_keys_scope_is_chosen_explicitly_in_the_admin(admin_client):
    """Site-wide is a choice made when the key is created: neither environments nor the box
    ticked, or both, is refused and writes nothing; a site-wide key's page offers no
    environments to pick (a scope is narrowed by making a new key)."""
    edge, _ = create_environment("edge", "self_hosted")
    add = reverse("admin:workqueue_apikey_add")
    for data in ({"name": "ci"}, {"name": "ci", "site_wide": "on", "environments": [edge.pk]}):
        response = admin_client.post(add, data)
        assert response.status_code == 200 and response.context["adminform"].form.errors, data
        assert not API_KEY.findall(response.content.decode())
    assert not ApiKey.objects.exists()
    admin_client.post(add, {"name": "everywhere", "site_wide": "on"})
    everywhere = ApiKey.objects.get(name="everywhere")
    assert everywhere.site_wide and not everywhere.environments.exists()
    page = admin_client.get(reverse("admin:workqueue_apikey_change", args=[everywhere.pk])).content.decode()
    assert "all environments" in page and 'name="environments"' not in page


def test_the_apikeys_command_limits_a_key_to_environments():
    import json
    from io import StringIO

    from django.core.management import call_command

    edge, _ = create_environment("edge", "self_hosted")
    out = StringIO()
    call_command("apikeys", "create", "scoped", "--environment", "edge", "--json", stdout=out)
    key = json.loads(out.getvalue())["key"]
    api_key = ApiKey.objects.get(name="scoped")
    assert keys.matches(key, api_key.key_hash)
    assert list(api_key.environments.all()) == [edge]
    call_command("apikeys", "create", "everywhere", stdout=StringIO())
    listing = StringIO()
    call_command("apikeys", "list", stdout=listing)
    assert "scoped" in listing.getvalue() and "all environments" in listing.getvalue()
    assert ApiKey.objects.get(name="everywhere").site_wide and not api_key.site_wide
    edge.delete()  # its key's scope goes with it: it acts on nothing, it never widens
    listing = StringIO()
    call_command("apikeys", "list", stdout=listing)
    (line,) = [line for line in listing.getvalue().splitlines() if line.startswith("scoped")]
    assert line.endswith("no environments")
