"""Idempotent starts: `executions.start` with an `idempotency_key` answers the execution
that key already names (200, its snapshot as it stands), on any API process, atomically:
racing starts with one key create one execution; the same key with another input is
`refused`, naming the execution that holds it."""

from __future__ import annotations

import asyncio
import collections
from typing import Any

import httpx
import redis as redis_sync

from majordomus.store.keys import Keys
from tests.api.conftest import ApiProcess, wait_final

START = "/api/v1/executions/start"


def _body(key: str, **inp: Any) -> dict[str, Any]:
    return {"capability": "tests.sleepy", "input": {"seconds": 0.01, **inp}, "idempotency_key": key}


def test_a_start_with_a_used_key_answers_the_same_execution_on_another_replica(
    http: httpx.Client, api_b: ApiProcess
) -> None:
    first = http.post(START, json=_body("order-17"))
    assert first.status_code == 200, first.text
    made = first.json()
    assert made["idempotency_key"] == "order-17"
    wait_final(http, made["id"])
    with api_b.client() as other:
        again = other.post(START, json=_body("order-17"))
    assert again.status_code == 200, again.text
    answer = again.json()
    assert answer["id"] == made["id"]
    assert answer["state"] == "succeeded"  # the existing snapshot, as it stands now


def test_the_same_key_with_another_input_is_refused_naming_the_holder(
    http: httpx.Client,
) -> None:
    held = http.post(START, json=_body("invoice-3")).json()
    other = http.post(START, json=_body("invoice-3", seconds=0.02))
    assert other.status_code == 422, other.text
    error = other.json()["error"]
    assert error["code"] == "refused"
    assert held["id"] in error["message"]
    assert error["suggestion"]
    elsewhere = http.post(START, json={**_body("invoice-3"), "capability": "tests.noop", "input": {}})
    assert elsewhere.status_code == 422 and held["id"] in elsewhere.json()["error"]["message"]


def test_a_thousand_racing_starts_with_ten_keys_create_ten_executions(
    http: httpx.Client, api: ApiProcess, api_b: ApiProcess, sync_redis: redis_sync.Redis
) -> None:
    before = sync_redis.zcard(Keys().partitions[0].all)
    keys = [f"race-{n}" for n in range(10)]

    async def race() -> list[tuple[str, str]]:
        limits = httpx.Limits(max_connections=32)
        async with (
            httpx.AsyncClient(base_url=api.url, timeout=30, limits=limits) as a,
            httpx.AsyncClient(base_url=api_b.url, timeout=30, limits=limits) as b,
        ):
            async def one(n: int) -> tuple[str, str]:
                key = keys[n % 10]
                client = a if n % 2 else b
                answer = await client.post(START, json=_body(key))
                assert answer.status_code == 200, answer.text
                return key, answer.json()["id"]

            return await asyncio.gather(*(one(n) for n in range(1000)))

    answers = asyncio.run(race())
    ids_by_key: dict[str, set[str]] = collections.defaultdict(set)
    for key, execution_id in answers:
        ids_by_key[key].add(execution_id)
    assert sorted(ids_by_key) == sorted(keys)
    assert all(len(ids) == 1 for ids in ids_by_key.values()), ids_by_key
    assert len({i for ids in ids_by_key.values() for i in ids}) == 10
    assert sync_redis.zcard(Keys().partitions[0].all) - before == 10


def test_a_start_without_a_key_is_never_merged(http: httpx.Client) -> None:
    one = http.post(START, json={"capability": "tests.noop"}).json()
    two = http.post(START, json={"capability": "tests.noop"}).json()
    assert one["id"] != two["id"]
    assert "idempotency_key" not in one
