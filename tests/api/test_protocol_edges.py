"""Two protocol edges, over real sockets to real server processes: the `Content-Type` of a
Prometheus scrape (the API's `/metrics` and a worker's own metrics port) read by a strict
media-type parser, and a missing or wrong bearer token answered as RFC 6750 says (401 with
`WWW-Authenticate: Bearer`) on REST, `/metrics`, the live channel and MCP at `/mcp`, while
403 stays the foreign `Origin`'s; and what the CLI says to a user with a bad token."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from typing import Any

import httpx
import pytest
from prometheus_client.exposition import CONTENT_TYPE_PLAIN_0_0_4
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from majordomus.errors import EXIT_CODE
from majordomus.local.embedded import free_port
from majordomus.metrics import CONTENT_TYPE
from tests.api.conftest import TOKEN, ApiProcess, WorkerChild, api_env
from tests.conftest import ROOT

# -- a strict media-type parser (RFC 9110, 8.3.1 and 5.6) ---------------------------------

TOKEN_CHARS = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
QUOTED = r'"(?:[^"\\]|\\.)*"'
MEDIA_TYPE = re.compile(rf"({TOKEN_CHARS})/({TOKEN_CHARS})")
PARAMETER = re.compile(rf"[ \t]*;[ \t]*({TOKEN_CHARS})=({TOKEN_CHARS}|{QUOTED})")


def strict_media_type(value: str) -> tuple[str, dict[str, str]]:
    """`type/subtype` and its parameters; anything off the grammar, and a parameter named
    twice (RFC 9110: "a parameter name MUST NOT be repeated"), is an AssertionError."""
    matched = MEDIA_TYPE.match(value)
    assert matched, f"no type/subtype in {value!r}"
    parameters: dict[str, str] = {}
    at = matched.end()
    while at < len(value):
        param = PARAMETER.match(value, at)
        assert param, f"{value!r} is off the grammar at {value[at:]!r}"
        name = param[1].lower()
        assert name not in parameters, f"{value!r} names {name!r} twice"
        parameters[name] = param[2].strip('"')
        at = param.end()
    return f"{matched[1]}/{matched[2]}".lower(), parameters


def one_content_type(response: httpx.Response) -> tuple[str, dict[str, str]]:
    given = response.headers.get_list("content-type")
    assert len(given) == 1, given
    return strict_media_type(given[0])


PROMETHEUS_ACCEPT = (
    # What Prometheus 3 sends by default (its scrape_protocols, each with its weight).
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;q=0.4,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;q=0.2,*/*;q=0.1"
)


def test_the_strict_parser_refuses_a_doubled_charset() -> None:
    assert strict_media_type(CONTENT_TYPE_PLAIN_0_0_4)[1]["charset"] == "utf-8"
    with pytest.raises(AssertionError, match="twice"):
        strict_media_type(CONTENT_TYPE_PLAIN_0_0_4 + "; charset=utf-8")


def test_the_metrics_content_type_is_prometheus_own_and_names_its_charset_once(
    api: ApiProcess,
) -> None:
    assert CONTENT_TYPE == CONTENT_TYPE_PLAIN_0_0_4
    with api.client() as client:
        for accept in (None, PROMETHEUS_ACCEPT):
            response = client.get("/metrics", headers={"Accept": accept} if accept else {})
            assert response.status_code == 200, response.text
            media_type, parameters = one_content_type(response)
            assert response.headers["content-type"] == CONTENT_TYPE_PLAIN_0_0_4
            assert (media_type, parameters) == (
                "text/plain",
                {"version": "0.0.4", "charset": "utf-8"},
            )
            names = {family.name for family in text_string_to_metric_families(response.text)}
            assert {"majordomus_redis_up", "majordomus_executions_started"} <= names, names


def test_every_text_answer_of_the_api_parses_strictly(api: ApiProcess) -> None:
    with api.client() as client:
        for path in ("/docs", "/openapi.json", "/", "/console/app.js", "/api/v1/live"):
            response = client.get(path)
            assert response.status_code == 200, (path, response.text)
            _, parameters = one_content_type(response)
            assert parameters.get("charset", "utf-8").lower() == "utf-8", (path, parameters)


def worker_metrics(port: int, headers: dict[str, str], worker: WorkerChild) -> httpx.Response:
    deadline = time.monotonic() + 20
    while True:
        assert worker.process.poll() is None, worker.output()
        try:
            return httpx.get(f"http://127.0.0.1:{port}/metrics", headers=headers, timeout=2)
        except httpx.HTTPError:
            assert time.monotonic() < deadline, f"no metrics port:\n{worker.output()}"
            time.sleep(0.05)


@pytest.mark.usefixtures("spawns")
def test_a_workers_metrics_port_names_its_charset_once_whatever_it_is_asked(
    suite_redis_url: str,
) -> None:
    port = free_port()
    worker = WorkerChild(
        suite_redis_url, MAJORDOMUS_KEY_PREFIX="mdedges", MAJORDOMUS_METRICS_PORT=str(port)
    )
    try:
        plain = worker_metrics(port, {}, worker)
        asked = worker_metrics(port, {"Accept": PROMETHEUS_ACCEPT}, worker)
    finally:
        worker.stop()
    assert plain.headers["content-type"] == CONTENT_TYPE_PLAIN_0_0_4
    assert one_content_type(plain)[1] == {"version": "0.0.4", "charset": "utf-8"}
    assert "majordomus_executions_finished" in {
        f.name for f in text_string_to_metric_families(plain.text)
    }
    # Asked as Prometheus asks, prometheus_client's own server answers OpenMetrics.
    media_type, parameters = one_content_type(asked)
    assert media_type == "application/openmetrics-text" and parameters["charset"] == "utf-8"
    assert "majordomus_executions_finished" in {f.name for f in openmetrics_families(asked.text)}


# -- the bearer token --------------------------------------------------------------------------

MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "content-type": "application/json",
    "mcp-protocol-version": "2025-11-25",
}
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "token-test", "version": "1"},
    },
}
GUARDED: list[tuple[str, str, dict[str, Any]]] = [
    ("GET", "/api/v1/executions", {}),
    ("POST", "/api/v1/executions/start", {"json": {"capability": "executions.demonstrate"}}),
    ("GET", "/openapi.json", {}),
    ("GET", "/metrics", {}),
    ("GET", "/events", {"headers": {"Accept": "text/event-stream"}}),
    ("POST", "/mcp", {"json": INITIALIZE, "headers": MCP_HEADERS}),
    ("GET", "/mcp", {"headers": MCP_HEADERS}),
]
SENT = {
    "none": ({}, "Bearer", "this server needs a bearer token"),
    "another scheme": ({"Authorization": f"Basic {TOKEN}"}, "Bearer", "needs a bearer token"),
    "a wrong one": (
        {"Authorization": "Bearer nope"},
        'Bearer error="invalid_token"',
        "is not this server's",
    ),
}


def _request(client: httpx.Client, method: str, path: str, extra: dict[str, str], **kw: Any) -> Any:
    headers = {**kw.pop("headers", {}), **extra}
    return client.request(method, path, headers=headers, **kw)


@pytest.mark.parametrize("sent", SENT, ids=list(SENT))
@pytest.mark.parametrize(
    ("method", "path", "kwargs"), GUARDED, ids=[f"{m} {p}" for m, p, _ in GUARDED]
)
def test_a_missing_or_wrong_token_is_401_with_a_bearer_challenge(
    locked_api: ApiProcess, sent: str, method: str, path: str, kwargs: dict[str, Any]
) -> None:
    headers, challenge, said = SENT[sent]
    with locked_api.client() as client:
        response = _request(client, method, path, headers, **kwargs)
    assert response.status_code == 401, response.text
    assert response.headers.get_list("www-authenticate") == [challenge]
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "forbidden" and said in error["message"], error
    assert "MAJORDOMUS_API_TOKEN" in error["suggestion"]


def test_the_right_token_passes_and_403_stays_the_foreign_origins(locked_api: ApiProcess) -> None:
    good = {"Authorization": f"Bearer {TOKEN}"}
    with locked_api.client(headers=good) as client:
        assert client.get("/api/v1/executions").status_code == 200
        assert client.get("/metrics").status_code == 200
        opened = client.post("/mcp", json=INITIALIZE, headers=MCP_HEADERS)
        assert opened.status_code == 200, opened.text
        with client.stream("GET", "/events", headers={"Accept": "text/event-stream"}) as live:
            assert live.status_code == 200
        foreign = {"Origin": "http://evil.example"}
        for method, path, kwargs in GUARDED:
            if method == "GET" and path not in ("/events", "/mcp"):
                continue  # a GET of data is not origin-checked: same-origin reads pass
            refused = _request(client, method, path, foreign, **kwargs)
            assert refused.status_code == 403, (path, refused.text)
            assert "www-authenticate" not in refused.headers
            assert refused.json()["error"]["code"] == "forbidden"


def test_the_openapi_document_lists_401_with_its_challenge(locked_api: ApiProcess) -> None:
    with locked_api.client(headers={"Authorization": f"Bearer {TOKEN}"}) as client:
        document = client.get("/openapi.json").json()
    operations = [op for item in document["paths"].values() for op in item.values()]
    guarded = [op for op in operations if op.get("security") != []]
    assert guarded
    for op in guarded:
        unauthorized = op["responses"]["401"]
        assert "WWW-Authenticate" in unauthorized["headers"], op["operationId"]
        assert "bearer token" in unauthorized["description"]
        assert "Origin" in op["responses"]["403"]["description"]


@pytest.mark.parametrize(
    ("token", "said"),
    [
        (None, "it needs a bearer token, none was sent"),
        ("nope", "it refused the bearer token sent"),
    ],
    ids=["no token", "a wrong token"],
)
@pytest.mark.parametrize(
    "argv", [["executions", "list"], ["run", "executions.demonstrate"]], ids=["list", "run"]
)
def test_the_cli_says_the_api_refused_its_token_and_which_setting_to_fix(
    locked_api: ApiProcess, token: str | None, said: str, argv: list[str]
) -> None:
    env = api_env(locked_api.redis_url, MAJORDOMUS_API_URL=locked_api.url)
    if token is not None:
        env["MAJORDOMUS_API_TOKEN"] = token
    done = subprocess.run(
        [sys.executable, "-m", "majordomus.cli", *argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == EXIT_CODE["forbidden"] == 6, done.stderr
    assert f"majordomus: forbidden: the API at {locked_api.url} answered 401: {said}" in done.stderr
    assert "the server's token: MAJORDOMUS_API_TOKEN for the CLI" in done.stderr
    assert "Traceback" not in done.stderr + done.stdout
