"""Where a worker's CPU goes: one runworker drains no-op items under py-spy, while its backends'
wait events are sampled from pg_stat_activity (and pg_stat_statements is read, where the
server has it loaded).

    manage.py benchprofile [--items 20000] [--batch 200] [--concurrency 4] [--out DIR]

py-spy comes from .venv-peers (pinned in requirements/peers.txt; `make bench-peers` creates it).
Writes DIR/worker.collapsed (flamegraph input: one "stack count" line each) and prints the
functions by self time and by total time, the wait events, and the top statements.
"""

from __future__ import annotations

import collections
import re
import shutil
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from django.db import connection

from bench import cpu
from bench.harness import ThrowawayDatabase, Workers, reset, wait_drained
from bench.peers import VENV, ensure_venv

TOP_STATEMENTS = """
SELECT calls, round(total_exec_time::numeric, 1), rows, left(regexp_replace(query, '\\s+', ' ', 'g'), 70)
FROM pg_stat_statements
WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
ORDER BY total_exec_time DESC LIMIT 12
"""


def _py_spy() -> str | None:
    local = VENV / "bin" / "py-spy"
    if local.exists():
        return str(local)
    return shutil.which("py-spy")


def _sample_waits(app_name: str, stop: threading.Event, out: collections.Counter) -> None:
    from django.db import connections

    try:
        with connections["default"].cursor() as cur:
            while not stop.is_set():
                cur.execute(
                    "SELECT state, coalesce(wait_event_type, 'CPU'), coalesce(wait_event, 'running') "
                    "FROM pg_stat_activity WHERE datname = current_database() AND application_name = %s",
                    [app_name],
                )
                for state, kind, event in cur.fetchall():
                    out[(state, f"{kind}:{event}" if state == "active" else "-")] += 1
                stop.wait(0.005)
    finally:
        connections.close_all()


def _statements(cur) -> list[tuple] | None:
    cur.execute("SELECT 1 FROM pg_extension WHERE extname = 'pg_stat_statements'")
    if not cur.fetchone():
        try:
            cur.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        except Exception:
            return None
    try:
        cur.execute("SELECT pg_stat_statementsreset()")
    except Exception:
        return None  # not in shared_preload_libraries
    return []


def run(items: int, batch: int, concurrency: int, out: Path, log, *, rate: int = 200) -> str:
    from workqueue.models import WorkItem

    missing = ensure_venv(log)
    spy = _py_spy()
    if spy is None:
        return f"py-spy is not available ({missing or 'not installed'}); nothing profiled"
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    with ThrowawayDatabase() as db:
        reset()
        with connection.cursor() as cur:
            statements = _statements(cur)
        workers = Workers(db.url, 1, ["--queue", "demo.noop", "--batch", str(batch), "--concurrency", str(concurrency)])
        waits: collections.Counter = collections.Counter()
        stop = threading.Event()
        try:
            workers.wait_ready()
            collapsed = out / "worker.collapsed"
            # --gil: only samples holding the GIL, i.e. Python on the CPU (psycopg's socket
            # waits and condition waits would otherwise look busy).
            args = ["record", "--pid", str(workers.procs[0].pid), "--rate", str(rate), "--format", "raw", "--gil"]
            recorder = subprocess.Popen(
                [spy, *args, "--threads", "--nonblocking", "--output", str(collapsed)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            time.sleep(1.0)
            sampler = threading.Thread(target=_sample_waits, args=(workers.app_name, stop, waits))
            sampler.start()
            meter = workers.meter().start()
            tag = uuid.uuid4().hex[:6]
            started = time.perf_counter()
            for base in range(0, items, 10_000):
                WorkItem.objects.enqueue_many(
                    [("demo.noop", f"p-{tag}-{base + i}") for i in range(min(10_000, items - base))]
                )
            wait_drained("demo.noop", timeout=max(120, items / 200))
            elapsed = time.perf_counter() - started
            spent = meter.stop()
            stop.set()
            sampler.join()
            recorder.send_signal(signal.SIGINT)
            recorder.wait(60)
        finally:
            stop.set()
            workers.stop()
        client, server = spent.per_item_us(items)
        lines.append(
            f"{items:,} items in {elapsed:.1f} s ({items / elapsed:,.0f}/s); CPU µs/item: worker {cpu.fmt_us(client)}, "
            f"pg {cpu.fmt_us(server)} (py-spy's sampling adds to the worker's)"
        )
        lines += _summarize(collapsed)
        total = sum(waits.values()) or 1
        lines.append("\nworker backends, sampled every 5 ms (state, wait event): share of samples")
        for (state, event), n in waits.most_common(12):
            lines.append(f"  {n / total:6.1%}  {state:<20} {event}")
        if statements is None:
            lines.append("\npg_stat_statements: not loaded on this server (shared_preload_libraries)")
        else:
            with connection.cursor() as cur:
                cur.execute(TOP_STATEMENTS)
                lines.append("\npg_stat_statements (calls, total ms, rows, statement):")
                for calls, ms, rows, query in cur.fetchall():
                    lines.append(f"  {calls:>7} {ms:>9} {rows:>8}  {query}")
    return "\n".join(lines)


def _summarize(collapsed: Path, top: int = 25) -> list[str]:
    """Self and total time per function from py-spy's raw (collapsed) output."""
    if not collapsed.exists():
        return ["(py-spy wrote nothing: is ptrace allowed here?)"]
    self_time: collections.Counter = collections.Counter()
    total_time: collections.Counter = collections.Counter()
    by_thread: collections.Counter = collections.Counter()
    samples = 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        frames = stack.split(";")
        thread = frames[0]
        frames = frames[1:]
        leaf = frames[-1] if frames else ""  # py-spy leaves idle threads out (no --idle)
        samples += n
        by_thread[re.sub(r"-\d+$", "-*", thread.partition(": ")[2] or thread)] += n
        self_time[_short(leaf)] += n
        for f in set(frames):
            total_time[_short(f)] += n
    if not samples:
        return ["(no busy samples)"]
    out = [f"\npy-spy: {samples} samples holding the GIL (200 Hz, every thread); by thread:"]
    for thread, n in by_thread.most_common(8):
        out.append(f"  {n / samples:6.1%}  {thread}")
    out.append("by self time:")
    for fn, n in self_time.most_common(top):
        out.append(f"  {n / samples:6.1%}  {fn}")
    out.append("by total time (inclusive):")
    for fn, n in total_time.most_common(top):
        out.append(f"  {n / samples:6.1%}  {fn}")
    return out


def _short(frame: str) -> str:
    # "function (path/to/file.py:123)" -> "function (file.py)": lines differ within a function
    name, _, where = frame.partition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    parts = path.split("/")
    return f"{name} ({'/'.join(parts[-2:])})"
