"""The shared feed reader's own pace (`api.live.feed.FeedHub`), against a real Redis: it
reads only while someone listens, resting after the last one left and starting again for
the next, who is offered everything after it; and while every listener still has entries
to send, it reads in batches at most every `PACE_SECONDS`, not once an entry."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from majordomus.api.live import feed as feed_module
from majordomus.api.live.feed import FeedHub
from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from tests.api.conftest import until
from tests.conftest import make_settings


class Counted:
    """`engine.read_feed`, counted."""

    def __init__(self, engine: Engine) -> None:
        self.reads = 0
        self.plain = engine.read_feed
        engine.read_feed = self  # type: ignore[method-assign]

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.reads += 1
        return await self.plain(*args, **kwargs)


@pytest.fixture
async def hub_with(redis: Any, redis_url: str) -> Any:
    engine = Engine(redis, REGISTRY, make_settings(redis_url))
    counted = Counted(engine)
    hub = FeedHub(engine, engine.settings)
    await hub.start()
    feed = engine.store.keys.partitions[0].feed
    sequence = 0

    async def add(n: int, pause: float = 0.0) -> list[str]:
        nonlocal sequence
        ids = []
        for _ in range(n):
            sequence += 1
            envelope = json.dumps(
                {"type": "execution.log", "sequence": sequence, "execution_id": "x"}
            )
            ids.append((await redis.xadd(feed, {"x": "x", "s": sequence, "e": envelope})).decode())
            if pause:
                await asyncio.sleep(pause)
        return ids

    try:
        yield hub, counted, add
    finally:
        await hub.stop()


async def test_the_reader_reads_only_while_someone_listens(
    hub_with: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(feed_module, "REST_SECONDS", 0.2)
    hub, counted, add = hub_with
    await add(3)
    await asyncio.sleep(0.3)
    assert counted.reads == 0  # started, and nobody listens: no read at all
    listener = hub.register("x")
    await hub.ready()
    await until(lambda: counted.reads > 0, "a read once someone listens")
    hub.unregister(listener)
    await asyncio.sleep(0.5)  # past REST_SECONDS: resting
    resting_at = counted.reads
    await add(5)
    await asyncio.sleep(0.3)
    assert counted.reads == resting_at
    # The next listener starts it again, and is offered what comes after it, and only that.
    listener = hub.register("x")
    await hub.ready()
    written = await add(2)
    await until(lambda: len(listener.items) == 2, "the two new entries offered")
    assert [entry.stream_id for entry in listener.items] == written
    hub.unregister(listener)


async def test_the_reader_reads_in_batches_while_every_listener_has_entries_to_send(
    hub_with: Any,
) -> None:
    hub, counted, add = hub_with
    listener = hub.register(None)
    await hub.ready()
    hub.park(listener)  # its channel's write to a slow client goes on
    await asyncio.sleep(0.05)
    before = counted.reads
    written = await add(100, pause=0.002)
    await until(lambda: hub.backlog.head - listener.next == len(written), "all in the backlog")
    paced = counted.reads - before
    # About one read per PACE_SECONDS over the ~0.2 s (or more on a slow machine), never
    # one per entry.
    assert paced < len(written) / 2, f"{paced} reads for {len(written)} entries"
    got = [hub.backlog.at(i).stream_id for i in range(listener.next, hub.backlog.head)]
    assert got == written  # nothing lost nor reordered by reading in batches
    # A channel that keeps up (here a loop that takes all it is woken for) waits at the
    # head: it is hungry, and entries are read as they come, not a pace later.
    hub.unpark(listener)

    async def keeping_up() -> None:
        while True:
            await listener.wait(5)
            listener.next = hub.backlog.head

    consumer = asyncio.create_task(keeping_up())
    try:
        await asyncio.sleep(0.05)
        before = counted.reads
        more = await add(40, pause=0.005)  # four entries a pace
        await until(lambda: listener.next == hub.backlog.head, "all taken")
        assert counted.reads - before >= len(more) * 3 // 4
    finally:
        consumer.cancel()
    hub.unregister(listener)
