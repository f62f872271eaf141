"""The `episodes.*` capabilities: attach, detach and list an MCP client's episodes.

Declared like any user's capabilities (control capabilities, as `**CONTROL`); what an
episode is lives in `majordomus.episodes`, its storage in `majordomus.store.episodes`
(reached as `engine.episodes`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.builtins.common import NonNegative, control, engine_of
from majordomus.config import LIMITS, clamp
from majordomus.episodes import Episode, EpisodeConnection, ExternalId, checked_external_id
from majordomus.errors import not_found, refused
from majordomus.registry import capability
from majordomus.schemas import FROM_CONNECTION

if TYPE_CHECKING:
    from majordomus.context import Context

CONTROL = control("episodes", stability="experimental")
"""Experimental, tagged `episodes`, answering directly."""


class AttachInput(msgspec.Struct, forbid_unknown_fields=True):
    """The input of `episodes.attach`."""

    external_id: ExternalId
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

    external_id: Annotated[
        ExternalId | None, msgspec.Meta(extra_json_schema={FROM_CONNECTION: True})
    ] = None
    """The episode to close; absent: the one the calling MCP connection holds (over HTTP,
    which has none, it must be given)."""


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
        "bind to, so it has no route (an episode attached over HTTP would be held by nothing "
        "that could lose it)."
    ),
    mcp="majordomus_session_attach",
    http=None,
    cli=None,
    **CONTROL,
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
    episode, resumed = await engine.episodes.attach(external_id, conn.holder, conn.kind)
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
    mcp="majordomus_session_detach",
    http=("POST", "/api/v1/episodes/detach"),
    cli=("episodes", "detach"),
    **CONTROL,
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
    episode = await engine_of(ctx).episodes.close(external_id, "detach")
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
    mcp="majordomus_episodes",
    http=("GET", "/api/v1/episodes"),
    cli=("episodes", "list"),
    **CONTROL,
)
async def list_episodes(ctx: Context, inp: ListInput) -> EpisodeList:
    store = engine_of(ctx).episodes
    limit = clamp(inp.limit, LIMITS.list_executions, LIMITS.list_executions)
    current = await store.current()
    opened = sum(1 for e in current if e.state == "open")
    shown = await store.closed(limit) if inp.closed else current[:limit]
    conn = _connection(ctx)
    mine = conn.episode if conn is not None else None
    return EpisodeList(opened, len(current) - opened, shown, mine or UNSET)
