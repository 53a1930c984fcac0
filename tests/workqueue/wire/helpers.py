"""Helpers shared by the wire tests."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

from workqueue.models import WorkItem


@dataclass
class Env:
    id: str
    key: str
    kind: str


def enqueue(env: Env | str | None, n: int = 1, *, queue: str = "test.wire", prefix: str = "sess", **kwargs):
    """Enqueue ``n`` items with keys ``<prefix>_<i>``; return their Items."""
    env_id = env.id if isinstance(env, Env) else env
    return [WorkItem.objects.enqueue(queue, f"{prefix}_{i}", environment=env_id, **kwargs)[0] for i in range(n)]


def snapshot() -> list[tuple]:
    """Every work item and poller row, to prove a refused request changed nothing."""
    with connection.cursor() as cur:
        cur.execute("SELECT * FROM work_items ORDER BY id")
        items = cur.fetchall()
        cur.execute("SELECT * FROM work_pollers ORDER BY id")
        return items + cur.fetchall()


def row(public_id: str) -> WorkItem:
    return WorkItem.objects.get(public_id=public_id)


def by_key(key: str) -> WorkItem:
    """The newest item for ``key`` (its public id may have rotated)."""
    return WorkItem.objects.filter(key=key).latest("id")
