//! Receipts from the providers (CONTRACT §8): what Twilio, Meta and the mail servers say about a
//! message after they accepted it. Each intake (`twilio`, `whatsapp`, the bounce listener) checks
//! its provider's signature before it reads anything else, turns what the provider said into
//! Herald's status model ([`Said`]) and hands it to [`record`]: a receipt for a message Herald
//! does not know costs one indexed read and no write, and is answered as success so that the
//! provider does not send it again forever. Every outcome is counted in `/metrics`
//! (`herald_receipts_total{provider, outcome}`).

pub mod email;
pub mod twilio;
pub mod whatsapp;

use herald_common::{
    api::{
        notifications::{DeliveryStatus, ReceiptProvider},
        suppressions::SuppressionReason,
    },
    ids::NotificationId,
};

use super::suppressions;
use crate::{
    state::AppState,
    store::{NewReceipt, ReceiptOutcome, StoreError},
};

/// Why a receipt was refused. None of these changes anything.
#[derive(Debug, thiserror::Error)]
pub enum ReceiptError {
    /// The signature is missing, wrong, or cannot be checked (no key configured).
    #[error("The signature is missing or does not match.")]
    InvalidSignature,
    /// The body is not one the provider sends.
    #[error("{0}")]
    Malformed(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Which message a receipt is about.
#[derive(Clone, Debug)]
pub enum Target {
    /// The provider's id of the message (Twilio's `MessageSid`, WhatsApp's `wamid`).
    ProviderMessage(String),
    /// Herald's own id, from a token Herald signed (the email's VERP return path).
    Notification(NotificationId),
}

/// What a provider said about a message, in Herald's terms.
#[derive(Clone, Debug)]
pub struct Said {
    pub provider: ReceiptProvider,
    /// The provider's own word, kept as it came.
    pub provider_status: String,
    /// Its meaning; `sent` for one that changes nothing (a delayed DSN, Twilio's `queued`).
    pub status: DeliveryStatus,
    pub error_code: Option<String>,
    /// Text for the history and `failure_reason`, the recipient already masked out of it.
    pub detail: Option<String>,
    /// Whether the item may be retried if this receipt sets its status.
    pub retryable: bool,
}

impl Said {
    /// The suppression this receipt calls for (CONTRACT §9): a permanent bounce (DSN `5.x.x`,
    /// or no readable status class) is a hard bounce, a complaint a complaint, and Twilio's
    /// 21610 a carrier opt-out.
    pub fn suppression(&self) -> Option<SuppressionReason> {
        match (self.provider, self.status) {
            (_, DeliveryStatus::Complained) => Some(SuppressionReason::Complaint),
            (ReceiptProvider::Email, DeliveryStatus::Bounced) if !self.retryable => {
                Some(SuppressionReason::HardBounce)
            }
            (ReceiptProvider::Twilio, _) if self.error_code.as_deref() == Some(TWILIO_UNSUBSCRIBED) => {
                Some(SuppressionReason::CarrierOptOut)
            }
            _ => None,
        }
    }
}

/// Twilio's error code for a recipient who texted STOP.
const TWILIO_UNSUBSCRIBED: &str = "21610";

/// How a receipt ended, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Counted {
    /// Kept; the status moved.
    Changed,
    /// Kept in the history; the status stayed.
    Recorded,
    /// No such message: nothing written.
    Unknown,
    InvalidSignature,
    Malformed,
}

impl Counted {
    fn label(self) -> &'static str {
        match self {
            Counted::Changed => "changed",
            Counted::Recorded => "recorded",
            Counted::Unknown => "unknown",
            Counted::InvalidSignature => "invalid_signature",
            Counted::Malformed => "malformed",
        }
    }
}

/// Counts one receipt in `herald_receipts_total{provider, outcome}`.
pub fn count(provider: ReceiptProvider, outcome: Counted) {
    metrics::counter!("herald_receipts_total", "provider" => provider.as_str(), "outcome" => outcome.label())
        .increment(1);
}

/// Counts a refused receipt and passes its error on.
pub fn refused(provider: ReceiptProvider, error: ReceiptError) -> ReceiptError {
    match &error {
        ReceiptError::InvalidSignature => count(provider, Counted::InvalidSignature),
        ReceiptError::Malformed(_) => count(provider, Counted::Malformed),
        ReceiptError::Store(_) => {}
    }
    error
}

/// Records what a provider said about `target` at `received_at`: kept in the item's history,
/// and its status moved if the receipt outranks it. A message Herald does not know is
/// [`Counted::Unknown`] and writes nothing.
pub async fn record(
    state: &AppState,
    target: Target,
    said: Said,
    received_at: i64,
) -> Result<Counted, ReceiptError> {
    let store = &state.store;
    let provider = said.provider;
    let suppress = said.suppression();
    let notification_id = match target {
        Target::Notification(id) => Some(id),
        Target::ProviderMessage(message) => store.notification_of_provider_message(&message).await?,
    };
    let Some(notification_id) = notification_id else {
        count(provider, Counted::Unknown);
        return Ok(Counted::Unknown);
    };
    let receipt = NewReceipt {
        notification_id: notification_id.clone(),
        provider,
        provider_status: said.provider_status,
        status: said.status,
        error_code: said.error_code,
        detail: said.detail,
        retryable: said.retryable,
        received_at,
    };
    let counted = match store.record_receipt(receipt).await? {
        ReceiptOutcome::Recorded { changed: true } => Counted::Changed,
        ReceiptOutcome::Recorded { changed: false } => Counted::Recorded,
        ReceiptOutcome::Unknown => Counted::Unknown,
    };
    count(provider, counted);
    if let (Some(reason), Counted::Changed | Counted::Recorded) = (suppress, counted) {
        suppressions::suppress_recipient_of(state, &notification_id, reason).await?;
    }
    Ok(counted)
}

/// Compares a signature in constant time.
pub fn same_signature(expected: &[u8], given: &[u8]) -> bool {
    aws_lc_rs::constant_time::verify_slices_are_equal(expected, given).is_ok()
}
