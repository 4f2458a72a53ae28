//! OTP transactions. Sends and verifications for one recipient are serialised by locking that
//! recipient's row (`otp_recipients`), so the per-recipient limits hold with any number of
//! daemons; a verification locks its transaction row (`FOR UPDATE` on PostgreSQL; SQLite's single
//! writer already serialises), so concurrent wrong guesses are counted one by one.

use herald_common::{
    api::{notifications::Channel, otp::OtpStatus},
    ids::{ApplicationId, OtpId, TenantId},
};

use super::{Conn, DispatchResult, IdempotencyKey, Store, StoreResult, execute, fetch};

mod writes;
pub(super) use writes::{OtpSend, OtpVerify};

#[derive(Clone, Debug)]
pub struct NewOtp {
    pub id: OtpId,
    pub tenant_id: TenantId,
    pub application_id: ApplicationId,
    pub channel: Channel,
    pub recipient_key: String,
    pub recipient_masked: String,
    pub salt: String,
    pub code_hash: String,
    pub expires_at: i64,
    pub created_at: i64,
}

/// A sliding-window limit: at most `max` events per `window_ms`.
#[derive(Clone, Copy, Debug)]
pub struct Limit {
    pub max: i64,
    pub window_ms: i64,
}

#[derive(Debug, PartialEq, Eq)]
pub enum OtpSendStart {
    /// Recorded as `sending`; the key (if any) is in flight.
    Started,
    RateLimited {
        retry_after_ms: i64,
    },
    /// The idempotency key belongs to an earlier request.
    Idempotent(DispatchResult),
}

/// A transaction as verification sees it, read with its row locked, and the recipient's failed
/// verifications in the failure window.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct OtpSnapshot {
    recipient_key: String,
    pub salt: String,
    pub code_hash: String,
    /// As stored (a `sent` code past `expires_at` is still `sent` here).
    pub status: OtpStatus,
    pub failed_attempts: i64,
    pub expires_at: i64,
    pub recent_failures: i64,
    pub oldest_failure: Option<i64>,
}

impl OtpSnapshot {
    /// A snapshot with the given state (for the rules' tests).
    #[cfg(test)]
    pub fn for_tests(
        status: OtpStatus,
        failed_attempts: i64,
        expires_at: i64,
        recent_failures: i64,
        oldest_failure: Option<i64>,
    ) -> Self {
        Self {
            recipient_key: String::new(),
            salt: String::new(),
            code_hash: String::new(),
            status,
            failed_attempts,
            expires_at,
            recent_failures,
            oldest_failure,
        }
    }
}

super::local::local_row!(OtpSnapshot {
    recipient_key,
    salt,
    code_hash,
    status,
    failed_attempts,
    expires_at,
    recent_failures,
    oldest_failure
});

/// What a verification decided, and so what the store writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OtpVerdict {
    AlreadyVerified,
    Tombstoned,
    /// Its time ran out (`record`: it is still stored as `sent`; mark it `expired`).
    Expired {
        record: bool,
    },
    /// The code could not be delivered, so there is nothing to verify.
    NotDelivered,
    RateLimited {
        retry_after_ms: i64,
    },
    Verified,
    /// A wrong code: the transaction's failures become `failed_attempts`, and it is tombstoned
    /// when that reaches the limit.
    Wrong {
        failed_attempts: i64,
        tombstoned: bool,
    },
}

/// The OTP messages an application configured (`None`: the default).
#[derive(Clone, Debug, Default, sqlx::FromRow)]
pub struct OtpMessages {
    pub otp_email_subject: Option<String>,
    pub otp_email_body: Option<String>,
    pub otp_sms_body: Option<String>,
}

super::local::local_row!(OtpMessages { otp_email_subject, otp_email_body, otp_sms_body });

/// The longest a code lives. The activity feed relies on it: in an hour that ended this long
/// ago no code can still be waiting, so its counters are final (store/activity.rs).
pub const OTP_MAX_TTL_SECONDS: u32 = 600;

/// Applications' OTP messages, remembered for a few seconds (every send needs them). A change
/// through this store is seen at once; one made by another process within this time.
const MESSAGE_CACHE_TTL: std::time::Duration = std::time::Duration::from_secs(5);

#[derive(Default)]
pub(super) struct MessageCache(
    std::sync::RwLock<std::collections::HashMap<String, (OtpMessages, std::time::Instant)>>,
);

/// How long until the window has room again, or `None` if it has room now.
async fn over_limit(
    conn: &mut Conn<'_>,
    sql_count_since: &'static str,
    application_id: &ApplicationId,
    recipient_key: &str,
    limit: Limit,
    now: i64,
) -> StoreResult<Option<i64>> {
    let since = now - limit.window_ms;
    let (count, oldest): (i64, Option<i64>) =
        fetch!(conn, fetch_one, (i64, Option<i64>), sql_count_since, application_id, recipient_key, since)?;
    if count < limit.max {
        return Ok(None);
    }
    Ok(Some((oldest.unwrap_or(now) + limit.window_ms - now).max(1)))
}

const SENDS_SINCE: &str = "SELECT COUNT(*), MIN(created_at) FROM otp_transactions
     WHERE application_id = $1 AND recipient_key = $2 AND created_at > $3";
impl Store {
    /// Checks the send limit, claims the idempotency key (in flight) and records the transaction
    /// as `sent`, in one transaction, before the provider is called: a code can be verified from
    /// the moment it may have reached its recipient. A refusal by the provider then marks it
    /// `failed` ([`Store::fail_otp_send`]).
    pub async fn begin_otp_send(
        &self,
        otp: NewOtp,
        idempotency: Option<(IdempotencyKey, i64)>,
        limit: Limit,
    ) -> StoreResult<OtpSendStart> {
        self.writer.submit(OtpSend { otp, idempotency, limit }).await
    }

    /// Records that the provider refused the code: the transaction is `failed`, with the reason.
    pub async fn fail_otp_send(&self, id: &OtpId, reason: String, now: i64) -> StoreResult<()> {
        let id = id.clone();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    "UPDATE otp_transactions SET status = 'failed', failure_reason = $2, updated_at = $3 WHERE id = $1",
                    &id,
                    &reason,
                    now
                )?;
                Ok(())
            })
        })
        .await
    }

    /// Verifies against transaction `id` of `application_id`, atomically: the transaction's row
    /// and its recipient are locked, `decide` judges the snapshot (the rules are the caller's),
    /// and what it decided is written in the same transaction. `None` if there is no such
    /// transaction.
    pub async fn verify_otp<F>(
        &self,
        id: &OtpId,
        application_id: &ApplicationId,
        now: i64,
        failure_window_ms: i64,
        decide: F,
    ) -> StoreResult<Option<OtpVerdict>>
    where
        F: Fn(&OtpSnapshot) -> OtpVerdict + Send + Sync + 'static,
    {
        let verify = OtpVerify {
            id: id.clone(),
            app: application_id.clone(),
            now,
            failure_window_ms,
            decide: Box::new(decide),
        };
        self.writer.submit(verify).await
    }

    pub async fn otp_messages(&self, application_id: &ApplicationId) -> StoreResult<OtpMessages> {
        if let Some((messages, at)) =
            self.otp_messages.0.read().ok().and_then(|m| m.get(application_id.as_str()).cloned())
            && at.elapsed() < MESSAGE_CACHE_TTL
        {
            return Ok(messages);
        }
        let messages = self.otp_messages_uncached(application_id).await?;
        if let Ok(mut cache) = self.otp_messages.0.write() {
            if cache.len() > 10_000 {
                cache.clear();
            }
            cache.insert(application_id.to_string(), (messages.clone(), std::time::Instant::now()));
        }
        Ok(messages)
    }

    async fn otp_messages_uncached(&self, application_id: &ApplicationId) -> StoreResult<OtpMessages> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            OtpMessages,
            "SELECT otp_email_subject, otp_email_body, otp_sms_body FROM applications WHERE id = $1",
            application_id
        )?
        .unwrap_or_default())
    }

    /// Sets an application's OTP messages; `false` if there is no such application.
    pub async fn set_otp_messages(
        &self,
        application_id: &ApplicationId,
        messages: OtpMessages,
    ) -> StoreResult<bool> {
        if let Ok(mut cache) = self.otp_messages.0.write() {
            cache.remove(application_id.as_str());
        }
        let app = application_id.clone();
        let updated = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "UPDATE applications SET otp_email_subject = $2, otp_email_body = $3, otp_sms_body = $4
                         WHERE id = $1",
                        &app,
                        &messages.otp_email_subject,
                        &messages.otp_email_body,
                        &messages.otp_sms_body
                    )?)
                })
            })
            .await?;
        Ok(updated == 1)
    }

    /// Deletes failure records older than the longest window (housekeeping).
    pub async fn delete_old_otp_failures(&self, before: i64) -> StoreResult<u64> {
        self.write(move |conn| {
            Box::pin(async move { Ok(execute!(conn, "DELETE FROM otp_failures WHERE at <= $1", before)?) })
        })
        .await
    }
}
