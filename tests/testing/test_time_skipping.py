"""Skipping time on the testing kit's fakeredis: what is due runs when its time is skipped to,
decided by the same scripts, worker, ticker and sweeper as in production."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import pytest

from majordomus import clock
from majordomus.errors import MajordomusError
from majordomus.testing import Environment
from tests.testing.capabilities import KIT, TEN_MINUTES_MS, running


@pytest.fixture
async def env() -> AsyncIterator[Environment]:
    async with Environment(KIT) as opened:
        yield opened


async def test_an_hour_delayed_start_runs_after_skipping_an_hour(env: Environment) -> None:
    execution = await env.client.start("kit.note", {"text": "later"}, delay=timedelta(hours=1))
    due = clock.now_ms() + 3_600_000

    await env.skip(minutes=59)
    assert (await execution.refresh()).state == "queued"

    await env.skip(minutes=1)
    snap = await env.client.get(execution.id)
    assert snap.state == "succeeded"
    assert snap.output == {"text": "later"}
    started = datetime.fromisoformat(str(snap.started_at))
    assert abs(started.timestamp() * 1000 - due) < 1000


async def test_a_retry_chain_waits_its_ten_minute_backoffs_and_succeeds_on_the_third_attempt(
    env: Environment,
) -> None:
    first = await env.client.start("kit.flaky", {"succeed_on": 3})
    failed = await env.client.wait(first.id, timeout=10)
    assert failed.state == "failed"
    second_id = str(failed.retried_as)
    assert (await env.client.get(second_id)).state == "queued"

    await env.skip(seconds=TEN_MINUTES_MS / 1000 - 1)
    assert (await env.client.get(second_id)).state == "queued"

    await env.skip(seconds=1)
    second = await env.client.get(second_id)
    assert (second.state, second.attempt) == ("failed", 2)

    await env.skip(minutes=10)
    third = await env.client.get(str(second.retried_as))
    assert (third.state, third.attempt, third.output) == ("succeeded", 3, {"text": "attempt 3"})
    gap = _ms(third.started_at) - _ms(second.started_at)
    assert TEN_MINUTES_MS <= gap < TEN_MINUTES_MS + 1000


async def test_a_retry_chain_runs_whole_within_one_skip(env: Environment) -> None:
    first = await env.client.start("kit.flaky", {"succeed_on": 3})
    await env.client.wait(first.id, timeout=10)

    await env.skip(hours=1)

    chain = [await env.client.get(first.id)]
    while isinstance(chain[-1].retried_as, str):
        chain.append(await env.client.get(chain[-1].retried_as))
    assert [(s.attempt, s.state) for s in chain] == [(1, "failed"), (2, "failed"), (3, "succeeded")]
    starts = [_ms(s.started_at) for s in chain]
    gaps = [b - a for a, b in zip(starts, starts[1:], strict=False)]
    assert all(TEN_MINUTES_MS <= gap < TEN_MINUTES_MS + 1000 for gap in gaps)


async def test_a_daily_schedule_starts_once_each_morning_over_three_skipped_days(
    env: Environment,
) -> None:
    await env.skip(days=3)

    listed = await env.client.list(capability="kit.report")
    mornings = sorted(datetime.fromisoformat(str(e.created_at)) for e in listed.executions)
    assert len(mornings) == 3
    assert all((m.hour, m.minute, m.second) == (7, 0, 0) for m in mornings)  # on the tick
    assert len({m.date() for m in mornings}) == 3
    assert {e.state for e in listed.executions} == {"succeeded"}


async def test_a_schedule_created_at_run_time_ticks_in_skipped_time(env: Environment) -> None:
    created = await env.engine.invoke(
        "schedules.create",
        {"capability": "kit.note", "cron": "*/10 * * * *", "execution_input": {"text": "tick"}},
    )
    await env.skip(hours=1)

    listed = await env.client.list(capability="kit.note")
    assert len(listed.executions) == 6
    assert {e.schedule for e in listed.executions} == {created.id}
    assert {e.state for e in listed.executions} == {"succeeded"}


async def test_a_killed_workers_execution_is_failed_unavailable_once_its_lease_runs_out(
    env: Environment,
) -> None:
    execution = await env.client.start("kit.linger", {"seconds": 600})
    await running(execution)

    await env.kill_worker()
    await env.skip(seconds=env.settings.lease_seconds / 2)  # type: ignore[union-attr]
    assert (await execution.refresh()).state == "running"

    await env.skip(seconds=env.settings.lease_seconds)  # type: ignore[union-attr]
    snap = await execution.refresh()
    assert snap.state == "failed"
    assert snap.error is not None and snap.error.code == "unavailable"
    assert "worker running it stopped" in snap.error.message


async def test_a_new_worker_takes_what_was_due_while_none_ran(env: Environment) -> None:
    await env.kill_worker()
    execution = await env.client.start("kit.note", {"text": "waited"}, delay=timedelta(minutes=5))
    await env.skip(minutes=10)
    assert (await execution.refresh()).state == "queued"

    await env.start_worker()
    await env.skip()
    assert (await execution.refresh()).state == "succeeded"


async def test_time_runs_on_between_skips_and_never_goes_back(env: Environment) -> None:
    before = env.now()
    await env.skip(hours=2)
    assert env.now() - before >= timedelta(hours=2)
    assert abs(env.now() - datetime.now(UTC) - timedelta(hours=2)) < timedelta(seconds=5)
    with pytest.raises(ValueError, match="never goes back"):
        await env.skip(seconds=-1)


@pytest.mark.usefixtures("spawns")
async def test_time_cannot_be_skipped_on_a_real_server() -> None:
    async with Environment(KIT, redis="embedded") as env:
        assert env.redis_kind == "embedded"
        assert "real time" in env.redis_description
        with pytest.raises(MajordomusError, match="cannot be skipped") as raised:
            await env.skip(minutes=1)
        assert raised.value.code == "refused"
        assert await env.client.call("kit.note", {"text": "real"}) == {"text": "real"}


def _ms(stamp: object) -> int:
    return int(datetime.fromisoformat(str(stamp)).timestamp() * 1000)


async def test_a_rate_limit_of_two_an_hour_runs_the_next_ones_as_the_hours_are_skipped(
    env: Environment,
) -> None:
    """Five starts of one text against two an hour (no burst): one now, then one every half
    hour of virtual time, each held with its turn as its due_at (`majordomus.flow`)."""
    made = [await env.client.start("kit.hourly_note", {"text": "same"}) for _ in range(5)]
    other = await env.client.start("kit.hourly_note", {"text": "other"})
    assert (await env.client.wait(made[0].id, timeout=10)).state == "succeeded"
    assert (await env.client.wait(other.id, timeout=10)).state == "succeeded"  # its own bucket
    held = await env.client.get(made[1].id)
    assert held.state == "queued" and held.diagnostics[0].code == "rate_limit.held"
    for n in range(1, 5):
        await env.skip(minutes=30)
        states = [(await env.client.get(m.id)).state for m in made]
        assert states == ["succeeded"] * (n + 1) + ["queued"] * (4 - n)
    starts = [_ms((await env.client.get(m.id)).started_at) for m in made]
    assert all(29 * 60_000 < b - a < 31 * 60_000 for a, b in zip(starts, starts[1:], strict=False))
