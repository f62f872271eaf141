"""What the testing kit (`majordomus.testing`) asks of Redis that production never does.

A skip of time (`majordomus.testing.skipping`) asks when the next thing is due in the
queue, whether due work still waits, how long a killed worker's lease and the sweeper's
lock have left; it carries the live workers' leases and concurrency slots over the time
it skips (as their beats would have, all along), and wakes the idle workers afterwards
the way a start does (a wake-up on the list a worker waits on). A killed worker is cut off
(`severable`, `drop_connections`): its client sends nothing more, and the server drops its
connections, a blocked take included, as it does for a process that died. On a Redis
shared with other things, an environment's keys are removed when it ends (`forget_prefix`).

None of this decides what is due, takes work or fails it: the scripts and the store do,
as in production.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from redis.exceptions import ConnectionError as _ConnectionError

from majordomus.store.base import StoreBase

WAKEUPS_KEPT = 32
"""The wake-up list is trimmed to this many entries after a skip's wake-ups (a start trims
it too: `create.lua`)."""

SEVERED = "severed: this worker was killed (majordomus.testing)"


class SkipStore(StoreBase):
    """The reads and writes of a skip of time."""

    async def next_due_ms(self) -> int | None:
        """When the first execution waiting in the queue's delayed sets is due (epoch ms)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zrange(part.delayed, 0, 0, withscores=True)
            heads = await pipe.execute()
        due = [int(score) for head in heads for _, score in head]
        return min(due) if due else None

    async def due_waiting(self, now_ms: int) -> int:
        """How many executions can run at `now_ms` and are still in the queue (ready, or
        delayed and due): none once the workers have taken what came due."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.zcard(part.queue)
                pipe.zcount(part.delayed, "-inf", now_ms)
            return sum(int(n) for n in await pipe.execute())

    async def wake_workers(self, count: int) -> None:
        """`count` wake-ups on every partition's wake-up list, as a start leaves one: a
        worker waiting there takes what is due at once."""
        if count <= 0:
            return
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.lpush(part.wakeup, *["skip"] * count)
                pipe.ltrim(part.wakeup, 0, WAKEUPS_KEPT - 1)
            await pipe.execute()

    async def carry_over(
        self,
        worker_ids: Sequence[str],
        slots: Sequence[tuple[str, str]],
        skip_ms: int,
        now_ms: int,
    ) -> None:
        """Before the clock skips `skip_ms`: the live workers' leases and the concurrency
        slots they hold (capability, execution) end a whole lease after the skip, as if they
        had beaten all along. A lease already lapsed stays lapsed (`PEXPIRE` of no key)."""
        lease_ms = int(self.settings.lease_seconds * 1000)
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                for part in self.keys.partitions:
                    pipe.pexpire(part.lease(worker_id), skip_ms + lease_ms)
            for capability, execution_id in slots:
                part = self.keys.partition_of_capability(capability)
                ends = now_ms + skip_ms + lease_ms
                pipe.zadd(part.concurrency(capability), {execution_id: ends}, xx=True)
            await pipe.execute()

    async def lease_left_ms(self, worker_ids: Sequence[str]) -> list[int | None]:
        """How long each worker's lease has left (the shortest of its partitions'), None
        when it has lapsed."""
        if not worker_ids:
            return []
        parts = self.keys.partitions
        async with self.redis.pipeline(transaction=False) as pipe:
            for worker_id in worker_ids:
                for part in parts:
                    pipe.pttl(part.lease(worker_id))
            raw = [int(n) for n in await pipe.execute()]
        width = len(parts)
        left: list[int | None] = []
        for i in range(len(worker_ids)):
            ttls = raw[width * i : width * (i + 1)]
            left.append(None if any(t < 0 for t in ttls) else min(ttls))
        return left

    async def sweeper_lock(self) -> tuple[str | None, int | None]:
        """Who holds the sweeper lock, and how long it has left (ms)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.sweeper_lock)
            pipe.pttl(self.keys.sweeper_lock)
            holder, ttl = await pipe.execute()
        if holder is None or int(ttl) < 0:
            return None, None
        return holder.decode(), int(ttl)


class Severance:
    """The switch of one client: once `cut`, none of its connections sends anything more."""

    def __init__(self) -> None:
        self.cut = False


def severable(client: Any) -> Severance:
    """Make `client` (new: no connection made yet) one that can be cut off; answers its
    switch. Its connections, pub/sub included, then refuse every command with a
    `ConnectionError`, as a connection to a dead process would."""
    severance = Severance()
    pool = client.connection_pool
    make = pool.connection_class  # a class, or a factory (fakeredis's `FakeConnection`)
    kinds: dict[type, type] = {}

    def severable_kind(kind: type) -> type:
        if kind not in kinds:

            class Severable(kind):  # type: ignore[misc, valid-type]
                async def connect(self, *args: Any, **kwargs: Any) -> None:
                    if severance.cut:
                        raise _ConnectionError(SEVERED)
                    await super().connect(*args, **kwargs)

                async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
                    if severance.cut:
                        raise _ConnectionError(SEVERED)
                    await super().send_packed_command(*args, **kwargs)

            Severable.__name__ = Severable.__qualname__ = f"Severable{kind.__name__}"
            kinds[kind] = Severable
        return kinds[kind]

    def connection(**kwargs: Any) -> Any:
        made = make(**kwargs)
        made.__class__ = severable_kind(type(made))
        return made

    pool.connection_class = connection
    return severance


async def drop_connections(redis: Any, name: str) -> int:
    """Have the server drop every connection named `name` (`CLIENT SETNAME`), a blocked
    command of theirs ended first so it takes nothing when it wakes (fakeredis would run
    it; a real server drops it with the connection). Answers how many were dropped."""
    clients = await redis.client_list()
    ids = [int(c["id"]) for c in clients if c.get("name") == name]
    for client_id in ids:
        await redis.client_unblock(client_id)
        await redis.client_kill_filter(_id=str(client_id))
    return len(ids)


async def forget_prefix(redis: Any, prefix: str) -> int:
    """Remove every key under `prefix` (an environment's own, on a Redis it shares)."""
    removed = 0
    batch: list[Any] = []
    async for key in redis.scan_iter(match=f"{prefix}:*", count=500):
        batch.append(key)
        if len(batch) >= 500:
            removed += int(await redis.unlink(*batch))
            batch = []
    if batch:
        removed += int(await redis.unlink(*batch))
    return removed
