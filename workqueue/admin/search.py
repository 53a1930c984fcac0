"""The admin's search box beyond an exact id or key, each form answered by an index on a
table of millions of rows.

- ``account=42`` finds the rows whose JSON (a work item's ``metadata``, an operation's
  ``request``) holds ``"account": 42`` or ``"account": "42"``: a containment (``@>``) that a
  GIN index answers (for metadata a partial one over the non-empty documents, whose
  predicate each arm of the query repeats so that the planner can use it).
  ``customer.region=eu`` looks one level down; a quoted value (``name="a b"``) is one value
  with its spaces; several pairs must all hold.
- ``error:timeout`` looks for the text in the errors of the newest :data:`RECENT_FAILURES`
  failures only: a substring search over every error ever recorded would read the whole
  history on each search.
- ``export:42*`` finds the keys that start with ``export:42`` (at least :data:`MIN_PREFIX`
  characters before the star), through the keys' indexes (a ``LIKE`` with a fixed prefix).

Anything else is left to the page's exact matches (an id, a key).
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from django.db.models import F, JSONField, Lookup, Q, QuerySet, Value

#: How many of the newest failures an ``error:`` search reads at most.
RECENT_FAILURES = 10_000
#: How many field=value pairs a search takes (each may stand for two values: 2**6 arms).
MAX_PAIRS = 6
#: A key prefix (``export:42*``) is at least this long: a shorter one would match most keys.
MIN_PREFIX = 3

ERROR_PREFIX = "error:"
# name=value: the name a dotted path (8 levels at most), the value a word or a "quoted string".
_PAIR = re.compile(r'(?P<name>[A-Za-z_][\w-]*(?:\.[A-Za-z_][\w-]*){0,7})=(?P<value>"(?:[^"\\]|\\.)*"|[^\s"]*)')
_PAIRS = re.compile(rf"{_PAIR.pattern}(?:\s+{_PAIR.pattern})*".replace("?P<name>", "").replace("?P<value>", ""))


@dataclass(frozen=True)
class Terms:
    """What a search term asks for: JSON pairs, an error text, or neither (an exact match)."""

    pairs: list[tuple[list[str], str]] = field(default_factory=list)
    error: str = ""
    prefix: str = ""

    @property
    def structured(self) -> bool:
        return bool(self.pairs or self.error or self.prefix)


def parse(term: str) -> Terms:
    """``account=42 region=eu`` → pairs; ``error:text`` → an error search; ``abc*`` → a key
    prefix; anything else → nothing (the page's exact matches)."""
    term = term.strip()
    if term.lower().startswith(ERROR_PREFIX):
        return Terms(error=term[len(ERROR_PREFIX) :].strip())
    if term.endswith("*") and len(term) > MIN_PREFIX and not any(c.isspace() for c in term):
        return Terms(prefix=term[:-1])
    if not _PAIRS.fullmatch(term):
        return Terms()  # not all pairs: the whole term is an id or a key
    pairs = [(m["name"].split("."), m["value"]) for m in _PAIR.finditer(term)]
    return Terms(pairs=pairs) if len(pairs) <= MAX_PAIRS else Terms()


def _candidates(value: str) -> list[Any]:
    """The JSON values a typed value may stand for: ``42`` is 42 or "42"; ``true`` true or "true"."""
    try:
        parsed = json.loads(value)
    except ValueError:
        return [value]
    if isinstance(parsed, str):
        return [parsed]  # it was quoted JSON: that string only
    if isinstance(parsed, float) and not math.isfinite(parsed):
        return [value]  # 1e999: no JSON number is infinite
    return [parsed, value]


def _nested(path: list[str], value: Any) -> dict:
    doc: Any = value
    for part in reversed(path):
        doc = {part: doc}
    return doc


def _merged(a: dict, b: dict) -> dict:
    """Two containment documents as one (``{"c": {"r": 1}}`` and ``{"c": {"t": 2}}`` give
    ``{"c": {"r": 1, "t": 2}}``): a row contains the merge exactly when it contains both."""
    out = dict(a)
    for key, value in b.items():
        if isinstance(out.get(key), dict) and isinstance(value, dict):
            out[key] = _merged(out[key], value)
        elif key in out and out[key] != value:
            return {}  # one field, two values: nothing can hold both (an empty match)
        else:
            out[key] = value
    return out


def documents(terms: Terms) -> list[dict]:
    """The containment documents a row must hold one of: each pair's candidates, combined
    (``account=42 region=eu`` gives two, ``account`` as 42 or as "42")."""
    docs: list[dict] = [{}]
    for path, value in terms.pairs:
        docs = [_merged(doc, _nested(path, candidate)) for doc in docs for candidate in _candidates(value)]
    return [doc for doc in docs if doc]


class _NotEqual(Lookup):
    """``lhs <> rhs``, spelled as the partial indexes' predicates are (Django's exclude() of a
    nullable column adds an ``IS NOT NULL`` the planner cannot match to the predicate)."""

    lookup_name = "wq_ne"

    def as_sql(self, compiler, connection):
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        return f"{lhs} <> {rhs}", [*lhs_params, *rhs_params]


def non_empty(column: str) -> _NotEqual:
    """``column <> '{}'``: the predicate of a partial GIN index over the non-empty documents."""
    return _NotEqual(F(column), Value({}, output_field=JSONField()))


def json_pairs(column: str, terms: Terms, *, partial: bool = True) -> Q:
    """Rows whose ``column`` holds every pair of ``terms``: one containment per combination
    of candidates, ORed, each arm one index scan (``partial``: the column's index holds the
    non-empty documents only, so each arm says so, for the planner to use it)."""
    match = Q(pk__in=[])
    for doc in documents(terms):
        arm = Q(**{f"{column}__contains": doc})
        match |= (Q(non_empty(column)) & arm) if partial else arm
    return match


def recent_errors(queryset: QuerySet, failures: QuerySet, column: str, text: str) -> QuerySet:
    """The rows among ``failures`` (newest first, an index's order) whose ``column`` holds
    ``text`` (any case), looking at the newest :data:`RECENT_FAILURES` of them only.

    Those are read once, through the failures' index, and searched here; the page's own query
    then takes the matches by primary key (as a subquery, the planner may instead run the
    text match over the whole table and join)."""
    if not text:
        return queryset.none()
    needle = text.casefold()
    newest = failures.values_list("pk", column)[:RECENT_FAILURES]
    return queryset.filter(pk__in=[pk for pk, value in newest if value and needle in value.casefold()])


def help_text(json_label: str, example: str) -> str:
    return (
        f"{example}; {json_label} by field=value (e.g. account=42; several must all hold); "
        f"error:text in the last {RECENT_FAILURES:,} failures."
    )
