"""`majordomus mcp`: the same tools and episodes over stdio, in both protocol eras."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from mcp import Client, StdioServerParameters

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from tests.conftest import ROOT, _redis_url, until
from tests.mcp.conftest import MODES, PROTOCOL_OF, call, failure, process_env

pytestmark = pytest.mark.usefixtures("spawns")  # it starts child processes of its own


def stdio_server() -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "majordomus.cli", "mcp"],
        env=process_env(_redis_url()),
        cwd=str(ROOT),
    )


@pytest.mark.parametrize("mode", MODES)
async def test_stdio_serves_the_registry_executions_and_episodes(
    engine: Engine, worker: Any, mode: str
) -> None:
    notes: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        notes.append((progress, total, message))

    meta = {"majordomus/episode": "desk"} if mode == "auto" else None
    async with Client(stdio_server(), mode=mode) as client:
        assert client.protocol_version == PROTOCOL_OF[mode]
        tools = (await client.list_tools()).tools
        assert {t.name for t in tools} == {
            c.exposure.mcp_tool for c in REGISTRY if c.exposure.mcp_tool
        }

        attached = await call(client, "majordomus_session_attach", {"external_id": "desk"})
        assert attached["episode"]["held_by"].endswith("stdio" if mode == "legacy" else "handle")
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "input": {"steps": 2, "delay_ms": 200}},
            meta=meta,
        )
        assert started["episode"] == "desk" and started["actor"] == "mcp"
        final = await call(
            client,
            "majordomus_execution_wait",
            {"id": started["id"]},
            progress_callback=on_progress,
            meta=meta,
        )
        assert final["state"] == "succeeded"
        assert (2.0, 2.0, "2/2 step 2 of 2") in notes
        code, _ = await failure(client, "majordomus_demonstrate_execution", {"steps": "many"})
        assert code == "invalid_input"
        closed = await call(client, "majordomus_session_detach", {}, meta=meta)
        assert closed["episode"]["close_reason"] == "detach"
        assert closed["episode"]["executions"] == [started["id"]]

        await call(client, "majordomus_session_attach", {"external_id": "desk-2"})
    # The client went away without detaching: its episode is detached, not closed.
    store = engine.episodes

    async def detached() -> bool:
        episode = await store.get("desk-2")
        return episode is not None and episode.state == "detached"

    await until(detached, timeout=15)
