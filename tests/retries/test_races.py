"""The worst moments of a retry, arranged by hand on the real store (no worker process):
a worker that dies between starting the next attempt and failing its own, a sweeper that
starts one for a worker that then comes back, a cancel that lands as the next attempt is
started, a start of the next attempt sent twice. The chain never forks, and a retry never
runs beside the attempt it retries."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from majordomus.attempts import start_next_attempt
from majordomus.clock import now_stamp
from majordomus.engine import Engine
from majordomus.retries import RETRY_SCHEDULED
from majordomus.sweeper import LOST_RETRY_FLOOR_MS, Sweeper
from tests.conftest import _redis_url, until
from tests.retries.conftest import REGISTRY, engine_on, forget_prefix
from tests.retries.workload import FLAKY, FRAGILE

GHOST = "ghost-worker"
PREFIX = "rs"


@pytest.fixture
async def bare() -> AsyncIterator[Engine]:
    """An engine on a prefix no worker serves: what runs is what the test says."""
    forget_prefix(_redis_url(), PREFIX)
    async with engine_on(PREFIX) as engine:
        yield engine


async def running_on_ghost(engine: Engine, capability: str, inp: dict[str, Any], lease_ms: int) -> str:
    """An execution claimed by a worker that beat once with this lease and never again."""
    _, ms = now_stamp()
    await engine.store.beat(GHOST, {"id": GHOST, "last_beat_ms": ms}, ms, lease_ms)
    started = await engine.start(capability, inp)
    result, _ = await engine.store.claim(started.id, GHOST)
    assert result.complete and result.state == "running"
    return started.id


async def lapsed(engine: Engine) -> bool:
    """Whether the ghost's lease has lapsed (Redis expired it) on every partition."""
    leases = [p.lease(GHOST) for p in engine.store.keys.partitions]
    return not await engine.redis.exists(*leases)


async def of_capability(engine: Engine, capability: str) -> list[str]:
    return [s.id for s in (await engine.list(capability=capability)).executions]


async def test_a_worker_dead_between_starting_the_retry_and_failing_gets_no_second_retry(
    bare: Engine, tmp_path: Path
) -> None:
    lost = await running_on_ghost(bare, FRAGILE, {"marker": str(tmp_path / "m")}, lease_ms=50)
    secret = await bare.store.worker_input(lost)
    made = await start_next_attempt(bare, REGISTRY.require(FRAGILE), await bare.get(lost), secret)
    await until(lambda: lapsed(bare))

    assert await Sweeper(bare.store, bare.settings, "test", engine=bare).sweep() == 1
    snap = await bare.get(lost)
    assert snap.state == "failed" and snap.error.code == "unavailable"  # type: ignore[union-attr]
    assert snap.retried_as == made.execution_id
    assert [d.code for d in snap.diagnostics] == [RETRY_SCHEDULED]
    assert made.execution_id in snap.diagnostics[0].summary
    assert sorted(await of_capability(bare, FRAGILE)) == sorted([lost, made.execution_id])


async def test_a_start_of_the_next_attempt_sent_twice_answers_one_execution(
    bare: Engine, tmp_path: Path
) -> None:
    lost = await running_on_ghost(bare, FLAKY, {"marker": str(tmp_path / "m")}, lease_ms=60_000)
    stale = await bare.get(lost)  # read before either start: no link seen
    cap = REGISTRY.require(FLAKY)
    secret = await bare.store.worker_input(lost)
    one, two = [await start_next_attempt(bare, cap, stale, secret) for _ in range(2)]
    assert one.execution_id == two.execution_id
    assert len(await of_capability(bare, FLAKY)) == 2
    assert (await bare.get(lost)).retried_as == one.execution_id


async def test_the_sweepers_retry_for_a_worker_that_comes_back_is_cancelled(
    bare: Engine, tmp_path: Path
) -> None:
    held = await running_on_ghost(bare, FRAGILE, {"marker": str(tmp_path / "m")}, lease_ms=50)
    await until(lambda: lapsed(bare))
    sweeper = Sweeper(bare.store, bare.settings, "test", engine=bare)
    retry_lost = sweeper._retry_lost

    async def then_the_worker_beats(execution_id: str) -> Any:
        end = await retry_lost(execution_id)
        _, ms = now_stamp()
        await bare.store.beat(GHOST, {"id": GHOST, "last_beat_ms": ms}, ms, 60_000)
        return end

    sweeper._retry_lost = then_the_worker_beats  # type: ignore[method-assign]
    assert await sweeper.sweep() == 0
    snap = await bare.get(held)
    assert snap.state == "running"  # its worker keeps it
    retry = await bare.get(str(snap.retried_as))
    assert retry.state == "cancelled"  # withdrawn before it was due
    assert isinstance(retry.due_at, str)
    assert LOST_RETRY_FLOOR_MS >= 1000


async def test_a_cancel_landing_as_the_next_attempt_is_started_cancels_it_too(
    bare: Engine, tmp_path: Path
) -> None:
    running = await running_on_ghost(bare, FLAKY, {"marker": str(tmp_path / "m")}, lease_ms=60_000)
    made = await start_next_attempt(
        bare, REGISTRY.require(FLAKY), await bare.get(running), await bare.store.worker_input(running)
    )
    answer = await bare.cancel(running)
    assert answer.outcome == "requested" and answer.execution.state == "cancelling"
    assert (await bare.get(made.execution_id)).state == "cancelled"


async def test_a_lost_attempt_with_no_attempt_left_says_so_and_is_not_retried(
    bare: Engine, tmp_path: Path
) -> None:
    lost = await running_on_ghost(bare, FRAGILE, {"marker": str(tmp_path / "m")}, lease_ms=50)
    # As the third attempt of its chain would be: two before it.
    await bare.store.redis.hset(bare.store.keys.snapshot(lost), "attempt", 3)
    await until(lambda: lapsed(bare))
    assert await Sweeper(bare.store, bare.settings, "test", engine=bare).sweep() == 1
    snap = await bare.get(lost)
    assert snap.state == "failed" and not isinstance(snap.retried_as, str)
    assert [d.code for d in snap.diagnostics] == ["retry.exhausted"]
    assert await of_capability(bare, FRAGILE) == [lost]


async def test_a_sweeper_without_an_engine_fails_lost_attempts_unretried(
    bare: Engine, tmp_path: Path
) -> None:
    lost = await running_on_ghost(bare, FRAGILE, {"marker": str(tmp_path / "m")}, lease_ms=50)
    await until(lambda: lapsed(bare))
    assert await Sweeper(bare.store, bare.settings, "test").sweep() == 1
    snap = await bare.get(lost)
    assert snap.state == "failed" and not isinstance(snap.retried_as, str) and not snap.diagnostics
