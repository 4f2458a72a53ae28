//! The OpenAPI document: valid OpenAPI 3.1 (checked by `openapi-spec-validator`, a validator
//! nobody here wrote), and every path in it is a route the daemon serves.

use std::process::Command;

use herald_tests::{Backend, TestDaemon};

#[tokio::test]
async fn the_document_is_valid_openapi_3_1() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let doc = d.client.openapi().await.unwrap();
    assert_eq!(doc["openapi"], "3.1.0");
    let file = d.dir.path().join("openapi.json");
    std::fs::write(&file, serde_json::to_vec(&doc).unwrap()).unwrap();
    let python = herald_tests::python();
    let output = Command::new(&python)
        .args(["-c", "import sys; from openapi_spec_validator import validate; from openapi_spec_validator.readers import read_from_filename; validate(read_from_filename(sys.argv[1])[0]); print('valid')"])
        .arg(&file)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {python}: {e}"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("No module named"),
        "openapi-spec-validator is missing: run the tests through scripts/test, which installs it ({stderr})"
    );
    assert!(output.status.success(), "the OpenAPI document is invalid:\n{stderr}");
}

#[tokio::test]
async fn every_documented_path_is_served() {
    let d = TestDaemon::start(Backend::Sqlite).await;
    let doc = d.client.openapi().await.unwrap();
    let paths = doc["paths"].as_object().unwrap();
    assert!(paths.len() >= 9, "{:?}", paths.keys());
    for (path, item) in paths {
        let concrete = path.replace("{user_id}", "someone").replace("{application_id}", "app_x");
        for method in item.as_object().unwrap().keys() {
            let method = reqwest::Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
            let response = d.client.request(method.clone(), &concrete).send().await.unwrap();
            let body: serde_json::Value = response.json().await.unwrap_or_default();
            let code = body["code"].as_str().unwrap_or_default();
            assert!(
                code != "route_not_found" && code != "method_not_allowed",
                "{method} {path} is documented but not served ({code})"
            );
        }
    }
    // And the reverse for the routes that exist: each one below must be documented.
    for expected in [
        "/healthz",
        "/readyz",
        "/metrics",
        "/content/openapi.json",
        "/api/v1/whoami",
        "/api/v1/users/{user_id}/token",
        "/api/v1/receipts/twilio",
        "/api/v1/receipts/whatsapp",
    ] {
        assert!(paths.contains_key(expected), "{expected} is not documented");
    }
}

#[test]
fn development_routes_are_documented_only_in_development() {
    let dev = herald_daemon::api::openapi(true);
    let prod = herald_daemon::api::openapi(false);
    assert!(dev["paths"].get("/dev/jwks.json").is_some());
    assert!(prod["paths"].get("/dev/jwks.json").is_none());
}

/// The document lists the values of every status a client matches on, so generated clients get
/// enums rather than strings.
#[test]
fn statuses_and_outcomes_are_enums_in_the_document() {
    let doc = herald_daemon::api::openapi(false);
    let schemas = &doc["components"]["schemas"];
    let values = |name: &str| -> Vec<String> {
        let schema = &schemas[name];
        let values = schema["enum"].as_array().unwrap_or_else(|| panic!("{name} is an enum: {schema}"));
        values.iter().map(|v| v.as_str().unwrap().to_owned()).collect()
    };
    let receipts = ["read", "undelivered", "bounced", "complained"];
    let delivery: Vec<&str> = ["queued", "sending", "sent", "delivered"]
        .into_iter()
        .chain(receipts)
        .chain(["failed", "suppressed"])
        .collect();
    let activity: Vec<&str> = ["queued", "sending", "sent", "delivered"]
        .into_iter()
        .chain(receipts)
        .chain(["failed", "verified", "expired", "tombstoned", "suppressed"])
        .collect();
    assert_eq!(values("ActivityStatus"), activity);
    assert_eq!(
        values("AttemptOutcome"),
        ["sent", "delivered", "transient_failure", "permanent_failure", "suppressed"]
    );
    assert_eq!(
        values("SuppressionReason"),
        ["hard_bounce", "complaint", "unsubscribe", "carrier_opt_out", "manual"]
    );
    assert_eq!(values("DeliveryStatus"), delivery);
    assert_eq!(values("ReceiptProvider"), ["twilio", "whatsapp", "email"]);
    assert_eq!(values("Channel"), ["email", "sms", "whatsapp", "in_app"]);
    assert_eq!(
        schemas["ActivityItem"]["properties"]["status"]["$ref"],
        "#/components/schemas/ActivityStatus"
    );
}

/// Twilio's intake takes a signed form, with no Herald credential: the document says so, and
/// lists only the answers it gives (none of the JSON extractor's 415 and 422).
#[test]
fn the_twilio_intake_is_documented_as_a_signed_form() {
    let doc = herald_daemon::api::openapi(false);
    let operation = &doc["paths"]["/api/v1/receipts/twilio"]["post"];
    let body = &operation["requestBody"]["content"]["application/x-www-form-urlencoded"]["schema"];
    assert_eq!(body["$ref"], "#/components/schemas/TwilioStatusIn", "{operation}");
    let required = doc["components"]["schemas"]["TwilioStatusIn"]["required"].as_array().unwrap();
    assert_eq!(required, &["MessageSid", "MessageStatus"]);
    assert!(operation.get("security").is_none(), "no Herald credential: {operation}");
    let header = operation["parameters"].as_array().unwrap();
    assert!(header.iter().any(|p| p["name"] == "X-Twilio-Signature" && p["in"] == "header"));
    let mut statuses: Vec<&str> =
        operation["responses"].as_object().unwrap().keys().map(String::as_str).collect();
    statuses.sort_unstable();
    assert_eq!(statuses, ["204", "400", "403", "413", "503"]);
}

/// The `webhooks` section (OpenAPI 3.1) lists every event of the catalogue, each with the
/// Standard Webhooks headers and its body's schema.
#[test]
fn the_webhook_events_are_documented() {
    use herald_common::api::webhooks::EventType;
    let doc = herald_daemon::api::openapi(false);
    let webhooks = doc["webhooks"].as_object().expect("a webhooks section");
    assert_eq!(webhooks.len(), EventType::ALL.len());
    for event in EventType::ALL {
        let post = &webhooks[event.as_str()]["post"];
        let headers: Vec<&str> =
            post["parameters"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
        assert_eq!(headers, ["webhook-id", "webhook-timestamp", "webhook-signature"], "{event}");
        let schema = &post["requestBody"]["content"]["application/json"]["schema"];
        assert_eq!(schema["properties"]["type"]["const"], event.as_str());
        let data = schema["properties"]["data"]["$ref"].as_str().unwrap();
        let name = data.rsplit('/').next().unwrap();
        assert!(doc["components"]["schemas"].get(name).is_some(), "{event}: {data} is not in the components");
    }
    assert_eq!(
        webhooks["otp.verified"]["post"]["requestBody"]["content"]["application/json"]["schema"]["properties"]
            ["data"]["$ref"],
        "#/components/schemas/ActivityItem"
    );
}
