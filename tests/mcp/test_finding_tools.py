"""Finding and bulk actions as MCP tools, over Streamable HTTP to a real API process and a
real worker: an agent searches by a searchable member, counts a filter before acting, and
cancels every match with one tool call that runs as an execution.
"""

from __future__ import annotations

from typing import Any

from mcp import Client

from tests.mcp.conftest import ApiProcess, call, failure

HOUR_MS = 3_600_000


async def test_an_agent_searches_counts_and_cancels_all_matching(
    api: ApiProcess, worker: Any
) -> None:
    async with Client(api.url, mode="auto") as client:
        made = []
        for customer in ("acme", "acme", "globex"):
            started = await call(
                client,
                "majordomus_execution_start",
                {"capability": "tests.order", "input": {"customer": customer}, "delay_ms": HOUR_MS},
            )
            made.append(started["id"])
        acme = {"capability": "tests.order", "search": "customer=acme"}
        listed = await call(client, "majordomus_executions", acme)
        assert [x["id"] for x in listed["executions"]] == made[1::-1]
        counted = await call(client, "majordomus_executions_count", acme)
        assert counted == {"matching": 2, "cancellable": 2, "retryable": 0}
        code, text = await failure(
            client, "majordomus_executions", {"capability": "tests.order", "search": "note=x"}
        )
        assert code == "not_found" and "customer, quantity, rush" in text

        done = await call(client, "majordomus_executions_cancel_matching", acme)
        assert done == {"matched": 2, "cancelled": 2, "asked": 0, "passed": 0}
        left = await call(client, "majordomus_executions_count", {"capability": "tests.order"})
        assert (left["matching"], left["cancellable"], left["retryable"]) == (3, 1, 2)
