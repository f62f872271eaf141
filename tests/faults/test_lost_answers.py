"""Answers lost after the command was carried out: the fault a retrying client meets when a
connection breaks between Redis doing a write and the reply arriving. redis-py sends the
command again (`majordomus.store.connect`'s `Retry`); a start, a claim and a batch of
reports sent twice must each count once: no second execution, no refused claim, no event
doubled, and the processes' own retries as well as the client's."""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import pytest

from majordomus.engine import Engine
from majordomus.store.connect import connect
from tests.conftest import make_settings
from tests.faults.conftest import LEASE_SECONDS, REGISTRY, SWEEP_MARGIN, Scenario, note
from tests.faults.workload import REPORT

pytestmark = [pytest.mark.slow, pytest.mark.process]


async def test_a_start_a_claim_and_reports_sent_again_count_once(scenario: Scenario) -> None:
    """The store's own writes, through a proxy that loses a tenth of the answers: every call
    that returned did what it says once (the client's retries are invisible)."""
    lossy = scenario.proxy(name="lossy")
    engine = Engine(
        connect(lossy.url), REGISTRY, make_settings(lossy.url, lease_seconds=LEASE_SECONDS)
    )
    lossy.lose_answers(0.1, seed=11)
    reports = 12
    try:
        ids = [(await engine.start(REPORT, {"steps": 1}, actor="internal")).id for _ in range(30)]
        for execution_id in ids:
            claim, _ = await engine.store.claim(execution_id, "lossy-worker")
            assert claim.complete, f"a claim refused by its own first send: {claim}"
            for i in range(reports):
                written = await engine.store.append(
                    execution_id, [("execution.log", b'{"level":"info","message":"m%d"}' % i)],
                    token=engine.store.next_token(),
                )
                assert written.complete
            done = await engine.store.append(
                execution_id, [("execution.completed", b'{"output":{"steps":1}}')],
                token=engine.store.next_token(),
            )
            assert done.complete
    finally:
        lossy.restore()
        await engine.aclose()
    lost = lossy.answers_lost
    note(f"lost answers: {lost} of the store's answers dropped after the command was done")
    assert lost > 20, f"only {lost} answers lost: the fault did not happen enough to show"

    # Read back directly, past the proxy.
    listed = await scenario.engine.list(limit=100)
    assert listed.count == len(ids), "a start sent twice created a second execution"
    for execution_id in ids:
        events, _ = await scenario.read_events(execution_id)
        types = Counter(e["type"] for e in events)
        assert types["execution.started"] == 1
        assert types["execution.log"] == reports, f"{execution_id}: {types}"
        assert [e["sequence"] for e in events] == list(range(1, len(events) + 1))
        messages = [e["data"]["message"] for e in events if e["type"] == "execution.log"]
        assert messages == [f"m{i}" for i in range(reports)]


async def test_workers_and_an_api_losing_answers_under_load_double_nothing(
    scenario: Scenario,
) -> None:
    """Two workers and an API, each losing 5% of its answers for 6 s while 40 executions
    report (half started over HTTP): every execution succeeds once, with each report once."""
    scenario.worker(max_jobs=50)
    scenario.worker(max_jobs=50)
    api = scenario.api()
    await scenario.ready()
    for seed, proxy in enumerate(scenario.proxies):
        proxy.lose_answers(0.05, seed=seed)
    began = time.monotonic()
    ids = await scenario.start(20, REPORT, steps=10, interval=0.2)
    ids += await scenario.start_over_http(api, 20, REPORT, steps=10, interval=0.2)
    await asyncio.sleep(max(0.0, 6 - (time.monotonic() - began)))
    scenario.assert_alive(during="answers being lost")
    scenario.restore()
    lost = {f"{p.name} {i}": p.answers_lost for i, p in enumerate(scenario.proxies)}
    await scenario.wait_final(ids, 2 + LEASE_SECONDS + SWEEP_MARGIN + 10, "after the losses")
    scenario.assert_alive(during="the recovery from lost answers")
    note(f"lost answers under load: {sum(lost.values())} dropped ({lost}); 40 executions")
    assert sum(lost.values()) > 10, f"too few answers lost to show anything: {lost}"
    verdict = await scenario.check(ids)
    assert {verdict.snapshots[i].state for i in ids} == {"succeeded"}
