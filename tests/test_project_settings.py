"""The demo project's settings: no public SECRET_KEY outside development (issue 9, item 15)."""

from __future__ import annotations

import re
import secrets

import pytest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def manage(run_command, subprocess_env):
    """Run manage.py with the demo settings and no SECRET_KEY unless given."""
    subprocess_env.pop("SECRET_KEY", None)

    def run(*args: str, **env: str):
        return run_command(*args, env={"DJANGO_SETTINGS_MODULE": "project.settings", **env})

    return run


def test_without_debug_and_without_a_secret_key_the_site_refuses_to_start(manage):
    result = manage("check", DEBUG="0")
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and "SECRET_KEY" in result.stderr
    assert "DEBUG" in result.stderr  # says what to set: a key, or DEBUG for development


def test_the_public_development_key_is_refused_without_debug(manage):
    result = manage("check", DEBUG="0", SECRET_KEY="django-insecure-dev-only-do-not-use-in-production")
    assert result.returncode != 0 and "SECRET_KEY" in result.stderr


def test_debug_keeps_the_development_default(manage):
    result = manage("check", DEBUG="1")
    assert result.returncode == 0, result.stderr


# What only a deployment's HTTPS set-up can decide (HSTS, redirects, secure cookies).
HTTPS_CHECKS = {"security.W004", "security.W005", "security.W008", "security.W012", "security.W016", "security.W021"}


def deploy_check_ids(result) -> set[str]:
    return set(re.findall(r"\((security\.W\d+)\)", result.stdout + result.stderr))


def test_check_deploy_names_only_https_settings_and_they_can_be_set(manage):
    key = secrets.token_urlsafe(50)
    plain = manage("check", "--deploy", DEBUG="0", SECRET_KEY=key)
    assert plain.returncode == 0, plain.stderr
    assert deploy_check_ids(plain) <= HTTPS_CHECKS, plain.stderr
    https = manage(
        "check",
        "--deploy",
        DEBUG="0",
        SECRET_KEY=key,
        SECURE_SSL_REDIRECT="1",
        SECURE_HSTS_SECONDS="3600",
        SESSION_COOKIE_SECURE="1",
        CSRF_COOKIE_SECURE="1",
    )
    assert deploy_check_ids(https) <= {"security.W005", "security.W021"}, https.stderr  # HSTS policy choices


def test_the_test_settings_bring_their_own_key(run_command, subprocess_env):
    subprocess_env.pop("SECRET_KEY", None)
    result = run_command("check", env={"DEBUG": "0"})  # tests.settings, as the worker subprocesses use
    assert result.returncode == 0, result.stderr
