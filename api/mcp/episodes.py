"""The episodes an MCP replica holds: which connection holds which episode, kept renewed.

Both protocol eras share one endpoint. A 2025 client (the `initialize` handshake) gets a
session: its episode is bound to it, every message renews the episode's lease, this
replica renews it while the session lives, and the session's end (DELETE, idle timeout,
transport loss) detaches it. Those sessions live in this process's memory, so a replica
set serving 2025 clients needs sticky routing. A 2026-07-28 request is self-contained: its
episode is named by the handle it carries (`_meta["majordomus/episode"]`, or the `episode`
argument of `majordomus_execution_start`), everything about it is in Redis, and any
replica answers it.

This module binds connections to episodes and keeps the leases; it does not know what
episodes are beyond handing their handlers the caller's connection (`majordomus.episodes`),
nor does it serve tools (`api.mcp.server`).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable
from typing import Any

import anyio
from mcp.server import ServerRequestContext
from mcp.server.connection import Connection
from mcp.server.context import CallNext, HandlerResult
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from majordomus.api.mcp.sdk import connection_of
from majordomus.config import Settings
from majordomus.engine import Engine
from majordomus.episodes import HolderKind, hold_seconds
from majordomus.loops import Failures, stop_task

log = logging.getLogger("majordomus.mcp")

EPISODE_META = "majordomus/episode"
"""The `_meta` key a 2026-07-28 client names its episode with."""

REMEMBERED_HANDLES = 10_000
"""2026-07-28 handles this replica remembers renewing, to detach them when it stops."""

SHUTDOWN_SECONDS = 5.0
"""How long a stopping replica spends detaching the episodes it held."""

_STATE_EPISODE = "majordomus.episode"
_STATE_HOLDER = "majordomus.holder"
_STATE_RENEWED = "majordomus.renewed_at"
_STATE_WATCHED = "majordomus.watched"


class McpConnection:
    """The caller's MCP connection as the episodes handlers see it (`EpisodeConnection`).

    A `session` (a 2025 client over HTTP, or stdio) lasts across requests: the episode it
    holds is kept in the SDK connection's own state. A `handle` (a 2026-07-28 request) is
    bound only by the episode handle it carries.
    """

    def __init__(
        self,
        held: HeldEpisodes,
        conn: Connection | None,
        kind: HolderKind,
        holder: str,
        handle: str | None = None,
    ) -> None:
        self.held = held
        self.conn = conn
        self.kind: HolderKind = kind
        self.holder = holder
        self.handle = handle

    @property
    def episode(self) -> str | None:
        if self.conn is not None:
            held = self.conn.state.get(_STATE_EPISODE)
            return str(held) if held is not None else None
        return self.handle

    def bind(self, external_id: str) -> None:
        if self.conn is None:
            self.handle = external_id
            self.held.remember_handle(external_id)
            return
        self.conn.state[_STATE_EPISODE] = external_id
        self.conn.state[_STATE_RENEWED] = time.monotonic()
        self.held.sessions[self.holder] = self.conn
        if not self.conn.state.get(_STATE_WATCHED):
            # Once per connection: its end (DELETE, idle timeout, lost transport, EOF on
            # stdio, shutdown) detaches whatever it holds then.
            self.conn.state[_STATE_WATCHED] = True
            self.conn.exit_stack.push_async_callback(self.held.session_ended, self.conn)

    def release(self) -> None:
        if self.conn is not None:
            self.conn.state.pop(_STATE_EPISODE, None)
            self.held.sessions.pop(self.holder, None)
        self.handle = None


_binding: contextvars.ContextVar[McpConnection | None] = contextvars.ContextVar(
    "majordomus_mcp_binding", default=None
)


class HeldEpisodes:
    """The episodes this replica holds: its sessions' and the handles it renewed."""

    def __init__(self, engine: Engine, settings: Settings, replica: str, *, stdio: bool) -> None:
        self.episodes = engine.episodes
        self.settings = settings
        self.replica = replica
        self.stdio = stdio
        self.sessions: dict[str, Connection] = {}
        """Sessions of this replica holding an episode, by holder: renewed while they live."""
        self.handles: OrderedDict[str, None] = OrderedDict()
        self.handle_holder = f"{replica} handle"
        self.connected: Callable[[Connection], bool] = lambda conn: True
        """Whether a session's client is connected now (stdio: while the process serves)."""

    # -- binding ------------------------------------------------------------------------------

    def binding_for(self, ctx: ServerRequestContext[Any, Any]) -> McpConnection:
        """The binding the middleware made for this request (or one made now)."""
        return _binding.get() or self.binding_of(ctx)

    def binding_of(self, ctx: ServerRequestContext[Any, Any]) -> McpConnection:
        """The caller's connection: a lasting session, or a self-contained 2026-07-28 request.

        A session's episode is the one bound to it by attach; a `_meta` handle counts only
        where there is no session to bind to.
        """
        conn = connection_of(ctx)
        modern = ctx.protocol_version in MODERN_PROTOCOL_VERSIONS
        if not modern and (self.stdio or conn.session_id is not None):
            holder = conn.state.get(_STATE_HOLDER)
            if holder is None:
                where = "stdio" if conn.session_id is None else f"session {conn.session_id}"
                holder = conn.state[_STATE_HOLDER] = f"{self.replica} {where}"
            return McpConnection(self, conn, "session", holder)
        meta = ctx.meta or {}
        handle = meta.get(EPISODE_META)  # type: ignore[misc]
        handle = handle if isinstance(handle, str) and handle else None
        return McpConnection(self, None, "handle", self.handle_holder, handle)

    async def renew_episode(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        """Middleware: every message renews the episode its connection holds or names."""
        binding = self.binding_of(ctx)
        try:
            await self.renew(binding)
        except Exception:  # noqa: BLE001  a renewal never fails the request it rides on
            log.warning("renewing an episode failed", exc_info=True)
        token = _binding.set(binding)
        try:
            return await call_next(ctx)
        finally:
            _binding.reset(token)

    # -- renewing -----------------------------------------------------------------------------

    async def renew(self, binding: McpConnection) -> None:
        conn = binding.conn
        held = conn.state.get(_STATE_EPISODE) if conn is not None else None
        if conn is not None and held is not None:
            # A session is renewed by this replica while it lives, so a message need only
            # renew when the last renewal is a while back.
            now = time.monotonic()
            if now - conn.state.get(_STATE_RENEWED, 0.0) < hold_seconds(self.settings) / 4:
                return
            conn.state[_STATE_RENEWED] = now
            if not await self.episodes.renew(held, binding.holder, "session"):
                binding.release()  # closed, or resumed by another connection since
            return
        if binding.handle is not None:
            await self.renew_handle(binding, binding.handle)

    async def renew_handle(self, binding: McpConnection, handle: str) -> None:
        if await self.episodes.renew(handle, self.handle_holder, "handle"):
            self.remember_handle(handle)
        elif binding.handle == handle:
            binding.handle = None  # an unknown or closed episode: executions do not carry it

    async def renew_start_handle(self, binding: McpConnection, args: Any) -> None:
        named = args.get("episode") if isinstance(args, dict) else None
        if isinstance(named, str) and named and named != binding.episode:
            if await self.episodes.renew(named, self.handle_holder, "handle"):
                self.remember_handle(named)

    def remember_handle(self, handle: str) -> None:
        self.handles[handle] = None
        self.handles.move_to_end(handle)
        while len(self.handles) > REMEMBERED_HANDLES:
            self.handles.popitem(last=False)

    async def session_ended(self, conn: Connection) -> None:
        """A session ended: the episode it held is detached (not closed)."""
        held = conn.state.pop(_STATE_EPISODE, None)
        holder = conn.state.get(_STATE_HOLDER)
        if holder is not None:
            self.sessions.pop(holder, None)
        if held is None or holder is None:
            return
        try:
            if await self.episodes.release(held, holder):
                log.info("episode %r detached: its MCP session ended", held)
        except Exception:  # noqa: BLE001
            log.warning("detaching episode %r failed", held, exc_info=True)

    # -- keeping ------------------------------------------------------------------------------

    async def heartbeat(self) -> None:
        """Renew the episodes of this replica's connected sessions; forget those taken.

        A session counts as connected while a request of it is in flight or its GET stream
        is open, the SDK's own measure of idleness. A session whose client vanished without
        a DELETE stays in memory until the SDK's idle timeout, but it stops being renewed
        here, so its episode detaches after `hold_seconds` like any other silent holder.
        """
        now = time.monotonic()
        held: list[tuple[str, str]] = []
        for holder, conn in list(self.sessions.items()):
            episode = conn.state.get(_STATE_EPISODE)
            if episode is not None and self.connected(conn):
                held.append((str(episode), holder))
                conn.state[_STATE_RENEWED] = now
        renewed = await self.episodes.keep_held(held)
        for (_, holder), ok in zip(held, renewed, strict=True):
            taken = self.sessions.get(holder) if not ok else None
            if taken is not None:  # closed, or resumed by another connection since
                taken.state.pop(_STATE_EPISODE, None)
                self.sessions.pop(holder, None)

    async def release_all(self) -> None:
        """Detach every episode this replica holds (it is stopping)."""
        for holder, conn in list(self.sessions.items()):
            held = conn.state.get(_STATE_EPISODE)
            if held is not None and await self.episodes.release(str(held), holder):
                log.info("episode %r detached: this replica is stopping", held)
        for handle in list(self.handles):
            if await self.episodes.release(handle, self.handle_holder):
                log.info("episode %r detached: this replica is stopping", handle)

    async def keep_episodes(self) -> None:
        """Until cancelled: renew live sessions' episodes and reap abandoned ones."""
        interval = min(1.0, hold_seconds(self.settings) / 3)
        failures = Failures(log, "keeping episodes", cap=interval)
        while True:
            try:
                await self.heartbeat()
                await self.episodes.reap()
            except Exception as exc:  # noqa: BLE001  try again, next interval at the latest
                failures.failed(exc)
                await failures.pause()
                continue
            failures.recovered()
            await asyncio.sleep(interval)

    @contextlib.asynccontextmanager
    async def maintained(self) -> AsyncIterator[None]:
        """Run the episode keeper; on the way out, detach what this replica held."""
        keeper = asyncio.create_task(self.keep_episodes(), name="majordomus-episodes")
        try:
            yield
        finally:
            await stop_task(keeper, log)
            with anyio.move_on_after(SHUTDOWN_SECONDS, shield=True):
                try:
                    await self.release_all()
                except Exception:  # noqa: BLE001
                    log.warning("detaching held episodes failed", exc_info=True)
