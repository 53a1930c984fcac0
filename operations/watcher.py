"""The watcher: follow operations for subscribers and hand them snapshots, latest wins.

One per process (``operations.watcher.shared()``). Every subscription has a one-slot buffer:
a slow subscriber misses intermediate states but always gets the newest snapshot, and the
terminal snapshot is always delivered before its stream ends. A payload-free NOTIFY from
every write wakes the loop, which re-reads *all* followed operations in one query and
compares revisions; reads are floored at ``WATCHER_MIN_READ_INTERVAL`` however many wakes
arrive, and ``WATCHER_POLL`` is the fallback when no notification comes (the watcher is
exactly as correct without NOTIFY, only later). Subscribing to a finished operation yields
its terminal snapshot and ends at once.

Writes notify only for operations somebody follows: the watcher records what it follows in
a small table (rows that expire unless refreshed), and the writing statements notify when a
row exists. A notifying transaction holds a database-wide lock through its commit, so the
thousands of operations nobody is watching must not pay for it.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections

from operations import store
from operations.exceptions import OperationNotFound, TooManyWatchers, WatcherClosed
from workqueue.worker.loop import BackgroundLoop

log = logging.getLogger("operations.watcher")


class _Gone:
    """The operation's row disappeared (reaped) while it was followed."""

    def __repr__(self) -> str:
        return "GONE"


GONE = _Gone()


class Ended(Exception):
    """A subscription has nothing more to deliver (``aget``'s StopIteration)."""


class Subscription:
    """Snapshots of one operation. Iterate it, or call ``get(timeout)``."""

    def __init__(self, watcher: Watcher | None, op_id: str):
        self.op_id = op_id
        self._watcher = watcher
        self._cond = threading.Condition()
        self._slot = None
        self._ending = False  # the last snapshot has been offered
        self._closed = False  # nothing more will come
        self.revision = 0
        self.delivered = 0
        self._waiters: set = set()  # callbacks of async readers waiting in aget()

    def _notify(self) -> None:
        self._cond.notify_all()
        for wake in list(self._waiters):
            wake()

    def _offer(self, snapshot, *, final: bool = False) -> None:
        with self._cond:
            if self._closed or self._ending:
                return
            self._slot = snapshot
            if final:
                self._ending = True
            self._notify()

    def _end(self) -> None:
        with self._cond:
            self._ending = True
            self._notify()

    @property
    def closed(self) -> bool:
        with self._cond:
            return self._closed or (self._ending and self._slot is None)

    def get(self, timeout: float | None = None):
        """The next snapshot; None on timeout; raises StopIteration when the stream is over."""
        with self._cond:
            deadline = None if timeout is None else time.monotonic() + timeout
            while self._slot is None:
                if self._closed or self._ending:
                    self._closed = True
                    raise StopIteration
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return None
                self._cond.wait(remaining)
            snapshot, self._slot = self._slot, None
            self.delivered += 1
            return snapshot

    async def aget(self, timeout: float):
        """``get`` for an event loop: waits without holding a thread; raises ``Ended`` at the end."""
        loop = asyncio.get_running_loop()
        woken = asyncio.Event()

        def wake() -> None:
            try:
                loop.call_soon_threadsafe(woken.set)
            except RuntimeError:  # the loop is gone: nobody is waiting any more
                pass

        deadline = loop.time() + timeout
        while True:
            with self._cond:
                if self._slot is not None:
                    snapshot, self._slot = self._slot, None
                    self.delivered += 1
                    return snapshot
                if self._closed or self._ending:
                    self._closed = True
                    raise Ended
                remaining = deadline - loop.time()
                if remaining <= 0:
                    return None
                woken.clear()
                self._waiters.add(wake)
            try:
                await asyncio.wait_for(woken.wait(), remaining)
            except TimeoutError:
                pass
            finally:
                with self._cond:
                    self._waiters.discard(wake)

    def __iter__(self):
        while True:
            try:
                snapshot = self.get()
            except StopIteration:
                return
            yield snapshot

    def close(self) -> None:
        """Stop following (idempotent)."""
        with self._cond:
            self._closed = True
            self._notify()
        if self._watcher is not None:
            self._watcher._remove(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class Watcher(BackgroundLoop):
    """Follows operations for subscribers; one query per wake for all of them."""

    name = "operations-watcher"
    log = log

    def __init__(
        self,
        *,
        poll: float = 2.0,
        min_read_interval: float = 0.25,
        max_subscriptions: int = 1024,
        channel: str = "",
        using: str = DEFAULT_DB_ALIAS,
    ):
        super().__init__(using=using)
        self.poll = poll
        self.min_read_interval = min_read_interval
        self.max_subscriptions = max_subscriptions
        self.channel = channel
        self._subs: set[Subscription] = set()
        self._lock = threading.Lock()
        self._closed = False
        self._last_read = 0.0
        self._listen_token: int | None = None
        self.reads = 0  # queries issued by the loop (one per wake)
        self.token = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.follow_ttl = max(30.0, 5 * poll)
        self._followed: collections.Counter[str] = collections.Counter()
        self._last_refresh = time.monotonic()

    # -- subscribing --------------------------------------------------------------------

    def watch(self, op_id: str, *, owner: str | None = None) -> Subscription:
        """Follow ``op_id``; its current snapshot is delivered before this returns."""
        if self._closed:
            raise WatcherClosed()
        if self.channel:
            # Following writes a row: make sure there is something this caller may follow
            # first, so a watch that will be refused writes nothing.
            current = self._read(op_id, owner)
            if current.done:
                return self._finished(op_id, current)
            with self._lock:
                self._check_room()
        # Follow first, then read: a write that commits after the follow notifies, and one
        # that committed before it is in the first snapshot.
        self._follow(op_id)
        try:
            current = self._read(op_id, owner)
            sub = Subscription(self, op_id)
            sub.revision = current.revision
            sub._offer(current, final=current.done)
            if current.done:
                self._unfollow(op_id)
                return sub  # a finished operation needs no following, so it takes no slot
            with self._lock:
                self._check_room()
                self._subs.add(sub)
        except BaseException:
            self._unfollow(op_id)
            raise
        self._ensure_running()
        return sub

    def _check_room(self) -> None:
        # Under self._lock.
        if len(self._subs) >= self.max_subscriptions:
            raise TooManyWatchers(
                f"this process already follows {self.max_subscriptions} operations "
                "(OPERATIONS['WATCHER_MAX_SUBSCRIPTIONS']); retry later"
            )

    def _read(self, op_id: str, owner: str | None):
        current = store.get_many([op_id], using=self.using).get(op_id)
        if current is None or (owner is not None and current.owner != owner):
            raise OperationNotFound(f"operation {op_id!r} not found")
        return current

    def _finished(self, op_id: str, current) -> Subscription:
        sub = Subscription(self, op_id)
        sub.revision = current.revision
        sub._offer(current, final=True)
        return sub

    def _remove(self, sub: Subscription) -> None:
        with self._lock:
            if sub not in self._subs:
                return
            self._subs.discard(sub)
        self._unfollow(sub.op_id)

    def _follow(self, op_id: str) -> None:
        with self._lock:
            self._followed[op_id] += 1
            first = self._followed[op_id] == 1
        if first and self.channel:
            self._write("follow", store.watch_follow, [op_id], ttl=self.follow_ttl)

    def _unfollow(self, op_id: str) -> None:
        with self._lock:
            self._followed[op_id] -= 1
            last = self._followed[op_id] <= 0
            if last:
                del self._followed[op_id]
        if last and self.channel:
            self._write("forget", store.watch_forget, [op_id])

    def _write(self, what: str, write: Callable[..., None], ids: list[str] | None, **params: Any) -> None:
        # Following is what makes writes notify; failing at it costs latency (the poll still
        # delivers), never a subscription.
        try:
            write(ids, watcher=self.token, using=self.using, **params)
        except Exception as exc:
            log.warning("watcher could not %s (%s); relying on its poll", what, exc)
            connections[self.using].close_if_unusable_or_obsolete()

    def subscriptions(self) -> int:
        with self._lock:
            return len(self._subs)

    def notified(self, *_args) -> None:
        self.wake.set()

    # -- the loop -----------------------------------------------------------------------

    def _ensure_running(self) -> None:
        with self._lock:
            if self.running:
                return
            if self.channel and self._listen_token is None:
                from workqueue import listener

                self._listen_token = listener.shared().subscribe(self.channel, self.notified)
            self.start()

    def close(self) -> None:
        """Stop the loop and end every subscription (idempotent: a second close does nothing,
        no database write either)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self.stopping.set()
        self.wake.set()
        with self._lock:
            subs = list(self._subs)
            self._subs.clear()
        for sub in subs:
            sub._end()
        if self._listen_token is not None:
            from workqueue import listener

            listener.shared().unsubscribe(self._listen_token)
            self._listen_token = None
        with self._lock:
            self._followed.clear()
        if self.channel:
            self._write("forget", store.watch_forget, None)

    def _refresh_follows(self) -> None:
        if not self.channel or time.monotonic() - self._last_refresh < self.follow_ttl / 3:
            return
        self._last_refresh = time.monotonic()
        with self._lock:
            ids = sorted(self._followed)
        if ids:
            self._write("follow", store.watch_follow, ids, ttl=self.follow_ttl)

    def step(self) -> float:
        """Wait for a wake (or the poll), then read every followed operation in one query and
        hand each subscriber its snapshot if its revision moved."""
        self.wake.wait(self.poll)
        if self._closed:
            return 0
        pause = self.min_read_interval - (time.monotonic() - self._last_read)
        if pause > 0:
            time.sleep(pause)
        self._refresh_follows()
        with self._lock:
            subs = list(self._subs)
        if not subs:
            return 0
        self._last_read = time.monotonic()
        found = store.get_many(sorted({s.op_id for s in subs}), using=self.using)
        self.reads += 1
        for sub in subs:
            self._deliver(sub, found.get(sub.op_id))
        return 0

    def _deliver(self, sub: Subscription, op) -> None:
        if op is None:
            sub._offer(GONE, final=True)
            self._remove(sub)
        elif op.revision != sub.revision:
            sub.revision = op.revision
            sub._offer(op, final=op.done)
            if op.done:
                self._remove(sub)

    def report(self, exc: BaseException, delay: float) -> None:
        log.warning("watcher read failed (%s); retrying in %.2fs", exc, delay)


def watch(op_id: str, *, owner: str | None = None) -> Subscription:
    """Follow one operation from this process: ``operations.watch(op_id)``.

    Iterate the returned subscription for snapshots (``Operation`` instances, newest wins: a
    slow reader skips intermediate ones), ending after the terminal one; ``get(timeout)``
    waits for the next. Close it, or use it as a context manager, to stop following early.
    Scoped to ``owner`` when given; raises ``OperationNotFound``, ``TooManyWatchers``.
    """
    return shared().watch(op_id, owner=owner)


_shared: Watcher | None = None
_shared_lock = threading.Lock()


def shared() -> Watcher:
    """The process's watcher, built from OPERATIONS settings on first use."""
    global _shared
    from operations.conf import ops_settings

    with _shared_lock:
        if _shared is None or _shared._closed:
            conf = ops_settings()
            _shared = Watcher(
                poll=conf.watcher_poll,
                min_read_interval=conf.watcher_min_read_interval,
                max_subscriptions=conf.watcher_max_subscriptions,
                channel=conf.notify_channel,
            )
        return _shared
