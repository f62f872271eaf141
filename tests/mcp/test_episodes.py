"""Episodes over MCP: attach, traffic, detach; resume after a lost client, through another
API process; the reaper; and the refusals. Real API processes, real client processes."""

from __future__ import annotations

import json
from typing import Any

import anyio
import httpx
import pytest
from mcp import Client

from majordomus.context import Context
from majordomus.engine import Engine
from majordomus.episodes import Episode
from majordomus.errors import MajordomusError
from tests.conftest import until
from tests.mcp.conftest import MODES, ApiProcess, call, failure

HANDLE = "majordomus/episode"


async def episode_of(engine: Engine, external_id: str) -> Episode | None:
    return await engine.episodes.get(external_id)


async def state_of(engine: Engine, external_id: str) -> str | None:
    episode = await episode_of(engine, external_id)
    return episode.state if episode is not None else None


@pytest.mark.parametrize("mode", MODES)
async def test_attach_traffic_and_detach(api: ApiProcess, worker: Any, mode: str) -> None:
    external_id = f"conversation {mode}"
    # A 2026-07-28 client names its episode on each request; a session is bound to it.
    meta = {HANDLE: external_id} if mode == "auto" else None
    async with Client(api.url, mode=mode) as client:
        outside = await call(
            client, "majordomus_execution_start", {"capability": "executions.demonstrate"}
        )
        attached = await call(client, "majordomus_session_attach", {"external_id": external_id})
        assert attached["resumed"] is False
        assert attached["reattach_grace_seconds"] == 900
        episode = attached["episode"]
        assert (episode["external_id"], episode["state"], episode["attachments"]) == (
            external_id,
            "open",
            1,
        )

        inside = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate"},
            meta=meta,
        )
        assert inside["episode"] == external_id
        assert "episode" not in outside
        listed = await call(client, "majordomus_executions", {"episode": external_id})
        assert [x["id"] for x in listed["executions"]] == [inside["id"]]

        episodes = await call(client, "majordomus_episodes", {}, meta=meta)
        assert (episodes["open"], episodes["detached"], episodes["mine"]) == (1, 0, external_id)
        [shown] = episodes["episodes"]
        assert shown["executions"] == [inside["id"]] and shown["execution_count"] == 1
        assert shown["last_seen_at"] >= episode["last_seen_at"]

        detached = await call(client, "majordomus_session_detach", {}, meta=meta)
        closed = detached["episode"]
        assert (closed["state"], closed["close_reason"]) == ("closed", "detach")
        assert closed["closed_at"] >= closed["opened_at"] == episode["opened_at"]

        records = await call(client, "majordomus_episodes", {"closed": True})
        assert records["open"] == 0 and "mine" not in records
        [record] = records["episodes"]
        assert record["external_id"] == external_id
        assert record["executions"] == [inside["id"]]
        after = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate"},
            meta=meta,
        )
        assert "episode" not in after, "a closed episode is carried no more"


async def test_a_sessionless_client_can_name_its_episode_when_starting(api: ApiProcess) -> None:
    async with Client(api.url) as client:
        await call(client, "majordomus_session_attach", {"external_id": "thread-7"})
        started = await call(
            client,
            "majordomus_execution_start",
            {"capability": "executions.demonstrate", "episode": "thread-7"},
        )
        assert started["episode"] == "thread-7"
        [shown] = (await call(client, "majordomus_episodes", {}))["episodes"]
        assert shown["executions"] == [started["id"]]


async def test_a_client_back_under_its_id_resumes_its_episode(api: ApiProcess) -> None:
    async with Client(api.url, mode="legacy") as first:
        opened = await call(first, "majordomus_session_attach", {"external_id": "chat-1"})
        again = await call(first, "majordomus_session_attach", {"external_id": "chat-1"})
        assert again["episode"]["attachments"] == 1, "the same session attaching twice is one"
    async with Client(api.url) as second:
        resumed = await call(second, "majordomus_session_attach", {"external_id": "chat-1"})
    assert resumed["resumed"] is True
    assert resumed["episode"]["opened_at"] == opened["episode"]["opened_at"]
    assert resumed["episode"]["attachments"] == 2


async def test_a_session_holds_at_most_one_episode(api: ApiProcess) -> None:
    async with Client(api.url, mode="legacy") as client:
        await call(client, "majordomus_session_attach", {"external_id": "first"})
        code, text = await failure(client, "majordomus_session_attach", {"external_id": "second"})
        assert code == "refused" and "'first'" in text


KILLED_LEASE = 1.5
"""The lease of the APIs a killed client meets (seconds)."""


@pytest.mark.parametrize("killed_mode", MODES)
async def test_a_killed_client_leaves_its_episode_detached_for_a_new_client_on_another_api(
    spawn_api: Any, client_process: Any, engine: Engine, killed_mode: str
) -> None:
    # A short lease (the suite's is 3 s): a holder lapses, and is detached, that much sooner.
    first_api, second_api = spawn_api.many(2, MAJORDOMUS_LEASE_SECONDS=str(KILLED_LEASE))
    held = client_process(first_api.url, "conv-42", killed_mode, then="hold")
    first = json.loads(held.answer())
    assert first["resumed"] is False and first["episode"]["state"] == "open"
    if killed_mode == "legacy":
        # Silent but connected (its GET stream open): its replica keeps the episode held
        # a second past the lease.
        await anyio.sleep(KILLED_LEASE + 1)
        assert await state_of(engine, "conv-42") == "open"

    held.kill()
    await until(lambda: _is(engine, "conv-42", "detached"), timeout=30)
    detached = await episode_of(engine, "conv-42")
    assert detached is not None and detached.expires_at

    back = client_process(second_api.url, "conv-42", "auto", then="exit")
    second = json.loads(back.answer())
    assert second["resumed"] is True
    assert second["episode"]["opened_at"] == first["episode"]["opened_at"]
    assert second["episode"]["attachments"] == 2
    assert second["episode"]["held_by"] != first["episode"]["held_by"]


async def test_a_session_that_ends_detaches_its_episode_at_once(
    api: ApiProcess, engine: Engine
) -> None:
    async with Client(api.url, mode="legacy") as client:
        await call(client, "majordomus_session_attach", {"external_id": "leaving"})
        assert await state_of(engine, "leaving") == "open"
    # The client's exit ends its session (DELETE): detached, not closed.
    await until(lambda: _is(engine, "leaving", "detached"), timeout=10)


async def test_the_reaper_closes_an_abandoned_episode_as_expired(
    spawn_api: Any, client_process: Any, engine: Engine
) -> None:
    api = spawn_api(MAJORDOMUS_REATTACH_GRACE="1", MAJORDOMUS_LEASE_SECONDS="1")
    answer = json.loads(client_process(api.url, "abandoned", then="exit").answer())
    assert answer["episode"]["state"] == "open"

    async def expired() -> Any:
        records = await engine.episodes.closed(10)
        return [r for r in records if r.external_id == "abandoned"]

    [record] = await until(expired, timeout=30)
    assert record.close_reason == "expired" and record.state == "closed"
    assert record.detached_at and record.closed_at
    assert await episode_of(engine, "abandoned") is None


@pytest.mark.parametrize("mode", MODES)
async def test_a_stopping_api_detaches_the_episodes_it_held(
    spawn_api: Any, client_process: Any, engine: Engine, mode: str
) -> None:
    # A long lease: only the stopping replica can have detached it within the test.
    api = spawn_api(MAJORDOMUS_LEASE_SECONDS="120")
    holder = client_process(api.url, f"held-{mode}", mode, then="hold")
    assert json.loads(holder.answer())["episode"]["state"] == "open"
    assert api.stop() == 0
    assert await state_of(engine, f"held-{mode}") == "detached"


async def test_attach_over_plain_http_is_refused(api: ApiProcess, engine: Engine) -> None:
    async with httpx.AsyncClient(base_url=api.base) as http:
        answer = await http.post("/api/v1/episodes/attach", json={"external_id": "web"})
        unnamed = await http.post("/api/v1/episodes/detach", json={})
        listed = await http.get("/api/v1/episodes")
        document = (await http.get("/openapi.json")).json()
    # Attaching needs an MCP connection: no route, and none in the document.
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "not_found"
    assert "/api/v1/episodes/attach" not in document["paths"]
    # Detaching over HTTP names its episode: the document requires it, the server says so.
    detach = document["paths"]["/api/v1/episodes/detach"]["post"]
    body = detach["requestBody"]["content"]["application/json"]["schema"]["$ref"]
    assert document["components"]["schemas"][body.rsplit("/", 1)[-1]]["required"] == ["external_id"]
    assert unnamed.status_code == 422
    assert listed.status_code == 200 and listed.json() == {"open": 0, "detached": 0, "episodes": []}

    with pytest.raises(MajordomusError) as refusal:
        await engine.invoke(
            "episodes.attach", {"external_id": "web"}, ctx=Context(engine, actor="http")
        )
    assert refusal.value.code == "refused"
    assert await episode_of(engine, "web") is None


async def test_detach_over_plain_http_closes_a_named_episode(api: ApiProcess) -> None:
    async with Client(api.url) as client:
        await call(client, "majordomus_session_attach", {"external_id": "named"})
    async with httpx.AsyncClient(base_url=api.base) as http:
        closed = await http.post("/api/v1/episodes/detach", json={"external_id": "named"})
        again = await http.post("/api/v1/episodes/detach", json={"external_id": "named"})
    assert closed.status_code == 200
    assert closed.json()["episode"]["close_reason"] == "detach"
    assert again.status_code == 404


@pytest.mark.parametrize("external_id", ["", "   ", "a\nb", "line\r\n", "tab\u2028sep"])
async def test_blank_and_multi_line_external_ids_are_invalid_input(
    api: ApiProcess, external_id: str
) -> None:
    async with Client(api.url) as client:
        code, _ = await failure(client, "majordomus_session_attach", {"external_id": external_id})
        assert code == "invalid_input"
        code, _ = await failure(client, "majordomus_session_detach", {"external_id": external_id})
        assert code == "invalid_input"
        assert (await call(client, "majordomus_episodes", {}))["episodes"] == []


async def _is(engine: Engine, external_id: str, state: str) -> bool:
    return await state_of(engine, external_id) == state
