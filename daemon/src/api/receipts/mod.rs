//! The providers' receipt intakes (CONTRACT §8): public routes, each authenticated by its
//! provider's signature, never by a Herald credential. The work is `service::receipts`.

mod twilio;
mod whatsapp;

use utoipa_axum::router::OpenApiRouter;

use crate::state::AppState;

pub fn router() -> OpenApiRouter<AppState> {
    OpenApiRouter::new().merge(twilio::router()).merge(whatsapp::router())
}
