"""Rate limits (`majordomus.flow.RateLimit`, issue 35 point 2): starts to running per second,
minute or hour, globally and per key, kept in Redis and checked in the take; an execution
over the limit waits as a delayed one does, its `due_at` saying until when and a
diagnostic saying why."""

from __future__ import annotations

import asyncio
from typing import Any

import msgspec
import pytest

from majordomus.engine import Engine
from majordomus.flow import PerKey, RateLimit
from majordomus.registry import Registry, RegistryError, capability
from majordomus.reports import queue_report
from majordomus.scrape import cluster_families
from tests.capabilities import Slept
from tests.conftest import running_worker, wait_for_workers
from tests.majordomus.test_metrics import sample, scraped
from tests.workers.test_per_key import _ms

WORKER = "rate-test-worker"


@pytest.mark.parametrize(
    ("rate", "per_key", "says"),
    [
        (RateLimit(0), None, "limit 0 .* at least 1"),
        (RateLimit(5, burst=0), None, "burst 0 .* at least 1"),
        (RateLimit(5, "day"), None, "one of second, minute, hour"),
        (RateLimit(5, key="customer"), None, "not a member of its input"),
        (RateLimit(5, key="tenant"), PerKey("region", 1), "name one member"),
    ],
)
def test_a_rate_limit_declared_wrongly_is_refused_at_declaration(
    rate: RateLimit, per_key: PerKey | None, says: str
) -> None:
    class In(msgspec.Struct):
        tenant: str
        region: str

    with pytest.raises(RegistryError, match=says):
        capability(
            "t.rated", input=In, output=Slept, rate_limit=rate, per_key=per_key, registry=Registry()
        )(lambda ctx, inp: Slept(0))


def test_the_pace_of_a_limit() -> None:
    assert RateLimit(50).interval_ms == 20
    assert RateLimit(60, "minute").interval_ms == 1000
    assert RateLimit(10, "hour", burst=3).tolerance_ms == 2 * 360_000


async def _take(engine: Engine, count: int = 50) -> list[str]:
    for part in engine.store.keys.partitions:
        await engine.redis.set(part.lease(WORKER), 1, px=60_000)
    took = await engine.store.take(WORKER, count, engine.store.next_token())
    return [t.execution_id for t in took.taken]


async def test_over_the_limit_each_is_given_its_turn_and_waits_for_it_as_a_delayed_start(
    engine: Engine, redis: Any
) -> None:
    a = [(await engine.start("tests.rated_per_tenant", {"tenant": "a"})).id for _ in range(4)]
    b = (await engine.start("tests.rated_per_tenant", {"tenant": "b"})).id
    # One of each tenant starts (a bucket per key); a's others get turns 500 ms apart.
    assert set(await _take(engine)) == {a[0], b}
    part = engine.store.keys.partitions[0]
    turns = [int(await redis.zscore(part.delayed, i)) for i in a[1:]]
    assert [t2 - t1 for t1, t2 in zip(turns, turns[1:], strict=False)] == [500, 500]
    assert await redis.zcard(part.queue) == 0  # out of the queue: no worker reads them
    held = await engine.get(a[3])
    assert held.state == "queued" and _ms(held.due_at) == turns[2]
    (diag,) = held.diagnostics
    assert diag.code == "rate_limit.held" and held.due_at in diag.summary
    # What waits, and why: queue.show and /metrics say the rate limit holds the three.
    (group,) = (await queue_report(engine)).queued_by_capability
    assert (group.count, group.held_by_rate) == (3, 3)
    samples = scraped(await cluster_families(engine))
    assert sample(samples, "majordomus_queue_held", capability=group.capability, limit="rate") == 3
    # A take before the turn takes nothing, and gives no second turn or diagnostic.
    assert await _take(engine) == []
    assert len((await engine.get(a[1])).diagnostics) == 1
    assert int(await redis.zscore(part.delayed, a[1])) == turns[0]


async def test_per_key_the_limit_paces_each_key_and_keys_do_not_wait_for_each_other(
    redis: Any, settings: Any, engine: Engine
) -> None:
    async with running_worker(redis, settings):
        ids = {
            t: [(await engine.start("tests.rated_per_tenant", {"tenant": t})).id for _ in range(4)]
            for t in ("a", "b")
        }
        done = {t: [await engine.wait(i, 20_000) for i in xs] for t, xs in ids.items()}
    for snaps in done.values():
        assert all(s.state == "succeeded" for s in snaps)
        starts = sorted(await started_ms(engine, [s.id for s in snaps]))
        # Two a second with no burst: the k-th start's turn is k × 500 ms after the first's,
        # and none starts before its turn (one may start a little after it), by Redis's clock.
        assert all(t - starts[0] >= k * 500 for k, t in enumerate(starts)), starts
    # Each key at its own pace: b's last started before a's last had its turn come.
    first_a = min(await started_ms(engine, [s.id for s in done["a"]]))
    assert max(await started_ms(engine, [s.id for s in done["b"]])) < first_a + 2_000


async def started_ms(engine: Engine, ids: list[str]) -> list[int]:
    """When each started by Redis's clock (the take's `started_ms`, the clock the bucket is
    timed by; a snapshot's `started_at` is its worker's stamp, taken as the take was sent)."""
    found = await engine.store.snapshot_fields(ids, ["started_ms"])
    return [int(ms) for (ms,) in found if ms is not None]


async def test_at_fifty_a_second_with_five_eager_workers_the_starts_stay_within_the_bucket(
    engine: Engine, worker_process: Any, redis: Any
) -> None:
    """Five worker processes, 800 starts of a capability limited to 50 a second (burst 1)
    made at once: the k-th start comes no sooner than k × 20 ms after the first (its turn;
    a start may come a little after its turn, never before), so the 10 s from the first
    hold at most 501, the bucket's bound (by Redis's clock: each start's `started_ms`)."""
    for _ in range(5):
        worker_process()
    await wait_for_workers(redis, 5)
    ids = [(await engine.start("tests.rated", {})).id for _ in range(800)]
    await asyncio.sleep(10.5)
    snaps = [await engine.get(i) for i in ids]
    starts = sorted(await started_ms(engine, ids))
    first = starts[0]
    within = [t for t in starts if t < first + 10_000]
    worst = max(sum(1 for t in starts[i:] if t < s + 1_000) for i, s in enumerate(starts))
    print(
        f"rate limit 50/s, 5 workers eager, 800 waiting: {len(within)} started in the first 10 s "
        f"({len(within) / 10:.1f}/s), at most {worst} in any 1 s span"
    )
    assert all(t - first >= k * 20 for k, t in enumerate(starts)), "a start before its turn"
    assert len(within) <= 501
    assert len(within) >= 250  # it ran, at its pace: the limit holds back, it does not stall
    held = [s for s in snaps if s.state == "queued"]
    assert held and all(s.due_at and s.diagnostics[0].code == "rate_limit.held" for s in held[:20])
