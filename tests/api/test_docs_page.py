"""The `/docs` page's live panel, run for real: its own JavaScript, as the server sends it,
in Node (with a stand-in for the few DOM calls it makes) against a real API process that
is killed and started again while the panel follows an execution. The panel reconnects
by itself and resumes after the last id it received, so it shows every event once, in
order, to the end, where the channel's `204` stops it. Without a token it uses
`EventSource`; with one (which `EventSource` cannot send) it does the same with `fetch`.

Needs `node` (20 or later, for `--experimental-eventsource`); skipped without it.
"""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.api.conftest import TOKEN, ApiProcess, WorkerChild, start, wait_final

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not installed")

HARNESS = r"""
"use strict";
const fs = require("fs");
const vm = require("vm");
const [base, scriptPath, statePath, executionId, token] = process.argv.slice(2);

class FakeElement {
  constructor(tag) {
    this.tag = tag; this.children = []; this.listeners = {};
    this.value = ""; this.textContent = ""; this.scrollTop = 0; this.scrollHeight = 0;
  }
  setAttribute() {}
  append(...kids) { this.children.push(...kids); }
  replaceChildren(...kids) { this.children = kids; }
  addEventListener(type, f) { (this.listeners[type] = this.listeners[type] || []).push(f); }
  click() { for (const f of this.listeners.click || []) f(); }
}
const byId = {};
globalThis.document = {
  getElementById: (id) => (byId[id] = byId[id] || new FakeElement("div")),
  createElement: (tag) => new FakeElement(tag),
};
globalThis.localStorage = {
  getItem: (key) => (key === "majordomus-token" && token ? token : null),
  setItem() {},
};
const resumedWith = [];
const realFetch = globalThis.fetch;
globalThis.fetch = (url, init) => {
  const sent = (init && init.headers) || {};
  if (String(url).startsWith("/events")) resumedWith.push(sent["Last-Event-ID"] || null);
  return realFetch(new URL(url, base), init);
};
const RealEventSource = globalThis.EventSource;
globalThis.EventSource = class extends RealEventSource {
  constructor(url, init) { super(new URL(url, base), init); }
};
process.on("unhandledRejection", (e) => console.error("unhandled:", e));

vm.runInThisContext(fs.readFileSync(scriptPath, "utf8"));
document.getElementById("live-x").value = executionId;
document.getElementById("live-go").click();

const began = Date.now();
let closedAt = null;
const text = (id) => document.getElementById(id).textContent;
const save = () => fs.writeFileSync(statePath, JSON.stringify({
  state: text("live-state"), out: text("live-out"), resumedWith,
}));
setInterval(() => {
  save();
  const state = text("live-state");
  if (state.startsWith("closed") && closedAt === null) closedAt = Date.now();
  if ((closedAt !== null && Date.now() - closedAt > 1000) || Date.now() - began > 30000) {
    save();
    process.exit(0);
  }
}, 100);
"""


class Panel:
    """The page's script running in Node, following one execution; its state on disk."""

    def __init__(self, tmp: Path, api: ApiProcess, execution_id: str, token: str = "") -> None:
        page = httpx.get(api.url + "/docs", timeout=10).text
        script = tmp / "page.js"
        script.write_text(page.split("<script>", 1)[1].split("</script>", 1)[0])
        harness = tmp / "harness.js"
        harness.write_text(HARNESS)
        self.state_path = tmp / "state.json"
        self.log = (tmp / "node.log").open("wb")
        assert NODE is not None
        self.process = subprocess.Popen(
            [
                NODE,
                "--experimental-eventsource",
                "--no-warnings",
                str(harness),
                api.url,
                str(script),
                str(self.state_path),
                execution_id,
                token,
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def state(self) -> dict[str, Any]:
        try:
            return dict(json.loads(self.state_path.read_text()))
        except (OSError, ValueError):
            return {"state": "", "out": "", "resumedWith": []}

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.state()["out"]:
            assert self.process.poll() is None, Path(self.log.name).read_text()
            assert time.monotonic() < deadline, self.state()
            time.sleep(0.05)

    def end(self, timeout: float = 90) -> dict[str, Any]:
        try:
            self.process.wait(timeout)
        finally:
            if self.process.poll() is None:
                self.process.kill()
            self.log.close()
        return self.state()


@pytest.fixture
def own_api(suite_redis_url: str, worker_process_for_api: WorkerChild) -> Iterator[ApiProcess]:
    server = ApiProcess(suite_redis_url).start()
    yield server
    server.close()


@pytest.fixture
def own_locked_api(
    suite_redis_url: str, worker_process_for_api: WorkerChild
) -> Iterator[ApiProcess]:
    server = ApiProcess(suite_redis_url, MAJORDOMUS_API_TOKEN=TOKEN).start()
    yield server
    server.close()


def follow_through_a_restart(tmp: Path, api: ApiProcess, token: str = "") -> dict[str, Any]:
    """Follow a five-second execution on the panel, kill the API (SIGKILL: the connection
    just drops) once the panel has shown a few events, start it again, let the panel end."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with api.client(headers=headers) as client:
        snap = start(client, "executions.demonstrate", steps=10, delay_ms=500)
        panel = Panel(tmp, api, snap["id"], token)
        panel.wait_for('"execution.step.started"')
        api.stop(signal.SIGKILL)
        time.sleep(1.0)  # the panel's retries meet a closed port: network errors
        api.start()
        seen = panel.end()
        final = wait_final(client, snap["id"])
    seen["last_sequence"] = final["last_sequence"]
    return seen


def assert_every_event_once_in_order_to_the_end(seen: dict[str, Any]) -> None:
    out = seen["out"]
    ids = [int(i) for i in re.findall(r"^id: (\d+)$", out, flags=re.M)]
    assert ids == list(range(1, seen["last_sequence"] + 1)), out
    assert out.count("event: stream.ready") >= 2, out  # it did reconnect
    assert "event: execution.completed" in out
    assert seen["state"].startswith("closed"), seen["state"]


def test_the_event_source_panel_resumes_after_the_server_is_killed(
    tmp_path: Path, own_api: ApiProcess
) -> None:
    seen = follow_through_a_restart(tmp_path, own_api)
    assert_every_event_once_in_order_to_the_end(seen)
    # EventSource made every connection: the page fetched the channel only to say why it
    # closed (the 204 at the end), never to read it.
    assert "204" in seen["state"]


def test_the_token_panel_resumes_with_last_event_id_after_the_server_is_killed(
    tmp_path: Path, own_locked_api: ApiProcess
) -> None:
    seen = follow_through_a_restart(tmp_path, own_locked_api, TOKEN)
    assert_every_event_once_in_order_to_the_end(seen)
    resumed = seen["resumedWith"]
    assert resumed[0] is None and len(resumed) >= 2, resumed
    assert all(r is not None and r.isdigit() for r in resumed[1:]), resumed
