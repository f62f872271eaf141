"""A client following an execution over SSE while its connection to the API is cut and
while the API's own Redis is cut: reconnecting with `Last-Event-ID`, as `EventSource`
does, it receives every event exactly once, in order, with no gap."""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from httpx_sse import aconnect_sse

from tests.faults.conftest import TERMINAL_OF, Scenario, note
from tests.faults.workload import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.process]

TERMINAL = frozenset(TERMINAL_OF.values())


@dataclass
class Follower:
    """What one SSE client saw over all its connections."""

    events: list[dict[str, Any]] = field(default_factory=list)
    connections: int = 0
    refused: list[object] = field(default_factory=list)
    """Statuses or errors of the attempts that got no stream."""
    ended: list[str] = field(default_factory=list)
    """How each stream that was open ended."""
    last_id: str | None = None
    finished: bool = False


async def follow(base_url: str, execution_id: str, seen: Follower) -> None:
    """Follow the execution to its terminal event, reconnecting as a browser would."""
    timeout = httpx.Timeout(5, read=10)  # heartbeats come every second
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as client:
        while not seen.finished:
            headers = {"Accept": "text/event-stream"}
            if seen.last_id is not None:
                headers["Last-Event-ID"] = seen.last_id
            try:
                await follow_once(client, execution_id, headers, seen)
            except httpx.HTTPError as exc:
                seen.ended.append(type(exc).__name__)
            if not seen.finished:
                await asyncio.sleep(0.2)


async def follow_once(
    client: httpx.AsyncClient, execution_id: str, headers: dict[str, str], seen: Follower
) -> None:
    params = {"execution": execution_id}
    async with aconnect_sse(client, "GET", "/events", params=params, headers=headers) as source:
        status = source.response.status_code
        if status == 204:  # at its end already
            seen.finished = True
            return
        if status != 200:
            await source.response.aread()
            seen.refused.append(status)
            return
        seen.connections += 1
        async for sse in source.aiter_sse():
            if sse.event == "stream.closing":
                seen.ended.append("closing:" + json.loads(sse.data)["data"].get("reason", ""))
                return
            if sse.event.startswith("stream.") or not sse.data:
                continue  # control messages; a heartbeat comment's blank dispatch
            event = json.loads(sse.data)
            seen.events.append(event)
            seen.last_id = sse.id
            if event["type"] in TERMINAL:
                seen.finished = True
        seen.ended.append("eof")


async def test_a_follower_through_cuts_receives_every_event_once(scenario: Scenario) -> None:
    scenario.worker(max_jobs=10)
    api = scenario.api()
    await scenario.ready()
    front = scenario.proxy(api.port, name="client-to-api")
    execution_id = (await scenario.start_over_http(api, 1, REPORT, steps=24, interval=0.25))[0]
    seen = Follower()
    follower = asyncio.create_task(follow(f"http://127.0.0.1:{front.port}", execution_id, seen))

    await asyncio.sleep(1.5)  # the channel runs a while before the cut
    before_cut = len(seen.events)
    front.cut()  # the client's own connection to the API
    await asyncio.sleep(1.0)  # the cut lasts this long
    scenario.outage([api])  # the API's Redis, for 2 s
    cut_at = len(seen.events)
    await asyncio.sleep(2.0)  # the cut lasts this long
    scenario.assert_alive(during="the API's Redis cut")
    scenario.restore()
    restored = time.monotonic()
    try:
        await asyncio.wait_for(asyncio.shield(follower), 20)
    except TimeoutError:
        follower.cancel()
        raise AssertionError(
            f"the follower did not reach the terminal event within 20s of the restore: "
            f"{len(seen.events)} events, last id {seen.last_id}, connections {seen.connections}, "
            f"refused {seen.refused}, ended {seen.ended}"
        ) from None
    note(
        f"SSE follower: {len(seen.events)} events over {seen.connections} connections "
        f"(client cut after {before_cut}, API's Redis cut after {cut_at}); refused "
        f"{seen.refused}; streams ended {seen.ended}; restore -> terminal event "
        f"{time.monotonic() - restored:.2f}s"
    )

    verdict = await scenario.check([execution_id])
    stored = [e["sequence"] for e in verdict.events[execution_id]]
    received = [e["sequence"] for e in seen.events]
    duplicates = sorted({s for s in received if received.count(s) > 1})
    missing = sorted(set(stored) - set(received))
    assert not duplicates and not missing and received == stored, (
        f"the follower got {len(received)} events, the execution has {len(stored)}: "
        f"duplicates {duplicates[:10]}, missing {missing[:10]}, order kept {received == sorted(received)}"
    )
    assert seen.connections >= 2, f"the cut did not make the client reconnect: {seen.ended}"
    assert [e["event_id"] for e in seen.events] == [
        e["event_id"] for e in verdict.events[execution_id]
    ]
