"""Searchable input members: what a capability declares (`searchable=`), checked once at
declaration, and the text an input's value is indexed and searched under.

A capability names the members of its input that an execution may be found by
(`@capability(..., searchable=("customer",))`). Each must be a top-level member of a scalar
type (a string, an integer, a boolean, or an enumeration of them) not marked sensitive: a
secret is never written into a key name. At creation the execution is added to one index
per searchable member, by its value (`create.lua`); `executions.list` with
`search="customer=acme"` reads that index (with no capability named, the indexes of every
capability that declares the member), never a scan. This module holds no index and
names no Redis command: the keys are `majordomus.store.keys`', the writes the store's.
"""

from __future__ import annotations

import hashlib
from typing import Any

from majordomus.errors import MajordomusError, invalid_input, not_found
from majordomus.schemas import SENSITIVE, schema_of

SCALAR_TYPES = frozenset({"string", "integer", "boolean"})
"""The JSON types a searchable member may have: equality on them is exact (a number with a
fraction is left out: 0.1 + 0.2 would not find 0.3)."""

VALUE_CHARS = 100
"""A value longer than this is indexed under its hash (a key name stays short); a search
for it finds it the same way."""


class SearchableError(ValueError):
    """A `searchable=` that names no scalar, non-sensitive top-level member; raised at
    declaration (start-up)."""


def check_searchable(cap_id: str, input_type: Any, names: tuple[str, ...]) -> tuple[str, ...]:
    """`names` as declared, or `SearchableError` naming what is wrong with one."""
    if not names:
        return ()
    schema = schema_of(input_type)
    root = schema.get("$defs", {}).get(schema.get("$ref", "").rsplit("/", 1)[-1], schema)
    members = root.get("properties", {})
    for name in names:
        node = members.get(name)
        if node is None:
            raise SearchableError(
                f"searchable {name!r} of {cap_id!r} is not a member of its input "
                f"(its members: {', '.join(sorted(members)) or 'none'})"
            )
        node = _resolved(node, schema)
        if node.get(SENSITIVE) is True or node.get("writeOnly") is True:
            raise SearchableError(
                f"searchable {name!r} of {cap_id!r} is sensitive: a secret is never indexed"
            )
        if not _types_of(node, schema) or not _types_of(node, schema) <= SCALAR_TYPES | {"null"}:
            raise SearchableError(
                f"searchable {name!r} of {cap_id!r} must be a string, an integer or a boolean"
            )
    if len(set(names)) != len(names):
        raise SearchableError(f"searchable of {cap_id!r} names a member twice")
    return tuple(names)


def _resolved(node: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        return dict(schema.get("$defs", {}).get(ref.rsplit("/", 1)[-1], {}))
    return node


def _types_of(node: dict[str, Any], schema: dict[str, Any]) -> set[str]:
    """The JSON types a member's schema allows (its `anyOf` branches' included)."""
    node = _resolved(node, schema)
    if "anyOf" in node:
        return set().union(*(_types_of(b, schema) for b in node["anyOf"]))
    kind = node.get("type")
    if isinstance(kind, list):
        return set(kind)
    if isinstance(kind, str):
        return {kind}
    if "enum" in node:
        return {_json_type(v) for v in node["enum"]}
    if "const" in node:
        return {_json_type(node["const"])}
    return set()


def _json_type(value: Any) -> str:
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, str):
        return "string"
    return "other"


def value_text(value: Any) -> str | None:
    """The text a member's value is indexed under: a string as it is, an integer in
    decimal, a boolean `true`/`false`; None (not indexed) for a null or any other value.
    A text longer than `VALUE_CHARS` becomes `#` and its hash."""
    if isinstance(value, bool):
        text = "true" if value else "false"
    elif isinstance(value, int):
        text = str(value)
    elif isinstance(value, str):
        text = value
    else:
        return None
    if len(text) > VALUE_CHARS or text.startswith("#"):
        return "#" + hashlib.sha256(text.encode()).hexdigest()[:32]
    return text


def indexed_values(searchable: tuple[str, ...], plain: Any) -> list[tuple[str, str]]:
    """(member, value text) of each searchable member an input has a value for."""
    if not searchable or not isinstance(plain, dict):
        return []
    found = []
    for name in searchable:
        text = value_text(plain.get(name))
        if text is not None:
            found.append((name, text))
    return found


SEARCH_PATTERN = r"^[A-Za-z_][A-Za-z0-9_]*=[\s\S]*$"
"""A search's shape: an input member's name, `=`, and its value (any text, even empty)."""


def parse_search(search: str) -> tuple[str, str]:
    """A list's `search` (`member=value`) as (member, value text); `invalid_input` when it
    is not of that shape (the schema says so too: `SEARCH_PATTERN`)."""
    member, eq, value = search.partition("=")
    if not eq or not member.isidentifier():
        raise invalid_input(
            f"search {search!r} is not member=value",
            "name an input member and its value, such as customer=acme",
        )
    text = value_text(value)
    if text is None:  # never: a str is always indexable
        raise MajordomusError("internal", "unreachable")
    return member, text


def not_indexed(member: str, cap_id: str | None, searchable: tuple[str, ...]) -> MajordomusError:
    """A search by a member no index is kept of: `not_found`, saying which are."""
    if cap_id is None:
        return not_found(
            f"no capability declares {member!r} searchable, so no index of it is kept",
            "search by a member a capability declares searchable=(...) (capabilities.list "
            "shows each one's searchable members)",
        )
    declared = ", ".join(searchable) if searchable else "none"
    return not_found(
        f"{member!r} is not a searchable member of {cap_id}, so no index of it is kept "
        f"(searchable: {declared})",
        "search by a member its capability declares searchable=(...)",
    )
