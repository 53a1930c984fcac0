"""The demo site's own pages, from the top-level templates/ beside project/ (never in the wheel).

The landing page at ``/`` links every surface of the demo, and each link answers; a missing
page gets the demo's 404.html (DEBUG off, as in production); the admin carries the demo's
title (templates/admin/base_site.html); 500.html renders without a request or context.
"""

from __future__ import annotations

import re

import pytest
from django.conf import settings
from django.template.loader import get_template, render_to_string
from django.test import Client, override_settings
from django.urls import reverse

pytestmark = pytest.mark.django_db

DEMO_TEMPLATES = settings.BASE_DIR / "templates"


def test_the_landing_page_links_the_admin_dashboard_api_metrics_and_docs(admin_client):
    page = admin_client.get("/")
    assert page.status_code == 200
    assert get_template("index.html").origin.name == str(DEMO_TEMPLATES / "index.html")
    links = re.findall(r'href="([^"]+)"', page.content.decode())
    dashboard = reverse("admin:workqueue_dashboard")
    for wanted in ("/admin/", dashboard, "/api/operations", "/metrics", "/docs/README.md"):
        assert wanted in links, (wanted, links)
    assert "/docs/promises.md" in links
    for link in links:
        answer = admin_client.get(link)
        assert answer.status_code == 200, (link, answer.status_code)
    answer = admin_client.get("/docs/README.md")
    assert answer.content.decode().startswith("# ") and answer["Content-Type"].startswith("text/markdown")


@override_settings(DEBUG=False)
def test_a_missing_page_gets_the_demos_404():
    for path in ("/no/such/page", "/docs/settings.py"):  # nor anything but the docs
        page = Client().get(path)
        assert page.status_code == 404
        html = page.content.decode()
        assert "Nothing lives at" in html and path in html and 'href="/"' in html


def test_the_admin_has_the_demos_title_and_500_renders_bare():
    login = Client().get("/admin/login/")
    assert login.status_code == 200
    html = login.content.decode()
    assert "Workqueue demo" in html and "Django administration" not in html
    assert get_template("500.html").origin.name == str(DEMO_TEMPLATES / "500.html")
    assert "Server error" in render_to_string("500.html")
