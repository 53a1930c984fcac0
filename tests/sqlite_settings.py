"""A site whose database is SQLite: workqueue's checks must refuse it before any migration runs
(tests/workqueue/test_database_checks.py). The only place the suite names SQLite."""

import os

DEBUG = False
SECRET_KEY = "sqlite-settings-test-key-not-a-real-one-0123456789abcdef"
INSTALLED_APPS = ["django.contrib.auth", "django.contrib.contenttypes", "workqueue", "operations"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["SQLITE_PATH"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
