//! What the client tells `tracing` about each request (target [`TARGET`]), so that a program can
//! say what it does (the CLI's `-v` and `-vv`):
//!
//! - DEBUG: a line per request once it is answered: method, path and query, status, time.
//! - TRACE: also the request line before it goes, and both sides' headers.
//!
//! Never a secret: `Authorization` and cookies show only their scheme, the URL only its path and
//! query (not a user or password it may carry), and no body at all (OTP codes travel in bodies).
//! When nothing listens at DEBUG, a request costs one check more than sending it.

use std::time::Instant;

use reqwest::{
    Client as Http, Request, Response, Url,
    header::{self, HeaderMap},
};
use tracing::Level;

/// The `tracing` target of the request log.
pub const TARGET: &str = "herald::http";

/// Sends `request`, and logs it.
pub(super) async fn execute(http: &Http, request: Request) -> Result<Response, reqwest::Error> {
    if !tracing::enabled!(target: TARGET, Level::DEBUG) {
        return http.execute(request).await;
    }
    let headers_too = tracing::enabled!(target: TARGET, Level::TRACE);
    let line = format!("{} {}", request.method(), path_of(request.url()));
    if headers_too {
        tracing::trace!(target: TARGET, "> {line}");
        for text in shown_headers(request.headers()) {
            tracing::trace!(target: TARGET, "> {text}");
        }
    }
    let started = Instant::now();
    let result = http.execute(request).await;
    let ms = started.elapsed().as_millis();
    match &result {
        Ok(response) => {
            tracing::debug!(target: TARGET, "{line} → {} in {ms} ms", response.status());
            if headers_too {
                for text in shown_headers(response.headers()) {
                    tracing::trace!(target: TARGET, "< {text}");
                }
            }
        }
        // reqwest's own text of the error repeats the whole URL: say what happened instead.
        Err(error) => {
            let what = if error.is_connect() {
                "cannot connect"
            } else if error.is_timeout() {
                "timed out"
            } else {
                "no answer"
            };
            tracing::debug!(target: TARGET, "{line} → {what} after {ms} ms");
        }
    }
    result
}

/// The path and query of `url`: what the server is asked, without the host or any credential.
fn path_of(url: &Url) -> String {
    match url.query() {
        Some(query) => format!("{}?{query}", url.path()),
        None => url.path().to_owned(),
    }
}

/// `name: value` lines, credentials redacted.
fn shown_headers(headers: &HeaderMap) -> Vec<String> {
    headers
        .iter()
        .map(|(name, value)| {
            let secret = value.is_sensitive()
                || [header::AUTHORIZATION, header::PROXY_AUTHORIZATION, header::COOKIE, header::SET_COOKIE]
                    .contains(name);
            let text = match value.to_str() {
                // The scheme says which kind of credential went (`Bearer`), never the credential.
                Ok(text) if secret => match text.split_once(' ') {
                    Some((scheme, _)) if name == header::AUTHORIZATION => format!("{scheme} [redacted]"),
                    _ => "[redacted]".to_owned(),
                },
                Ok(text) => text.to_owned(),
                Err(_) => "[not text]".to_owned(),
            };
            format!("{name}: {text}")
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use reqwest::header::HeaderValue;

    use super::*;

    #[test]
    fn credentials_never_show() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer hk_secret"));
        headers.insert(header::COOKIE, HeaderValue::from_static("session=secret"));
        let mut marked = HeaderValue::from_static("secret");
        marked.set_sensitive(true);
        headers.insert("x-token", marked);
        headers.insert("last-event-id", HeaderValue::from_static("1700000000000-notif_1"));
        let shown = shown_headers(&headers).join("\n");
        assert!(!shown.contains("secret"), "{shown}");
        assert!(shown.contains("authorization: Bearer [redacted]"), "{shown}");
        assert!(shown.contains("cookie: [redacted]") && shown.contains("x-token: [redacted]"), "{shown}");
        assert!(shown.contains("last-event-id: 1700000000000-notif_1"), "{shown}");
    }

    #[test]
    fn urls_show_their_path_and_query_only() {
        let url = Url::parse("http://ann:pw@127.0.0.1:8080/api/v1/activity?status=failed&limit=5").unwrap();
        assert_eq!(path_of(&url), "/api/v1/activity?status=failed&limit=5");
        assert_eq!(path_of(&Url::parse("http://h/healthz").unwrap()), "/healthz");
    }
}
