"""Scenario "memory": what a finished execution costs Redis, and whether the API's memory
stays flat while it streams a million events.

Redis: executions of `bench.emit` with 600 progress reports each (604 events with the
lifecycle, of which the stream keeps the last 500) run to the end on a worker; then
`MEMORY USAGE ... SAMPLES 0` (exact, every stream node counted) is summed over each
execution's own keys (`keys.Keys.execution_keys`: the snapshot, the event stream, and the
worker-only input, which the terminal append deletes). Two bare streams written raw with
`XADD <key> MAXLEN 500 *` of the same 604 events are the baselines: one whose entries are
our very envelopes (so the ratio is what the store adds to the events it keeps: the snapshot,
its own entry ids), and one whose entries carry only each event's type and data (so the
ratio is the cost of the envelope as well). The global feed and the indexes are shared by
every execution and capped or tiny: they are reported apart (bytes per feed entry), not
amortised into an execution's figure.

API: `majordomus serve` and a worker, with several unscoped live channels (`GET /events`)
held open by raw asyncio sockets that count the `execution.*` events they receive. Executions
of `bench.emit` run one after the other, each starting once every listener has received
all of the previous one (a listener left behind catches up from the feed, which then still
holds what it missed, so nothing is dropped), until the listeners have together received a
million events (20,000 in a quick run). The API's RSS is sampled at the start (channels
open, no event yet), every half second, and at the end. It deliberately does not time the
delivery (the live scenario does).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from urllib.parse import urlsplit

import msgspec

from bench.harness import (
    Bench,
    Child,
    Row,
    api_server,
    children,
    majordomus_worker,
    median,
    wait_for_api,
    wait_for_workers,
)
from majordomus.config import LIMITS
from majordomus.engine import Engine

MiB = 2**20
EVENTS_PER_EXECUTION = 600
"""Progress reports of each execution measured in Redis: more than the stream keeps."""
RSS_GROWTH_BOUND_MIB = 50
"""The API's RSS may grow this much at most while streaming. Everything the live channel
holds is bounded by design (at most `LISTENER_BUFFER` entries per listener, a feed page of
`FEED_PAGE` entries per read): a few MiB for the listeners here. What grows with the events
streamed is a leak, and a leak of 50 bytes a delivery would show as 50 MiB over a million."""
ENVELOPE_GROWTH_BOUND = 1.1
"""What the store adds to the envelopes it keeps (a snapshot, its own ids): at most 10 %."""
LISTENED = b"\nevent: execution."
LAGGED = b"event: stream.lagged"
SAMPLE_SECONDS = 0.5


async def run(bench: Bench) -> list[Row]:
    with children() as kids:
        api, base_url = api_server(bench)
        kids.append(api)
        kids.append(majordomus_worker(bench, max_jobs=10))
        await wait_for_api(base_url, api)
        await wait_for_workers(bench, 1)
        async with bench.engine() as engine:
            rows = await _redis_bytes(bench, engine)
            rows += await _api_rss(bench, engine, api, base_url)
    return rows


# -- Redis bytes per execution ----------------------------------------------------------------


async def _redis_bytes(bench: Bench, engine: Engine) -> list[Row]:
    count = bench.size(20, 5)
    keys = engine.store.keys
    redis = engine.redis
    started = [
        await engine.start("bench.emit", {"events": EVENTS_PER_EXECUTION}) for _ in range(count)
    ]
    ids = []
    for snap in started:
        final = await engine.wait(snap.id, timeout_ms=60_000)
        if final.state != "succeeded":
            raise RuntimeError(f"bench.emit ended {final.state}: {final.error}")
        ids.append(snap.id)
    per_execution = []
    snapshot_bytes = []
    for execution_id in ids:
        sizes = [await redis.memory_usage(k, samples=0) for k in keys.execution_keys(execution_id)]
        per_execution.append(sum(s or 0 for s in sizes))
        snapshot_bytes.append(sizes[0] or 0)
    kept = await redis.xlen(keys.events(ids[0]))
    last_seq = int(await redis.hget(keys.snapshot(ids[0]), "last_seq"))  # type: ignore[misc]
    entries = await redis.xrange(keys.events(ids[0]), "-", "+")
    envelopes = [fields[b"e"] for _, fields in entries]
    # The events the stream no longer keeps are written raw too, as copies of the oldest
    # kept one (the same size within a few bytes), so the raw streams see as many XADDs.
    written = [envelopes[0]] * (last_seq - len(envelopes)) + envelopes
    as_envelopes = await _raw_stream(bench, [{"e": e} for e in written])
    as_data = await _raw_stream(bench, [_type_and_data(e) for e in written])
    feeds = [part.feed for part in keys.partitions]
    feed_bytes = sum([await redis.memory_usage(feed, samples=0) or 0 for feed in feeds])
    feed_entries = sum([await redis.xlen(feed) for feed in feeds])
    ours = median(per_execution)
    bench.note(
        f"memory: {count} executions of {EVENTS_PER_EXECUTION} progress reports each "
        f"({kept} events kept of {last_seq}); per execution = MEMORY USAGE "
        f"(SAMPLES 0) of its snapshot ({median(snapshot_bytes):,.0f} B), event stream and input "
        "key (deleted when it ends), median over the executions. The global feed "
        f"({feed_bytes / max(feed_entries, 1):,.0f} B an entry here, capped near "
        f"{engine.settings.feed_max_events:,} entries: about "
        f"{feed_bytes / max(feed_entries, 1) * engine.settings.feed_max_events / MiB:.1f} MiB "
        "at its cap) and the indexes (a sorted-set member or two per execution) are shared "
        "and not counted in it. Baselines: the same events XADDed raw (MAXLEN 500) into a "
        "bare stream, as our envelopes, and as {type, data} only."
    )
    return [
        Row(
            "memory",
            f"Redis bytes per finished execution ({kept} events kept)",
            ours,
            "B",
            baseline=as_envelopes,
            baseline_name="bare stream of the same envelopes",
            goal=f"<= {ENVELOPE_GROWTH_BOUND}x raw",
            met=ours <= ENVELOPE_GROWTH_BOUND * as_envelopes,
        ),
        Row(
            "memory",
            f"Redis bytes per finished execution ({kept} events kept)",
            ours,
            "B",
            baseline=as_data,
            baseline_name="bare stream of {type, data} only",
        ),
        Row(
            "memory",
            "global feed, bytes per entry",
            feed_bytes / max(feed_entries, 1),
            "B",
            baseline=as_envelopes / kept,
            baseline_name="bare stream of envelopes, per entry",
        ),
    ]


def _type_and_data(envelope: bytes) -> dict[str, bytes]:
    event = msgspec.json.decode(envelope)
    data = event.get("data")
    return {"type": event["type"].encode(), "data": msgspec.json.encode(data) if data else b""}


async def _raw_stream(bench: Bench, entries: list[dict[str, bytes]]) -> float:
    """MEMORY USAGE of a bare stream the entries were XADDed to raw, capped at 500."""
    client = bench.redis()
    key = f"{bench.prefix}:bench:raw-memory"
    try:
        await client.delete(key)
        async with client.pipeline(transaction=False) as pipe:
            for fields in entries:
                pipe.xadd(key, fields, maxlen=LIMITS.stream_events, approximate=False)
            await pipe.execute()
        size = await client.memory_usage(key, samples=0)
        await client.delete(key)
    finally:
        await client.aclose()
    return float(size or 0)


# -- the API's RSS while streaming --------------------------------------------------------------


class SseCounter:
    """One live channel over a raw socket, counting the `execution.*` events it receives."""

    def __init__(self, base_url: str, path: str = "/events") -> None:
        parts = urlsplit(base_url)
        self.host = parts.hostname or "127.0.0.1"
        self.port = parts.port or 80
        self.path = path
        self.received = 0
        self.lagged = 0
        self.ready = asyncio.Event()
        self.task: asyncio.Task[None] | None = None
        self.error: BaseException | None = None

    def open(self) -> None:
        self.task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        reader, writer = await asyncio.open_connection(self.host, self.port)
        try:
            writer.write(
                f"GET {self.path} HTTP/1.1\r\nHost: {self.host}:{self.port}\r\n"
                "Accept: text/event-stream\r\n\r\n".encode()
            )
            head = await reader.readuntil(b"\r\n\r\n")
            if not head.startswith(b"HTTP/1.1 200"):
                raise RuntimeError(f"the live channel answered {head[:40]!r}")
            # Chunk framing never splits a pattern: the API sends whole SSE messages per chunk.
            # The tail carried over is shorter than a pattern, so nothing is counted twice.
            carry = len(LISTENED) - 1
            tail = b""
            while data := await reader.read(1 << 16):
                buf = tail + data
                self.received += buf.count(LISTENED)
                self.lagged += buf.count(LAGGED)
                if not self.ready.is_set() and b"stream.ready" in buf:
                    self.ready.set()
                tail = buf[-carry:]
        except BaseException as exc:
            self.error = exc
            raise
        finally:
            writer.close()

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            with contextlib.suppress(BaseException):
                await self.task


async def _api_rss(bench: Bench, engine: Engine, api: Child, base_url: str) -> list[Row]:
    listeners = bench.size(10, 4)
    per_execution = bench.size(5_000, 1_000)
    deliveries_goal = bench.size(1_000_000, 20_000)
    counters = [SseCounter(base_url) for _ in range(listeners)]
    for counter in counters:
        counter.open()
    samples: list[tuple[float, int]] = []
    sampler: asyncio.Task[None] | None = None
    try:
        await asyncio.wait_for(asyncio.gather(*(c.ready.wait() for c in counters)), 30)
        start_rss = api.rss()
        samples.append((0.0, start_rss))
        sampler = asyncio.create_task(_sample(api, samples))
        t0 = time.monotonic()
        expected = 0
        warm_rss: int | None = None
        while expected * listeners < deliveries_goal:
            snap = await engine.start("bench.emit", {"events": per_execution})
            final = await engine.wait(snap.id, timeout_ms=60_000)
            if final.state != "succeeded":
                raise RuntimeError(f"bench.emit ended {final.state}: {final.error}")
            expected += final.last_sequence
            await _drained(counters, expected)
            if warm_rss is None and expected * listeners >= deliveries_goal / 10:
                warm_rss = api.rss()
        elapsed = time.monotonic() - t0
        end_rss = api.rss()
        samples.append((elapsed, end_rss))
    finally:
        if sampler is not None:
            sampler.cancel()
            with contextlib.suppress(BaseException):
                await sampler
        for counter in counters:
            await counter.close()
    delivered = sum(c.received for c in counters)
    lagged = sum(c.lagged for c in counters)
    peak = max(rss for _, rss in samples)
    warm = warm_rss if warm_rss is not None else start_rss
    bench.note(
        f"memory: {listeners} unscoped live channels (raw sockets) received {delivered:,} "
        f"execution events ({delivered // listeners:,} each, {lagged} stream.lagged) in "
        f"{elapsed:.1f} s, from executions of {per_execution:,} reports run one after the "
        f"other; the API's RSS {start_rss / MiB:.1f} MiB at the start (channels open), "
        f"{warm / MiB:.1f} after the first tenth, peak {peak / MiB:.1f}, "
        f"{end_rss / MiB:.1f} at the end ({len(samples)} samples every {SAMPLE_SECONDS} s)."
    )
    growth = (peak - start_rss) / MiB
    return [
        Row(
            "memory",
            f"API RSS growth over {delivered:,} live deliveries (peak - start)",
            growth,
            "MiB",
            baseline=start_rss / MiB,
            baseline_name="API RSS at the start",
            goal=f"< {RSS_GROWTH_BOUND_MIB} MiB growth",
            met=growth < RSS_GROWTH_BOUND_MIB,
            higher_is_better=False,
        ),
        Row(
            "memory",
            "API RSS at the end",
            end_rss / MiB,
            "MiB",
            baseline=warm / MiB,
            baseline_name="API RSS after the first tenth",
            higher_is_better=False,
        ),
    ]


async def _sample(api: Child, samples: list[tuple[float, int]]) -> None:
    t0 = time.monotonic()
    while True:
        await asyncio.sleep(SAMPLE_SECONDS)
        samples.append((time.monotonic() - t0, api.rss()))


async def _drained(counters: list[SseCounter], expected: int, timeout: float = 60) -> None:
    """Until every listener has received `expected` events (or died, or time ran out)."""
    deadline = time.monotonic() + timeout
    while any(c.received < expected for c in counters):
        for c in counters:
            if c.task is not None and c.task.done():
                raise RuntimeError(f"a live channel ended early: {c.error!r}")
        if time.monotonic() > deadline:
            short = min(c.received for c in counters)
            raise RuntimeError(f"a live channel received {short} of {expected} events")
        await asyncio.sleep(0.01)
