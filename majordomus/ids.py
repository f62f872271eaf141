"""Identities: execution ids (`x-<UTC stamp>-<8 hex>`) and event ids (`<execution>#<seq>`).

The random suffix, not the timestamp, makes two ids of the same second differ, so ids are
unique across every process without coordination.
"""

from __future__ import annotations

import os
import re
from typing import Annotated

import msgspec

from majordomus import clock
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
    stamp = clock.second_stamp(int(clock.now() if now is None else now))
    stamp = stamp[0:4] + stamp[5:7] + stamp[8:13] + stamp[14:16] + stamp[17:19] + "Z"
    suffix = _random32()
    if partition is not None and partitions > 1:
        suffix += partition - suffix % partitions
        if suffix > 0xFFFFFFFF:
            suffix -= partitions
    return f"x-{stamp}-{suffix:08x}"


RANDOM_POOL_BYTES = 4096
"""Random bytes drawn from the system at once for the ids' suffixes (1,024 ids): one
`getrandom` call where each id made one, and cheaper with the caches cold, as a start
after an idle moment runs. Cryptographic randomness, as `secrets` draws it."""

_pool = memoryview(b"")


def _random32() -> int:
    """32 random bits from the pool (refilled when spent)."""
    global _pool
    pool = _pool
    if len(pool) < 4:
        pool = memoryview(os.urandom(RANDOM_POOL_BYTES))
    _pool = pool[4:]
    return int.from_bytes(pool[:4], "big")


def _forget_pool() -> None:
    """A forked child draws its own bytes: the parent's would repeat its ids."""
    global _pool
    _pool = memoryview(b"")


os.register_at_fork(after_in_child=_forget_pool)


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
