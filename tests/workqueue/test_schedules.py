"""Schedules: exactly one run per slot across workers, ticks and crashes; missed slots; DST; sync.

The process tests run real ``runworker`` processes (their scheduler loops) and
``manage.py schedules tick``; the rest pin "now" and call the firing pass directly.
"""

from __future__ import annotations

import datetime as dt
import io
import itertools
import json
import re
import signal
import threading
import time
from collections import Counter
from zoneinfo import ZoneInfo

import pytest
from django.core import checks
from django.core.management import CommandError, call_command
from django.db import connections

from tests.conftest import wait_until
from tests.workqueue.conftest import side_connection
from workqueue import schedules, store, testing
from workqueue.exceptions import InvalidSchedule
from workqueue.models import Schedule, WorkItem
from workqueue.sweeps import reap as reaper

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.UTC
BERLIN = ZoneInfo("Europe/Berlin")


def keys_of(name: str) -> Counter:
    return Counter(WorkItem.objects.filter(key__startswith=f"{name}:").values_list("key", flat=True))


def slots_of(name: str) -> list[dt.datetime]:
    return sorted(
        dt.datetime.fromisoformat(k.removeprefix(f"{name}:").removesuffix("Z")).replace(tzinfo=UTC)
        for k in keys_of(name)
        if ":manual:" not in k
    )


def add(name: str, now: dt.datetime | None = None, **fields) -> Schedule:
    return schedules.add({"name": name, **fields}, now=now)


def fire(now: dt.datetime) -> list[str]:
    return [f.key for f in schedules.fire_due(now=now).fired]


def assert_every_slot_once(name: str, step: float = 1.0) -> list[dt.datetime]:
    per_key = keys_of(name)
    assert per_key and max(per_key.values()) == 1, [k for k, n in per_key.items() if n > 1]
    slots = slots_of(name)
    gaps = [(a, b) for a, b in itertools.pairwise(slots) if (b - a).total_seconds() != step]
    assert not gaps, f"slots missing between {gaps[:3]}"
    return slots


# -- real processes -----------------------------------------------------------------------


def test_three_workers_and_a_tick_loop_fire_each_slot_exactly_once(start_ready_worker, run_command):
    add("every-second", queue="test.noop", every=1, misfire="all")
    workers = [start_ready_worker(f"sched-{n}", "--queue", "test.noop") for n in range(3)]
    stop = threading.Event()
    ticks: list[int] = []

    def tick_loop():
        while not stop.is_set():
            ticks.append(run_command("schedules", "tick", "--json").returncode)

    ticker = threading.Thread(target=tick_loop, daemon=True)
    ticker.start()
    started = time.monotonic()
    try:
        # At least 10 s of slots, all four firers running the whole time.
        wait_until(
            lambda: len(keys_of("every-second")) >= 12 and time.monotonic() - started >= 10,
            timeout=60,
            message="12 slots and 10 s",
        )
        assert all(w.alive() for w in workers), [w.output()[-2000:] for w in workers if not w.alive()]
    finally:
        stop.set()
        ticker.join(60)
    for w in workers:
        w.signal(signal.SIGTERM)
    for w in workers:
        assert w.wait(30) == 0, w.output()[-2000:]
    assert ticks and set(ticks) == {0}
    slots = assert_every_slot_once("every-second")
    assert len(slots) >= 12
    schedule = Schedule.objects.get(name="every-second")
    assert schedule.last_slot == slots[-1] and schedule.fired == len(slots)


def test_a_tick_while_another_firer_is_between_its_enqueue_and_its_advance_fires_nothing(monkeypatch, spawn_command):
    # The deterministic version of the race above: the first firer (a thread here) is held
    # after it enqueued the slot's item and before it advances last_slot. The fleet runs what
    # it can see meanwhile (a worker settles a fired item in milliseconds), and a second firer
    # (`schedules tick`) runs. Enqueue and advance are one transaction, so the held firer's
    # row lock makes the tick wait, and then the slot is no longer due; were they two
    # transactions, the tick would find the slot still due and its settled item no longer
    # live, and run it again.
    add("held", queue="test.noop", every=86400)
    today = schedules.db_now().replace(hour=0, minute=0, second=0, microsecond=0)
    Schedule.objects.filter(name="held").update(next_slot=today, last_slot=None)
    at_advance, go = threading.Event(), threading.Event()
    firer: list[threading.Thread] = []
    advance = store.schedule_advance_many

    def held_before_the_advance(*args, **kwargs):
        if threading.current_thread() in firer:
            at_advance.set()
            assert go.wait(60), "the test never let the firer go on"
        return advance(*args, **kwargs)

    monkeypatch.setattr(store, "schedule_advance_many", held_before_the_advance)
    fired: list[list[str]] = []

    def fire_now():
        try:
            fired.append([f.key for f in schedules.fire_due().fired])
        finally:
            connections.close_all()

    firer.append(threading.Thread(target=fire_now, daemon=True))
    firer[0].start()
    try:
        assert at_advance.wait(30), "the firer did not reach its advance"
        testing.drain(["test.noop"])  # a worker runs whatever it can see
        tick = spawn_command("schedules", "tick", "--json")
        # Either the tick waits for the held firer's lock on the schedule row, or it has run.
        wait_until(
            lambda: tick.poll() is not None or _waiting_on("work_schedules"),
            timeout=60,
            message="the tick to wait for the held firer or to finish",
        )
    finally:
        go.set()
        firer[0].join(30)
    assert not firer[0].is_alive()
    out, err = tick.communicate(timeout=60)
    assert tick.returncode == 0, err
    key = schedules.slot_key("held", today)
    assert fired == [[key]]
    assert json.loads(out)["fired"] == 0, out
    assert keys_of("held") == Counter({key: 1})
    schedule = Schedule.objects.get(name="held")
    assert (schedule.last_slot, schedule.fired) == (today, 1)


def _waiting_on(table: str) -> bool:
    """Whether another session waits for a lock in a statement on ``table``."""
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE %s",
            [f"%{table}%"],
        )
        return cur.fetchone()[0] > 0


def _blocking_insert(conn, key: str) -> None:
    """An uncommitted live item for (test.noop, key): an enqueue of that key waits for us."""
    conn.execute(
        "INSERT INTO work_items (queue, key, state, priority, attempts, max_attempts, metadata, wire, reclaimed, "
        "handed_out) VALUES ('test.noop', %s, 'queued', 0, 0, 1, '{}', false, false, false)",
        [key],
    )


def _waiting_on_locks() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND wait_event_type = 'Lock' AND query ILIKE '%%INSERT INTO work_items%%'"
        )
        return cur.fetchone()[0]


def test_a_worker_sigkilled_while_firing_loses_no_slot_and_doubles_none(start_ready_worker):
    schedule = add("crashy", queue="test.noop", every=1, misfire="all")
    Schedule.objects.filter(pk=schedule.pk).update(enabled=False)
    blocked = schedules.slot_key("crashy", schedule.next_slot + dt.timedelta(seconds=2))
    with side_connection(autocommit=False) as side:
        _blocking_insert(side, blocked)
        doomed = start_ready_worker("doomed", "--queue", "test.noop")
        Schedule.objects.filter(pk=schedule.pk).update(enabled=True)
        # The worker is inside its firing transaction (schedule row locked, two slots enqueued),
        # waiting for our row: kill it there.
        wait_until(_waiting_on_locks, timeout=30, message="the worker to block inside its firing transaction")
        doomed.kill()
        assert doomed.proc.returncode == -signal.SIGKILL
        side.rollback()
    heir = start_ready_worker("heir", "--queue", "test.noop")
    blocked_slot = schedule.next_slot + dt.timedelta(seconds=2)
    wait_until(
        lambda: (
            Schedule.objects.get(pk=schedule.pk).last_slot
            and Schedule.objects.get(pk=schedule.pk).last_slot >= blocked_slot + dt.timedelta(seconds=3)
        ),
        timeout=60,
        message="the heir to fire past the blocked slot",
    )
    heir.signal(signal.SIGTERM)
    assert heir.wait(30) == 0, heir.output()[-2000:]
    slots = assert_every_slot_once("crashy")
    assert slots[0] == schedule.next_slot and blocked_slot in slots


def test_a_new_schedule_wakes_an_idle_scheduler_at_once_not_at_its_backstop_poll(start_ready_worker):
    from tests.workqueue.conftest import listening_backends

    worker = start_ready_worker("sleepy", "--queue", "test.noop", "--poll", "60")
    wait_until(listening_backends, timeout=20, message="the worker's LISTEN connection")
    time.sleep(0.5)  # its scheduler found nothing due and now waits on NOTIFY or 60 s
    added = time.monotonic()
    add("woken", now=dt.datetime.now(UTC) - dt.timedelta(minutes=5), queue="test.noop", every=60)
    wait_until(lambda: keys_of("woken"), timeout=50, message="the schedule to fire")
    assert time.monotonic() - added < 30  # a generous bound; the backstop poll is 60 s
    worker.signal(signal.SIGTERM)
    assert worker.wait(30) == 0, worker.output()[-2000:]


def test_one_pass_fires_every_due_schedule_in_bounded_batches_oldest_slot_first(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULE_BATCH": 3}
    for n in range(10):
        add(f"many-{n}", now=T0 - dt.timedelta(minutes=10 - n), queue="test.noop", every=60)
    fired = fire(T0 + dt.timedelta(seconds=1))
    assert len(fired) == 10 and len({k.split(":")[0] for k in fired}) == 10
    assert fired[0].startswith("many-0:") and fired[-1].startswith("many-9:")


# -- missed slots, pinned clock -----------------------------------------------------------

T0 = dt.datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("misfire", "catchup", "expected"),
    [
        ("latest", 100, [T0 + dt.timedelta(minutes=10)]),
        ("skip", 100, []),
        ("all", 100, [T0 + dt.timedelta(minutes=m) for m in range(11)]),
        ("all", 4, [T0 + dt.timedelta(minutes=m) for m in range(7, 11)]),
    ],
)
def test_missed_slots_after_a_ten_minute_outage_follow_the_policy(settings, misfire, catchup, expected):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULE_CATCHUP": catchup}
    add("minutely", now=T0 - dt.timedelta(seconds=30), queue="test.noop", every=60, misfire=misfire)
    assert Schedule.objects.get(name="minutely").next_slot == T0
    # Nobody fired anything for ten and a half minutes: even the newest slot is past the grace.
    back = T0 + dt.timedelta(minutes=10, seconds=30)
    fired = fire(back)
    assert fired == [schedules.slot_key("minutely", s) for s in expected]
    after = Schedule.objects.get(name="minutely")
    assert after.next_slot == T0 + dt.timedelta(minutes=11) and after.next_slot > back
    assert after.last_slot == (expected[-1] if expected else None)
    assert fire(back) == []  # the same moment again: nothing more
    # The next slot fires normally, under every policy (it is on time).
    assert fire(T0 + dt.timedelta(minutes=11, seconds=1)) == [
        schedules.slot_key("minutely", T0 + dt.timedelta(minutes=11))
    ]


def test_skip_still_fires_a_slot_that_is_only_a_little_late():
    add("punctual", now=T0 - dt.timedelta(seconds=30), queue="test.noop", every=60, misfire="skip")
    assert fire(T0 + dt.timedelta(seconds=2)) == ["punctual:2026-11-30T12:00:00Z"]


# -- daylight saving ----------------------------------------------------------------------


def _run_days(name: str, start_local: dt.datetime, hours: int, step_minutes: int) -> list[str]:
    start = start_local.replace(tzinfo=BERLIN).astimezone(UTC)
    add(name, now=start, queue="test.noop", cron="30 2 * * *", timezone="Europe/Berlin")
    fired = []
    for n in range(hours * 60 // step_minutes + 1):
        fired += fire(start + dt.timedelta(minutes=n * step_minutes))
    return fired


def test_a_daily_0230_berlin_job_runs_once_on_the_spring_forward_day_at_0300():
    fired = _run_days("berlin-spring", dt.datetime(2026, 3, 28, 12, 0), hours=48, step_minutes=5)
    # 02:30 does not exist on 29 March: it runs once, at the jump (03:00 CEST = 01:00 UTC).
    assert fired == ["berlin-spring:2026-03-29T01:00:00Z", "berlin-spring:2026-03-30T00:30:00Z"]


def test_a_daily_0230_berlin_job_runs_once_on_the_fall_back_day():
    fired = _run_days("berlin-fall", dt.datetime(2026, 10, 24, 12, 0), hours=48, step_minutes=5)
    # 02:30 happens twice on 25 October: it runs once, at the first (02:30 CEST = 00:30 UTC).
    assert fired == ["berlin-fall:2026-10-25T00:30:00Z", "berlin-fall:2026-10-26T01:30:00Z"]


# -- the record outlives the items -------------------------------------------------------


def test_reaped_items_are_never_fired_again():
    add("reaped", now=T0 - dt.timedelta(seconds=1), queue="test.noop", every=60)
    assert fire(T0 + dt.timedelta(seconds=1)) == ["reaped:2026-11-30T12:00:00Z"]
    assert testing.drain(["test.noop"]) == 1
    counts = reaper.reap(now=dt.datetime.now(UTC) + dt.timedelta(days=30))
    assert counts["deleted"] >= 1 and not WorkItem.objects.filter(key__startswith="reaped:").exists()
    assert fire(T0 + dt.timedelta(seconds=2)) == []
    # Even a next_slot pulled back onto the fired slot does not fire it again: last_slot rules.
    Schedule.objects.filter(name="reaped").update(next_slot=T0)
    assert fire(T0 + dt.timedelta(seconds=3)) == []
    assert not WorkItem.objects.filter(key__startswith="reaped:").exists()
    assert Schedule.objects.get(name="reaped").next_slot == T0 + dt.timedelta(minutes=1)


# -- settings sync, pause, run-now --------------------------------------------------------


def test_a_schedule_removed_from_settings_stops_firing_after_the_next_sync(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"from-settings": {"every": 60, "queue": "test.noop"}}}
    created = schedules.sync_settings(now=T0 - dt.timedelta(seconds=1))
    assert created.created == ["from-settings"]
    assert schedules.sync_settings(now=T0).created == []  # a second sync changes nothing
    assert fire(T0 + dt.timedelta(seconds=1)) == ["from-settings:2026-11-30T12:00:00Z"]

    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {}}
    assert schedules.sync_settings(now=T0 + dt.timedelta(seconds=2)).removed == ["from-settings"]
    gone = Schedule.objects.get(name="from-settings")
    assert gone.removed_at is not None and not gone.enabled
    assert Schedule.objects.removed().filter(name="from-settings").exists()
    assert fire(T0 + dt.timedelta(minutes=5)) == []
    assert len(keys_of("from-settings")) == 1


def test_pause_stops_firing_resume_restarts_it_and_run_now_adds_exactly_one_run():
    add("pausable", now=T0 - dt.timedelta(seconds=1), queue="test.noop", every=60)
    assert schedules.pause(["pausable"]) == 1
    assert fire(T0 + dt.timedelta(minutes=3)) == []
    assert schedules.resume(["pausable"]) == 1
    resumed = Schedule.objects.get(name="pausable")
    assert resumed.enabled and resumed.next_slot > dt.datetime.now(UTC) - dt.timedelta(seconds=5)

    before = resumed.last_slot, resumed.next_slot
    run = schedules.run_now("pausable")
    assert run.key.startswith("pausable:manual:") and run.key.endswith("Z")
    assert keys_of("pausable") == Counter({run.key: 1})
    after = Schedule.objects.get(name="pausable")
    assert (after.last_slot, after.next_slot) == before and after.fired == 1
    # The slot it did not consume still fires on time.
    assert fire(after.next_slot) == [schedules.slot_key("pausable", after.next_slot)]
    assert len(keys_of("pausable")) == 2


def test_a_paused_schedule_in_settings_stays_paused_across_syncs(settings):
    settings.WORKQUEUE = {**settings.WORKQUEUE, "SCHEDULES": {"kept": {"every": 60, "queue": "test.noop"}}}
    schedules.sync_settings()
    schedules.pause(["kept"])
    schedules.sync_settings()
    assert not Schedule.objects.get(name="kept").enabled


# -- bad definitions ----------------------------------------------------------------------

BAD = [
    ({"cron": "61 * * * *", "queue": "test.noop"}, "cron expression '61 * * * *' is not valid"),
    ({"cron": "* * * *", "queue": "test.noop"}, "must have five fields"),
    ({"cron": "30 2 * * *", "timezone": "Europe/Atlantis", "queue": "test.noop"}, "unknown time zone"),
    ({"every": 60, "queue": "no.such.queue"}, "unknown queue 'no.such.queue'"),
    ({"every": 60, "operation": "no.such.kind"}, "unknown operation kind 'no.such.kind'"),
    ({"every": 60, "cron": "* * * * *", "queue": "test.noop"}, "exactly one of a cron expression"),
]


@pytest.mark.parametrize(("entry", "message"), BAD)
def test_a_bad_schedule_in_settings_is_a_check_error_and_sync_writes_nothing(settings, entry, message):
    settings.WORKQUEUE = {
        **settings.WORKQUEUE,
        "SCHEDULES": {"good": {"every": 60, "queue": "test.noop"}, "broken": entry},
    }
    errors = [e for e in checks.run_checks() if e.id == "workqueue.E002"]
    assert len(errors) == 1 and "schedule 'broken'" in errors[0].msg and message in errors[0].msg, errors
    with pytest.raises(InvalidSchedule, match=re.escape(message)):
        schedules.sync_settings()
    assert not Schedule.objects.exists()


def schedules_command(*args: str) -> str:
    out = io.StringIO()
    call_command("schedules", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--cron", "61 * * * *", "--queue", "test.noop"], "is not valid: Bad minute"),
        (["--cron", "30 2 * * *", "--timezone", "Mars/Base", "--queue", "test.noop"], "unknown time zone"),
        (["--every", "soon", "--queue", "test.noop"], "interval 'soon'"),
        (["--every", "10", "--queue", "test.noop", "--metadata", "novalue"], "key=value"),
        (["--every", "10", "--task", "tests.testapp.tasks.add", "--args", "[1,"], "--args must be JSON"),
    ],
)
def test_the_command_refuses_a_bad_schedule_in_one_line_with_exit_code_2(args, message):
    with pytest.raises(CommandError) as refused:
        schedules_command("add", "bad", *args)
    assert refused.value.returncode == 2 and message in str(refused.value) and "\n" not in str(refused.value)
    assert not Schedule.objects.exists()


def test_the_command_process_exits_2_with_one_line_on_a_bad_cron(run_command):
    done = run_command("schedules", "add", "bad", "--cron", "61 * * * *", "--queue", "test.noop")
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "CommandError: schedule 'bad': cron expression '61 * * * *' is not valid: Bad minute"
    )
    assert not Schedule.objects.exists()


def test_the_command_adds_lists_pauses_runs_and_removes():
    assert "added cmd" in schedules_command("add", "cmd", "--every", "1h", "--queue", "test.noop")
    listed = json.loads(schedules_command("list", "--json"))
    assert [(r["name"], r["when"], r["runs"]) for r in listed] == [("cmd", "every 1 h", "item on test.noop")]
    schedules_command("pause", "cmd")
    assert not Schedule.objects.get(name="cmd").enabled
    assert "cmd:manual:" in schedules_command("run-now", "cmd")
    schedules_command("remove", "cmd")
    assert not Schedule.objects.exists()
    with pytest.raises(CommandError, match="no schedule named 'cmd'") as missing:
        schedules_command("pause", "cmd")
    assert missing.value.returncode == 2


def test_tick_fires_what_is_due_and_says_so():
    add("ticked", now=dt.datetime.now(UTC) - dt.timedelta(minutes=5), queue="test.noop", every=60)
    result = json.loads(schedules_command("tick", "--json"))
    assert result["fired"] == 1 and result["keys"][0].startswith("ticked:")
    assert json.loads(schedules_command("tick", "--json"))["fired"] == 0


def test_a_cron_schedule_without_cronsim_is_refused_with_the_install_hint(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "cronsim", None)  # what an install without the extra sees
    with pytest.raises(InvalidSchedule, match=r"pip install \"django-workqueue-operations\[cron\]\""):
        add("needs-cron", queue="test.noop", cron="* * * * *")
    add("interval-only", queue="test.noop", every=60)  # intervals need nothing
    assert not Schedule.objects.filter(name="needs-cron").exists()


def test_an_operation_schedule_starts_one_operation_per_slot_keyed_by_the_slot():
    from operations.models import Operation

    add("op-sched", now=T0 - dt.timedelta(seconds=1), every=60, kind="test.ops.count", request={"steps": 1})
    assert fire(T0 + dt.timedelta(seconds=1)) == ["op-sched:2026-11-30T12:00:00Z"]
    op = Operation.objects.get(pk="op-sched:2026-11-30T12:00:00Z")
    assert (op.kind, op.request) == ("test.ops.count", {"steps": 1})
    assert WorkItem.objects.filter(queue=op.queue, key=op.id).count() == 1


def test_a_task_schedule_enqueues_the_task_once_per_slot():
    from operations.models import Operation

    add("task-sched", now=T0 - dt.timedelta(seconds=1), every=60, task="tests.testapp.tasks.add", args=[2, 3])
    assert fire(T0 + dt.timedelta(seconds=1)) == ["task-sched:2026-11-30T12:00:00Z"]
    op = Operation.objects.get(pk="task-sched:2026-11-30T12:00:00Z")
    assert op.kind == "task.tests.testapp.tasks.add" and op.request["args"] == [2, 3]


def test_a_task_schedule_naming_no_task_is_refused():
    with pytest.raises(InvalidSchedule, match=r"no django\.tasks task .* is registered"):
        add("no-task", every=60, task="tests.testapp.tasks.nope")
