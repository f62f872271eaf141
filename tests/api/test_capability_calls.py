"""A capability's own route, over a real socket: a user's (or the demonstration) runs on the
workers as an execution and answers its output, or `202` with the execution still going;
what the API runs itself (the built-in queries) stops when its caller goes away."""

from __future__ import annotations

import socket
import time
from typing import Any
from urllib.parse import urlsplit

import httpx

from tests.api.conftest import ApiProcess, wait_final
from tests.api.test_http import assert_envelope

EXECUTION = "Majordomus-Execution"


def execution_of(http: httpx.Client, response: httpx.Response) -> dict[str, Any]:
    execution_id = response.headers[EXECUTION]
    answer = http.get("/api/v1/executions/get", params={"id": execution_id})
    assert answer.status_code == 200, answer.text
    return answer.json()


def test_a_user_capability_route_runs_it_on_a_worker_and_answers_its_output(
    http: httpx.Client,
) -> None:
    response = http.post("/api/v1/tests/noop", json={})
    assert response.status_code == 200, response.text
    assert response.json() == {"ok": True}
    snap = execution_of(http, response)
    assert snap["capability"] == "tests.noop" and snap["state"] == "succeeded"
    assert snap["actor"] == "http" and snap["worker"]  # a worker ran it, not the API
    assert snap["output"] == {"ok": True}


def test_the_demonstration_route_is_observed_as_an_execution(http: httpx.Client) -> None:
    response = http.get("/api/v1/executions/demonstrate", params={"steps": "2", "log_lines": "0"})
    assert response.status_code == 200, response.text
    assert response.json()["observed"] is True
    events = http.get(
        "/api/v1/executions/events", params={"id": response.headers[EXECUTION]}
    ).json()["events"]
    assert [e["type"] for e in events][-1] == "execution.completed"
    assert sum(e["type"] == "execution.step.completed" for e in events) == 2


def test_one_still_running_past_the_wait_answers_202_with_where_to_follow_it(
    http: httpx.Client,
) -> None:
    began = time.monotonic()
    response = http.post(
        "/api/v1/tests/sleepy", json={"seconds": 2.5}, headers={"Prefer": "wait=1"}
    )
    waited = time.monotonic() - began
    assert response.status_code == 202, response.text
    assert response.headers["Preference-Applied"] == "wait=1"
    snap = response.json()
    assert snap["state"] in ("queued", "running") and snap["capability"] == "tests.sleepy"
    assert response.headers["Location"] == snap["links"]["self"]
    assert response.headers[EXECUTION] == snap["id"]
    print(f"answered after {waited:.2f} s (wait=1, a run of 2.5 s)")
    # It goes on without the caller, to its end.
    final = wait_final(http, snap["id"])
    assert final["state"] == "succeeded" and final["output"]["slept"] >= 2.5


def test_respond_async_answers_the_queued_execution_at_once(http: httpx.Client) -> None:
    response = http.post(
        "/api/v1/tests/noop", json={}, headers={"Prefer": "respond-async"}
    )
    assert response.status_code == 202, response.text
    assert response.headers["Preference-Applied"] == "respond-async"
    assert response.json()["state"] == "queued"
    assert wait_final(http, response.json()["id"])["state"] == "succeeded"


def test_a_failed_execution_answers_its_error_naming_the_execution(http: httpx.Client) -> None:
    refused = http.post("/api/v1/tests/refuse", json={})
    error = assert_envelope(refused, 422, "refused")
    assert "not today" in error["message"] and error["suggestion"] == "try tomorrow"
    snap = http.get("/api/v1/executions/get", params={"id": error["correlation_id"]}).json()
    assert snap["state"] == "failed" and snap["capability"] == "tests.refuse"

    boom = http.post("/api/v1/tests/boom", json={})
    error = assert_envelope(boom, 500, "internal")
    assert error["message"].endswith("ValueError: secret internals that must not leak")
    assert "Traceback" not in boom.text
    assert error["correlation_id"].startswith("x-")


def test_invalid_input_is_refused_before_any_execution_is_made(http: httpx.Client) -> None:
    before = http.get("/api/v1/executions", params={"capability": "tests.sleepy"}).json()
    bad = http.post("/api/v1/tests/sleepy", json={"seconds": "long"})
    assert_envelope(bad, 400, "invalid_input")
    assert EXECUTION not in bad.headers
    after = http.get("/api/v1/executions", params={"capability": "tests.sleepy"}).json()
    assert after["count"] == before["count"]


def calls_in_flight(http: httpx.Client) -> int:
    return int(http.get("/api/v1/live").json()["calls"])


def raw_request(api: ApiProcess, line: str, body: bytes = b"") -> socket.socket:
    """A request sent on a socket of its own, left open (the test closes it: a client that
    goes away)."""
    parts = urlsplit(api.url)
    sock = socket.create_connection((parts.hostname, parts.port))
    head = (
        f"{line} HTTP/1.1\r\nHost: 127.0.0.1:{parts.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    )
    sock.sendall(head.encode() + body)
    return sock


def until(predicate: Any, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def test_a_built_in_wait_stops_when_its_caller_disconnects(
    http: httpx.Client, api: ApiProcess
) -> None:
    long = http.post(
        "/api/v1/tests/sleepy", json={"seconds": 30}, headers={"Prefer": "respond-async"}
    ).json()
    try:
        assert calls_in_flight(http) == 0
        sock = raw_request(api, f"GET /api/v1/executions/wait?id={long['id']}&timeout_ms=60000")
        assert until(lambda: calls_in_flight(http) == 1), "the wait never began"
        sock.close()
        assert until(lambda: calls_in_flight(http) == 0), "the wait outlived its caller"
    finally:
        http.post("/api/v1/executions/cancel", json={"id": long["id"]})


def test_a_caller_that_leaves_stops_the_wait_but_never_the_execution(
    http: httpx.Client, api: ApiProcess
) -> None:
    sock = raw_request(api, "POST /api/v1/tests/sleepy", b'{"seconds": 1.5}')
    assert until(lambda: calls_in_flight(http) == 1), "the call never began"
    sock.close()
    assert until(lambda: calls_in_flight(http) == 0, 1.0), "the call outlived its caller"
    listed = http.get("/api/v1/executions", params={"capability": "tests.sleepy"}).json()
    newest = listed["executions"][0]
    assert wait_final(http, newest["id"])["state"] == "succeeded"


def test_an_execution_stopped_at_its_timeout_answers_504_timed_out(http: httpx.Client) -> None:
    response = http.post("/api/v1/tests/deadline", json={"seconds": 30})
    error = assert_envelope(response, 504, "timed_out")
    assert "timeout of 0.3 s" in error["message"] and error["correlation_id"].startswith("x-")
