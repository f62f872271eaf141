"""The charts page (/charts) in a real browser: it draws what `executions.stats` answers
(every capability together and each), a capability's own charts and the last day are a
click away, and it loads nothing from elsewhere, while no other page loads its script.

The figure for the docs (`docs/console-charts.png`) is taken on an hour of the roll-up
written through its own Lua functions (`lua/rollup.lua`) minute by minute, with the last
minutes' executions real: an hour of real traffic would make the test an hour long.
"""

from __future__ import annotations

import math
import random
import time
from typing import Any

import httpx
import pytest
import redis as redis_sync

from majordomus.config import Settings
from majordomus.store.keys import ROLLUP_STEPS, Keys
from majordomus.store.scripts import LUA_DIR, with_constants
from tests.api.conftest import ApiProcess, start, wait_final
from tests.console.conftest import api_and_worker, screenshot

pytestmark = [pytest.mark.process, pytest.mark.slow]


def run_some(http: httpx.Client, ok: int, failing: int) -> None:
    ids = [start(http, "tests.noop")["id"] for _ in range(ok)]
    ids += [start(http, "tests.boom")["id"] for _ in range(failing)]
    for x in ids:
        wait_final(http, x)


def stats(http: httpx.Client, **query: str) -> dict[str, Any]:
    response = http.get("/api/v1/executions/stats", params=query)
    assert response.status_code == 200, response.text
    return response.json()


def drawn(page: Any, figure: str) -> dict[str, int]:
    """What a throughput chart under `figure` (a selector) draws: its bars and their sums."""
    return page.eval_on_selector_all(
        f"{figure} [data-chart=throughput] svg .bars g",
        """gs => ({bars: gs.length, ended: gs.reduce((a, g) => a + +g.dataset.ended, 0),
                   failed: gs.reduce((a, g) => a + +g.dataset.failed, 0)})""",
    )


def test_the_page_draws_every_capability_and_each_as_the_api_answers(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    run_some(http, ok=5, failing=2)
    page.goto(f"{console.url}/charts")
    page.wait_for_selector('main[data-loaded="true"] #ch-overall svg')
    answer = stats(http)
    overall = answer["overall"]
    points = [p for p in overall["points"] if p["succeeded"] + p["failed"] + p["cancelled"]]
    assert drawn(page, "#ch-overall") == {
        "bars": len(points),
        "ended": sum(p["succeeded"] + p["failed"] + p["cancelled"] for p in points),
        "failed": overall["total"]["failed"],
    }
    assert overall["total"]["failed"] >= 2 and overall["total"]["succeeded"] >= 5
    totals = page.inner_text("#ch-overall .totals")
    assert f"failed\n{overall['total']['failed']}" in totals
    # The percentiles' lines are drawn (a path with at least one point), one per series.
    series = page.eval_on_selector_all(
        "#ch-overall [data-chart=times] path[data-series]", "ps => ps.map(p => p.dataset.series)"
    )
    assert series == ["wait_p50_ms", "wait_p95_ms", "duration_p50_ms", "duration_p95_ms"]
    shown = page.eval_on_selector_all(
        "#ch-capabilities [data-capability]", "s => s.map(e => e.dataset.capability)"
    )
    assert shown == [s["capability"] for s in answer["capabilities"]]
    assert {"tests.noop", "tests.boom"} <= set(shown)
    boom = next(s for s in answer["capabilities"] if s["capability"] == "tests.boom")
    assert drawn(page, '[data-capability="tests.boom"]')["failed"] == boom["total"]["failed"]


def test_a_capability_and_the_last_day_are_a_click_away(
    page: Any, console: ApiProcess, http: httpx.Client
) -> None:
    run_some(http, ok=1, failing=1)
    page.goto(f"{console.url}/charts")
    page.click('[data-capability="tests.boom"] h2 a')
    page.wait_for_url("**/charts?span=hour&capability=tests.boom")
    page.wait_for_selector('main[data-loaded="true"] #ch-overall svg')
    assert page.inner_text("h1") == "Charts: tests.boom"
    assert page.locator("#ch-capabilities [data-capability]").count() == 0
    assert (
        drawn(page, "#ch-overall")["failed"]
        == stats(http, capability="tests.boom")["overall"]["total"]["failed"]
    )
    page.click("text=Last day")
    page.wait_for_url("**/charts?span=day&capability=tests.boom")
    page.wait_for_selector('main[data-loaded="true"] #ch-overall svg')
    day = stats(http, span="day", capability="tests.boom")["overall"]
    assert len(day["points"]) == 96
    assert drawn(page, "#ch-overall")["ended"] == sum(
        p["failed"] + p["succeeded"] + p["cancelled"] for p in day["points"]
    )
    page.go_back()
    page.wait_for_url("**/charts?span=hour&capability=tests.boom")


def test_only_the_charts_page_loads_its_script_and_nothing_comes_from_elsewhere(
    page: Any, console: ApiProcess
) -> None:
    asked: list[str] = []
    page.on("request", lambda r: asked.append(r.url))
    page.goto(f"{console.url}/")
    page.wait_for_selector("main[data-page=executions]")
    assert not [u for u in asked if u.endswith("/charts.js")]
    page.click("nav >> text=Charts")
    page.wait_for_selector('main[data-loaded="true"] #ch-overall svg')
    assert [u for u in asked if u.endswith("/console/charts.js")]
    assert all(u.startswith(console.url) for u in asked), asked


# -- the figure ------------------------------------------------------------------------------

SEED = """
for i = 1, #ARGV, 5 do
  rollup_add(tonumber(ARGV[i]), rollup_field(ARGV[i + 1], tonumber(ARGV[i + 2]), ARGV[i + 3]), tonumber(ARGV[i + 4]))
end
return 1
"""


def seed_an_hour(redis_url: str, prefix: str) -> None:
    """An hour of traffic written into the roll-up through its own Lua functions: a steady
    no-op capability, a slower report with a failure now and then, and a burst twenty
    minutes ago that made starts wait."""
    rng = random.Random(36)
    base = Keys(prefix).partitions[0].base
    text = (LUA_DIR / "rollup.lua").read_text() + SEED
    keep_ms = Settings().rollup_keep_seconds * 1000
    script = with_constants(
        text, {"BASE": base, "ROLLUP_STEPS": ROLLUP_STEPS, "ROLLUP_KEEP_MS": keep_ms}
    )
    client = redis_sync.Redis.from_url(redis_url)
    now_minute = int(time.time()) // 60
    for back in range(60, 1, -1):
        at = (now_minute - back) * 60_000 + 30_000
        burst = 18 <= back <= 22
        args: list[Any] = []
        for cap, per_minute, took, fails in (
            ("tests.noop", 40, 4, 0.0),
            ("tests.boom", 12, 900, 0.08),
        ):
            n = int(
                per_minute * (3 if burst and cap == "tests.noop" else 1) * rng.uniform(0.7, 1.3)
            )
            for _ in range(n):
                wait = rng.lognormvariate(math.log(2500 if burst else 3), 0.6)
                duration = rng.lognormvariate(math.log(took), 0.5)
                kind = "f" if rng.random() < fails else "s"
                args += [at, "w", wait, cap, 1, at, kind, duration, cap, 1]
        client.eval(script, 0, *args)
    client.close()


def test_the_figure_of_an_hour(browser: Any, console_redis_url: str) -> None:
    prefix = "charts"
    with api_and_worker(console_redis_url, prefix=prefix) as server:
        seed_an_hour(console_redis_url, prefix)
        with server.client() as http:
            run_some(http, ok=20, failing=2)
        context = browser.new_context(viewport={"width": 1280, "height": 1100})
        page = context.new_page()
        try:
            page.goto(f"{server.url}/charts")
            page.wait_for_selector('main[data-loaded="true"] [data-capability="tests.boom"] svg')
            bars = drawn(page, "#ch-overall")["bars"]
            assert bars >= 59  # every seeded minute, and the real ones
            screenshot(page, "charts", full_page=True)
        finally:
            context.close()
