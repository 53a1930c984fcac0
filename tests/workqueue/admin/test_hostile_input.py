"""Hostile text in the admin of both apps: never a 500, and no lookup beyond the admin's own
filters (issue 25, items 6 and 7).

Every registered ModelAdmin of ``workqueue`` and ``operations`` is walked (so an admin added
later is covered): each query parameter its change list knows, with text PostgreSQL cannot
take (NUL) and other hostile text, and each of its URLs that takes an object id. The test
client re-raises a view's exception, so a 500 fails the test with its traceback.
"""

from __future__ import annotations

import re
from html import unescape
from urllib.parse import urlsplit

import pytest
from django.contrib import admin
from django.contrib.admin import SimpleListFilter
from django.urls import NoReverseMatch, reverse

pytestmark = pytest.mark.django_db

APPS = ("workqueue", "operations")
NUL = "\x00"
HOSTILE = [NUL, f"edge{NUL}", "%", "'; SELECT 1; --", "x" * 5000, "\u202egnp.exe😀", "-99999999999999999999999", "nan"]
ALLOWED = {200, 302, 400, 404}


def registered():
    return sorted(
        ((model, model_admin) for model, model_admin in admin.site._registry.items() if model._meta.app_label in APPS),
        key=lambda pair: pair[0]._meta.label,
    )


def changelist(model) -> str:
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_changelist")


def filter_parameters(model_admin) -> list[str]:
    """The query parameters the change list's own filters read (as its links write them)."""
    names = []
    for item in model_admin.list_filter:
        if isinstance(item, type) and issubclass(item, SimpleListFilter):
            names.append(item.parameter_name)
        else:
            path = item[0] if isinstance(item, list | tuple) else item
            names += [path, f"{path}__exact", f"{path}__isnull"]
    return names


def id_urls(model_admin) -> list[str]:
    """Every URL name of this ModelAdmin that takes an object id."""
    return sorted(p.name for p in model_admin.get_urls() if p.name and "object_id" in p.pattern.converters)


# -- item 6: NUL and other hostile text ---------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        ("/admin/workqueue/workitem/?queue=%00", 400),
        ("/admin/operations/operation/?kind=%00", 400),
        ("/admin/operations/operation/?owner=%00", 400),
        ("/admin/workqueue/workitem/?environment__id__exact=%00", 400),
        ("/admin/workqueue/workitem/?q=%00", 400),
        ("/admin/workqueue/environment/%00/rotate-key/", 404),
        ("/admin/operations/operation/%00/change/", 404),
        ("/admin/workqueue/environment/%00/change/", 404),
    ],
)
def test_a_nul_byte_in_a_filter_or_an_id_is_a_400_or_a_404(admin_client, every_kind_of_row, url, expected):
    assert admin_client.get(url).status_code == expected


def test_a_nul_byte_in_a_posted_selection_is_a_400_and_changes_nothing(admin_client, every_kind_of_row):
    from workqueue.models import Environment

    before = list(Environment.objects.values())
    response = admin_client.post(
        changelist(Environment), {"action": "delete_selected", "_selected_action": ["env_x\x00"], "post": "yes"}
    )
    assert response.status_code == 400
    assert list(Environment.objects.values()) == before


@pytest.mark.parametrize(("model", "model_admin"), registered(), ids=[m._meta.label for m, _a in registered()])
def test_hostile_text_in_any_query_parameter_of_any_admin_page_is_never_a_500(
    admin_client, every_kind_of_row, model, model_admin
):
    # Each page with the parameters it reads: the change list its filters' and Django's own,
    # the dashboard its refresh, a change page (an operation's: its children's cursor) its own.
    pages = {changelist(model): [*filter_parameters(model_admin), "q", "o", "p", "all", "e", "_popup", "_to_field"]}
    if model._meta.label == "workqueue.WorkItem":
        pages[reverse("admin:workqueue_dashboard")] = ["refresh"]
    obj = model._default_manager.first()
    if obj is not None and f"{model._meta.app_label}_{model._meta.model_name}_change" in id_urls(model_admin):
        change = reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_change", args=[obj.pk])
        pages[change] = ["after", "_changelist_filters", "_popup"]
    for page, parameters in pages.items():
        for name in parameters:
            for value in HOSTILE:
                status = admin_client.get(page, {name: value}).status_code
                assert status in ALLOWED, (page, name, value, status)
                if NUL in value:
                    assert status == 400, (page, name, value, status)
        assert admin_client.get(page, {f"x{NUL}": "1"}).status_code == 400, page


@pytest.mark.parametrize(("model", "model_admin"), registered(), ids=[m._meta.label for m, _a in registered()])
def test_hostile_text_in_any_admin_path_is_never_a_500(admin_client, every_kind_of_row, model, model_admin):
    for name in id_urls(model_admin):
        for value in [*HOSTILE, "../../", "a/b", "op_" + "z" * 300]:
            try:
                url = reverse(f"admin:{name}", args=[value])
            except NoReverseMatch:
                continue
            for method in ("get", "post"):
                response = getattr(admin_client, method)(url)
                if response.streaming:  # a watch stream on an id that passes its checks: let it go
                    for closer in response._resource_closers:  # (response.close() would also end the test's connection)
                        closer()
                assert response.status_code in ALLOWED | {403, 405}, (url, method, response.status_code)
                if NUL in value:
                    assert response.status_code in (400, 404), (url, method, response.status_code)
    from operations import watcher

    if watcher._shared is not None:  # the watch URLs started the process's watcher: stop it now
        watcher._shared.close()


# -- item 7: only the admin's own filters -------------------------------------------------


@pytest.mark.parametrize(
    ("model_label", "lookup", "value"),
    [
        ("workqueue.ApiKey", "key_hash__startswith", "a"),
        ("workqueue.Environment", "key_hash__startswith", "a"),
        ("operations.Operation", "request__icontains", "secret"),
        ("workqueue.WorkItem", "key__icontains", "on-the"),
        ("workqueue.WorkItem", "metadata__icontains", "x"),
        ("workqueue.WorkItem", "last_error__icontains", "boom"),
        ("workqueue.WorkItem", "lease_token__isnull", "False"),
        ("workqueue.WorkItem", "environment__key_hash__startswith", "a"),
        ("workqueue.Schedule", "request__icontains", "x"),
        ("workqueue.Worker", "pid__gt", "0"),
    ],
)
def test_a_url_lookup_the_admins_filters_do_not_use_is_refused(
    admin_client, every_kind_of_row, model_label, lookup, value
):
    from django.apps import apps

    model = apps.get_model(model_label)
    response = admin_client.get(changelist(model), {lookup: value})
    assert response.status_code == 400, (model_label, lookup, response.status_code)


def test_every_filter_link_on_the_lists_and_the_dashboard_still_answers(admin_client, every_kind_of_row):
    pages = [changelist(model) for model, _ in registered()] + [reverse("admin:workqueue_dashboard")]
    seen = set()
    for page in pages:
        html = admin_client.get(page, follow=True).content.decode()
        for href in re.findall(r'href="([^"]*\?[^"]*)"', html):
            href = unescape(href)
            target = urlsplit(href)
            path = target.path or urlsplit(page).path
            if not path.startswith("/admin/") or (path, target.query) in seen:
                continue
            seen.add((path, target.query))
            response = admin_client.get(f"{path}?{target.query}")
            assert response.status_code in (200, 302), (page, href, response.status_code)
            assert "e=1" not in response.get("Location", ""), (page, href)
    assert any("environment__id__exact=" in q for _p, q in seen)  # the dashboard's environment links
    assert any("state__exact=" in q for _p, q in seen)
