"""The benchmark's harness, shared by every section: a throwaway database, `runworker` and
gunicorn processes, freezing them while a backlog is enqueued, and timed drains."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.db import connection, connections

from bench import cpu
from workqueue.testing import database_url

ROOT = Path(__file__).resolve().parent.parent


# -- the throwaway database --------------------------------------------------------------


def conninfo(settings_dict: dict, name: str) -> str:
    s = settings_dict
    parts = [f"dbname={name}", f"user={s.get('USER') or 'postgres'}"]
    host = s.get("HOST") or (s.get("OPTIONS") or {}).get("host")
    if host:
        parts.append(f"host={host}")
    if s.get("PORT"):
        parts.append(f"port={s['PORT']}")
    if s.get("PASSWORD"):
        parts.append(f"password={s['PASSWORD']}")
    return " ".join(parts)


class ThrowawayDatabase:
    """CREATE a fresh database, point Django at it, migrate; DROP it again afterwards."""

    def __init__(self):
        self.original = dict(connection.settings_dict)
        self.name = f"bench_{uuid.uuid4().hex[:10]}"
        self.admin = conninfo(self.original, "postgres")

    def __enter__(self):
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        connections.close_all()
        connection.settings_dict["NAME"] = self.name
        call_command("migrate", verbosity=0, interactive=False)
        self.conninfo = conninfo(self.original, self.name)
        self.url = database_url()
        return self

    def __exit__(self, *exc):
        connections.close_all()
        connection.settings_dict["NAME"] = self.original["NAME"]
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [self.name],
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')


# -- processes ---------------------------------------------------------------------------


def rss_mb(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return 0.0


# A throwaway key for the benchmark's own processes (DEBUG off needs one).
BENCH_SECRET_KEY = os.environ.get("SECRET_KEY") or secrets.token_urlsafe(50)


class Workers:
    """Some `runworker` processes, started and waited for until they report in."""

    def __init__(self, db_url: str, count: int, args: list[str], env: dict | None = None):
        # Every connection the workers open carries this application_name (libpq reads
        # PGAPPNAME), so their backends can be found in pg_stat_activity for the CPU figures.
        self.app_name = cpu.app_name("bench-worker")
        self.env = dict(
            os.environ,
            PGAPPNAME=self.app_name,
            DATABASE_URL=db_url,
            DEBUG="0",  # DEBUG logs every statement and its parameters: not what production runs
            SECRET_KEY=BENCH_SECRET_KEY,  # the settings refuse DEBUG off without one
            PYTHONUNBUFFERED="1",
            WORKQUEUE_LOG_LEVEL="WARNING",
            **(env or {}),
        )
        self.ids = [f"bench-{uuid.uuid4().hex[:6]}-{n}" for n in range(count)]
        self.logs = [tempfile.TemporaryFile() for _ in self.ids]  # noqa: SIM115 - closed in stop()
        self.procs = [
            subprocess.Popen(
                [sys.executable, str(ROOT / "manage.py"), "runworker", "--worker-id", wid, *args],
                cwd=ROOT,
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
            for wid, log in zip(self.ids, self.logs, strict=True)
        ]

    def wait_ready(self, timeout: float = 30.0) -> None:
        from workqueue.models import Worker

        deadline = time.monotonic() + timeout
        while Worker.objects.filter(id__in=self.ids, state="running").count() < len(self.ids):
            if time.monotonic() > deadline or any(p.poll() is not None for p in self.procs):
                raise RuntimeError("runworker did not start:\n" + self.output())
            time.sleep(0.05)
        time.sleep(0.3)  # let each settle into its first idle wait

    def meter(self) -> cpu.Meter:
        """A CPU meter over these processes and their backends (start it, then stop it before stop())."""
        return cpu.Meter([p.pid for p in self.procs], cpu.backends_by_app_name(connection.cursor, self.app_name))

    def rss(self) -> list[float]:
        return [rss_mb(p.pid) for p in self.procs]

    def output(self) -> str:
        out = []
        for log in self.logs:
            log.seek(0)
            out.append(log.read().decode(errors="replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        for log in self.logs:
            log.close()


def unsettled(queue: str) -> bool:
    """Whether ``queue`` has anything left to run, asked so that the two partial indexes the
    claim itself reads answer it (queued: work_items_claim_idx; held: work_items_held_idx).
    ``unsettled().exists()`` cost 12.5 ms a call at the end of a 20,000-item drain (it walks an
    index of every key), every 20 ms, on the 2 cores the workers and the server share."""
    from workqueue.models import WorkItem

    mine = WorkItem.objects.filter(queue=queue)
    return (
        mine.filter(state="queued", wire=False).exists()
        or mine.filter(state__in=["starting", "active", "stopping"]).exists()
    )  # the benchmark's queues carry no wire items


#: How often a timed drain asks whether it is done (bench-peers asks every system as often):
#: the end is seen up to this late: a fraction of a percent of a drain of 50,000 items.
DRAIN_POLL = 0.01


def wait_drained(queue: str, timeout: float, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while unsettled(queue):
        if time.monotonic() > deadline:
            raise RuntimeError(f"queue {queue} did not drain in {timeout:.0f}s")
        time.sleep(every)


def reset() -> None:
    from operations.models import Operation
    from workqueue.models import Schedule

    # The demo's own schedules stay paused (a worker's sync keeps a pause), so they never
    # enqueue into a queue being measured; the schedules section makes its own.
    Schedule.objects.exclude(source="settings").delete()
    Schedule.objects.update(enabled=False)
    with connection.cursor() as cur:
        cur.execute(f'TRUNCATE work_items, "{Operation._meta.db_table}"')
        cur.execute("VACUUM ANALYZE work_items")
    checkpoint()


def checkpoint() -> None:
    """Start every measurement just after a checkpoint, so none falls inside it (the next is
    checkpoint_timeout away) and a run's first write to each page costs the same in every run
    (the full-page image a write after a checkpoint logs): one source of swing fewer. Needs
    superuser or pg_checkpoint; without, the run goes on as it is."""
    try:
        with connection.cursor() as cur:
            cur.execute("CHECKPOINT")
    except Exception:
        pass


@contextmanager
def frozen(pids: list[int]):
    """Stop these processes (SIGSTOP) for the block and let them go on (SIGCONT) after it, however
    it ends: what is enqueued meanwhile waits for them, its NOTIFYs in their sockets, so a drain
    can start from a backlog that is all there."""
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)


def drain_once(
    db: ThrowawayDatabase,
    count: int,
    items: int,
    batch: int,
    concurrency: int,
    *,
    groups: int = 0,
    site: bool = False,
    args: tuple[str, ...] = (),
    queue: str = "demo.noop",
    metadata: dict | None = None,
) -> tuple[float, cpu.Cpu]:
    """Start ``count`` runworker processes, let them go idle, and drain ``items`` no-op items
    (spread over ``groups`` groups when given) from a backlog. The workers serve ``demo.noop``
    only, or with ``site`` every registered queue (plain ``runworker``, as a site runs it). They
    are frozen while
    the items are enqueued (bench.harness.frozen), then thawed, and the time runs from the
    thaw until nothing is left, as the raw-SQL ceiling's does from its start signal. Return
    (items/s, CPU the workers and their backends spent in that time)."""
    from workqueue.models import WorkItem

    queues = [] if site else ["--queue", queue]
    workers = Workers(db.url, count, [*queues, "--batch", str(batch), "--concurrency", str(concurrency), *args])
    try:
        workers.wait_ready()
        pids = [p.pid for p in workers.procs]
        cpu.wait_quiet(pids)  # start-up done: measure the drain only
        with frozen(pids):
            tag = uuid.uuid4().hex[:6]
            for base in range(0, items, 10_000):
                n = min(10_000, items - base)
                if groups:
                    WorkItem.objects.enqueue_many(
                        [
                            {"queue": "demo.noop", "key": f"d-{tag}-{base + i}", "group": f"g{(base + i) % groups}"}
                            for i in range(n)
                        ]
                    )
                elif metadata:
                    WorkItem.objects.enqueue_many(
                        [{"queue": queue, "key": f"d-{tag}-{base + i}", "metadata": metadata} for i in range(n)]
                    )
                else:
                    WorkItem.objects.enqueue_many([(queue, f"d-{tag}-{base + i}") for i in range(n)])
            meter = workers.meter().start()
        started = time.perf_counter()
        wait_drained(queue, timeout=max(60, items / 500), every=DRAIN_POLL)
        rate = items / (time.perf_counter() - started)
        return rate, meter.stop()
    finally:
        workers.stop()


def in_threads(n: int, fn, threads: int) -> None:
    """Call fn(i) for i in range(n) from ``threads`` threads, each on its own connection (as web
    requests starting operations would)."""
    errors: list[BaseException] = []

    def part(offset: int) -> None:
        try:
            for i in range(offset, n, threads):
                fn(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    pool = [threading.Thread(target=part, args=(k,)) for k in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    if errors:
        raise errors[0]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def children(pid: int) -> list[int]:
    """The live child processes of ``pid`` (gunicorn's workers), from /proc."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        if int(text[text.rindex(")") + 2 :].split()[1]) == pid:  # field 4: the parent's pid
            found.append(int(stat.parent.name))
    return found


class Gunicorn:
    """A gunicorn (gthread, 2 workers × 8 threads) serving ``app`` on a free port, until stop()."""

    def __init__(self, app: str, env: dict):
        self.port = free_port()
        self.app_name = cpu.app_name("bench-wire")
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                app,
                "--worker-class",
                "gthread",
                "--workers",
                "2",
                "--threads",
                "8",
                "--bind",
                f"127.0.0.1:{self.port}",
                "--log-level",
                "warning",
            ],
            cwd=ROOT,
            env=dict(os.environ, PGAPPNAME=self.app_name, **env),
        )

    def wait_up(self, url: str, headers: dict) -> None:
        import httpx

        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(url, headers=headers, timeout=1).status_code < 500:
                    return
            except (httpx.HTTPError, OSError):
                pass
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError(f"gunicorn ({self.proc.args[3]}) did not come up")
            time.sleep(0.1)

    def meter(self) -> cpu.Meter:
        """CPU of the master and its workers, and of their backends."""
        return cpu.Meter(
            [self.proc.pid, *children(self.proc.pid)], cpu.backends_by_app_name(connection.cursor, self.app_name)
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def drain_one_queue(
    db: ThrowawayDatabase, queue: str, items: int, args: list[str], *, metadata=None, env=None
) -> float:
    """Items/s for one runworker process draining ``items`` fresh items of ``queue``."""
    from workqueue.models import WorkItem

    reset()
    workers = Workers(db.url, 1, ["--queue", queue, *args], env=env)
    try:
        workers.wait_ready()
        tag = uuid.uuid4().hex[:6]
        started = time.perf_counter()
        for base in range(0, items, 10_000):
            WorkItem.objects.enqueue_many(
                [
                    {"queue": queue, "key": f"{tag}-{base + i}", "metadata": metadata or {}}
                    for i in range(min(10_000, items - base))
                ]
            )
        wait_drained(queue, timeout=max(120, items / 20))
        return items / (time.perf_counter() - started)
    finally:
        workers.stop()
