"""Scenario "mcp_tasks": MCP tasks pushed and polled (`api.mcp.tasks`, `api.mcp.task_listen`).

Tasks of `bench.hold` are started through `/mcp` as task-augmented `tools/call`s and
claimed by this process as if it were their worker (no worker runs, so nothing else
writes); progress reports are then appended through the store (`Store.append`, the call a
worker's context makes) one at a time, each carrying in its message the wall-clock time
taken just before the append. Every report changes its task's `statusMessage`, so it is
pushed as `notifications/tasks` to the `subscriptions/listen` streams following it; the
client takes the time again when it parses the notification (same machine, same clock).

- status change -> notification, p50/p99: one stream following one task; one stream
  following `MANY` tasks (reports to random ones of them); `MANY` streams of one task each;
- `tasks/get` latency (client round trip, raw HTTP), beside the same client's
  `tools/call` of `majordomus_execution` (`executions.get`): a task read against the plain
  execution read of the same surface;
- the Redis connections the API process holds with `MANY` open subscriptions, beside the
  same with none (counted on the server, this process's own connections left out).

`python -m bench.mcp_tasks [--quick] [--redis-url URL]` runs it alone (on a redis-server of
its own when no URL is given); `run(bench)` is the harness's scenario entry.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import psutil

from bench.harness import Bench, Row, api_server, children, ms, percentile, wait_for_api, workdir
from majordomus.store.executions import encode

NAME = "mcp_tasks"
EXTENSION = "io.modelcontextprotocol/tasks"
VERSION = "2026-07-28"
WORKER = "bench-tasks"
GAP = 0.01
"""Seconds between one report's delivery and the next append."""


def envelope() -> dict[str, Any]:
    return {
        "io.modelcontextprotocol/protocolVersion": VERSION,
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {EXTENSION: {}}},
    }


class McpHttp:
    """Raw 2026-07-28 JSON-RPC over one httpx client."""

    def __init__(self, http: httpx.AsyncClient, url: str) -> None:
        self.http = http
        self.url = url
        self.n = 0

    def _request(self, method: str, params: dict[str, Any], name: str | None) -> Any:
        self.n += 1
        headers = {
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": VERSION,
            "Mcp-Method": method,
        }
        if name:
            headers["Mcp-Name"] = name
        body = {"jsonrpc": "2.0", "id": self.n, "method": method}
        body["params"] = {**params, "_meta": envelope()}
        return body, headers

    async def result(self, method: str, params: dict[str, Any], name: str | None = None) -> Any:
        body, headers = self._request(method, params, name)
        answer = await self.http.post(self.url, json=body, headers=headers)
        message = answer.json()
        if "result" not in message:
            raise RuntimeError(f"{method}: {message}")
        return message["result"]

    @contextlib.asynccontextmanager
    async def listen(self, task_ids: list[str]) -> AsyncIterator[AsyncIterator[dict[str, Any]]]:
        body, headers = self._request(
            "subscriptions/listen", {"notifications": {"taskIds": task_ids}}, None
        )
        async with self.http.stream("POST", self.url, json=body, headers=headers) as stream:

            async def messages() -> AsyncIterator[dict[str, Any]]:
                async for line in stream.aiter_lines():
                    if line.startswith("data:"):
                        yield json.loads(line[5:])

            yield messages()


class Receiver:
    """Reads one listen stream; each progress notification's latency, by its stamp."""

    def __init__(self) -> None:
        self.latencies: list[float] = []
        self.acked = asyncio.Event()
        self.arrived = asyncio.Event()

    async def consume(self, messages: AsyncIterator[dict[str, Any]]) -> None:
        async for message in messages:
            now = time.time()
            if message.get("method") == "notifications/subscriptions/acknowledged":
                self.acked.set()
                continue
            text = message.get("params", {}).get("statusMessage", "")
            parts = text.split(" ")
            if len(parts) == 2 and parts[1].replace(".", "", 1).isdigit():
                self.latencies.append(now - float(parts[1]))
                self.arrived.set()


async def report(engine: Any, execution_id: str, n: int) -> None:
    event = ("execution.progress", encode({"current": n, "message": repr(time.time())}))
    await engine.store.append(execution_id, [event])


async def measure(
    engine: Any, receivers: dict[str, Receiver], executions: dict[str, str], events: int
) -> list[float]:
    """Append `events` reports to random tasks; each one's latency at its receiver."""
    ids = list(executions)
    for n in range(1, events + 1):
        task_id = random.choice(ids)
        receiver = receivers[task_id]
        receiver.arrived.clear()
        await report(engine, executions[task_id], n)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(receiver.arrived.wait(), 5)
        await asyncio.sleep(GAP)
    return [x for r in {id(r): r for r in receivers.values()}.values() for x in r.latencies]


async def api_connections(bench: Bench) -> int:
    """Connections to the run's Redis that are not this process's."""
    mine = {c.laddr.port for c in psutil.Process().net_connections("tcp") if c.laddr}
    client = bench.redis()
    try:
        listed = await client.client_list()
    finally:
        await client.aclose()
    theirs = 0
    for entry in listed:
        port = int(str(entry.get("addr", ":0")).rsplit(":", 1)[1])
        if port not in mine:
            theirs += 1
    return theirs - 1  # the CLIENT LIST connection itself, just closed, is not the API's


async def run(bench: Bench) -> list[Row]:
    many = bench.size(500, 50)
    events = bench.size(400, 40)
    rows: list[Row] = []
    with children() as started:
        api, base = api_server(bench)
        started.append(api)
        await wait_for_api(base, api)
        limits = httpx.Limits(max_connections=many + 20, max_keepalive_connections=many + 20)
        async with bench.engine() as engine, httpx.AsyncClient(timeout=60, limits=limits) as http:
            mcp = McpHttp(http, base + "/mcp")
            executions: dict[str, str] = {}
            for _ in range(many):
                created = await mcp.result(
                    "tools/call",
                    {"name": "majordomus_bench_hold", "arguments": {"seconds": 3600}},
                    "majordomus_bench_hold",
                )
                execution = created["_meta"]["majordomus"]["execution"]["id"]
                executions[created["taskId"]] = execution
                await engine.store.claim(execution, WORKER)
            task_ids = list(executions)

            # tasks/get, and the plain execution read beside it.
            gets, reads = [], []
            for i in range(bench.size(1000, 100)):
                task_id = task_ids[i % len(task_ids)]
                t0 = time.perf_counter()
                await mcp.result("tasks/get", {"taskId": task_id}, task_id)
                gets.append(time.perf_counter() - t0)
                t0 = time.perf_counter()
                await mcp.result(
                    "tools/call",
                    {"name": "majordomus_execution", "arguments": {"id": executions[task_id]}},
                    "majordomus_execution",
                )
                reads.append(time.perf_counter() - t0)
            for p in (50, 99):
                rows.append(
                    Row(NAME, f"tasks/get p{p}", ms(percentile(gets, p)), "ms",
                        ms(percentile(reads, p)), "tools/call majordomus_execution",
                        higher_is_better=False)
                )  # fmt: skip

            idle = await api_connections(bench)

            async def streams(groups: list[list[str]], label: str) -> None:
                receivers: dict[str, Receiver] = {}
                async with contextlib.AsyncExitStack() as stack:
                    consumers = []
                    for group in groups:
                        receiver = Receiver()
                        messages = await stack.enter_async_context(mcp.listen(group))
                        consumers.append(asyncio.create_task(receiver.consume(messages)))
                        await receiver.acked.wait()
                        receivers.update(dict.fromkeys(group, receiver))
                    await asyncio.sleep(0.5)  # the first state of every task is told first
                    for receiver in receivers.values():
                        receiver.latencies.clear()
                    chosen = {t: executions[t] for t in receivers}
                    held = await api_connections(bench)
                    latencies = await measure(engine, receivers, chosen, events)
                    for consumer in consumers:
                        consumer.cancel()
                for p in (50, 99):
                    rows.append(
                        Row(NAME, f"status -> notification p{p}, {label}",
                            ms(percentile(latencies, p)), "ms", higher_is_better=False)
                    )  # fmt: skip
                if len(groups) > 1:
                    rows.append(
                        Row(NAME, f"Redis connections of the API, {label}", held, "connections",
                            idle, "the same API with no subscription", higher_is_better=False)
                    )  # fmt: skip

            await streams([task_ids[:1]], "1 task")
            await streams([task_ids], f"{many} tasks on one stream")
            await streams([[t] for t in task_ids], f"{many} streams of one task")
    return rows


async def _main(args: argparse.Namespace) -> None:
    embedded = None
    url = args.redis_url
    if url is None:
        from majordomus.local.embedded import EmbeddedRedis

        embedded = EmbeddedRedis().start()
        url = embedded.url
    try:
        bench = Bench(url, args.quick, workdir())
        await bench.flush()
        for row in await run(bench):
            base = f" (baseline {row.baseline:.2f}, {row.baseline_name})" if row.baseline else ""
            print(f"{row.metric}: {row.ours:.2f} {row.unit}{base}")
    finally:
        if embedded is not None:
            embedded.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--redis-url")
    asyncio.run(_main(parser.parse_args()))
