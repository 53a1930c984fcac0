"""More branches of operations.request_mapping.from_mapping (pure: no database, no registry)."""

import dataclasses
import typing

from operations.request_mapping import from_mapping


@dataclasses.dataclass
class Inner:
    port: int


@dataclasses.dataclass
class Other:
    name: str


@dataclasses.dataclass
class Unresolvable:
    later: "NoSuchTypeAnywhere"  # noqa: F821 - resolves nowhere, on purpose
    count: int = 0
    tagged: typing.Annotated[int, "a note"] = 0


@dataclasses.dataclass
class Boxed[T]:
    item: T


@dataclasses.dataclass
class Shapes:
    level: typing.Literal["low", "high"] = "low"
    tagged: typing.Annotated[int, "a note"] = 0
    inner: Inner | None = None
    items: list[int] = dataclasses.field(default_factory=list)
    pair: tuple[int, ...] = ()
    table: dict[str, int] = dataclasses.field(default_factory=dict)
    nothing: None = None
    either: int | str = 0
    choice: Inner | Other | None = None


def test_an_unresolvable_annotation_is_taken_as_is_and_the_resolvable_ones_still_checked():
    built, problems = from_mapping(Unresolvable, {"later": object, "count": 1})
    assert problems == []
    assert built == Unresolvable(later=object, count=1)
    built, problems = from_mapping(Unresolvable, {"later": 1, "count": "three"})
    assert built is None
    assert problems == ["'count' must be int, not str"]


def test_annotated_is_unwrapped_when_the_hints_do_not_resolve():
    # get_type_hints strips Annotated; the fallback (raw field types) keeps it
    built, problems = from_mapping(Unresolvable, {"later": 1, "tagged": 7})
    assert problems == [] and built.tagged == 7
    built, problems = from_mapping(Unresolvable, {"later": 1, "tagged": "7"})
    assert built is None
    assert problems == ["'tagged' must be int, not str"]


def test_a_typevar_field_takes_any_value():
    built, problems = from_mapping(Boxed, {"item": {"anything": [1, "x"]}})
    assert problems == []
    assert built.item == {"anything": [1, "x"]}


def test_annotated_is_checked_against_its_inner_type():
    built, problems = from_mapping(Shapes, {"tagged": 5})
    assert problems == [] and built.tagged == 5
    built, problems = from_mapping(Shapes, {"tagged": "5"})
    assert built is None
    assert problems == ["'tagged' must be int, not str"]


def test_literal_accepts_its_values_and_names_them_when_refusing():
    built, problems = from_mapping(Shapes, {"level": "high"})
    assert problems == [] and built.level == "high"
    built, problems = from_mapping(Shapes, {"level": "medium"})
    assert built is None
    assert problems == ["'level' must be one of 'low', 'high', not 'medium'"]


def test_literal_is_not_checked_when_not_strict():
    built, problems = from_mapping(Shapes, {"level": "medium"}, strict=False)
    assert problems == []
    assert built.level == "medium"


def test_a_nested_dataclass_instance_is_kept_as_it_is():
    inner = Inner(port=80)
    built, problems = from_mapping(Shapes, {"inner": inner})
    assert problems == []
    assert built.inner is inner


def test_a_nested_mapping_is_built_and_its_problems_named_by_path():
    built, problems = from_mapping(Shapes, {"inner": {"port": 8080}})
    assert problems == [] and built.inner == Inner(port=8080)
    built, problems = from_mapping(Shapes, {"inner": {"port": "80"}})
    assert built is None
    assert problems == ["'inner.port' must be int, not str"]


def test_not_strict_leaves_a_wrong_nested_value_as_it_is():
    built, problems = from_mapping(Shapes, {"inner": 5, "items": "abc", "table": [1]}, strict=False)
    assert problems == []
    assert built.inner == 5
    assert built.items == "abc"
    assert built.table == [1]


def test_not_strict_drops_unknown_fields_and_rebuilds_nested_dataclasses():
    built, problems = from_mapping(Shapes, {"inner": {"port": 1}, "extra": 1}, strict=False)
    assert problems == []
    assert built.inner == Inner(port=1)


def test_a_list_field_refuses_a_non_list_and_names_a_bad_item_by_index():
    _, problems = from_mapping(Shapes, {"items": "abc"})
    assert problems == ["'items' must be a list, not str"]
    _, problems = from_mapping(Shapes, {"items": [1, "two"]})
    assert problems == ["'items[1]' must be int, not str"]


def test_a_variadic_tuple_checks_each_item_and_builds_a_list():
    built, problems = from_mapping(Shapes, {"pair": [1, 2, 3]})
    assert problems == []
    assert built.pair == [1, 2, 3]
    built, problems = from_mapping(Shapes, {"pair": (1, "x")})
    assert built is None
    assert problems == ["'pair[1]' must be int, not str"]


def test_a_dict_field_refuses_a_non_mapping_and_names_a_bad_value_by_key():
    built, problems = from_mapping(Shapes, {"table": [1, 2]})
    assert built is None
    assert problems == ["'table' must be a mapping, not list"]
    _, problems = from_mapping(Shapes, {"table": {"a": 1, "b": "x"}})
    assert problems == ["'table[\"b\"]' must be int, not str"]


def test_a_none_annotation_takes_only_null():
    built, problems = from_mapping(Shapes, {"nothing": None})
    assert problems == [] and built.nothing is None
    built, problems = from_mapping(Shapes, {"nothing": 1})
    assert built is None
    assert problems == ["'nothing' must be null, not int"]


def test_a_union_takes_the_first_option_that_fits():
    built, problems = from_mapping(Shapes, {"either": "text"})
    assert problems == [] and built.either == "text"
    built, problems = from_mapping(Shapes, {"either": 3})
    assert problems == [] and built.either == 3


def test_a_union_of_dataclasses_builds_the_one_whose_fields_fit():
    built, problems = from_mapping(Shapes, {"choice": {"name": "db"}})
    assert problems == []
    assert built.choice == Other(name="db")
    built, problems = from_mapping(Shapes, {"choice": {"port": 5432}})
    assert problems == []
    assert built.choice == Inner(port=5432)


def test_a_union_refuses_a_value_that_fits_no_option_and_names_the_union():
    built, problems = from_mapping(Shapes, {"either": 1.5})
    assert built is None
    assert problems == ["'either' must be int | str, not float"]
    _, problems = from_mapping(Shapes, {"choice": {"nope": 1}})
    # the union is named by str(), so classes appear module-qualified
    assert len(problems) == 1
    assert problems[0].startswith("'choice' must be ")
    assert problems[0].endswith(f"{__name__}.Inner | {__name__}.Other | None, not dict")


def test_a_union_not_strict_keeps_a_value_that_fits_no_option():
    built, problems = from_mapping(Shapes, {"either": 1.5}, strict=False)
    assert problems == []
    assert built.either == 1.5
