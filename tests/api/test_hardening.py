"""Client errors are answered as client errors, over a real socket to a real server: JSON
nested past any recursion limit and cursors past what a Redis stream id can hold are `400
invalid_input`, never a 500; a refused input never echoes a secret; every refusal is the
typed envelope (code, sentence, suggestion) and no traceback reaches the client. And `/docs`
(and `/openapi.json`) answer `HEAD`, with one `charset`."""

from __future__ import annotations

from typing import Any

import httpx

from majordomus.model import CURSOR_BOUND
from majordomus.schemas import MAX_INPUT_DEPTH, REDACTED
from tests.api.conftest import start, wait_final

BEYOND = CURSOR_BOUND + 1  # 2**64


def refused_as_input(response: httpx.Response, status: int = 400) -> dict[str, Any]:
    """The typed envelope of a client error, with nothing of a server failure in it."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    error = response.json()["error"]
    assert error["code"] == "invalid_input", error
    assert error["message"] and error["suggestion"], error
    assert "correlation_id" not in error  # a server failure would carry one
    assert "Traceback" not in response.text and "RecursionError" not in response.text
    return error


def executions_now(http: httpx.Client) -> int:
    return http.get("/api/v1/executions", params={"limit": 200}).json()["count"]


# -- nesting ------------------------------------------------------------------------------------


def test_json_nested_2000_deep_is_invalid_input_and_creates_nothing(http: httpx.Client) -> None:
    before = executions_now(http)
    for depth, shape in ((2000, ("[", "]")), (2000, ('{"a":', "}")), (500, ("[", "]"))):
        nested = shape[0] * depth + "1" + shape[1] * depth
        body = '{"capability": "tests.noop", "input": {"deep": ' + nested + "}}"
        response = http.post(
            "/api/v1/executions/start",
            content=body,
            headers={"Content-Type": "application/json"},
        )
        error = refused_as_input(response)
        assert str(MAX_INPUT_DEPTH) in error["message"], error
    assert executions_now(http) == before
    assert http.get("/api/v1/live").status_code == 200  # and the server is fine


def test_an_input_nested_within_the_bound_still_runs(http: httpx.Client) -> None:
    nested: Any = {"user": "ada", "token": "tok-within-bound", "vault": {}}
    snap = start(http, "tests.login", **nested)
    assert wait_final(http, snap["id"])["state"] == "succeeded"


# -- cursors ------------------------------------------------------------------------------------


def test_an_events_cursor_of_2_64_or_more_is_invalid_input(http: httpx.Client) -> None:
    snap = start(http, "tests.noop")
    wait_final(http, snap["id"])
    for after in (BEYOND, BEYOND * 2**10, 10**40):
        response = http.get("/api/v1/executions/events", params={"id": snap["id"], "after": after})
        error = refused_as_input(response)
        assert str(after) in error["message"] and str(CURSOR_BOUND) in error["message"]
    # The largest cursor a stream id holds is a page past the end, as any cursor past it.
    page = http.get(
        "/api/v1/executions/events", params={"id": snap["id"], "after": CURSOR_BOUND}
    ).json()
    assert page["events"] == [] and page["last_sequence"] == CURSOR_BOUND and not page["more"]


def test_a_feed_cursor_past_a_stream_id_is_invalid_input_on_the_live_channel(
    http: httpx.Client,
) -> None:
    sse = {"Accept": "text/event-stream"}
    for cursor in (
        f"{BEYOND}-0",
        f"0-{BEYOND}",
        f"{CURSOR_BOUND}-{CURSOR_BOUND}",
        "99999999999999999999",
    ):
        for how in ("after", "Last-Event-ID"):
            params = {"after": cursor} if how == "after" else None
            headers = sse if how == "after" else {**sse, "Last-Event-ID": cursor}
            response = http.get("/events", params=params, headers=headers)
            refused_as_input(response)
    # The last id before the bound is still a cursor: the channel opens.
    with http.stream("GET", "/events", params={"after": f"{CURSOR_BOUND}-0"}, headers=sse) as ok:
        assert ok.status_code == 200


# -- secrets in validation messages ------------------------------------------------------------


def test_a_refused_input_never_echoes_a_secret_value(http: httpx.Client) -> None:
    secrets = {
        "token": 31415926,  # wrong type
        "pin": 27182818,
        "maybe": 16180339,
        "tokens": "hunter2-as-a-string",  # a string where a list is due
        "vault": {"db": ["nested-s3cr3t"]},
    }
    response = http.post(
        "/api/v1/executions/start",
        json={"capability": "tests.login", "input": {"user": "ada", **secrets}},
    )
    error = refused_as_input(response)
    problems = error["message"].split("; ")
    assert len(problems) == 5 and all(REDACTED in p for p in problems), problems
    for shown in ("31415926", "27182818", "16180339", "hunter2", "nested-s3cr3t"):
        assert shown not in response.text
    # A value that is no secret is still shown, so a person sees what was wrong.
    response = http.post(
        "/api/v1/executions/start",
        json={"capability": "tests.login", "input": {"user": 12, "token": "tok-fine"}},
    )
    assert refused_as_input(response)["message"] == "/user: 12 is not of type 'string'"
    assert "tok-fine" not in response.text


# -- the documentation page --------------------------------------------------------------------


def test_docs_says_its_charset_once_and_answers_head_with_the_headers_of_get(
    http: httpx.Client,
) -> None:
    page = http.get("/docs")
    assert page.status_code == 200
    assert page.headers.get_list("content-type") == ["text/html; charset=utf-8"]
    head = http.head("/docs")
    assert head.status_code == 200 and head.content == b""
    assert head.headers["content-type"] == "text/html; charset=utf-8"
    assert head.headers["content-length"] == str(len(page.content))
    document = http.head("/openapi.json")
    assert document.status_code == 200 and document.content == b""
    assert document.headers["content-type"] == "application/json"
    refused = http.post("/docs", content=b"{}")
    assert refused.headers["allow"] == "GET, HEAD"
    refused_as_input(refused, 405)


def test_the_docs_live_panel_follows_with_event_source_named_for_every_type(
    http: httpx.Client,
) -> None:
    page = http.get("/docs").text
    assert "new EventSource(url)" in page
    assert '"Last-Event-ID"' in page  # the token mode resumes as EventSource does
    protocol = http.get("/api/v1/executions/protocol").json()
    for name in protocol["event_types"] + protocol["stream_types"]:
        assert f'"{name}"' in page, name
