"""The same tasks in the 2025-11-25 shape (SEP-1686), for a handshake-era session: the
`tasks` capability in `initialize`, `params.task` on `tools/call`, `tasks/get`,
`tasks/result`, `tasks/list`, `tasks/cancel` and `notifications/tasks/status` on the
session's standalone stream. Raw JSON-RPC over httpx: the official client validates a
2025 `tools/call` answer as a `CallToolResult`, which a `CreateTaskResult` is not."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx

from majordomus.api.mcp.tasks_2025 import RELATED_TASK_META, SERVER_CAPABILITY
from tests.mcp.conftest import ApiProcess
from tests.mcp.test_tasks import DEMO, NOT_FOUND

VERSION = "2025-11-25"
ACCEPT = {"Accept": "application/json, text/event-stream"}


class Session:
    """A 2025 session: `initialize`, then POSTs carrying its `Mcp-Session-Id`."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.headers: dict[str, str] = dict(ACCEPT)
        self.ids = iter(range(1, 1_000_000))

    async def open(self) -> dict[str, Any]:
        body = {
            "protocolVersion": VERSION,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        answer = await self.http.post(
            self.url,
            json={"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": body},
            headers=ACCEPT,
        )
        self.headers.update(
            {"Mcp-Session-Id": answer.headers["mcp-session-id"], "MCP-Protocol-Version": VERSION}
        )
        await self.http.post(
            self.url,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers=self.headers,
        )
        return frame(answer)["result"]  # type: ignore[no-any-return]

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        body = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        return frame(await self.http.post(self.url, json=body, headers=self.headers))

    async def result(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        answer = await self.request(method, params)
        assert "result" in answer, answer
        return answer["result"]  # type: ignore[no-any-return]


def frame(answer: httpx.Response) -> dict[str, Any]:
    if answer.headers.get("content-type", "").startswith("text/event-stream"):
        frames = [json.loads(x[5:]) for x in answer.text.splitlines() if x.startswith("data:")]
        return next(f for f in frames if "id" in f)  # type: ignore[no-any-return]
    return answer.json()  # type: ignore[no-any-return]


async def test_a_2025_session_gets_tasks_in_the_sep_1686_shape(
    api: ApiProcess, worker: Any
) -> None:
    notes: list[dict[str, Any]] = []
    async with httpx.AsyncClient(timeout=30) as http, anyio.create_task_group() as tg:
        session = Session(http, api.url)
        opened = await session.open()
        assert opened["protocolVersion"] == VERSION
        assert opened["capabilities"]["tasks"] == SERVER_CAPABILITY

        async def standalone() -> None:
            headers = {**session.headers, "Accept": "text/event-stream"}
            async with http.stream("GET", api.url, headers=headers) as stream:
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        notes.append(json.loads(line[5:]))

        tg.start_soon(standalone)
        listed = await session.result("tools/list", {})
        support = {t["name"]: t["execution"]["taskSupport"] for t in listed["tools"]}
        assert support[DEMO] == "optional" and support["majordomus_executions"] == "forbidden"

        await anyio.sleep(0.2)  # the standalone stream is open before the task starts
        args = {"steps": 2, "delay_ms": 150}
        created = await session.result(
            "tools/call", {"name": DEMO, "arguments": args, "task": {"ttl": 60_000}}
        )
        task = created["task"]
        task_id = task["taskId"]
        assert task["status"] == "working" and task["ttl"] > 0 and task["pollInterval"] > 0
        assert created["_meta"][RELATED_TASK_META] == {"taskId": task_id}

        got = await session.result("tasks/get", {"taskId": task_id})
        assert got["taskId"] == task_id and "ttlMs" not in got  # this era's names
        result = await session.result("tasks/result", {"taskId": task_id})  # waits for the end
        assert result["structuredContent"]["steps"] == 2 and result["isError"] is False
        assert result["_meta"][RELATED_TASK_META] == {"taskId": task_id}
        assert "resultType" not in result  # the 2025 wire's CallToolResult

        tasks = (await session.result("tasks/list", {}))["tasks"]
        assert [t["taskId"] for t in tasks] == [task_id] and tasks[0]["status"] == "completed"
        again = await session.request("tasks/cancel", {"taskId": task_id})
        assert again["error"]["code"] == NOT_FOUND  # a task that ended cannot be cancelled
        unknown = await session.request("tasks/get", {"taskId": task_id + "x"})
        assert unknown["error"]["code"] == NOT_FOUND

        with anyio.fail_after(5):
            while not any(n["params"].get("status") == "completed" for n in notes):
                await anyio.sleep(0.02)
        tg.cancel_scope.cancel()
    told = [n for n in notes if n["method"] == "notifications/tasks/status"]
    assert all(n["params"]["_meta"][RELATED_TASK_META] == {"taskId": task_id} for n in told)
    assert any("Step 2 of 2 (running)" in n["params"]["statusMessage"] for n in told)
    assert told[-1]["params"]["status"] == "completed"


async def test_a_2025_task_is_cancelled_and_a_plain_call_stays_plain(
    api: ApiProcess, worker: Any
) -> None:
    async with httpx.AsyncClient(timeout=30) as http:
        session = Session(http, api.url)
        await session.open()
        plain = await session.result("tools/call", {"name": DEMO, "arguments": {"steps": 1}})
        assert plain["structuredContent"]["steps"] == 1  # no `task`: today's answer
        refused = await session.request(
            "tools/call", {"name": "majordomus_executions", "arguments": {}, "task": {}}
        )
        assert refused["error"]["code"] == -32601  # `forbidden`: never a task
        created = await session.result(
            "tools/call",
            {"name": "majordomus_tests_sleepy", "arguments": {"seconds": 30}, "task": {}},
        )
        task_id = created["task"]["taskId"]
        cancelled = await session.result("tasks/cancel", {"taskId": task_id})
        assert cancelled["taskId"] == task_id  # CancelTaskResult: the task after the request
        with anyio.fail_after(5):
            while (await session.result("tasks/get", {"taskId": task_id}))["status"] != (
                "cancelled"
            ):
                await anyio.sleep(0.05)
        ended = await session.result("tasks/result", {"taskId": task_id})
        assert ended["isError"] is True
        assert ended["_meta"]["majordomus"]["error"]["code"] == "cancelled"
