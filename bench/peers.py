"""`make bench-peers`: our runworker beside PgQueuer and Procrastinate, in one run, one table.

Each system drains the same N no-op jobs with the same number of worker processes on the
same PostgreSQL server, one after the other, in the same run; each in a fresh database of
its own. The peers are pip-installed, pinned (requirements/peers.txt), into a virtualenv of
their own (.venv-peers): never into the project's dependencies. A peer that cannot be
installed here is reported as such and the others still run.

What is timed is the same for every system: workers started and gone idle, then frozen
(SIGSTOP) while the N jobs are enqueued in bulk (10,000 per statement, by each system's own
enqueue, from a process that is not measured), then thawed (SIGCONT): from the thaw until
none is left to run, asked every DRAIN_POLL seconds. So each drains a backlog that is all
there, woken by the notifications that waited in its sockets, and no system's enqueue speed
is in its drain rate. CPU per item (bench/cpu.py) is the worker processes' and their
backends' only, over that window.
"""

from __future__ import annotations

import hashlib
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import psycopg

from bench import cpu
from bench.harness import DRAIN_POLL, ROOT, ThrowawayDatabase, conninfo, drain_once, frozen, reset

VENV = ROOT / ".venv-peers"
REQUIREMENTS = ROOT / "requirements" / "peers.txt"
DRIVER = ROOT / "bench" / "peers_driver.py"

# What each peer needs importable in .venv-peers, and how to tell its jobs are all done.
PEERS = {
    "pgqueuer": {
        "imports": "pgqueuer, asyncpg",
        "package": "pgqueuer",
        "left": "SELECT count(*) FROM pgqueuer",  # done jobs leave the queue table (for its log)
    },
    "procrastinate": {
        "imports": "procrastinate, psycopg",
        "package": "procrastinate",
        "left": "SELECT count(*) FROM procrastinate_jobs WHERE status IN ('todo', 'doing')",
    },
}


@dataclass
class PeerOptions:
    items: int = 50_000
    workers: tuple[int, ...] = (1, 2)
    batch: int = 200  # ours
    concurrency: int = 4  # ours, and Procrastinate's parallel jobs per process
    pgqueuer_batches: tuple[int, ...] = (10, 50, 200)
    runs: int = 1
    systems: tuple[str, ...] = ("workqueue", "pgqueuer", "procrastinate")
    time_limit: float = 180.0  # per drain: a slower system reports what it drained by then
    log: object = print


@dataclass
class Result:
    system: str
    processes: int
    config: str
    rate: float
    spent: cpu.Cpu
    done: int
    note: str = ""

    def cpu_us(self) -> tuple[float, float | None]:
        return self.spent.per_item_us(self.done)

    def total_us(self) -> float | None:
        client, server = self.cpu_us()
        return None if server is None else client + server


@dataclass
class PeerReport:
    results: list[Result] = field(default_factory=list)
    unavailable: dict[str, str] = field(default_factory=dict)  # system -> why
    versions: dict[str, str] = field(default_factory=dict)

    def best(self, system: str, processes: int) -> Result | None:
        mine = [r for r in self.results if r.system == system and r.processes == processes]
        return max(mine, key=lambda r: r.rate) if mine else None

    def table(self) -> str:
        head = (
            f"{'system':<15} {'procs':>5}  {'configuration':<22} {'items/s':>9}  "
            f"{'CPU µs/item: worker':>19} {'pg':>6} {'total':>6}  {'ours ÷ it: rate':>15} {'its CPU ÷ ours':>14}  note"
        )
        lines = [head, "-" * len(head)]
        for r in self.results:
            client, server = r.cpu_us()
            total = r.total_us()
            ours = self.best("workqueue", r.processes)
            rate_ratio = cpu_ratio = ""
            if ours is not None and r.system != "workqueue":
                rate_ratio = f"{ours.rate / r.rate:.2f}×" if r.rate else "∞"
                if total is not None and ours.total_us():
                    cpu_ratio = f"{total / ours.total_us():.2f}×"
                else:
                    cpu_ratio = f"{client / ours.cpu_us()[0]:.2f}× (worker)" if ours.cpu_us()[0] else ""
            lines.append(
                f"{r.system:<15} {r.processes:>5}  {r.config:<22} {r.rate:>9,.0f}  "
                f"{cpu.fmt_us(client):>19} {cpu.fmt_us(server):>6} {cpu.fmt_us(total):>6}  "
                f"{rate_ratio:>15} {cpu_ratio:>14}  {r.note}"
            )
        for system, why in self.unavailable.items():
            lines.append(f"{system:<15} not measured: {why}")
        lines.append(
            "items/s: N no-op jobs enqueued in bulk while the idle workers were frozen, from their thaw until none "
            "is left; CPU µs/item: user+sys of the worker processes and of their PostgreSQL backends (n/a: server "
            "not local); ratios against our best "
            "configuration with the same number of processes"
        )
        if self.versions:
            lines.append("versions: " + ", ".join(f"{k} {v}" for k, v in sorted(self.versions.items())))
        return "\n".join(lines)

    def as_dict(self) -> dict:
        out = []
        for r in self.results:
            client, server = r.cpu_us()
            out.append(
                {
                    "system": r.system,
                    "processes": r.processes,
                    "configuration": r.config,
                    "items_per_s": r.rate,
                    "items_done": r.done,
                    "cpu_worker_us_per_item": client,
                    "cpu_postgres_us_per_item": server,
                    "note": r.note,
                }
            )
        return {"results": out, "unavailable": self.unavailable, "versions": self.versions}


# -- the peers' virtualenv ---------------------------------------------------------------


def _venv_python() -> Path:
    return VENV / "bin" / "python"


def ensure_venv(log) -> dict[str, str]:
    """Create/refresh .venv-peers from requirements/peers.txt; return {peer: why} for the peers
    that cannot be imported there afterwards (an install that fails is said, never raised)."""
    digest = hashlib.sha256(REQUIREMENTS.read_bytes()).hexdigest()
    stamp = VENV / ".installed"
    if not _venv_python().exists():
        log(f"creating {VENV.name}")
        subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
    if not stamp.exists() or stamp.read_text() != digest:
        log(f"installing requirements/peers.txt into {VENV.name}")
        pip = [str(_venv_python()), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        done = subprocess.run([*pip, "-r", str(REQUIREMENTS)], capture_output=True, text=True)
        if done.returncode != 0:
            log(f"pip install -r requirements/peers.txt failed; trying line by line:\n{done.stderr[-1500:]}")
            for line in REQUIREMENTS.read_text().splitlines():
                line = line.split("#")[0].strip()
                if line:
                    subprocess.run([*pip, line], capture_output=True, text=True)
        else:
            stamp.write_text(digest)
    missing = {}
    for name, peer in PEERS.items():
        probe = subprocess.run([str(_venv_python()), "-c", f"import {peer['imports']}"], capture_output=True, text=True)
        if probe.returncode != 0:
            last = (probe.stderr.strip().splitlines() or ["?"])[-1]
            missing[name] = f"cannot be installed or imported in {VENV.name} ({last})"
    return missing


def _versions() -> dict[str, str]:
    out = {}
    for name, peer in PEERS.items():
        done = subprocess.run(
            [
                str(_venv_python()),
                "-c",
                f"import importlib.metadata as m; print(m.version({peer['package']!r}))",
            ],
            capture_output=True,
            text=True,
        )
        if done.returncode == 0:
            out[name] = done.stdout.strip()
    return out


# -- one peer drain ----------------------------------------------------------------------


class FreshDatabase:
    """A database of its own for one peer drain (created empty, dropped afterwards)."""

    def __init__(self, admin_settings: dict):
        self.settings = admin_settings
        self.name = f"bench_peer_{uuid.uuid4().hex[:10]}"
        self.admin = conninfo(admin_settings, "postgres")

    def __enter__(self) -> FreshDatabase:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{self.name}"')
        self.conninfo = conninfo(self.settings, self.name)
        s = self.settings
        host = s.get("HOST") or (s.get("OPTIONS") or {}).get("host") or "/var/run/postgresql"
        user = s.get("USER") or "postgres"
        password = f":{s['PASSWORD']}" if s.get("PASSWORD") else ""
        if host.startswith("/"):
            self.url = f"postgresql://{user}{password}@/{self.name}?host={host}"
        else:
            self.url = f"postgresql://{user}{password}@{host}:{s.get('PORT') or 5432}/{self.name}"
        return self

    def __exit__(self, *exc) -> None:
        with psycopg.connect(self.admin, autocommit=True) as conn:
            conn.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
                [self.name],
            )
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}"')


def _driver(*args: str, env: dict | None = None, **kw) -> subprocess.Popen:
    return subprocess.Popen(
        [str(_venv_python()), str(DRIVER), *args],
        cwd=ROOT,
        env=dict(os.environ, **(env or {})),
        **kw,
    )


def _wait_connected(system: str, workers: list, pids, processes: int, timeout: float = 60) -> None:
    """Until each worker process has its database connection (or one died: say why)."""
    deadline = time.monotonic() + timeout
    while len(pids()) < processes:
        dead = [w for w in workers if w.poll() is not None]
        if dead or time.monotonic() > deadline:
            err = dead[0].stderr.read().decode(errors="replace")[-2000:] if dead else ""
            raise RuntimeError(f"{system} workers did not start:\n{err}")
        time.sleep(0.05)


def _wait_drained(conn, left_sql: str, items: int, started: float, time_limit: float) -> tuple[int, str]:
    """Until no job is left or ``time_limit`` passed; (jobs left, a note when cut short)."""
    while True:
        left = conn.execute(left_sql).fetchone()[0]
        if left == 0:
            return 0, ""
        if time.perf_counter() - started > time_limit:
            return left, f"stopped after {time_limit:.0f} s: {items - left:,} of {items:,} done"
        time.sleep(DRAIN_POLL)


def peer_drain(
    system: str, settings: dict, processes: int, items: int, *, batch: int, concurrency: int, time_limit: float
) -> tuple[float, cpu.Cpu, int, str]:
    """Drain ``items`` no-op jobs with ``processes`` workers of ``system``; return (items/s,
    CPU of the workers and their backends, jobs done, note)."""
    with FreshDatabase(settings) as db:
        done = subprocess.run(
            [str(_venv_python()), str(DRIVER), "install", system, db.url], capture_output=True, text=True
        )
        if done.returncode != 0:
            raise RuntimeError(f"{system}: installing its schema failed:\n{done.stderr[-2000:]}")
        name = cpu.app_name(f"bench-{system}")
        workers = [
            _driver(
                "work",
                system,
                db.url,
                "--batch",
                str(batch),
                "--concurrency",
                str(concurrency),
                env={"PGAPPNAME": name},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for _ in range(processes)
        ]
        # The enqueuer imports and connects first, then waits for "go": its start-up is not timed.
        enqueuer = _driver(
            "enqueue-on-go",
            system,
            db.url,
            str(items),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            with psycopg.connect(db.conninfo, autocommit=True) as conn:
                pids = cpu.backends_by_app_name(conn.cursor, name)
                _wait_connected(system, workers, pids, processes)
                if enqueuer.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"{system} enqueuer did not start:\n{enqueuer.stderr.read()[-2000:]}")
                worker_pids = [w.pid for w in workers]
                cpu.wait_quiet(worker_pids)  # start-up and lazy imports done, as for ours
                # As for ours (drain_once): the workers wait frozen while the backlog is enqueued,
                # and the time runs from their thaw.
                with frozen(worker_pids):
                    enqueuer.stdin.write("go\n")
                    enqueuer.stdin.flush()
                    if enqueuer.stdout.readline().strip() != "enqueued":
                        raise RuntimeError(f"{system} enqueue failed:\n{enqueuer.stderr.read()[-2000:]}")
                    meter = cpu.Meter(worker_pids, pids).start()
                started = time.perf_counter()
                left, note = _wait_drained(conn, PEERS[system]["left"], items, started, time_limit)
                elapsed = time.perf_counter() - started
                spent = meter.stop()
                done_n = items - left
                return done_n / elapsed, spent, done_n, note
        finally:
            for p in [*workers, enqueuer]:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
            for p in [*workers, enqueuer]:
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    p.kill()
                    p.wait()


# -- the run -----------------------------------------------------------------------------


def run(opts: PeerOptions) -> PeerReport:
    from django.conf import settings
    from django.db import connection

    settings.DEBUG = False
    report = PeerReport()
    peers = [s for s in opts.systems if s in PEERS]
    if peers:
        missing = ensure_venv(opts.log)
        for system in peers:
            if system in missing:
                report.unavailable[system] = missing[system]
                opts.log(f"{system}: {missing[system]}; the others still run")
        report.versions = {k: v for k, v in _versions().items() if k in peers and k not in missing}
    runnable = [s for s in peers if s not in report.unavailable]
    admin_settings = dict(connection.settings_dict)
    with ThrowawayDatabase() as db:
        for processes in opts.workers:
            if "workqueue" in opts.systems:
                opts.log(f"… workqueue, {processes} process(es)")
                rates, spent = [], cpu.Cpu(0.0, 0.0)
                for _ in range(opts.runs):
                    reset()
                    rate, run_spent = drain_once(db, processes, opts.items, opts.batch, opts.concurrency)
                    rates.append(rate)
                    spent += run_spent
                report.results.append(
                    Result(
                        "workqueue",
                        processes,
                        f"batch {opts.batch}, concurrency {opts.concurrency}",
                        statistics.median(rates),
                        spent,
                        opts.items * opts.runs,
                    )
                )
            for system in runnable:
                configs = (
                    [(b, f"batch {b}") for b in opts.pgqueuer_batches]
                    if system == "pgqueuer"
                    else [(1, f"concurrency {opts.concurrency}")]
                )
                for batch, label in configs:
                    opts.log(f"… {system}, {processes} process(es), {label}")
                    rates, spent, done_total, notes = [], cpu.Cpu(0.0, 0.0), 0, []
                    for _ in range(opts.runs):
                        rate, run_spent, done, note = peer_drain(
                            system,
                            admin_settings,
                            processes,
                            opts.items,
                            batch=batch,
                            concurrency=opts.concurrency,
                            time_limit=opts.time_limit,
                        )
                        rates.append(rate)
                        spent += run_spent
                        done_total += done
                        if note:
                            notes.append(note)
                    report.results.append(
                        Result(system, processes, label, statistics.median(rates), spent, done_total, "; ".join(notes))
                    )
    return report
