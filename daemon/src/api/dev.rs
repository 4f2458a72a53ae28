//! The development identity provider's key set (mounted only with `--dev`).

use axum::{Json, extract::State};
use utoipa_axum::{router::OpenApiRouter, routes};

use crate::{error::ApiError, state::AppState};

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().routes(routes!(dev_jwks))
}

/// The JWKS of the built-in development identity provider (`heraldd --dev` only).
#[utoipa::path(get, path = "/dev/jwks.json", tag = "operations",
    responses((status = 200, description = "JSON Web Key Set", body = Object)))]
async fn dev_jwks(State(state): State<AppState>) -> Result<Json<serde_json::Value>, ApiError> {
    let idp = state.dev_idp.as_ref().ok_or_else(|| ApiError::not_found("key set"))?;
    Ok(Json(idp.jwks()))
}
