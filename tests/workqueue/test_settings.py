"""The WORKQUEUE setting: documented defaults, and a bad value named by `manage.py check`."""

from __future__ import annotations

import datetime as dt

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.test import override_settings
from django.utils import timezone

from workqueue.conf import QueueSettings, WorkqueueSettings, wq_settings
from workqueue.exceptions import WorkqueueSettingsError
from workqueue.models import MaintenanceRun, Worker


def with_queue(**queue) -> dict:
    return {**settings.WORKQUEUE, "QUEUES": {**settings.WORKQUEUE["QUEUES"], "broken": queue}}


BAD = [
    ({**settings.WORKQUEUE, "BOGUS": 1}, "WORKQUEUE has unknown key(s) 'BOGUS'"),
    ({**settings.WORKQUEUE, "POLL_INTERVAL": "5s"}, "WORKQUEUE['POLL_INTERVAL'] must be a number of seconds"),
    ({**settings.WORKQUEUE, "BATCH": 0}, "WORKQUEUE['BATCH'] must be an integer >= 1, not 0"),
    (
        {**settings.WORKQUEUE, "CONNECTION_LOSS_REFUNDS": -1},
        "WORKQUEUE['CONNECTION_LOSS_REFUNDS'] must be an integer >= 0, not -1",
    ),
    ({**settings.WORKQUEUE, "NOTIFY_CHANNEL": "Bad-Channel"}, "WORKQUEUE['NOTIFY_CHANNEL']"),
    ({**settings.WORKQUEUE, "QUEUE_DEFAULTS": {"leese": 3}}, "WORKQUEUE['QUEUE_DEFAULTS'] has unknown key(s) 'leese'"),
    (with_queue(leese=3), "WORKQUEUE['QUEUES']['broken'] has unknown key(s) 'leese'"),
    (with_queue(lease=-5), "WORKQUEUE['QUEUES']['broken']['lease'] must be greater than 0, not -5"),
    (with_queue(lease=0), "WORKQUEUE['QUEUES']['broken']['lease'] must be greater than 0, not 0"),
    (with_queue(lease=dt.timedelta(seconds=-1)), "['lease'] must be greater than 0, not -1.0"),
    (with_queue(max_attempts=0), "['broken']['max_attempts'] must be an integer >= 1, not 0"),
    (with_queue(max_running=0), "['broken']['max_running'] must be an integer >= 1, not 0"),
    (with_queue(hard_timeout="1h"), "['broken']['hard_timeout'] must be a number of seconds or a timedelta or None"),
    (with_queue(over_wire="yes"), "['broken']['over_wire'] must be True or False, not 'yes'"),
    (with_queue(retry_backoff=0.5), "['broken']['retry_backoff'] must be a number >= 1, not 0.5"),
    ({**settings.WORKQUEUE, "QUEUES": {"bad queue": {}}}, "bad queue name 'bad queue'"),
    ({**settings.WORKQUEUE, "QUEUES": ["a"]}, "WORKQUEUE['QUEUES'] must be a dict"),
    ({**settings.WORKQUEUE, "METRICS_TOKEN": ""}, "WORKQUEUE['METRICS_TOKEN'] must be None (public) or"),
    ({**settings.WORKQUEUE, "METRICS_CACHE": -1}, "WORKQUEUE['METRICS_CACHE'] must be 0 or more"),
    ({**settings.WORKQUEUE, "MAX_POLLERS": 0}, "WORKQUEUE['MAX_POLLERS'] must be an integer >= 1, not 0"),
    (
        {**settings.WORKQUEUE, "WORKER_METRICS_PORT": 70000},
        "WORKQUEUE['WORKER_METRICS_PORT'] must be a TCP port from 1 to 65535 (e.g. 9100), or None",
    ),
    ({**settings.WORKQUEUE, "WORKER_METRICS_PORT": "9100"}, "WORKQUEUE['WORKER_METRICS_PORT'] must be a TCP port"),
    ({**settings.WORKQUEUE, "WORKER_METRICS_PORT": True}, "WORKQUEUE['WORKER_METRICS_PORT'] must be a TCP port"),
    ({**settings.WORKQUEUE, "WORKER_METRICS_ADDRESS": ""}, "WORKQUEUE['WORKER_METRICS_ADDRESS'] must be an IP"),
]


@pytest.mark.parametrize(("value", "message"), BAD)
def test_a_bad_value_is_a_system_check_error_that_names_it(value, message):
    with override_settings(WORKQUEUE=value):
        errors = [e for e in run_checks() if e.id == "workqueue.E001"]
        assert len(errors) == 1, errors
        assert message in errors[0].msg
        assert "WORKQUEUE" in errors[0].hint
        with pytest.raises(WorkqueueSettingsError, match="WORKQUEUE"):
            wq_settings()
    assert wq_settings().queue("test.capped").max_running == 3, "the override is gone afterwards"


def test_the_shipped_settings_pass_and_defaults_apply_to_unlisted_queues():
    assert not [e for e in run_checks() if e.id.startswith("workqueue.")]
    conf = wq_settings()
    unlisted = conf.queue("never.configured")
    assert unlisted == QueueSettings(name="never.configured")
    assert (unlisted.lease, unlisted.max_attempts, unlisted.max_running, unlisted.hard_timeout) == (60.0, 5, None, None)
    assert conf.queue("test.capped").max_running == 3 and conf.queue("test.wire").over_wire
    assert (WorkqueueSettings({}).connection_loss_refunds, conf.connection_loss_refunds) == (3, 3)
    assert WorkqueueSettings({"CONNECTION_LOSS_REFUNDS": 0}).connection_loss_refunds == 0
    assert "test.wire" in conf.wire_queues()
    assert (conf.worker_metrics_port, conf.worker_metrics_address) == (None, "0.0.0.0")  # off by default
    assert WorkqueueSettings({"WORKER_METRICS_PORT": 9100}).worker_metrics_port == 9100


def test_queue_defaults_apply_before_each_queues_own_settings_and_timedeltas_are_seconds():
    conf = WorkqueueSettings(
        {
            "QUEUE_DEFAULTS": {"lease": dt.timedelta(minutes=2), "max_attempts": 9},
            "QUEUES": {"a": {}, "b": {"lease": 5, "hard_timeout": dt.timedelta(hours=1)}},
        }
    )
    assert (conf.queue("a").lease, conf.queue("a").max_attempts) == (120.0, 9)
    assert (conf.queue("b").lease, conf.queue("b").max_attempts, conf.queue("b").hard_timeout) == (5.0, 9, 3600.0)
    assert conf.queue("elsewhere").lease == 120.0


def test_retry_backoff_grows_and_is_capped():
    q = QueueSettings(retry_delay=10, retry_backoff=2, max_retry_delay=50)
    assert [q.retry_delay_for(n) for n in (1, 2, 3, 4, 9)] == [10, 20, 40, 50, 50]


@pytest.mark.django_db
def test_a_warning_when_neither_recover_nor_reap_ran_lately():
    assert not [e for e in run_checks(databases=["default"]) if e.id == "workqueue.W001"], "no worker ever ran"
    Worker.objects.create(id="w", host="h", pid=1)
    warnings = [e for e in run_checks(databases=["default"]) if e.id == "workqueue.W001"]
    assert len(warnings) == 1 and "never" in warnings[0].msg
    MaintenanceRun.objects.create(name="reap", started_at=timezone.now() - dt.timedelta(hours=1))
    assert [e.id for e in run_checks(databases=["default"]) if e.id == "workqueue.W001"] == ["workqueue.W001"]
    MaintenanceRun.objects.create(name="recover", started_at=timezone.now())
    assert not [e for e in run_checks(databases=["default"]) if e.id == "workqueue.W001"]


@pytest.mark.django_db(transaction=True)
def test_manage_py_check_names_a_bad_value(run_command):
    done = run_command("check", env={"DJANGO_SETTINGS_MODULE": "tests.workqueue.bad_settings"})
    assert done.returncode == 1
    assert "(workqueue.E001) WORKQUEUE['QUEUES']['broken']['lease'] must be greater than 0, not -5." in done.stderr
    assert "Traceback" not in done.stderr
