"""The console shows work over time: an execution's due time, priority, idempotency key and
retry links on its page, and the queue's delayed backlog beside what is due."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ApiProcess

pytestmark = [pytest.mark.process]


def test_a_delayed_prioritised_start_shows_its_due_time_and_the_queue_counts_it_delayed(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    answer = http.post(
        "/api/v1/executions/start",
        json={
            "capability": "tests.noop",
            "delay_ms": 3_600_000,
            "priority": "high",
            "idempotency_key": "console-later",
        },
    )
    assert answer.status_code == 200, answer.text
    x = answer.json()
    try:
        page.goto(f"{console.url}/executions/{x['id']}")
        page.wait_for_selector("#x-state .state-queued")
        facts = page.text_content("#x-facts") or ""
        assert "Priority" in facts and "high" in facts
        assert "Due" in facts and "at once" not in facts
        assert "console-later" in facts
        page.goto(console.url + "/queue")
        row = page.wait_for_selector('#q-backlog tr[data-capability="tests.noop"]')
        cells = [c.text_content() for c in row.query_selector_all("td")]
        assert cells[1] == "0" and cells[5] == "1", cells  # none due yet, one delayed
        assert cells[6] and cells[6] != "", cells  # when it is due
    finally:
        http.post("/api/v1/executions/cancel", json={"id": x["id"]})
