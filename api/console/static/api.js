// The console's one way to the server: the public API with the tab's token, and the live
// channel. Nothing here touches the page; app.js renders what these answer.
"use strict";

const TOKEN_KEY = "majordomus-console-token";
const RETRY_MS = 1000;
const RETRY_CAP_MS = 30000;

export class ApiError extends Error {
  constructor(status, body) {
    const err = (body && body.error) || {};
    super(err.message || `HTTP ${status}`);
    this.status = status;
    this.code = err.code || "unavailable";
    this.suggestion = err.suggestion || "";
  }
  // A missing or wrong token is 401 (with WWW-Authenticate: Bearer); 403 is a foreign Origin.
  get needsToken() {
    return this.status === 401;
  }
}

// The token lives for the tab (sessionStorage): a new tab asks again, a reload does not.
export const token = {
  get: () => sessionStorage.getItem(TOKEN_KEY) || "",
  set: (value) => value ? sessionStorage.setItem(TOKEN_KEY, value) : sessionStorage.removeItem(TOKEN_KEY),
};

function headers(extra) {
  const sent = Object.assign({Accept: "application/json"}, extra || {});
  const t = token.get();
  if (t) sent.Authorization = "Bearer " + t;
  return sent;
}

// GET `path?query` or POST `body` as JSON; the answer decoded, or an ApiError thrown.
export async function call(path, {query, body, signal} = {}) {
  let url = path;
  if (query) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) if (v !== undefined && v !== null && v !== "") q.set(k, v);
    if ([...q].length) url += "?" + q;
  }
  const init = {headers: headers(body !== undefined ? {"Content-Type": "application/json"} : {}), signal};
  if (body !== undefined) { init.method = "POST"; init.body = JSON.stringify(body); }
  let response;
  try {
    response = await fetch(url, init);
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, {error: {code: "unavailable", message: "the API did not answer (" + e.message + ")"}});
  }
  const text = await response.text();
  let decoded = null;
  try { decoded = text ? JSON.parse(text) : null; } catch (e) { decoded = null; }
  if (!response.ok) throw new ApiError(response.status, decoded);
  return decoded;
}

let protocolTypes = null;
// Every event and control type the server names (executions.protocol), to listen for by name;
// asked once (again only after a failure, say before the token was given).
export function liveTypes() {
  if (!protocolTypes) {
    protocolTypes = call("/api/v1/executions/protocol")
      .then((p) => [...p.event_types, ...p.stream_types])
      .catch((e) => { protocolTypes = null; throw e; });
  }
  return protocolTypes;
}

// Follow the live channel at `url`, resuming after the last id with Last-Event-ID on every
// reconnect, so a dropped connection loses and repeats nothing. `on.message(type, data, id)`
// gets each message (data decoded), `on.state(text)` how the channel stands. Without a token
// this is the browser's EventSource; with one, EventSource cannot send the header, so the
// stream is read with fetch and the same rules are kept here. With `reopen` (a channel that
// never ends by itself, as the feed of every execution), a channel the server closed, or never
// opened, is tried again after a pause: the browser's EventSource gives up on an answer
// other than a stream (a proxy's 502 while the API restarts), and `204` ends only an
// execution's.
export function follow(url, on, {reopen = false} = {}) {
  return token.get() ? followWithFetch(url, on, reopen) : followWithEventSource(url, on, reopen);
}

function followWithEventSource(url, on, reopen) {
  let source = null, stopped = false, pause = RETRY_MS;
  const take = (message) => {
    let data = null;
    try { data = JSON.parse(message.data); } catch (e) { return; }
    // Control messages carry no id of their own.
    on.message(message.type, data, message.type.startsWith("stream.") ? null : message.lastEventId);
  };
  const again = () => {
    on.state("reconnecting");
    setTimeout(open, pause);
    pause = Math.min(pause * 2, RETRY_CAP_MS);
  };
  // The listeners must be there before the first message: open only once the types are known.
  const open = () => liveTypes().then((types) => {
    if (stopped) return;
    source = new EventSource(url);
    for (const t of types) source.addEventListener(t, take);
    source.onopen = () => { pause = RETRY_MS; on.state("live"); };
    source.onerror = () => {
      if (stopped) return;
      if (source.readyState !== EventSource.CLOSED) on.state("reconnecting");
      else if (reopen) again();
      else on.state("ended");
    };
  }).catch((e) => {
    if (stopped) return;
    if (reopen && !e.needsToken) again(); else on.state("closed: the protocol could not be read");
  });
  open();
  return {stop: () => { stopped = true; if (source) source.close(); }};
}

function followWithFetch(url, on, reopen) {
  const ctl = new AbortController();
  let lastId = null, serverRetry = null, pause = RETRY_MS, stopped = false;
  const take = (block) => {
    let type = "message", data = "", id = null;
    for (const line of block.split(/\r\n|\r|\n/)) {
      const colon = line.indexOf(":");
      if (colon === 0) continue;
      const field = colon < 0 ? line : line.slice(0, colon);
      const value = colon < 0 ? "" : line.slice(colon + 1).replace(/^ /, "");
      if (field === "id") id = value;
      else if (field === "event") type = value;
      else if (field === "data") data += (data ? "\n" : "") + value;
      else if (field === "retry" && /^\d+$/.test(value)) serverRetry = parseInt(value, 10);
    }
    if (id !== null) lastId = id;
    if (!data) return;
    let decoded;
    try { decoded = JSON.parse(data); } catch (e) { return; }
    on.message(type, decoded, type.startsWith("stream.") ? null : id);
  };
  (async () => {
    while (!stopped) {
      const sent = headers({Accept: "text/event-stream"});
      if (lastId !== null) sent["Last-Event-ID"] = lastId;
      try {
        const response = await fetch(url, {headers: sent, signal: ctl.signal, cache: "no-store"});
        const refused = response.status === 401 || response.status === 403;
        if (response.status === 204 && !reopen) { on.state("ended"); return; }
        if ((response.status !== 200 || !response.body) && (!reopen || refused)) {
          on.state("closed: " + response.status);
          return;
        }
        if (response.status !== 200 || !response.body) throw new Error("HTTP " + response.status);
        on.state("live");
        pause = RETRY_MS;
        const reader = response.body.getReader();
        const decoder = new TextDecoder();
        let buffer = "";
        for (;;) {
          const {value, done} = await reader.read();
          if (done) break;
          buffer += decoder.decode(value, {stream: true});
          let end;
          while ((end = buffer.search(/\r\n\r\n|\n\n|\r\r/)) >= 0) {
            const gap = buffer.startsWith("\r\n\r\n", end) ? 4 : 2;
            take(buffer.slice(0, end));
            buffer = buffer.slice(end + gap);
          }
        }
      } catch (e) {
        if (stopped || e.name === "AbortError") return;
      }
      on.state("reconnecting");
      const wait = serverRetry !== null ? serverRetry : pause;
      pause = Math.min(pause * 2, RETRY_CAP_MS);
      await new Promise((done) => setTimeout(done, wait));
    }
  })();
  return {stop: () => { stopped = true; ctl.abort(); }};
}
