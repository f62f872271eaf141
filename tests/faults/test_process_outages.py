"""Timeouts and child processes through a worker cut off from Redis (a proxy between them
drops every connection for a few seconds, `tests.workers.test_outages.Cut`): a timeout
fires on the worker's own clock and its end is written when Redis answers again; a child's
reports wait in its worker's buffer and reach the history whole, in order; a child that
dies during the cut fails its execution once Redis is back, and only it."""

from __future__ import annotations

from typing import Any

import pytest

from majordomus.engine import Engine
from majordomus.model import event_type_of
from majordomus.registry import REGISTRY
from tests.conftest import make_settings, running_worker, until
from tests.process_capabilities import registry
from tests.workers.test_outages import cut_between_worker_and, engine_on, history, worker_alive

PROCESS = registry()

pytestmark = [pytest.mark.process, pytest.mark.slow]


async def _running(engine: Engine, xid: str) -> bool:
    return (await engine.get(xid)).state == "running"


async def test_a_timeout_that_passes_while_the_worker_is_cut_off_ends_timed_out(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, lease_seconds=15.0, cancel_grace=0.5)
    direct = Engine(redis, REGISTRY, cfg)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, cfg) as mine:
        async with running_worker(mine.redis, cfg) as worker:
            snap = await direct.start("tests.deaf", {"seconds": 30})  # 0.3 s, deaf to it
            await until(lambda: _running(direct, snap.id))
            await cut.outage(2.0)  # its timeout and its grace pass meanwhile
            done = await direct.wait(snap.id, 20_000)
            assert done.state == "failed" and done.error.code == "timed_out"
            assert [d.code for d in done.diagnostics] == ["execution.timed_out"]
            assert worker_alive(worker)


async def test_a_childs_reports_and_its_death_cross_a_cut_whole(
    redis: Any, redis_url: str
) -> None:
    cfg = make_settings(redis_url, lease_seconds=15.0)
    direct = Engine(redis, PROCESS, cfg)
    async with cut_between_worker_and(redis_url) as (cut, through), engine_on(through, cfg) as mine:
        async with running_worker(mine.redis, cfg, registry=PROCESS) as worker:
            ticking = await direct.start("proc.ticks", {"count": 60})  # 3 s of lines
            dying = await direct.start("proc.die", {"how": "kill", "after": 1.0})
            await until(lambda: _running(direct, ticking.id))
            await until(lambda: _running(direct, dying.id))
            await cut.outage(2.5)  # the child dies, and lines are made, meanwhile
            done = await direct.wait(ticking.id, 30_000)
            assert done.state == "succeeded" and done.output == {"count": 60}
            events = await history(direct, ticking.id)
            assert [e.sequence for e in events] == list(range(1, len(events) + 1))
            lines = [e.data.message for e in events if event_type_of(e) == "execution.log"]
            assert lines == [f"tick {i}" for i in range(60)]
            died = await direct.wait(dying.id, 30_000)
            assert died.state == "failed" and died.error.code == "unavailable"
            assert died.error.message.endswith("died: killed by SIGKILL")
            assert [d.code for d in died.diagnostics] == ["execution.child_died"]
            assert worker_alive(worker)
