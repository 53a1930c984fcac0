"""Operation ids: minted (``op_…``, opaque and time-ordered) or the caller's own, checked."""

from __future__ import annotations

import secrets
import time

from operations.exceptions import InvalidRequest

MAX_ID_LENGTH = 200


def new_id() -> str:
    """A fresh opaque, time-ordered operation id (``op_…``)."""
    return f"op_{time.time_ns() // 1000:014x}{secrets.token_hex(8)}"


def check_id(op_id: object) -> str:
    """Return ``op_id`` if it can be an operation id, else raise InvalidRequest."""
    if not isinstance(op_id, str) or not op_id or len(op_id) > MAX_ID_LENGTH or "\x00" in op_id:
        raise InvalidRequest(
            f"an operation id must be a non-empty string of at most {MAX_ID_LENGTH} characters, without NUL bytes"
        )
    return op_id
