//! `POST /api/v1/receipts/twilio`: Twilio's status callbacks, which Herald asks for on every SMS
//! it sends. Authenticated by `X-Twilio-Signature` alone; the work is
//! `service::receipts::twilio`.

use axum::{
    extract::{OriginalUri, State},
    http::{HeaderMap, StatusCode, header},
    response::IntoResponse,
};
use herald_common::Problem;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    api::extract::RawBody,
    config::SmsProvider,
    error::ApiResult,
    service::receipts::twilio::{self, Callback, TwilioInboundIn, TwilioStatusIn},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(twilio_status)).routes(routes!(twilio_inbound))
}

const PROBLEM: &str = "application/problem+json";
const FORM: &str = "application/x-www-form-urlencoded";

/// A status callback from Twilio: the message's later status (`delivered`, `undelivered` with
/// its `ErrorCode`, …), kept in the item's history and moving its status up the precedence.
/// Signed with `X-Twilio-Signature`: base64 HMAC-SHA1, keyed with the Twilio auth token, of the
/// public URL (`HERALD_PUBLIC_URL` and this path) followed by every form field's name and value,
/// sorted by name.
#[utoipa::path(post, path = "/api/v1/receipts/twilio", tag = "receipts",
    request_body(content = TwilioStatusIn, content_type = "application/x-www-form-urlencoded",
        description = "Twilio's status callback; its other fields (To, From, AccountSid, …) are signed and ignored"),
    params(("X-Twilio-Signature" = String, Header, description = "Twilio's signature of the request")),
    responses(
        (status = 204, description = "Taken; also when Herald does not know the message, which writes nothing"),
        (status = 400, description = "Signed, but not a status callback (`invalid_receipt`)", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The signature is missing or does not match, or SMS is not sent through Twilio (`invalid_signature`)",
            body = Problem, content_type = PROBLEM),
        (status = 413, description = "The body is larger than 256 KiB (`payload_too_large`)", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(provider = "twilio"))]
async fn twilio_status(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<StatusCode> {
    let url = signed_url(&state, &uri);
    let callback = callback(&url, &headers, &body);
    twilio::receive(&state, auth_token(&state), callback, state.clock.now_millis()).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// An incoming SMS to Herald's number (Twilio's incoming-message webhook; point the number's
/// "A message comes in" at this URL). STOP, STOPALL, UNSUBSCRIBE, CANCEL, END or QUIT alone in
/// the body (any case) add a `carrier_opt_out` suppression for the sender on sms, in every tenant
/// that has texted it; START or UNSTOP lift them. Any other text changes nothing. Signed like
/// the status callbacks. Answers an empty TwiML response, so Twilio sends no reply of its own
/// making (Twilio's Advanced Opt-Out answers the keywords itself).
#[utoipa::path(post, path = "/api/v1/receipts/twilio/inbound", tag = "receipts",
    request_body(content = TwilioInboundIn, content_type = "application/x-www-form-urlencoded",
        description = "Twilio's incoming-message webhook; its other fields are signed and ignored"),
    params(("X-Twilio-Signature" = String, Header, description = "Twilio's signature of the request")),
    responses(
        (status = 200, description = "Taken: an empty TwiML `<Response/>`", content_type = "text/xml", body = String),
        (status = 400, description = "Signed, but not an incoming message (`invalid_receipt`)", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The signature is missing or does not match, or SMS is not sent through Twilio (`invalid_signature`)",
            body = Problem, content_type = PROBLEM),
        (status = 413, description = "The body is larger than 256 KiB (`payload_too_large`)", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(provider = "twilio"))]
async fn twilio_inbound(
    State(state): State<AppState>,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<impl IntoResponse> {
    let url = signed_url(&state, &uri);
    twilio::inbound(&state, auth_token(&state), callback(&url, &headers, &body)).await?;
    Ok(([(header::CONTENT_TYPE, "text/xml; charset=utf-8")], EMPTY_TWIML))
}

/// The TwiML that tells Twilio to do nothing more.
const EMPTY_TWIML: &str = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Response/>";

/// The key of Twilio's signatures, when SMS goes through Twilio.
fn auth_token(state: &AppState) -> Option<&crate::config::Secret> {
    match &state.config.sms {
        SmsProvider::Twilio { auth_token, .. } => Some(auth_token),
        SmsProvider::Log => None,
    }
}

/// The URL Twilio requested and signed: behind a proxy the public URL may carry a path of its
/// own, which the proxy strips before the request reaches this route.
fn signed_url(state: &AppState, uri: &axum::http::Uri) -> String {
    let path = uri.path_and_query().map_or_else(|| uri.path(), |p| p.as_str());
    format!("{}{path}", state.config.public_url)
}

/// The request as the signature check reads it.
fn callback<'a>(url: &'a str, headers: &'a HeaderMap, body: &'a [u8]) -> Callback<'a> {
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(FORM));
    Callback {
        url,
        signature: headers.get("x-twilio-signature").and_then(|v| v.to_str().ok()),
        form: is_form.then_some(body),
    }
}
