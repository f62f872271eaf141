"""Every view says when, what and why: times carry their date when they are not today's
(and how long ago on a tooltip or beside), an event's time is never cut, a list row says
what the execution is beside its id, a failure shows its code, its sentence, the exception
the worker named and what to do, and an oldest wait ticks only for a wait there is."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from tests.api.conftest import ApiProcess, start, wait_final
from tests.console.conftest import screenshot

pytestmark = [pytest.mark.process, pytest.mark.slow]

ZONE = "Asia/Tokyo"
"""The browser's time zone in the tests that compare times: not the machine's, not UTC."""
OTHER_DAY = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d$")
TODAY = re.compile(r"^\d\d:\d\d:\d\d\.\d{3}$")
NOT_CUT = """sel => [...document.querySelectorAll(sel)]
    .filter(c => c.scrollWidth > c.clientWidth).map(c => c.textContent)"""


@pytest.fixture
def two_days_on(browser: Any) -> Iterator[Any]:
    """A tab in `ZONE` whose clock says two days later than now (timers run as ever)."""
    context = browser.new_context(viewport={"width": 1280, "height": 860}, timezone_id=ZONE)
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda exc: errors.append(str(exc)))
    tab.set_default_timeout(15_000)
    tab.clock.set_fixed_time(datetime.now(UTC) + timedelta(days=2))
    yield tab
    context.close()
    assert not errors, f"the page raised: {errors}"


def local(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00")).astimezone(ZoneInfo(ZONE))


def test_the_one_time_formatter_dates_other_days_and_says_how_long_ago(
    page: Any, console: ApiProcess
) -> None:
    page.goto(console.url + "/start")
    page.wait_for_selector("main[data-loaded]")
    shown = page.evaluate(
        """async () => {
        const {clock, ago} = await import("/console/app.js");
        const at = (...parts) => new Date(...parts).toISOString();
        const now = new Date(2026, 11, 7, 21, 8, 30).getTime();
        return [clock(at(2026, 11, 7, 21, 8, 6, 845), now), clock(at(2026, 11, 7, 0, 0, 0, 7), now),
                clock(at(2026, 11, 6, 23, 59, 59, 5), now), clock(at(2026, 11, 8, 0, 0, 0, 1), now),
                clock(at(2025, 0, 2, 3, 4, 5), now),
                ago(at(2026, 11, 7, 21, 8, 28), now), ago(at(2026, 11, 7, 21, 8, 6), now),
                ago(at(2026, 11, 7, 21, 5, 0), now), ago(at(2026, 11, 6, 23, 0, 0), now),
                ago(at(2026, 11, 1), now), ago(at(2026, 11, 7, 21, 18, 30), now)];
    }"""
    )
    assert shown == [
        "21:08:06.845", "00:00:00.007",  # today's: the time to the millisecond
        "2026-12-06 23:59:59", "2026-12-08 00:00:00", "2025-01-02 03:04:05",  # others: dated
        "just now", "24 s ago", "3 min ago", "22 h ago", "6 days ago", "in 10 min",
    ]  # fmt: skip


def test_a_list_row_says_what_it_is_and_a_failure_says_why(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    failed = start(http, "executions.demonstrate", steps=3, fail_at=2, delay_ms=100)
    wait_final(http, failed["id"])
    slept = start(http, "tests.login", user="ada", token="hunter2-token")
    wait_final(http, slept["id"])

    page.goto(f"{console.url}/executions/{failed['id']}")
    page.wait_for_selector("#x-error")
    page.wait_for_selector('#x-live[data-state="ended"]')
    error = page.text_content("#x-error") or ""
    assert error.startswith("internal: the capability failed unexpectedly")
    assert page.text_content("#x-exception") == (
        "Exception DemonstrationFailure: demonstration failed at step 2 as asked"
    )
    assert f"Suggestion: search the server's output for execution_id={failed['id']}" in error
    assert page.text_content("#x-what") == " · Demonstrate an execution · steps=3"
    # The events' time cells hold the whole time.
    page.wait_for_function("() => document.querySelectorAll('#x-events tr').length >= 10")
    times = page.eval_on_selector_all(
        "#x-events td:nth-child(2)", "cs => cs.map(c => c.textContent)"
    )
    assert times and all(TODAY.match(t) for t in times), times
    assert page.evaluate(NOT_CUT, "#x-events td:nth-child(2), #x-page td:nth-child(2)") == []
    screenshot(page, "failed")

    page.goto(console.url + "/")
    page.wait_for_selector("main[data-loaded]")
    row = f'tr[data-id="{failed["id"]}"]'
    assert page.text_content(f"{row} a") == failed["id"].rsplit("-", 1)[1]
    assert page.get_attribute(f"{row} a", "title") == failed["id"]
    assert page.text_content(f"{row} .what") == " Demonstrate an execution · steps=3"
    assert page.text_content(f"{row} .why") == (
        "internal: DemonstrationFailure: demonstration failed at step 2 as asked"
    )
    assert page.text_content(f'tr[data-id="{slept["id"]}"] .what') == " Use a secret · user=ada"
    created = page.text_content(f"{row} td:nth-child(5)") or ""
    assert TODAY.match(created), created


def test_another_days_times_carry_their_date_and_are_never_cut(
    two_days_on: Any, console: ApiProcess, http: httpx.Client
) -> None:
    page = two_days_on
    x = start(http, "executions.demonstrate", steps=3, log_lines=2)
    done = wait_final(http, x["id"])
    page.goto(console.url + "/")
    page.wait_for_selector(f'tr[data-id="{x["id"]}"]')
    created = page.text_content(f'tr[data-id="{x["id"]}"] td:nth-child(5)')
    assert created == local(done["created_at"]).strftime("%Y-%m-%d %H:%M:%S")
    page.hover(f'tr[data-id="{x["id"]}"] time')
    title = page.get_attribute(f'tr[data-id="{x["id"]}"] time', "title") or ""
    assert title.startswith(done["created_at"]) and "(2 days ago)" in title, title

    page.goto(f"{console.url}/executions/{x['id']}")
    page.wait_for_selector("#x-output")
    page.wait_for_function("() => document.querySelectorAll('#x-page tr').length >= 10")
    last = done["last_sequence"]
    page.wait_for_selector(f'#x-events tr[data-seq="{last}"]')
    times = page.eval_on_selector_all(
        "#x-events td:nth-child(2), #x-log time", "cs => cs.map(c => c.textContent)"
    )
    assert times and all(OTHER_DAY.match(t) for t in times), times
    assert page.evaluate(NOT_CUT, "#x-events td:nth-child(2), #x-page td:nth-child(2)") == []
    assert "2 days ago" in (page.text_content("#x-facts") or "")


def test_an_oldest_wait_ticks_only_for_a_wait_the_report_showed(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    answer = http.post(
        "/api/v1/executions/start",
        json={"capability": "tests.stubborn", "delay_ms": 3_600_000},
    )
    assert answer.status_code == 200, answer.text
    later = answer.json()
    try:
        page.goto(console.url + "/queue")
        row = '#q-backlog tr[data-capability="tests.stubborn"]'
        page.wait_for_selector(row)
        cells = lambda: page.eval_on_selector_all(f"{row} td", "cs => cs.map(c => c.textContent)")  # noqa: E731
        first = cells()
        # Waiting 0, held by nothing, no oldest wait, 1 delayed.
        assert first[1] == "0" and first[2] == "—" and first[3] == "—" and first[5] == "1", first
        time.sleep(2.5)  # two ticks of the page's second
        assert cells()[3] == "—"
    finally:
        http.post("/api/v1/executions/cancel", json={"id": later["id"]})
