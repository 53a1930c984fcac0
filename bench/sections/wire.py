"""The ``wire`` section: poll → ack → heartbeat → stop through the API and its raw ceiling."""

from __future__ import annotations

import statistics
import threading
import time
import uuid

from bench import cpu
from bench.harness import (
    BENCH_SECRET_KEY,
    Gunicorn,
    ThrowawayDatabase,
    reset,
)
from bench.report import Options, Report


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
            reset()
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
