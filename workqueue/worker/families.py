"""Queue families: the queues ``runworker`` serves by name prefix, found as their items arrive.

A family is every queue named ``prefix`` + anything, served by one handler
(``handlers.register_family``): the django.tasks backend registers one for a backend whose
``QUEUES`` is ``[]`` (Django's "any queue name"), so a task on a queue no setting names still
runs. ``runworker`` with no ``--queue`` serves every registered family; ``--queue 'tasks.*'``
serves one.

How the worker finds a family's queues: it adds each queue name it comes to know to its
ordinary claim, which stays exactly the per-queue claim (``item_claim``: one ordered walk of
``work_items_claim_idx`` per queue name, LIMIT n). It learns them two ways:

- a NOTIFY naming a queue under a prefix (every enqueue sends one at commit): served from the
  next pass, with no statement;
- ``queue_names_in_families`` at start and then once per poll interval: a loose index scan of
  the distinct queue names with ready or held items, for the items enqueued while no worker
  listened and for a lapsed lease left by a worker that died.

Why not a prefix claim (``queue LIKE 'tasks.%'`` in the claim)? The claim's walk is
ordered per queue by (priority, run_after, id) under its queue-name equality; a prefix
range would turn each claim into a scan and sort of every ready row of the family (and
LIKE uses a btree only under the C collation), and every claim, not one look per poll
interval, would pay for it. A name found stays served for the worker's life; a queue with
nothing in it costs its claim two empty index probes.
"""

from __future__ import annotations

import threading
import time

from workqueue import store


class Families:
    """The queue families one worker serves, and the names under them it has come to know."""

    def __init__(self, prefixes: list[str], *, using: str, every: float):
        self.prefixes = tuple(sorted(set(prefixes)))
        self.using = using
        self.every = every  # seconds between looks in the table (the worker's poll interval)
        self._heard: set[str] = set()
        self._lock = threading.Lock()
        self._next_look = 0.0  # time.monotonic() of the next look; 0: at the first pass

    def __bool__(self) -> bool:
        return bool(self.prefixes)

    def covers(self, queue: str) -> bool:
        return queue.startswith(self.prefixes) if self.prefixes else False

    def heard(self, queue: str) -> None:
        """A NOTIFY named ``queue`` (the listener's thread): served from the next pass."""
        if self.covers(queue):
            with self._lock:
                self._heard.add(queue)

    def new_names(self, served: set[str]) -> list[str]:
        """The family queues not in ``served`` that a NOTIFY named or, when a look is due, the
        table holds work for (the claim loop's thread, before each pass)."""
        with self._lock:
            found, self._heard = self._heard, set()
        now = time.monotonic()
        if self.prefixes and now >= self._next_look:
            self._next_look = now + self.every
            rows = store.queue_names_in_families(prefixes=list(self.prefixes), using=self.using)
            found.update(name for (name,) in rows)
        return sorted(found - served)


def split_patterns(names: list[str]) -> tuple[list[str], list[str]]:
    """``--queue`` values as (queue names, family prefixes): ``'tasks.*'`` is the family ``tasks.``."""
    queues = [name for name in names if not name.endswith("*")]
    prefixes = [name[:-1] for name in names if name.endswith("*")]
    return queues, prefixes
