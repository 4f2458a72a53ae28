//! The suppression list (CONTRACT §9): who is on it (entries by operators, and Herald's own from
//! bounces, complaints, carrier opt-outs and one-click unsubscribes), and the rule of what an
//! entry stops.
//!
//! A recipient is matched by its key: an HMAC of the normalised recipient (email lower-cased,
//! E.164 as is) under the server secret. The same recipient has the same key in every tenant
//! (an inbound STOP names only the number), and the tenant is a column beside it.

use herald_common::{
    FieldError, Timestamp,
    api::{
        notifications::Channel,
        suppressions::{Suppression, SuppressionIn, SuppressionReason},
    },
    ids::{NotificationId, OtpId, SuppressionId, TenantId, TransactionId},
    mask::mask,
};

use super::{InvalidFields, validate};
use crate::{
    secret::{ServerSecret, hex},
    state::AppState,
    store::{NewSuppression, StoreError, SuppressionFilter, SuppressionRecord},
};

/// Why a suppression request was not done.
#[derive(Debug, thiserror::Error)]
pub enum SuppressionError {
    #[error(transparent)]
    Invalid(#[from] InvalidFields),
    /// No such entry in the caller's tenant.
    #[error("no such suppression")]
    NotFound,
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// A send that an entry stops: its reason and since when.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Suppressed {
    pub reason: SuppressionReason,
    pub since: i64,
}

impl Suppressed {
    /// What a stopped notification's `failure_reason` says:
    /// `recipient suppressed: hard_bounce since 2026-11-25`.
    pub fn failure_reason(&self) -> String {
        let day = Timestamp::from_millis(self.since).to_string();
        format!("recipient suppressed: {} since {}", self.reason, day.get(..10).unwrap_or(&day))
    }
}

/// The recipient as the list matches it: email lower-cased, numbers as given (E.164).
pub fn normalise(channel: Channel, recipient: &str) -> String {
    let trimmed = recipient.trim();
    match channel {
        Channel::Email => trimmed.to_lowercase(),
        _ => trimmed.to_owned(),
    }
}

/// The key a recipient is stored and matched by (never the recipient itself).
pub fn recipient_key(secret: &ServerSecret, channel: Channel, recipient: &str) -> String {
    hex(&secret.mac("herald.suppression.recipient.v1", &[normalise(channel, recipient).as_bytes()]))
}

/// Whether `category` is one (`[a-z0-9_.-]{1,64}`).
pub fn check_category(category: &str) -> Result<(), &'static str> {
    let valid = (1..=64).contains(&category.len())
        && category.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b"_.-".contains(&b));
    if valid { Ok(()) } else { Err("must be 1 to 64 of a-z, 0-9, `_`, `.` and `-`") }
}

/// The API's form of an entry.
pub fn view(record: SuppressionRecord) -> Suppression {
    Suppression {
        category: record.only_category().map(str::to_owned),
        suppression_id: record.id,
        channel: record.channel,
        recipient_masked: record.recipient_masked,
        reason: record.reason,
        transaction_id: record.transaction_id,
        created_at: Timestamp::from_millis(record.created_at),
    }
}

/// Validates a request's recipient for a channel the list covers.
fn checked_recipient(channel: Channel, recipient: &str) -> Result<String, FieldError> {
    let recipient = recipient.trim();
    let valid = match channel {
        Channel::Email => validate::email_address(recipient),
        Channel::Sms | Channel::Whatsapp => validate::e164(recipient),
        Channel::InApp => {
            Err("in_app has no suppression list (an inbox cannot bounce); use email, sms or whatsapp")
        }
    };
    match valid {
        Ok(()) => Ok(recipient.to_owned()),
        Err(message) => {
            Err(FieldError::new(if channel == Channel::InApp { "channel" } else { "recipient" }, message))
        }
    }
}

/// Adds an operator's entry. The same recipient, channel and category again returns the entry
/// already there, with `false`.
pub async fn add(
    state: &AppState,
    tenant_id: &TenantId,
    input: SuppressionIn,
) -> Result<(Suppression, bool), SuppressionError> {
    let mut errors = Vec::new();
    let recipient = checked_recipient(input.channel, &input.recipient).map_err(|e| errors.push(e)).ok();
    if let Some(Err(message)) = input.category.as_deref().map(check_category) {
        errors.push(FieldError::new("category", message));
    }
    if input.reason.is_some_and(|r| r != SuppressionReason::Manual) {
        errors.push(FieldError::new("reason", "only `manual` can be given; Herald adds the others itself"));
    }
    let Some(recipient) = recipient.filter(|_| errors.is_empty()) else {
        return Err(InvalidFields(errors).into());
    };
    let (record, created) = state
        .store
        .add_suppression(NewSuppression {
            tenant_id: tenant_id.clone(),
            channel: input.channel,
            recipient_key: recipient_key(&state.secret, input.channel, &recipient),
            recipient_masked: mask(&normalise(input.channel, &recipient)),
            category: input.category,
            reason: SuppressionReason::Manual,
            transaction_id: None,
            created_at: state.clock.now_millis(),
        })
        .await?;
    if created {
        metrics::counter!("herald_suppressions_added_total", "reason" => SuppressionReason::Manual.as_str())
            .increment(1);
    }
    Ok((view(record), created))
}

/// A page of a tenant's list: the filter's raw recipient is matched by its key.
pub async fn list(
    state: &AppState,
    tenant_id: &TenantId,
    channel: Option<Channel>,
    reason: Option<SuppressionReason>,
    recipient: Option<&str>,
    limit: u32,
    page: u32,
) -> Result<(Vec<Suppression>, u64), SuppressionError> {
    let filter = SuppressionFilter {
        tenant_id: tenant_id.clone(),
        channel,
        reason,
        // Without a channel, email and numbers are told apart by their shape.
        recipient_key: recipient.map(|r| {
            let channel = channel.unwrap_or(if r.contains('@') { Channel::Email } else { Channel::Sms });
            recipient_key(&state.secret, channel, r)
        }),
    };
    let offset = i64::from(page.saturating_sub(1)) * i64::from(limit);
    let (rows, total) = state.store.list_suppressions(&filter, i64::from(limit), offset).await?;
    Ok((rows.into_iter().map(view).collect(), total))
}

pub async fn get(
    state: &AppState,
    tenant_id: &TenantId,
    id: &SuppressionId,
) -> Result<Suppression, SuppressionError> {
    state.store.get_suppression(tenant_id, id).await?.map(view).ok_or(SuppressionError::NotFound)
}

/// Lifts an entry: sends to the recipient resume.
pub async fn remove(
    state: &AppState,
    tenant_id: &TenantId,
    id: &SuppressionId,
) -> Result<Suppression, SuppressionError> {
    let removed = state.store.delete_suppression(tenant_id, id).await?.ok_or(SuppressionError::NotFound)?;
    Ok(view(removed))
}

/// The entry that stops an OTP (transactional: only entries for every category do), if any.
pub async fn stopping_otp(
    state: &AppState,
    tenant_id: &TenantId,
    channel: Channel,
    recipient: &str,
) -> Result<Option<Suppressed>, StoreError> {
    let key = recipient_key(&state.secret, channel, recipient);
    Ok(state
        .store
        .suppression_for(tenant_id, channel, &key, None)
        .await?
        .map(|s| Suppressed { reason: s.reason, since: s.created_at }))
}

/// Herald's own entry for the recipient of notification `id` (a hard bounce, a complaint, a
/// carrier opt-out), for every category. Returns the entry if it is new; an unknown
/// notification adds nothing.
pub async fn suppress_recipient_of(
    state: &AppState,
    id: &NotificationId,
    reason: SuppressionReason,
) -> Result<Option<Suppression>, StoreError> {
    let Some(to) = state.store.recipient_of(id).await? else {
        return Ok(None);
    };
    if to.channel == Channel::InApp {
        return Ok(None);
    }
    let key = to.recipient_key.unwrap_or_else(|| recipient_key(&state.secret, to.channel, &to.recipient));
    let cause = TransactionId::Notification(id.clone());
    add_automatic(state, to.tenant_id, to.channel, key, to.recipient_masked, reason, cause).await
}

/// Herald's own entry for the recipient of an OTP whose send showed it cannot be reached.
pub async fn suppress_otp_recipient(
    state: &AppState,
    tenant_id: &TenantId,
    id: &OtpId,
    channel: Channel,
    recipient: &str,
    reason: SuppressionReason,
) -> Result<Option<Suppression>, StoreError> {
    let key = recipient_key(&state.secret, channel, recipient);
    let cause = TransactionId::Otp(id.clone());
    add_automatic(state, tenant_id.clone(), channel, key, mask(&normalise(channel, recipient)), reason, cause)
        .await
}

/// Adds one of Herald's own entries, for every category; the entry if it is new.
async fn add_automatic(
    state: &AppState,
    tenant_id: TenantId,
    channel: Channel,
    recipient_key: String,
    recipient_masked: String,
    reason: SuppressionReason,
    cause: TransactionId,
) -> Result<Option<Suppression>, StoreError> {
    let (record, created) = state
        .store
        .add_suppression(NewSuppression {
            tenant_id,
            channel,
            recipient_key,
            recipient_masked,
            category: None,
            reason,
            transaction_id: Some(cause.clone()),
            created_at: state.clock.now_millis(),
        })
        .await?;
    if !created {
        return Ok(None);
    }
    metrics::counter!("herald_suppressions_added_total", "reason" => reason.as_str()).increment(1);
    tracing::info!(transaction_id = %cause.as_str(), recipient = %record.recipient_masked, %reason, "recipient suppressed");
    Ok(Some(view(record)))
}

/// An inbound STOP from `number`: a `carrier_opt_out` on sms in every tenant that has texted
/// it. Returns how many entries were added.
pub async fn opt_out(state: &AppState, number: &str) -> Result<usize, StoreError> {
    let key = recipient_key(&state.secret, Channel::Sms, number);
    let added = state.store.add_carrier_opt_out(key, mask(number.trim()), state.clock.now_millis()).await?;
    if !added.is_empty() {
        metrics::counter!("herald_suppressions_added_total", "reason" => SuppressionReason::CarrierOptOut.as_str())
            .increment(added.len() as u64);
    }
    Ok(added.len())
}

/// An inbound START from `number`: its `carrier_opt_out` entries are lifted in every tenant.
/// Returns how many were.
pub async fn opt_in(state: &AppState, number: &str) -> Result<usize, StoreError> {
    let key = recipient_key(&state.secret, Channel::Sms, number);
    Ok(state.store.remove_carrier_opt_outs(key).await?.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recipients_match_whatever_their_case_or_spaces() {
        let secret = ServerSecret::new(crate::config::Secret::new("s".repeat(32)));
        let key = |c, r| recipient_key(&secret, c, r);
        assert_eq!(key(Channel::Email, "Ann@Example.COM "), key(Channel::Email, "ann@example.com"));
        assert_eq!(key(Channel::Sms, "+14155550100"), key(Channel::Whatsapp, " +14155550100"));
        assert_ne!(key(Channel::Email, "ann@example.com"), key(Channel::Email, "anne@example.com"));
        assert!(!key(Channel::Email, "ann@example.com").contains("ann"));
    }

    #[test]
    fn categories_are_short_lower_case_words() {
        for good in ["marketing", "digest.weekly", "a", "x-1_2", &"a".repeat(64)] {
            assert!(check_category(good).is_ok(), "{good}");
        }
        for bad in ["", "Marketing", "two words", "é", &"a".repeat(65)] {
            assert!(check_category(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_failure_reason_names_the_reason_and_the_day() {
        let since = Timestamp::parse("2026-11-25T10:15:30Z").unwrap().millis();
        let suppressed = Suppressed { reason: SuppressionReason::HardBounce, since };
        assert_eq!(suppressed.failure_reason(), "recipient suppressed: hard_bounce since 2026-11-25");
    }
}
