//! Herald's API contract, shared by the daemon, the CLI, the TUI and the tests: typed prefixed
//! ids, request/response types (`XxxIn` / `XxxOut`), the problem+json error body, and a typed
//! HTTP client.

pub mod api;
pub mod client;
pub mod error;
pub mod ids;
pub mod mask;
pub mod profile;
pub mod scope;
mod sql;
pub mod stream;
pub mod timestamp;
pub mod wire;

pub use error::{ErrorCode, FieldError, Problem};
pub use scope::Scope;
pub use timestamp::Timestamp;
