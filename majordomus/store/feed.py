"""The global feed's reads: every event of every execution, in the order it was written.

`create` and `append` write the feed (`md:feed`, a stream approximately capped at
`MAJORDOMUS_FEED_MAX_EVENTS`) in the same script as the execution's own stream; this
module only reads it, for the unscoped live channel and the API's one shared reader: the
entries after a cursor (waiting for them, or only those retained), and its bounds.
"""

from __future__ import annotations

from majordomus.store.base import StoreBase

FeedEntry = tuple[str, str, int, bytes]
"""A global feed entry: (feed id, execution id, sequence, the event's stored JSON)."""


def _entry(feed_id: bytes, fields: dict[bytes, bytes]) -> FeedEntry:
    return feed_id.decode(), fields[b"x"].decode(), int(fields[b"s"]), fields[b"e"]


class FeedStore(StoreBase):
    async def read_feed(
        self, last_id: str, block_ms: int | None, count: int = 1000
    ) -> list[FeedEntry]:
        """Global feed entries after `last_id`: (feed id, execution id, sequence, envelope)."""
        raw = await self.redis.xread({self.keys.feed: last_id}, count=count, block=block_ms)
        if not raw:
            return []
        return [_entry(fid, f) for fid, f in raw[0][1]]

    async def feed_after(self, after_id: str, count: int) -> list[FeedEntry]:
        """Retained feed entries after `after_id` (exclusive), oldest first, at most `count`."""
        raw = await self.redis.xrange(self.keys.feed, f"({after_id}", "+", count=count)
        return [_entry(fid, f) for fid, f in raw]

    async def feed_state(self) -> tuple[str | None, str | None, int]:
        """The oldest and newest retained feed ids, and how many entries the feed holds."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.xrange(self.keys.feed, "-", "+", count=1)
            pipe.xrevrange(self.keys.feed, "+", "-", count=1)
            pipe.xlen(self.keys.feed)
            first, last, length = await pipe.execute()
        return (
            first[0][0].decode() if first else None,
            last[0][0].decode() if last else None,
            int(length),
        )
