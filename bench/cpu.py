"""CPU spent per item: the client processes' and their PostgreSQL backends'.

On a small machine the clients' Python and the server's backends share the same cores, so
the CPU an item costs decides throughput, and it stays put when the wall-clock rate moves
with the machine's load. A ``Meter`` reads it from ``/proc``:

- the client processes by pid (``utime + stime`` of ``/proc/<pid>/stat``: every thread,
  live or ended, of that process);
- the PostgreSQL backends that serve them, found in ``pg_stat_activity`` by the
  ``application_name`` the clients connect with (``PGAPPNAME`` in their environment does it
  for anything built on libpq). Only when the server runs on this machine can its backends'
  ``/proc`` be read: otherwise the backends' figure is ``None`` ("n/a").

A backend that connects during the window counts from zero (its start-up is part of the
cost); one that ends during the window is lost, so measure before stopping the clients.
Resolution is the kernel's clock tick (10 ms at 100 Hz) per process: drain enough items that
this is noise (20,000 items × a few µs each is hundreds of ticks).
"""

from __future__ import annotations

import os
import resource
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

_TICK = os.sysconf("SC_CLK_TCK")

BACKENDS_SQL = (
    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
    "AND application_name = %s AND backend_type = 'client backend'"
)


def app_name(prefix: str = "bench") -> str:
    """A fresh application_name to tag one measured set of clients' connections with."""
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def process_seconds(pid: int) -> float | None:
    """CPU seconds (user + system, every thread) a live process has used; None if it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may hold spaces: split after it.
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / _TICK  # utime, stime: fields 14 and 15


def self_seconds() -> float:
    """CPU seconds this process has used (every thread)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def is_postgres(pid: int) -> bool:
    """Whether ``pid`` is a PostgreSQL process on this machine (so the server is local)."""
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip() in ("postgres", "postmaster")
    except OSError:
        return False


def backend_seconds(pid: int) -> float | None:
    """CPU seconds of one backend, or None when the server is not on this machine."""
    return process_seconds(pid) if is_postgres(pid) else None


@dataclass
class Cpu:
    """CPU seconds spent in a window, and what they make per item."""

    client_s: float
    server_s: float | None  # None: the server is not local, its backends cannot be read

    def per_item_us(self, items: int) -> tuple[float, float | None]:
        if items <= 0:
            return 0.0, None
        client = self.client_s / items * 1e6
        return client, None if self.server_s is None else self.server_s / items * 1e6

    def __add__(self, other: Cpu) -> Cpu:
        server = None if self.server_s is None or other.server_s is None else self.server_s + other.server_s
        return Cpu(self.client_s + other.client_s, server)


class Meter:
    """CPU of some client processes and of their backends between ``start()`` and ``stop()``.

    ``backend_pids`` returns the pids of the backends to count (e.g. a query on
    pg_stat_activity by application_name, see ``BACKENDS_SQL``); it is called at both ends,
    so backends opened during the window are counted too. When none is found, or one cannot
    be read (the server is elsewhere), the server figure is None ("n/a"), never a made-up zero.
    """

    def __init__(self, pids: Iterable[int], backend_pids: Callable[[], Iterable[int]]):
        self.pids = list(pids)
        self.backend_pids = backend_pids
        self._start: dict[int, float] = {}
        self._backends: dict[int, float | None] = {}

    def start(self) -> Meter:
        self._start = {pid: process_seconds(pid) or 0.0 for pid in self.pids}
        self._backends = {pid: backend_seconds(pid) for pid in self.backend_pids()}
        return self

    def stop(self) -> Cpu:
        client = sum((process_seconds(pid) or 0.0) - self._start[pid] for pid in self.pids)
        ends = {pid: backend_seconds(pid) for pid in self.backend_pids()}
        seen = {**self._backends, **ends}
        if not seen or any(v is None for v in seen.values()):
            return Cpu(client, None)
        server = 0.0
        for pid, end in ends.items():
            server += end - (self._backends.get(pid) or 0.0)
        return Cpu(client, server)


def wait_quiet(pids: Iterable[int], *, window: float = 0.5, limit: float = 0.03, timeout: float = 30.0) -> bool:
    """Wait until the processes are idle: under ``limit`` CPU seconds together over ``window``
    (their imports and start-up done), so a measurement starting now counts only the work.
    Returns False if they were still busy at ``timeout``."""
    pids = list(pids)
    deadline = time.monotonic() + timeout
    before = sum(process_seconds(p) or 0.0 for p in pids)
    while time.monotonic() < deadline:
        time.sleep(window)
        now = sum(process_seconds(p) or 0.0 for p in pids)
        if now - before < limit:
            return True
        before = now
    return False


def backends_by_app_name(cursor_factory, name: str) -> Callable[[], list[int]]:
    """A ``backend_pids`` for Meter: this database's client backends tagged ``name``.

    ``cursor_factory`` is a callable returning a context-managed DB-API cursor (Django's
    ``connection.cursor`` or a psycopg connection's ``cursor``).
    """

    def pids() -> list[int]:
        with cursor_factory() as cur:
            cur.execute(BACKENDS_SQL, [name])
            return [row[0] for row in cur.fetchall()]

    return pids


def fmt_us(value: float | None) -> str:
    """µs per item for a table cell ("n/a" when it could not be read)."""
    if value is None:
        return "n/a"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.1f}"
