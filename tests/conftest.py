"""Shared fixtures: real runworker subprocesses against the test database, and waiting helpers.

Tests that start processes or threads use ``@pytest.mark.django_db(transaction=True)``:
their writes are committed, so other connections and processes see them.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def wait_until(predicate, timeout: float = 30.0, interval: float = 0.05, message: str = "condition"):
    """Poll ``predicate`` until it returns truthy; fail the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout}s waiting for {message}")
        time.sleep(interval)


class WorkerProcess:
    """A ``manage.py runworker`` subprocess with its output captured to a file."""

    def __init__(self, args: list[str], env: dict[str, str]):
        self.args = args
        self.log = tempfile.NamedTemporaryFile(prefix="runworker-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def alive(self) -> bool:
        return self.proc.poll() is None

    def signal(self, signum: int) -> None:
        if self.alive():
            self.proc.send_signal(signum)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 30.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"runworker {self.args} did not exit in {timeout}s; output:\n{self.output()[-4000:]}")

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait(10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


@pytest.fixture
def db_url(transactional_db) -> str:
    from workqueue.testing import database_url

    return database_url()


@pytest.fixture
def subprocess_env(db_url) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=db_url,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONUNBUFFERED="1",
        WORKQUEUE_LOG_LEVEL="INFO",
    )
    return env


@pytest.fixture
def start_worker(subprocess_env):
    """Start ``runworker`` subprocesses: ``start_worker("--queue", "test.noop", ...)``."""
    started: list[WorkerProcess] = []

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        proc = WorkerProcess(["runworker", *args], {**subprocess_env, **(env or {})})
        started.append(proc)
        return proc

    yield start
    for proc in started:
        proc.close()


@pytest.fixture
def start_ready_worker(start_worker):
    """Start a runworker and wait until it has beaten once (its loop is running)."""
    from workqueue.models import Worker

    def start(worker_id: str, *args: str, **kwargs) -> WorkerProcess:
        proc = start_worker("--worker-id", worker_id, *args, **kwargs)
        wait_until(
            lambda: Worker.objects.filter(pk=worker_id).exists() or not proc.alive(),
            timeout=30,
            message=f"worker {worker_id} to start",
        )
        assert proc.alive(), proc.output()
        return proc

    return start


@pytest.fixture
def run_command(subprocess_env):
    """Run a manage.py command in a subprocess; return CompletedProcess (text)."""

    def run(*args: str, timeout: float = 60.0, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env={**subprocess_env, **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run
