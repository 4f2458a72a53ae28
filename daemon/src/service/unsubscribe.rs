//! One-click unsubscribe (CONTRACT §9, RFC 8058 and RFC 2369): the link every email with a
//! category carries, and what following it does. The token is `crate::unsubscribe`'s; the entry
//! it adds is an ordinary `unsubscribe` suppression for that category, lifted like any other.

use herald_common::{
    api::{
        notifications::Channel,
        suppressions::{Suppression, SuppressionReason},
    },
    ids::{NotificationId, TenantId, TransactionId},
};

use super::suppressions::{recipient_key, view};
use crate::{
    state::AppState,
    store::{NewSuppression, StoreError},
    unsubscribe::{self, Unsubscribe},
};

/// The notification a link is made for.
pub struct Linked<'a> {
    pub tenant_id: &'a TenantId,
    pub notification_id: &'a NotificationId,
    pub channel: Channel,
    pub recipient: &'a str,
    /// The key stored with the notification, if it was (else computed from `recipient`).
    pub recipient_key: Option<&'a str>,
    pub recipient_masked: &'a str,
    pub category: Option<&'a str>,
}

/// The one-click link of an email with a category; `None` for any other send (transactional
/// mail, other channels: SMS has STOP).
pub fn link(state: &AppState, to: &Linked<'_>) -> anyhow::Result<Option<String>> {
    let Some(category) = to.category.filter(|_| to.channel == Channel::Email) else { return Ok(None) };
    let what = Unsubscribe {
        tenant_id: to.tenant_id.clone(),
        notification_id: to.notification_id.clone(),
        channel: to.channel,
        recipient_key: to
            .recipient_key
            .map_or_else(|| recipient_key(&state.secret, to.channel, to.recipient), str::to_owned),
        recipient_masked: to.recipient_masked.to_owned(),
        category: category.to_owned(),
    };
    unsubscribe::url(&state.secret, &state.config.public_url, &what).map(Some)
}

/// What a link's token says, if Herald made it: for the confirmation page, which changes nothing.
pub fn read(state: &AppState, token: &str) -> Option<Unsubscribe> {
    unsubscribe::open(&state.secret, token)
}

/// The one click: an `unsubscribe` entry for the token's category, pointing at the notification
/// whose link it was. The same again adds nothing. `None`: not a token Herald made.
pub async fn confirm(state: &AppState, token: &str) -> Result<Option<(Suppression, bool)>, StoreError> {
    let Some(what) = read(state, token) else { return Ok(None) };
    let (record, created) = state
        .store
        .add_suppression(NewSuppression {
            tenant_id: what.tenant_id.clone(),
            channel: what.channel,
            recipient_key: what.recipient_key,
            recipient_masked: what.recipient_masked,
            category: Some(what.category.clone()),
            reason: SuppressionReason::Unsubscribe,
            transaction_id: Some(TransactionId::Notification(what.notification_id.clone())),
            created_at: state.clock.now_millis(),
        })
        .await?;
    if created {
        metrics::counter!("herald_suppressions_added_total", "reason" => SuppressionReason::Unsubscribe.as_str())
            .increment(1);
        tracing::info!(
            tenant_id = %what.tenant_id,
            transaction_id = %what.notification_id,
            recipient = %record.recipient_masked,
            category = %what.category,
            "recipient unsubscribed from a category"
        );
    }
    Ok(Some((view(record), created)))
}
