//! `GET` and `POST /u/{token}`: the one-click unsubscribe link of every email with a category
//! (CONTRACT §9, RFC 8058). No credential and no cookie: the sealed token is the authority.
//!
//! `GET` shows a small page naming the masked recipient and the category, with a button that
//! posts the form back; it changes nothing, because link scanners and previews fetch links. The
//! page needs no JavaScript and loads nothing else. `POST` with the RFC 8058 body
//! `List-Unsubscribe=One-Click` (form-urlencoded, as the page's form sends it, or
//! multipart/form-data, as a mail client may) adds the `unsubscribe` suppression and answers
//! 200; again, 200 and nothing new. Anything that is not a token Herald sealed is 404, the same
//! page whatever is wrong with it, so the routes tell nobody anything about anything else.

use axum::{
    extract::{Path, State},
    http::{HeaderMap, HeaderValue, StatusCode, header},
    response::{IntoResponse, Response},
};
use herald_common::Problem;
use utoipa_axum::{router::OpenApiRouter, routes};

use super::extract::RawBody;
use crate::{error::ApiResult, service::unsubscribe, state::AppState, unsubscribe::ONE_CLICK};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(unsubscribe_page, unsubscribe_one_click))
}

const PROBLEM: &str = "application/problem+json";

/// The confirmation page of a one-click unsubscribe link: the masked recipient, the category,
/// and a button that posts the one-click form back to the same URL. Changes nothing (mail
/// scanners fetch links); works without JavaScript and loads nothing else.
#[utoipa::path(get, path = "/u/{token}", tag = "unsubscribe",
    params(("token" = String, Path, description = "The sealed token of the email's `List-Unsubscribe` link")),
    responses(
        (status = 200, description = "The confirmation page", content_type = "text/html", body = String),
        (status = 404, description = "Not a link Herald made (altered, cut short, or from another server)",
            content_type = "text/html", body = String),
    ))]
#[tracing::instrument(skip_all)]
async fn unsubscribe_page(State(state): State<AppState>, Path(token): Path<String>) -> Response {
    match unsubscribe::read(&state, &token) {
        Some(what) => page(
            StatusCode::OK,
            "Unsubscribe",
            &format!(
                "<p>Stop emails about <strong>{}</strong> to <strong>{}</strong>?</p>\
                 <form method=\"post\"><input type=\"hidden\" name=\"List-Unsubscribe\" value=\"One-Click\">\
                 <button type=\"submit\">Unsubscribe</button></form>\
                 <p class=\"small\">Other emails, such as receipts and sign-in codes, still arrive.</p>",
                escape(&what.category),
                escape(&what.recipient_masked)
            ),
        ),
        None => not_a_link(),
    }
}

/// The one click (RFC 8058): adds an `unsubscribe` suppression of the recipient for the link's
/// category, and answers a page saying so; the same again answers the same and adds nothing.
/// The body is `List-Unsubscribe=One-Click`, form-urlencoded (the confirmation page's form) or
/// multipart/form-data (a mail client's one-click button).
#[utoipa::path(post, path = "/u/{token}", tag = "unsubscribe",
    params(("token" = String, Path, description = "The sealed token of the email's `List-Unsubscribe` link")),
    request_body(content = String, content_type = "application/x-www-form-urlencoded",
        description = "`List-Unsubscribe=One-Click` (or the same field as multipart/form-data)"),
    responses(
        (status = 200, description = "Unsubscribed (now or before)", content_type = "text/html", body = String),
        (status = 400, description = "A link Herald made, but the body is not `List-Unsubscribe=One-Click`: \
            nothing changed; the page says to press the button", content_type = "text/html", body = String),
        (status = 404, description = "Not a link Herald made (altered, cut short, or from another server)",
            content_type = "text/html", body = String),
        (status = 413, description = "The body is larger than 256 KiB (`payload_too_large`)", body = Problem, content_type = PROBLEM),
        (status = 503, description = "The database is not available (`unavailable`), with `Retry-After`",
            body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all)]
async fn unsubscribe_one_click(
    State(state): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<Response> {
    if unsubscribe::read(&state, &token).is_none() {
        return Ok(not_a_link());
    }
    let content_type = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
    if !is_one_click(content_type, &body) {
        return Ok(page(
            StatusCode::BAD_REQUEST,
            "Unsubscribe",
            "<p>Nothing has changed. Open the link from the email and press <strong>Unsubscribe</strong> \
             to confirm.</p>",
        ));
    }
    let Some((entry, _created)) = unsubscribe::confirm(&state, &token).await? else {
        return Ok(not_a_link());
    };
    let category = entry.category.as_deref().unwrap_or_default();
    Ok(page(
        StatusCode::OK,
        "Unsubscribed",
        &format!(
            "<p role=\"status\" id=\"unsubscribed\">You are unsubscribed: no more emails about \
             <strong>{}</strong> to <strong>{}</strong>.</p>\
             <p class=\"small\">Changed your mind? Ask the sender to lift it.</p>",
            escape(category),
            escape(&entry.recipient_masked)
        ),
    ))
}

/// Whether a POST body is the RFC 8058 one-click: `List-Unsubscribe=One-Click` as a form
/// field, urlencoded (also when no content type says so) or in a multipart form.
fn is_one_click(content_type: &str, body: &[u8]) -> bool {
    let essence = content_type.split(';').next().unwrap_or_default().trim().to_ascii_lowercase();
    if essence == "multipart/form-data" {
        return multipart_boundary(content_type).is_some_and(|b| multipart_has_one_click(&b, body));
    }
    let (name, value) = ONE_CLICK.split_once('=').unwrap_or_default();
    form_urlencoded::parse(body).any(|(n, v)| n == name && v == value)
}

/// The `boundary` parameter of a multipart content type.
fn multipart_boundary(content_type: &str) -> Option<String> {
    content_type.split(';').skip(1).find_map(|parameter| {
        let (key, value) = parameter.split_once('=')?;
        key.trim().eq_ignore_ascii_case("boundary").then(|| value.trim().trim_matches('"').to_owned())
    })
}

/// Whether a multipart/form-data body has the part `List-Unsubscribe` with the value `One-Click`.
fn multipart_has_one_click(boundary: &str, body: &[u8]) -> bool {
    let (name, value) = ONE_CLICK.split_once('=').unwrap_or_default();
    let Ok(body) = std::str::from_utf8(body) else { return false };
    let delimiter = format!("--{boundary}");
    body.split(delimiter.as_str()).any(|part| {
        let Some((head, content)) = part.split_once("\r\n\r\n") else { return false };
        let named = head.lines().any(|line| {
            let Some((field, rest)) = line.split_once(':') else { return false };
            field.trim().eq_ignore_ascii_case("content-disposition")
                && rest.split(';').any(|p| {
                    p.split_once('=')
                        .is_some_and(|(k, v)| k.trim() == "name" && v.trim().trim_matches('"') == name)
                })
        });
        named && content.trim_end_matches("\r\n").trim() == value
    })
}

/// The one answer to anything that is not a token Herald sealed.
fn not_a_link() -> Response {
    page(
        StatusCode::NOT_FOUND,
        "Link not valid",
        "<p>This unsubscribe link is not valid. Check that the whole link was copied from the email.</p>",
    )
}

/// A small self-contained page: no script, no external asset, not cached, not framed (so the
/// button cannot be clicked through another site's page), no referrer sent.
fn page(status: StatusCode, title: &str, content: &str) -> Response {
    let html = format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <meta name=\"robots\" content=\"noindex\"><title>{title}</title><style>{STYLE}</style></head>\
         <body><main><h1>{title}</h1>{content}</main></body></html>"
    );
    let headers = [
        (header::CONTENT_TYPE, "text/html; charset=utf-8"),
        (header::CACHE_CONTROL, "no-store"),
        (header::REFERRER_POLICY, "no-referrer"),
        (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
        (header::X_FRAME_OPTIONS, "DENY"),
        (
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
        ),
    ];
    let mut response = (status, html).into_response();
    for (name, value) in headers {
        response.headers_mut().insert(name, HeaderValue::from_static(value));
    }
    response.headers_mut().insert("x-robots-tag", HeaderValue::from_static("noindex"));
    response
}

const STYLE: &str = "body{font-family:system-ui,sans-serif;margin:0;background:#f6f6f4;color:#222}\
    main{max-width:32rem;margin:4rem auto;padding:2rem;background:#fff;border-radius:8px}\
    h1{font-size:1.4rem;margin-top:0}button{font:inherit;padding:.6rem 1.4rem;border:0;border-radius:6px;\
    background:#1d4ed8;color:#fff;cursor:pointer}.small{color:#666;font-size:.9rem}";

/// `text` safe inside HTML text and attribute values.
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_one_click_body_is_recognised_in_both_form_encodings() {
        let form = "application/x-www-form-urlencoded";
        assert!(is_one_click(form, b"List-Unsubscribe=One-Click"));
        assert!(is_one_click("", b"List-Unsubscribe=One-Click"));
        assert!(is_one_click(form, b"x=1&List-Unsubscribe=One-Click"));
        assert!(!is_one_click(form, b""));
        assert!(!is_one_click(form, b"List-Unsubscribe=Yes"));
        assert!(!is_one_click(form, b"list-unsubscribe=one-click"));
        let multipart = "multipart/form-data; boundary=\"XyZ\"";
        let body = "--XyZ\r\nContent-Disposition: form-data; name=\"List-Unsubscribe\"\r\n\r\nOne-Click\r\n--XyZ--\r\n";
        assert!(is_one_click(multipart, body.as_bytes()));
        assert!(!is_one_click(multipart, body.replace("One-Click", "No").as_bytes()));
        assert!(!is_one_click("multipart/form-data", body.as_bytes()), "no boundary");
        assert!(!is_one_click(multipart, &[0xff, 0xfe]));
    }

    #[test]
    fn page_text_is_escaped() {
        assert_eq!(escape("<a href=\"x\">'&'</a>"), "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;");
        assert_eq!(escape("a***b@example.com"), "a***b@example.com");
    }
}
