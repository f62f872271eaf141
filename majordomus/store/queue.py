"""arq's queue as majordomus uses it: the job format, its keys, taking a job, the slots.

Every execution runs as one arq job, `run_execution(id, capability)`, serialized with
msgspec's MessagePack (never pickle) and carrying no input. This module is the only one
that knows arq's key names and job format: it builds the job `create` enqueues, marks a
job in progress the way arq does (`take_job`, one atomic script), answers the reads of a
worker's poll loop, and keeps the cluster-wide concurrency slots of capabilities with a
`max_concurrency`. It does not run jobs; `workers/` does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

import msgspec
from arq.constants import in_progress_key_prefix, job_key_prefix
from arq.jobs import serialize_job

from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.clock import now_stamp
from majordomus.store.connect import RedisClient

RUN_EXECUTION = "run_execution"
"""The one arq function every execution runs as (its arguments: id and capability)."""


def job_payload(execution_id: str, capability: str) -> bytes:
    """arq's job, serialized with msgspec (never pickle); it carries no input at all."""
    return serialize_job(
        RUN_EXECUTION,
        (execution_id, capability),
        {},
        None,
        int(time.time() * 1000),
        serializer=msgspec.msgpack.encode,
    )


def arq_job_key(execution_id: str) -> str:
    """The key arq keeps an execution's job under (its job id is the execution id)."""
    return job_key_prefix + execution_id


class QueueStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._acquire = self.script("acquire_slot.lua")
        self._take_job = self.script("take_job.lua")

    async def take_job(
        self, queue: str, job_id: str, now_ms: int, in_progress_ms: int
    ) -> int | None:
        """Mark an arq job in progress for this worker, as arq does before running it, in one
        trip; answers its queue score, or None when it runs elsewhere, is gone or not due."""
        score = await self._take_job(
            keys=[in_progress_key_prefix + job_id, queue], args=[job_id, now_ms, in_progress_ms]
        )
        return None if score is None else int(float(score))

    async def queue_length(self, queue: str) -> int:
        """How many jobs the queue holds, due or deferred, running or not."""
        return int(await self.redis.zcard(queue))

    async def queue_head_ms(self, queue: str) -> float | None:
        """When the queue's first job is due (epoch ms, its score), or None when it is empty."""
        head = await self.redis.zrange(queue, 0, 0, withscores=True)
        return float(head[0][1]) if head else None

    # -- concurrency slots --------------------------------------------------------------

    def _slot_expiry(self) -> tuple[int, int]:
        """(now, when a slot taken or renewed now runs out), epoch ms: a lease's length on."""
        _, ms = now_stamp()
        return ms, ms + int(self.settings.lease_seconds * 1000)

    async def acquire_slot(self, capability: str, execution_id: str, limit: int) -> bool:
        ms, expiry = self._slot_expiry()
        got = await self._acquire(
            keys=[self.keys.concurrency(capability)], args=[execution_id, ms, expiry, limit]
        )
        return bool(got)

    async def release_slot(self, capability: str, execution_id: str) -> None:
        await self.redis.zrem(self.keys.concurrency(capability), execution_id)

    async def renew_slots(self, held: Sequence[tuple[str, str]]) -> None:
        if not held:
            return
        _, expiry = self._slot_expiry()
        async with self.redis.pipeline(transaction=False) as pipe:
            for capability, execution_id in held:
                pipe.zadd(self.keys.concurrency(capability), {execution_id: expiry}, xx=True)
            await pipe.execute()
