"""``Item``: a work item as a holder sees it, read straight from a statement's row.

The hot paths build these from tuples instead of model instances: no ORM object churn
per item. ``lease_token`` is the proof every later write by the holder presents.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass, field
from uuid import UUID

from workqueue import values
from workqueue.exceptions import InvalidMetadata
from workqueue.sql import CLAIMED_COLUMNS, ITEM_COLUMNS

_N = len(ITEM_COLUMNS)
_CLAIMED_N = len(CLAIMED_COLUMNS)


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
        """An Item from a claim's slim row (CLAIMED_COLUMNS: Item's leading fields, in order);
        the fields after them stay empty."""
        item = cls(*row[:_CLAIMED_N])
        metadata = item.metadata
        item.metadata = {} if metadata == "{}" else _json(metadata) or {}
        if item.trace_context is not None:
            item.trace_context = _json(item.trace_context)
        return item

    @property
    def final(self) -> bool:
        """True when no attempt will follow if this one fails."""
        return self.attempts >= self.max_attempts

    def __repr__(self) -> str:
        return f"<Item {self.public_id} {self.queue}:{self.key} {self.state} attempt {self.attempts}>"


# The limits of an item's metadata (SPEC: string keys to string values), checked at enqueue,
# in a wire metadata patch and for a schedule's metadata.
METADATA_MAX_KEYS = 16
METADATA_MAX_KEY_LENGTH = 64
METADATA_MAX_VALUE_LENGTH = 512


def validate_metadata(metadata: object, *, allow_null_values: bool = False) -> dict:
    """Check work item metadata: string keys to string values (or null, to delete, in a patch),
    within the size limits; raise InvalidMetadata naming every problem (the first few keys)."""
    if metadata is None:
        return {}
    kinds = "string or null values" if allow_null_values else "string values"
    if not isinstance(metadata, dict):
        raise InvalidMetadata([f"metadata must be an object of {kinds}, not {type(metadata).__name__}"])
    problems = []
    if len(metadata) > METADATA_MAX_KEYS:
        problems.append(f"at most {METADATA_MAX_KEYS} keys are allowed, got {len(metadata)}")
    for key, value in list(metadata.items())[: METADATA_MAX_KEYS + 4]:
        problems.extend(_metadata_entry_problems(key, value, kinds, allow_null_values))
    if problems:
        raise InvalidMetadata(problems)
    return metadata


def _metadata_entry_problems(key: object, value: object, kinds: str, allow_null_values: bool) -> list[str]:
    if not isinstance(key, str) or not key:
        return [f"key {key!r} must be a non-empty string"]
    problems = []
    shown = repr(key[:40]) + ("…" if len(key) > 40 else "")
    if len(key) > METADATA_MAX_KEY_LENGTH:
        problems.append(f"key {shown} is longer than {METADATA_MAX_KEY_LENGTH} characters")
    elif not _storable(key):
        problems.append(f"key {shown} contains a NUL or an unpaired surrogate")
    if value is None and allow_null_values:
        return problems
    if not isinstance(value, str):
        problems.append(
            f"value of {shown} must be a {kinds.split()[0]}{' or null' if allow_null_values else ''}, "
            f"not {type(value).__name__}"
        )
    elif len(value) > METADATA_MAX_VALUE_LENGTH:
        problems.append(f"value of {shown} is longer than {METADATA_MAX_VALUE_LENGTH} characters")
    elif not _storable(value):
        problems.append(f"value of {shown} contains a NUL or an unpaired surrogate")
    return problems


_storable = values.storable
