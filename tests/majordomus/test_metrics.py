"""The metrics counted in a process and read at scrape time (`majordomus.metrics`), without
a server: a loop's failures counted under its name, a cancel while queued counted as
finished, and the queue's figures as a scrape reads them from the suite's Redis."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from majordomus.clock import now_stamp
from majordomus.engine import Engine
from majordomus.loops import Failures, loop_name
from majordomus.metrics import METRICS, exposition
from majordomus.registry import REGISTRY
from majordomus.reports import queue_report
from majordomus.scrape import cluster_families
from majordomus.start_options import StartOptions
from majordomus.store.failures import UNREACHABLE
from tests.conftest import make_settings, running_worker, until

log = logging.getLogger("tests.metrics")


@pytest.fixture
def engine(redis: Any, redis_url: str) -> Engine:
    """An engine on a key prefix of these tests' own: no worker or sweeper of another test's
    process takes, runs or fails what they queue."""
    return Engine(redis, REGISTRY, make_settings(redis_url, key_prefix="md-metrics-test"))


def scraped(families: Any = ()) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a scrape, by name and labels, parsed as Prometheus parses it."""
    text = exposition(families).decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def sample(samples: dict[Any, float], name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_a_loop_name_is_short_and_bounded() -> None:
    assert loop_name("the signal listener") == "signal_listener"
    assert loop_name("the lease renewal (beat)") == "lease_renewal"
    assert loop_name("the worker's poll loop") == "worker_poll_loop"
    assert loop_name("keeping episodes") == "keeping_episodes"


def test_a_loop_counts_its_redis_failures_and_its_recovery() -> None:
    before = scraped()
    failures = Failures(log, "the signal listener")
    failures.failed(UNREACHABLE[0]("refused"))
    failures.failed(UNREACHABLE[1]("timed out"))
    failures.failed(ValueError("a fault of its own, not Redis"))
    failures.recovered()
    failures.recovered()  # nothing to recover from: not counted
    Failures(log, "execution_id=x-1: writing its reports", loop="report_writer").failed(
        UNREACHABLE[0]("refused")
    )
    after = scraped()

    def grew(name: str, loop: str) -> float:
        return sample(after, name, loop=loop) - sample(before, name, loop=loop)

    assert grew("majordomus_redis_errors_total", "signal_listener") == 2
    assert grew("majordomus_redis_reconnects_total", "signal_listener") == 1
    assert grew("majordomus_redis_errors_total", "report_writer") == 1


async def test_starts_and_a_cancel_while_queued_are_counted(engine: Engine) -> None:
    before = scraped()
    first = await engine.start("tests.noop")
    await engine.start("tests.noop")
    await engine.cancel(first.id)
    after = scraped()

    def grew(name: str, **labels: str) -> float:
        return sample(after, name, **labels) - sample(before, name, **labels)

    assert grew("majordomus_executions_started_total", capability="tests.noop") == 2
    assert (
        grew("majordomus_executions_finished_total", capability="tests.noop", state="cancelled")
        == 1
    )
    # It never ran: no duration is observed for it.
    assert grew("majordomus_execution_duration_seconds_count", capability="tests.noop") == 0
    assert grew("majordomus_events_appended_total") == 5  # created and queued twice, cancelled


async def test_a_scrape_reads_the_queue_and_the_workers_from_redis(engine: Engine) -> None:
    await engine.start("tests.noop")
    await engine.start("tests.noop")
    await engine.start("tests.boom")
    samples = scraped(await cluster_families(engine, listeners=3))
    assert sample(samples, "majordomus_redis_up") == 1
    assert sample(samples, "majordomus_queue_depth", capability="tests.noop") == 2
    assert sample(samples, "majordomus_queue_depth", capability="tests.boom") == 1
    assert sample(samples, "majordomus_queue_oldest_wait_seconds", capability="tests.noop") >= 0
    assert sample(samples, "majordomus_workers_alive") == 0  # none runs in this test
    assert sample(samples, "majordomus_live_listeners") == 3


async def test_a_scrape_says_what_a_limit_holds_and_what_waits_for_its_time(
    engine: Engine, redis: Any
) -> None:
    """Three starts of a capability of one slot with a worker: one runs, two are held by its
    `max_concurrency` (no worker could take them: an autoscaler scales on depth less held);
    a start for an hour later is delayed."""
    later = StartOptions(start_at_ms=now_stamp()[1] + 3_600_000)
    async with running_worker(redis, engine.settings):
        made = [await engine.start("tests.serial", {"seconds": 600}) for _ in range(3)]
        await engine.start("tests.serial", {"seconds": 0}, options=later)

        async def held_two() -> bool:
            report = await queue_report(engine)
            group = {g.capability: g for g in report.queued_by_capability}.get("tests.serial")
            return group is not None and group.held == 2

        try:
            await until(held_two)
            samples = scraped(await cluster_families(engine))
            depth = sample(samples, "majordomus_queue_depth", capability="tests.serial")
            held = sample(
                samples, "majordomus_queue_held", capability="tests.serial", limit="concurrency"
            )
            delayed = sample(samples, "majordomus_queue_delayed", capability="tests.serial")
            assert (depth, held, delayed) == (2, 2, 1)
        finally:
            for snap in made:
                await engine.cancel(snap.id, by="test")


async def test_a_scrape_answers_without_the_queue_when_redis_is_slow(
    engine: Engine, monkeypatch: Any
) -> None:
    import asyncio

    import majordomus.scrape as scrape

    async def hangs(engine: Engine) -> Any:
        await asyncio.sleep(60)

    monkeypatch.setattr(scrape, "queue_report", hangs)
    monkeypatch.setattr(scrape, "SCRAPE_REDIS_SECONDS", 0.2)
    samples = scraped(await cluster_families(engine))
    assert sample(samples, "majordomus_redis_up") == 0
    assert not any(name == "majordomus_queue_depth" for name, _ in samples)
    assert ("majordomus_events_appended_total", ()) in samples  # the process's, as always


def test_the_process_metrics_are_in_a_registry_of_their_own() -> None:
    from prometheus_client import REGISTRY

    ours = {f.name for f in METRICS.registry.collect()}
    theirs = {f.name for f in REGISTRY.collect()}
    assert "majordomus_executions_started" in ours
    assert not any(name.startswith("majordomus_") for name in theirs)


async def test_executions_swept_off_a_dead_worker_are_counted(engine: Engine) -> None:
    from majordomus.sweeper import Sweeper
    from tests.workers.test_sweeper import beat, running_on

    await beat(engine.store, "dead", ago_seconds=5, lease=False)
    await running_on(engine, "dead", 3)
    before = scraped()
    assert await Sweeper(engine.store, engine.settings, "test").sweep() == 3
    after = scraped()
    assert (
        sample(after, "majordomus_executions_swept_total")
        - sample(before, "majordomus_executions_swept_total")
        == 3
    )
