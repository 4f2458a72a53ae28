//! The WhatsApp Cloud API webhook: Meta's verification handshake and the signed status
//! callbacks (CONTRACT §8). The work is `service::receipts::whatsapp`.

use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, header},
    response::{IntoResponse, Response},
};
use herald_common::Problem;
use serde::Deserialize;
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{
    api::extract::{AppQuery, RawBody},
    error::ApiResult,
    service::receipts::whatsapp,
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(verify_whatsapp_webhook, take_whatsapp_webhook))
}

const PROBLEM: &str = "application/problem+json";

/// Meta's parameters, named as Meta sends them. Each is optional here so that a missing one is
/// refused like a wrong one (403), not as a malformed query.
#[derive(Deserialize)]
struct Handshake {
    #[serde(rename = "hub.mode")]
    mode: Option<String>,
    #[serde(rename = "hub.verify_token")]
    verify_token: Option<String>,
    #[serde(rename = "hub.challenge")]
    challenge: Option<String>,
}

/// Meta's webhook verification: the challenge echoed when the verify token is
/// `HERALD_WHATSAPP_VERIFY_TOKEN`.
#[utoipa::path(get, path = "/api/v1/receipts/whatsapp", tag = "receipts",
    params(
        ("hub.mode" = String, Query, description = "`subscribe`"),
        ("hub.verify_token" = String, Query, description = "The verify token entered in Meta's app dashboard"),
        ("hub.challenge" = String, Query, description = "Echoed when the token is right"),
    ),
    responses(
        (status = 200, description = "The token is right: the challenge, as it came", body = String, content_type = "text/plain"),
        (status = 403, description = "The token is wrong or missing, `hub.mode` is not `subscribe`, or no verify token is configured (`invalid_signature`)",
            body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all)]
async fn verify_whatsapp_webhook(
    State(state): State<AppState>,
    AppQuery(query): AppQuery<Handshake>,
) -> ApiResult<Response> {
    let challenge = whatsapp::verify_subscription(
        state.config.whatsapp_verify_token.as_ref(),
        query.mode.as_deref(),
        query.verify_token.as_deref(),
        query.challenge.as_deref(),
    )?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], challenge).into_response())
}

/// The Cloud API's webhook: each `entry[].changes[].value.statuses[]` about a message Herald
/// sent is kept in its item's history and moves its status up the precedence. Statuses of
/// messages Herald does not know, and payloads without statuses, are answered 200 and change
/// nothing, so that Meta does not send them again.
#[utoipa::path(post, path = "/api/v1/receipts/whatsapp", tag = "receipts",
    params(("X-Hub-Signature-256" = String, Header,
        description = "`sha256=` and the hex HMAC-SHA256 of the raw body, keyed with the Meta app secret")),
    request_body(content = Object, content_type = "application/json",
        description = "Meta's webhook: `{\"object\": \"whatsapp_business_account\", \"entry\": [{\"changes\": [{\"field\": \"messages\", \"value\": {\"statuses\": [{\"id\": \"wamid…\", \"status\": \"delivered\", \"timestamp\": \"…\", \"errors\": […]}]}}]}]}`"),
    responses(
        (status = 200, description = "Taken (also when no status is about a message Herald sent)"),
        (status = 400, description = "Signed, but not JSON or not a Cloud API webhook (`invalid_receipt`)", body = Problem, content_type = PROBLEM),
        (status = 403, description = "The signature is missing or wrong, or no app secret is configured (`invalid_signature`)",
            body = Problem, content_type = PROBLEM),
    ))]
#[tracing::instrument(skip_all, fields(statuses))]
async fn take_whatsapp_webhook(
    State(state): State<AppState>,
    headers: HeaderMap,
    RawBody(body): RawBody,
) -> ApiResult<StatusCode> {
    let signature = headers.get("x-hub-signature-256").and_then(|value| value.to_str().ok());
    let outcomes = whatsapp::take_webhook(
        &state,
        state.config.whatsapp_app_secret.as_ref(),
        signature,
        &body,
        state.clock.now_millis(),
    )
    .await?;
    tracing::Span::current().record("statuses", outcomes.len());
    Ok(StatusCode::OK)
}
