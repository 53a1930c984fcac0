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
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent

# The browser tests (tests/browser/) need Playwright and Chromium: `make test-browser` installs
# both and sets WQ_BROWSER_TESTS=1; any other run leaves them out of the collection.
collect_ignore = [] if os.environ.get("WQ_BROWSER_TESTS") == "1" else ["browser"]


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


@contextmanager
def statements_run():
    """Collect the SQL text of every statement run on the connection, as handed to execute().

    Not CaptureQueriesContext: Django 5.2 records no SQL text for statements run on a
    server-side-binding cursor (workqueue.sql), so a check over it would pass vacuously there.
    """
    texts: list[str] = []

    def record(execute, sql, params, many, context):
        texts.append(str(sql))
        return execute(sql, params, many, context)

    from django.db import connection

    with connection.execute_wrapper(record):
        yield texts


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


def _stray_threads(before: set[threading.Thread]) -> list[threading.Thread]:
    from django.test.testcases import LiveServerThread

    return [
        t
        for t in threading.enumerate()
        if t not in before
        and t.is_alive()
        and not isinstance(t, LiveServerThread)  # session-wide by design
        # Worker threads of executor pools (asgiref's sync_to_async, asyncio's default executor):
        # the pool owns and reuses them across tests; they run none of our code between calls.
        and not t.name.startswith(("ThreadPoolExecutor-", "asyncio_"))
    ]


@pytest.fixture(autouse=True)
def no_thread_outlives_its_test():
    """Fail a test that leaves a thread running (a keeper, a watcher, a listener, its own helper).

    The process-wide listener and watcher are closed first: a test that started them is done
    with them, and the next one that needs them starts them again.
    """
    before = set(threading.enumerate())
    yield
    from operations import watcher
    from workqueue import listener

    if watcher._shared is not None and not watcher._shared._closed:
        watcher._shared.close()
    if listener._shared is not None and listener._shared._thread not in before:
        listener._shared.stop()
    deadline = time.monotonic() + 10
    while _stray_threads(before) and time.monotonic() < deadline:
        time.sleep(0.05)
    stray = _stray_threads(before)
    if stray:
        pytest.fail(f"threads outlived the test: {', '.join(t.name for t in stray)}")


# What every process the tests start runs with: production-like settings (see tests/settings.py).
PRODUCTION_LIKE = {
    "DEBUG": "false",
    "CONN_MAX_AGE": "0",
    "TESTS_SITE_LOGGING": "0",
}


@pytest.fixture
def subprocess_env(db_url) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("WORKQUEUE_LOG_LEVEL", None)
    env.update(
        PRODUCTION_LIKE,
        # The test process's own key: sessions and signed values the test makes must hold there.
        SECRET_KEY=settings.SECRET_KEY,
        DATABASE_URL=db_url,
        DJANGO_SETTINGS_MODULE="tests.settings",
        PYTHONUNBUFFERED="1",
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
            timeout=90,
            message=f"worker {worker_id} to start",
        )
        assert proc.alive(), proc.output()
        return proc

    return start


@pytest.fixture
def spawn_command(subprocess_env):
    """Start a manage.py command (``subprocess.Popen``, text, output piped unless told otherwise).

    Whatever is still running when the test ends, passed or failed, is killed and reaped.
    """
    started: list[subprocess.Popen] = []

    def spawn(*args: str, env: dict[str, str] | None = None, **kwargs) -> subprocess.Popen:
        kwargs.setdefault("stdout", subprocess.PIPE)
        kwargs.setdefault("stderr", subprocess.PIPE)
        proc = subprocess.Popen(
            [sys.executable, str(ROOT / "manage.py"), *args],
            cwd=ROOT,
            env={**subprocess_env, **(env or {})},
            text=True,
            **kwargs,
        )
        started.append(proc)
        return proc

    yield spawn
    for proc in started:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


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


@pytest.fixture(scope="session")
def otel_providers():
    """The OpenTelemetry SDK's in-memory span exporter and metric reader, installed once as the
    process's global providers (OpenTelemetry allows setting them only once)."""
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    reader = InMemoryMetricReader()
    metrics.set_meter_provider(MeterProvider(metric_readers=[reader]))
    from workqueue import tracing

    tracing._checked[0] = 0.0  # look again at the next run, not up to a second later
    return exporter, reader


@pytest.fixture
def otel(otel_providers):
    """(span exporter, metric reader), the exporter emptied for this test."""
    exporter, reader = otel_providers
    exporter.clear()
    reader.get_metrics_data()  # what earlier tests recorded is collected (counters stay cumulative)
    return exporter, reader


class Gunicorn:
    """``gunicorn project.wsgi`` (gthread) on a free port against the test database: the server
    the README tells a site to run, as a real process."""

    def __init__(self, env: dict[str, str], *, threads: int, workers: int = 1):
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        self.log = tempfile.NamedTemporaryFile(prefix="gunicorn-", suffix=".log", delete=False)  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "project.wsgi:application",
                "--worker-class",
                "gthread",
                "--workers",
                str(workers),
                "--threads",
                str(threads),
                "--bind",
                f"127.0.0.1:{port}",
                "--timeout",
                "120",
                "--graceful-timeout",
                "5",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def output(self) -> str:
        return Path(self.log.name).read_text(errors="replace")

    def wait_up(self) -> None:
        import httpx

        def answers() -> bool:
            assert self.proc.poll() is None, self.output()
            try:
                httpx.get(self.url + "/admin/login/", timeout=2)
                return True
            except httpx.TransportError:
                return False

        wait_until(answers, timeout=60, message="gunicorn to answer")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        self.log.close()
        try:
            os.unlink(self.log.name)
        except OSError:
            pass


@pytest.fixture
def gunicorn(subprocess_env):
    """Start gunicorn (gthread) processes: ``gunicorn(threads=16, env={...})`` -> Gunicorn, up."""
    started: list[Gunicorn] = []

    def start(*, threads: int = 16, workers: int = 1, env: dict[str, str] | None = None) -> Gunicorn:
        server = Gunicorn({**subprocess_env, **(env or {})}, threads=threads, workers=workers)
        started.append(server)
        server.wait_up()
        return server

    yield start
    for server in started:
        server.stop()
