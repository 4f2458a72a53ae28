//! The HTTP API: one router per resource, merged here with the middleware and the OpenAPI
//! document. Routes are only ever added through `utoipa_axum::routes!`, which registers the
//! handler and its OpenAPI operation together, so the document cannot miss a route.

mod activity;
pub mod auth;
mod dev;
mod document;
mod domains;
pub mod extract;
mod health;
mod identity;
mod inbox;
mod notifications;
mod otp;
mod receipts;
mod suppressions;
mod templates;
mod unsubscribe;
mod users;
mod webhooks;

use axum::{
    Router,
    extract::DefaultBodyLimit,
    http::{HeaderName, Request},
    response::{IntoResponse, Response},
};
use herald_common::{ErrorCode, FieldError, Problem};
use tower_http::{
    catch_panic::CatchPanicLayer,
    request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer},
    trace::{DefaultOnResponse, TraceLayer},
};
use utoipa::{
    Modify, OpenApi,
    openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme},
};
use utoipa_axum::router::OpenApiRouter;

use crate::{error::ApiError, state::AppState};

#[derive(OpenApi)]
#[openapi(
    info(
        title = "Herald",
        description = "Self-hosted notification delivery: email, SMS, WhatsApp and in-app, one-time passwords, \
                       custom sending domains and a masked activity feed. Errors are RFC 9457 problems.",
        license(name = "Apache-2.0"),
    ),
    components(schemas(
        Problem,
        FieldError,
        ErrorCode,
        herald_common::stream::ConnectionReady,
        herald_common::stream::Heartbeat,
        herald_common::stream::Resync,
        herald_common::api::inbox::InboxItem,
        herald_common::api::activity::ActivityItem,
        herald_common::api::webhooks::WebhookEvent,
        herald_common::api::suppressions::Suppression,
        herald_common::api::domains::DomainOut,
    )),
    modifiers(&SecuritySchemes),
    tags(
        (name = "operations", description = "Health, metrics and this document"),
        (name = "identity", description = "Credentials and applications"),
        (name = "users", description = "End-user tokens"),
        (name = "notifications", description = "Dispatch over email, SMS, WhatsApp and in-app"),
        (name = "templates", description = "Stored templates for dispatch"),
        (name = "domains", description = "Custom sending domains: DNS verification and DKIM"),
        (name = "otp", description = "One-time passwords"),
        (name = "activity", description = "The masked delivery timeline, and retries"),
        (name = "inbox", description = "End users' inboxes and live streams"),
        (name = "receipts", description = "The providers' delivery receipts, authenticated by the providers' signatures"),
        (name = "unsubscribe", description = "One-click unsubscribe links (RFC 8058): pages for the recipients of categorised email, no credential"),
        (name = "webhooks", description = "Outbound event webhooks in the Standard Webhooks format"),
    )
)]
struct ApiDoc;

struct SecuritySchemes;

impl Modify for SecuritySchemes {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        let bearer = |format: &str, description: &str| {
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format(format)
                    .description(Some(description))
                    .build(),
            )
        };
        components.add_security_scheme("api_key", bearer("hk_…", "An application's secret API key"));
        components
            .add_security_scheme("operator", bearer("JWT", "An operator token from the identity provider"));
        components.add_security_scheme("user", bearer("JWT", "An end user's HS256 token"));
    }
}

fn api_router(dev: bool) -> OpenApiRouter<AppState> {
    let router = OpenApiRouter::with_openapi(ApiDoc::openapi())
        .merge(health::router())
        .merge(identity::router())
        .merge(users::router())
        .merge(notifications::router())
        .merge(otp::router())
        .merge(activity::router())
        .merge(inbox::router())
        .merge(templates::router())
        .merge(domains::router())
        .merge(suppressions::router())
        .merge(webhooks::router())
        .merge(receipts::router())
        .merge(unsubscribe::router());
    if dev { router.merge(dev::router()) } else { router }
}

/// The OpenAPI document of the daemon (with the development routes when `dev`), finished: the
/// standard answers added and the streams' events described.
pub fn openapi(dev: bool) -> serde_json::Value {
    document::finish(api_router(dev).split_for_parts().1)
}

/// Cross-origin access for browser pages of the configured origins (none by default).
fn cors(origins: &[String]) -> tower_http::cors::CorsLayer {
    use axum::http::{HeaderValue, Method, header};
    use tower_http::cors::{AllowOrigin, CorsLayer};
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::any()
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| HeaderValue::from_str(o).ok()))
    };
    CorsLayer::new()
        .allow_origin(allow)
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::PATCH, Method::DELETE])
        .allow_headers([
            header::AUTHORIZATION,
            header::CONTENT_TYPE,
            header::ACCEPT,
            header::HeaderName::from_static("idempotency-key"),
            header::HeaderName::from_static("last-event-id"),
        ])
        .expose_headers([header::HeaderName::from_static("idempotent-replayed"), header::RETRY_AFTER])
        .max_age(std::time::Duration::from_secs(600))
}

/// The complete application: routes, fallbacks and middleware.
pub fn router(state: AppState) -> Router {
    let (routes, doc) = api_router(state.config.dev).split_for_parts();
    let _ = state.openapi.set(document::finish(doc).to_string());
    let request_id = HeaderName::from_static("x-request-id");
    routes
        .fallback(|| async { ApiError::new(ErrorCode::RouteNotFound, "There is no such route.") })
        .method_not_allowed_fallback(|| async {
            ApiError::new(ErrorCode::MethodNotAllowed, "This route does not take that method.")
        })
        .layer(DefaultBodyLimit::max(extract::MAX_BODY_BYTES))
        .layer(axum::middleware::from_fn(crate::telemetry::track_requests))
        .layer(CatchPanicLayer::custom(|_| -> Response {
            ApiError::internal(anyhow::anyhow!("a handler panicked")).into_response()
        }))
        .layer(PropagateRequestIdLayer::new(request_id.clone()))
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|request: &Request<_>| {
                    let id = request
                        .headers()
                        .get("x-request-id")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    // An unsubscribe link's token is a capability: the logs name the route instead.
                    let path = request.uri().path();
                    let path =
                        if path.starts_with(crate::unsubscribe::PATH_PREFIX) { "/u/{token}" } else { path };
                    tracing::info_span!("request", method = %request.method(), path = %path, request_id = %id)
                })
                .on_response(DefaultOnResponse::new().level(tracing::Level::DEBUG)),
        )
        .layer(SetRequestIdLayer::new(request_id, MakeRequestUuid))
        .layer(cors(&state.config.cors_origins))
        // Public code, importable from any origin: outside the CORS layer, which grants only
        // the configured origins (a page that is refused must still load the reader to hear why).
        .route("/content/herald-inbox.js", axum::routing::get(herald_inbox_js))
        .with_state(state)
}

/// The browser's inbox reader (`daemon/assets/herald-inbox.js`; docs/STREAM.md).
pub const HERALD_INBOX_JS: &str = include_str!("../../assets/herald-inbox.js");

async fn herald_inbox_js() -> Response {
    use axum::http::header;
    (
        [
            (header::CONTENT_TYPE, "text/javascript; charset=utf-8"),
            (header::ACCESS_CONTROL_ALLOW_ORIGIN, "*"),
            (header::CACHE_CONTROL, "public, max-age=300"),
        ],
        HERALD_INBOX_JS,
    )
        .into_response()
}
