"""MCP tasks (`io.modelcontextprotocol/tasks`), through the official client where it can: a
task-augmented call answers a task at once, backed by an execution; `tasks/get` follows it
to its end on any API process, across a restart; cancel, failure, refusals, and a client
that never asked for tasks.

The helpers here (a client extension claiming `resultType: "task"`, the task requests, a
raw JSON-RPC client for what the official client does not send) serve the other
`test_tasks_*` modules too.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, Literal

import anyio
import httpx
import msgspec
import pytest
from mcp import Client, MCPError, types
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
from mcp_types import HEADER_MISMATCH
from pydantic import TypeAdapter

from majordomus.api.mcp.server import McpSurface
from majordomus.api.mcp.tasks import EXTENSION, parse_task_id
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.registry import Registry, RegistryError, capability
from tests.capabilities import Done, Empty
from tests.conftest import LIVENESS_SECONDS
from tests.mcp.conftest import ApiProcess, call

MODERN = "2026-07-28"
HANDLE = "majordomus/episode"
NOT_FOUND = -32602
MISSING_CAPABILITY = -32021
DEMO = "majordomus_demonstrate_execution"

# -- the official client, with the extension ---------------------------------------------------


class CreateTaskResult(types.Result):
    """The extension's `CreateTaskResult`, as the client parses a claimed result."""

    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    status_message: str | None = None
    created_at: str
    last_updated_at: str
    ttl_ms: int | None
    poll_interval_ms: int | None = None


class TaskRequest(types.Request[dict[str, Any], str]):
    """`tasks/get`, `tasks/cancel`, `tasks/update`: custom requests with `Mcp-Name`."""

    name_param = "taskId"


ANY: Any = TypeAdapter(dict[str, Any])


async def task_request(
    client: Client, method: str, task_id: str, *, episode: str | None = None, **params: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {"taskId": task_id, **params}
    if episode is not None:
        body["_meta"] = {HANDLE: episode}
    answer: dict[str, Any] = await client.session.send_request(
        TaskRequest(method=method, params=body), ANY
    )
    return answer


async def until_done(client: Client, task_id: str, timeout: float = 20, **kw: Any) -> Any:
    """`tasks/get` every 50 ms until the task ends; every status seen, and the last answer."""
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while True:
        got = await task_request(client, "tasks/get", task_id, **kw)
        if not seen or seen[-1] != (got["status"], got.get("statusMessage", "")):
            seen.append((got["status"], got.get("statusMessage", "")))
        if got["status"] != "working":
            return seen, got
        assert time.monotonic() < deadline, f"{task_id} still working: {seen}"
        await anyio.sleep(0.05)


async def poll_to_end(created: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    """What a client of the extension does with a task it did not ask to see: poll it."""
    while True:
        got: dict[str, Any] = await ctx.session.send_request(
            TaskRequest(method="tasks/get", params={"taskId": created.task_id}), ANY
        )
        if got["status"] == "completed":
            return types.CallToolResult.model_validate(got["result"])
        if got["status"] != "working":
            raise RuntimeError(f"the task ended {got['status']}")
        await anyio.sleep(got.get("pollIntervalMs", 1000) / 1000)


class Tasks(ClientExtension):
    identifier = EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=poll_to_end)]


def tasks_client(url: str) -> Client:
    return Client(url, extensions=[Tasks()])


async def start_task(
    client: Client, tool: str, args: dict[str, Any], **kw: Any
) -> CreateTaskResult:
    created = await client.session.call_tool(tool, args, allow_claimed=True, **kw)
    assert isinstance(created, CreateTaskResult), created
    return created


# -- raw JSON-RPC, for what the official client does not send ----------------------------------


def envelope(extension: bool = True, **meta: Any) -> dict[str, Any]:
    caps: dict[str, Any] = {"extensions": {EXTENSION: {}}} if extension else {}
    return {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": caps,
        **meta,
    }


class Raw:
    """A 2026-07-28 client as bare HTTP requests: one POST per JSON-RPC request."""

    def __init__(self, url: str, token: str | None = None) -> None:
        self.url = url
        self.http = httpx.AsyncClient(timeout=30)
        self.token = token
        self.ids = iter(range(1, 1_000_000))

    async def aclose(self) -> None:
        await self.http.aclose()

    def headers(self, method: str, name: str | None) -> dict[str, str]:
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        if name is not None:
            headers["Mcp-Name"] = name
        if self.token is not None:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def body(self, method: str, params: dict[str, Any], extension: bool, **meta: Any) -> Any:
        return {
            "jsonrpc": "2.0",
            "id": next(self.ids),
            "method": method,
            "params": {**params, "_meta": envelope(extension, **meta)},
        }

    async def request(
        self,
        method: str,
        params: dict[str, Any],
        *,
        extension: bool = True,
        name: str | None = None,
        episode: str | None = None,
    ) -> dict[str, Any]:
        """The JSON-RPC response: `result` or `error`."""
        meta = {HANDLE: episode} if episode is not None else {}
        if name is None:
            name = params.get("taskId") or params.get("name")
        answer = await self.http.post(
            self.url,
            json=self.body(method, params, extension, **meta),
            headers=self.headers(method, name),
        )
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            frames = [json.loads(x[5:]) for x in answer.text.splitlines() if x.startswith("data:")]
            return next(f for f in frames if "id" in f)  # type: ignore[no-any-return]
        message: dict[str, Any] = answer.json()
        return message

    async def result(self, method: str, params: dict[str, Any], **kw: Any) -> dict[str, Any]:
        message = await self.request(method, params, **kw)
        assert "result" in message, message
        result: dict[str, Any] = message["result"]
        return result

    async def task(self, tool: str, args: dict[str, Any], **kw: Any) -> dict[str, Any]:
        created = await self.result("tools/call", {"name": tool, "arguments": args}, **kw)
        assert created["resultType"] == "task", created
        return created

    @asynccontextmanager
    async def listen(
        self, task_ids: list[str], *, extension: bool = True, episode: str | None = None
    ) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        """A `subscriptions/listen` stream for `task_ids`: its messages, in order."""
        meta = {HANDLE: episode} if episode is not None else {}
        body = self.body(
            "subscriptions/listen", {"notifications": {"taskIds": task_ids}}, extension, **meta
        )
        async with self.http.stream(
            "POST",
            self.url,
            json=body,
            headers=self.headers("subscriptions/listen", None),
            timeout=httpx.Timeout(30, read=60),
        ) as stream:

            async def messages() -> AsyncIterator[dict[str, Any]]:
                if not stream.headers.get("content-type", "").startswith("text/event-stream"):
                    await stream.aread()
                    yield stream.json()
                    return
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        yield json.loads(line[5:])

            yield messages()


@pytest.fixture
async def raw(api: ApiProcess) -> AsyncIterator[Raw]:
    client = Raw(api.url)
    yield client
    await client.aclose()


# -- the declaration -----------------------------------------------------------------------------


def test_a_capability_that_runs_as_an_execution_may_be_a_task_and_a_control_may_not() -> None:
    registry = Registry()

    def declare(cap_id: str, **kw: Any) -> Any:
        capability(cap_id, input=Empty, output=Done, registry=registry, **kw)(lambda c, i: Done())
        return registry.require(cap_id).task_support

    assert declare("mine.plain") == "optional"
    assert declare("mine.control", executable=False) == "forbidden"
    assert declare("mine.must", task_support="required") == "required"
    assert declare("mine.never", task_support="forbidden") == "forbidden"
    with pytest.raises(RegistryError, match="cannot be a task"):
        declare("mine.wrong", executable=False, task_support="optional")


def test_a_task_id_carries_128_random_bits_beside_its_execution() -> None:
    from majordomus.api.mcp.tasks import mint_task_id

    first, hashed = mint_task_id("x-20260908T010203Z-0a1b2c3d")
    second, _ = mint_task_id("x-20260908T010203Z-0a1b2c3d")
    assert first != second and hashed not in first
    parsed = parse_task_id(first)
    assert parsed is not None and parsed[0] == "x-20260908T010203Z-0a1b2c3d"
    assert len(parsed[1]) >= 22  # base64url: 22 characters are 132 bits, 16 random bytes
    assert parse_task_id("x-20260908T010203Z-0a1b2c3d") is None  # an execution id is no task id
    assert parse_task_id("nonsense.abc") is None


# -- tasks over HTTP -------------------------------------------------------------------------------


async def test_the_extension_is_advertised_and_every_tool_says_its_task_support(
    api: ApiProcess,
) -> None:
    async with tasks_client(api.url) as client:
        assert client.server_capabilities.extensions == {EXTENSION: {}}
    for mode in ("auto", "legacy"):
        async with Client(api.url, mode=mode) as client:  # type: ignore[arg-type]
            listed = await client.session.send_request(
                types.ListToolsRequest(params=types.PaginatedRequestParams()), ANY
            )
        support = {t["name"]: t["execution"]["taskSupport"] for t in listed["tools"]}
        assert support[DEMO] == "optional" and support["majordomus_tests_sleepy"] == "optional"
        # The engine's own controls answer directly: never a task.
        assert support["majordomus_execution_wait"] == "forbidden"
        assert support["majordomus_execution_start"] == "forbidden"


async def test_a_task_augmented_call_answers_a_task_then_tasks_get_follows_it_to_its_output(
    api: ApiProcess, worker: Any
) -> None:
    async with tasks_client(api.url) as client:
        created = await start_task(client, DEMO, {"steps": 3, "delay_ms": 150})
        # Answered at once: still working, not after the 450 ms run.
        assert created.status == "working" and created.ttl_ms and created.poll_interval_ms
        execution = created.meta["majordomus"]["execution"]  # type: ignore[index]
        parsed = parse_task_id(created.task_id)
        assert parsed is not None and parsed[0] == execution["id"]
        assert execution["links"]["events"].endswith(execution["id"])

        seen, done = await until_done(client, created.task_id)
        assert seen[0][0] == "working" and seen[-1] == ("completed", "succeeded")
        assert any("Step 2 of 3 (running)" in message for _, message in seen), seen
        result = done["result"]
        assert result["isError"] is False
        assert result["structuredContent"]["steps"] == 3
        assert result["structuredContent"]["observed"] is True
        assert json.loads(result["content"][0]["text"]) == result["structuredContent"]
        assert result["_meta"]["majordomus"]["execution"]["id"] == execution["id"]
        assert done["createdAt"] == created.created_at <= done["lastUpdatedAt"]
        assert done["ttlMs"] >= 7 * 24 * 3600 * 1000 and done["pollIntervalMs"] > 0

        # The execution behind it is an execution like any other.
        snap = await call(client, "majordomus_execution", {"id": execution["id"]})
        assert snap["state"] == "succeeded" and snap["actor"] == "mcp"
        # The client's own resolver (polling) turns a task back into the tool's result.
        plain = await client.call_tool(DEMO, {"steps": 1})
        assert plain.structured_content is not None and plain.structured_content["steps"] == 1


async def test_a_client_without_the_extension_gets_a_plain_result(
    api: ApiProcess, worker: Any
) -> None:
    async with Client(api.url) as client:
        assert client.protocol_version == MODERN
        result = await client.call_tool(DEMO, {"steps": 1})
        assert not result.is_error and result.structured_content is not None
        assert result.structured_content["steps"] == 1
    # A tool that may not be a task answers plainly to a client of the extension too.
    async with tasks_client(api.url) as client:
        listed = await call(client, "majordomus_executions", {"limit": 1})
        assert listed["count"] >= 1


async def test_a_failing_handler_completes_its_task_with_an_error_result(
    api: ApiProcess, worker: Any
) -> None:
    async with tasks_client(api.url) as client:
        created = await start_task(client, DEMO, {"steps": 3, "fail_at": 2})
        seen, done = await until_done(client, created.task_id)
    # `failed` is for JSON-RPC errors; a tool that failed completed with an error result.
    assert done["status"] == "completed"
    assert done["statusMessage"].startswith("failed: internal: ")
    result = done["result"]
    assert result["isError"] is True and "structuredContent" not in result
    error = result["_meta"]["majordomus"]["error"]
    assert error["code"] == "internal"
    assert error["correlation_id"] == result["_meta"]["majordomus"]["execution"]["id"]
    assert result["content"][0]["text"].startswith("internal: executions.demonstrate ran as ")


async def test_tasks_cancel_ends_a_running_task_cancelled(
    api: ApiProcess, worker: Any
) -> None:
    async with tasks_client(api.url) as client:
        created = await start_task(client, "majordomus_tests_sleepy", {"seconds": 30})
        deadline = time.monotonic() + 15
        while (await task_request(client, "tasks/get", created.task_id)).get(
            "statusMessage"
        ) != "Sleeping (running)":
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)
        asked = time.monotonic()
        acked = await task_request(client, "tasks/cancel", created.task_id)
        assert acked["resultType"] == "complete"
        deadline = asked + LIVENESS_SECONDS  # far short of the 30 s sleep's own end
        while (got := await task_request(client, "tasks/get", created.task_id))["status"] == (
            "working"
        ):
            assert time.monotonic() < deadline, got
            await anyio.sleep(0.02)
        print(f"cancelled {time.monotonic() - asked:.2f} s after tasks/cancel")
    assert got["status"] == "cancelled" and got["statusMessage"] == "cancelled"
    assert "result" not in got


async def test_tasks_update_is_acknowledged_and_the_methods_refuse_a_client_without_the_extension(
    api: ApiProcess, raw: Raw
) -> None:
    created = await raw.task("majordomus_tests_noop", {})
    task_id = created["taskId"]
    updated = await raw.result("tasks/update", {"taskId": task_id, "inputResponses": {"x": {}}})
    assert updated["resultType"] == "complete"
    for method in ("tasks/get", "tasks/cancel", "tasks/update"):
        refused = await raw.request(method, {"taskId": task_id}, extension=False)
        assert refused["error"]["code"] == MISSING_CAPABILITY, refused
        assert refused["error"]["data"] == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    # The routing header must name the task the body names.
    other = await raw.request("tasks/get", {"taskId": task_id}, name="someone-else")
    assert other["error"]["code"] == HEADER_MISMATCH


async def test_another_owners_task_answers_as_if_it_did_not_exist(spawn_api: Any) -> None:
    api = spawn_api(MAJORDOMUS_API_TOKEN="s3cret")
    raw = Raw(api.url, token="s3cret")
    try:
        mine = await raw.task("majordomus_tests_sleepy", {"seconds": 30}, episode="alice")
        tokens = await raw.task("majordomus_tests_noop", {})  # no episode: the token owns it
        task_id, execution_id = mine["taskId"], mine["_meta"]["majordomus"]["execution"]["id"]
        assert (await raw.result("tasks/get", {"taskId": task_id}, episode="alice"))["status"]
        forged = task_id[:-4] + ("AAAA" if not task_id.endswith("AAAA") else "BBBB")
        for asked, episode in [
            (task_id, "bob"),  # another episode
            (task_id, None),  # no episode: the token's tasks, not alice's
            (tokens["taskId"], "alice"),  # the token's task, asked as an episode
            (forged, "alice"),  # a guessed secret
            (execution_id, "alice"),  # the execution id alone
            ("no-such-task", "alice"),
        ]:
            for method in ("tasks/get", "tasks/cancel"):
                answer = await raw.request(method, {"taskId": asked}, episode=episode)
                assert answer["error"]["code"] == NOT_FOUND, (asked, episode, answer)
                assert answer["error"]["message"] == "Failed to retrieve task: Task not found"
        # Nothing was cancelled by those: the owner still sees it working.
        got = await raw.result("tasks/get", {"taskId": task_id}, episode="alice")
        assert got["status"] == "working"
        assert (await raw.result("tasks/get", {"taskId": tokens["taskId"]}))["taskId"]
        await raw.result("tasks/cancel", {"taskId": task_id}, episode="alice")
    finally:
        await raw.aclose()


async def test_an_owners_tasks_are_listed_by_resource_to_that_owner_alone(
    spawn_api: Any, worker: Any
) -> None:
    api = spawn_api(MAJORDOMUS_API_TOKEN="s3cret")
    raw = Raw(api.url, token="s3cret")
    episode = f"lister-{time.monotonic_ns()}"

    async def read(uri: str, episode: str | None) -> dict[str, Any]:
        return await raw.request("resources/read", {"uri": uri}, name=uri, episode=episode)

    try:
        first = await raw.task(DEMO, {"steps": 1}, episode=episode)
        second = await raw.task("majordomus_tests_sleepy", {"seconds": 30}, episode=episode)
        await raw.task("majordomus_tests_noop", {})  # the token's, not the episode's
        ids = [t["_meta"]["majordomus"]["execution"]["id"] for t in (second, first)]
        deadline = time.monotonic() + 20
        while (await raw.result("tasks/get", {"taskId": first["taskId"]}, episode=episode))[
            "status"
        ] == "working":
            assert time.monotonic() < deadline
            await anyio.sleep(0.05)

        listed = await raw.result("resources/list", {}, name=None, episode=episode)
        assert "majordomus://tasks" in [r["uri"] for r in listed["resources"]]
        templates = await raw.result("resources/templates/list", {}, episode=episode)
        assert "majordomus://episodes/{episode}/tasks" in [
            t["uriTemplate"] for t in templates["resourceTemplates"]
        ]
        for uri in ("majordomus://tasks", f"majordomus://episodes/{episode}/tasks"):
            answer = await read(uri, episode)
            body = json.loads(answer["result"]["contents"][0]["text"])
            tasks = body["tasks"]
            assert [t["executionId"] for t in tasks] == ids  # newest first, the token's apart
            assert [t["status"] for t in tasks] == ["working", "completed"]
            assert tasks[1]["statusMessage"] == "succeeded" and tasks[1]["tool"] == DEMO
            assert tasks[0]["resource"] == f"majordomus://executions/{ids[0]}"
            assert tasks[0]["links"]["events"].endswith(ids[0])
            # The task ids stay with their creator: only their hash is kept.
            assert first["taskId"] not in answer["result"]["contents"][0]["text"]
        # The token's own listing has its one task; another episode is told nothing exists.
        mine = json.loads((await read("majordomus://tasks", None))["result"]["contents"][0]["text"])
        assert len(mine["tasks"]) >= 1 and not set(ids) & {t["executionId"] for t in mine["tasks"]}
        for asked in (None, "someone-else"):
            refused = await read(f"majordomus://episodes/{episode}/tasks", asked)
            assert refused["error"]["code"] == NOT_FOUND, refused
            assert refused["error"]["message"] == "Resource not found"
        await raw.result("tasks/cancel", {"taskId": second["taskId"]}, episode=episode)
    finally:
        await raw.aclose()


async def test_any_api_process_answers_and_a_restart_between_call_and_get_loses_nothing(
    api: ApiProcess, spawn_api: Any, worker: Any
) -> None:
    first = spawn_api()
    async with tasks_client(first.url) as client:
        created = await start_task(client, DEMO, {"steps": 4, "delay_ms": 250})
    first.stop(signal.SIGKILL)  # gone, and with it everything it held in memory
    async with tasks_client(api.url) as client:  # another process answers the same task
        got = await task_request(client, "tasks/get", created.task_id)
        assert got["status"] == "working" and got["taskId"] == created.task_id
    restarted = spawn_api()
    async with tasks_client(restarted.url) as client:
        seen, done = await until_done(client, created.task_id)
    assert done["status"] == "completed" and done["result"]["structuredContent"]["steps"] == 4
    assert done["createdAt"] == created.created_at


# -- a required tool -------------------------------------------------------------------------------


async def test_a_tool_that_requires_tasks_refuses_a_client_without_the_extension(
    engine: Engine, settings: Settings
) -> None:
    registry = Registry()
    for cap in engine.registry:
        registry.add(cap)
    capability(
        "mine.long",
        input=Empty,
        output=Done,
        task_support="required",
        registry=registry,
    )(lambda c, i: Done())
    own = Engine(engine.redis, registry, settings)
    surface = McpSurface(own, settings)
    async with Client(surface.server, mode=MODERN) as client:
        with pytest.raises(MCPError) as refused:
            await client.call_tool("majordomus_mine_long", {})
        assert refused.value.error.code == MISSING_CAPABILITY
        assert refused.value.error.data == {"requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    async with Client(surface.server, mode=MODERN, extensions=[Tasks()]) as client:
        created = await client.session.call_tool("majordomus_mine_long", {}, allow_claimed=True)
        assert isinstance(created, CreateTaskResult) and created.status == "working"
        snap = await own.get(created.meta["majordomus"]["execution"]["id"])  # type: ignore[index]
        assert snap.state == "queued" and snap.capability == "mine.long"
    assert msgspec.json.decode(msgspec.json.encode(snap.input)) == {}
