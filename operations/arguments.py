"""The checks ``start``, ``batch`` and ``chain`` share on their arguments, each raising
``InvalidRequest`` with a message that says what to pass instead."""

from __future__ import annotations

from operations.conf import ops_settings
from operations.exceptions import InvalidRequest
from workqueue import values
from workqueue.conf import QUEUE_NAME
from workqueue.exceptions import InvalidInput
from workqueue.managers import check_group

MAX_OWNER_LENGTH = 200


def queue(name: object) -> str:
    """An operations queue (None: the default one) that the operations handler serves."""
    conf = ops_settings()
    name = name or conf.queue
    if not isinstance(name, str) or not QUEUE_NAME.match(name):
        raise InvalidRequest(f"bad queue name {name!r}")
    if not conf.serves(name):
        raise InvalidRequest(
            f"queue {name!r} is not one the operations handler serves; add it to OPERATIONS['QUEUES'] "
            f"(now {conf.queues})"
        )
    return name


def priority(value: object) -> int:
    """A 32-bit integer, as the queue checks it (``workqueue.values.priority``)."""
    return values.priority(value, error=InvalidRequest)


def delay(value: object) -> float:
    """Seconds before the first run (None: none): 0 to ten years, a number or a timedelta."""
    if value is None:
        return 0.0
    return values.seconds(value, what="delay", allow_zero=True, text=False, error=InvalidRequest)


def max_attempts(value: object) -> int | None:
    """The operation's own attempt ceiling (None: the kind's or the setting); never unlimited."""
    return values.count(
        value,
        what="max_attempts",
        allow_none=True,
        text=False,
        describe="an integer >= 1 (never unlimited)",
        error=InvalidRequest,
    )


def owner(value: object) -> str:
    text = "" if value is None else str(value)
    if len(text) > MAX_OWNER_LENGTH:
        raise InvalidRequest(f"owner must be at most {MAX_OWNER_LENGTH} characters")
    return text


def group(value: object) -> str | None:
    """The work item's group, checked as the queue checks it (``workqueue.managers.check_group``)."""
    try:
        return check_group(value)
    except InvalidInput as exc:
        raise InvalidRequest(str(exc)) from None
