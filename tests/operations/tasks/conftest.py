"""Helpers for the django.tasks backend tests: run the task queues inline, or wait for a runworker.

``run_inline(*results)`` is a worker's turn done by hand, in this thread: it claims task
items and runs the real operations handler on them (``tests.operations.conftest.run_next``)
until every result has finished, so signals and log records land in this process. Tests that
want a real ``manage.py runworker`` use the ``start_worker`` fixtures and ``wait_finished``.
"""

from __future__ import annotations

import pytest

from tests.conftest import wait_until

TASK_QUEUES = ("tasks.default", "tasks.emails", "tasks.queue_1")


def finished(result) -> bool:
    result.refresh()
    return result.is_finished


def wait_finished(*results, timeout: float = 60.0) -> None:
    """Wait until every result has finished (run by some worker)."""
    for result in results:
        wait_until(lambda r=result: finished(r), timeout=timeout, message=f"{result.id} to finish")


def run_inline(*results, timeout: float = 60.0) -> None:
    """Run the task queues here, the way a worker runs them, until every result has finished."""
    from tests.operations.conftest import run_next

    def turn():
        for queue in TASK_QUEUES:
            if run_next("inline", queue) is not None:
                return False
        return all(finished(r) for r in results)

    wait_until(turn, timeout=timeout, message="the tasks to finish inline")


@pytest.fixture(autouse=True)
def _release_the_flusher():
    """Inline runs start the progress flusher thread here: let it go quickly after each test."""
    from operations import reporter as reporter_mod

    reporter_mod.flusher.linger = 0.2
    yield
    if reporter_mod.flusher._thread is not None:
        reporter_mod.flusher._thread.join(5)
    reporter_mod.flusher.linger = 5.0
