"""Scenario "live": from an event appended to the same event parsed by a live-channel client.

Ours: an execution of `bench.hold`, claimed by this process as if it were a worker (no
worker runs, so nothing else writes), gets progress reports appended through the store
(`Store.append`, the call a worker's context makes) one at a time, each carrying in its
`message` the wall-clock time taken just before the append. Clients of `GET /events?
execution=<id>` on a `majordomus serve` of its own take the time again when they parse the
event; the latency is the difference (same machine, same clock). First one listener,
in this process; then many (1,000 in a full run) on the same API process, each event's
latency measured at every listener, p50/p99 over all deliveries.

The clients are deliberately lightweight: raw asyncio protocols that speak just enough
HTTP/1.1 (chunked) and SSE to find an event's type and data, and decode only the progress
events' data with msgspec. The many listeners live in `CLIENT_PROCESSES` child processes of
`python -m bench.live listen` (this module), so that one Python client loop is not the
bottleneck being measured. With two cores shared by the API, Redis and the clients, the
many-listener figure is still partly the clients' CPU; the baseline pays the same.

Baselines, the same event delivered by Redis alone:
- one listener: `XADD <stream> MAXLEN 500` of an envelope of the same size (stamped the same
  way) read by a redis-py `XREAD BLOCK` loop in this process: what the API's shared feed
  reader itself waits on. The two alternate event by event.
- many listeners: `PUBLISH` of the same envelope to as many raw-socket `SUBSCRIBE` clients,
  spread over the same child processes with the same minimal parsing (RESP instead of SSE):
  Redis fanning one event out to 1,000 connections, with no server of ours in between.

Events are spaced (`ONE_GAP`, `MANY_GAP`) so each is measured alone rather than queued
behind the previous one's fan-out: this is latency, not throughput.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import msgspec

from bench.harness import (
    Bench,
    Child,
    Row,
    api_server,
    children,
    ms,
    percentile,
    wait_for_api,
)
from majordomus.engine import LIVE_PATH, Engine
from majordomus.model import ProgressView

GOAL_ONE_P99_MS = 10.0
GOAL_MANY_P99_MS = 100.0
GOAL_MANY_RATIO = 2.0
"""The many listeners' p99 at most this many times raw PUBLISH's to as many subscribers."""
CLIENT_PROCESSES = 2
"""Child processes the many listeners (and the many baseline subscribers) are spread over."""
ONE_GAP = 0.005
"""Seconds between one event's delivery and the next append, one listener."""
MANY_GAP = 0.25
"""Seconds between appends, many listeners (longer than one fan-out takes)."""
CONNECT_BATCH = 100
"""Connections a client process opens at once."""
WORKER = "bench-live"
"""The worker id this process claims the execution as."""
PROGRESS = b"execution.progress"


class _Data(msgspec.Struct):
    message: str | None = None


class _Envelope(msgspec.Struct):
    data: _Data | None = None


_envelope = msgspec.json.Decoder(_Envelope)


def stamp_of(envelope: bytes) -> float | None:
    """The send time a progress envelope carries in its message, or None."""
    data = _envelope.decode(envelope).data
    if data is None or not data.message:
        return None
    return float(data.message)


OnEvent = Callable[[float], None]
"""Called with an event's latency in seconds when a client parses it."""


# -- the clients ------------------------------------------------------------------------------


class SseClient(asyncio.Protocol):
    """One live-channel client: HTTP/1.1 chunked, SSE, progress events' stamps."""

    def __init__(self, request: bytes, want: int, on_event: OnEvent | None = None) -> None:
        self.request = request
        self.want = want
        self.on_event = on_event
        self.latencies: list[float] = []
        self.ready: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._raw = bytearray()
        self._body = bytearray()
        self._headers = False
        self._chunk = -1
        """Bytes left of the current chunk's data (-1: a size line comes next)."""

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.request)

    def connection_lost(self, exc: Exception | None) -> None:
        for future in (self.ready, self.done):
            if not future.done():
                future.set_exception(ConnectionError(f"the live channel closed early ({exc})"))

    def data_received(self, data: bytes) -> None:
        raw = self._raw
        raw += data
        if not self._headers:
            end = raw.find(b"\r\n\r\n")
            if end < 0:
                return
            head = bytes(raw[:end]).lower()
            if not head.startswith(b"http/1.1 200") or b"chunked" not in head:
                self._fail(f"unexpected answer: {bytes(raw[:300])!r}")
                return
            del raw[: end + 4]
            self._headers = True
        while raw:
            if self._chunk < 0:
                end = raw.find(b"\r\n")
                if end < 0:
                    break
                self._chunk = int(raw[:end], 16)
                del raw[: end + 2]
                if self._chunk == 0:
                    break
            if len(raw) < self._chunk + 2:
                break
            self._body += raw[: self._chunk]
            del raw[: self._chunk + 2]
            self._chunk = -1
        self._events()

    def _events(self) -> None:
        body = self._body
        while True:
            end = body.find(b"\n\n")
            if end < 0:
                return
            message = bytes(body[:end])
            del body[: end + 2]
            kind = data = b""
            for line in message.split(b"\n"):
                if line.startswith(b"event: "):
                    kind = line[7:]
                elif line.startswith(b"data: "):
                    data = line[6:]
            if kind == PROGRESS:
                self._progress(data)
            elif kind == b"stream.ready" and not self.ready.done():
                self.ready.set_result(None)

    def _progress(self, envelope: bytes) -> None:
        sent = stamp_of(envelope)
        if sent is None:
            return
        latency = time.time() - sent
        self.latencies.append(latency)
        if self.on_event is not None:
            self.on_event(latency)
        if len(self.latencies) >= self.want and not self.done.done():
            self.done.set_result(None)
            if self.transport is not None:
                self.transport.close()

    def _fail(self, why: str) -> None:
        for future in (self.ready, self.done):
            if not future.done():
                future.set_exception(RuntimeError(why))
        if self.transport is not None:
            self.transport.close()


class SubscribeClient(SseClient):
    """One raw Redis pub/sub subscriber: RESP2 arrays of bulk strings and integers."""

    def data_received(self, data: bytes) -> None:
        raw = self._raw
        raw += data
        while raw:
            parsed = resp_array(raw)
            if parsed is None:
                return
            items, used = parsed
            del raw[:used]
            if isinstance(items[0], Exception):
                self._fail(f"Redis refused: {items[0]}")
                return
            if items[0] == b"message":
                self._progress(items[2])
            elif items[0] == b"subscribe" and not self.ready.done():
                self.ready.set_result(None)


def resp_array(buf: bytearray) -> tuple[list[Any], int] | None:
    """The RESP2 array at the start of `buf` and its length in bytes; None if incomplete."""
    end = buf.find(b"\r\n")
    if end < 0:
        return None
    if buf[:1] == b"+":  # AUTH's OK
        return [b"ok"], end + 2
    if buf[:1] == b"-":
        return [RuntimeError(bytes(buf[1:end]).decode(errors="replace"))], end + 2
    if buf[:1] != b"*":
        raise ValueError(f"not a RESP array: {bytes(buf[:40])!r}")
    count = int(buf[1:end])
    pos = end + 2
    items: list[Any] = []
    for _ in range(count):
        end = buf.find(b"\r\n", pos)
        if end < 0:
            return None
        kind = buf[pos : pos + 1]
        if kind == b"$":
            start = end + 2
            stop = start + int(buf[pos + 1 : end])
            if len(buf) < stop + 2:
                return None
            items.append(bytes(buf[start:stop]))
            pos = stop + 2
        else:
            items.append(int(buf[pos + 1 : end]))
            pos = end + 2
    return items, pos


def sse_request(host: str, port: int, path: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n\r\n"
    ).encode()


def resp_command(*words: str) -> bytes:
    out = [b"*%d\r\n" % len(words)]
    for word in words:
        raw = word.encode()
        out.append(b"$%d\r\n%s\r\n" % (len(raw), raw))
    return b"".join(out)


def subscribe_request(channel: str, username: str | None, password: str | None) -> bytes:
    auth = b""
    if password:
        auth = resp_command("AUTH", *([username] if username else []), password)
    return auth + resp_command("SUBSCRIBE", channel)


async def open_clients(
    host: str, port: int, make: Callable[[], SseClient], count: int, timeout: float = 60
) -> list[SseClient]:
    """`count` clients connected and ready (the live channel's `stream.ready` was parsed,
    or the subscription confirmed), opened `CONNECT_BATCH` at a time."""
    loop = asyncio.get_running_loop()
    clients: list[SseClient] = []
    deadline = time.monotonic() + timeout
    while len(clients) < count:
        batch = [make() for _ in range(min(CONNECT_BATCH, count - len(clients)))]
        await asyncio.gather(*(loop.create_connection(lambda c=c: c, host, port) for c in batch))
        left = max(0.1, deadline - time.monotonic())
        await asyncio.wait_for(asyncio.gather(*(c.ready for c in batch)), left)
        clients.extend(batch)
    return clients


def raise_fd_limit(wanted: int) -> None:
    """Raise the soft limit of open files to `wanted` (within the hard limit) if it is lower."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        top = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (top, hard))


async def listen(args: argparse.Namespace) -> None:
    """A client process: connect, say `ready`, collect `want` events each (or give up after
    `idle` seconds without one), write the latencies to `out` as JSON."""
    raise_fd_limit(args.count + 64)
    if args.mode == "sse":
        request = sse_request(args.host, args.port, args.target)
        make: Callable[[], SseClient] = lambda: SseClient(request, args.want)  # noqa: E731
    else:
        where = urlsplit(args.redis_url)
        request = subscribe_request(args.target, where.username, where.password)
        make = lambda: SubscribeClient(request, args.want)  # noqa: E731
    clients = await open_clients(args.host, args.port, make, args.count)
    print("ready", flush=True)
    done = [c.done for c in clients]
    seen = -1
    while True:
        pending = [d for d in done if not d.done()]
        if not pending:
            break
        total = sum(len(c.latencies) for c in clients)
        if total == seen:
            break
        seen = total
        await asyncio.wait(pending, timeout=args.idle)
    latencies = [x for c in clients for x in c.latencies]
    for c in clients:
        if c.transport is not None:
            c.transport.close()
    missing = args.count * args.want - len(latencies)
    Path(args.out).write_text(json.dumps({"latencies": latencies, "missing": missing}))


# -- the measurements -------------------------------------------------------------------------


async def _claimed_execution(engine: Engine) -> str:
    """A `bench.hold` execution, running as claimed by this process (no worker touches it)."""
    started = await engine.start("bench.hold", {"seconds": 3600})
    result, _ = await engine.store.claim(started.id, WORKER)
    if not result.complete:
        raise RuntimeError(f"could not claim {started.id}: {result}")
    return started.id


async def _append_stamped(engine: Engine, execution_id: str, current: int, total: int) -> None:
    sent = time.time()
    data = msgspec.json.encode(ProgressView(current, total, repr(sent)))
    result = await engine.store.append(execution_id, [("execution.progress", data)], WORKER)
    if not result.complete:
        raise RuntimeError(f"the append to {execution_id} was refused: {result}")


def _stamped(template: dict[str, Any]) -> bytes:
    template["data"]["message"] = repr(time.time())
    return msgspec.json.encode(template)


class _Arrivals:
    """Counts deliveries and wakes whoever waits for the n-th."""

    def __init__(self) -> None:
        self.count = 0
        self.latencies: list[float] = []
        self._changed = asyncio.Event()

    def __call__(self, latency: float) -> None:
        self.count += 1
        self.latencies.append(latency)
        self._changed.set()

    async def reach(self, count: int, timeout: float = 5) -> None:
        deadline = time.monotonic() + timeout
        while self.count < count:
            self._changed.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise RuntimeError(f"only {self.count} of {count} events arrived within {timeout}s")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._changed.wait(), left)


async def _one_listener(
    bench: Bench, engine: Engine, host: str, port: int, events: int
) -> tuple[list[float], list[float], dict[str, Any]]:
    """Our latencies and XREAD BLOCK's, alternating event by event; and a progress envelope
    of ours (decoded), the template of every baseline event."""
    execution_id = await _claimed_execution(engine)
    ours = _Arrivals()
    path = f"{LIVE_PATH}?execution={execution_id}"
    (client,) = await open_clients(
        host, port, lambda: SseClient(sse_request(host, port, path), events, ours), 1
    )
    raw = _Arrivals()
    key = f"{bench.prefix}:bench:live-raw"
    reader_redis, writer_redis = bench.redis(), bench.redis()

    async def read_raw() -> None:
        last = "0-0"
        while raw.count < events:
            found = await reader_redis.xread({key: last}, block=5000, count=100)
            for _, entries in found or []:
                for entry_id, fields in entries:
                    sent = stamp_of(fields[b"e"])
                    if sent is not None:
                        raw(time.time() - sent)
                    last = entry_id

    reader = asyncio.create_task(read_raw())
    try:
        template: dict[str, Any] = {}
        for i in range(events):
            await _append_stamped(engine, execution_id, i + 1, events)
            await ours.reach(i + 1)
            if not template:
                stream = engine.store.keys.events(execution_id)
                newest = await engine.redis.xrevrange(stream, "+", "-", count=1)
                template = msgspec.json.decode(newest[0][1][b"e"])
            await writer_redis.xadd(key, {"e": _stamped(template)}, maxlen=500, approximate=False)
            await raw.reach(i + 1)
            await asyncio.sleep(ONE_GAP)
        await reader
    finally:
        reader.cancel()
        with contextlib.suppress(BaseException):
            await reader
        if client.transport is not None:
            client.transport.close()
        await reader_redis.aclose()
        await writer_redis.aclose()
    return ours.latencies, raw.latencies, template


def _clients(
    bench: Bench,
    mode: str,
    host: str,
    port: int,
    target: str,
    listeners: int,
    events: int,
    tag: str,
) -> list[tuple[Child, Path]]:
    spawned = []
    for n in range(CLIENT_PROCESSES):
        count = listeners // CLIENT_PROCESSES + (1 if n < listeners % CLIENT_PROCESSES else 0)
        if count == 0:
            continue
        out = bench.workdir / f"live-{tag}-{n}.json"
        argv = [
            sys.executable, "-m", "bench.live", "listen", "--mode", mode, "--host", host, "--port", str(port),
            "--target", target, "--count", str(count), "--want", str(events),
            "--out", str(out), "--redis-url", bench.redis_url,
        ]  # fmt: skip
        spawned.append((Child(f"live-{tag}-{n}", argv, bench.env(), bench.workdir), out))
    return spawned


async def _until_ready(spawned: list[tuple[Child, Path]], timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    for child, _ in spawned:
        while "ready" not in child.log():
            if not child.alive():
                raise RuntimeError(f"{child.name} exited early:\n{child.log()[-2000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{child.name} did not connect within {timeout}s")
            await asyncio.sleep(0.05)


async def _collect(
    spawned: list[tuple[Child, Path]], timeout: float = 60
) -> tuple[list[float], int]:
    deadline = time.monotonic() + timeout
    latencies: list[float] = []
    missing = 0
    for child, out in spawned:
        while child.alive() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if not out.exists():
            raise RuntimeError(f"{child.name} wrote no results:\n{child.log()[-2000:]}")
        found = json.loads(out.read_text())
        latencies.extend(found["latencies"])
        missing += found["missing"]
    return latencies, missing


async def _many_listeners(
    bench: Bench,
    engine: Engine,
    api: Child,
    base_url: str,
    listeners: int,
    events: int,
    gap: float,
) -> tuple[list[float], int, float]:
    """Latencies of every delivery, deliveries missing, and the API's CPU seconds per event."""
    port = int(base_url.rsplit(":", 1)[1])
    execution_id = await _claimed_execution(engine)
    target = f"{LIVE_PATH}?execution={execution_id}"
    spawned = _clients(bench, "sse", "127.0.0.1", port, target, listeners, events, "sse")
    try:
        await _until_ready(spawned)
        async with httpx.AsyncClient() as http:
            probe = (await http.get(f"{base_url}/api/v1/live")).json()
        if probe["channels"] < listeners:
            raise RuntimeError(f"the API holds {probe['channels']} channels, not {listeners}")
        cpu = api.cpu_seconds()
        for i in range(events):
            await _append_stamped(engine, execution_id, i + 1, events)
            await asyncio.sleep(gap)
        cpu = (api.cpu_seconds() - cpu) / events
        latencies, missing = await _collect(spawned)
        return latencies, missing, cpu
    finally:
        for child, _ in spawned:
            child.stop()


async def _many_subscribers(
    bench: Bench, listeners: int, events: int, gap: float, template: dict[str, Any]
) -> tuple[list[float], int]:
    where = urlsplit(bench.redis_url)
    host, port = where.hostname or "127.0.0.1", where.port or 6379
    channel = f"{bench.prefix}:bench:live-fanout"
    spawned = _clients(bench, "pubsub", host, port, channel, listeners, events, "pubsub")
    redis = bench.redis()
    try:
        await _until_ready(spawned)
        (_, subscribed), *_ = await redis.pubsub_numsub(channel)
        if subscribed < listeners:
            raise RuntimeError(f"{subscribed} subscribers, not {listeners}")
        for _ in range(events):
            await redis.publish(channel, _stamped(template))
            await asyncio.sleep(gap)
        return await _collect(spawned)
    finally:
        await redis.aclose()
        for child, _ in spawned:
            child.stop()


def _rows(
    label: str,
    ours: list[float],
    raw: list[float],
    baseline: str,
    goal_p99: float,
    goal_ratio: float | None = None,
) -> list[Row]:
    rows = []
    for p in (50, 99):
        mine, base = ms(percentile(ours, p)), ms(percentile(raw, p))
        goal, met = "", None
        if p == 99:
            goal, met = f"< {goal_p99:g} ms", mine < goal_p99
            if goal_ratio is not None:
                goal += f" and < {goal_ratio:g}x raw"
                met = met and mine < goal_ratio * base
        rows.append(
            Row(
                "live",
                f"p{p} appended -> parsed, {label}",
                mine,
                "ms",
                baseline=base,
                baseline_name=baseline,
                goal=goal,
                met=met,
                higher_is_better=False,
            )
        )
    return rows


async def run(bench: Bench) -> list[Row]:
    one_events = bench.size(200, 10)
    listeners = bench.size(1000, 20)
    many_events = bench.size(50, 10)
    gap = 0.05 if bench.quick else MANY_GAP
    if not bench.redis_url.startswith("redis://"):
        raise RuntimeError("the live scenario's raw subscribers need Redis on plain TCP")
    raise_fd_limit(listeners + 256)
    with children() as kids:
        api, base_url = api_server(bench, MAJORDOMUS_MAX_LIVE=str(listeners + 100))
        kids.append(api)
        host, port = "127.0.0.1", int(base_url.rsplit(":", 1)[1])
        await wait_for_api(base_url, api)
        async with bench.engine() as engine:
            one, one_raw, template = await _one_listener(bench, engine, host, port, one_events)
            many, missing, cpu = await _many_listeners(
                bench, engine, api, base_url, listeners, many_events, gap
            )
        many_raw, raw_missing = await _many_subscribers(
            bench, listeners, many_events, gap, template
        )
    bench.note(
        f"live: one listener, {one_events} events alternating with the XREAD BLOCK baseline; "
        f"{listeners:,} listeners on one API process over {CLIENT_PROCESSES} client processes "
        f"(raw asyncio protocols, minimal HTTP/SSE or RESP parsing), {many_events} events "
        f"{gap * 1000:g} ms apart, p50/p99 over every delivery; the baseline for them is "
        f"PUBLISH to {listeners:,} raw SUBSCRIBE connections in the same client processes. "
        f"The API process spent {ms(cpu):.1f} ms of CPU per event with {listeners:,} "
        "listeners: on its one core, that is the floor of the last listener's latency."
    )
    if missing or raw_missing:
        bench.note(
            f"live: deliveries that never arrived: {missing} of ours, {raw_missing} of the "
            "pub/sub baseline's (not counted in the percentiles)."
        )
    return _rows("1 listener", one, one_raw, "redis-py XREAD BLOCK", GOAL_ONE_P99_MS) + _rows(
        f"{listeners:,} listeners",
        many,
        many_raw,
        f"PUBLISH to {listeners:,} raw subscribers",
        GOAL_MANY_P99_MS,
        GOAL_MANY_RATIO,
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.live")
    sub = parser.add_subparsers(dest="command", required=True)
    client = sub.add_parser("listen", help="a process of many listeners (the scenario runs it)")
    client.add_argument("--mode", choices=("sse", "pubsub"), required=True)
    client.add_argument("--host", default="127.0.0.1")
    client.add_argument("--port", type=int, required=True)
    client.add_argument("--target", required=True, help="the channel's path, or a pub/sub channel")
    client.add_argument("--count", type=int, required=True)
    client.add_argument("--want", type=int, required=True)
    client.add_argument("--idle", type=float, default=15.0)
    client.add_argument("--out", required=True)
    client.add_argument("--redis-url", default="", help="pubsub: for its user and password")
    asyncio.run(listen(parser.parse_args(argv)))


if __name__ == "__main__":
    main()
