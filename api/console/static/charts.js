// The charts page (/charts): throughput, failures and the p50/p95 of wait and duration over
// the last hour (a point a minute) or day (a point a quarter hour), every capability together
// and each, as `executions.stats` answers them. Drawn here as SVG by the page: no library,
// nothing fetched but the API's answer. Loaded by app.js only when the page is opened, so the
// other pages carry none of it; app.js hands over its page tools (`el`, `link`, `problem`,
// `polled`, `call`) rather than this module importing app.js back.
"use strict";

const NS = "http://www.w3.org/2000/svg";
const W = 600, H = 170;                       // a chart's drawing, in its own units (scaled to fit)
const PAD = {left: 52, right: 8, top: 8, bottom: 22};
const SMALL = {w: 600, h: 110, small: true};  // a capability's charts
const ENDS = [
  {key: "succeeded", label: "succeeded", cls: "c-ok"},
  {key: "failed", label: "failed", cls: "c-bad"},
  {key: "cancelled", label: "cancelled", cls: "c-off"},
];
const TIMES = [
  {key: "wait_p50_ms", label: "wait p50", cls: "c-wait"},
  {key: "wait_p95_ms", label: "wait p95", cls: "c-wait dash"},
  {key: "duration_p50_ms", label: "duration p50", cls: "c-run"},
  {key: "duration_p95_ms", label: "duration p95", cls: "c-run dash"},
];
const DAY_EVERY_MS = 60000;
const MS_TICKS = [[1, "1 ms"], [10, "10 ms"], [100, "100 ms"], [1e3, "1 s"], [1e4, "10 s"], [6e4, "1 min"],
  [6e5, "10 min"], [36e5, "1 h"], [864e5, "1 day"]];

function svg(tag, attrs, ...kids) {
  const e = document.createElementNS(NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) if (v !== undefined && v !== null) e.setAttribute(k, v);
  for (const k of kids) if (k) e.append(k);
  return e;
}
function titled(node, text) { node.append(svg("title", {}, document.createTextNode(text))); return node; }
function text(x, y, words, attrs) { return svg("text", Object.assign({x, y}, attrs || {}), document.createTextNode(words)); }

const two = (n) => (n < 10 ? "0" : "") + n;
function hhmm(iso) { const d = new Date(iso); return `${two(d.getHours())}:${two(d.getMinutes())}`; }
export function ms(v) {
  if (v === null || v === undefined) return "—";
  if (v < 1) return v.toFixed(2) + " ms";
  if (v < 1000) return (v < 10 ? v.toFixed(1) : Math.round(v)) + " ms";
  if (v < 60000) return (v / 1000).toFixed(v < 10000 ? 2 : 1) + " s";
  if (v < 3600000) return (v / 60000).toFixed(1) + " min";
  return (v / 3600000).toFixed(1) + " h";
}
function count(n) { return n >= 10000 ? Math.round(n / 1000) + "k" : String(n); }
// A round top for a count axis: 1, 2 or 5 times a power of ten, at least `max`.
function niceTop(max) {
  if (max <= 0) return 1;
  const p = Math.pow(10, Math.floor(Math.log10(max)));
  return [1, 2, 5, 10].map((m) => m * p).find((t) => t >= max);
}

// The frame both kinds share: the plot area, the time axis under it, the step's x.
function frame(points, size, stepSeconds) {
  const w = size.w, h = size.h, small = Boolean(size.small);
  const pad = small ? {left: PAD.left, right: PAD.right, top: 6, bottom: 18} : PAD;
  const plot = {x: pad.left, y: pad.top, w: w - pad.left - pad.right, h: h - pad.top - pad.bottom};
  const slot = plot.w / points.length;
  const root = svg("svg", {viewBox: `0 0 ${w} ${h}`, class: "chart" + (small ? " small" : ""), role: "img"});
  const axis = svg("g", {class: "axis"});
  const marks = small ? [0, Math.floor(points.length / 2), points.length - 1] : [0, Math.floor(points.length / 4), Math.floor(points.length / 2), Math.floor(3 * points.length / 4), points.length - 1];
  for (const i of marks) {
    const anchor = i === 0 ? "start" : i === points.length - 1 ? "end" : "middle";
    const x = i === points.length - 1 ? plot.x + plot.w : plot.x + i * slot;
    const label = i === points.length - 1 ? "now" : hhmm(points[i].at);
    axis.append(text(x, h - 4, label, {"text-anchor": anchor}));
  }
  axis.append(svg("line", {x1: plot.x, x2: plot.x + plot.w, y1: plot.y + plot.h, y2: plot.y + plot.h}));
  root.append(axis);
  return {root, axis, plot, slot, stepSeconds};
}

// Stacked bars of the ends by final state, a bar a step; each bar says its numbers on hover.
export function throughputChart(points, {size = {w: W, h: H}, stepSeconds = 60, label = "Throughput"} = {}) {
  const f = frame(points, size, stepSeconds);
  const top = niceTop(Math.max(...points.map((p) => p.succeeded + p.failed + p.cancelled)));
  const y = (v) => f.plot.y + f.plot.h - (v / top) * f.plot.h;
  for (const v of (top % 2 ? [0, top] : [0, top / 2, top])) {
    f.axis.append(svg("line", {class: "grid", x1: f.plot.x, x2: f.plot.x + f.plot.w, y1: y(v), y2: y(v)}));
    f.axis.append(text(f.plot.x - 4, y(v) + 4, count(v), {"text-anchor": "end"}));
  }
  const bars = svg("g", {class: "bars"});
  points.forEach((p, i) => {
    const total = p.succeeded + p.failed + p.cancelled;
    if (!total) return;
    const g = svg("g", {"data-at": p.at, "data-ended": total, "data-failed": p.failed});
    let base = 0;
    for (const s of ENDS) {
      const v = p[s.key];
      if (!v) continue;
      g.append(svg("rect", {class: s.cls, x: (f.plot.x + i * f.slot + f.slot * 0.1).toFixed(1), width: Math.max(0.5, f.slot * 0.8).toFixed(1),
        y: y(base + v).toFixed(1), height: Math.max(0.5, y(base) - y(base + v)).toFixed(1)}));
      base += v;
    }
    titled(g, `${hhmm(p.at)}: ${p.started} started, ${p.succeeded} succeeded, ${p.failed} failed, ${p.cancelled} cancelled`);
    bars.append(g);
  });
  f.root.append(bars);
  const sum = (k) => points.reduce((a, p) => a + p[k], 0);
  f.root.setAttribute("aria-label", `${label}: ${sum("started")} started, ${sum("succeeded")} succeeded, ${sum("failed")} failed, ${sum("cancelled")} cancelled`);
  return f.root;
}

// Lines of the wait and duration percentiles on a log scale of milliseconds; a step without
// a measure breaks its line.
export function timesChart(points, {size = {w: W, h: H}, stepSeconds = 60, label = "Wait and duration"} = {}) {
  const f = frame(points, size, stepSeconds);
  const values = points.flatMap((p) => TIMES.map((s) => p[s.key])).filter((v) => v !== null && v !== undefined);
  const lo = Math.max(0.1, Math.min(...values, 10) / 2), hi = Math.max(...values, 10) * 1.5;
  const span = Math.log10(hi) - Math.log10(lo);
  const y = (v) => f.plot.y + f.plot.h - ((Math.log10(Math.max(v, lo)) - Math.log10(lo)) / span) * f.plot.h;
  const ticks = MS_TICKS.filter(([t]) => t >= lo && t <= hi);
  const shown = size.small && ticks.length > 3 ? [ticks[0], ticks[Math.floor(ticks.length / 2)], ticks[ticks.length - 1]] : ticks;
  for (const [t, name] of shown) {
    f.axis.append(svg("line", {class: "grid", x1: f.plot.x, x2: f.plot.x + f.plot.w, y1: y(t), y2: y(t)}));
    f.axis.append(text(f.plot.x - 4, y(t) + 4, name, {"text-anchor": "end"}));
  }
  for (const s of TIMES) {
    let d = "";
    let pen = false;
    points.forEach((p, i) => {
      const v = p[s.key];
      if (v === null || v === undefined) { pen = false; return; }
      d += `${pen ? "L" : "M"}${(f.plot.x + (i + 0.5) * f.slot).toFixed(1)} ${y(v).toFixed(1)}`;
      pen = true;
    });
    const line = svg("path", {class: "line " + s.cls, d: d || "M0 0", "data-series": s.key});
    titled(line, s.label);
    f.root.append(line);
    // A lone point has no segment to show it: a dot does.
    points.forEach((p, i) => {
      const v = p[s.key];
      const before = points[i - 1], after = points[i + 1];
      const alone = v !== null && v !== undefined && !(before && before[s.key] != null) && !(after && after[s.key] != null);
      if (alone) f.root.append(svg("circle", {class: "dot " + s.cls, r: 2.5, cx: (f.plot.x + (i + 0.5) * f.slot).toFixed(1), cy: y(v).toFixed(1)}));
    });
  }
  const hover = svg("g", {class: "hover"});
  points.forEach((p, i) => {
    if (TIMES.every((s) => p[s.key] === null)) return;
    hover.append(titled(svg("rect", {x: (f.plot.x + i * f.slot).toFixed(1), y: f.plot.y, width: f.slot.toFixed(1), height: f.plot.h}),
      `${hhmm(p.at)}: ` + TIMES.map((s) => `${s.label} ${ms(p[s.key])}`).join(", ")));
  });
  f.root.append(hover);
  f.root.setAttribute("aria-label", label + ": " + TIMES.map((s) => s.label).join(", ") + ", on a logarithmic scale of time");
  return f.root;
}

function legend(el, series) {
  return el("p", {class: "legend"}, ...series.map((s) => el("span", {class: "key " + s.cls, text: s.label})));
}

function totals(el, t) {
  const cell = (name, value, cls) => el("div", {class: "total" + (cls ? " " + cls : "")}, el("span", {class: "muted", text: name}), el("strong", {text: value}));
  return el("div", {class: "totals"},
    cell("started", String(t.started)), cell("succeeded", String(t.succeeded)),
    cell("failed", String(t.failed), t.failed ? "bad" : ""), cell("cancelled", String(t.cancelled)),
    cell("wait p50 / p95", `${ms(t.wait_p50_ms)} / ${ms(t.wait_p95_ms)}`),
    cell("duration p50 / p95", `${ms(t.duration_p50_ms)} / ${ms(t.duration_p95_ms)}`));
}

// The page: app.js's router runs it with its tools, and stops it with what it answers.
export function chartsPage(main, params, {el, link, problem, polled, call}) {
  const span = params.get("span") === "day" ? "day" : "hour";
  const capability = params.get("capability") || "";
  const here = (s, c) => "/charts?" + new URLSearchParams(Object.assign({span: s}, c ? {capability: c} : {}));
  const spans = el("p", {class: "bar spans"},
    span === "hour" ? el("strong", {text: "Last hour"}) : link(here("hour", capability), "Last hour"),
    span === "day" ? el("strong", {text: "Last day"}) : link(here("day", capability), "Last day"),
    capability ? link(here(span, ""), "Every capability") : null);
  const say = el("div", {id: "ch-say", "aria-live": "polite"});
  const overall = el("section", {id: "ch-overall", "aria-labelledby": "ch-overall-title"});
  const each = el("div", {id: "ch-capabilities"});
  main.append(el("h1", {text: capability ? `Charts: ${capability}` : "Charts"}), spans, say, overall, each);

  // The day is read once a minute (a point is a quarter hour; its read costs the API more),
  // the hour at every turn of `polled`.
  let readAt = 0;
  const poll = polled(async () => {
    if (span === "day" && Date.now() - readAt < DAY_EVERY_MS) return;
    readAt = Date.now();
    const answer = await call("/api/v1/executions/stats", {query: {span, capability}});
    const step = answer.step_seconds;
    const every = step === 60 ? "a point a minute" : `a point every ${step / 60} minutes`;
    const o = answer.overall;
    overall.replaceChildren(
      el("h2", {id: "ch-overall-title", text: (capability || "Every capability") + ` · last ${span}, ${every}`}),
      totals(el, o.total),
      el("div", {class: "grid charts"},
        el("figure", {"data-chart": "throughput"}, el("figcaption", {text: "Ended per step, by final state"}),
          throughputChart(o.points, {stepSeconds: step}), legend(el, ENDS)),
        el("figure", {"data-chart": "times"}, el("figcaption", {text: "Wait (due to started) and duration (started to ended)"}),
          timesChart(o.points, {stepSeconds: step}), legend(el, TIMES))));
    const rows = capability ? [] : answer.capabilities.map((s) => el("section", {class: "cap-chart", "data-capability": s.capability},
      el("h2", {}, link(here(span, s.capability), s.capability)),
      totals(el, s.total),
      el("div", {class: "grid charts"},
        el("figure", {"data-chart": "throughput"}, throughputChart(s.points, {size: SMALL, stepSeconds: step, label: s.capability + " throughput"})),
        el("figure", {"data-chart": "times"}, timesChart(s.points, {size: SMALL, stepSeconds: step, label: s.capability + " wait and duration"})))));
    if (!capability && !answer.capabilities.length) rows.push(el("p", {class: "muted", text: `Nothing started or ended in the last ${span}.`}));
    if (answer.more_capabilities) rows.push(el("p", {class: "muted", text: `${answer.more_capabilities} quieter capabilities not shown: pick one by its name in the URL (?capability=).`}));
    each.replaceChildren(...rows);
    main.dataset.loaded = "true";
  });
  poll.again().catch((e) => say.replaceChildren(problem(e)));
  return poll.stop;
}
