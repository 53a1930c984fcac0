"""Run the benchmark sections and print one table (figures, and each one's ratio to raw SQL)."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from django.core.management import call_command
from django.db import connection, connections, transaction

from bench import cpu, rawsql
from bench.history import bench_history
from bench.indexes import bench_indexes
from workqueue.testing import database_url

ROOT = Path(__file__).resolve().parent.parent


@dataclass
class Options:
    quick: bool = False
    runs: int = 3
    workers: tuple[int, ...] = (1, 2)
    batch: int = 200
    concurrency: int = 4
    drain_items: int = 50_000
    enqueue_single: int = 4_000
    enqueue_bulk: int = 100_000
    latency_items: int = 1_000
    operations: int = 3_000
    batch_children: int = 10_000
    tasks: int = 3_000
    wire_items: int = 2_000
    wire_clients: int = 4
    starters: int = 4  # threads starting operations / enqueuing tasks (as concurrent requests)
    rss_items: int = 200_000
    schedules: int = 1_000
    io_items: int = 2_000
    io_seconds: float = 0.05
    history_stopped: int = 1_000_000  # the history section's settled rows (bench/history.py)
    history_scheduled: int = 100_000  # ... and its rows scheduled a day ahead
    sections: tuple[str, ...] = (
        "enqueue",
        "drain",
        "latency",
        "operations",
        "batch",
        "tasks",
        "wire",
        "schedules",
        "rss",
        "io",
        "tracing",
        "history",
        "indexes",
    )
    log: object = print

    @classmethod
    def quick_mode(cls, **kw) -> Options:
        return cls(
            quick=True,
            runs=1,
            batch=50,
            # Enough that every process's and backend's CPU spans several 10 ms ticks (the
            # suite asserts each is read as more than zero).
            drain_items=5_000,
            enqueue_single=200,
            enqueue_bulk=2_000,
            latency_items=20,
            operations=100,
            batch_children=100,
            tasks=100,
            wire_items=40,
            rss_items=2_000,
            schedules=50,
            io_items=100,
            history_stopped=5_000,
            history_scheduled=500,
            **kw,
        )


@dataclass
class Row:
    name: str
    value: float
    unit: str
    ceiling: float | None = None
    note: str = ""
    # CPU per item in µs (bench/cpu.py): the measured processes' and their PostgreSQL
    # backends' (None: not measured, or the server is not local), ours and the ceiling's.
    spent: cpu.Cpu | None = None
    spent_items: int = 0
    raw_spent: cpu.Cpu | None = None
    raw_spent_items: int = 0
    # Where ours and the ceiling ran in alternation, run by run: the median of each run's ratio
    # to the ceiling run beside it (a drift in the machine's speed moves both alike).
    paired_ratio: float | None = None

    def cpu_us(self, raw: bool = False) -> tuple[float | None, float | None]:
        spent, items = (self.raw_spent, self.raw_spent_items) if raw else (self.spent, self.spent_items)
        if spent is None:
            return None, None
        return spent.per_item_us(items)

    @property
    def ratio(self) -> float | None:
        if self.paired_ratio is not None:
            return self.paired_ratio
        return self.value / self.ceiling if self.ceiling else None


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    meta: dict = field(default_factory=dict)

    def add(self, *args, **kwargs) -> Row:
        row = Row(*args, **kwargs)
        self.rows.append(row)
        return row

    def table(self) -> str:
        head = (
            f"{'measure':<46} {'value':>12}  {'unit':<10} {'raw SQL':>12}  {'ratio':>6}  "
            f"{'CPU µs/item: client':>19} {'pg':>6} {'raw client':>10} {'raw pg':>6}  note"
        )
        lines = [head, "-" * len(head)]
        for r in self.rows:
            ceiling = f"{r.ceiling:,.0f}" if r.ceiling else ""
            ratio = f"{r.ratio:.2f}" if r.ratio is not None else ""
            value = f"{r.value:,.1f}" if r.value < 100 else f"{r.value:,.0f}"
            if r.unit == "ratio":
                value = f"{r.value:.2f}"
            cells = []
            for raw, spent in ((False, r.spent), (True, r.raw_spent)):
                client, server = r.cpu_us(raw)
                cells += ["", ""] if spent is None else [cpu.fmt_us(client), cpu.fmt_us(server)]
            lines.append(
                f"{r.name:<46} {value:>12}  {r.unit:<10} {ceiling:>12}  {ratio:>6}  "
                f"{cells[0]:>19} {cells[1]:>6} {cells[2]:>10} {cells[3]:>6}  {r.note}"
            )
        if any(r.spent is not None for r in self.rows):
            lines.append(
                "CPU µs/item: user+sys of the worker processes (client) and of their PostgreSQL backends (pg), "
                "per item, over the measured window; n/a: the server is not on this machine"
            )
        if self.meta.get("quick"):
            lines.append("(--quick: too few items for these figures to mean anything; it only proves the command runs)")
        return "\n".join(lines)

    def as_dict(self) -> dict:
        return {
            "meta": self.meta,
            "results": [
                {
                    "name": r.name,
                    "value": r.value,
                    "unit": r.unit,
                    "raw_sql": r.ceiling,
                    "ratio": r.ratio,
                    "note": r.note,
                    **_cpu_dict(r),
                }
                for r in self.rows
            ],
        }


def _cpu_dict(r: Row) -> dict:
    """The JSON's CPU fields: µs per item (null: not measured, or the server is not local)."""
    out = {}
    for prefix, raw, spent in (("cpu", False, r.spent), ("raw_sql_cpu", True, r.raw_spent)):
        if spent is not None:
            client, server = r.cpu_us(raw)
            out[f"{prefix}_client_us_per_item"] = client
            out[f"{prefix}_postgres_us_per_item"] = server
    return out


# -- the throwaway database --------------------------------------------------------------


def _conninfo(settings_dict: dict, name: str) -> str:
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
        self.admin = _conninfo(self.original, "postgres")

    def __enter__(self):
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        connections.close_all()
        connection.settings_dict["NAME"] = self.name
        call_command("migrate", verbosity=0, interactive=False)
        self.conninfo = _conninfo(self.original, self.name)
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


def _rss_mb(pid: int) -> float:
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
        return [_rss_mb(p.pid) for p in self.procs]

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


def _unsettled(queue: str) -> bool:
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


def _wait_drained(queue: str, timeout: float, every: float = 0.02) -> None:
    deadline = time.monotonic() + timeout
    while _unsettled(queue):
        if time.monotonic() > deadline:
            raise RuntimeError(f"queue {queue} did not drain in {timeout:.0f}s")
        time.sleep(every)


def _reset() -> None:
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


# -- sections ----------------------------------------------------------------------------


def bench_enqueue(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    singles, bulks = [], []
    for _ in range(opts.runs):
        _reset()
        tag = uuid.uuid4().hex[:6]
        started = time.perf_counter()
        for i in range(opts.enqueue_single):
            WorkItem.objects.enqueue("demo.noop", f"s-{tag}-{i}")
        singles.append(opts.enqueue_single / (time.perf_counter() - started))
        _reset()
        started = time.perf_counter()
        for base in range(0, opts.enqueue_bulk, 1000):
            WorkItem.objects.enqueue_many(
                [("demo.noop", f"b-{tag}-{base + i}") for i in range(min(1000, opts.enqueue_bulk - base))]
            )
        bulks.append(opts.enqueue_bulk / (time.perf_counter() - started))
    _reset()
    raw_single = rawsql.insert_single(db.conninfo, opts.enqueue_single, "raw.insert")
    _reset()
    raw_bulk = rawsql.insert_bulk(db.conninfo, opts.enqueue_bulk, "raw.insert")
    report.add("enqueue, one item per statement+commit", statistics.median(singles), "items/s", raw_single)
    report.add("enqueue_many, 1,000 items per statement", statistics.median(bulks), "items/s", raw_bulk)


#: Flow-control drain figures: demo.noop under a runtime override (workqueue.controls), items
#: spread over FLOW_GROUPS groups. The per-group cap leaves room for every item two workers
#: hold at once, and the rate is far above what they reach: both measure what the checks
#: cost, not a limit binding.
FLOW_GROUPS = 10
FLOW_CASES = (
    ("max_running_per_group=100, 10 groups", {"max_running_per_group": 100}),
    ("rate=100000/s (not binding), 10 groups", {"rate": "100000/s"}),
)


def bench_drain(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue import controls
    from workqueue.models import WorkItem

    raw_by_count = {}
    for count in opts.workers:
        rates, raw_rates, site_rates = [], [], []
        spent, raw_spent, raw_items, site_spent = cpu.Cpu(0.0, 0.0), cpu.Cpu(0.0, 0.0), 0, cpu.Cpu(0.0, 0.0)
        for _ in range(opts.runs):
            _reset()
            rate, run_spent = drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency)
            rates.append(rate)
            spent += run_spent
            # The worker a site runs: plain runworker, every queue the demo registers (sync,
            # async def, operations, the @task backends', schedules'), the same backlog.
            _reset()
            site_rate, run_site = drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency, site=True)
            site_rates.append(site_rate)
            site_spent += run_site
            _reset()
            WorkItem.objects.enqueue_many([("raw.drain", f"r-{i}") for i in range(opts.drain_items)])
            n, raw_rate, run_raw = rawsql.drain(db.conninfo, "raw.drain", connections=count, batch=opts.batch)
            raw_rates.append(raw_rate)
            raw_spent += run_raw
            raw_items += n
        raw_by_count[count] = statistics.median(raw_rates)
        paired = statistics.median(r / raw for r, raw in zip(rates, raw_rates, strict=True))
        report.add(
            f"drain, {count} runworker process{'es' if count > 1 else ''} (no-op)",
            statistics.median(rates),
            "items/s",
            raw_by_count[count],
            f"batch {opts.batch}, concurrency {opts.concurrency}; ratio: median of {opts.runs} paired runs",
            spent=spent,
            spent_items=opts.drain_items * opts.runs,
            raw_spent=raw_spent,
            raw_spent_items=raw_items,
            paired_ratio=paired,
        )
        report.add(
            f"drain, {count} plain runworker{'s' if count > 1 else ''} (every queue, no-op)",
            statistics.median(site_rates),
            "items/s",
            statistics.median(rates),
            "no --queue: the demo's whole registry; ratio: to the single-queue drain above, median of paired runs",
            spent=site_spent,
            spent_items=opts.drain_items * opts.runs,
            paired_ratio=statistics.median(r / one for r, one in zip(site_rates, rates, strict=True)),
        )
    count = max(opts.workers)
    for label, limits in FLOW_CASES:
        controls.write("demo.noop", limits=limits, by="benchqueue")
        try:
            rates = []
            for _ in range(opts.runs):
                _reset()
                rates.append(
                    drain_once(db, count, opts.drain_items, opts.batch, opts.concurrency, groups=FLOW_GROUPS)[0]
                )
        finally:
            controls.write("demo.noop", clear=list(limits), by="benchqueue")
        report.add(
            f"drain, {count} runworker processes, {label}",
            statistics.median(rates),
            "items/s",
            raw_by_count[count],
            "a runtime override; ratio to the plain raw-SQL drain",
        )


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
) -> tuple[float, cpu.Cpu]:
    """Start ``count`` runworker processes, let them go idle, and drain ``items`` no-op items
    (spread over ``groups`` groups when given) from a backlog. The workers serve ``demo.noop``
    only, or with ``site`` every registered queue (plain ``runworker``, as a site runs it). They
    are frozen while
    the items are enqueued (bench.runner.frozen), then thawed, and the time runs from the
    thaw until nothing is left, as the raw-SQL ceiling's does from its start signal. Return
    (items/s, CPU the workers and their backends spent in that time)."""
    from workqueue.models import WorkItem

    queues = [] if site else ["--queue", "demo.noop"]
    workers = Workers(db.url, count, [*queues, "--batch", str(batch), "--concurrency", str(concurrency)])
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
                else:
                    WorkItem.objects.enqueue_many([("demo.noop", f"d-{tag}-{base + i}") for i in range(n)])
            meter = workers.meter().start()
        started = time.perf_counter()
        _wait_drained("demo.noop", timeout=max(60, items / 500), every=DRAIN_POLL)
        rate = items / (time.perf_counter() - started)
        return rate, meter.stop()
    finally:
        workers.stop()


def bench_latency(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    _reset()
    with tempfile.NamedTemporaryFile("r", suffix=".lat", delete=False) as probe:
        path = probe.name
    workers = Workers(db.url, 1, ["--queue", "demo.latency", "--poll", "30"], env={"BENCH_LATENCY_FILE": path})
    samples: list[float] = []
    after_commit: list[float] = []  # the same, less the enqueue's own time (its commit included)
    try:
        workers.wait_ready()
        with open(path) as feed:
            for i in range(opts.latency_items):
                t0 = time.time()
                WorkItem.objects.enqueue("demo.latency", f"lat-{i}", metadata={"t0": f"{t0:.6f}"})
                enqueued = time.time() - t0
                deadline = time.monotonic() + 10
                line = ""
                while not line.endswith("\n"):
                    line += feed.readline()
                    if not line.endswith("\n"):
                        if time.monotonic() > deadline:
                            raise RuntimeError("no wake-up within 10 s:\n" + workers.output())
                        time.sleep(0.0002)
                samples.append(float(line.split()[1]) * 1000)
                after_commit.append(samples[-1] - enqueued * 1000)
                time.sleep(0.005)
    finally:
        workers.stop()
        os.unlink(path)
    samples.sort()
    after_commit.sort()

    def pct(values: list[float], p: float) -> float:
        return values[min(len(values) - 1, round(p / 100 * (len(values) - 1)))]

    note = f"{len(samples)} items on an idle queue, --poll 30 (NOTIFY wake-up); from the enqueue call"
    report.add("latency enqueue → handler start, p50", pct(samples, 50), "ms", note=note)
    report.add("latency enqueue → handler start, p95", pct(samples, 95), "ms")
    report.add("latency enqueue → handler start, p99", pct(samples, 99), "ms")
    note = "the same, from the enqueue's return (its durable commit done): the worker's own part"
    report.add("latency committed → handler start, p50", pct(after_commit, 50), "ms", note=note)
    report.add("latency committed → handler start, p99", pct(after_commit, 99), "ms")


def _in_threads(n: int, fn, threads: int) -> None:
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


def _life(
    opts: Options, db: ThrowawayDatabase, n: int, queue_args: list[str], start_one, done_count
) -> tuple[float, float, cpu.Cpu]:
    """(done/s, started/s, CPU of the 2 workers and their backends) over opts.runs; the
    starters' CPU (threads in this process) is not in it."""
    rates, start_rates = [], []
    spent = cpu.Cpu(0.0, 0.0)
    for _ in range(opts.runs):
        _reset()
        workers = Workers(db.url, 2, [*queue_args, "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)])
        try:
            workers.wait_ready()
            meter = workers.meter().start()
            started = time.perf_counter()
            _in_threads(n, start_one, opts.starters)
            start_rates.append(n / (time.perf_counter() - started))
            deadline = time.monotonic() + max(60, n / 100)
            while done_count() < n:
                if time.monotonic() > deadline:
                    raise RuntimeError("operations did not finish:\n" + workers.output())
                time.sleep(0.02)
            rates.append(n / (time.perf_counter() - started))
            spent += meter.stop()
        finally:
            workers.stop()
    return statistics.median(rates), statistics.median(start_rates), spent


def bench_operations(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    import operations
    from operations.models import Operation

    rate, start_rate, spent = _life(
        opts,
        db,
        opts.operations,
        ["--queue", "operations"],
        lambda i: operations.start("demo.nothing", None),
        lambda: Operation.objects.succeeded().count(),
    )
    _reset()
    raw, raw_n, raw_spent = rawsql.operations_life(db.conninfo, opts.operations, connections=2, batch=opts.batch)
    report.add(
        "operations: start → run no-op → succeeded, 2 workers",
        rate,
        "ops/s",
        raw,
        note=f"started from {opts.starters} threads at {start_rate:,.0f}/s",
        spent=spent,
        spent_items=opts.operations * opts.runs,
        raw_spent=raw_spent,
        raw_spent_items=raw_n,
    )


def bench_batch(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """One batch of no-op children, fanned in: from batch() to the parent terminal, 2 workers."""
    import operations
    from operations.models import Operation

    n = opts.batch_children
    rates, call_times = [], []
    for _ in range(opts.runs):
        _reset()
        workers = Workers(
            db.url, 2, ["--queue", "operations", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
        )
        try:
            workers.wait_ready()
            started = time.perf_counter()
            batch = operations.batch("demo.nothing", [None] * n, then=("demo.nothing", None))
            call_times.append(time.perf_counter() - started)
            deadline = time.monotonic() + max(60, n / 50)
            while not Operation.objects.filter(pk=batch.id).terminal().exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the batch did not finish:\n" + workers.output())
                time.sleep(0.02)
            rates.append(n / (time.perf_counter() - started))
            state = Operation.objects.get(pk=batch.id).state
            if state != "succeeded":
                raise RuntimeError(f"the bench batch ended {state}")
        finally:
            workers.stop()
    plain = next((r for r in report.rows if r.name.startswith("operations: start")), None)
    beside = f"; plain operations {plain.value:,.0f} ops/s" if plain else ""
    report.add(
        f"batch: {n:,} no-op children → parent done",
        statistics.median(rates),
        "children/s",
        note=f"2 workers; batch() call {statistics.median(call_times):.2f}s{beside}",
    )


def bench_tasks(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from operations.models import Operation
    from project.demo.tasks import add

    rate, start_rate, spent = _life(
        opts,
        db,
        opts.tasks,
        ["--queue", "tasks.default"],
        lambda i: add.enqueue(i, i),
        lambda: Operation.objects.succeeded().count(),
    )
    report.add(
        "@task: enqueue → run → SUCCESSFUL, 2 workers",
        rate,
        "tasks/s",
        note=f"enqueued from {opts.starters} threads at {start_rate:,.0f}/s",
        spent=spent,
        spent_items=opts.tasks * opts.runs,
    )


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _children(pid: int) -> list[int]:
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
        self.port = _free_port()
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
            [self.proc.pid, *_children(self.proc.pid)], cpu.backends_by_app_name(connection.cursor, self.app_name)
        )

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def _wire_cycles(base: str, headers: dict, clients: int) -> tuple[int, float]:
    """Run ``clients`` threads, each polling, acking, heartbeating and stopping items at ``base``
    until a poll comes back empty; return (cycles, seconds)."""
    import httpx

    cycles: list[int] = []
    errors: list[str] = []

    def client(n: int) -> None:
        done = 0
        with httpx.Client(headers={**headers, "Anthropic-Worker-ID": f"bench-{n}"}, timeout=10) as http:
            while True:
                polled = http.get(f"{base}/poll", params={"reclaim_older_than_ms": 60_000})
                if polled.status_code != 200:
                    errors.append(polled.text)
                    return
                work = polled.json()
                if work is None:
                    break
                wid = work["id"]
                for response in (
                    http.post(f"{base}/{wid}/ack"),
                    http.post(f"{base}/{wid}/heartbeat", params={"expected_last_heartbeat": "NO_HEARTBEAT"}),
                    http.post(f"{base}/{wid}/stop", json={"force": True}),
                ):
                    if response.status_code != 200:
                        errors.append(response.text)
                        return
                done += 1
        cycles.append(done)

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - started
    if errors:
        raise RuntimeError(f"wire cycle failed: {errors[0]}")
    return sum(cycles), elapsed


def bench_wire(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """The wire cycle through the real API (project.wsgi) and through the raw ceiling
    (bench.wire_ceiling: the same four statements behind a bare WSGI callable), on the same
    gunicorn, the same clients, alternating run by run."""
    from workqueue.environments import create_environment
    from workqueue.models import WorkItem

    servers = {
        "api": ("project.wsgi", {"DATABASE_URL": db.url, "DEBUG": "0", "SECRET_KEY": BENCH_SECRET_KEY}),
        "raw": ("bench.wire_ceiling:app", {"WIRE_CEILING_CONNINFO": db.conninfo}),
    }
    rates: dict[str, list[float]] = {name: [] for name in servers}
    spent = {name: cpu.Cpu(0.0, 0.0) for name in servers}
    done = dict.fromkeys(servers, 0)
    for _ in range(opts.runs):
        for name, (app, env) in servers.items():
            _reset()
            environment, key = create_environment(f"bench-{uuid.uuid4().hex[:6]}", "self_hosted")
            WorkItem.objects.enqueue_many(
                [
                    {"queue": "tool_exec", "key": f"sess-{i}", "environment": environment.id}
                    for i in range(opts.wire_items)
                ]
            )
            server = Gunicorn(app, env)
            base = f"http://127.0.0.1:{server.port}/v1/environments/{environment.id}/work"
            headers = {"Authorization": f"Bearer {key}", "Anthropic-Worker-ID": "bench"}
            try:
                server.wait_up(f"{base}/stats", headers)
                time.sleep(0.5)  # both workers up
                meter = server.meter().start()
                cycles, elapsed = _wire_cycles(base, headers, opts.wire_clients)
                spent[name] += meter.stop()
            finally:
                server.stop()
            if cycles != opts.wire_items:
                raise RuntimeError(f"wire cycle ({name}): {cycles} of {opts.wire_items} items went round")
            rates[name].append(cycles / elapsed)
            done[name] += cycles
    report.add(
        f"wire: poll → ack → heartbeat → stop, {opts.wire_clients} clients",
        statistics.median(rates["api"]),
        "cycles/s",
        statistics.median(rates["raw"]),
        "gunicorn gthread 2×8, httpx; raw: the 4 statements behind a bare WSGI callable",
        spent=spent["api"],
        spent_items=done["api"],
        raw_spent=spent["raw"],
        raw_spent_items=done["raw"],
    )


def bench_schedules(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """``opts.schedules`` interval schedules all due at once; 2 workers' scheduler loops fire them."""
    import datetime as dt

    from workqueue import schedules
    from workqueue.models import Schedule

    rates, took = [], []
    for _ in range(opts.runs):
        _reset()
        workers = Workers(db.url, 2, ["--queue", "demo.noop", "--concurrency", str(opts.concurrency)])
        try:
            workers.wait_ready()
            now = schedules.db_now()
            hour = 3600
            due = schedules.Timing(every=hour).newest(now, 1, now - dt.timedelta(hours=1))[0]
            with transaction.atomic():
                Schedule.objects.bulk_create(
                    Schedule(
                        name=f"bench-{n}",
                        queue="demo.noop",
                        every=hour,
                        timezone="UTC",
                        next_slot=due,
                        source="admin",
                    )
                    for n in range(opts.schedules)
                )
                started = time.perf_counter()
                schedules.notify_changed()  # at commit: every scheduler loop wakes
            deadline = time.monotonic() + max(60, opts.schedules / 20)
            while Schedule.objects.filter(name__startswith="bench-", last_slot__isnull=True).exists():
                if time.monotonic() > deadline:
                    raise RuntimeError("the schedules were not all fired:\n" + workers.output())
                time.sleep(0.01)
            elapsed = time.perf_counter() - started
            took.append(elapsed)
            rates.append(opts.schedules / elapsed)
            fired = Schedule.objects.filter(name__startswith="bench-").exclude(fired=1).count()
            if fired:
                raise RuntimeError(f"{fired} schedules did not fire exactly once")
        finally:
            workers.stop()
    report.add(
        f"schedules: {opts.schedules:,} due at once, 2 workers, fire all",
        statistics.median(took),
        "s",
        note="notify at commit → every slot enqueued and recorded",
    )
    report.add("schedules: slots fired", statistics.median(rates), "slots/s")


def _drain_once(db: ThrowawayDatabase, queue: str, items: int, args: list[str], *, metadata=None, env=None) -> float:
    """Items/s for one runworker process draining ``items`` fresh items of ``queue``."""
    from workqueue.models import WorkItem

    _reset()
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
        _wait_drained(queue, timeout=max(120, items / 20))
        return items / (time.perf_counter() - started)
    finally:
        workers.stop()


def bench_io(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """I/O-bound work: items that each wait ``io_seconds``, one process, at default settings:
    ``async def`` on the event loop (demo.async_io) vs a sync handler on the threads (demo.sleep)."""
    from workqueue.conf import wq_settings

    meta = {"seconds": str(opts.io_seconds)}
    conf = wq_settings()
    ms = f"{opts.io_seconds * 1000:.0f} ms"
    rates = [_drain_once(db, "demo.async_io", opts.io_items, [], metadata=meta) for _ in range(opts.runs)]
    report.add(
        f"I/O-bound: {opts.io_items:,} items awaiting {ms}, async def",
        statistics.median(rates),
        "items/s",
        note=f"1 process, --async-concurrency {conf.async_concurrency} (default)",
    )
    rates = [_drain_once(db, "demo.sleep", opts.io_items, [], metadata=meta) for _ in range(opts.runs)]
    report.add(
        f"I/O-bound: {opts.io_items:,} items sleeping {ms}, threads",
        statistics.median(rates),
        "items/s",
        note=f"1 process, --concurrency {conf.concurrency} (default)",
    )


# sitecustomize.py for a runworker process: what OpenTelemetry is there (the tracing section).
_NO_OTEL = """
import sys

class _NoOpenTelemetry:
    def find_spec(self, name, path=None, target=None):
        if name == "opentelemetry" or name.startswith("opentelemetry."):
            raise ModuleNotFoundError(name, name=name)
        return None

sys.meta_path.insert(0, _NoOpenTelemetry())
"""
_OTEL_EXPORTER = """
from opentelemetry import metrics, trace
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_provider = TracerProvider()
_provider.add_span_processor(BatchSpanProcessor(InMemorySpanExporter()))
trace.set_tracer_provider(_provider)
metrics.set_meter_provider(MeterProvider(metric_readers=[InMemoryMetricReader()]))
"""


def bench_tracing(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    """The no-op drain of one process with OpenTelemetry absent, installed with no SDK
    configured, and configured with the SDK (batch span processor, in-memory exporter)."""
    variants = (
        ("absent (import blocked)", _NO_OTEL),
        ("installed, no exporter", None),
        ("SDK + exporter", _OTEL_EXPORTER),
    )
    rates: dict[str, list[float]] = {name: [] for name, _ in variants}
    args = ["--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
    with tempfile.TemporaryDirectory() as tmp:
        envs = {}
        for name, code in variants:
            if code is None:
                envs[name] = None
                continue
            folder = Path(tmp) / str(len(envs))
            folder.mkdir()
            (folder / "sitecustomize.py").write_text(code)
            envs[name] = {"PYTHONPATH": os.pathsep.join(filter(None, [str(folder), os.environ.get("PYTHONPATH")]))}
        for _ in range(opts.runs):  # interleaved, so a change in the machine's load hits all three
            for name, _code in variants:
                rates[name].append(_drain_once(db, "demo.noop", opts.drain_items, args, env=envs[name]))
    base = statistics.median(rates[variants[0][0]])
    for name, _code in variants:
        value = statistics.median(rates[name])
        report.add(
            f"tracing: drain, 1 process (no-op), OpenTelemetry {name}",
            value,
            "items/s",
            note=f"{(value / base - 1) * 100:+.1f}% vs absent",
        )


def bench_rss(opts: Options, db: ThrowawayDatabase, report: Report) -> None:
    from workqueue.models import WorkItem

    _reset()
    workers = Workers(
        db.url, 1, ["--queue", "demo.noop", "--batch", str(opts.batch), "--concurrency", str(opts.concurrency)]
    )
    try:
        workers.wait_ready()
        # Warm up with a first batch so the start figure includes loaded code and caches.
        WorkItem.objects.enqueue_many([("demo.noop", f"warm-{i}") for i in range(min(5_000, opts.rss_items))])
        _wait_drained("demo.noop", 120)
        before = workers.rss()[0]
        for base in range(0, opts.rss_items, 10_000):
            WorkItem.objects.enqueue_many(
                [("demo.noop", f"rss-{base + i}") for i in range(min(10_000, opts.rss_items - base))]
            )
            _wait_drained("demo.noop", 300)
        after = workers.rss()[0]
    finally:
        workers.stop()
    report.add("worker RSS after warm-up", before, "MB")
    report.add(
        f"worker RSS after draining {opts.rss_items:,} more", after, "MB", note=f"{(after / before - 1) * 100:+.1f}%"
    )


SECTIONS = {
    "enqueue": bench_enqueue,
    "drain": bench_drain,
    "latency": bench_latency,
    "operations": bench_operations,
    "batch": bench_batch,
    "tasks": bench_tasks,
    "wire": bench_wire,
    "schedules": bench_schedules,
    "rss": bench_rss,
    "io": bench_io,
    "tracing": bench_tracing,
    "history": bench_history,
    "indexes": bench_indexes,
}


def run(opts: Options) -> Report:
    from django.conf import settings

    # DEBUG logs every statement (and formats its parameters): not what production runs.
    settings.DEBUG = False
    report = Report(
        meta={
            "quick": opts.quick,
            "runs": opts.runs,
            "cpus": os.cpu_count(),
            "python": sys.version.split()[0],
        }
    )
    with ThrowawayDatabase() as db:
        with connection.cursor() as cur:
            cur.execute("SHOW server_version")
            report.meta["postgres"] = cur.fetchone()[0]
        for name in opts.sections:
            opts.log(f"… {name}")
            SECTIONS[name](opts, db, report)
    return report
