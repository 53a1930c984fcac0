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
        "list_operations",
        "watch",
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
    import builtins

    assert not set(operations.__all__) & set(dir(builtins))  # `from operations import *` shadows nothing
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
    with pytest.raises(RequestTypeMismatch, match="takes a TypedRequest request or a mapping of its fields, not list"):
        definition.encode(["subject-1"])
    with pytest.raises(RequestTypeMismatch, match="not Target"):
        definition.encode(Target(host="h", port=1))


@dataclasses.dataclass
class Target:
    host: str
    port: int = 443


@dataclasses.dataclass
class Nested:
    target: Target
    tags: list[str]
    ratio: float = 1.0
    backup: Target | None = None
    labels: dict[str, int] = dataclasses.field(default_factory=dict)


def test_a_mapping_builds_the_dataclass_request_with_its_defaults():
    definition = Definition(kind="t.typed", run=noop, request_type=TypedRequest)
    assert definition.encode({"name": "subject-1"}) == {"name": "subject-1", "size": 1}
    assert definition.encode({"name": "subject-1", "size": 3}) == {"name": "subject-1", "size": 3}


def test_a_mapping_builds_nested_dataclasses_and_the_run_gets_them_back():
    definition = Definition(kind="t.nested", run=noop, request_type=Nested)
    encoded = definition.encode(
        {"target": {"host": "db"}, "tags": ["a", "b"], "ratio": 2, "backup": None, "labels": {"x": 1}}
    )
    assert encoded == {
        "target": {"host": "db", "port": 443},
        "tags": ["a", "b"],
        "ratio": 2,
        "backup": None,
        "labels": {"x": 1},
    }
    decoded = definition.decode(encoded)
    assert decoded == Nested(target=Target("db"), tags=["a", "b"], ratio=2, labels={"x": 1})
    assert isinstance(decoded.target, Target)
    with_backup = definition.decode({**encoded, "backup": {"host": "spare", "port": 5}})
    assert with_backup.backup == Target("spare", 5)


@pytest.mark.parametrize(
    ("value", "problems"),
    [
        ({"name": "x", "colour": "red", "shape": 1}, ["unknown fields 'colour', 'shape' (it takes name, size)"]),
        ({"size": 2}, ["missing field 'name'"]),
        ({"name": "x", "size": "3"}, ["'size' must be int, not str"]),
        ({"name": "x", "size": True}, ["'size' must be int, not bool"]),
        ({"name": None}, ["'name' must be str, not NoneType"]),
        ({"nme": "x", "size": 2.5}, ["unknown field 'nme'", "missing field 'name'", "'size' must be int, not float"]),
    ],
    ids=["unknown", "missing", "str for int", "bool for int", "null for str", "all named at once"],
)
def test_a_mapping_that_does_not_fit_the_dataclass_is_refused_naming_each_field(value, problems):
    definition = Definition(kind="t.typed", run=noop, request_type=TypedRequest)
    with pytest.raises(InvalidRequest) as caught:
        definition.encode(value)
    message = str(caught.value)
    assert "kind 't.typed'" in message and "TypedRequest" in message
    for problem in problems:
        assert problem in message
    assert not isinstance(caught.value, RequestTypeMismatch)


@dataclasses.dataclass
class Checked:
    units: int

    def __post_init__(self):
        if self.units < 1:
            raise ValueError("units must be at least 1")


def test_the_dataclass_own_checks_refuse_a_mapping_as_invalid_request():
    definition = Definition(kind="t.checked", run=noop, request_type=Checked)
    assert definition.encode({"units": 2}) == {"units": 2}
    with pytest.raises(InvalidRequest, match="refused it: units must be at least 1"):
        definition.encode({"units": 0})


@pytest.mark.parametrize(
    ("value", "problem"),
    [
        ({"target": {"host": "db", "port": "80"}, "tags": []}, "'target.port' must be int, not str"),
        ({"target": {"host": "db", "proto": "tcp"}, "tags": []}, "unknown field 'target.proto'"),
        ({"target": {}, "tags": []}, "missing field 'target.host'"),
        ({"target": "db:80", "tags": []}, "'target' must be a mapping of Target's fields (or a Target), not str"),
        ({"target": {"host": "db"}, "tags": ["a", 2]}, "'tags[1]' must be str, not int"),
        ({"target": {"host": "db"}, "tags": "a,b"}, "'tags' must be a list, not str"),
        ({"target": {"host": "db"}, "tags": [], "ratio": "1.5"}, "'ratio' must be float, not str"),
        ({"target": {"host": "db"}, "tags": [], "backup": {"port": 1}}, "missing field 'backup.host'"),
        ({"target": {"host": "db"}, "tags": [], "backup": 7}, "'backup' must be a mapping of Target's fields"),
        ({"target": {"host": "db"}, "tags": [], "labels": {"x": "1"}}, "'labels[\"x\"]' must be int, not str"),
    ],
    ids=[
        "nested wrong type",
        "nested unknown",
        "nested missing",
        "nested not a mapping",
        "list item",
        "not a list",
        "float",
        "optional nested",
        "optional nested not a mapping",
        "dict value",
    ],
)
def test_wrong_nested_types_are_refused_with_their_path(value, problem):
    definition = Definition(kind="t.nested", run=noop, request_type=Nested)
    with pytest.raises(InvalidRequest) as caught:
        definition.encode(value)
    assert problem in str(caught.value)


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
