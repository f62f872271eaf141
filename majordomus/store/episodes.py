"""The episodes' Redis: every command episodes send is named here; updates are Lua.

The layout (`ep:{id}`, `ep:{id}:lease`, `episodes`, `episodes:closed`) and the rules
(a lease key per holder, a close that renames the record) are described in
`majordomus.episodes`; this module is their storage and nothing else.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

import msgspec
from msgspec import UNSET

from majordomus.clock import now_stamp, stamp_of
from majordomus.config import LIMITS, Settings
from majordomus.episodes import CloseReason, Episode, EpisodeState, HolderKind, hold_seconds
from majordomus.errors import not_found
from majordomus.store.base import StoreBase
from majordomus.store.connect import RedisClient

log = logging.getLogger("majordomus.episodes")

REAP_BATCH = 100
"""Episodes the reaper closes in one pass at most; the next pass takes the rest."""

def _text(raw: dict[bytes, bytes], name: str) -> str:
    return raw.get(name.encode(), b"").decode()


def _int(raw: dict[bytes, bytes], name: str) -> int:
    value = raw.get(name.encode())
    return int(value) if value else 0


class EpisodeStore(StoreBase):
    """The episodes' Redis: every command they send is named here; updates are Lua."""

    def __init__(self, redis: RedisClient, settings: Settings) -> None:
        super().__init__(redis, settings)
        self.hold_ms = int(hold_seconds(settings) * 1000)
        self.grace_ms = int(settings.reattach_grace * 1000)
        self._attach = self.script("episode_attach.lua")
        self._renew = self.script("episode_renew.lua")
        self._release = self.script("episode_release.lua")
        self._close = self.script("episode_close.lua")
        self._note = self.script("episode_note.lua")

    def _live_keys(self, external_id: str) -> list[str]:
        k = self.keys
        return [k.episode(external_id), k.episode_lease(external_id), k.episodes]

    def _hold_args(self, external_id: str, holder: str, kind: HolderKind) -> list[str | int]:
        stamp, ms = now_stamp()
        held_until = ms + self.hold_ms
        return [
            external_id,
            holder,
            kind,
            stamp,
            ms,
            held_until,
            held_until + self.grace_ms,
            self.hold_ms,
            self.grace_ms,
        ]

    async def attach(self, external_id: str, holder: str, kind: HolderKind) -> tuple[Episode, bool]:
        """Open or resume the episode for this holder: (the episode, whether it was resumed)."""
        resumed = await self._attach(
            keys=self._live_keys(external_id), args=self._hold_args(external_id, holder, kind)
        )
        episode = await self.get(external_id)
        if episode is None:  # closed by someone else in between: say so rather than guess
            raise not_found(f"episode {external_id!r} was closed while attaching", "attach again")
        return episode, bool(resumed)

    async def renew(self, external_id: str, holder: str, kind: HolderKind) -> bool:
        """Renew the lease for traffic that carries this episode; False when it is not theirs."""
        done = await self._renew(
            keys=self._live_keys(external_id),
            args=[*self._hold_args(external_id, holder, kind), 1],
        )
        return bool(done)

    async def keep_held(self, held: Sequence[tuple[str, str]]) -> list[bool]:
        """Renew the episodes of sessions still connected, `(external_id, holder)` each, in
        one round trip; their clients said nothing, so when they last spoke stays as it was."""
        if not held:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for external_id, holder in held:
                await self._renew(
                    keys=self._live_keys(external_id),
                    args=[*self._hold_args(external_id, holder, "session"), 0],
                    client=pipe,
                )
            done = await pipe.execute()
        return [bool(d) for d in done]

    async def release(self, external_id: str, holder: str) -> bool:
        """Detach the episode because its holder went away (only if it still holds it)."""
        stamp, ms = now_stamp()
        done = await self._release(
            keys=self._live_keys(external_id),
            args=[external_id, holder, stamp, ms, ms + self.grace_ms, self.grace_ms],
        )
        return bool(done)

    async def close(self, external_id: str, reason: CloseReason) -> Episode | None:
        """Close it for good (`detach`), or as `expired` when its grace has passed.

        Answers the closed record, or None when there is nothing to close (no open or
        detached episode under that id, or for `expired`: it is not due).
        """
        stamp, ms = now_stamp()
        kept = self.keys.episode_closed(external_id, ms)
        done = await self._close(
            keys=[*self._live_keys(external_id), self.keys.episodes_closed, kept],
            args=[
                external_id,
                reason,
                stamp,
                ms,
                self.settings.retain_seconds * 1000,
                self.grace_ms,
            ],
        )
        if int(done) != 1:
            return None
        raw: dict[bytes, bytes] = await self.redis.hgetall(kept)  # type: ignore[misc]
        return self.view(raw, None) if raw else None

    async def note_execution(self, external_id: str, execution_id: str) -> bool:
        """Record an execution started in the episode."""
        done = await self._note(
            keys=[self.keys.episode(external_id)],
            args=[execution_id, LIMITS.list_executions],
        )
        return bool(done)

    async def get(self, external_id: str) -> Episode | None:
        """The open or detached episode under this id, or None."""
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.hgetall(self.keys.episode(external_id))
            pipe.get(self.keys.episode_lease(external_id))
            raw, lease = await pipe.execute()
        return self.view(raw, lease) if raw else None

    async def current(self) -> list[Episode]:
        """Every open or detached episode, the most recently heard from first."""
        ids = [i.decode() for i in await self.redis.zrange(self.keys.episodes, 0, -1)]
        if not ids:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for external_id in ids:
                pipe.hgetall(self.keys.episode(external_id))
                pipe.get(self.keys.episode_lease(external_id))
            raw = await pipe.execute()
        found = [self.view(raw[2 * i], raw[2 * i + 1]) for i in range(len(ids)) if raw[2 * i]]
        found.sort(key=lambda e: e.last_seen_at, reverse=True)
        return found

    async def closed(self, limit: int) -> list[Episode]:
        """The closed records, the most recently closed first."""
        if limit <= 0:
            return []
        keys = await self.redis.zrevrange(self.keys.episodes_closed, 0, limit - 1)
        if not keys:
            return []
        async with self.redis.pipeline(transaction=False) as pipe:
            for key in keys:
                pipe.hgetall(key)
            raws = await pipe.execute()
        gone = [key for key, raw in zip(keys, raws, strict=True) if not raw]
        if gone:
            await self.redis.zrem(self.keys.episodes_closed, *gone)
        return [self.view(raw, None) for raw in raws if raw]

    async def reap(self) -> int:
        """The reaper: close as `expired` every episode whose grace has passed, and forget
        closed records past the retention time. Every API replica runs it every second or
        so; the close is atomic and re-checks the lease and the deadline, so replicas
        racing over one episode close it once and never one that was resumed."""
        _, ms = now_stamp()
        due = await self.redis.zrangebyscore(
            self.keys.episodes, "-inf", ms, start=0, num=REAP_BATCH
        )
        closed = 0
        for member in due:
            external_id = member.decode()
            if await self.close(external_id, "expired") is not None:
                log.info("episode %r expired (no client came back within the grace)", external_id)
                closed += 1
        cutoff = ms - self.settings.retain_seconds * 1000
        await self.redis.zremrangebyscore(self.keys.episodes_closed, "-inf", cutoff)
        return closed

    def view(self, raw: dict[bytes, bytes], lease: bytes | None) -> Episode:
        """An episode as clients see it, its state derived from its lease."""
        stored = _text(raw, "state")
        held_until = _int(raw, "held_until_ms")
        grace_ms = _int(raw, "grace_ms") if b"grace_ms" in raw else self.grace_ms
        executions = msgspec.json.decode(raw.get(b"executions", b"[]"), type=list[str])
        state: EpisodeState
        if stored == "closed":
            state = "closed"
        elif lease is not None:
            state = "open"
        else:
            state = "detached"
        episode = Episode(
            external_id=_text(raw, "external_id"),
            state=state,
            opened_at=_text(raw, "opened_at"),
            last_seen_at=_text(raw, "last_seen_at"),
            attachments=_int(raw, "attachments"),
            execution_count=_int(raw, "execution_count"),
            executions=executions,
        )
        if state == "open":
            episode.held_by = lease.decode() if lease is not None else UNSET
        elif state == "detached":
            episode.detached_at = _text(raw, "detached_at") or stamp_of(held_until)
            episode.expires_at = stamp_of(held_until + grace_ms)
        else:
            if _text(raw, "close_reason") == "expired":
                episode.detached_at = _text(raw, "detached_at") or stamp_of(held_until)
            episode.closed_at = _text(raw, "closed_at")
            episode.close_reason = _text(raw, "close_reason")  # type: ignore[assignment]
        return episode
