"""The kinds of operation this process can run: a name, a function, and how progress reads.

Register in an ``AppConfig.ready()`` so every process (web and worker) knows the kind::

    import operations

    @operations.register("reports.export", request_type=ExportRequest, count_label="rows")
    def export(request: ExportRequest, reporter: operations.Reporter):
        ...
        return operations.Result(uri=...)

``run`` may be an ``async def``: it is awaited on ``runworker``'s event loop, many at once,
and gets an ``AsyncReporter`` (``await reporter.flush()``; the buffered methods unchanged)::

    @operations.register("images.fetch")
    async def fetch(request, reporter):
        async with httpx.AsyncClient() as client:
            ...

Request types are dataclasses (encoded as their fields; ``start`` also takes a mapping of the
fields and builds the dataclass) or, with no type, plain JSON values.
"""

from __future__ import annotations

import dataclasses
import json
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from operations import request_mapping
from operations.exceptions import (
    DuplicateKind,
    InvalidDefinition,
    InvalidRequest,
    RequestTooLarge,
    RequestTypeMismatch,
    UnknownKind,
)

KIND = re.compile(r"^[a-z0-9]+(?:[._-][a-z0-9]+)*$")
MAX_KIND_LENGTH = 128
MAX_REQUEST_BYTES = 64 * 1024
MAX_COUNT_LABEL = 64


@dataclass(frozen=True, slots=True)
class Definition:
    """One kind of long-running work."""

    kind: str
    run: Callable
    request_type: type | None = None
    count_label: str = ""
    max_attempts: int | None = None
    #: Seconds before a failed attempt is retried: a number, or ``fn(request, attempt_number)``;
    #: None uses OPERATIONS["RETRY_DELAY"].
    retry_delay: float | Callable | None = None
    #: Called in the worker once a run's end is recorded, as ``fn(operation, state, value, exc)``:
    #: the operation as the attempt began it, the state written (succeeded, failed or cancelled),
    #: what run returned (or None) and what it raised (or None). Not called when the attempt is
    #: retried or its end could not be recorded. What it raises is logged, never propagated.
    finished: Callable | None = None
    #: Whether this kind is a workflow (``operations.workflow``): its runs record their steps.
    workflow: bool = False
    #: What runworker enforces on each run (``soft_timeout``, ``timeout``, ``max_memory_mb``:
    #: see ``workqueue.handlers``), or None.
    limits: object = None
    #: Whether ``run`` is an ``async def`` (awaited on runworker's event loop); worked out once.
    is_async: bool = dataclasses.field(init=False, default=False)

    def __post_init__(self):
        from workqueue.worker.pools.eventloop import is_async

        object.__setattr__(self, "is_async", is_async(self.run))

    def delay_after(self, request, attempt_number: int, default: float) -> float:
        """Seconds to wait before retrying after attempt ``attempt_number`` failed."""
        if self.retry_delay is None:
            return default
        if callable(self.retry_delay):
            return float(self.retry_delay(request, attempt_number))
        return float(self.retry_delay)

    def encode(self, request) -> object:
        """Check the request against the kind's type and return its JSON-ready form."""
        if self.request_type is not None:
            if self._takes_mapping(request, self.request_type):
                request = self._from_mapping(request, self.request_type)
            if not isinstance(request, self.request_type):
                or_mapping = " or a mapping of its fields" if dataclasses.is_dataclass(self.request_type) else ""
                raise RequestTypeMismatch(
                    f"kind {self.kind!r} takes a {self.request_type.__qualname__} request{or_mapping}, "
                    f"not {type(request).__qualname__}"
                )
            value: object
            if dataclasses.is_dataclass(request) and not isinstance(request, type):
                value = dataclasses.asdict(request)
            elif hasattr(request, "to_json"):
                value = request.to_json()
            else:
                value = request
        else:
            value = request
        try:
            encoded = json.dumps(value, separators=(",", ":"), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InvalidRequest(
                f"the request for kind {self.kind!r} is not JSON-serialisable ({exc}); "
                "use plain dicts/lists/str/int/float/bool/None or a dataclass of them"
            )
        size = len(encoded.encode())
        if size > MAX_REQUEST_BYTES:
            raise RequestTooLarge(
                f"the encoded request for kind {self.kind!r} is {size:,} bytes, over the "
                f"{MAX_REQUEST_BYTES:,}-byte limit: store the data elsewhere and pass a reference"
            )
        return value

    @staticmethod
    def _takes_mapping(request, request_type: type) -> bool:
        return (
            isinstance(request, Mapping)
            and not isinstance(request, request_type)
            and dataclasses.is_dataclass(request_type)
        )

    def _from_mapping(self, request: Mapping, request_type: type):
        """Build the kind's dataclass from a mapping of its fields (a shell's, a cron line's, JSON's)."""
        built, problems = request_mapping.from_mapping(request_type, request)
        if problems:
            raise InvalidRequest(
                f"the request for kind {self.kind!r} does not fit {request_type.__qualname__}: {'; '.join(problems)}"
            )
        return built

    def decode(self, value):
        """Rebuild the request the runner receives from its stored form."""
        if self.request_type is None:
            return value
        if dataclasses.is_dataclass(self.request_type):
            # Fields added to the stored form later (or dropped from the class) are ignored.
            built, _ = request_mapping.from_mapping(self.request_type, value or {}, strict=False)
            return built
        if hasattr(self.request_type, "from_json"):
            return self.request_type.from_json(value)
        return self.request_type(value)


class Registry:
    """Kinds by name. Safe for concurrent use; registration normally happens at start-up."""

    def __init__(self):
        self._defs: dict[str, Definition] = {}
        self._resolved: dict[str, Definition] = {}  # made on demand by a resolver; not listed by kinds()
        self._resolvers: dict[str, Callable[[str], Definition | None]] = {}
        self._lock = threading.Lock()

    def register(
        self,
        kind: str,
        run: Callable | None = None,
        *,
        request_type: type | None = None,
        count_label: str = "",
        max_attempts: int | None = None,
        retry_delay: float | Callable | None = None,
        finished: Callable | None = None,
        workflow: bool = False,
        soft_timeout: float | None = None,
        timeout: float | None = None,
        max_memory_mb: float | None = None,
    ):
        """Register ``run`` under ``kind``; without ``run``, return a decorator.

        ``soft_timeout`` / ``timeout`` / ``max_memory_mb``: limits runworker enforces on each
        run, as for a queue's handler (``workqueue.handlers``): past ``soft_timeout`` the run is
        told to stop (``reporter.stop_reason == "timeout"``), past ``timeout`` it is ended and
        the attempt fails with code ``timeout`` (retried while attempts remain)."""
        from workqueue.exceptions import HandlerError
        from workqueue.handlers import Limits

        try:
            limits = Limits.checked(
                soft_timeout=soft_timeout, timeout=timeout, max_memory_mb=max_memory_mb, what=f"kind {kind!r}"
            )
        except HandlerError as exc:
            raise InvalidDefinition(str(exc)) from None

        def add(fn: Callable) -> Callable:
            self.add(
                Definition(
                    kind=kind,
                    run=fn,
                    request_type=request_type,
                    count_label=count_label,
                    max_attempts=max_attempts,
                    retry_delay=retry_delay,
                    finished=finished,
                    workflow=workflow,
                    limits=limits,
                )
            )
            return fn

        return add(run) if run is not None else add

    def add(self, definition: Definition) -> None:
        kind = definition.kind
        if not isinstance(kind, str) or len(kind) > MAX_KIND_LENGTH or not KIND.match(kind):
            raise InvalidDefinition(
                f"bad kind name {kind!r}: use lowercase letters and digits separated by '.', '-' or '_', "
                f"at most {MAX_KIND_LENGTH} characters (e.g. 'reports.export')"
            )
        if not callable(definition.run):
            raise InvalidDefinition(f"kind {kind!r} needs a callable run(request, reporter)")
        if definition.finished is not None and not callable(definition.finished):
            raise InvalidDefinition(f"kind {kind!r}: finished must be callable as fn(operation, state, value, exc)")
        if definition.request_type is not None and not isinstance(definition.request_type, type):
            raise InvalidDefinition(f"kind {kind!r}: request_type must be a class, not {definition.request_type!r}")
        if not isinstance(definition.count_label, str) or len(definition.count_label) > MAX_COUNT_LABEL:
            raise InvalidDefinition(f"kind {kind!r}: count_label must be a string of at most {MAX_COUNT_LABEL} chars")
        attempts = definition.max_attempts
        if attempts is not None and (isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1):
            raise InvalidDefinition(
                f"kind {kind!r}: max_attempts must be an integer >= 1 or None (attempts are never unlimited)"
            )
        with self._lock:
            if kind in self._defs:
                raise DuplicateKind(
                    f"kind {kind!r} is already registered (by {self._defs[kind].run.__module__}); "
                    "a second registration would swap the code under operations already queued"
                )
            self._defs[kind] = definition

    def unregister(self, kind: str) -> None:
        """Forget a kind (for tests)."""
        with self._lock:
            self._defs.pop(kind, None)
            self._resolved.pop(kind, None)

    def add_resolver(self, prefix: str, resolve: Callable[[str], Definition | None]) -> None:
        """Let ``resolve(kind)`` supply definitions for kinds starting with ``prefix`` on demand
        (the django.tasks backend names one kind per task function this way)."""
        with self._lock:
            self._resolvers[prefix] = resolve

    def get(self, kind: str) -> Definition:
        found = self._defs.get(kind) or self._resolved.get(kind)
        if found is not None:
            return found
        for prefix, resolve in list(self._resolvers.items()):
            if isinstance(kind, str) and (kind == prefix or kind.startswith(prefix + ".")):
                definition = resolve(kind)
                if definition is not None:
                    with self._lock:
                        return self._resolved.setdefault(kind, definition)
        raise UnknownKind(kind, self.kinds())

    def has(self, kind: str) -> bool:
        try:
            self.get(kind)
        except UnknownKind:
            return False
        return True

    def kinds(self) -> list[str]:
        """The kinds registered in this process, sorted (not those a resolver makes on demand,
        such as one per django.tasks task: which of those a process has met is happenstance)."""
        return sorted(self._defs)


registry = Registry()
register = registry.register
kinds = registry.kinds
