"""The console's actions beyond one execution, in a real browser against a real API, worker
and Redis: a worker drained and undrained from the queue page, schedules listed with their
coming ticks, paused, resumed and run now, and episodes listed with their executions.
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from tests.api.conftest import ApiProcess
from tests.conftest import make_settings
from tests.console.conftest import PREFIX, ConsoleWorker, screenshot

pytestmark = [pytest.mark.process, pytest.mark.slow]


def accept_dialogs(page: Any) -> list[str]:
    """Accept every confirmation the page asks, keeping their texts."""
    asked: list[str] = []

    def accept(dialog: Any) -> None:
        asked.append(dialog.message)
        dialog.accept()

    page.on("dialog", accept)
    return asked


def test_the_queue_page_drains_and_undrains_a_worker(
    page: Any, console: ApiProcess, http: httpx.Client, console_redis_url: str
) -> None:
    extra = ConsoleWorker(console_redis_url)
    try:
        extra.wait_reported(console_redis_url, count=2)
        pid = extra.process.pid
        asked = accept_dialogs(page)
        page.goto(console.url + "/queue")
        row = f'#q-workers tr[data-pid="{pid}"]'
        page.click(f'{row} button[data-drain="drain"]')
        page.wait_for_selector(f'{row}[data-draining="true"]')
        assert "draining" in page.text_content(row)
        assert asked and asked[0].startswith("Drain ")
        worker_id = page.get_attribute(row, "data-worker")
        ready = http.get("/api/v1/ready").json()
        assert ready["draining"] == [worker_id]
        page.click(f'{row} button[data-drain="undrain"]')
        page.wait_for_selector(f'{row}[data-draining="false"] button[data-drain="drain"]')
        assert http.get("/api/v1/ready").json()["draining"] == []
    finally:
        extra.stop()


def test_the_schedules_page_lists_pauses_resumes_and_runs_now(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    made = http.post(
        "/api/v1/schedules/create",
        json={"capability": "tests.noop", "cron": "0 0 1 1 *", "name": "console"},
    )
    assert made.status_code == 200, made.text
    schedule_id = made.json()["id"]
    row = f'#sc-list tr[data-schedule="{schedule_id}"]'
    try:
        page.goto(console.url + "/schedules")
        page.wait_for_selector(f'{row}[data-paused="false"]')
        assert page.eval_on_selector_all(f"{row} td.ticks div", "ds => ds.length") == 5
        assert "0 0 1 1 *" in page.text_content(row)
        screenshot(page, "schedules")

        page.click(f'{row} button[data-action="pause"]')
        page.wait_for_selector(f'{row}[data-paused="true"]')
        assert http.get("/api/v1/schedules").json()["schedules"][0]["paused"] is True
        page.click(f'{row} button[data-action="resume"]')
        page.wait_for_selector(f'{row}[data-paused="false"]')

        page.click(f'{row} button[data-action="run"]')
        started = page.wait_for_selector("#sc-say a.mono")
        execution_id = started.text_content()
        snap = http.get("/api/v1/executions/get", params={"id": execution_id}).json()
        assert (snap["capability"], snap["schedule"]) == ("tests.noop", schedule_id)
        started.click()
        page.wait_for_url(f"**/executions/{execution_id}")
    finally:
        http.post("/api/v1/schedules/delete", json={"id": schedule_id})


async def _attach(redis_url: str, external_id: str, execution_id: str) -> None:
    """What an MCP connection's attach and start do to an episode (`api/mcp/server.py`)."""
    client = connect(redis_url, arq=True)
    engine = Engine(client, REGISTRY, make_settings(redis_url, key_prefix=PREFIX))
    try:
        await engine.episodes.attach(external_id, "console-test", "handle")
        await engine.episodes.note_execution(external_id, execution_id)
    finally:
        await client.aclose()


def test_the_episodes_page_lists_an_episode_and_its_executions(
    page: Any, console: ApiProcess, http: httpx.Client, console_redis_url: str
) -> None:
    response = http.post(
        "/api/v1/executions/start",
        json={"capability": "tests.noop", "input": {}, "episode": "thread-42"},
    )
    assert response.status_code == 200, response.text
    execution_id = response.json()["id"]
    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        pool.submit(asyncio.run, _attach(console_redis_url, "thread-42", execution_id)).result()
    try:
        page.goto(console.url + "/episodes")
        row = page.wait_for_selector('#ep-list tr[data-episode="thread-42"][data-state="open"]')
        assert "1 open" in page.text_content("#ep-summary")
        screenshot(page, "episodes")
        assert row.query_selector(f'a[href="/executions/{execution_id}"]')
        row.query_selector('a[href="/?episode=thread-42"]').click()
        page.wait_for_selector(f'main[data-page="executions"] tr[data-id="{execution_id}"]')
        assert page.input_value("#f-episode") == "thread-42"
    finally:
        http.post("/api/v1/episodes/detach", json={"external_id": "thread-42"})
