"""Script calls of one loop turn travel together (`majordomus.store.batching`), against a real
Redis: one connection for the batch, each call answered alone, NOSCRIPT survived, a lost
Redis failing each call as it would alone, a cancelled caller left out."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.local.embedded import free_port
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from majordomus.store.failures import UNREACHABLE
from tests.conftest import make_settings

LOG = ("execution.log", b'{"stream":"handler","message":"hello"}')


def connections_made(client: Any) -> int:
    pool = client.connection_pool
    return len(pool._available_connections) + len(pool._in_use_connections)


async def test_appends_of_one_turn_share_one_connection_and_are_answered_each_alone(
    engine: Engine, redis_url: str
) -> None:
    ids = [(await engine.start("tests.noop", {})).id for _ in range(20)]
    client = connect(redis_url)
    try:
        fresh = Engine(client, REGISTRY, make_settings(redis_url))
        answers = await asyncio.gather(
            *(fresh.store.append(i, [LOG, LOG]) for i in ids),
            fresh.store.append("x-20260101T000000Z-00000000", [LOG]),  # no such execution
        )
        # Twenty-one calls at once: the first sent at once, the twenty others together
        # while it was out. Alone, each would have taken a connection of its own.
        assert connections_made(client) == 2
    finally:
        await client.aclose()
    for answer in answers[:-1]:
        assert (answer.found, answer.applied, answer.last_sequence) == (True, 2, 4)
    assert not answers[-1].found and answers[-1].applied == 0
    for execution_id in ids:
        page = await engine.store.page(execution_id, after=0, limit=10)
        assert page is not None
        assert [json.loads(e)["sequence"] for e in page.events] == [1, 2, 3, 4]


async def test_a_redis_that_lost_its_scripts_runs_every_call_of_a_batch_once(
    engine: Engine, redis: Any
) -> None:
    ids = [(await engine.start("tests.noop", {})).id for _ in range(5)]
    await redis.script_flush()
    answers = await asyncio.gather(*(engine.store.append(i, [LOG]) for i in ids))
    assert [a.last_sequence for a in answers] == [3] * 5
    for execution_id in ids:
        snapshot = await engine.store.snapshot(execution_id)
        assert snapshot is not None and snapshot[b"last_seq"] == b"3"


async def test_without_redis_every_call_of_a_batch_fails_as_it_would_alone() -> None:
    url = f"redis://127.0.0.1:{free_port()}/0"  # nothing listens there
    client = connect(url)
    try:
        store = Engine(client, REGISTRY, make_settings(url)).store
        results = await asyncio.gather(
            *(store.append(f"x-20260101T000000Z-0000000{i}", [LOG]) for i in range(3)),
            return_exceptions=True,
        )
    finally:
        await client.aclose()
    assert len(results) == 3
    for result in results:
        assert isinstance(result, UNREACHABLE), result


async def test_a_lone_call_is_sent_at_once_and_the_ones_made_meanwhile_together(
    engine: Engine, redis_url: str
) -> None:
    execution_id = (await engine.start("tests.noop", {})).id
    client = connect(redis_url)
    try:
        store = Engine(client, REGISTRY, make_settings(redis_url)).store
        assert (await store.append(execution_id, [LOG])).last_sequence == 3
        assert (await store.append(execution_id, [LOG])).last_sequence == 4
        assert connections_made(client) == 1  # one after the other: one connection
        first = asyncio.ensure_future(store.append(execution_id, [LOG]))
        await asyncio.sleep(0)  # sent at once, alone: the turn ends with it out
        assert not first.done()
        later = [asyncio.ensure_future(store.append(execution_id, [LOG])) for _ in range(5)]
        await asyncio.gather(first, *later)
        # The five together: beside the first while it is out, or on its connection when
        # its answer came back first (five sent apart would have needed more).
        assert connections_made(client) in (1, 2)
    finally:
        await client.aclose()
    assert sorted(f.result().last_sequence for f in [first, *later]) == [5, 6, 7, 8, 9, 10]


async def test_a_caller_cancelled_before_its_batch_is_sent_writes_nothing(engine: Engine) -> None:
    execution_id = (await engine.start("tests.noop", {})).id
    other = (await engine.start("tests.noop", {})).id
    first = asyncio.ensure_future(engine.store.append(other, [LOG]))  # sent at once, alone
    cancelled = asyncio.ensure_future(engine.store.append(execution_id, [LOG]))
    kept = asyncio.ensure_future(engine.store.append(execution_id, [LOG, LOG]))
    await asyncio.sleep(0)  # both have joined the batch; it is sent at the turn's end
    assert not first.done()
    cancelled.cancel()
    with pytest.raises(asyncio.CancelledError):
        await cancelled
    assert (await kept).last_sequence == 4
    assert (await first).last_sequence == 3
    snapshot = await engine.store.snapshot(execution_id)
    assert snapshot is not None and snapshot[b"last_seq"] == b"4"
