"""What a handler gets beside its item: ``Context``."""

from __future__ import annotations

import threading

from django.db import transaction

from workqueue.items import Item
from workqueue.worker.lease import Hold


class Context:
    """What a handler gets beside its item.

    - ``reclaimed``: the previous holder's lease lapsed (it died or stalled); surface recovery.
    - ``attempt`` / ``final``: this attempt's number, and whether a failure now is the last.
    - ``cancelled``: an Event set when the lease is lost, the holder stalled, the item was
      stopped (``cancel_key``, force stop) or the shutdown grace period ended. Check it
      between steps and stop early.
    - ``progress()``: report a real step of work (feeds the stall budget).
    - ``complete()`` / ``fail()`` / ``requeue()``: settle the item yourself, e.g. inside your
      own ``transaction.atomic()`` so the settlement commits with your writes. An ``async def``
      handler awaits ``acomplete()`` / ``afail()`` / ``arequeue()``, or calls the plain ones
      inside a function it runs with ``sync_to_async`` (its transaction and all).
    """

    __slots__ = ("_cancelled", "_hold", "_settling", "item", "settled", "using", "worker_id")

    def __init__(self, item: Item, hold: Hold | None, worker_id: str, using: str):
        self.item = item
        self._hold = hold
        self._cancelled = None if hold is not None else threading.Event()
        self._settling = False  # the handler wrote a settlement (it may still roll back)
        self.settled = False
        self.worker_id = worker_id
        self.using = using

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

    def is_cancelled(self) -> bool:
        """Whether the handler was told to stop (a non-blocking check)."""
        if self._hold is not None:
            return self._hold.is_cancelled()
        assert self._cancelled is not None  # made in __init__ whenever there is no hold
        return self._cancelled.is_set()

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
