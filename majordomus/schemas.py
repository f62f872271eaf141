"""JSON Schemas projected from msgspec types, and what is done with them.

Schemas are generated, never written: `schema_of` inlines msgspec's root `$ref` so a tool or
an OpenAPI operation gets a plain object schema. Input validation reports up to five
problems as `"/pointer: problem"`; redaction is driven by the schema alone (`format:
password`, `writeOnly: true`, `x-majordomus-sensitive: true`), never by a field's name.
"""

from __future__ import annotations

from functools import cache
from typing import Annotated, Any

import jsonschema
import msgspec

from majordomus.config import LIMITS
from majordomus.errors import MajordomusError, invalid_input

REDACTED = "«redacted»"
SENSITIVE = "x-majordomus-sensitive"

Secret = Annotated[str, msgspec.Meta(extra_json_schema={SENSITIVE: True})]
"""A string a capability's input marks as sensitive: redacted wherever the input is shown."""


@cache
def schema_of(tp: Any) -> dict[str, Any]:
    """The JSON Schema of a msgspec type as one object, with `$defs` kept beside it.

    Each field's docstring becomes its property's `description` (msgspec drops them), so a
    tool, an OpenAPI operation and `capabilities describe` tell what every member means.
    """
    raw = msgspec.json.schema(tp)
    _describe_fields(tp, raw.get("$defs", {}))
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


def _describe_fields(tp: Any, defs: dict[str, Any]) -> None:
    from majordomus.docs import field_docs

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
def _validator(tp: Any) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(schema_of(tp))


def validate_input(tp: Any, raw: Any) -> Any:
    """The typed input, or `invalid_input` naming up to five problems."""
    if raw is None:
        raw = {}
    errors = sorted(_validator(tp).iter_errors(raw), key=lambda e: list(e.absolute_path))
    if errors:
        problems = [f"{_pointer(e.absolute_path)}: {e.message}" for e in errors]
        raise invalid_input(
            "; ".join(problems[: LIMITS.validation_problems]),
            "see the capability's input schema (majordomus capabilities describe ID)",
        )
    try:
        return msgspec.convert(raw, tp)
    except msgspec.ValidationError as exc:
        raise invalid_input(str(exc), "see the capability's input schema") from None


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
        except msgspec.DecodeError:
            pass
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


def redact(tp: Any, value: Any) -> Any:
    """The value with every schema-marked sensitive member replaced by `«redacted»`."""
    schema = schema_of(tp)
    return _redact(schema, schema, value)


def _redact(node: dict[str, Any], root: dict[str, Any], value: Any) -> Any:
    if _is_sensitive(node):
        return REDACTED
    target = _resolve(node, root)
    if target is not node:
        return _redact(target, root, value)
    if not _fits(node, value):
        return value
    for key in ("allOf", "anyOf", "oneOf"):
        for branch in node.get(key, []):
            if _fits(_resolve(branch, root), value):
                value = _redact(branch, root, value)
    if isinstance(value, dict):
        props = node.get("properties", {})
        extra = node.get("additionalProperties")
        out = {}
        for k, v in value.items():
            sub = props.get(k, extra if isinstance(extra, dict) else None)
            out[k] = _redact(sub, root, v) if sub is not None else v
        return out
    if isinstance(value, list):
        prefix = node.get("prefixItems", [])
        items = node.get("items")
        out_list = []
        for i, v in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            out_list.append(_redact(sub, root, v) if isinstance(sub, dict) else v)
        return out_list
    return value


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
    "coerce_strings",
    "redact",
    "schema_of",
    "to_builtins",
    "validate_input",
]
