"""Every admin action of both apps declares the permission it needs, and is refused — changing
nothing — to a staff user who may only view and to one with no permissions (issue 25, item 2).

The test walks the admin site's registry rather than a list of actions, so an action added
later is covered the day it is added. Each action is first run by a superuser over the same
rows (and rolled back), which proves the rows give it something to change: a refusal that
changes nothing is then a refusal, not an action with nothing to do.
"""

from __future__ import annotations

import pytest
from django.apps import apps
from django.contrib import admin
from django.contrib.auth.models import Permission
from django.db import transaction
from django.test import Client, RequestFactory
from django.urls import reverse

pytestmark = pytest.mark.django_db

APPS = ("workqueue", "operations")


def model_admins():
    return [
        (model, model_admin) for model, model_admin in admin.site._registry.items() if model._meta.app_label in APPS
    ]


def base_actions(model_admin, location=None) -> dict:
    """Action name -> function, before any permission filtering: the ModelAdmin's own and the
    site's (delete_selected). Django 6.1 returns Action objects per location; 5.2 tuples."""
    found = model_admin._get_base_actions() if location is None else model_admin._get_base_actions(location)
    return {getattr(a, "name", None) or a[1]: getattr(a, "func", None) or a[0] for a in found}


def every_action() -> list[tuple[type, str]]:
    """(model, action name) for every change-list action any registered ModelAdmin of both apps
    has, the site-wide ones included."""
    found = [(model, name) for model, model_admin in model_admins() for name in base_actions(model_admin)]
    return sorted(found, key=lambda pair: (pair[0]._meta.label, pair[1]))


ACTIONS = every_action()


def snapshot() -> dict[str, list]:
    """Every row of every table of both apps (through tables included) and the admin's log."""
    rows = {}
    for label in APPS:
        for model in apps.get_app_config(label).get_models(include_auto_created=True):
            if model._meta.proxy or not model._meta.managed:
                continue
            rows[model._meta.db_table] = list(model._default_manager.order_by("pk").values())
    rows["django_admin_log"] = list(apps.get_model("admin", "LogEntry").objects.order_by("pk").values())
    return rows


def _client(django_user_model, name: str, codenames=None) -> Client:
    user = django_user_model.objects.create_user(name, password="pw", is_staff=True)
    if codenames is not None:
        user.user_permissions.add(*Permission.objects.filter(content_type__app_label__in=APPS, codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer(django_user_model) -> Client:
    """Staff with every view_* permission of both apps, and nothing else."""
    codenames = Permission.objects.filter(content_type__app_label__in=APPS, codename__startswith="view_")
    return _client(django_user_model, "viewer", list(codenames.values_list("codename", flat=True)))


@pytest.fixture
def nobody(django_user_model) -> Client:
    """Staff with no permissions at all."""
    return _client(django_user_model, "nobody")


def post_action(client: Client, model, name: str):
    """POST the action over every row of the model (for delete_selected, every row a superuser
    may delete: one it may not, such as a running operation or an environment that still has
    items, turns the whole action down)."""
    url = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")
    objects = list(model._default_manager.all())
    if name == "delete_selected":
        request = RequestFactory().get("/")
        request.user = apps.get_model("auth", "User").objects.filter(is_superuser=True).first()
        model_admin = admin.site._registry[model]

        def deletable(obj) -> bool:
            _deleted, _counts, perms_needed, protected = model_admin.get_deleted_objects([obj], request)
            return not perms_needed and not protected

        objects = [o for o in objects if deletable(o)]
    pks = [str(o.pk) for o in objects]
    data = {"action": name, "_selected_action": pks, "index": 0, "post": "yes"}  # "post": past a confirm page
    return client.post(url, data)


class Rollback(Exception):
    pass


def test_the_walk_finds_every_action_of_both_apps():
    names = {(model._meta.label, name) for model, name in ACTIONS}
    for expected in [
        ("workqueue.WorkItem", "requeue_now"),
        ("workqueue.WorkItem", "force_stop"),
        ("workqueue.WorkItem", "retry_now"),
        ("workqueue.WorkItem", "run_now"),
        ("workqueue.Schedule", "pause"),
        ("workqueue.Schedule", "resume"),
        ("workqueue.Schedule", "run_now"),
        ("workqueue.ApiKey", "revoke"),
        ("operations.Operation", "cancel_operations"),
        ("workqueue.Environment", "delete_selected"),
    ]:
        assert expected in names, expected


def test_no_action_lives_only_on_the_change_form():
    """Django 6.1's change-form actions would need a walk of their own; there are none yet."""
    try:
        from django.contrib.admin.options import ActionLocation
    except ImportError:  # Django 5.2: change-list actions only
        return
    for model, model_admin in model_admins():
        on_form = set(base_actions(model_admin, ActionLocation.CHANGE_FORM))
        assert on_form <= set(base_actions(model_admin)), (model._meta.label, on_form)


@pytest.mark.parametrize(("model", "name"), ACTIONS, ids=[f"{m._meta.label}.{n}" for m, n in ACTIONS])
def test_every_action_declares_its_permission(model, name):
    model_admin = admin.site._registry[model]
    func = base_actions(model_admin)[name]
    declared = getattr(func, "allowed_permissions", None)
    assert declared, f"{model._meta.label} action {name!r} declares no permission: @admin.action(permissions=[...])"
    for permission in declared:
        assert callable(getattr(model_admin, f"has_{permission}_permission", None)), (name, permission)


@pytest.mark.parametrize(("model", "name"), ACTIONS, ids=[f"{m._meta.label}.{n}" for m, n in ACTIONS])
def test_every_action_is_refused_to_viewers_and_to_staff_without_permissions_and_changes_nothing(
    every_kind_of_row, admin_client, viewer, nobody, model, name
):
    superuser = admin_client
    request = RequestFactory().get("/")
    request.user = apps.get_model("auth", "User").objects.get(is_superuser=True)
    offered_to_superuser = name in admin.site._registry[model].get_actions(request)
    if offered_to_superuser:
        # The rows give this action something to change (undone: the refusals below start
        # from the same rows).
        before = snapshot()
        try:
            with transaction.atomic():
                post_action(superuser, model, name)
                changed = snapshot() != before
                raise Rollback
        except Rollback:
            pass
        assert changed, f"{model._meta.label}.{name} changed nothing even for a superuser: the rows do not exercise it"

    before = snapshot()
    for who, client in (("only view permissions", viewer), ("no permissions", nobody)):
        response = post_action(client, model, name)
        assert response.status_code in (200, 302, 403), (who, response.status_code)
        assert snapshot() == before, f"{model._meta.label}.{name} changed rows for a staff user with {who}"
    # ... and the viewer's page does not offer it.
    page = viewer.get(reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist"))
    if page.status_code == 200 and page.context is not None and page.context.get("action_form") is not None:
        offered = [value for value, _label in page.context["action_form"].fields["action"].choices]
        assert name not in offered, f"{model._meta.label}.{name} is offered to a user who may only view"
