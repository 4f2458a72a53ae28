//! Herald's integration tests: one binary, the real daemon on loopback.

mod auth;
mod errors;
mod openapi;
mod ops;
mod process;
mod store;
