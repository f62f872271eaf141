"""The HTTP API over a real socket: routes projected from the registry, OpenAPI, the docs
page, the probes, and the error envelope for every kind of refusal."""

from __future__ import annotations

import re
from typing import Any

import httpx
import jsonschema
import pytest

from majordomus.api.errors import ErrorEnvelope
from majordomus.registry import REGISTRY
from majordomus.schemas import schema_of
from tests.api.conftest import TOKEN, ApiProcess, WorkerChild, start, wait_final

ENVELOPE = jsonschema.Draft202012Validator(schema_of(ErrorEnvelope))
CODES = {
    "invalid_input",
    "not_found",
    "refused",
    "forbidden",
    "internal",
    "cancelled",
    "unavailable",
    "timed_out",
}


def assert_envelope(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    body = response.json()
    ENVELOPE.validate(body)
    assert body["error"]["code"] == code and code in CODES
    assert body["error"]["message"]
    assert "Traceback" not in response.text
    return body["error"]


def http_routes() -> list[tuple[str, str, str]]:
    return [
        (c.id, c.exposure.http_method or "", c.exposure.http_path or "")
        for c in REGISTRY
        if c.exposure.http_method and c.exposure.http_path
    ]


def test_every_capability_route_is_a_projection_of_the_registry(http: httpx.Client) -> None:
    listed = http.get("/api/v1/capabilities").json()
    by_id = {c["id"]: c for c in listed["capabilities"]}
    document = http.get("/openapi.json").json()
    operations = {
        op["operationId"]: (method.upper(), path)
        for path, item in document["paths"].items()
        for method, op in item.items()
    }
    for cap_id, method, path in http_routes():
        assert by_id[cap_id]["exposure"]["http"] == {"method": method, "path": path}
        assert operations[cap_id] == (method, path)
    described = http.get("/api/v1/capability", params={"id": "executions.events"}).json()
    assert described["input_schema"] == REGISTRY.require("executions.events").input_schema


def test_openapi_schemas_are_the_capability_types(http: httpx.Client) -> None:
    document = http.get("/openapi.json").json()
    assert document["openapi"].startswith("3.1")
    components = document["components"]["schemas"]

    def resolve(ref: dict[str, Any]) -> dict[str, Any]:
        return components[ref["$ref"].rsplit("/", 1)[-1]]

    events = document["paths"]["/api/v1/executions/events"]["get"]
    assert [p["name"] for p in events["parameters"]] == ["id", "after", "limit"]
    assert events["parameters"][0]["required"] is True
    history = resolve(events["responses"]["200"]["content"]["application/json"]["schema"])
    assert set(history["required"]) == set(
        REGISTRY.require("executions.events").output_schema["required"]
    )
    start_op = document["paths"]["/api/v1/executions/start"]["post"]
    body = resolve(start_op["requestBody"]["content"]["application/json"]["schema"])
    # A union by capability: each branch the start's members, its input that capability's.
    declared = REGISTRY.require("executions.start").input_schema["properties"].keys()
    for ref in body["discriminator"]["mapping"].values():
        branch = components[ref.rsplit("/", 1)[-1]]
        assert branch["properties"].keys() <= declared
        assert {"capability", "input"} <= branch["properties"].keys()
    for item in document["paths"].values():
        for op in item.values():
            assert "503" in op["responses"]
    jsonschema.Draft202012Validator.check_schema(components["ErrorEnvelope"])


def test_the_docs_page_is_interactive_and_loads_nothing_from_the_network(
    http: httpx.Client,
) -> None:
    page = http.get("/docs")
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert "/openapi.json" in page.text and "fetch(" in page.text
    assert not re.search(r"""(src|href)=["']https?://""", page.text)
    assert "cdn" not in page.text.lower()


def test_a_query_takes_its_input_from_the_query_string(http: httpx.Client) -> None:
    response = http.get("/api/v1/executions/demonstrate", params={"steps": "2", "log_lines": "0"})
    assert response.status_code == 200
    assert response.json() == {
        "steps": 2,
        "elapsed_ms": response.json()["elapsed_ms"],
        "observed": True,  # run as an execution on a worker
    }


def test_a_command_takes_its_input_from_a_json_body_and_answers_200(http: httpx.Client) -> None:
    snapshot = start(http, "executions.demonstrate", steps=1)
    assert snapshot["state"] == "queued" and snapshot["last_sequence"] == 2
    assert snapshot["actor"] == "http"
    assert snapshot["links"]["live"] == f"/events?execution={snapshot['id']}"
    assert wait_final(http, snapshot["id"])["state"] == "succeeded"
    listed = http.get("/api/v1/executions", params={"capability": "executions.demonstrate"}).json()
    assert snapshot["id"] in [e["id"] for e in listed["executions"]]


def test_ready_says_redis_answers_and_a_worker_beats(http: httpx.Client) -> None:
    live = http.get("/api/v1/live")
    assert live.status_code == 200 and live.json()["status"] == "live"
    ready = http.get("/api/v1/ready")
    assert ready.status_code == 200 and ready.json()["workers"] >= 1


BIG = b'{"capability": "tests.noop", "input": {"x": "' + b"x" * (1024 * 1024) + b'"}}'
SOME_ID = "x-20260908T010203Z-0a1b2c3d"

REFUSALS = [
    ("unknown route", "GET", "/api/v1/nothing-here", {}, 404, "not_found"),
    ("wrong method", "GET", "/api/v1/executions/start", {}, 405, "invalid_input"),
    ("wrong method on a query", "DELETE", "/api/v1/executions", {}, 405, "invalid_input"),
    (
        "malformed JSON",
        "POST",
        "/api/v1/executions/start",
        {"content": b'{"capability": '},
        400,
        "invalid_input",
    ),
    ("body over 1 MiB", "POST", "/api/v1/executions/start", {"content": BIG}, 413, "invalid_input"),
    (
        "wrong query type",
        "GET",
        "/api/v1/executions/demonstrate",
        {"params": {"steps": "many"}},
        400,
        "invalid_input",
    ),
    (
        "negative number",
        "GET",
        "/api/v1/executions/events",
        {"params": {"id": SOME_ID, "after": "-1"}},
        400,
        "invalid_input",
    ),
    (
        "unknown parameter",
        "GET",
        "/api/v1/executions",
        {"params": {"colour": "red"}},
        400,
        "invalid_input",
    ),
    (
        "repeated parameter",
        "GET",
        "/api/v1/executions/get",
        {"params": [("id", SOME_ID), ("id", SOME_ID)]},
        400,
        "invalid_input",
    ),
    (
        "malformed execution id",
        "GET",
        "/api/v1/executions/get",
        {"params": {"id": "x-nope"}},
        400,
        "invalid_input",
    ),
    (
        "unknown execution",
        "GET",
        "/api/v1/executions/events",
        {"params": {"id": SOME_ID}},
        404,
        "not_found",
    ),
    (
        "unknown capability",
        "POST",
        "/api/v1/executions/start",
        {"json": {"capability": "no.such"}},
        404,
        "not_found",
    ),
    (
        "bad input for the capability",
        "POST",
        "/api/v1/executions/start",
        {"json": {"capability": "executions.demonstrate", "input": {"steps": "x"}}},
        400,
        "invalid_input",
    ),
    (
        "a control capability is not started",
        "POST",
        "/api/v1/executions/start",
        {"json": {"capability": "executions.list"}},
        422,
        "refused",
    ),
    ("a typed refusal", "POST", "/api/v1/tests/refuse", {"json": {}}, 422, "refused"),
    ("missing required input", "GET", "/api/v1/executions/get", {}, 400, "invalid_input"),
    (
        "foreign origin on a command",
        "POST",
        "/api/v1/executions/start",
        {"json": {"capability": "tests.noop"}, "headers": {"Origin": "http://evil.example"}},
        403,
        "forbidden",
    ),
    (
        "foreign port on a command",
        "POST",
        "/api/v1/executions/cancel",
        {"json": {"id": SOME_ID}, "headers": {"Origin": "http://127.0.0.1:1"}},
        403,
        "forbidden",
    ),
    (
        "null origin on a command",
        "POST",
        "/api/v1/executions/cancel",
        {"json": {"id": SOME_ID}, "headers": {"Origin": "null"}},
        403,
        "forbidden",
    ),
]


@pytest.mark.parametrize(
    "method, path, kwargs, status, code",
    [r[1:] for r in REFUSALS],
    ids=[r[0] for r in REFUSALS],
)
def test_each_refusal_has_its_status_and_envelope(
    http: httpx.Client, method: str, path: str, kwargs: dict[str, Any], status: int, code: str
) -> None:
    assert_envelope(http.request(method, path, **kwargs), status, code)


def test_a_wrong_method_names_the_allowed_one(http: httpx.Client) -> None:
    response = http.get("/api/v1/executions/cancel")
    assert_envelope(response, 405, "invalid_input")
    assert response.headers["allow"] == "POST"


def test_a_same_origin_command_passes(http: httpx.Client, api: ApiProcess) -> None:
    response = http.post(
        "/api/v1/executions/cancel", json={"id": SOME_ID}, headers={"Origin": api.url}
    )
    assert_envelope(response, 404, "not_found")  # past the origin check, to the lookup


def test_an_unexpected_failure_is_internal_with_a_correlation_id_and_no_traceback(
    http: httpx.Client, worker_process_for_api: WorkerChild
) -> None:
    response = http.post("/api/v1/tests/boom", json={})
    error = assert_envelope(response, 500, "internal")
    # What happened, in a sentence (MAJORDOMUS_FAILURE_DETAILS); the traceback stays in the log.
    assert error["message"].endswith("ValueError: secret internals that must not leak")
    assert "Traceback" not in response.text
    correlation = error["correlation_id"]  # the execution it ran as, on a worker
    assert correlation in error["suggestion"]
    logged = worker_process_for_api.output()
    assert f"execution_id={correlation}" in logged and "secret internals" in logged


def test_the_server_binds_loopback_unless_told_otherwise(api: ApiProcess) -> None:
    listening = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                local, state = line.split()[1], line.split()[3]
                address, port = local.split(":")
                if int(port, 16) == api.port and state == "0A":
                    listening.append(address)
    assert listening == ["0100007F"]  # 127.0.0.1, and nothing else


def test_with_a_token_every_route_but_live_and_ready_needs_it(locked_api: ApiProcess) -> None:
    # RFC 6750: a missing or wrong token is 401 with a Bearer challenge, not 403.
    with locked_api.client() as client:
        for path in ("/api/v1/executions", "/openapi.json", "/api/v1/capabilities", "/events"):
            missing = client.get(path)
            assert_envelope(missing, 401, "forbidden")
            assert missing.headers["www-authenticate"] == "Bearer"
            wrong = client.get(path, headers={"Authorization": "Bearer nope"})
            assert_envelope(wrong, 401, "forbidden")
            assert wrong.headers["www-authenticate"] == 'Bearer error="invalid_token"'
        assert_envelope(
            client.post("/api/v1/executions/start", json={"capability": "executions.demonstrate"}),
            401,
            "forbidden",
        )
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert client.get("/api/v1/executions", headers=good).status_code == 200
        assert client.get("/openapi.json", headers=good).json()["security"] == [{"bearer": []}]
        assert client.get("/api/v1/live").status_code == 200
        assert client.get("/api/v1/ready").status_code in (200, 503)
        assert client.get("/docs").status_code == 200  # the shell; it asks for the token
