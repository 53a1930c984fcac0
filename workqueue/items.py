"""``Item``: a work item as a holder sees it, read straight from a statement's row.

The hot paths build these from tuples instead of model instances: no ORM object churn
per item. ``lease_token`` is the proof every later write by the holder presents.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from uuid import UUID

from workqueue.sql import ITEM_COLUMNS

_N = len(ITEM_COLUMNS)


def _json(value):
    # Django's psycopg adapters load jsonb as text; raw psycopg would give objects.
    if value is None or isinstance(value, dict | list):
        return value
    if value == "{}":
        return {}
    return json.loads(value)


@dataclass(slots=True, eq=False)
class Item:
    id: int
    public_id: str
    queue: str
    key: str
    environment_id: str | None
    state: str
    outcome: str | None
    priority: int
    run_after: dt.datetime | None  # None on an item made from a claim's row, which does not read it
    attempts: int
    max_attempts: int
    lease_token: UUID | None
    lease_expires_at: dt.datetime | None
    reclaimed: bool
    metadata: dict = field(default_factory=dict)
    trace_context: dict | None = None
    created_at: dt.datetime | None = None
    started_at: dt.datetime | None = None
    last_error: str = ""
    claimed_by: str = ""
    wire: bool = False
    handed_out: bool = False
    acknowledged_at: dt.datetime | None = None
    last_heartbeat_at: dt.datetime | None = None
    stop_requested_at: dt.datetime | None = None
    stopped_at: dt.datetime | None = None

    @classmethod
    def from_row(cls, row) -> Item:
        item = cls(*row[:_N])
        item.metadata = _json(item.metadata) or {}
        item.trace_context = _json(item.trace_context)
        return item

    @classmethod
    def from_claimed(cls, row) -> Item:
        """An Item from a claim's slim row (CLAIMED_COLUMNS); the other fields stay empty."""
        (
            id_,
            public_id,
            queue,
            key,
            environment_id,
            state,
            priority,
            attempts,
            max_attempts,
            lease_token,
            lease_expires_at,
            reclaimed,
            metadata,
            trace_context,
            created_at,
            last_error,
        ) = row[:16]
        return cls(
            id_,
            public_id,
            queue,
            key,
            environment_id,
            state,
            None,
            priority,
            None,
            attempts,
            max_attempts,
            lease_token,
            lease_expires_at,
            reclaimed,
            _json(metadata) or {},
            _json(trace_context),
            created_at,
            None,
            last_error,
        )

    @property
    def final(self) -> bool:
        """True when no attempt will follow if this one fails."""
        return self.attempts >= self.max_attempts

    def __repr__(self) -> str:
        return f"<Item {self.public_id} {self.queue}:{self.key} {self.state} attempt {self.attempts}>"
