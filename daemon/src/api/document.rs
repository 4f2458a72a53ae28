//! Finishing the OpenAPI document after the routes are merged: the answers every operation can
//! give (a body that is not JSON, a credential that does not verify, a database that is down)
//! are added where a handler's own list leaves them out, and the two `text/event-stream`
//! responses describe their events, one schema per event, so that clients and fuzzers can check
//! what a stream sends.

use herald_common::api::{notifications::Channel, webhooks::EventType};
use serde_json::{Map, Value, json};

/// The finished document, as JSON.
pub fn finish(doc: utoipa::openapi::OpenApi) -> Value {
    let mut doc = serde_json::to_value(doc).unwrap_or_default();
    let Some(paths) = doc["paths"].as_object_mut() else { return doc };
    for (path, item) in paths.iter_mut() {
        let Some(operations) = item.as_object_mut() else { continue };
        for operation in operations.values_mut() {
            add_standard_responses(path, operation);
            constrain_path_parameters(operation);
        }
    }
    describe_stream(&mut doc, "/api/v1/in-app/stream", INBOX_EVENTS);
    describe_stream(&mut doc, "/api/v1/activity/stream", ACTIVITY_EVENTS);
    describe_webhooks(&mut doc);
    apply_rules(&mut doc);
    doc
}

/// Text on one line: no control characters (`validate::single_line`).
const SINGLE_LINE: &str = "^[^\\u0000-\\u001f\\u007f-\\u009f]*$";
/// `+`, then 7 to 15 digits, the first not 0 (`validate::e164`).
const E164: &str = "^\\+[1-9][0-9]{6,14}$";
/// An `http` or `https` URL with a host (`validate::http_url`).
const HTTP_URL: &str = "^[Hh][Tt][Tt][Pp][Ss]?://[^/\\s][^\\s]*$";
/// A user id (`UserId::parse`).
const USER_ID: &str = "^[A-Za-z0-9._@:+-]{1,128}$";
/// A domain name of two or more DNS labels, not an IP address (`normalize_domain_name`).
const DOMAIN: &str = "^(?=.{1,253}\\.?$)([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\\.)+[A-Za-z0-9-]*[A-Za-z-][A-Za-z0-9-]*\\.?$";
/// One DNS label (`normalize_selector`).
const LABEL: &str = "^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$";

fn email() -> Value {
    json!({"format": "email", "maxLength": 254})
}

/// Merges `rules` into `schema`, object by object.
fn merge(schema: &mut Value, rules: Value) {
    match (schema, rules) {
        (Value::Object(schema), Value::Object(rules)) => {
            for (key, rule) in rules {
                merge(schema.entry(key).or_insert(Value::Null), rule);
            }
        }
        (schema, rule) => *schema = rule,
    }
}

/// `then` for requests whose `channel` is `channel`.
fn when_channel(channel: Channel, then: Value) -> Value {
    json!({"if": {"required": ["channel"], "properties": {"channel": {"const": channel.as_str()}}}, "then": then})
}

/// The rules the handlers enforce, written into the request schemas so that generated clients
/// and fuzzers know them: lengths, ranges, patterns, and which fields go with which channel.
/// The numbers come from the code that enforces them.
fn apply_rules(doc: &mut Value) {
    use crate::service::{notifications::body_limit, otp, webhooks};
    let absent = json!({"type": "null"});
    let longest_body = Channel::ALL.iter().map(|c| body_limit(*c)).max().unwrap_or(0);
    let schemas = &mut doc["components"]["schemas"];
    let in_app_only = json!({"title": absent, "data": absent});
    let sms_like = |channel: Channel| {
        let mut then = json!({"properties": {
            "recipient": {"pattern": E164},
            "body": {"maxLength": body_limit(channel)},
            "subject": absent, "html_body": absent, "from": absent,
        }});
        merge(&mut then["properties"], in_app_only.clone());
        when_channel(channel, then)
    };
    let (sms, whatsapp) = (sms_like(Channel::Sms), sms_like(Channel::Whatsapp));
    let mut email_then =
        json!({"properties": {"recipient": email(), "body": {"maxLength": body_limit(Channel::Email)}}});
    merge(&mut email_then["properties"], in_app_only);
    let title_or_subject = json!({"anyOf": [
        {"required": ["title"], "properties": {"title": {"type": "string"}}},
        {"required": ["subject"], "properties": {"subject": {"type": "string"}}},
        {"required": ["template_id"], "properties": {"template_id": {"type": "string"}}},
    ]});
    let mut in_app_then = json!({"properties": {
        "recipient": {"pattern": USER_ID},
        "body": {"maxLength": body_limit(Channel::InApp)},
        "subject": {"maxLength": 256},
        "html_body": absent, "from": absent,
    }});
    merge(&mut in_app_then, title_or_subject);
    let url = json!({"type": "string", "maxLength": 2048, "pattern": HTTP_URL});
    merge(
        &mut schemas["NotificationIn"],
        json!({
            "properties": {
                "recipient": {"minLength": 1},
                "subject": {"maxLength": 998, "pattern": SINGLE_LINE},
                "title": {"maxLength": 256, "pattern": SINGLE_LINE},
                "body": {"maxLength": longest_body},
                "from": email(),
                "data": {"properties": {
                    "action_url": url, "avatar_url": url,
                    "category": {"type": "string", "maxLength": 64, "pattern": SINGLE_LINE},
                }},
            },
            "allOf": [
                when_channel(Channel::Email, email_then),
                sms,
                whatsapp,
                when_channel(Channel::InApp, in_app_then),
                // Without a template, the body is the request's.
                {"if": {"required": ["template_id"], "properties": {"template_id": {"type": "string"}}},
                 "else": {"required": ["body"], "properties": {"body": {"type": "string", "pattern": "\\S"}}}},
            ],
        }),
    );
    merge(
        &mut schemas["OtpSendIn"],
        json!({
            "properties": {
                "length": {"enum": [4, 6, null]},
                "ttl_seconds": {"minimum": otp::TTL_RANGE.start(), "maximum": otp::TTL_RANGE.end()},
                "code": {"pattern": "^[A-Za-z0-9_-]{4,16}$"},
            },
            "allOf": [
                {"properties": {"channel": {"enum": [Channel::Email.as_str(), Channel::Sms.as_str()]}}},
                when_channel(Channel::Email, json!({"properties": {"recipient": email()}})),
                when_channel(Channel::Sms, json!({"properties": {"recipient": {"pattern": E164}}})),
                // A code of your own has its own length.
                {"if": {"required": ["code"], "properties": {"code": {"type": "string"}}},
                 "then": {"properties": {"length": absent}}},
            ],
        }),
    );
    merge(&mut schemas["OtpVerifyIn"], json!({"properties": {"code": {"minLength": 1, "maxLength": 64}}}));
    merge(
        &mut schemas["UserTokenIn"],
        json!({"properties": {"ttl_seconds": {
            "minimum": super::users::TTL_RANGE.start(), "maximum": super::users::TTL_RANGE.end(),
        }}}),
    );
    let at_least_one_part: Vec<Value> = ["subject", "body", "html_body"]
        .iter()
        .map(|part| json!({"required": [part], "properties": {*part: {"type": "string"}}}))
        .collect();
    merge(
        &mut schemas["TemplateIn"],
        json!({
            "properties": {
                "name": {"minLength": 1, "maxLength": super::templates::NAME_MAX_CHARS, "pattern": SINGLE_LINE},
                "subject": {"pattern": SINGLE_LINE},
            },
            // At least one part.
            "anyOf": at_least_one_part,
        }),
    );
    merge(
        &mut schemas["DomainIn"],
        json!({"properties": {"name": {"pattern": DOMAIN}, "dkim_selector": {"pattern": LABEL}}}),
    );
    let endpoint_rules = json!({"properties": {
        "url": {"pattern": HTTP_URL, "maxLength": webhooks::MAX_URL_LEN},
        "description": {"maxLength": webhooks::MAX_DESCRIPTION_LEN},
        "event_types": {"minItems": 1},
    }});
    merge(&mut schemas["WebhookEndpointIn"], endpoint_rules.clone());
    merge(&mut schemas["WebhookEndpointPatch"], endpoint_rules);
}

/// The schema of each event type's `data` (CONTRACT §10).
fn event_data_schema(event: EventType) -> &'static str {
    match event {
        EventType::DomainVerified | EventType::DomainFailed => "DomainOut",
        EventType::SuppressionCreated | EventType::SuppressionDeleted => "Suppression",
        EventType::WebhookTest => "WebhookTestData",
        _ => "ActivityItem",
    }
}

/// The `webhooks` section of OpenAPI 3.1: every event Herald sends to an endpoint, with the
/// Standard Webhooks headers and the body's schema (`type` fixed, `data` the subject as the API
/// shows it).
fn describe_webhooks(doc: &mut Value) {
    let header = |name: &str, description: &str, pattern: &str| {
        json!({"name": name, "in": "header", "required": true, "description": description,
               "schema": {"type": "string", "pattern": pattern}})
    };
    let parameters = json!([
        header(
            "webhook-id",
            "The message's id: the same on every attempt of one message (deduplicate on it)",
            "^msg_[0-9a-hjkmnp-tv-z]{26}$"
        ),
        header("webhook-timestamp", "When this attempt was signed, in Unix seconds", "^[0-9]+$"),
        header(
            "webhook-signature",
            "`v1,` + base64 of HMAC-SHA256 with the secret's decoded bytes over `id.timestamp.body`; \
                during a secret rotation's overlap, two of them separated by a space",
            "^v1,[A-Za-z0-9+/=]+( v1,[A-Za-z0-9+/=]+)*$"
        ),
    ]);
    let mut webhooks = Map::new();
    for event in EventType::ALL {
        let body = json!({
            "allOf": [{"$ref": "#/components/schemas/WebhookEvent"}],
            "properties": {
                "type": {"const": event.as_str()},
                "data": {"$ref": format!("#/components/schemas/{}", event_data_schema(*event))},
            },
        });
        webhooks.insert(
            event.as_str().to_owned(),
            json!({"post": {
                "operationId": format!("webhook_{}", event.as_str().replace('.', "_")),
                "summary": format!("`{}`", event.as_str()),
                "tags": ["webhooks"],
                "parameters": parameters,
                "requestBody": {"required": true, "content": {"application/json": {"schema": body}}},
                "responses": {
                    "2XX": {"description": "Received: any 2xx ends the message's attempts"},
                    "410": {"description": "The endpoint is gone: Herald disables it at once"},
                    "default": {"description": "Any other answer, a timeout or no connection: tried again on the schedule"},
                },
            }}),
        );
    }
    doc["webhooks"] = Value::Object(webhooks);
    doc["components"]["schemas"]["WebhookTestData"] = json!({
        "type": "object",
        "description": "The data of a `webhook.test` event",
        "required": ["endpoint_id"],
        "properties": {"endpoint_id": {"type": "string", "pattern": "^whe_[0-9a-hjkmnp-tv-z]{26}$"}},
    });
}

fn problem(description: &str) -> Value {
    json!({
        "description": description,
        "content": {"application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}},
    })
}

/// Adds `status` unless the operation documents it already (its own words win).
fn add(responses: &mut Map<String, Value>, status: &str, description: &str) {
    responses.entry(status).or_insert_with(|| problem(description));
}

fn add_standard_responses(path: &str, operation: &mut Value) {
    let has_body = operation.get("requestBody").is_some();
    // The JSON extractor's answers; a form body (a provider's callback) has answers of its own,
    // and so does every receipt intake, which reads the raw body whatever its content type.
    let json_body = operation["requestBody"]["content"].get("application/json").is_some();
    let secured = operation["security"].as_array().is_some_and(|s| !s.is_empty());
    // An unsubscribe link's token is not checked field by field: anything but a sealed token is 404.
    let has_query = !path.starts_with("/u/")
        && operation["parameters"]
            .as_array()
            .is_some_and(|ps| ps.iter().any(|p| p["in"] == "query" || p["in"] == "path"));
    // The providers' receipt intakes read the raw body, whatever its content type, because the
    // signature covers its bytes: no 415, and no field errors from our JSON extractor.
    let raw_body = path.starts_with("/api/v1/receipts/");
    let Some(responses) = operation.get_mut("responses").and_then(Value::as_object_mut) else { return };
    let read_as_json = json_body && !raw_body;
    if read_as_json {
        add(responses, "400", "The body is not JSON (`invalid_json`)");
        add(responses, "415", "The body is not sent as `application/json` (`unsupported_media_type`)");
    }
    if has_body {
        add(responses, "413", "The body is larger than 256 KiB (`payload_too_large`)");
    }
    if read_as_json || has_query {
        add(responses, "422", "A field or parameter is invalid (`validation_failed`, with `errors`)");
    }
    if secured {
        add(responses, "401", "Missing, invalid or expired credential (`unauthorized`)");
    }
    if path.starts_with("/api/") {
        add(responses, "503", "The database is not available (`unavailable`), with `Retry-After`");
    }
}

/// The pattern of each path parameter, as its id type parses it (`herald_common::ids`).
fn path_parameter_pattern(name: &str) -> Option<String> {
    const BODY: &str = "[0-9a-hjkmnp-tv-z]{26}$";
    let prefix = match name {
        "user_id" => return Some(USER_ID.to_owned()),
        // base64url (`crate::unsubscribe`).
        "token" => return Some("^[A-Za-z0-9_-]{1,640}$".to_owned()),
        "transaction_id" => "(notif|otp)_",
        "application_id" => "app_",
        "domain_id" => "dom_",
        "id" => "inapp_",
        "notification_id" => "notif_",
        "template_id" => "tpl_",
        "endpoint_id" => "whe_",
        _ => return None,
    };
    Some(format!("^{prefix}{BODY}"))
}

fn constrain_path_parameters(operation: &mut Value) {
    let Some(parameters) = operation.get_mut("parameters").and_then(Value::as_array_mut) else { return };
    for parameter in parameters.iter_mut().filter(|p| p["in"] == "path") {
        if let Some(pattern) = parameter["name"].as_str().and_then(path_parameter_pattern) {
            merge(&mut parameter["schema"], json!({ "pattern": pattern }));
        }
    }
}

/// An event of a stream: its name, the schema of its `data`, and whether it carries an `id:`.
type EventSpec = (&'static str, &'static str, bool);

const INBOX_EVENTS: &[EventSpec] = &[
    ("connection.ready", "ConnectionReady", false),
    ("notification.created", "InboxItem", true),
    ("notification.updated", "InboxItem", false),
    ("heartbeat", "Heartbeat", false),
    ("stream.resync", "Resync", false),
];

const ACTIVITY_EVENTS: &[EventSpec] = &[
    ("connection.ready", "ConnectionReady", false),
    ("activity.created", "ActivityItem", true),
    ("activity.updated", "ActivityItem", true),
    ("heartbeat", "Heartbeat", false),
];

/// One parsed event of the stream (`event`, `data`, `id`, as an SSE parser gives them), one
/// alternative per event name; `data` is one line of JSON whose schema `contentSchema` names.
fn event_schema(events: &[EventSpec]) -> Value {
    let one_of: Vec<Value> = events
        .iter()
        .map(|(name, schema, has_id)| {
            let description = if *has_id {
                format!("`{name}`: its `data` is a {schema}; its `id` is the event id to resume after")
            } else {
                format!("`{name}`: its `data` is a {schema}")
            };
            json!({
                "type": "object",
                "description": description,
                "required": ["event", "data"],
                "properties": {
                    "event": {"const": name},
                    "data": {
                        "type": "string",
                        "contentMediaType": "application/json",
                        "contentSchema": {"$ref": format!("#/components/schemas/{schema}")},
                    },
                    // A parser keeps the last id it saw on the events after it.
                    "id": {"type": "string"},
                    "retry": {"type": "integer"},
                },
            })
        })
        .collect();
    json!({ "oneOf": one_of })
}

fn describe_stream(doc: &mut Value, path: &str, events: &[EventSpec]) {
    let Some(ok) = doc["paths"][path]["get"]["responses"]["200"].as_object_mut() else { return };
    ok.insert("content".into(), json!({ "text/event-stream": { "schema": event_schema(events) } }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn standard_answers_are_added_without_replacing_a_handlers_own() {
        let mut operation = json!({
            "requestBody": {"content": {"application/json": {}}},
            "security": [{"api_key": []}],
            "responses": {"200": {}, "422": {"description": "mine"}},
        });
        add_standard_responses("/api/v1/x", &mut operation);
        let responses = operation["responses"].as_object().unwrap();
        let mut statuses: Vec<&str> = responses.keys().map(String::as_str).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, ["200", "400", "401", "413", "415", "422", "503"]);
        assert_eq!(responses["422"]["description"], "mine");

        let mut intake = json!({"requestBody": {}, "responses": {"200": {}, "400": {"description": "mine"}}});
        add_standard_responses("/api/v1/receipts/whatsapp", &mut intake);
        let mut statuses: Vec<&str> =
            intake["responses"].as_object().unwrap().keys().map(String::as_str).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, ["200", "400", "413", "503"], "an intake takes any content type");

        // A form body is not read by the JSON extractor: none of its answers.
        let mut form = json!({
            "requestBody": {"content": {"application/x-www-form-urlencoded": {}}},
            "responses": {"204": {}, "400": {"description": "mine"}},
        });
        add_standard_responses("/api/v1/x", &mut form);
        let mut statuses: Vec<&str> =
            form["responses"].as_object().unwrap().keys().map(String::as_str).collect();
        statuses.sort_unstable();
        assert_eq!(statuses, ["204", "400", "413", "503"]);

        let mut health = json!({"responses": {"200": {}}});
        add_standard_responses("/healthz", &mut health);
        assert_eq!(health["responses"].as_object().unwrap().len(), 1, "nothing to add to /healthz");
    }

    #[test]
    fn every_event_names_the_schema_of_its_data() {
        let schema = event_schema(INBOX_EVENTS);
        let names: Vec<&str> = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["properties"]["event"]["const"].as_str().unwrap())
            .collect();
        assert_eq!(
            names,
            [
                "connection.ready",
                "notification.created",
                "notification.updated",
                "heartbeat",
                "stream.resync"
            ]
        );
        // Between them, the two streams describe every event there is.
        let mut described: Vec<&str> =
            INBOX_EVENTS.iter().chain(ACTIVITY_EVENTS).map(|(name, _, _)| *name).collect();
        described.sort_unstable();
        described.dedup();
        let mut all: Vec<&str> = herald_common::stream::EventName::ALL.iter().map(|e| e.as_str()).collect();
        all.sort_unstable();
        assert_eq!(described, all);
    }
}
