"""Wake blocked polls when work arrives on a wire queue.

One subscription on the process's shared listener (``workqueue.listener.shared()``) fans
each enqueue NOTIFY (payload: the queue name) out to every poll waiting in this process.
A waiting poll holds no transaction and no lock: it only waits on a ``threading.Event``.
A notification may be missed (NOTIFY is at-most-once); the poll then just times out, which
is at most ``block_ms`` (< 1 s) late.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from workqueue import listener
from workqueue.conf import wq_settings


class Wakeups:
    """Events of the polls waiting in this process, set by wire-queue notifications."""

    def __init__(self):
        self._lock = threading.Lock()
        self._waiting: set[threading.Event] = set()
        self._channels: dict[str, int] = {}

    def _subscribe(self) -> None:
        channel = wq_settings().notify_channel
        with self._lock:
            if channel in self._channels:
                subscribed = True
            else:
                subscribed = False
                self._channels[channel] = -1
        if subscribed:
            listener.shared().start()  # a no-op while its thread runs; restarts a stopped one
            return
        token = listener.shared().subscribe(channel, self._notified)
        with self._lock:
            self._channels[channel] = token

    def _notified(self, payload: str | None) -> None:
        # None means the listener reconnected and may have missed something: wake everyone.
        if payload is not None:
            try:
                if not wq_settings().queue(payload).over_wire:
                    return
            except Exception:
                return
        with self._lock:
            for event in self._waiting:
                event.set()

    @contextmanager
    def waiter(self) -> Iterator[threading.Event]:
        """Register an event that the next wire-queue notification sets; yield it."""
        self._subscribe()
        event = threading.Event()
        with self._lock:
            self._waiting.add(event)
        try:
            yield event
        finally:
            with self._lock:
                self._waiting.discard(event)

    def reset(self) -> None:
        """Forget subscriptions (tests stop the shared listener between runs)."""
        with self._lock:
            for token in self._channels.values():
                if token > 0:
                    listener.shared().unsubscribe(token)
            self._channels.clear()


_wakeups = Wakeups()


def wakeups() -> Wakeups:
    """The process's wakeups for blocked polls."""
    return _wakeups
