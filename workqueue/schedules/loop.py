"""The scheduler loop every ``runworker`` runs next to its claim loop (``--no-schedules``: off).

One daemon thread on its own database connection: sync ``WORKQUEUE["SCHEDULES"]`` once, then
fire what is due (``workqueue.schedules.fire_due``) and sleep until the earliest
``next_slot``, at most the poll interval, waking early on a NOTIFY that a schedule changed.
Every worker runs one; the firing pass itself makes a slot fire once across all of them.
"""

from __future__ import annotations

import logging

from django.db import DEFAULT_DB_ALIAS

from workqueue import listener as listener_mod
from workqueue import schedules
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidSchedule
from workqueue.worker.loop import BackgroundLoop

log = logging.getLogger("workqueue.schedules.loop")

PAYLOAD = "#schedules"


class Scheduler(BackgroundLoop):
    """Fire due schedules until stopped; ``start()`` runs it in a daemon thread."""

    name = "workqueue-scheduler"
    log = log

    def __init__(self, *, using: str = DEFAULT_DB_ALIAS, poll: float | None = None, sync: bool = True):
        super().__init__(using=using)
        self.poll = poll if poll is not None else wq_settings().poll_interval
        self.synced = not sync
        self._token: int | None = None
        self.passes = 0
        self.fired = 0

    def _on_notify(self, payload: str | None) -> None:
        if payload is None or payload == PAYLOAD:
            self.wake.set()

    def start(self) -> Scheduler:
        self._token = listener_mod.shared().subscribe(wq_settings().notify_channel, self._on_notify)
        return super().start()

    def stop(self, timeout: float = 10.0) -> None:
        if self._token is not None:
            listener_mod.shared().unsubscribe(self._token)
        super().stop(timeout)

    def step(self) -> float:
        if not self.synced:
            self._sync()
        fired = schedules.fire_due(using=self.using)
        self.passes += 1
        self.fired += len(fired.fired)
        if fired.fired:
            log.info("fired %d scheduled run(s)", len(fired.fired))
        wait = schedules.seconds_until_due(using=self.using)
        # A due schedule another process holds right now: look again shortly.
        return self.poll if wait is None else min(self.poll, max(wait, 0.05))

    def _sync(self) -> None:
        try:
            result = schedules.sync_settings(using=self.using)
        except InvalidSchedule as exc:
            # A bad settings schedule: manage.py check names it; fire the rest meanwhile.
            log.error("scheduler: %s", exc)
            self.synced = True
            return
        self.synced = True
        if result.created or result.updated or result.removed:
            log.info(
                "schedules synced: %d new, %d changed, %d removed",
                len(result.created),
                len(result.updated),
                len(result.removed),
            )
