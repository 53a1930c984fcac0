"""``WorkItem.objects``: a QuerySet method per state, and the queue's verbs as manager methods.

This is the core manager (producing work, the in-process lane, operators); the wire lane's
verbs (poll, ack, heartbeat, ...) are ``workqueue.wire.store.WireLane``, and the manager
``WorkItem.objects`` is built from both there (``WireItemManager``), so this module imports
neither the models nor the wire.

Each verb is one named statement from ``sql/queries.sql`` plus row mapping and error
translation, run on Django's connection so it joins the caller's ``transaction.atomic()``.
The admin, the dashboard and the commands read through the QuerySet methods only.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import cast

from django.db import models, transaction
from django.db.models import F, Q
from django.db.models.functions import Now
from psycopg.types.json import Jsonb

from workqueue import controls, hooks, sql, store, tracing, values
from workqueue.conf import QUEUE_NAME, QueueSettings, wq_settings
from workqueue.exceptions import InvalidInput, LeaseLost, UnknownEnvironment
from workqueue.items import (  # noqa: F401  (the metadata limits live with the item; re-exported)
    METADATA_MAX_KEY_LENGTH,
    METADATA_MAX_KEYS,
    METADATA_MAX_VALUE_LENGTH,
    Item,
    validate_metadata,
)
from workqueue.states import HELD_STATES, LIVE_STATES, RUNNING_STATES, UNSETTLED_STATES, State, StopReason

MAX_KEY_LENGTH = 512


class WorkItemQuerySet(models.QuerySet):
    """Named scopes, one per state; every reader of the table goes through these."""

    def queued(self):
        return self.filter(state=State.QUEUED)

    def ready(self):
        """Queued, due, and not reserved by a live wire poll."""
        return (
            self.queued()
            .filter(run_after__lte=Now())
            .filter(Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=Now()))
        )

    def scheduled(self):
        return self.queued().filter(run_after__gt=Now())

    def pending(self):
        """Queued wire items reserved by a poll that has not been acked yet."""
        return self.queued().filter(lease_expires_at__gt=Now())

    def running(self):
        return self.filter(state__in=RUNNING_STATES)

    def stopping(self):
        return self.filter(state=State.STOPPING)

    def held(self):
        return self.filter(state__in=HELD_STATES)

    def live(self):
        return self.filter(state__in=LIVE_STATES)

    def unsettled(self):
        return self.filter(state__in=UNSETTLED_STATES)

    def stopped(self):
        return self.filter(state=State.STOPPED)

    def succeeded(self):
        return self.stopped().filter(outcome="succeeded")

    def failed(self):
        return self.stopped().filter(outcome="failed")

    def lapsed(self):
        """Held with a lease that has run out: the holder died, stalled or lost touch."""
        return self.held().filter(lease_expires_at__lt=Now())

    def stuck(self, stuck_after: float | None = None):
        """Lapsed holders, and queued items far past their run_after (nobody is claiming them).

        A queue that is paused, or under a per-group cap or a rate (its own settings or an
        operator's override), is waiting by design: its queued items are not counted as stuck.
        """
        after = dt.timedelta(seconds=stuck_after if stuck_after is not None else wq_settings().stuck_after)
        late = Q(state=State.QUEUED, run_after__lt=Now() - after)
        held_back = controls.held_back_queues(using=self.db)
        if held_back:
            late &= ~Q(queue__in=held_back)
        return self.filter(Q(state__in=HELD_STATES, lease_expires_at__lt=Now()) | late)

    def wire_visible(self, environment_id: str):
        """Items the HTTP pull API may show for this environment (see SPEC: wire-visible)."""
        return self.filter(environment_id=environment_id, wire=True)

    def in_order(self):
        """The claim's order: priority, then run_after, then age."""
        return self.order_by(F("priority").desc(), "run_after", "id")


@dataclass(slots=True)
class ClaimResult:
    """What one claim statement did: items handed to this worker, and items it settled."""

    items: list[Item] = field(default_factory=list)
    settled: list[Item] = field(default_factory=list)
    #: The claim took the flow path (item_claim_flow): a short claim may mean a limit held
    #: items back rather than an empty queue.
    flow: bool = False


MAX_GROUP_LENGTH = 200


def _claim_result(rows: list[tuple], worker_id: str) -> ClaimResult:
    """A claim's rows as Items: handed out (active) or settled (spent on lapsed leases)."""
    result = ClaimResult()
    for row in rows:
        item = Item.from_claimed(row)
        item.claimed_by = worker_id
        (result.items if item.state == "active" else result.settled).append(item)
    return result


def check_group(group: object) -> str | None:
    """Check an item's group (None, or a non-empty string of at most 200 characters)."""
    if group is None:
        return None
    if not isinstance(group, str) or not group or len(group) > MAX_GROUP_LENGTH or not values.storable(group):
        raise InvalidInput(f"group must be a non-empty string of at most {MAX_GROUP_LENGTH} characters, not {group!r}")
    return group


def _check_queue(queue: object) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME.match(queue):
        raise InvalidInput(
            f"bad queue name {queue!r}: use letters, digits, '.', '_', ':' or '-', at most 128 characters"
        )
    return queue


def _check_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_KEY_LENGTH:
        raise InvalidInput(f"key must be a non-empty string of at most {MAX_KEY_LENGTH} characters, not {key!r}")
    if "\x00" in key:
        raise InvalidInput("key must not contain NUL characters")
    if not values.storable(key):
        raise InvalidInput(f"key must be valid UTF-8 text (it holds an unpaired surrogate: {key!r})")
    return key


def _seconds(value: object, what: str) -> float:
    """A delay: 0 to ten years, a number or a timedelta (``workqueue.values.seconds``)."""
    if value is None:
        return 0.0
    return values.seconds(value, what=what, allow_zero=True, text=False)


check_priority = values.priority


def _max_attempts(value: object) -> int:
    return values.count(value, what="max_attempts", text=False)


def _aware(value: object) -> dt.datetime | None:
    if value is None:
        return None
    if not isinstance(value, dt.datetime) or value.tzinfo is None:
        raise InvalidInput(f"run_after must be a timezone-aware datetime, not {value!r}")
    return value


def _env_id(environment) -> str | None:
    if environment is None:
        return None
    env_id = getattr(environment, "pk", environment)
    if not isinstance(env_id, str) or not env_id:
        raise InvalidInput(f"environment must be an Environment or its id, not {environment!r}")
    return env_id


def _current_trace() -> Jsonb | None:
    """The caller's W3C trace context for a new item (None without OpenTelemetry or a span)."""
    found = tracing.inject()
    return Jsonb(found) if found is not None else None


class WorkItemManager(models.Manager):
    """The queue's core verbs. Each is one statement; see ``sql/queries.sql`` for the SQL."""

    # -- producing work ---------------------------------------------------------------

    def enqueue(
        self,
        queue: str,
        key: str,
        *,
        environment=None,
        priority: int | None = None,
        delay: float | dt.timedelta | None = None,
        run_after: dt.datetime | None = None,
        metadata: dict | None = None,
        trace_context: dict | None = None,
        max_attempts: int | None = None,
        attempts: int = 0,
        group: str | None = None,
    ) -> tuple[Item, bool]:
        """Queue work for (queue, key) unless a live item exists; return (item, created).

        ``run_after`` (an aware datetime) or ``delay`` (seconds) holds it back. A repeat while
        an item is live merges into it: priority only rises, run_after only moves earlier. A
        held item absorbs the repeat too, so a handler that must see later requests calls
        ``requeue()``. Idle workers are woken by a NOTIFY at commit. ``group`` (e.g. a
        tenant id) puts the item in a group for ``max_running_per_group`` and ``rate_per_group``;
        it is set here and never changed.
        """
        conf = wq_settings().queue(_check_queue(queue))
        _check_key(key)
        env_id = _env_id(environment)
        priority = check_priority(conf.priority if priority is None else priority)
        max_attempts = _max_attempts(conf.max_attempts if max_attempts is None else max_attempts)
        rows = store.item_enqueue(
            queue=queue,
            key=key,
            environment_id=env_id,
            priority=priority,
            delay=_seconds(delay, "delay"),
            run_after=_aware(run_after),
            attempts=int(attempts),
            max_attempts=max_attempts,
            metadata=Jsonb(validate_metadata(metadata)),
            trace_context=Jsonb(trace_context) if trace_context is not None else _current_trace(),
            over_wire=conf.over_wire,
            channel=wq_settings().notify_channel,
            group=check_group(group),
            using=self.db,
        )
        if not rows:
            raise UnknownEnvironment(str(env_id))
        row = rows[0]
        return Item.from_row(row), bool(row[len(sql.ITEM_COLUMNS)])

    def enqueue_many(
        self, entries: Iterable, *, environment=None, priority=None, delay=None, group=None
    ) -> list[tuple]:
        """Enqueue a batch in one statement; return [(public_id, queue, key, created), ...].

        Each entry is ``(queue, key)`` or a dict with ``queue``, ``key`` and optionally
        ``environment``, ``priority``, ``delay``, ``metadata``, ``max_attempts``, ``group``.
        Keyword arguments are defaults for every entry.
        """
        settings = wq_settings()
        cols: dict[str, list] = {
            k: []
            for k in (
                "queues",
                "keys",
                "environment_ids",
                "priorities",
                "delays",
                "max_attempts",
                "metadatas",
                "over_wires",
                "groups",
            )
        }
        for entry in entries:
            spec = entry if isinstance(entry, dict) else {"queue": entry[0], "key": entry[1]}
            unknown = set(spec) - {
                "queue",
                "key",
                "environment",
                "priority",
                "delay",
                "metadata",
                "max_attempts",
                "group",
            }
            if unknown:
                raise InvalidInput(f"enqueue_many entry has unknown field(s): {', '.join(sorted(unknown))}")
            conf = settings.queue(_check_queue(spec.get("queue")))
            prio = spec.get("priority", priority)
            prio = check_priority(conf.priority if prio is None else prio)
            attempts = spec.get("max_attempts")
            attempts = _max_attempts(conf.max_attempts if attempts is None else attempts)
            cols["queues"].append(conf.name)
            cols["keys"].append(_check_key(spec.get("key")))
            cols["environment_ids"].append(_env_id(spec.get("environment", environment)))
            cols["priorities"].append(prio)
            cols["delays"].append(_seconds(spec.get("delay", delay), "delay"))
            cols["max_attempts"].append(attempts)
            meta = validate_metadata(spec.get("metadata"))
            cols["metadatas"].append(Jsonb(meta))
            cols["over_wires"].append(conf.over_wire)
            cols["groups"].append(check_group(spec.get("group", group)))
        if not cols["queues"]:
            return []
        env_ids = {e for e in cols["environment_ids"] if e is not None}
        if env_ids:
            environments = cast("type[models.Model]", self.model._meta.get_field("environment").related_model)
            known = set(
                environments._default_manager.using(self.db).filter(pk__in=env_ids).values_list("pk", flat=True)
            )
            if env_ids - known:
                raise UnknownEnvironment(sorted(env_ids - known)[0])
        with transaction.atomic(using=self.db, savepoint=False):
            rows = store.item_enqueue_many(**cols, trace_context=_current_trace(), using=self.db)
            store.queue_notify(channel=settings.notify_channel, queues=sorted(set(cols["queues"])), using=self.db)
        return [(r[1], r[2], r[3], r[4]) for r in rows]

    # -- the in-process lane ----------------------------------------------------------

    def claim(
        self,
        queues: Sequence[str],
        *,
        limit: int,
        worker_id: str,
        lease: float | None = None,
        relaxed: bool = False,
    ) -> ClaimResult:
        """Take up to ``limit`` items from ``queues`` under a lease (per-queue settings).

        Returns the items handed to this worker (``reclaimed`` set on those whose previous
        holder's lease lapsed) and any lapsed items it settled failed because their attempts
        were spent. Returns an empty result, without error, when there is no work.
        """
        settings = wq_settings()
        confs = [settings.queue(_check_queue(q)) for q in queues]
        if not confs or limit < 1:
            return ClaimResult()
        confs = self._without_idle_gated(confs)
        names = [c.name for c in confs]
        leases = [float(lease if lease is not None else c.lease) for c in confs]
        # A claim lost in a server crash just returns its items to the queue; runworker claims
        # relaxed. Never inside a caller's transaction: it would relax that commit.
        relaxed = relaxed and not transaction.get_connection(self.db).in_atomic_block
        flow = controls.needs_flow(confs, using=self.db)
        capped = [c.name for c in confs if flow or c.max_running is not None]
        if not capped and not hooks.watched(names):
            # Nothing to lock first and no hook to tell about spent items it settles: the claim
            # is one statement, its own transaction (no BEGIN and COMMIT round trips).
            rows = store.item_claim(
                queues=names, leases=leases, limit=limit, worker_id=worker_id, relaxed=relaxed, using=self.db
            )
            return _claim_result(rows, worker_id)
        limits = [limit] * len(confs)
        caps = [c.max_running for c in confs]
        wires = [c.over_wire for c in confs]  # whose live wire reservations hold slots too
        with transaction.atomic(using=self.db, savepoint=False):
            if capped:
                store.queue_lock_caps(queues=capped, using=self.db)
            if flow:
                rows = store.item_claim_flow(
                    queues=names,
                    leases=leases,
                    limits=limits,
                    caps=caps,
                    wires=wires,
                    **controls.flow_params(confs),
                    limit=limit,
                    worker_id=worker_id,
                    relaxed=relaxed,
                    using=self.db,
                )
            elif capped:
                rows = store.item_claim_capped(
                    queues=names,
                    leases=leases,
                    limits=limits,
                    caps=caps,
                    wires=wires,
                    limit=limit,
                    worker_id=worker_id,
                    relaxed=relaxed,
                    using=self.db,
                )
            else:
                # No cap to share out: the plainer statement, quicker to plan (each claim is).
                rows = store.item_claim(
                    queues=names, leases=leases, limit=limit, worker_id=worker_id, relaxed=relaxed, using=self.db
                )
            result = _claim_result(rows, worker_id)
            hooks.items_moved(result.settled, hooks.MoveReason.ATTEMPTS_EXHAUSTED)
            result.flow = flow
        return result

    def claim_one(self, item_id: int, *, worker_id: str, lease: float | None = None) -> Item | None:
        """Take the queued item ``item_id`` under a lease (its queue's, or ``lease`` seconds),
        ahead of the queue's better items; None when it is not queued. For tests and tools
        that must hold one item of their choosing (``workqueue.testing``'s factories)."""
        row = self.filter(pk=item_id).values_list("queue", flat=True).first()
        if row is None:
            return None
        seconds = float(lease if lease is not None else wq_settings().queue(row).lease)
        rows = store.item_claim_one(id=item_id, lease=seconds, worker_id=worker_id, using=self.db)
        result = _claim_result(rows, worker_id)
        return result.items[0] if result.items else None

    def _without_idle_gated(self, confs: list[QueueSettings]) -> list[QueueSettings]:
        """Leave out of a claim the capped and flow-controlled queues with nothing to take now.

        Such a queue is claimed under its lock (queue_lock_caps), which makes every claim that
        names it wait for every other: a plain runworker names every queue, so one idle capped
        queue would serialise the whole fleet's claims of the others. Only when some queues are
        not gated is it worth the look (queue_with_due_work); a claim of gated queues alone
        takes their locks as before."""
        gated = [c for c in confs if c.max_running is not None or controls.needs_flow([c], using=self.db)]
        if not gated or len(gated) == len(confs):
            return confs
        busy = {row[0] for row in store.queue_with_due_work(queues=[c.name for c in gated], using=self.db)}
        return [c for c in confs if c not in gated or c.name in busy]

    def retry_now(self, ids: Sequence[int]) -> list[int]:
        """Give failed items a new run now (attempts reset, the old error kept); return their ids."""
        channel = wq_settings().notify_channel
        with transaction.atomic(using=self.db):
            return [r[0] for r in store.item_retry_now_many(ids=list(ids), channel=channel, using=self.db)]

    def run_now(self, ids: Sequence[int]) -> list[int]:
        """Make scheduled items (run_after ahead) due now; return their ids."""
        channel = wq_settings().notify_channel
        with transaction.atomic(using=self.db):
            return [r[0] for r in store.item_run_now_many(ids=list(ids), channel=channel, using=self.db)]

    def extend(self, item: Item, lease: float | None = None) -> dt.datetime:
        """Push the item's lease out by ``lease`` seconds (queue default); same proof."""
        seconds = lease if lease is not None else wq_settings().queue(item.queue).lease
        rows = store.item_extend(id=item.id, token=item.lease_token, lease=float(seconds), using=self.db)
        if not rows:
            raise LeaseLost()
        item.lease_expires_at = rows[0][0]
        return rows[0][0]

    def extend_many(
        self, items: Sequence[Item], leases: Sequence[float], *, relaxed: bool = False
    ) -> dict[tuple[int, object], dt.datetime | None]:
        """Renew many leases in one statement; return {(id, proof): new expiry} for those still held.

        Keyed by id and proof, so an old and a new claim of one item are told apart. An item
        whose row another transaction holds locked is skipped, not waited for: it maps to
        None (still held, not renewed this time; try again soon). An item missing from the
        result has lost its lease.
        """
        if not items:
            return {}
        rows = store.item_extend_many(
            ids=[i.id for i in items],
            tokens=[i.lease_token for i in items],
            leases=[float(x) for x in leases],
            relaxed=relaxed,
            using=self.db,
        )
        return {(row[0], row[1]): row[2] for row in rows if row[3]}

    def complete(self, item: Item, outcome: str = "succeeded") -> None:
        """Settle a held item (default: succeeded); raise LeaseLost if the proof is stale."""
        _settled, lost = self.complete_many([item], outcome)
        if lost:
            raise LeaseLost()

    def complete_many(self, items: Sequence[Item], outcome: str = "succeeded") -> tuple[list[Item], list[Item]]:
        """Settle many held items in one statement; return (settled, lost).

        Each item presents its own proof: a stale one settles nothing for that item and
        leaves the others alone.
        """
        if outcome not in ("succeeded", "failed", "cancelled", "stopped"):
            raise InvalidInput(f"outcome must be succeeded, failed, cancelled or stopped, not {outcome!r}")
        if not items:
            return [], []
        rows = store.item_complete_many(
            ids=[i.id for i in items], tokens=[i.lease_token for i in items], outcome=outcome, using=self.db
        )
        # Positions, not ids: an old and a new claim of one item in one batch are told apart.
        done = {r[0] for r in rows}
        settled: list[Item] = []
        lost: list[Item] = []
        # The Items keep their proof: a settlement inside the caller's transaction can still
        # roll back, and then the proof is what the holder (and its lease keeper) needs.
        for n, item in enumerate(items, 1):
            (settled if n in done else lost).append(item)
        return settled, lost

    def fail(
        self,
        item: Item,
        error: str,
        delay: float | None = None,
        permanent: bool = False,
        *,
        connection_lost: bool = False,
    ) -> str:
        """Record a failed attempt: retry after the backoff while attempts remain, else fail.

        ``connection_lost``: the run lost its database connection (one more loss in a row is
        counted; any other failure ends the row). Returns ``"retried"`` or ``"failed"``;
        raises LeaseLost if the proof is stale.
        """
        error = str(error).replace("\x00", "\\0")[:8192]
        token = item.lease_token
        if permanent or item.attempts >= item.max_attempts:
            rows = store.item_fail(id=item.id, token=token, error=error, connection_lost=connection_lost, using=self.db)
            verdict = "failed"
        else:
            if delay is None:
                delay = wq_settings().queue(item.queue).retry_delay_for(item.attempts)
            rows = store.item_retry(
                id=item.id,
                token=token,
                error=error,
                delay=_seconds(delay, "delay"),
                connection_lost=connection_lost,
                using=self.db,
            )
            verdict = "retried"
        if not rows:
            raise LeaseLost()
        return verdict

    def give_up(self, item: Item, error: str, *, died: bool = False) -> str:
        """A worker ended a run itself: past its handler's timeout, or (``died``) the process
        running it died. Fail the attempt (retried or failed as the attempts say) and tell the
        hooks, in one transaction. Returns ``"retried"`` or ``"failed"``; raises LeaseLost if
        the proof is stale."""
        M = hooks.MoveReason
        with transaction.atomic(using=self.db, savepoint=False):
            verdict = self.fail(item, error)
            if died:
                reason = M.RUNNER_DIED_RETRYING if verdict == "retried" else M.RUNNER_DIED
            else:
                reason = M.TIMED_OUT_RETRYING if verdict == "retried" else M.TIMED_OUT
            hooks.items_moved([item], reason)
        return verdict

    def requeue(self, item: Item) -> None:
        """Hand a held item back to queued (ready now) under its live slot: follow-on work."""
        if not store.item_requeue(id=item.id, token=item.lease_token, using=self.db):
            raise LeaseLost()

    def release_many(self, items: Sequence[Item]) -> list[int]:
        """Give held items back to queued, refunding the attempt their claim charged."""
        if not items:
            return []
        with transaction.atomic(using=self.db, savepoint=False):
            rows = store.item_release_many(
                ids=[i.id for i in items], tokens=[i.lease_token for i in items], using=self.db
            )
            released = {(r[0], r[1]) for r in rows}
            hooks.items_moved([i for i in items if (i.id, i.lease_token) in released], hooks.MoveReason.RELEASED)
        return sorted({item_id for item_id, _token in released})

    def connection_losses(self, item: Item) -> int | None:
        """How many runs in a row of this held item lost their connection; None if not held."""
        rows = store.item_connection_losses(id=item.id, token=item.lease_token, using=self.db)
        return rows[0][0] if rows else None

    def stop_reason(self, item: Item) -> StopReason:
        """Why a holder of ``item`` lost its proof: cancelled, timed out, or lost (see the statement)."""
        rows = store.item_stop_reason(id=item.id, token=item.lease_token, attempts=item.attempts, using=self.db)
        return StopReason(rows[0][0]) if rows else StopReason.LEASE_LOST

    def release_lost_connection(self, item: Item, error: str) -> bool:
        """Give back an item whose run lost its database connection, refunding its attempt and
        recording ``error`` as its last_error; False if the proof is stale."""
        error = str(error).replace("\x00", "\\0")[:8192]
        with transaction.atomic(using=self.db, savepoint=False):
            rows = store.item_release_lost_connection(id=item.id, token=item.lease_token, error=error, using=self.db)
            if rows:
                hooks.items_moved([item], hooks.MoveReason.RELEASED)
        return bool(rows)

    def assert_held(self, item: Item) -> None:
        """Lock the item in the caller's transaction; raise LeaseLost if the proof is stale."""
        if not transaction.get_connection(self.db).in_atomic_block:
            raise transaction.TransactionManagementError(
                "assert_held() locks the row for the rest of a transaction; call it inside "
                "transaction.atomic(), where a lock proves something"
            )
        if not store.item_assert_held(id=item.id, token=item.lease_token, using=self.db):
            raise LeaseLost()

    def cancel_key(self, key: str, *, queue: str | None = None) -> list[Item]:
        """Stop every live item for ``key`` (optionally in one queue), in the caller's transaction."""
        _check_key(key)
        if queue is not None:
            _check_queue(queue)
        with transaction.atomic(using=self.db, savepoint=False):
            items = [Item.from_row(r) for r in store.item_cancel_key(key=key, queue=queue, using=self.db)]
            hooks.items_moved(items, hooks.MoveReason.CANCELLED)
        return items

    # -- operators --------------------------------------------------------------------

    def force_stop(self, ids: Iterable[int]) -> list[Item]:
        """Stop the given items now (outcome cancelled); their holders lose their leases."""
        with transaction.atomic(using=self.db, savepoint=False):
            items = [Item.from_row(r) for r in store.item_force_stop(ids=list(ids), using=self.db)]
            hooks.items_moved(items, hooks.MoveReason.FORCE_STOPPED)
        return items

    def requeue_now(self, ids: Iterable[int]) -> list[Item]:
        """Make the given unsettled items ready now; holders lose their leases."""
        with transaction.atomic(using=self.db, savepoint=False):
            items = [Item.from_row(r) for r in store.item_requeue_now(ids=list(ids), using=self.db)]
            hooks.items_moved(items, hooks.MoveReason.REQUEUED)
        return items
