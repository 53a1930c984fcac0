"""tests.settings plus a handler for test.wire (see tests/workqueue/wire/apps.py), for runworker subprocesses."""

from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "tests.workqueue.wire.apps.WireTestConfig"]
