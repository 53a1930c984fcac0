"""Wire-lane verbs of ``WorkItem.objects`` (poll, ack, heartbeat, stop, ...). SQL in sql/wire.sql,
run through ``workqueue.store``.

Each verb is one named statement plus row mapping and error translation; the verbs that
refuse (ack, heartbeat, stop) read the row afterwards, in a fresh statement, only to say
why. Every statement applies the wire-visible predicate (the path's environment and the
item's ``wire`` flag), so an item the credential may not see is ``WorkNotFound``.
"""

from __future__ import annotations

import base64
import binascii
import datetime as dt
import math
import time
from dataclasses import dataclass, field

from django.db import transaction
from psycopg.types.json import Jsonb

from workqueue import controls, hooks, sql, store
from workqueue.conf import wq_settings
from workqueue.exceptions import (
    HeartbeatMismatch,
    InvalidInput,
    InvalidMetadata,
    TooManyPollers,
    WorkConflict,
    WorkNotFound,
)
from workqueue.items import METADATA_MAX_KEYS, Item
from workqueue.managers import WorkItemManager
from workqueue.states import RUNNING_STATES, State

NO_HEARTBEAT = "NO_HEARTBEAT"
RESERVE_DEFAULT_MS = 5000
RESERVE_MAX_MS = 3_600_000
BLOCK_MAX_MS = 999
LIST_DEFAULT_LIMIT = 20
LIST_MAX_LIMIT = 100

_FIRST_PAGE = (dt.datetime(9999, 12, 31, tzinfo=dt.UTC), 2**63 - 1)


@dataclass(slots=True)
class PollResult:
    """What one poll did: the item handed out (or None), and what it settled on the way."""

    item: Item | None = None
    finalized: list[Item] = field(default_factory=list)
    exhausted: list[Item] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Heartbeat:
    """The lease as a heartbeat left it (or found it, when it did not extend it)."""

    last_heartbeat: dt.datetime | None
    lease_extended: bool
    state: str
    ttl_seconds: int


@dataclass(frozen=True, slots=True)
class WorkStats:
    depth: int = 0
    pending: int = 0
    oldest_queued_at: dt.datetime | None = None
    workers_polling: int = 0


def _items(rows) -> list[Item]:
    return [Item.from_row(r) for r in rows]


def encode_cursor(item: Item) -> str:
    """An opaque keyset cursor for the page after ``item``: (created_at, internal id)."""
    assert item.created_at is not None, "a stored item always has created_at"
    raw = f"{item.created_at.astimezone(dt.UTC).isoformat()}|{item.id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[dt.datetime, int]:
    """Undo ``encode_cursor``; raise InvalidInput for anything this API did not issue."""
    bad = InvalidInput("page must be a next_page value returned by a previous list call")
    if not isinstance(cursor, str) or not cursor or len(cursor) > 200 or not cursor.isascii():
        raise bad
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        created, _, ident = raw.partition("|")
        created_at = dt.datetime.fromisoformat(created)
        internal_id = int(ident)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise bad
    if created_at.tzinfo is None or not 0 < internal_id < 2**63 or not ident.isdigit():
        raise bad
    return created_at, internal_id


class WireLane:
    """The wire lane: the verbs the HTTP pull API calls, mixed into ``WireItemManager``."""

    def _wire_item(self, environment_id: str, work_id: str) -> Item:
        return self._wire_lease(environment_id, work_id)[0]

    def _wire_lease(self, environment_id: str, work_id: str) -> tuple[Item, int]:
        """The item and the whole seconds left on its lease, by the database clock."""
        rows = store.wire_get(environment_id=environment_id, work_id=work_id, using=self.db)  # type: ignore[attr-defined]
        if not rows:
            raise WorkNotFound(f"no work item {work_id!r} in environment {environment_id!r}")
        return Item.from_row(rows[0]), rows[0][len(sql.ITEM_COLUMNS)]

    # -- handing work out ---------------------------------------------------------------

    def poll(
        self,
        environment_id: str,
        *,
        reclaim_older_than_ms: int = RESERVE_DEFAULT_MS,
        worker_id: str | None = None,
        block_ms: int | None = None,
    ) -> PollResult:
        """Reserve the best claimable wire item of the environment; ``item`` is None when idle.

        The item stays queued, reserved for ``reclaim_older_than_ms``. With ``block_ms`` an
        empty poll waits (outside any transaction) for an enqueue NOTIFY on a wire queue,
        then tries once more.
        """
        if isinstance(reclaim_older_than_ms, bool) or not isinstance(reclaim_older_than_ms, int):
            raise InvalidInput("reclaim_older_than_ms must be an integer number of milliseconds")
        if not 1 <= reclaim_older_than_ms <= RESERVE_MAX_MS:
            raise InvalidInput(f"reclaim_older_than_ms must be between 1 and {RESERVE_MAX_MS}")
        if block_ms is not None and (
            isinstance(block_ms, bool) or not isinstance(block_ms, int) or not 1 <= block_ms <= BLOCK_MAX_MS
        ):
            raise InvalidInput(f"block_ms must be an integer between 1 and {BLOCK_MAX_MS}")
        if not block_ms:
            return self._poll_once(environment_id, reclaim_older_than_ms, worker_id)
        if transaction.get_connection(self.db).in_atomic_block:  # type: ignore[attr-defined]
            raise transaction.TransactionManagementError(
                "a blocking poll waits holding no transaction; call poll(block_ms=...) outside atomic()"
            )
        from workqueue.wire.wakeups import wakeups

        deadline = time.monotonic() + block_ms / 1000
        with wakeups().waiter() as woken:
            result = self._poll_once(environment_id, reclaim_older_than_ms, worker_id)
            if result.item is not None:
                return result
            if woken.wait(max(0.0, deadline - time.monotonic())):
                again = self._poll_once(environment_id, reclaim_older_than_ms, worker_id)
                again.finalized[:0] = result.finalized
                again.exhausted[:0] = result.exhausted
                return again
        return result

    def _poll_once(self, environment_id: str, reserve_ms: int, worker_id: str | None) -> PollResult:
        settings = wq_settings()
        # Queues under flow control (controls.sql decides their cap too, override included).
        flow = controls.wire_flow_queues(using=self.db)  # type: ignore[attr-defined]
        flow_names = [c.name for c in flow]
        capped = [c for c in settings.capped_wire_queues() if c.name not in flow_names]
        using: str = self.db  # type: ignore[attr-defined]

        def wire_poll(full_queues: list[str], blocked_groups: list[str]) -> list[tuple]:
            return store.wire_poll(
                environment_id=environment_id,
                reserve_s=reserve_ms / 1000,
                worker_id=worker_id or "",
                batch=settings.finalize_batch,
                full_queues=full_queues,
                flow_queues=flow_names,
                blocked_groups=blocked_groups,
                using=using,
            )

        result = PollResult()
        if not capped and not flow and not hooks.watched_where(lambda name: settings.queue(name).over_wire):
            # No lock to take first and no hook that could want the spent items it settles: the
            # poll is one statement, its own transaction (no BEGIN and COMMIT round trips).
            return self._polled(wire_poll([], []), result)
        full_queues: list[str] = []
        blocked_groups: list[str] = []
        with transaction.atomic(using=using, savepoint=False):
            if capped or flow:
                store.queue_lock_caps(queues=[c.name for c in capped] + flow_names, using=using)
            if capped:
                caps = [c.max_running for c in capped]
                full = store.wire_full_queues(queues=[c.name for c in capped], caps=caps, using=using)
                full_queues = [r[0] for r in full]
            if flow:
                blocked, blocked_groups = store.queue_flow_blocked(
                    queues=flow_names, caps=[c.max_running for c in flow], **controls.flow_params(flow), using=using
                )[0]
                full_queues += blocked
            self._polled(wire_poll(full_queues, blocked_groups), result)
            hooks.items_moved(result.exhausted, hooks.MoveReason.ATTEMPTS_EXHAUSTED)
        return result

    @staticmethod
    def _polled(rows: list[tuple], result: PollResult) -> PollResult:
        """Sort wire_poll's rows into the item handed out, the finalized and the exhausted."""
        for row in rows:
            item = Item.from_row(row[1:])
            if row[0] == "handed":
                result.item = item
            elif row[0] == "finalized":
                result.finalized.append(item)
            else:
                result.exhausted.append(item)
        return result

    def record_poll(self, environment_id: str, worker_id: str) -> None:
        """Note that ``worker_id`` polled the environment now (feeds ``workers_polling``).

        A new worker id past ``MAX_POLLERS`` live ones raises ``TooManyPollers``, so no key
        holder can grow the pollers table without bound. A known id costs one statement (its
        own relaxed transaction, outside the caller's); a new one is admitted in a transaction
        that holds the environment's poller lock until it commits.
        """
        conf = wq_settings()
        using: str = self.db  # type: ignore[attr-defined]
        if store.wire_record_poll(
            environment_id=environment_id,
            worker_id=worker_id,
            window_s=conf.polling_window,
            # Telemetry: never relax a caller's own transaction, only this statement's.
            relaxed=not transaction.get_connection(using).in_atomic_block,
            using=using,
        ):
            return
        with transaction.atomic(using=using):
            self._admit_poller(environment_id, worker_id, conf, using)

    def _admit_poller(self, environment_id: str, worker_id: str, conf, using: str) -> None:
        """Add a new worker id under the environment's poller lock, within MAX_POLLERS."""
        store.wire_lock_pollers(environment_id=environment_id, using=using)
        self_hosted, added = store.wire_record_new_poller(
            environment_id=environment_id,
            worker_id=worker_id,
            window_s=conf.polling_window,
            max_pollers=conf.max_pollers,
            using=using,
        )[0]
        if self_hosted and not added:
            raise TooManyPollers(
                f"environment {environment_id!r} already has {conf.max_pollers} worker ids polling "
                f"(WORKQUEUE['MAX_POLLERS']); reuse a worker id, or retry once an idle one has been quiet "
                f"for {conf.polling_window:g}s",
                retry_after=conf.polling_window,
            )

    # -- the holder's lifecycle ---------------------------------------------------------

    def ack(self, environment_id: str, work_id: str, *, worker_id: str | None = None) -> Item:
        """Acknowledge a polled item: queued → starting under the startup lease.

        Idempotent for a starting or active item (returned unchanged). ``WorkConflict`` when
        the item is stopping or stopped, not due yet (``run_after``), under another worker's
        live reservation (only known when ``worker_id`` names the acker), or when its queue's
        ``max_running`` has no slot for it (live holders plus other live reservations, the
        count claim and poll use, under the same per-queue lock).
        """
        settings = wq_settings()
        # Queues under flow control, read now (an ack is rare next to a claim): their pause and
        # limits, overrides included, are checked by item_ack_flow_check under the same lock.
        flow = controls.wire_flow_queues(fresh=True, using=self.db)  # type: ignore[attr-defined]
        flow_names = [c.name for c in flow]
        capped = [c for c in settings.capped_wire_queues() if c.name not in flow_names]
        using: str = self.db  # type: ignore[attr-defined]

        def wire_ack() -> list[tuple]:
            return store.wire_ack(
                environment_id=environment_id,
                work_id=work_id,
                startup_s=settings.startup_lease,
                worker_id=worker_id or "",
                queues=[c.name for c in capped],
                caps=[c.max_running for c in capped],
                using=using,
            )

        if capped or flow:
            with transaction.atomic(using=using, savepoint=False):
                store.wire_ack_lock(
                    environment_id=environment_id,
                    work_id=work_id,
                    queues=[c.name for c in capped] + flow_names,
                    using=using,
                )
                check: list[tuple] = []
                if flow:
                    check = store.item_ack_flow_check(
                        environment_id=environment_id,
                        work_id=work_id,
                        queues=flow_names,
                        caps=[c.max_running for c in flow],
                        **controls.flow_params(flow),
                        using=using,
                    )
                if check:
                    queue, paused, has_slot, has_rate, has_group_room, _rated = check[0]
                    why = (
                        "its queue is paused"
                        if paused
                        else "its queue is at max_running (live holders and live reservations)"
                        if not has_slot
                        else "its queue's rate limit has no start left in this period"
                        if not has_rate
                        else "its group is at max_running_per_group or its rate_per_group"
                        if not has_group_room
                        else ""
                    )
                    if why:
                        raise WorkConflict(
                            f"work item {work_id!r} cannot be acknowledged now: {why} (queue {queue!r}); "
                            "poll again later"
                        )
                rows = wire_ack()
                if check and check[0][5] and rows and rows[0][4] is not None:
                    store.queue_start_record(id=rows[0][4], using=using)
        else:
            rows = wire_ack()
        if rows:
            due, others_reservation, queue, run_after = rows[0][:4]
            if rows[0][4] is not None:
                return Item.from_row(rows[0][4:])
            if not due:
                why = f"it is not due until {run_after.isoformat()} (run_after); poll again later"
            elif others_reservation:
                why = "it is reserved by another worker (its poll's reservation has not lapsed)"
            else:
                why = (
                    f"queue {queue!r} is at max_running={settings.queue(queue).max_running} (live holders "
                    "and live reservations); poll again later"
                )
            raise WorkConflict(f"work item {work_id!r} cannot be acknowledged now: {why}")
        item = self._wire_item(environment_id, work_id)
        if item.state in RUNNING_STATES:
            return item
        raise WorkConflict(f"work item {work_id!r} is {item.state}; only a queued item can be acknowledged")

    def heartbeat(
        self,
        environment_id: str,
        work_id: str,
        expected_last_heartbeat: str,
        desired_ttl_seconds: int | None = None,
    ) -> Heartbeat:
        """Extend the holder's lease if ``expected_last_heartbeat`` matches the server's.

        ``NO_HEARTBEAT`` claims a starting item's lease and makes it active; later beats echo
        the previous ``last_heartbeat``. A stopping or stopped item answers without extending
        the lease (the worker winds down). Anything else refused is ``HeartbeatMismatch``
        carrying the lease as the server holds it.
        """
        settings = wq_settings()
        ttl = settings.heartbeat_ttl if desired_ttl_seconds is None else float(desired_ttl_seconds)
        ttl = min(max(ttl, settings.heartbeat_ttl_min), settings.heartbeat_ttl_max)
        claim = expected_last_heartbeat == NO_HEARTBEAT
        expected = None if claim else parse_timestamp(expected_last_heartbeat)
        if claim or expected is not None:
            rows = store.wire_heartbeat(
                environment_id=environment_id,
                work_id=work_id,
                claim=claim,
                expected=expected,
                ttl_s=ttl,
                using=self.db,  # type: ignore[attr-defined]
            )
            if rows:
                item = Item.from_row(rows[0])
                return Heartbeat(item.last_heartbeat_at, True, item.state, math.ceil(ttl))
        item, seconds_left = self._wire_lease(environment_id, work_id)
        current = Heartbeat(item.last_heartbeat_at, False, item.state, seconds_left)
        if item.state in (State.STOPPING, State.STOPPED):
            return current
        if claim:
            why = (
                "NO_HEARTBEAT claims the lease of an acknowledged item that has not beaten yet; "
                f"this item is {item.state}" + (" and already has a heartbeat" if item.last_heartbeat_at else "")
            )
        elif expected is None:
            why = "expected_last_heartbeat is neither NO_HEARTBEAT nor an RFC 3339 timestamp"
        elif item.state != "active":
            why = f"this item is {item.state}; send NO_HEARTBEAT after ack to claim its lease"
        else:
            why = "expected_last_heartbeat does not match the server's last_heartbeat (another worker may hold it)"
        raise HeartbeatMismatch(
            current={
                "last_heartbeat": current.last_heartbeat,
                "lease_extended": False,
                "state": current.state,
                "ttl_seconds": current.ttl_seconds,
            },
            message=f"heartbeat refused: {why}",
        )

    def stop(self, environment_id: str, work_id: str, *, force: bool = False) -> Item:
        """Stop an item: force → stopped; graceful: active → stopping, queued/starting → stopped."""
        rows = store.wire_stop(
            environment_id=environment_id,
            work_id=work_id,
            force=bool(force),
            using=self.db,  # type: ignore[attr-defined]
        )
        if rows:
            return Item.from_row(rows[0])
        item = self._wire_item(environment_id, work_id)
        if force:
            raise WorkConflict(f"work item {work_id!r} is already stopped")
        raise WorkConflict(
            f"work item {work_id!r} is already {item.state}; a graceful stop applies to queued, starting or "
            "active items (use force=true to stop a stopping item now)"
        )

    # -- reading and annotating ---------------------------------------------------------

    def update_metadata(self, environment_id: str, work_id: str, patch: dict | None) -> Item:
        """Merge ``patch`` into the item's metadata atomically: strings upsert, None deletes.

        The caller validates the patch (``workqueue.wire.serializers.metadata_patch``); a
        merge that would leave more than 16 keys is refused and changes nothing.
        """
        if not patch:
            return self._wire_item(environment_id, work_id)
        upserts = {k: v for k, v in patch.items() if v is not None}
        deletes = [k for k, v in patch.items() if v is None]
        rows = store.wire_update_metadata(
            environment_id=environment_id,
            work_id=work_id,
            upserts=Jsonb(upserts),
            deletes=deletes,
            max_keys=METADATA_MAX_KEYS,
            using=self.db,  # type: ignore[attr-defined]
        )
        if rows:
            return Item.from_row(rows[0])
        item = self._wire_item(environment_id, work_id)
        merged = {**item.metadata, **upserts}
        for key in deletes:
            merged.pop(key, None)
        raise InvalidMetadata(
            [f"the merged metadata would have {len(merged)} keys; at most {METADATA_MAX_KEYS} are allowed"]
        )

    def get_work(self, environment_id: str, work_id: str) -> Item:
        """One wire-visible item by public id (``WorkNotFound`` otherwise).

        Named ``get_work`` rather than ``get`` so the ORM's ``objects.get()`` keeps working.
        """
        return self._wire_item(environment_id, work_id)

    def list_page(
        self, environment_id: str, *, limit: int = LIST_DEFAULT_LIMIT, page: str | None = None
    ) -> tuple[list[Item], str | None]:
        """A page of the environment's wire items, newest first; return (items, next_page)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= LIST_MAX_LIMIT:
            raise InvalidInput(f"limit must be an integer between 1 and {LIST_MAX_LIMIT}")
        before = decode_cursor(page) if page else _FIRST_PAGE
        items = _items(
            store.wire_list_page(
                environment_id=environment_id,
                before_created=before[0],
                before_id=before[1],
                limit=limit + 1,
                using=self.db,  # type: ignore[attr-defined]
            )
        )
        if len(items) > limit:
            return items[:limit], encode_cursor(items[limit - 1])
        return items, None

    def stats(self, environment_id: str) -> WorkStats:
        """Depth, pending, oldest queued and workers polling for one environment (zeros if cloud)."""
        rows = store.wire_stats(
            environment_id=environment_id,
            window_s=wq_settings().polling_window,
            using=self.db,  # type: ignore[attr-defined]
        )
        if not rows:
            return WorkStats()
        _env, depth, pending, oldest, polling = rows[0]
        return WorkStats(depth, pending, oldest, polling)

    def stats_all(self) -> dict[str, WorkStats]:
        """``stats`` for every self_hosted environment at once (metrics), keyed by id."""
        rows = store.wire_stats(
            environment_id=None,
            window_s=wq_settings().polling_window,
            using=self.db,  # type: ignore[attr-defined]
        )
        return {r[0]: WorkStats(r[1], r[2], r[3], r[4]) for r in rows}


class WireItemManager(WireLane, WorkItemManager):
    """``WorkItem.objects``: the core verbs (workqueue.managers) and the wire lane's."""


def parse_timestamp(text: object) -> dt.datetime | None:
    """Parse an RFC 3339 timestamp with an offset; None when it is not one."""
    if not isinstance(text, str) or not 10 <= len(text) <= 64 or not text.isascii():
        return None
    try:
        value = dt.datetime.fromisoformat(text)
    except ValueError:
        return None
    return value if value.tzinfo is not None else None
