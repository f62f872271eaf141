"""A capability's declaration as data: what a process that does not import its module
needs to start it exactly as one that does.

Workers publish the declaration of every capability they run (`declaration_of`, written by
`majordomus.store.declarations`); a producer that starts a capability by id without its
module (`majordomus.Client` straight to Redis) reads it back as a `Capability` whose input
and output are known by their JSON Schemas alone (`majordomus.schemas.Published`), so the
engine validates the input against the very schema the API and the MCP tool show, fills
its defaults, redacts its secrets (schema-driven as always) and enqueues it with the
capability's title, priority, cancellability and concurrency bounds (its own, and per key:
the producer computes a start's key as the workers would) and rate limit, and its
debounce or throttle (the producer collapses its starts as the workers' own would). The
handler is not here: a published capability is only ever started, never run, in such a
process.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec

from majordomus.errors import MajordomusError
from majordomus.flow import COLLAPSES, Debounce, PerKey, RateLimit, Throttle
from majordomus.priorities import Priority
from majordomus.registry import Capability, Exposure, Kind
from majordomus.schemas import Published

DECLARATION_VERSION = 1
"""The shape of a published declaration; a reader passes over one of a newer shape."""


class PerKeyDeclared(msgspec.Struct, forbid_unknown_fields=False):
    """Its limit per key (`majordomus.flow.PerKey`): a producer computes a start's key."""

    member: str
    limit: int


class CollapseDeclared(msgspec.Struct, forbid_unknown_fields=False):
    """Its debounce or throttle (`majordomus.flow`): a producer collapses a start by its key."""

    kind: Literal["debounce", "throttle"]
    member: str
    seconds: float


class Declaration(msgspec.Struct, forbid_unknown_fields=False):
    """One capability, as its workers publish it. Members a newer worker adds are ignored."""

    id: str
    kind: Kind
    title: str
    description: str
    input_schema: dict[str, Any]
    output_schema: dict[str, Any]
    cancellable: bool = False
    max_concurrency: int | None = None
    priority: Priority = "normal"
    http_method: str | None = None
    http_path: str | None = None
    searchable: list[str] = []
    per_key: PerKeyDeclared | None = None
    rate_limit: RateLimit | None = None
    collapse: CollapseDeclared | None = None
    version: int = DECLARATION_VERSION


_decoder = msgspec.json.Decoder(Declaration)


def declaration_of(cap: Capability) -> bytes:
    """What a worker publishes of `cap`, as JSON."""
    return msgspec.json.encode(
        Declaration(
            id=cap.id,
            kind=cap.kind,
            title=cap.title,
            description=cap.description,
            input_schema=cap.input_schema,
            output_schema=cap.output_schema,
            cancellable=cap.cancellable,
            max_concurrency=cap.max_concurrency,
            priority=cap.priority,
            http_method=cap.exposure.http_method,
            http_path=cap.exposure.http_path,
            searchable=list(cap.searchable),
            per_key=PerKeyDeclared(cap.per_key.member, cap.per_key.limit) if cap.per_key else None,
            rate_limit=cap.rate_limit,
            collapse=CollapseDeclared(**cap.collapse.view()) if cap.collapse else None,
        )
    )


def published(raw: bytes) -> Capability | None:
    """A published declaration as a startable `Capability` (None when it cannot be read,
    or is of a newer shape than this process knows)."""
    try:
        decl = _decoder.decode(raw)
    except msgspec.DecodeError:
        return None
    if decl.version > DECLARATION_VERSION:
        return None
    return Capability(
        id=decl.id,
        kind=decl.kind,
        title=decl.title,
        description=decl.description,
        input=Published(decl.input_schema, f"{decl.id} input"),  # type: ignore[arg-type]
        output=Published(decl.output_schema, f"{decl.id} output"),  # type: ignore[arg-type]
        handler=_not_here(decl.id),
        cancellable=decl.cancellable,
        max_concurrency=decl.max_concurrency,
        priority=decl.priority,
        exposure=Exposure(None, decl.http_method, decl.http_path, None),
        searchable=tuple(decl.searchable),
        per_key=PerKey(decl.per_key.member, decl.per_key.limit) if decl.per_key else None,
        rate_limit=decl.rate_limit,
        collapse=_collapse_of(decl.collapse),
    )


def _collapse_of(declared: CollapseDeclared | None) -> Debounce | Throttle | None:
    if declared is None:
        return None
    return COLLAPSES[declared.kind](declared.member, declared.seconds)


def _not_here(cap_id: str) -> Any:
    def handler(*_: Any) -> Any:
        raise MajordomusError(
            "refused",
            f"{cap_id} is known here by its published declaration only; its handler runs on "
            "the workers",
            "start it as an execution",
        )

    return handler
