//! One module per resource, each an `Args` (or `Command`) with `exec`.

pub mod health;
pub mod token;
pub mod whoami;
