//! OTP transactions. Sends and verifications for one recipient are serialised by locking that
//! recipient's row (`otp_recipients`), so the per-recipient limits hold with any number of
//! daemons; a verification locks its transaction row (`FOR UPDATE` on PostgreSQL; SQLite's single
//! writer already serialises), so concurrent wrong guesses are counted one by one.

use herald_common::{
    api::{notifications::Channel, otp::OtpStatus},
    ids::{ApplicationId, OtpId, TenantId},
};

use super::{Conn, DispatchResult, Engine, IdempotencyKey, Store, StoreResult, execute, fetch, writer::Work};

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

/// Locks the recipient's row for the rest of the transaction (PostgreSQL; SQLite's single
/// writer already runs one transaction at a time).
async fn lock_recipient(
    conn: &mut Conn<'_>,
    application_id: &ApplicationId,
    recipient_key: &str,
) -> StoreResult<()> {
    if conn.engine() == Engine::Sqlite {
        return Ok(());
    }
    execute!(
        conn,
        "INSERT INTO otp_recipients (application_id, recipient_key) VALUES ($1, $2)
         ON CONFLICT (application_id, recipient_key) DO UPDATE SET recipient_key = excluded.recipient_key",
        application_id,
        recipient_key
    )?;
    Ok(())
}

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
const FAILURES_SINCE: &str = "SELECT COUNT(*), MIN(at) FROM otp_failures
     WHERE application_id = $1 AND recipient_key = $2 AND at > $3";

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
        let work = Work::OtpSend(Box::new(OtpSend { otp, idempotency, limit }));
        self.writer.submit_work(work).await
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
        self.writer.submit_work(Work::OtpVerify(Box::new(verify))).await
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

async fn set_status(conn: &mut Conn<'_>, id: &OtpId, status: OtpStatus, now: i64) -> StoreResult<()> {
    execute!(
        conn,
        "UPDATE otp_transactions SET status = $2, updated_at = $3 WHERE id = $1",
        id,
        status,
        now
    )?;
    Ok(())
}

/// An OTP send for the writer: the transaction to record, its idempotency key and the
/// recipient's send limit.
pub(crate) struct OtpSend {
    otp: NewOtp,
    idempotency: Option<(IdempotencyKey, i64)>,
    limit: Limit,
}

impl OtpSend {
    /// Its recipient, if it may join a group: one without an idempotency key (those run alone).
    /// Two sends to one recipient are never written in one group.
    pub(super) fn conflict_key(&self) -> Option<String> {
        self.idempotency.is_none().then(|| format!("{}\n{}", self.otp.application_id, self.otp.recipient_key))
    }
}

/// Records one send: checks the recipient's limit, claims the idempotency key in flight, and
/// inserts the transaction as `sent`.
pub(super) async fn send_one(conn: &mut Conn<'_>, send: &OtpSend) -> StoreResult<OtpSendStart> {
    let OtpSend { otp, idempotency, limit } = send;
    let limit = *limit;
    let now = otp.created_at;
    lock_recipient(conn, &otp.application_id, &otp.recipient_key).await?;
    // The common case in one statement: insert unless the window is full.
    if idempotency.is_none() && insert_if_room(conn, otp, now - limit.window_ms, limit.max).await? {
        return Ok(OtpSendStart::Started);
    }
    if let Some(retry_after_ms) =
        over_limit(conn, SENDS_SINCE, &otp.application_id, &otp.recipient_key, limit, now).await?
    {
        return Ok(OtpSendStart::RateLimited { retry_after_ms });
    }
    if let Some((key, ttl_ms)) = &idempotency {
        let claimed = super::idempotency::claim(conn, &otp.application_id, key, None, now, *ttl_ms).await?;
        if claimed != DispatchResult::Created {
            return Ok(OtpSendStart::Idempotent(claimed));
        }
    }
    // The limit was checked above.
    insert_if_room(conn, otp, now, i64::MAX).await?;
    Ok(OtpSendStart::Started)
}

/// Inserts the transaction as `sent` if its recipient has fewer than `max` since `since`;
/// whether it did.
async fn insert_if_room(conn: &mut Conn<'_>, otp: &NewOtp, since: i64, max: i64) -> StoreResult<bool> {
    let inserted = execute!(
        conn,
        "INSERT INTO otp_transactions
             (id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
              status, expires_at, created_at, updated_at)
         SELECT $1, $2, $3, $4, $5, $6, $7, $8, 'sent', $9, $10, $10
         WHERE (SELECT COUNT(*) FROM otp_transactions
                WHERE application_id = $3 AND recipient_key = $5 AND created_at > $11) < $12",
        &otp.id,
        &otp.tenant_id,
        &otp.application_id,
        &otp.channel,
        &otp.recipient_key,
        &otp.recipient_masked,
        &otp.salt,
        &otp.code_hash,
        otp.expires_at,
        otp.created_at,
        since,
        max
    )?;
    Ok(inserted == 1)
}

/// [`lock_recipient`] for many recipients of a group, in one statement, in one order for every
/// writer (so two groups never wait on each other in a cycle).
async fn lock_recipients(pg: &mut sqlx::PgConnection, mut recipients: Vec<(&str, &str)>) -> StoreResult<()> {
    recipients.sort_unstable();
    recipients.dedup();
    super::count_call();
    sqlx::query(
        "INSERT INTO otp_recipients (application_id, recipient_key)
         SELECT * FROM unnest($1::text[], $2::text[]) AS t(application_id, recipient_key)
         ON CONFLICT (application_id, recipient_key) DO UPDATE SET recipient_key = excluded.recipient_key",
    )
    .bind(recipients.iter().map(|r| r.0).collect::<Vec<_>>())
    .bind(recipients.iter().map(|r| r.1).collect::<Vec<_>>())
    .execute(&mut *pg)
    .await?;
    Ok(())
}

/// Records many sends (no idempotency keys, no recipient twice). On PostgreSQL: one statement
/// locks every recipient (in one order for every writer), one inserts every transaction whose
/// recipient's window has room; a refused one is then answered with its wait. On SQLite each
/// runs in turn (the writer holds one savepoint for all of them).
pub(super) async fn send_all(conn: &mut Conn<'_>, sends: &[&OtpSend]) -> StoreResult<Vec<OtpSendStart>> {
    let Conn::Postgres(pg) = conn else {
        let mut results = Vec::with_capacity(sends.len());
        for send in sends {
            results.push(send_one(conn, send).await?);
        }
        return Ok(results);
    };
    let column = |f: fn(&NewOtp) -> &str| sends.iter().map(|s| f(&s.otp)).collect::<Vec<&str>>();
    let recipients: Vec<(&str, &str)> =
        sends.iter().map(|s| (s.otp.application_id.as_str(), s.otp.recipient_key.as_str())).collect();
    lock_recipients(pg, recipients).await?;
    super::count_call();
    let inserted: Vec<String> = sqlx::query_scalar(
        "WITH input AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                                  $8::text[], $9::int8[], $10::int8[], $11::int8[], $12::int8[])
                 AS t(id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
                      expires_at, created_at, since, max))
         INSERT INTO otp_transactions
             (id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
              status, expires_at, created_at, updated_at)
         SELECT id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
                'sent', expires_at, created_at, created_at
         FROM input
         WHERE (SELECT COUNT(*) FROM otp_transactions o
                WHERE o.application_id = input.application_id AND o.recipient_key = input.recipient_key
                  AND o.created_at > input.since) < input.max
         RETURNING id",
    )
    .bind(column(|o| o.id.as_str()))
    .bind(column(|o| o.tenant_id.as_str()))
    .bind(column(|o| o.application_id.as_str()))
    .bind(column(|o| o.channel.as_str()))
    .bind(column(|o| o.recipient_key.as_str()))
    .bind(column(|o| o.recipient_masked.as_str()))
    .bind(column(|o| o.salt.as_str()))
    .bind(column(|o| o.code_hash.as_str()))
    .bind(sends.iter().map(|s| s.otp.expires_at).collect::<Vec<_>>())
    .bind(sends.iter().map(|s| s.otp.created_at).collect::<Vec<_>>())
    .bind(sends.iter().map(|s| s.otp.created_at - s.limit.window_ms).collect::<Vec<_>>())
    .bind(sends.iter().map(|s| s.limit.max).collect::<Vec<_>>())
    .fetch_all(&mut **pg)
    .await?;
    let inserted: std::collections::HashSet<String> = inserted.into_iter().collect();
    let mut results = Vec::with_capacity(sends.len());
    for send in sends {
        if inserted.contains(send.otp.id.as_str()) {
            results.push(OtpSendStart::Started);
            continue;
        }
        let OtpSend { otp, limit, .. } = send;
        let wait =
            over_limit(conn, SENDS_SINCE, &otp.application_id, &otp.recipient_key, *limit, otp.created_at)
                .await?;
        // Not inserted means the window was full when the statement looked.
        results.push(OtpSendStart::RateLimited { retry_after_ms: wait.unwrap_or(1) });
    }
    Ok(results)
}

/// An OTP verification for the writer: the transaction, when, the failure window, and the
/// rules that judge its snapshot (run again if the verification has to be).
pub(crate) struct OtpVerify {
    id: OtpId,
    app: ApplicationId,
    now: i64,
    failure_window_ms: i64,
    decide: Box<dyn Fn(&OtpSnapshot) -> OtpVerdict + Send + Sync>,
}

impl OtpVerify {
    /// Its transaction: two verifications of one transaction are never written in one group.
    pub(super) fn conflict_key(&self) -> String {
        self.id.to_string()
    }
}

/// Verifies one code: locks the transaction's row and its recipient, judges, writes the verdict.
pub(super) async fn verify_one(conn: &mut Conn<'_>, verify: &OtpVerify) -> StoreResult<Option<OtpVerdict>> {
    let OtpVerify { id, app, now, failure_window_ms, .. } = verify;
    let (now, failure_window_ms) = (*now, *failure_window_ms);
    // `sending`: how earlier versions recorded a send until the provider answered;
    // such a code was never known to be delivered.
    let sql = match conn.engine() {
        Engine::Sqlite => {
            "SELECT o.recipient_key, o.salt, o.code_hash,
                    CASE o.status WHEN 'sending' THEN 'failed' ELSE o.status END AS status,
                    o.failed_attempts, o.expires_at,
                    COUNT(f.at) AS recent_failures, MIN(f.at) AS oldest_failure
             FROM otp_transactions o
             LEFT JOIN otp_failures f ON f.application_id = o.application_id
                 AND f.recipient_key = o.recipient_key AND f.at > $3
             WHERE o.id = $1 AND o.application_id = $2
             GROUP BY o.id, o.recipient_key, o.salt, o.code_hash, o.status, o.failed_attempts, o.expires_at"
        }
        Engine::Postgres => {
            "SELECT recipient_key, salt, code_hash,
                    CASE status WHEN 'sending' THEN 'failed' ELSE status END AS status,
                    failed_attempts, expires_at,
                    CAST(0 AS BIGINT) AS recent_failures, CAST(NULL AS BIGINT) AS oldest_failure
             FROM otp_transactions WHERE id = $1 AND application_id = $2 AND $3 = $3 FOR UPDATE"
        }
    };
    let since = now - failure_window_ms;
    let Some(mut snapshot) = fetch!(conn, fetch_optional, OtpSnapshot, sql, &id, &app, since)? else {
        return Ok(None);
    };
    if conn.engine() == Engine::Postgres {
        // Serialise this recipient's verifications across daemons, then count.
        lock_recipient(conn, app, &snapshot.recipient_key).await?;
        let (count, oldest): (i64, Option<i64>) = fetch!(
            conn,
            fetch_one,
            (i64, Option<i64>),
            FAILURES_SINCE,
            &app,
            &snapshot.recipient_key,
            since
        )?;
        (snapshot.recent_failures, snapshot.oldest_failure) = (count, oldest);
    }
    let verdict = (verify.decide)(&snapshot);
    match &verdict {
        OtpVerdict::Expired { record: true } => set_status(conn, id, OtpStatus::Expired, now).await?,
        OtpVerdict::Verified => {
            execute!(
                conn,
                "UPDATE otp_transactions SET status = 'verified', verified_at = $2, updated_at = $2 WHERE id = $1",
                &id,
                now
            )?;
        }
        OtpVerdict::Wrong { failed_attempts, tombstoned } => {
            let status = if *tombstoned { OtpStatus::Tombstoned } else { OtpStatus::Sent };
            execute!(
                conn,
                "UPDATE otp_transactions SET failed_attempts = $2, status = $3, updated_at = $4 WHERE id = $1",
                &id,
                *failed_attempts,
                status,
                now
            )?;
            execute!(
                conn,
                "INSERT INTO otp_failures (application_id, recipient_key, at) VALUES ($1, $2, $3)",
                &app,
                &snapshot.recipient_key,
                now
            )?;
        }
        _ => {}
    }
    Ok(Some(verdict))
}

/// Verifies many codes (no transaction twice). On PostgreSQL: one statement locks and reads
/// every transaction (in id order) and locks their recipients, one counts the recipients'
/// recent failures; the rules judge each in turn (a wrong code counts against the next
/// verification of the same recipient in the group, as it would one after the other); one
/// statement writes every verdict. On SQLite each runs in turn.
pub(super) async fn verify_all(
    conn: &mut Conn<'_>,
    verifies: &[&OtpVerify],
) -> StoreResult<Vec<Option<OtpVerdict>>> {
    let Conn::Postgres(pg) = conn else {
        let mut results = Vec::with_capacity(verifies.len());
        for verify in verifies {
            results.push(verify_one(conn, verify).await?);
        }
        return Ok(results);
    };
    #[derive(sqlx::FromRow)]
    struct Locked {
        id: String,
        #[sqlx(flatten)]
        snapshot: OtpSnapshot,
    }
    super::count_call();
    // The transactions' rows, then their recipients' rows, each locked in one order.
    let locked: Vec<Locked> = sqlx::query_as(
        "WITH t AS (
             SELECT o.id, o.application_id, o.recipient_key, o.salt, o.code_hash,
                    CASE o.status WHEN 'sending' THEN 'failed' ELSE o.status END AS status,
                    o.failed_attempts, o.expires_at
             FROM otp_transactions o JOIN unnest($1::text[], $2::text[]) AS t(id, application_id)
               ON o.id = t.id AND o.application_id = t.application_id
             ORDER BY o.id FOR UPDATE OF o),
         r AS (INSERT INTO otp_recipients (application_id, recipient_key)
             SELECT DISTINCT application_id, recipient_key FROM t ORDER BY application_id, recipient_key
             ON CONFLICT (application_id, recipient_key) DO UPDATE SET recipient_key = excluded.recipient_key)
         SELECT id, recipient_key, salt, code_hash, status, failed_attempts, expires_at,
                CAST(0 AS BIGINT) AS recent_failures, CAST(NULL AS BIGINT) AS oldest_failure
         FROM t",
    )
    .bind(verifies.iter().map(|v| v.id.as_str()).collect::<Vec<_>>())
    .bind(verifies.iter().map(|v| v.app.as_str()).collect::<Vec<_>>())
    .fetch_all(&mut **pg)
    .await?;
    let mut snapshots: Vec<Option<OtpSnapshot>> = verifies
        .iter()
        .map(|v| locked.iter().find(|l| l.id == v.id.as_str()).map(|l| l.snapshot.clone()))
        .collect();
    // The recipients' failures, read after their rows were locked.
    let found: Vec<(usize, &OtpSnapshot)> =
        snapshots.iter().enumerate().filter_map(|(i, s)| Some((i, s.as_ref()?))).collect();
    super::count_call();
    let counts: Vec<(i64, i64, Option<i64>)> = sqlx::query_as(
        "SELECT t.ord, COUNT(f.at), MIN(f.at)
         FROM unnest($1::text[], $2::text[], $3::int8[]) WITH ORDINALITY AS t(application_id, recipient_key, since, ord)
         LEFT JOIN otp_failures f
           ON f.application_id = t.application_id AND f.recipient_key = t.recipient_key AND f.at > t.since
         GROUP BY t.ord",
    )
    .bind(found.iter().map(|(i, _)| verifies[*i].app.as_str()).collect::<Vec<_>>())
    .bind(found.iter().map(|(_, s)| s.recipient_key.as_str()).collect::<Vec<_>>())
    .bind(found.iter().map(|(i, _)| verifies[*i].now - verifies[*i].failure_window_ms).collect::<Vec<_>>())
    .fetch_all(&mut **pg)
    .await?;
    let found: Vec<usize> = found.into_iter().map(|(i, _)| i).collect();
    for (ord, count, oldest) in counts {
        let Some(snapshot) =
            usize::try_from(ord - 1).ok().and_then(|k| found.get(k)).and_then(|&i| snapshots[i].as_mut())
        else {
            continue;
        };
        (snapshot.recent_failures, snapshot.oldest_failure) = (count, oldest);
    }
    // Judge in order; a wrong code is a failure the next verification of its recipient sees.
    let mut verdicts = Vec::with_capacity(verifies.len());
    let mut failures: Vec<(String, i64)> = Vec::new();
    for (verify, snapshot) in verifies.iter().zip(&mut snapshots) {
        let Some(snapshot) = snapshot else {
            verdicts.push(None);
            continue;
        };
        for (recipient, at) in &failures {
            if *recipient == snapshot.recipient_key && *at > verify.now - verify.failure_window_ms {
                snapshot.recent_failures += 1;
                snapshot.oldest_failure = Some(snapshot.oldest_failure.map_or(*at, |o| o.min(*at)));
            }
        }
        let verdict = (verify.decide)(snapshot);
        if matches!(verdict, OtpVerdict::Wrong { .. }) {
            failures.push((snapshot.recipient_key.clone(), verify.now));
        }
        verdicts.push(Some(verdict));
    }
    write_verdicts(pg, verifies, &snapshots, &verdicts).await?;
    Ok(verdicts)
}

/// Writes a group's verdicts in one statement: each transaction's new state, and a failure
/// row for each wrong code.
async fn write_verdicts(
    pg: &mut sqlx::PgConnection,
    verifies: &[&OtpVerify],
    snapshots: &[Option<OtpSnapshot>],
    verdicts: &[Option<OtpVerdict>],
) -> StoreResult<()> {
    // (id, status, failed_attempts, verified, now) per transaction that changes.
    let mut changes: Vec<(&str, &str, Option<i64>, bool, i64)> = Vec::new();
    let mut failures: Vec<(&str, &str, i64)> = Vec::new();
    for ((verify, snapshot), verdict) in verifies.iter().zip(snapshots).zip(verdicts) {
        let (Some(snapshot), Some(verdict)) = (snapshot, verdict) else { continue };
        let id = verify.id.as_str();
        match verdict {
            OtpVerdict::Expired { record: true } => {
                changes.push((id, OtpStatus::Expired.as_str(), None, false, verify.now))
            }
            OtpVerdict::Verified => changes.push((id, OtpStatus::Verified.as_str(), None, true, verify.now)),
            OtpVerdict::Wrong { failed_attempts, tombstoned } => {
                let status = if *tombstoned { OtpStatus::Tombstoned } else { OtpStatus::Sent };
                changes.push((id, status.as_str(), Some(*failed_attempts), false, verify.now));
                failures.push((verify.app.as_str(), snapshot.recipient_key.as_str(), verify.now));
            }
            _ => {}
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    super::count_call();
    sqlx::query(
        "WITH v AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::bool[], $5::int8[])
                 AS t(id, status, failed_attempts, verified, now)),
         changed AS (UPDATE otp_transactions o SET
                 status = v.status,
                 failed_attempts = COALESCE(v.failed_attempts, o.failed_attempts),
                 verified_at = CASE WHEN v.verified THEN v.now ELSE o.verified_at END,
                 updated_at = v.now
             FROM v WHERE o.id = v.id)
         INSERT INTO otp_failures (application_id, recipient_key, at)
         SELECT * FROM unnest($6::text[], $7::text[], $8::int8[])",
    )
    .bind(changes.iter().map(|c| c.0).collect::<Vec<_>>())
    .bind(changes.iter().map(|c| c.1).collect::<Vec<_>>())
    .bind(changes.iter().map(|c| c.2).collect::<Vec<_>>())
    .bind(changes.iter().map(|c| c.3).collect::<Vec<_>>())
    .bind(changes.iter().map(|c| c.4).collect::<Vec<_>>())
    .bind(failures.iter().map(|f| f.0).collect::<Vec<_>>())
    .bind(failures.iter().map(|f| f.1).collect::<Vec<_>>())
    .bind(failures.iter().map(|f| f.2).collect::<Vec<_>>())
    .execute(&mut *pg)
    .await?;
    Ok(())
}
