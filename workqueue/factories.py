"""factory-boy factories for a site's own tests: work items, schedules, environments.

Import them from ``workqueue.testing`` (which loads this module only when one is asked for)::

    from workqueue.testing import EnvironmentFactory, ScheduleFactory, WorkItemFactory

    WorkItemFactory(queue="emails")                  # queued
    WorkItemFactory(queue="emails", held=True)       # active, under a live lease
    WorkItemFactory(queue="emails", lapsed=True)     # active, its lease already lapsed
    WorkItemFactory(queue="emails", succeeded=True)  # stopped, succeeded
    WorkItemFactory(queue="emails", failed=True, error="boom")
    ScheduleFactory(queue="emails", every=60)
    env = EnvironmentFactory(); env.key               # the plain key, shown once

Every row is written the way the app writes it (the manager's enqueue, a claim of that one
item, complete and fail; ``schedules.store.add``; ``create_environment``), never by a model
save that would skip an invariant such as the lease proof or the hashed key. ``build()`` is
refused for that reason. Needs the ``testing`` extra:
``pip install "django-workqueue-operations[testing]"``.
"""

from __future__ import annotations

from typing import Any

try:
    import factory
except ImportError as exc:  # pragma: no cover - proven by a subprocess test that blocks the import
    raise ImportError(
        "workqueue.testing's factories need factory-boy: pip install 'django-workqueue-operations[testing]'"
    ) from exc

from django.db import DEFAULT_DB_ALIAS

from workqueue.models import Environment, Schedule, WorkItem

WORKER_ID = "testing.factory"
#: A lapsed item's lease: it has lapsed by the next statement (now() moves on between them).
LAPSED_LEASE = 0.000001


class _WrittenByTheApp(factory.Factory):
    """A factory whose ``create`` goes through the app's own verbs; ``build`` would not."""

    class Meta:
        abstract = True
        strategy = factory.CREATE_STRATEGY

    @classmethod
    def _build(cls, model_class, *args, **kwargs):
        raise TypeError(f"{cls.__name__} writes rows through the app's statements: use create(), not build()")


class WorkItemFactory(_WrittenByTheApp):
    """A work item, queued by default; traits ``held``, ``lapsed``, ``succeeded``, ``failed``."""

    class Meta:
        model = WorkItem

    queue = "default"
    key = factory.Sequence(lambda n: f"item-{n}")
    priority: Any = None
    delay: Any = None
    metadata: Any = None
    max_attempts: Any = None
    group: Any = None
    environment: Any = None
    state = "queued"  # queued, held, lapsed, succeeded, failed (the traits set it)
    error = "failed by WorkItemFactory"  # the error a failed item records
    using = DEFAULT_DB_ALIAS

    class Params:
        held = factory.Trait(state="held")
        lapsed = factory.Trait(state="lapsed")
        succeeded = factory.Trait(state="succeeded")
        failed = factory.Trait(state="failed")

    @classmethod
    def _create(cls, model_class, *args, state: str, error: str, using: str, **fields) -> WorkItem:
        manager = WorkItem.objects.db_manager(using)
        item, _created = manager.enqueue(fields.pop("queue"), fields.pop("key"), **fields)
        if state != "queued":
            lease = LAPSED_LEASE if state == "lapsed" else None
            held = manager.claim_one(item.id, worker_id=WORKER_ID, lease=lease)
            if held is None:
                raise ValueError(f"{item!r} could not be claimed (not queued: a live item of that key exists?)")
            if state == "succeeded":
                manager.complete(held)
            elif state == "failed":
                manager.fail(held, error, permanent=True)
            elif state not in ("held", "lapsed"):
                raise ValueError(f"unknown WorkItemFactory state {state!r}")
        return manager.get(pk=item.id)


class ScheduleFactory(_WrittenByTheApp):
    """A schedule (``schedules.store.add``): every hour by default; traits ``cron``, ``paused``.

    Give it what it runs: ``queue=`` (a work item), ``kind=`` (an operation) or ``task=``."""

    class Meta:
        model = Schedule

    name = factory.Sequence(lambda n: f"schedule-{n}")
    every: Any = 3600
    cron = ""
    enabled = True
    using = DEFAULT_DB_ALIAS

    class Params:
        paused = factory.Trait(enabled=False)
        # every day at 02:30 (needs the cron extra, cronsim)
        nightly = factory.Trait(cron="30 2 * * *", every=None)

    @classmethod
    def _create(cls, model_class, *args, using: str, **fields) -> Schedule:
        from workqueue.schedules import store

        return store.add(fields, using=using)


class EnvironmentFactory(_WrittenByTheApp):
    """An environment (``create_environment``), self-hosted by default; its plain key is
    ``.key`` on the returned row (the table keeps only its hash)."""

    class Meta:
        model = Environment

    name = factory.Sequence(lambda n: f"environment-{n}")
    kind = Environment.Kind.SELF_HOSTED

    @classmethod
    def _create(cls, model_class, *args, name: str, kind: str) -> Environment:
        from workqueue.environments import create_environment

        env, key = create_environment(name, kind)
        env.key = key  # type: ignore[attr-defined]  # shown once, as create_environment returns it
        return env
