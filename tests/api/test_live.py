"""The live channel (`GET /events`) over a real socket: ready first, history then live with
no gap and no duplicate, resumption, the unscoped feed, heartbeats, 204 at the end, the
closing message, every refusal, slow clients, many clients, and two API processes."""

from __future__ import annotations

import asyncio
import json
import re
import socket
import threading
import time
from typing import Any

import httpx
import pytest
import redis as redis_sync
from httpx_sse import EventSource

from majordomus.api.app import API_MAX_CONNECTIONS
from tests.api.conftest import (
    TERMINAL,
    TOKEN,
    ApiProcess,
    Message,
    read_stream,
    start,
    wait_final,
)
from tests.api.test_http import assert_envelope
from tests.conftest import LIVENESS_SECONDS

FEED_ID = re.compile(r"^\d+-\d+$")


def events_of(messages: list[Message], execution_id: str | None = None) -> list[dict[str, Any]]:
    return [
        m.data
        for m in messages
        if not m.is_control and (execution_id is None or m.data["execution_id"] == execution_id)
    ]


def sequences(messages: list[Message], execution_id: str | None = None) -> list[int]:
    return [e["sequence"] for e in events_of(messages, execution_id)]


def api_connections(redis_url: str, api: ApiProcess) -> tuple[int, int]:
    """(connections, of which blocked in a command such as XREAD BLOCK) the API process holds
    now; its connections are named for its pid."""
    client = redis_sync.Redis.from_url(redis_url)
    try:
        mine = [
            c
            for c in client.client_list()
            if c.get("name", "").startswith("majordomus-api:")
            and c.get("name", "").endswith(f":{api.pid}")
        ]
    finally:
        client.close()
    return len(mine), sum(1 for c in mine if "b" in c.get("flags", ""))


async def peak_connections(
    redis_url: str, api: ApiProcess, tasks: list[asyncio.Task[Any]], every: float
) -> tuple[int, int]:
    """The most connections the API process held, and the most blocked, until `tasks` end."""
    peak = blocked = 0
    pending = set(tasks)
    while pending:
        total_now, blocked_now = api_connections(redis_url, api)
        peak, blocked = max(peak, total_now), max(blocked, blocked_now)
        _, pending = await asyncio.wait(pending, timeout=every)
    return peak, blocked


# -- the shape of a channel ----------------------------------------------------------------------


def test_ready_comes_first_then_history_then_live_then_closing(http: httpx.Client) -> None:
    snapshot = start(http, "executions.demonstrate", steps=4, delay_ms=150)
    status, messages = read_stream(http, {"execution": snapshot["id"]})
    assert status == 200
    ready, *rest = messages
    assert ready.event == "stream.ready" and ready.id is None
    assert ready.data["data"]["scope"] == "executions"
    assert ready.data["data"]["executions"] == [snapshot["id"]]
    assert ready.data["data"]["protocol_version"] == "1"
    assert ready.data["data"]["heartbeat_seconds"] == 1.0
    assert 2 <= ready.data["data"]["replayed"] < len(rest) - 1  # some history, then live
    events, closing = rest[:-1], rest[-1]
    assert [int(m.id or 0) for m in events] == list(range(1, len(events) + 1))
    assert [e["sequence"] for e in events_of(events)] == list(range(1, len(events) + 1))
    assert events[-1].event == "execution.completed"
    assert closing.event == "stream.closing" and closing.data["data"]["reason"] == "finished"
    assert [m.event for m in events] == [m.data["type"] for m in events]


def test_listeners_joining_at_any_moment_see_no_gap_and_no_duplicate(
    api: ApiProcess, http: httpx.Client
) -> None:
    # About 460 events in half a second; listeners join all along the way.
    snapshot = start(http, "executions.demonstrate", steps=20, log_lines=20, delay_ms=25)
    results: list[list[int]] = []

    def listen(delay: float) -> None:
        time.sleep(delay)
        with api.client() as client:
            _, messages = read_stream(client, {"execution": snapshot["id"]})
        results.append(sequences(messages))

    threads = [threading.Thread(target=listen, args=(i * 0.05,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    total = wait_final(http, snapshot["id"])["last_sequence"]
    assert len(results) == 12
    for seen in results:
        assert seen == list(range(1, total + 1))


def test_last_event_id_resumes_and_wins_over_after(http: httpx.Client) -> None:
    snapshot = start(http, "executions.demonstrate", steps=2)
    total = wait_final(http, snapshot["id"])["last_sequence"]
    _, from_after = read_stream(http, {"execution": snapshot["id"], "after": "3"})
    assert sequences(from_after) == list(range(4, total + 1))
    assert from_after[0].data["data"]["replayed"] == total - 3
    _, resumed = read_stream(
        http, {"execution": snapshot["id"], "after": "1"}, headers={"Last-Event-ID": "5"}
    )
    assert sequences(resumed) == list(range(6, total + 1))
    assert resumed[-1].event == "stream.closing"


def test_a_final_execution_at_its_cursor_answers_204(http: httpx.Client) -> None:
    snapshot = start(http, "executions.demonstrate", steps=1)
    total = wait_final(http, snapshot["id"])["last_sequence"]
    status, _ = read_stream(http, {"execution": snapshot["id"], "after": str(total)})
    assert status == 204
    status, _ = read_stream(
        http, {"execution": snapshot["id"]}, headers={"Last-Event-ID": str(total)}
    )
    assert status == 204


def test_curl_s_accept_gets_the_stream(http: httpx.Client) -> None:
    snapshot = start(http, "executions.demonstrate", steps=1)
    wait_final(http, snapshot["id"])
    for accept in ("*/*", "text/*", "application/json, text/event-stream;q=0.5"):
        with http.stream(
            "GET", "/events", params={"execution": snapshot["id"]}, headers={"Accept": accept}
        ) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            assert "event: stream.closing" in response.read().decode()


def test_heartbeat_comments_keep_a_quiet_channel_open(http: httpx.Client) -> None:
    snapshot = start(http, "tests.sleepy", seconds=2.5)
    heartbeats, lines = 0, []
    with http.stream(
        "GET",
        "/events",
        params={"execution": snapshot["id"]},
        headers={"Accept": "text/event-stream"},
    ) as response:
        for line in response.iter_lines():
            lines.append(line)
            heartbeats += line.startswith(": heartbeat")
            if line.startswith("event: stream.closing"):
                break
    assert heartbeats >= 1
    assert any(line == "event: execution.completed" for line in lines)


# -- every execution -----------------------------------------------------------------------------


def test_the_unscoped_channel_carries_every_execution_and_resumes_from_a_feed_id(
    http: httpx.Client,
) -> None:
    ids: list[str] = []
    collected: list[Message] = []
    finished: set[str] = set()

    def until(message: Message) -> bool:
        if not message.is_control and message.data["type"] in TERMINAL:
            finished.add(message.data["execution_id"])
        return bool(ids) and finished >= set(ids)

    with http.stream("GET", "/events", headers={"Accept": "text/event-stream"}) as response:
        assert response.status_code == 200
        for sse in EventSource(response).iter_sse():
            message = Message(sse.event, sse.data, sse.id or None)
            collected.append(message)
            if message.event == "stream.ready":
                assert message.data["data"]["scope"] == "all"
                assert "executions" not in message.data["data"]
                ids += [
                    start(http, "executions.demonstrate", steps=2, delay_ms=30)["id"]
                    for _ in range(2)
                ]
            if until(message):
                break
    ours = [m for m in collected if not m.is_control and m.data["execution_id"] in ids]
    feed_ids = [m.id for m in ours]
    assert all(FEED_ID.match(i or "") for i in feed_ids)
    keys = [tuple(map(int, (i or "").split("-"))) for i in feed_ids]
    assert keys == sorted(keys) and len(set(keys)) == len(keys)
    for execution_id in ids:
        seqs = sequences(ours, execution_id)
        assert seqs == list(range(1, len(seqs) + 1)) and len(seqs) >= 10
    # Resume from the middle: exactly the rest, in order.
    middle = len(ours) // 2
    cursor = ours[middle - 1].id or ""
    left = {(m.data["execution_id"], m.data["sequence"]) for m in ours[middle:]}
    seen: list[tuple[str, int]] = []

    def all_seen(message: Message) -> bool:
        if not message.is_control and message.data["execution_id"] in ids:
            seen.append((message.data["execution_id"], message.data["sequence"]))
        return set(seen) >= left

    status, resumed = read_stream(http, headers={"Last-Event-ID": cursor}, until=all_seen)
    assert status == 200
    assert resumed[0].data["data"]["replayed"] >= len(left)
    assert seen == [(m.data["execution_id"], m.data["sequence"]) for m in ours[middle:]]


# -- refusals ------------------------------------------------------------------------------------

SOME_ID = "x-20260908T010203Z-0a1b2c3d"
CHANNEL_REFUSALS = [
    ("foreign origin", {"execution": SOME_ID}, {"Origin": "http://evil.example"}, 403, "forbidden"),
    ("foreign origin, unscoped", {}, {"Origin": "https://127.0.0.1"}, 403, "forbidden"),
    ("malformed execution id", {"execution": "x-123"}, {}, 400, "invalid_input"),
    ("malformed after", {"execution": SOME_ID, "after": "ten"}, {}, 400, "invalid_input"),
    ("negative after", {"execution": SOME_ID, "after": "-1"}, {}, 400, "invalid_input"),
    ("malformed feed cursor", {"after": "yesterday"}, {}, 400, "invalid_input"),
    (
        "malformed Last-Event-ID",
        {"execution": SOME_ID},
        {"Last-Event-ID": "1-2-3"},
        400,
        "invalid_input",
    ),
    ("unknown parameter", {"execution": SOME_ID, "since": "1"}, {}, 400, "invalid_input"),
    ("JSON only", {"execution": SOME_ID}, {"Accept": "application/json"}, 406, "invalid_input"),
    ("unknown execution", {"execution": SOME_ID}, {}, 404, "not_found"),
]


@pytest.mark.parametrize(
    "params, headers, status, code",
    [r[1:] for r in CHANNEL_REFUSALS],
    ids=[r[0] for r in CHANNEL_REFUSALS],
)
def test_each_channel_refusal_has_its_status_and_envelope(
    http: httpx.Client, params: dict[str, str], headers: dict[str, str], status: int, code: str
) -> None:
    sent = {"Accept": "text/event-stream", **headers}
    error = assert_envelope(http.get("/events", params=params, headers=sent), status, code)
    if status == 406:
        assert "executions.events" in error["message"]


def test_the_channel_answers_get_only(http: httpx.Client) -> None:
    assert_envelope(http.post("/events"), 405, "invalid_input")


def test_past_max_live_channels_a_new_one_is_refused_503(locked_api: ApiProcess) -> None:
    auth = {"Authorization": f"Bearer {TOKEN}", "Accept": "text/event-stream"}
    with locked_api.client(headers=auth) as client:
        with client.stream("GET", "/events") as first, client.stream("GET", "/events") as second:
            assert first.status_code == second.status_code == 200
            assert client.get("/api/v1/live").json()["channels"] == 2
            assert_envelope(client.get("/events"), 503, "unavailable")
        deadline = time.monotonic() + LIVENESS_SECONDS
        while client.get("/api/v1/live").json()["channels"] != 0:  # it notices them closed
            assert time.monotonic() < deadline, "the two closed channels are still counted"
            time.sleep(0.02)
        status, messages = read_stream(client, until=lambda m: m.event == "stream.ready")
        assert status == 200 and messages[0].event == "stream.ready"


# -- slow and many clients -----------------------------------------------------------------------


def slow_reader(api: ApiProcess, params: dict[str, str]) -> tuple[httpx.Client, Any]:
    """A client with a fixed, modest receive buffer, so the server's writes back up while it
    stalls (and what is buffered reads back quickly once it reads again)."""
    transport = httpx.HTTPTransport(
        socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 256 * 1024)]
    )
    client = httpx.Client(base_url=api.url, transport=transport, timeout=30)
    response = client.send(
        client.build_request(
            "GET", "/events", params=params, headers={"Accept": "text/event-stream"}
        ),
        stream=True,
    )
    return client, response


def test_a_slow_listener_lags_goes_on_from_the_oldest_retained_event_and_slows_no_one(
    api: ApiProcess, http: httpx.Client
) -> None:
    # About 30,000 events (9 MB) in a couple of seconds: far more than the store keeps and
    # than the socket buffers hold.
    snapshot = start(http, "executions.demonstrate", steps=30, log_lines=1000, delay_ms=50)
    scoped_client, scoped = slow_reader(api, {"execution": snapshot["id"]})
    feed_client, feed = slow_reader(api, {})
    lines = scoped.iter_lines()
    assert next(lines) == "event: stream.ready"
    ready = json.loads(next(lines)[len("data: ") :])["data"]
    # Stalled: the execution runs to its end regardless.
    final = wait_final(http, snapshot["id"])
    assert final["state"] == "succeeded"
    total = final["last_sequence"]
    try:
        messages = [Message(s.event, s.data, s.id or None) for s in _sse(lines)]
    finally:
        scoped.close()
        scoped_client.close()
    lag = [i for i, m in enumerate(messages) if m.event == "stream.lagged"]
    assert lag, "a listener this far behind must be told it lagged"
    first = next(m for m in messages if not m.is_control).data["sequence"]
    assert first == 1 or ready["truncated"]
    previous = first - 1
    for m in messages:
        if m.event == "stream.lagged":
            previous += m.data["data"]["dropped"]
            continue
        if m.is_control:
            continue
        assert m.data["sequence"] == previous + 1
        previous = m.data["sequence"]
    assert previous == total and messages[-1].event == "stream.closing"
    after_lag = next(m for m in messages[lag[-1] :] if not m.is_control)
    assert after_lag.data["sequence"] > total - 500 - 1  # retained when it caught up
    # The unscoped channel, just as stalled, is told what it lost and carries on to the end.
    try:
        seqs: list[int] = []
        dropped = 0
        for sse in EventSource(feed).iter_sse():
            if sse.event == "stream.lagged":
                dropped += json.loads(sse.data)["data"]["dropped"]
            elif not sse.event.startswith("stream."):
                data = json.loads(sse.data)
                if data["execution_id"] == snapshot["id"]:
                    seqs.append(data["sequence"])
                    if data["type"] in TERMINAL:
                        break
        assert seqs[-1] == total and seqs == sorted(set(seqs))
        gaps = sum(b - a - 1 for a, b in zip(seqs, seqs[1:], strict=False))
        assert dropped >= gaps  # every event it did not get, it was told of
    finally:
        feed.close()
        feed_client.close()


def _sse(lines: Any) -> Any:
    """SSE messages from an iterator of lines (what follows `event: stream.ready`)."""
    event, data, ident = "", "", None
    for line in lines:
        if line == "":
            if event:
                yield _Raw(event, data, ident)
            event, data, ident = "", "", None
        elif line.startswith("event: "):
            event = line[7:]
        elif line.startswith("data: "):
            data = line[6:]
        elif line.startswith("id: "):
            ident = line[4:]
        if event == "stream.closing" and data:
            yield _Raw(event, data, ident)
            return


class _Raw:
    def __init__(self, event: str, data: str, id: str | None) -> None:
        self.event, self.data, self.id = event, data, id


async def test_500_listeners_on_one_api_process_all_receive_with_bounded_redis_connections(
    api: ApiProcess, http: httpx.Client, suite_redis_url: str
) -> None:
    snapshot = start(http, "executions.demonstrate", steps=6, delay_ms=700)
    params = {"execution": snapshot["id"]}
    limits = httpx.Limits(max_connections=600, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=api.url, limits=limits, timeout=60) as client:

        async def listen() -> list[int]:
            seen: list[int] = []
            async with client.stream(
                "GET", "/events", params=params, headers={"Accept": "text/event-stream"}
            ) as response:
                assert response.status_code == 200
                async for sse in EventSource(response).aiter_sse():
                    if sse.event == "stream.closing":
                        break
                    if not sse.event.startswith("stream."):
                        seen.append(json.loads(sse.data)["sequence"])
            return seen

        listeners = [asyncio.create_task(listen()) for _ in range(500)]
        held = 0
        for _ in range(600):
            held = (await client.get("/api/v1/live")).json()["channels"]
            if held >= 500:
                break
            await asyncio.sleep(0.02)
        assert held == 500
        state = (await client.get("/api/v1/executions/get", params={"id": snapshot["id"]})).json()
        assert state["state"] == "running"  # all 500 are following a running execution
        peak, blocked = await peak_connections(suite_redis_url, api, listeners, every=0.1)
        results = await asyncio.gather(*listeners)
    total = results[0][-1]
    assert all(seen == list(range(1, total + 1)) for seen in results)
    # One shared feed reader blocks on Redis for all 500; the pool stays within its bound.
    assert 1 <= peak <= API_MAX_CONNECTIONS and blocked <= 1


async def test_hundreds_of_http_long_polls_hold_no_redis_connection_each(
    api: ApiProcess, http: httpx.Client, suite_redis_url: str
) -> None:
    snapshot = start(http, "tests.sleepy", seconds=2)
    limits = httpx.Limits(max_connections=300, max_keepalive_connections=0)
    async with httpx.AsyncClient(base_url=api.url, limits=limits, timeout=60) as client:

        async def wait() -> str:
            response = await client.get(
                "/api/v1/executions/wait", params={"id": snapshot["id"], "timeout_ms": 30_000}
            )
            return str(response.json()["state"])

        waits = [asyncio.create_task(wait()) for _ in range(300)]
        peak, blocked = await peak_connections(suite_redis_url, api, waits, every=0.05)
        assert {w.result() for w in waits} == {"succeeded"}
    # The waits are woken by the one feed reader: none blocks a connection of its own.
    assert peak <= API_MAX_CONNECTIONS and blocked <= 1


# -- two API processes ---------------------------------------------------------------------------


def test_two_api_processes_on_one_redis_serve_the_same_stream(
    api: ApiProcess, api_b: ApiProcess, http: httpx.Client
) -> None:
    snapshot = start(http, "executions.demonstrate", steps=3, delay_ms=200)
    results: dict[str, list[Message]] = {}

    def listen(server: ApiProcess) -> None:
        with server.client() as client:
            results[server.url] = read_stream(client, {"execution": snapshot["id"]})[1]

    threads = [threading.Thread(target=listen, args=(s,)) for s in (api, api_b)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    a, b = (events_of(results[s.url]) for s in (api, api_b))
    assert a == b and a[-1]["type"] == "execution.completed"
    assert [e["sequence"] for e in a] == list(range(1, len(a) + 1))
    with api_b.client() as client:  # and the other process answers the same history
        page = client.get("/api/v1/executions/events", params={"id": snapshot["id"]}).json()
    assert page["events"] == a


def test_a_cursor_past_the_end_of_a_running_execution_still_closes_at_its_end(
    http: httpx.Client,
) -> None:
    snapshot = start(http, "tests.sleepy", seconds=0.5)
    status, messages = read_stream(http, {"execution": snapshot["id"], "after": "1000"})
    assert status == 200
    assert [m.event for m in messages] == ["stream.ready", "stream.closing"]
    assert messages[0].data["data"]["replayed"] == 0
