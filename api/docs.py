"""The interactive documentation page at `/docs`: one self-contained HTML file.

It loads nothing from the network (no CDN: the page must work on a machine without
internet), reads `/openapi.json`, lists every operation with its parameters or body and
answers, lets a person try each one, and can follow an execution on the live channel.
With `MAJORDOMUS_API_TOKEN` set the page itself is open (it holds no data) and asks for the
token, which it sends as `Authorization: Bearer` on every call it makes.
"""

from __future__ import annotations

DOCS_HTML = """<!doctype html>
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
  const s = resolve(doc, schema);
  const out = {};
  for (const name of s.required || []) {
    const p = resolve(doc, (s.properties || {})[name]);
    out[name] = p.type === "integer" || p.type === "number" ? 0 :
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
      table.append(el("tr", {}, el("td", {}, el("code", {text: p.name})), el("td", {}, input),
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
    const query = new URLSearchParams();
    for (const [name, input] of Object.entries(inputs)) if (input.value !== "") query.set(name, input.value);
    const url = path + (query.toString() ? "?" + query : "");
    const init = {method: M, headers: headers(textarea ? {"Content-Type": "application/json"} : {})};
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
let live = null;
$("live-go").addEventListener("click", async () => {
  if (live) live.abort();
  live = new AbortController();
  const query = new URLSearchParams();
  if ($("live-x").value) query.set("execution", $("live-x").value);
  if ($("live-after").value) query.set("after", $("live-after").value);
  const out = $("live-out");
  out.textContent = "";
  try {
    const response = await fetch("/events?" + query, {
      headers: headers({Accept: "text/event-stream"}), signal: live.signal});
    if (!response.ok || !response.body) { await show(out, response); return; }
    const reader = response.body.getReader();
    const decoder = new TextDecoder();
    for (;;) {
      const {value, done} = await reader.read();
      if (done) break;
      out.textContent += decoder.decode(value, {stream: true});
      out.scrollTop = out.scrollHeight;
    }
  } catch (e) { if (e.name !== "AbortError") out.textContent += "\\n" + e; }
});
$("live-stop").addEventListener("click", () => { if (live) live.abort(); });
load();
</script>
</body>
</html>
"""
