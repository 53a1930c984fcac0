"""Extension points other apps plug into without ``workqueue`` importing them.

- ``on_settled(fn)``: ``fn(items, reason)`` runs inside the transaction in which a queue
  rule settled items by itself (attempts spent on a lapsed lease, hard timeout,
  ``cancel_key``, an operator's force stop), so an app that mirrors work items elsewhere
  (``operations``) can settle its own rows atomically. ``reason`` is one of
  ``attempts_exhausted``, ``hard_timeout``, ``cancelled``, ``force_stopped``, ``requeued``,
  or ``released`` (a worker gave held items back, e.g. at shutdown; the items still carry
  the lease proof they were held under).
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

from collections.abc import Callable

SettledHook = Callable[[list, str], None]
Sweep = Callable[..., dict[str, int]]

ScheduleFire = Callable[..., tuple[str, str]]
ScheduleCheck = Callable[..., list[str]]

_settled: list[SettledHook] = []
_schedule_targets: dict[str, tuple[ScheduleFire, ScheduleCheck]] = {}
_sweeps: dict[str, dict[str, Sweep]] = {"recover": {}, "reap": {}}


def on_settled(fn: SettledHook) -> SettledHook:
    """Call ``fn(items, reason)`` whenever a queue rule settles items (usable as a decorator)."""
    if fn not in _settled:
        _settled.append(fn)
    return fn


def settled(items: list, reason: str) -> None:
    """Tell every ``on_settled`` hook about items a rule just settled (inside its transaction)."""
    if items:
        for fn in list(_settled):
            fn(items, reason)


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
