"""The queue page is pushed, not polled: it reads `queue.show` again when the live channel
says an execution was created, queued, started or ended (a burst read once), on every
reconnect, and every ten seconds regardless (a worker's beats are not events), while the
ages it shows tick on in the page each second with no read.

These run against an API and a worker of their own whose lease is long (30 s), so that no
beat comes near it and the only reads are the ones the page chooses; the package's API,
with its 3 s lease, shows a killed worker turn silent (`test_pages`).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.api.conftest import ApiProcess, start, wait_final
from tests.console.conftest import CuttableProxy, api_and_worker

pytestmark = [pytest.mark.process, pytest.mark.slow]

PREFIX = "consolelive"
LONG_LEASE = {"MAJORDOMUS_LEASE_SECONDS": "30"}
SAFETY_SECONDS = 10
"""The page's QUEUE_SAFETY_MS: it reads the report at least this often."""


@pytest.fixture(scope="module")
def quiet(console_redis_url: str) -> Iterator[ApiProcess]:
    """An API and one worker with a 30 s lease, on a prefix of their own."""
    with api_and_worker(console_redis_url, PREFIX, **LONG_LEASE) as server:
        yield server


class Reads:
    """The page's requests of `queue.show`, as the browser sends them."""

    def __init__(self, page: Any) -> None:
        self.times: list[float] = []
        page.on("request", self._seen)

    def _seen(self, request: Any) -> None:
        if request.url.split("?")[0].endswith("/api/v1/queue"):
            self.times.append(time.monotonic())

    def since(self, moment: float) -> int:
        return sum(1 for t in self.times if t >= moment)


def beat_age(page: Any) -> float:
    return float(page.text_content("#q-workers tr[data-worker] td.age").split()[0])


def test_the_queue_page_reads_the_report_when_something_happens_not_every_second(
    page: Any, quiet: ApiProcess
) -> None:
    reads = Reads(page)
    page.goto(quiet.url + "/queue")
    page.wait_for_selector("#q-workers tr[data-worker]")
    page.wait_for_selector('main[data-live="live"]')

    # Idle: at most the safety read in three seconds, and the beat age ticks on meanwhile.
    idle = time.monotonic()
    before = beat_age(page)
    time.sleep(3)
    idle_reads = reads.since(idle)
    assert idle_reads <= 1, f"{idle_reads} reads of queue.show in 3 idle seconds"
    if idle_reads == 0:
        assert beat_age(page) - before >= 2, "the beat age did not tick on in the page"

    # An execution started: it shows at once, running on the worker, and goes when it ends.
    with quiet.client() as http:
        began = time.monotonic()
        x = start(http, "tests.sleepy", seconds=1)
        page.wait_for_selector(f'#q-running li[data-id="{x["id"]}"]', timeout=5000)
        shown = time.monotonic() - began
        page.wait_for_selector(
            f'#q-running li[data-id="{x["id"]}"]', state="detached", timeout=8000
        )
        ended = time.monotonic() - began
        wait_final(http, x["id"])
        # Its progress moves in place, from the channel's events, with no read for them.
        demo = start(http, "executions.demonstrate", steps=5, delay_ms=300)
        bar = f'#q-running li[data-id="{demo["id"]}"] progress'
        page.wait_for_function(f"() => +(document.querySelector('{bar}') || {{}}).value >= 1")
        moving = time.monotonic()
        page.wait_for_function(f"() => +document.querySelector('{bar}').value >= 4")
        moving_reads = reads.since(moving)
        wait_final(http, demo["id"])
        # A backlog: one at a time, so the second waits, and the page says so.
        serial = [start(http, "tests.serial", seconds=1) for _ in range(2)]
        page.wait_for_selector('#q-backlog tr[data-capability="tests.serial"]', timeout=5000)
        for s in serial:
            wait_final(http, s["id"])
    busy_reads = reads.since(began)
    assert moving_reads <= 1, f"{moving_reads} reads while only progress moved"
    assert shown < 3, f"a started execution showed after {shown:.1f} s"
    assert ended < 6, f"an ended execution went after {ended:.1f} s"
    # Each burst (created, queued, started; then its end) costs a read or two, not one a second.
    assert busy_reads <= 14, f"{busy_reads} reads in {time.monotonic() - began:.1f} s"


def test_the_queue_page_reads_again_after_a_dropped_connection(
    page: Any, quiet: ApiProcess
) -> None:
    proxy = CuttableProxy(quiet.port)
    try:
        page.goto(proxy.url + "/queue")
        page.wait_for_selector("#q-workers tr[data-worker]")
        page.wait_for_selector('main[data-live="live"]')
        proxy.cut(down_seconds=1.0)
        page.wait_for_selector('main[data-live="reconnecting"]')
        cut = time.monotonic()
        with quiet.client() as http:
            x = start(http, "tests.sleepy", seconds=20)  # while the page is cut off
            page.wait_for_selector(f'#q-running li[data-id="{x["id"]}"]', timeout=8000)
            back = time.monotonic() - cut
            assert page.get_attribute("main", "data-live") == "live"
            http.post("/api/v1/executions/cancel", json={"id": x["id"]})
            wait_final(http, x["id"])
        print(f"shown {back:.1f} s after the cut")
        assert back < SAFETY_SECONDS, f"shown {back:.1f} s after the cut"
    finally:
        proxy.close()
