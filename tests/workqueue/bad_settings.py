"""tests.settings with one bad WORKQUEUE value, for `manage.py check` run as a subprocess."""

from tests.settings import *  # noqa: F403
from tests.settings import WORKQUEUE

WORKQUEUE = {**WORKQUEUE, "QUEUES": {**WORKQUEUE["QUEUES"], "broken": {"lease": -5}}}
