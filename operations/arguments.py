"""The checks ``start``, ``batch`` and ``chain`` share on their arguments, each raising
``InvalidRequest`` with a message that says what to pass instead."""

from __future__ import annotations

from operations.conf import ops_settings
from operations.exceptions import InvalidRequest
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
    if name not in conf.queues:
        raise InvalidRequest(
            f"queue {name!r} is not one the operations handler serves; add it to OPERATIONS['QUEUES'] "
            f"(now {conf.queues})"
        )
    return name


def priority(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or abs(value) >= 2**31:
        raise InvalidRequest(f"priority must be a 32-bit integer, not {value!r}")
    return value


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
