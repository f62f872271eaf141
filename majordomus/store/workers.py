"""Workers' presence and leases: who is there, and whose executions are still held.

A worker beats every fifth of `MAJORDOMUS_LEASE_SECONDS`: it renews its lease (a key that
expires after half the lease time when beats stop) and writes its presence (a hash, kept
a day after the last beat, and its score in the workers' set). A worker that stops
cleanly removes all three; one that is killed leaves its lease to run out, and the sweep
fails what it was running. This module is that storage and nothing else: when to beat
and what to do with a lost execution are `workers/`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from majordomus.store.base import StoreBase

PRESENCE_SECONDS = 24 * 3600
"""How long a worker's presence hash outlives its last beat (a killed worker's stays)."""

Presence = Mapping[str, str | int]
"""What a worker says of itself: id, host, pid, started_at, running, last beat, accepting."""


class WorkerStore(StoreBase):
    async def beat(self, worker_id: str, presence: Presence, beat_ms: int, lease_ms: int) -> None:
        """Renew the worker's lease for `lease_ms` and write its presence, in one round trip."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.set(k.lease(worker_id), beat_ms, px=lease_ms)
            pipe.hset(k.worker(worker_id), mapping=dict(presence))
            pipe.expire(k.worker(worker_id), PRESENCE_SECONDS)
            pipe.zadd(k.workers, {worker_id: beat_ms})
            await pipe.execute()

    async def remove_worker(self, worker_id: str) -> None:
        """Remove a stopping worker's lease and presence."""
        await self.redis.delete(self.keys.lease(worker_id), self.keys.worker(worker_id))
        await self.redis.zrem(self.keys.workers, worker_id)

    async def owners(self, execution_ids: Sequence[str]) -> list[bytes | None]:
        """The worker each execution's snapshot names (None where none does), in one trip."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                pipe.hget(self.keys.snapshot(execution_id), "worker")
            return list(await pipe.execute())

    async def holds_lease(self, worker_id: str) -> bool:
        """Whether the worker beat within its lease time."""
        return bool(await self.redis.exists(self.keys.lease(worker_id)))

    async def workers_present(self) -> list[tuple[str, dict[bytes, bytes], bool]]:
        """Every worker that reported itself: (id, its presence hash, whether its lease holds).

        A worker that stopped cleanly removed itself; one that was killed stays, with an
        expired lease, until its presence hash expires.
        """
        ids = [r.decode() for r in await self.redis.zrange(self.keys.workers, 0, -1)]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.hgetall(self.keys.worker(worker_id))
                pipe.exists(self.keys.lease(worker_id))
            raw = await pipe.execute()
        return [(worker_id, raw[2 * i], bool(raw[2 * i + 1])) for i, worker_id in enumerate(ids)]

    async def workers_beating(self, since_ms: int) -> list[str]:
        """The ids of workers whose last beat is at or after `since_ms` (epoch ms)."""
        raw = await self.redis.zrangebyscore(self.keys.workers, since_ms, "+inf")
        return [r.decode() for r in raw]
