"""A server answers only to the Hosts it is reached at: loopback, its own address and
`MAJORDOMUS_ALLOWED_HOSTS`. Over real sockets to real `majordomus serve` processes, a
request naming another Host (`api:8000`, a rebound domain) gets the same 421 `refused`
envelope on a REST route, the live channel and `/mcp`; listed, the same Host is answered by
all three (an MCP initialize succeeds); loopback names always pass. This is the defence
against DNS rebinding, which the origin check alone cannot be."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from majordomus.api.access import AllowedHosts
from majordomus.config import Settings
from tests.api.conftest import ApiProcess

COMPOSE_HOST = "api:8000"
REBOUND = "rebound.example:8000"
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
        "clientInfo": {"name": "allowed-hosts-test", "version": "1"},
    },
}


@pytest.fixture(scope="module")
def listing_api(spawns: None, suite_redis_url: str) -> Iterator[ApiProcess]:
    """An API that also answers to `api:8000`, as compose runs it."""
    server = ApiProcess(suite_redis_url, MAJORDOMUS_ALLOWED_HOSTS=COMPOSE_HOST).start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def open_api(spawns: None, suite_redis_url: str) -> Iterator[ApiProcess]:
    """An API told to answer to any Host (`*`)."""
    server = ApiProcess(suite_redis_url, MAJORDOMUS_ALLOWED_HOSTS="*").start()
    yield server
    server.close()


def rest(server: ApiProcess, host: str) -> httpx.Response:
    return httpx.get(f"{server.url}/api/v1/capabilities", headers={"host": host}, timeout=10)


def live(server: ApiProcess, host: str) -> tuple[int, str, str]:
    """The live channel's status, content type and first line (`event: stream.ready` when
    it opened), read without waiting for it to end."""
    headers = {"host": host, "accept": "text/event-stream"}
    with (
        httpx.Client(timeout=10) as client,
        client.stream("GET", f"{server.url}/events", headers=headers) as response,
    ):
        if response.status_code != 200:
            response.read()
            return response.status_code, response.headers["content-type"], response.text
        first = next(line for line in response.iter_lines() if line)
        return response.status_code, response.headers["content-type"], first


def initialize(server: ApiProcess, host: str, **headers: str) -> httpx.Response:
    """A raw MCP initialize POST (the 2025 handshake), its answer read whole."""
    with httpx.Client(timeout=10) as client:
        response = client.post(
            f"{server.url}/mcp", json=INITIALIZE, headers={**MCP_HEADERS, "host": host, **headers}
        )
        return response


def misdirected(response_status: int, content_type: str, body: Any) -> dict[str, Any]:
    """The typed 421 envelope of a refused Host, naming the setting to change."""
    assert response_status == 421, body
    assert content_type == "application/json"
    error: dict[str, Any] = body["error"]
    assert error["code"] == "refused", error
    assert "MAJORDOMUS_ALLOWED_HOSTS" in error["suggestion"], error
    return error


def refused_everywhere(server: ApiProcess, host: str) -> list[dict[str, Any]]:
    answers = []
    answer = rest(server, host)
    answers.append(misdirected(answer.status_code, answer.headers["content-type"], answer.json()))
    status, content_type, text = live(server, host)
    answers.append(misdirected(status, content_type, httpx.Response(status, text=text).json()))
    answer = initialize(server, host)
    answers.append(misdirected(answer.status_code, answer.headers["content-type"], answer.json()))
    return answers


def answered_everywhere(server: ApiProcess, host: str) -> None:
    answer = rest(server, host)
    assert answer.status_code == 200, answer.text
    assert "executions.start" in {c["id"] for c in answer.json()["capabilities"]}
    status, _, first = live(server, host)
    assert (status, first) == (200, "event: stream.ready")
    answer = initialize(server, host)
    assert answer.status_code == 200, answer.text
    assert answer.headers.get("mcp-session-id")
    assert '"serverInfo"' in answer.text and '"protocolVersion"' in answer.text


def test_by_default_the_compose_host_is_refused_alike_on_rest_live_and_mcp(
    api: ApiProcess,
) -> None:
    answers = refused_everywhere(api, COMPOSE_HOST)
    assert all(a == answers[0] for a in answers), answers
    assert COMPOSE_HOST in answers[0]["message"]


def test_a_rebound_domain_reads_and_starts_nothing(api: ApiProcess) -> None:
    refused_everywhere(api, REBOUND)
    started = httpx.post(
        f"{api.url}/api/v1/executions/start",
        json={"capability": "tests.noop"},
        headers={"host": REBOUND, "origin": f"http://{REBOUND}"},
        timeout=10,
    )
    assert started.status_code == 421, started.text
    # Same-origin with itself, so only the Host gave it away.
    cancel = httpx.post(
        f"{api.url}/api/v1/executions/cancel",
        json={"id": "x-20260101T000000Z-00000000"},
        headers={"host": REBOUND, "origin": f"http://{REBOUND}"},
        timeout=10,
    )
    assert cancel.status_code == 421, cancel.text


def test_loopback_hosts_always_pass(api: ApiProcess) -> None:
    for host in (f"127.0.0.1:{api.port}", f"localhost:{api.port}", "localhost", "[::1]:9"):
        answered_everywhere(api, host)


def test_the_probes_answer_whatever_the_host(api: ApiProcess) -> None:
    for path in ("/api/v1/live", "/api/v1/ready"):
        answer = httpx.get(f"{api.url}{path}", headers={"host": COMPOSE_HOST}, timeout=10)
        assert answer.status_code != 421, answer.text


def test_a_listed_host_is_answered_on_rest_live_and_mcp(listing_api: ApiProcess) -> None:
    answered_everywhere(listing_api, COMPOSE_HOST)
    answered_everywhere(listing_api, f"localhost:{listing_api.port}")


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_mcp_client_works_at_a_listed_host(
    listing_api: ApiProcess, mode: str
) -> None:
    http = httpx2.AsyncClient(headers={"host": COMPOSE_HOST}, timeout=10)
    transport = streamable_http_client(f"{listing_api.url}/mcp", http_client=http)
    async with http, Client(transport, mode=mode) as client:
        tools = (await client.list_tools()).tools
    assert "majordomus_execution_start" in {t.name for t in tools}


def test_a_listed_host_allows_its_port_only_and_no_other_name(listing_api: ApiProcess) -> None:
    refused_everywhere(listing_api, "api:9000")
    refused_everywhere(listing_api, REBOUND)


def test_an_mcp_session_opened_at_a_listed_host_goes_on_there(listing_api: ApiProcess) -> None:
    opened = initialize(listing_api, COMPOSE_HOST)
    session = opened.headers["mcp-session-id"]
    headers = {**MCP_HEADERS, "host": COMPOSE_HOST, "mcp-session-id": session}
    notified = httpx.post(
        f"{listing_api.url}/mcp",
        json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        headers=headers,
        timeout=10,
    )
    assert notified.status_code == 202, notified.text
    listed = httpx.post(
        f"{listing_api.url}/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}},
        headers=headers,
        timeout=10,
    )
    assert listed.status_code == 200 and "majordomus_execution_start" in listed.text


def test_a_foreign_origin_is_still_refused_at_a_listed_host(listing_api: ApiProcess) -> None:
    foreign = {"origin": "http://elsewhere.example"}
    assert initialize(listing_api, COMPOSE_HOST, **foreign).status_code == 403
    stream = httpx.get(
        f"{listing_api.url}/mcp",
        headers={**MCP_HEADERS, "host": COMPOSE_HOST, **foreign},
        timeout=10,
    )
    assert stream.status_code == 403, stream.text
    own = initialize(listing_api, COMPOSE_HOST, origin=f"http://{COMPOSE_HOST}")
    assert own.status_code == 200, own.text


def test_a_star_answers_to_any_host(open_api: ApiProcess) -> None:
    answered_everywhere(open_api, REBOUND)


def test_the_setting_is_read_as_a_comma_separated_list_and_checked_at_start() -> None:
    read = Settings.from_env({"MAJORDOMUS_ALLOWED_HOSTS": " api:8000, example.com,[::1]:80,"})
    assert read.allowed_hosts == ["api:8000", "example.com", "[::1]:80"]
    assert Settings().allowed_hosts == []
    for bad in ("http://api:8000", "api:8000/path", "user@api", "api:port"):
        with pytest.raises(SystemExit, match="bad configuration"):
            Settings.from_env({"MAJORDOMUS_ALLOWED_HOSTS": bad})


def scope_of(host: str | None, server: tuple[str, int] = ("10.1.2.3", 8000)) -> dict[str, Any]:
    headers = [] if host is None else [(b"host", host.encode())]
    return {"type": "http", "scheme": "http", "server": server, "headers": headers}


def test_the_address_the_connection_arrived_at_passes_on_its_port_only() -> None:
    hosts = AllowedHosts.of([])
    assert hosts.allow(scope_of("10.1.2.3:8000"))
    assert not hosts.allow(scope_of("10.1.2.3:9000"))
    assert hosts.allow(scope_of("[fd00::1]:8000", ("fd00::1", 8000)))
    assert hosts.allow(scope_of("10.1.2.3", ("10.1.2.3", 80)))  # no port: the scheme's
    assert not hosts.allow(scope_of("api:8000"))


def test_a_listed_name_without_a_port_is_allowed_on_any_port() -> None:
    hosts = AllowedHosts.of(["Example.COM", "api:8000"])
    assert hosts.allow(scope_of("example.com:1234")) and hosts.allow(scope_of("EXAMPLE.com"))
    assert hosts.allow(scope_of("api:8000")) and not hosts.allow(scope_of("api:8001"))
    assert not hosts.allow(scope_of("api"))  # port 80


def test_a_host_that_is_no_host_is_refused_and_none_at_all_passes() -> None:
    hosts = AllowedHosts.of(["api:8000"])
    for weird in ("evil.example@api:8000", "api:8000/x", "api:8000#", "", "api:"):
        assert not hosts.allow(scope_of(weird)), weird
    assert hosts.allow(scope_of(None))  # HTTP/1.0 names no domain to rebind
    with pytest.raises(ValueError, match="MAJORDOMUS_ALLOWED_HOSTS"):
        AllowedHosts.of(["http://api:8000"])
