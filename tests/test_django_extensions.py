"""django-extensions in the demo (a dev dependency): show_urls lists the routes the apps add, and
shell_plus starts with the apps' public API imported (SHELL_PLUS_IMPORTS in project/settings.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command

from tests.conftest import ROOT

pytestmark = pytest.mark.skipif(
    "django_extensions" not in settings.INSTALLED_APPS, reason="django-extensions is not installed"
)


def test_show_urls_lists_the_routes_the_apps_add():
    out = StringIO()
    call_command("show_urls", format="table", stdout=out)
    table = out.getvalue()
    routes = {line.split("|")[0].strip() for line in table.splitlines() if "|" in line}
    for route in (
        "/api/operations",
        "/api/operations/<str:op_id>",
        "/api/operations/<str:op_id>/watch",
        "/metrics",
        "/admin/workqueue/workitem/dashboard/",
        "/admin/operations/operation/",
        "/",
    ):
        assert route in routes, (route, sorted(routes))
    assert any(route.startswith("/v1/environments/") for route in routes), sorted(routes)
    assert "operations:list" in table and "admin:workqueue_dashboard" in table


def test_shell_plus_has_the_apps_public_api_imported():
    code = (
        "print(operations.start.__module__, testing.drain.__module__, handlers.register.__module__, "
        "controls.pause.__module__, WorkItem._meta.db_table, Operation._meta.label, Retry.__name__)"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.settings"}
    done = subprocess.run(
        [sys.executable, "manage.py", "shell_plus", "--quiet-load", "--command", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == [
        "operations.service",
        "workqueue.testing",
        "workqueue.handlers",
        "workqueue.controls",
        "work_items",
        "operations.Operation",
        "Retry",
    ], done.stdout
