"""The OPERATIONS setting: documented defaults, bad values named, checked by ``manage.py check``."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.test import override_settings

from operations.conf import DEFAULTS, OperationsSettings, configured_table, ops_settings, table_name
from operations.exceptions import OperationsSettingsError


def test_defaults_are_the_documented_ones():
    conf = OperationsSettings({})
    assert (conf.lease, conf.progress_interval, conf.retry_delay, conf.max_attempts) == (120.0, 2.0, 30.0, 5)
    assert (conf.retention, conf.reap_batch, conf.recover_after, conf.recover_batch) == (30 * 86400.0, 1000, 60.0, 200)
    assert (conf.watcher_poll, conf.watcher_min_read_interval, conf.watcher_max_subscriptions) == (2.0, 0.25, 1024)
    assert (conf.queue, conf.table) == ("operations", "operations")
    assert "operations" in conf.queues  # plus the django.tasks backend's queues, when configured


def test_the_test_settings_shorten_the_lease():
    conf = ops_settings()
    assert (conf.lease, conf.progress_interval, conf.retry_delay, conf.recover_after) == (3.0, 0.5, 0.0, 1.0)


def test_durations_take_timedeltas_and_a_prefix_names_the_table():
    conf = OperationsSettings({"LEASE": dt.timedelta(minutes=5), "TABLE_PREFIX": "ddb"})
    assert conf.lease == 300.0 and conf.table == table_name("ddb") == "ddb_operations"


@pytest.mark.parametrize(
    ("raw", "match"),
    [
        ({"LEASE": 0}, "LEASE"),
        ({"LEASE": "2m"}, "LEASE"),
        ({"MAX_ATTEMPTS": 0}, "never unlimited"),
        ({"MAX_ATTEMPTS": None}, "MAX_ATTEMPTS"),
        ({"PROGRESS_INTERVAL": 120}, "shorter than"),
        ({"PROGRESS_INTERVAL": 5, "LEASE": 5}, "shorter than"),
        ({"TABLE_PREFIX": "Bad-Prefix"}, "TABLE_PREFIX"),
        ({"NOTIFY_CHANNEL": "no spaces"}, "NOTIFY_CHANNEL"),
        ({"QUEUES": "operations"}, "QUEUES"),
        ({"RETRY_DELAY": -1}, "RETRY_DELAY"),
        ({"WATCH_MAX_THREADS": 0}, r"WATCH_MAX_THREADS'\] must be an integer >= 1"),
        ({"WATCH_MAX_THREADS": "8"}, "WATCH_MAX_THREADS"),
        ({"SSE_WSGI_KEEPALIVE": 0}, r"SSE_WSGI_KEEPALIVE'\] must be greater than 0"),
        ({"LAESE": 3}, "unknown key"),
        ([], "must be a dict"),
    ],
)
def test_bad_values_are_refused_by_name(raw, match):
    with pytest.raises(OperationsSettingsError, match=match):
        OperationsSettings(raw)


def test_every_default_key_is_accepted():
    OperationsSettings(dict(DEFAULTS))


def test_manage_py_check_names_a_bad_value():
    with (
        override_settings(OPERATIONS={"LEASE": 2, "PROGRESS_INTERVAL": 5}),
        pytest.raises(SystemCheckError, match=r"operations\.E001.*PROGRESS_INTERVAL"),
    ):
        call_command("check", "--fail-level", "ERROR")


def _operations_checks():
    from django.core.checks import run_checks

    return [e for e in run_checks() if e.id.startswith("operations.")]


def test_the_test_settings_pass_the_checks():
    assert _operations_checks() == []


def test_queue_settings_that_operations_ignore_are_warned_about_by_name():
    with override_settings(WORKQUEUE={"QUEUES": {"operations": {"lease": 600, "max_attempts": 9, "priority": 2}}}):
        found = _operations_checks()
    assert [e.id for e in found] == ["operations.W001"]
    assert "lease, max_attempts" in found[0].msg and "priority" not in found[0].msg


def test_an_operations_queue_served_over_the_wire_is_an_error():
    with override_settings(WORKQUEUE={"QUEUES": {"operations": {"over_wire": True}}}):
        assert [e.id for e in _operations_checks()] == ["operations.E003"]


@pytest.mark.parametrize("prefix", ["x; DROP TABLE work_items; --", "Bad-Prefix", "a b", "ddb_", 7])
def test_the_table_prefix_is_validated_where_it_is_first_read(prefix):
    # configured_table() feeds the model's db_table and every SQL statement at import time,
    # before ops_settings() (and its check) ever runs: it must refuse a bad prefix itself.
    with override_settings(OPERATIONS={"TABLE_PREFIX": prefix}), pytest.raises(OperationsSettingsError, match="PREFIX"):
        configured_table()
    with override_settings(OPERATIONS={"TABLE_PREFIX": "ddb"}):
        assert configured_table() == "ddb_operations"


def test_a_per_owner_cap_above_the_thread_cap_is_a_warning():
    from django.core.checks import run_checks

    with override_settings(OPERATIONS={"LEASE": 3, "PROGRESS_INTERVAL": 0.5, "WATCH_MAX_PER_OWNER": 9}):
        found = [e for e in run_checks() if e.id == "operations.W002"]
    assert found and "WATCH_MAX_THREADS" in found[0].msg
    assert ops_settings().watch_max_threads == 8 and ops_settings().sse_wsgi_keepalive == 1.0
