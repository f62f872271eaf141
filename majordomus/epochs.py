"""Knowing that Redis lost its data: one epoch per partition, checked by every process.

Redis restarted without persistence (or a shard of a cluster replaced empty, or a FLUSHALL)
forgets every execution, queued ones included, and nothing in the data says so: the keys
are simply gone. Each partition holds an epoch, a random id set by the first process that
finds none (`WorkerStore.epochs`, `SET NX GET`). Every process (API, worker, the testing
kit) reads them with its sweeper's turn (`Sweeper.tick`, every few seconds, and so as soon
as Redis answers again after an outage): an epoch that changed since the last read is a
partition whose data is gone. The process says so once in its log (an error: what was
queued or running there before is lost), its sweeper counts it
(`majordomus_redis_data_lost_total`),
and `/api/v1/ready` says when it last happened. The first read of a process only learns the
epochs (a process started after the loss cannot tell).
"""

from __future__ import annotations

import logging
import secrets
from typing import TYPE_CHECKING

from majordomus.clock import now_stamp

if TYPE_CHECKING:
    from majordomus.store.workers import WorkerStore

log = logging.getLogger("majordomus.epochs")


class EpochWatch:
    """One process's view of the partitions' epochs."""

    def __init__(self, store: WorkerStore) -> None:
        self.store = store
        self.known: list[bytes] | None = None
        self.lost_at: str | None = None
        """When this process last found a partition's data lost (ISO time), or None."""
        self.lost_partitions: list[int] = []
        """Which partitions it found lost then."""
        self.checks = 0
        """How many reads it made."""

    async def check(self) -> list[int]:
        """Read the epochs; answers the partitions found lost since the last read."""
        current = await self.store.epochs(secrets.token_hex(8))
        self.checks += 1
        known, self.known = self.known, current
        if known is None:
            return []
        lost = [i for i, (was, now) in enumerate(zip(known, current, strict=True)) if was != now]
        if lost:
            self.lost_at = now_stamp()[0]
            self.lost_partitions = lost
            where = "Redis" if len(current) == 1 else f"partition(s) {', '.join(map(str, lost))} of Redis"
            log.error(
                "%s lost its data (its epoch marker is new: restarted without persistence, "
                "replaced empty, or flushed): executions queued or running there before are "
                "gone, and their schedules' ticks since; majordomus goes on with what it holds now",
                where,
            )
        return lost
