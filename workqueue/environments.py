"""Create environments and API keys, and rotate their keys (the key is returned once)."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from workqueue.exceptions import InvalidInput
from workqueue.models import ApiKey, Environment
from workqueue.wire import keys


def create_environment(name: str, kind: str) -> tuple[Environment, str]:
    """Create an environment; return it and its key (shown once, stored hashed)."""
    if kind not in Environment.Kind.values:
        raise InvalidInput(f"kind must be one of {', '.join(Environment.Kind.values)}, not {kind!r}")
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InvalidInput("name must be a non-empty string of at most 200 characters")
    if Environment.objects.filter(name=name).exists():
        raise InvalidInput(f"an environment named {name!r} already exists")
    key = keys.mint(keys.ENVIRONMENT_KEY_PREFIX)
    env = Environment.objects.create(name=name, kind=kind, key_hash=keys.digest(key), key_hint=keys.hint(key))
    env.refresh_from_db(fields=["id", "created_at"])
    return env, key


def find_environment(ref: str) -> Environment:
    """Look an environment up by id or name."""
    env = Environment.objects.filter(pk=ref).first() or Environment.objects.filter(name=ref).first()
    if env is None:
        raise InvalidInput(f"no environment with id or name {ref!r} (list them in the admin)")
    return env


@transaction.atomic
def rotate_environment_key(env: Environment) -> str:
    """Give the environment a new key; the old one stops working at once."""
    key = keys.mint(keys.ENVIRONMENT_KEY_PREFIX)
    env.key_hash, env.key_hint, env.key_rotated_at = keys.digest(key), keys.hint(key), timezone.now()
    env.save(update_fields=["key_hash", "key_hint", "key_rotated_at"])
    return key


@transaction.atomic
def create_api_key(name: str, environments=(), *, site_wide: bool | None = None) -> tuple[ApiKey, str]:
    """Create a control-plane API key; return it and the key (shown once).

    ``environments`` (ids, names or Environment rows) limits the key to those environments
    (404 elsewhere, like an environment key). ``site_wide=True`` makes it valid for every
    environment; left out, a key given no environments is site-wide. Site-wide is decided
    here, once: a scoped key whose environments are later all deleted acts on none (401).
    """
    if not isinstance(name, str) or not name.strip() or len(name) > 200:
        raise InvalidInput("name must be a non-empty string of at most 200 characters")
    if ApiKey.objects.filter(name=name).exists():
        raise InvalidInput(f"an API key named {name!r} already exists")
    scope = [e if isinstance(e, Environment) else find_environment(e) for e in environments]
    if site_wide is None:
        site_wide = not scope
    if site_wide and scope:
        raise InvalidInput("a site-wide key is valid for every environment: give environments or site-wide, not both")
    if not site_wide and not scope:
        raise InvalidInput(
            "a key limited to no environment could do nothing: give its environments, or make it site-wide"
        )
    key = keys.mint(keys.API_KEY_PREFIX)
    api_key = ApiKey.objects.create(name=name, key_hash=keys.digest(key), key_hint=keys.hint(key), site_wide=site_wide)
    api_key.environments.set(scope)
    return api_key, key
