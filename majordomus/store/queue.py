"""The queue as majordomus uses it: taking work, and the concurrency slots.

The queue is one sorted set of execution ids, scored by when each is due (epoch ms), which
the start (`create.lua`) adds to and a worker takes from. Taking is one atomic script
(`take.lua`) that polls, takes and starts a batch of executions at once, answering what
the worker needs to run each (its capability and worker-only input), so nothing is read
back and no job record is kept beside the execution: the snapshot is the job. This module
also answers the reads of a worker's poll loop and keeps the cluster-wide concurrency
slots of capabilities with a `max_concurrency`. It does not run executions; `workers/`
does.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.clock import now_stamp
from majordomus.store.connect import RedisClient

RUN_EXECUTION = "run_execution"
"""The name of the one arq function a majordomus worker registers (arq wants one)."""

TAKE_KEPT_SECONDS = 24 * 3600
"""How long a worker's last take is kept for answering it again (`take.lua`): longer than
any outage a worker waits through. The worker sends a take whose answer was lost again as
soon as Redis answers, however long that took, and the sweeper may meanwhile have failed
what it started (its lease lapsed), which the answer then leaves out; a key kept only a
lease or two would, after a longer outage, leave them `running` on a worker that renewed
its lease and knows nothing of them. One key per worker, replaced by each take that
started something, deleted when the worker is forgotten."""


class Taken(NamedTuple):
    """An execution a worker took and started: what it needs to run it."""

    execution_id: str
    capability: str
    secret: bytes | None
    """Its worker-only input (the input with secrets), None if it had none."""
    sequence: int
    """The sequence of its `execution.started`."""


class Take(NamedTuple):
    """What one take answered."""

    taken: list[Taken]
    next_due_ms: float | None
    """When the queue's first entry is due (epoch ms), after the take; None when empty."""
    lapsed: bool = False
    """The worker's lease had lapsed: nothing was taken (beat, then take again)."""


class QueueStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._release = self.script("release_slot.lua")
        self._take = self.script("take.lua")

    async def take(self, worker: str, count: int, token: str) -> Take:
        """Take up to `count` due executions off the queue and start them on `worker`, in
        one trip (`take.lua`). `token` (from `next_token`) makes the call safe to send
        again: a take whose answer was lost, sent with the same token, answers the
        executions its first send started, so pass the same token until a take answers."""
        keys = self.keys
        lease_ms = int(self.settings.lease_seconds * 1000)
        answer = await self._take(
            keys=[
                keys.queue,
                keys.queued,
                keys.running,
                keys.feed,
                keys.worker_running(worker),
                keys.lease(worker),
                keys.worker_take(worker),
                keys.delayed,
            ],
            args=[
                count,
                worker,
                now_stamp()[0],
                self.settings.feed_max_events,
                lease_ms,
                keys.prefix,
                token,
                TAKE_KEPT_SECONDS * 1000,
            ],
        )
        if answer in (b"lapsed", "lapsed"):
            return Take([], None, lapsed=True)
        head, rest = answer[0], answer[1:]
        taken = [
            Taken(
                _text(rest[i]),
                _text(rest[i + 1]),
                rest[i + 2] or None,
                int(rest[i + 3]),
            )
            for i in range(0, len(rest), 4)
        ]
        return Take(taken, float(head) if head else None)

    async def queue_length(self, queue: str) -> int:
        """How many jobs the queue holds, due or deferred, running or not."""
        return int(await self.redis.zcard(queue))

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
            args=[execution_id, limit, self.keys.wake_channel, self.keys.prefix],
        )
        return int(moved)

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


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
