"""Extension points other apps plug into without ``workqueue`` importing them.

- ``on_items_moved(fn, queues=None)``: ``fn(items, reason)`` runs inside the transaction in
  which items were moved by something other than their handler's own settlement, so an app
  that mirrors work items elsewhere (``operations``) can follow them atomically. ``queues``,
  a callable returning the names of the queues ``fn`` cares about, limits it to their items
  (it is not called for the others) and lets a claim or a wire poll on any other queue run
  as one statement of its own, with no transaction around it (``watched``); ``prefixes``, a
  callable returning queue family prefixes, adds every queue named one of them + anything.
  ``reason`` is a
  ``MoveReason`` (a ``str`` enum, equal to its value):

  - settled by a queue rule: ``ATTEMPTS_EXHAUSTED`` (attempts spent on lapsed leases),
    ``HARD_TIMEOUT``, ``CANCELLED`` (``cancel_key``), ``FORCE_STOPPED`` (an operator);
  - back to queued, still unsettled: ``REQUEUED`` (an operator's requeue; the holder loses
    its lease) and ``RELEASED`` (a worker gave held items back, e.g. at shutdown or after
    losing its connection; the items still carry the lease proof they were held under);
  - a run past its handler's ``timeout``, ended by its worker: ``TIMED_OUT`` (failed, its
    attempts spent) or ``TIMED_OUT_RETRYING`` (back to queued for another attempt); the
    process-pool child running it died: ``RUNNER_DIED`` / ``RUNNER_DIED_RETRYING`` likewise.
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
    TIMED_OUT = "timed_out"
    TIMED_OUT_RETRYING = "timed_out_retrying"
    RUNNER_DIED = "runner_died"
    RUNNER_DIED_RETRYING = "runner_died_retrying"


ItemsMovedHook = Callable[[list, MoveReason], None]
Sweep = Callable[..., dict[str, int]]

ScheduleFire = Callable[..., tuple[str, str]]
ScheduleCheck = Callable[..., list[str]]

Names = Callable[[], Iterable[str]]

# Each hook with the callables naming its queues (None: every queue) and its queue families.
_items_moved: list[tuple[ItemsMovedHook, Names | None, Names | None]] = []
_schedule_targets: dict[str, tuple[ScheduleFire, ScheduleCheck]] = {}
_sweeps: dict[str, dict[str, Sweep]] = {"recover": {}, "reap": {}}


def on_items_moved(fn: ItemsMovedHook, *, queues: Names | None = None, prefixes: Names | None = None) -> ItemsMovedHook:
    """Call ``fn(items, reason)`` whenever items are moved without their handler (a decorator too).

    ``queues``: a callable returning the names of the queues whose items ``fn`` wants (asked
    each time, so it may follow settings); None (and no ``prefixes``), every queue's.
    ``prefixes``: a callable returning queue family prefixes whose queues ``fn`` wants too.
    """
    if all(known is not fn for known, _, _ in _items_moved):
        _items_moved.append((fn, queues, prefixes))
    return fn


def off_items_moved(fn: ItemsMovedHook) -> None:
    """Stop calling ``fn`` (registered with ``on_items_moved``); nothing if it is not registered."""
    _items_moved[:] = [entry for entry in _items_moved if entry[0] is not fn]


def _wanted(queues: Names | None, prefixes: Names | None) -> Callable[[str], bool] | None:
    """A hook's test of a queue name, read from its callables now (None: it wants every queue)."""
    if queues is None and prefixes is None:
        return None
    names = set(queues()) if queues is not None else set()
    starts = tuple(prefixes()) if prefixes is not None else ()
    return lambda name: name in names or (bool(starts) and name.startswith(starts))


def watched(queues: Iterable[str]) -> bool:
    """Whether some hook wants items of these queues: a write that may move such items runs in
    a transaction for it; one that cannot interest any hook may be a statement of its own."""
    names = list(queues)
    for _fn, wants, prefixes in list(_items_moved):
        test = _wanted(wants, prefixes)
        if test is None or any(test(name) for name in names):
            return True
    return False


def watched_where(matches: Callable[[str], bool]) -> bool:
    """Whether some hook wants every queue, or one of its queues ``matches`` (for a write whose
    queues are not known beforehand, such as a wire poll across an environment's queues). A
    hook on a queue family counts as watching: its queues cannot be listed beforehand."""
    for _fn, wants, prefixes in list(_items_moved):
        if wants is None or (prefixes is not None and list(prefixes())):
            return True
        if any(matches(name) for name in wants()):
            return True
    return False


def items_moved(items: list, reason: MoveReason) -> None:
    """Tell every ``on_items_moved`` hook about items just moved (inside the moving transaction)."""
    if items:
        reason = MoveReason(reason)  # a typo'd reason fails here, not silently in a hook
        for fn, wants, prefixes in list(_items_moved):
            test = _wanted(wants, prefixes)
            mine = items if test is None else [item for item in items if test(item.queue)]
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
