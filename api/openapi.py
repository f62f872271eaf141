"""The OpenAPI 3.1 document, projected from the registry like the routes themselves.

One operation per capability with an HTTP exposure: `operationId` is the capability's id, a
GET's parameters are its input type's members (scalars as schemas, anything structured as
JSON in the query string), a POST's body is its input type, the 200 answer its output type
(and, for a capability that runs as an execution, the 202 answer the execution still
going, with the `Prefer` header that sets the wait), and every refusal the error envelope. Component schemas come from msgspec, from the same
types the engine validates with, so the document cannot drift from the behaviour. The live
channel is described in the document's text rather than as an operation: it is a stream
that never ends on its own, which generic clients and fuzzers cannot call.
"""

from __future__ import annotations

from typing import Any

import majordomus
from majordomus.api.errors import ErrorEnvelope
from majordomus.config import LIMITS
from majordomus.model import ExecutionSnapshot
from majordomus.registry import Capability, Registry
from majordomus.schemas import FROM_CONNECTION, INPUT_OF, schema_components

REF = "#/components/schemas/{name}"
EXECUTION_HEADER = "Majordomus-Execution"
"""The id of the execution a capability's own route ran, on its answer (200 or 202)."""
SCALARS = frozenset({"string", "integer", "number", "boolean"})

ERROR_STATUSES: dict[str, str] = {
    "400": "invalid_input: the request does not fit the operation",
    "401": "forbidden: a missing or wrong bearer token (with a `WWW-Authenticate: Bearer` "
    "challenge)",
    "403": "forbidden: a foreign Origin",
    "404": "not_found: no such execution, capability or route",
    "405": "invalid_input: the route does not answer this method",
    "422": "refused: understood, and declined",
    "500": "internal: the server failed unexpectedly (search its log for the correlation id)",
    "503": "unavailable: Redis is unreachable, or a limit of this process is reached",
    "504": "timed_out: the execution ran past its capability's timeout and was stopped",
}

DESCRIPTION = """Capabilities declared once, run as executions anyone can watch.

Every operation here is a capability of the registry; `operationId` is its id. Errors are
`{"error": {"code", "message", "suggestion"?, "correlation_id"?}}`.

**Live channel** (not an operation): `GET /events?execution=<id>&after=<sequence>` with
`Accept: text/event-stream` streams `stream.ready`, the retained history after the cursor,
then live events (`id:` = sequence), and `stream.closing` after the terminal event. Without
`execution` it streams every execution's events (`id:` = the feed id). `Last-Event-ID`
resumes either. See `executions.protocol` for the whole contract.
"""


def capability_types(registry: Registry) -> list[Capability]:
    return [c for c in registry if c.exposure.http_method and c.exposure.http_path]


def openapi_document(registry: Registry, *, token_required: bool = False) -> dict[str, Any]:
    caps = capability_types(registry)
    startable = [c for c in registry if c.executable]
    types: list[Any] = [ErrorEnvelope, ExecutionSnapshot]
    for cap in caps:
        types.extend((cap.input, cap.output))
    types.extend(c.input for c in startable)
    refs, components = schema_components(types, REF)
    error_ref, snapshot_ref = refs[0], refs[1]
    started_refs = refs[2 + 2 * len(caps) :]
    for name in list(components):
        _given_over_http(components[name])
        _per_capability(name, components, list(zip(startable, started_refs, strict=True)))
    paths: dict[str, dict[str, Any]] = {}
    for i, cap in enumerate(caps):
        input_ref, output_ref = refs[2 + 2 * i], refs[3 + 2 * i]
        method = (cap.exposure.http_method or "GET").lower()
        operation = _operation(cap, input_ref, output_ref, error_ref, components)
        if cap.executable:
            _add_execution_answers(operation, snapshot_ref)
        paths.setdefault(cap.exposure.http_path or "", {})[method] = operation
    _add_probes(paths, error_ref)
    document: dict[str, Any] = {
        "openapi": "3.1.0",
        "info": {
            "title": "majordomus",
            "version": majordomus.__version__,
            "description": DESCRIPTION,
        },
        # Relative, so the document names no host: a client resolves it against where it
        # read the document, which is the address it reached this server by, through any
        # proxy in front (the bound address would be wrong behind one). The paths are
        # absolute (`/api/v1/...`), so a proxy must forward them unchanged.
        "servers": [{"url": "/", "description": "the server this document was read from"}],
        "paths": paths,
        "components": {"schemas": components, "securitySchemes": SECURITY_SCHEMES},
    }
    if token_required:
        # Every operation then needs it, but those that say they need nothing (the probes'
        # `security: []`).
        document["security"] = [{"bearer": []}]
    return document


SECURITY_SCHEMES = {
    "bearer": {
        "type": "http",
        "scheme": "bearer",
        "description": "`Authorization: Bearer <MAJORDOMUS_API_TOKEN>`, on every operation but "
        "the probes when the server has a token (the document's `security` says whether)",
    }
}


def _operation(
    cap: Capability,
    input_ref: dict[str, Any],
    output_ref: dict[str, Any],
    error_ref: dict[str, Any],
    components: dict[str, Any],
) -> dict[str, Any]:
    operation: dict[str, Any] = {
        "operationId": cap.id,
        "summary": cap.title,
        "description": cap.description,
        "tags": [cap.module],
        "responses": {
            "200": {
                "description": "the capability's output",
                "content": {"application/json": {"schema": output_ref}},
            },
            **_errors(error_ref),
        },
        "x-majordomus": {
            "kind": cap.kind,
            "stability": cap.stability,
            "cancellable": cap.cancellable,
            "executable": cap.executable,
            "mcp_tool": cap.exposure.mcp_tool,
            "cli": " ".join(("majordomus", *cap.exposure.cli_path))
            if cap.exposure.cli_path
            else None,
        },
    }
    if cap.exposure.http_method == "GET":
        operation["parameters"] = _parameters(_resolve(input_ref, components), components)
    else:
        schema = _resolve(input_ref, components)
        operation["requestBody"] = {
            "required": bool(schema.get("required") or schema.get("oneOf")),
            "content": {"application/json": {"schema": input_ref}},
        }
        operation["responses"]["413"] = _error(error_ref, "invalid_input: the body is over 1 MiB")
    return operation


EXECUTION_ANSWER_HEADER = {
    "description": "The id of the execution the call ran as",
    "schema": {"type": "string"},
}


def _add_execution_answers(operation: dict[str, Any], snapshot_ref: dict[str, Any]) -> None:
    """A capability that runs as an execution: its route starts one on the workers, answers
    the output when it succeeds within the wait, else `202` with the execution as it stands;
    `Prefer` sets the wait."""
    responses = operation["responses"]
    responses["200"]["headers"] = {EXECUTION_HEADER: EXECUTION_ANSWER_HEADER}
    responses["409"] = {
        "description": "cancelled: the execution was cancelled before it answered",
        "content": responses["400"]["content"],
    }
    responses["202"] = {
        "description": (
            "still running when the wait ended: the execution as it stands; follow it at "
            "`Location`, its `links`, or the live channel"
        ),
        "headers": {
            "Location": {"description": "The execution's snapshot", "schema": {"type": "string"}},
            EXECUTION_HEADER: EXECUTION_ANSWER_HEADER,
        },
        "content": {"application/json": {"schema": snapshot_ref}},
    }
    operation.setdefault("parameters", []).append(
        {
            "name": "Prefer",
            "in": "header",
            "required": False,
            "description": (
                "How long to wait for the execution before answering 202 (RFC 7240): "
                f"`wait=N` seconds (at most {LIMITS.wait_bound_ms // 1000}), or `respond-async` "
                f"for no wait; default {LIMITS.call_wait_ms // 1000} s"
            ),
            "schema": {"type": "string"},
        }
    )


def _given_over_http(schema: dict[str, Any]) -> None:
    """Members an MCP connection would supply when left out (`FROM_CONNECTION`) are
    required, and not null, over HTTP: a request here has no connection, so one that leaves
    them out is always refused."""
    props = schema.get("properties")
    if not isinstance(props, dict):
        return
    for name, prop in list(props.items()):
        if isinstance(prop, dict) and prop.get(FROM_CONNECTION):
            props[name] = without_null(prop)
            schema["required"] = sorted({*schema.get("required", []), name})


def _per_capability(
    name: str, components: dict[str, Any], startable: list[tuple[Capability, dict[str, Any]]]
) -> None:
    """An input with a member that is another capability's input (`INPUT_OF`), as
    `executions.start`'s, described once per capability that runs as an execution: the
    component becomes a union of one branch per capability, discriminated by the member
    that names it, each branch holding that capability's own input schema. A request that
    fits a branch is one the server takes; an object that fits none (an input its
    capability refuses, a capability this server does not import) is refused.

    Only capabilities this API process imports are listed: one its workers run and publish
    without this process importing its module is started all the same, outside the
    document."""
    schema = components[name]
    props = schema.get("properties")
    if not isinstance(props, dict) or not startable:
        return
    held = [(k, p[INPUT_OF]) for k, p in props.items() if isinstance(p, dict) and INPUT_OF in p]
    if not held:
        return
    member, naming = held[0]
    branches: dict[str, dict[str, Any]] = {}
    for cap, input_ref in startable:
        branch = {k: v for k, v in schema.items() if k not in ("title", "description")}
        given = {k: v for k, v in props[member].items() if k not in (INPUT_OF, "type")}
        branch["title"] = f"{name} of {cap.id}"
        branch["properties"] = {
            **props,
            naming: {"const": cap.id, "type": "string", "description": cap.title},
            member: {**given, **input_ref},
        }
        if not _takes_nothing(cap):
            branch["required"] = sorted({*schema.get("required", []), member})
            branch["properties"][member].pop("default", None)
        branches[cap.id] = branch
    components[name] = {
        "title": schema.get("title", name),
        "description": f"{schema.get('description', '')} One branch per capability, by "
        f"`{naming}`; its `{member}` is that capability's input.".strip(),
        "oneOf": [{"$ref": REF.format(name=f"{name}.{c}")} for c in branches],
        "discriminator": {
            "propertyName": naming,
            "mapping": {c: REF.format(name=f"{name}.{c}") for c in branches},
        },
    }
    for cap_id, branch in branches.items():
        components[f"{name}.{cap_id}"] = branch


def _takes_nothing(cap: Capability) -> bool:
    """Whether the capability's input may be left out (the empty object is valid)."""
    import jsonschema

    return bool(jsonschema.Draft202012Validator(cap.input_schema).is_valid({}))


def _parameters(schema: dict[str, Any], components: dict[str, Any]) -> list[dict[str, Any]]:
    required = set(schema.get("required", []))
    params = []
    for name, prop in schema.get("properties", {}).items():
        prop = without_null(prop)
        param: dict[str, Any] = {"name": name, "in": "query", "required": name in required}
        if "description" in prop:
            param["description"] = prop["description"]
        if _is_scalar(prop, components):
            param["schema"] = prop
        else:
            # Structured values travel as JSON in the query string.
            param["content"] = {"application/json": {"schema": prop}}
        params.append(param)
    return params


def without_null(prop: dict[str, Any]) -> dict[str, Any]:
    """A query parameter is absent rather than null, so `T | None` is documented as `T`."""
    branches = prop.get("anyOf")
    if isinstance(branches, list):
        kept = [b for b in branches if b.get("type") != "null"]
        if len(kept) == 1 and len(kept) < len(branches):
            out = {k: v for k, v in prop.items() if k not in ("anyOf", "default")}
            out.update(kept[0])
            return out
    t = prop.get("type")
    if isinstance(t, list) and "null" in t and len(t) == 2:
        out = {k: v for k, v in prop.items() if k != "default" or v is not None}
        out["type"] = next(x for x in t if x != "null")
        if isinstance(out.get("enum"), list):
            out["enum"] = [v for v in out["enum"] if v is not None]
        return out
    if prop.get("default", 0) is None:
        return {k: v for k, v in prop.items() if k != "default"}
    return prop


def _is_scalar(prop: dict[str, Any], components: dict[str, Any]) -> bool:
    prop = _resolve(prop, components)
    t = prop.get("type")
    if isinstance(t, str):
        return t in SCALARS
    if "enum" in prop or "const" in prop:
        return True
    branches = prop.get("anyOf") or prop.get("oneOf")
    if isinstance(branches, list) and branches:
        return all(_is_scalar(b, components) for b in branches)
    return False


def _resolve(schema: dict[str, Any], components: dict[str, Any]) -> dict[str, Any]:
    seen = 0
    while "$ref" in schema and seen < 16:
        schema = components.get(schema["$ref"].rsplit("/", 1)[-1], {})
        seen += 1
    return schema


def _error(error_ref: dict[str, Any], description: str) -> dict[str, Any]:
    return {"description": description, "content": {"application/json": {"schema": error_ref}}}


CHALLENGE_HEADER = {
    "WWW-Authenticate": {
        "description": 'The bearer challenge (RFC 6750): `Bearer`, or `Bearer error="invalid_token"` '
        "for a token that is not the server's",
        "schema": {"type": "string"},
    }
}


def _errors(error_ref: dict[str, Any]) -> dict[str, Any]:
    errors = {status: _error(error_ref, text) for status, text in ERROR_STATUSES.items()}
    errors["401"]["headers"] = CHALLENGE_HEADER
    return errors


def _add_probes(paths: dict[str, dict[str, Any]], error_ref: dict[str, Any]) -> None:
    status = {
        "type": "object",
        "properties": {
            "status": {"type": "string"},
            "listeners": {"type": "integer", "minimum": 0},
            "channels": {"type": "integer", "minimum": 0},
            "calls": {"type": "integer", "minimum": 0},
            "workers": {"type": "integer", "minimum": 0},
        },
        "required": ["status"],
    }
    for path, op_id, summary in (
        ("/api/v1/live", "api.live", "The process answers (no Redis involved)"),
        ("/api/v1/ready", "api.ready", "Redis reachable and a worker beating, else 503"),
    ):
        paths[path] = {
            "get": {
                "operationId": op_id,
                "summary": summary,
                "tags": ["api"],
                "security": [],
                "responses": {
                    "200": {
                        "description": summary,
                        "content": {"application/json": {"schema": status}},
                    },
                    "503": _error(error_ref, "unavailable: why the process is not ready"),
                },
            }
        }
