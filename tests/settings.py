"""Settings for the test suite (and the runworker subprocesses the tests start).

The demo project's settings plus a test app with its own queues and handlers
(tests/testapp/handlers.py). Subprocesses get DJANGO_SETTINGS_MODULE=tests.settings and a
DATABASE_URL naming the test database, so they see exactly what the test wrote.

The subprocesses run as on a production site (tests/conftest.py ``subprocess_env``): DEBUG off,
CONN_MAX_AGE 0, an explicit SECRET_KEY, and TESTS_SITE_LOGGING=0, which drops the demo's
LOGGING, so what a command prints there is what it prints on a site that configured none.
"""

import os

# The test suite's own key (never a production one), so the suite and its subprocesses start
# with DEBUG off too: project.settings refuses to start without a key when DEBUG is off.
os.environ.setdefault("SECRET_KEY", "tests-only-secret-key-" + "x" * 40)

from project.settings import *  # noqa: F403
from project.settings import DATABASES, INSTALLED_APPS, OPERATIONS, WORKQUEUE

INSTALLED_APPS = [*INSTALLED_APPS, "tests.testapp.apps.TestAppConfig"]

if os.environ.get("TESTS_SITE_LOGGING", "1") == "0":
    LOGGING = {}  # Django's defaults only: nothing routes the workqueue/operations loggers

WORKQUEUE = {
    **WORKQUEUE,
    "QUEUES": {
        **WORKQUEUE["QUEUES"],
        "test.noop": {},
        # the process pool and worker-enforced limits (tests/workqueue/test_process_pool.py)
        "test.cpu": {},
        "test.cpu.threads": {},
        "test.proc.suicide": {"max_attempts": 2, "retry_delay": 0, "retry_backoff": 1},
        "test.proc.limits": {"max_attempts": 2, "retry_delay": 0, "retry_backoff": 1, "lease": 3},
        "test.thread.limits": {"max_attempts": 2, "retry_delay": 0, "retry_backoff": 1, "lease": 3},
        "test.proc.memory": {},
        "test.async.limits": {"max_attempts": 2, "retry_delay": 0, "retry_backoff": 1},
        "test.record": {"lease": 5},
        "test.batched": {"lease": 5},
        "test.fail": {"max_attempts": 3, "retry_delay": 0, "retry_backoff": 1},
        "test.hang": {"lease": 2, "max_attempts": 3},
        "test.crash": {"lease": 2, "max_attempts": 2},
        "test.capped": {"max_running": 3, "lease": 5},
        "test.other": {},
        "test.short": {"lease": 1.5},
        "test.stall": {"lease": 3, "stall": 1.0},
        "test.timeout": {"lease": 3, "hard_timeout": 1},
        "test.wire": {"over_wire": True, "max_attempts": 3},
        "test.wire.capped": {"over_wire": True, "max_running": 2},
        "test.wire.once": {"over_wire": True, "max_attempts": 1},
        "test.holdonce": {"lease": 2, "max_attempts": 3},
        # why a run was stopped (tests/workqueue/test_stop_reasons.py)
        "test.why": {"lease": 1.5, "max_attempts": 3},
        "test.why.stall": {"lease": 3, "stall": 1.0},
        "test.why.timeout": {"lease": 3, "hard_timeout": 1},
        "test.flaky": {"lease": 2, "retry_delay": 0.2, "retry_backoff": 1, "max_attempts": 10},
        # worker hardening (tests/workqueue/test_worker_hardening.py)
        "test.reclaim": {"lease": 2, "max_attempts": 3},
        "test.suicide": {"max_attempts": 2, "retry_delay": 0, "retry_backoff": 1},
        "test.selfsettle": {"lease": 1.5},
        "test.settled": {"lease": 1.5},
        "test.interrupt": {"max_attempts": 1},
        # every way a run ends gives its slot back (tests/workqueue/test_worker_capacity.py)
        "test.endings": {"lease": 2, "max_attempts": 3, "retry_delay": 3600, "retry_backoff": 1},
        # async def handlers (tests/workqueue/test_async_worker.py)
        "test.async.short": {"lease": 2},
        "test.async.holdonce": {"lease": 2, "max_attempts": 3},
        "test.async.block": {"lease": 2, "stall": 1.0, "max_attempts": 3},
        "test.async.orm": {"lease": 5},
        # flow control (tests/workqueue/test_flow_control.py)
        "test.flow": {"lease": 5},
        "test.grouped": {"lease": 5, "max_running_per_group": 2},
        "test.grouped.lapse": {"lease": 2, "max_running_per_group": 2, "max_attempts": 5},
        "test.rated": {"lease": 5, "rate": "20/s"},
        "test.wire.flow": {"over_wire": True, "max_attempts": 3},
    },
    "POLL_INTERVAL": 1.0,
    "WORKER_HEARTBEAT": 1.0,
    # The demo's schedules stay out of the tests; tests/workqueue/test_schedules.py makes its own.
    "SCHEDULES": {},
    "SHUTDOWN_GRACE": 5.0,
}

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Operations under test: a short lease (a killed worker's operation comes back in seconds),
# flushes well inside it, retries at once, and recover treating 1 s as "stranded".
OPERATIONS = {
    **OPERATIONS,
    "LEASE": 3,
    "PROGRESS_INTERVAL": 0.5,
    "RETRY_DELAY": 0,
    "RECOVER_AFTER": 1,
    "WATCHER_POLL": 1.0,
}
# A test's overrides for a server process it starts (tests/operations/test_watch_threads.py), as JSON.
if os.environ.get("TESTS_OPERATIONS"):
    import json

    OPERATIONS.update(json.loads(os.environ["TESTS_OPERATIONS"]))

# The django.tasks backend under test: quick retries so retry tests finish in seconds. A second
# alias ("other", one attempt, its own owner) proves results and runs keep the enqueuing backend;
# both put Django queue "default" on workqueue queue "tasks.default".
TASKS = {
    "default": {
        "BACKEND": "operations.tasks.backend.OperationsBackend",
        "QUEUES": ["default", "emails", "queue_1"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 0.2, "RETRY_BACKOFF": 1},
    },
    "other": {
        "BACKEND": "operations.tasks.backend.OperationsBackend",
        "QUEUES": ["default", "queue_1"],
        "OPTIONS": {"MAX_ATTEMPTS": 1, "OWNER": "other-owner"},
    },
}

# `make test-pgbouncer` (scripts/pgbouncer_test.py) sends DATABASE_URL through PgBouncer in
# transaction mode and sets what docs/performance.md tells a site behind such a pooler to set:
# LISTEN on a direct connection, no prepared statements (PgBouncer < 1.21), and no
# server-side cursors (Django's own advice for transaction pooling).
if os.environ.get("LISTEN_DATABASE_URL"):
    WORKQUEUE["LISTEN_DATABASE_URL"] = os.environ["LISTEN_DATABASE_URL"]
if os.environ.get("TRANSACTION_POOLER") == "1":
    WORKQUEUE["PREPARED_STATEMENTS"] = False
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
