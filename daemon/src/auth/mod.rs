//! Authentication as extractors. A handler declares what it accepts and the scope it needs:
//!
//! - [`ApiKeyAuth<S>`]: a server integration's API key (`hk_…`) with scope `S`;
//! - [`TenantAuth<S>`]: an API key or an operator JWT with scope `S`, acting on one tenant;
//! - [`UserAuth`]: an end user's token;
//! - [`AnyAuth`]: any valid credential (for `whoami`).
//!
//! Credentials never cross: an operator token is refused where a user token is expected (it is
//! not HS256), a user token is refused on operator routes (HS256 is never accepted there), and
//! API keys are only API keys. Failures are 401 with `WWW-Authenticate`; a valid credential
//! without the scope is 403 naming the scope.

pub mod api_key;
pub mod dev_idp;
pub mod operator;
pub mod user;

use std::marker::PhantomData;

use axum::{extract::FromRequestParts, http::request::Parts};
use herald_common::{
    Scope,
    api::whoami::{CredentialKind, WhoamiOut},
    ids::{ApplicationId, KeyId, TenantId},
};

use crate::{error::ApiError, state::AppState};

pub use user::UserIdentity;

/// A scope a handler requires, as a type.
pub trait RequiredScope: Send + Sync + 'static {
    const SCOPE: Option<Scope>;
}

/// Scope markers for the extractors.
pub mod scopes {
    use super::{RequiredScope, Scope};

    macro_rules! markers {
        ($($marker:ident => $scope:expr;)*) => {$(
            #[derive(Debug)]
            pub struct $marker;
            impl RequiredScope for $marker {
                const SCOPE: Option<Scope> = $scope;
            }
        )*};
    }

    markers! {
        Authenticated => None;
        NotificationsSend => Some(Scope::NotificationsSend);
        NotificationsRead => Some(Scope::NotificationsRead);
        OtpSend => Some(Scope::OtpSend);
        OtpVerify => Some(Scope::OtpVerify);
        DomainsRead => Some(Scope::DomainsRead);
        DomainsWrite => Some(Scope::DomainsWrite);
        TemplatesWrite => Some(Scope::TemplatesWrite);
        UsersToken => Some(Scope::UsersToken);
        ActivityRead => Some(Scope::ActivityRead);
        ActivityRetry => Some(Scope::ActivityRetry);
    }
}

/// A verified API key.
#[derive(Clone, Debug)]
pub struct KeyPrincipal {
    pub key_id: KeyId,
    pub application_id: ApplicationId,
    pub tenant_id: TenantId,
    pub scopes: Vec<Scope>,
}

/// Whoever is calling, once verified.
#[derive(Clone, Debug)]
pub enum Principal {
    ApiKey(KeyPrincipal),
    Operator(operator::OperatorClaims),
    User(UserIdentity),
}

impl Principal {
    pub fn tenant_id(&self) -> &TenantId {
        match self {
            Principal::ApiKey(k) => &k.tenant_id,
            Principal::Operator(o) => &o.tenant_id,
            Principal::User(u) => &u.tenant_id,
        }
    }

    pub fn scopes(&self) -> &[Scope] {
        match self {
            Principal::ApiKey(k) => &k.scopes,
            Principal::Operator(o) => &o.scopes,
            Principal::User(_) => &[],
        }
    }

    pub fn has(&self, scope: Scope) -> bool {
        self.scopes().contains(&scope)
    }

    pub fn require(&self, scope: Option<Scope>) -> Result<(), ApiError> {
        match scope {
            Some(scope) if !self.has(scope) => Err(ApiError::insufficient_scope(scope)),
            _ => Ok(()),
        }
    }

    pub fn whoami(&self) -> WhoamiOut {
        match self {
            Principal::ApiKey(k) => WhoamiOut {
                kind: CredentialKind::ApiKey,
                tenant_id: k.tenant_id.clone(),
                application_id: Some(k.application_id.clone()),
                key_id: Some(k.key_id.clone()),
                subject: None,
                scopes: k.scopes.clone(),
            },
            Principal::Operator(o) => WhoamiOut {
                kind: CredentialKind::Operator,
                tenant_id: o.tenant_id.clone(),
                application_id: None,
                key_id: None,
                subject: Some(o.subject.clone()),
                scopes: o.scopes.clone(),
            },
            Principal::User(u) => WhoamiOut {
                kind: CredentialKind::User,
                tenant_id: u.tenant_id.clone(),
                application_id: Some(u.application_id.clone()),
                key_id: None,
                subject: Some(u.user_id.clone()),
                scopes: Vec::new(),
            },
        }
    }
}

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
        key_id: KeyId::parse(&record.id).map_err(|_| invalid())?,
        application_id: ApplicationId::parse(&record.application_id).map_err(|_| invalid())?,
        tenant_id: TenantId::parse(&record.tenant_id).map_err(|_| invalid())?,
        scopes: record.scopes(),
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
