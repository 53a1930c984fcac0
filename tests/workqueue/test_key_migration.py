"""Migration 0008 keeps every existing API key's meaning (issue 25, item 1): a key with no
environment rows was site-wide and stays so, by its new flag; a scoped key stays scoped."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = ("workqueue", "0007_queue_controls")
AFTER = ("workqueue", "0008_apikey_site_wide")


def migrate(target):
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate([target])
    return executor.loader.project_state([target]).apps


@pytest.fixture
def back_to_the_latest_migrations():
    """The tests after this one need every migration applied, not only those up to AFTER."""
    yield
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(executor.loader.graph.leaf_nodes())


def test_keys_with_no_environment_rows_become_site_wide_and_scoped_keys_stay_scoped(back_to_the_latest_migrations):
    old = migrate(BEFORE)
    try:
        Environment = old.get_model("workqueue", "Environment")
        ApiKey = old.get_model("workqueue", "ApiKey")
        edge = Environment.objects.create(id="env_edge", name="edge", kind="self_hosted", key_hash="h1", key_hint="x")
        ApiKey.objects.create(name="everywhere", key_hash="k1", key_hint="x")
        ApiKey.objects.create(name="edge-only", key_hash="k2", key_hint="x").environments.set([edge])
    finally:
        new = migrate(AFTER)
    keys = {k.name: k for k in new.get_model("workqueue", "ApiKey").objects.all()}
    assert keys["everywhere"].site_wide is True
    assert keys["edge-only"].site_wide is False
    assert [e.name for e in keys["edge-only"].environments.all()] == ["edge"]
