//! Idempotency keys, per application (Stripe's model): the first request's response is stored
//! under the key with a fingerprint of the request; a repeat with the same fingerprint gets that
//! response, one with another fingerprint is refused. While the first request is still running
//! (OTP sends, which call a provider inside the request) the key is "in flight": the response is
//! not stored yet. An in-flight key older than [`ABANDONED_AFTER_MS`] (its daemon died) may be
//! taken over.

use herald_common::ids::ApplicationId;

use super::{Store, StoreError, StoreResult, execute, fetch};

/// A request's `Idempotency-Key` and the fingerprint of its body.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub key: String,
    pub request_hash: String,
}

/// What a request's idempotency key means for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DispatchResult {
    Created,
    /// The key was used before with the same request: answer with the stored response.
    Replay {
        status_code: u16,
        body: String,
    },
    /// The key was used before with a different request.
    KeyReused,
    /// The first request with this key has not finished.
    InFlight,
}

/// An in-flight key this old belongs to a request that will never finish (longer than the
/// slowest provider call: connect, TLS and send each time out after 30 s).
pub const ABANDONED_AFTER_MS: i64 = 5 * 60_000;

/// [`ABANDONED_AFTER_MS`] as SQL text, for statements whose every parameter is a row's
/// (a test holds the two equal).
macro_rules! abandoned_after_ms_sql {
    () => {
        "300000"
    };
}

#[derive(sqlx::FromRow)]
struct IdempotencyRow {
    request_hash: String,
    status_code: Option<i64>,
    response_body: Option<String>,
    created_at: i64,
    expires_at: i64,
}

super::local::local_row!(IdempotencyRow { request_hash, status_code, response_body, created_at, expires_at });

/// What an existing, unexpired key means for a request with `request_hash`.
fn decide(existing: IdempotencyRow, request_hash: &str) -> DispatchResult {
    if existing.request_hash != request_hash {
        return DispatchResult::KeyReused;
    }
    match (existing.status_code, existing.response_body) {
        (Some(code), Some(body)) => {
            DispatchResult::Replay { status_code: u16::try_from(code).unwrap_or(500), body }
        }
        _ => DispatchResult::InFlight,
    }
}

impl Store {
    /// What an idempotency key means for a request with `request_hash`, before any work is done:
    /// `Created` if the key is unused (or expired, or abandoned).
    pub async fn check_idempotency_key(
        &self,
        application_id: &ApplicationId,
        idempotency: &IdempotencyKey,
        now: i64,
    ) -> StoreResult<DispatchResult> {
        let mut read = self.read().await?;
        let existing = fetch!(
            &mut read.conn(),
            fetch_optional,
            IdempotencyRow,
            "SELECT request_hash, status_code, response_body, created_at, expires_at FROM idempotency_keys
             WHERE application_id = $1 AND idempotency_key = $2",
            application_id,
            &idempotency.key
        )?;
        Ok(match existing {
            Some(row) if usable(&row, now) => decide(row, &idempotency.request_hash),
            _ => DispatchResult::Created,
        })
    }

    /// Stores the response of a request whose key was claimed in flight.
    pub async fn complete_idempotency_key(
        &self,
        application_id: &ApplicationId,
        key: &str,
        status_code: u16,
        body: String,
    ) -> StoreResult<()> {
        let (app, key) = (application_id.clone(), key.to_owned());
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    "UPDATE idempotency_keys SET status_code = $3, response_body = $4
                     WHERE application_id = $1 AND idempotency_key = $2",
                    &app,
                    &key,
                    i64::from(status_code),
                    &body
                )?;
                Ok(())
            })
        })
        .await
    }
}

/// Whether an existing row still holds the key (not expired, not abandoned in flight).
fn usable(row: &IdempotencyRow, now: i64) -> bool {
    row.expires_at > now && (row.status_code.is_some() || now - row.created_at < ABANDONED_AFTER_MS)
}

/// One key to claim in [`claim_all`].
pub(super) struct Claim<'a> {
    pub application_id: &'a ApplicationId,
    pub idempotency: &'a IdempotencyKey,
    /// The response to keep with the key, or none while the request is still in flight.
    pub response: Option<(u16, &'a str)>,
    pub now: i64,
    pub ttl_ms: i64,
}

/// Claims keys on PostgreSQL, in one statement (and one more if a key was held
/// already): the answer for each, in order. No key may occur twice.
pub(super) async fn claim_all(
    conn: &mut sqlx::PgConnection,
    claims: &[Claim<'_>],
) -> StoreResult<Vec<DispatchResult>> {
    // Keys are claimed in one order by every writer, so two batches never wait on each other's
    // keys in a cycle.
    let mut order: Vec<usize> = (0..claims.len()).collect();
    order.sort_by_key(|&i| (claims[i].application_id.as_str(), claims[i].idempotency.key.as_str()));
    let apps: Vec<&str> = order.iter().map(|&i| claims[i].application_id.as_str()).collect();
    let keys: Vec<&str> = order.iter().map(|&i| claims[i].idempotency.key.as_str()).collect();
    let hashes: Vec<&str> = order.iter().map(|&i| claims[i].idempotency.request_hash.as_str()).collect();
    let bodies: Vec<Option<&str>> = order.iter().map(|&i| claims[i].response.map(|(_, b)| b)).collect();
    let codes: Vec<Option<i64>> =
        order.iter().map(|&i| claims[i].response.map(|(c, _)| i64::from(c))).collect();
    let created: Vec<i64> = order.iter().map(|&i| claims[i].now).collect();
    let expires: Vec<i64> = order.iter().map(|&i| claims[i].now + claims[i].ttl_ms).collect();
    super::count_call();
    let claimed: Vec<(String, String)> = sqlx::query_as(
        "INSERT INTO idempotency_keys
             (application_id, idempotency_key, request_hash, status_code, response_body, created_at, expires_at)
         SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::int8[], $5::text[], $6::int8[], $7::int8[])
         ON CONFLICT (application_id, idempotency_key) DO UPDATE SET
             request_hash = excluded.request_hash, status_code = excluded.status_code,
             response_body = excluded.response_body, created_at = excluded.created_at,
             expires_at = excluded.expires_at
         WHERE idempotency_keys.expires_at <= excluded.created_at
            OR (idempotency_keys.status_code IS NULL AND idempotency_keys.created_at <= excluded.created_at - $8)
         RETURNING application_id, idempotency_key",
    )
    .bind(&apps)
    .bind(&keys)
    .bind(&hashes)
    .bind(&codes)
    .bind(&bodies)
    .bind(&created)
    .bind(&expires)
    .bind(ABANDONED_AFTER_MS)
    .fetch_all(&mut *conn)
    .await?;
    let claimed: std::collections::HashSet<(String, String)> = claimed.into_iter().collect();
    let mut results = vec![DispatchResult::Created; claims.len()];
    let held: Vec<usize> = (0..claims.len())
        .filter(|&i| {
            !claimed.contains(&(claims[i].application_id.to_string(), claims[i].idempotency.key.clone()))
        })
        .collect();
    if held.is_empty() {
        return Ok(results);
    }
    let apps: Vec<&str> = held.iter().map(|&i| claims[i].application_id.as_str()).collect();
    let keys: Vec<&str> = held.iter().map(|&i| claims[i].idempotency.key.as_str()).collect();
    super::count_call();
    #[derive(sqlx::FromRow)]
    struct Held {
        application_id: String,
        idempotency_key: String,
        request_hash: String,
        status_code: Option<i64>,
        response_body: Option<String>,
    }
    let rows: Vec<Held> = sqlx::query_as(
        "SELECT k.application_id, k.idempotency_key, k.request_hash, k.status_code, k.response_body
         FROM idempotency_keys k JOIN unnest($1::text[], $2::text[]) AS t(application_id, idempotency_key)
           ON k.application_id = t.application_id AND k.idempotency_key = t.idempotency_key",
    )
    .bind(&apps)
    .bind(&keys)
    .fetch_all(&mut *conn)
    .await?;
    for i in held {
        let claim = &claims[i];
        let row = rows
            .iter()
            .find(|r| {
                r.application_id == claim.application_id.as_str()
                    && r.idempotency_key == claim.idempotency.key
            })
            .ok_or_else(|| StoreError::Statement("an idempotency key held and gone at once".to_owned()))?;
        let existing = IdempotencyRow {
            request_hash: row.request_hash.clone(),
            status_code: row.status_code,
            response_body: row.response_body.clone(),
            created_at: 0,
            expires_at: 0,
        };
        results[i] = decide(existing, &claim.idempotency.request_hash);
    }
    Ok(results)
}

/// [`claim_all`] on SQLite, on the writer's own connection: one multi-row statement claims the
/// keys (up to 64 per statement) and one reads those held already.
pub(super) fn claim_all_local(
    conn: &rusqlite::Connection,
    claims: &[Claim<'_>],
) -> StoreResult<Vec<DispatchResult>> {
    use super::local::rows_of;

    type Row<'a> = (&'a str, &'a str, &'a str, Option<i64>, Option<&'a str>, i64, i64);
    let rows: Vec<Row<'_>> = claims
        .iter()
        .map(|c| {
            let (code, body) = c.response.map(|(code, body)| (i64::from(code), body)).unzip();
            let key = c.idempotency;
            (c.application_id.as_str(), &*key.key, &*key.request_hash, code, body, c.now, c.now + c.ttl_ms)
        })
        .collect();
    let claimed: std::collections::HashSet<(String, String)> = rows_of(
        conn,
        CLAIM_ROWS,
        &rows,
        |(app, key, hash, code, body, now, expires)| vec![app, key, hash, code, body, now, expires],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )?
    .into_iter()
    .collect();
    let held: Vec<&Row<'_>> =
        rows.iter().filter(|r| !claimed.contains(&(r.0.to_owned(), r.1.to_owned()))).collect();
    let existing: Vec<((String, String), IdempotencyRow)> = rows_of(
        conn,
        HELD_ROWS,
        &held,
        |(app, key, ..)| vec![app, key],
        |r| {
            let row = IdempotencyRow {
                request_hash: r.get(2)?,
                status_code: r.get(3)?,
                response_body: r.get(4)?,
                created_at: 0,
                expires_at: 0,
            };
            Ok(((r.get(0)?, r.get(1)?), row))
        },
    )?;
    let mut existing: std::collections::HashMap<(String, String), IdempotencyRow> =
        existing.into_iter().collect();
    rows.iter()
        .map(|(app, key, hash, ..)| {
            let name = ((*app).to_owned(), (*key).to_owned());
            if claimed.contains(&name) {
                return Ok(DispatchResult::Created);
            }
            let row = existing.remove(&name).ok_or_else(|| {
                StoreError::Statement("an idempotency key held and gone at once".to_owned())
            })?;
            Ok(decide(row, hash))
        })
        .collect()
}

/// The multi-row statements of [`claim_all_local`]: `(head, row, tail)`. A key is claimed if it
/// is new, expired or abandoned in flight; `RETURNING` names those claimed.
const CLAIM_ROWS: (&str, &str, &str) = (
    "INSERT INTO idempotency_keys
         (application_id, idempotency_key, request_hash, status_code, response_body, created_at, expires_at)",
    "(?, ?, ?, ?, ?, ?, ?)",
    concat!(
        "ON CONFLICT (application_id, idempotency_key) DO UPDATE SET
             request_hash = excluded.request_hash, status_code = excluded.status_code,
             response_body = excluded.response_body, created_at = excluded.created_at,
             expires_at = excluded.expires_at
         WHERE idempotency_keys.expires_at <= excluded.created_at
            OR (idempotency_keys.status_code IS NULL
                AND idempotency_keys.created_at <= excluded.created_at - ",
        abandoned_after_ms_sql!(),
        ")
         RETURNING application_id, idempotency_key"
    ),
);
const HELD_ROWS: (&str, &str, &str) = (
    "SELECT k.application_id, k.idempotency_key, k.request_hash, k.status_code, k.response_body FROM (",
    "(?, ?)",
    ") AS v JOIN idempotency_keys k ON k.application_id = v.column1 AND k.idempotency_key = v.column2",
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sqlite_claim_abandons_keys_after_the_same_time() {
        assert_eq!(abandoned_after_ms_sql!().parse::<i64>().unwrap(), ABANDONED_AFTER_MS);
    }

    /// Keys claimed as SQLite groups, in multi-row statements (the group must not fail: the
    /// writer would then run its operations one by one, and the tests above the store would
    /// still pass): a key held answers with its response, in flight or refused; an abandoned or
    /// expired one is taken over.
    #[tokio::test]
    async fn sqlite_keys_are_claimed_by_multi_row_statements() {
        let dir = tempfile::tempdir().unwrap();
        let (store, _, app, conn) = super::super::local::testing::sqlite(dir.path()).await;
        let key =
            |i: usize, hash: &str| IdempotencyKey { key: format!("k{i}"), request_hash: hash.to_owned() };
        let (same, other): (Vec<_>, Vec<_>) = (0..70).map(|i| (key(i, "h"), key(i, "other"))).unzip();
        let bodies: Vec<String> = (0..70).map(|i| format!("r{i}")).collect();
        let claims = |keys: &[&IdempotencyKey], now: i64| -> Vec<DispatchResult> {
            // Even keys keep a response for an hour; odd ones are in flight.
            let claims: Vec<Claim<'_>> = keys
                .iter()
                .enumerate()
                .map(|(i, idempotency)| Claim {
                    application_id: &app,
                    idempotency,
                    response: (i % 2 == 0).then(|| (202, bodies[i].as_str())),
                    now,
                    ttl_ms: 3_600_000,
                })
                .collect();
            claim_all_local(&conn, &claims).expect("the group is written as a group")
        };
        let all_same: Vec<&IdempotencyKey> = same.iter().collect();
        assert_eq!(claims(&all_same, 1_000), vec![DispatchResult::Created; 70]);
        // A minute later; every third with another request.
        let mixed: Vec<&IdempotencyKey> =
            (0..70).map(|i| if i % 3 == 0 { &other[i] } else { &same[i] }).collect();
        let expected: Vec<DispatchResult> = (0..70)
            .map(|i| match i {
                i if i % 3 == 0 => DispatchResult::KeyReused,
                i if i % 2 == 0 => DispatchResult::Replay { status_code: 202, body: bodies[i].clone() },
                _ => DispatchResult::InFlight,
            })
            .collect();
        assert_eq!(claims(&mixed, 61_000), expected);
        // In flight this long: abandoned, and taken over; those with a response still hold.
        let expected: Vec<DispatchResult> = (0..70)
            .map(|i| match i % 2 {
                0 => DispatchResult::Replay { status_code: 202, body: bodies[i].clone() },
                _ => DispatchResult::Created,
            })
            .collect();
        assert_eq!(claims(&all_same, 1_000 + ABANDONED_AFTER_MS), expected);
        // Expired: every key is new again.
        assert_eq!(claims(&all_same, 1_000 + 3_600_000), vec![DispatchResult::Created; 70]);
        drop(conn);
        store.close().await;
    }
}
