//! End-user tokens: HS256 JWTs signed with the application's signing secret, carrying `sub`
//! (the user id), `tenant_id`, `application_id` and `exp`. Herald issues them
//! (`POST /api/v1/users/{user_id}/token`), and an integrator's backend can mint the same tokens
//! offline with the secret that `heraldd admin app create` printed.
//!
//! The signing secret is never stored: it is an HMAC of the application id and its signing
//! generation under the server secret, so a database dump does not reveal it.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use herald_common::{
    Timestamp,
    ids::{ApplicationId, TenantId, UserId},
};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use crate::{secret::ServerSecret, store::ApplicationRecord};

/// `iss` of tokens Herald issues.
pub const ISSUER: &str = "herald";
/// `aud` of user tokens. A token that carries an `aud` must include this one.
pub const AUDIENCE: &str = "herald:user";

#[derive(Debug, Serialize, Deserialize)]
pub struct UserClaims {
    pub sub: String,
    pub tenant_id: String,
    pub application_id: String,
    pub exp: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iat: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub iss: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aud: Option<serde_json::Value>,
}

/// An authenticated end user.
#[derive(Clone, Debug)]
pub struct UserIdentity {
    pub user_id: UserId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub expires_at: Timestamp,
}

/// The application's HS256 signing secret.
pub fn signing_secret(secret: &ServerSecret, app: &ApplicationRecord) -> String {
    let mac = secret.mac(
        "herald.app-signing-secret.v1",
        &[app.id.as_str().as_bytes(), &app.signing_generation.to_be_bytes()],
    );
    format!("hss_{}", URL_SAFE_NO_PAD.encode(mac))
}

pub fn mint(
    secret: &ServerSecret,
    app: &ApplicationRecord,
    user_id: &UserId,
    expires_at: Timestamp,
) -> Result<String, jsonwebtoken::errors::Error> {
    let claims = UserClaims {
        sub: user_id.to_string(),
        tenant_id: app.tenant_id.to_string(),
        application_id: app.id.to_string(),
        exp: expires_at.seconds(),
        iat: Some(Timestamp::now().seconds()),
        iss: Some(ISSUER.to_owned()),
        aud: Some(serde_json::Value::String(AUDIENCE.to_owned())),
    };
    let key = EncodingKey::from_secret(signing_secret(secret, app).as_bytes());
    jsonwebtoken::encode(&Header::new(Algorithm::HS256), &claims, &key)
}

/// The application a presented user token claims to belong to, read before the signature is
/// checked (the signature is checked with that application's secret by [`verify`]).
pub fn claimed_application(token: &str) -> Result<ApplicationId, String> {
    let header = jsonwebtoken::decode_header(token).map_err(|_| "malformed token".to_owned())?;
    if header.alg != Algorithm::HS256 {
        return Err("user tokens are HS256 JWTs".to_owned());
    }
    let claims = jsonwebtoken::dangerous::insecure_decode_claims::<UserClaims>(token)
        .map_err(|_| "the token lacks sub, tenant_id, application_id or exp".to_owned())?;
    ApplicationId::parse(&claims.application_id).map_err(|_| "unknown application".to_owned())
}

pub fn verify(secret: &ServerSecret, app: &ApplicationRecord, token: &str) -> Result<UserIdentity, String> {
    let key = DecodingKey::from_secret(signing_secret(secret, app).as_bytes());
    let mut validation = Validation::new(Algorithm::HS256);
    validation.leeway = 60;
    validation.validate_aud = false;
    validation.set_required_spec_claims(&["exp", "sub"]);
    let data = jsonwebtoken::decode::<UserClaims>(token, &key, &validation).map_err(|e| match e.kind() {
        jsonwebtoken::errors::ErrorKind::ExpiredSignature => "token expired".to_owned(),
        jsonwebtoken::errors::ErrorKind::InvalidSignature => "bad signature".to_owned(),
        _ => "invalid token".to_owned(),
    })?;
    let claims = data.claims;
    let audience_ok = match &claims.aud {
        None => true,
        Some(serde_json::Value::String(aud)) => aud == AUDIENCE,
        Some(serde_json::Value::Array(auds)) => auds.iter().any(|a| a == AUDIENCE),
        Some(_) => false,
    };
    if !audience_ok {
        return Err(format!("the token's audience must include `{AUDIENCE}`"));
    }
    if claims.tenant_id != app.tenant_id.as_str() || claims.application_id != app.id.as_str() {
        return Err("the token's tenant does not match its application".to_owned());
    }
    let user_id = UserId::parse(&claims.sub).map_err(|e| format!("the token's subject {e}"))?;
    Ok(UserIdentity {
        user_id,
        tenant_id: app.tenant_id.clone(),
        application_id: app.id.clone(),
        expires_at: Timestamp::from_millis(claims.exp.saturating_mul(1000)),
    })
}
