"""What a handler gets beside its item: ``Context``."""

from __future__ import annotations

import threading
from typing import Any

from django.db import transaction

from workqueue.items import Item
from workqueue.states import StopReason
from workqueue.worker.lease import Hold

_first_reason = threading.Lock()


class Context:
    """What a handler gets beside its item.

    - ``reclaimed``: the previous holder's lease lapsed (it died or stalled); surface recovery.
    - ``attempt`` / ``final``: this attempt's number, and whether a failure now is the last.
    - ``cancelled``: an Event set when the handler must stop, for any reason: the lease is
      lost, the holder stalled, the item was stopped (``cancel_key``, force stop) or timed
      out, or the shutdown grace period ended. Check it between steps and stop early.
    - ``stop_reason``: why (a ``StopReason``: ``cancel_requested``, ``stalled``,
      ``lease_lost``, ``timeout``, ``shutdown``), or None while the handler may go on. The
      first reason given wins.
    - ``is_cancelled()``: whether a caller cancelled the item (``stop_reason ==
      "cancel_requested"``): undo the work only then; every other stop means the item will be
      offered again (or, for ``timeout``, has failed), so leave what was done for the next try.
    - ``progress()``: report a real step of work (feeds the stall budget).
    - ``complete()`` / ``fail()`` / ``requeue()``: settle the item yourself, e.g. inside your
      own ``transaction.atomic()`` so the settlement commits with your writes. An ``async def``
      handler awaits ``acomplete()`` / ``afail()`` / ``arequeue()``, or calls the plain ones
      inside a function it runs with ``sync_to_async`` (its transaction and all).
    """

    __slots__ = ("_cancelled", "_hold", "_limits", "_reason", "_settling", "item", "settled", "using", "worker_id")

    def __init__(self, item: Item, hold: Hold | None, worker_id: str, using: str):
        self.item = item
        self._hold = hold
        self._cancelled = None if hold is not None else threading.Event()
        self._reason: StopReason | None = None  # without a hold (the hold keeps its own)
        self._settling = False  # the handler wrote a settlement (it may still roll back)
        self.settled = False
        self.worker_id = worker_id
        self.using = using
        self._limits: Any = None  # set by the worker: where time_limits() goes

    @property
    def hold(self) -> Hold | None:
        """The worker's hold on the item (None outside runworker, e.g. ``testing.drain``)."""
        return self._hold

    @property
    def cancelled(self) -> threading.Event:
        if self._hold is not None:
            return self._hold.cancelled
        assert self._cancelled is not None  # made in __init__ whenever there is no hold
        return self._cancelled

    @property
    def stop_reason(self) -> StopReason | None:
        """Why the handler was told to stop (the first reason given), or None."""
        if self._hold is not None:
            return self._hold.reason
        return self._reason

    def stop(self, reason: str) -> None:
        """Tell the handler to stop for ``reason`` (a ``StopReason``; the first one given is kept)."""
        if self._hold is not None:
            self._hold.cancel(reason)
            return
        with _first_reason:
            if self._reason is None:
                self._reason = StopReason(reason)
        self.cancelled.set()

    def is_cancelled(self) -> bool:
        """Whether a caller cancelled the item (``cancel_key``, a force stop): a non-blocking
        check. A stall, a lost lease, a timeout or a shutdown set ``cancelled`` but not this."""
        return self.stop_reason is StopReason.CANCEL_REQUESTED

    @property
    def reclaimed(self) -> bool:
        return self.item.reclaimed

    @property
    def attempt(self) -> int:
        return self.item.attempts

    @property
    def final(self) -> bool:
        return self.item.final

    def progress(self) -> None:
        if self._hold is not None:
            self._hold.progress()

    def time_limits(
        self, *, soft_timeout: float | None = None, timeout: float | None = None, max_memory_mb: float | None = None
    ) -> None:
        """Set this run's limits, counted from its start (``handlers.register`` sets a queue's;
        an operation kind's are set this way once its kind is known). Outside ``runworker``
        (``testing.drain``) nothing enforces them."""
        if self._limits is not None:  # (the Runs, or a process-pool child's sink; what to do on a timeout)
            runs, on_abandon = self._limits
            runs.limit(
                self._hold, self, on_abandon, soft_timeout=soft_timeout, timeout=timeout, max_memory_mb=max_memory_mb
            )

    def _mark_settled(self) -> None:
        conn = transaction.get_connection(self.using)
        if conn.in_atomic_block:
            transaction.on_commit(self._set_settled, using=self.using)
        else:
            self.settled = True

    def _set_settled(self) -> None:
        self.settled = True
        if self._hold is not None:
            self._hold.settled()

    def begin_settling(self) -> None:
        """The worker is about to settle the item: a renewal that finds the proof gone is this."""
        if self._hold is not None:
            self._hold.begin_settling()

    def end_run(self) -> None:
        """The handler is done: a settlement of its own that rolled back leaves the item held."""
        if self._settling and not self.settled and self._hold is not None:
            self._hold.settling_undone()

    def _settle(self, write):
        # Tell the lease keeper first: once the settlement commits, a renewal finds the proof
        # gone, and that is this settlement, not a lost lease.
        if self._hold is not None:
            self._hold.begin_settling()
        try:
            result = write()
        except BaseException:
            if self._hold is not None and not self.settled:
                self._hold.settling_undone()
            raise
        self._settling = True
        self._mark_settled()
        return result

    def complete(self, outcome: str = "succeeded") -> None:
        """Settle the item now (raises LeaseLost if it is no longer yours)."""
        from workqueue.models import WorkItem

        self._settle(lambda: WorkItem.objects.db_manager(self.using).complete(self.item, outcome))

    def fail(self, error: str, *, permanent: bool = False, delay: float | None = None) -> str:
        from workqueue.models import WorkItem

        return self._settle(
            lambda: WorkItem.objects.db_manager(self.using).fail(self.item, error, permanent=permanent, delay=delay)
        )

    def requeue(self) -> None:
        from workqueue.models import WorkItem

        self._settle(lambda: WorkItem.objects.db_manager(self.using).requeue(self.item))

    async def acomplete(self, outcome: str = "succeeded") -> None:
        """``complete()`` for an async handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.complete)(outcome)

    async def afail(self, error: str, *, permanent: bool = False, delay: float | None = None) -> str:
        """``fail()`` for an async handler."""
        from asgiref.sync import sync_to_async

        return await sync_to_async(self.fail)(error, permanent=permanent, delay=delay)

    async def arequeue(self) -> None:
        """``requeue()`` for an async handler."""
        from asgiref.sync import sync_to_async

        await sync_to_async(self.requeue)()
