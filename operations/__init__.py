"""Long-running operations on the workqueue: durable the moment ``start`` returns, readable
by anyone while they run, and always reaching a terminal state.

    import operations

    @operations.register("reports.export", count_label="rows")
    def export(request, reporter): ...

    op = operations.start("reports.export", {"month": "2026-10"}, owner=str(user.pk))
    operations.get(op.id).done
    with operations.watch(op.id) as snapshots:  # follow it live, from this process
        for snapshot in snapshots: ...
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "register": ("operations.registry", "register"),
    "kinds": ("operations.registry", "kinds"),
    "start": ("operations.service", "start"),
    "batch": ("operations.batches", "batch"),
    "chain": ("operations.batches", "chain"),
    "children": ("operations.batches", "children"),
    "dependencies": ("operations.deps", "dependencies"),
    "dependents": ("operations.deps", "dependents"),
    "get": ("operations.service", "get"),
    "workflow": ("operations.workflows", "workflow"),
    "step": ("operations.workflows", "step"),
    "signal": ("operations.workflows", "signal"),
    "steps": ("operations.workflows", "steps"),
    "signals": ("operations.workflows", "signals"),
    "fork": ("operations.workflows", "fork"),
    "Workflow": ("operations.workflows", "Workflow"),
    "AsyncWorkflow": ("operations.workflows", "AsyncWorkflow"),
    "StepFailed": ("operations.workflows", "StepFailed"),
    "WorkflowStopped": ("operations.workflows", "WorkflowStopped"),
    "list_operations": ("operations.service", "list_operations"),
    "cancel": ("operations.service", "cancel"),
    "recover": ("operations.service", "recover"),
    "reap": ("operations.service", "reap"),
    "Fail": ("operations.runner", "Fail"),
    "Unretryable": ("operations.runner", "Unretryable"),
    "is_unretryable": ("operations.runner", "is_unretryable"),
    "Reporter": ("operations.reporter", "Reporter"),
    "AsyncReporter": ("operations.reporter", "AsyncReporter"),
    "Attempt": ("operations.reporter", "Attempt"),
    "StopReason": ("workqueue.states", "StopReason"),
    "Operation": ("operations.models", "Operation"),
    "State": ("operations.models", "State"),
    "Progress": ("operations.models", "Progress"),
    "Result": ("operations.models", "Result"),
    "Error": ("operations.models", "Error"),
    "watch": ("operations.watcher", "watch"),
    "OperationsError": ("operations.exceptions", "OperationsError"),
    "OperationNotFound": ("operations.exceptions", "OperationNotFound"),
    "DuplicateOperation": ("operations.exceptions", "DuplicateOperation"),
    "UnknownKind": ("operations.exceptions", "UnknownKind"),
    "DuplicateKind": ("operations.exceptions", "DuplicateKind"),
    "InvalidDefinition": ("operations.exceptions", "InvalidDefinition"),
    "InvalidRequest": ("operations.exceptions", "InvalidRequest"),
    "UnknownDependency": ("operations.exceptions", "UnknownDependency"),
    "RequestTypeMismatch": ("operations.exceptions", "RequestTypeMismatch"),
    "RequestTooLarge": ("operations.exceptions", "RequestTooLarge"),
    "ResultTooLarge": ("operations.exceptions", "ResultTooLarge"),
    "TooManyWatchers": ("operations.exceptions", "TooManyWatchers"),
    "WatcherClosed": ("operations.exceptions", "WatcherClosed"),
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    # Lazy, so `import operations` works before Django's app registry is ready
    # (INSTALLED_APPS imports this package first).
    try:
        module, attr = _EXPORTS[name]
    except KeyError:
        raise AttributeError(f"module 'operations' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__():
    return __all__
