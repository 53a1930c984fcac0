"""The Reporter a run receives: buffered, in-memory progress, flushed as one statement.

Everything on it is cheap enough for a tight loop: ``advance`` is an integer add. The buffer
is flushed every ``progress_interval`` (by one flusher thread per process, and only when
something changed), at every unit boundary (by the flusher within a tick when the run is
inside a transaction of its own, which a flush must not join, or when a flush went out less
than a tick ago), and with the final write when the run returns.
A flush is one statement that writes progress, extends the lease of the operation and its
work item, and brings back whether cancellation was requested and whether this worker still
holds the operation. Nothing on the Reporter raises: a flush that fails is logged and counted.

A run that reports nothing is never flushed, so it keeps its lease only for ``LEASE`` and
cannot observe a cancellation: report progress. A workflow's run is the exception
(``keepalive``): its steps may be long and quiet, so it is flushed every interval regardless.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from django.db import DEFAULT_DB_ALIAS, connections

from workqueue import tracing
from workqueue.states import StopReason

if TYPE_CHECKING:
    from operations.models import Operation

log = logging.getLogger("operations.reporter")

MAX_MESSAGE = 1024


@dataclass(frozen=True, slots=True)
class Attempt:
    """The execution a run is in: the operation id (a stable idempotency key), which attempt
    this is (counting from 1), and whether no further attempt will follow if it fails."""

    id: str
    number: int
    final: bool


@dataclass(frozen=True, slots=True)
class Ack:
    """What a flush learned on its way back."""

    revision: int
    cancel_requested: bool
    held: bool


class Stops(Protocol):
    """Where a run's stop event and its reason live: the worker's ``Context`` (shared with the
    worker, so its shutdown reaches the run at once), or the Reporter's own."""

    @property
    def cancelled(self) -> threading.Event: ...

    @property
    def stop_reason(self) -> StopReason | None: ...

    def stop(self, reason: str) -> None: ...


class OwnStops:
    """``Stops`` for a Reporter made without a worker's Context: an event and its first reason."""

    _lock = threading.Lock()

    def __init__(self, event: threading.Event | None = None):
        self.cancelled = event if event is not None else threading.Event()
        self.stop_reason: StopReason | None = None

    def stop(self, reason: str) -> None:
        with OwnStops._lock:
            if self.stop_reason is None:
                self.stop_reason = StopReason(reason)
        self.cancelled.set()


class CancelSignal:
    """An event a run can test without blocking; remembers whether the run ever saw it set."""

    def __init__(self, event: threading.Event | None = None):
        # The worker's own cancel event when there is one, so a shutdown's "stop now" reaches
        # the run at once rather than at its next flush.
        self._event = event if event is not None else threading.Event()
        self.observed = False

    def set(self) -> None:
        self._event.set()

    def peek(self) -> bool:
        """Whether it is set, without counting as the run having looked."""
        return self._event.is_set()

    def is_set(self) -> bool:
        fired = self._event.is_set()
        if fired:
            self.observed = True
        return fired

    def wait(self, timeout: float | None = None) -> bool:
        fired = self._event.wait(timeout)
        if fired:
            self.observed = True
        return fired

    def __bool__(self) -> bool:
        return self.is_set()


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Reporter:
    """How a run says where it has got to. Passed to ``run(request, reporter)``."""

    def __init__(
        self,
        *,
        op_id: str,
        item_id: int,
        token,
        attempt: Attempt,
        lease: float,
        interval: float,
        count_label: str = "",
        units_total: int | None = None,
        units_done: int = 0,
        count: int = 0,
        using: str = DEFAULT_DB_ALIAS,
        cancelled: threading.Event | None = None,
        stops: Stops | None = None,
    ):
        self.op_id = op_id
        self.item_id = item_id
        self.token = token
        self.attempt = attempt
        self.count_label = count_label
        self._stops: Stops = stops if stops is not None else OwnStops(cancelled)
        self.cancelled = CancelSignal(self._stops.cancelled)
        self._lease = lease
        self.interval = interval
        self.using = using
        self._units_total = units_total
        self._units_done = units_done
        self._unit = ""
        self._message = ""
        self._count = count
        self._version = 0
        self._flushed = (count, 0)
        self._lock = threading.Lock()
        self.last_flush = time.monotonic()
        self.operation: Operation | None = None  # the row as begin left it (set by the runner)
        self.saved: Operation | None = None  # the row as its terminal write left it (set by the runner)
        self.held = True
        self.cancel_requested = False
        self.revision = 0
        self.flushes = 0
        self.flush_errors = 0
        self._closed = False
        self.due = False  # a unit boundary is waiting for the flusher thread
        self.keepalive = False  # flushed every interval even when nothing changed (workflows)
        # The run's span (workqueue.tracing): each flush adds a progress event to it.
        self._span = tracing.current_span()

    # -- what a run calls ---------------------------------------------------------------

    def set_units(self, total: int) -> None:
        """Declare the denominator: how many units this operation fans out over."""
        if isinstance(total, bool) or not isinstance(total, int) or total < 0:
            return
        self._units_total = total
        self._version += 1

    def start_unit(self, name: str) -> None:
        """Name the unit now in progress (flushed at once)."""
        self._unit = _clip(str(name))
        self._version += 1
        self._boundary()

    def finish_unit(self) -> None:
        """Record that the current unit is complete, raising the numerator (flushed at once)."""
        self._units_done += 1
        self._unit = ""
        self._version += 1
        self._boundary()

    def advance(self, n: int = 1) -> None:
        """Add ``n`` to the monotonic count (negative values are ignored)."""
        if n > 0:
            self._count += n

    def say(self, fmt: str, *args) -> None:
        """Set the human-readable note (``fmt % args``), truncated to 1024 characters."""
        try:
            text = fmt % args if args else str(fmt)
        except (TypeError, ValueError):
            text = " ".join([str(fmt), *map(str, args)])
        self._message = _clip(text)
        self._version += 1

    @property
    def parent(self):
        """The batch or chain this run is a child of, or whose end started it (its ``then``);
        None otherwise. Read fresh on each access: ``operations.children(reporter.parent.id)``
        pages through its children and their results."""
        from operations import batches

        return batches.parent_of(self.operation, using=self.using)

    @property
    def previous(self):
        """In a chain, the step before this one (succeeded, with its ``result``); else None."""
        from operations import batches

        return batches.previous_of(self.operation, using=self.using)

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the run was told to stop (the first reason given: ``cancel_requested``,
        ``lease_lost``, ``timeout``, ``shutdown``...), or None while it may go on."""
        return self._stops.stop_reason

    def is_cancelled(self) -> bool:
        """True once somebody asked this operation to stop (never blocks). A shutdown, a lost
        hold or a timeout set ``cancelled`` (stop now) but not this: the work is not unwanted."""
        if self.cancel_requested or self.stop_reason is StopReason.CANCEL_REQUESTED:
            return self.cancelled.is_set()  # and the run has looked (cancelled.observed)
        return False

    def signal_stop(self, reason: str) -> None:
        """Tell the run to stop for ``reason`` (a ``StopReason``; the first one given is kept)."""
        self._stops.stop(reason)

    def stopped_by_worker(self) -> bool:
        """Cancelled by the process hosting the run (shutdown), not by a request, a lost hold or
        its soft timeout (a run that returns after that has done its work; one that raises failed)."""
        return (
            self.cancelled.peek()
            and self.held
            and not self.cancel_requested
            and self.stop_reason is not StopReason.TIMEOUT
        )

    def _boundary(self) -> None:
        # A unit boundary is flushed at once on the run's own connection, unless the run is
        # inside a transaction of its own: a flush there would join it (the lease extension
        # invisible to others until commit, the operation's row locked until then, and the
        # flusher thread waiting on that lock while holding this reporter's lock, which the
        # run's next boundary needs: a deadlock). The flusher thread writes it instead, within
        # a tick. So it does when the last flush went out less than a tick ago: a run of many
        # small units (finish_unit then start_unit, hundreds a second) costs about one
        # statement per tick rather than two per unit.
        from django.db import transaction

        if transaction.get_connection(self.using).in_atomic_block or time.monotonic() - self.last_flush < flusher.tick:
            self.due = True
        else:
            self._write()

    # -- flushing -----------------------------------------------------------------------

    def dirty(self) -> bool:
        return (self._count, self._version) != self._flushed

    def snapshot(self) -> dict:
        return {
            "units_total": self._units_total,
            "units_done": self._units_done,
            "unit": self._unit,
            "message": self._message,
            "count": self._count,
        }

    def flush(self) -> Ack | None:
        """Write buffered progress now (one statement). Never raises."""
        return self._write()

    def _write(self) -> Ack | None:
        from operations import store

        with self._lock:
            if not self.held or self._closed:
                return None
            self.due = False
            mark = (self._count, self._version)
            try:
                ack = store.flush(
                    id=self.op_id,
                    item_id=self.item_id,
                    token=self.token,
                    lease=self._lease,
                    progress=self.snapshot(),
                    using=self.using,
                )
            except Exception as exc:
                self.flush_errors += 1
                log.warning("progress flush of %s failed: %s", self.op_id, exc)
                connections[self.using].close_if_unusable_or_obsolete()
                return None
            self.flushes += 1
            self.last_flush = time.monotonic()
            self._flushed = mark
            if ack is None:
                self.held = False
                log.warning(
                    "%s: lease lost (another worker has it, or it was settled); stop producing effects", self.op_id
                )
                self.signal_stop(self._why_not_held())
                return Ack(revision=self.revision, cancel_requested=self.cancel_requested, held=False)
            self.revision, self.cancel_requested = ack
            if self.cancel_requested:
                self.signal_stop(StopReason.CANCEL_REQUESTED)
            if self._span is not None:
                tracing.add_event(
                    self._span,
                    "operations.progress",
                    {
                        "operations.units_done": self._units_done,
                        "operations.units_total": -1 if self._units_total is None else self._units_total,
                        "operations.count": self._count,
                        "operations.unit": self._unit,
                        "operations.message": self._message,
                    },
                )
            return Ack(revision=self.revision, cancel_requested=self.cancel_requested, held=True)

    def _why_not_held(self) -> str:
        """Why a flush found the operation no longer ours (one read, only then)."""
        from operations import store

        try:
            return store.stop_reason(id=self.op_id, attempt=self.attempt.number, using=self.using)
        except Exception as exc:
            log.warning("could not read why %s was lost: %s", self.op_id, exc)
            connections[self.using].close_if_unusable_or_obsolete()
            return StopReason.LEASE_LOST

    def close(self) -> None:
        """Stop flushing (the run ended; its final write carries the progress).

        Taking the lock waits out a flush already in flight, so no flush can land after the
        final write and mistake the finished operation for a lost one.
        """
        with self._lock:
            self._closed = True


class AsyncReporter(Reporter):
    """The Reporter an ``async def`` run gets.

    The buffered methods are the same and only touch memory, so they never block the event
    loop; unit boundaries are written by the flusher thread within a tick (never on the
    loop); ``await reporter.flush()`` writes now, off the loop, and returns what it learned.
    Test ``reporter.cancelled.is_set()`` between steps; a stop also reaches the run as
    ``CancelledError`` at its next ``await``. Do not call ``reporter.cancelled.wait()`` (it
    blocks the loop).
    """

    def _boundary(self) -> None:
        self.due = True

    async def flush(self) -> Ack | None:  # type: ignore[override]
        """Write buffered progress now, off the event loop (one statement). Never raises."""
        from workqueue.worker.pools.eventloop import off_loop

        return await off_loop(self._write)


class Flusher:
    """One thread per process that flushes due, dirty reporters every progress interval."""

    def __init__(self, tick: float = 0.1, linger: float = 5.0):
        self.tick = tick
        self.linger = linger
        self._reporters: weakref.WeakSet[Reporter] = weakref.WeakSet()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def add(self, reporter: Reporter) -> None:
        with self._lock:
            self._reporters.add(reporter)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="operations-flusher", daemon=True)
                self._thread.start()

    def discard(self, reporter: Reporter) -> None:
        with self._lock:
            self._reporters.discard(reporter)

    def _run(self) -> None:
        # The thread ends (closing its connection) once no run has been left to flush for
        # ``linger`` seconds, so an idle process keeps no connection open for it; the next
        # add() starts a new one.
        idle_since = time.monotonic()
        try:
            while True:
                time.sleep(self.tick)
                with self._lock:
                    reporters = list(self._reporters)
                    if reporters:
                        idle_since = time.monotonic()
                    elif time.monotonic() - idle_since >= self.linger:
                        self._thread = None  # decided under the lock, so add() starts a new thread
                        return
                now = time.monotonic()
                for reporter in reporters:
                    if (
                        reporter.held
                        and (reporter.dirty() or reporter.keepalive)
                        and (reporter.due or now - reporter.last_flush >= reporter.interval)
                    ):
                        reporter._write()
        finally:
            with self._lock:
                if self._thread is threading.current_thread():
                    self._thread = None
            connections.close_all()


flusher = Flusher()
