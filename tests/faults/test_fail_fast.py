"""Redis stalled (SIGSTOP: connections open, nothing answered): every API answer comes
within the documented bound, a 503 that says so, `/api/v1/live` at once, `/ready` not
ready; a start says it may or may not have happened, as which execution, and how to find
out or resend it safely; once Redis answers again, a keyed start resent is one execution."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import Any

import httpx
import pytest

from majordomus.store.policy import API_ANSWER_BOUND_SECONDS
from tests.faults.conftest import Scenario, note
from tests.faults.workload import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.process]

SLACK_SECONDS = 1.0
"""What a loaded test machine may add to the bound before the client gives up."""


async def test_with_redis_stalled_every_api_answer_comes_within_the_bound(
    scenario: Scenario,
) -> None:
    scenario.worker()
    api = scenario.api()
    await scenario.ready()
    [done] = await scenario.start(1, REPORT, steps=1, interval=0.01)
    await scenario.wait_final([done], 20, "the execution read during the stall")
    redis = scenario.redis.process
    assert redis is not None
    took: dict[str, float] = {}
    answers: dict[str, httpx.Response] = {}

    async def timed(name: str, request: Any) -> httpx.Response:
        t0 = time.monotonic()
        answer = await request
        took[name] = time.monotonic() - t0
        answers[name] = answer
        return answer

    body = {"capability": REPORT, "input": {"steps": 1, "interval": 0.01}}
    keyed = {**body, "idempotency_key": "stalled-start-1"}
    redis.send_signal(signal.SIGSTOP)
    try:
        timeout = httpx.Timeout(API_ANSWER_BOUND_SECONDS + SLACK_SECONDS)
        async with httpx.AsyncClient(base_url=api.url, timeout=timeout) as http:
            await timed("live", http.get("/api/v1/live"))
            await timed("ready", http.get("/api/v1/ready"))
            await timed("get", http.get("/api/v1/executions/get", params={"id": done}))
            await timed("list", http.get("/api/v1/executions"))
            await timed("start", http.post("/api/v1/executions/start", json=body))
            await timed("keyed start", http.post("/api/v1/executions/start", json=keyed))
            await timed(
                "wait", http.get("/api/v1/executions/wait", params={"id": done, "timeout_ms": 1})
            )
            await timed(
                "scoped channel",
                http.get(
                    "/events", params={"execution": done}, headers={"Accept": "text/event-stream"}
                ),
            )
            # A burst: forty at once share the pool, each still within the bound.
            t0 = time.monotonic()
            burst = await asyncio.gather(
                *(http.get("/api/v1/executions/get", params={"id": done}) for _ in range(40))
            )
            took["40 reads at once"] = time.monotonic() - t0
    finally:
        redis.send_signal(signal.SIGCONT)

    assert answers["live"].status_code == 200
    for name in ("ready", "get", "list", "start", "keyed start", "wait", "scoped channel"):
        answer = answers[name]
        assert answer.status_code == 503, (name, answer.text)
        assert answer.json()["error"]["code"] == "unavailable", (name, answer.text)
    assert all(a.status_code == 503 for a in burst)
    note(
        "Redis stalled, API answer times: "
        + ", ".join(f"{name} {seconds * 1000:.0f} ms" for name, seconds in took.items())
        + f" (bound {API_ANSWER_BOUND_SECONDS:g} s)"
    )

    # The starts say they may have happened, as which execution, and how to find out.
    plain = answers["start"].json()["error"]
    assert "may or may not have happened" in plain["message"]
    plain_id = plain["message"].rsplit("(as ", 1)[1].rstrip(")")
    assert plain_id in plain["suggestion"] and "executions.get" in plain["suggestion"]
    held = answers["keyed start"].json()["error"]
    assert "stalled-start-1" in held["suggestion"]
    held_id = held["message"].rsplit("(as ", 1)[1].rstrip(")")

    # Redis answers again. Whether a stalled start happened depends on whether Redis read
    # its command before the API gave up on the connection: the answer said "may", and
    # executions.get tells which; the keyed start resent is that one execution either way.
    async with httpx.AsyncClient(base_url=api.url, timeout=10) as http:
        deadline = time.monotonic() + 15
        while (await http.get("/api/v1/ready")).status_code != 200:
            assert time.monotonic() < deadline, "the API did not become ready again"
            await asyncio.sleep(0.1)
        found = await http.get("/api/v1/executions/get", params={"id": plain_id})
        assert found.status_code in (200, 404), found.text
        held_found = await http.get("/api/v1/executions/get", params={"id": held_id})
        assert held_found.status_code in (200, 404), held_found.text
        again = await http.post("/api/v1/executions/start", json=keyed)
        assert again.status_code == 200, again.text
        if held_found.status_code == 200:
            assert again.json()["id"] == held_id
        once_more = await http.post("/api/v1/executions/start", json=keyed)
        assert once_more.json()["id"] == again.json()["id"]
    note(
        f"the stalled starts: unkeyed {'happened' if found.status_code == 200 else 'did not'}, "
        f"keyed {'happened' if held_found.status_code == 200 else 'did not'}"
    )
    ran = [again.json()["id"]] + ([plain_id] if found.status_code == 200 else [])
    await scenario.wait_final(ran, 20, "the starts made around the stall")
