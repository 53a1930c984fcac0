"""The fragments whose SQL is computed from Python constants, all of them here.

Every other fragment is written in a ``.sql`` file. These are not, because their text must
follow Python that other code reads too:

- ``{item}``: the columns every ``Item`` is built from (alias ``w``), in ``ITEM_COLUMNS``
  order, which ``Item.from_row`` relies on; ``{claimed}``: the leading ones a claim hands back.
- ``{states_<set>}``, one per state set of ``workqueue/states.py`` (``{states_live}`` is
  ``('queued', 'starting', 'active')``), and ``{outcomes_<set>}`` likewise: a set is typed
  there once and nowhere else.
"""

from __future__ import annotations

from collections.abc import Iterable

from workqueue import states

# The columns every Item is read from, in Item's field order (see workqueue.items).
ITEM_COLUMNS = (
    "id",
    "public_id",
    "queue",
    "key",
    "environment_id",
    "state",
    "outcome",
    "priority",
    "run_after",
    "attempts",
    "max_attempts",
    "lease_token",
    "lease_expires_at",
    "reclaimed",
    "metadata",
    "trace_context",
    "created_at",
    "started_at",
    "last_error",
    "claimed_by",
    "wire",
    "handed_out",
    "acknowledged_at",
    "last_heartbeat_at",
    "stop_requested_at",
    "stopped_at",
)

# What a claim hands back: the leading columns of ITEM_COLUMNS, through last_error, in Item's
# field order (so Item.from_claimed passes the row straight to Item), with started_at left
# NULL: a handler does not read it, and one timestamp less to parse per row. run_after is
# read (the claim sorts its rows on it); the columns after last_error stay empty.
CLAIMED_COLUMNS = ITEM_COLUMNS[: ITEM_COLUMNS.index("last_error") + 1]
_NOT_CLAIMED = {"started_at": "NULL::timestamptz AS started_at"}


def column_list(columns: Iterable[str], width: int = 96) -> str:
    """A select list, ``", "``-separated, broken into lines of at most ``width`` characters."""
    lines = [""]
    for column in columns:
        if lines[-1] and len(lines[-1]) + len(column) + 2 > width:
            lines[-1] += ","
            lines.append(column)
        else:
            lines[-1] += f", {column}" if lines[-1] else column
    return "\n".join(lines)


def fragments() -> dict[str, str]:
    """The generated fragments, by name."""
    found = {
        "item": column_list(f"w.{c}" for c in ITEM_COLUMNS),
        "claimed": column_list(_NOT_CLAIMED.get(c, f"w.{c}") for c in CLAIMED_COLUMNS),
    }
    found.update({f"states_{name}": states.render_states(name) for name in states.STATE_SETS})
    found.update({f"outcomes_{name}": states.render_outcomes(name) for name in states.OUTCOME_SETS})
    return found
