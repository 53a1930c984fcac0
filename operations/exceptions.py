"""Every error the operations app raises. Catch ``OperationsError`` for all of them."""

from django.core.exceptions import ImproperlyConfigured


class OperationsError(Exception):
    """Base class of operations errors; do not raise it directly."""

    default_message = "operations error"

    def __init__(self, message: str | None = None):
        super().__init__(message or self.default_message)


class OperationsSettingsError(ImproperlyConfigured):
    """An OPERATIONS setting is wrong; the message names it and says what it must be."""


class OperationNotFound(OperationsError, LookupError):
    """No operation with this id (or not visible to this owner)."""

    default_message = "operation not found"


class DuplicateOperation(OperationsError):
    """An operation with this id already exists; ``.operation`` is the existing one."""

    default_message = "an operation with this id already exists"

    def __init__(self, message: str | None = None, operation=None):
        super().__init__(message)
        self.operation = operation


class UnknownKind(OperationsError, LookupError):
    """No kind of this name is registered in this process."""

    def __init__(self, kind: str, known: list[str] | None = None):
        known_text = ", ".join(known or []) or "(none)"
        super().__init__(
            f"unknown operation kind {kind!r}; registered kinds: {known_text}. Register it with "
            "operations.register() in an AppConfig.ready() that this process imports."
        )
        self.kind = kind


class DuplicateKind(OperationsError):
    """A kind was registered twice; a silent overwrite would swap the code under queued operations."""


class InvalidDefinition(OperationsError, ValueError):
    """A kind registration cannot be run: a bad name, no run function, or bad options."""


class InvalidRequest(OperationsError, ValueError):
    """The request cannot be stored: wrong type for its kind, not JSON-serialisable, or too large."""


class RequestTypeMismatch(InvalidRequest):
    """The request is not of the type its kind was registered with."""


class RequestTooLarge(InvalidRequest):
    """The encoded request is over 64 KiB; store the data elsewhere and pass a reference."""


class ResultTooLarge(OperationsError):
    """A result detail over 16 KiB is refused (a truncated encoding would be invalid)."""


class TooManyWatchers(OperationsError):
    """The watcher already follows its maximum number of operations; try again later."""

    default_message = "too many operation watchers; retry later"


class WatcherClosed(OperationsError):
    """The watcher has been closed."""

    default_message = "the operations watcher is closed"


class UnknownDependency(InvalidRequest, LookupError):
    """``start(..., after=[ids])`` named an operation that does not exist (in this database):
    nothing was written. ``.missing`` lists the unknown ids."""

    def __init__(self, missing: list[str]):
        shown = ", ".join(repr(i) for i in missing[:10]) + (" ..." if len(missing) > 10 else "")
        super().__init__(
            f"after= names {len(missing)} operation(s) that do not exist: {shown}. Start the dependencies first "
            "(with the same using=) and pass their ids; a reaped operation cannot be depended on."
        )
        self.missing = missing
