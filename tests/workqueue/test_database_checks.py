"""PostgreSQL only, said clearly: a site on another database, or on a PostgreSQL older than 13,
hears it from ``manage.py check`` (and from ``migrate`` before any migration runs), not from a
syntax error in migration 0001."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing

import pytest
from django.db import connection

from tests.conftest import ROOT
from workqueue import checks


def _manage(*args: str, sqlite_path) -> subprocess.CompletedProcess:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "tests.sqlite_settings", "SQLITE_PATH": str(sqlite_path)}
    return subprocess.run(
        [sys.executable, str(ROOT / "manage.py"), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120
    )


def test_check_on_sqlite_names_the_alias_its_engine_and_what_is_required(tmp_path):
    done = _manage("check", sqlite_path=tmp_path / "site.db")
    assert done.returncode != 0
    assert "workqueue.E003" in done.stderr, done.stderr
    assert "DATABASES['default'] uses django.db.backends.sqlite3; PostgreSQL ≥ 13 required" in done.stderr, done.stderr


def test_migrate_on_sqlite_is_refused_before_any_migration_runs(tmp_path):
    db = tmp_path / "site.db"
    done = _manage("migrate", "--noinput", sqlite_path=db)
    assert done.returncode != 0
    assert "workqueue.E003" in done.stderr and "CREATE FUNCTION" not in done.stderr, done.stderr
    with closing(sqlite3.connect(db)) as site:
        tables = site.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    assert tables == []  # not even django_migrations: nothing ran


@pytest.mark.django_db
def test_the_server_this_suite_runs_on_passes_and_an_older_one_is_refused(monkeypatch):
    assert checks.check_database_engine() == []
    assert checks.check_database_version(databases=["default"]) == []
    monkeypatch.setattr(connection, "pg_version", 120017, raising=False)  # what a 12.17 server reports
    (error,) = checks.check_database_version(databases=["default"])
    assert error.id == "workqueue.E004"
    assert error.msg == (
        "DATABASES['default'] is PostgreSQL 12.17; PostgreSQL ≥ 13 required by workqueue and operations."
    )
    assert checks.check_database_version(databases=None) == []  # `check` without --database: no connection
