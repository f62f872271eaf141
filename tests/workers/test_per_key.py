"""Concurrency per key, fairly between keys (`majordomus.flow`, issue 35 point 1): at most N
of a key run at once across every worker; a key's waiting ones sit out of the queue; one
execution of a quiet key starts within a few executions of a noisy key's however much it
queued; with the capability-wide `max_concurrency` both limits hold."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import msgspec
import pytest

from majordomus.engine import Engine
from majordomus.flow import NULL_KEY, PerKey
from majordomus.registry import Registry, RegistryError, capability
from majordomus.reports import queue_report
from majordomus.schemas import Secret
from majordomus.scrape import cluster_families
from tests.capabilities import Slept
from tests.conftest import make_settings, running_worker, until, wait_for_workers
from tests.majordomus.test_metrics import sample, scraped


def _ms(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp() * 1000


STAMP_SLACK_MS = 10.0
"""How far a worker's stamps may run ahead of the order Redis moved things in: a take is
stamped by its worker as it is sent, an end as it is written, so a take sent just before
another worker's end reached Redis (and run after it) carries a start a few ms before that
end (3 ms seen on the cluster). Redis holds the limit; the stamps can only show it so."""


def most_at_once(spans: list[tuple[float, float]], slack_ms: float = STAMP_SLACK_MS) -> int:
    """The most spans (start, end) that overlap at one instant, each end taken `slack_ms`
    earlier (`STAMP_SLACK_MS`; an end at the very millisecond another starts counts as not
    overlapping it). The executions measured so run for 30 ms or more."""
    edges = sorted([(s, 1) for s, _ in spans] + [(e - slack_ms, -1) for _, e in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def spans_of(snapshots: list[Any]) -> list[tuple[float, float]]:
    return [(_ms(s.started_at), _ms(s.finished_at)) for s in snapshots]


# -- declaration ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("per_key", "says"),
    [
        (PerKey("customer", 2), "not a member of its input"),
        (PerKey("tenant", 0), "at least 1"),
        (PerKey("tenant", True), "at least 1"),  # type: ignore[arg-type]
        (PerKey("secret", 1), "sensitive"),
        (PerKey("seconds", 1), "must be a string, an integer or a boolean"),
    ],
)
def test_a_per_key_limit_declared_wrongly_is_refused_at_declaration(per_key: PerKey, says: str) -> None:
    class In(msgspec.Struct):
        tenant: str
        secret: Secret
        seconds: float = 1.0

    with pytest.raises(RegistryError, match=says):
        capability("t.keyed", input=In, output=Slept, per_key=per_key, registry=Registry())(
            lambda ctx, inp: Slept(0)
        )


def test_the_key_of_an_input_is_its_members_text_and_null_when_absent() -> None:
    per = PerKey("tenant", 2)
    assert per.key_of({"tenant": "acme"}) == "acme"
    assert per.key_of({"tenant": None}) == per.key_of({}) == NULL_KEY
    assert per.key_of({"tenant": "x" * 200}).startswith("#")  # long: hashed, as search does


# -- the store, without workers -----------------------------------------------------------


async def test_a_burst_admits_the_limit_into_the_queue_and_the_rest_wait_out_of_it(
    engine: Engine, redis: Any
) -> None:
    ids = [(await engine.start("tests.per_tenant", {"tenant": "noisy"})).id for _ in range(50)]
    quiet = (await engine.start("tests.per_tenant", {"tenant": "quiet"})).id
    part = engine.store.keys.partitions[0]
    queue = [m.decode() for m in await redis.zrange(part.queue, 0, -1)]
    # In line: the noisy key's two admitted, then the quiet one; 48 wait in the key's list.
    assert queue == [ids[0], ids[1], quiet]
    waiting = [m.decode() for m in await redis.zrange(part.key_waiting("tests.per_tenant", "noisy"), 0, -1)]
    assert waiting == ids[2:]
    assert await redis.smembers(part.keys_waiting("tests.per_tenant")) == {b"noisy"}
    snap = await engine.get(ids[10])
    assert snap.state == "queued"
    # What waits, and why: queue.show and /metrics say the key's limit holds 48 of 51.
    report = await queue_report(engine)
    (group,) = report.queued_by_capability
    assert (group.count, group.held, group.held_per_key, group.keys_held) == (51, 0, 48, 1)
    assert [(k.key, k.waiting) for k in group.busiest_keys] == [("noisy", 48)]
    samples = scraped(await cluster_families(engine))
    assert sample(samples, "majordomus_queue_held", capability="tests.per_tenant", limit="per_key") == 48


async def test_a_cancelled_waiting_one_leaves_the_keys_list_and_a_lapsed_slot_is_recovered(
    engine: Engine, redis: Any
) -> None:
    ids = [(await engine.start("tests.per_tenant", {"tenant": "t"})).id for _ in range(4)]
    part = engine.store.keys.partitions[0]
    waiting_key = part.key_waiting("tests.per_tenant", "t")
    await engine.cancel(ids[2])
    assert (await engine.get(ids[2])).state == "cancelled"
    assert [m.decode() for m in await redis.zrange(waiting_key, 0, -1)] == [ids[3]]
    # The two admitted ones' slots run out without a terminal event (their holder lost):
    # the sweeper's upkeep moves the key's next one into the queue.
    slots = part.key_slots("tests.per_tenant", "t")
    await redis.zadd(slots, {ids[0]: 1, ids[1]: 1})
    assert await engine.store.key_upkeep("tests.per_tenant", 2) == 1
    assert await redis.zscore(part.queue, ids[3]) is not None
    assert not await redis.exists(waiting_key)
    assert not await redis.sismember(part.keys_waiting("tests.per_tenant"), "t")


async def test_an_input_without_the_key_counts_under_null(engine: Engine, redis: Any) -> None:
    for _ in range(3):
        await engine.start("tests.per_tenant", {})
    part = engine.store.keys.partitions[0]
    assert await redis.zcard(part.key_waiting("tests.per_tenant", NULL_KEY)) == 1


async def test_on_several_partitions_a_keys_executions_share_one(redis: Any, redis_url: str) -> None:
    from majordomus.registry import REGISTRY

    engine = Engine(redis, REGISTRY, make_settings(redis_url, partitions=4))
    keys = engine.store.keys
    for tenant in ("a", "b", "c", "d", "e"):
        ids = [(await engine.start("tests.per_tenant", {"tenant": tenant})).id for _ in range(5)]
        parts = {keys.partition_of(i).index for i in ids}
        assert parts == {keys.partition_of_concurrency_key("tests.per_tenant", tenant).index}
        part = keys.partitions[parts.pop()]
        assert await redis.zcard(part.key_waiting("tests.per_tenant", tenant)) == 3


# -- with workers --------------------------------------------------------------------------


@pytest.mark.parametrize("partitions", [1, 3])
async def test_at_most_the_limit_of_a_key_runs_at_once_across_workers(
    redis: Any, redis_url: str, partitions: int
) -> None:
    from majordomus.registry import REGISTRY

    settings = make_settings(redis_url, partitions=partitions)
    engine = Engine(redis, REGISTRY, settings)
    async with running_worker(redis, settings), running_worker(redis, settings):
        ids = {
            tenant: [
                (await engine.start("tests.per_tenant", {"tenant": tenant, "seconds": 0.03})).id
                for _ in range(12)
            ]
            for tenant in ("a", "b", "c")
        }
        done = {t: [await engine.wait(i, 30_000) for i in xs] for t, xs in ids.items()}
    for tenant, snaps in done.items():
        assert all(s.state == "succeeded" for s in snaps), [s.state for s in snaps]
        assert most_at_once(spans_of(snaps)) <= 2, tenant
    # Between keys it ran at once: more than one key's work overlapped.
    assert most_at_once(spans_of([s for snaps in done.values() for s in snaps])) > 2


async def test_with_max_concurrency_both_limits_hold(redis: Any, settings: Any, engine: Engine) -> None:
    async with running_worker(redis, settings), running_worker(redis, settings):
        ids = [
            (await engine.start("tests.per_tenant_capped", {"tenant": t, "seconds": 0.03})).id
            for t in ["a"] * 8 + ["b"] * 8 + ["c"] * 4 + ["d"] * 4
        ]
        done = [await engine.wait(i, 30_000) for i in ids]
    assert all(s.state == "succeeded" for s in done)
    assert most_at_once(spans_of(done)) <= 3
    for tenant in "abcd":
        mine = [s for s in done if s.input["tenant"] == tenant]
        assert most_at_once(spans_of(mine)) <= 1, tenant


@pytest.mark.slow
async def test_a_quiet_key_starts_within_a_few_executions_of_the_noisy_ones_backlogs(
    engine: Engine, worker_process: Any, redis: Any
) -> None:
    """Two worker processes of two slots each, all four busy: three noisy tenants start 100
    each (two of a tenant may run at once), then a quiet tenant starts one. Only what the
    noisy keys had admitted (two each) may start before it, never their backlogs."""
    worker_process(MAJORDOMUS_MAX_JOBS="2")
    worker_process(MAJORDOMUS_MAX_JOBS="2")
    await wait_for_workers(redis, 2)
    noisy = [
        (await engine.start("tests.per_tenant", {"tenant": f"noisy-{n % 3}", "seconds": 0.02})).id
        for n in range(300)
    ]
    await until(lambda: _started(engine, noisy[:4]), 20)
    quiet = await engine.start("tests.per_tenant", {"tenant": "quiet", "seconds": 0.0})
    done = await engine.wait(quiet.id, 30_000)
    assert done.state == "succeeded"
    snaps = [await engine.get(i) for i in noisy]
    quiet_created, quiet_started = _ms(quiet.created_at), _ms(done.started_at)
    ahead = [s for s in snaps if s.started_at and quiet_created <= _ms(s.started_at) < quiet_started]
    left = sum(1 for s in snaps if s.state == "queued")
    print(
        f"quiet tenant: waited {quiet_started - quiet_created:.0f} ms, {len(ahead)} noisy started "
        f"in between, {left} of 300 noisy still queued when it started"
    )
    assert left > 150  # the backlogs were there: it did not simply wait for them to drain
    assert len(ahead) <= 6, [(s.id, s.input, s.started_at) for s in ahead]
    finals = [await engine.wait(i, 60_000) for i in noisy]
    assert all(s.state == "succeeded" for s in finals)
    for n in range(3):
        assert most_at_once(spans_of([s for s in finals if s.input["tenant"] == f"noisy-{n}"])) <= 2


async def _started(engine: Engine, ids: list[str]) -> bool:
    return all([(await engine.get(i)).state != "queued" for i in ids])
