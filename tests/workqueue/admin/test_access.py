"""Every admin page renders for a superuser and refuses anonymous users and users without permission."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import Permission
from django.urls import reverse

from tests.workqueue.admin.conftest import make_item
from workqueue.admin import SituationFilter
from workqueue.environments import create_environment
from workqueue.models import State, WorkItem

pytestmark = pytest.mark.django_db

CHANGELIST = reverse("admin:workqueue_workitem_changelist")
DASHBOARD = reverse("admin:workqueue_dashboard")

PAGES = [
    DASHBOARD,
    CHANGELIST,
    CHANGELIST + "?stuck=yes",
    CHANGELIST + "?stuck=lapsed",
    CHANGELIST + "?queue=test.noop",
    CHANGELIST + "?q=state-queued",
    *(CHANGELIST + f"?state__exact={state}" for state in State.values),
    *(CHANGELIST + f"?situation={name}" for name in SituationFilter.SCOPES),
    reverse("admin:app_list", args=["workqueue"]),
    reverse("admin:workqueue_environment_changelist"),
    reverse("admin:workqueue_environment_add"),
    reverse("admin:workqueue_apikey_changelist"),
    reverse("admin:workqueue_apikey_add"),
    reverse("admin:workqueue_worker_changelist"),
    reverse("admin:workqueue_maintenancerun_changelist"),
]


@pytest.mark.parametrize("url", PAGES)
def test_pages_render_for_a_superuser(admin_client, one_of_each_state, url):
    response = admin_client.get(url)
    assert response.status_code == 200, url


def test_change_pages_render_for_a_superuser(admin_client, one_of_each_state):
    env, _key = create_environment("edge", "self_hosted")
    for item in one_of_each_state.values():
        response = admin_client.get(reverse("admin:workqueue_workitem_change", args=[item.pk]))
        assert response.status_code == 200
        assert item.public_id in response.content.decode()
    assert admin_client.get(reverse("admin:workqueue_environment_change", args=[env.pk])).status_code == 200
    assert admin_client.get(reverse("admin:workqueue_environment_rotate_key", args=[env.pk])).status_code == 200


def test_the_app_index_and_the_change_list_link_to_the_dashboard(admin_client):
    for url in (reverse("admin:app_list", args=["workqueue"]), CHANGELIST):
        assert f'href="{DASHBOARD}"' in admin_client.get(url).content.decode(), url


@pytest.mark.parametrize("url", [DASHBOARD, CHANGELIST, CHANGELIST + "?stuck=yes"])
def test_anonymous_users_are_sent_to_the_login_page(client, url):
    response = client.get(url)
    assert response.status_code == 302
    assert response.url.startswith(reverse("admin:login"))


@pytest.mark.parametrize("url", [DASHBOARD, CHANGELIST])
def test_staff_without_permission_is_refused(staff_client, url):
    assert staff_client.get(url).status_code == 403


def test_staff_without_permission_does_not_see_the_dashboard_link(staff_client):
    # The app index itself is a 404 for a user who may see none of its models.
    response = staff_client.get(reverse("admin:index"))
    assert DASHBOARD not in response.content.decode()


def dashboard_entries(page: str) -> list[str]:
    """The targets of the links named "Queue dashboard" on a page."""
    return re.findall(r'<a href="([^"]+)"[^>]*>Queue dashboard</a>', page)


@pytest.mark.parametrize("who", ["viewer_client", "admin_client"])
def test_the_admin_index_links_to_the_dashboard_for_who_may_view_work_items(request, who):
    client = request.getfixturevalue(who)
    (entry,) = dashboard_entries(client.get(reverse("admin:index")).content.decode())
    response = client.get(entry, follow=True)
    assert response.status_code == 200
    assert response.request["PATH_INFO"] == DASHBOARD


def test_the_admin_index_has_no_dashboard_entry_for_staff_without_permission(staff_client, django_user_model):
    assert dashboard_entries(staff_client.get(reverse("admin:index")).content.decode()) == []
    # Another app's permission shows the index's app list, still without the entry.
    user = django_user_model.objects.get(username="staff")
    user.user_permissions.add(Permission.objects.get(codename="view_environment"))
    page = staff_client.get(reverse("admin:index")).content.decode()
    assert reverse("admin:workqueue_environment_changelist") in page
    assert dashboard_entries(page) == []


def test_the_dashboard_entry_is_not_listed_twice_on_the_work_queue_app_page(admin_client):
    page = admin_client.get(reverse("admin:app_list", args=["workqueue"])).content.decode()
    assert len(dashboard_entries(page)) == 1


def test_a_viewer_sees_the_dashboard_and_items_but_cannot_move_them(viewer_client):
    item = make_item("test.noop", "viewed")
    assert viewer_client.get(DASHBOARD).status_code == 200
    listing = viewer_client.get(CHANGELIST)
    assert listing.status_code == 200
    assert "requeue_now" not in listing.content.decode()
    change = viewer_client.get(reverse("admin:workqueue_workitem_change", args=[item.pk]))
    assert change.status_code == 200
    assert "Requeue now" not in change.content.decode()
    # Posting the action anyway changes nothing: it is not among the viewer's actions.
    viewer_client.post(CHANGELIST, {"action": "force_stop", "_selected_action": [item.pk], "index": 0})
    assert WorkItem.objects.get(pk=item.pk).state == State.QUEUED


def test_work_items_are_read_only_even_for_a_superuser(admin_client):
    item = make_item("test.noop", "read-only")
    change_url = reverse("admin:workqueue_workitem_change", args=[item.pk])
    page = admin_client.get(change_url).content.decode()
    assert 'name="queue"' not in page and 'name="_save"' not in page
    assert admin_client.post(change_url, {"queue": "elsewhere", "_save": "Save"}).status_code == 403
    assert admin_client.get(reverse("admin:workqueue_workitem_add")).status_code == 403
    assert (
        admin_client.post(reverse("admin:workqueue_workitem_delete", args=[item.pk]), {"post": "yes"}).status_code
        == 403
    )
    assert WorkItem.objects.get(pk=item.pk).queue == "test.noop"
