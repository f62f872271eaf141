"""The sweeper's log names workers and executions as the text they are (`x-2026...`), never
as bytes reprs (`b'x-2026...'`), with the API's client and with a worker's, on a real
Redis. Keys of its own prefix, so the package's API and worker are left alone."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.api.app import api_redis
from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.loading import load_capabilities
from majordomus.store.connect import connect
from majordomus.sweeper import Sweeper
from tests.conftest import make_settings

PREFIX = "md-hardening-sweeper"


@pytest.fixture(params=["api", "worker"])
async def engine(request: Any, suite_redis_url: str) -> AsyncIterator[Engine]:
    settings = make_settings(suite_redis_url, key_prefix=PREFIX)
    client = (
        api_redis(suite_redis_url) if request.param == "api" else connect(suite_redis_url, arq=True)
    )
    engine = Engine(client, load_capabilities(settings.capabilities), settings)
    try:
        yield engine
    finally:
        keys = [k async for k in client.scan_iter(match=f"{PREFIX}*")]
        if keys:
            await client.delete(*keys)
        await client.aclose()


async def dead_worker_running(engine: Engine, worker_id: str, count: int) -> list[str]:
    """`count` executions claimed by `worker_id`, a worker whose lease has run out."""
    store = engine.store
    _, ms = now_stamp()
    presence = {
        "id": worker_id, "host": "test", "pid": 1, "started_at": "", "running": count,
        "last_beat": "", "last_beat_ms": ms - 5000, "accepting": 1,
    }  # fmt: skip
    await store.beat(worker_id, presence, ms - 5000, 60_000)
    ids = [(await engine.start("tests.sleepy", {"seconds": 60})).id for _ in range(count)]
    for execution_id in ids:
        claim, _ = await store.claim(execution_id, worker_id)
        assert claim.complete
    await store.redis.delete(store.keys.partitions[0].lease(worker_id))
    return ids


async def test_the_sweepers_log_names_ids_as_text(
    engine: Engine, caplog: pytest.LogCaptureFixture
) -> None:
    settings: Settings = engine.settings
    lost = await dead_worker_running(engine, "w-gone-7", 7)
    with caplog.at_level(logging.INFO, logger="majordomus.sweeper"):
        assert await Sweeper(engine.store, settings, "test").tick() == 7
    [line] = [r.getMessage() for r in caplog.records if "stopped renewing" in r.getMessage()]
    shown = sorted(lost)[:5]
    assert line == (
        "worker w-gone-7 stopped renewing its lease: failed the 7 executions it ran as "
        f"unavailable: {', '.join(shown)} and 2 more"
    )
    assert "b'" not in line and 'b"' not in line
