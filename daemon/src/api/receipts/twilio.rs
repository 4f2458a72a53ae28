//! `POST /api/v1/receipts/twilio`: Twilio's status callbacks, which Herald asks for on every SMS
//! it sends. Authenticated by `X-Twilio-Signature` alone; the work is
//! `service::receipts::twilio`.

use axum::{
    extract::{OriginalUri, State},
    http::{HeaderMap, StatusCode, header},
};
use herald_common::Problem;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    api::extract::RawBody,
    config::SmsProvider,
    error::ApiResult,
    service::receipts::twilio::{self, Callback, TwilioStatusIn},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(twilio_status))
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
    let auth_token = match &state.config.sms {
        SmsProvider::Twilio { auth_token, .. } => Some(auth_token),
        SmsProvider::Log => None,
    };
    let is_form = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| essence.trim().eq_ignore_ascii_case(FORM));
    // The URL Twilio requested: behind a proxy the public URL may carry a path of its own, which
    // the proxy strips before the request reaches this route.
    let path = uri.path_and_query().map_or_else(|| uri.path(), |p| p.as_str());
    let url = format!("{}{path}", state.config.public_url);
    let callback = Callback {
        url: &url,
        signature: headers.get("x-twilio-signature").and_then(|v| v.to_str().ok()),
        form: is_form.then_some(&body[..]),
    };
    twilio::receive(&state, auth_token, callback, state.clock.now_millis()).await?;
    Ok(StatusCode::NO_CONTENT)
}
