"""Every piece of text the console shows is legible: the WCAG 2.x contrast ratio of its
colour against the background it is drawn on is at least 4.5:1 (3:1 for large text: 24 px,
or 18.66 px bold), measured in the browser on each main page, in the light scheme and with
`prefers-color-scheme: dark` emulated (the console declares itself light, so a dark
preference must leave it as legible as ever).

The background of an element is the first non-transparent `background-color` up its
ancestors, a translucent one blended over those below it, over the page's own (the root's,
else white). Text is a text node's parent, a control's own value, and a field's placeholder.
Hidden text (the skip link off-screen, screen-reader-only captions) and disabled controls
(WCAG exempts inactive components) are not measured.
"""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from tests.api.conftest import ApiProcess, start, wait_final

pytestmark = [pytest.mark.process, pytest.mark.slow]

CONTRAST = """() => {
  const parse = (c) => {
    const m = c.match(/rgba?\\(([^)]+)\\)/);
    if (!m) return null;
    const [r, g, b, a] = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
    return [r, g, b, a === undefined ? 1 : a];
  };
  const over = (top, below) => {
    const a = top[3];
    return [0, 1, 2].map((i) => top[i] * a + below[i] * (1 - a)).concat(1);
  };
  const luminance = (c) => {
    const [r, g, b] = c.slice(0, 3).map((v) => {
      v /= 255;
      return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4);
    });
    return 0.2126 * r + 0.7152 * g + 0.0722 * b;
  };
  const ratio = (a, b) => {
    const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
    return (hi + 0.05) / (lo + 0.05);
  };
  const root = parse(getComputedStyle(document.documentElement).backgroundColor);
  const base = root && root[3] > 0 ? over(root, [255, 255, 255, 1]) : [255, 255, 255, 1];
  const background = (e) => {
    const chain = [];
    for (let n = e; n && n !== document.documentElement; n = n.parentElement) chain.push(n);
    let bg = base;
    for (const n of chain.reverse()) {
      const c = parse(getComputedStyle(n).backgroundColor);
      if (c && c[3] > 0) bg = over(c, bg);
    }
    return bg;
  };
  const shown = (e) => {
    if (!e.checkVisibility({checkOpacity: true, checkVisibilityCSS: true})) return false;
    const r = e.getBoundingClientRect();
    if (r.width <= 1 || r.height <= 1 || r.right <= 0 || r.bottom <= 0) return false;
    return !e.closest(".sr");
  };
  const failures = [];
  let measured = 0;
  const check = (e, color, what) => {
    const s = getComputedStyle(e);
    const size = parseFloat(s.fontSize), bold = parseInt(s.fontWeight, 10) >= 700;
    const large = size >= 24 || (size >= 18.66 && bold);
    const bg = background(e);
    const fg = over(parse(color), bg);
    const got = ratio(fg, bg);
    measured++;
    if (got < (large ? 3 : 4.5)) {
      failures.push({what, text: (e.value || e.placeholder || e.textContent).trim().slice(0, 40),
        color, background: `rgb(${bg.slice(0, 3).map(Math.round).join(", ")})`,
        ratio: Math.round(got * 100) / 100, large, cls: e.className});
    }
  };
  for (const e of document.querySelectorAll("body *")) {
    if (["SCRIPT", "STYLE", "OPTION", "NOSCRIPT"].includes(e.tagName) || e.disabled || !shown(e)) continue;
    const tag = e.tagName.toLowerCase() + (e.id ? "#" + e.id : "");
    const own = [...e.childNodes].some((n) => n.nodeType === 3 && n.textContent.trim());
    const field = ["INPUT", "SELECT", "TEXTAREA"].includes(e.tagName);
    if (own || (field && (e.value || e.tagName === "SELECT"))) check(e, getComputedStyle(e).color, tag);
    if (field && e.placeholder && !e.value) check(e, getComputedStyle(e, "::placeholder").color, tag + "::placeholder");
  }
  return {measured, failures};
}"""

PAGES = {
    "executions": "/",
    "execution": "/executions/{id}",
    "failed execution": "/executions/{failed}",
    "start": "/start?capability=tests.login",
    "queue": "/queue",
    "schedules": "/schedules",
    "episodes": "/episodes",
    "charts": "/charts",
}


@pytest.fixture(scope="module")
def subjects(console: ApiProcess) -> dict[str, str]:
    """A finished demonstration (steps, log lines, output), a failed one (an error), a
    cancelled execution (a row of the queue's failures), and one waiting (a backlog)."""
    with console.client() as http:
        done = start(http, "executions.demonstrate", steps=3, log_lines=2, delay_ms=10)
        failed = start(http, "executions.demonstrate", steps=3, fail_at=2, delay_ms=10)
        cancelled = start(http, "tests.sleepy", seconds=30)
        http.post("/api/v1/executions/cancel", json={"id": cancelled["id"]})
        for x in (done, failed, cancelled):
            wait_final(http, x["id"])
    return {"id": done["id"], "failed": failed["id"]}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_text_on_every_page_has_enough_contrast(
    browser: Any, console: ApiProcess, http: httpx.Client, subjects: dict[str, str], scheme: str
) -> None:
    context = browser.new_context(viewport={"width": 1280, "height": 860}, color_scheme=scheme)
    page = context.new_page()
    held = [start(http, "tests.serial", seconds=3) for _ in range(2)]  # running, and waiting
    found: dict[str, Any] = {}
    try:
        for name, path in PAGES.items():
            page.goto(console.url + path.format(**subjects))
            page.wait_for_selector("main[data-loaded], #x-output, #x-error")
            if name == "queue":
                page.wait_for_selector("#q-backlog tr[data-capability], #q-failures tr[data-code]")
            if name.endswith("execution"):
                page.wait_for_selector('#x-live[data-state="ended"]')
            found[name] = page.evaluate(CONTRAST)
            # Focus and the token form are states of their own: measured on the list.
            if name == "executions":
                page.evaluate("document.getElementById('token-form').hidden = false")
                found["token form"] = page.evaluate(CONTRAST)
    finally:
        context.close()
        for x in held:
            http.post("/api/v1/executions/cancel", json={"id": x["id"]})
    for name, result in found.items():
        assert result["measured"] > 10, f"{name}: only {result['measured']} texts measured"
    failing = {name: r["failures"] for name, r in found.items() if r["failures"]}
    assert not failing, f"text below its contrast minimum ({scheme}): {failing}"
