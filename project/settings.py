"""Settings for the demo project that hosts `workqueue` and `operations`.

Read from the environment with django-environ: DATABASE_URL, DEBUG, SECRET_KEY,
ALLOWED_HOSTS, and the HTTPS settings below. `make run` / `make test` set DATABASE_URL for you
(scripts/devdb.py). DEBUG is on unless set off; with DEBUG off, SECRET_KEY must be set.
"""

import importlib.util
from pathlib import Path

import environ
from django.core.exceptions import ImproperlyConfigured

BASE_DIR = Path(__file__).resolve().parent.parent

env = environ.Env(
    DEBUG=(bool, True),
    ALLOWED_HOSTS=(list, ["localhost", "127.0.0.1", "[::1]", "testserver"]),
)

DEBUG = env("DEBUG")
# A public, development-only default: anyone who knows it can forge sessions and signed values,
# so it is used only with DEBUG on.
DEVELOPMENT_SECRET_KEY = "django-insecure-dev-only-do-not-use-in-production"
SECRET_KEY = env("SECRET_KEY", default="") or (DEVELOPMENT_SECRET_KEY if DEBUG else "")
if not DEBUG and SECRET_KEY in ("", DEVELOPMENT_SECRET_KEY):
    raise ImproperlyConfigured(
        "DEBUG is off but SECRET_KEY is not set (or is the public development key): set the SECRET_KEY "
        "environment variable to a long random secret, e.g. the output of "
        "python -c 'import secrets; print(secrets.token_urlsafe(50))', or set DEBUG=1 for development."
    )
ALLOWED_HOSTS = env("ALLOWED_HOSTS")

# HTTPS, for a site served over TLS (all off by default so `make run` works on plain HTTP;
# `manage.py check --deploy` names any a production site still lacks).
SECURE_SSL_REDIRECT = env.bool("SECURE_SSL_REDIRECT", default=False)
SECURE_HSTS_SECONDS = env.int("SECURE_HSTS_SECONDS", default=0)
SESSION_COOKIE_SECURE = env.bool("SESSION_COOKIE_SECURE", default=False)
CSRF_COOKIE_SECURE = env.bool("CSRF_COOKIE_SECURE", default=False)
if env("SECURE_PROXY_SSL_HEADER", default=""):  # e.g. "HTTP_X_FORWARDED_PROTO" behind a TLS proxy
    SECURE_PROXY_SSL_HEADER = (env("SECURE_PROXY_SSL_HEADER"), "https")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "workqueue",
    "operations",
    "project.demo.apps.DemoConfig",
]
if importlib.util.find_spec("django_extensions") is not None:  # a dev dependency (requirements/dev.txt) only
    INSTALLED_APPS.append("django_extensions")
# `manage.py shell_plus` (django-extensions): the models of every app, plus the apps' public API
# for poking at the queue (WorkItem.objects.enqueue(...), operations.start(...), testing.drain()).
SHELL_PLUS_IMPORTS = [
    "import operations",
    "from workqueue import handlers, testing, controls",
    "from workqueue import LeaseLost, Permanent, Retry",
    "from workqueue.conf import wq_settings",
    "from operations.conf import ops_settings",
]
# Django 5.2 gets the task framework from the django-tasks backport (Django 6 ships it).
if importlib.util.find_spec("django.tasks") is None and importlib.util.find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "project.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        # The demo's own pages (templates/ beside project/: the landing page, admin/base_site.html,
        # 404.html, 500.html) come first; the apps ship theirs inside their packages (APP_DIRS).
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "project.wsgi.application"
ASGI_APPLICATION = "project.asgi.application"

DATABASES = {"default": env.db("DATABASE_URL", default="postgres://postgres@127.0.0.1:5432/workqueue")}
# Keep connections between requests: opening one costs milliseconds (a new server backend),
# more than serving a wire call, and prepared statements live with the connection.
DATABASES["default"]["CONN_MAX_AGE"] = env.int("CONN_MAX_AGE", default=60)
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
# Tests run several suites side by side on one server; let each name its own test database.
if env("TEST_DATABASE_NAME", default=""):
    DATABASES["default"]["TEST"] = {"NAME": env("TEST_DATABASE_NAME")}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = True
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".data" / "static"

LOGIN_URL = "admin:login"


def _not_a_wire_call(record) -> bool:
    """The demo's own self-hosted poller calls the wire API every second: keep it out of the log."""
    return "/work/" not in record.getMessage()


LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"},
        "server": {"()": "django.utils.log.ServerFormatter", "format": "[{server_time}] {message}", "style": "{"},
    },
    "filters": {"no_wire_calls": {"()": "django.utils.log.CallbackFilter", "callback": _not_a_wire_call}},
    "handlers": {
        "console": {"class": "logging.StreamHandler", "formatter": "plain"},
        "server": {"class": "logging.StreamHandler", "formatter": "server", "filters": ["no_wire_calls"]},
    },
    "loggers": {
        "django.server": {"handlers": ["server"], "level": "INFO", "propagate": False},
        "workqueue": {"handlers": ["console"], "level": env("WORKQUEUE_LOG_LEVEL", default="INFO")},
        "operations": {"handlers": ["console"], "level": env("WORKQUEUE_LOG_LEVEL", default="INFO")},
        # Django logs every task's start and end at INFO; the demo runs hundreds a minute.
        "django.tasks": {"level": "WARNING"},
    },
}

# The queue: every setting has a documented default (workqueue/conf.py); these are the demo's.
WORKQUEUE = {
    "QUEUES": {
        "default": {},
        "demo.noop": {"lease": 30},
        "demo.cpu": {"lease": 60},
        "demo.hang": {"max_attempts": 1},
        "demo.sleep": {"lease": 30, "stall": None},
        "demo.fail": {"max_attempts": 3, "retry_delay": 2, "retry_backoff": 2.0},
        "demo.capped": {"max_running": 2},
        "demo.latency": {"lease": 30},
        "demo.async_sleep": {"lease": 30},
        "demo.async_io": {"lease": 30},
        # Served to self-hosted workers over the HTTP pull API (docs: README, "Self-hosted workers").
        "tool_exec": {"over_wire": True, "lease": 60},
    },
    # Periodic work (README, "Periodic work"): every runworker fires these, each slot once.
    # Watch them at /admin/workqueue/schedule/.
    "SCHEDULES": {
        "demo-heartbeat": {"every": 10, "queue": "demo.noop", "metadata": {"from": "schedule"}},
        "demo-minutely-export": {
            "cron": "* * * * *",
            "operation": "demo.export",
            "request": {"units": 3, "records_per_unit": 500, "seconds_per_unit": 1.0},
        },
        "demo-add-task": {"cron": "*/2 * * * *", "task": "project.demo.tasks.add", "args": [2, 3]},
    },
}

# Long-running operations: every setting has a documented default (operations/conf.py).
OPERATIONS = {
    "RETRY_DELAY": 3,  # the demo's flaky kind should visibly retry within seconds
    "PROGRESS_INTERVAL": 1,
}

# Django's task framework (django.tasks on Django 6; the django-tasks backport on 5.2), run by
# our queue: every @task is stored as an operation and run by `manage.py runworker`.
TASKS = {
    "default": {
        "BACKEND": "operations.tasks.backend.OperationsBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RETRY_DELAY": 2},
    }
}
