"""Extension points other apps plug into without ``workqueue`` importing them.

- ``on_items_moved(fn, queues=None)``: ``fn(items, reason)`` runs inside the transaction in
  which items were moved by something other than their handler's own settlement, so an app
  that mirrors work items elsewhere (``operations``) can follow them atomically. ``queues``,
  a callable returning the names of the queues ``fn`` cares about, limits it to their items
  (it is not called for the others) and lets a claim or a wire poll on any other queue run
  as one statement of its own, with no transaction around it (``watched``). ``reason`` is a
  ``MoveReason`` (a ``str`` enum, equal to its value):

  - settled by a queue rule: ``ATTEMPTS_EXHAUSTED`` (attempts spent on lapsed leases),
    ``HARD_TIMEOUT``, ``CANCELLED`` (``cancel_key``), ``FORCE_STOPPED`` (an operator);
  - back to queued, still unsettled: ``REQUEUED`` (an operator's requeue; the holder loses
    its lease) and ``RELEASED`` (a worker gave held items back, e.g. at shutdown or after
    losing its connection; the items still carry the lease proof they were held under).
- ``register_sweep(kind, name, fn)``: ``fn(using=..., dry_run=False) -> dict[str, int]`` is run by
  ``manage.py recover`` (``kind="recover"``) or ``manage.py reap`` (``kind="reap"``) under
  the same advisory lock, and its counts are merged into the summary line as
  ``<name>_<count>``.
- ``register_schedule_target(target, fire, check)``: how a schedule of ``target``
  (``"operation"``, ``"task"``) runs. ``fire(schedule, key, *, using) -> (queue, key)`` starts
  the run inside the firing transaction, idempotently per ``key``; ``check(schedule) ->
  list[str]`` names what is wrong with a definition (an unknown kind, a missing task).
  ``operations`` registers both; ``workqueue`` runs work-item schedules itself.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterable


class MoveReason(enum.StrEnum):
    """Why ``items_moved`` hooks are called (see the module docstring)."""

    ATTEMPTS_EXHAUSTED = "attempts_exhausted"
    HARD_TIMEOUT = "hard_timeout"
    CANCELLED = "cancelled"
    FORCE_STOPPED = "force_stopped"
    REQUEUED = "requeued"
    RELEASED = "released"


ItemsMovedHook = Callable[[list, MoveReason], None]
Sweep = Callable[..., dict[str, int]]

ScheduleFire = Callable[..., tuple[str, str]]
ScheduleCheck = Callable[..., list[str]]

# Each hook with the callable naming its queues (None: every queue).
_items_moved: list[tuple[ItemsMovedHook, Callable[[], Iterable[str]] | None]] = []
_schedule_targets: dict[str, tuple[ScheduleFire, ScheduleCheck]] = {}
_sweeps: dict[str, dict[str, Sweep]] = {"recover": {}, "reap": {}}


def on_items_moved(fn: ItemsMovedHook, *, queues: Callable[[], Iterable[str]] | None = None) -> ItemsMovedHook:
    """Call ``fn(items, reason)`` whenever items are moved without their handler (a decorator too).

    ``queues``: a callable returning the names of the queues whose items ``fn`` wants (asked
    each time, so it may follow settings); None, every queue's.
    """
    if all(known is not fn for known, _ in _items_moved):
        _items_moved.append((fn, queues))
    return fn


def off_items_moved(fn: ItemsMovedHook) -> None:
    """Stop calling ``fn`` (registered with ``on_items_moved``); nothing if it is not registered."""
    _items_moved[:] = [(known, queues) for known, queues in _items_moved if known is not fn]


def watched(queues: Iterable[str]) -> bool:
    """Whether some hook wants items of these queues: a write that may move such items runs in
    a transaction for it; one that cannot interest any hook may be a statement of its own."""
    names = set(queues)
    return any(wants is None or not names.isdisjoint(wants()) for _fn, wants in list(_items_moved))


def watched_where(matches: Callable[[str], bool]) -> bool:
    """Whether some hook wants every queue, or one of its queues ``matches`` (for a write whose
    queues are not known beforehand, such as a wire poll across an environment's queues)."""
    return any(wants is None or any(matches(name) for name in wants()) for _fn, wants in list(_items_moved))


def items_moved(items: list, reason: MoveReason) -> None:
    """Tell every ``on_items_moved`` hook about items just moved (inside the moving transaction)."""
    if items:
        reason = MoveReason(reason)  # a typo'd reason fails here, not silently in a hook
        for fn, wants in list(_items_moved):
            if wants is None:
                fn(items, reason)
                continue
            names = set(wants())
            mine = [item for item in items if item.queue in names]
            if mine:
                fn(mine, reason)


def register_sweep(kind: str, name: str, fn: Sweep) -> None:
    """Add ``fn`` to the ``recover`` or ``reap`` command under ``name``."""
    if kind not in _sweeps:
        raise ValueError(f"sweep kind must be 'recover' or 'reap', not {kind!r}")
    _sweeps[kind][name] = fn


def sweeps(kind: str) -> dict[str, Sweep]:
    return dict(_sweeps[kind])


def register_schedule_target(target: str, fire: ScheduleFire, check: ScheduleCheck) -> None:
    """Let schedules of ``target`` run through ``fire`` and be validated by ``check``."""
    _schedule_targets[target] = (fire, check)


def schedule_target(target: str) -> tuple[ScheduleFire, ScheduleCheck] | None:
    return _schedule_targets.get(target)
