"""Bad numbers and bad text: a clear error that says what is accepted, never a traceback, and
nothing written (issue 25, item 4).

Every numeric input of the forms, the commands and the Python API goes through one parser per
kind (``workqueue.values``: count, seconds, rate), which takes ASCII decimal forms within
documented bounds only: ``str.isdigit`` and ``int()``/``float()`` take ``²``, ``٣``, ``1e20``,
``nan`` and ``inf``, and the code behind them did not.
"""

from __future__ import annotations

import datetime as dt
import math

import pytest
from django.db import connection
from django.urls import reverse

import operations
from tests.workqueue.test_commands import run_all
from workqueue import controls, schedules, values
from workqueue.exceptions import InvalidInput
from workqueue.models import QueueControl, Schedule, WorkItem

NOT_ASCII = ["²", "٣", "５"]  # a superscript, an Arabic-Indic and a fullwidth digit


def everything() -> list:
    """The rows a refusal must leave as they were."""
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM work_items ORDER BY id")
        items = cur.fetchall()
    return [items, list(QueueControl.objects.values_list()), list(Schedule.objects.values_list())]


# -- the parsers ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [("5", 5), (" 12 ", 12), ("+3", 3), ("2147483647", 2**31 - 1)],
)
def test_a_count_takes_ascii_digits_within_its_bounds(text, expected):
    assert values.count(text, what="--n") == expected
    assert values.count(expected, what="--n") == expected


@pytest.mark.parametrize(
    "bad", ["--5", "-1", "0", "5.0", "1e3", "5 5", "", "0x10", "1_000", "2147483648", True, 2.0, None, *NOT_ASCII]
)
def test_a_count_refuses_anything_else_and_says_what_it_takes(bad):
    with pytest.raises(InvalidInput) as caught:
        values.count(bad, what="--n")
    assert str(caught.value).startswith("--n must be an integer") and repr(bad) in str(caught.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("10", 10.0), ("2.5", 2.5), ("10s", 10.0), ("5m", 300.0), ("2 h", 7200.0), ("1d", 86400.0), ("0", 0.0)],
)
def test_seconds_take_ascii_decimals_with_an_optional_unit(text, expected):
    assert values.seconds(text, what="--delay", allow_zero=True) == expected


@pytest.mark.parametrize(
    "bad",
    ["nan", "inf", "-inf", "1e308", "1e3", "-1", "5 minutes", "", "٣", "²s", math.nan, math.inf, 1e308, -1, True],
)
def test_seconds_refuse_anything_else_and_say_what_they_take(bad):
    with pytest.raises(InvalidInput) as caught:
        values.seconds(bad, what="--delay", allow_zero=True)
    assert str(caught.value).startswith("--delay must be"), caught.value


def test_seconds_have_an_upper_bound_that_the_message_names():
    assert values.seconds(values.MAX_SECONDS, what="x") == values.MAX_SECONDS
    with pytest.raises(InvalidInput, match="at most 315,576,000 seconds"):
        values.seconds(values.MAX_SECONDS + 1, what="x")
    with pytest.raises(InvalidInput, match="at most"):
        values.seconds(dt.timedelta(days=100_000), what="x")


@pytest.mark.parametrize("bad", ["٣/s", "²/m", "5/fortnight", "0/s", "2147483648/s", "1e3/s", "5.5/s", "-5/s"])
def test_a_rate_takes_ascii_digits_per_second_minute_or_hour(bad):
    assert values.rate(" 50 / s ", what="--rate") == (50, 1.0)
    with pytest.raises(InvalidInput, match="--rate must be a count per period"):
        values.rate(bad, what="--rate")


# -- forms ----------------------------------------------------------------------------------


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["--5", "²", "٣", "5.0", "1e3", "99999999999", "-3"])
def test_the_flow_control_form_refuses_a_bad_number_and_changes_nothing(admin_client, bad):
    controls.write("test.flow", limits={"max_running": 4}, by="setup")
    before = everything()
    response = admin_client.post(
        reverse("admin:workqueue_dashboard_controls"),
        {"queue": "test.flow", "action": "save", "max_running": bad},
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    assert any("--max-running must be an integer >= 1" in m and "Nothing was changed" in m for m in shown), shown
    assert everything() == before


@pytest.mark.django_db
@pytest.mark.parametrize("bad", ["٣/s", "²/m"])
def test_the_flow_control_form_refuses_a_rate_in_other_digits(admin_client, bad):
    before = everything()
    response = admin_client.post(
        reverse("admin:workqueue_dashboard_controls"),
        {"queue": "test.flow", "action": "save", "rate": bad},
        follow=True,
    )
    assert any("--rate must be a count per period" in str(m) for m in response.context["messages"])
    assert everything() == before


SCHEDULE_FORM = {
    "name": "bad",
    "cron": "",
    "every": "60",
    "timezone": "UTC",
    "misfire": "latest",
    "queue": "test.noop",
    "key_prefix": "",
    "metadata": "{}",
    "priority": "0",
    "kind": "",
    "request": "null",
    "task": "",
    "args": "[]",
    "enabled": "on",
}


@pytest.mark.django_db
@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"every": "1e20"}, "every"),
        ({"every": "300000000000"}, "every"),
        ({"every": "3e9"}, "every"),
        ({"every": "31622401"}, "every"),  # a second past 366 days
        ({"every": "٣"}, "every"),
        ({"every": "nan"}, "every"),
        ({"priority": "٣"}, "priority"),
        ({"priority": "2147483648"}, "priority"),
    ],
)
def test_the_schedule_form_refuses_a_bad_interval_or_priority_and_writes_nothing(admin_client, change, field):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), {**SCHEDULE_FORM, **change})
    assert response.status_code == 200
    errors = response.context["adminform"].form.errors
    assert field in errors, errors
    assert not Schedule.objects.exists()


@pytest.mark.django_db
def test_the_schedule_form_takes_an_interval_with_a_unit(admin_client):
    response = admin_client.post(reverse("admin:workqueue_schedule_add"), {**SCHEDULE_FORM, "every": "5m"})
    assert response.status_code == 302, response.context["adminform"].form.errors
    assert Schedule.objects.get(name="bad").every == 300.0


# -- the Python API -------------------------------------------------------------------------


@pytest.mark.django_db
def test_the_python_api_refuses_bad_numbers_and_unstorable_text_and_writes_nothing():
    before = everything()
    for call in (
        lambda: WorkItem.objects.enqueue("test.noop", "k", delay=math.nan),
        lambda: WorkItem.objects.enqueue("test.noop", "k", delay=math.inf),
        lambda: WorkItem.objects.enqueue("test.noop", "k", delay=1e308),
        lambda: WorkItem.objects.enqueue("test.noop", "k", delay=dt.timedelta(days=10**6)),
        lambda: WorkItem.objects.enqueue("test.noop", "k\udcff"),
        lambda: WorkItem.objects.enqueue("test.noop", "k", group="g\udcff"),
        lambda: WorkItem.objects.enqueue_many([{"queue": "test.noop", "key": "k", "delay": math.nan}]),
        lambda: controls.write("test.flow", limits={"max_running": "٣"}),
        lambda: controls.write("test.flow", limits={"max_running": "--5"}),
        lambda: schedules.add({"name": "s", "queue": "test.noop", "every": 1e20}),
        lambda: schedules.add({"name": "s", "queue": "test.noop", "every": 3e9}),
        lambda: schedules.add({"name": "s", "queue": "test.noop", "every": "٣"}),
        lambda: schedules.add({"name": "s", "queue": "test.noop", "every": math.nan}),
        lambda: schedules.add({"name": "s", "queue": "test.noop", "every": 60, "key_prefix": "p\udcff"}),
    ):
        with pytest.raises(InvalidInput):
            call()
    for delay in (math.nan, math.inf, 1e308):
        with pytest.raises(operations.InvalidRequest):
            operations.start("test.ops.count", {}, delay=delay)
    assert everything() == before
    assert not operations.list_operations()[0]


# -- commands -------------------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_commands_refuse_bad_numbers_and_bad_text_in_one_line_exit_2_and_write_nothing(spawn_command):
    controls.write("test.flow", limits={"max_running": 4}, by="setup")
    before = everything()
    commands = [
        ["queues", "set", "test.flow", "--max-running=--5"],
        ["queues", "set", "test.flow", "--max-running", "²"],
        ["queues", "set", "test.flow", "--max-running", "٣"],
        ["queues", "set", "test.flow", "--rate", "٣/s"],
        ["schedules", "add", "s", "--every", "1e20", "--queue", "test.noop"],
        ["schedules", "add", "s", "--every", "300000000000", "--queue", "test.noop"],
        ["schedules", "add", "s", "--every", "٣", "--queue", "test.noop"],
        ["schedules", "add", "s", "--every", "60", "--queue", "test.noop", "--priority", "٣"],
        ["enqueue", "test.noop", "k", "--delay", "nan"],
        ["enqueue", "test.noop", "k", "--delay", "inf"],
        ["enqueue", "test.noop", "k", "--delay", "1e308"],
        ["enqueue", "test.noop", "k", "--priority", "٣"],
        ["enqueue", "test.noop", "k", "--count", "٣"],
        ["enqueue", "test.noop", "k\udcff"],  # the bytes b"k\xff": not UTF-8
    ]
    for args, done in zip(commands, run_all(spawn_command, *commands), strict=True):
        lines = done.stderr.strip().splitlines()
        assert done.returncode == 2, (args, done.stderr)
        assert "Traceback" not in done.stderr, (args, done.stderr)
        if lines[-1].startswith("CommandError: "):
            assert len(lines) == 1, (args, done.stderr)
        else:  # argparse's: the usage, then one line "manage.py X: error: argument --y: ..."
            assert lines[-1].startswith("manage.py ") and ": error: argument " in lines[-1], (args, done.stderr)
        assert "must be" in lines[-1] or "invalid" in lines[-1], (args, lines[-1])
        assert done.stdout == ""
    assert everything() == before
