//! The authentication matrix: every credential kind, where it belongs and where it does not.

use base64::{Engine, engine::general_purpose::URL_SAFE_NO_PAD};
use herald_common::{ErrorCode, Scope, Timestamp, client::Client, ids::TenantId};
use herald_tests::{Backend, TestDaemon, TestIdp, both_backends};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use reqwest::{Method, StatusCode};
use serde_json::json;

/// Calls `GET path` with `token` and returns the status and the problem code (if any).
async fn call(
    client: &Client,
    method: Method,
    path: &str,
) -> (StatusCode, Option<String>, reqwest::header::HeaderMap) {
    let mut request = client.request(method.clone(), path);
    if method == Method::POST {
        request = request.json(&json!({}));
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let headers = response.headers().clone();
    let body: serde_json::Value = response.json().await.unwrap_or_default();
    (status, body["code"].as_str().map(str::to_owned), headers)
}

async fn expect_401(client: &Client, path: &str, why: &str) {
    let method = if path.ends_with("/token") { Method::POST } else { Method::GET };
    let (status, code, headers) = call(client, method, path).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED, "{why}: expected 401 on {path}");
    assert_eq!(code.as_deref(), Some("unauthorized"), "{why}");
    assert!(
        headers.get("www-authenticate").is_some_and(|v| v.to_str().unwrap().starts_with("Bearer")),
        "{why}: 401 carries WWW-Authenticate: Bearer"
    );
}

const OPERATOR_ROUTE: &str = "/api/v1/applications";
const KEY_ROUTE: &str = "/api/v1/users/alice/token";
const USER_ROUTE: &str = "/api/v1/users/me";

#[tokio::test]
async fn missing_and_malformed_credentials_are_401() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    expect_401(&d.client, OPERATOR_ROUTE, "no credential").await;
    let (_, _, headers) = call(&d.client, Method::GET, OPERATOR_ROUTE).await;
    assert_eq!(headers["www-authenticate"], "Bearer realm=\"herald\"", "no error code without a credential");
    for header in ["Basic abc", "Bearer", "Bearer not-a-token", "Bearer a.b.c", "Bearer hk_short"] {
        let response = d
            .client
            .request(Method::GET, OPERATOR_ROUTE)
            .header("authorization", header)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 401, "{header}");
    }
}

#[tokio::test]
async fn operator_tokens_are_checked_claim_by_claim() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let tenant = &boot.tenant_id;
    let good = d.idp.operator_token(tenant, &[Scope::ActivityRead]);
    let (status, _, _) = call(&d.with_token(&good), Method::GET, OPERATOR_ROUTE).await;
    assert_eq!(status, 200, "a valid operator token is accepted");

    let now = Timestamp::now().seconds();
    let variants = [
        ("expired beyond the leeway", json!({"exp": now - 120, "iat": now - 3600, "nbf": now - 3600})),
        ("not yet valid", json!({"nbf": now + 600})),
        ("wrong issuer", json!({"iss": "https://evil.example"})),
        ("wrong audience", json!({"aud": "someone-else"})),
        ("no tenant", json!({"tenant_id": null})),
        ("a tenant claim that is not a tenant id", json!({"tenant_id": "acme"})),
    ];
    for (why, changes) in variants {
        let mut claims = TestIdp::claims(tenant, &[Scope::ActivityRead]);
        for (k, v) in changes.as_object().unwrap() {
            if v.is_null() {
                claims.as_object_mut().unwrap().remove(k);
            } else {
                claims[k] = v.clone();
            }
        }
        expect_401(&d.with_token(&d.idp.sign(&claims)), OPERATOR_ROUTE, why).await;
    }
}

#[tokio::test]
async fn forged_algorithms_are_refused() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let claims = TestIdp::claims(&boot.tenant_id, &Scope::ALL);

    // alg: none, with an empty signature.
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"none","typ":"JWT"}"#);
    let payload = URL_SAFE_NO_PAD.encode(claims.to_string());
    expect_401(&d.with_token(&format!("{header}.{payload}.")), OPERATOR_ROUTE, "alg none").await;

    // HS256 signed with a guessed secret (e.g. the JWK's public material).
    for guess in ["secret", "herald", &d.idp.jwks_url()] {
        let token = jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(guess.as_bytes()),
        )
        .unwrap();
        expect_401(&d.with_token(&token), OPERATOR_ROUTE, "HS256 on the operator path").await;
    }

    // An ES256 token signed by a key the provider never published.
    let stranger = herald_daemon::auth::dev_idp::Es256Key::generate().unwrap();
    expect_401(&d.with_token(&stranger.sign(&claims).unwrap()), OPERATOR_ROUTE, "unknown kid").await;
}

#[tokio::test]
async fn jwks_is_cached_and_refetched_for_rotated_keys() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let old = d.idp.operator_token(&boot.tenant_id, &[]);
    for _ in 0..5 {
        assert_eq!(call(&d.with_token(&old), Method::GET, OPERATOR_ROUTE).await.0, 200);
    }
    assert_eq!(d.idp.fetches(), 1, "the key set is fetched once and cached");

    // A new key is published next to the old one: tokens of both verify.
    d.idp.rotate(false);
    let new = d.idp.operator_token(&boot.tenant_id, &[]);
    assert_eq!(call(&d.with_token(&new), Method::GET, OPERATOR_ROUTE).await.0, 200, "new kid after rotation");
    assert_eq!(d.idp.fetches(), 2, "an unknown kid causes one refetch");
    assert_eq!(
        call(&d.with_token(&old), Method::GET, OPERATOR_ROUTE).await.0,
        200,
        "old key still published"
    );

    // The old key is retired: once the set is refetched, its tokens fail.
    d.idp.rotate(true);
    let newest = d.idp.operator_token(&boot.tenant_id, &[]);
    assert_eq!(call(&d.with_token(&newest), Method::GET, OPERATOR_ROUTE).await.0, 200);
    expect_401(&d.with_token(&old), OPERATOR_ROUTE, "retired key").await;
}

#[tokio::test]
async fn unknown_kids_cannot_make_herald_hammer_the_provider() {
    let d =
        TestDaemon::start_with(Backend::Sqlite, vec![("HERALD_OPERATOR_JWKS_REFRESH_SECONDS", "60".into())])
            .await;
    let boot = d.bootstrap().await;
    let good = d.idp.operator_token(&boot.tenant_id, &[]);
    assert_eq!(call(&d.with_token(&good), Method::GET, OPERATOR_ROUTE).await.0, 200);
    let stranger = herald_daemon::auth::dev_idp::Es256Key::generate().unwrap();
    let forged = stranger.sign(&TestIdp::claims(&boot.tenant_id, &[])).unwrap();
    for _ in 0..10 {
        expect_401(&d.with_token(&forged), OPERATOR_ROUTE, "unknown kid").await;
    }
    assert!(d.idp.fetches() <= 2, "refetches are throttled, saw {}", d.idp.fetches());
}

#[tokio::test]
async fn keys_need_their_scope_and_die_when_revoked() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let narrow =
        herald_daemon::admin::create_key(&d.state.store, &boot.application_id, &[Scope::NotificationsSend])
            .await
            .unwrap();
    let err =
        d.with_token(&narrow.api_key).user_token(&herald_tests::user_id("alice"), None).await.unwrap_err();
    let problem = err.problem().expect("a problem body");
    assert_eq!((problem.status, problem.code), (403, ErrorCode::InsufficientScope));
    assert_eq!(problem.scope.as_deref(), Some("users:token"), "the 403 names the missing scope");
    assert!(problem.detail.as_deref().unwrap().contains("users:token"));

    let client = d.with_token(&boot.api_key);
    client.user_token(&herald_tests::user_id("alice"), None).await.expect("the full key may mint tokens");
    herald_daemon::admin::revoke_key(&d.state.store, &boot.key_id).await.unwrap();
    expect_401(&client, KEY_ROUTE, "revoked key").await;
    let (status, ..) = call(
        &d.with_token(&format!("{}x", &boot.api_key[..boot.api_key.len() - 1])),
        Method::GET,
        OPERATOR_ROUTE,
    )
    .await;
    assert_eq!(status, 401, "a key that differs by one character is unknown");
}

#[tokio::test]
async fn credentials_never_cross() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let user_token = key.user_token(&herald_tests::user_id("alice"), None).await.unwrap().token;
    let operator = d.idp.operator_token(&boot.tenant_id, &Scope::ALL);

    expect_401(&d.with_token(&user_token), KEY_ROUTE, "user token on an API-key route").await;
    expect_401(&d.with_token(&user_token), OPERATOR_ROUTE, "user token on an operator route").await;
    expect_401(&d.with_token(&operator), KEY_ROUTE, "operator token on an API-key route").await;
    expect_401(&d.with_token(&operator), USER_ROUTE, "operator token on a user route").await;
    expect_401(&key, USER_ROUTE, "API key on a user route").await;

    assert_eq!(call(&d.with_token(&user_token), Method::GET, USER_ROUTE).await.0, 200);
    assert_eq!(call(&key, Method::GET, OPERATOR_ROUTE).await.0, 200, "API keys act on their tenant too");
}

#[tokio::test]
async fn user_tokens_verify_only_with_their_application_secret() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let now = Timestamp::now().seconds();
    let claims = |exp: i64, sub: &str| json!({"sub": sub, "tenant_id": boot.tenant_id, "application_id": boot.application_id, "exp": exp});
    let sign = |claims: &serde_json::Value, secret: &str| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            claims,
            &EncodingKey::from_secret(secret.as_bytes()),
        )
        .unwrap()
    };

    // Minted offline by the integrator with the signing secret: accepted.
    let offline = sign(&claims(now + 600, "bob"), &boot.signing_secret);
    let me = d.with_token(&offline).current_user().await.expect("offline token works");
    assert_eq!(me.user_id, "bob");
    assert_eq!(me.application_id, boot.application_id);

    expect_401(&d.with_token(&sign(&claims(now + 600, "bob"), "guessed")), USER_ROUTE, "wrong secret").await;
    expect_401(&d.with_token(&sign(&claims(now - 600, "bob"), &boot.signing_secret)), USER_ROUTE, "expired")
        .await;
    let mut wrong_aud = claims(now + 600, "bob");
    wrong_aud["aud"] = json!("herald-api");
    expect_401(&d.with_token(&sign(&wrong_aud, &boot.signing_secret)), USER_ROUTE, "operator audience").await;

    // Another application's secret cannot vouch for this application's users.
    let other = d.bootstrap().await;
    expect_401(
        &d.with_token(&sign(&claims(now + 600, "bob"), &other.signing_secret)),
        USER_ROUTE,
        "other app's secret",
    )
    .await;
}

#[tokio::test]
async fn issued_user_tokens_respect_their_ttl_bounds() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let issued = key.user_token(&herald_tests::user_id("user-1@example.com"), Some(120)).await.unwrap();
    let lifetime = issued.expires_at.seconds() - Timestamp::now().seconds();
    assert!((100..=121).contains(&lifetime), "lifetime {lifetime}");
    for bad in [0, 59, 86_401] {
        let err = key.user_token(&herald_tests::user_id("u"), Some(bad)).await.unwrap_err();
        let p = err.problem().unwrap();
        assert_eq!((p.status, p.errors[0].field.as_str()), (422, "ttl_seconds"));
    }
    let err =
        key.post::<_, serde_json::Value>("/api/v1/users/not%20valid!/token", &json!({})).await.unwrap_err();
    assert_eq!(err.problem().unwrap().errors[0].field, "user_id");
}

#[tokio::test]
async fn another_tenants_ids_are_not_found() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let a = d.bootstrap().await;
    let b = d.bootstrap().await;
    let path = format!("/api/v1/applications/{}", b.application_id);
    let as_key = d.with_token(&a.api_key);
    let as_operator = d.with_token(&d.idp.operator_token(&a.tenant_id, &Scope::ALL));
    for (who, client) in [("API key", &as_key), ("operator", &as_operator)] {
        let (status, code, _) = call(client, Method::GET, &path).await;
        assert_eq!((status, code.as_deref()), (StatusCode::NOT_FOUND, Some("not_found")), "{who}");
        let own = client.application(&a.application_id).await.expect("own application");
        assert_eq!(own.tenant_id, a.tenant_id);
        let list = client.applications().await.unwrap();
        assert!(
            list.applications.iter().all(|app| app.tenant_id == a.tenant_id),
            "{who} lists only its tenant"
        );
    }
    let (status, ..) = call(&as_key, Method::GET, &format!("/api/v1/applications/{}", TenantId::new())).await;
    assert_eq!(status, 404, "a malformed id is simply not found");
}

/// The credential flows that touch the store, on both backends.
async fn credential_flow(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    let who = key.whoami().await.unwrap();
    assert_eq!(who.tenant_id, boot.tenant_id);
    assert_eq!(who.key_id.as_ref(), Some(&boot.key_id));
    let token = key.user_token(&herald_tests::user_id("carol"), None).await.unwrap();
    let me = d.with_token(&token.token).current_user().await.unwrap();
    assert_eq!(me.user_id, "carol");
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &[Scope::DomainsRead]));
    let who = operator.whoami().await.unwrap();
    assert_eq!(who.scopes, vec![Scope::DomainsRead]);
    herald_daemon::admin::revoke_key(&d.state.store, &boot.key_id).await.unwrap();
    assert_eq!(key.whoami().await.unwrap_err().problem().unwrap().status, 401);
    d.stop().await;
}

both_backends!(credential_flow_on_each_backend, credential_flow);
