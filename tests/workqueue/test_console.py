"""What runworker, recover and reap print on a site that configured no logging (tests/plain_settings.py).

The worker's start line, a signal, reconnects and its ``N processed`` summary are INFO records on
the ``workqueue`` logger. With no handler of the site's routing them, the commands print them
themselves, at the level ``--verbosity`` asks for; with one, the site's handler prints them once.
"""

from __future__ import annotations

import json
import signal

import pytest

from tests.conftest import wait_until
from workqueue.models import WorkItem

pytestmark = pytest.mark.django_db(transaction=True)

PLAIN = {"DJANGO_SETTINGS_MODULE": "tests.plain_settings"}


def run_three_items_and_stop(start_ready_worker, worker_id: str, *args: str, env: dict[str, str]) -> str:
    proc = start_ready_worker(worker_id, "--queue", "test.noop", *args, env=env)
    WorkItem.objects.enqueue_many([("test.noop", f"{worker_id}-{i}") for i in range(3)])
    wait_until(lambda: WorkItem.objects.succeeded().count() == 3, timeout=30, message="the three items")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    return proc.output()


def test_runworker_on_a_site_without_logging_prints_its_start_signal_and_summary_lines(start_ready_worker):
    out = run_three_items_and_stop(start_ready_worker, "plain", env=PLAIN)
    lines = out.splitlines()
    assert sum("INFO worker plain serving test.noop (concurrency" in line for line in lines) == 1, out
    assert sum("SIGTERM received: finishing running items" in line for line in lines) == 1, out
    assert sum("INFO worker plain stopped: 3 processed (0 failed, 0 leases lost)" in line for line in lines) == 1, out


def test_runworker_verbosity_0_prints_nothing_on_a_quiet_run(start_ready_worker):
    out = run_three_items_and_stop(start_ready_worker, "quiet", "--verbosity", "0", env=PLAIN)
    assert out == ""


def test_runworker_verbosity_0_still_prints_warnings(start_ready_worker):
    proc = start_ready_worker("grumpy", "--queue", "test.fail", "-v", "0", env=PLAIN)
    WorkItem.objects.enqueue("test.fail", "bad")
    wait_until(lambda: WorkItem.objects.failed().exists(), timeout=30, message="the item to fail for good")
    proc.signal(signal.SIGTERM)
    assert proc.wait(30) == 0, proc.output()[-3000:]
    out = proc.output()
    assert out.count("WARNING <Item ") == 3 and "handler raised RuntimeError" in out, out
    assert "INFO" not in out and "SIGTERM received" not in out, out


def test_a_site_that_routes_the_loggers_gets_each_line_once_from_its_own_handler(start_ready_worker):
    out = run_three_items_and_stop(start_ready_worker, "routed", env={"TESTS_SITE_LOGGING": "1"})
    serving = [line for line in out.splitlines() if "worker routed serving test.noop" in line]
    # One line, in the demo LOGGING's format (which names the logger), not the command's.
    assert len(serving) == 1 and "INFO workqueue.worker: worker routed serving" in serving[0], out
    assert out.count("worker routed stopped: 3 processed") == 1, out


@pytest.mark.parametrize("name", ["recover", "reap"])
def test_sweeps_on_a_site_without_logging_print_their_summary_and_json_stays_clean(name, run_command):
    plain = run_command(name, env=PLAIN)
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.startswith(f"{name}: ") and plain.stdout.count("\n") == 1, plain.stdout
    as_json = run_command(name, "--json", env=PLAIN)
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["sweep"] == name
