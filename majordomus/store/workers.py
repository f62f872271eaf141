"""Workers' presence and leases, the executions each holds, and the sweeper's lock.

A worker beats every fifth of `MAJORDOMUS_LEASE_SECONDS`: it renews its lease (a key that
expires after half the lease time when beats stop) and writes its presence (a hash, and its
score in the workers' set: its last beat, epoch ms). The executions it holds are the sets
`Partition.worker_running` (one per partition), kept by the scripts (added by the take, `take.lua`, removed by the
terminal event, `append.lua`), so a dead worker's executions are found without reading
every execution.

An operator may drain a worker (`queue.drain`): a `drain` field in its presence hash,
which the worker reads with its beat (`beat` answers it), taking no new work while it is
there; `set_drain` sets and removes it (`worker_drain.lua`: only on a worker present).

A worker that stops cleanly removes its lease and presence; one that is killed leaves its
lease to run out, the sweeper (`majordomus.sweeper`) fails what it held and, once its last
beat is `PRESENCE_SECONDS` old, forgets it. The sweeper lock elects that one sweeper among
every process. This module is that storage and nothing else: when to beat, when to sweep
and what a lost execution becomes are decided above it.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import TimeoutError as _TimeoutError

from majordomus.config import Settings
from majordomus.store.base import StoreBase
from majordomus.store.cluster import is_cluster
from majordomus.store.connect import RedisClient

PRESENCE_SECONDS = 3600
"""How long a worker that stopped beating is still shown (`majordomus queue` marks it
silent) after its last beat: its presence hash expires then, and the sweeper removes it
from the workers' set."""

Presence = Mapping[str, str | int]
"""What a worker says of itself: id, host, pid, started_at, running, last beat, accepting.
(The hash also holds `drain`, when an operator drained it: written by `set_drain` alone.)"""

DRAIN_FIELD = "drain"
"""The presence hash's field that drains its worker (its value: when it was asked)."""


@dataclass(frozen=True)
class WorkerLease:
    """One worker of the workers' set, as the sweeper sees it."""

    id: str
    last_beat_ms: int
    lease_held: bool
    holds: int
    """How many executions its running set names."""


class WorkerStore(StoreBase):
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._lock = self.script("sweeper_lock.lua")
        self._drain = self.script("worker_drain.lua")
        self._renewing: dict[int, asyncio.Future[Any]] = {}
        """A cluster's lease renewals out, by partition (`beat_partitions`)."""
        self._renewed_now: set[int] = set()
        """The partitions renewed since the last beat answered."""

    async def beat(self, worker_id: str, presence: Presence, beat_ms: int, lease_ms: int) -> bool:
        """Renew the worker's lease for `lease_ms` and write its presence, in one round trip;
        answers whether the worker is drained (an operator's `set_drain`)."""
        drained, renewed = await self.beat_partitions(worker_id, presence, beat_ms, lease_ms)
        return drained

    async def beat_partitions(
        self,
        worker_id: str,
        presence: Presence,
        beat_ms: int,
        lease_ms: int,
        renewed: Callable[[int], None] | None = None,
        patience: float = 1.0,
    ) -> tuple[bool, frozenset[int]]:
        """`beat`, answering also the partitions whose lease it renewed (`renewed` is told
        of each as it is). On one Redis that is every partition, in one round trip, or the
        call fails. On a Redis Cluster each partition's lease is renewed on its own, and the
        beat waits `patience` at most for them once its presence is written: a master that
        does not answer costs the leases of its own partitions, whose renewal goes on by
        itself (one at a time), while the worker takes from the others. A failure only when
        the presence could not be written or no lease was renewed."""
        k = self.keys
        if is_cluster(self.redis) and len(k.partitions) > 1:
            renewing = self._renewing
            for part in k.partitions:
                if part.index in renewing:
                    continue  # the last one is still out: its partition does not answer
                task = asyncio.ensure_future(self.redis.set(part.lease(worker_id), beat_ms, px=lease_ms))
                renewing[part.index] = task
                task.add_done_callback(functools.partial(self._renewal_done, part.index, renewed))
            drained = await self._presence(worker_id, presence, beat_ms)
            out = [t for t in renewing.values() if not t.done()]
            if out:
                await asyncio.wait(out, timeout=patience)
            done = frozenset(self._renewed_now)
            self._renewed_now.clear()
            if not done:
                raise _TimeoutError("no partition's lease was renewed: Redis did not answer")
            return drained, done
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in k.partitions:  # each partition's scripts read their own
                pipe.set(part.lease(worker_id), beat_ms, px=lease_ms)
            pipe.hset(k.worker(worker_id), mapping=dict(presence))
            pipe.expire(k.worker(worker_id), PRESENCE_SECONDS)
            pipe.zadd(k.workers, {worker_id: beat_ms})
            pipe.hexists(k.worker(worker_id), DRAIN_FIELD)
            answers = await pipe.execute()
        return bool(answers[-1]), frozenset(range(len(k.partitions)))

    def _renewal_done(
        self, index: int, renewed: Callable[[int], None] | None, task: asyncio.Future[Any]
    ) -> None:
        self._renewing.pop(index, None)
        if task.cancelled() or task.exception() is not None:
            return
        self._renewed_now.add(index)
        if renewed is not None:
            renewed(index)

    async def _presence(self, worker_id: str, presence: Presence, beat_ms: int) -> bool:
        """Write the worker's presence; answers whether it is drained."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hset(k.worker(worker_id), mapping=dict(presence))
            pipe.expire(k.worker(worker_id), PRESENCE_SECONDS)
            pipe.zadd(k.workers, {worker_id: beat_ms})
            pipe.hexists(k.worker(worker_id), DRAIN_FIELD)
            answers = await pipe.execute()
        return bool(answers[-1])

    async def set_drain(self, worker_id: str, drained: bool, asked_at: str) -> int | None:
        """Drain a worker (`drained`) or undrain it: None when no such worker is present,
        else whether this changed it (1) or it was so already (0)."""
        done = await self._drain(
            keys=[self.keys.worker(worker_id)], args=["1" if drained else "0", asked_at]
        )
        return None if int(done) < 0 else int(done)

    async def resume_blocking(self, worker_id: str) -> None:
        """Take back the mark `QueueStore.stop_blocking` set on a drained worker: its
        blocking takes take again."""
        await self.redis.delete(self.keys.partitions[0].worker_stopping(worker_id))

    async def epochs(self, candidate: str) -> list[bytes]:
        """Each partition's epoch, `candidate` set where there was none (`SET NX GET`: one
        atomic step, so every process that finds none agrees on the one set)."""
        parts = self.keys.partitions
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in parts:
                pipe.set(part.epoch, candidate, nx=True, get=True)
            found = await pipe.execute()
        return [old if old is not None else candidate.encode() for old in found]

    async def remove_worker(self, worker_id: str) -> None:
        """Remove a stopping worker's lease and, unless it still holds executions, its
        presence. One that does (their terminal events could not be written) stays in the
        workers' set without a lease, so the sweeper fails them rather than losing them."""
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in k.partitions:
                pipe.delete(part.lease(worker_id))
                pipe.scard(part.worker_running(worker_id))
            holds = sum(int(n) for n in (await pipe.execute())[1::2])
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
                pipe.exists(self.keys.partitions[0].lease(worker_id))
            raw = await pipe.execute()
        return [(worker_id, raw[2 * i], bool(raw[2 * i + 1])) for i, worker_id in enumerate(ids)]

    async def drained_of(self, worker_ids: Sequence[str]) -> list[str]:
        """Those of `worker_ids` an operator drained, in one round trip."""
        if not worker_ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.hexists(self.keys.worker(worker_id), DRAIN_FIELD)
            found = await pipe.execute()
        return [w for w, drained in zip(worker_ids, found, strict=True) if drained]

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
        parts = k.partitions
        width = 2 * len(parts)
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in ids:
                for part in parts:
                    pipe.exists(part.lease(worker_id))
                    pipe.scard(part.worker_running(worker_id))
            raw = await pipe.execute()
        # Held while every partition's lease is (a beat sets them all; one that lapsed in
        # any partition lets the sweeper fail the worker's executions there).
        return [
            WorkerLease(
                worker_id,
                int(score),
                all(raw[width * i : width * (i + 1) : 2]),
                sum(int(n) for n in raw[width * i + 1 : width * (i + 1) : 2]),
            )
            for i, (worker_id, (_, score)) in enumerate(zip(ids, beats, strict=True))
        ]

    async def held_by(self, worker_ids: Sequence[str]) -> list[list[str]]:
        """The executions each worker's running set names, in one round trip."""
        if not worker_ids:
            return []
        parts = self.keys.partitions
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                for part in parts:
                    pipe.smembers(part.worker_running(worker_id))
            raw = await pipe.execute()
        width = len(parts)
        return [
            sorted(m.decode() for members in raw[width * i : width * (i + 1)] for m in members)
            for i in range(len(worker_ids))
        ]

    async def let_go(self, worker_id: str, execution_ids: Sequence[str]) -> None:
        """Take executions out of a worker's running set (the terminal event does it for
        the ones it ends; this is for those that were already ended or forgotten)."""
        if not execution_ids:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for execution_id in execution_ids:
                part = self.keys.partition_of(execution_id)
                pipe.srem(part.worker_running(worker_id), execution_id)
            await pipe.execute()

    async def forget_workers(self, worker_ids: Sequence[str]) -> None:
        """Remove workers' presence, lease, running set, last take and blocking take's keys,
        in one round trip."""
        if not worker_ids:
            return
        k = self.keys
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                pipe.delete(k.worker(worker_id))
                for part in k.partitions:  # one slot each: a cluster deletes them apart
                    pipe.delete(part.lease(worker_id))
                    pipe.delete(part.worker_running(worker_id))
                    pipe.delete(part.worker_take(worker_id))
                    pipe.delete(part.worker_woken(worker_id), part.worker_stopping(worker_id))
            pipe.zrem(k.workers, *worker_ids)
            await pipe.execute()

    async def hold_sweeper_lock(self, holder: str, ttl_ms: int, *, renew: bool = False) -> bool:
        """Take the sweeper lock for `ttl_ms` if it is free or, with `renew` (`holder` had it
        at its last try), extend it if `holder` still has it; answers whether `holder` holds
        it now. A candidate's try is one command (SET NX PX), a holder's renewal one script
        (`sweeper_lock.lua`: the check and the extension in one step)."""
        key = self.keys.sweeper_lock
        if renew:
            if await self._lock(keys=[key], args=[holder, "renew", ttl_ms]):
                return True
            if await self.redis.exists(key):
                return False
        return bool(await self.redis.set(key, holder, nx=True, px=ttl_ms))

    async def release_sweeper_lock(self, holder: str) -> bool:
        """Give the sweeper lock up if `holder` has it (another may take it at once)."""
        return bool(await self._lock(keys=[self.keys.sweeper_lock], args=[holder, "release"]))

    async def sweeper_lock_holder(self) -> str | None:
        """Who holds the sweeper lock now (for inspection and tests)."""
        raw = await self.redis.get(self.keys.sweeper_lock)
        return raw.decode() if raw is not None else None
