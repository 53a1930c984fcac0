"""The SQL layer: every statement named in a ``.sql`` file, expanded once at import, run by name.

``QUERIES`` is workqueue's catalog: the statements of every file in this folder, looked up by
name (``QUERIES["item_claim"]``), built from the fragments written in them and the generated
ones (``generated.py``). ``run`` and ``rowcount`` run one of them on Django's connection
(``cursor.py``); ``workqueue.store`` has one function per statement and is their only caller.
An app with statements of its own loads them with ``load_app`` on top of workqueue's fragments,
runs them with ``execute``, and adds its catalog to the registry in its ``AppConfig.ready``
(``register``), which ``manage.py sqlshow`` and the snapshot test read. The template language
is ``loader.py``'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from django.db import DEFAULT_DB_ALIAS

from workqueue.sql import generated, registry
from workqueue.sql.cursor import execute, execute_rowcount
from workqueue.sql.generated import CLAIMED_COLUMNS, ITEM_COLUMNS, column_list
from workqueue.sql.loader import Catalog, split_args
from workqueue.sql.registry import register

__all__ = [
    "CLAIMED_COLUMNS",
    "ITEM_COLUMNS",
    "QUERIES",
    "SQL_DIR",
    "Catalog",
    "column_list",
    "execute",
    "execute_rowcount",
    "load_app",
    "register",
    "rowcount",
    "run",
    "split_args",
]

SQL_DIR = Path(__file__).parent


def load_app(app: str, directory: Path, *, generated: Mapping[str, str] | None = None) -> Catalog:
    """Load the ``.sql`` files of another app's ``directory``, composing workqueue's fragments."""
    return Catalog.load(app, directory.glob("*.sql"), generated=generated, base=QUERIES)


QUERIES = Catalog.load("workqueue", SQL_DIR.glob("*.sql"), generated=generated.fragments())
registry.register(QUERIES)


def run(name: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS) -> list[tuple]:
    """Run workqueue's statement ``name`` and return its rows ([] when it returns none)."""
    return execute(QUERIES[name], params, using=using)


def rowcount(name: str, params: dict | None = None, *, using: str = DEFAULT_DB_ALIAS) -> int:
    """Run workqueue's statement ``name`` and return how many rows it touched."""
    return execute_rowcount(QUERIES[name], params, using=using)
