"""What every store class holds: the client, the settings, the key names, its scripts.

The store is split by concept (executions, the queue, workers, the feed, signals,
episodes); each class derives from `StoreBase`, so they share one client and one key
layout and register their Lua scripts the same way. It issues no command of its own but
the health check.
"""

from __future__ import annotations

import functools

from redis.commands.core import AsyncScript

from majordomus.config import Settings
from majordomus.store.connect import RedisClient
from majordomus.store.keys import ROLLUP_STEPS, SCRIPT_KEY_NAMES, Keys, Partition
from majordomus.store.scripts import load_script, with_constants
from majordomus.store.sealing import Sealer


@functools.lru_cache(maxsize=8)
def sealer_of(keys: tuple[str, ...]) -> Sealer:
    """One `Sealer` per set of keys (a process makes many stores on the same settings)."""
    return Sealer(keys)


class StoreBase:
    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix, settings.partitions)
        self.sealer = sealer_of(tuple(settings.encryption_keys))
        """Seals what holds secrets before it is sent, opens it as it is read (`sealing`)."""

    def script(self, name: str, constants: dict[str, str | int] | None = None) -> AsyncScript:
        """`lua/<name>` registered on this store's client (loaded by its first call), with
        `constants` at its head (`scripts.with_constants`)."""
        text = load_script(name)
        return self.redis.register_script(with_constants(text, constants) if constants else text)

    def partition_script(
        self, name: str, part: Partition, extra: dict[str, str | int]
    ) -> AsyncScript:
        """`lua/<name>` for one partition, with what every call of it there shares as
        constants (`scripts`): the partition's keys (FEED, ALL, QUEUED, RUNNING, FINISHED,
        QUEUE, COUNTER, DELAYED, WAKEUP, and BASE, its key base), the names of the keys it
        finds from its base (`keys.SCRIPT_KEY_NAMES`), FEED_MAX, WAKE (the wake channel),
        the roll-up's ROLLUP_STEPS and ROLLUP_KEEP_MS (`lua/rollup.lua`; 0: no roll-up),
        SLOT_MS (a concurrency slot's lease, ms), and `extra`."""
        return self.script(name, {
            "FEED": part.feed,
            "ALL": part.all,
            "QUEUED": part.queued,
            "RUNNING": part.running,
            "FINISHED": part.finished,
            "QUEUE": part.queue,
            "COUNTER": part.created_counter,
            "DELAYED": part.delayed,
            "WAKEUP": part.wakeup,
            "BASE": part.base,
            **SCRIPT_KEY_NAMES,
            "FEED_MAX": str(self.settings.feed_max_events),
            "WAKE": self.keys.wake_channel,
            "ROLLUP_STEPS": ROLLUP_STEPS,
            "ROLLUP_KEEP_MS": self.settings.rollup_keep_seconds * 1000,
            "SLOT_MS": int(self.settings.lease_seconds * 1000),
            **extra,
        })  # fmt: skip

    async def ping(self) -> bool:
        return bool(await self.redis.ping())
