"""What every background loop of a worker process shares: a pass, a wait, and riding out failures.

The claim loop, the lease keeper, the scheduler, the listener and the operations watcher each
repeat one pass until stopped. ``BackgroundLoop`` owns that repetition once: ``run()`` calls
``step()`` (one pass; it returns how long to wait before the next), waits on ``wake`` (set
early by a NOTIFY or by ``stop()``), and when a pass raises it logs, calls ``failed()`` (the
loop's own clean-up: close its connection, wake its subscribers) and waits with ``Backoff``
before trying again — a database outage is ridden out, a bug in a hook or a statement does
not end the process. ``start()`` runs the loop on a daemon thread; the claim loop calls
``run()`` on the process's main thread.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import InterfaceError, OperationalError

#: What a lost or refused database connection raises (Django's wrappers of psycopg's errors).
DB_ERRORS = (OperationalError, InterfaceError)


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


class Backoff:
    """The waits between retries: ``first`` seconds, doubling to ``ceiling``.

    ``deadline`` (time.monotonic()), when given, bounds the retrying: ``wait()`` answers False
    once the next wait would end past it (a write whose lease has run out by then is moot).
    """

    def __init__(self, first: float = 0.1, ceiling: float = 5.0, *, deadline: float | None = None):
        self.first = first
        self.ceiling = ceiling
        self.deadline = deadline
        self.delay = first

    def reset(self) -> None:
        self.delay = self.first

    def next(self) -> float:
        """The wait before the next try (and double the one after it)."""
        delay = self.delay
        self.delay = min(delay * 2, self.ceiling)
        return delay

    def wait(self, stopping: threading.Event | None = None) -> bool:
        """Sleep before the next try (cut short when ``stopping`` is set); False, at once, when
        the deadline leaves no time for one."""
        if self.deadline is not None and time.monotonic() + self.delay >= self.deadline:
            return False
        delay = self.next()
        if stopping is None:
            time.sleep(delay)
        else:
            stopping.wait(delay)
        return True


class BackgroundLoop:
    """Repeat ``step()`` until stopped; a subclass writes ``step()`` and, if it must, ``failed()``.

    ``step()`` returns the seconds to wait before the next pass (0: go straight round; None:
    the loop is done). ``wake.set()`` cuts a wait short; ``stop()`` ends the loop.
    """

    #: The thread's name, and the log's word for this loop.
    name = "workqueue-loop"
    #: The first wait after a failed pass, and the most it doubles to.
    first_backoff = 0.1
    max_backoff = 5.0
    log = logging.getLogger("workqueue.worker")

    def __init__(
        self,
        *,
        using: str = DEFAULT_DB_ALIAS,
        name: str | None = None,
        stopping: threading.Event | None = None,
        wake: Signal | None = None,
    ):
        self.using = using
        if name is not None:
            self.name = name
        self.stopping = stopping if stopping is not None else threading.Event()
        self.wake = wake if wake is not None else Signal()
        self.backoff = Backoff(self.first_backoff, self.max_backoff)
        self._thread: threading.Thread | None = None

    # -- what a subclass writes -----------------------------------------------------------

    def step(self) -> float | None:
        raise NotImplementedError

    def failed(self, exc: BaseException) -> None:
        """After a failed pass, before the backoff: drop the connection the pass broke."""
        self.close_connection()

    def finished(self) -> None:
        """When the loop ends (its thread's connection is its own: close it)."""
        self.close_connection()

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while not self.stopping.is_set():
                try:
                    wait = self.step()
                except Exception as exc:
                    if self.stopping.is_set():
                        break  # the failure is the stop's doing (a connection closed under it)
                    self.report(exc, self.backoff.delay)
                    self.failed(exc)
                    self.stopping.wait(self.backoff.next())
                    continue
                self.backoff.reset()
                if wait is None:
                    break
                if wait > 0:
                    self.wake.wait(wait)
        finally:
            self.finished()

    def report(self, exc: BaseException, delay: float) -> None:
        """Log a failed pass: a database outage in one line, anything else with its traceback
        (a bug must not end the worker, or its supervisor restarts it into the same error)."""
        if isinstance(exc, DB_ERRORS):
            name = exc.__class__.__name__
            self.log.warning("%s: database unavailable (%s: %s); retrying in %.2fs", self.name, name, exc, delay)
        else:
            self.log.exception("%s: pass failed; retrying in %.2fs", self.name, delay)

    def start(self):
        """Run the loop on a daemon thread; returns self."""
        self._thread = threading.Thread(target=self.run, name=self.name, daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """End the loop and wait up to ``timeout`` seconds for its thread."""
        self.stopping.set()
        self.wake.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def close_connection(self) -> None:
        try:
            connections[self.using].close()
        except Exception:
            pass
