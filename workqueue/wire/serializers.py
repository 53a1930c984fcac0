"""The wire's objects out (work, heartbeat, stats, list) and its inputs in (body, params, metadata).

Every timestamp is RFC 3339 UTC with six fractional digits and ``Z``. Input parsing never
touches the database: a request it refuses has changed nothing.
"""

from __future__ import annotations

import datetime as dt
import json
import re

from workqueue.exceptions import InvalidInput
from workqueue.items import validate_metadata

_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_WORK_ID = re.compile(r"work_[A-Za-z0-9_-]{1,59}", re.ASCII)
_ENVIRONMENT_ID = re.compile(r"[A-Za-z0-9_-]{1,64}", re.ASCII)
# W3C Trace Context: version-traceid-parentid-flags, lowercase hex; tracestate is a list of
# printable ASCII members (at most 512 characters kept, as the recommendation's floor).
_TRACEPARENT = re.compile(r"[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}", re.ASCII)
_TRACESTATE = re.compile(r"[\x20-\x7e]{1,512}", re.ASCII)


# -- out ------------------------------------------------------------------------------


def timestamp(value: dt.datetime | None) -> str | None:
    """RFC 3339, UTC, microseconds, ``Z``; None stays None."""
    if value is None:
        return None
    return value.astimezone(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def work_object(item) -> dict:
    """The ``work`` object for an Item."""
    return {
        "type": "work",
        "id": item.public_id,
        "environment_id": item.environment_id,
        "data": {"type": "session", "id": item.key},
        "state": item.state,
        "metadata": {k: v for k, v in (item.metadata or {}).items() if isinstance(v, str)},
        "created_at": timestamp(item.created_at),
        "acknowledged_at": timestamp(item.acknowledged_at),
        "started_at": timestamp(item.started_at),
        "latest_heartbeat_at": timestamp(item.last_heartbeat_at),
        "stop_requested_at": timestamp(item.stop_requested_at),
        "stopped_at": timestamp(item.stopped_at),
        "secret": None,
    }


def trace_headers(item) -> dict[str, str]:
    """The item's W3C trace context as response headers (``traceparent``, ``tracestate``).

    Only a well-formed ``traceparent`` goes out (a ``trace_context`` a caller stored by hand may
    hold anything), and ``tracestate`` only beside it; otherwise no header at all.
    """
    context = item.trace_context
    if not isinstance(context, dict):
        return {}
    parent = context.get("traceparent")
    if not isinstance(parent, str) or not _TRACEPARENT.fullmatch(parent) or parent.startswith("ff"):
        return {}
    headers = {"traceparent": parent}
    state = context.get("tracestate")
    if isinstance(state, str) and _TRACESTATE.fullmatch(state):
        headers["tracestate"] = state
    return headers


def heartbeat_object(beat) -> dict:
    """The ``work_heartbeat`` object (``last_heartbeat`` is "" before the first beat)."""
    return {
        "type": "work_heartbeat",
        "last_heartbeat": timestamp(beat.last_heartbeat) or "",
        "lease_extended": beat.lease_extended,
        "state": beat.state,
        "ttl_seconds": beat.ttl_seconds,
    }


def stats_object(stats) -> dict:
    return {
        "type": "work_queue_stats",
        "depth": stats.depth,
        "pending": stats.pending,
        "oldest_queued_at": timestamp(stats.oldest_queued_at),
        "workers_polling": stats.workers_polling,
    }


def list_object(items, next_page: str | None) -> dict:
    return {"data": [work_object(i) for i in items], "next_page": next_page}


# -- in -------------------------------------------------------------------------------


def work_id(value: str) -> str:
    """A work id from the path, or InvalidInput naming it."""
    if not _WORK_ID.fullmatch(value):
        raise InvalidInput(f"work_id {value[:80]!r} is not a work id (work_ followed by letters and digits)")
    return value


def environment_id(value: str) -> str:
    """An environment id from the path, or InvalidInput naming it."""
    if not _ENVIRONMENT_ID.fullmatch(value):
        raise InvalidInput(
            f"environment_id {value[:80]!r} is not an environment id (env_ followed by letters and digits)"
        )
    return value


def json_body(raw: bytes, *, allowed: tuple[str, ...]) -> dict:
    """Parse a request body: empty → {}; otherwise a JSON object with only ``allowed`` fields."""
    if not raw.strip():
        return {}
    try:
        data = json.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InvalidInput("the request body must be UTF-8 encoded JSON")
    except (ValueError, RecursionError) as exc:
        raise InvalidInput(f"the request body is not valid JSON ({str(exc)[:120]})")
    if not isinstance(data, dict):
        raise InvalidInput(f"the request body must be a JSON object, not {type(data).__name__}")
    unknown = sorted(k for k in data if k not in allowed)
    if unknown:
        names = ", ".join(repr(k[:64]) for k in unknown[:5])
        raise InvalidInput(f"unknown field(s) {names} in the request body; accepted: {', '.join(allowed) or 'none'}")
    return data


def integer(
    value: object, name: str, *, minimum: int | None = None, maximum: int | None = None, query: bool = True
) -> int | None:
    """An integer from a query string (``query``) or a JSON number (None when absent), range-checked."""
    if value is None:
        return None
    if isinstance(value, str) and query:
        if not _INTEGER.fullmatch(value):
            raise InvalidInput(f"{name} must be an integer, not {value[:40]!r}")
        number = int(value)
    elif isinstance(value, int) and not isinstance(value, bool):
        number = value
    else:
        raise InvalidInput(f"{name} must be an integer, not {type(value).__name__}")
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        low = minimum if minimum is not None else "-∞"
        high = maximum if maximum is not None else "∞"
        shown = str(number) if len(str(number)) <= 20 else f"a {len(str(number))}-digit number"
        raise InvalidInput(f"{name} must be between {low} and {high}, not {shown}")
    return number


def boolean(value: object, name: str) -> bool:
    """A JSON boolean (null or absent is false)."""
    if value is None:
        return False
    if not isinstance(value, bool):
        raise InvalidInput(f"{name} must be true or false, not {type(value).__name__}")
    return value


def text(value: object, name: str, *, max_length: int = 200) -> str | None:
    """A string from a query string or JSON value (None when absent)."""
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string, not {type(value).__name__}")
    if len(value) > max_length:
        raise InvalidInput(f"{name} must be at most {max_length} characters")
    return value


def metadata_patch(value: object) -> dict[str, str | None]:
    """Check a metadata patch: string keys → string (upsert) or null (delete), within the limits."""
    return validate_metadata(value, allow_null_values=True)


def worker_id(value: str | None) -> str | None:
    """The Anthropic-Worker-ID header, cleaned for storage (control characters dropped, ≤ 200)."""
    if not value:
        return None
    cleaned = "".join(ch for ch in value if ch.isprintable())[:200].strip()
    return cleaned or None
