"""The peers' side of `make bench-peers`: run inside .venv-peers, never in the project's venv.

It imports no Django and nothing of this project, only the peer's own package, and does one
of three things against a database URL (bench/peers.py runs it and measures from outside):

    python bench/peers_driver.py install  SYSTEM URL           # the peer's schema
    python bench/peers_driver.py enqueue  SYSTEM URL N         # N no-op jobs, in bulk
    python bench/peers_driver.py enqueue-on-go SYSTEM URL N    # the same, once connected it prints
                                                               # "ready" and waits for "go" on stdin
    python bench/peers_driver.py work     SYSTEM URL --batch B --concurrency C
                                                               # one worker process, until SIGTERM

SYSTEM is ``pgqueuer`` or ``procrastinate``. Every job is a no-op ``async def`` (both peers
are asyncio queues), so what is measured is each queue's own cost per job, as for ours.
The worker connects with ``application_name`` from ``$PGAPPNAME``, so its backends can be
found for the CPU figures.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from datetime import timedelta

QUEUE = "bench"
CHUNK = 10_000  # jobs per enqueue statement, as the benchmark enqueues its own


def _app_name() -> str:
    return os.environ.get("PGAPPNAME", "bench-peers")


async def _gate(wait: bool) -> None:
    """With ``wait``: say "ready", block until "go" arrives on stdin (so start-up is not timed)."""
    if wait:
        print("ready", flush=True)
        await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)


def _enqueued(wait: bool) -> None:
    if wait:
        print("enqueued", flush=True)


# -- PgQueuer ----------------------------------------------------------------------------


async def _pgq_connect(url: str):
    import asyncpg
    from pgqueuer.db import AsyncpgDriver

    conn = await asyncpg.connect(url, server_settings={"application_name": _app_name()})
    return conn, AsyncpgDriver(conn)


async def pgqueuer_install(url: str) -> None:
    from pgqueuer.queries import Queries

    conn, driver = await _pgq_connect(url)
    try:
        await Queries(driver).install()
    finally:
        await conn.close()


async def pgqueuer_enqueue(url: str, n: int, wait: bool = False) -> None:
    from pgqueuer.queries import Queries

    conn, driver = await _pgq_connect(url)
    try:
        queries = Queries(driver)
        await _gate(wait)
        for base in range(0, n, CHUNK):
            size = min(CHUNK, n - base)
            await queries.enqueue(["noop"] * size, [None] * size, [0] * size)
        _enqueued(wait)
    finally:
        await conn.close()


async def pgqueuer_work(url: str, batch: int, concurrency: int) -> None:
    from pgqueuer.qm import QueueManager
    from pgqueuer.queries import Queries

    conn, driver = await _pgq_connect(url)
    qm = QueueManager(Queries(driver))

    @qm.entrypoint("noop")
    async def noop(job) -> None:
        return None

    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, qm.shutdown.set)
    try:
        await qm.run(batch_size=batch, dequeue_timeout=timedelta(seconds=30))
    finally:
        await conn.close()


# -- Procrastinate -----------------------------------------------------------------------


def _procrastinate_app(url: str, pool_size: int = 4):
    import procrastinate

    connector = procrastinate.PsycopgConnector(
        conninfo=url, kwargs={"application_name": _app_name()}, min_size=pool_size, max_size=pool_size
    )
    app = procrastinate.App(connector=connector)  # in __main__ on purpose: one file, no imports

    @app.task(name="noop", queue=QUEUE)
    async def noop() -> None:
        return None

    return app, noop


async def procrastinate_install(url: str) -> None:
    app, _ = _procrastinate_app(url)
    async with app.open_async():
        await app.schema_manager.apply_schema_async()


async def procrastinate_enqueue(url: str, n: int, wait: bool = False) -> None:
    app, noop = _procrastinate_app(url)
    async with app.open_async():
        await _gate(wait)
        for base in range(0, n, CHUNK):
            await noop.batch_defer_async(*({} for _ in range(min(CHUNK, n - base))))
        _enqueued(wait)


async def procrastinate_work(url: str, batch: int, concurrency: int) -> None:
    # Procrastinate fetches one job per statement (no batch); concurrency is its parallel jobs.
    app, _ = _procrastinate_app(url, pool_size=concurrency + 2)
    async with app.open_async():
        await app.run_worker_async(
            queues=[QUEUE], concurrency=concurrency, wait=True, install_signal_handlers=True, listen_notify=True
        )


SYSTEMS = {
    "pgqueuer": (pgqueuer_install, pgqueuer_enqueue, pgqueuer_work),
    "procrastinate": (procrastinate_install, procrastinate_enqueue, procrastinate_work),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=("install", "enqueue", "enqueue-on-go", "work"))
    parser.add_argument("system", choices=sorted(SYSTEMS))
    parser.add_argument("url")
    parser.add_argument("n", type=int, nargs="?", default=0)
    parser.add_argument("--batch", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=4)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    install, enqueue, work = SYSTEMS[args.system]
    if args.action == "install":
        asyncio.run(install(args.url))
    elif args.action in ("enqueue", "enqueue-on-go"):
        asyncio.run(enqueue(args.url, args.n, args.action == "enqueue-on-go"))
    else:
        asyncio.run(work(args.url, args.batch, args.concurrency))


if __name__ == "__main__":
    main()
