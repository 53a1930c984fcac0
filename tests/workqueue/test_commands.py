"""Operator commands as an operator runs them: `environments`, `enqueue`, `check`, migrations."""

from __future__ import annotations

import json
import re
import subprocess
from io import StringIO

import pytest
from django.core.management import call_command

from tests.conftest import statements_run
from workqueue.models import Environment, WorkItem
from workqueue.testing import EnvironmentFactory
from workqueue.wire import keys

pytestmark = pytest.mark.django_db(transaction=True)


def run_all(spawn_command, *commands: list[str], env: dict | None = None) -> list[subprocess.CompletedProcess]:
    """Run several manage.py commands at once (they are independent); return them in order."""
    procs = [spawn_command(*args, env=env) for args in commands]
    results = []
    for args, proc in zip(commands, procs, strict=True):
        out, err = proc.communicate(timeout=180)
        results.append(subprocess.CompletedProcess(args, proc.returncode, out, err))
    return results


def test_environments_create_prints_the_id_and_key_once_and_stores_only_a_hash(run_command):
    text = run_command("environments", "create", "builders", "--kind", "self_hosted")
    assert text.returncode == 0, text.stderr
    env = Environment.objects.get(name="builders")
    key = re.search(r"key: (\S+)", text.stdout).group(1)
    assert env.id.startswith("env_") and env.id in text.stdout
    assert key.startswith(keys.ENVIRONMENT_KEY_PREFIX) and text.stdout.count(key) == 1
    assert env.kind == "self_hosted" and keys.matches(key, env.key_hash) and key not in env.key_hash

    as_json = run_command("environments", "create", "cloudy", "--kind", "cloud", "--json")
    assert as_json.returncode == 0, as_json.stderr
    data = json.loads(as_json.stdout)
    cloudy = Environment.objects.get(name="cloudy")
    assert data == {"id": cloudy.id, "name": "cloudy", "kind": "cloud", "key": data["key"]}
    assert keys.matches(data["key"], cloudy.key_hash)

    listing = run_command("environments", "list")
    assert env.id in listing.stdout and cloudy.id in listing.stdout
    assert key not in listing.stdout and data["key"] not in listing.stdout


def test_environments_rotate_key_changes_the_stored_hash(run_command):
    created = json.loads(run_command("environments", "create", "e", "--kind", "self_hosted", "--json").stdout)
    before = Environment.objects.get(pk=created["id"])
    rotated = run_command("environments", "rotate-key", "e", "--json")
    assert rotated.returncode == 0, rotated.stderr
    new_key = json.loads(rotated.stdout)["key"]
    after = Environment.objects.get(pk=created["id"])
    assert after.key_hash != before.key_hash and after.key_rotated_at is not None
    assert keys.matches(new_key, after.key_hash) and not keys.matches(created["key"], after.key_hash)
    by_id = run_command("environments", "rotate-key", created["id"])
    assert by_id.returncode == 0 and Environment.objects.get(pk=created["id"]).key_hash != after.key_hash


def test_enqueue_prints_the_work_id_and_takes_every_option(run_command):
    env = EnvironmentFactory(name="e", kind="cloud")
    plain, full = (
        run_command("enqueue", "test.noop", "k1"),
        run_command(
            "enqueue",
            "test.noop",
            "k2",
            "--environment",
            "e",
            "--priority",
            "7",
            "--delay",
            "60",
            "--metadata",
            "a=1",
            "--metadata",
            "b=x=y",
            "--json",
        ),
    )
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip() == WorkItem.objects.get(key="k1").public_id
    assert full.returncode == 0, full.stderr
    item = WorkItem.objects.get(key="k2")
    assert json.loads(full.stdout) == {"id": item.public_id, "created": True, "state": "queued"}
    assert (item.environment_id, item.priority, item.metadata) == (env.id, 7, {"a": "1", "b": "x=y"})
    assert WorkItem.objects.filter(key="k2").scheduled().exists()
    again = run_command("enqueue", "test.noop", "k2", "--json")
    assert json.loads(again.stdout)["created"] is False and json.loads(again.stdout)["id"] == item.public_id


def test_enqueue_count_makes_n_items_in_one_statement():
    out = StringIO()
    with statements_run() as texts:
        call_command("enqueue", "test.noop", "batch", "--count", "25", "--json", stdout=out)
    assert json.loads(out.getvalue()) == {"enqueued": 25, "created": 25}
    inserts = [sql for sql in texts if "INSERT INTO work_items" in sql]
    assert len(inserts) == 1
    assert sorted(WorkItem.objects.values_list("key", flat=True)) == sorted(f"batch-{n}" for n in range(1, 26))


BAD = [
    (["enqueue", "test.noop", "k", "--environment", "env_nope"], "env_nope"),
    (["enqueue", "test.noop", "k", "--metadata", "novalue"], "'novalue'"),
    (["enqueue", "test.noop", "k", "--metadata", "=v"], "'=v'"),
    (["enqueue", "bad queue!", "k"], "'bad queue!'"),
    (["enqueue", "test.noop", "k", "--count", "3", "--metadata", "bad"], "'bad'"),
    (["environments", "rotate-key", "nope"], "'nope'"),
]


def test_bad_arguments_get_a_one_line_error_exit_code_2_and_write_nothing(spawn_command):
    EnvironmentFactory(name="taken", kind="cloud")
    commands = [args for args, _ in BAD] + [["environments", "create", "taken", "--kind", "cloud"]]
    names = [value for _, value in BAD] + ["'taken'"]
    for args, value, done in zip(commands, names, run_all(spawn_command, *commands), strict=True):
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("CommandError: "), (args, done.stderr)
        assert value in lines[0], (args, lines[0])
        assert done.stdout == ""
    assert not WorkItem.objects.exists()
    assert Environment.objects.count() == 1


def test_malformed_numbers_are_refused_by_the_parser_with_exit_code_2(spawn_command):
    commands = [
        ["enqueue", "test.noop", "k", "--count", "abc"],
        ["enqueue", "test.noop", "k", "--priority", "high"],
        ["enqueue", "test.noop", "k", "--delay", "-5"],
        ["enqueue", "test.noop", "k", "--count", "0"],
        ["enqueue", "test.noop", "k", "--count", "-2"],
        ["environments", "create", "x", "--kind", "moon"],
    ]
    for args, done in zip(commands, run_all(spawn_command, *commands), strict=True):
        assert done.returncode == 2, (args, done.stderr)
        assert "error: argument" in done.stderr.strip().splitlines()[-1]
    assert not WorkItem.objects.exists() and not Environment.objects.exists()


def test_check_is_clean_and_migrations_are_committed(spawn_command):
    project = {"DJANGO_SETTINGS_MODULE": "project.settings"}
    commands = [
        ["check", "--fail-level", "WARNING"],
        ["makemigrations", "--check", "--dry-run"],
    ]
    results = run_all(spawn_command, *commands) + run_all(spawn_command, *commands, env=project)
    for done in results:
        assert done.returncode == 0, (done.args, done.stdout, done.stderr)
    assert "System check identified no issues" in results[0].stdout
    assert "No changes detected" in results[1].stdout
