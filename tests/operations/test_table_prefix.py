"""OPERATIONS["TABLE_PREFIX"] end to end: migrate, start, run under runworker, read over HTTP.

Everything runs in processes with ``tests.prefix_settings`` on a database of its own, since the
operations model's table name is fixed when it is imported.
"""

from __future__ import annotations

import json

import psycopg
import pytest
from django.db import connection

from tests.conftest import wait_until

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.slow,
    pytest.mark.direct_db(reason="creates and drops a database of its own, under a settings module of its own"),
]

START = """
import json, operations
from django.contrib.auth import get_user_model
user = get_user_model().objects.create_user("ada")
op = operations.start("test.ops.count", {"steps": 3, "per_step": 5}, owner=str(user.pk))
print(json.dumps({"id": op.id, "user": user.pk}))
"""

READ = """
import json
from django.contrib.auth import get_user_model
from django.test import Client
client = Client()
client.force_login(get_user_model().objects.get(username="ada"))
response = client.get("/api/operations/%s")
print(json.dumps({"status": response.status_code, "body": response.json()}))
"""


@pytest.fixture
def prefixed_db(db_url):
    name = f"{connection.settings_dict['NAME']}_prefixed"
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        cur.execute(f'CREATE DATABASE "{name}"')
    yield db_url.replace(f"/{connection.settings_dict['NAME']}", f"/{name}", 1)
    with connection.cursor() as cur:
        cur.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_a_prefixed_operations_table_serves_start_runworker_and_the_http_api(prefixed_db, run_command, start_worker):
    env = {"DATABASE_URL": prefixed_db, "DJANGO_SETTINGS_MODULE": "tests.prefix_settings"}
    migrated = run_command("migrate", "--noinput", env=env, timeout=180)
    assert migrated.returncode == 0, migrated.stderr
    with psycopg.connect(prefixed_db.replace("postgres://", "postgresql://", 1), autocommit=True) as side:
        tables = side.execute(
            "SELECT to_regclass('ddb_operations') IS NOT NULL, to_regclass('ddb_operations_watches') IS NOT NULL, "
            "to_regclass('operations') IS NULL"
        ).fetchone()
        assert tables == (True, True, True)

        started = run_command("shell", "-c", START, env=env)
        assert started.returncode == 0, started.stderr
        op = json.loads(started.stdout.strip().splitlines()[-1])
        worker = start_worker("--queue", "operations", "--worker-id", "prefixed", env=env)

        def state():
            return side.execute("SELECT state FROM ddb_operations WHERE id = %s", [op["id"]]).fetchone()[0]

        wait_until(lambda: state() == "succeeded" or not worker.alive(), timeout=60, message="the operation to run")
        assert state() == "succeeded", worker.output()[-3000:]
        item = side.execute("SELECT state, outcome FROM work_items WHERE key = %s", [op["id"]]).fetchone()
        assert item == ("stopped", "succeeded")

    read = run_command("shell", "-c", READ % op["id"], env=env)
    assert read.returncode == 0, read.stderr
    answer = json.loads(read.stdout.strip().splitlines()[-1])
    assert answer["status"] == 200, answer
    assert (answer["body"]["id"], answer["body"]["state"], answer["body"]["progress"]["count"]) == (
        op["id"],
        "succeeded",
        15,
    )
