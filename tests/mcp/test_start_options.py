"""`majordomus_execution_start` over MCP takes the start's options as the HTTP route does
(they are one declaration): an idempotency key used over HTTP answers the same execution
to an agent, and a delayed, prioritised start shows its due time and level."""

from __future__ import annotations

import httpx
import pytest
from mcp import Client

from tests.mcp.conftest import MODES, ApiProcess, call, failure


@pytest.mark.parametrize("mode", MODES)
async def test_an_idempotency_key_used_over_http_answers_the_same_execution_over_mcp(
    api: ApiProcess, mode: str
) -> None:
    key = f"mcp-and-http-{mode}"
    with httpx.Client(base_url=api.base, timeout=20) as http:
        made = http.post(
            "/api/v1/executions/start",
            json={"capability": "tests.noop", "idempotency_key": key, "delay_ms": 3_600_000},
        ).json()
    async with Client(api.url, mode=mode) as client:
        again = await call(
            client,
            "majordomus_execution_start",
            {"capability": "tests.noop", "idempotency_key": key, "delay_ms": 3_600_000},
        )
        assert again["id"] == made["id"] and again["state"] == "queued"
        code, text = await failure(
            client,
            "majordomus_execution_start",
            {"capability": "tests.sleepy", "input": {"seconds": 1}, "idempotency_key": key},
        )
        assert code == "refused" and made["id"] in text
        later = await call(
            client,
            "majordomus_execution_start",
            {"capability": "tests.noop", "delay_ms": 3_600_000, "priority": "low"},
        )
        assert later["priority"] == "low" and "due_at" in later
        await call(client, "majordomus_execution_cancel", {"id": later["id"]})
        await call(client, "majordomus_execution_cancel", {"id": made["id"]})
