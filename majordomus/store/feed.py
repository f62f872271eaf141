"""The live feed's reads: every event of every execution, each partition's in the order written.

Each partition has a feed of its own (`Partition.feed`, a stream approximately capped at
`MAJORDOMUS_FEED_MAX_EVENTS`), which `create`, `take` and `append` write in the same
script as the execution's own stream; so all of one execution's entries are in one feed,
in order. This module only reads the feeds, for the unscoped live channel and the API's
one shared reader: the entries after a cursor (waiting for them, or only those retained),
and each feed's bounds. It does not write them, nor check a cursor a client gave
(`majordomus.engine.require_feed_id` does).

**The cursor.** A position in every partition's feed at once: one stream id
(`<ms>-<n>`) per partition, in partition order, joined by `_` (`CURSOR_SEPARATOR`), such as
`1733000000000-0_1733000000004-1_0-0` for three partitions (`0-0`: nothing of that one
yet). With one partition it is that feed's stream id, as it always was. Every character is
a digit, `-` or `_`, so it travels as is in a query string and in `Last-Event-ID`; it takes
about 16 characters per partition. Entries of several partitions are merged in stream-id
order (the time each was written; a tie goes to the lower partition), and each entry
carries the cursor to resume after it: the cursor read after, with its partition's
position moved to it. Resuming after an entry's cursor loses nothing and repeats nothing,
whatever the order the partitions' entries became visible in.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable, Sequence
from typing import Any, NamedTuple

from redis.asyncio.cluster import RedisCluster

from majordomus.store.base import StoreBase
from majordomus.store.policy import blocking_reads
from majordomus.store.stored_format import FEED_ENTRY

_ID, _SEQ, _ENVELOPE = (name.encode() for name in FEED_ENTRY)
"""A feed entry's fields as Redis answers them (`stored_format.FEED_ENTRY`)."""

CURSOR_SEPARATOR = "_"
"""What joins the partitions' stream ids in a feed cursor."""

FeedEntry = tuple[str, str, int, bytes, int, str]
"""A feed entry: (the cursor to resume after it, execution id, sequence, the event's stored
JSON, its partition, its stream id in that partition's feed). With one partition the
cursor is the stream id."""

StreamKey = tuple[int, int]
"""A stream id as it orders: (ms, n)."""


class FeedBounds(NamedTuple):
    """One partition's feed: its oldest and newest retained stream ids, and its length."""

    oldest: str | None
    newest: str | None
    length: int


def stream_key(stream_id: str) -> StreamKey:
    """A stream id as it orders (`1701234567890` is `1701234567890-0`)."""
    ms, _, seq = stream_id.partition("-")
    return int(ms), int(seq or 0)


def cursor_parts(cursor: str) -> list[str]:
    """A cursor's stream ids, one per partition."""
    return cursor.split(CURSOR_SEPARATOR)


def cursor_of(parts: Iterable[str]) -> str:
    """The cursor of these stream ids, one per partition in partition order."""
    return CURSOR_SEPARATOR.join(parts)


def start_cursor(partitions: int) -> str:
    """The cursor before any entry of any partition."""
    return cursor_of(["0-0"] * partitions)


def newest_cursor(bounds: Sequence[FeedBounds]) -> str:
    """The cursor at the end of every partition's feed (`feed_state`): reading after it is
    reading from now."""
    return cursor_of(b.newest or "0-0" for b in bounds)


Raw = list[tuple[bytes, dict[bytes, bytes]]]
"""One stream's entries as redis-py answers them: (stream id, fields)."""


def _single(raw: Raw) -> list[FeedEntry]:
    """One partition's entries: each one's cursor is its stream id."""
    out: list[FeedEntry] = []
    for fid, f in raw:
        sid = fid.decode()
        out.append((sid, f[_ID].decode(), int(f[_SEQ]), f[_ENVELOPE], 0, sid))
    return out


def _merged(cursor: str, reads: Sequence[tuple[int, Raw]], count: int) -> list[FeedEntry]:
    """Several partitions' entries after `cursor`, in stream-id order (ties to the lower
    partition), at most `count`, each with the cursor to resume after it.

    Each partition's read is a prefix of its feed after its position, so the first `count`
    of the merge are the `count` first entries after `cursor` of all of them: a partition
    whose read stopped at `count` has nothing unread before its last entry read."""
    rows: list[tuple[StreamKey, int, str, dict[bytes, bytes]]] = []
    for index, raw in reads:
        for fid, f in raw:
            sid = fid.decode()
            rows.append((stream_key(sid), index, sid, f))
    rows.sort(key=lambda row: (row[0], row[1]))
    parts = cursor_parts(cursor)
    out: list[FeedEntry] = []
    for _, index, sid, f in rows[:count]:
        parts[index] = sid
        out.append((cursor_of(parts), f[_ID].decode(), int(f[_SEQ]), f[_ENVELOPE], index, sid))
    return out


def _keep(read: Any) -> asyncio.Task[tuple[int, Raw]]:
    """A partition's blocking read as a task that outlives the call that began it; its
    failure, if no later call takes it up, is retrieved (and dropped) rather than logged
    as never retrieved."""
    task: asyncio.Task[tuple[int, Raw]] = asyncio.ensure_future(read)
    task.add_done_callback(lambda t: t.cancelled() or t.exception())
    return task


Waiting = dict[int, tuple[str, asyncio.Task[tuple[int, Raw]]]]
"""The blocking reads still waiting, by partition: (the position each reads after, its task)."""


def _take_done(
    waiting: Waiting, done: Callable[[asyncio.Task[tuple[int, Raw]]], bool]
) -> list[tuple[int, Raw]]:
    """The finished reads out of `waiting`, all of them, and the answers that have entries;
    the first failure among them is raised once they are all out (a partition lost to an
    outage is read afresh by the next call, not found failed by each call after)."""
    finished = [(i, task) for i, (_, task) in waiting.items() if done(task)]
    for i, _ in finished:
        del waiting[i]
    found: list[tuple[int, Raw]] = []
    for _, task in finished:
        i, raw = task.result()
        if raw:
            found.append((i, raw))
    return found


class FeedStore(StoreBase):
    def _positions(self, cursor: str) -> list[str]:
        parts = cursor_parts(cursor)
        if len(parts) != self.keys.partition_count:
            raise ValueError(
                f"the feed cursor {cursor!r} has {len(parts)} parts for "
                f"{self.keys.partition_count} partitions"
            )
        return parts

    async def read_feed(
        self, cursor: str, block_ms: int | None, count: int = 1000
    ) -> list[FeedEntry]:
        """Feed entries after `cursor`, merged, at most `count`, waiting up to `block_ms`
        (None: not at all) for the first of any partition.

        On one Redis node this is one `XREAD` of every partition's feed (one round trip,
        one connection however many partitions). A Redis Cluster refuses a read of keys in
        several slots (CROSSSLOT), and each partition is a slot of its own: there each
        partition is read with an `XREAD` of its own, concurrently (`_read_each`)."""
        parts = self._positions(cursor)
        feeds = [p.feed for p in self.keys.partitions]
        with blocking_reads(block_ms):
            if len(feeds) == 1:
                raw = await self.redis.xread({feeds[0]: parts[0]}, count=count, block=block_ms)
                return _single(raw[0][1]) if raw else []
            if isinstance(self.redis, RedisCluster):
                reads = await self._read_each(parts, block_ms, count)
            else:
                index = {feed.encode(): i for i, feed in enumerate(feeds)}
                answer = await self.redis.xread(
                    dict(zip(feeds, parts, strict=True)), count=count, block=block_ms
                )
                reads = [(index[key], raw) for key, raw in answer or ()]
        return _merged(cursor, reads, count)

    async def _read_each(
        self, parts: list[str], block_ms: int | None, count: int
    ) -> list[tuple[int, Raw]]:
        """A Redis Cluster's read: every partition without waiting, concurrently; when none
        has anything and `block_ms` says wait, every partition blocking at once, until the
        first answers with entries (or `block_ms` has passed).

        The blocking reads that did not answer are not cancelled (a cancelled command costs
        its connection, which redis-py drops: a reconnect per idle partition at every wake
        from idle): they go on waiting at their partition's position (`_waiting`), and the
        next read takes them up, whose cursor has the same position there, since nothing of
        theirs was read. Only a read at another position is cancelled: one left behind by a
        cursor that moved some other way (`stop_reads` ends the rest). Built for one blocking
        reader at a time, the API's feed reader; concurrent ones still answer rightly."""
        waiting = self._waiting
        for i, (at, task) in list(waiting.items()):
            if at != parts[i]:
                del waiting[i]
                task.cancel()
        found = _take_done(waiting, lambda task: task.done())
        # A partition with a read still waiting has had nothing since it began (the read
        # would have answered): it is not asked again.
        answered = {i for i, _ in found}
        asked = [i for i in range(len(parts)) if i not in waiting and i not in answered]
        found += [
            r
            for r in await asyncio.gather(*(self._read_one(parts, i, None, count) for i in asked))
            if r[1]
        ]
        if found or block_ms is None:
            return found

        def block_where_none_waits() -> None:
            for i in range(len(parts)):
                if i not in waiting:
                    waiting[i] = (parts[i], _keep(self._read_one(parts, i, block_ms, count)))

        block_where_none_waits()
        deadline = asyncio.get_running_loop().time() + block_ms / 1000
        while not found:
            left = deadline - asyncio.get_running_loop().time()
            if left <= 0:
                break
            tasks = {task for _, task in waiting.values()}
            done, _ = await asyncio.wait(tasks, timeout=left, return_when=asyncio.FIRST_COMPLETED)
            found = _take_done(waiting, done.__contains__)
            if not found:  # their own waits ran out first: they wait again
                block_where_none_waits()
        return found

    async def _read_one(
        self, parts: list[str], i: int, block: int | None, count: int
    ) -> tuple[int, Raw]:
        feed = self.keys.partitions[i].feed
        raw: Any = await self.redis.xread({feed: parts[i]}, count=count, block=block)
        return i, (raw[0][1] if raw else [])

    @property
    def _waiting(self) -> Waiting:
        """This store's blocking feed reads still waiting (`_read_each`)."""
        waiting: Waiting | None = self.__dict__.get("_feed_waiting")
        if waiting is None:
            waiting = self.__dict__["_feed_waiting"] = {}
        return waiting

    async def stop_reads(self) -> None:
        """End the blocking feed reads still waiting (a Redis Cluster's; the reader stops)."""
        tasks = [task for _, task in self._waiting.values()]
        self._waiting.clear()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def feed_after(self, cursor: str, count: int, upto: str | None = None) -> list[FeedEntry]:
        """Retained feed entries after `cursor` (exclusive) and up to `upto` (inclusive, a
        cursor too; None: the end), merged, oldest first, at most `count`."""
        parts = self._positions(cursor)
        ends = self._positions(upto) if upto is not None else ["+"] * len(parts)
        feeds = [p.feed for p in self.keys.partitions]
        if len(feeds) == 1:
            return _single(await self.redis.xrange(feeds[0], f"({parts[0]}", ends[0], count=count))
        async with self.redis.pipeline(transaction=False) as pipe:
            for feed, after, end in zip(feeds, parts, ends, strict=True):
                pipe.xrange(feed, f"({after}", end, count=count)
            answers = await pipe.execute()
        return _merged(cursor, list(enumerate(answers)), count)

    async def feed_state(self) -> list[FeedBounds]:
        """Each partition's feed bounds, in partition order (one round trip on one node)."""
        async with self.redis.pipeline(transaction=False) as pipe:
            for part in self.keys.partitions:
                pipe.xrange(part.feed, "-", "+", count=1)
                pipe.xrevrange(part.feed, "+", "-", count=1)
                pipe.xlen(part.feed)
            answers = await pipe.execute()
        bounds: list[FeedBounds] = []
        for i in range(0, len(answers), 3):
            first, last, length = answers[i : i + 3]
            bounds.append(
                FeedBounds(
                    first[0][0].decode() if first else None,
                    last[0][0].decode() if last else None,
                    int(length),
                )
            )
        return bounds
