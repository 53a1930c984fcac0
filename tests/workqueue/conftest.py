"""Helpers for the workqueue tests: side connections, threads with their own connections.

A side connection is a plain psycopg connection to the test database, outside Django: it
stands for "another process" (a LISTENer, a lock holder, a clock). Threads started with
``run_threads`` get their own Django connection each and close it when they end.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager

import psycopg
import pytest
from django.db import connection, connections

from workqueue.items import Item
from workqueue.listener import connection_kwargs
from workqueue.models import WorkItem
from workqueue.sql import ITEM_COLUMNS


@contextmanager
def side_connection(autocommit: bool = True):
    """A psycopg connection to the test database that Django knows nothing about."""
    conn = psycopg.connect(autocommit=autocommit, **connection_kwargs())
    try:
        yield conn
    finally:
        conn.close()


def run_threads(target, n: int, *, timeout: float = 60.0) -> list:
    """Run ``target(i)`` in ``n`` threads at once; return results, re-raise the first error."""
    results: list = [None] * n
    errors: list[BaseException] = []
    barrier = threading.Barrier(n)

    def body(i: int) -> None:
        try:
            barrier.wait()
            results[i] = target(i)
        except BaseException as exc:
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=body, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


def load_item(pk: int) -> Item:
    """The item as a holder would see it, read fresh from the table."""
    cols = ", ".join(ITEM_COLUMNS)
    with connection.cursor() as cur:
        cur.execute(f"SELECT {cols} FROM work_items WHERE id = %s", [pk])
        return Item.from_row(cur.fetchone())


def row(key: str, queue: str | None = None) -> WorkItem:
    qs = WorkItem.objects.filter(key=key)
    if queue is not None:
        qs = qs.filter(queue=queue)
    return qs.get()


def terminate_other_backends() -> list[int]:
    """Kill every other session on the test database (workers, listeners, keepers)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return [r[0] for r in cur.fetchall()]


def listening_backends() -> set[int]:
    """Backends of the test database whose last statement was a LISTEN (a worker's listener)."""
    with connection.cursor() as cur:
        cur.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() AND query ILIKE 'LISTEN %%'"
        )
        return {r[0] for r in cur.fetchall()}


@pytest.fixture
def make_worker_ready(start_ready_worker):
    """Start a runworker and wait until it has beaten once (its loop is running)."""
    return start_ready_worker
