//! End-user tokens.

use axum::{
    Json,
    extract::{Path, State},
};
use herald_common::{
    Problem, Timestamp,
    api::users::{CurrentUserOut, UserTokenIn, UserTokenOut},
    ids::UserId,
};
use utoipa_axum::{router::OpenApiRouter, routes};

use super::auth::{ApiKeyAuth, UserAuth, scopes};
use super::extract::AppJson;
use crate::{
    auth::user,
    error::{ApiError, ApiResult},
    state::AppState,
};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(issue_user_token)).routes(routes!(current_user))
}

const DEFAULT_TTL: u32 = 3600;
pub(crate) const TTL_RANGE: std::ops::RangeInclusive<u32> = 60..=86_400;

/// Issues a token with which the end user `user_id` of the key's application reads its inbox
/// and stream.
#[utoipa::path(post, path = "/api/v1/users/{user_id}/token", tag = "users",
    params(("user_id" = String, Path, description = "The application's id for the user")),
    request_body = UserTokenIn,
    security(("api_key" = [])),
    responses(
        (status = 200, description = "Success", body = UserTokenOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
        (status = 403, description = "The credential lacks the required scope", body = Problem, content_type = "application/problem+json"),
        (status = 422, description = "A field is invalid", body = Problem, content_type = "application/problem+json"),
    ))]
#[tracing::instrument(skip_all, fields(application_id = %key.application_id))]
async fn issue_user_token(
    State(state): State<AppState>,
    ApiKeyAuth(key, _): ApiKeyAuth<scopes::UsersToken>,
    Path(user_id): Path<String>,
    AppJson(body): AppJson<UserTokenIn>,
) -> ApiResult<Json<UserTokenOut>> {
    let user_id = UserId::parse(&user_id).map_err(|m| ApiError::field("user_id", m.to_string()))?;
    let ttl = body.ttl_seconds.unwrap_or(DEFAULT_TTL);
    if !TTL_RANGE.contains(&ttl) {
        return Err(ApiError::field(
            "ttl_seconds",
            format!("must be from {} to {}", TTL_RANGE.start(), TTL_RANGE.end()),
        ));
    }
    let app = state
        .store
        .get_application(&key.application_id)
        .await?
        .ok_or_else(|| ApiError::unauthorized("The key's application no longer exists."))?;
    let expires_at = Timestamp::from_millis((Timestamp::now().seconds() + i64::from(ttl)) * 1000);
    let token = user::mint(&state.secret, &app, &user_id, expires_at).map_err(ApiError::internal)?;
    Ok(Json(UserTokenOut { token, expires_at, user_id }))
}

/// The end user a user token belongs to, and when the token expires.
#[utoipa::path(get, path = "/api/v1/users/me", tag = "users",
    security(("user" = [])),
    responses(
        (status = 200, description = "Success", body = CurrentUserOut),
        (status = 401, description = "Missing, invalid or expired credential", body = Problem, content_type = "application/problem+json"),
    ))]
async fn current_user(UserAuth(user): UserAuth) -> Json<CurrentUserOut> {
    Json(CurrentUserOut {
        user_id: user.user_id,
        tenant_id: user.tenant_id,
        application_id: user.application_id,
        expires_at: user.expires_at,
    })
}
