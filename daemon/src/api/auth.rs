//! Authentication as extractors. A handler declares what it accepts and the scope it needs:
//!
//! - [`ApiKeyAuth<S>`]: a server integration's API key (`hk_…`) with scope `S`;
//! - [`TenantAuth<S>`]: an API key or an operator JWT with scope `S`, acting on one tenant;
//! - [`UserAuth`]: an end user's token;
//! - [`AnyAuth`]: any valid credential (for `whoami`).
//!
//! The kind of a credential is decided before any verification (an `hk_` prefix, an HS256 JWT,
//! any other JWT), so a credential of the wrong kind is refused with 401 without being tried.

use std::marker::PhantomData;

pub use crate::auth::{Principal, scopes};
use crate::{
    auth::{KeyPrincipal, RequiredScope, UserIdentity, api_key, user},
    error::ApiError,
    state::AppState,
};
use axum::{extract::FromRequestParts, http::request::Parts};

/// The kinds of credential a route accepts.
#[derive(Clone, Copy)]
struct Accepts {
    api_key: bool,
    operator: bool,
    user: bool,
}

fn bearer(parts: &Parts) -> Result<&str, ApiError> {
    let value =
        parts.headers.get(axum::http::header::AUTHORIZATION).ok_or_else(ApiError::missing_credential)?;
    let value =
        value.to_str().map_err(|_| ApiError::unauthorized("The Authorization header is not valid text."))?;
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| ApiError::unauthorized("The Authorization header must be `Bearer <credential>`."))?;
    if !scheme.eq_ignore_ascii_case("bearer") || token.trim().is_empty() {
        return Err(ApiError::unauthorized("The Authorization header must be `Bearer <credential>`."));
    }
    Ok(token.trim())
}

async fn authenticate(parts: &Parts, state: &AppState, accepts: Accepts) -> Result<Principal, ApiError> {
    let token = bearer(parts)?;
    if token.starts_with(api_key::PREFIX) {
        if !accepts.api_key {
            return Err(ApiError::unauthorized("This endpoint does not take an API key."));
        }
        return authenticate_key(state, token).await.map(Principal::ApiKey);
    }
    if token.split('.').count() != 3 {
        return Err(ApiError::unauthorized("The credential is neither an API key nor a JWT."));
    }
    let alg = jsonwebtoken::decode_header(token).map_err(|_| ApiError::unauthorized("Malformed token."))?.alg;
    if alg == jsonwebtoken::Algorithm::HS256 {
        if !accepts.user {
            return Err(ApiError::unauthorized(if accepts.operator {
                "HS256 tokens are user tokens; this endpoint needs an operator token or an API key."
            } else {
                "This endpoint needs an API key."
            }));
        }
        return authenticate_user(state, token).await.map(Principal::User);
    }
    if !accepts.operator {
        return Err(ApiError::unauthorized(if accepts.user {
            "This endpoint needs a user token (HS256)."
        } else {
            "This endpoint needs an API key."
        }));
    }
    let verifier = state
        .operator
        .as_ref()
        .ok_or_else(|| ApiError::unauthorized("No operator identity provider is configured."))?;
    let claims = verifier
        .verify(token)
        .await
        .map_err(|reason| ApiError::unauthorized(format!("Operator token rejected: {reason}.")))?;
    Ok(Principal::Operator(claims))
}

async fn authenticate_key(state: &AppState, token: &str) -> Result<KeyPrincipal, ApiError> {
    let invalid = || ApiError::unauthorized("Unknown or revoked API key.");
    if !api_key::looks_like_key(token) {
        return Err(invalid());
    }
    let record = state.store.find_api_key(&api_key::hash(token)).await?.ok_or_else(invalid)?;
    if record.revoked_at.is_some() {
        return Err(invalid());
    }
    Ok(KeyPrincipal {
        scopes: record.scopes(),
        key_id: record.id,
        application_id: record.application_id,
        tenant_id: record.tenant_id,
    })
}

async fn authenticate_user(state: &AppState, token: &str) -> Result<UserIdentity, ApiError> {
    let reject = |reason: String| ApiError::unauthorized(format!("User token rejected: {reason}."));
    let application_id = user::claimed_application(token).map_err(reject)?;
    let app = state
        .store
        .get_application(&application_id)
        .await?
        .ok_or_else(|| reject("unknown application".to_owned()))?;
    user::verify(&state.secret, &app, token).map_err(reject)
}

macro_rules! extractor {
    ($(#[$doc:meta])* $name:ident<S>, $accepts:expr) => {
        $(#[$doc])*
        pub struct $name<S: RequiredScope>(pub Principal, pub PhantomData<S>);

        impl<S: RequiredScope> FromRequestParts<AppState> for $name<S> {
            type Rejection = ApiError;

            async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
                let principal = authenticate(parts, state, $accepts).await?;
                principal.require(S::SCOPE)?;
                Ok(Self(principal, PhantomData))
            }
        }
    };
}

extractor!(
    /// An API key or an operator token with scope `S`.
    TenantAuth<S>, Accepts { api_key: true, operator: true, user: false });
extractor!(
    /// Any valid credential.
    AnyAuth<S>, Accepts { api_key: true, operator: true, user: true });

/// An API key with scope `S`.
pub struct ApiKeyAuth<S: RequiredScope>(pub KeyPrincipal, pub PhantomData<S>);

impl<S: RequiredScope> FromRequestParts<AppState> for ApiKeyAuth<S> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let accepts = Accepts { api_key: true, operator: false, user: false };
        let principal = authenticate(parts, state, accepts).await?;
        principal.require(S::SCOPE)?;
        match principal {
            Principal::ApiKey(key) => Ok(Self(key, PhantomData)),
            _ => Err(ApiError::unauthorized("This endpoint needs an API key.")),
        }
    }
}

/// An end user's token.
pub struct UserAuth(pub UserIdentity);

impl FromRequestParts<AppState> for UserAuth {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        match authenticate(parts, state, Accepts { api_key: false, operator: false, user: true }).await? {
            Principal::User(user) => Ok(Self(user)),
            _ => Err(ApiError::unauthorized("This endpoint needs a user token.")),
        }
    }
}
