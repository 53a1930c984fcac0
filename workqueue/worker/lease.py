"""The lease keeper: renew held items' leases on a background thread while their holders work.

Each held item is renewed every lease/3. One keeper serves many items (``runworker`` runs
one per process) and renews all the due ones in one statement. It tells a holder to stop,
through ``Hold.cancelled``, when:

- a renewal finds the proof stale: somebody else has the item (``reason == "lease_lost"``),
  it was cancelled (``cancel_key``, a force stop: ``"cancel_requested"``) or the reaper
  failed it past its hard timeout (``"timeout"``), as the row says once the proof is gone;
- the holder has not called ``progress()`` within its stall budget (``"stalled"``): the
  keeper then *stops renewing*, so the item becomes reclaimable exactly as if the process
  had died. Report progress at real steps of the work, never on a timer. The stall clock
  starts when the hold is taken, or, for a hold taken with ``started=False`` (``runworker``
  claims ahead of its runners), at the first ``progress()``: the handler's start;
- renewals kept failing (database unreachable) until the lease ran out (``"lease_lost"``).

Each renewal runs under a statement timeout no longer than the lease has left, so a stalled
database cannot keep a holder working past its lease. ``close()`` stops the thread and
returns the first failure.

A Hold stands for one claim, not one item: the keeper tells holds apart by identity and
renews each under its own proof, so an old claim of an item and a newer claim of the same
item (re-claimed after its lease lapsed or an operator requeued it) never stand in for each
other. A hold's ``state`` (``HoldState``) says where the claim is: held, settling (its holder
is writing the settlement: once that has taken the proof, a renewal that finds it gone is
expected, not a lost lease), settled, released (given back) or lost (the keeper found the
lease gone, or the holder stalled). Only the hold's methods change it.

For code that claims items itself::

    keeper = LeaseKeeper()
    hold = keeper.hold(item, lease=60, stall=300)
    try:
        for step in steps:
            if hold.cancelled.is_set():
                break
            do(step)
            hold.progress()
    finally:
        keeper.close()
"""

from __future__ import annotations

import enum
import logging
import threading
import time

from django.db import DEFAULT_DB_ALIAS, connections, transaction

from workqueue.items import Item
from workqueue.states import StopReason
from workqueue.worker import metrics
from workqueue.worker.loop import BackgroundLoop

log = logging.getLogger("workqueue.worker.lease")


class HoldState(enum.Enum):
    """Where a claim is, as its holder and the lease keeper see it."""

    HELD = "held"  # claimed: the keeper renews it
    SETTLING = "settling"  # its holder is writing the settlement (it may still roll back)
    SETTLED = "settled"  # the holder's own settlement committed
    RELEASED = "released"  # given back to the queue (shutdown, a refused begin)
    LOST = "lost"  # the lease went (renewal refused, ran out) or the holder stalled

    @property
    def proof_given_up(self) -> bool:
        """Whether a write of the holder's took (or is taking) the proof: a renewal that finds
        it gone is then expected, not a lost lease."""
        return self in (HoldState.SETTLING, HoldState.SETTLED, HoldState.RELEASED)


class Hold:
    """One item held under a keeper: its cancellation event, its progress clock and its state."""

    __slots__ = (
        "_event",
        "deadline",
        "item",
        "last_progress",
        "lease",
        "next_renewal",
        "reason",
        "stall",
        "state",
    )

    _create = threading.Lock()

    def __init__(
        self, item: Item, lease: float, stall: float | None, now: float | None = None, *, started: bool = True
    ):
        now = time.monotonic() if now is None else now
        self.item = item
        self.lease = lease
        self.stall = stall
        self._event: threading.Event | None = None  # made on first use: most holds never need one
        self.reason: StopReason | None = None  # why it was told to stop (the first reason given)
        # None: the stall clock has not started (the holder has not begun the work yet).
        self.last_progress: float | None = now if started else None
        self.state = HoldState.HELD
        self.next_renewal = now + lease / 3
        # Our own estimate of when the lease runs out; only ever used to bound waiting.
        self.deadline = now + lease

    def progress(self) -> None:
        """Say the work moved (a real step, not a timer); (re)starts the stall clock."""
        self.last_progress = time.monotonic()

    @property
    def cancelled(self) -> threading.Event:
        """Set when the holder must stop (see the module docstring for why)."""
        event = self._event
        if event is None:
            with Hold._create:
                if self._event is None:
                    self._event = threading.Event()
                event = self._event
        return event

    def is_cancelled(self) -> bool:
        """Whether the holder was told to stop (without creating the event)."""
        event = self._event
        return event is not None and event.is_set()

    def cancel(self, reason: str) -> None:
        """Tell the holder to stop (``reason``, a ``StopReason``: the first one given is kept)."""
        with Hold._create:  # the keeper's thread and the shutdown may give one at once
            if self.reason is None:
                self.reason = StopReason(reason)
        self.cancelled.set()

    @property
    def hurried(self) -> bool:
        """Told to stop by its soft timeout alone, the item still held: a run that returns now
        has done its work (it completes), unlike one stopped for any other reason."""
        return self.reason is StopReason.TIMEOUT and self.state is HoldState.HELD

    @property
    def settling(self) -> bool:
        """Whether the holder has given up the proof (see ``HoldState.proof_given_up``)."""
        return self.state.proof_given_up

    def begin_settling(self) -> None:
        """The holder is about to write the item's settlement (or hand it to the settler)."""
        if self.state is HoldState.HELD:
            self.state = HoldState.SETTLING

    def settling_undone(self) -> None:
        """The holder's settlement rolled back: the item is held as before."""
        if self.state is HoldState.SETTLING:
            self.state = HoldState.HELD

    def settled(self) -> None:
        """The holder's own settlement committed."""
        if self.state is HoldState.SETTLING:
            self.state = HoldState.SETTLED

    def released(self) -> None:
        """The item is being given back to the queue (its proof goes with it)."""
        if self.state is not HoldState.LOST:
            self.state = HoldState.RELEASED

    def lose(self, reason: str) -> None:
        """The lease went (``lease_lost``) or the holder stalled (``stalled``): stop it."""
        self.state = HoldState.LOST
        self.cancel(reason)


class LeaseKeeper(BackgroundLoop):
    """Renews the leases of the items it holds until they are dropped or it is closed."""

    name = "workqueue-lease-keeper"
    log = log

    def __init__(self, *, using: str = DEFAULT_DB_ALIAS, tick: float = 0.5, name: str = "workqueue-lease-keeper"):
        super().__init__(using=using, name=name)
        self.tick = tick
        # Keyed by the Hold itself (one per claim), never by item id: see the module docstring.
        self._holds: dict[Hold, None] = {}
        self._lock = threading.Lock()
        self._started = False
        self.first_failure: BaseException | None = None
        self.renewals = 0
        self.lost = 0
        self.stalled = 0

    def hold(self, item: Item, *, lease: float | None = None, stall: float | None = None) -> Hold:
        """Start renewing ``item`` (lease seconds: the queue's) and return its Hold."""
        if lease is None:
            from workqueue.conf import wq_settings

            lease = wq_settings().queue(item.queue).lease
        return self.hold_many([item], lease=float(lease), stall=stall)[0]

    def hold_many(self, items, *, lease: float, stall: float | None = None, started: bool = True) -> list[Hold]:
        """Start renewing a batch of items under one lease length; return their Holds.

        ``started=False``: the work has not begun, so the stall clock waits for the first
        ``Hold.progress()``.
        """
        now = time.monotonic()
        holds = [Hold(item, lease, stall, now, started=started) for item in items]
        with self._lock:
            for hold in holds:
                self._holds[hold] = None
            if not self._started:
                self._started = True
                self.start()
        if lease / 3 < self.tick:
            self.wake.set()  # renewals due sooner than the keeper's next tick
        # Otherwise no wake-up: the first renewal is due a third of a lease from now.
        return holds

    def drop(self, hold: Hold | None) -> None:
        """Stop renewing this item (it was settled or handed on)."""
        if hold is not None:
            with self._lock:
                self._holds.pop(hold, None)

    def drop_many(self, holds) -> None:
        """``drop`` for a batch (one lock for all: the settler drops every item it settled)."""
        with self._lock:
            pop = self._holds.pop
            for hold in holds:
                pop(hold, None)

    def holds(self) -> list[Hold]:
        with self._lock:
            return list(self._holds)

    def close(self, timeout: float = 5.0) -> BaseException | None:
        """Stop the thread (the leases are left as they are) and return the first failure."""
        self.stop(timeout)
        return self.first_failure

    # -- the thread ---------------------------------------------------------------------

    def step(self) -> float:
        due = self._due(time.monotonic())
        if due:
            self._renew(due)
        return self.tick

    def _due(self, now: float) -> list[Hold]:
        """The holds whose renewal is due; a stalled one, or one past its deadline, is lost."""
        due: list[Hold] = []
        for hold in self.holds():
            if hold.is_cancelled() and hold.reason in ("stalled", "lease_lost"):
                continue
            since = hold.last_progress
            if hold.stall is not None and since is not None and not hold.settling and now - since > hold.stall:
                log.warning("%r stalled: no progress for %gs; no longer renewing its lease", hold.item, hold.stall)
                self.stalled += 1
                metrics.stalled(hold.item.queue)
                hold.lose("stalled")
                self.drop(hold)
            elif now >= hold.next_renewal:
                if now >= hold.deadline:
                    # Only this one: the others still have lease left to renew within.
                    self._lost(hold, "the lease ran out before it could be renewed")
                else:
                    due.append(hold)
        return due

    def _renew(self, due: list[Hold]) -> None:
        """Extend the leases of ``due`` in one statement, bounded by the soonest deadline."""
        budget = min(h.deadline for h in due) - time.monotonic()
        started = time.monotonic()
        try:
            with transaction.atomic(using=self.using):
                with connections[self.using].cursor() as cur:
                    cur.execute("SET LOCAL statement_timeout = %s", [max(int(budget * 1000), 1)])
                from workqueue.models import WorkItem

                # The keeper's own transaction, and a renewal lost in a server crash only
                # shortens a lease: commit relaxed (see the relaxed fragment, workqueue/sql/fragments.sql).
                renewed = WorkItem.objects.db_manager(self.using).extend_many(
                    [h.item for h in due], [h.lease for h in due], relaxed=True
                )
        except Exception as exc:
            if self.first_failure is None:
                self.first_failure = exc
            log.warning("lease renewal failed (%s); retrying", exc.__class__.__name__)
            connections[self.using].close_if_unusable_or_obsolete()
            for hold in due:
                hold.next_renewal = time.monotonic() + min(1.0, hold.lease / 10)
            return
        self.renewals += 1
        for hold in due:
            self._renewed(hold, renewed, started)

    def _renewed(self, hold: Hold, renewed: dict, started: float) -> None:
        key = (hold.item.id, hold.item.lease_token)
        if key not in renewed:
            self._lost(hold, "the proof no longer matches", ask_why=True)
            return
        expiry = renewed[key]
        if expiry is None:
            # Its row is locked by another transaction (its own handler's, usually):
            # try again shortly; the lease runs out on its own if the lock outlives it.
            hold.next_renewal = time.monotonic() + min(1.0, hold.lease / 10)
        else:
            hold.item.lease_expires_at = expiry
            hold.deadline = started + hold.lease
            hold.next_renewal = started + hold.lease / 3

    def _lost(self, hold: Hold, why: str, *, ask_why: bool = False) -> None:
        with self._lock:
            if hold not in self._holds:
                return  # dropped meanwhile: its holder settled it or handed it on
        if hold.settling:
            # Its holder is settling it: the settlement took the proof (or will report it if
            # it finds the proof gone). Nothing is lost; stop renewing.
            self.drop(hold)
            return
        log.warning("%r lost its lease: %s", hold.item, why)
        self.lost += 1
        if self.first_failure is None:
            from workqueue.exceptions import LeaseLost

            self.first_failure = LeaseLost(f"{hold.item!r}: {why}")
        reason = self._stop_reason(hold) if ask_why else StopReason.LEASE_LOST
        if reason is StopReason.LEASE_LOST:
            metrics.lease_lost(hold.item.queue)  # not a cancel or a timeout: those are asked for
        hold.lose(reason)
        self.drop(hold)

    def _stop_reason(self, hold: Hold) -> StopReason:
        """Why the proof went (a cancel, a hard timeout, or another holder): asked only once
        a renewal found it gone, never on the renewals' path."""
        from workqueue.models import WorkItem

        try:
            return WorkItem.objects.db_manager(self.using).stop_reason(hold.item)
        except Exception as exc:
            log.warning("could not read why %r lost its lease (%s)", hold.item, exc.__class__.__name__)
            connections[self.using].close_if_unusable_or_obsolete()
            return StopReason.LEASE_LOST
