"""The schedules' Redis: every command schedules send is named here; updates are Lua.

One hash per schedule (`sched:{<id>}`: its definition as JSON, origin, when it was created
and last became active, when it was paused, its last tick and that tick's execution), an
index of ids by creation (`schedules`), and a version counter (`schedules:version`) that
every change but a tick increments, so a ticker knows with one small read whether to load
the schedules again. What a schedule means (cron, missed ticks) is `majordomus.schedules`'s;
when to tick is `majordomus.ticker`'s; this module is their storage and nothing else.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from majordomus.clock import now_stamp
from majordomus.config import Settings
from majordomus.schedules import Origin, ScheduleDefinition, StoredSchedule
from majordomus.store.base import StoreBase
from majordomus.store.connect import RedisClient
from majordomus.store.sealing import Sealer

_definition = msgspec.json.Decoder(ScheduleDefinition)


def _text(raw: dict[bytes, bytes], name: str) -> str | None:
    value = raw.get(name.encode())
    return value.decode() if value is not None else None


def _int(raw: dict[bytes, bytes], name: str) -> int | None:
    value = raw.get(name.encode())
    return int(value) if value else None


class ScheduleStore(StoreBase):
    """The schedules' Redis: every command they send is named here; updates are Lua."""

    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self._put = self.script("schedule_put.lua")
        self._pause = self.script("schedule_pause.lua")
        self._advance = self.script("schedule_advance.lua")
        self._delete = self.script("schedule_delete.lua")

    def _keys(self, schedule_id: str) -> list[str]:
        k = self.keys
        return [k.schedule(schedule_id), k.schedules, k.schedules_version]

    async def _store(
        self, schedule_id: str, definition: ScheduleDefinition, origin: Origin, mode: str
    ) -> int:
        stamp, ms = now_stamp()
        done = await self._put(
            keys=self._keys(schedule_id),
            args=[
                schedule_id,
                # Sealed the same way each time: an unchanged declaration writes the same bytes.
                self.sealer.seal(msgspec.json.encode(definition), deterministic=True),
                origin,
                stamp,
                ms,
                mode,
            ],
        )
        return int(done)

    async def create(self, schedule_id: str, definition: ScheduleDefinition) -> bool:
        """Store a created schedule; False when the id is taken (nothing changed)."""
        return await self._store(schedule_id, definition, "created", "create") == 1

    async def declare(self, schedule_id: str, definition: ScheduleDefinition) -> bool:
        """Store a declared schedule in place (its pause and last tick kept); True when
        something changed."""
        return await self._store(schedule_id, definition, "declared", "declare") == 1

    async def set_paused(self, schedule_id: str, paused: bool) -> bool | None:
        """Pause or resume: True when it changed, False when it was so already, None when
        there is no such schedule."""
        stamp, ms = now_stamp()
        done = int(
            await self._pause(
                keys=[self.keys.schedule(schedule_id), self.keys.schedules_version],
                args=["1" if paused else "0", stamp, ms],
            )
        )
        return None if done == 0 else done == 1

    async def advance(self, schedule_id: str, tick_ms: int, execution_id: str | None) -> bool:
        """Record `tick_ms` as the schedule's last tick, only forward; True when this call
        moved it (the one recorder among the tickers that raced to it)."""
        done = await self._advance(
            keys=[self.keys.schedule(schedule_id)], args=[tick_ms, execution_id or ""]
        )
        return int(done) == 1

    async def remove(self, schedule_id: str, origins: Sequence[Origin] = ("created",)) -> int:
        """Delete it if its origin is one of `origins`: 1 deleted, -1 refused (its origin),
        0 no such schedule."""
        done = await self._delete(
            keys=self._keys(schedule_id), args=[schedule_id, " ".join(origins)]
        )
        return int(done)

    async def one(self, schedule_id: str) -> StoredSchedule | None:
        raw: dict[bytes, bytes] = await self.redis.hgetall(self.keys.schedule(schedule_id))  # type: ignore[misc]
        return _stored(schedule_id, raw, self.sealer) if raw else None

    async def every(self) -> tuple[int, list[StoredSchedule]]:
        """The version, and every schedule, oldest first (two round trips). Index entries
        whose schedule is gone are dropped from the index."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.schedules_version)
            pipe.zrange(self.keys.schedules, 0, -1)
            version, members = await pipe.execute()
        ids = [m.decode() for m in members]
        if not ids:
            return int(version or 0), []
        async with self.redis.pipeline(transaction=False) as pipe:
            for schedule_id in ids:
                pipe.hgetall(self.keys.schedule(schedule_id))
            raws = await pipe.execute()
        gone = [i for i, raw in zip(ids, raws, strict=True) if not raw]
        if gone:
            await self.redis.zrem(self.keys.schedules, *gone)
        found = [_stored(i, raw, self.sealer) for i, raw in zip(ids, raws, strict=True) if raw]
        return int(version or 0), found

    async def version_and_ticks(self, ids: Sequence[str]) -> tuple[int, list[int | None]]:
        """The version, and the last tick of each of `ids` (None: none yet, or gone), in
        one round trip: what a ticker reads at each wake."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.get(self.keys.schedules_version)
            for schedule_id in ids:
                pipe.hget(self.keys.schedule(schedule_id), "last_tick_ms")
            answers = await pipe.execute()
        version, ticks = answers[0], answers[1:]
        return int(version or 0), [int(t) if t else None for t in ticks]


def _stored(schedule_id: str, raw: dict[bytes, bytes], sealer: Sealer) -> StoredSchedule:
    origin = _text(raw, "origin")
    return StoredSchedule(
        id=schedule_id,
        definition=_definition.decode(sealer.open(raw[b"definition"])),
        origin="declared" if origin == "declared" else "created",
        created_at=_text(raw, "created_at") or "",
        since_ms=_int(raw, "since_ms") or 0,
        paused_at=_text(raw, "paused_at"),
        last_tick_ms=_int(raw, "last_tick_ms"),
        last_execution=_text(raw, "last_execution"),
    )
