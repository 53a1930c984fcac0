"""Who is calling: an environment key or a control-plane API key, told apart by prefix.

The SDK sends both kinds as ``Authorization: Bearer <key>``; ``X-Api-Key`` is accepted too.
A request costs one SHA-256 and one indexed probe on the stored hash, which is then compared
in constant time. Keys never reach a log or an error message.

- wrong kind of key for the endpoint, unknown or revoked key, no key → 401;
- the right kind of key for another (or no) environment → 404, never 403;
- an API key limited to environments that were all deleted → 401: a key's scope never
  widens by itself (site-wide is a flag set only when a key is created as such).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db import DEFAULT_DB_ALIAS

from workqueue import store
from workqueue.wire import keys
from workqueue.wire.errors import EnvironmentNotFound, Unauthenticated

ENVIRONMENT = "environment"
API = "api"
_MAX_KEY_LENGTH = 200


@dataclass(frozen=True, slots=True)
class Caller:
    """An authenticated caller and the environment the path names."""

    kind: str  # "environment" or "api"
    environment_id: str
    environment_kind: str


def presented_keys(request) -> list[str]:
    """The tokens the request carries: the Bearer token, then X-Api-Key."""
    found = []
    header = request.META.get("HTTP_AUTHORIZATION", "")
    scheme, _, token = header.strip().partition(" ")
    if scheme.lower() == "bearer" and token.strip():
        found.append(token.strip())
    api_key = request.META.get("HTTP_X_API_KEY", "").strip()
    if api_key:
        found.append(api_key)
    return found


def authenticate(request, environment_id: str, accepts: tuple[str, ...], *, using: str = DEFAULT_DB_ALIAS) -> Caller:
    """Resolve the request's key for ``environment_id``; raise Unauthenticated or EnvironmentNotFound."""
    presented = presented_keys(request)
    if not presented:
        raise Unauthenticated(
            f"no key: send the {_describe(accepts)} as 'Authorization: Bearer <key>' (or 'X-Api-Key: <key>')"
        )
    token = next((t for t in presented if keys.kind_of(t) in accepts), None)
    if token is None:
        kinds = {kind for t in presented if (kind := keys.kind_of(t)) is not None}
        if kinds:
            raise Unauthenticated(f"this endpoint takes the {_describe(accepts)}, not the {_describe(tuple(kinds))}")
        raise Unauthenticated(f"the key is not a workqueue key; this endpoint takes the {_describe(accepts)}")
    if len(token) > _MAX_KEY_LENGTH or not token.isascii():
        raise Unauthenticated("the key is malformed")
    digest = keys.digest(token)
    if keys.kind_of(token) == ENVIRONMENT:
        rows = store.wire_auth_environment_key(digest=digest, using=using)
        if not rows or not keys.matches(token, rows[0][2]):
            raise Unauthenticated("unknown environment key (it may have been rotated)")
        env_id, env_kind, _hash = rows[0]
        if env_id != environment_id:
            raise EnvironmentNotFound(environment_id)
        return Caller(ENVIRONMENT, env_id, env_kind)
    rows = store.wire_auth_api_key(digest=digest, environment_id=environment_id, using=using)
    if not rows or not keys.matches(token, rows[0][0]) or rows[0][1]:
        raise Unauthenticated("unknown or revoked API key")
    _hash, _revoked, env_id, env_kind, usable = rows[0]
    if not usable:
        raise Unauthenticated(
            "this API key was limited to environments that no longer exist, so it acts on no environment; "
            "create a new key (manage.py apikeys create) and revoke this one"
        )
    if env_id is None:
        raise EnvironmentNotFound(environment_id)
    return Caller(API, env_id, env_kind)


def _describe(kinds: tuple[str, ...]) -> str:
    names = {ENVIRONMENT: "environment key (wqenv_…)", API: "API key (wqkey_…)"}
    return " or ".join(names[k] for k in kinds if k in names)
