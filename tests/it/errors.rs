//! Bad input gets a problem+json error with a stable code, never a bare error or a 500.

use herald_common::{ErrorCode, Problem};
use herald_tests::{Backend, TestDaemon};
use reqwest::Method;

async fn problem(response: reqwest::Response) -> (u16, Problem) {
    let status = response.status().as_u16();
    let content_type = response.headers()["content-type"].to_str().unwrap().to_owned();
    assert_eq!(content_type, "application/problem+json", "status {status}");
    (status, response.json().await.expect("a problem body"))
}

#[tokio::test]
async fn bad_bodies_get_the_documented_codes() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let boot = d.bootstrap().await;
    let client = d.with_token(&boot.api_key);
    let path = "/api/v1/users/alice/token";
    let post = |body: &'static str, content_type: &'static str| {
        client.request(Method::POST, path).header("content-type", content_type).body(body).send()
    };

    let (status, p) = problem(post("{\"ttl_seconds\": ", "application/json").await.unwrap()).await;
    assert_eq!((status, p.code), (400, ErrorCode::InvalidJson));

    let (status, p) = problem(post("{\"ttl_seconds\": \"soon\"}", "application/json").await.unwrap()).await;
    assert_eq!((status, p.code), (422, ErrorCode::ValidationFailed));
    assert_eq!(p.errors[0].field, "ttl_seconds");

    let (status, p) = problem(post("{\"ttl_secs\": 60}", "application/json").await.unwrap()).await;
    assert_eq!((status, p.errors[0].field.as_str()), (422, "ttl_secs"), "unknown fields are rejected");

    let (status, p) = problem(post("{}", "text/plain").await.unwrap()).await;
    assert_eq!((status, p.code), (415, ErrorCode::UnsupportedMediaType));
    let (status, _) = problem(client.request(Method::POST, path).body("{}").send().await.unwrap()).await;
    assert_eq!(status, 415, "no content type at all");

    let response = post("{}", "application/json; charset=utf-8").await.unwrap();
    assert_eq!(response.status(), 200, "parameters on the JSON media type are fine");

    let big = format!("{{\"ttl_seconds\": 60, \"pad\": \"{}\"}}", "x".repeat(300 * 1024));
    let response = client
        .request(Method::POST, path)
        .header("content-type", "application/json")
        .body(big)
        .send()
        .await
        .unwrap();
    let (status, p) = problem(response).await;
    assert_eq!((status, p.code), (413, ErrorCode::PayloadTooLarge));
}

#[tokio::test]
async fn unknown_routes_and_methods_are_problems() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let (status, p) = problem(d.client.request(Method::GET, "/api/v1/nope").send().await.unwrap()).await;
    assert_eq!((status, p.code), (404, ErrorCode::RouteNotFound));
    let (status, p) = problem(d.client.request(Method::DELETE, "/healthz").send().await.unwrap()).await;
    assert_eq!((status, p.code), (405, ErrorCode::MethodNotAllowed));
}
