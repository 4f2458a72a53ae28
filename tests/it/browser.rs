//! The browser inbox reader (`/content/herald-inbox.js`) in a real headless Chromium, on a page
//! of another origin, against the real daemon on both backends: items arrive in order, the
//! stream survives a network cut, a daemon restart and a page reload without gaps or duplicates,
//! the badge stays exact throughout, and an origin Herald does not grant is refused with an error
//! the page hears. A page whose cached token is refused still gets its first page, and a refusal
//! with `Retry-After` is waited in full.

use std::time::Duration;

use axum::{Router, http::StatusCode, response::Html, routing::get};
use herald_common::{
    Timestamp,
    api::{
        admin::Bootstrapped,
        inbox::InboxPatch,
        notifications::{Channel, NotificationIn},
    },
};
use herald_tests::{
    Backend, TestDaemon, both_backends,
    browser::Browser,
    peers::{CutProxy, RefusingProxy},
};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(20);

/// The test page: loads the reader from Herald and records what it hears in `window.herald`.
const PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>Inbox</title>
<p>Unread: <span id="badge">…</span></p>
<script type="module">
const q = new URLSearchParams(location.search);
const record = (window.herald = { events: [], states: [], errors: [], unread: null, items: 0, state: null,
                                  refreshes: 0 });
// The page's cached token: `stale` (one Herald refuses) when given, until Herald asks for another.
let token = q.get("stale") ?? q.get("token");
try {
  const { openInbox } = await import(q.get("herald") + "/content/herald-inbox.js");
  window.inbox = openInbox({
    baseUrl: q.get("herald"),
    async getToken(refresh) {
      if (refresh) {
        record.refreshes += 1;
        token = q.get("token");
      }
      return token;
    },
    lastEventId: sessionStorage.getItem("lastEventId"),
    heartbeatSeconds: 1,
    onEvent(type, data, id) {
      if (type === "notification.created") record.events.push({ id, title: data.title });
      if (id !== null) sessionStorage.setItem("lastEventId", id);
    },
    onChange({ unread, items }) {
      record.unread = unread;
      record.items = items.size;
      document.getElementById("badge").textContent = unread;
    },
    onState(state) {
      record.state = state;
      record.states.push(state);
    },
    onError(error) {
      record.errors.push({ status: error.status, code: error.code, message: error.message,
                           retryAfter: error.retryAfter });
    },
  });
} catch (error) {
  record.errors.push({ status: -1, message: String(error) });
}
</script>
"#;

/// Serves the page on a port of its own: an origin other than Herald's.
async fn page_server() -> String {
    let app = Router::new().route("/inbox.html", get(|| async { Html(PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}")
}

/// The daemon's settings for a page of `origin`: granted, and the page's heartbeat.
fn reader_env(origin: &str) -> Vec<(&'static str, String)> {
    vec![("HERALD_CORS_ORIGINS", origin.to_owned()), ("HERALD_STREAM_HEARTBEAT_SECONDS", "1".to_owned())]
}

fn titles(record: &Value) -> Vec<String> {
    record["events"].as_array().unwrap().iter().map(|e| e["title"].as_str().unwrap().to_owned()).collect()
}

fn ids(record: &Value) -> Vec<u64> {
    record["events"].as_array().unwrap().iter().map(|e| e["id"].as_str().unwrap().parse().unwrap()).collect()
}

async fn record(browser: &Browser) -> Value {
    browser.eval("return window.herald").await
}

/// Waits until the page has heard `count` items since it loaded and shows `unread`.
async fn until(browser: &Browser, what: &str, count: usize, unread: u64) -> Value {
    let script = format!(
        "const r = window.herald; return r && r.events.length >= {count} && r.unread === {unread} && r.state === 'live' ? r : null"
    );
    browser.wait_for(what, WAIT, &script).await
}

async fn send(d: &TestDaemon, key: &str, titles: &[&str]) {
    let client = d.with_token(key);
    for title in titles {
        let mut n = NotificationIn::new(Channel::InApp, "ann", format!("{title} body"));
        n.title = Some((*title).to_owned());
        client.send_notification(&n, None).await.unwrap();
    }
}

async fn inbox_in_a_browser(backend: Backend) {
    let granted = page_server().await;
    let refused = page_server().await;
    let mut d = TestDaemon::start_with(backend, reader_env(&granted)).await;
    let boot = d.bootstrap().await;
    let key = boot.api_key.clone();
    let token = d.with_token(&key).user_token(&herald_tests::user_id("ann"), None).await.unwrap().token;
    send(&d, &key, &["old 1", "old 2", "old 3"]).await;

    // The page reaches Herald through a proxy that can cut the network.
    let proxy = CutProxy::start(d.addr).await;
    let browser = Browser::start().await;
    let page = format!("{granted}/inbox.html?herald={}&token={token}", proxy.url());
    browser.goto(&page).await;
    // Three unread before the page opened: the badge, and the page of items.
    let r = until(&browser, "the stream to open", 0, 3).await;
    assert_eq!(r["errors"], serde_json::json!([]), "{r}");
    browser.wait_for("the first page of items", WAIT, "return window.herald.items === 3").await;

    // Live, in order.
    send(&d, &key, &["live 1", "live 2", "live 3", "live 4", "live 5"]).await;
    let r = until(&browser, "five live items", 5, 8).await;
    assert_eq!(titles(&r), ["live 1", "live 2", "live 3", "live 4", "live 5"]);
    assert_eq!(ids(&r), [4, 5, 6, 7, 8]);

    // Read on another device: the badge follows.
    let user = d.with_token(&token);
    let newest = user.inbox(&Default::default()).await.unwrap().notifications[0].id.clone();
    user.patch_inbox_item(&newest, &InboxPatch { is_read: Some(true), archived: None }).await.unwrap();
    browser.wait_for("the badge to drop", WAIT, "return window.herald.unread === 7").await;

    // The network goes away (the reader notices the silence), two items arrive meanwhile, the
    // network comes back: they are replayed once each, and the badge counts them once.
    proxy.cut();
    browser
        .wait_for("the reader to notice the cut", WAIT, "return window.herald.state === 'reconnecting'")
        .await;
    send(&d, &key, &["cut 1", "cut 2"]).await;
    proxy.restore();
    let r = until(&browser, "the items sent during the cut", 7, 9).await;
    assert_eq!(ids(&r), [4, 5, 6, 7, 8, 9, 10], "no gap, no duplicate: {r}");

    // The daemon restarts (the server ends the stream); one item arrives after.
    d = d.restart().await;
    send(&d, &key, &["after restart"]).await;
    let r = until(&browser, "the item after the restart", 8, 10).await;
    assert_eq!(ids(&r), [4, 5, 6, 7, 8, 9, 10, 11], "{r}");

    // The page reloads and resumes from the id it saved: items sent while it was loading are
    // replayed, nothing before them is.
    browser.eval("location.reload(); return true").await;
    send(&d, &key, &["during reload 1", "during reload 2"]).await;
    let r = until(&browser, "the reloaded page to catch up", 2, 12).await;
    assert_eq!(titles(&r), ["during reload 1", "during reload 2"], "{r}");
    assert_eq!(ids(&r), [12, 13]);
    // Nothing more: one item sent now arrives next, after anything a duplicate or a replay from
    // before the reload would have brought; the badge counts it once.
    send(&d, &key, &["after reload"]).await;
    let r = until(&browser, "the item after the reload", 3, 13).await;
    assert_eq!(
        (ids(&r), r["unread"].as_u64()),
        (vec![12, 13, 14], Some(13)),
        "nothing more, the badge exact: {r}"
    );

    // A page from an origin Herald does not grant loads the reader but is refused, and hears so.
    browser.goto(&format!("{refused}/inbox.html?herald={}&token={token}", proxy.url())).await;
    let errors = browser
        .wait_for(
            "the refusal",
            WAIT,
            "const e = window.herald && window.herald.errors; return e && e.length ? e : null",
        )
        .await;
    let message = errors[0]["message"].as_str().unwrap();
    assert!(message.contains("HERALD_CORS_ORIGINS"), "the error names the likely cause: {errors}");
    assert_eq!(errors[0]["status"], 0, "{errors}");
    let r = record(&browser).await;
    assert_eq!(
        (r["events"].as_array().unwrap().len(), r["state"].as_str()),
        (0, Some("reconnecting")),
        "{r}"
    );

    browser.stop().await;
    d.stop().await;
}
both_backends!(inbox_in_a_browser_on_each_backend, inbox_in_a_browser);

/// A daemon for a page of its own origin, with two unread items for `ann`, and her user token.
async fn two_unread(origin: &str) -> (TestDaemon, Bootstrapped, String) {
    let d = TestDaemon::start_with(Backend::Sqlite, reader_env(origin)).await;
    let boot = d.bootstrap().await;
    let token =
        d.with_token(&boot.api_key).user_token(&herald_tests::user_id("ann"), None).await.unwrap().token;
    send(&d, &boot.api_key, &["old 1", "old 2"]).await;
    (d, boot, token)
}

/// The page's first page of items, once it holds `count`.
async fn first_page(browser: &Browser, what: &str, count: usize) -> Value {
    let script = format!("return window.herald.items === {count} && window.herald");
    browser.wait_for(what, WAIT, &script).await
}

/// A page that opens with an expired cached token is refused (401) for its first page and its
/// stream alike. With the token `getToken(true)` gives, the stream opens and the first page
/// arrives too: it once stayed empty for good under a right badge.
#[tokio::test]
async fn the_first_page_arrives_once_a_refused_token_is_refreshed() {
    let origin = page_server().await;
    let (d, boot, token) = two_unread(&origin).await;
    let claims = json!({"sub": "ann", "tenant_id": boot.tenant_id, "application_id": boot.application_id,
                        "exp": Timestamp::now().seconds() - 600});
    let key = EncodingKey::from_secret(boot.signing_secret.as_bytes());
    let expired = jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key).unwrap();

    let browser = Browser::start().await;
    browser.goto(&format!("{origin}/inbox.html?herald={}&token={token}&stale={expired}", d.url)).await;
    until(&browser, "the stream with the new token", 0, 2).await;
    let r = first_page(&browser, "the first page with the new token", 2).await;
    let errors = r["errors"].as_array().unwrap();
    assert!(!errors.is_empty() && errors.iter().all(|e| e["status"] == 401), "the expired token only: {r}");
    assert!(r["refreshes"].as_u64() >= Some(1), "{r}");
    browser.stop().await;
    d.stop().await;
}

const STREAM: &str = "/api/v1/in-app/stream";
const INBOX: &str = "/api/v1/inbox";

/// Refused with 429 and then with 503, each with `Retry-After: 1`, the reader reconnects no
/// sooner than asked each time, and retries a first page refused with 503 no sooner either
/// (RFC 9110 §10.2.3). Its jitter once went below the server's wait, to half of it.
#[tokio::test]
async fn the_reader_waits_retry_after_in_full() {
    let origin = page_server().await;
    let (d, _, token) = two_unread(&origin).await;
    let refusals = [
        (STREAM, StatusCode::TOO_MANY_REQUESTS),
        (STREAM, StatusCode::SERVICE_UNAVAILABLE),
        (INBOX, StatusCode::SERVICE_UNAVAILABLE),
    ];
    let proxy = RefusingProxy::start(d.addr, &refusals, 1).await;
    let browser = Browser::start().await;
    browser.goto(&format!("{origin}/inbox.html?herald={}&token={token}", proxy.url())).await;

    let held = |path: &str, statuses: &[u16]| {
        let seen = proxy.seen(path);
        assert_eq!(seen.iter().map(|s| s.status).collect::<Vec<_>>(), statuses, "{path}: {seen:?}");
        let gaps: Vec<Duration> = seen.windows(2).map(|w| w[1].at - w[0].at).collect();
        assert!(
            gaps.iter().all(|g| *g >= Duration::from_secs(1)),
            "{path}: a retry before Retry-After: {gaps:?}"
        );
    };
    until(&browser, "the stream after two refusals", 0, 2).await;
    held(STREAM, &[429, 503, 200]);
    let r = first_page(&browser, "the first page after its refusal", 2).await;
    held(INBOX, &[503, 200]);
    let errors = r["errors"].as_array().unwrap();
    assert!(errors.len() == 3 && errors.iter().all(|e| e["retryAfter"] == 1), "Retry-After read: {r}");
    browser.stop().await;
    d.stop().await;
}

/// A page where `fetch` is scripted: the reader's first page and its count requests are
/// answered at once, and the test writes the stream's bytes itself (`window.script.push`), so an
/// interleaving that the live daemon produces only now and then happens every time.
const SCRIPTED_PAGE: &str = r#"<!doctype html>
<meta charset="utf-8"><title>Scripted inbox</title>
<script type="module">
const q = new URLSearchParams(location.search);
const encoder = new TextEncoder();
let stream;
const script = (window.script = { recounts: 0, unread: null, items: 0, state: null, errors: [] });
script.push = (text) => stream.enqueue(encoder.encode(text));
const json = (body) => new Response(JSON.stringify(body), { headers: { "Content-Type": "application/json" } });
window.fetch = async (url) => {
  const u = new URL(url);
  if (u.pathname === "/api/v1/in-app/stream") {
    const body = new ReadableStream({ start(controller) { stream = controller; } });
    return new Response(body, { headers: { "Content-Type": "text/event-stream" } });
  }
  if (u.searchParams.get("limit") === "1") {
    script.recounts += 1;
    return json({ notifications: [], unread_count: 3, total_count: 3 });
  }
  // The first page, read after item 6 was created but before the stream's connection.ready.
  const item = { id: "i6", title: "six", body: "", data: {}, is_read: false, archived: false,
                 created_at: "2026-11-24T00:00:00Z" };
  return json({ notifications: [item], unread_count: 2, total_count: 2 });
};
try {
  const { openInbox } = await import(q.get("herald") + "/content/herald-inbox.js");
  window.inbox = openInbox({
    baseUrl: "http://scripted.invalid",
    getToken: async () => "token",
    onChange({ unread, items }) {
      script.unread = unread;
      script.items = items.size;
    },
    onState(state) { script.state = state; },
    onError(error) { script.errors.push(error.message); },
  });
} catch (error) {
  script.errors.push(String(error));
}
</script>
"#;

fn created(id: u32, read: bool) -> String {
    let item = serde_json::json!({
        "id": format!("i{id}"), "title": "t", "body": "", "data": {}, "is_read": read, "archived": false,
        "created_at": "2026-11-24T00:00:00Z",
    });
    format!("event: notification.created\nid: {id}\ndata: {item}\n\n")
}

/// The badge counts an item created after `connection.ready` once, even when the first page
/// (read at another moment) already holds it; it once took such an item for an update to an
/// unknown item, asked the API for the count (which by then included the next item) and then
/// counted that next item again: 13 shown for 12 unread after a page reload, now and then.
#[tokio::test]
async fn the_badge_counts_an_item_the_first_page_already_holds_once() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let app = Router::new().route("/scripted.html", get(|| async { Html(SCRIPTED_PAGE) }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let origin = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    let browser = Browser::start().await;
    browser.goto(&format!("{origin}/scripted.html?herald={}", d.url)).await;
    browser.wait_for("the first page", WAIT, "return window.script.items === 1 && window.script").await;

    let push = |text: String| format!("window.script.push({}); return true", serde_json::json!(text));
    let ready = r#"{"connection_id":"c1","unread_count":1,"last_event_id":"5"}"#;
    browser.eval(&push(format!("event: connection.ready\ndata: {ready}\n\n"))).await;
    browser
        .wait_for("ready", WAIT, "return window.script.state === 'live' && window.script.unread === 1")
        .await;
    // Item 6 (on the first page) and item 7 (not) were created after ready's count: one each.
    browser.eval(&push(created(6, false))).await;
    browser.eval(&push(created(7, false))).await;
    // A replayed item (5, not above ready's last_event_id) is in ready's count already.
    browser.eval(&push(created(5, false))).await;
    let script = browser
        .wait_for("the created items", WAIT, "return window.script.items === 3 && window.script")
        .await;
    assert_eq!((script["unread"].as_u64(), script["recounts"].as_u64()), (Some(3), Some(0)), "{script}");
    assert_eq!(script["errors"], serde_json::json!([]), "{script}");
    // Item 6 read elsewhere: this connection saw its state, so the badge moves by one.
    let read = serde_json::json!({"id": "i6", "title": "t", "body": "", "data": {}, "is_read": true,
                                   "archived": false, "created_at": "2026-11-24T00:00:00Z"});
    browser.eval(&push(format!("event: notification.updated\ndata: {read}\n\n"))).await;
    let script =
        browser.wait_for("the read", WAIT, "return window.script.unread === 2 && window.script").await;
    assert_eq!(script["recounts"].as_u64(), Some(0), "{script}");
    browser.stop().await;
    d.stop().await;
}
