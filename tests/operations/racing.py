"""Race two writers deterministically: each on its own connection in a thread, started in a
chosen order, and each seen waiting on a row lock (pg_stat_activity) before the next goes.

Used to prove lock order: two writers that take the same two rows in opposite orders deadlock
when a third transaction holding one of the rows lets them go at once.
"""

from __future__ import annotations

import threading

import psycopg
from django.db import connection, connections

from tests.conftest import wait_until


def waits_on_a_lock(pid: int) -> bool:
    """Whether backend ``pid`` is waiting for a heavyweight lock (a row, a transaction)."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")  # inside a transaction the view is cached
        cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
        found = cur.fetchone()
    return found is not None and found[0] == "Lock"


class InThread:
    """Run ``fn()`` on its own connection in a thread; keep its result or error and its backend pid."""

    def __init__(self, fn):
        self.fn = fn
        self.result = None
        self.error: BaseException | None = None
        self.pid: int | None = None
        self._started = threading.Event()
        self.thread = threading.Thread(target=self._body, daemon=True)
        self.thread.start()
        assert self._started.wait(30), "the thread did not start"

    def _body(self) -> None:
        try:
            conn = connections["default"]
            conn.ensure_connection()
            self.pid = conn.connection.info.backend_pid
            self._started.set()
            self.result = self.fn()
        except BaseException as exc:
            self.error = exc
        finally:
            self._started.set()
            connections.close_all()

    def blocked_or_done(self) -> bool:
        return not self.thread.is_alive() or waits_on_a_lock(self.pid)

    def wait_blocked(self, what: str) -> InThread:
        wait_until(self.blocked_or_done, message=f"{what} to wait on a lock")
        return self

    def finish(self, timeout: float = 60.0):
        """Wait for the thread; return its result (its error is kept in ``error``)."""
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the thread did not finish"
        return self.result

    def join(self, timeout: float = 60.0):
        """Wait for the thread; return its result or raise its error."""
        result = self.finish(timeout)
        if self.error is not None:
            raise self.error
        return result


def is_deadlock(exc: BaseException | None) -> bool:
    while exc is not None:
        if isinstance(exc, psycopg.errors.DeadlockDetected):
            return True
        exc = exc.__cause__ or exc.__context__
    return False


def deadlocks_so_far() -> int:
    """PostgreSQL's count of deadlocks detected in the test database."""
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_clear_snapshot()")
        cur.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cur.fetchone()[0]
