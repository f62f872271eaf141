"""arq's queue as majordomus uses it: the job format, taking a job, finishing it, the slots.

Every execution runs as one arq job, `run_execution(id, capability)`, serialized with
msgspec's MessagePack (never pickle) and carrying no input. This module builds the job
`create` enqueues, marks a job in progress the way arq does (`take_job`, one atomic script,
which also answers the capability, so the worker never reads the job back), clears a job a
worker is done with, answers the reads of a worker's poll loop, and keeps the cluster-wide
concurrency slots of capabilities with a `max_concurrency`. The keys are `Keys`', under the
deployment's prefix, never arq's constants. It does not run jobs; `workers/` does.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import NamedTuple

import msgspec
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


class Taken(NamedTuple):
    """A job a worker took: its queue score (when it was due, epoch ms) and the capability
    its execution runs, read from the snapshot by the take itself."""

    score: int
    capability: str


WAITING = "waiting"
"""What `take_job` answers for a job held back by its capability's `max_concurrency`."""


class QueueStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._release = self.script("release_slot.lua")
        self._requeue = self.script("requeue_taken.lua")
        self._take_job = self.script("take_job.lua")

    async def take_job(self, queue: str, job_id: str, in_progress_ms: int) -> Taken | str | None:
        """Take a queued job off the queue for this worker, as arq marks one in progress, in
        one trip: answers its queue score and capability; `WAITING` when its capability's
        slots are all held (it moved to the waiting list); None when there is nothing to
        take (gone, not due, or no longer queued, in which case its stale entry was
        dropped)."""
        keys = self.keys
        taken = await self._take_job(
            keys=[queue, keys.in_progress(job_id), keys.snapshot(job_id), keys.taken],
            args=[
                job_id,
                in_progress_ms,
                int(self.settings.lease_seconds * 1000),
                self.keys.prefix,
            ],
        )
        if taken is None:
            return None
        if taken in (WAITING, WAITING.encode()):
            return WAITING
        score, capability = taken
        if isinstance(capability, bytes):
            capability = capability.decode()
        return Taken(int(float(score)), capability)

    async def finish_job(self, job_id: str) -> None:
        """Clear what is left of a job its worker is done with (its in-progress mark and
        arq's job), as arq's `finish_job` does, in one command. An execution's terminal
        event clears them itself (`append.lua`); this is for a run that did not end it (the
        worker torn down before or during it, or Redis forgot it), whose end is the
        sweeper's, found by the execution, not by these keys (nothing reads the job back).
        Its queue entry, if any, is not touched: `take_job` took it off, so an entry there
        now was put back for another worker (`requeue_taken`)."""
        await self.redis.delete(self.keys.in_progress(job_id), self.keys.job(job_id))

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

    async def release_slot(self, capability: str, execution_id: str, limit: int) -> int:
        """Free a slot (the holder's terminal event does this itself; this is for a holder
        that ends without one) and move the oldest waiting executions into the queue while
        slots are free; with `execution_id` '' it only promotes. Answers how many moved."""
        moved = await self._release(
            keys=[
                self.keys.concurrency(capability),
                self.keys.waiting(capability),
                self.keys.queue,
            ],
            args=[execution_id, limit, self.keys.wake_channel],
        )
        return int(moved)

    async def requeue_taken(self, older_than_ms: int, batch: int = 1000) -> int:
        """Put back into the queue jobs taken longer ago than `older_than_ms` and never
        claimed (their worker died in between); answers how many went back."""
        back = await self._requeue(
            keys=[self.keys.taken, self.keys.queue],
            args=[older_than_ms, batch, self.keys.prefix, self.keys.wake_channel],
        )
        return int(back)

    async def waiting_count(self, capability: str) -> int:
        """How many executions wait for one of the capability's slots."""
        return int(await self.redis.zcard(self.keys.waiting(capability)))

    async def renew_slots(self, held: Sequence[tuple[str, str]]) -> None:
        if not held:
            return
        _, expiry = self._slot_expiry()
        async with self.redis.pipeline(transaction=False) as pipe:
            for capability, execution_id in held:
                pipe.zadd(self.keys.concurrency(capability), {execution_id: expiry}, xx=True)
            await pipe.execute()
