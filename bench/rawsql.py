"""The raw-SQL ceiling: the queue's own statements from a tight psycopg loop, no Django, no handler."""

from __future__ import annotations

import multiprocessing
import time
import uuid
from queue import Empty

import psycopg
from psycopg.types.json import Jsonb

from bench import cpu
from workqueue.sql import CLAIMED_COLUMNS, QUERIES

_ID, _TOKEN = CLAIMED_COLUMNS.index("id"), CLAIMED_COLUMNS.index("lease_token")


def _connect(conninfo: str) -> psycopg.Connection:
    conn = psycopg.connect(conninfo, autocommit=True, application_name="bench-raw")
    conn.prepare_threshold = 0  # prepare every statement on first use, as the app does
    return conn


def insert_single(conninfo: str, n: int, queue: str) -> float:
    """Rows/s for item_enqueue, one row per statement and commit."""
    sql = QUERIES["item_enqueue"]
    tag = uuid.uuid4().hex[:8]
    with _connect(conninfo) as conn:
        started = time.perf_counter()
        for i in range(n):
            conn.execute(
                sql,
                {
                    "queue": queue,
                    "key": f"raw-{tag}-{i}",
                    "environment_id": None,
                    "priority": 0,
                    "delay": 0.0,
                    "run_after": None,
                    "attempts": 0,
                    "max_attempts": 5,
                    "metadata": Jsonb({}),
                    "trace_context": None,
                    "over_wire": False,
                    "channel": "bench_raw",
                    "group": None,
                },
            ).fetchall()
        return n / (time.perf_counter() - started)


def insert_bulk(conninfo: str, n: int, queue: str, per_statement: int = 1000) -> float:
    """Rows/s for item_enqueue_many, ``per_statement`` rows per statement."""
    sql = QUERIES["item_enqueue_many"]
    tag = uuid.uuid4().hex[:8]
    with _connect(conninfo) as conn:
        started = time.perf_counter()
        for base in range(0, n, per_statement):
            size = min(per_statement, n - base)
            conn.execute(
                sql,
                {
                    "queues": [queue] * size,
                    "keys": [f"rawb-{tag}-{base + i}" for i in range(size)],
                    "environment_ids": [None] * size,
                    "priorities": [0] * size,
                    "delays": [0.0] * size,
                    "max_attempts": [5] * size,
                    "metadatas": [Jsonb({})] * size,
                    "over_wires": [False] * size,
                    "trace_context": None,
                    "groups": [None] * size,
                },
            ).fetchall()
        return n / (time.perf_counter() - started)


def _claim_params(queue: str, batch: int, lease: float) -> dict:
    """item_claim's parameters as runworker passes them (relaxed commit included)."""
    return {
        "queues": [queue],
        "limits": [batch],
        "leases": [lease],
        "caps": [None],
        "wires": [False],
        "limit": batch,
        "worker_id": "raw",
        "relaxed": True,
    }


class _Spent:
    """This process's CPU and its backend's, from construction to ``cpu()``."""

    def __init__(self, conn: psycopg.Connection):
        self.backend = conn.info.backend_pid
        self.client0, self.server0 = cpu.self_seconds(), cpu.backend_seconds(self.backend)

    def cpu(self) -> tuple[float, float | None]:
        server = cpu.backend_seconds(self.backend)
        return cpu.self_seconds() - self.client0, None if server is None else server - self.server0


def _drain_loop(conninfo: str, queue: str, batch: int, lease: float, out, go) -> None:
    claim, complete = QUERIES["item_claim"], QUERIES["item_complete_many"]
    done = 0
    with _connect(conninfo) as conn:
        params = _claim_params(queue, batch, lease)
        # Idle first, as an idle runworker is when its drain starts: connected, its claim run once
        # (on a queue with nothing in it), then wait for the start, which is timed from outside.
        conn.execute(claim, {**params, "queues": [queue + ".idle"]}).fetchall()
        out.put("ready")
        go.wait()
        spent = _Spent(conn)
        while True:
            rows = conn.execute(claim, params).fetchall()
            if not rows:
                break
            rows.sort(key=lambda r: r[_TOKEN].int)  # as the store sends them: sorted by proof
            conn.execute(
                complete,
                {"ids": [r[_ID] for r in rows], "tokens": [r[_TOKEN] for r in rows], "outcome": "succeeded"},
            ).fetchall()
            done += len(rows)
        finished = time.perf_counter()  # CLOCK_MONOTONIC: the same clock in every process
        out.put((done, *spent.cpu(), finished))


def _in_processes(target, args: tuple, count: int, *, gated: bool = False) -> tuple[int, float, cpu.Cpu]:
    """Run ``target(*args, out)`` in ``count`` fresh processes, each putting (items, its CPU
    seconds, its backend's or None); return (items, seconds, CPU) summed over them.

    ``gated``: ``target(*args, out, go)`` puts "ready" once connected and waits for ``go``; the
    time runs from ``go`` to the last process's own finish time (a fifth item it puts), so
    neither process start-up nor reporting back is in it."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    go = ctx.Event()
    procs = [ctx.Process(target=target, args=(*args, out, go) if gated else (*args, out)) for _ in range(count)]
    started = time.perf_counter()
    for p in procs:
        p.start()

    def take():
        while True:
            try:
                return out.get(timeout=1.0)
            except Empty:
                # A process that died before reporting would leave us waiting for ever: fail instead.
                dead = [p for p in procs if p.exitcode not in (None, 0)]
                if dead:
                    for p in procs:
                        p.kill()
                    raise RuntimeError(
                        f"a raw-SQL process exited with code {dead[0].exitcode} (its traceback is above)"
                    ) from None

    if gated:
        for _ in range(count):
            assert take() == "ready"
        started = time.perf_counter()
        go.set()
    total, spent, ends = 0, cpu.Cpu(0.0, 0.0), []
    for _ in range(count):
        done, client_s, server_s, *end = take()
        total += done
        spent += cpu.Cpu(client_s, server_s)
        ends += end  # a gated process's own finish time
    elapsed = (max(ends) if gated else time.perf_counter()) - started
    for p in procs:
        p.join()
    return total, elapsed, spent


def drain(
    conninfo: str, queue: str, *, connections: int, batch: int, lease: float = 30.0
) -> tuple[int, float, cpu.Cpu]:
    """Claim and complete everything queued on ``queue`` from N processes; return (items, items/s,
    CPU of the loops and of their backends). Timed from the moment every process is connected
    and idle, as runworker's drain is (bench.harness.drain_once)."""
    total, elapsed, spent = _in_processes(_drain_loop, (conninfo, queue, batch, lease), connections, gated=True)
    return total, total / elapsed, spent


def _ops_loop(conninfo: str, n: int, batch: int, lease: float, out) -> None:
    import django

    django.setup()  # only to load the operations statements; every query below is raw psycopg
    from operations.store import QUERIES as OPS
    from operations.store import RUN_COLUMNS

    start, begin, finish = OPS["op_start"], OPS["op_begin"], OPS["op_finish"]
    claim = QUERIES["item_claim"]
    tag = uuid.uuid4().hex[:8]
    done = 0
    with _connect(conninfo) as conn:
        for i in range(n):
            conn.execute(
                start,
                {
                    "id": f"op_raw_{tag}_{i}",
                    "kind": "demo.nothing",
                    "owner": "",
                    "queue": "raw.ops",
                    "priority": 0,
                    "request": Jsonb(None),
                    "count_label": "",
                    "max_attempts": 5,
                    "delay": 0.0,
                    "run_after": None,
                    "queue_channel": "bench_raw",
                    "trace_context": None,
                    "group": None,
                    "workflow": False,
                    "relaxed": False,
                },
            ).fetchall()
        params = _claim_params("raw.ops", batch, lease)
        state = RUN_COLUMNS.index("state")
        spent = _Spent(conn)  # the worker's side only (claim, begin, finish), as for runworker
        while True:
            rows = conn.execute(claim, params).fetchall()
            if not rows:
                break
            for r in rows:
                common = {"id": r[3], "item_id": r[_ID], "token": r[_TOKEN], "channel": "bench_raw"}
                began = conn.execute(begin, {**common, "lease": lease, "worker_id": "raw", "relaxed": True}).fetchall()
                assert began and began[0][state] == "running"
                conn.execute(
                    finish,
                    {
                        **common,
                        "state": "succeeded",
                        "error_code": "",
                        "error_message": "",
                        "error_retryable": False,
                        "result_uri": "",
                        "result_detail": None,
                        "units_total": None,
                        "units_done": 0,
                        "unit": "",
                        "message": "",
                        "count": 0,
                        "all_done": True,
                        "cancel_wins": False,
                        "attempt": Jsonb({"outcome": "succeeded"}),
                        "relaxed": False,
                    },
                ).fetchall()
                done += 1
        out.put((done, *spent.cpu()))


def operations_life(
    conninfo: str, n: int, *, connections: int, batch: int, lease: float = 120.0
) -> tuple[float, int, cpu.Cpu]:
    """Ops/s for the operations statements (start, claim, begin, finish) from N tight loops, the
    operations run, and the CPU of the worker's side (claim, begin, finish) and its backends."""
    total, elapsed, spent = _in_processes(_ops_loop, (conninfo, n // connections, batch, lease), connections)
    return total / elapsed, total, spent
