"""Deprecated import path: the backend lives in ``operations.tasks.backend`` now.

``TASKS = {"default": {"BACKEND": "operations.task_backend.OperationsBackend"}}`` keeps working;
new settings should name ``operations.tasks.backend.OperationsBackend``. This module will go in
a later release.
"""

from operations.tasks.backend import *  # noqa: F403
from operations.tasks.backend import OperationsBackend

__all__ = ["OperationsBackend"]
