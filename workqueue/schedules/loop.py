"""The scheduler loop every ``runworker`` runs next to its claim loop (``--no-schedules``: off).

One daemon thread on its own database connection: sync ``WORKQUEUE["SCHEDULES"]`` once, then
fire what is due (``workqueue.schedules.fire_due``) and sleep until the earliest
``next_slot``, at most the poll interval, waking early on a NOTIFY that a schedule changed.
Every worker runs one; the firing pass itself makes a slot fire once across all of them.
"""

from __future__ import annotations

import logging
import threading

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.utils import InterfaceError, OperationalError

from workqueue import listener as listener_mod
from workqueue import schedules
from workqueue.conf import wq_settings
from workqueue.exceptions import InvalidSchedule

log = logging.getLogger("workqueue.schedules.loop")

PAYLOAD = "#schedules"


class Scheduler:
    """Fire due schedules until stopped; ``start()`` runs it in a daemon thread."""

    def __init__(self, *, using: str = DEFAULT_DB_ALIAS, poll: float | None = None, sync: bool = True):
        self.using = using
        self.poll = poll if poll is not None else wq_settings().poll_interval
        self.sync = sync
        self.wake = listener_mod.Signal()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._token: int | None = None
        self.passes = 0
        self.fired = 0

    def _on_notify(self, payload: str | None) -> None:
        if payload is None or payload == PAYLOAD:
            self.wake.set()

    def start(self) -> Scheduler:
        self._token = listener_mod.shared().subscribe(wq_settings().notify_channel, self._on_notify)
        self._thread = threading.Thread(target=self._run, name="workqueue-scheduler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        self.wake.set()
        if self._token is not None:
            listener_mod.shared().unsubscribe(self._token)
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self) -> None:
        backoff = 0.1
        synced = not self.sync
        try:
            while not self._stop.is_set():
                try:
                    if not synced:
                        result = schedules.sync_settings(using=self.using)
                        synced = True
                        if result.created or result.updated or result.removed:
                            log.info(
                                "schedules synced: %d new, %d changed, %d removed",
                                len(result.created),
                                len(result.updated),
                                len(result.removed),
                            )
                    fired = schedules.fire_due(using=self.using)
                    self.passes += 1
                    self.fired += len(fired.fired)
                    if fired.fired:
                        log.info("fired %d scheduled run(s)", len(fired.fired))
                    wait = schedules.seconds_until_due(using=self.using)
                    backoff = 0.1
                except (OperationalError, InterfaceError) as exc:
                    log.warning("scheduler: database unavailable (%s); retrying in %.1fs", exc, backoff)
                    self._close()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                except InvalidSchedule as exc:
                    # A bad settings schedule: manage.py check names it; fire the rest meanwhile.
                    log.error("scheduler: %s", exc)
                    synced = True
                    continue
                except Exception:
                    log.exception("scheduler pass failed; retrying in %.1fs", backoff)
                    self._close()
                    self._stop.wait(backoff)
                    backoff = min(backoff * 2, 5.0)
                    continue
                # A due schedule another process holds right now: look again shortly.
                timeout = self.poll if wait is None else min(self.poll, max(wait, 0.05))
                self.wake.wait(timeout)
        finally:
            self._close()

    def _close(self) -> None:
        try:
            connections[self.using].close()
        except Exception:
            pass
