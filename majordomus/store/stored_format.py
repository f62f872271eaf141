"""The stored format of an execution, declared once: its snapshot hash and its events' envelope.

The model's Structs are the source: `ExecutionSnapshot` says what a snapshot holds,
`EventEnvelope` what every event carries. This module says only how the store lays them
out in Redis, and derives the rest from them:

- **The snapshot hash** keeps every member of `ExecutionSnapshot` under its own name
  (`last_sequence` as `last_seq`, `HASH_NAMES`), but those derived when it is read
  (`DERIVED`); a scalar member as its text (`1`/`0` a bool), any other as its JSON. Beside
  them, fields only the store reads (`StoreFields`). Reading one is msgspec's work
  (`snapshot_of`: one loop over the hash, then `msgspec.convert` into the Struct).
- **The envelope** the scripts write is a Lua function, `envelope(id, sq, ts, t, d)`,
  generated from `EventEnvelope`'s members in their order (`envelope_lua`), put at the
  ENVELOPE mark of a script by `scripts.load_script`: a member with no value in
  `ENVELOPE_VALUES` (or a value of no member) stops every script from loading.

tests/majordomus/test_stored_format.py runs every path of the scripts and fails when what
they write drifts from this declaration: a hash field that is not declared, a declared one
never written, an envelope whose members are not the Struct's, an event's data missing a
required member of its Struct. The key names the scripts build are `keys.py`'s
(`keys.SCRIPT_KEY_NAMES`). It issues no Redis command.

**Adding a member**, then, touches:

- to every event (`EventEnvelope`): the Struct, and its value in `ENVELOPE_VALUES` (a
  constant, or a Lua expression of the envelope function's arguments; one the function is
  not given yet is a new argument, passed by the scripts' three calls of it);
- to one event's data: its Struct, and what writes it: the handler's context (nearly every
  event's data is encoded from its Struct in Python and stored as it is); only
  `execution.queued`'s (create.lua) and a cancel's error (append.lua) are written in Lua,
  which the test checks holds every required member;
- to the snapshot: `ExecutionSnapshot`, and the script that writes its field (a member
  derived on reading instead: `DERIVED` and `_derive`); one only the store reads:
  `StoreFields`, and its script. One a create writes is also in the hash a start answers
  (`executions.created_hash`, which the test compares with create.lua's). Reading it needs
  nothing more.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import msgspec

from majordomus.config import LIMITS
from majordomus.ids import PROTOCOL_VERSION
from majordomus.model import EventEnvelope, ExecutionLinks, ExecutionSnapshot

# -- the snapshot hash ---------------------------------------------------------------------

HASH_NAMES: dict[str, str] = {"last_sequence": "last_seq"}
"""The members of `ExecutionSnapshot` kept under another field than their name."""

DERIVED: frozenset[str] = frozenset({"event_count", "events_truncated", "correlation_id", "links"})
"""The members of `ExecutionSnapshot` not kept: derived as it is read (`_derive`)."""

ABSENT_AS: dict[str, Any] = {
    "steps": [],
    "diagnostics": [],
    "attempt": 0,
    "cancellable": False,
    "actor": "internal",
    "priority": "normal",
}
"""What a required member is when its field is absent: the steps and diagnostics are
written by the first append that has one; the others by every create (older records)."""


class StoreFields(msgspec.Struct, kw_only=True):
    """The snapshot hash's fields that only the store reads, never a member of an answer."""

    order: int
    """Its place in the order of creation (idx:all's score), `create.lua`."""
    ahead: int
    """What its create answered, answered again to the same call sent twice."""
    created_by: str
    """The create call's token (`ExecutionStore.next_token`)."""
    created_ms: int
    qoffset: int
    """Its priority's head start (ms) in the ready queue."""
    conc_limit: int | None = None
    """Its capability's `max_concurrency`, when it has one."""
    flow: str | None = None
    """Its flow control, when it has some: `k` a limit per key, `r` a rate limit (both:
    `kr`); the take and the end read the fields below only then."""
    key_limit: int | None = None
    """Its capability's limit per key (`majordomus.flow`), when it declares one."""
    conc_key: str | None = None
    """Its key under that limit (`PerKey.key_of` its input)."""
    rate_t: float | None = None
    """Its capability's rate limit's interval (ms between two starts at its pace)."""
    rate_tau: float | None = None
    """How far ahead of that pace a start may be (ms: the burst's)."""
    rate_key: str | None = None
    """Its rate limit's bucket's key, for a limit per key."""
    rate_due: int | None = None
    """When its turn under the rate limit comes (epoch ms), once the take gave it one: it
    starts then without taking another."""
    due_ms: int | None = None
    timeout_ms: int | None = None
    """Its start's own timeout (ms), for the take to hand its worker."""
    started_ms: int | None = None
    diag_count: int | None = None
    append_token: str | None = None
    """The last tokened append's token and answer (`append.lua`)."""


def _hash_layout() -> tuple[dict[bytes, tuple[str, bool]], frozenset[str]]:
    """Each kept member's hash field -> (member, whether its value is JSON text); and every
    field the hash may hold (those and `StoreFields`')."""
    scalar = (
        msgspec.inspect.StrType,
        msgspec.inspect.IntType,
        msgspec.inspect.BoolType,
        msgspec.inspect.LiteralType,
    )
    layout: dict[bytes, tuple[str, bool]] = {}
    for field in msgspec.inspect.type_info(ExecutionSnapshot).fields:  # type: ignore[attr-defined]
        if field.name in DERIVED:
            continue
        key = HASH_NAMES.get(field.encode_name, field.encode_name)
        layout[key.encode()] = (field.name, not isinstance(field.type, scalar))
    own = frozenset(StoreFields.__struct_fields__)
    return layout, frozenset(k.decode() for k in layout) | own


SNAPSHOT_LAYOUT, SNAPSHOT_FIELDS = _hash_layout()
"""`SNAPSHOT_LAYOUT`: hash field -> (`ExecutionSnapshot` member, JSON or text);
`SNAPSHOT_FIELDS`: every field a snapshot hash may hold."""


def _derive(members: dict[str, Any], links: Callable[[str], ExecutionLinks]) -> None:
    last = int(members["last_sequence"])
    members["event_count"] = last  # sequences are dense: every event ever appended
    members["events_truncated"] = last > LIMITS.stream_events
    members["correlation_id"] = members["id"]
    members["links"] = links(members["id"])


def snapshot_of(
    raw: Mapping[bytes, bytes], links: Callable[[str], ExecutionLinks]
) -> ExecutionSnapshot:
    """A snapshot hash (as HGETALL answers it) as the `ExecutionSnapshot` it stores; the
    store's own fields are left out, an undeclared one is ignored (a newer writer's)."""
    members = ABSENT_AS.copy()
    decode_json = msgspec.json.decode
    layout = SNAPSHOT_LAYOUT.get
    for key, value in raw.items():
        name, is_json = layout(key, _NOT_KEPT)
        if name:
            members[name] = decode_json(value) if is_json else value.decode()
    _derive(members, links)
    return msgspec.convert(members, ExecutionSnapshot, strict=False)


def snapshot_of_members(
    members: dict[str, Any], links: Callable[[str], ExecutionLinks]
) -> ExecutionSnapshot:
    """The `ExecutionSnapshot` of the members a hash holds, each as text (a scalar's) or as
    its JSON decoded (`executions.created_members`): what `snapshot_of` reads, made the same."""
    members = {**ABSENT_AS, **members}
    _derive(members, links)
    return msgspec.convert(members, ExecutionSnapshot, strict=False)


_NOT_KEPT = ("", False)


# -- the streams ------------------------------------------------------------------------------

EVENT_ENTRY = "e"
"""The one field of an entry of an execution's stream (`<seq>-0`): the event's envelope."""

FEED_ENTRY = ("x", "s", "e")
"""The fields of an entry of a partition's feed: the execution's id, the event's sequence,
its envelope."""


# -- the envelope ----------------------------------------------------------------------------

ENVELOPE_VALUES: dict[str, tuple[str, str]] = {
    "schema_version": ("constant", PROTOCOL_VERSION),
    "event_id": ("string", "id .. '#' .. sq"),
    "execution_id": ("string", "id"),
    "sequence": ("number", "sq"),
    "timestamp": ("string", "ts"),
}
"""Each member of `EventEnvelope` as the scripts write it: a constant (its JSON written
into the script), or a JSON string or number of a Lua expression over the envelope
function's arguments (`id` the execution's, `sq` the sequence's text, `ts` the timestamp).
Every value is of the store's own making (ids, digits, RFC 3339 stamps), never a character
JSON would escape."""


class EnvelopeDrift(RuntimeError):
    """`EventEnvelope` and `ENVELOPE_VALUES` name different members: no script loads."""


def envelope_lua() -> str:
    """The Lua function every script writes an event's envelope with, `envelope(id, sq, ts,
    t, d)` (`t` its type, `d` its data's JSON or '' for none), its members in the order of
    `EventEnvelope`'s, then `type`, then `data` (the order they have always been stored in;
    JSON's readers take a member wherever it is)."""
    members = EventEnvelope.__struct_encode_fields__
    if set(members) != set(ENVELOPE_VALUES):
        raise EnvelopeDrift(
            f"EventEnvelope's members {sorted(members)} are not those the scripts write "
            f"({sorted(ENVELOPE_VALUES)}): give each member its value in ENVELOPE_VALUES"
        )
    tag = EventEnvelope.__struct_config__.tag_field
    parts: list[str] = []
    text = "{"
    for name in members:
        kind, value = ENVELOPE_VALUES[name]
        text += f'"{name}":'
        if kind == "constant":
            text += msgspec.json.encode(value).decode() + ","
            continue
        quote = '"' if kind == "string" else ""
        parts += [_lua_text(text + quote), value]
        text = quote + ","
    parts += [_lua_text(text + f'"{tag}":"'), "t"]
    body = " .. ".join(parts)
    return (
        "local function envelope(id, sq, ts, t, d)\n"
        f"  if d == '' then return {body} .. '\"}}' end\n"
        f"  return {body} .. '\",\"data\":' .. d .. '}}'\n"
        "end\n"
    )


def _lua_text(text: str) -> str:
    """`text` as a Lua string literal (it holds no quote of Lua's, no backslash)."""
    assert "'" not in text and "\\" not in text
    return "'" + text + "'"
