// herald-inbox.js: a user's Herald inbox in the browser (or Node.js 18+), live, with no
// dependencies. heraldd serves this file at /content/herald-inbox.js; docs/STREAM.md explains it.
//
//   import { openInbox } from "https://herald.example.com/content/herald-inbox.js";
//   const inbox = openInbox({ baseUrl, getToken, onChange: ({ unread, items }) => render(unread, items) });
//
// It follows GET /api/v1/in-app/stream with fetch (so it can send Authorization), reconnects with
// backoff and Last-Event-ID, keeps the unread count exact across reconnects, and reports its state
// and every error to callbacks instead of swallowing them.

/** A failure talking to Herald: an HTTP problem (`status`, `code`, `detail`) or, with status 0, a
 * network failure (which in a browser includes a page origin Herald does not grant). */
export class HeraldError extends Error {
  constructor(message, { status = 0, code = null, detail = null, retryAfter = 0, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = "HeraldError";
    this.status = status;
    this.code = code;
    this.detail = detail;
    this.retryAfter = retryAfter;
  }
}

/** Whether an item counts towards the badge. */
const counted = (item) => !!item && !item.is_read && !item.archived;

/**
 * Opens a user's inbox.
 *
 * - `baseUrl`: where Herald answers, e.g. "https://herald.example.com" or "/herald".
 * - `getToken(refresh)`: resolves to a user token; `refresh` is true after Herald refused the
 *   last one (your backend mints them with POST /api/v1/users/{id}/token).
 * - `lastEventId`: resume after this event id (saved from `inbox.lastEventId` before a reload or
 *   a close): the items created since are replayed, each once, in order.
 * - `pageSize` (20): how many of the newest items to load into `items` at the start; 0 for none.
 * - `heartbeatSeconds` (15): the daemon's HERALD_STREAM_HEARTBEAT_SECONDS; a connection silent
 *   for three of them is dropped and opened again.
 * - `onEvent(type, data, id)`: every stream event, with its id (`notification.created` only,
 *   else null).
 * - `onChange({ unread, items, event })`: after anything that changes the badge or the items
 *   (`items` is a Map by item id, archived items left out; `event` is null after a reload).
 * - `onState(state, info)`: "connecting", "live", "reconnecting" ({ attempt, delayMs, error }),
 *   "closed".
 * - `onError(error)`: every failure, a HeraldError, including the ones it retries by itself.
 *
 * Returns `{ close(), lastEventId, unread, items, state }` (the last four are getters).
 */
export function openInbox({
  baseUrl,
  getToken,
  lastEventId = null,
  pageSize = 20,
  heartbeatSeconds = 15,
  onEvent = () => {},
  onChange = () => {},
  onState = () => {},
  onError = () => {},
} = {}) {
  if (typeof baseUrl !== "string" || typeof getToken !== "function") {
    throw new TypeError("openInbox needs { baseUrl, getToken }");
  }
  const base = baseUrl.replace(/\/+$/, "");
  const closed = new AbortController();
  const items = new Map();
  // Which connection an item's state was last set by, from its own stream events. Only such a
  // state is a safe "before" for an update: the badge of a connection starts from its
  // connection.ready, and an update made while disconnected is not replayed.
  const seenIn = new Map();
  let unread = null;
  let state = "idle";
  let connection = 0;
  let readyLast = 0;
  let readyLastId = null;
  let refresh = false;
  let failures = 0;
  let recounting = null;
  let resumeFrom = lastEventId === null || lastEventId === undefined ? null : String(lastEventId);

  const report = (error) => {
    try {
      onError(error);
    } catch (e) {
      console.error(e);
    }
  };
  const setState = (next, info = {}) => {
    state = next;
    onState(next, info);
  };
  const changed = (event) => onChange({ unread, items, event });
  const asHerald = (error) =>
    error instanceof HeraldError ? error : new HeraldError(String(error?.message ?? error), { cause: error });

  // How long to wait before trying again after `failures` failures in a row. A server's
  // Retry-After is the least it asked for (RFC 9110 §10.2.3), so the jitter goes above it (up to
  // half as long again, so that readers refused together do not return together); a backoff of
  // our own (0.5 s doubling to 30 s) has its jitter below it.
  const delayFor = (error, failures) =>
    error?.retryAfter > 0
      ? Math.ceil(error.retryAfter * 1000 * (1 + Math.random() / 2))
      : Math.round(Math.min(30000, 500 * 2 ** failures) * (0.5 + Math.random() / 2));

  // Resolves after `ms`, or at once when the inbox is closed.
  const sleep = (ms) =>
    new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        closed.signal.removeEventListener("abort", done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      closed.signal.addEventListener("abort", done);
    });

  async function problem(res) {
    let body = {};
    try {
      body = await res.json();
    } catch {
      // not a problem body
    }
    const code = body.code ?? null;
    const detail = body.detail ?? null;
    return new HeraldError(`Herald answered ${res.status}${code ? ` ${code}` : ""}${detail ? `: ${detail}` : ""}`, {
      status: res.status,
      code,
      detail,
      retryAfter: Number(res.headers.get("Retry-After")) || 0,
    });
  }

  async function send(path, init = {}) {
    let res;
    try {
      const headers = { ...(init.headers ?? {}), Authorization: `Bearer ${await getToken(refresh)}` };
      res = await fetch(base + path, { ...init, headers, signal: init.signal ?? closed.signal });
    } catch (cause) {
      if (closed.signal.aborted) throw cause;
      throw new HeraldError(
        `cannot reach Herald at ${base} (a network failure, or this page's origin is not in HERALD_CORS_ORIGINS)`,
        { cause },
      );
    }
    refresh = res.status === 401;
    if (!res.ok) throw await problem(res);
    return res;
  }

  // The newest page of items. The badge is not taken from it: it comes from connection.ready,
  // and the events after it move it.
  async function loadPage() {
    if (pageSize <= 0) return;
    const page = await (await send(`/api/v1/inbox?limit=${pageSize}`)).json();
    for (const item of page.notifications) if (!items.has(item.id)) items.set(item.id, item);
    changed(null);
  }

  // The first page, beside the stream, tried again until it loads: a page refused once (a cached
  // token that expired, a busy server, a network failure) must not leave `items` empty for good
  // under a right badge. It waits as the stream does, Retry-After included, and a 401 has set
  // `refresh`, so the next try asks getToken(true) for a new token.
  async function firstPage() {
    for (let failures = 1; !closed.signal.aborted; failures += 1) {
      try {
        await loadPage();
        return;
      } catch (error) {
        if (closed.signal.aborted) return;
        const herald = asHerald(error);
        report(herald);
        await sleep(delayFor(herald, failures));
      }
    }
  }

  // The badge from the API, for an update to an item whose earlier state this connection does
  // not know. Several at once share one request.
  function recount() {
    recounting ??= (async () => {
      try {
        const page = await (await send("/api/v1/inbox?limit=1")).json();
        unread = page.unread_count;
        changed(null);
      } catch (error) {
        if (!closed.signal.aborted) report(error);
      } finally {
        recounting = null;
      }
    })();
  }

  function handle(type, data, id) {
    if (type === "connection.ready") {
      connection += 1;
      unread = data.unread_count;
      readyLast = Number(data.last_event_id) || 0;
      readyLastId = data.last_event_id ?? null;
      failures = 0;
      setState("live", { connectionId: data.connection_id });
    } else if (type === "notification.created" || type === "notification.updated") {
      const before = items.get(data.id);
      if (type === "notification.created") {
        // Replayed after Last-Event-ID (an id not above connection.ready's): ready already
        // counted it as it is now. Newer: created after ready's count, so it adds itself, even
        // when the first page (read at another moment) already holds it.
        if (id === null || Number(id) > readyLast) unread += counted(data) ? 1 : 0;
      } else if (seenIn.get(data.id) === connection) {
        unread += (counted(data) ? 1 : 0) - (counted(before) ? 1 : 0);
      } else {
        recount();
      }
      seenIn.set(data.id, connection);
      if (data.archived) items.delete(data.id);
      else items.set(data.id, data);
    }
    if (id !== null) resumeFrom = id;
    onEvent(type, data, id);
    if (type !== "heartbeat") changed({ type, data, id });
  }

  // One connection, until it ends. Throws on a failure.
  async function follow() {
    const conn = new AbortController();
    const stop = () => conn.abort();
    closed.signal.addEventListener("abort", stop);
    let timer;
    const alive = () => {
      clearTimeout(timer);
      timer = setTimeout(stop, 3000 * heartbeatSeconds);
    };
    try {
      alive();
      const headers = { Accept: "text/event-stream" };
      if (resumeFrom !== null) headers["Last-Event-ID"] = resumeFrom;
      const res = await send("/api/v1/in-app/stream", { headers, signal: conn.signal });
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buffer = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) return;
        alive();
        buffer += value;
        for (let end; (end = buffer.indexOf("\n\n")) >= 0; ) {
          const block = buffer.slice(0, end);
          buffer = buffer.slice(end + 2);
          let type = "message";
          let id = null;
          let data = "";
          for (const line of block.split("\n")) {
            const colon = line.indexOf(":");
            if (colon <= 0) continue;
            const field = line.slice(0, colon);
            const text = line.slice(colon + 1).replace(/^ /, "");
            if (field === "event") type = text;
            else if (field === "id") id = text;
            else if (field === "data") data += (data ? "\n" : "") + text;
          }
          if (!data) continue;
          const payload = JSON.parse(data);
          if (type === "stream.resync") {
            // The replay could not be complete: reload, and go on from the newest item at
            // connection.ready (after slow_consumer, from the last item handled: only updates
            // were lost). Items replayed again are replaced by id, and not counted twice.
            if (payload.reason !== "slow_consumer") resumeFrom = readyLastId;
            items.clear();
            seenIn.clear();
            onEvent(type, payload, null);
            await loadPage().catch((error) => report(asHerald(error)));
            continue;
          }
          handle(type, payload, id);
        }
      }
    } finally {
      clearTimeout(timer);
      closed.signal.removeEventListener("abort", stop);
    }
  }

  (async () => {
    setState("connecting");
    // The page loads beside the stream; its items never move the badge.
    if (pageSize > 0) firstPage();
    while (!closed.signal.aborted) {
      // After a clean end: within half a second.
      let delayMs = delayFor(null, 0);
      let error = null;
      try {
        await follow();
        if (closed.signal.aborted) break;
      } catch (thrown) {
        if (closed.signal.aborted) break;
        error = asHerald(thrown);
        report(error);
        failures += 1;
        delayMs = delayFor(error, failures);
      }
      setState("reconnecting", { attempt: failures, delayMs, error });
      await sleep(delayMs);
    }
    setState("closed");
  })();

  return {
    close: () => closed.abort(),
    get lastEventId() {
      return resumeFrom;
    },
    get unread() {
      return unread;
    },
    get items() {
      return items;
    },
    get state() {
      return state;
    },
  };
}
