//! Operator tokens: JWTs from an identity provider, verified against its JWKS. The key set is
//! cached; a token with an unknown `kid` triggers a refetch (at most once per
//! `operator_jwks_refresh_seconds`, so garbage tokens cannot make Herald hammer the provider);
//! a cache older than `operator_jwks_max_age_seconds` is refetched. Only the configured
//! asymmetric algorithms are accepted: never `none`, never HS*, and the key's type must match
//! the token's algorithm.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use herald_common::{Scope, ids::TenantId};
use jsonwebtoken::{
    Algorithm, DecodingKey, Validation,
    jwk::{AlgorithmParameters, JwkSet},
};
use serde::Deserialize;
use tokio::sync::{Mutex, RwLock};

use crate::config::OperatorIdp;

/// An authenticated operator.
#[derive(Clone, Debug)]
pub struct OperatorClaims {
    pub subject: String,
    pub tenant_id: TenantId,
    pub scopes: Vec<Scope>,
}

#[derive(Deserialize)]
struct RawClaims {
    #[serde(default)]
    sub: Option<String>,
    tenant_id: String,
    #[serde(default)]
    scope: Option<String>,
    #[serde(default)]
    scp: Option<Vec<String>>,
}

struct CachedKey {
    key: DecodingKey,
    /// The algorithm family the JWK can verify (and its `alg`, when the JWK names one).
    kind: KeyKind,
    alg: Option<Algorithm>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum KeyKind {
    Rsa,
    Ec,
    Okp,
}

#[derive(Default)]
struct Cache {
    keys: HashMap<String, CachedKey>,
    fetched_at: Option<Instant>,
    last_attempt: Option<Instant>,
}

pub struct OperatorVerifier {
    idp: OperatorIdp,
    algorithms: Vec<Algorithm>,
    min_refresh: Duration,
    max_age: Duration,
    http: reqwest::Client,
    cache: RwLock<Cache>,
    fetching: Mutex<()>,
}

impl OperatorVerifier {
    pub fn new(
        idp: OperatorIdp,
        algorithms: Vec<Algorithm>,
        min_refresh: Duration,
        max_age: Duration,
    ) -> Self {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap_or_default();
        Self {
            idp,
            algorithms,
            min_refresh,
            max_age,
            http,
            cache: RwLock::new(Cache::default()),
            fetching: Mutex::new(()),
        }
    }

    /// Verifies a token; the error is a short reason safe to show the caller.
    pub async fn verify(&self, token: &str) -> Result<OperatorClaims, String> {
        let header = jsonwebtoken::decode_header(token).map_err(|_| "malformed token".to_owned())?;
        if !self.algorithms.contains(&header.alg) {
            return Err(format!("algorithm {:?} is not accepted for operator tokens", header.alg));
        }
        let kid = header.kid.clone().unwrap_or_default();
        let (key, kind, jwk_alg) = self.key(&kid).await?;
        if kind != family(header.alg) || jwk_alg.is_some_and(|a| a != header.alg) {
            return Err("the token's algorithm does not match its key".to_owned());
        }
        let mut validation = Validation::new(header.alg);
        validation.leeway = 60;
        validation.validate_nbf = true;
        validation.set_issuer(&[&self.idp.issuer]);
        validation.set_audience(&[&self.idp.audience]);
        validation.set_required_spec_claims(&["exp", "iss", "aud"]);
        let data = jsonwebtoken::decode::<RawClaims>(token, &key, &validation).map_err(|e| {
            use jsonwebtoken::errors::ErrorKind::*;
            match e.kind() {
                ExpiredSignature => "token expired".to_owned(),
                ImmatureSignature => "token not yet valid".to_owned(),
                InvalidIssuer => "wrong issuer".to_owned(),
                InvalidAudience => "wrong audience".to_owned(),
                InvalidSignature => "bad signature".to_owned(),
                MissingRequiredClaim(claim) => format!("token lacks the `{claim}` claim"),
                _ => "invalid token".to_owned(),
            }
        })?;
        let claims = data.claims;
        let tenant_id = TenantId::parse(&claims.tenant_id)
            .map_err(|_| "the `tenant_id` claim is not a tenant id".to_owned())?;
        let mut scopes = claims.scope.as_deref().map(Scope::parse_list).unwrap_or_default();
        scopes.extend(claims.scp.iter().flatten().filter_map(|s| Scope::parse(s)));
        scopes.sort();
        scopes.dedup();
        Ok(OperatorClaims { subject: claims.sub.unwrap_or_default(), tenant_id, scopes })
    }

    /// The key for `kid`. A fresh cache answers directly; otherwise the set is refetched (at
    /// most once per `min_refresh`, whatever the reason), and if the provider cannot be reached
    /// the keys it last published are still used.
    async fn key(&self, kid: &str) -> Result<(DecodingKey, KeyKind, Option<Algorithm>), String> {
        if let Some((found, true)) = self.cached(kid).await {
            return Ok(found);
        }
        let _one_fetch_at_a_time = self.fetching.lock().await;
        // Another request may have fetched while this one waited.
        if let Some((found, true)) = self.cached(kid).await {
            return Ok(found);
        }
        let throttled = {
            let cache = self.cache.read().await;
            cache.last_attempt.is_some_and(|t| t.elapsed() < self.min_refresh)
        };
        let mut unavailable = false;
        if !throttled {
            unavailable = self.refresh().await.is_err();
        }
        match self.cached(kid).await {
            Some((found, _)) => Ok(found),
            None if unavailable => Err("the identity provider's keys are unavailable".to_owned()),
            None => Err("unknown signing key (kid)".to_owned()),
        }
    }

    /// The cached key for `kid` (or the only key, when the token names none), and whether the
    /// cache is fresh.
    async fn cached(&self, kid: &str) -> Option<((DecodingKey, KeyKind, Option<Algorithm>), bool)> {
        let cache = self.cache.read().await;
        let fresh = cache.fetched_at.is_some_and(|t| t.elapsed() < self.max_age);
        let entry = if kid.is_empty() && cache.keys.len() == 1 {
            cache.keys.values().next()
        } else {
            cache.keys.get(kid)
        }?;
        Some(((entry.key.clone(), entry.kind, entry.alg), fresh))
    }

    async fn refresh(&self) -> Result<(), String> {
        self.cache.write().await.last_attempt = Some(Instant::now());
        let fetched = async {
            let response = self.http.get(&self.idp.jwks_url).send().await?.error_for_status()?;
            response.json::<JwkSet>().await
        }
        .await;
        let set = match fetched {
            Ok(set) => set,
            Err(e) => {
                tracing::warn!(url = %self.idp.jwks_url, error = %e, "cannot fetch the operator JWKS");
                return Err("the identity provider's keys are unavailable".to_owned());
            }
        };
        let mut keys = HashMap::new();
        for jwk in &set.keys {
            let kind = match &jwk.algorithm {
                AlgorithmParameters::RSA(_) => KeyKind::Rsa,
                AlgorithmParameters::EllipticCurve(_) => KeyKind::Ec,
                AlgorithmParameters::OctetKeyPair(_) => KeyKind::Okp,
                // Symmetric keys are never operator keys.
                _ => continue,
            };
            let Ok(key) = DecodingKey::from_jwk(jwk) else {
                continue;
            };
            let alg = jwk.common.key_algorithm.and_then(|a| a.to_string().parse::<Algorithm>().ok());
            let kid = jwk.common.key_id.clone().unwrap_or_default();
            keys.insert(kid, CachedKey { key, kind, alg });
        }
        tracing::debug!(keys = keys.len(), "fetched the operator JWKS");
        let mut cache = self.cache.write().await;
        cache.keys = keys;
        cache.fetched_at = Some(Instant::now());
        Ok(())
    }
}

fn family(alg: Algorithm) -> KeyKind {
    use Algorithm::*;
    match alg {
        ES256 | ES384 => KeyKind::Ec,
        EdDSA => KeyKind::Okp,
        // HS* never reaches here: the allow-list excludes it.
        _ => KeyKind::Rsa,
    }
}
