"""Scenario "history": one full page of an execution's events over HTTP, against raw XRANGE.

Ours: `GET /api/v1/executions/events?id=<id>&limit=500` on a `majordomus serve` of its own,
sequential requests over one keep-alive connection, each timed from the call to the
parsed-enough-to-use answer (the body read; not decoded into Python objects, which would
be the client's cost, not the API's). Two clients, each its own rows: a minimal HTTP/1.1
client on an asyncio stream (status line, headers, `content-length`, the body: what the
live scenario's clients are, so the figure is the API's and not a client library's), and
one `httpx.AsyncClient` (what a Python caller would use; httpx alone adds about a
millisecond a request). The execution is a real one: `bench.emit` with 600 progress
reports run by a majordomus worker, so its stream holds its newest 500 events (the cap)
and the page is 500 events, about 115 kB of JSON.

Baseline: what a caller with Redis itself would do for the same page from redis-py's asyncio
client in this process: `XRANGE <stream> - + COUNT 500` and `msgspec.json.decode` of each
entry's envelope. The three alternate request by request, so noise falls on all alike. What
the API adds over the baseline is the HTTP round trip, routing and input checks, the state
read beside the range (one `MULTI` pipeline) and one encode of the page, whose events are
the stored bytes as they are (no decode, no re-encode).
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from urllib.parse import urlencode, urlsplit

import httpx
import msgspec

from bench.harness import (
    Bench,
    Row,
    api_server,
    children,
    majordomus_worker,
    ms,
    percentile,
    read_http_answer,
    wait_for_api,
    wait_for_workers,
)
from majordomus.states import FINAL
from majordomus.store.keys import Keys

PAGE = 500
"""Events in the page asked for: the stream's cap and the page bound."""
REPORTS = 600
"""Progress reports of the execution: more than the cap, so the stream is full."""
WARMUP = 20
"""Requests of each kind made and thrown away first (connections, caches, scripts)."""
GOAL_P99_MS = 10.0
GOAL_RATIO = 1.5


class PlainHttp:
    """A minimal HTTP/1.1 client on one keep-alive connection: a GET and its body."""

    def __init__(
        self, host: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.host = host
        self.reader = reader
        self.writer = writer

    @classmethod
    async def connect(cls, base_url: str) -> PlainHttp:
        where = urlsplit(base_url)
        streams = await asyncio.open_connection(where.hostname, where.port)
        return cls(where.netloc, *streams)

    async def get(self, target: str) -> tuple[int, bytes]:
        self.writer.write(f"GET {target} HTTP/1.1\r\nHost: {self.host}\r\n\r\n".encode())
        return await read_http_answer(self.reader)

    async def aclose(self) -> None:
        self.writer.close()
        with contextlib.suppress(OSError):
            await self.writer.wait_closed()


Timings = dict[str, list[float]]


async def _produce(bench: Bench) -> str:
    """A finished `bench.emit` execution whose stream holds a full page; answers its id."""
    async with bench.engine() as engine:
        started = await engine.start("bench.emit", {"events": REPORTS})
        deadline = time.monotonic() + 30
        while (await engine.store.states([started.id]))[0] not in FINAL:
            if time.monotonic() > deadline:
                raise RuntimeError("bench.emit did not finish within 30 s")
            await asyncio.sleep(0.005)
        return started.id


def _checked(status: int, body: bytes) -> bytes:
    if status != 200:
        raise RuntimeError(f"executions.events answered {status}: {body[:300]!r}")
    return body


async def _measure(
    bench: Bench, base_url: str, execution_id: str, requests: int
) -> tuple[Timings, int]:
    """Alternating timings (seconds) of the API's page over each client and of the raw
    read; the page's size."""
    stream = Keys(bench.prefix).events(execution_id)
    params = {"id": execution_id, "limit": str(PAGE)}
    url = f"{base_url}/api/v1/executions/events"
    target = f"/api/v1/executions/events?{urlencode(params)}"
    timings: Timings = {"plain": [], "httpx": [], "raw": []}
    size = 0
    redis = bench.redis()
    plain = await PlainHttp.connect(base_url)
    # This process's own full collections would fall on either side at random.
    gc.disable()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            for i in range(WARMUP + requests):
                t0 = time.perf_counter()
                body = _checked(*await plain.get(target))
                t1 = time.perf_counter()
                response = await http.get(url, params=params)
                _checked(response.status_code, response.content)
                t2 = time.perf_counter()
                entries = await redis.xrange(stream, "-", "+", count=PAGE)
                decoded = [msgspec.json.decode(fields[b"e"]) for _, fields in entries]
                t3 = time.perf_counter()
                if len(decoded) != PAGE:
                    raise RuntimeError(f"the raw read found {len(decoded)} events, not {PAGE}")
                if i < WARMUP:
                    if i == 0:
                        found = len(msgspec.json.decode(body)["events"])
                        if found != PAGE:
                            raise RuntimeError(f"the API's page holds {found} events, not {PAGE}")
                        if response.content != body:
                            raise RuntimeError("httpx and the plain client got different pages")
                        size = len(body)
                    continue
                timings["plain"].append(t1 - t0)
                timings["httpx"].append(t2 - t1)
                timings["raw"].append(t3 - t2)
    finally:
        gc.enable()
        await plain.aclose()
        await redis.aclose()
    return timings, size


async def run(bench: Bench) -> list[Row]:
    requests = bench.size(1000, 30)
    with children() as kids:
        api, base_url = api_server(bench)
        kids.append(api)
        kids.append(majordomus_worker(bench, max_jobs=1))
        await wait_for_workers(bench, 1)
        execution_id = await _produce(bench)
        await wait_for_api(base_url, api)
        timings, size = await _measure(bench, base_url, execution_id, requests)
    bench.note(
        f"history: {requests:,} sequential GET /api/v1/executions/events?limit={PAGE} "
        f"({size:,} bytes each) after {WARMUP} warm-up requests, on one keep-alive "
        "connection of a minimal HTTP/1.1 client and on one of httpx, alternating with raw "
        f"redis-py XRANGE COUNT {PAGE} + msgspec decode of each entry; times from call to body "
        "read, with this process's cyclic GC off while it times (its pauses would land on "
        "either side at random)."
    )
    rows: list[Row] = []
    raw = timings["raw"]
    for client, label in (("plain", ""), ("httpx", ", httpx")):
        for p in (50, 99):
            mine, base = ms(percentile(timings[client], p)), ms(percentile(raw, p))
            goal, met = "", None
            if p == 99:
                goal = f"< {GOAL_P99_MS:g} ms and < {GOAL_RATIO:g}x raw"
                met = mine < GOAL_P99_MS and mine < GOAL_RATIO * base
            rows.append(
                Row(
                    "history",
                    f"p{p} {PAGE}-event page{label}",
                    mine,
                    "ms",
                    baseline=base,
                    baseline_name=f"raw XRANGE COUNT {PAGE} + decode",
                    goal=goal,
                    met=met,
                    higher_is_better=False,
                )
            )
    return rows
