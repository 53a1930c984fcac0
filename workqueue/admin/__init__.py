"""Admin for the work queue: the queue dashboard, work items, environments, API keys, workers, sweeps.

Read-mostly. A work item's state moves only through the queue's verbs (the "Requeue now" and
"Force stop" actions call ``WorkItem.objects.requeue_now`` / ``force_stop``); keys are minted by
``workqueue.environments`` and shown once. Every list stays cheap on a table of millions of
rows: no unbounded ``COUNT(*)`` (``EstimatedCountPaginator``), no facet counts, no ``DISTINCT``
filters, and relative times come from the database clock (``db_now`` on every row).

The pages, one module each (importing this package registers them all):

- ``base``: what they share (badges, paginator, guards, mixins, filters);
- ``items``: work items; ``dashboard``: the queue dashboard and the queue controls;
- ``keys``: environments and API keys; ``workers``: workers and sweep runs;
- ``schedules``: schedules; ``snapshot``: the dashboard's numbers.
"""

from workqueue.admin import dashboard, items, keys, schedules, workers  # noqa: F401  (registers the pages)
from workqueue.admin.base import (
    BULK_ACTION_CAP,
    MAX_ACTION_ITEMS,
    OUTCOME_TONES,
    STATE_TONES,
    EstimatedCountPaginator,
    FastListMixin,
    GuardedModelAdmin,
    ReadOnlyMixin,
    SituationFilter,
    StuckFilter,
    checks_its_own_ids,
    state_badge,
)

__all__ = [
    "BULK_ACTION_CAP",
    "MAX_ACTION_ITEMS",
    "OUTCOME_TONES",
    "STATE_TONES",
    "EstimatedCountPaginator",
    "FastListMixin",
    "GuardedModelAdmin",
    "ReadOnlyMixin",
    "SituationFilter",
    "StuckFilter",
    "checks_its_own_ids",
    "state_badge",
]
