"""The work-item state machine's vocabulary: states, outcomes and the named sets of states.

This module imports nothing from the project, so anything may import it: the model (its
``choices`` and constraints), the managers, the admin, and the SQL layer, which renders each
named set as a fragment, ``{states_live}`` → ``('queued', 'starting', 'active')``
(``workqueue/sql/generated.py``). A set of states is typed here once and nowhere else.

A work item moves through these states (the SQL that moves it is in ``workqueue/sql/``)::

    queued ──claim──────────────► active ──complete/fail(final)──► stopped
      ▲  ▲                          │  ▲
      │  └──fail (retry, backoff)───┘  └── lapsed lease: claim reclaims it (reclaimed=True)
      │
      ├──poll (wire; soft reservation, stays queued)
      │     └─ack──► starting ──first heartbeat──► active ──graceful stop──► stopping ──► stopped
      └──── lapsed starting/active wire lease: poll/recover re-offer it under a fresh public id

    any live state ──cancel_key / force stop / hard timeout──► stopped

A lapsed lease whose holder had spent the item's attempts is settled ``failed`` instead of
handed out again, with one ``last_error`` text wherever that is decided (the
``lapsed_settle`` fragment of ``workqueue/sql/fragments.sql``).
"""

from __future__ import annotations

import enum

from django.db import models


class State(models.TextChoices):
    QUEUED = "queued"
    STARTING = "starting"
    ACTIVE = "active"
    STOPPING = "stopping"
    STOPPED = "stopped"


class Outcome(models.TextChoices):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STOPPED = "stopped"


class StopReason(enum.StrEnum):
    """Why a run was told to stop (``ctx.stop_reason``, ``reporter.stop_reason``; None while it runs).

    The first reason given wins: a run stopped for a shutdown and then cancelled keeps
    ``shutdown``. Only ``cancel_requested`` is a caller's wish that the work not be done
    (``is_cancelled()``); every other reason means "stop now, the work will be offered again"
    (or, for ``timeout``, failed for good), so cleanup that undoes the work belongs there only.
    """

    CANCEL_REQUESTED = "cancel_requested"  # cancel_key, an operator's force stop, operations.cancel()
    STALLED = "stalled"  # no progress() within the queue's stall budget: the lease is left to lapse
    LEASE_LOST = "lease_lost"  # the proof went (another holder has the item) or the lease ran out
    TIMEOUT = "timeout"  # the reaper failed the item past its queue's hard_timeout
    SHUTDOWN = "shutdown"  # the worker is stopping: the grace period ended, the item was released


# Live: at most one per (queue, key) (the work_items_live_key_uniq index); enqueue merges into it.
LIVE_STATES = (State.QUEUED, State.STARTING, State.ACTIVE)
# Held: under a lease, with the proof (lease_token) minted when it was handed out.
HELD_STATES = (State.STARTING, State.ACTIVE, State.STOPPING)
# Unheld: every state but the held ones. A statement may say "NOT IN {states_unheld}" where an
# index over the held states must not serve it (item_complete_many, by primary key instead).
UNHELD_STATES = tuple(s for s in State if s not in HELD_STATES)
# Running: held and not winding down; the holder may renew, retry, requeue or release it.
RUNNING_STATES = (State.STARTING, State.ACTIVE)
# Unsettled: not stopped yet (with key <> '', the work_items_unsettled_keyed_idx predicate).
UNSETTLED_STATES = (State.QUEUED, State.STARTING, State.ACTIVE, State.STOPPING)
# A graceful wire stop settles these outright: nothing is in flight to wind down.
STOP_OUTRIGHT_STATES = (State.QUEUED, State.STARTING)
ALL_STATES = tuple(State)

# Outcomes the dashboard charts per five minutes.
CHARTED_OUTCOMES = (Outcome.SUCCEEDED, Outcome.FAILED)
ALL_OUTCOMES = tuple(Outcome)

# The named sets, as the SQL layer names them: {states_live}, {outcomes_charted}.
STATE_SETS: dict[str, tuple[State, ...]] = {
    "live": LIVE_STATES,
    "held": HELD_STATES,
    "unheld": UNHELD_STATES,
    "running": RUNNING_STATES,
    "unsettled": UNSETTLED_STATES,
    "stop_outright": STOP_OUTRIGHT_STATES,
    "all": ALL_STATES,
}
OUTCOME_SETS: dict[str, tuple[Outcome, ...]] = {
    "charted": CHARTED_OUTCOMES,
    "all": ALL_OUTCOMES,
}


def sql_list(values) -> str:
    """A parenthesised SQL list of string literals: ``('queued', 'starting')``."""
    return "(" + ", ".join(f"'{v.value}'" for v in values) + ")"


def render_states(name: str) -> str:
    """``{states_NAME}``: the named state set as an SQL list (KeyError names the known sets)."""
    try:
        return sql_list(STATE_SETS[name.strip()])
    except KeyError:
        raise KeyError(f"unknown state set {name!r}; known: {', '.join(STATE_SETS)}") from None


def render_outcomes(name: str) -> str:
    """``{outcomes_NAME}``: the named outcome set as an SQL list."""
    try:
        return sql_list(OUTCOME_SETS[name.strip()])
    except KeyError:
        raise KeyError(f"unknown outcome set {name!r}; known: {', '.join(OUTCOME_SETS)}") from None
