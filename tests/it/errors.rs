//! Bad input gets a problem+json error with a stable code, never a bare error or a 500.

use herald_common::{ErrorCode, Problem, Scope};
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

/// The JSON types a schema accepts (`$ref`, `oneOf`, `anyOf` and `allOf` followed), or `None`
/// when it does not say.
fn accepted_types(schema: &serde_json::Value, doc: &serde_json::Value) -> Option<Vec<String>> {
    if let Some(reference) = schema["$ref"].as_str() {
        let name = reference.rsplit('/').next()?;
        return accepted_types(&doc["components"]["schemas"][name], doc);
    }
    match &schema["type"] {
        serde_json::Value::String(t) => return Some(vec![t.clone()]),
        serde_json::Value::Array(ts) => {
            return Some(ts.iter().filter_map(|t| t.as_str().map(str::to_owned)).collect());
        }
        _ => {}
    }
    if schema["enum"].is_array() {
        return Some(vec!["string".into()]);
    }
    let mut union = Vec::new();
    for key in ["oneOf", "anyOf", "allOf"] {
        for part in schema[key].as_array().into_iter().flatten() {
            union.extend(accepted_types(part, doc)?);
        }
    }
    (!union.is_empty()).then_some(union)
}

/// An endpoint that takes a JSON body, from the OpenAPI document, with a credential it accepts
/// and its path parameters filled in; and each field of its body with the JSON types it takes.
struct BodyEndpoint {
    method: Method,
    path: String,
    client: herald_common::client::Client,
    concrete: String,
    fields: Vec<(String, Vec<String>)>,
}

impl BodyEndpoint {
    async fn send(&self, body: String) -> (u16, Problem) {
        let request = self.client.request(self.method.clone(), &self.concrete);
        problem(request.header("content-type", "application/json").body(body).send().await.unwrap()).await
    }
}

/// Every endpoint of the document that takes a JSON body.
async fn body_endpoints(d: &TestDaemon) -> Vec<BodyEndpoint> {
    let boot = d.bootstrap().await;
    let doc = d.client.openapi().await.unwrap();
    let user =
        d.with_token(&boot.api_key).user_token(&herald_tests::user_id("someone"), None).await.unwrap().token;
    let token_for = |scheme: &str| match scheme {
        "api_key" => boot.api_key.clone(),
        "operator" => d.idp.operator_token(&boot.tenant_id, &Scope::ALL),
        "user" => user.clone(),
        other => panic!("a security scheme this test does not know: {other}"),
    };
    let mut endpoints = Vec::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        // The providers' receipt intakes check a signature over the raw body before they read
        // it (403 first), and say what is wrong in a signed one with `invalid_receipt`
        // (tests/it/receipts_whatsapp.rs).
        if path.starts_with("/api/v1/receipts/") {
            continue;
        }
        for (method, operation) in item.as_object().unwrap() {
            let Some(schema) = operation["requestBody"]["content"]["application/json"]["schema"].as_object()
            else {
                continue;
            };
            let name = schema["$ref"].as_str().unwrap().rsplit('/').next().unwrap();
            let properties = doc["components"]["schemas"][name]["properties"].as_object().unwrap();
            assert!(!properties.is_empty(), "{name} has no properties");
            let fields = properties
                .iter()
                .map(|(field, property)| {
                    let accepted = accepted_types(property, &doc)
                        .unwrap_or_else(|| panic!("{name}.{field}: the document does not say its type"));
                    (field.clone(), accepted)
                })
                .collect();
            let scheme = operation["security"][0].as_object().unwrap().keys().next().unwrap().clone();
            let concrete = path
                .replace("{user_id}", "someone")
                .replace("{template_id}", herald_common::ids::TemplateId::new().as_str())
                .replace("{id}", herald_common::ids::InAppId::new().as_str())
                .replace("{endpoint_id}", herald_common::ids::WebhookEndpointId::new().as_str());
            assert!(!concrete.contains('{'), "a path parameter this test does not fill: {path}");
            endpoints.push(BodyEndpoint {
                method: Method::from_bytes(method.to_uppercase().as_bytes()).unwrap(),
                path: path.clone(),
                client: d.with_token(&token_for(&scheme)),
                concrete,
                fields,
            });
        }
    }
    assert!(endpoints.len() >= 8, "fewer bodies than expected: {}", endpoints.len());
    endpoints
}

/// Every endpoint that takes a JSON body, every field of it from the OpenAPI document, every
/// JSON type the field does not take: 422 `validation_failed` naming the field, never 400 or
/// 5xx. And a body that is JSON but not an object is 422 on `$`. A field added to a request type
/// is covered without editing this test.
async fn wrong_types_are_422_naming_the_field(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let wrong: [(&str, &str, serde_json::Value); 6] = [
        ("integer", "number", serde_json::json!(12345)),
        ("string", "string", serde_json::json!("x")),
        ("boolean", "boolean", serde_json::json!(true)),
        ("null", "null", serde_json::Value::Null),
        ("array", "array", serde_json::json!([1])),
        ("object", "object", serde_json::json!({"k": 1})),
    ];
    let mut cases = 0;
    for endpoint in body_endpoints(&d).await {
        let (method, path) = (&endpoint.method, &endpoint.path);
        for not_an_object in ["null", "[1]", "\"x\"", "5"] {
            let (status, p) = endpoint.send(not_an_object.into()).await;
            assert_eq!((status, p.errors[0].field.as_str()), (422, "$"), "{method} {path} {not_an_object}");
            cases += 1;
        }
        for (field, accepted) in &endpoint.fields {
            for (kind, also, value) in &wrong {
                if accepted.iter().any(|a| a == kind || a == also) {
                    continue;
                }
                let body = serde_json::json!({ field.as_str(): value }).to_string();
                let (status, p) = endpoint.send(body.clone()).await;
                assert_eq!(
                    (status, p.code),
                    (422, ErrorCode::ValidationFailed),
                    "{method} {path} {body}: {p:?}"
                );
                assert!(
                    p.errors.iter().any(|e| e.field == *field || e.field.starts_with(&format!("{field}."))),
                    "{method} {path} {body} names {field}: {:?}",
                    p.errors
                );
                cases += 1;
            }
        }
    }
    assert!(cases >= 100, "only {cases} cases: the document lists fewer bodies than expected");
    d.stop().await;
}
herald_tests::both_backends!(
    wrong_types_are_422_naming_the_field_on_each_backend,
    wrong_types_are_422_naming_the_field
);

/// A NUL character (`\u0000`, which PostgreSQL cannot store in text) in any string field of any
/// body, at the top or inside an object, is 422 naming the field, on both backends; as it is in
/// a query parameter, and an id with one in the path is not found.
async fn nul_characters_are_refused_at_the_edge(backend: Backend) {
    let d = TestDaemon::start(backend).await;
    let mut cases = 0;
    for endpoint in body_endpoints(&d).await {
        let (method, path) = (&endpoint.method, &endpoint.path);
        for (field, accepted) in &endpoint.fields {
            let (value, named) = if accepted.iter().any(|a| a == "string") {
                (serde_json::json!("a\u{0}b"), field.clone())
            } else if accepted.iter().any(|a| a == "object") {
                (serde_json::json!({"note": "a\u{0}b"}), format!("{field}.note"))
            } else {
                continue;
            };
            let body = serde_json::json!({ field.as_str(): value }).to_string();
            let (status, p) = endpoint.send(body.clone()).await;
            assert_eq!((status, p.code), (422, ErrorCode::ValidationFailed), "{method} {path} {body}: {p:?}");
            assert!(
                p.errors.iter().any(|e| e.field == named),
                "{method} {path} {body} names {named}: {:?}",
                p.errors
            );
            cases += 1;
        }
    }
    assert!(cases >= 20, "only {cases} string fields");

    // A whole valid dispatch with a NUL in each free-text part, so nothing else is wrong.
    let boot = d.bootstrap().await;
    let key = d.with_token(&boot.api_key);
    for (field, value) in [
        ("body", serde_json::json!("a\u{0}")),
        ("subject", serde_json::json!("a\u{0}")),
        ("html_body", serde_json::json!("<p>\u{0}</p>")),
        ("data", serde_json::json!({"category": "a\u{0}"})),
        ("template_id", serde_json::json!("tpl_\u{0}")),
    ] {
        let mut body = serde_json::json!({"channel": "email", "recipient": "nul@example.com", "body": "b"});
        body[field] = value;
        let response = key
            .request(Method::POST, "/api/v1/notifications")
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let (status, p) = problem(response).await;
        assert_eq!(status, 422, "{body}: {p:?}");
        assert!(p.errors.iter().any(|e| e.field.starts_with(field)), "{body}: {:?}", p.errors);
    }
    let operator = d.with_token(&d.idp.operator_token(&boot.tenant_id, &Scope::ALL));
    let (status, p) =
        problem(operator.request(Method::GET, "/api/v1/activity?channel=email%00").send().await.unwrap())
            .await;
    assert_eq!((status, p.errors[0].field.as_str()), (422, "channel"));
    let (status, _) =
        problem(key.request(Method::GET, "/api/v1/notifications/notif_%00").send().await.unwrap()).await;
    assert!(status == 404 || status == 422, "an id with a NUL: {status}");
    let token =
        key.request(Method::POST, "/api/v1/users/a%00b/token").header("content-type", "application/json");
    let (status, _) = problem(token.body("{}").send().await.unwrap()).await;
    assert!(status == 404 || status == 422, "a user id with a NUL: {status}");
    d.stop().await;
}
herald_tests::both_backends!(
    nul_characters_are_refused_at_the_edge_on_each_backend,
    nul_characters_are_refused_at_the_edge
);
