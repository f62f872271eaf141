"""The console in a real browser (headless Chromium), against a real API, worker and Redis:
what a person does in it and sees.

Each test drives the page as a person would (the form, the buttons, a reload, a lost
network) and compares what the page shows with what the API answers.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest

from majordomus.engine import Engine
from majordomus.registry import REGISTRY
from majordomus.store.connect import connect
from tests.api.conftest import ApiProcess, start, wait_final
from tests.conftest import make_settings
from tests.console.conftest import (
    ConsoleWorker,
    CuttableProxy,
    console_api,
    forget_prefix,
    screenshot,
)

pytestmark = [pytest.mark.process, pytest.mark.slow]

EXECUTION_URL = re.compile(r".*/executions/(x-[0-9TZ]+-[0-9a-f]{8})$")


def shown_sequences(page: Any) -> list[int]:
    """The sequences of the events the page shows, in the order it shows them."""
    return page.eval_on_selector_all("#x-events tr", "rows => rows.map(r => +r.dataset.seq)")


def api_sequences(http: httpx.Client, execution_id: str) -> list[int]:
    page = http.get("/api/v1/executions/events", params={"id": execution_id}).json()
    return [e["sequence"] for e in page["events"]]


def last_shown(page: Any, at_least: int, timeout: float = 15_000) -> None:
    page.wait_for_function(
        f"() => +(document.querySelector('main').dataset.lastSequence || 0) >= {at_least}",
        timeout=timeout,
    )


def test_a_demonstration_started_from_the_form_moves_live_and_a_reload_repeats_nothing(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    page.goto(console.url + "/start?capability=executions.demonstrate")
    page.fill("#field-steps", "8")
    page.fill("#field-delay_ms", "300")
    page.fill("#field-log_lines", "2")
    assert page.get_attribute("#field-fail_at", "type") == "number"
    screenshot(page, "start")
    page.click("#s-submit")
    page.wait_for_url(EXECUTION_URL)
    execution_id = EXECUTION_URL.match(page.url)[1]  # type: ignore[index]

    # Steps and the bar move while it runs, with no reload.
    page.wait_for_selector('#x-steps [data-step="step-2"].step-completed')
    first = float(page.get_attribute("#x-progress progress", "value") or 0)
    page.wait_for_selector('#x-steps [data-step="step-4"].step-completed')
    later = float(page.get_attribute("#x-progress progress", "value") or 0)
    assert 2 <= first < later < 8
    assert page.text_content("#x-state") == "running"
    assert page.text_content("#x-progress-message").startswith("step ")
    screenshot(page, "execution")
    before = shown_sequences(page)

    page.reload()
    page.wait_for_selector("#x-output")
    page.wait_for_selector('#x-live[data-state="ended"]')
    expected = api_sequences(http, execution_id)
    assert shown_sequences(page) == expected == list(range(1, len(expected) + 1))
    assert before == expected[: len(before)]
    logs = page.eval_on_selector_all("#x-log .line", "lines => lines.map(l => l.textContent)")
    assert logs == [f"step {i}: line {n} of 2" for i in range(1, 9) for n in (1, 2)]
    assert page.text_content("#x-state") == "succeeded"

    # On a phone: one column, nothing wider than the screen.
    page.set_viewport_size({"width": 390, "height": 844})
    assert page.evaluate("document.documentElement.scrollWidth") <= 390
    screenshot(page, "phone")


def test_a_cut_connection_resumes_after_the_last_event_it_had(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    x = start(http, "executions.demonstrate", steps=16, delay_ms=300)
    proxy = CuttableProxy(console.port)
    try:
        page.goto(f"{proxy.url}/executions/{x['id']}")
        last_shown(page, 12)
        proxy.cut(down_seconds=1.0)  # the execution goes on meanwhile
        page.wait_for_selector('#x-live[data-state="reconnecting"]')
        cut_at = int(page.get_attribute("main", "data-last-sequence") or 0)
        page.wait_for_selector("#x-output", timeout=20_000)
        last_shown(page, api_sequences(http, x["id"])[-1])
        expected = api_sequences(http, x["id"])
        assert shown_sequences(page) == expected == list(range(1, len(expected) + 1))
        assert cut_at < expected[-1]
    finally:
        proxy.close()


def test_cancel_a_running_execution_and_see_the_outcome(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    x = start(http, "tests.sleepy", seconds=30)
    page.goto(f"{console.url}/executions/{x['id']}")
    page.wait_for_selector("#x-state .state-running")
    page.click("#x-cancel")
    page.wait_for_selector('#x-say[data-outcome="requested"]')
    assert page.text_content("#x-say").startswith("Cancel requested")
    page.wait_for_selector("#x-state .state-cancelled")
    assert "cancelled" in page.text_content("#x-error")
    assert page.is_hidden("#x-cancel")
    assert wait_final(http, x["id"])["state"] == "cancelled"


def test_run_again_repeats_the_input_unless_it_holds_a_secret(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    plain = start(http, "executions.demonstrate", steps=3, log_lines=4)
    wait_final(http, plain["id"])
    page.goto(f"{console.url}/executions/{plain['id']}")
    page.wait_for_selector("#x-output")
    page.click("#x-again")
    page.wait_for_url(lambda url: EXECUTION_URL.match(url) is not None and plain["id"] not in url)
    again = http.get("/api/v1/executions/get", params={"id": EXECUTION_URL.match(page.url)[1]})  # type: ignore[index]
    assert again.json()["input"] == plain["input"]

    secret = start(http, "tests.login", user="ada", token="hunter2-token", pin="1234")
    wait_final(http, secret["id"])
    page.goto(f"{console.url}/executions/{secret['id']}")
    page.wait_for_selector("#x-output")
    assert "hunter2" not in page.content()
    page.click("#x-again")
    page.wait_for_selector("#field-token")
    assert page.url.endswith(f"/start?capability=tests.login&from={secret['id']}")
    assert page.input_value("#field-user") == "ada"
    for name in ("token", "pin"):
        assert page.get_attribute(f"#field-{name}", "type") == "password"
        assert page.input_value(f"#field-{name}") == ""
    assert page.get_attribute("#field-password", "type") == "text"  # a name decides nothing
    page.goto(console.url + "/")
    page.wait_for_selector("main[data-loaded]")
    screenshot(page, "executions")


def test_every_control_has_a_label_and_the_keyboard_reaches_it(
    page: Any, console: ApiProcess
) -> None:
    unlabelled = """() => [...document.querySelectorAll('main input, main select, main textarea')]
        .filter(e => !e.labels.length && !e.getAttribute('aria-label')).map(e => e.id || e.name)"""
    for path in ("/", "/queue", "/start?capability=tests.login"):
        page.goto(console.url + path)
        page.wait_for_selector("main[data-loaded]")
        assert page.evaluate(unlabelled) == [], path
    page.keyboard.press("Tab")
    assert page.evaluate("document.activeElement.className") == "skip"
    # The start form, by keyboard alone: type into the fields, Enter submits.
    page.focus("#field-user")
    page.keyboard.type("grace")
    page.keyboard.press("Tab")
    page.keyboard.type("a-token")
    page.keyboard.press("Enter")
    page.wait_for_url(EXECUTION_URL)
    page.wait_for_selector("#x-output")
    assert "a-token" not in page.text_content("#x-input")


def test_the_queue_shows_a_backlog_a_worker_and_a_killed_worker_silent(
    page: Any, console: ApiProcess, http: httpx.Client, console_redis_url: str
) -> None:
    serial = [start(http, "tests.serial", seconds=3) for _ in range(3)]
    page.goto(console.url + "/queue")
    row = page.wait_for_selector('#q-backlog tr[data-capability="tests.serial"]')
    assert int(row.query_selector("td:nth-child(2)").text_content()) >= 1
    # What waits, and why: one of a slot runs, the others are held by its max_concurrency.
    page.wait_for_function(
        """() => /[12] by its max_concurrency/.test(document.querySelector(
            '#q-backlog tr[data-capability="tests.serial"] td.held').textContent)"""
    )
    page.wait_for_selector("#q-running [data-worker] li")
    extra = ConsoleWorker(console_redis_url)
    try:
        extra.wait_reported(console_redis_url, count=2)
        pid = extra.process.pid
        page.wait_for_selector(f'#q-workers tr[data-pid="{pid}"]:not(.silent)')
        screenshot(page, "queue")
        os.kill(pid, signal.SIGKILL)
        extra.process.wait(5)
        page.wait_for_selector(f'#q-workers tr.silent[data-pid="{pid}"]', timeout=10_000)
        assert "silent" in page.text_content(f'#q-workers tr[data-pid="{pid}"]')
    finally:
        extra.stop()
        for x in serial:
            http.post("/api/v1/executions/cancel", json={"id": x["id"]})
    page.wait_for_selector('#q-failures tr[data-code="cancelled"]', timeout=10_000)


def test_with_a_token_the_console_asks_once_and_follows_live(
    browser: Any, console_redis_url: str, console: ApiProcess
) -> None:
    locked = console_api(console_redis_url, MAJORDOMUS_API_TOKEN="s3cret").start()
    context = browser.new_context()
    page = context.new_page()
    try:
        page.goto(locked.url + "/")
        page.wait_for_selector("#token-form:not([hidden])")
        page.fill("#token-input", "s3cret")
        page.click("#token-form button[type=submit]")
        page.wait_for_selector("main[data-loaded]")
        with locked.client(headers={"Authorization": "Bearer s3cret"}) as client:
            x = start(client, "executions.demonstrate", steps=4, delay_ms=200)
            # The list hears of it on the live channel (read with fetch, for the header).
            page.wait_for_selector(f'tr[data-id="{x["id"]}"]')
            # ...and its state moves on in place, without a reload.
            page.wait_for_selector(f'tr[data-id="{x["id"]}"] .state-succeeded')
            page.click(f'a[href="/executions/{x["id"]}"]')
            page.wait_for_selector("#x-output")
            last_shown(page, api_sequences(client, x["id"])[-1])
            assert shown_sequences(page) == api_sequences(client, x["id"])
        page.reload()  # kept for the tab: no question again
        page.wait_for_selector("#x-output")
        assert page.is_hidden("#token-form")
    finally:
        context.close()
        locked.close()


async def _seed(redis_url: str, prefix: str, count: int) -> list[str]:
    """`count` queued executions under `prefix` (every hundredth a demonstration)."""
    settings = make_settings(redis_url, key_prefix=prefix)
    client = connect(redis_url, arq=True)
    engine = Engine(client, REGISTRY, settings)
    ids: list[str] = []
    try:
        for begin in range(0, count, 500):
            started = await asyncio.gather(
                *(
                    engine.start("executions.demonstrate" if i % 100 == 0 else "tests.noop", {})
                    for i in range(begin, min(count, begin + 500))
                )
            )
            ids += [s.id for s in started]
    finally:
        await client.aclose()
    return ids


def test_a_history_of_ten_thousand_executions_pages_and_filters(
    page: Any, console_redis_url: str
) -> None:
    prefix = "console10k"
    forget_prefix(console_redis_url, prefix)
    with ThreadPoolExecutor(1) as pool:  # Playwright's loop runs in this thread
        began = time.monotonic()
        ids = pool.submit(asyncio.run, _seed(console_redis_url, prefix, 10_000)).result()
        print(f"seeded 10,000 executions in {time.monotonic() - began:.1f} s")
    big = console_api(console_redis_url, prefix=prefix).start()
    try:
        began = time.monotonic()
        page.goto(big.url + "/")
        page.wait_for_selector("main[data-loaded]")
        shown_in = time.monotonic() - began
        assert page.text_content("#counts") == "10000 active · 10000 queued"
        assert page.text_content("#list-summary").startswith("1–50 of the newest 200")
        first = page.eval_on_selector_all("tbody tr[data-id]", "rs => rs.map(r => r.dataset.id)")
        assert len(first) == 50 and set(first) <= set(ids[-500:])  # the newest first
        page.click("a[rel=next]")
        page.wait_for_url(re.compile(r"/\?page=2$"))
        page.wait_for_selector("main[data-loaded]")
        second = page.eval_on_selector_all("tbody tr[data-id]", "rs => rs.map(r => r.dataset.id)")
        assert len(second) == 50 and not set(first) & set(second)
        assert page.text_content("#list-summary").startswith("51–100 of the newest 200")
        # Past the 200 one answer holds: the window before the last execution of this one.
        page.goto(big.url + "/?page=4")
        page.wait_for_selector("main[data-loaded]")
        fourth = page.eval_on_selector_all("tbody tr[data-id]", "rs => rs.map(r => r.dataset.id)")
        page.click("a[rel=next]")
        page.wait_for_url(re.compile(rf"/\?before={fourth[-1]}$"))
        page.wait_for_selector("main[data-loaded]")
        fifth = page.eval_on_selector_all("tbody tr[data-id]", "rs => rs.map(r => r.dataset.id)")
        with big.client() as client:
            newest = [
                x["id"] for x in client.get("/api/v1/executions").json()["executions"]
            ]
            older = client.get("/api/v1/executions", params={"before": newest[-1]}).json()
        assert fourth == newest[150:200]
        assert fifth == [x["id"] for x in older["executions"][:50]]
        assert not set(fifth) & set(newest)
        assert page.text_content("#list-summary").startswith("1–50 of the 200 created before")
        page.select_option("#f-capability", "executions.demonstrate")
        page.click("form[aria-label='Filter executions'] button")
        page.wait_for_url(re.compile(r"/\?capability=executions.demonstrate$"))
        page.wait_for_selector("main[data-loaded]")
        shown = page.eval_on_selector_all(
            "tbody tr[data-id] td:nth-child(2)", "cs => cs.map(c => c.textContent)"
        )
        assert set(shown) == {"executions.demonstrate"}
        assert page.text_content("#list-summary").startswith("1–50 of the newest 100")
        page.fill("#f-id", ids[0])
        page.press("#f-id", "Enter")
        page.wait_for_selector("#x-facts")
        assert shown_in < 5, f"the list took {shown_in:.1f} s"
    finally:
        big.close()
        forget_prefix(console_redis_url, prefix)


FORM_SCHEMA = {
    "type": "object",
    "properties": {
        "mode": {"enum": ["fast", "careful"], "type": "string", "default": "careful"},
        "dry_run": {"type": "boolean", "default": False, "description": "Change nothing."},
        "count": {"type": "integer", "minimum": 1, "default": 2},
        "ratio": {"type": ["number", "null"], "default": None},
        "who": {"$ref": "#/$defs/Name"},
        "key": {"type": "string", "x-majordomus-sensitive": True},
        "tags": {"type": "array", "items": {"type": "string"}, "default": []},
    },
    "required": ["who", "key"],
    "$defs": {"Name": {"type": "string", "description": "Who asks."}},
}


def test_the_start_form_is_generated_from_the_input_schema(page: Any, console: ApiProcess) -> None:
    page.goto(console.url + "/start")
    page.wait_for_selector("main[data-loaded]")
    built = page.evaluate(
        """async (schema) => {
        const {buildForm} = await import("/console/form.js");
        const box = document.createElement("div");
        document.querySelector("main").append(box);
        const form = buildForm(box, schema, {who: "ada", key: "\u00abredacted\u00bb", tags: ["a"]});
        const kinds = {};
        for (const e of box.querySelectorAll("input, select, textarea")) kinds[e.name] = e.type;
        box.querySelector("#field-key").value = "new-secret";
        box.querySelector("#field-ratio").value = "0.5";
        return {kinds, hints: box.querySelector("#field-dry_run-hint").textContent,
                mode: box.querySelector("#field-mode").value, input: form.collect()};
    }""",
        FORM_SCHEMA,
    )
    assert built["kinds"] == {
        "mode": "select-one",
        "dry_run": "checkbox",
        "count": "number",
        "ratio": "number",
        "who": "text",
        "key": "password",
        "tags": "textarea",
    }
    assert built["hints"] == "Change nothing."
    assert built["mode"] == '"careful"'  # the default chosen
    assert built["input"] == {
        "mode": "careful",
        "dry_run": False,
        "count": 2,
        "ratio": 0.5,
        "who": "ada",
        "key": "new-secret",
        "tags": ["a"],
    }
