"""Schedules, the less travelled paths: each refusal of a definition, the settings sync updating
and reclaiming rows, a firing pass that fails, the command's text output and the admin columns."""

from __future__ import annotations

import datetime as dt
import io
import json

import pytest
from django.core.management import CommandError, call_command

from workqueue import hooks, schedules
from workqueue.exceptions import InvalidSchedule
from workqueue.models import Schedule, WorkItem
from workqueue.schedules import firing

pytestmark = pytest.mark.django_db

UTC = dt.UTC
T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


def schedules_command(*args: str) -> str:
    out = io.StringIO()
    call_command("schedules", *args, stdout=out)
    return out.getvalue()


# -- validate: every refusal names the schedule and the problem ------------------------------

REFUSED = [
    ({"name": "bad name!", "every": 60, "queue": "test.noop"}, "bad schedule name 'bad name!'"),
    ({"name": "x" * 201, "every": 60, "queue": "test.noop"}, "at most 200 characters"),
    ({"name": "v", "every": 0.05, "queue": "test.noop"}, "interval (every) must be at least 0.1 seconds, not 0.05"),
    ({"name": "v", "every": True, "queue": "test.noop"}, "interval (every) must be a number of seconds"),
    ({"name": "v", "every": [60], "queue": "test.noop"}, "interval (every) must be a number of seconds"),
    ({"name": "v", "every": 3e9, "queue": "test.noop"}, "must be at most 31,622,400 seconds (366 days)"),
    ({"name": "v", "every": "soon", "queue": "test.noop"}, "interval 'soon' must be a number of seconds"),
    ({"name": "v", "every": 60, "queue": "test.noop", "misfire": "sometimes"}, "misfire must be latest, all or skip"),
    ({"name": "v", "every": 60, "queue": "test.noop", "priority": 2**31}, "priority must be a 32-bit integer"),
    ({"name": "v", "every": 60, "queue": "test.noop", "priority": True}, "priority must be a 32-bit integer"),
    ({"name": "v", "every": 60, "queue": "test.noop", "priority": "1"}, "priority must be a 32-bit integer"),
    ({"name": "v", "every": 60}, "give exactly one thing to run"),
    ({"name": "v", "every": 60, "queue": "test.noop", "kind": "test.ops.count"}, "give exactly one thing to run"),
    ({"name": "v", "every": 60, "queue": "bad queue"}, "bad queue name 'bad queue'"),
    ({"name": "v", "every": 60, "queue": "test.noop", "metadata": ["a"]}, "metadata must be an object"),
    ({"name": "v", "every": 60, "queue": "test.noop", "key_prefix": "p" * 201}, "key prefix must be a string"),
    ({"name": "v", "every": 60, "task": "tests.testapp.tasks.add", "args": {"a": 1}}, "task args must be a JSON list"),
    ({"name": "v", "every": 60, "kind": "no.such.kind"}, "unknown operation kind 'no.such.kind'"),
    ({"name": "v", "every": 60, "cron": "", "timezone": "Nowhere/City", "queue": "test.noop"}, "unknown time zone"),
]


@pytest.mark.parametrize(("fields", "message"), REFUSED)
def test_validate_refuses_a_bad_definition_naming_the_schedule_and_the_problem(fields, message):
    with pytest.raises(InvalidSchedule) as refused:
        schedules.validate(fields)
    text = str(refused.value)
    assert text.startswith(f"schedule {fields['name']!r}: "), text
    assert message in text, text
    assert text.count("schedule ") == 1 or "bad schedule name" in text  # the prefix is not doubled


@pytest.mark.parametrize(
    ("every", "seconds"),
    [(dt.timedelta(minutes=2), 120.0), ("5m", 300.0), ("1d", 86400.0), (7, 7.0), (0.1, 0.1)],
)
def test_validate_normalises_an_interval_given_as_timedelta_text_or_number(every, seconds):
    out = schedules.validate({"name": "n", "every": every, "queue": "test.noop"})
    assert out["every"] == seconds and isinstance(out["every"], float)
    assert (out["cron"], out["target"], out["misfire"], out["metadata"], out["key_prefix"]) == (
        "",
        "item",
        "latest",
        {},
        "",
    )


def test_validate_normalises_the_whitespace_of_a_cron_expression():
    out = schedules.validate({"name": "n", "cron": "  30   2 * *  * ", "queue": "test.noop", "timezone": "UTC"})
    assert (out["cron"], out["every"]) == ("30 2 * * *", None)


def test_an_operation_or_task_schedule_without_the_operations_hooks_is_refused(monkeypatch):
    monkeypatch.delitem(hooks._schedule_targets, "operation")
    monkeypatch.delitem(hooks._schedule_targets, "task")
    for fields, target in (({"kind": "test.ops.count"}, "operation"), ({"task": "tests.testapp.tasks.add"}, "task")):
        with pytest.raises(InvalidSchedule, match=f"{target} schedules need the operations app"):
            schedules.add({"name": f"needs-{target}", "every": 60, **fields})
    assert not Schedule.objects.exists()


def test_a_request_that_is_not_json_is_refused_and_nothing_is_written(monkeypatch):
    # The operation's own check accepts anything; the JSON check after it must still refuse.
    fire, _check = hooks._schedule_targets["operation"]
    monkeypatch.setitem(hooks._schedule_targets, "operation", (fire, lambda out: []))
    with pytest.raises(InvalidSchedule, match=r"schedule 'nan-req': request must be JSON-serialisable"):
        schedules.add({"name": "nan-req", "every": 60, "kind": "test.ops.count", "request": {"x": float("nan")}})
    assert not Schedule.objects.exists()


def test_adding_a_second_schedule_with_the_same_name_is_refused():
    schedules.add({"name": "twice", "every": 60, "queue": "test.noop"})
    with pytest.raises(InvalidSchedule, match="schedule 'twice': a schedule with this name already exists"):
        schedules.add({"name": "twice", "every": 30, "queue": "test.noop"})
    assert Schedule.objects.get(name="twice").every == 60


# -- the settings sync: updates and reclaimed rows -----------------------------------------


def test_sync_updates_a_changed_settings_schedule_and_recomputes_its_next_slot(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"s": {"every": 60, "queue": "test.noop"}}}
    assert schedules.sync_settings(now=T0).created == ["s"]
    assert Schedule.objects.get(name="s").next_slot == T0 + dt.timedelta(seconds=60)
    unchanged = schedules.sync_settings(now=T0)
    assert (unchanged.created, unchanged.updated, unchanged.removed) == ([], [], [])

    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"s": {"every": 3600, "queue": "test.noop"}}}
    result = schedules.sync_settings(now=T0 + dt.timedelta(seconds=1))
    assert result.updated == ["s"] and not result.created
    s = Schedule.objects.get(name="s")
    assert s.every == 3600 and s.next_slot == T0 + dt.timedelta(hours=1)

    # A change that is not about timing keeps next_slot.
    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "SCHEDULES": {"s": {"every": 3600, "queue": "test.noop", "priority": 5}},
    }
    assert schedules.sync_settings(now=T0 + dt.timedelta(seconds=2)).updated == ["s"]
    s = Schedule.objects.get(name="s")
    assert (s.priority, s.next_slot) == (5, T0 + dt.timedelta(hours=1))


def test_sync_takes_back_an_admin_schedule_and_a_removed_one_that_reappear_in_settings(settings):
    schedules.add({"name": "mine", "every": 60, "queue": "test.noop"}, now=T0)
    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "SCHEDULES": {
            "mine": {"every": 60, "queue": "test.noop", "enabled": False},
            "back": {"every": 60, "queue": "test.noop"},
        },
    }
    assert schedules.sync_settings(now=T0).created == ["back"]
    mine = Schedule.objects.get(name="mine")
    assert (mine.source, mine.enabled, mine.removed_at) == ("settings", False, None)

    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"mine": {"every": 60, "queue": "test.noop"}}}
    assert schedules.sync_settings(now=T0 + dt.timedelta(seconds=5)).removed == ["back"]
    back = Schedule.objects.get(name="back")
    assert back.removed_at is not None and not back.enabled

    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "SCHEDULES": {"mine": {"every": 60, "queue": "test.noop"}, "back": {"every": 60, "queue": "test.noop"}},
    }
    result = schedules.sync_settings(now=T0 + dt.timedelta(seconds=70))
    assert result.updated == ["back"]  # "mine" is unchanged
    back = Schedule.objects.get(name="back")
    assert (back.removed_at, back.enabled, back.source) == (None, True, "settings")
    assert back.next_slot == T0 + dt.timedelta(seconds=120)


# -- a firing pass that fails --------------------------------------------------------------


def test_a_schedule_that_cannot_fire_records_the_error_and_does_not_hold_up_the_others(monkeypatch):
    schedules.add({"name": "broken", "every": 60, "queue": "test.noop"}, now=T0 - dt.timedelta(seconds=1))
    schedules.add({"name": "fine", "every": 60, "queue": "test.noop"}, now=T0 - dt.timedelta(seconds=1))
    _fail_firing(monkeypatch, "broken", RuntimeError("queue on fire"))
    result = schedules.fire_due(now=T0 + dt.timedelta(seconds=1))
    assert result.errors == {"broken": "RuntimeError: queue on fire"}
    assert [f.key for f in result.fired] == ["fine:2026-11-30T12:00:00Z"]
    broken = Schedule.objects.get(name="broken")
    assert (broken.last_error, broken.last_slot, broken.fired) == ("RuntimeError: queue on fire", None, 0)
    assert broken.next_slot == T0 + dt.timedelta(seconds=60)
    assert not WorkItem.objects.filter(key__startswith="broken:").exists()


def test_when_even_the_next_slot_cannot_be_computed_the_schedule_retries_in_a_minute(monkeypatch):
    schedules.add({"name": "hopeless", "every": 60, "queue": "test.noop"}, now=T0 - dt.timedelta(seconds=1))

    def broken(*args, **kwargs):
        raise ValueError("no slots today")

    monkeypatch.setattr(firing, "due_slots", broken)
    monkeypatch.setattr(firing, "first_slot", broken)
    at = T0 + dt.timedelta(seconds=1)
    result = schedules.fire_due(now=at)
    assert result.errors == {"hopeless": "ValueError: no slots today"} and not result.fired
    s = Schedule.objects.get(name="hopeless")
    assert s.next_slot == at + dt.timedelta(minutes=1) and s.last_error == "ValueError: no slots today"


# -- the command ---------------------------------------------------------------------------


def test_list_says_no_schedules_when_there_are_none():
    assert schedules_command("list").strip() == "no schedules"


def test_list_shows_one_line_per_schedule_with_what_it_runs_and_its_state(settings):
    schedules.add({"name": "items", "every": 60, "queue": "test.noop"})
    schedules.add({"name": "ops", "every": 3600, "kind": "test.ops.count", "request": {"steps": 1}})
    schedules.add({"name": "tasks", "every": 86400, "task": "tests.testapp.tasks.add", "args": [1, 2]})
    schedules.pause(["tasks"])
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"gone": {"every": 60, "queue": "test.noop"}}}
    schedules.sync_settings()
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {}}
    schedules.sync_settings()
    lines = {line.split(":", 1)[0]: line for line in schedules_command("list").splitlines()}
    assert set(lines) == {"items", "ops", "tasks", "gone"}
    assert lines["items"].startswith("items: item on test.noop, every 1 min, enabled, next 20")
    assert lines["ops"].startswith("ops: operation test.ops.count, every 1 h, enabled, ")
    assert lines["tasks"].startswith("tasks: task tests.testapp.tasks.add, every 1 d, paused, ")
    assert lines["gone"].startswith("gone: item on test.noop, every 1 min, removed, ")
    assert lines["items"].endswith("fired 0 (admin)") and lines["gone"].endswith("fired 0 (settings)")
    listed = {r["name"]: r["runs"] for r in json.loads(schedules_command("list", "--json"))}
    assert listed["ops"] == "operation test.ops.count" and listed["tasks"] == "task tests.testapp.tasks.add"


def test_resume_command_lets_a_paused_schedule_fire_again_and_refuses_an_unknown_name():
    schedules.add({"name": "sleepy", "every": 60, "queue": "test.noop", "enabled": False})
    assert not Schedule.objects.get(name="sleepy").enabled
    assert schedules_command("resume", "sleepy").strip() == "resumed sleepy"
    assert Schedule.objects.get(name="sleepy").enabled
    with pytest.raises(CommandError, match="no schedule named 'nobody'") as missing:
        schedules_command("resume", "nobody")
    assert missing.value.returncode == 2


def test_tick_in_text_says_how_many_runs_fired_and_how_many_errors(monkeypatch):
    past = dt.datetime.now(UTC) - dt.timedelta(minutes=5)
    assert schedules_command("tick").strip() == "tick: 0 run(s) fired from 0 due schedule(s)"
    schedules.add({"name": "ok", "every": 60, "queue": "test.noop"}, now=past)
    schedules.add({"name": "bad", "every": 60, "queue": "test.noop"}, now=past)
    _fail_firing(monkeypatch, "bad", RuntimeError("nope"))
    assert schedules_command("tick").strip() == "tick: 1 run(s) fired from 2 due schedule(s), 1 error(s)"


def _fail_firing(monkeypatch, name: str, error: Exception) -> None:
    """Make firing the schedule ``name`` raise ``error``; every other schedule fires for real."""
    real = firing._fire_one

    def fire_one(row, key, using):
        if row["name"] == name:
            raise error
        return real(row, key, using)

    monkeypatch.setattr(firing, "_fire_one", fire_one)
