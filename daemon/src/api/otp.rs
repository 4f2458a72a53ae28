//! One-time passwords.

use axum::{
    Json,
    extract::State,
    http::HeaderMap,
    response::{IntoResponse, Response},
};
use herald_common::{
    Problem,
    api::otp::{OtpSendIn, OtpSendOut, OtpVerifyIn, OtpVerifyOut},
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{ApiKeyAuth, scopes};
use super::extract::{AppJson, JsonBody, idempotency_key, parse_json, replayed};
use crate::{
    error::ApiResult,
    service::otp::{self, OtpSent},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(send_otp)).routes(routes!(verify_otp))
}

const PROBLEM: &str = "application/problem+json";

/// Generates (or takes) a code and delivers it now through the channel's provider.
#[utoipa::path(post, path = "/api/v1/otp/send", tag = "otp", request_body = OtpSendIn,
    params(("Idempotency-Key" = Option<String>, Header,
        description = "Repeats with the same key and body return the first response and send nothing (24 h)")),
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Sent", body = OtpSendOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The key lacks otp:send, or otp:custom_code for `code`", body = Problem, content_type = PROBLEM),
        (status = 409, description = "A request with this Idempotency-Key is in flight", body = Problem, content_type = PROBLEM),
        (status = 422, description = "A field is invalid, or the Idempotency-Key was used for another request", body = Problem, content_type = PROBLEM),
        (status = 429, description = "Too many codes for this recipient", body = Problem, content_type = PROBLEM),
        (status = 502, description = "The provider did not accept the code", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(application_id = %key.application_id))]
async fn send_otp(
    State(state): State<AppState>,
    ApiKeyAuth(key, _): ApiKeyAuth<scopes::OtpSend>,
    headers: HeaderMap,
    JsonBody(bytes): JsonBody,
) -> ApiResult<Response> {
    let input: OtpSendIn = parse_json(&bytes)?;
    let idempotency = idempotency_key(&headers, &bytes, &state.secret)?;
    Ok(match otp::send(&state, &key, input, idempotency).await? {
        OtpSent::Sent(out) => Json(out).into_response(),
        OtpSent::Replayed(earlier) => replayed(earlier),
    })
}

/// Verifies a code. Five wrong codes block the transaction for good.
#[utoipa::path(post, path = "/api/v1/otp/verify", tag = "otp", request_body = OtpVerifyIn,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Verified", body = OtpVerifyOut),
        (status = 400, description = "Wrong code (`attempts_remaining` says how many are left)", body = Problem, content_type = PROBLEM),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The key lacks otp:verify", body = Problem, content_type = PROBLEM),
        (status = 404, description = "No such transaction for this application", body = Problem, content_type = PROBLEM),
        (status = 409, description = "Already verified", body = Problem, content_type = PROBLEM),
        (status = 410, description = "Expired, or never delivered", body = Problem, content_type = PROBLEM),
        (status = 423, description = "Blocked after five wrong codes", body = Problem, content_type = PROBLEM),
        (status = 429, description = "Too many failed verifications for this recipient", body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(application_id = %key.application_id))]
async fn verify_otp(
    State(state): State<AppState>,
    ApiKeyAuth(key, _): ApiKeyAuth<scopes::OtpVerify>,
    AppJson(input): AppJson<OtpVerifyIn>,
) -> ApiResult<Json<OtpVerifyOut>> {
    Ok(Json(otp::verify(&state, &key, input).await?))
}
