"""The registry as MCP tools and resources, over Streamable HTTP to a real API process.

Each test speaks through the official `mcp.Client`, in both protocol eras where the era
could matter: `auto` (2026-07-28, no session) and `legacy` (the 2025 handshake).
"""

from __future__ import annotations

from typing import Any

import anyio
import httpx
import pytest
from mcp import Client, MCPError

from majordomus.registry import REGISTRY
from tests.conftest import LIVENESS_SECONDS, until
from tests.mcp.conftest import MODES, PROTOCOL_OF, ApiProcess, call, failure, until_state


@pytest.mark.parametrize("mode", MODES)
async def test_the_tools_are_the_registry(api: ApiProcess, mode: str) -> None:
    exposed = {c.exposure.mcp_tool: c for c in REGISTRY if c.exposure.mcp_tool}
    async with Client(api.url, mode=mode) as client:
        assert client.protocol_version == PROTOCOL_OF[mode]
        tools = (await client.list_tools()).tools
    assert {t.name for t in tools} == set(exposed)
    assert "majordomus_execution_start" in exposed
    assert "majordomus_session_attach" in exposed
    for tool in tools:
        cap = exposed[tool.name]
        assert tool.description == cap.description
        assert tool.input_schema == cap.input_schema
        assert tool.output_schema == cap.output_schema


@pytest.mark.parametrize("mode", MODES)
async def test_a_full_run_started_paged_and_another_cancelled_mid_way(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(api.url, mode=mode) as client:
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 3, "log_lines": 2}},
        )
        assert started["state"] == "queued" and started["last_sequence"] == 2
        assert started["actor"] == "mcp"
        done = await until_state(client, started["id"], {"succeeded", "failed", "cancelled"})
        assert done["state"] == "succeeded", done
        assert done["output"]["observed"] is True

        seen: list[dict[str, Any]] = []
        after = 0
        while True:
            page = await call(
                client,
                "majordomus_execution_events",
                {"id": started["id"], "after": after, "limit": 4},
            )
            seen += page["events"]
            after = page["last_sequence"]
            if not page["more"]:
                break
        assert [e["sequence"] for e in seen] == list(range(1, done["last_sequence"] + 1))
        assert seen[0]["type"] == "execution.created"
        assert seen[-1]["type"] == "execution.completed"
        assert page["state"] == "succeeded" and page["truncated"] is False

        other = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 100, "delay_ms": 100}},
        )

        async def has_progress() -> Any:
            snap = await call(client, "majordomus_execution", {"id": other["id"]})
            return snap.get("progress")

        await until(has_progress, timeout=LIVENESS_SECONDS, interval=0.05)
        answer = await call(client, "majordomus_execution_cancel", {"id": other["id"]})
        assert answer["outcome"] == "requested"
        cancelled = await until_state(client, other["id"], {"succeeded", "failed", "cancelled"})
        assert cancelled["state"] == "cancelled"
        assert cancelled["error"]["code"] == "cancelled"
        assert 1 <= cancelled["progress"]["current"] < 100


@pytest.mark.parametrize("mode", MODES)
async def test_invalid_arguments_are_an_error_result_saying_invalid_input(
    api: ApiProcess, mode: str
) -> None:
    async with Client(api.url, mode=mode) as client:
        code, text = await failure(client, "majordomus_demonstrate_execution", {"steps": "x"})
        assert code == "invalid_input" and "/steps" in text
        code, _ = await failure(client, "majordomus_execution_events", {"id": "not-an-id"})
        assert code == "invalid_input"
        code, _ = await failure(client, "majordomus_execution", {"id": "x", "extra": 1})
        assert code == "invalid_input"
        code, text = await failure(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": -1}},
        )
        assert code == "invalid_input"
        listed = await call(client, "majordomus_executions", {})
        assert listed["count"] == 0, "a refused start created nothing"


@pytest.mark.parametrize("mode", MODES)
async def test_failures_are_results_with_their_code_and_never_a_traceback(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(api.url, mode=mode) as client:
        result = await client.call_tool("majordomus_tests_refuse", {})
        assert result.is_error
        text = result.content[0].text
        assert text.startswith("refused: tests.refuse ran as x-") and text.endswith("not today")
        error = result.meta["majordomus"]["error"]
        assert error["code"] == "refused" and error["suggestion"] == "try tomorrow"
        assert error["correlation_id"] in text  # the execution it ran as

        code, text = await failure(client, "majordomus_tests_boom", {})
        assert code == "internal"
        assert "ValueError: secret internals that must not leak" in text
        assert "Traceback" not in text

        code, _ = await failure(client, "majordomus_execution_start", {"capability": "no.such"})
        assert code == "not_found"

        with pytest.raises(MCPError) as unknown:
            await client.call_tool("majordomus_no_such_tool", {})
        assert unknown.value.error.code == -32602


@pytest.mark.parametrize("mode", MODES)
async def test_a_waited_execution_sends_its_progress_as_notifications(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    notes: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    async with Client(api.url, mode=mode) as client:
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 3, "delay_ms": 300}},
        )
        final = await call(
            client,
            "majordomus_execution_wait",
            {"id": started["id"], "timeout_ms": 30_000},
            progress_callback=on_progress,
        )
    assert final["state"] == "succeeded"
    assert (3.0, 3.0, "3/3 step 3 of 3") in notes
    assert any(m and m.startswith("step step-3 started") for _, _, m in notes)
    assert notes[-1][2] == "succeeded"
    values = [p for p, _, _ in notes]
    assert values == sorted(values)


@pytest.mark.parametrize("mode", MODES)
async def test_cancelling_a_wait_ends_the_call_and_never_the_execution(
    api: ApiProcess, worker: Any, mode: str
) -> None:
    async with Client(api.url, mode=mode) as client:
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 10, "delay_ms": 150}},
        )
        with anyio.CancelScope() as scope:

            async def give_up(progress: float, total: float | None, message: str | None) -> None:
                scope.cancel()

            await client.call_tool(
                "majordomus_execution_wait", {"id": started["id"]}, progress_callback=give_up
            )
        assert scope.cancelled_caught
        snap = await call(client, "majordomus_execution", {"id": started["id"]})
        assert snap["state"] in ("queued", "running")
        done = await until_state(client, started["id"], {"succeeded", "failed", "cancelled"})
        assert done["state"] == "succeeded", done


@pytest.mark.parametrize("mode", MODES)
async def test_executions_are_resources(api: ApiProcess, worker: Any, mode: str) -> None:
    async with Client(api.url, mode=mode) as client:
        uris = [str(r.uri) for r in (await client.list_resources()).resources]
        assert uris == [
            "majordomus://executions",
            "majordomus://tasks",
            "majordomus://executions/protocol",
        ]
        templates = (await client.list_resource_templates()).resource_templates
        assert [t.uri_template for t in templates] == [
            "majordomus://executions/{id}",
            "majordomus://episodes/{episode}/tasks",
        ]

        started = await call(
            client, "majordomus_execution_start", {"capability": "executions.demonstrate"}
        )
        one = await client.read_resource(f"majordomus://executions/{started['id']}")
        assert one.contents[0].mime_type == "application/json"
        assert '"capability":"executions.demonstrate"' in one.contents[0].text
        listed = await client.read_resource("majordomus://executions")
        assert started["id"] in listed.contents[0].text
        protocol = await client.read_resource("majordomus://executions/protocol")
        assert '"protocol_version":"1"' in protocol.contents[0].text
        with pytest.raises(MCPError):
            await client.read_resource("majordomus://executions/x-20260101T000000Z-00000000")
        with pytest.raises(MCPError):
            await client.read_resource("majordomus://elsewhere")


async def test_a_foreign_host_or_origin_is_refused(api: ApiProcess) -> None:
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
    headers = {
        "accept": "application/json, text/event-stream",
        "mcp-protocol-version": "2026-07-28",
    }
    async with httpx.AsyncClient() as http:
        rebound = await http.post(api.url, json=body, headers={**headers, "host": "evil.example"})
        foreign = await http.post(
            api.url, json=body, headers={**headers, "origin": "http://evil.example"}
        )
        own = await http.post(api.url, json=body, headers={**headers, "origin": api.base})
    assert rebound.status_code == 421
    assert foreign.status_code == 403
    assert own.status_code != 403 and own.status_code != 421
