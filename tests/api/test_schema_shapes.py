"""The schemas say exactly what the server takes: what an input schema accepts is accepted,
what it refuses is refused as `invalid_input`, and the OpenAPI document that carries them
is valid OpenAPI 3.1 with its servers and its bearer scheme.

Schemathesis (`test_fuzz`) asks the running server; these ask the schema and the
validation beside each other on the cases that once disagreed (an empty id, an array
`input`, a blank or multi-line `external_id`), without a server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from schemathesis.specs.openapi.definitions import OPENAPI_31_VALIDATOR

from majordomus.api.openapi import openapi_document
from majordomus.episodes import LINE_BREAKS, WHITE_SPACE, checked_external_id
from majordomus.errors import MajordomusError
from majordomus.registry import REGISTRY
from majordomus.schemas import validate_input

SEEDS = Path(__file__).resolve().parent.parent / "schemas"
SOME_ID = "x-20260908T010203Z-0a1b2c3d"


def accepted_by_schema(cap_id: str, raw: dict[str, Any]) -> bool:
    return jsonschema.Draft202012Validator(REGISTRY.require(cap_id).input_schema).is_valid(raw)


def accepted_by_server(cap_id: str, raw: dict[str, Any]) -> bool:
    """What the engine does with the input before it looks anything up."""
    try:
        value = validate_input(REGISTRY.require(cap_id).input, raw)
    except MajordomusError as err:
        assert err.code == "invalid_input"
        return False
    external_id = getattr(value, "external_id", None)
    if external_id is not None:
        try:
            checked_external_id(external_id)
        except MajordomusError as err:
            assert err.code == "invalid_input"
            return False
    return True


IDS = ["", " ", "x", "x-nope", SOME_ID, SOME_ID.upper(), f"{SOME_ID}0", f" {SOME_ID}"]
IDS += [SOME_ID.replace("2", "\u0662")]  # another script's digit two


@pytest.mark.parametrize("cap_id", ["executions.get", "executions.events", "executions.cancel"])
@pytest.mark.parametrize("given", IDS)
def test_an_execution_id_is_refused_by_its_schema_exactly_when_by_the_server(
    cap_id: str, given: str
) -> None:
    raw = {"id": given}
    assert accepted_by_schema(cap_id, raw) == accepted_by_server(cap_id, raw)
    assert accepted_by_schema(cap_id, raw) == (given == SOME_ID)


EXTERNAL_IDS = ["", " ", "\t", "\u3000", "a", " a ", "a\tb", "conv-1", "é" * 256, "😀" * 256]
EXTERNAL_IDS += ["a" * 256, "a" * 257, "a\n", "\na", "a\r", "a\u2028b", "a\x85", "a\x1c", "\x1c"]
EXTERNAL_IDS += [" \x1f ", "\ufeff", "\u200b", "a\x1f"]  # where dialects' `\s` differ


@pytest.mark.parametrize("cap_id", ["episodes.attach", "episodes.detach"])
@pytest.mark.parametrize("given", EXTERNAL_IDS)
def test_an_external_id_is_refused_by_its_schema_exactly_when_by_the_server(
    cap_id: str, given: str
) -> None:
    raw = {"external_id": given}
    assert accepted_by_schema(cap_id, raw) == accepted_by_server(cap_id, raw)


def test_the_white_space_an_external_id_may_not_be_is_what_strip_removes() -> None:
    everything = (chr(c) for c in range(sys.maxunicode + 1))
    assert {c for c in everything if c.isspace()} == WHITE_SPACE
    for c in LINE_BREAKS:
        assert len(f"a{c}b".splitlines()) == 2


def test_an_external_id_is_required_to_attach() -> None:
    assert not accepted_by_schema("episodes.attach", {})
    assert not accepted_by_server("episodes.attach", {})
    assert accepted_by_schema("episodes.detach", {}) and accepted_by_server("episodes.detach", {})


@pytest.mark.parametrize(
    ("given", "accepted"),
    [
        ({}, True),
        ({"input": None}, False),  # an object or absent: `"type": "object"`, one string
        ({"input": {}}, True),
        ({"input": {"steps": 2}}, True),
        ({"input": [1, 2]}, False),
        ({"input": '{"steps": 2}'}, False),
        ({"input": 3}, False),
    ],
)
def test_the_input_to_start_is_an_object_or_absent(given: dict[str, Any], accepted: bool) -> None:
    raw = {"capability": "executions.demonstrate", **given}
    assert accepted_by_schema("executions.start", raw) is accepted
    assert accepted_by_server("executions.start", raw) is accepted


def test_a_refusal_says_what_the_value_is_not_rather_than_the_pattern() -> None:
    with pytest.raises(MajordomusError) as info:
        validate_input(REGISTRY.require("executions.get").input, {"id": "x-nope"})
    assert info.value.message.startswith("/id: 'x-nope' is not an execution id")
    with pytest.raises(MajordomusError) as info:
        validate_input(REGISTRY.require("episodes.attach").input, {"external_id": "a\nb"})
    assert info.value.message == "/external_id: 'a\\nb' spans more than one line"
    with pytest.raises(MajordomusError) as info:
        validate_input(REGISTRY.require("episodes.attach").input, {"external_id": " \t"})
    assert info.value.message == "/external_id: ' \\t' is blank"


def test_an_optional_integer_is_written_as_the_seed_writes_it() -> None:
    seed = json.loads((SEEDS / "EventsInput.schema.json").read_text())["properties"]
    ours = REGISTRY.require("executions.events").input_schema["properties"]
    for member in ("after", "limit"):
        assert ours[member]["type"] == seed[member]["type"] == ["integer", "null"]
        assert ours[member]["minimum"] == 0
        assert "anyOf" not in ours[member]


def test_no_input_schema_writes_a_nullable_scalar_as_any_of() -> None:
    for cap in REGISTRY:
        for member, prop in cap.input_schema.get("properties", {}).items():
            assert "anyOf" not in prop, f"{cap.id}.{member}: {prop}"


# -- the OpenAPI document -----------------------------------------------------------------


@pytest.mark.parametrize("token_required", [False, True])
def test_the_document_is_openapi_3_1_with_its_servers_and_bearer_scheme(
    token_required: bool,
) -> None:
    document = json.loads(json.dumps(openapi_document(REGISTRY, token_required=token_required)))
    problems = [str(e) for e in OPENAPI_31_VALIDATOR.iter_errors(document)]
    assert problems == []
    assert [server["url"] for server in document["servers"]] == ["/"]
    scheme = document["components"]["securitySchemes"]["bearer"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    assert document.get("security") == ([{"bearer": []}] if token_required else None)
    for path in ("/api/v1/live", "/api/v1/ready"):
        assert document["paths"][path]["get"]["security"] == []


def test_the_meta_schema_does_find_a_broken_document() -> None:
    document = json.loads(json.dumps(openapi_document(REGISTRY)))
    document["servers"] = [{"description": "no url"}]
    assert any(True for _ in OPENAPI_31_VALIDATOR.iter_errors(document))


def test_an_id_parameter_carries_its_pattern_in_the_document() -> None:
    document = openapi_document(REGISTRY)
    for path in ("/api/v1/executions/get", "/api/v1/executions/events", "/api/v1/executions/wait"):
        (id_param,) = [p for p in document["paths"][path]["get"]["parameters"] if p["name"] == "id"]
        assert id_param["schema"]["pattern"] == "^x-[0-9]{8}T[0-9]{6}Z-[0-9a-f]{8}$"
    components = document["components"]["schemas"]
    branches = components["StartInput"]["discriminator"]["mapping"]
    assert set(branches) == {c.id for c in REGISTRY if c.executable}
    demo = components[branches["executions.demonstrate"].rsplit("/", 1)[-1]]
    assert demo["properties"]["capability"]["const"] == "executions.demonstrate"
    assert demo["properties"]["input"]["$ref"].endswith("/DemoInput")
    assert components["CancelInput"]["properties"]["id"]["pattern"].startswith("^x-")


def test_a_start_is_described_per_capability_and_a_schedule_by_its_cron_and_zone() -> None:
    """`executions.start`'s input is its capability's own; `schedules.create`'s cron and
    time zone are what the server reads: a body the document describes is one it takes."""
    document = openapi_document(REGISTRY)
    components = document["components"]["schemas"]
    check = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/StartInput", "components": {"schemas": components}}
    )
    assert check.is_valid({"capability": "executions.demonstrate", "input": {"steps": 3}})
    assert not check.is_valid({"capability": "executions.demonstrate", "input": {"nope": 1}})
    assert not check.is_valid({"capability": "executions.list", "input": {}})
    create = jsonschema.Draft202012Validator(
        {"$ref": "#/components/schemas/CreateInput", "components": {"schemas": components}}
    )
    base = {"capability": "executions.demonstrate"}
    for cron in ("* * * * *", "*/5 * * * * *", "0 9 * * mon-fri", "@hourly", "0 0 L * *"):
        assert create.is_valid({**base, "cron": cron}), cron
    for cron in ("", " ", "every second", "61 * * * *", "* * * *", "* * * * * * *"):
        assert not create.is_valid({**base, "cron": cron}), cron
    assert create.is_valid({**base, "cron": "@daily", "timezone": "Europe/Paris"})
    assert not create.is_valid({**base, "cron": "@daily", "timezone": "Mars/Olympus_Mons"})
