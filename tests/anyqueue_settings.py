"""tests.settings plus a django.tasks backend whose QUEUES is [] (Django's "any queue name").

For the runworker processes of tests/operations/tasks/test_any_queue.py: their operations app
registers the backend's queue family (``anywhere.`` + anything) at start-up, as a site's would.
"""

from tests.settings import *  # noqa: F403
from tests.settings import TASKS

ANYWHERE = {
    "BACKEND": "operations.tasks.backend.OperationsBackend",
    "QUEUES": [],
    "OPTIONS": {"QUEUE_PREFIX": "anywhere.", "MAX_ATTEMPTS": 1},
}
TASKS = {**TASKS, "anywhere": ANYWHERE}
