"""A work item's attempts, one entry each: what the admin's attempt timeline shows.

The row keeps a bounded log of the attempts that ended otherwise than by success (the
``attempt_log`` column, written by the statement that ended each one: see the
``attempt_ended`` fragment). The attempt under way, or the one that ended the row (a success
writes no entry), is read from the row itself: its number, holder, start and end. The two
are told apart by their start: an attempt whose start is the row's ``started_at`` is
already in the log when a retry or a failure ended it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

from django.utils.dateparse import parse_datetime

from workqueue.models import WorkItem
from workqueue.states import HELD_STATES


@dataclass(frozen=True)
class Attempt:
    number: int
    worker: str
    started_at: datetime.datetime | None
    ended_at: datetime.datetime | None
    outcome: str  # "retried", "failed", "lease lapsed", ... or "running" for the one under way
    error: str

    @property
    def seconds(self) -> float | None:
        """How long it ran (None until it ends, or when its start is not known)."""
        if self.started_at is None or self.ended_at is None:
            return None
        return (self.ended_at - self.started_at).total_seconds()


def _instant(text) -> datetime.datetime | None:
    return parse_datetime(text) if isinstance(text, str) and text else None


def _logged(entry: dict) -> Attempt:
    return Attempt(
        number=int(entry.get("attempt") or 0),
        worker=entry.get("worker") or "",
        started_at=_instant(entry.get("started_at")),
        ended_at=_instant(entry.get("ended_at")),
        outcome=entry.get("outcome") or "",
        error=entry.get("error") or "",
    )


def _current(item: WorkItem) -> Attempt:
    """The row's own attempt: under way while it is held, else the one that ended it."""
    held = item.state in HELD_STATES
    return Attempt(
        number=item.attempts,
        worker=item.claimed_by,
        started_at=item.started_at,
        ended_at=None if held else item.stopped_at,
        outcome=item.state if held else (item.outcome or item.state),
        error="" if held or item.outcome == "succeeded" else item.last_error,
    )


def timeline(item: WorkItem) -> list[Attempt]:
    """The item's attempts, oldest first (at most the log's 20 and the row's own)."""
    attempts = [_logged(entry) for entry in item.attempt_log or [] if isinstance(entry, dict)]
    last_start = attempts[-1].started_at if attempts else None
    if item.started_at is not None and item.started_at != last_start:
        attempts.append(_current(item))
    return attempts
