"""Identities: execution ids (`x-<UTC stamp>-<8 hex>`) and event ids (`<execution>#<seq>`).

The random suffix, not the timestamp, makes two ids of the same second differ, so ids are
unique across every process without coordination.
"""

from __future__ import annotations

import re
import secrets
import time

from majordomus.errors import invalid_input

EXECUTION_ID = re.compile(r"^x-\d{8}T\d{6}Z-[0-9a-f]{8}$")
PROTOCOL_VERSION = "1"


def new_execution_id(now: float | None = None) -> str:
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    return f"x-{stamp}-{secrets.token_hex(4)}"


def is_execution_id(value: object) -> bool:
    return isinstance(value, str) and EXECUTION_ID.match(value) is not None


def require_execution_id(value: object) -> str:
    """The id itself, or `invalid_input` before anything is looked up."""
    if not is_execution_id(value):
        raise invalid_input(
            f"{value!r} is not an execution id",
            "an execution id looks like x-20260908T010203Z-0a1b2c3d",
        )
    return str(value)


def event_id(execution_id: str, sequence: int) -> str:
    return f"{execution_id}#{sequence}"
