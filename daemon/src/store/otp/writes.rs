//! The writer's typed work for OTP (see `store/writer.rs`): sends and verifications, one at a
//! time and a group's worth in set-based statements (PostgreSQL's `unnest`, SQLite's multi-row
//! `VALUES` on the writer's own connection, up to 64 rows per statement).

use super::*;
use crate::store::local::{FromLocalRow, ignore, rows_of};
use crate::store::writer::WriteKind;

/// An OTP send for the writer: the transaction to record, its idempotency key and the
/// recipient's send limit.
pub(crate) struct OtpSend {
    pub(super) otp: NewOtp,
    pub(super) idempotency: Option<(IdempotencyKey, i64)>,
    pub(super) limit: Limit,
}

/// What two sends of one group must not share.
#[derive(PartialEq, Eq, Hash)]
pub(crate) enum OtpSendKey {
    Recipient(ApplicationId, String),
    IdempotencyKey(ApplicationId, String),
}

impl WriteKind for OtpSend {
    type Answer = OtpSendStart;
    /// Its recipient and its idempotency key: two sends to one recipient, or with one key, are
    /// never written in one group.
    type Key = OtpSendKey;

    fn conflict_keys(&self) -> Vec<OtpSendKey> {
        let app = &self.otp.application_id;
        let mut keys = vec![OtpSendKey::Recipient(app.clone(), self.otp.recipient_key.clone())];
        keys.extend(
            self.idempotency
                .as_ref()
                .map(|(key, _)| OtpSendKey::IdempotencyKey(app.clone(), key.key.clone())),
        );
        keys
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<OtpSendStart>> {
        send_all(conn, group).await
    }
}

/// Locks the recipients of a group (their `otp_recipients` rows), in one statement, in one order for every
/// writer (so two groups never wait on each other in a cycle).
async fn lock_recipients(pg: &mut sqlx::PgConnection, mut recipients: Vec<(&str, &str)>) -> StoreResult<()> {
    recipients.sort_unstable();
    recipients.dedup();
    crate::store::count_call();
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

/// Records many sends (no recipient or idempotency key twice), in set-based statements: on
/// PostgreSQL, one statement locks every recipient (in one order for every writer; SQLite's one
/// writer needs no lock). With idempotency keys, one finds which of the keyed sends' recipients
/// have room and one claims those keys (a refused send claims nothing, as it would alone). One
/// inserts every transaction whose recipient's window has room. A refused send is then answered
/// with its wait (one statement each: refusals are the rare case).
async fn send_all(conn: &mut Conn<'_>, sends: &[&OtpSend]) -> StoreResult<Vec<OtpSendStart>> {
    if let Conn::Postgres(pg) = conn {
        let recipients: Vec<(&str, &str)> =
            sends.iter().map(|s| (s.otp.application_id.as_str(), s.otp.recipient_key.as_str())).collect();
        lock_recipients(pg, recipients).await?;
    }
    let mut answers: Vec<Option<OtpSendStart>> = sends.iter().map(|_| None).collect();
    let keyed: Vec<usize> = (0..sends.len()).filter(|&i| sends[i].idempotency.is_some()).collect();
    if !keyed.is_empty() {
        let keyed_sends: Vec<&OtpSend> = keyed.iter().map(|&i| sends[i]).collect();
        let room = with_room(conn, &keyed_sends).await?;
        let claims: Vec<(usize, crate::store::idempotency::Claim<'_>)> = keyed
            .iter()
            .filter(|&&i| room.contains(sends[i].otp.id.as_str()))
            .filter_map(|&i| {
                let OtpSend { otp, idempotency, .. } = sends[i];
                let (key, ttl_ms) = idempotency.as_ref()?;
                let claim = crate::store::idempotency::Claim {
                    application_id: &otp.application_id,
                    idempotency: key,
                    response: None,
                    now: otp.created_at,
                    ttl_ms: *ttl_ms,
                };
                Some((i, claim))
            })
            .collect();
        let (indices, claims): (Vec<usize>, Vec<_>) = claims.into_iter().unzip();
        let claimed = match conn {
            _ if claims.is_empty() => Vec::new(),
            Conn::Postgres(pg) => crate::store::idempotency::claim_all(pg, &claims).await?,
            Conn::Local(local) => crate::store::idempotency::claim_all_local(local, &claims)?,
            Conn::Sqlite(_) => return Err(crate::store::writer::not_set_based()),
        };
        for (i, claimed) in indices.into_iter().zip(claimed) {
            if claimed != DispatchResult::Created {
                answers[i] = Some(OtpSendStart::Idempotent(claimed));
            }
        }
    }
    // Sends answered already (their key was used) insert nothing; keyed sends without room are
    // refused by the insert's own check, like any other.
    let inserting: Vec<&OtpSend> =
        sends.iter().zip(&answers).filter(|(_, a)| a.is_none()).map(|(s, _)| *s).collect();
    let inserted = insert_all(conn, &inserting).await?;
    let mut results = Vec::with_capacity(sends.len());
    for (send, answer) in sends.iter().zip(answers) {
        if let Some(answer) = answer {
            results.push(answer);
            continue;
        }
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

/// Each send with the start of its recipient's window.
fn with_since<'a>(sends: &[&'a OtpSend]) -> Vec<(&'a OtpSend, i64)> {
    sends.iter().map(|s| (*s, s.otp.created_at - s.limit.window_ms)).collect()
}

/// Which of `sends` (their recipients locked) have room in their recipient's window: their ids.
async fn with_room(
    conn: &mut Conn<'_>,
    sends: &[&OtpSend],
) -> StoreResult<std::collections::HashSet<String>> {
    let ids: Vec<String> = match conn {
        Conn::Postgres(pg) => {
            crate::store::count_call();
            sqlx::query_scalar(
                "SELECT id FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::int8[])
                     AS t(id, application_id, recipient_key, since, max)
                 WHERE (SELECT COUNT(*) FROM otp_transactions o
                        WHERE o.application_id = t.application_id AND o.recipient_key = t.recipient_key
                          AND o.created_at > t.since) < t.max",
            )
            .bind(sends.iter().map(|s| s.otp.id.as_str()).collect::<Vec<_>>())
            .bind(sends.iter().map(|s| s.otp.application_id.as_str()).collect::<Vec<_>>())
            .bind(sends.iter().map(|s| s.otp.recipient_key.as_str()).collect::<Vec<_>>())
            .bind(sends.iter().map(|s| s.otp.created_at - s.limit.window_ms).collect::<Vec<_>>())
            .bind(sends.iter().map(|s| s.limit.max).collect::<Vec<_>>())
            .fetch_all(&mut **pg)
            .await?
        }
        Conn::Local(local) => rows_of(
            local,
            WITH_ROOM_ROWS,
            &with_since(sends),
            |(s, since)| vec![&s.otp.id, &s.otp.application_id, &s.otp.recipient_key, since, &s.limit.max],
            |r| r.get(0),
        )?,
        Conn::Sqlite(_) => return Err(crate::store::writer::not_set_based()),
    };
    Ok(ids.into_iter().collect())
}

/// Inserts each of `sends` as `sent` if its recipient's window has room: the ids inserted.
async fn insert_all(
    conn: &mut Conn<'_>,
    sends: &[&OtpSend],
) -> StoreResult<std::collections::HashSet<String>> {
    if sends.is_empty() {
        return Ok(Default::default());
    }
    let pg = match conn {
        Conn::Postgres(pg) => pg,
        Conn::Local(local) => {
            let inserted: Vec<String> = rows_of(
                local,
                INSERT_ROWS,
                &with_since(sends),
                |(s, since)| {
                    let o = &s.otp;
                    vec![
                        &o.id,
                        &o.tenant_id,
                        &o.application_id,
                        &o.channel,
                        &o.recipient_key,
                        &o.recipient_masked,
                        &o.salt,
                        &o.code_hash,
                        &o.expires_at,
                        &o.created_at,
                        since,
                        &s.limit.max,
                    ]
                },
                |r| r.get(0),
            )?;
            return Ok(inserted.into_iter().collect());
        }
        Conn::Sqlite(_) => return Err(crate::store::writer::not_set_based()),
    };
    let column = |f: fn(&NewOtp) -> &str| sends.iter().map(|s| f(&s.otp)).collect::<Vec<&str>>();
    crate::store::count_call();
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
    Ok(inserted.into_iter().collect())
}

/// The multi-row statements of the SQLite sends' group: `(head, row, tail)`.
const WITH_ROOM_ROWS: (&str, &str, &str) = (
    "WITH v(id, application_id, recipient_key, since, max_sends) AS (",
    "(?, ?, ?, ?, ?)",
    ") SELECT id FROM v
       WHERE (SELECT COUNT(*) FROM otp_transactions o
              WHERE o.application_id = v.application_id AND o.recipient_key = v.recipient_key
                AND o.created_at > v.since) < v.max_sends",
);
const INSERT_ROWS: (&str, &str, &str) = (
    "WITH v(id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
            expires_at, created_at, since, max_sends) AS (",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    ") INSERT INTO otp_transactions
         (id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
          status, expires_at, created_at, updated_at)
       SELECT id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt, code_hash,
              'sent', expires_at, created_at, created_at
       FROM v
       WHERE (SELECT COUNT(*) FROM otp_transactions o
              WHERE o.application_id = v.application_id AND o.recipient_key = v.recipient_key
                AND o.created_at > v.since) < v.max_sends
       RETURNING id",
);

/// An OTP verification for the writer: the transaction, when, the failure window, and the
/// rules that judge its snapshot (run again if the verification has to be).
pub(crate) struct OtpVerify {
    pub(super) id: OtpId,
    pub(super) app: ApplicationId,
    pub(super) now: i64,
    pub(super) failure_window_ms: i64,
    pub(super) decide: Box<dyn Fn(&OtpSnapshot) -> OtpVerdict + Send + Sync>,
}

impl WriteKind for OtpVerify {
    /// The verdict, or `None` if there is no such transaction.
    type Answer = Option<OtpVerdict>;
    /// Its transaction: two verifications of one transaction are never written in one group.
    type Key = OtpId;

    fn conflict_keys(&self) -> Vec<OtpId> {
        vec![self.id.clone()]
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<Option<OtpVerdict>>> {
        verify_all(conn, group).await
    }
}

/// Verifies many codes (no transaction twice), in set-based statements: the transactions and
/// their recipients' recent failures are read (on PostgreSQL locking the rows, in one order for
/// every writer: [`lock_and_read`]; on SQLite in one statement: [`READ_ROWS`]); the rules judge
/// each in turn ([`judge`]: a wrong code counts against the next verification of the same
/// recipient in the group, as it would one after the other); every verdict is written at once.
async fn verify_all(conn: &mut Conn<'_>, verifies: &[&OtpVerify]) -> StoreResult<Vec<Option<OtpVerdict>>> {
    let mut snapshots = match conn {
        Conn::Postgres(pg) => lock_and_read(pg, verifies).await?,
        Conn::Local(local) => read_local(local, verifies)?,
        Conn::Sqlite(_) => return Err(crate::store::writer::not_set_based()),
    };
    let verdicts = judge(verifies, &mut snapshots);
    let (changes, failures) = changes_of(verifies, &snapshots, &verdicts);
    match conn {
        _ if changes.is_empty() => {}
        Conn::Postgres(pg) => write_verdicts(pg, &changes, &failures).await?,
        Conn::Local(local) => {
            rows_of(
                local,
                VERDICT_ROWS,
                &changes,
                |(id, status, failed, verified, now)| vec![id, status, failed, verified, now],
                ignore,
            )?;
            rows_of(local, FAILURE_ROWS, &failures, |(app, recipient, at)| vec![app, recipient, at], ignore)?;
        }
        Conn::Sqlite(_) => return Err(crate::store::writer::not_set_based()),
    }
    Ok(verdicts)
}

/// On PostgreSQL: one statement locks and reads every transaction (in id order) and locks
/// their recipients; one counts the recipients' recent failures. Each verification's snapshot,
/// or none if its transaction is not there.
async fn lock_and_read(
    pg: &mut sqlx::PgConnection,
    verifies: &[&OtpVerify],
) -> StoreResult<Vec<Option<OtpSnapshot>>> {
    #[derive(sqlx::FromRow)]
    struct Locked {
        id: String,
        #[sqlx(flatten)]
        snapshot: OtpSnapshot,
    }
    crate::store::count_call();
    // The transactions' rows, then their recipients' rows, each locked in one order. (Each
    // statement that joins a group's ids to `otp_transactions` also names them in `= ANY(…)`,
    // so PostgreSQL looks the rows up by key. With only the join, a growing table whose
    // statistics still say it is small was read whole: a sequential scan per group.)
    let locked: Vec<Locked> = sqlx::query_as(
        "WITH t AS (
             SELECT o.id, o.application_id, o.recipient_key, o.salt, o.code_hash,
                    CASE o.status WHEN 'sending' THEN 'failed' ELSE o.status END AS status,
                    o.failed_attempts, o.expires_at
             FROM otp_transactions o JOIN unnest($1::text[], $2::text[]) AS t(id, application_id)
               ON o.id = t.id AND o.application_id = t.application_id
             WHERE o.id = ANY($1::text[])
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
    .fetch_all(&mut *pg)
    .await?;
    let mut snapshots: Vec<Option<OtpSnapshot>> = verifies
        .iter()
        .map(|v| locked.iter().find(|l| l.id == v.id.as_str()).map(|l| l.snapshot.clone()))
        .collect();
    // The recipients' failures, read after their rows were locked.
    let found: Vec<(usize, &OtpSnapshot)> =
        snapshots.iter().enumerate().filter_map(|(i, s)| Some((i, s.as_ref()?))).collect();
    crate::store::count_call();
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
    .fetch_all(&mut *pg)
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
    Ok(snapshots)
}

/// On SQLite: every transaction with its recipient's recent failures, in one statement
/// (up to 64 rows).
fn read_local(conn: &rusqlite::Connection, verifies: &[&OtpVerify]) -> StoreResult<Vec<Option<OtpSnapshot>>> {
    let rows: Vec<(i64, &OtpVerify, i64)> =
        verifies.iter().zip(0..).map(|(v, ord)| (ord, *v, v.now - v.failure_window_ms)).collect();
    let read: Vec<(i64, OtpSnapshot)> = rows_of(
        conn,
        READ_ROWS,
        &rows,
        |(ord, v, since)| vec![ord, &v.id, &v.app, since],
        |r| Ok((r.get("ord")?, OtpSnapshot::from_local_row(r)?)),
    )?;
    let mut snapshots: Vec<Option<OtpSnapshot>> = verifies.iter().map(|_| None).collect();
    for (ord, snapshot) in read {
        if let Some(slot) = usize::try_from(ord).ok().and_then(|i| snapshots.get_mut(i)) {
            *slot = Some(snapshot);
        }
    }
    Ok(snapshots)
}

/// The rules' verdict on each snapshot, in order; a wrong code is a failure the next
/// verification of its recipient sees.
fn judge(verifies: &[&OtpVerify], snapshots: &mut [Option<OtpSnapshot>]) -> Vec<Option<OtpVerdict>> {
    let mut verdicts = Vec::with_capacity(verifies.len());
    let mut failures: Vec<(String, i64)> = Vec::new();
    for (verify, snapshot) in verifies.iter().zip(snapshots.iter_mut()) {
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
    verdicts
}

/// A transaction's new state: `(id, status, failed_attempts, verified, now)`.
type Change<'a> = (&'a str, &'a str, Option<i64>, bool, i64);
/// A wrong code's failure: `(application, recipient, at)`.
type Failure<'a> = (&'a str, &'a str, i64);

/// What a group's verdicts write: each transaction that changes, and a failure row for each
/// wrong code.
fn changes_of<'a>(
    verifies: &[&'a OtpVerify],
    snapshots: &'a [Option<OtpSnapshot>],
    verdicts: &[Option<OtpVerdict>],
) -> (Vec<Change<'a>>, Vec<Failure<'a>>) {
    let mut changes = Vec::new();
    let mut failures = Vec::new();
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
    (changes, failures)
}

/// Writes a group's verdicts on PostgreSQL in one statement.
async fn write_verdicts(
    pg: &mut sqlx::PgConnection,
    changes: &[Change<'_>],
    failures: &[Failure<'_>],
) -> StoreResult<()> {
    crate::store::count_call();
    sqlx::query(
        "WITH v AS (
             SELECT * FROM unnest($1::text[], $2::text[], $3::int8[], $4::bool[], $5::int8[])
                 AS t(id, status, failed_attempts, verified, now)),
         changed AS (UPDATE otp_transactions o SET
                 status = v.status,
                 failed_attempts = COALESCE(v.failed_attempts, o.failed_attempts),
                 verified_at = CASE WHEN v.verified THEN v.now ELSE o.verified_at END,
                 updated_at = v.now
             FROM v WHERE o.id = v.id AND o.id = ANY($1::text[]))
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

/// The multi-row statements of the SQLite verifications' group: `(head, row, tail)`.
const READ_ROWS: (&str, &str, &str) = (
    "WITH v(ord, id, application_id, since) AS (",
    "(?, ?, ?, ?)",
    ") SELECT v.ord, o.recipient_key, o.salt, o.code_hash,
              CASE o.status WHEN 'sending' THEN 'failed' ELSE o.status END AS status,
              o.failed_attempts, o.expires_at,
              COUNT(f.at) AS recent_failures, MIN(f.at) AS oldest_failure
       FROM v JOIN otp_transactions o ON o.id = v.id AND o.application_id = v.application_id
       LEFT JOIN otp_failures f ON f.application_id = o.application_id
           AND f.recipient_key = o.recipient_key AND f.at > v.since
       GROUP BY v.ord, o.recipient_key, o.salt, o.code_hash, o.status, o.failed_attempts, o.expires_at",
);
const VERDICT_ROWS: (&str, &str, &str) = (
    "UPDATE otp_transactions SET
         status = v.column2,
         failed_attempts = COALESCE(v.column3, otp_transactions.failed_attempts),
         verified_at = CASE WHEN v.column4 THEN v.column5 ELSE otp_transactions.verified_at END,
         updated_at = v.column5
     FROM (",
    "(?, ?, ?, ?, ?)",
    ") AS v WHERE otp_transactions.id = v.column1",
);
const FAILURE_ROWS: (&str, &str, &str) =
    ("INSERT INTO otp_failures (application_id, recipient_key, at)", "(?, ?, ?)", "");

#[cfg(test)]
mod tests;
