"""The documentation site's generated references (scripts/docs_reference.py, run by `make docs`):
every setting and every management command of both apps is in them, each setting with the
description its source gives it, and they are built without a database."""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.management import get_commands, load_command_class

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def reference():
    spec = importlib.util.spec_from_file_location("docs_reference", ROOT / "scripts" / "docs_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_setting_key_is_in_the_settings_reference_with_its_default(reference):
    from operations import conf as ops_conf
    from workqueue import conf as wq_conf

    text = reference.settings_markdown()
    keys = reference.all_setting_keys()
    assert keys["WORKQUEUE"] == list(wq_conf.DEFAULTS) and keys["OPERATIONS"] == list(ops_conf.DEFAULTS)
    assert set(keys["QUEUES"]) == wq_conf.QUEUE_KEYS
    for section, names in keys.items():
        for name in names:
            assert f"| `{name}` |" in text, f"{section} {name} is missing from the settings reference"
    assert "| `LEASE` | `120` | seconds |" in text  # OPERATIONS' default, from DEFAULTS
    assert "| `lease` | `60` | seconds |" in text  # the per-queue default, from QueueSettings
    assert "| `RETENTION` | `2592000` (30 days) | seconds |" in text


def test_every_setting_has_a_description_in_its_source(reference):
    # The comment next to a key of DEFAULTS (or the #: comment above a QueueSettings field) is
    # its description: a new key without one fails here, naming it.
    from workqueue import conf as wq_conf

    assert reference.missing_descriptions() == []
    descriptions = reference.dict_descriptions(wq_conf)
    assert descriptions["POLL_INTERVAL"] == "Backstop seconds between claim passes when no NOTIFY arrives"
    assert descriptions["CONNECTION_LOSS_REFUNDS"].startswith("A run whose database connection died")


def test_every_command_of_both_apps_is_in_the_commands_reference_with_its_options(reference):
    text = reference.commands_markdown()
    ours = {name: app for name, app in get_commands().items() if app in ("workqueue", "operations")}
    assert {"runworker", "recover", "reap", "enqueue", "schedules", "queues"} <= set(ours)
    assert reference.app_commands() == dict(sorted(ours.items()))
    for name, app in ours.items():
        assert f"## `{name}`" in text, f"{name} is missing from the commands reference"
        parser = load_command_class(app, name).create_parser("manage.py", name)
        for action in parser._actions:
            for option in action.option_strings:
                if option.startswith("--") and action.dest not in reference._common_dests():
                    assert f"`{option}" in text, f"{name} {option} is missing from the commands reference"
    assert "### `schedules add`" in text and "`--cron EXPR`" in text  # subcommands and their options


def test_the_script_writes_both_files_with_the_demo_settings_and_no_database(tmp_path):
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="project.settings")
    env["DATABASE_URL"] = "postgres://nobody@127.0.0.1:9/no_such_database"  # nothing listens there
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "docs_reference.py"), "--out", str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert "runworker" in (tmp_path / "commands.md").read_text()
    assert "WATCH_MAX_THREADS" in (tmp_path / "settings.md").read_text()


# -- the hand-written pages name only what exists -----------------------------------------------

WRITTEN = [
    p
    for p in sorted((ROOT / "docs").rglob("*.md"))
    if p.parent.name != "reference" or p.name in ("http.md",)
    if p.name not in ("performance.md", "promises.md", "self-hosted-workers.md")  # older pages: tests of their own
]
SETTING = re.compile(r"""\b(WORKQUEUE|OPERATIONS)\[["']([A-Z_]+)["']\]""")
COMMAND_LINE = re.compile(
    r"(?:manage\.py |^\s*|`)(runworker|recover|reap|enqueue|schedules|queues|environments|apikeys)\b([^`\n]*)"
)


def _spans(text: str) -> list[str]:
    """Inline code spans and lines of fenced code blocks."""
    spans, fenced = [], False
    for line in text.splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif fenced:
            spans.append(line)
        else:
            spans += re.findall(r"`([^`]+)`", line)
    return spans


def test_the_pages_name_only_settings_that_exist():
    from operations import conf as ops_conf
    from workqueue import conf as wq_conf

    known = {"WORKQUEUE": set(wq_conf.DEFAULTS), "OPERATIONS": set(ops_conf.DEFAULTS)}
    assert len(WRITTEN) >= 12
    for page in WRITTEN:
        for setting, key in SETTING.findall(page.read_text()):
            assert key in known[setting], f"{page.relative_to(ROOT)} names {setting}[{key!r}], which does not exist"


def _options_of(parser) -> set[str]:
    """Every option of the parser and of its subcommands."""
    found = {o for a in parser._actions for o in a.option_strings}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found |= _options_of(sub)
    return found


def test_the_pages_give_commands_only_options_they_take():
    commands = {name: app for name, app in get_commands().items() if app in ("workqueue", "operations")}
    options = {
        name: _options_of(load_command_class(app, name).create_parser("manage.py", name))
        for name, app in commands.items()
    }
    seen = 0
    for page in WRITTEN:
        for span in _spans(page.read_text()):
            for name, rest in COMMAND_LINE.findall(span):
                for option in re.findall(r"(?<![\w-])(--[a-z][a-z-]*)", rest.split("#")[0]):
                    seen += 1
                    assert option in options[name], f"{page.relative_to(ROOT)}: {name} has no option {option}"
    assert seen > 20


def test_the_tutorial_shows_the_readmes_blocks_and_its_python_compiles():
    # The README's "Add it to your site" blocks are the ones make test-embed applies to a fresh
    # startproject site; the tutorial shows them verbatim, so it applies what was checked.
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Add it to your site\n", 1)[1].split("\n### ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, re.S | re.M)
    site_blocks = [b for b in blocks if b.startswith(("# settings.py\n", "# urls.py\n"))]
    assert len(site_blocks) == 2
    tutorial = (ROOT / "docs" / "tutorial.md").read_text()
    for block in site_blocks:
        assert f"```python\n{block}```" in tutorial, block.splitlines()[0]
    for page in WRITTEN:
        for code in re.findall(r"^```python\n(.*?)^```", page.read_text(), re.S | re.M):
            compile(code, str(page), "exec")


def test_every_table_of_both_apps_is_in_the_data_model_with_its_columns(reference):
    from django.apps import apps

    text = reference.data_model_markdown()
    models = [
        m
        for label in ("workqueue", "operations")
        for m in apps.get_app_config(label).get_models()
        if m._meta.managed and not m._meta.proxy
    ]
    assert {"work_items", "work_schedules", "operations"} <= {m._meta.db_table for m in models}
    for model in models:
        assert f"    {model._meta.db_table} {{" in text, model._meta.db_table
        for field in model._meta.concrete_fields:
            assert f" {field.column}" in text, (model._meta.db_table, field.column)
    assert "work_items }o--o| work_environments" in text  # a foreign key, nullable
