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

This module holds the episode's vocabulary (its wire type, states, the holder's connection
as the surfaces hand it over, the id rule); the Redis side is `majordomus.store.episodes`,
the capabilities `majordomus.builtins.episodes`.
"""

from __future__ import annotations

from typing import Annotated, Literal, Protocol

import msgspec
from msgspec import UNSET, UnsetType

from majordomus.config import Settings
from majordomus.errors import invalid_input
from majordomus.schemas import PROBLEMS

EXTERNAL_ID_CHARS = 256
"""The longest `external_id` accepted (a conversation or thread id is far shorter)."""

LINE_BREAKS = frozenset("\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")

WHITE_SPACE = frozenset(c for c in map(chr, range(0x3001)) if c.isspace())
"""What `str.strip` removes (`str.isspace`; none is above U+3000)."""


def _char_class(chars: frozenset[str]) -> str:
    """`chars` as the inside of a regular expression's `[...]`, each as `\\uXXXX`, which
    the dialects a client may validate with (ECMA-262, Python, Rust) all read alike."""
    return "".join(f"\\u{ord(c):04x}" for c in sorted(chars))


ExternalId = Annotated[
    str,
    msgspec.Meta(
        min_length=1,
        max_length=EXTERNAL_ID_CHARS,
        pattern=f"[^{_char_class(WHITE_SPACE)}]",
        extra_json_schema={
            PROBLEMS: {"pattern": "is blank", "not": "spans more than one line"},
            # Anywhere in it, so no anchor: `$` differs between dialects (Python's also
            # matches before a final newline), and generators read look-aheads loosely.
            "not": {"type": "string", "pattern": f"[{_char_class(LINE_BREAKS)}]"},
        },
    ),
]
"""An `external_id` in an input: its schema says what `checked_external_id` refuses (not
blank, one line, at most `EXTERNAL_ID_CHARS`), so a client learns it before it asks."""


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

