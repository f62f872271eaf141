"""Redis losing its data is noticed, said once and counted, by every process that looks
(`majordomus.epochs`): here a worker's sweeper turn finds its partition's epoch new after
the database was flushed under it (as a restart without persistence leaves it)."""

from __future__ import annotations

import logging
from typing import Any

from majordomus.metrics import METRICS
from tests.conftest import running_worker, until


def lost_count() -> float:
    return METRICS.redis_data_lost.values.get((), 0.0)


async def test_a_worker_says_once_that_redis_lost_its_data(
    redis: Any, settings: Any, caplog: Any
) -> None:
    caplog.set_level(logging.ERROR, logger="majordomus.epochs")
    before = lost_count()
    async with running_worker(redis, settings) as worker:
        epochs = worker.runtime.engine.epochs

        async def learned() -> bool:
            return epochs.known is not None

        await until(learned)
        assert epochs.lost_at is None
        await redis.flushdb()

        async def noticed() -> bool:
            return epochs.lost_at is not None

        await until(noticed)
        assert lost_count() == before + 1
        turns = epochs.checks + 2

        async def looked_again() -> bool:  # two more sweeper turns: the loss is not said again
            return epochs.checks >= turns

        await until(looked_again)
    said = [r for r in caplog.records if "lost its data" in r.getMessage()]
    assert len(said) == 1 and said[0].levelno == logging.ERROR
    assert lost_count() == before + 1
    assert epochs.lost_partitions == [0]
