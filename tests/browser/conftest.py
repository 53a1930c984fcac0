"""The browser harness: Playwright driving Debian's Chromium against pytest-django's live server.

`make test-browser` installs what it needs (Chromium with apt-get when /usr/bin/chromium is
missing, Playwright into .venv-browser) and runs these tests with tests.browser_settings (the
test settings plus a strict Content-Security-Policy). Playwright never downloads a browser:
it launches the Debian binary (``CHROMIUM``, default /usr/bin/chromium).

Every page is opened at 1280 px for a superuser and for a view-only staff user; a console
error, an uncaught exception, a failed request or a horizontal scrollbar fails the test, and a
full-page screenshot of each page is kept in build/screenshots/ (gitignored; CI's artifacts).
"""

from __future__ import annotations

import datetime as dt
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest

# Playwright's sync API runs an event loop in this thread between calls; Django's ORM refuses to
# run where a loop runs unless told it is safe (it is: the loop is idle while a test queries).
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

from playwright.sync_api import Page, sync_playwright

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
WIDTH = 1280


@pytest.fixture(scope="session")
def browser():
    if not Path(CHROMIUM).exists():
        pytest.fail(f"{CHROMIUM} is missing: `make test-browser` installs Debian's chromium")
    with sync_playwright() as pw:
        chromium = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        yield chromium
        chromium.close()


@dataclass
class Watched:
    """A page with what went wrong on it: console errors, uncaught exceptions, failed requests."""

    page: Page
    base_url: str
    problems: list[str] = field(default_factory=list)

    def open(self, path: str):
        response = self.page.goto(self.base_url + path)
        assert response is not None, path
        self.page.wait_for_load_state("load")
        return response

    def scroll_overflow(self) -> int:
        """How many pixels the page is wider than the window (0: no horizontal scrollbar)."""
        return self.page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth")

    def cut_tables(self) -> list[str]:
        """The change-list tables wider than their box (columns cut off behind a scroll)."""
        return self.page.evaluate(
            """[...document.querySelectorAll('#changelist .results')]
                 .filter(e => e.scrollWidth > e.clientWidth)
                 .map(e => `${e.scrollWidth} px table in a ${e.clientWidth} px box`)"""
        )

    def screenshot(self, name: str) -> Path:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        target = SCREENSHOTS / f"{re.sub(r'[^a-z0-9]+', '-', name.lower()).strip('-')}.png"
        self.page.screenshot(path=str(target), full_page=True)
        return target


def _session_cookie(user, live_server) -> dict:
    from django.test import Client

    client = Client()
    client.force_login(user)
    from django.conf import settings

    return {
        "name": settings.SESSION_COOKIE_NAME,
        "value": client.cookies[settings.SESSION_COOKIE_NAME].value,
        "url": live_server.url,
    }


def _console(watched: Watched, msg) -> None:
    # A failed load is reported by _response, with its address (the console says none).
    if msg.type == "error" and not msg.text.startswith("Failed to load resource"):
        watched.problems.append(f"console: {msg.text}")


def _response(watched: Watched, response) -> None:
    # /favicon.ico is the site's (the demo has none), not the admin's.
    if response.status >= 400 and not response.url.endswith("/favicon.ico"):
        watched.problems.append(f"{response.status} {response.url}")


def _page_for(browser, live_server, user):
    context = browser.new_context(viewport={"width": WIDTH, "height": 900}, java_script_enabled=True)
    context.add_cookies([_session_cookie(user, live_server)])
    page = context.new_page()
    watched = Watched(page, live_server.url)
    page.on("console", lambda msg: _console(watched, msg))
    page.on("pageerror", lambda exc: watched.problems.append(f"uncaught: {exc}"))
    page.on("response", lambda r: _response(watched, r))
    return context, watched


@pytest.fixture
def superuser(transactional_db, django_user_model):
    return django_user_model.objects.create_superuser("boss", "boss@example.com", "pw")


@pytest.fixture
def viewer(transactional_db, django_user_model):
    """A staff user with every view permission of both apps and nothing else."""
    from django.contrib.auth.models import Permission

    user = django_user_model.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(
            content_type__app_label__in=["workqueue", "operations"], codename__startswith="view_"
        )
    )
    return user


@pytest.fixture
def as_user(browser, live_server):
    """Open pages as a user: ``as_user(user)`` gives a Watched page in a fresh browser context."""
    contexts = []

    def make(user) -> Watched:
        context, watched = _page_for(browser, live_server, user)
        contexts.append(context)
        return watched

    yield make
    for context in contexts:
        context.close()


@pytest.fixture
def rows(transactional_db):
    """A row for every admin page to show, committed so the live server's thread sees it: items
    in every situation, schedules from the admin and from settings, operations pending, running,
    failed, succeeded and cancelled, a worker holding an item, a sweep run, a paused queue."""
    from django.db.models.functions import Now

    import operations
    from operations.models import Operation
    from tests.workqueue.admin.conftest import make_item
    from workqueue import controls, schedules
    from workqueue.environments import create_api_key, create_environment
    from workqueue.models import MaintenanceRun, Outcome, Schedule, State, Worker, WorkItem

    worker = Worker.objects.create(id="w-browser-1", host="host-a", pid=4242, queues=["test.noop", "test.other"])
    found = {
        "queued": make_item("test.noop", "queued"),
        "running": make_item("test.noop", "running", State.ACTIVE, claimed_by=worker.id),
        "failed": make_item(
            "test.noop", "failed", State.STOPPED, outcome=Outcome.FAILED, last_error="Traceback: boom\n" * 3
        ),
        "scheduled": make_item("test.noop", "scheduled", run_after=Now() + dt.timedelta(hours=1)),
        "long": make_item("test.other", "k" * 200, metadata={"account": 42, "note": "x" * 300}),
        "worker": worker,
    }
    schedules.add({"name": "tenner", "queue": "test.noop", "every": 10})
    schedules.add({"name": "from-settings", "queue": "test.noop", "every": 3600})
    Schedule.objects.filter(name="from-settings").update(source=Schedule.Source.SETTINGS)
    found["schedule"] = Schedule.objects.get(name="tenner")
    found["settings_schedule"] = Schedule.objects.get(name="from-settings")
    found["op_pending"] = operations.start("test.ops.count", {}, owner="7")
    cancelled = operations.start("test.ops.count", {}, owner="7")
    operations.cancel(cancelled.id)
    found["op_cancelled"] = Operation.objects.get(pk=cancelled.id)
    env, _key = create_environment("edge", "self_hosted")
    found["environment"] = env
    create_api_key("ci")
    WorkItem.objects.enqueue("test.wire", "on-the-wire", environment=env)
    found["maintenance"] = MaintenanceRun.objects.create(
        name="reap", started_at=Now(), finished_at=Now(), counts={"deleted": 0}
    )
    controls.pause("test.noop", by="tests")
    return found
