"""One LISTEN connection per process, shared by everything that wants to be woken.

A dedicated psycopg connection in autocommit (a notification is only delivered outside a
transaction) LISTENs on every channel somebody subscribed to; a thread reads notifications
and calls the subscribers' callbacks. Nothing may depend on a notification arriving:
NOTIFY is at-most-once and connection-scoped, so every user also polls. When the connection
drops, the listener reconnects with backoff and calls every callback with ``payload=None``
("you may have missed something").

Behind PgBouncer in transaction mode LISTEN does not work; set
``WORKQUEUE["LISTEN_DATABASE_URL"]`` to a direct connection to the server.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable

import psycopg
from django.db import DEFAULT_DB_ALIAS, connections
from psycopg import sql as pgsql

log = logging.getLogger("workqueue.listener")

_NOT_CONNINFO = {
    "cursor_factory",
    "context",
    "prepare_threshold",
    "server_side_binding",
    "pool",
    "isolation_level",
    "assume_role",
    "client_encoding",
}


def connection_kwargs(using: str = DEFAULT_DB_ALIAS) -> dict:
    """psycopg.connect() keyword arguments for a side connection to Django's database."""
    from workqueue.conf import wq_settings

    url = wq_settings().listen_database_url
    if url:
        return {"conninfo": url}
    params = connections[using].get_connection_params()
    return {k: v for k, v in params.items() if k not in _NOT_CONNINFO}


class Listener:
    """Deliver NOTIFY payloads on subscribed channels to callbacks, from one thread."""

    def __init__(self, using: str = DEFAULT_DB_ALIAS, *, name: str = "workqueue-listener"):
        self.using = using
        self.name = name
        self._subs: dict[int, tuple[str, Callable[[str | None], None]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._listening: set[str] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.connected = threading.Event()
        self.reconnects = 0

    # -- subscriptions ------------------------------------------------------------------

    def subscribe(self, channel: str, callback: Callable[[str | None], None]) -> int:
        """Call ``callback(payload)`` for each notification on ``channel``; return a token."""
        with self._lock:
            token = next(self._ids)
            self._subs[token] = (channel, callback)
        self.start()
        return token

    def unsubscribe(self, token: int) -> None:
        with self._lock:
            self._subs.pop(token, None)

    def _channels(self) -> set[str]:
        with self._lock:
            return {c for c, _ in self._subs.values()}

    def _dispatch(self, channel: str | None, payload: str | None) -> None:
        with self._lock:
            targets = [cb for c, cb in self._subs.values() if channel is None or c == channel]
        for cb in targets:
            try:
                cb(payload)
            except Exception:
                log.exception("listener callback failed")

    # -- the thread ---------------------------------------------------------------------

    def start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._stop.clear()
            self._thread = threading.Thread(target=self._run, name=self.name, daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 2.0) -> None:
        self._stop.set()
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def wait_connected(self, timeout: float = 10.0) -> bool:
        return self.connected.wait(timeout)

    def _run(self) -> None:
        backoff = 0.1
        while not self._stop.is_set():
            try:
                with psycopg.connect(autocommit=True, **connection_kwargs(self.using)) as conn:
                    self._listening = set()
                    self._sync(conn)
                    self.connected.set()
                    if backoff > 0.1:
                        log.info("listener reconnected")
                        # Whatever was sent while we were away is lost: wake everyone.
                        self._dispatch(None, None)
                    backoff = 0.1
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=0.25):
                            self._dispatch(note.channel, note.payload)
                        self._sync(conn)
            except Exception as exc:
                self.connected.clear()
                if self._stop.is_set():
                    break
                self.reconnects += 1
                log.warning("listener connection lost (%s); reconnecting in %.1fs", exc.__class__.__name__, backoff)
                self._dispatch(None, None)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 5.0)
        self.connected.clear()

    def _sync(self, conn) -> None:
        wanted = self._channels()
        for channel in sorted(wanted - self._listening):
            conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
        for channel in sorted(self._listening - wanted):
            conn.execute(pgsql.SQL("UNLISTEN {}").format(pgsql.Identifier(channel)))
        self._listening = wanted


_shared: Listener | None = None
_shared_lock = threading.Lock()


def shared() -> Listener:
    """The process's listener (started on first subscription)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = Listener()
        return _shared


class Signal:
    """A coalescing wake-up: ``set()`` from any thread, ``wait(timeout)`` from one."""

    def __init__(self):
        self._event = threading.Event()

    def set(self, *_args) -> None:
        # Already set: nothing to do, and no lock to take (the settler calls this per batch,
        # the listener per notification). A set() skipped here is never lost: the waiter
        # clears the flag only after it woke, and looks at the work after clearing it.
        if not self._event.is_set():
            self._event.set()

    def wait(self, timeout: float | None) -> bool:
        fired = self._event.wait(timeout)
        self._event.clear()
        return fired


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (a test and command helper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
