"""The MCP tasks' Redis: the record that makes an execution a task, and the one read of it.

A task is an execution an MCP client asked for as a task (`api.mcp.tasks`). Its record
(`task:{<execution id>}`, a hash) holds what the execution does not: the SHA-256 of the
task id's secret part (so the id itself is stored nowhere), the owner the task answers to,
and the tool it was called as. The record shares the execution's hash tag, so `read` takes
the record, the snapshot and the last event in one round trip (one pipeline, one slot).

The record is kept the retention time (`MAJORDOMUS_RETAIN_SECONDS`) past its last read: a
finished execution's own keys expire the retention time after it ended, so the record
outlives it slightly and a read then finds no snapshot (the task is gone, as its execution
is). A task that nobody reads for the whole retention time while its execution still runs
is forgotten; the execution goes on.

Each owner's tasks are also listed (`owner_tasks`, newest kept `OWNER_TASKS_KEPT`), by
execution id only: that index is written before the record, in a step of its own (the two
live in different slots on a Redis Cluster), so a process killed between the two leaves
at worst a listed execution with no task, which the listing skips.

This module stores and reads; it decides nothing about owners, secrets or statuses.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.connect import RedisClient
from majordomus.store.stored_format import EVENT_ENTRY

_ENVELOPE = EVENT_ENTRY.encode()
"""An event's field in its stream entry, as Redis answers it (`stored_format.EVENT_ENTRY`)."""


@dataclass(frozen=True)
class TaskRecord:
    """What makes an execution a task: who may see it, and how its id is checked."""

    secret_hash: str
    owner: str
    tool: str
    created_ms: int


@dataclass(frozen=True)
class TaskRead:
    """One read of a task: its record, its execution's snapshot and last stored event,
    each None when absent (never created, or forgotten past the retention)."""

    record: TaskRecord | None
    snapshot: dict[bytes, bytes] | None
    last_event: bytes | None


def _record_of(raw: dict[bytes, bytes]) -> TaskRecord | None:
    if not raw or b"secret" not in raw:
        return None
    return TaskRecord(
        secret_hash=raw[b"secret"].decode(),
        owner=raw.get(b"owner", b"").decode(),
        tool=raw.get(b"tool", b"").decode(),
        created_ms=int(raw.get(b"created_ms", b"0")),
    )


OWNER_TASKS_KEPT = 1000
"""The newest tasks an owner's listing keeps; older ones stay readable by their id."""


class TaskStore(StoreBase):
    """Every Redis command the MCP tasks send."""

    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._put = self.script("put_expiring.lua")

    @property
    def keep_ms(self) -> int:
        return int(self.settings.retain_seconds * 1000)

    async def create(self, execution_id: str, record: TaskRecord) -> None:
        """Record that `execution_id` backs a task (written before the task is answered, so
        a `tasks/get` of its id on any replica finds it)."""
        key = self.keys.task(execution_id)
        listed = self.keys.owner_tasks(record.owner)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.zadd(listed, {execution_id: record.created_ms})
            pipe.zremrangebyrank(listed, 0, -OWNER_TASKS_KEPT - 1)
            pipe.pexpire(listed, self.keep_ms)
            await pipe.execute()
        await self._put(
            keys=[key],
            args=[
                self.keep_ms,
                "secret",
                record.secret_hash,
                "owner",
                record.owner,
                "tool",
                record.tool,
                "created_ms",
                record.created_ms,
            ],
        )

    async def owned(self, owner: str, count: int) -> list[str]:
        """The execution ids of `owner`'s newest `count` tasks, newest first."""
        raw = await self.redis.zrevrange(self.keys.owner_tasks(owner), 0, count - 1)
        return [r.decode() for r in raw]

    async def read(self, execution_id: str) -> TaskRead:
        """The task of `execution_id`, its snapshot and its last event, in one round trip;
        the record's keeping is renewed by the same step."""
        return (await self.read_many([execution_id]))[0]

    async def read_many(self, execution_ids: Sequence[str]) -> list[TaskRead]:
        """`read` for many tasks in one round trip (a subscription's first look)."""
        if not execution_ids:
            return []
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                pipe.hgetall(k.task(execution_id))
                pipe.hgetall(k.snapshot(execution_id))
                pipe.xrevrange(k.events(execution_id), "+", "-", count=1)
                pipe.pexpire(k.task(execution_id), self.keep_ms)
            raw = await pipe.execute()
        reads: list[TaskRead] = []
        for i in range(0, len(raw), 4):
            record, snapshot, last, _ = raw[i : i + 4]
            envelope = last[0][1].get(_ENVELOPE) if last else None
            reads.append(TaskRead(_record_of(record), snapshot or None, envelope))
        return reads

    async def snapshot_and_last_event(
        self, execution_id: str
    ) -> tuple[dict[bytes, bytes] | None, bytes | None]:
        """An execution's snapshot and last stored event, in one round trip: a later attempt
        of a task's retry chain, which has no record of its own."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(k.snapshot(execution_id))
            pipe.xrevrange(k.events(execution_id), "+", "-", count=1)
            snapshot, last = await pipe.execute()
        return snapshot or None, last[0][1].get(_ENVELOPE) if last else None
