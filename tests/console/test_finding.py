"""The console's list finds and acts (issue 36, points 3 and 4), in a real browser against a
real API, worker and Redis: a search by a searchable input member, a time range and a sort,
every one in the page's address so a link opened elsewhere shows the same view; "Cancel all
matching" and "Retry all matching" ask with the count first and act only once confirmed.
"""

from __future__ import annotations

import time
import uuid
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest

from tests.api.conftest import ApiProcess
from tests.console.conftest import screenshot

pytestmark = [pytest.mark.process, pytest.mark.slow]

HOUR_MS = 3_600_000


def _start(
    http: httpx.Client, capability: str, given: dict[str, Any], **options: Any
) -> dict[str, Any]:
    answer = http.post(
        "/api/v1/executions/start", json={"capability": capability, "input": given, **options}
    )
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _ids(page: Any) -> list[str]:
    return list(page.eval_on_selector_all("tbody tr[data-id]", "rs => rs.map(r => r.dataset.id)"))


def _count(http: httpx.Client, **match: str) -> dict[str, int]:
    answer = http.get("/api/v1/executions/count", params=match)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _until(check: Any, timeout: float = 30) -> Any:
    deadline = time.monotonic() + timeout
    while not (value := check()):
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout} s")
        time.sleep(0.1)
    return value


def test_a_search_a_time_range_and_a_sort_are_in_the_address_and_a_link_shares_them(
    page: Any, browser: Any, console: ApiProcess, http: httpx.Client
) -> None:
    customer = "c-" + uuid.uuid4().hex[:8]
    mine = [
        _start(http, "tests.order", {"customer": customer}, delay_ms=HOUR_MS)["id"]
        for _ in range(3)
    ]
    _start(http, "tests.order", {"customer": "someone-else"}, delay_ms=HOUR_MS)
    page.goto(f"{console.url}/?capability=tests.order&search=customer%3D{customer}")
    page.wait_for_selector("main[data-loaded]")
    assert _ids(page) == mine[::-1]
    assert page.input_value("#f-search") == f"customer={customer}"
    assert page.input_value("#f-capability") == "tests.order"
    page.wait_for_function("document.querySelector('#f-search').placeholder.includes('customer=')")

    # Durations, and a time range that leaves out the first of them.
    first = _start(http, "tests.sleepy", {"seconds": 0.01})
    time.sleep(1.1)  # the range is given to the second in the form
    runs = [_start(http, "tests.sleepy", {"seconds": s})["id"] for s in (0.05, 0.4, 0.2)]
    for execution_id in [first["id"], *runs]:
        waited = http.get(
            "/api/v1/executions/wait", params={"id": execution_id, "timeout_ms": 20_000}
        )
        assert waited.json()["state"] == "succeeded"
    after = datetime.fromisoformat(first["created_at"].replace("Z", "+00:00")) + timedelta(
        seconds=1
    )

    page.goto(console.url + "/")
    page.wait_for_selector("main[data-loaded]")
    page.select_option("#f-capability", "tests.sleepy")
    page.fill("#f-from", after.astimezone().strftime("%Y-%m-%dT%H:%M:%S"))
    page.select_option("#f-sort", "duration")
    page.select_option("#f-order", "asc")
    page.click("form[aria-label='Filter executions'] button[type=submit]")
    page.wait_for_url(lambda url: "sort=duration" in url)
    page.wait_for_selector("main[data-loaded]")
    query = parse_qs(urlsplit(page.url).query)
    assert query["capability"] == ["tests.sleepy"] and query["order"] == ["asc"]
    assert datetime.fromisoformat(
        query["created_after"][0].replace("Z", "+00:00")
    ) == after.replace(microsecond=0)
    shortest_first = [runs[0], runs[2], runs[1]]
    assert _ids(page) == shortest_first
    screenshot(page, "finding")

    # The link, opened in another browser context, shows the same view, its form filled.
    other = browser.new_context()
    try:
        tab = other.new_page()
        tab.goto(page.url)
        tab.wait_for_selector("main[data-loaded]")
        assert _ids(tab) == shortest_first
        assert tab.input_value("#f-sort") == "duration" and tab.input_value("#f-order") == "asc"
        assert tab.input_value("#f-from") == after.astimezone().strftime("%Y-%m-%dT%H:%M:%S")
    finally:
        other.close()


def test_cancel_all_and_retry_all_matching_ask_with_the_count_then_act(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    customer = "bulk-" + uuid.uuid4().hex[:8]
    made = [
        _start(http, "tests.order", {"customer": customer}, delay_ms=HOUR_MS)["id"]
        for _ in range(25)
    ]
    match = {"capability": "tests.order", "search": f"customer={customer}"}
    page.goto(f"{console.url}/?capability=tests.order&search=customer%3D{customer}")
    page.wait_for_selector("main[data-loaded]")

    asked: list[str] = []
    page.once("dialog", lambda d: (asked.append(d.message), d.dismiss()))
    page.click("button[data-bulk=cancel]")
    page.wait_for_function("document.querySelector('#bulk-say').textContent === 'Nothing done.'")
    assert asked == [
        f"Cancel 25 queued or running executions of the 25 matching capability tests.order, "
        f"search customer={customer}?"
    ]
    assert _count(http, **match)["cancellable"] == 25

    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("button[data-bulk=cancel]")
    page.wait_for_selector("#bulk-say[data-execution]")
    bulk_id = page.get_attribute("#bulk-say", "data-execution")
    assert page.get_attribute(f"#bulk-say a[href='/executions/{bulk_id}']", "href")
    _until(lambda: _count(http, **match)["cancellable"] == 0)
    states = {http.get("/api/v1/executions/get", params={"id": i}).json()["state"] for i in made}
    assert states == {"cancelled"}

    page.once("dialog", lambda d: (asked.append(d.message), d.accept()))
    page.click("button[data-bulk=retry]")
    page.wait_for_selector("#bulk-say[data-execution]")
    assert asked[-1].startswith(
        "Retry 25 failed or cancelled (not retried yet) executions of the 25 matching"
    )
    _until(lambda: _count(http, **match)["retryable"] == 0)
    retried = [http.get("/api/v1/executions/get", params={"id": i}).json() for i in made]
    assert all(isinstance(x.get("retried_as"), str) for x in retried)
    # Nothing left to do: said, without asking.
    page.click("button[data-bulk=retry]")
    page.wait_for_function(
        "document.querySelector('#bulk-say').textContent.startsWith('Nothing to retry')"
    )
    assert len(asked) == 3
