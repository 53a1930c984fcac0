"""The benchmark's ``indexes`` section drops three of work_items' indexes for a measurement and
puts them back exactly as they were, even when the measurement fails."""

import pytest
from django.db import connection

from bench import rawsql
from bench.report import Options, Report
from bench.sections import indexes

pytestmark = pytest.mark.django_db(transaction=True)

DROPPED = {name for name, _ in indexes.DROPPABLE}


def _work_items_indexes() -> dict[str, str]:
    with connection.cursor() as cur:
        cur.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = 'work_items'")
        return dict(cur.fetchall())


def _unique_constraints() -> set[str]:
    with connection.cursor() as cur:
        cur.execute("SELECT conname FROM pg_constraint WHERE conrelid = 'work_items'::regclass AND contype = 'u'")
        return {row[0] for row in cur.fetchall()}


def test_drop_then_restore_leaves_the_indexes_and_the_unique_constraint_as_they_were():
    before, constraints = _work_items_indexes(), _unique_constraints()
    assert set(before) >= DROPPED and "work_items_public_id_uniq" in constraints
    try:
        indexes._drop()
        assert not DROPPED & set(_work_items_indexes())
    finally:
        indexes._restore()
    assert _work_items_indexes() == before
    assert _unique_constraints() == constraints


def test_the_section_puts_the_indexes_back_when_the_drain_fails(monkeypatch):
    before = _work_items_indexes()

    calls = []

    def drain(*args, **kwargs):
        calls.append(set(_work_items_indexes()))
        if len(calls) == 2:  # the case without the three indexes
            raise RuntimeError("drain failed")
        return 0, 1.0, indexes.cpu.Cpu(0.0, 0.0)

    monkeypatch.setattr(rawsql, "drain", drain)

    class Db:
        conninfo = ""

    with pytest.raises(RuntimeError, match="drain failed"):
        indexes.bench_indexes(Options(runs=1, drain_items=10), Db(), Report())
    assert calls[0] >= DROPPED and not DROPPED & calls[1]  # shipped first, then without the three
    assert _work_items_indexes() == before
