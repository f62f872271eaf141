"""Scenario "console": the web console's figures, in headless Chromium against a real API,
worker and Redis.

- An execution's page with its 500 retained events: from navigation to the first contentful
  paint (the shell, before any answer: the baseline), and to the history shown (the page's
  own `console:history-shown` mark, set two frames after the last replayed event is in the
  DOM), the median of several loads, each in a fresh browser context (a first visit).
- Update latency while one execution (`bench.paced`) logs 1,000 lines a second, each line
  the wall-clock time it was made at, taken in the handler just before its append: a
  MutationObserver in the page takes `performance.timeOrigin + performance.now()` when the
  line's row is added to the DOM, and again at the next animation frame (on screen). The
  baseline is a bare `EventSource` on the same execution in a browser context of its own
  (its own renderer, on a JSON answer of the same origin), which only parses each event:
  the channel and the browser without the console's rendering. The page
  is at its 500-event cap before it opens, and it settles a second before the window.
- The script and style the page loads, in bytes as served (uncompressed) beside gzip's.

The browser is the machine's (`MAJORDOMUS_TEST_CHROMIUM`, else `/usr/bin/chromium`, with
the flags the console tests use), never a download; without it or without Playwright the
browser figures are left out and a note says so (the sizes need no browser).
"""

from __future__ import annotations

import asyncio
import gzip
import os
import time
from pathlib import Path
from typing import Any

import httpx

from bench.browser import CHROMIUM, CHROMIUM_ARGS
from bench.harness import (
    ROOT,
    Bench,
    Row,
    api_server,
    children,
    majordomus_worker,
    median,
    percentile,
    wait_for_api,
    wait_for_workers,
)

STATIC = ROOT / "api" / "console" / "static"

VIEWPORT = {"width": 1280, "height": 860}
RATE = 1000
"""Log lines a second the streaming execution makes."""
RETAINED = 500
SETTLE_SECONDS = 1.0

WATCH = """
window.__measure = false;
window.__dom = [];
window.__frame = [];
window.__raw = [];
const wall = () => performance.timeOrigin + performance.now();
new MutationObserver((records) => {
  if (!window.__measure) return;
  const stamps = [];
  for (const r of records) {
    if (!r.target || r.target.id !== "x-log") continue;
    for (const n of r.addedNodes) {
      const line = n.querySelector && n.querySelector(".line");
      const sent = line ? parseFloat(line.textContent) * 1000 : NaN;
      if (sent === sent) stamps.push(sent);
    }
  }
  if (!stamps.length) return;
  const now = wall();
  for (const s of stamps) window.__dom.push(now - s);
  requestAnimationFrame(() => { const t = wall(); for (const s of stamps) window.__frame.push(t - s); });
}).observe(document, {childList: true, subtree: true});
"""

RAW_LISTENER = """(id) => {
  window.__measure = false;
  window.__raw = [];
  const source = new EventSource("/events?execution=" + encodeURIComponent(id));
  source.addEventListener("execution.log", (m) => {
    if (!window.__measure) return;
    const sent = parseFloat(JSON.parse(m.data).data.message) * 1000;
    window.__raw.push(performance.timeOrigin + performance.now() - sent);
  });
  return new Promise((ready) => source.addEventListener("stream.ready", () => ready(true)));
}"""


def _kib(size: float) -> float:
    return size / 1024


def size_rows() -> list[Row]:
    """The script and the style as served, beside what gzip would make of them."""
    rows = []
    for label, suffix in (("JavaScript (3 modules)", ".js"), ("CSS", ".css")):
        files = sorted(p for p in STATIC.iterdir() if p.suffix == suffix)
        raw = sum(len(p.read_bytes()) for p in files)
        zipped = sum(len(gzip.compress(p.read_bytes())) for p in files)
        rows.append(
            Row(
                "console",
                f"{label} the page loads",
                _kib(raw),
                "KiB",
                baseline=_kib(zipped),
                baseline_name="the same gzipped (not served so)",
                higher_is_better=False,
            )
        )
    return rows


def browser_missing() -> str | None:
    """Why the browser figures cannot be taken here, or None."""
    try:
        import playwright.async_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install -e '.[dev]')"
    if not (Path(CHROMIUM).is_file() and os.access(CHROMIUM, os.X_OK)):
        return f"no Chromium at {CHROMIUM} (apt-get install chromium, or MAJORDOMUS_TEST_CHROMIUM)"
    return None


async def _start(http: httpx.AsyncClient, capability: str, **inp: Any) -> str:
    answer = await http.post(
        "/api/v1/executions/start", json={"capability": capability, "input": inp}
    )
    answer.raise_for_status()
    return str(answer.json()["id"])


async def _until(
    http: httpx.AsyncClient, execution_id: str, done: Any, timeout: float = 60
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        snap: dict[str, Any] = (
            await http.get("/api/v1/executions/get", params={"id": execution_id})
        ).json()
        if done(snap):
            return snap
        await asyncio.sleep(0.05)
    raise RuntimeError(f"{execution_id} did not get there within {timeout}s")


async def _history_loads(
    browser: Any, base_url: str, execution_id: str, loads: int
) -> tuple[list[float], list[float], int]:
    """First contentful paint and history shown (ms from navigation) of each load."""
    paints, shown, replayed = [], [], 0
    for _ in range(loads):
        context = await browser.new_context(viewport=VIEWPORT)
        try:
            page = await context.new_page()
            await page.goto(f"{base_url}/executions/{execution_id}")
            await page.wait_for_selector('main[data-history="shown"]', timeout=30_000)
            found = await page.evaluate(
                """() => ({
                  paint: (performance.getEntriesByName("first-contentful-paint")[0] || {}).startTime,
                  shown: performance.getEntriesByName("console:history-shown")[0].startTime,
                  replayed: +document.querySelector("main").dataset.replayed})"""
            )
        finally:
            await context.close()
        if found["paint"] is not None:
            paints.append(float(found["paint"]))
        shown.append(float(found["shown"]))
        replayed = int(found["replayed"])
    return paints, shown, replayed


async def _streaming(
    browser: Any, base_url: str, execution_id: str, seconds: float
) -> tuple[list[float], list[float], list[float], float]:
    """Latencies in ms (to the DOM, to the next frame, to a bare EventSource) over a
    window of `seconds`, and the window's length as measured."""
    context = await browser.new_context(viewport=VIEWPORT)
    # The baseline in a context of its own (a renderer of its own, no console script), on
    # a JSON answer of the same origin: the channel and the browser, nothing else.
    bare = await browser.new_context()
    try:
        page = await context.new_page()
        await page.add_init_script(WATCH)
        await page.goto(f"{base_url}/executions/{execution_id}")
        await page.wait_for_selector('main[data-history="shown"]', timeout=30_000)
        raw_page = await bare.new_page()
        await raw_page.goto(f"{base_url}/api/v1/live")
        await raw_page.evaluate(RAW_LISTENER, execution_id)
        await asyncio.sleep(SETTLE_SECONDS)
        began = time.monotonic()
        await asyncio.gather(*(p.evaluate("window.__measure = true") for p in (page, raw_page)))
        await asyncio.sleep(seconds)
        await asyncio.gather(*(p.evaluate("window.__measure = false") for p in (page, raw_page)))
        window = time.monotonic() - began
        await asyncio.sleep(0.1)  # the last frame's times
        dom, frame = await page.evaluate("[window.__dom, window.__frame]")
        raw = await raw_page.evaluate("window.__raw")
    finally:
        await context.close()
        await bare.close()
    return dom, frame, raw, window


async def _browser_rows(bench: Bench, base_url: str) -> list[Row]:
    from playwright.async_api import async_playwright

    loads = bench.size(7, 2)
    window = bench.size(5, 1)
    async with httpx.AsyncClient(base_url=base_url, timeout=30) as http:
        # At its cap and over: 600 progress reports and the lifecycle around them.
        full = await _start(http, "bench.emit", events=600)
        await _until(http, full, lambda s: s["state"] == "succeeded")
        async with async_playwright() as playwright:
            browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                paints, shown, replayed = await _history_loads(browser, base_url, full, loads)
                # Long enough to outlast the page's load and the window; cancelled after.
                paced = await _start(http, "bench.paced", rate=RATE, seconds=window + 30)
                await _until(http, paced, lambda s: s["event_count"] >= RETAINED + 100)
                dom, frame, raw, measured = await _streaming(browser, base_url, paced, window)
            finally:
                await browser.close()
        await http.post("/api/v1/executions/cancel", json={"id": paced})
        await _until(http, paced, lambda s: s["state"] not in ("running", "cancelling"))
    bench.note(
        f"console: an execution's page with {replayed} retained events, {loads} loads in "
        f"fresh contexts (medians); one execution logging {RATE:,} lines/s, its page at "
        f"the cap, {SETTLE_SECONDS:g} s to settle then {measured:.1f} s measured: "
        f"{len(dom)} lines reached the DOM ({len(dom) / measured:,.0f}/s), "
        f"{len(raw)} the bare EventSource ({len(raw) / measured:,.0f}/s). Headless "
        "Chromium on the same machine as the API, the worker and Redis."
    )
    if replayed != RETAINED:
        bench.note(f"console: the page replayed {replayed} events, not {RETAINED}")
    rows = [
        Row(
            "console",
            f"execution page, {replayed} events: navigation -> history shown",
            median(shown),
            "ms",
            baseline=median(paints),
            baseline_name="first contentful paint (the shell)",
            higher_is_better=False,
        )
    ]
    for p in (50, 99):
        rows.append(
            Row(
                "console",
                f"p{p} appended -> in the DOM, {RATE:,} events/s",
                percentile(dom, p),
                "ms",
                baseline=percentile(raw, p),
                baseline_name="bare EventSource, a page of its own",
                higher_is_better=False,
            )
        )
    for p in (50, 99):
        rows.append(
            Row(
                "console",
                f"p{p} appended -> next frame, {RATE:,} events/s",
                percentile(frame, p),
                "ms",
                higher_is_better=False,
            )
        )
    rows.append(
        Row(
            "console",
            f"lines on the page a second, {RATE:,} logged/s",
            len(dom) / measured,
            "/s",
            baseline=len(raw) / measured,
            baseline_name="bare EventSource, a page of its own",
        )
    )
    return rows


async def run(bench: Bench) -> list[Row]:
    rows = size_rows()
    missing = browser_missing()
    if missing:
        bench.note(f"console: no browser figures: {missing}")
        return rows
    with children() as kids:
        api, base_url = api_server(bench)
        kids.append(api)
        kids.append(majordomus_worker(bench))
        await wait_for_api(base_url, api)
        await wait_for_workers(bench, 1)
        return await _browser_rows(bench, base_url) + rows
