"""Every error the workqueue app raises. Catch ``WorkqueueError`` for all of them."""

from django.core.exceptions import ImproperlyConfigured


class WorkqueueError(Exception):
    """Base class of workqueue errors; do not raise it directly."""

    default_message = "workqueue error"

    def __init__(self, message: str | None = None):
        super().__init__(message or self.default_message)


class WorkqueueSettingsError(ImproperlyConfigured):
    """A WORKQUEUE setting is wrong; the message names it and says what it must be."""


class SqlTemplateError(WorkqueueError, ValueError):
    """A ``.sql`` file cannot be loaded (an unknown placeholder, a name defined twice, ...); the
    message names the file and line. Raised when the app's statements load, at import."""


class LeaseLost(WorkqueueError):
    """This holder no longer owns the item: its lease lapsed and another took it, or it was settled."""

    default_message = (
        "the item's lease was lost (it lapsed and was reclaimed, or the item was stopped); "
        "stop working on it and do not settle it"
    )


class InvalidInput(WorkqueueError, ValueError):
    """A caller passed a value the queue cannot accept; nothing was written."""


class UnknownEnvironment(InvalidInput):
    """The environment id does not exist; create it with `manage.py environments create`."""

    def __init__(self, environment_id: str):
        super().__init__(
            f"unknown environment {environment_id!r}: create it with "
            "`manage.py environments create NAME --kind self_hosted|cloud`, or pass environment=None"
        )
        self.environment_id = environment_id


class InvalidMetadata(InvalidInput):
    """Work item metadata must map string keys to string values within the size limits."""

    def __init__(self, problems: list[str]):
        super().__init__("invalid metadata: " + "; ".join(problems))
        self.problems = problems


class InvalidSchedule(InvalidInput):
    """A schedule definition is wrong; the message names the schedule and the fix. Nothing was written."""


class ScheduleNotFound(WorkqueueError):
    """No schedule has this name; `manage.py schedules list` shows them."""

    def __init__(self, name: str):
        super().__init__(f"no schedule named {name!r}; `manage.py schedules list` shows them")
        self.name = name


class HandlerError(WorkqueueError):
    """A handler registration is wrong (a queue registered twice, or not callable)."""


class Retry(Exception):
    """Raise from a handler to retry the item later (``delay`` seconds, default: the queue's backoff)."""

    def __init__(self, message: str = "retry requested", *, delay: float | None = None):
        super().__init__(message)
        self.delay = delay


class Permanent(Exception):
    """Raise from a handler to fail the item now, without retrying."""


class WorkNotFound(WorkqueueError):
    """No such work item is visible to this credential."""

    default_message = "work item not found"


class WorkConflict(WorkqueueError):
    """The work item is in a state that does not allow this transition."""

    default_message = "work item is in a conflicting state"


class HeartbeatMismatch(WorkqueueError):
    """The heartbeat's expected_last_heartbeat does not match the server's."""

    default_message = "heartbeat precondition failed"

    def __init__(self, current: dict | None = None, message: str | None = None):
        super().__init__(message)
        self.current = current or {}


class TooManyPollers(WorkqueueError):
    """The environment already has its maximum of worker ids polling; a new one must wait."""

    default_message = "too many workers are polling this environment"

    def __init__(self, message: str | None = None, *, retry_after: float = 30.0):
        super().__init__(message)
        self.retry_after = retry_after
