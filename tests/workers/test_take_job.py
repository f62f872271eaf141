"""A worker takes an arq job the way arq does, in one atomic step: only one worker ever gets
it, and never before it is due or after it is gone."""

from __future__ import annotations

from typing import Any

from arq.constants import in_progress_key_prefix

from majordomus.engine import Engine

QUEUE = "q-take"


async def test_a_due_job_is_taken_once_and_marked_in_progress(redis: Any, engine: Engine) -> None:
    await redis.zadd(QUEUE, {"job-1": 1000})
    assert await engine.store.take_job(QUEUE, "job-1", 2000, 60_000) == 1000
    assert await redis.pttl(in_progress_key_prefix + "job-1") > 59_000
    assert await engine.store.take_job(QUEUE, "job-1", 2000, 60_000) is None


async def test_a_deferred_or_gone_job_is_not_taken(redis: Any, engine: Engine) -> None:
    await redis.zadd(QUEUE, {"later": 5000})
    assert await engine.store.take_job(QUEUE, "later", 2000, 60_000) is None
    assert await engine.store.take_job(QUEUE, "gone", 2000, 60_000) is None
    assert not await redis.exists(in_progress_key_prefix + "later", in_progress_key_prefix + "gone")
