"""Environment keys and control-plane API keys: minted once, stored as hashes only.

The two kinds carry distinct prefixes so one Bearer token tells which it is before any
lookup; a request costs one hash and one indexed probe, compared in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

ENVIRONMENT_KEY_PREFIX = "wqenv_"
API_KEY_PREFIX = "wqkey_"


def mint(prefix: str) -> str:
    return prefix + secrets.token_urlsafe(32)


def digest(key: str) -> str:
    # Keys are 256 random bits, so a fast hash is enough; a slow KDF would only cost latency.
    return hashlib.sha256(key.encode("utf-8", "surrogatepass")).hexdigest()


def hint(key: str) -> str:
    return key[: len(ENVIRONMENT_KEY_PREFIX) + 4]


def matches(key: str, stored_digest: str) -> bool:
    return hmac.compare_digest(digest(key), stored_digest)


def kind_of(key: str) -> str | None:
    """'environment', 'api' or None, from the token's prefix."""
    if key.startswith(ENVIRONMENT_KEY_PREFIX):
        return "environment"
    if key.startswith(API_KEY_PREFIX):
        return "api"
    return None
