"""Which executions a filter selects: the one filter `executions.list`, `executions.count`
and the bulk actions (`executions.cancel_matching`, `executions.retry_matching`) take, so
a list, its count and an action over it always mean the same executions.

A filter is read as bounds and predicates (`Selection`): its time range as places in the
order of creation (`create.lua`: epoch ms times 1024), so a range is a range of the index,
not a scan; its search as the index to read instead of `idx:all` (`majordomus.search`);
its state, capability and episode as predicates on each snapshot. This module names no
Redis command; the engine walks the indexes through the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Literal

import msgspec

from majordomus.schemas import PROBLEMS
from majordomus.search import SEARCH_PATTERN
from majordomus.states import ExecutionState

PLACES_PER_MS = 1024
"""A place in the order of creation is epoch ms times this, plus less than this (`create.lua`)."""

Sort = Literal["created", "duration", "state"]
Order = Literal["desc", "asc"]

STATE_ORDER = {
    "queued": 0,
    "running": 1,
    "cancelling": 2,
    "succeeded": 3,
    "failed": 4,
    "cancelled": 5,
}
"""`sort=state`: the lifecycle's order, active ones first."""

RFC3339 = (
    r"^[1-9][0-9]{3}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])T([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9]"
    r"(\.[0-9]{1,9})?(Z|[+-]([01][0-9]|2[0-3]):[0-5][0-9])$"
)
"""A time with its offset, as a filter takes it: in the schema as well as the `date-time`
format (which a validator need not check), so `?created_before=null` is refused by the
schema, not read as no bound."""

Moment = Annotated[
    datetime,
    msgspec.Meta(
        tz=True,
        extra_json_schema={
            "pattern": RFC3339,
            PROBLEMS: {
                "pattern": "is not a time with its offset (RFC 3339, such as "
                "2026-12-07T08:00:00Z; in a query string write + as %2B)"
            },
        },
    ),
]


class Match(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Which executions: every member given must hold (none given: every execution)."""

    state: ExecutionState | None = None
    capability: str | None = None
    episode: str | None = None
    created_after: Moment | None = None
    """Only executions created at or after this time (RFC 3339 with an offset)."""
    created_before: Moment | None = None
    """Only executions created before this time (RFC 3339 with an offset)."""
    search: (
        Annotated[
            str,
            msgspec.Meta(
                max_length=300,
                pattern=SEARCH_PATTERN,
                extra_json_schema={
                    PROBLEMS: {"pattern": "is not member=value (such as customer=acme)"}
                },
            ),
        ]
        | None
    ) = None
    """`member=value`: only executions whose input member has this value, for a member its
    capability declares searchable (`searchable` in `capabilities.list`; with no
    `capability`, of every capability that declares it). Read from an index kept within the
    retention, never a scan; a member no capability indexes is `not_found`."""

    def matching(self) -> Match:
        """The filter alone (a subclass's paging and sorting members left out)."""
        return Match(
            state=self.state,
            capability=self.capability,
            episode=self.episode,
            created_after=self.created_after,
            created_before=self.created_before,
            search=self.search,
        )


def place_of(moment: datetime) -> float:
    """The first place of a moment's millisecond in the order of creation."""
    return float(int(moment.timestamp() * 1000) * PLACES_PER_MS)


@dataclass(frozen=True)
class Selection:
    """A filter as the engine walks it: the index to read, its bounds, the predicates."""

    state: str | None = None
    capability: str | None = None
    episode: str | None = None
    top: float | None = None
    """Only places below this (exclusive)."""
    floor: float | None = None
    """Only places at or above this."""
    search: tuple[tuple[str, str, str], ...] | None = None
    """The search indexes (capability, member, value text) read instead of every execution."""

    def holds(self, state: bytes | None, capability: bytes | None, episode: bytes | None) -> bool:
        """Whether a snapshot's fields pass the predicates (a missing snapshot never does)."""
        if state is None:
            return False
        if self.state and state.decode() != self.state:
            return False
        if self.capability and (capability or b"").decode() != self.capability:
            return False
        return not (self.episode and (episode or b"").decode() != self.episode)

    def below(self, place: float | None) -> Selection:
        """The same selection, only below `place` too (None: unchanged)."""
        if place is None or (self.top is not None and self.top <= place):
            return self
        return Selection(self.state, self.capability, self.episode, place, self.floor, self.search)


class MatchCount(msgspec.Struct):
    """How many executions a filter matches now, and how many of them each bulk action
    would act on."""

    matching: int
    cancellable: int
    """Queued or running: what `executions.cancel_matching` would cancel."""
    retryable: int
    """Failed or cancelled and not retried yet: what `executions.retry_matching` would start
    again (one whose input held a secret, which is not kept, is counted, then passed by)."""
