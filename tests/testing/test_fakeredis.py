"""What the testing kit relies on in fakeredis: the private names `majordomus.store.fake_clock`
replaces are still where it looks, a skip of the clock moves the server's time; and its
`BLMOVE` does not block, which is why a worker there waits for the wake-up signal."""

from __future__ import annotations

import asyncio
import importlib
import time

import pytest

from majordomus import clock
from majordomus.config import Settings
from majordomus.store.connect import connect
from majordomus.store.fake_clock import (
    CLOCK_READERS,
    fake_server,
    follow_the_clock,
    following,
    leave_the_clock,
)
from majordomus.store.queue import QueueStore
from majordomus.testing.clock import VirtualClock
from tests.conftest import LIVENESS_SECONDS


@pytest.mark.parametrize("name", CLOCK_READERS)
def test_fakeredis_still_reads_the_time_through_its_global_time(name: str) -> None:
    """Fails, naming the module, when a fakeredis release reads its time otherwise: the
    shim then no longer moves it (the module's `time()` calls are its clock)."""
    module = importlib.import_module(name)
    assert getattr(module, "time", None) is time, f"{name} has no global `time` any more"
    source = importlib.util.find_spec(name).loader.get_source(name)  # type: ignore[union-attr]
    assert "time.time()" in source, f"{name} no longer calls time.time()"


async def test_a_skip_moves_the_servers_time_expiry_and_stream_ids() -> None:
    virtual = VirtualClock()
    previous = clock.use(virtual)
    follow_the_clock()
    redis = connect(None, fake_server=fake_server())
    try:
        before, _ = await redis.time()
        await redis.set("lease", "1", px=15_000)
        virtual.advance(3600)

        after, _ = await redis.time()
        assert 3600 <= after - before < 3605
        assert await redis.get("lease") is None  # ran out in the skipped hour
        entry = await redis.xadd("feed", {"k": "v"})
        assert abs(int(entry.decode().split("-")[0]) - clock.now_ms()) < 1000
    finally:
        leave_the_clock()
        clock.use(previous)
        await redis.aclose(close_connection_pool=True)
    assert not following()
    unfollowed = connect(None, fake_server=fake_server())
    wall, _ = await unfollowed.time()
    await unfollowed.aclose(close_connection_pool=True)
    assert abs(wall - time.time()) < 2


async def test_fakeredis_blmove_does_not_block_so_workers_there_wait_for_the_wake_up_signal() -> None:
    """When this fails, fakeredis's BLMOVE blocks on a missing list as Redis does: workers on
    it may wait in Redis again (drop `is_in_process` from `QueueStore.can_block`)."""
    redis = connect(None, fake_server=fake_server())
    try:
        # A wait without end (0) answers at once: one that blocked would outlive the test.
        moved = redis.blmove("nothing", "elsewhere", 0, "LEFT", "LEFT")
        assert await asyncio.wait_for(moved, LIVENESS_SECONDS) is None
        assert not QueueStore(redis, Settings.from_env({})).can_block
    finally:
        await redis.aclose(close_connection_pool=True)
