"""Scenario "history": one full page of an execution's events over HTTP, against raw XRANGE.

Ours: `GET /api/v1/executions/events?id=<id>&limit=500` on a `majordomus serve` of its own,
sequential requests over one keep-alive `httpx.AsyncClient`, each timed from the call to
the parsed-enough-to-use answer (the body read; not decoded into Python objects, which would
be the client's cost, not the API's). The execution is a real one: `bench.emit` with 600
progress reports run by a majordomus worker, so its stream holds its newest 500 events (the
cap) and the page is 500 events, about 115 kB of JSON.

Baseline: what a caller with Redis itself would do for the same page from redis-py's asyncio
client in this process: `XRANGE <stream> - + COUNT 500` and `msgspec.json.decode` of each
entry's envelope. The two alternate request by request, so noise falls on both alike. What
the API adds over the baseline is the HTTP round trip, routing and input checks, the state
read beside the range (one `MULTI` pipeline), the typed decode of each event and the encode
of the page.
"""

from __future__ import annotations

import asyncio
import gc
import time

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
GOAL_RATIO = 3.0


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


async def _measure(
    bench: Bench, base_url: str, execution_id: str, requests: int
) -> tuple[list[float], list[float], int]:
    """Alternating timings (seconds) of the API's page and of the raw read; the page's size."""
    stream = Keys(bench.prefix).events(execution_id)
    params = {"id": execution_id, "limit": str(PAGE)}
    url = f"{base_url}/api/v1/executions/events"
    ours: list[float] = []
    raw: list[float] = []
    size = 0
    redis = bench.redis()
    # This process's own full collections would fall on either side at random.
    gc.disable()
    try:
        async with httpx.AsyncClient(timeout=10) as http:
            for i in range(WARMUP + requests):
                t0 = time.perf_counter()
                response = await http.get(url, params=params)
                body = response.content
                t1 = time.perf_counter()
                entries = await redis.xrange(stream, "-", "+", count=PAGE)
                decoded = [msgspec.json.decode(fields[b"e"]) for _, fields in entries]
                t2 = time.perf_counter()
                if response.status_code != 200:
                    raise RuntimeError(
                        f"executions.events answered {response.status_code}: {body[:300]!r}"
                    )
                if len(decoded) != PAGE:
                    raise RuntimeError(f"the raw read found {len(decoded)} events, not {PAGE}")
                if i < WARMUP:
                    if i == 0:
                        found = len(msgspec.json.decode(body)["events"])
                        if found != PAGE:
                            raise RuntimeError(f"the API's page holds {found} events, not {PAGE}")
                        size = len(body)
                    continue
                ours.append(t1 - t0)
                raw.append(t2 - t1)
    finally:
        gc.enable()
        await redis.aclose()
    return ours, raw, size


async def run(bench: Bench) -> list[Row]:
    requests = bench.size(1000, 30)
    with children() as kids:
        api, base_url = api_server(bench)
        kids.append(api)
        kids.append(majordomus_worker(bench, max_jobs=1))
        await wait_for_workers(bench, 1)
        execution_id = await _produce(bench)
        await wait_for_api(base_url, api)
        ours, raw, size = await _measure(bench, base_url, execution_id, requests)
    bench.note(
        f"history: {requests:,} sequential GET /api/v1/executions/events?limit={PAGE} "
        f"({size:,} bytes each) on one keep-alive httpx client after {WARMUP} warm-up "
        f"requests, alternating with raw redis-py XRANGE COUNT {PAGE} + msgspec decode of "
        "each entry; times from call to body read, with this process's cyclic GC off while it "
        "times (its pauses would land on either side at random)."
    )
    rows: list[Row] = []
    for p in (50, 99):
        mine, base = ms(percentile(ours, p)), ms(percentile(raw, p))
        goal, met = "", None
        if p == 99:
            goal = f"< {GOAL_P99_MS:g} ms and < {GOAL_RATIO:g}x raw"
            met = mine < GOAL_P99_MS and mine < GOAL_RATIO * base
        rows.append(
            Row(
                "history",
                f"p{p} {PAGE}-event page",
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
