//! Request and response types, one module per resource.

pub mod activity;
pub mod admin;
pub mod applications;
pub mod domains;
pub mod health;
pub mod inbox;
pub mod notifications;
pub mod otp;
pub mod suppressions;
pub mod templates;
pub mod users;
pub mod webhooks;
pub mod whoami;
