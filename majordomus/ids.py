"""Identities: execution ids (`x-<UTC stamp>-<8 hex>`) and event ids (`<execution>#<seq>`).

The random suffix, not the timestamp, makes two ids of the same second differ, so ids are
unique across every process without coordination.
"""

from __future__ import annotations

import re
import secrets
import time
from typing import Annotated

import msgspec

from majordomus.errors import invalid_input
from majordomus.schemas import PROBLEMS

EXECUTION_ID_PATTERN = r"^x-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$"
"""The shape of an execution id, as the JSON Schemas say it and the server checks it (ASCII
digits: `\\d` would admit any script's digits, which no id has and no schema would allow)."""

EXECUTION_ID = re.compile(EXECUTION_ID_PATTERN)

EXAMPLE_EXECUTION_ID = "x-20260908T010203Z-0a1b2c3d"

ExecutionId = Annotated[
    str,
    msgspec.Meta(
        pattern=EXECUTION_ID_PATTERN,
        examples=[EXAMPLE_EXECUTION_ID],
        extra_json_schema={
            PROBLEMS: {"pattern": f"is not an execution id (one looks like {EXAMPLE_EXECUTION_ID})"}
        },
    ),
]
"""An execution id where an input names one: its pattern is in every schema of that input
(route, OpenAPI, MCP tool, command), so a client learns the shape before it asks."""

PROTOCOL_VERSION = "1"


def new_execution_id(
    now: float | None = None, *, partition: int | None = None, partitions: int = 1
) -> str:
    """A fresh id; with `partition`, one whose random suffix modulo `partitions` is it (the
    partition the execution's keys live in, `majordomus.store.keys`), at no cost in
    randomness worth having: the suffix is random but for its residue."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(time.time() if now is None else now))
    suffix = secrets.randbits(32)
    if partition is not None and partitions > 1:
        suffix += partition - suffix % partitions
        if suffix > 0xFFFFFFFF:
            suffix -= partitions
    return f"x-{stamp}-{suffix:08x}"


def is_execution_id(value: object) -> bool:
    return isinstance(value, str) and EXECUTION_ID.match(value) is not None


def require_execution_id(value: object) -> str:
    """The id itself, or `invalid_input` before anything is looked up."""
    if not is_execution_id(value):
        raise invalid_input(
            f"{value!r} is not an execution id",
            f"an execution id looks like {EXAMPLE_EXECUTION_ID}",
        )
    return str(value)


def event_id(execution_id: str, sequence: int) -> str:
    return f"{execution_id}#{sequence}"
