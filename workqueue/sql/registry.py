"""The statement catalogs of the installed apps, and their expanded text as reviewed snapshots.

workqueue's catalog is here from import; another app adds its own in ``AppConfig.ready``
(``register``), so ``manage.py sqlshow`` and the snapshot test see every statement without
workqueue importing that app. A snapshot is one file per statement,
``<dir>/<app>/<name>.sql``, holding exactly what ``sqlshow NAME`` prints.
"""

from __future__ import annotations

from pathlib import Path

from workqueue.exceptions import SqlTemplateError
from workqueue.sql.loader import Catalog, Fragment, Statement

_catalogs: dict[str, Catalog] = {}


def register(catalog: Catalog) -> None:
    """Add an app's catalog (again: replaced); a statement name another app has is refused."""
    for other in _catalogs.values():
        if other.app != catalog.app and (shared := set(other.names()) & set(catalog.names())):
            raise SqlTemplateError(f"statement {min(shared)!r} is defined by both {other.app} and {catalog.app}")
    _catalogs[catalog.app] = catalog


def catalogs() -> list[Catalog]:
    """Every registered catalog, workqueue's first."""
    return sorted(_catalogs.values(), key=lambda c: (c.app != "workqueue", c.app))


def find(name: str) -> tuple[Catalog, Statement | Fragment] | None:
    """The statement called ``name`` (or, failing that, the fragment) and its catalog."""
    for catalog in catalogs():
        if name in catalog.statements:
            return catalog, catalog.statements[name]
    for catalog in catalogs():
        if name in catalog.own_fragments():
            return catalog, catalog.fragments[name]
    return None


def show(item: Statement | Fragment) -> str:
    """A statement's (or a fragment's) expanded text, under a line saying where it is written."""
    if isinstance(item, Fragment):
        head = f"-- fragment: {item.name}({', '.join(item.params)}), from {item.source.partition(':')[0]}"
        return f"{head}\n{item.text}\n"
    return f"-- {item.name}, from {item.source.partition(':')[0]} (expanded)\n{item.text};\n"


def snapshots() -> dict[Path, str]:
    """{relative path: text} of every statement's snapshot."""
    return {
        Path(catalog.app) / f"{name}.sql": show(statement)
        for catalog in catalogs()
        for name, statement in catalog.statements.items()
    }


def write_snapshots(directory: Path) -> tuple[int, int, int]:
    """Write every snapshot under ``directory`` and remove the stale ones; (written, changed, removed)."""
    wanted = snapshots()
    changed = removed = 0
    for rel, text in wanted.items():
        path = directory / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            changed += 1
            path.write_text(text)
    for catalog in catalogs():
        for path in sorted((directory / catalog.app).glob("*.sql")):
            if path.relative_to(directory) not in wanted:
                path.unlink()
                removed += 1
    return len(wanted), changed, removed
