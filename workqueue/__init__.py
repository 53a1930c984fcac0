"""A durable PostgreSQL work queue for Django: rows, SKIP LOCKED claims, leases, no broker.

Public API::

    from workqueue import handlers, Retry, Permanent, LeaseLost
    from workqueue.models import WorkItem

    WorkItem.objects.enqueue("emails", "user:42:welcome")

    @handlers.register("emails")
    def send(item, ctx): ...
"""

from workqueue.exceptions import (
    InvalidInput,
    InvalidMetadata,
    LeaseLost,
    Permanent,
    Retry,
    UnknownEnvironment,
    WorkqueueError,
    WorkqueueSettingsError,
)
from workqueue.states import StopReason

__all__ = [
    "InvalidInput",
    "InvalidMetadata",
    "LeaseLost",
    "Permanent",
    "Retry",
    "StopReason",
    "UnknownEnvironment",
    "WorkqueueError",
    "WorkqueueSettingsError",
]
