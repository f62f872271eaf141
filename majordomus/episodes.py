"""Episodes: one MCP client's sitting of work, named by the client's own durable id.

An episode is opened (or resumed) by `episodes.attach` under the client's `external_id`
(its conversation or thread id, never a connection id), kept alive by its holder's own
traffic, *detached* rather than closed when the holder goes away, and closed either
deliberately (`episodes.detach`, reason `detach`) or by the reaper when nothing came back
within `MAJORDOMUS_REATTACH_GRACE` (reason `expired`). Closed episodes are kept as
records (reason, times, the executions started in them) for `MAJORDOMUS_RETAIN_SECONDS`.

Everything lives in Redis, so any API replica can resume, renew or close any episode:

- `ep:{id}` the record (a hash); on close it is renamed to `ep:{id}:closed:<ms>`, which
  expires after the retention time, so the id is free for a new episode at once;
- `ep:{id}:lease` the holder's lease, a key with a TTL of `hold_seconds` (the same
  `MAJORDOMUS_LEASE_SECONDS` that bounds a silent worker). While it exists the episode is
  `open`; when it lapses (a killed client, a killed replica) or is released (the MCP
  session ended, the replica is stopping) the episode is `detached`;
- `episodes` every open or detached episode scored by when the reaper may close it (the
  end of its hold plus the grace); `episodes:closed` the closed records by closing time.

Who holds an episode is the surface's business: a handler sees the caller's connection as
`ctx.connection` (an `EpisodeConnection`), or None over plain HTTP, where there is no
connection to bind to and `attach` is refused. This module knows nothing of MCP itself.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal, Protocol

import msgspec
from msgspec import UNSET, UnsetType
from redis.asyncio import Redis

from majordomus.builtins import NonNegative, engine_of
from majordomus.config import LIMITS, Settings
from majordomus.context import Context
from majordomus.engine import Engine, clamp
from majordomus.errors import invalid_input, not_found, refused
from majordomus.keys import Keys
from majordomus.registry import capability
from majordomus.store import now_stamp

log = logging.getLogger("majordomus.episodes")

LUA_DIR = Path(__file__).parent / "lua"

EXTERNAL_ID_CHARS = 256
"""The longest `external_id` accepted (a conversation or thread id is far shorter)."""

LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")

REAP_BATCH = 100
"""Episodes the reaper closes in one pass at most; the next pass takes the rest."""

HolderKind = Literal["session", "handle"]
EpisodeState = Literal["open", "detached", "closed"]
CloseReason = Literal["detach", "expired"]


def hold_seconds(settings: Settings) -> float:
    """How long a holder's lease outlives its last message.

    It is the lease a worker holds on its executions (`MAJORDOMUS_LEASE_SECONDS`): a holder
    silent for that long has lost its connection, so its episode shows `detached`. A 2025
    MCP session is renewed by its replica while its client is connected (a request in
    flight, or its GET stream open), so what lapses is a killed client or replica, a
    session client that neither speaks nor listens, or a 2026-07-28 client that said
    nothing for that long (nothing else tells a server it is still there; its next request
    renews the episode). The grace to come back starts when the hold ends.
    """
    return settings.lease_seconds


class EpisodeConnection(Protocol):
    """The caller's connection as a surface hands it to the episodes handlers."""

    holder: str
    """Who holds the lease: the replica and the connection (shown as `held_by`)."""
    kind: HolderKind
    """`session`: a connection that lasts (a legacy MCP session, stdio); `handle`: a
    2026-07-28 request, bound only by the handle it carries."""

    @property
    def episode(self) -> str | None:
        """The episode this connection holds (or whose handle this request carries)."""
        ...

    def bind(self, external_id: str) -> None:
        """Remember that this connection now holds `external_id`."""
        ...

    def release(self) -> None:
        """Forget the episode this connection held (it was closed)."""
        ...


# -- wire types ---------------------------------------------------------------------------


class Episode(msgspec.Struct, kw_only=True, omit_defaults=True):
    """One episode as it stands (open or detached), or its record (closed)."""

    external_id: str
    state: EpisodeState
    opened_at: str
    last_seen_at: str
    """When its holder's traffic last renewed it."""
    attachments: int
    """How many times a client attached to it (1 when opened; a resume adds one)."""
    held_by: str | UnsetType = UNSET
    """The replica and connection holding it, while it is open."""
    detached_at: str | UnsetType = UNSET
    expires_at: str | UnsetType = UNSET
    """While detached: when the reaper closes it unless its client comes back."""
    closed_at: str | UnsetType = UNSET
    close_reason: CloseReason | UnsetType = UNSET
    execution_count: int
    """Executions started in it."""
    executions: list[str]
    """Their ids, oldest first (the newest 200)."""


class AttachInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `episodes.attach`."""

    external_id: str
    """The client's own durable name for the sitting (its conversation or thread id): one
    line, not blank, at most 256 characters. It must survive a reconnect."""


class AttachOutput(msgspec.Struct):
    episode: Episode
    resumed: bool
    """True when the episode already existed under this `external_id` and was resumed."""
    reattach_grace_seconds: float
    """How long a detached episode waits for its client before the reaper closes it."""


class DetachInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `episodes.detach`."""

    external_id: str | None = None
    """The episode to close; absent: the one the calling MCP connection holds."""


class DetachOutput(msgspec.Struct):
    episode: Episode
    """The closed record: `state` closed, `close_reason` detach, `closed_at`."""


class ListInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `episodes.list`."""

    closed: bool = False
    """List the closed records (newest first) instead of the open and detached episodes."""
    limit: NonNegative | None = None
    """How many; the default and the bound are both 200."""


class EpisodeList(msgspec.Struct, omit_defaults=True):
    open: int
    detached: int
    episodes: list[Episode]
    mine: str | UnsetType = UNSET
    """The episode the calling connection holds, if any."""


# -- storage ------------------------------------------------------------------------------


def stamp_of(ms: int) -> str:
    """Epoch milliseconds as RFC 3339 UTC with milliseconds (the store's timestamps)."""
    text = datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")
    return text[:-3] + "Z"


def _text(raw: dict[bytes, bytes], name: str) -> str:
    return raw.get(name.encode(), b"").decode()


def _int(raw: dict[bytes, bytes], name: str) -> int:
    value = raw.get(name.encode())
    return int(value) if value else 0


class EpisodeStore:
    """The episodes' Redis: every command they send is named here; updates are Lua."""

    def __init__(self, redis: Redis, settings: Settings) -> None:
        self.redis = redis
        self.settings = settings
        self.keys = Keys(settings.key_prefix)
        self.hold_ms = int(hold_seconds(settings) * 1000)
        self.grace_ms = int(settings.reattach_grace * 1000)
        self._attach = redis.register_script(_script("episode_attach.lua"))
        self._renew = redis.register_script(_script("episode_renew.lua"))
        self._release = redis.register_script(_script("episode_release.lua"))
        self._close = redis.register_script(_script("episode_close.lua"))
        self._note = redis.register_script(_script("episode_note.lua"))

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
        async with self.redis.pipeline(transaction=True) as pipe:
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


def _script(name: str) -> str:
    return (LUA_DIR / name).read_text()


_stores: weakref.WeakKeyDictionary[Engine, EpisodeStore] = weakref.WeakKeyDictionary()


def episode_store(engine: Engine) -> EpisodeStore:
    """The episodes' store beside an engine (one per engine, scripts loaded once)."""
    store = _stores.get(engine)
    if store is None:
        store = _stores[engine] = EpisodeStore(engine.redis, engine.settings)
    return store


# -- the capabilities ---------------------------------------------------------------------


def checked_external_id(external_id: str) -> str:
    """The id as given, or `invalid_input` when it is blank, multi-line or too long."""
    if not external_id.strip():
        raise invalid_input(
            "external_id is blank",
            "send the client's own durable id for the sitting (its conversation or thread id)",
        )
    if any(c in LINE_BREAKS for c in external_id):
        raise invalid_input(
            "external_id spans more than one line",
            "send a one-line id (a conversation or thread id)",
        )
    if len(external_id) > EXTERNAL_ID_CHARS:
        raise invalid_input(
            f"external_id is longer than {EXTERNAL_ID_CHARS} characters",
            "send a shorter id (a conversation or thread id)",
        )
    return external_id


def _connection(ctx: Context) -> EpisodeConnection | None:
    return ctx.connection  # type: ignore[no-any-return]


@capability(
    "episodes.attach",
    kind="command",
    input=AttachInput,
    output=AttachOutput,
    title="Attach to an episode",
    description=(
        "Open an execution episode for the calling MCP client, or resume the one it already "
        "had. 'external_id' is the client's own durable name for the sitting (its "
        "conversation or thread id) and must survive a reconnect: a client that comes back "
        "under the same id, through any replica, is given its own episode again "
        "(resumed: true, same opened_at, attachments + 1) rather than a second one; a "
        "connection id will not do. After this the client's own traffic keeps the episode "
        "alive (a 2026-07-28 client sends the id as _meta 'majordomus/episode' or as the "
        "'episode' argument of majordomus_execution_start); losing the connection detaches "
        "it rather than closing it, and it is closed by majordomus_session_detach or by the "
        "reaper once the reattach grace has passed. Executions started while it is held "
        "carry it in 'episode'. Needs an MCP connection: over plain HTTP there is none to "
        "bind to, and the call is refused."
    ),
    stability="experimental",
    tags=("episodes",),
    mcp="majordomus_session_attach",
    http=("POST", "/api/v1/episodes/attach"),
    cli=None,
    executable=False,
)
async def attach(ctx: Context, inp: AttachInput) -> AttachOutput:
    external_id = checked_external_id(inp.external_id)
    conn = _connection(ctx)
    if conn is None:
        raise refused(
            "attaching an episode needs an MCP connection, and this call has none",
            "call majordomus_session_attach from an MCP client (Streamable HTTP at /mcp, "
            "or 'majordomus mcp' over stdio)",
        )
    held = conn.episode
    if conn.kind == "session" and held is not None and held != external_id:
        raise refused(
            f"this connection already holds episode {held!r}; a connection holds at most one",
            "detach it first with majordomus_session_detach",
        )
    engine = engine_of(ctx)
    episode, resumed = await episode_store(engine).attach(external_id, conn.holder, conn.kind)
    conn.bind(external_id)
    return AttachOutput(episode, resumed, engine.settings.reattach_grace)


@capability(
    "episodes.detach",
    kind="command",
    input=DetachInput,
    output=DetachOutput,
    title="Detach from an episode, closing it",
    description=(
        "Close an execution episode deliberately: the work is done, not merely interrupted, "
        "and its record says so (close_reason 'detach'). Without 'external_id' it is the "
        "episode the calling MCP connection holds; over plain HTTP there is no connection, "
        "so the episode must be named. A client that simply goes away does not need this: "
        "its episode detaches and the reaper closes it as 'expired' once the grace has "
        "passed, and the difference between those two records is what tells somebody "
        "whether the work was finished."
    ),
    stability="experimental",
    tags=("episodes",),
    mcp="majordomus_session_detach",
    http=("POST", "/api/v1/episodes/detach"),
    cli=("episodes", "detach"),
    executable=False,
)
async def detach(ctx: Context, inp: DetachInput) -> DetachOutput:
    conn = _connection(ctx)
    if inp.external_id is not None:
        external_id = checked_external_id(inp.external_id)
    elif conn is None:
        raise refused(
            "without external_id this closes the calling connection's episode, and this "
            "call has no connection",
            'name the episode: {"external_id": "..."}',
        )
    elif conn.episode is None:
        raise not_found(
            "this connection holds no episode",
            "attach first with majordomus_session_attach, or name the episode",
        )
    else:
        external_id = conn.episode
    episode = await episode_store(engine_of(ctx)).close(external_id, "detach")
    if episode is None:
        raise not_found(
            f"there is no open or detached episode {external_id!r}",
            "it may be closed already: list closed ones with majordomus_episodes closed=true",
        )
    if conn is not None and conn.episode == external_id:
        conn.release()
    return DetachOutput(episode)


@capability(
    "episodes.list",
    kind="query",
    input=ListInput,
    output=EpisodeList,
    title="List episodes",
    description=(
        "Every execution episode this server holds, open and detached, with the replica and "
        "connection holding each, when its client last spoke, how many times a client "
        "attached to it and the executions started in it; 'mine' names the calling "
        "connection's. With closed=true, the closed records instead (reason, times, "
        "executions), kept for the retention time."
    ),
    stability="experimental",
    tags=("episodes",),
    mcp="majordomus_episodes",
    http=("GET", "/api/v1/episodes"),
    cli=("episodes", "list"),
    executable=False,
)
async def list_episodes(ctx: Context, inp: ListInput) -> EpisodeList:
    store = episode_store(engine_of(ctx))
    limit = clamp(inp.limit, LIMITS.list_executions, LIMITS.list_executions)
    current = await store.current()
    opened = sum(1 for e in current if e.state == "open")
    shown = await store.closed(limit) if inp.closed else current[:limit]
    conn = _connection(ctx)
    mine = conn.episode if conn is not None else None
    return EpisodeList(opened, len(current) - opened, shown, mine or UNSET)


__all__ = [
    "AttachOutput",
    "DetachOutput",
    "Episode",
    "EpisodeConnection",
    "EpisodeList",
    "EpisodeStore",
    "episode_store",
    "hold_seconds",
]
