"""The interactive documentation page at `/docs`, and how a fixed document is served.

The page is one self-contained HTML file. It loads nothing from the network (no CDN: the
page must work on a machine without internet), reads `/openapi.json`, lists every operation
with its parameters or body and answers, lets a person try each one (each parameter where the
document puts it: the query string, or a header such as `Prefer`), and can follow an
execution on the live channel. With `MAJORDOMUS_API_TOKEN` set the page itself is open (it
holds no data) and asks for the token, which it sends as `Authorization: Bearer` on every
call it makes.

The live panel follows the channel with the browser's `EventSource`, which reconnects by
itself after a network error and resumes with `Last-Event-ID`, and stops for good on the
`204` a finished execution's end answers. `EventSource` cannot send a header, so with a
token the panel reads the stream with `fetch` and does the same itself: it remembers the
last `id:`, reconnects after a pause (doubling up to `LIVE_RETRY_CAP_MS`, or the server's
`retry:`) with `Last-Event-ID`, and stops on `204` or a refusal.

`StaticDocument` answers a document that never changes while the process runs (the page,
`/openapi.json`): `GET` with it, `HEAD` with the same headers and no body, anything else
`405` with `Allow: GET, HEAD`. It does not negotiate, compress or cache.
"""

from __future__ import annotations

import json

from litestar.types import Receive, Scope, Send

from majordomus.api.errors import send_error
from majordomus.errors import invalid_input
from majordomus.model import EVENT_TYPES, STREAM_TYPES

HTML = "text/html; charset=utf-8"

LIVE_RETRY_MS = 1000
"""The token-mode live panel's first pause before it reconnects..."""
LIVE_RETRY_CAP_MS = 30_000
"""...doubled after each failed try up to this, and back to the first once a try opens."""

_PAGE = """<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>majordomus API</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>
 body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1d232a; background: #f6f7f9; }
 header { background: #1d232a; color: #fff; padding: 12px 20px; display: flex; gap: 16px;
          align-items: center; flex-wrap: wrap; }
 header h1 { font-size: 18px; margin: 0; }
 header input { font: inherit; padding: 3px 6px; width: 240px; }
 main { max-width: 1100px; margin: 0 auto; padding: 12px 20px 40px; }
 details.op { background: #fff; border: 1px solid #d8dde3; border-radius: 6px; margin: 8px 0; }
 details.op > summary { cursor: pointer; padding: 8px 12px; display: flex; gap: 10px;
                        align-items: baseline; }
 .m { font-weight: 700; width: 48px; display: inline-block; }
 .GET { color: #0b6bcb; } .POST { color: #1a7f37; }
 code, pre, textarea { font: 12.5px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
 .id { color: #57606a; margin-left: auto; }
 .body { padding: 4px 14px 14px; border-top: 1px solid #eef0f3; }
 table { border-collapse: collapse; margin: 6px 0; }
 td, th { text-align: left; padding: 3px 8px; border-bottom: 1px solid #eef0f3; vertical-align: top; }
 input.p { width: 260px; }
 textarea { width: 100%; min-height: 90px; box-sizing: border-box; }
 pre { background: #f1f3f5; padding: 8px; overflow: auto; max-height: 420px; white-space: pre-wrap; }
 button { font: inherit; padding: 4px 12px; cursor: pointer; }
 .status { font-weight: 700; }
 h2 { font-size: 15px; margin: 22px 0 6px; text-transform: uppercase; color: #57606a; }
</style>
</head>
<body>
<header>
 <h1>majordomus API</h1>
 <a href="/openapi.json" style="color:#9cf">/openapi.json</a>
 <label>bearer token <input id="token" type="password" placeholder="only if MAJORDOMUS_API_TOKEN is set"></label>
</header>
<main>
 <p id="intro">Loading <code>/openapi.json</code>...</p>
 <div id="ops"></div>
 <h2>live channel</h2>
 <details class="op" open><summary><span class="m GET">GET</span><code>/events</code>
  <span class="id">text/event-stream</span></summary>
  <div class="body">
   <p>Follow one execution (<code>execution</code>) or every execution (leave it empty),
   from a cursor (<code>after</code>).</p>
   <input class="p" id="live-x" placeholder="execution id (optional)">
   <input class="p" id="live-after" placeholder="after (optional)">
   <button id="live-go">follow</button> <button id="live-stop">stop</button>
   <span id="live-state" class="status"></span>
   <pre id="live-out"></pre>
  </div>
 </details>
</main>
<script>
"use strict";
const $ = (id) => document.getElementById(id);
const tokenBox = $("token");
tokenBox.value = localStorage.getItem("majordomus-token") || "";
tokenBox.addEventListener("change", () => {
  localStorage.setItem("majordomus-token", tokenBox.value); load();
});
function headers(extra) {
  const h = Object.assign({}, extra || {});
  if (tokenBox.value) h["Authorization"] = "Bearer " + tokenBox.value;
  return h;
}
function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === "text") e.textContent = v; else e.setAttribute(k, v);
  }
  for (const k of kids) if (k) e.append(k);
  return e;
}
function resolve(doc, s) {
  let n = 0;
  while (s && s.$ref && n++ < 16) s = doc.components.schemas[s.$ref.split("/").pop()];
  return s || {};
}
function example(doc, schema) {
  let s = resolve(doc, schema);
  // A union (executions.start's input, per capability): its first branch.
  if (s.oneOf && s.oneOf.length) s = resolve(doc, s.oneOf[0]);
  const out = {};
  for (const name of s.required || []) {
    const p = resolve(doc, (s.properties || {})[name]);
    out[name] = p.const !== undefined ? p.const : p.type === "integer" || p.type === "number" ? 0 :
                p.type === "boolean" ? false : p.type === "object" ? {} :
                p.type === "array" ? [] : "";
  }
  return JSON.stringify(out, null, 2);
}
async function show(out, response) {
  const text = await response.text();
  let shown = text;
  try { shown = JSON.stringify(JSON.parse(text), null, 2); } catch (e) {}
  out.textContent = response.status + " " + response.statusText + "\\n\\n" + shown;
}
function operation(doc, path, method, op) {
  const M = method.toUpperCase();
  const body = el("div", {class: "body"});
  body.append(el("p", {text: op.description || ""}));
  const inputs = {};
  let textarea = null;
  if (op.parameters && op.parameters.length) {
    const table = el("table", {}, el("tr", {}, el("th", {text: "parameter"}),
      el("th", {text: "value"}), el("th", {text: "about"})));
    for (const p of op.parameters) {
      const input = el("input", {class: "p", placeholder: p.required ? "required" : "optional"});
      inputs[p.name] = input;
      const where = p.in === "header" ? " (header)" : "";
      table.append(el("tr", {}, el("td", {}, el("code", {text: p.name}), where), el("td", {}, input),
        el("td", {text: p.description || ""})));
    }
    body.append(table);
  }
  if (op.requestBody) {
    textarea = el("textarea", {});
    textarea.value = example(doc, op.requestBody.content["application/json"].schema);
    body.append(el("div", {text: "JSON body"}), textarea);
  }
  const out = el("pre", {text: ""});
  const button = el("button", {text: "try it"});
  button.addEventListener("click", async () => {
    // Each parameter where the document puts it: the query string, or a header (`Prefer`).
    const query = new URLSearchParams();
    const sent = textarea ? {"Content-Type": "application/json"} : {};
    for (const p of op.parameters || []) {
      const value = inputs[p.name].value;
      if (value === "") continue;
      if (p.in === "header") sent[p.name] = value; else query.set(p.name, value);
    }
    const url = path + (query.toString() ? "?" + query : "");
    const init = {method: M, headers: headers(sent)};
    if (textarea) init.body = textarea.value;
    out.textContent = M + " " + url + " ...";
    try { await show(out, await fetch(url, init)); } catch (e) { out.textContent = String(e); }
  });
  body.append(button, out);
  const summary = el("summary", {}, el("span", {class: "m " + M, text: M}),
    el("code", {text: path}), el("span", {text: op.summary || ""}),
    el("span", {class: "id", text: op.operationId}));
  return el("details", {class: "op"}, summary, body);
}
async function load() {
  const response = await fetch("/openapi.json", {headers: headers()});
  if (!response.ok) { await show($("intro"), response); return; }
  const doc = await response.json();
  $("intro").textContent = doc.info.title + " " + doc.info.version + ": " +
    Object.keys(doc.paths).length + " routes. Each operation's id is its capability's id.";
  const groups = {};
  for (const [path, item] of Object.entries(doc.paths))
    for (const [method, op] of Object.entries(item))
      (groups[(op.tags || ["other"])[0]] = groups[(op.tags || ["other"])[0]] || []).push([path, method, op]);
  const ops = $("ops");
  ops.replaceChildren();
  for (const tag of Object.keys(groups).sort()) {
    ops.append(el("h2", {text: tag}));
    for (const [path, method, op] of groups[tag]) ops.append(operation(doc, path, method, op));
  }
}
const LIVE_TYPES = __LIVE_TYPES__;
let live = null;
function liveSay(text) {
  const out = $("live-out");
  out.textContent += text + "\\n";
  out.scrollTop = out.scrollHeight;
}
function liveState(text) { $("live-state").textContent = text; }
async function explain(url, lastId) {
  // EventSource gives no status: ask once more, from where it was, to show why it closed.
  const ctl = new AbortController();
  const sent = headers({Accept: "text/event-stream"});
  if (lastId) sent["Last-Event-ID"] = lastId;
  try {
    const response = await fetch(url, {headers: sent, signal: ctl.signal});
    if (response.status === 200) { ctl.abort(); return; }
    if (response.status === 204) { liveState("closed: the execution is over and this is its end (204)"); return; }
    const pre = el("pre", {});
    await show(pre, response);
    liveSay(pre.textContent);
  } catch (e) { if (e.name !== "AbortError") liveSay(String(e)); }
}
function withEventSource(url) {
  // Reconnects by itself after a network error, with Last-Event-ID; stops on a 204.
  const source = new EventSource(url);
  let lastId = "";
  const say = (message) => {
    // Control messages carry no id; EventSource shows them with the last one it had.
    const id = message.type.startsWith("stream.") ? "" : message.lastEventId;
    if (id) lastId = id;
    liveSay((id ? "id: " + id + "\\n" : "") +
      "event: " + message.type + "\\ndata: " + message.data + "\\n");
  };
  for (const type of LIVE_TYPES) source.addEventListener(type, say);
  source.onmessage = say;
  source.onopen = () => liveState("open");
  source.onerror = () => {
    if (source.readyState === EventSource.CLOSED) {
      liveState("closed");
      explain(url, lastId);
    } else {
      liveState("reconnecting: it resumes after the last id received (Last-Event-ID)");
    }
  };
  return {stop: () => { source.close(); liveState("stopped"); }};
}
function withFetch(url) {
  // What EventSource does, for a channel that needs the Authorization header it cannot send.
  const ctl = new AbortController();
  let lastId = null, serverRetry = null, pause = __RETRY_MS__, stopped = false;
  const sleep = (ms) => new Promise((done) => setTimeout(done, ms));
  const take = (block) => {
    let shown = false;
    for (const line of block.split(/\\r\\n|\\r|\\n/)) {
      if (line.startsWith("id:")) lastId = line.slice(3).replace(/^ /, "");
      else if (line.startsWith("retry:")) {
        const ms = parseInt(line.slice(6), 10);
        if (ms >= 0) serverRetry = ms;
      }
      if (line && !line.startsWith(":")) shown = true;
    }
    if (shown) liveSay(block + "\\n");
  };
  (async () => {
    while (!stopped) {
      const sent = headers({Accept: "text/event-stream"});
      if (lastId !== null) sent["Last-Event-ID"] = lastId;
      try {
        const response = await fetch(url, {headers: sent, signal: ctl.signal});
        if (response.status === 204) {
          liveState("closed: the execution is over and this is its end (204)");
          return;
        }
        if (response.status !== 200 || !response.body) {
          liveState("closed");
          const pre = el("pre", {});
          await show(pre, response);
          liveSay(pre.textContent);
          return;
        }
        liveState("open");
        pause = __RETRY_MS__;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, {stream: true});
          let end;
          while ((end = buffer.search(/\\r\\n\\r\\n|\\n\\n|\\r\\r/)) >= 0) {
            const gap = buffer.startsWith("\\r\\n\\r\\n", end) ? 4 : 2;
            take(buffer.slice(0, end));
            buffer = buffer.slice(end + gap);
          }
        }
      } catch (e) {
        if (stopped || e.name === "AbortError") return;
      }
      const wait = serverRetry !== null ? serverRetry : pause;
      pause = Math.min(pause * 2, __RETRY_CAP_MS__);
      liveState("reconnecting in " + Math.round(wait / 100) / 10 + " s: it resumes after the last id received (Last-Event-ID)");
      await sleep(wait);
    }
  })();
  return {stop: () => { stopped = true; ctl.abort(); liveState("stopped"); }};
}
$("live-go").addEventListener("click", () => {
  if (live) live.stop();
  const query = new URLSearchParams();
  if ($("live-x").value) query.set("execution", $("live-x").value);
  if ($("live-after").value) query.set("after", $("live-after").value);
  $("live-out").textContent = "";
  liveState("opening");
  const url = "/events" + (query.toString() ? "?" + query : "");
  live = tokenBox.value ? withFetch(url) : withEventSource(url);
});
$("live-stop").addEventListener("click", () => { if (live) live.stop(); live = null; });
load();
</script>
</body>
</html>
"""

DOCS_HTML = (
    _PAGE.replace("__LIVE_TYPES__", json.dumps([*EVENT_TYPES, *STREAM_TYPES]))
    .replace("__RETRY_MS__", str(LIVE_RETRY_MS))
    .replace("__RETRY_CAP_MS__", str(LIVE_RETRY_CAP_MS))
)
"""The page as served: the live panel listens for every event and control type by name."""


class StaticDocument:
    """A fixed document as an ASGI endpoint: `GET` answers it, `HEAD` the same headers
    without the body, any other method `405` (`invalid_input`, `Allow: GET, HEAD`)."""

    ALLOW = "GET, HEAD"

    def __init__(self, body: bytes, media_type: str) -> None:
        self.body = body
        self.headers = [
            (b"content-type", media_type.encode("latin-1")),
            (b"content-length", str(len(body)).encode()),
        ]

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        method = scope.get("method", "GET")
        if method not in ("GET", "HEAD"):
            err = invalid_input(
                f"{scope.get('path', '')} does not answer {method}",
                "see the Allow header, or the operations at /openapi.json",
            )
            await send_error(send, err, 405, {"Allow": self.ALLOW})
            return
        await send({"type": "http.response.start", "status": 200, "headers": self.headers})
        body = self.body if method == "GET" else b""
        await send({"type": "http.response.body", "body": body, "more_body": False})
