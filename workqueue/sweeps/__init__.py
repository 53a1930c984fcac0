"""Run a sweep (``recover`` or ``reap``) once: under an advisory lock, recorded, summarized.

Safe from several hosts at once: a transaction-scoped ``pg_try_advisory_xact_lock`` lets one sweep of
a kind run at a time; the others report that they skipped. ``dry_run`` runs every step in a
transaction that is rolled back, so the counts are real and nothing changes.
"""

from __future__ import annotations

import logging
import socket
import time
from dataclasses import dataclass, field

from django.db import DEFAULT_DB_ALIAS, transaction
from django.utils import timezone

from workqueue import hooks, store
from workqueue.sweeps import reap as reaper
from workqueue.sweeps import recover as recovery

log = logging.getLogger("workqueue.sweeps")

BUILTIN = {"recover": recovery.recover, "reap": reaper.reap}


@dataclass
class SweepResult:
    name: str
    skipped: bool = False
    dry_run: bool = False
    counts: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0

    def summary(self) -> str:
        if self.skipped:
            return f"{self.name}: skipped, another {self.name} is running"
        parts = " ".join(f"{k}={v}" for k, v in self.counts.items())
        return f"{self.name}{' (dry run)' if self.dry_run else ''}: {parts} in {self.seconds:.2f}s"

    def as_dict(self) -> dict:
        return {
            "sweep": self.name,
            "skipped": self.skipped,
            "dry_run": self.dry_run,
            "counts": self.counts,
            "seconds": round(self.seconds, 3),
        }


class _Rollback(Exception):
    pass


def _steps(name: str, using: str, dry_run: bool) -> dict[str, int]:
    counts = dict(BUILTIN[name](using=using))
    for hook_name, fn in hooks.sweeps(name).items():
        for key, value in fn(using=using, dry_run=dry_run).items():
            counts[f"{hook_name}_{key}"] = value
    return counts


def run_sweep(name: str, *, dry_run: bool = False, using: str = DEFAULT_DB_ALIAS) -> SweepResult:
    """Run the ``recover`` or ``reap`` sweep once and return what it did.

    The whole sweep is one transaction holding a transaction-scoped advisory lock, so it is
    safe behind a transaction-mode pooler (PgBouncer) and the lock can never outlive the run.
    """
    from workqueue.models import MaintenanceRun

    if name not in BUILTIN:
        raise ValueError(f"unknown sweep {name!r}: use 'recover' or 'reap'")
    lock = f"workqueue.sweep.{name}"
    result = SweepResult(name, dry_run=dry_run)
    started = time.monotonic()
    began_at = timezone.now()
    try:
        with transaction.atomic(using=using):
            if not store.maintenance_try_lock(name=lock, using=using)[0][0]:
                result.skipped = True
                return result
            run = None
            if not dry_run:
                run = MaintenanceRun.objects.using(using).create(
                    name=name, host=socket.gethostname(), started_at=began_at
                )
            result.counts = _steps(name, using, dry_run)
            result.seconds = time.monotonic() - started
            if dry_run:
                raise _Rollback
            assert run is not None  # recorded above, since this is not a dry run
            run.finished_at, run.counts = timezone.now(), result.counts
            run.save(update_fields=["finished_at", "counts"])
    except _Rollback:
        pass
    except Exception as exc:
        try:
            MaintenanceRun.objects.using(using).create(
                name=name,
                host=socket.gethostname(),
                started_at=began_at,
                finished_at=timezone.now(),
                ok=False,
                error=f"{exc.__class__.__name__}: {exc}"[:2000],
            )
        except Exception:
            log.exception("could not record the failed %s run", name)
        raise
    return result
