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

from workqueue.worker.loop import BackgroundLoop, Signal

__all__ = ["Listener", "Signal", "connection_kwargs", "shared", "wait_for"]

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


class Listener(BackgroundLoop):
    """Deliver NOTIFY payloads on subscribed channels to callbacks, from one thread."""

    name = "workqueue-listener"
    log = log

    def __init__(self, using: str = DEFAULT_DB_ALIAS, *, name: str = "workqueue-listener"):
        super().__init__(using=using, name=name)
        self._subs: dict[int, tuple[str, Callable[[str | None], None]]] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._listening: set[str] = set()
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

    def start(self):
        with self._lock:
            if not self.running:
                self.stopping.clear()
                super().start()
        return self

    def stop(self, timeout: float = 2.0) -> None:
        super().stop(timeout)

    def wait_connected(self, timeout: float = 10.0) -> bool:
        return self.connected.wait(timeout)

    def step(self) -> None:
        """One connection's life: LISTEN, deliver until stopped (None ends the loop) or until
        the connection fails (the loop reconnects with backoff)."""
        with psycopg.connect(autocommit=True, **connection_kwargs(self.using)) as conn:
            self._listening = set()
            self._sync(conn)
            self.connected.set()
            if self.backoff.delay > self.first_backoff:
                log.info("listener reconnected")
                # Whatever was sent while we were away is lost: wake everyone.
                self._dispatch(None, None)
                self.backoff.reset()
            while not self.stopping.is_set():
                for note in conn.notifies(timeout=0.25):
                    self._dispatch(note.channel, note.payload)
                self._sync(conn)
        return None

    def report(self, exc: BaseException, delay: float) -> None:
        log.warning("listener connection lost (%s); reconnecting in %.1fs", exc.__class__.__name__, delay)

    def failed(self, exc: BaseException) -> None:
        self.connected.clear()
        self.reconnects += 1
        self._dispatch(None, None)

    def finished(self) -> None:
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


def wait_for(predicate: Callable[[], bool], timeout: float, interval: float = 0.01) -> bool:
    """Poll ``predicate`` until true or ``timeout`` (a test and command helper)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return predicate()
