"""The live feed split into partitions: each partition's feed read as one, and the unscoped
channel resuming across them.

With three partitions the feed cursor is three stream ids joined by `_`; the entries of
all of them come merged in stream-id order, each with the cursor to resume after it, so a
reader resuming after any entry misses nothing and sees nothing twice; a blocking read
wakes on an entry in any partition (on one node as one `XREAD`, and as the per-partition
reads a Redis Cluster needs); a cursor is truncated when any partition dropped what lies
after its position; a malformed cursor, or one of another number of partitions, is
`invalid_input`. With one partition every cursor is the plain stream id it always was.

The store-level tests write the feed entries themselves (XADD, with the fields the scripts
write: `x`, `s`, `e`), so they say what the reads do whatever writes them; the last test
runs the real thing over a socket: an API and a worker with three partitions.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest

import majordomus.store.feed as feed_module
from majordomus.api.live.feed import Backlog, FeedEntry, FeedHub, Listener, feed_entries
from majordomus.api.live.scopes import FeedScope
from majordomus.engine import Engine, require_feed_id
from majordomus.errors import MajordomusError
from majordomus.registry import REGISTRY
from majordomus.store.keys import Keys
from tests.api.conftest import TERMINAL, ApiProcess, Message, own_deployment, read_stream, start
from tests.conftest import FOREVER_MS, LIVENESS_SECONDS, make_settings

PARTITIONS = 3
START = "0-0_0-0_0-0"


def envelope(execution_id: str, sequence: int) -> bytes:
    return json.dumps(
        {"type": "execution.log", "sequence": sequence, "execution_id": execution_id}
    ).encode()


async def add(redis: Any, engine: Engine, partition: int, stream_id: str, x: str, s: int) -> str:
    """One feed entry, as `create.lua` and `append.lua` write it, in one partition's feed."""
    feed = engine.store.keys.partitions[partition].feed
    written = await redis.xadd(feed, {"x": x, "s": s, "e": envelope(x, s)}, id=stream_id)
    return written.decode()


@pytest.fixture
async def engine3(redis: Any, redis_url: str) -> Engine:
    return Engine(redis, REGISTRY, make_settings(redis_url, partitions=PARTITIONS))


async def spread(redis: Any, engine: Engine, count: int, seed: int = 7) -> list[tuple[int, str]]:
    """`count` entries over the partitions, at random, with ids that tie across partitions
    now and then: (partition, stream id) of each, in the order written."""
    rng = random.Random(seed)
    ms = [1000, 1000, 1000]
    written: list[tuple[int, str]] = []
    for i in range(count):
        p = rng.randrange(PARTITIONS)
        ms[p] += rng.choice((0, 1, 1, 2))
        stream_id = await add(redis, engine, p, f"{ms[p]}-*", f"x-{p}", i + 1)
        written.append((p, stream_id))
    return written


def unscoped(start_id: str, size: int = 1000) -> Listener:
    """An unscoped listener at `start_id`, reading a backlog of its own that begins there (as
    `FeedHub.register` makes one, the hub standing at `start_id`)."""
    backlog = Backlog(size, PARTITIONS)
    backlog.base_cursor = start_id
    listener = Listener(None, 1024, start_id)
    backlog.attach(listener)
    return listener


def ids_of(page: list[Any]) -> list[tuple[int, str]]:
    return [(entry[4], entry[5]) for entry in page]


def merged(written: list[tuple[int, str]]) -> list[tuple[int, str]]:
    def order(item: tuple[int, str]) -> tuple[int, int, int]:
        ms, _, seq = item[1].partition("-")
        return int(ms), int(seq), item[0]

    return sorted(written, key=order)


# -- merged order and cursors --------------------------------------------------------------------


async def test_the_partitions_entries_come_merged_in_stream_id_order(
    redis: Any, engine3: Engine
) -> None:
    for p, sid in [(1, "1001-0"), (0, "1000-0"), (2, "1002-0"), (0, "1003-0"), (1, "1003-0")]:
        await add(redis, engine3, p, sid, f"x-{p}", 1)
    page = await engine3.feed_after(START, 100)
    # A tie goes to the lower partition; each entry carries the cursor after it.
    assert [(e[4], e[5]) for e in page] == [
        (0, "1000-0"), (1, "1001-0"), (2, "1002-0"), (0, "1003-0"), (1, "1003-0")
    ]  # fmt: skip
    assert [e[0] for e in page] == [
        "1000-0_0-0_0-0",
        "1000-0_1001-0_0-0",
        "1000-0_1001-0_1002-0",
        "1003-0_1001-0_1002-0",
        "1003-0_1003-0_1002-0",
    ]
    assert await engine3.read_feed(START, None, 100) == page
    state = await engine3.feed_state()
    assert [(b.oldest, b.newest, b.length) for b in state] == [
        ("1000-0", "1003-0", 2), ("1001-0", "1003-0", 2), ("1002-0", "1002-0", 1)
    ]  # fmt: skip


async def test_resuming_after_each_entrys_cursor_loses_nothing_and_repeats_nothing(
    redis: Any, engine3: Engine
) -> None:
    written = await spread(redis, engine3, 120)
    whole = await engine3.feed_after(START, 1000)
    assert ids_of(whole) == merged(written)
    for i, entry in enumerate(whole):
        assert ids_of(await engine3.feed_after(entry[0], 1000)) == ids_of(whole[i + 1 :])
        assert ids_of(await engine3.read_feed(entry[0], None, 1000)) == ids_of(whole[i + 1 :])
    # Paged, by either read: the same entries, with the same cursors.
    for read in (
        lambda c: engine3.feed_after(c, 7),
        lambda c: engine3.read_feed(c, None, 7),
    ):
        pages: list[Any] = []
        cursor = START
        while page := await read(cursor):
            assert len(page) <= 7
            pages += page
            cursor = page[-1][0]
        assert pages == whole


async def test_a_read_up_to_a_cursor_stops_at_it_in_every_partition(
    redis: Any, engine3: Engine
) -> None:
    await spread(redis, engine3, 60)
    whole = await engine3.feed_after(START, 1000)
    for i in (0, 17, 59):
        assert await engine3.feed_after(START, 1000, upto=whole[i][0]) == whole[: i + 1]


async def test_with_one_partition_the_cursor_is_the_plain_stream_id(
    redis: Any, redis_url: str
) -> None:
    engine = Engine(redis, REGISTRY, make_settings(redis_url))
    for ms in (1733000000000, 1733000000000, 1733000000005):
        await add(redis, engine, 0, f"{ms}-*", "x-1", 1)
    page = await engine.feed_after("0-0", 10)
    assert [e[0] for e in page] == [e[5] for e in page] == [
        "1733000000000-0", "1733000000000-1", "1733000000005-0"
    ]  # fmt: skip
    assert await engine.feed_after("1733000000000", 10) == page[1:]
    assert [e[0] for e in await engine.read_feed(page[0][0], None)] == [e[0] for e in page[1:]]
    [bounds] = await engine.feed_state()
    assert bounds == ("1733000000000-0", "1733000000005-0", 3)


# -- blocking reads ------------------------------------------------------------------------------


async def wakes_on_each_partition(redis: Any, engine: Engine) -> None:
    cursor = START
    for p in (2, 0, 1):
        reader = asyncio.create_task(engine.read_feed(cursor, FOREVER_MS))
        await asyncio.sleep(0.05)  # time passes: the read waits
        assert not reader.done()
        sid = await add(redis, engine, p, "*", f"x-{p}", 1)
        # Woken by the entry: a read that waited its whole wait would outlive the test.
        page = await asyncio.wait_for(reader, LIVENESS_SECONDS)
        assert ids_of(page) == [(p, sid)]
        cursor = page[-1][0]
    assert await engine.read_feed(cursor, 100) == []


async def test_a_blocking_read_wakes_on_an_entry_in_any_partition(
    redis: Any, engine3: Engine
) -> None:
    await wakes_on_each_partition(redis, engine3)


async def test_the_per_partition_reads_of_a_cluster_wake_on_any_partition_and_merge(
    redis: Any, engine3: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No cluster here: the cluster's path (one XREAD per partition, concurrently) is taken
    # on this one node by having the store see its client as a cluster client.
    monkeypatch.setattr(feed_module, "RedisCluster", type(redis))
    await wakes_on_each_partition(redis, engine3)
    await redis.flushdb()
    written = await spread(redis, engine3, 40)
    page = await engine3.read_feed(START, 5000, 1000)
    assert ids_of(page) == merged(written)
    assert page == await engine3.feed_after(START, 1000)


async def test_the_per_partition_reads_of_a_cluster_keep_their_connections_across_wake_ups(
    redis: Any, engine3: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A wake from idle used to cancel the other partitions' blocking reads, and redis-py
    # drops the connection of a cancelled command: two reconnects per wake here. They go on
    # waiting instead, and the next read takes them up.
    monkeypatch.setattr(feed_module, "RedisCluster", type(redis))
    cursor = START

    async def wake(partition: int) -> None:
        nonlocal cursor
        reader = asyncio.create_task(engine3.read_feed(cursor, FOREVER_MS))
        await asyncio.sleep(0.05)  # time passes: the read waits
        assert not reader.done()
        sid = await add(redis, engine3, partition, "*", f"x-{partition}", 1)
        page = await asyncio.wait_for(reader, LIVENESS_SECONDS)
        assert ids_of(page) == [(partition, sid)]
        cursor = page[-1][0]

    async def connections() -> set[str]:
        # Those on the test's database (the server's other clients come and go, and earlier
        # tests' may still be leaving): a dropped and remade connection is a new id.
        db = str(redis.connection_pool.connection_kwargs.get("db", 0))
        return {c["id"] for c in await redis.client_list() if c["db"] == db}

    try:
        for p in (0, 1, 2):  # the client's pool has its connections
            await wake(p)
        before = await connections()
        for p in (2, 0, 1, 1, 0, 2):
            await wake(p)
        assert await connections() - before == set()  # nothing connected again
        # A read that waits less than the reads it takes up answers in its own time (theirs
        # would outlive the test).
        assert await asyncio.wait_for(engine3.read_feed(cursor, 200), LIVENESS_SECONDS) == []
        # A cursor that moved some other way is read at its own positions.
        sid = await add(redis, engine3, 1, "*", "x-1", 2)
        assert ids_of(await engine3.read_feed(START, 5000, 1000))[-1] == (1, sid)
    finally:
        await engine3.stop_feed_reads()
    assert not engine3.store._waiting


# -- truncation ----------------------------------------------------------------------------------


async def test_a_cursor_is_truncated_when_any_partition_dropped_what_follows_it(
    redis: Any, engine3: Engine
) -> None:
    cap = 5
    feeds = [p.feed for p in engine3.store.keys.partitions]
    for i in range(1, 11):  # partition 1 keeps its last 5 of 10
        fields = {"x": "x-1", "s": i, "e": envelope("x-1", i)}
        await redis.xadd(feeds[1], fields, f"{i}-0", maxlen=cap, approximate=False)
    for i in range(1, 3):  # partition 2 holds 2, never trimmed
        await add(redis, engine3, 2, f"{i}-0", "x-2", i)

    async def truncated(cursor: str) -> bool:
        ready = await FeedScope(engine3, cursor, unscoped(START), cap).ready(1.0)
        assert ready is not None
        return ready.truncated

    assert await truncated("0-0_3-0_0-0")  # 4-0 and 5-0 of partition 1 are gone
    assert await truncated("0-0_5-0_2-0")
    assert not await truncated("0-0_6-0_0-0")  # partition 1 is whole after 6-0; 2 is young
    assert not await truncated("0-0_10-0_0-0")
    assert not await truncated("7-0_8-0_1-0")


# -- malformed cursors ---------------------------------------------------------------------------

MALFORMED = [
    "1733000000000-0",  # one part for three partitions
    "1-0_2-0",
    "1-0_2-0_3-0_4-0",
    "1-0_x_3-0",
    "1-0__3-0",
    "1-0_2-0_3-0_",
    "1-0_-2_3-0",
    "1-0_2-0_18446744073709551616-0",
    "1-0_2-0_0-18446744073709551616",
    "1-0_2-0_18446744073709551615-18446744073709551615",
    "1-0_2-0_3-0-4",
    "1-0_2-0_٣-0",
]


@pytest.mark.parametrize("cursor", MALFORMED)
async def test_a_malformed_cursor_is_invalid_input(engine3: Engine, cursor: str) -> None:
    with pytest.raises(MajordomusError) as refused:
        await engine3.feed_after(cursor, 10)
    assert refused.value.code == "invalid_input"
    assert "3 partitions" in refused.value.message
    with pytest.raises(MajordomusError):
        await FeedScope(engine3, cursor, unscoped(START), 10).ready(1.0)


def test_a_cursor_is_written_in_full_and_checked_against_the_partitions() -> None:
    assert require_feed_id("5_6-1_0", 3) == "5-0_6-1_0-0"
    assert require_feed_id("1701234567890", 1) == "1701234567890-0"
    with pytest.raises(MajordomusError) as one:
        require_feed_id("1-0_2-0_3-0", 1)
    assert one.value.code == "invalid_input" and "is not a feed id" in one.value.message


# -- the hub and the unscoped channel ------------------------------------------------------------


class Collected:
    """An `EventStream` stand-in that keeps what a scope writes, as SSE messages."""

    def __init__(self) -> None:
        self.data = b""

    async def write(self, data: bytes, final: bool = False) -> None:
        self.data += data

    def write_now(self, data: bytes) -> bool:
        self.data += data
        return True

    async def settle(self) -> None:
        pass

    def messages(self, extra: Sequence[bytes] = ()) -> list[tuple[str | None, str, dict[str, Any]]]:
        out = []
        for block in (self.data + b"".join(extra)).split(b"\n\n"):
            fields: dict[str, str] = {}
            for line in block.decode().splitlines():
                name, _, value = line.partition(": ")
                fields[name] = value
            if "event" in fields:
                out.append((fields.get("id"), fields["event"], json.loads(fields["data"])))
        return out


async def test_the_hub_follows_every_partition_from_now_and_hands_out_resumable_cursors(
    redis: Any, engine3: Engine
) -> None:
    await add(redis, engine3, 1, "500-0", "x-old", 1)  # before the hub: not handed out
    hub = FeedHub(engine3, engine3.settings)
    await hub.start()
    try:
        await hub.ready()
        assert hub.cursor == "0-0_500-0_0-0"
        listener = hub.register(None)
        written = [await add(redis, engine3, p, "*", f"x-{p}", 1) for p in (2, 0, 1, 1, 0)]
        for _ in range(100):
            if hub.backlog.head - listener.next == len(written):
                break
            await asyncio.sleep(0.02)
        assert not listener.items  # an unscoped listener is offered nothing: it reads the backlog
        got = [hub.backlog.at(i) for i in range(listener.next, hub.backlog.head)]
        assert sorted(e.stream_id for e in got) == sorted(written)
        for i, entry in enumerate(got):
            rest = await engine3.feed_after(entry.feed_id, 100)
            # What follows it: exactly what the hub handed out after it (in stream-id
            # order now, which may differ from the order the partitions' entries came in).
            assert sorted(e[5] for e in rest) == sorted(e.stream_id for e in got[i + 1 :])
        assert got[0].previous == "0-0_500-0_0-0" and hub.cursor == got[-1].feed_id
        hub.unregister(listener)
    finally:
        await hub.stop()


async def test_a_resuming_channel_reads_redis_up_to_the_backlog_then_the_backlog_with_resumable_ids(
    redis: Any, engine3: Engine
) -> None:
    for p, sid in [(0, "100-0"), (1, "101-0"), (1, "102-0"), (2, "103-0"), (1, "300-0")]:
        await add(redis, engine3, p, sid, f"x-{sid}", 1)
    hub_at = "100-0_0-0_0-0"
    # The hub stood at `hub_at` when its backlog began, and has dispatched the other four
    # since; the client's cursor is the start. Redis gives the replay up to `hub_at` (one
    # entry), the backlog the rest (four, counted as replayed too, sent from memory).
    listener = unscoped(hub_at)
    backlog = listener.backlog
    assert backlog is not None
    live = feed_entries(await engine3.feed_after(hub_at, 1000), hub_at)
    assert [e.stream_id for e in live] == ["101-0", "102-0", "103-0", "300-0"]
    backlog.add(live)
    scope = FeedScope(engine3, START, listener, 1000)
    stream = Collected()
    ready = await scope.ready(1.0)
    assert ready is not None and ready.replayed == 5 and not ready.truncated
    chunk: list[bytes] = []
    await scope.replay(chunk, stream)
    # Partition 0's next entry is older than partition 1's last (its node's clock is
    # behind): the hub dispatches it after 300-0, with the cursor of where the hub is.
    await add(redis, engine3, 0, "200-0", "x-200-0", 1)
    hub_now = live[-1].feed_id
    later = feed_entries(await engine3.feed_after(hub_now, 1000), hub_now)
    assert [e.feed_id for e in later] == ["200-0_300-0_103-0"]
    backlog.add(later)
    await scope.advance(listener, chunk, stream)
    sent = stream.messages(chunk)
    assert [m[2]["execution_id"] for m in sent] == [
        "x-100-0", "x-101-0", "x-102-0", "x-103-0", "x-300-0", "x-200-0"
    ]  # fmt: skip
    assert [m[0] for m in sent] == [
        "100-0_0-0_0-0",
        "100-0_101-0_0-0",
        "100-0_102-0_0-0",
        "100-0_102-0_103-0",
        "100-0_300-0_103-0",
        "200-0_300-0_103-0",
    ]
    for i, (sse_id, _, _) in enumerate(sent):
        assert sse_id is not None
        rest = await engine3.feed_after(sse_id, 1000)
        assert sorted(e[1] for e in rest) == sorted(m[2]["execution_id"] for m in sent[i + 1 :])
    # Standing where the hub stands, the channel sends the hub's message, formatted once.
    await add(redis, engine3, 2, "400-0", "x-400-0", 1)
    hub_now = later[-1].feed_id
    [next_entry] = feed_entries(await engine3.feed_after(hub_now, 1000), hub_now)
    assert next_entry.previous == scope.last_id
    backlog.add([next_entry])
    assert scope.unsent() == next_entry.feed_message()


async def test_a_resuming_channel_ahead_of_the_backlog_sends_nothing_twice(
    redis: Any, engine3: Engine
) -> None:
    await spread(redis, engine3, 30)
    listener = unscoped(START)
    backlog = listener.backlog
    assert backlog is not None
    whole = feed_entries(await engine3.feed_after(START, 1000), START)
    backlog.add(whole)
    cursor = whole[11].feed_id  # the client has the first 12, which the backlog holds too
    scope = FeedScope(engine3, cursor, listener, 1000)
    ready = await scope.ready(1.0)
    assert ready is not None and ready.replayed == 18
    stream = Collected()
    chunk: list[bytes] = []
    await scope.replay(chunk, stream)
    await scope.advance(listener, chunk, stream)
    sent = stream.messages(chunk)
    assert [m[2]["sequence"] for m in sent] == [e.sequence for e in whole[12:]]
    assert [m[0] for m in sent] == [e.feed_id for e in whole[12:]]


async def test_a_channel_the_backlog_left_behind_is_told_exactly_what_it_missed_and_where(
    redis: Any, engine3: Engine
) -> None:
    listener = unscoped(START, size=10)
    backlog = listener.backlog
    assert backlog is not None
    scope = FeedScope(engine3, None, listener, 1000)
    await spread(redis, engine3, 50)
    whole = feed_entries(await engine3.feed_after(START, 1000), START)
    backlog.add(whole[:3])
    stream = Collected()
    chunk: list[bytes] = []
    await scope.advance(listener, chunk, stream)  # the first three, sent
    backlog.add(whole[3:])  # 47 more: the backlog holds the last 10
    await scope.advance(listener, chunk, stream)
    sent = stream.messages(chunk)
    assert [m[1] for m in sent[:3]] == ["execution.log"] * 3
    kind, lag = sent[3][1], sent[3][2]["data"]
    assert kind == "stream.lagged"
    assert lag == {"dropped": 37, "after": whole[2].feed_id, "upto": whole[39].feed_id}
    # The gap is exactly what lies between the two cursors, and Redis still has it.
    gap = await engine3.feed_after(lag["after"], 1000, lag["upto"])
    assert [e[0] for e in gap] == [e.feed_id for e in whole[3:40]]
    rest = sent[4:]
    assert [m[0] for m in rest] == [e.feed_id for e in whole[40:]]
    # Told nothing more: nothing more was missed.
    assert all(m[1] != "stream.lagged" for m in rest)


def test_an_entry_built_by_hand_is_its_own_partitions_only_entry() -> None:
    entry = FeedEntry("1000-0", "x-1", 1, envelope("x-1", 1))
    assert (entry.partition, entry.stream_id, entry.key, entry.previous) == (
        0, "1000-0", (1000, 0), None
    )  # fmt: skip


# -- over a real socket --------------------------------------------------------------------------

PREFIX = "mdp3"


@pytest.fixture
def partitioned_api(suite_redis_url: str) -> Any:
    """An API and a worker of their own, with three partitions and a key prefix of their own
    (so the package's one-partition API and worker never take what these start)."""
    with own_deployment(suite_redis_url, PREFIX, MAJORDOMUS_PARTITIONS=str(PARTITIONS)) as (
        server,
        _,
    ):
        yield server


@pytest.mark.usefixtures("spawns")
def test_the_unscoped_channel_resumes_with_last_event_id_across_partitions(
    partitioned_api: ApiProcess,
) -> None:
    keys = Keys(PREFIX, PARTITIONS)
    with partitioned_api.client() as http:
        ids: list[str] = []
        finished: set[str] = set()

        def started_then_all_done(message: Message) -> bool:
            if message.event == "stream.ready":
                while len({keys.partition_of(x).index for x in ids}) < 2 or len(ids) < 4:
                    ids.append(start(http, "executions.demonstrate", steps=2, delay_ms=30)["id"])
            elif not message.is_control and message.data["type"] in TERMINAL:
                finished.add(message.data["execution_id"])
            return bool(ids) and finished >= set(ids)

        status, collected = read_stream(http, until=started_then_all_done)
        assert status == 200
        ours = [m for m in collected if not m.is_control and m.data["execution_id"] in ids]
        for m in ours:
            parts = (m.id or "").split("_")
            assert len(parts) == PARTITIONS and all(p.count("-") == 1 for p in parts), m.id
        for execution_id in ids:
            seqs = [m.data["sequence"] for m in ours if m.data["execution_id"] == execution_id]
            assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 10
        # Resume after a few points: exactly the rest, nothing twice, each execution in order.
        for middle in (1, len(ours) // 3, len(ours) // 2, len(ours) - 1):
            left = [(m.data["execution_id"], m.data["sequence"]) for m in ours[middle:]]
            seen: list[tuple[str, int]] = []

            def all_seen(message: Message, left: Any = left, seen: Any = seen) -> bool:
                if not message.is_control and message.data["execution_id"] in ids:
                    seen.append((message.data["execution_id"], message.data["sequence"]))
                return len(seen) >= len(left)

            cursor = ours[middle - 1].id or ""
            status, resumed = read_stream(http, headers={"Last-Event-ID": cursor}, until=all_seen)
            assert status == 200
            assert resumed[0].data["data"]["replayed"] == len(left)
            assert sorted(seen) == sorted(left) and len(set(seen)) == len(seen)
            for execution_id in ids:
                assert [s for x, s in seen if x == execution_id] == [
                    s for x, s in left if x == execution_id
                ]
        # A cursor of another number of partitions is refused, as a malformed one.
        for cursor in ("1733000000000-0", "1-0_2-0_3-0_4-0"):
            response = http.get(
                "/events",
                headers={"Accept": "text/event-stream", "Last-Event-ID": cursor},
            )
            assert response.status_code == 400
            assert response.json()["error"]["code"] == "invalid_input"
