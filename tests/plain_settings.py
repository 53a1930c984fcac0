"""A site's settings as a Django project would have them, for the console-output tests.

Not the demo's: no LOGGING, DEBUG off, only the apps that run work. runworker, recover and reap
started with these must still tell their operator what they do (tests/workqueue/test_console.py).
"""

import os

import environ

DEBUG = False
SECRET_KEY = os.environ.get("SECRET_KEY", "plain-settings-test-key-not-a-real-one-0123456789abcdef")
ALLOWED_HOSTS = ["localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "workqueue",
    "operations",
    "tests.testapp.apps.TestAppConfig",
]
DATABASES = {"default": environ.Env().db("DATABASE_URL")}
DATABASES["default"]["CONN_MAX_AGE"] = 0
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
# The one test queue these tests fail items on retries at once, as in tests/settings.py.
WORKQUEUE = {"QUEUES": {"test.fail": {"max_attempts": 3, "retry_delay": 0, "retry_backoff": 1}}}
