"""When a schedule fires: interval and cron timings, their slots, and the keys of their items."""

from __future__ import annotations

import datetime as dt
import zoneinfo
from dataclasses import dataclass

from workqueue.exceptions import InvalidSchedule

UTC = dt.UTC
EPOCH = dt.datetime(1970, 1, 1, tzinfo=UTC)
MICRO = dt.timedelta(microseconds=1)

CRON_EXTRA = 'pip install "django-workqueue-operations[cron]"'


def _cronsim():
    try:
        import cronsim
    except ImportError:
        raise InvalidSchedule(f"cron schedules need the cronsim library: {CRON_EXTRA}")
    return cronsim


def check_cron(expr: object) -> str:
    """Return the expression if cronsim accepts it as five fields; else raise InvalidSchedule."""
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise InvalidSchedule(
            f"cron expression {expr!r} must have five fields: minute hour day-of-month month day-of-week "
            "(e.g. '30 2 * * *')"
        )
    cronsim = _cronsim()
    try:
        cronsim.CronSim(expr, dt.datetime(2026, 1, 1))
    except cronsim.CronSimError as exc:
        raise InvalidSchedule(f"cron expression {expr!r} is not valid: {exc}")
    return expr


def check_timezone(name: object) -> zoneinfo.ZoneInfo:
    if not isinstance(name, str) or not name:
        raise InvalidSchedule(f"time zone must be an IANA name such as 'Europe/Berlin', not {name!r}")
    try:
        return zoneinfo.ZoneInfo(name)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise InvalidSchedule(f"unknown time zone {name!r}: use an IANA name such as 'Europe/Berlin' or 'UTC'")


@dataclass(frozen=True)
class Timing:
    """When a schedule fires: a cron expression in a time zone, or a fixed interval."""

    cron: str = ""
    every: float | None = None
    timezone: str = "UTC"

    @property
    def _every_us(self) -> int:
        assert self.every is not None, "only an interval schedule has slots every N seconds"
        return max(1, round(self.every * 1_000_000))

    def _us(self, t: dt.datetime) -> int:
        return (t - EPOCH) // MICRO

    def _cron_iter(self, start: dt.datetime, reverse: bool = False):
        cronsim = _cronsim()
        tz = check_timezone(self.timezone)
        for local in cronsim.CronSim(self.cron, start.astimezone(tz), reverse=reverse):
            yield local.astimezone(UTC)

    def next_after(self, t: dt.datetime) -> dt.datetime:
        """The first slot strictly after ``t``."""
        if self.every:
            step = self._every_us
            return EPOCH + MICRO * ((self._us(t) // step + 1) * step)
        return next(self._cron_iter(t))

    def newest(self, now: dt.datetime, k: int, floor: dt.datetime) -> list[dt.datetime]:
        """Up to ``k`` of the newest slots ``s`` with ``floor <= s <= now``, oldest first."""
        if now < floor or k < 1:
            return []
        if self.every:
            step = self._every_us
            last = self._us(now) // step * step
            out = [EPOCH + MICRO * (last - i * step) for i in range(k)]
            return [s for s in reversed(out) if s >= floor]
        # The forward iteration defines the slots; the reverse one only finds where to start
        # it, a margin earlier so that a daylight-saving shift cannot hide a slot.
        start = floor - dt.timedelta(seconds=1)
        back = self._cron_iter(now + dt.timedelta(seconds=1), reverse=True)
        for n, s in enumerate(back, 1):
            if s < floor:
                break
            if n >= k:
                start = max(start, s - dt.timedelta(hours=3))
                break
        found = []
        for s in self._cron_iter(start):
            if s > now:
                break
            if s >= floor:
                found.append(s)
        return found[-k:]

    def describe(self) -> str:
        if self.every:
            return f"every {_human_seconds(self.every)}"
        return f"cron {self.cron} ({self.timezone})"


def _human_seconds(value: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if value >= size and value % size == 0:
            return f"{int(value // size)} {unit}"
    return f"{value:g} s"


def slot_key(name: str, slot: dt.datetime, prefix: str = "") -> str:
    """The key of a slot's run: ``{prefix}{name}:{slot in UTC ISO 8601}Z`` (SPEC, Wave 2 rules)."""
    return f"{prefix}{name}:{slot.astimezone(UTC).replace(tzinfo=None).isoformat()}Z"


def manual_key(name: str, at: dt.datetime, prefix: str = "") -> str:
    """The key of a run-now: ``{prefix}{name}:manual:{UTC timestamp}Z``."""
    return f"{prefix}{name}:manual:{at.astimezone(UTC).replace(tzinfo=None).isoformat(timespec='microseconds')}Z"
