"""Build a kind's dataclass request from a mapping of its fields.

A shell, a cron line or a JSON body has a dict, not the kind's dataclass: ``start`` builds
the dataclass from it, checking each field against its annotation (nested dataclasses,
``list[X]``, ``dict[str, X]``, ``X | None``, ``Literal``) so that a request that does not fit
is refused at once, every problem named by its path (``'target.port' must be int, not str``),
instead of failing later inside the run. Annotations it cannot check are taken as they are.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from collections.abc import Mapping

_PLAIN = (str, int, float, bool)


def from_mapping(cls: type, value: Mapping, *, strict: bool = True) -> tuple[object, list[str]]:
    """Return (an instance of the dataclass ``cls`` built from ``value``, the problems found).

    ``strict`` checks unknown fields and types (a new request); without it (a stored request
    read back) unknown fields are dropped and only nested dataclasses are rebuilt.
    """
    problems: list[str] = []
    built = _build(cls, value, "", problems, strict)
    return built, problems


def _hints(cls: type) -> dict[str, object]:
    try:
        return typing.get_type_hints(cls)
    except Exception:  # an annotation that does not resolve here: check what resolves
        return {f.name: f.type for f in dataclasses.fields(cls) if not isinstance(f.type, str)}


def _type_name(tp: object) -> str:
    return tp.__name__ if isinstance(tp, type) else str(tp).replace("typing.", "")


def _build(cls: type, value: Mapping, path: str, problems: list[str], strict: bool):
    fields = [f for f in dataclasses.fields(cls) if f.init]
    names = [f.name for f in fields]
    hints = _hints(cls)
    if strict:
        unknown = [k for k in value if k not in names]
        if unknown:
            listed = ", ".join(f"'{path}{k}'" for k in unknown)
            problems.append(f"unknown field{'s' if len(unknown) > 1 else ''} {listed} (it takes {', '.join(names)})")
        missing = [
            f.name
            for f in fields
            if f.name not in value and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            listed = ", ".join(f"'{path}{k}'" for k in missing)
            problems.append(f"missing field{'s' if len(missing) > 1 else ''} {listed}")
    kwargs = {
        name: _convert(hints.get(name, typing.Any), value[name], f"{path}{name}", problems, strict)
        for name in names
        if name in value
    }
    if strict and problems:
        return None
    if not strict:
        return cls(**kwargs)
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # the class's own checks (__post_init__)
        where = f"'{path.rstrip('.')}' ({cls.__name__})" if path else cls.__name__
        problems.append(f"{where} refused it: {exc}")
        return None


def _convert(tp, value, path: str, problems: list[str], strict: bool):
    """``value`` checked against ``tp`` (problems appended when strict), nested dataclasses built."""
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if tp is typing.Any or isinstance(tp, typing.TypeVar | str):
        return value
    if origin is typing.Annotated:
        return _convert(args[0], value, path, problems, strict)
    if origin is typing.Union or origin is types.UnionType:
        return _convert_union(tp, args, value, path, problems, strict)
    if origin is typing.Literal:
        if strict and value not in args:
            problems.append(f"'{path}' must be one of {', '.join(map(repr, args))}, not {value!r}")
        return value
    if dataclasses.is_dataclass(tp) and isinstance(tp, type):
        return _convert_dataclass(tp, value, path, problems, strict)
    if origin in (list, tuple) or tp in (list, tuple):
        return _convert_list(origin, args, value, path, problems, strict)
    if origin is dict or tp is dict:
        return _convert_dict(args, value, path, problems, strict)
    if strict and tp in _PLAIN and not _fits_plain(tp, value):
        problems.append(f"'{path}' must be {tp.__name__}, not {type(value).__name__}")
    if strict and tp is type(None) and value is not None:
        problems.append(f"'{path}' must be null, not {type(value).__name__}")
    return value


def _convert_dataclass(tp: type, value, path: str, problems: list[str], strict: bool):
    if isinstance(value, tp):
        return value
    if isinstance(value, Mapping):
        return _build(tp, value, f"{path}.", problems, strict)
    if strict:
        problems.append(
            f"'{path}' must be a mapping of {tp.__name__}'s fields (or a {tp.__name__}), not {type(value).__name__}"
        )
    return value


def _convert_list(origin, args, value, path: str, problems: list[str], strict: bool):
    if not isinstance(value, list | tuple):
        if strict:
            problems.append(f"'{path}' must be a list, not {type(value).__name__}")
        return value
    item_type = args[0] if origin is list and args else typing.Any
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        item_type = args[0]
    return [_convert(item_type, v, f"{path}[{i}]", problems, strict) for i, v in enumerate(value)]


def _convert_dict(args, value, path: str, problems: list[str], strict: bool):
    if not isinstance(value, Mapping):
        if strict:
            problems.append(f"'{path}' must be a mapping, not {type(value).__name__}")
        return value
    value_type = args[1] if len(args) == 2 else typing.Any
    return {k: _convert(value_type, v, f"{path}[{json.dumps(k)}]", problems, strict) for k, v in value.items()}


def _fits_plain(tp: type, value) -> bool:
    if isinstance(value, bool):
        return tp is bool
    if tp is float:
        return isinstance(value, int | float)  # JSON writes 2.0 as 2
    return isinstance(value, tp)


def _convert_union(tp, args, value, path: str, problems: list[str], strict: bool):
    if value is None and type(None) in args:
        return None
    options = [a for a in args if a is not type(None)]
    if len(options) == 1:
        return _convert(options[0], value, path, problems, strict)
    for option in options:
        trial: list[str] = []
        converted = _convert(option, value, path, trial, True)
        if not trial:
            return converted
    if strict:
        problems.append(f"'{path}' must be {_type_name(tp)}, not {type(value).__name__}")
    return value
