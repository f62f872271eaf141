"""Honest when stale: with the API gone, every live page says that its connection is lost
and since when, its counts say as of when, and its ages stop ticking; when the API is back
the banner goes and the page shows what happened meanwhile, read again.

These run against an API and a worker of their own (the test kills and restarts the API),
on a prefix of their own.
"""

from __future__ import annotations

import re
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import ApiProcess, start
from tests.console.conftest import api_and_worker

pytestmark = [pytest.mark.process, pytest.mark.slow]

PREFIX = "consolestale"
BANNER = "#stale:not([hidden])"
SINCE = re.compile(r"^Live updates lost since \d\d:\d\d:\d\d · (just now|\d+ s ago)\. Reconnecting")


@pytest.fixture
def own(console_redis_url: str) -> Iterator[ApiProcess]:
    with api_and_worker(console_redis_url, PREFIX) as server:
        yield server


def beat_age(page: Any) -> str:
    return page.text_content("#q-workers tr[data-worker] td.age") or ""


def test_a_lost_api_is_said_on_every_page_and_caught_up_when_it_returns(
    page: Any, own: ApiProcess
) -> None:
    queue = page.context.new_page()
    queue.set_default_timeout(15_000)
    queue_errors: list[str] = []
    queue.on("pageerror", lambda exc: queue_errors.append(str(exc)))
    page.goto(own.url + "/")
    page.wait_for_selector('main[data-live="live"]')
    queue.goto(own.url + "/queue")
    queue.wait_for_selector("#q-workers tr[data-worker]")
    queue.wait_for_selector('main[data-live="live"]')
    assert page.is_hidden("#stale") and queue.is_hidden("#stale")

    with own.client() as http:
        x = start(http, "tests.sleepy", seconds=4)
    began = time.monotonic()
    row = f'tr[data-id="{x["id"]}"]'
    page.wait_for_selector(f"{row} .state-running")
    page.wait_for_function(
        "() => document.getElementById('counts').textContent.startsWith('1 active')"
    )
    queue.wait_for_selector(f'#q-running li[data-id="{x["id"]}"]')

    own.stop(signal.SIGKILL)
    for tab in (page, queue):
        tab.wait_for_selector(BANNER, timeout=10_000)
        assert SINCE.match(tab.text_content("#stale") or ""), tab.text_content("#stale")
        assert tab.get_attribute("main", "data-connection") == "down"
    assert re.fullmatch(
        r"1 active · 0 queued \(as of \d\d:\d\d:\d\d\)", page.text_content("#counts") or ""
    )
    # Cut off, the ages stand still: the page cannot know what happened since.
    frozen = beat_age(queue)
    time.sleep(2.2)
    assert beat_age(queue) == frozen
    assert page.is_visible(f"{row} .state-running")  # still what the last read said

    # The execution ends while the API is away; the pages learn it when it is back.
    time.sleep(max(0.0, 4.5 - (time.monotonic() - began)))
    own.start()
    back = time.monotonic()
    page.wait_for_selector(f"{row} .state-succeeded", timeout=20_000)
    page.wait_for_selector("#stale", state="hidden")
    assert page.text_content("#counts") == "0 active · 0 queued"
    queue.wait_for_selector(f'#q-running li[data-id="{x["id"]}"]', state="detached", timeout=20_000)
    queue.wait_for_selector("#stale", state="hidden")
    assert queue.get_attribute("main", "data-connection") is None
    print(f"caught up {time.monotonic() - back:.1f} s after the API was back")
    # Live again, the ages tick again.
    ticking = beat_age(queue)
    time.sleep(2.2)
    assert beat_age(queue) != ticking
    assert not queue_errors, queue_errors
