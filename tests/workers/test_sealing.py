"""Secrets at rest: with `MAJORDOMUS_ENCRYPTION_KEYS`, the worker-only input of a queued
execution and a schedule's definition are sealed in Redis (AES-SIV), opened where they are
read, and keys rotate; without keys they are plain JSON, as before."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from majordomus.clock import now_stamp
from majordomus.engine import Engine
from majordomus.schedules import ScheduleDefinition
from majordomus.start_options import StartOptions
from majordomus.store.schedules import ScheduleStore
from majordomus.store.sealing import MAGIC, Sealer, SealError, new_key
from tests.conftest import make_settings, running_worker
from tests.process_capabilities import registry

REGISTRY = registry()
TOKEN = "tok-5b7e1a90-sealed-secret"
OLD, NEW = new_key(), new_key()


def test_a_sealed_value_opens_with_any_of_the_keys_and_not_without_them() -> None:
    old = Sealer([OLD])
    sealed = old.seal(b'{"token":"x"}')
    assert sealed.startswith(MAGIC) and b"token" not in sealed
    assert sealed != old.seal(b'{"token":"x"}')  # a random nonce each time
    assert old.seal(b"same", deterministic=True) == old.seal(b"same", deterministic=True)
    rotated = Sealer([NEW, OLD])  # a new key first: it seals, the old one still opens
    assert rotated.open(sealed) == b'{"token":"x"}'
    assert Sealer([NEW]).open(rotated.seal(b"new")) == b"new"
    with pytest.raises(SealError, match="key this process does not have"):
        Sealer([NEW]).open(sealed)
    tampered = sealed[:-1] + bytes((sealed[-1] ^ 1,))
    with pytest.raises(SealError, match="does not open"):
        old.open(tampered)
    assert Sealer().open(b'{"plain":1}') == b'{"plain":1}'  # written before keys were set
    assert Sealer([NEW]).open(b'{"plain":1}') == b'{"plain":1}'
    with pytest.raises(SealError, match="not 64 bytes"):
        Sealer(["short"])


@pytest.fixture
def sealed_settings(redis_url: str) -> Any:
    return make_settings(redis_url, encryption_keys=[NEW, OLD])


@pytest.fixture
async def sealed_engine(redis: Any, sealed_settings: Any) -> AsyncIterator[Engine]:
    yield Engine(redis, REGISTRY, sealed_settings)


@pytest.mark.usefixtures("spawns")
async def test_a_queued_executions_secret_input_is_sealed_in_redis_and_opened_by_its_worker(
    redis: Any, sealed_engine: Engine, sealed_settings: Any
) -> None:
    due = now_stamp()[1] + 1_500  # queued (delayed) a moment: its input waits in Redis
    snap = await sealed_engine.start(
        "loop.tattle", {"token": TOKEN}, options=StartOptions(start_at_ms=due)
    )
    raw = await redis.get(sealed_engine.store.keys.secret_input(snap.id))
    assert raw.startswith(MAGIC) and TOKEN.encode() not in raw
    async with running_worker(redis, sealed_settings, registry=REGISTRY):
        done = await sealed_engine.wait(snap.id, 20_000)
    # It ran on the real input: its log line names the token, masked (the mask is made of
    # the opened input's secret values).
    assert done.state == "succeeded" and done.output["token"] == "«redacted»"
    assert await redis.exists(sealed_engine.store.keys.secret_input(snap.id)) == 0


async def test_without_keys_the_secret_input_is_plain_json(redis: Any, redis_url: str) -> None:
    engine = Engine(redis, REGISTRY, make_settings(redis_url))
    due = now_stamp()[1] + 60_000
    snap = await engine.start("loop.tattle", {"token": TOKEN}, options=StartOptions(start_at_ms=due))
    raw = await redis.get(engine.store.keys.secret_input(snap.id))
    assert raw.startswith(b"{") and TOKEN.encode() in raw


async def test_a_schedules_definition_is_sealed_and_an_unchanged_declaration_stays_unchanged(
    redis: Any, sealed_settings: Any
) -> None:
    store = ScheduleStore(redis, sealed_settings)
    definition = ScheduleDefinition("loop.tattle", "* * * * *", input={"token": TOKEN})
    assert await store.declare("nightly", definition) is True
    raw = await redis.hget(store.keys.schedule("nightly"), "definition")
    assert raw.startswith(MAGIC) and TOKEN.encode() not in raw
    assert await store.declare("nightly", definition) is False  # the same bytes: unchanged
    stored = await store.one("nightly")
    assert stored is not None and stored.definition.input == {"token": TOKEN}
    # Rotated keys (the old one kept): it still reads; declared again, it is sealed anew.
    rotated = ScheduleStore(redis, sealed_settings.__class__.from_env({}, **{
        **{f: getattr(sealed_settings, f) for f in sealed_settings.__struct_fields__},
        "encryption_keys": [new_key(), NEW],
    }))
    assert (await rotated.one("nightly")).definition.input == {"token": TOKEN}  # type: ignore[union-attr]
    assert await rotated.declare("nightly", definition) is True


@pytest.mark.usefixtures("spawns")
async def test_a_worker_without_its_key_fails_the_execution_and_runs_nothing(
    redis: Any, redis_url: str, sealed_engine: Engine
) -> None:
    snap = await sealed_engine.start("loop.tattle", {"token": TOKEN})
    stranger = make_settings(redis_url, encryption_keys=[new_key()])
    async with running_worker(redis, stranger, registry=REGISTRY):
        done = await sealed_engine.wait(snap.id, 20_000)
    assert done.state == "failed" and done.error.code == "internal"
    assert "sealed with a key this process does not have" in done.error.message
    assert done.steps == []  # its handler never ran
