//! Credentials and who they verify as: API keys, operator JWTs (JWKS), end users' tokens, the
//! development identity provider, and the [`Principal`] a request acts as. The extractors that
//! authenticate requests are the API's (`api::auth`).
//!
//! Credentials never cross: an operator token is refused where a user token is expected (it is
//! not HS256), a user token is refused on operator routes (HS256 is never accepted there), and
//! API keys are only API keys. Failures are 401 with `WWW-Authenticate`; a valid credential
//! without the scope is 403 naming the scope.

pub mod api_key;
pub mod dev_idp;
pub mod operator;
pub mod user;

use herald_common::{
    Scope,
    api::whoami::{CredentialKind, WhoamiOut},
    ids::{ApplicationId, KeyId, TenantId},
};

pub use user::UserIdentity;

/// A verified credential that lacks the scope an operation needs (a 403 naming it).
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("This credential lacks the `{0}` scope.")]
pub struct MissingScope(pub Scope);

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
        SuppressionsRead => Some(Scope::SuppressionsRead);
        SuppressionsWrite => Some(Scope::SuppressionsWrite);
        WebhooksRead => Some(Scope::WebhooksRead);
        WebhooksWrite => Some(Scope::WebhooksWrite);
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

impl KeyPrincipal {
    pub fn require(&self, scope: Scope) -> Result<(), MissingScope> {
        if self.scopes.contains(&scope) { Ok(()) } else { Err(MissingScope(scope)) }
    }
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

    pub fn require(&self, scope: Option<Scope>) -> Result<(), MissingScope> {
        match scope {
            Some(scope) if !self.has(scope) => Err(MissingScope(scope)),
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
                subject: Some(u.user_id.to_string()),
                scopes: Vec::new(),
            },
        }
    }
}
