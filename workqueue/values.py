"""One parser per kind of value: counts, seconds and rates.

Every numeric input of both apps goes through these — the settings, the admin's forms, the
management commands and the Python API — so each takes the same forms, within the same
documented bounds, and refuses the rest with a message that says what it takes:

- a **count**: an ``int`` (not a bool), or text of ASCII digits with an optional sign
  (``"5"``, ``" +12 "``), from ``minimum`` to ``maximum`` (by default 1 to 2,147,483,647, a
  PostgreSQL ``integer``);
- **seconds**: an ``int`` or a finite ``float`` (not a bool), a ``timedelta``, or text of ASCII
  digits with an optional fraction and unit (``"10"``, ``"2.5"``, ``"10s"``, ``"5m"``,
  ``"2h"``, ``"1d"``), from 0 (or more than 0) to ``maximum`` (by default :data:`MAX_SECONDS`,
  ten years);
- a **rate**: ``"N/s"``, ``"N/m"`` or ``"N/h"`` (N in ASCII digits, 1 to 2,147,483,647), or a
  ``(count, seconds)`` pair with one of those periods.

``str.isdigit()``, ``int()`` and ``float()`` are not enough: they take ``"²"``, ``"٣"``,
``"1e20"``, ``"nan"`` and ``"inf"``, and a value past the bounds overflows a date or an
``integer`` column far from where it was typed. :func:`argument` adapts a parser to
``argparse`` (a bad value is argparse's one-line error, exit 2). :func:`storable` says whether
PostgreSQL can store a text (no NUL, no unpaired surrogate such as an argv byte that was not
UTF-8).
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable
from typing import Any

from workqueue.exceptions import InvalidInput

#: The largest PostgreSQL ``integer``: the ceiling of every count.
MAX_COUNT = 2**31 - 1
MIN_INT32 = -(2**31)
DAY = 86400.0
#: Ten years: the ceiling of every duration (a delay, a lease, a retention ...) unless a
#: narrower one is named where it is read (a schedule's interval: :data:`MAX_INTERVAL`).
MAX_SECONDS = 3652.5 * DAY
#: A schedule's interval: at most 366 days (use a cron expression for anything rarer).
MAX_INTERVAL = 366 * DAY

_COUNT = re.compile(r"[+-]?[0-9]+", re.ASCII)
_SECONDS = re.compile(r"([0-9]+(?:\.[0-9]+)?|\.[0-9]+)\s*(s|sec|m|min|h|d)?", re.ASCII)
_UNITS = {None: 1.0, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": DAY}
RATE_PERIODS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_RATE = re.compile(r"([0-9]+)\s*/\s*([smh])", re.ASCII)


def count(
    value: object,
    *,
    what: str,
    minimum: int = 1,
    maximum: int = MAX_COUNT,
    allow_none: bool = False,
    text: bool = True,
    describe: str | None = None,
    error: type[Exception] = InvalidInput,
) -> Any:
    """``value`` as an int within [minimum, maximum], or raise ``error`` naming ``what``.

    ``text=False`` (settings, typed Python arguments) takes an ``int`` only. ``describe``
    replaces the "an integer >= N" of the message (e.g. "a 32-bit integer").
    """
    if value is None and allow_none:
        return None
    number: int | None = None
    if isinstance(value, int) and not isinstance(value, bool):
        number = value
    elif text and isinstance(value, str) and _COUNT.fullmatch(value.strip()):
        number = int(value.strip())
    if number is not None and minimum <= number <= maximum:
        return number
    if describe is None:
        describe = f"an integer >= {minimum}"
        if number is None or number > maximum:
            describe += f" and <= {maximum:,}"
        if number is None and text:
            describe += " in ASCII digits (e.g. 5)"
    raise error(f"{what} must be {describe}, not {value!r}")


def priority(value: object, *, what: str = "priority", text: bool = False, error: type[Exception] = InvalidInput):
    """A priority: a count from -2,147,483,648 to 2,147,483,647 (a PostgreSQL ``integer``)."""
    return count(value, what=what, minimum=MIN_INT32, text=text, describe="a 32-bit integer", error=error)


def seconds(
    value: object,
    *,
    what: str,
    allow_zero: bool = False,
    minimum: float | None = None,
    maximum: float = MAX_SECONDS,
    allow_none: bool = False,
    text: bool = True,
    error: type[Exception] = InvalidInput,
) -> Any:
    """``value`` as a number of seconds within the bounds, or raise ``error`` naming ``what``.

    The lower bound is ``minimum`` when given, else 0 (``allow_zero``) or just above it.
    ``text=False`` (settings) takes numbers and timedeltas only.
    """
    if value is None and allow_none:
        return None
    number: float | None = None
    if isinstance(value, dt.timedelta):
        number = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        number = float(value)
    elif text and isinstance(value, str):
        match = _SECONDS.fullmatch(value.strip())
        if match:
            number = float(match.group(1)) * _UNITS[match.group(2)]
    if number is None or not math.isfinite(number):
        forms = " or a timedelta" if not text else ", or text like 10, 2.5, 10s, 5m, 2h or 1d in ASCII digits"
        raise error(f"{what} must be a number of seconds{forms}{' or None' if allow_none else ''}, not {value!r}")
    shown = number if isinstance(value, dt.timedelta) else value  # a timedelta is named in seconds
    if minimum is not None and number < minimum:
        raise error(f"{what} must be at least {minimum:g} seconds, not {shown!r}")
    if minimum is None and (number < 0 or (number == 0 and not allow_zero)):
        raise error(f"{what} must be {'0 or more' if allow_zero else 'greater than 0'}, not {shown!r}")
    if number > maximum:
        raise error(f"{what} must be at most {maximum:,.0f} seconds ({_days(maximum)}), not {shown!r}")
    return number


def _days(limit: float) -> str:
    days = limit / DAY
    return f"{days / 365.25:g} years" if days >= 3650 else f"{days:g} days"


def rate(value: object, *, what: str, error: type[Exception] = InvalidInput) -> tuple[int, float]:
    """``"50/s"``, ``"600/m"``, ``"10000/h"`` (or a (count, seconds) pair) as (count, seconds)."""
    if isinstance(value, tuple | list) and len(value) == 2:
        n, period = value
        if (
            isinstance(n, int)
            and not isinstance(n, bool)
            and 1 <= n <= MAX_COUNT
            and isinstance(period, int | float)
            and not isinstance(period, bool)
            and period in RATE_PERIODS.values()
        ):
            return n, float(period)
    elif isinstance(value, str):
        match = _RATE.fullmatch(value.strip())
        if match and 1 <= int(match.group(1)) <= MAX_COUNT:
            return int(match.group(1)), RATE_PERIODS[match.group(2)]
    raise error(
        f"{what} must be a count per period like '50/s', '600/m' or '10000/h' "
        f"(count 1 to {MAX_COUNT:,} in ASCII digits), not {value!r}"
    )


def storable(value: str) -> bool:
    """Whether PostgreSQL can store the text: no NUL and valid UTF-8 (no unpaired surrogate,
    which is what a command-line byte that was not UTF-8 becomes)."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def argument(parse: Callable[..., Any], **options) -> Callable[[str], Any]:
    """An argparse ``type=`` for ``parse`` (e.g. ``argument(count, minimum=1)``): a bad value is
    argparse's one-line "argument --x: invalid value" error with the parser's reason, exit 2."""

    def convert(text: str):
        try:
            return parse(text, what="the value", **options)
        except InvalidInput as exc:
            raise argparse.ArgumentTypeError(str(exc).removeprefix("the value ")) from None

    convert.__name__ = parse.__name__
    return convert
