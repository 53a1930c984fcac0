"""The registry (kinds, definitions, request encoding) and the package's public API."""

from __future__ import annotations

import dataclasses

import pytest

import operations
from operations.exceptions import (
    DuplicateKind,
    InvalidDefinition,
    InvalidRequest,
    RequestTooLarge,
    RequestTypeMismatch,
    UnknownKind,
)
from operations.registry import MAX_REQUEST_BYTES, Definition, Registry
from tests.testapp.kinds import TypedRequest


def noop(request, reporter):
    return None


def test_the_public_api_is_importable_from_the_package_root():
    names = [
        "start",
        "get",
        "list",
        "cancel",
        "register",
        "kinds",
        "Fail",
        "Unretryable",
        "Reporter",
        "Operation",
        "State",
        "Progress",
        "Result",
        "OperationsError",
        "OperationNotFound",
        "DuplicateOperation",
        "UnknownKind",
        "DuplicateKind",
        "InvalidDefinition",
        "InvalidRequest",
        "RequestTypeMismatch",
        "RequestTooLarge",
        "ResultTooLarge",
        "TooManyWatchers",
    ]
    for name in names:
        assert name in operations.__all__, name
        assert getattr(operations, name) is not None
    from operations import runner, service

    assert operations.start is service.start
    assert operations.Fail is runner.Fail
    assert issubclass(operations.OperationNotFound, operations.OperationsError)
    assert issubclass(operations.DuplicateOperation, operations.OperationsError)
    assert [s.value for s in operations.State] == ["pending", "running", "succeeded", "failed", "cancelled"]
    with pytest.raises(AttributeError):
        operations.no_such_thing  # noqa: B018


@pytest.mark.parametrize(
    "kind",
    ["reports.export", "a", "dataprivacy.export-v2", "ops_1.step-2", "x" * 128, "2fa.reset"],
)
def test_good_kind_names_register(kind):
    registry = Registry()
    registry.register(kind, noop)
    assert registry.has(kind)


@pytest.mark.parametrize(
    "kind",
    ["", "Reports.Export", "reports..export", ".export", "export.", "has space", "x" * 129, "ünï", None, 7],
)
def test_bad_kind_names_are_refused_with_the_rule(kind):
    registry = Registry()
    with pytest.raises(InvalidDefinition, match="lowercase"):
        registry.register(kind, noop)
    assert registry.kinds() == []


def test_registering_a_kind_twice_is_an_error_and_keeps_the_first():
    registry = Registry()
    registry.register("reports.export", noop)

    def other(request, reporter):
        return "other"

    with pytest.raises(DuplicateKind, match="already registered"):
        registry.register("reports.export", other)
    assert registry.get("reports.export").run is noop


def test_the_decorator_form_registers_and_returns_the_function():
    registry = Registry()

    @registry.register("b.second", count_label="rows", max_attempts=2)
    def second(request, reporter):
        return None

    registry.register("a.first", noop)
    assert second.__name__ == "second"
    definition = registry.get("b.second")
    assert (definition.run, definition.count_label, definition.max_attempts) == (second, "rows", 2)
    assert registry.kinds() == ["a.first", "b.second"]


@pytest.mark.parametrize(
    "options",
    [
        {"max_attempts": 0},
        {"max_attempts": -1},
        {"max_attempts": True},
        {"max_attempts": 2.5},
        {"count_label": "x" * 65},
        {"request_type": "TypedRequest"},
    ],
)
def test_bad_options_are_refused(options):
    registry = Registry()
    with pytest.raises(InvalidDefinition):
        registry.register("reports.export", noop, **options)
    assert not registry.has("reports.export")


def test_a_run_must_be_callable():
    with pytest.raises(InvalidDefinition, match="callable"):
        Registry().add(Definition(kind="reports.export", run="not a function"))


def test_an_unknown_kind_names_what_is_registered():
    registry = Registry()
    registry.register("b.known", noop)
    registry.register("a.known", noop)
    with pytest.raises(UnknownKind) as caught:
        registry.get("c.unknown")
    assert "'c.unknown'" in str(caught.value) and "a.known, b.known" in str(caught.value)


def test_the_process_registry_lists_the_test_and_demo_kinds_sorted():
    kinds = operations.kinds()
    assert kinds == sorted(kinds)
    assert {"test.ops.tiers", "test.ops.typed", "demo.export", "demo.flaky", "demo.doomed"} <= set(kinds)


def test_a_typed_request_is_checked_encoded_and_decoded():
    definition = Definition(kind="t.typed", run=noop, request_type=TypedRequest)
    encoded = definition.encode(TypedRequest(name="subject-1", size=3))
    assert encoded == {"name": "subject-1", "size": 3}
    decoded = definition.decode({**encoded, "added_later": True})
    assert decoded == TypedRequest(name="subject-1", size=3)
    with pytest.raises(RequestTypeMismatch, match="takes a TypedRequest request, not dict"):
        definition.encode({"name": "subject-1"})


def test_an_untyped_request_must_be_plain_json():
    definition = Definition(kind="t.plain", run=noop)
    assert definition.encode({"a": [1, 2.5, None, True, "x"]}) == {"a": [1, 2.5, None, True, "x"]}
    assert definition.encode(None) is None
    for bad in ({"when": object()}, {"nan": float("nan")}, {1, 2}):
        with pytest.raises(InvalidRequest, match="JSON"):
            definition.encode(bad)


def test_a_request_over_64_kib_encoded_is_refused_and_one_at_the_limit_is_not():
    definition = Definition(kind="t.plain", run=noop)
    overhead = len('{"blob":""}')
    assert definition.encode({"blob": "x" * (MAX_REQUEST_BYTES - overhead)})
    with pytest.raises(RequestTooLarge, match="65,537 bytes"):
        definition.encode({"blob": "x" * (MAX_REQUEST_BYTES - overhead + 1)})
    # Bytes, not characters: multi-byte text counts by its encoding.
    with pytest.raises(RequestTooLarge):
        definition.encode({"blob": "é" * (MAX_REQUEST_BYTES // 2)})


def test_definitions_are_frozen():
    definition = Definition(kind="t.plain", run=noop)
    with pytest.raises(dataclasses.FrozenInstanceError):
        definition.kind = "t.other"
