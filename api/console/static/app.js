// The console's pages: executions (/), one execution (/executions/<id>), queue and workers
// (/queue), schedules (/schedules), episodes (/episodes), charts (/charts, drawn by charts.js), start (/start). Each page is a function that renders into <main> and answers
// how to stop it (its live channel, its timers). Handler text is only ever set as
// textContent, never parsed as HTML. Live updates are queued and applied once per
// animation frame, so a burst of events costs one layout, not one per event. A page whose
// live connection is down says so, since when, and reads again what it shows when it is back.
"use strict";

import {ApiError, call, follow, liveTypes, token} from "./api.js";
import {REDACTED, buildForm, holdsSecret} from "./form.js";

const STATES = ["queued", "running", "cancelling", "succeeded", "failed", "cancelled"];
const ACTIVE = new Set(["queued", "running", "cancelling"]);
const TERMINAL = new Set(["execution.completed", "execution.failed", "execution.cancelled"]);
const ID_SHAPE = /^x-\d{8}T\d{6}Z-[0-9a-f]{8}$/;
const PAGE_SIZE = 50;
const LIST_BOUND = 200;           // executions.list answers at most this many, newest first
const LOG_ROWS = 250;             // log lines kept on the page (the oldest go; all are in the pages)
const TAIL_ROWS = 100;            // live events kept in the table (layout per frame grows with it)
const EVENTS_PAGE = 100;          // events per page when paging by cursor
const QUEUE_SAFETY_MS = 10000;    // the queue report is read at least this often (beats are not events)
const READ_GAP_MS = 300;          // ...and at most once in this long, however many events arrive
const QUEUE_CHANGES = new Set(["execution.created", "execution.queued", "execution.started",
  "execution.cancelling", ...TERMINAL]);
const RETAINED = 500;             // events an execution keeps (SPEC 4: the stream's cap)
const AGO_EVERY_MS = 5000;        // relative times ("3 min ago") on the page are redone this often
const EXCEPTION_CODE = "execution.exception";  // the diagnostic a worker adds for an unexpected exception

const main = document.getElementById("main");

// -- small tools ------------------------------------------------------------------------

function el(tag, attrs, ...kids) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "text") e.textContent = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v === true ? "" : v);
  }
  for (const k of kids) if (k !== null && k !== undefined && k !== false) e.append(k);
  return e;
}

function link(href, text, attrs) { return el("a", Object.assign({href, "data-link": ""}, attrs || {}), text); }

// -- time -------------------------------------------------------------------------------
// One formatter for every time shown: today's as `21:08:06.845`, another day's with its date
// (`2026-12-05 21:08:06`), local. By hand: Intl formatting costs too much at 1,000 rows a
// second, so the day's bounds are kept and moved on only when the clock passes them.

const two = (n) => (n < 10 ? "0" : "") + n;
let today = [0, 0];               // [start, end) of the local day, epoch ms
function todayBounds(now) {
  if (now < today[0] || now >= today[1]) {
    const d = new Date(now);
    d.setHours(0, 0, 0, 0);
    const start = d.getTime();
    d.setDate(d.getDate() + 1);
    today = [start, d.getTime()];
  }
  return today;
}
export function clock(iso, now = Date.now()) {
  const d = new Date(iso);
  const t = d.getTime();
  if (Number.isNaN(t)) return String(iso);
  const hms = `${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
  const [start, end] = todayBounds(now);
  if (t < start || t >= end) return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())} ${hms}`;
  const ms = d.getMilliseconds();
  return `${hms}.${ms < 10 ? "00" : ms < 100 ? "0" : ""}${ms}`;
}
// To the second, for "since" and "as of": a date too when it is not today's.
const second = (d) => clock(d.toISOString()).replace(/\.\d{3}$/, "");
export function ago(iso, now = Date.now()) {
  const s = Math.round((now - new Date(iso).getTime()) / 1000);
  const a = Math.abs(s);
  if (Number.isNaN(a)) return "";
  if (a < 5) return s < 0 ? "in a moment" : "just now";
  const span = a < 60 ? a + " s" : a < 3600 ? Math.floor(a / 60) + " min"
    : a < 172800 ? Math.floor(a / 3600) + " h" : Math.floor(a / 86400) + " days";
  return s < 0 ? "in " + span : span + " ago";
}
function time(iso) {
  if (!iso) return el("span", {text: "—"});
  return el("time", {datetime: iso, title: iso, text: clock(iso)});
}
// A time with how long ago beside it, kept current (`data-ago`, redone every AGO_EVERY_MS).
function timeAgo(iso) {
  if (!iso) return time(iso);
  return el("span", {class: "when-ago"}, time(iso), el("span", {class: "muted ago", "data-ago": iso, text: " · " + ago(iso)}));
}
setInterval(() => {
  const now = Date.now();
  for (const e of document.querySelectorAll("[data-ago]")) e.textContent = " · " + ago(e.dataset.ago, now);
}, AGO_EVERY_MS);
// A time's tooltip says how long ago, as of the moment it is pointed at.
document.addEventListener("mouseover", (e) => {
  const t = e.target instanceof Element ? e.target.closest("time[datetime]") : null;
  if (t) t.title = `${t.dateTime} (${ago(t.dateTime)})`;
});

function duration(ms) {
  if (ms === undefined || ms === null) return "—";
  if (ms < 1000) return ms + " ms";
  if (ms < 60000) return (ms / 1000).toFixed(1) + " s";
  return Math.floor(ms / 60000) + " min " + Math.round((ms % 60000) / 1000) + " s";
}

// What an execution is, beside its id: its title (its capability's) and the first input
// member that says something (a scalar, not a redacted secret), say `seconds=0.2`.
function keyInput(input) {
  if (!input || typeof input !== "object" || Array.isArray(input)) return "";
  for (const [k, v] of Object.entries(input)) {
    if (v === null || v === "" || v === REDACTED || typeof v === "object") continue;
    const text = typeof v === "string" ? v : JSON.stringify(v);
    return `${k}=${text.length > 40 ? text.slice(0, 39) + "…" : text}`;
  }
  return "";
}
function identity(x) {
  const key = keyInput(x.input);
  return (x.title || x.capability) + (key ? " · " + key : "");
}
// The id's random tail: its time part is the Created column's.
const shortId = (id) => id.slice(id.lastIndexOf("-") + 1);

// An unexpected exception, as the worker's `execution.exception` diagnostic names it (its
// type, then its message, both masked), or null when it added none.
function exceptionOf(x) {
  const d = (x.diagnostics || []).find((d) => d.code === EXCEPTION_CODE);
  if (!d) return null;
  const at = d.summary.indexOf(": ");
  return at > 0 ? {summary: d.summary, type: d.summary.slice(0, at), message: d.summary.slice(at + 2)}
    : {summary: d.summary, type: d.summary, message: ""};
}
// A failure in a line, for the list: its code and, for an exception, what it was.
function failureBrief(x) {
  if (!x.error || x.state === "cancelled") return "";
  const exc = exceptionOf(x);
  return `${x.error.code}: ${exc ? exc.summary : x.error.message}`;
}

function badge(state) { return el("span", {class: "state state-" + state, text: state}); }

function meter(progress) {
  if (!progress) return el("span", {class: "muted", text: "—"});
  const total = progress.total || 0;
  const label = total ? `${progress.current} of ${total}` : String(progress.current);
  const bar = el("progress", {max: total || 1, value: total ? progress.current : 0, "aria-label": "progress " + label});
  if (!total) bar.removeAttribute("value");
  return el("span", {class: "meter"}, bar, el("span", {text: " " + label}));
}

function every(frame) {
  // Queue items, hand them to `frame` once per animation frame (a timer when hidden).
  let queue = [], pending = false;
  const run = () => { pending = false; const items = queue; queue = []; frame(items); };
  return (item) => {
    queue.push(item);
    if (pending) return;
    pending = true;
    if (document.hidden) setTimeout(run, 250); else requestAnimationFrame(run);
  };
}

function problem(err) {
  if (err instanceof ApiError && err.needsToken) { askToken(err.message); return el("p", {text: "Waiting for the API token."}); }
  const text = err instanceof ApiError ? `${err.code}: ${err.message}` : String(err.message || err);
  const suggestion = err.suggestion ? el("p", {class: "muted", text: err.suggestion}) : null;
  return el("div", {class: "problem", role: "alert"}, el("p", {text}), suggestion);
}

function section(title, ...kids) {
  const id = "h-" + title.toLowerCase().replace(/[^a-z]+/g, "-");
  return el("section", {"aria-labelledby": id}, el("h2", {id, text: title}), ...kids);
}

function tableOf(headers, caption) {
  const body = el("tbody");
  const table = el("table", {}, caption ? el("caption", {class: "sr", text: caption}) : null,
    el("thead", {}, el("tr", {}, ...headers.map((h) => el("th", {scope: "col", text: h})))), body);
  return {wrap: el("div", {class: "scroll"}, table), body};
}

// The counts as last read, and when: while the connection is down they say "as of" then.
let counts = null;
function setCounts(active, queued) {
  counts = {active, queued, at: new Date()};
  showCounts();
}
function showCounts() {
  const box = document.getElementById("counts");
  if (!counts) return;
  const stale = connection.since !== null;
  box.textContent = `${counts.active} active · ${counts.queued} queued` + (stale ? ` (as of ${second(counts.at)})` : "");
  box.classList.toggle("as-of", stale);
}

// -- the connection -----------------------------------------------------------------------
// A page's live connection is its channel and, where it polls, its reads. While any part is
// down a banner says since when, the counts say as of when, and the page stops ticking its
// ages; the page itself reads again what it shows when its channel is back (what happened
// meanwhile is unknown). Leaving the page forgets it all.

const staleBar = document.getElementById("stale");
const connection = {down: new Set(), since: null};
function connectionPart(part, up) {
  const wasDown = connection.down.size > 0;
  if (up) connection.down.delete(part); else connection.down.add(part);
  const isDown = connection.down.size > 0;
  if (isDown === wasDown) return;
  connection.since = isDown ? new Date() : null;
  if (isDown) {
    const since = connection.since.toISOString();
    staleBar.replaceChildren(el("strong", {text: "Live updates lost"}),
      el("span", {text: " since "}), el("time", {datetime: since, text: second(connection.since)}),
      el("span", {class: "ago", "data-ago": since, text: " · " + ago(since)}),
      el("span", {text: ". Reconnecting; until then what this page shows may be out of date."}));
    main.dataset.connection = "down";
  } else {
    staleBar.replaceChildren();
    delete main.dataset.connection;
  }
  staleBar.hidden = !isDown;
  showCounts();
}
function forgetConnection() {
  connection.down.clear();
  connection.since = null;
  staleBar.replaceChildren();
  staleBar.hidden = true;
  showCounts();
}
// A channel's state (`follow`'s `on.state`) as up or down: over (`ended`) is neither.
function channelState(s) {
  if (s === "live") connectionPart("channel", true);
  else if (s !== "ended") connectionPart("channel", false);
}
// A read that could not reach the API (no answer at all) is the connection down; any answer is it up.
function readOutcome(e) {
  const unreachable = e instanceof ApiError && e.status === 0;
  connectionPart("reads", !unreachable);
  return unreachable;
}

// -- the token ------------------------------------------------------------------------------

const tokenForm = document.getElementById("token-form");
function askToken(message) {
  tokenForm.hidden = false;
  document.getElementById("token-problem").textContent = token.get() ? message : "";
  document.getElementById("token-input").focus();
}
tokenForm.addEventListener("submit", (e) => {
  e.preventDefault();
  token.set(document.getElementById("token-input").value.trim());
  tokenForm.hidden = true;
  document.getElementById("forget-token").hidden = !token.get();
  route();
});
document.getElementById("forget-token").addEventListener("click", () => { token.set(""); location.reload(); });
document.getElementById("forget-token").hidden = !token.get();

// -- the router -----------------------------------------------------------------------------

let stopPage = () => {};

function navigate(url, replace) {
  if (replace) history.replaceState(null, "", url); else history.pushState(null, "", url);
  route();
}

function route() {
  stopPage();
  stopPage = () => {};
  const path = location.pathname;
  const params = new URLSearchParams(location.search);
  let page = "executions";
  if (path.startsWith("/executions/")) page = "execution";
  else if (path === "/queue") page = "queue";
  else if (path === "/start") page = "start";
  else if (path === "/schedules") page = "schedules";
  else if (path === "/episodes") page = "episodes";
  else if (path === "/charts") page = "charts";
  for (const a of document.querySelectorAll("[data-nav]")) {
    if (a.dataset.nav === page) a.setAttribute("aria-current", "page"); else a.removeAttribute("aria-current");
  }
  main.replaceChildren();
  for (const key of Object.keys(main.dataset)) delete main.dataset[key];
  forgetConnection();
  main.dataset.page = page;
  const run = {executions: executionsPage, execution: executionPage, queue: queuePage, start: startPage,
    schedules: schedulesPage, episodes: episodesPage, charts: chartsPage}[page];
  stopPage = run(params, decodeURIComponent(path.slice("/executions/".length))) || (() => {});
}

document.addEventListener("click", (e) => {
  const a = e.target.closest("a[data-link], nav a[data-nav], a.brand");
  if (!a || e.defaultPrevented || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  e.preventDefault();
  navigate(a.getAttribute("href"));
  main.focus({preventScroll: true});
});
window.addEventListener("popstate", route);

// -- executions -------------------------------------------------------------------------

// The list's filter, sort and order, every one in the page's address (a link shares the
// view): the names are executions.list's own, times in RFC 3339 (UTC), shown local.
const FILTER_KEYS = ["state", "capability", "episode", "created_after", "created_before", "search"];
const SORTS = {created: "Created", duration: "Duration", state: "State"};
const ORDERS = {created: ["newest first", "oldest first"], duration: ["longest first", "shortest first"],
  state: ["last in the lifecycle first", "queued first"]};
// A time of the address as a datetime-local input shows it (local, to the second), and back.
function localInput(iso) {
  const d = new Date(iso);
  if (!iso || Number.isNaN(d.getTime())) return "";
  return `${d.getFullYear()}-${two(d.getMonth() + 1)}-${two(d.getDate())}T${two(d.getHours())}:${two(d.getMinutes())}:${two(d.getSeconds())}`;
}
function isoOf(local) {
  const d = new Date(local);
  return local && !Number.isNaN(d.getTime()) ? d.toISOString() : "";
}
// A filter in words, for a confirmation: "capability tests.order, search customer=acme".
function described(match) {
  const words = Object.entries(match).map(([k, v]) => k === "created_after" ? `created from ${clock(v)}`
    : k === "created_before" ? `created before ${clock(v)}` : `${k} ${v}`);
  return words.length ? words.join(", ") : "no filter (every execution)";
}

function executionsPage(params) {
  const filters = Object.fromEntries(FILTER_KEYS.map((k) => [k, params.get(k) || ""]));
  const sort = SORTS[params.get("sort")] ? params.get("sort") : "created";
  const order = params.get("order") === "asc" ? "asc" : "desc";
  const match = Object.fromEntries(Object.entries(filters).filter(([, v]) => v));
  const pageNo = Math.max(1, parseInt(params.get("page") || "1", 10) || 1);
  // Past the newest LIST_BOUND: the list answers those created before an execution (the
  // last of the window before), so a deep page stays put however many are created since.
  const before = ID_SHAPE.test(params.get("before") || "") ? params.get("before") : "";
  const stateBox = el("select", {id: "f-state", name: "state"}, el("option", {value: "", text: "any"}),
    ...STATES.map((s) => el("option", {value: s, text: s, selected: s === filters.state})));
  const capBox = el("select", {id: "f-capability", name: "capability"}, el("option", {value: "", text: "any"}));
  if (filters.capability) capBox.append(el("option", {value: filters.capability, text: filters.capability, selected: true}));
  const episodeBox = el("input", {id: "f-episode", name: "episode", value: filters.episode, placeholder: "external id"});
  const fromBox = el("input", {id: "f-from", name: "created_after", type: "datetime-local", step: "1", value: localInput(filters.created_after)});
  const toBox = el("input", {id: "f-to", name: "created_before", type: "datetime-local", step: "1", value: localInput(filters.created_before)});
  const searchBox = el("input", {id: "f-search", name: "search", value: filters.search, placeholder: "member=value", spellcheck: "false",
    title: "An input member's value, for a capability that declares the member searchable"});
  const sortBox = el("select", {id: "f-sort", name: "sort"},
    ...Object.entries(SORTS).map(([v, text]) => el("option", {value: v, text, selected: v === sort})));
  const orderBox = el("select", {id: "f-order", name: "order", "aria-label": "Order"});
  const orders = () => orderBox.replaceChildren(...["desc", "asc"].map((v, i) =>
    el("option", {value: v, text: ORDERS[sortBox.value][i], selected: v === order})));
  orders();
  sortBox.addEventListener("change", orders);
  const filterForm = el("form", {class: "bar", role: "search", "aria-label": "Filter executions"},
    el("label", {for: "f-state", text: "State"}), stateBox,
    el("label", {for: "f-capability", text: "Capability"}), capBox,
    el("label", {for: "f-episode", text: "Episode"}), episodeBox,
    el("label", {for: "f-search", text: "Search"}), searchBox,
    el("label", {for: "f-from", text: "Created from"}), fromBox,
    el("label", {for: "f-to", text: "to"}), toBox,
    el("label", {for: "f-sort", text: "Sort"}), sortBox, orderBox,
    el("button", {type: "submit", text: "Filter"}));
  filterForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const q = new URLSearchParams();
    const chosen = {state: stateBox.value, capability: capBox.value, episode: episodeBox.value.trim(),
      created_after: isoOf(fromBox.value), created_before: isoOf(toBox.value), search: searchBox.value.trim(),
      sort: sortBox.value === "created" ? "" : sortBox.value, order: orderBox.value === "desc" ? "" : orderBox.value};
    for (const [k, v] of Object.entries(chosen)) if (v) q.set(k, v);
    navigate("/" + (q.toString() ? "?" + q : ""));
  });
  // Every execution matching the filter, cancelled or started again: the count first, then
  // a confirmation, then the action runs as an execution of its own (its page shows it).
  const bulkSay = el("span", {id: "bulk-say", role: "status"});
  const bulkButton = (kind, text) => {
    const b = el("button", {type: "button", "data-bulk": kind, text});
    b.addEventListener("click", () => bulk(kind, b));
    return b;
  };
  const bulkBar = el("div", {class: "bar", id: "bulk"}, bulkButton("cancel", "Cancel all matching"),
    bulkButton("retry", "Retry all matching"), bulkSay);
  async function bulk(kind, button) {
    button.disabled = true;
    delete bulkSay.dataset.execution;
    try {
      const counted = await call("/api/v1/executions/count", {query: match});
      const n = kind === "cancel" ? counted.cancellable : counted.retryable;
      const which = kind === "cancel" ? "queued or running" : "failed or cancelled (not retried yet)";
      const of = `${n} ${which} execution${n === 1 ? "" : "s"} of the ${counted.matching} matching ${described(match)}`;
      if (!n) { bulkSay.textContent = `Nothing to ${kind}: ${of}.`; return; }
      if (!confirm(`${kind === "cancel" ? "Cancel" : "Retry"} ${of}?`)) { bulkSay.textContent = "Nothing done."; return; }
      const started = await call("/api/v1/executions/start", {body: {capability: `executions.${kind}_matching`, input: match}});
      bulkSay.dataset.execution = started.id;
      bulkSay.replaceChildren(el("span", {text: `${kind === "cancel" ? "Cancelling" : "Retrying"} ${n}: `}),
        link("/executions/" + started.id, started.id, {class: "mono"}), el("span", {text: " shows its progress."}));
    } catch (e) { bulkSay.replaceChildren(problem(e)); } finally { button.disabled = false; }
  }
  const findBox = el("input", {id: "f-id", name: "id", placeholder: "x-20260101T000000Z-0a1b2c3d", spellcheck: "false"});
  const findSay = el("span", {role: "status"});
  const findForm = el("form", {class: "bar", role: "search", "aria-label": "Find an execution by id"},
    el("label", {for: "f-id", text: "Find by id"}), findBox, el("button", {type: "submit", text: "Open"}), findSay);
  findForm.addEventListener("submit", (e) => {
    e.preventDefault();
    const id = findBox.value.trim();
    if (!ID_SHAPE.test(id)) { findSay.textContent = "an execution id looks like x-20260101T000000Z-0a1b2c3d"; return; }
    navigate("/executions/" + id);
  });
  const summary = el("p", {id: "list-summary", "aria-live": "polite"});
  const sorted = `Executions, ${SORTS[sort].toLowerCase()}: ${ORDERS[sort][order === "asc" ? 1 : 0]}`;
  const {wrap, body} = tableOf(["Execution", "Capability", "State", "Progress", "Created", "Duration", "By"], sorted);
  const pager = el("nav", {class: "pager", "aria-label": "Pages"});
  main.append(el("h1", {text: "Executions"}), filterForm, bulkBar, findForm, summary, wrap, pager);

  // The search box names what the chosen capability declares searchable.
  const searchable = new Map();
  const searchHint = () => {
    const members = searchable.get(capBox.value) || [];
    searchBox.placeholder = members.length ? members.map((m) => m + "=…").join(" or ") : "member=value";
  };
  capBox.addEventListener("change", searchHint);
  call("/api/v1/capabilities").then((answer) => {
    for (const c of answer.capabilities) {
      searchable.set(c.id, c.searchable || []);
      if (c.id !== filters.capability) capBox.append(el("option", {value: c.id, text: c.id}));
    }
    searchHint();
  }).catch(() => {});

  const rows = new Map();
  let all = [];
  const pageCount = () => Math.max(1, Math.ceil(all.length / PAGE_SIZE));
  const pageUrl = (n, from = before) => {
    const q = new URLSearchParams(Object.entries(match));
    if (sort !== "created") q.set("sort", sort);
    if (order !== "desc") q.set("order", order);
    if (from) q.set("before", from);
    if (n > 1) q.set("page", String(n));
    return "/" + (q.toString() ? "?" + q : "");
  };
  function row(x) {
    const why = failureBrief(x);
    const tr = el("tr", {"data-id": x.id},
      el("td", {class: "c-what"}, link("/executions/" + x.id, shortId(x.id), {class: "mono", title: x.id, "aria-label": x.id}),
        el("span", {class: "what", text: " " + identity(x)})),
      el("td", {text: x.capability}), el("td", {class: "c-state"}, badge(x.state),
        why ? el("small", {class: "why", title: why, text: why}) : null),
      el("td", {class: "c-progress"}, meter(x.progress)), el("td", {}, time(x.created_at)),
      el("td", {text: duration(x.duration_ms)}), el("td", {text: x.actor + (x.episode ? " · " + x.episode : "")}));
    rows.set(x.id, tr);
    return tr;
  }
  function show() {
    const n = Math.min(pageNo, pageCount());
    const shown = all.slice((n - 1) * PAGE_SIZE, n * PAGE_SIZE);
    rows.clear();
    body.replaceChildren(...shown.map(row));
    if (!shown.length) body.append(el("tr", {}, el("td", {colspan: 7, class: "muted", text: "No execution matches."})));
    const first = all.length ? (n - 1) * PAGE_SIZE + 1 : 0;
    summary.textContent = `${first}–${(n - 1) * PAGE_SIZE + shown.length} of the ` +
      (before ? `${all.length} created before ${before}` : `newest ${all.length}`) +
      (sort === "created" && order === "desc" ? "" : `, ${ORDERS[sort][order === "asc" ? 1 : 0]}`);
    // Older: the next page of this window, or, at its end, the window before its last one
    // (newest first only: another order is of one window).
    const more = all.length >= LIST_BOUND && sort === "created" && order === "desc";
    const older = n < pageCount() ? pageUrl(n + 1) : more ? pageUrl(1, all[all.length - 1].id) : "";
    const newer = n > 1 ? pageUrl(n - 1) : before ? pageUrl(1, "") : "";
    pager.replaceChildren(
      newer ? link(newer, n > 1 ? "← Newer" : "← Newest", {rel: "prev"}) : el("span", {class: "muted", text: "← Newer"}),
      el("span", {text: ` page ${n} of ${pageCount()}${more ? "+" : ""} `}),
      older ? link(older, "Older →", {rel: "next"}) : el("span", {class: "muted", text: "Older →"}));
  }
  let controller = null, refetchTimer = null, lastFetch = 0, loaded = false;
  async function load() {
    if (controller) controller.abort();
    controller = new AbortController();
    lastFetch = performance.now();
    try {
      const query = Object.assign({limit: LIST_BOUND}, match, before ? {before} : {},
        sort !== "created" ? {sort} : {}, order !== "desc" ? {order} : {});
      const answer = await call("/api/v1/executions", {query, signal: controller.signal});
      all = answer.executions;
      connectionPart("reads", true);
      setCounts(answer.active, answer.queued);
      show();
      loaded = true;
      main.dataset.loaded = "true";
    } catch (e) {
      if (e.name === "AbortError") return;
      // Once shown, the list stays while the API is out of reach, the banner saying so.
      if (!(readOutcome(e) && loaded)) body.replaceChildren(el("tr", {}, el("td", {colspan: 7}, problem(e))));
    }
  }
  function refetchSoon() {
    // New or finished executions re-read the list, at most once a second.
    if (refetchTimer) return;
    refetchTimer = setTimeout(() => { refetchTimer = null; load(); }, Math.max(0, 1000 - (performance.now() - lastFetch)));
  }
  const apply = every((items) => {
    const latest = new Map();
    let reread = false;
    for (const ev of items) {
      if (ev.type === "execution.created" || TERMINAL.has(ev.type) || ev.type === "execution.started") reread = true;
      if (!rows.has(ev.execution_id)) continue;
      const seen = latest.get(ev.execution_id) || {};
      if (ev.type === "execution.progress") seen.progress = ev.data;
      const state = {"execution.started": "running", "execution.cancelling": "cancelling", "execution.cancelled": "cancelled",
        "execution.completed": "succeeded", "execution.failed": "failed"}[ev.type];
      if (state) seen.state = state;
      latest.set(ev.execution_id, seen);
    }
    for (const [id, seen] of latest) {
      const tr = rows.get(id);
      if (seen.state) tr.querySelector(".c-state").replaceChildren(badge(seen.state));
      if (seen.progress) tr.querySelector(".c-progress").replaceChildren(meter(seen.progress));
    }
    if (reread) refetchSoon();
  });
  load();
  // Back after a cut: what happened meanwhile is read again, not guessed.
  let connected = false;
  const live = follow("/events", {
    message: (type, data) => { if (!type.startsWith("stream.")) apply(data); },
    state: (s) => {
      main.dataset.live = s;
      channelState(s);
      if (s === "live" && connected) load();
      if (s === "live") connected = true;
    },
  }, {reopen: true});
  return () => { live.stop(); if (controller) controller.abort(); clearTimeout(refetchTimer); };
}

// -- one execution ----------------------------------------------------------------------

function summarize(ev) {
  const d = ev.data || {};
  switch (ev.type) {
    case "execution.log": return d.message;
    case "execution.progress": return `${d.current}${d.total ? " / " + d.total : ""}${d.message ? " · " + d.message : ""}`;
    case "execution.step.started": return `${d.name}: ${d.title}`;
    case "execution.step.completed": return `${d.name}: ${d.ok ? "ok" : "failed"}${d.detail ? " · " + d.detail : ""}`;
    case "execution.failed": return `${d.error.code}: ${d.error.message}`;
    default: { const s = JSON.stringify(d); return s === "{}" || s === undefined ? "" : s.length > 160 ? s.slice(0, 159) + "…" : s; }
  }
}

function executionPage(params, id) {
  if (!ID_SHAPE.test(id)) { main.append(el("h1", {text: "Execution"}), problem(new Error(`${id} is not an execution id`))); return null; }
  let snap = null;             // the snapshot as last read, facts moved on by later events
  let snapSeq = 0;             // events up to this sequence are already in the snapshot
  let lastSeq = 0;             // the last event shown: nothing at or before it is shown again
  let pageAfter = 0;
  const what = el("span", {id: "x-what"});
  const heading = el("h1", {}, el("span", {text: "Execution "}), el("span", {class: "mono", text: id}), what);
  const failure = el("div", {id: "x-failure"});
  const stateSlot = el("span", {id: "x-state"});
  const cancelButton = el("button", {type: "button", id: "x-cancel", text: "Cancel", hidden: true});
  const againButton = el("button", {type: "button", id: "x-again", text: "Run again"});
  const say = el("p", {id: "x-say", role: "status", "aria-live": "polite"});
  const liveSay = el("span", {id: "x-live", class: "muted"});
  const facts = el("dl", {class: "facts", id: "x-facts"});
  const progressSlot = el("div", {id: "x-progress", class: "progress"});
  const steps = el("ol", {id: "x-steps", class: "timeline"});
  const log = el("ol", {id: "x-log", class: "log", "aria-label": "Log lines"});
  const diagnostics = el("ul", {id: "x-diagnostics"});
  const outcome = el("div", {id: "x-outcome"});
  const input = el("pre", {id: "x-input"});
  const notice = el("p", {id: "x-truncated", class: "muted"});
  const tail = tableOf(["#", "Time", "Type", "Data"], "Events as they arrive");
  tail.body.id = "x-events";
  tail.wrap.classList.add("tail");
  const pageInfo = el("p", {id: "x-page-info", "aria-live": "polite"});
  const pageTable = tableOf(["#", "Time", "Type", "Data"], "A page of events");
  pageTable.body.id = "x-page";
  const afterBox = el("input", {id: "x-after", type: "number", min: 0, value: 0, inputmode: "numeric"});
  const pageForm = el("form", {class: "bar"}, el("label", {for: "x-after", text: "Events after"}), afterBox,
    el("button", {type: "submit", text: "Read a page"}),
    el("button", {type: "button", id: "x-next-page", text: "Next page", onclick: () => readPage(pageAfter)}));
  pageForm.addEventListener("submit", (e) => { e.preventDefault(); readPage(parseInt(afterBox.value || "0", 10) || 0); });

  main.append(heading, el("div", {class: "bar"}, stateSlot, cancelButton, againButton, liveSay), say, failure,
    el("div", {class: "grid"},
      section("Snapshot", facts),
      section("Progress", progressSlot, el("h3", {text: "Steps"}), steps)),
    section("Log", log),
    section("Diagnostics", diagnostics),
    section("Outcome", outcome),
    section("Input (redacted)", input),
    section("Events", notice,
      el("p", {class: "muted", text: `The last ${TAIL_ROWS} as they arrive (the log keeps its last ${LOG_ROWS} lines); ` +
        "every retained event is in the pages below."}),
      tail.wrap,
      el("h3", {text: "Pages by cursor"}), pageForm, pageInfo, pageTable.wrap));

  function renderFacts() {
    const x = snap;
    stateSlot.replaceChildren(badge(x.state));
    cancelButton.hidden = !ACTIVE.has(x.state);
    cancelButton.disabled = x.state === "cancelling";
    const rowsOf = [
      ["State", x.state], ["Capability", x.capability + " · " + x.title],
      ["Created", timeAgo(x.created_at)], ["Started", timeAgo(x.started_at)], ["Finished", timeAgo(x.finished_at)],
      ["Duration", duration(x.duration_ms)], ["Started by", x.actor], ["Worker", x.worker || "—"],
      ["Attempt", String(x.attempt)], ["Priority", x.priority || "normal"], ["Due", x.due_at ? timeAgo(x.due_at) : "at once"],
      ["Retry of", x.retry_of ? link("/executions/" + x.retry_of, x.retry_of, {class: "mono"}) : "—"],
      ["Retried as", x.retried_as ? link("/executions/" + x.retried_as, x.retried_as, {class: "mono"}) : "—"],
      ["Schedule", x.schedule || "—"], ["Idempotency key", x.idempotency_key || "—"], ["Episode", x.episode || "—"],
      ["Events", el("span", {id: "x-count"})], ["Cancellable", x.cancellable ? "yes" : "no"],
    ];
    facts.replaceChildren(...rowsOf.flatMap(([k, v]) => [el("dt", {text: k}), el("dd", {}, v)]));
    renderCount();
    renderProgress();
    renderSteps();
    const none = [el("li", {class: "muted", text: "none"})];
    diagnostics.replaceChildren(...(x.diagnostics.length ? x.diagnostics.map(diagnostic) : none));
    input.textContent = JSON.stringify(x.input, null, 2);
    what.textContent = " · " + identity(x);
    failure.replaceChildren(...(x.error ? [errorOf(x)] : []));
    outcome.replaceChildren(...outcomeOf(x));
  }
  function outcomeOf(x) {
    if (x.output !== undefined) {
      return [el("p", {}, badge("succeeded"), el("span", {text: " output"})),
        el("pre", {id: "x-output", text: JSON.stringify(x.output, null, 2)})];
    }
    if (!x.error) return [el("p", {class: "muted", text: "Not finished yet."})];
    return [el("p", {}, badge(x.state), el("span", {text: ` ${x.error.code}: its error is shown at the top.`}))];
  }
  function errorOf(x) {
    // Its code and sentence, then the exception the worker named (whose text also ends the
    // sentence: shown once), then what to do.
    const exc = exceptionOf(x);
    const tail = exc ? ": " + exc.summary : "";
    const message = exc && x.error.message.endsWith(tail) ? x.error.message.slice(0, -tail.length) : x.error.message;
    return el("div", {id: "x-error", class: "problem", role: "alert"},
      el("p", {}, el("strong", {text: x.error.code}), el("span", {text: ": " + message})),
      exc ? el("p", {id: "x-exception"}, el("span", {text: "Exception "}), el("code", {text: exc.type}),
        exc.message ? el("span", {class: "exc-message", text: ": " + exc.message}) : null) : null,
      x.error.suggestion ? el("p", {text: "Suggestion: " + x.error.suggestion}) : null);
  }
  function renderCount() {
    const last = Math.max(snap.last_sequence, lastSeq);
    const dropped = snap.events_truncated || last > RETAINED ? `, the oldest dropped (${RETAINED} kept)` : "";
    const count = document.getElementById("x-count");
    if (count) count.textContent = `${Math.max(snap.event_count, last)} appended, last #${last}${dropped}`;
  }
  function renderProgress() {
    const p = snap.progress;
    progressSlot.replaceChildren(meter(p), el("p", {id: "x-progress-message", text: (p && p.message) || ""}));
  }
  function renderSteps() {
    if (!snap.steps.length) { steps.replaceChildren(el("li", {class: "muted", text: "no step yet"})); return; }
    steps.replaceChildren(...snap.steps.map((s) => el("li", {class: "step step-" + s.state, "data-step": s.name},
      el("span", {class: "mark", "aria-hidden": "true"}),
      el("strong", {text: s.title}),
      el("span", {class: "muted", text: ` ${s.name} · ${s.state}`}),
      el("span", {class: "when"}, time(s.started_at),
        s.finished_at ? el("span", {text: " → "}) : null, s.finished_at ? time(s.finished_at) : null),
      s.detail ? el("p", {text: s.detail}) : null)));
  }
  function diagnostic(d) {
    return el("li", {class: "diag diag-" + d.severity},
      el("strong", {text: `${d.severity} ${d.code}`}), el("span", {text: ": " + d.summary}),
      d.detail ? el("p", {text: d.detail}) : null,
      d.suggestion ? el("p", {class: "muted", text: "Suggestion: " + d.suggestion}) : null);
  }
  function move(ev) {
    // What an event newer than the snapshot changes in it.
    const d = ev.data || {};
    snap.last_sequence = ev.sequence;
    switch (ev.type) {
      case "execution.started": snap.state = "running"; snap.started_at = ev.timestamp; return "reread";
      case "execution.progress": snap.progress = d; return "progress";
      case "execution.step.started":
        snap.steps.push({name: d.name, title: d.title, state: "running", started_at: ev.timestamp});
        return "steps";
      case "execution.step.completed": {
        const s = snap.steps.findLast((t) => t.name === d.name);
        if (s) { s.state = d.ok ? "completed" : "failed"; s.finished_at = ev.timestamp; if (d.detail) s.detail = d.detail; }
        return "steps";
      }
      case "execution.diagnostic": snap.diagnostics.push(d); return "facts";
      case "execution.cancelling": snap.state = "cancelling"; return "facts";
      case "execution.cancelled": snap.state = "cancelled"; return "reread";
      case "execution.completed": snap.state = "succeeded"; snap.output = d.output; return "reread";
      case "execution.failed": snap.state = "failed"; snap.error = d.error; return "reread";
      default: return null;
    }
  }
  function eventRow(ev, data) {
    // One event as a row: its data summed up (the live table) or in full (a page).
    return el("tr", {"data-seq": ev.sequence, "data-ts": ev.timestamp},
      el("td", {text: String(ev.sequence)}), el("td", {}, time(ev.timestamp)), el("td", {}, el("code", {text: ev.type})),
      data ? el("td", {}, el("pre", {class: "json", text: JSON.stringify(ev.data)})) : el("td", {class: "data", text: summarize(ev)}));
  }
  let replayLeft = 0, reread = false;
  const historyShown = () => {
    // Marked a frame later: by then the frame that holds the history has been painted.
    requestAnimationFrame(() => requestAnimationFrame(() => {
      performance.mark("console:history-shown");
      main.dataset.history = "shown";
    }));
  };
  const apply = every((items) => {
    const logRows = document.createDocumentFragment(), tailRows = document.createDocumentFragment();
    const dirty = new Set();
    for (const ev of items) {
      if (ev.sequence <= lastSeq) continue; // a reconnect never shows one twice
      lastSeq = ev.sequence;
      if (replayLeft > 0 && --replayLeft === 0) historyShown();
      if (ev.type === "execution.log") {
        logRows.append(el("li", {"data-seq": ev.sequence}, time(ev.timestamp),
          el("span", {class: "stream", text: ev.data.stream}), el("span", {class: "line", text: ev.data.message})));
      }
      tailRows.append(eventRow(ev));
      if (snap && ev.sequence > snapSeq) { const what = move(ev); if (what) dirty.add(what); }
    }
    if (logRows.childNodes.length) { log.append(logRows); trim(log, LOG_ROWS); }
    if (tailRows.childNodes.length) { tail.body.append(tailRows); trim(tail.body, TAIL_ROWS); }
    if (!snap) return;
    if (dirty.has("facts") || dirty.has("reread")) renderFacts();
    else { renderCount(); if (dirty.has("progress")) renderProgress(); if (dirty.has("steps")) renderSteps(); }
    main.dataset.lastSequence = String(lastSeq);
    if (dirty.has("reread") && !reread) { reread = true; setTimeout(refresh, 50); }
  });
  function trim(list, keep) { while (list.childElementCount > keep) list.firstElementChild.remove(); }
  async function refresh() {
    reread = false;
    try {
      const fresh = await call("/api/v1/executions/get", {query: {id}});
      if (fresh.last_sequence >= snapSeq) { snap = fresh; snapSeq = fresh.last_sequence; renderFacts(); }
    } catch (e) { say.replaceChildren(problem(e)); }
  }
  async function readPage(after) {
    try {
      const page = await call("/api/v1/executions/events", {query: {id, after, limit: EVENTS_PAGE}});
      pageAfter = page.last_sequence;
      afterBox.value = String(after);
      const truncated = page.truncated ? `yes (events after the cursor were dropped by the ${RETAINED}-event cap)` : "no";
      pageInfo.textContent = `${page.events.length} events after #${after}; last #${page.last_sequence}; ` +
        `more: ${page.more ? "yes" : "no"}; truncated: ${truncated}; state: ${page.state}`;
      pageTable.body.replaceChildren(...page.events.map((ev) => eventRow(ev, true)));
    } catch (e) { pageInfo.replaceChildren(problem(e)); }
  }
  cancelButton.addEventListener("click", async () => {
    cancelButton.disabled = true;
    try {
      const answer = await call("/api/v1/executions/cancel", {body: {id}});
      const outcome = {requested: "Cancel requested", already_requested: "A cancel was already requested",
        already_finished: "Already finished"}[answer.outcome];
      const forced = answer.cancellable ? "" : " (its capability does not check for a cancel: it is stopped after a grace)";
      say.textContent = `${outcome}: the execution is ${answer.execution.state}${forced}.`;
      say.dataset.outcome = answer.outcome;
    } catch (e) { say.replaceChildren(problem(e)); cancelButton.disabled = false; }
  });
  againButton.addEventListener("click", async () => {
    if (!snap) return;
    if (holdsSecret(snap.input)) { navigate(`/start?capability=${encodeURIComponent(snap.capability)}&from=${id}`); return; }
    againButton.disabled = true;
    try {
      const started = await call("/api/v1/executions/start", {body: {capability: snap.capability, input: snap.input}});
      navigate("/executions/" + started.id);
    } catch (e) { say.replaceChildren(problem(e)); againButton.disabled = false; }
  });

  let live = null, connected = false;
  call("/api/v1/executions/get", {query: {id}}).then((first) => {
    snap = first;
    snapSeq = first.last_sequence;
    renderFacts();
    document.title = `${first.capability} ${id} · majordomus`;
    readPage(0);
    // From the start: the channel replays what is retained, then goes on live, with no gap
    // and no duplicate between the two; a reconnect resumes after the last id it gave.
    live = follow(`/events?execution=${encodeURIComponent(id)}&after=0`, {
      message: (type, data) => {
        const control = (data && data.data) || {};  // control messages: {type, data}
        if (type === "stream.ready") {
          replayLeft = control.replayed || 0;
          main.dataset.replayed = String(replayLeft);
          if (!replayLeft) historyShown();
          if (control.truncated) notice.textContent = "The oldest events were dropped: an execution keeps its last 500 (truncated).";
        } else if (type === "stream.closing" && control.reason === "finished") {
          // Its end: nothing more will come, so no reconnect (which would only be told 204).
          live.stop();
          liveSay.textContent = "not following (the execution is over)";
          liveSay.dataset.state = "ended";
          connectionPart("channel", true);
        } else if (type === "stream.lagged") {
          notice.textContent = `This page fell behind: ${control.dropped} events were dropped before it could read them.`;
        } else if (!type.startsWith("stream.")) apply(data);
      },
      state: (s) => {
        const shown = {live: "following live", ended: "not following (the execution is over)"};
        liveSay.textContent = shown[s] || s;
        liveSay.dataset.state = s;
        channelState(s);
        // Back after a cut: the events resume after the last one shown; the snapshot is read again.
        if (s === "live" && connected) refresh();
        if (s === "live") connected = true;
      },
    });
  }).catch((e) => { main.replaceChildren(heading, problem(e)); });
  return () => { if (live) live.stop(); };
}

// -- queue and workers ------------------------------------------------------------------

function queuePage() {
  const taken = el("p", {id: "q-taken", class: "muted", "aria-live": "off"});
  const backlog = tableOf(["Capability", "Waiting", "Held, and why", "Oldest wait", "Oldest", "Delayed", "Next due"], "Backlog by capability");
  backlog.body.id = "q-backlog";
  const running = el("div", {id: "q-running"});
  const workers = tableOf(["Worker", "Host", "PID", "Running", "Last beat", "Status", "Action"], "Workers");
  const drainSay = el("p", {id: "q-drain-say", "aria-live": "polite"});
  workers.body.id = "q-workers";
  const failures = tableOf(["Execution", "Capability", "Code", "Message", "Finished"], "Recent failures and cancellations");
  failures.body.id = "q-failures";
  const codes = el("p", {id: "q-codes"});
  main.append(el("h1", {text: "Queue and workers"}), taken,
    section("Backlog", backlog.wrap), section("Running, by worker", running), section("Workers", drainSay, workers.wrap),
    section("Recent failures and cancellations", codes, failures.wrap));
  // The report's ages as of its reading; `tick` moves them on each second, with no fetch.
  let ages = [], readAt = 0, lease = Infinity;
  const age = (seconds, suffix, worker, tag = "td") => {
    const cell = el(tag, {class: "age", text: seconds.toFixed(1) + suffix});
    ages.push({cell, seconds, suffix, worker});
    return cell;
  };
  const fill = (body, rows, cols, none) =>
    body.replaceChildren(...(rows.length ? rows : [el("tr", {}, el("td", {colspan: cols, class: "muted", text: none}))]));
  const executionLink = (id) => link("/executions/" + id, id, {class: "mono"});
  // An oldest wait only for a wait the report shows: none due (delayed ones only) is no wait.
  // Of those waiting, what a limit holds back (no worker could take them now), by limit.
  const heldText = (g) => [
    g.held ? `${g.held} by its max_concurrency` : "",
    g.held_per_key ? `${g.held_per_key} by its limit per key (over ${g.keys_held} key${g.keys_held === 1 ? "" : "s"})` : "",
    g.held_by_rate ? `${g.held_by_rate} waiting for their turn under its rate limit` : "",
  ].filter(Boolean).join("; ") || "—";
  const busiest = (g) => (g.busiest_keys || []).length
    ? "busiest keys: " + g.busiest_keys.map((k) => `${k.key} (${k.waiting})`).join(", ") : null;
  const backlogRow = (g) => el("tr", {"data-capability": g.capability},
    el("td", {text: g.capability}), el("td", {text: String(g.count)}),
    el("td", {class: "held", text: heldText(g), title: busiest(g)}),
    g.count && g.oldest ? age(g.oldest_wait_seconds, " s") : el("td", {class: "age none", text: "—"}),
    el("td", {}, g.oldest ? executionLink(g.oldest) : null),
    el("td", {text: String(g.delayed || 0)}), el("td", {}, g.next_due_at ? time(g.next_due_at) : null));
  const runningItem = (r) => el("li", {"data-id": r.id}, executionLink(r.id), el("span", {text: ` ${r.capability} `}),
    el("span", {class: "c-state"}, badge(r.state)),
    el("span", {text: " "}), r.running_seconds !== undefined ? age(r.running_seconds, " s", null, "span") : null,
    el("span", {text: " "}),
    el("span", {class: "c-progress"}, meter(r.progress)));
  // Drained by an operator (queue.drain) or stopping (SIGTERM): either way it takes nothing new.
  const workerStatus = (w) => w.silent ? el("span", {class: "state state-failed", text: "silent"})
    : w.draining ? el("span", {class: "state state-cancelling", text: "draining", title: w.drained_at ? "since " + clock(w.drained_at) : null})
    : !w.accepting ? el("span", {class: "state state-cancelling", text: "stopping"})
    : el("span", {class: "state state-succeeded", text: "beating"});
  async function drain(w, button) {
    const verb = w.draining ? "undrain" : "drain";
    const asked = w.draining ? `Let ${w.id} take executions again?`
      : `Drain ${w.id}? It finishes the ${w.running} it runs and takes no new executions until undrained.`;
    if (!window.confirm(asked)) return;
    button.disabled = true;
    try {
      const answer = await call("/api/v1/queue/" + verb, {body: {id: w.id}});
      drainSay.textContent = `${w.id} ${answer.worker.draining ? "drained: it takes no new executions from its next beat" : "undrained: it takes executions again"}` +
        (answer.changed ? "." : " (it was so already).");
    } catch (e) { drainSay.replaceChildren(problem(e)); }
    readSoon();
  }
  const drainButton = (w) => {
    const button = el("button", {type: "button", "data-drain": w.draining ? "undrain" : "drain",
      text: w.draining ? "Undrain" : "Drain", "aria-label": (w.draining ? "Undrain " : "Drain ") + w.id});
    button.addEventListener("click", () => drain(w, button));
    return button;
  };
  const workerRow = (w) => el("tr", {"data-worker": w.id, "data-pid": w.pid, "data-draining": String(!!w.draining), class: w.silent ? "silent" : ""},
    el("td", {class: "mono", text: w.id}), el("td", {text: w.host}), el("td", {text: String(w.pid)}),
    el("td", {text: String(w.running)}), age(w.seconds_since_beat, " s ago", w.silent ? null : w),
    el("td", {}, workerStatus(w)), el("td", {}, w.silent ? null : drainButton(w)));
  const failureRow = (f) => el("tr", {"data-code": f.code},
    el("td", {}, executionLink(f.id)), el("td", {text: f.capability}), el("td", {}, el("code", {text: f.code})),
    el("td", {text: f.message + (f.suggestion ? " (" + f.suggestion + ")" : "")}), el("td", {}, time(f.finished_at)));
  function render(q) {
    ages = [];
    readAt = performance.now();
    lease = q.lease_seconds;
    taken.textContent = `As of ${clock(q.taken_at)}: ${q.queued} queued, ${q.running} running; ` +
      `a worker is silent after ${q.lease_seconds} s without a beat.`;
    setCounts(q.queued + q.running, q.queued);
    fill(backlog.body, q.queued_by_capability.map(backlogRow), 7, "Nothing waits.");
    const byWorker = new Map();
    for (const r of q.running_executions) {
      const w = r.worker || "(no worker)";
      if (!byWorker.has(w)) byWorker.set(w, []);
      byWorker.get(w).push(r);
    }
    const groups = [...byWorker].map(([w, list]) => el("div", {class: "group", "data-worker": w},
      el("h3", {class: "mono", text: w}), el("ul", {}, ...list.map(runningItem))));
    running.replaceChildren(...(groups.length ? groups : [el("p", {class: "muted", text: "Nothing runs."})]));
    fill(workers.body, q.workers.map(workerRow), 7, "No worker has reported itself.");
    const counted = {};
    for (const f of q.recent_failures) counted[f.code] = (counted[f.code] || 0) + 1;
    const byCode = Object.entries(counted).map(([c, n]) => `${c} ${n}`).join(", ");
    codes.textContent = byCode ? "By code: " + byCode : "";
    fill(failures.body, q.recent_failures.map(failureRow), 5, "No recent failure.");
    main.dataset.loaded = "true";
  }
  function tick() {
    // Cut off, the ages stay as the last read left them (marked stale): the page cannot know.
    if (connection.since !== null) return;
    const since = (performance.now() - readAt) / 1000;
    let overdue = false;
    for (const a of ages) {
      const now = a.seconds + since;
      a.cell.textContent = now.toFixed(1) + a.suffix;
      // A beat this late would make its worker silent: read the report to know whether it came.
      if (a.worker && now > lease && !a.asked) { a.asked = true; overdue = true; }
    }
    if (overdue) readSoon();
  }

  // The report is read when the live channel says something that can change it happened
  // (an execution created, queued, started, cancelling or ended), at most once per READ_GAP_MS however
  // many arrive; again on every (re)connect, since what happened while cut is unknown; and
  // every QUEUE_SAFETY_MS regardless, since a worker's beats and arrival are not events.
  let stopped = false, controller = null, reading = false, again = false, lastRead = -Infinity;
  let soonTimer = null, safetyTimer = null;
  async function read() {
    soonTimer = null;
    if (reading) { again = true; return; }
    reading = true;
    again = false;
    lastRead = performance.now();
    clearTimeout(safetyTimer);
    controller = new AbortController();
    try {
      const report = await call("/api/v1/queue", {signal: controller.signal});
      connectionPart("reads", true);
      render(report);
    } catch (e) {
      if (e.name === "AbortError") return;
      // Out of reach, the report stays as read (the banner says since when); an answer that is an error is said.
      if (!(readOutcome(e) && readAt)) taken.replaceChildren(problem(e));
      if (e.needsToken) { stopped = true; return; }
    } finally { reading = false; }
    if (stopped) return;
    safetyTimer = setTimeout(read, QUEUE_SAFETY_MS);
    if (again) readSoon();
  }
  function readSoon() {
    if (stopped || soonTimer) return;
    if (reading) { again = true; return; }
    soonTimer = setTimeout(read, Math.max(0, READ_GAP_MS - (performance.now() - lastRead)));
  }
  const apply = every((items) => {
    let reread = false;
    const progress = new Map();
    for (const ev of items) {
      if (QUEUE_CHANGES.has(ev.type)) reread = true;
      else if (ev.type === "execution.progress") progress.set(ev.execution_id, ev.data);
    }
    // Progress moves in place, the latest of a frame: 1,000 reports a second cost no read.
    for (const [id, p] of progress) {
      const slot = running.querySelector(`li[data-id="${id}"] .c-progress`);
      if (slot) slot.replaceChildren(meter(p));
    }
    if (reread) readSoon();
  });
  let connected = false;
  const live = follow("/events", {
    message: (type, data) => { if (!type.startsWith("stream.")) apply(data); },
    state: (s) => {
      main.dataset.live = s;
      channelState(s);
      if (s === "live" && connected) readSoon();
      if (s === "live") connected = true;
    },
  }, {reopen: true});
  read();
  const ticker = setInterval(tick, 1000);
  return () => {
    stopped = true;
    live.stop();
    clearInterval(ticker);
    clearTimeout(soonTimer);
    clearTimeout(safetyTimer);
    if (controller) controller.abort();
  };
}

// -- schedules and episodes ---------------------------------------------------------------
// Read when opened, after each action, and every LIST_EVERY_MS (ticks move on; neither is an
// event of the live channel), and again when a read reaches the API after one that did not.

const LIST_EVERY_MS = 10000;

function polled(read) {
  let timer = null, stopped = false;
  const again = async () => {
    clearTimeout(timer);
    try { await read(); connectionPart("reads", true); } catch (e) { if (!readOutcome(e)) throw e; }
    if (!stopped) timer = setTimeout(() => again().catch(() => {}), LIST_EVERY_MS);
  };
  return {again, stop: () => { stopped = true; clearTimeout(timer); }};
}

function schedulesPage() {
  const say = el("div", {id: "sc-say", "aria-live": "polite"});
  const table = tableOf(["Schedule", "Capability", "Cron", "Time zone", "State", "Next ticks", "Last tick", "Actions"], "Schedules");
  table.body.id = "sc-list";
  main.append(el("h1", {text: "Schedules"}), say, table.wrap);
  const act = async (verb, s, button) => {
    button.disabled = true;
    try {
      const answer = await call("/api/v1/schedules/" + verb, {body: {id: s.id}});
      if (verb === "run") {
        say.replaceChildren(el("span", {text: `${s.id} started `}), link("/executions/" + answer.id, answer.id, {class: "mono"}), el("span", {text: "."}));
      } else say.textContent = `${s.id} ${answer.schedule.paused ? "paused" : "resumed"}` + (answer.changed ? "." : " (it was so already).");
    } catch (e) { say.replaceChildren(problem(e)); }
    poll.again().catch((e) => say.replaceChildren(problem(e)));
  };
  const button = (text, verb, s) => {
    const b = el("button", {type: "button", "data-action": verb, text, "aria-label": `${text} ${s.id}`});
    b.addEventListener("click", () => act(verb, s, b));
    return b;
  };
  const row = (s) => el("tr", {"data-schedule": s.id, "data-paused": String(s.paused)},
    el("td", {class: "mono", text: s.id}), el("td", {}, link("/?capability=" + encodeURIComponent(s.capability), s.capability)),
    el("td", {}, el("code", {text: s.cron})), el("td", {text: s.timezone}),
    el("td", {}, s.paused ? el("span", {class: "state state-cancelling", text: "paused", title: s.paused_at ? "since " + clock(s.paused_at) : null})
      : el("span", {class: "state state-succeeded", text: "active"})),
    el("td", {class: "ticks"}, ...(s.next_ticks || []).map((t) => el("div", {}, time(t)))),
    el("td", {}, s.last_tick_at ? time(s.last_tick_at) : el("span", {class: "muted", text: "—"}),
      s.last_execution ? el("div", {}, link("/executions/" + s.last_execution, shortId(s.last_execution), {class: "mono", title: s.last_execution})) : null),
    el("td", {class: "bar"}, button(s.paused ? "Resume" : "Pause", s.paused ? "resume" : "pause", s), button("Run now", "run", s)));
  const poll = polled(async () => {
    const answer = await call("/api/v1/schedules");
    table.body.replaceChildren(...(answer.schedules.length ? answer.schedules.map(row)
      : [el("tr", {}, el("td", {colspan: 8, class: "muted", text: "No schedule: declare one with its capability, or create one (schedules.create)."}))]));
    main.dataset.loaded = "true";
  });
  poll.again().catch((e) => say.replaceChildren(problem(e)));
  return poll.stop;
}

function episodesPage(params) {
  const closed = params.get("closed") === "1";
  const summary = el("p", {id: "ep-summary", "aria-live": "polite"});
  const table = tableOf(["Episode", "State", "Opened", "Last seen", "Held by", "Attachments", "Executions"], "Episodes");
  table.body.id = "ep-list";
  const other = closed ? link("/episodes", "Show open and detached") : link("/episodes?closed=1", "Show closed");
  main.append(el("h1", {text: closed ? "Closed episodes" : "Episodes"}), el("p", {}, other), summary, table.wrap);
  const SHOWN = 5;  // an episode's newest executions listed here; all of them in the filtered list
  const row = (e) => {
    const newest = e.executions.slice(-SHOWN).reverse();
    const state = e.state === "open" ? "state-succeeded" : e.state === "detached" ? "state-cancelling" : "state-queued";
    const until = e.expires_at ? el("div", {class: "muted"}, el("span", {text: "closes "}), time(e.expires_at))
      : e.closed_at ? el("div", {class: "muted"}, el("span", {text: (e.close_reason || "closed") + " "}), time(e.closed_at)) : null;
    return el("tr", {"data-episode": e.external_id, "data-state": e.state},
      el("td", {class: "mono", text: e.external_id}), el("td", {}, el("span", {class: "state " + state, text: e.state}), until),
      el("td", {}, time(e.opened_at)), el("td", {}, time(e.last_seen_at)), el("td", {class: "mono", text: e.held_by || "—"}),
      el("td", {text: String(e.attachments)}),
      el("td", {}, ...newest.map((id) => el("div", {}, link("/executions/" + id, shortId(id), {class: "mono", title: id}))),
        el("div", {}, link("/?episode=" + encodeURIComponent(e.external_id), `all ${e.execution_count} in the list`))));
  };
  const poll = polled(async () => {
    const answer = await call("/api/v1/episodes", {query: closed ? {closed: "true"} : {}});
    summary.textContent = `${answer.open} open, ${answer.detached} detached.`;
    table.body.replaceChildren(...(answer.episodes.length ? answer.episodes.map(row)
      : [el("tr", {}, el("td", {colspan: 7, class: "muted", text: closed ? "No closed episode is kept." : "No open or detached episode: an MCP client opens one with majordomus_session_attach."}))]));
    main.dataset.loaded = "true";
  });
  poll.again().catch((e) => summary.replaceChildren(problem(e)));
  return poll.stop;
}

// -- charts -------------------------------------------------------------------------------
// charts.js draws them; it is loaded when the page is first opened, so no other page pays
// for it.

function chartsPage(params) {
  let stop = () => {}, stopped = false;
  import("./charts.js")
    .then((charts) => { if (!stopped) stop = charts.chartsPage(main, params, {el, link, problem, polled, call}); })
    .catch((e) => main.append(problem(e)));
  return () => { stopped = true; stop(); };
}

// -- start ------------------------------------------------------------------------------

function startPage(params) {
  const capBox = el("select", {id: "s-capability", name: "capability", required: true}, el("option", {value: "", text: "choose one"}));
  const about = el("p", {id: "s-about", class: "muted"});
  const fields = el("div", {id: "s-fields", class: "fields"});
  const say = el("div", {id: "s-say", "aria-live": "polite"});
  const submit = el("button", {type: "submit", id: "s-submit", text: "Start"});
  const form = el("form", {id: "s-form", "aria-labelledby": "s-title"},
    el("div", {class: "field"}, el("label", {for: "s-capability", text: "Capability"}), capBox), about, fields, submit, say);
  main.append(el("h1", {id: "s-title", text: "Start an execution"}), form);
  let caps = new Map(), current = null;
  async function choose(id, prefill) {
    const cap = caps.get(id);
    fields.replaceChildren();
    current = null;
    if (!cap) { about.textContent = ""; return; }
    about.textContent = cap.description || cap.title;
    current = buildForm(fields, cap.input_schema, prefill);
    main.dataset.loaded = "true";
  }
  capBox.addEventListener("change", () => {
    history.replaceState(null, "", "/start" + (capBox.value ? "?capability=" + encodeURIComponent(capBox.value) : ""));
    choose(capBox.value);
  });
  form.addEventListener("submit", async (e) => {
    e.preventDefault();
    if (!current) return;
    let value;
    try { value = current.collect(); } catch (err) { say.replaceChildren(problem(err)); return; }
    submit.disabled = true;
    say.textContent = "Starting…";
    try {
      const started = await call("/api/v1/executions/start", {body: {capability: capBox.value, input: value}});
      navigate("/executions/" + started.id);
    } catch (err) { say.replaceChildren(problem(err)); submit.disabled = false; }
  });
  (async () => {
    try {
      const answer = await call("/api/v1/capabilities");
      for (const c of answer.capabilities.filter((c) => c.executable)) {
        caps.set(c.id, c);
        capBox.append(el("option", {value: c.id, text: `${c.id} · ${c.title}`}));
      }
      const wanted = params.get("capability");
      let prefill;
      if (params.get("from")) {
        const before = await call("/api/v1/executions/get", {query: {id: params.get("from")}});
        prefill = before.input;
        say.textContent = `The input of ${before.id}` + (holdsSecret(before.input) ? ": its secrets are not kept, type them again." : ".");
      }
      if (wanted && caps.has(wanted)) { capBox.value = wanted; await choose(wanted, prefill); }
      else main.dataset.loaded = "true";
    } catch (err) { say.replaceChildren(problem(err)); }
  })();
  return null;
}

liveTypes().catch(() => {}); // asked once, beside the page's first reads
route();
