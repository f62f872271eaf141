"""JSON Schemas projected from msgspec types, and what is done with them.

Schemas are generated, never written: `schema_of` inlines msgspec's root `$ref` so a tool or
an OpenAPI operation gets a plain object schema, and writes `T | None` as the seeds do,
`{"type": [T, "null"]}` rather than an `anyOf`, so every member of an input has a `type` a
client can read; `schema_components` does the same for the OpenAPI document, so a route, a
tool, a command and the document say one thing. A schema says what the server accepts:
inputs are validated against it first, then converted by msgspec. Validation reports up to
five problems as `"/pointer: problem"` (in the words of the schema's
`x-majordomus-problems` where it has them); redaction is driven by the schema alone
(`format: password`, `writeOnly: true`, `x-majordomus-sensitive: true`), never by a
field's name.

A problem never echoes a secret: where the failing value is, holds or may be a sensitive
member, the value is shown as `«redacted»`, and any sensitive value of the input that a
message would still carry is masked the same way. An echoed value is cut to
`ECHOED_VALUE_CHARS`, a problem to `PROBLEM_CHARS`. An input nested deeper than
`MAX_INPUT_DEPTH` is refused before it is validated, so no depth of JSON reaches a
recursion limit. `secret_values` hands the sensitive values of an input to whoever must
keep them out of text (the handler context masks them in log lines and diagnostics).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from functools import cache
from typing import Annotated, Any

import msgspec

from majordomus.config import LIMITS
from majordomus.docstrings import field_docs
from majordomus.errors import MajordomusError, invalid_input

REDACTED = "«redacted»"
SENSITIVE = "x-majordomus-sensitive"

Secret = Annotated[str, msgspec.Meta(extra_json_schema={SENSITIVE: True})]
"""A string a capability's input marks as sensitive: redacted wherever the input is shown."""

PROBLEMS = "x-majordomus-problems"
"""Beside the keywords of a schema, what a value that fails one of them is, by keyword, as
the rest of a sentence that starts with the value (`{"pattern": "is not an execution
id"}`): a person reads that, not the regular expression."""

INPUT_OF = "x-majordomus-input-of"
"""On a member of an input, the name of another member that names a capability: this one
is that capability's input (`executions.start`'s `input`, of its `capability`). The
OpenAPI document describes such an input once per capability that runs as an execution, a
union discriminated by the naming member (`api.openapi`); the engine validates it against
the named capability's own schema."""

FROM_CONNECTION = "x-majordomus-from-connection"
"""On an optional member of an input: left out, it is taken from the calling MCP
connection (`episodes.detach`'s `external_id`). A request over HTTP has no connection, so
the OpenAPI document requires the member."""

MAX_INPUT_DEPTH = 64
"""How deeply an input's arrays and objects may nest (the input itself is level 1). A
deeper one is `invalid_input` before validation: validating, redacting and encoding
recurse per level, and a recursion limit reached on a client's JSON must not be a 500."""

ECHOED_VALUE_CHARS = 80
"""The longest a value is echoed in a validation problem; a longer one is cut with `…`."""

PROBLEM_CHARS = 300
"""The longest one validation problem is (its pointer included); a longer one is cut."""

MIN_SECRET_CHARS = 3
"""A sensitive value shorter than this is not masked in text: masking one or two
characters would blank them in every word of a log line and protect nothing."""


class Published:
    """A type known by its JSON Schema alone: the input or output of a capability whose
    module this process does not import, as its workers published it
    (`majordomus.declarations`). Validated and redacted by that schema exactly as the
    Struct it was made from would be (both are driven by the schema: `validate_input`,
    `redact`), its values stay plain JSON-shaped Python, with the schema's defaults filled
    in as msgspec fills the Struct's."""

    __slots__ = ("schema", "name")

    def __init__(self, schema: dict[str, Any], name: str) -> None:
        self.schema = schema
        self.name = name

    @property
    def __name__(self) -> str:  # what messages call a type
        return self.name

    def __repr__(self) -> str:
        return f"Published({self.name!r})"


@cache
def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a msgspec type as one object, with `$defs` kept beside it.

    Each field's docstring becomes its property's `description` (msgspec drops them), so a
    tool, an OpenAPI operation and `capabilities describe` tell what every member means.
    A `Published` type's is the schema it was published with.
    """
    if isinstance(tp, Published):
        return tp.schema
    raw = msgspec.json.schema(tp)
    _describe_fields(tp, raw.get("$defs", {}))
    raw = _nullable_as_type_list(raw)
    ref = raw.get("$ref")
    defs = raw.get("$defs", {})
    if ref is None:
        return raw
    name = ref.rsplit("/", 1)[-1]
    root = dict(defs[name])
    others = {k: v for k, v in defs.items() if k != name}
    if others or ref in msgspec.json.encode(root).decode():
        # Kept whole, the root's own entry included, so a self-reference still resolves.
        root["$defs"] = defs
    return root


def schema_components(
    types: Iterable[Any], ref_template: str
) -> tuple[tuple[dict[str, Any], ...], dict[str, Any]]:
    """msgspec's `schema_components`, shaped as `schema_of` shapes one schema (members
    described, nullable scalars as type lists), for a document that names its types."""
    types = list(types)
    refs, components = msgspec.json.schema_components(types, ref_template=ref_template)
    for tp in types:
        _describe_fields(tp, components)
    return refs, _nullable_as_type_list(components)


def _nullable_as_type_list(node: Any) -> Any:
    """`{"anyOf": [{"type": T, ...}, {"type": "null"}]}`, as msgspec writes `T | None`, as
    `{"type": [T, "null"], ...}`, everywhere in a schema.

    The same set of values, in the form the seed schemas write (`EventsInput.schema.json`)
    and the one clients read: a client that types an argument from its property's `type`
    (the MCP Inspector's CLI does) finds one. A branch that is a `$ref`, a `const` or
    carries a composition keyword stays an `anyOf`; an `enum` of strings gains `null`. An
    `enum` of strings alone (a `Literal`, as msgspec writes it, without a `type`) gains
    `"type": "string"`, for the same clients.
    """
    if isinstance(node, list):
        return [_nullable_as_type_list(n) for n in node]
    if not isinstance(node, dict):
        return node
    node = {k: _nullable_as_type_list(v) for k, v in node.items()}
    values = node.get("enum")
    if "type" not in node and isinstance(values, list) and values:
        if all(isinstance(v, str) for v in values):
            node = {"type": "string", **node}
    branches = node.get("anyOf")
    if not (isinstance(branches, list) and len(branches) == 2 and {"type": "null"} in branches):
        return node
    (kept,) = [b for b in branches if b != {"type": "null"}] or [None]
    merged = _with_null(kept) if isinstance(kept, dict) else None
    if merged is None or set(merged) & (set(node) - {"anyOf"}):
        return node
    return {**merged, **{k: v for k, v in node.items() if k != "anyOf"}}


def _with_null(branch: dict[str, Any]) -> dict[str, Any] | None:
    """`branch` admitting null as well, written with a type list; None where that cannot be
    said without `anyOf`."""
    if set(branch) & {"$ref", "const", "anyOf", "oneOf", "allOf", "if"}:
        return None
    refused = branch.get("not")
    if refused is not None and not (isinstance(refused, dict) and _excludes_null(refused)):
        return None  # a `not` that null passes would refuse null once merged
    t = branch.get("type")
    if "enum" in branch:
        values = branch["enum"]
        if t not in (None, "string") or not all(isinstance(v, str) for v in values):
            return None
        return {**branch, "type": ["string", "null"], "enum": [*values, None]}
    if isinstance(t, str) and t != "null":
        return {**branch, "type": [t, "null"]}
    return None


def _excludes_null(node: dict[str, Any]) -> bool:
    t = node.get("type")
    return isinstance(t, str) and t != "null"


def _describe_fields(tp: Any, defs: dict[str, Any]) -> None:
    for struct in _struct_types(msgspec.inspect.type_info(tp), set()):
        entry = defs.get(struct.cls.__name__)
        if entry is None:
            continue
        docs = field_docs(struct.cls)
        props = entry.get("properties", {})
        for f in struct.fields:
            text = docs.get(f.name)
            prop = props.get(f.encode_name)
            if text and isinstance(prop, dict) and "description" not in prop:
                prop["description"] = text


def _struct_types(info: Any, seen: set[type]) -> list[Any]:
    """Every Struct type reachable from `info`, each once."""
    mi = msgspec.inspect
    if isinstance(info, mi.StructType):
        if info.cls in seen:
            return []
        seen.add(info.cls)
        found = [info]
        for f in info.fields:
            found += _struct_types(f.type, seen)
        return found
    found = []
    for attr in ("item_type", "key_type", "value_type"):
        if hasattr(info, attr):
            found += _struct_types(getattr(info, attr), seen)
    for attr in ("types", "item_types"):
        for inner in getattr(info, attr, ()) or ():
            found += _struct_types(inner, seen)
    return found


@cache
def _validator(tp: Any) -> Any:
    # Imported here: declaring capabilities (all `majordomus --help` does) needs none of it.
    import jsonschema

    return jsonschema.Draft202012Validator(schema_of(tp))


def validate_input(tp: Any, raw: Any) -> Any:
    """The typed input, or `invalid_input` naming up to five problems (never a secret).

    msgspec decides first (a couple of microseconds): an input it takes strictly is valid,
    unless the type's schema carries constraints of its own that msgspec does not check
    (`extra_json_schema` validation keywords, `_schema_only`). The JSON Schema validator
    runs only then, or to phrase a refusal's problems (its messages point at the member),
    and it is the one that decides what is refused: an integer written 5.0, which msgspec
    refuses strictly and the schema admits, is taken."""
    if raw is None:
        raw = {}
    if _nested_deeper_than(raw, MAX_INPUT_DEPTH):
        raise _too_deep()
    try:
        if not _schema_only(tp):
            try:
                return msgspec.convert(raw, tp)
            except msgspec.ValidationError:
                pass
        errors = sorted(_validator(tp).iter_errors(raw), key=lambda e: list(e.absolute_path))
        if errors:
            # Only a refused input pays for finding its secrets.
            schema, mask = schema_of(tp), secret_mask(secret_values(tp, raw))
            problems = [_problem(e, schema, mask) for e in errors]
            raise invalid_input(
                "; ".join(problems[: LIMITS.validation_problems]),
                "see the capability's input schema (majordomus capabilities describe ID)",
            )
        if isinstance(tp, Published):
            return _with_defaults(tp.schema, tp.schema, raw)
        # Lax: the schema has checked the types, and JSON Schema's `integer` admits 5.0,
        # which a strict conversion would refuse as a float.
        return msgspec.convert(raw, tp, strict=False)
    except msgspec.ValidationError as exc:
        mask = secret_mask(secret_values(tp, raw))
        raise invalid_input(
            _cut(mask(str(exc)), PROBLEM_CHARS), "see the capability's input schema"
        ) from None
    except RecursionError:
        raise _too_deep() from None


SCHEMA_ONLY_KEYWORDS = frozenset(
    {
        "maximum",
        "minimum",
        "exclusiveMaximum",
        "exclusiveMinimum",
        "multipleOf",
        "pattern",
        "minLength",
        "maxLength",
        "enum",
        "const",
        "minItems",
        "maxItems",
        "uniqueItems",
        "contains",
        "minContains",
        "maxContains",
        "required",
        "minProperties",
        "maxProperties",
        "propertyNames",
        "dependentRequired",
        "dependentSchemas",
        "additionalProperties",
        "patternProperties",
        "properties",
        "items",
        "prefixItems",
        "not",
        "allOf",
        "anyOf",
        "oneOf",
        "if",
        "then",
        "else",
        "type",
        "$ref",
    }
)
"""JSON Schema keywords that constrain a value: written into a type's schema by hand
(`extra_json_schema`), msgspec knows nothing of them, so only the schema can check them."""


def _with_defaults(node: dict[str, Any], root: dict[str, Any], value: Any) -> Any:
    """A valid value with the `default` of every object member it leaves out filled in, at
    every level, as msgspec's conversion fills a Struct's (a `Published` type's value)."""
    node = _resolve(node, root)
    if not isinstance(value, dict) or not isinstance(node.get("properties"), dict):
        return value
    filled = dict(value)
    for name, member in node["properties"].items():
        member = _resolve(member, root) if isinstance(member, dict) else {}
        if name in filled:
            filled[name] = _with_defaults(member, root, filled[name])
        elif "default" in member:
            filled[name] = member["default"]
    return filled


@cache
def _schema_only(tp: Any) -> bool:
    """Whether `tp`'s schema constrains anything that msgspec does not check itself (a
    `Published` type: everything, it has no Struct)."""
    import msgspec.inspect as mi

    if isinstance(tp, Published):
        return True

    seen: set[int] = set()
    stack: list[Any] = [mi.type_info(tp)]
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, mi.Metadata) and SCHEMA_ONLY_KEYWORDS & set(
            node.extra_json_schema or ()
        ):
            return True
        for name in getattr(node, "__struct_fields__", ()):
            value = getattr(node, name, None)
            values = value if isinstance(value, tuple) else (value,)
            stack.extend(v for v in values if isinstance(v, mi.Type | mi.Field))
    return False


def _too_deep() -> MajordomusError:
    return invalid_input(
        f"the input nests arrays and objects deeper than {MAX_INPUT_DEPTH} levels",
        "send a flatter input",
    )


def _nested_deeper_than(value: Any, bound: int) -> bool:
    """Whether `value` nests lists, tuples and dicts more than `bound` levels (counted
    without recursion, so any depth is measured)."""
    level: list[Any] = [value]
    depth = 0
    while level:
        containers = [v for v in level if isinstance(v, dict | list | tuple)]
        if not containers:
            return False
        depth += 1
        if depth > bound:
            return True
        level = [c for v in containers for c in (v.values() if isinstance(v, dict) else v)]
    return False


def _problem(error: Any, root: dict[str, Any], mask: Mask) -> str:
    """One problem as `"/pointer: problem"`: a value that is or holds a sensitive member is
    shown as `«redacted»`, a long one is cut, and no secret of the input is left in it."""
    message = str(error.message)
    shown = repr(error.instance)
    said = error.schema.get(PROBLEMS) if isinstance(error.schema, dict) else None
    if isinstance(said, dict) and isinstance(said.get(error.validator), str):
        message = f"{shown} {said[error.validator]}"
    if _may_hold_secret(root, list(error.absolute_path)):
        message = _without_value(message, shown, error.validator)
    elif len(shown) > ECHOED_VALUE_CHARS and message.startswith(shown):
        message = _cut(shown, ECHOED_VALUE_CHARS) + message[len(shown) :]
    problem = mask(f"{_pointer(error.absolute_path)}: {message}")
    return _cut(problem, PROBLEM_CHARS)


def _without_value(message: str, shown: str, validator: Any) -> str:
    """`message` with the failing value replaced by `«redacted»`; a message that names
    the value anywhere but at its start is replaced by what was violated."""
    if message.startswith(shown):
        message = REDACTED + message[len(shown) :]
    if shown in message:
        return f"{REDACTED} does not satisfy its schema ({validator})"
    return message


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pointer(path: Any) -> str:
    parts = [str(p).replace("~", "~0").replace("/", "~1") for p in path]
    return "/" + "/".join(parts)


def coerce_strings(tp: Any, params: dict[str, str]) -> dict[str, Any]:
    """Query-string values typed by the input schema: `"3"` becomes 3 where an integer is due.

    A value that does not parse is passed on unchanged, so validation names it.
    """
    schema = schema_of(tp)
    props = schema.get("properties", {})
    out: dict[str, Any] = {}
    for name, text in params.items():
        out[name] = _coerce(_types_of(props.get(name, {}), schema), text)
    return out


def _types_of(node: dict[str, Any], root: dict[str, Any]) -> set[str]:
    node = _resolve(node, root)
    types: set[str] = set()
    t = node.get("type")
    if isinstance(t, str):
        types.add(t)
    elif isinstance(t, list):
        types.update(t)
    for key in ("anyOf", "oneOf"):
        for branch in node.get(key, []):
            types |= _types_of(branch, root)
    if "enum" in node and not types:
        types.add("string")
    return types


def _coerce(types: set[str], text: str) -> Any:
    if "integer" in types:
        try:
            return int(text)
        except ValueError:
            pass
    if "number" in types:
        try:
            return float(text)
        except ValueError:
            pass
    if "boolean" in types and text.lower() in ("true", "false", "1", "0"):
        return text.lower() in ("true", "1")
    if "null" in types and text in ("", "null"):
        return None
    if "string" not in types and ("object" in types or "array" in types):
        try:
            return msgspec.json.decode(text)
        except (msgspec.DecodeError, RecursionError):
            pass  # validation names it, as the text it is
    return text


def _resolve(node: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in node and seen < 32:
        name = node["$ref"].rsplit("/", 1)[-1]
        node = root.get("$defs", {}).get(name, {})
        seen += 1
    return node


def _is_sensitive(node: dict[str, Any]) -> bool:
    return (
        node.get("format") == "password"
        or node.get("writeOnly") is True
        or node.get(SENSITIVE) is True
    )


@cache
def has_sensitive(tp: Any) -> bool:
    """Whether any member of `tp`'s schema, however deep, is marked sensitive: without one
    an input has nothing to redact and holds no secret (the usual case, answered once)."""

    def any_in(node: Any) -> bool:
        if isinstance(node, dict):
            return _is_sensitive(node) or any(any_in(v) for v in node.values())
        if isinstance(node, list):
            return any(any_in(v) for v in node)
        return False

    return any_in(schema_of(tp))


def redact(tp: Any, value: Any) -> Any:
    """The value with every schema-marked sensitive member replaced by `«redacted»`."""
    if not has_sensitive(tp):
        return value
    schema = schema_of(tp)
    return _redact(schema, schema, value)


Found = Callable[[Any], None]


def _redact(
    node: dict[str, Any], root: dict[str, Any], value: Any, found: Found | None = None
) -> Any:
    """`value` redacted by `node`; `found`, when given, is called with each value redacted.
    A null is never a secret: an optional sensitive member left out stays null."""
    if _is_sensitive(node) and value is not None:
        if found is not None:
            found(value)
        return REDACTED
    target = _resolve(node, root)
    if target is not node:
        return _redact(target, root, value, found)
    if not _fits(node, value):
        return value
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key, []):
            if _fits(_resolve(branch, root), value):
                value = _redact(branch, root, value, found)
    if isinstance(value, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        out = {}
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            out[k] = _redact(sub, root, v, found) if sub is not None else v
        return out
    if isinstance(value, list):
        prefix = node.get("prefixItems", [])
        items = node.get("items")
        out_list = []
        for i, v in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            out_list.append(_redact(sub, root, v, found) if isinstance(sub, dict) else v)
        return out_list
    return value


def secret_values(tp: Any, value: Any) -> frozenset[str]:
    """The text of every sensitive member of an input, as its schema marks them: strings
    as they are, numbers as written, the leaves of a sensitive array or object; none
    shorter than `MIN_SECRET_CHARS`.

    `value` is the input as JSON-shaped Python, a typed value, or its JSON text (`bytes`,
    as the worker reads it); text that does not decode, or an input nested deeper than
    `MAX_INPUT_DEPTH`, holds none that could be found.
    """
    if not has_sensitive(tp):
        return frozenset()
    if isinstance(value, bytes | bytearray | memoryview):
        try:
            value = msgspec.json.decode(value)
        except (msgspec.DecodeError, RecursionError):
            return frozenset()
    elif isinstance(value, msgspec.Struct):
        value = msgspec.to_builtins(value)
    if value is None or _nested_deeper_than(value, MAX_INPUT_DEPTH):
        return frozenset()
    found: list[Any] = []
    schema = schema_of(tp)
    _redact(schema, schema, value, found.append)
    texts = {text for item in found for text in _leaf_texts(item)}
    return frozenset(t for t in texts if len(t) >= MIN_SECRET_CHARS)


def _leaf_texts(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, bool) or value is None:
        return []
    if isinstance(value, int | float):
        return [str(value)]
    if isinstance(value, dict):
        return [t for v in value.values() for t in _leaf_texts(v)]
    if isinstance(value, list | tuple):
        return [t for v in value for t in _leaf_texts(v)]
    return []


Mask = Callable[[str], str]


def secret_mask(secrets: Iterable[str]) -> Mask:
    """A function that replaces each of `secrets` in a text (as written, JSON-escaped or
    repr-escaped) by `«redacted»`, the longest first, so a secret that contains another is
    masked whole. Built once per set of secrets; with none, it changes nothing."""
    forms: set[str] = set()
    for secret in secrets:
        forms.update((secret, msgspec.json.encode(secret).decode()[1:-1], repr(secret)[1:-1]))
    ordered = sorted((f for f in forms if f), key=len, reverse=True)
    if not ordered:
        return _unchanged
    pattern = re.compile("|".join(re.escape(f) for f in ordered))
    return lambda text: pattern.sub(REDACTED, text)


def _unchanged(text: str) -> str:
    return text


def _may_hold_secret(root: dict[str, Any], path: list[Any]) -> bool:
    """Whether the value at `path` of an input is, holds or may be a sensitive member:
    a node on the way to it is sensitive, or one at or below it (any branch of a union
    counts, so a value that fits no branch is treated as the secret it may be)."""
    nodes = _expand([root], root)
    for key in path:
        if any(_is_sensitive(n) for n in nodes):
            return True
        nodes = _expand([c for n in nodes for c in _children(n, key)], root)
        if not nodes:
            return False
    return any(_holds_sensitive(n, root, set()) for n in nodes)


def _expand(nodes: list[dict[str, Any]], root: dict[str, Any]) -> list[dict[str, Any]]:
    """The nodes, with what each is through `$ref` and each branch of `allOf/anyOf/oneOf`."""
    out: list[dict[str, Any]] = []
    todo = list(nodes)
    while todo and len(out) < 256:
        node = todo.pop()
        if not isinstance(node, dict) or any(node is n for n in out):
            continue
        out.append(node)
        if "$ref" in node:
            todo.append(_resolve(node, root))
        for key in ("allOf", "anyOf", "oneOf"):
            todo.extend(b for b in node.get(key, []) if isinstance(b, dict))
    return out


def _children(node: dict[str, Any], key: Any) -> list[dict[str, Any]]:
    """The schema nodes that may describe member `key` of a value described by `node`."""
    found: list[Any] = []
    if isinstance(key, str):
        found.append(node.get("properties", {}).get(key))
        found.extend(node.get("patternProperties", {}).values())
        found.append(node.get("additionalProperties"))
    else:
        prefix = node.get("prefixItems", [])
        found.append(prefix[key] if key < len(prefix) else node.get("items"))
    return [f for f in found if isinstance(f, dict)]


def _holds_sensitive(node: Any, root: dict[str, Any], seen: set[str]) -> bool:
    """Whether a sensitive node is anywhere in `node`, through `$ref`s (each once)."""
    if isinstance(node, list):
        return any(_holds_sensitive(n, root, seen) for n in node)
    if not isinstance(node, dict):
        return False
    if _is_sensitive(node):
        return True
    ref = node.get("$ref")
    if isinstance(ref, str) and ref not in seen:
        seen.add(ref)
        if _holds_sensitive(_resolve(node, root), root, seen):
            return True
    return any(_holds_sensitive(v, root, seen) for k, v in node.items() if k != "$defs")


_JSON_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,),
    "array": (list, tuple),
    "string": (str,),
    "integer": (int,),
    "number": (int, float),
    "boolean": (bool,),
    "null": (type(None),),
}


def _fits(node: dict[str, Any], value: Any) -> bool:
    t = node.get("type")
    if t is None:
        return True
    names = [t] if isinstance(t, str) else list(t)
    return any(isinstance(value, _JSON_TYPES.get(n, ())) for n in names)


def to_builtins(value: Any) -> Any:
    """A typed value as plain JSON-shaped Python (for redaction and schema checks)."""
    return msgspec.to_builtins(value)


__all__ = [
    "REDACTED",
    "Secret",
    "MajordomusError",
    "PROBLEMS",
    "coerce_strings",
    "redact",
    "schema_components",
    "schema_of",
    "secret_mask",
    "secret_values",
    "to_builtins",
    "validate_input",
]
