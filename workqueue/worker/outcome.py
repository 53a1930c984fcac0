"""How a handler's run ended, and what that does to its item: one table, no database.

``outcome_of(exc)`` is pure: it looks at the exception a handler raised (``None`` when it
returned) and says what the settler does next. The table, first match wins:

=============================  ==================  ===========================================
the handler...                 action              the item
=============================  ==================  ===========================================
returned                       ``COMPLETE``        succeeded (batched by the settler)
raised ``Retry``               ``RETRY``           back to queued after ``Retry.delay``
raised ``Permanent``           ``FAIL``            failed now, attempts left or not
raised ``LeaseLost``           ``LOST``            someone else's now: not touched
raised a database error on a   ``RETRY``           retried with the queue's backoff (a bad
usable connection                                  statement is the handler's failure)
raised a database error on a   ``RELEASE``         back to queued, attempt refunded (not the
dead connection                                    item's fault; bounded, see below)
raised anything else           ``RETRY``           retried with the queue's backoff
=============================  ==================  ===========================================

``RETRY`` means "fail this attempt": the item goes back with backoff while it has attempts
left and fails otherwise (the store decides). ``KeyboardInterrupt``, ``SystemExit`` and the
like count as anything else: signals reach the worker on its main thread, never as an
exception in a runner, so from a handler they are that handler's failure.
"""

from __future__ import annotations

import enum
import traceback
from dataclasses import dataclass

from workqueue.exceptions import LeaseLost, Permanent, Retry
from workqueue.worker.loop import DB_ERRORS

LOST_CONNECTION = "database connection lost while running"


class Action(enum.Enum):
    COMPLETE = "complete"
    RETRY = "retry"
    FAIL = "fail"
    LOST = "lost"
    RELEASE = "release"


@dataclass(frozen=True)
class Ending:
    """What to do with an item whose handler ended: ``action``, and for a failure its record."""

    action: Action
    error: str = ""
    delay: float | None = None
    unexpected: bool = False  # log it: the handler raised something it did not mean to

    @property
    def permanent(self) -> bool:
        return self.action is Action.FAIL


COMPLETED = Ending(Action.COMPLETE)


def outcome_of(exc: BaseException | None, *, connection_usable: bool = True) -> Ending:
    """Map a handler's ending (``None``: it returned) to what happens to its item.

    ``connection_usable`` only matters for a database error: whether the runner's connection
    still works (the handler's statement failed) or died under it (a restart, a killed backend).
    """
    if exc is None:
        return COMPLETED
    if isinstance(exc, Retry):
        return Ending(Action.RETRY, str(exc), exc.delay)
    if isinstance(exc, Permanent):
        return Ending(Action.FAIL, f"{exc.__class__.__name__}: {exc}")
    if isinstance(exc, LeaseLost):
        return Ending(Action.LOST)
    if isinstance(exc, DB_ERRORS) and not connection_usable:
        return Ending(Action.RELEASE, f"{exc.__class__.__name__}: {str(exc).strip()}")
    return Ending(Action.RETRY, describe(exc), unexpected=True)


def failure_of(exc: BaseException) -> tuple[str, float | None, bool]:
    """How a handler's exception fails its item: (last_error, retry delay or None, permanent)."""
    outcome = outcome_of(exc)
    return outcome.error, outcome.delay, outcome.permanent


def describe(exc: BaseException) -> str:
    """``Class: message`` plus the innermost frames, bounded, for last_error."""
    tb = traceback.format_exception(exc)
    text = f"{exc.__class__.__module__}.{exc.__class__.__qualname__}: {exc}\n" + "".join(tb[-4:])
    return text[:8192]


def lost_connection_error(losses_before: int, detail: str, refunds: int) -> tuple[int, str, bool]:
    """A connection loss: the losses in a row, the last_error it writes, and whether it refunds.

    ``losses_before`` is the item's ``connection_losses`` column (the losses in a row so far,
    across workers and restarts; any other recorded failure sets it back to 0). Past
    ``refunds`` losses in a row each loss costs the attempt (a handler that kills its own
    backend must not loop for ever).
    """
    losses = losses_before + 1
    if losses > refunds:
        return losses, f"{LOST_CONNECTION} ({losses} in a row; the attempt is charged): {detail}", False
    return losses, f"{LOST_CONNECTION} ({losses} in a row; released without charging the attempt): {detail}", True
