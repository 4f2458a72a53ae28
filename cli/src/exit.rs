//! Exit codes, and how a failure is told. Scripts rely on the codes (docs/CLI.md):
//!
//! | code | meaning |
//! |---|---|
//! | 0 | done |
//! | 1 | the operation ran and failed (a wrong OTP code, rows refused in a bulk send, a domain that did not verify) |
//! | 2 | usage: bad arguments, or input the API refused (400, 422 `validation_failed`) |
//! | 3 | authentication: no credential, or one refused (401) or without the scope (403) |
//! | 4 | not found (404) |
//! | 5 | conflict: the item's state does not allow it (409, 410, 423, a reused idempotency key, an unverified sending domain) |
//! | 6 | rate limited (429) |
//! | 7 | the server failed (5xx) or could not be reached |
//! | 130 | interrupted (Ctrl-C) |

use std::process::ExitCode;

use herald_common::{ErrorCode, Problem, client::ClientError};

use crate::style::{Tone, paint};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exit {
    Ok = 0,
    Failure = 1,
    Usage = 2,
    Auth = 3,
    NotFound = 4,
    Conflict = 5,
    RateLimited = 6,
    Unavailable = 7,
    Interrupted = 130,
}

impl Exit {
    pub fn code(self) -> ExitCode {
        ExitCode::from(self as u8)
    }

    /// The exit code for an answer of the API.
    pub fn of_problem(problem: &Problem) -> Exit {
        use ErrorCode::*;
        match problem.code {
            InvalidJson | ValidationFailed | PayloadTooLarge | UnsupportedMediaType | RouteNotFound
            | MethodNotAllowed | InvalidReceipt => Exit::Usage,
            Unauthorized | InsufficientScope | InvalidSignature => Exit::Auth,
            NotFound => Exit::NotFound,
            Conflict
            | IdempotencyKeyReused
            | IdempotencyInProgress
            | OtpExpired
            | OtpTombstoned
            | OtpAlreadyVerified
            | NotRetryable
            | DomainNotVerified
            | RecipientSuppressed => Exit::Conflict,
            RateLimited => Exit::RateLimited,
            Internal | Unavailable | DeliveryFailed => Exit::Unavailable,
            OtpInvalidCode => Exit::Failure,
        }
    }
}

/// A failure with its exit code and what to tell the person.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Fail {
    pub exit: Exit,
    pub message: String,
    /// The API's problem, printed with its fields.
    pub problem: Option<Box<Problem>>,
}

impl Fail {
    pub fn new(exit: Exit, message: impl Into<String>) -> Self {
        Self { exit, message: message.into(), problem: None }
    }

    pub fn usage(message: impl Into<String>) -> Self {
        Self::new(Exit::Usage, message)
    }

    pub fn failure(message: impl Into<String>) -> Self {
        Self::new(Exit::Failure, message)
    }

    pub fn auth(message: impl Into<String>) -> Self {
        Self::new(Exit::Auth, message)
    }

    /// Ends the command quietly with success: stdout was closed (`| head`).
    pub fn closed_pipe() -> Self {
        Self::new(Exit::Ok, String::new())
    }

    pub fn from_io(error: std::io::Error) -> Self {
        if error.kind() == std::io::ErrorKind::BrokenPipe {
            Self::closed_pipe()
        } else {
            Self::failure(format!("cannot write: {error}"))
        }
    }

    /// Prints the failure to stderr and returns its exit code. A failure without a message (a
    /// closed pipe, or one whose lines were already printed) prints nothing.
    pub fn report(&self, color: bool) -> ExitCode {
        if self.message.is_empty() && self.problem.is_none() {
            return self.exit.code();
        }
        let label = paint("error:", Tone::Bad, color);
        match &self.problem {
            Some(problem) => {
                eprintln!("{label} {} ({})", problem.code.as_str(), problem.status);
                // One field error is the detail itself: print it once.
                if let Some(detail) = problem.detail.as_ref().filter(|_| problem.errors.len() != 1) {
                    eprintln!("  {detail}");
                }
                for field in &problem.errors {
                    eprintln!("  {}: {}", paint(&field.field, Tone::Bold, color), field.message);
                }
                if let Some(remaining) = problem.attempts_remaining {
                    eprintln!("  attempts remaining: {remaining}");
                }
            }
            None => eprintln!("{label} {}", self.message),
        }
        self.exit.code()
    }
}

impl From<ClientError> for Fail {
    fn from(error: ClientError) -> Self {
        match error {
            ClientError::Problem { problem, .. } => Fail {
                exit: Exit::of_problem(&problem),
                message: problem.detail.clone().unwrap_or_else(|| problem.code.as_str().to_owned()),
                problem: Some(problem),
            },
            ClientError::Unexpected { status, body } => {
                Fail::new(Exit::Unavailable, format!("unexpected answer (HTTP {status}): {body}"))
            }
            ClientError::Transport(e) => Fail::new(Exit::Unavailable, describe_transport(&e)),
        }
    }
}

impl From<anyhow::Error> for Fail {
    fn from(error: anyhow::Error) -> Self {
        match error.downcast::<Fail>() {
            Ok(fail) => fail,
            Err(error) => match error.downcast::<ClientError>() {
                Ok(client) => client.into(),
                Err(error) => Fail::failure(format!("{error:#}")),
            },
        }
    }
}

fn describe_transport(error: &reqwest_error::Error) -> String {
    let url = error.url().map(|u| u.to_string()).unwrap_or_default();
    if error.is_connect() {
        format!("cannot reach Herald at {url} (is heraldd running? `--url` or HERALD_URL chooses another)")
    } else if error.is_timeout() {
        format!("Herald at {url} did not answer in time")
    } else {
        format!("cannot talk to Herald at {url}: {error}")
    }
}

/// reqwest's error type, through the client crate (the CLI does not depend on reqwest itself).
mod reqwest_error {
    pub type Error = herald_common::client::TransportError;
}

/// Ctrl-C, listened for from the moment this is made. A `tokio::signal::ctrl_c()` made afresh
/// on each turn of a loop misses a press that lands while the loop is busy between two awaits
/// (printing a row, say); this one keeps it until [`Interrupt::recv`] is next awaited.
pub struct Interrupt(tokio::signal::unix::Signal);

impl Interrupt {
    pub fn listen() -> Result<Self, Fail> {
        tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())
            .map(Interrupt)
            .map_err(Fail::from_io)
    }

    /// Waits for the next Ctrl-C (cancel-safe: use it in `select!`).
    pub async fn recv(&mut self) {
        self.0.recv().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problems_map_to_documented_codes() {
        let code = |c: ErrorCode| Exit::of_problem(&Problem::new(c, "x")) as u8;
        assert_eq!(code(ErrorCode::ValidationFailed), 2);
        assert_eq!(code(ErrorCode::Unauthorized), 3);
        assert_eq!(code(ErrorCode::InsufficientScope), 3);
        assert_eq!(code(ErrorCode::NotFound), 4);
        assert_eq!(code(ErrorCode::NotRetryable), 5);
        assert_eq!(code(ErrorCode::OtpTombstoned), 5);
        assert_eq!(code(ErrorCode::RateLimited), 6);
        assert_eq!(code(ErrorCode::Internal), 7);
        assert_eq!(code(ErrorCode::OtpInvalidCode), 1);
    }

    #[test]
    fn exit_does_not_reach_back_into_output() {
        // `output` fails with `Fail`; what both need (painting) lives below them in `style`.
        let this = include_str!("exit.rs");
        assert!(!this.contains(concat!("crate::", "output")), "exit.rs imports output: a cycle");
    }
}
