"""Workers' presence and leases, the executions each holds, and the sweeper's lock.

A worker beats every fifth of `MAJORDOMUS_LEASE_SECONDS`: it renews its lease (a key that
expires after half the lease time when beats stop) and writes its presence (a hash, and its
score in the workers' set: its last beat, epoch ms). The executions it holds are the set
`Keys.worker_running`, kept by the scripts (added by the take, `take.lua`, removed by the
terminal event, `append.lua`), so a dead worker's executions are found without reading
every execution.

A worker that stops cleanly removes its lease and presence; one that is killed leaves its
lease to run out, the sweeper (`majordomus.sweeper`) fails what it held and, once its last
beat is `PRESENCE_SECONDS` old, forgets it. The sweeper lock elects that one sweeper among
every process. This module is that storage and nothing else: when to beat, when to sweep
and what a lost execution becomes are decided above it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from redis.exceptions import WatchError

from majordomus.store.base import StoreBase

PRESENCE_SECONDS = 3600
"""How long a worker that stopped beating is still shown (`majordomus queue` marks it
silent) after its last beat: its presence hash expires then, and the sweeper removes it
from the workers' set."""

Presence = Mapping[str, str | int]
"""What a worker says of itself: id, host, pid, started_at, running, last beat, accepting."""


@dataclass(frozen=True)
class WorkerLease:
    """One worker of the workers' set, as the sweeper sees it."""

    id: str
    last_beat_ms: int
    lease_held: bool
    holds: int
    """How many executions its running set names."""


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
        """Remove a stopping worker's lease and, unless it still holds executions, its
        presence. One that does (their terminal events could not be written) stays in the
        workers' set without a lease, so the sweeper fails them rather than losing them."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.delete(k.lease(worker_id))
            pipe.scard(k.worker_running(worker_id))
            _, holds = await pipe.execute()
        if not holds:
            await self.forget_workers([worker_id])

    async def workers_present(self) -> list[tuple[str, dict[bytes, bytes], bool]]:
        """Every worker that reported itself: (id, its presence hash, whether its lease holds).

        A worker that stopped cleanly removed itself; one that was killed stays, with an
        expired lease, until the sweeper forgets it (`PRESENCE_SECONDS` after its last beat).
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

    # -- for the sweeper ------------------------------------------------------------------

    async def worker_leases(self) -> list[WorkerLease]:
        """Every worker of the workers' set: its last beat, whether its lease holds and how
        many executions it holds. Two round trips of 1 + 2 * workers commands, however many
        executions run."""
        k = self.keys
        beats = await self.redis.zrange(k.workers, 0, -1, withscores=True)
        if not beats:
            return []
        ids = [raw.decode() for raw, _ in beats]
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                pipe.exists(k.lease(worker_id))
                pipe.scard(k.worker_running(worker_id))
            raw = await pipe.execute()
        return [
            WorkerLease(worker_id, int(score), bool(raw[2 * i]), int(raw[2 * i + 1]))
            for i, (worker_id, (_, score)) in enumerate(zip(ids, beats, strict=True))
        ]

    async def held_by(self, worker_ids: Sequence[str]) -> list[list[str]]:
        """The executions each worker's running set names, in one round trip."""
        if not worker_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.smembers(self.keys.worker_running(worker_id))
            raw = await pipe.execute()
        return [sorted(m.decode() for m in members) for members in raw]

    async def let_go(self, worker_id: str, execution_ids: Sequence[str]) -> None:
        """Take executions out of a worker's running set (the terminal event does it for
        the ones it ends; this is for those that were already ended or forgotten)."""
        if execution_ids:
            await self.redis.srem(self.keys.worker_running(worker_id), *execution_ids)  # type: ignore[misc]

    async def forget_workers(self, worker_ids: Sequence[str]) -> None:
        """Remove workers' presence, lease, running set and last take, in one round trip."""
        if not worker_ids:
            return
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.delete(
                    k.worker(worker_id),
                    k.lease(worker_id),
                    k.worker_running(worker_id),
                    k.worker_take(worker_id),
                )
            pipe.zrem(k.workers, *worker_ids)
            await pipe.execute()

    async def hold_sweeper_lock(self, holder: str, ttl_ms: int, *, renew: bool = False) -> bool:
        """Take the sweeper lock for `ttl_ms` if it is free or, with `renew` (`holder` had it
        at its last try), extend it if `holder` still has it; answers whether `holder` holds
        it now. A candidate's try is one command (SET NX PX), a holder's renewal five."""
        key = self.keys.sweeper_lock
        if renew:
            # WATCH makes the check and the PEXPIRE one step: a lock that lapsed and was
            # taken by another in between is not extended.
            async with self.redis.pipeline(transaction=True) as pipe:
                try:
                    await pipe.watch(key)
                    current = await pipe.get(key)
                    if current == holder.encode():
                        pipe.multi()
                        pipe.pexpire(key, ttl_ms)
                        await pipe.execute()
                        return True
                except WatchError:
                    return False
            if current is not None:
                return False
        return bool(await self.redis.set(key, holder, nx=True, px=ttl_ms))

    async def release_sweeper_lock(self, holder: str) -> bool:
        """Give the sweeper lock up if `holder` has it (another may take it at once)."""
        key = self.keys.sweeper_lock
        async with self.redis.pipeline(transaction=True) as pipe:
            try:
                await pipe.watch(key)
                if await pipe.get(key) != holder.encode():
                    return False
                pipe.multi()
                pipe.delete(key)
                await pipe.execute()
            except WatchError:
                return False
        return True

    async def sweeper_lock_holder(self) -> str | None:
        """Who holds the sweeper lock now (for inspection and tests)."""
        raw = await self.redis.get(self.keys.sweeper_lock)
        return raw.decode() if raw is not None else None
