"""`executions.events` over HTTP: every answer is an EventHistory as the shared schema says,
and a cursor walks through a long execution's retained history with `truncated` exactly
when events after the cursor were dropped by the 500-entry cap."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import msgspec
import pytest
import redis as redis_sync

from majordomus.store.keys import Keys
from tests.api.conftest import ApiProcess, start, wait_final

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"
HISTORY = jsonschema.Draft202012Validator(
    json.loads((SCHEMAS / "EventHistory.schema.json").read_text()),
    format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
)

TOTAL = 1200
RETAINED_FROM = TOTAL - 500 + 1


def page(http: httpx.Client, execution_id: str, **params: Any) -> dict[str, Any]:
    response = http.get("/api/v1/executions/events", params={"id": execution_id, **params})
    assert response.status_code == 200, response.text
    body = response.json()
    HISTORY.validate(body)
    return body


@pytest.fixture(scope="module")
def long_execution(api: ApiProcess, worker_process_for_api: Any) -> str:
    # created, queued, started, 1,196 progress events, completed: 1,200 in all.
    with api.client() as http:
        snapshot = start(http, "tests.chatty", events=TOTAL - 4)
        final = wait_final(http, snapshot["id"])
    assert final["last_sequence"] == TOTAL and final["events_truncated"] is True
    return str(snapshot["id"])


@pytest.mark.parametrize("limit", [500, 137, 64])
def test_paging_with_after_yields_every_retained_event_once(
    http: httpx.Client, long_execution: str, limit: int
) -> None:
    after, seen, truncated = 0, [], []
    while True:
        body = page(http, long_execution, after=after, limit=limit)
        seen += [e["sequence"] for e in body["events"]]
        truncated.append(body["truncated"])
        assert len(body["events"]) <= limit
        if not body["more"]:
            break
        assert body["last_sequence"] == body["events"][-1]["sequence"]
        after = body["last_sequence"]
    assert seen == list(range(RETAINED_FROM, TOTAL + 1))
    assert truncated[0] is True and not any(truncated[1:])
    assert body["state"] == "succeeded" and body["last_sequence"] == TOTAL


class _StoredPage(msgspec.Struct):
    events: list[msgspec.Raw]


def test_a_page_sends_the_stored_events_as_they_are(
    http: httpx.Client, long_execution: str, suite_redis_url: str
) -> None:
    client = redis_sync.Redis.from_url(suite_redis_url)
    try:
        stored = client.xrange(Keys().events(long_execution), f"({TOTAL - 137}-0", "+")
    finally:
        client.close()
    response = http.get(
        "/api/v1/executions/events", params={"id": long_execution, "after": TOTAL - 137}
    )
    HISTORY.validate(response.json())
    sent = msgspec.json.decode(response.content, type=_StoredPage).events
    assert [bytes(e) for e in sent] == [fields[b"e"] for _, fields in stored]
    assert len(sent) == 137


@pytest.mark.parametrize(
    "after, truncated",
    [
        (0, True),
        (RETAINED_FROM - 2, True),
        (RETAINED_FROM - 1, False),
        (RETAINED_FROM, False),
        (TOTAL - 1, False),
        (TOTAL, False),
    ],
)
def test_truncated_says_exactly_whether_events_after_the_cursor_were_dropped(
    http: httpx.Client, long_execution: str, after: int, truncated: bool
) -> None:
    body = page(http, long_execution, after=after)
    assert body["truncated"] is truncated
    first = max(after + 1, RETAINED_FROM)
    assert [e["sequence"] for e in body["events"]] == list(range(first, TOTAL + 1))


def test_an_empty_page_carries_the_cursor_on(http: httpx.Client, long_execution: str) -> None:
    at_end = page(http, long_execution, after=TOTAL)
    assert (at_end["events"], at_end["last_sequence"], at_end["more"]) == ([], TOTAL, False)
    beyond = page(http, long_execution, after=TOTAL + 50)
    assert beyond["last_sequence"] == TOTAL + 50
    peek = page(http, long_execution, after=TOTAL - 10, limit=0)
    assert (peek["events"], peek["more"]) == ([], True)


def test_every_answer_of_every_kind_of_execution_validates(http: httpx.Client) -> None:
    ids = [
        start(http, "executions.demonstrate", steps=2, log_lines=2)["id"],
        start(http, "executions.demonstrate", steps=3, fail_at=2)["id"],
        start(http, "tests.login", user="ann", token="hunter2", vault={"a": "b"})["id"],
    ]
    running = start(http, "tests.sleepy", seconds=5)["id"]
    cancelled = start(http, "tests.sleepy", seconds=5)["id"]
    http.post("/api/v1/executions/cancel", json={"id": cancelled})
    for execution_id in [*ids, cancelled]:
        wait_final(http, execution_id)
    for execution_id in [*ids, cancelled, running]:
        for params in ({}, {"after": 1}, {"after": 2, "limit": 1}, {"limit": 0}, {"after": 10_000}):
            page(http, execution_id, **params)
    states = {page(http, i)["state"] for i in [*ids, cancelled]}
    assert states == {"succeeded", "failed", "cancelled"}
    assert "hunter2" not in json.dumps(page(http, ids[2]))
    http.post("/api/v1/executions/cancel", json={"id": running})
