//! The SQLite OTP groups, driven directly (see `writes.rs`).

use herald_common::ids::TenantId;

use super::*;
use crate::store::local::testing::sqlite;

const WINDOW_MS: i64 = 60_000;

/// A send to `recipient` at `now` (one code per recipient per minute), with an idempotency
/// key `(key, request_hash)` if given.
fn send(
    tenant: &TenantId,
    app: &ApplicationId,
    recipient: &str,
    key: Option<(&str, &str)>,
    now: i64,
) -> OtpSend {
    OtpSend {
        otp: NewOtp {
            id: OtpId::new(),
            tenant_id: tenant.clone(),
            application_id: app.clone(),
            channel: Channel::Sms,
            recipient_key: recipient.to_owned(),
            recipient_masked: "+1******".into(),
            salt: "salt".into(),
            code_hash: "hash".into(),
            expires_at: now + 600_000,
            created_at: now,
        },
        idempotency: key.map(|(key, hash)| {
            (IdempotencyKey { key: key.to_owned(), request_hash: hash.to_owned() }, 3_600_000)
        }),
        limit: Limit { max: 1, window_ms: WINDOW_MS },
    }
}

/// Runs `sends` as one group on SQLite's writer connection; it must not fail (the writer
/// would then run it one by one, and the tests above the store would still pass).
async fn send_group(conn: &mut rusqlite::Connection, sends: &[OtpSend]) -> Vec<OtpSendStart> {
    let refs: Vec<&OtpSend> = sends.iter().collect();
    send_all(&mut Conn::Local(conn), &refs).await.expect("the group is written as a group")
}

fn count(conn: &rusqlite::Connection, sql: &str) -> i64 {
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

/// OTP sends as SQLite groups, in multi-row statements: each recipient's window holds, a
/// refusal carries its wait, and a keyed send claims its key only if its recipient has room.
#[tokio::test]
async fn a_sqlite_send_group_is_written_by_its_multi_row_statements() {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app, mut conn) = sqlite(dir.path()).await;
    let recipients: Vec<String> = (0..70).map(|i| format!("+1415555{i:04}")).collect();
    // 70 recipients (more than one statement's 64 rows), a code each; then each again.
    let first: Vec<OtpSend> = recipients.iter().map(|r| send(&tenant, &app, r, None, 1_000)).collect();
    assert!(send_group(&mut conn, &first).await.iter().all(|s| *s == OtpSendStart::Started));
    let again: Vec<OtpSend> = recipients.iter().map(|r| send(&tenant, &app, r, None, 2_000)).collect();
    let refused = send_group(&mut conn, &again).await;
    assert!(
        refused.iter().all(|s| *s == OtpSendStart::RateLimited { retry_after_ms: 59_000 }),
        "{refused:?}"
    );
    // Keyed: two to new recipients, one to a recipient whose window is full.
    let keyed = [("s0", "a"), ("s1", "b"), (recipients[0].as_str(), "c")]
        .map(|(to, key)| send(&tenant, &app, to, Some((key, "h")), 3_000));
    assert_eq!(
        send_group(&mut conn, &keyed).await,
        [OtpSendStart::Started, OtpSendStart::Started, OtpSendStart::RateLimited { retry_after_ms: 58_000 }]
    );
    // Key a again with the same request, b with another; c was never claimed.
    let later = [("s2", "a", "h"), ("s3", "b", "other"), ("s4", "c", "h")]
        .map(|(to, key, hash)| send(&tenant, &app, to, Some((key, hash)), 4_000));
    assert_eq!(
        send_group(&mut conn, &later).await,
        [
            OtpSendStart::Idempotent(DispatchResult::InFlight),
            OtpSendStart::Idempotent(DispatchResult::KeyReused),
            OtpSendStart::Started,
        ]
    );
    assert_eq!(count(&conn, "SELECT COUNT(*) FROM otp_transactions"), 70 + 2 + 1);
    assert_eq!(count(&conn, "SELECT COUNT(*) FROM idempotency_keys"), 3);
    drop(conn);
    store.close().await;
}

/// OTP verifications as SQLite groups, in multi-row statements: each is judged on its
/// transaction and its recipient's failures (those of earlier ones in its group too), and
/// every verdict is written.
#[tokio::test]
async fn a_sqlite_verify_group_is_written_by_its_multi_row_statements() {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app, mut conn) = sqlite(dir.path()).await;
    // Codes 0..70, two per recipient (2k and 2k + 1 to recipient k), sent in two groups.
    let sends: Vec<OtpSend> = (0..70)
        .map(|i| {
            let mut send = send(&tenant, &app, &format!("r{}", i / 2), None, 1_000 + i % 2);
            send.limit.max = 10;
            send
        })
        .collect();
    for parity in [0, 1] {
        let group: Vec<&OtpSend> = sends.iter().skip(parity).step_by(2).collect();
        send_all(&mut Conn::Local(&mut conn), &group).await.unwrap();
    }
    // Every seventh code is right; a wrong one is refused while its recipient has a failure.
    let verify = |id: &OtpId, i: usize, now: i64| OtpVerify {
        id: id.clone(),
        app: app.clone(),
        now,
        failure_window_ms: WINDOW_MS,
        decide: if i.is_multiple_of(7) {
            Box::new(|_| OtpVerdict::Verified)
        } else {
            Box::new(|s| match s.oldest_failure {
                Some(oldest) => OtpVerdict::RateLimited { retry_after_ms: oldest },
                None => OtpVerdict::Wrong { failed_attempts: s.failed_attempts + 1, tombstoned: false },
            })
        },
    };
    let mut group: Vec<OtpVerify> =
        sends.iter().enumerate().map(|(i, s)| verify(&s.otp.id, i, 5_000)).collect();
    group.push(verify(&OtpId::new(), 1, 5_000));
    let refs: Vec<&OtpVerify> = group.iter().collect();
    let verdicts =
        verify_all(&mut Conn::Local(&mut conn), &refs).await.expect("the group is written as a group");
    let expected = |i: usize| match i {
        70 => None,
        i if i % 7 == 0 => Some(OtpVerdict::Verified),
        // The recipient's first code was wrong, in this group.
        i if i % 2 == 1 && (i - 1) % 7 != 0 => Some(OtpVerdict::RateLimited { retry_after_ms: 5_000 }),
        _ => Some(OtpVerdict::Wrong { failed_attempts: 1, tombstoned: false }),
    };
    assert_eq!(verdicts, (0..71).map(expected).collect::<Vec<_>>());
    let wrong = verdicts.iter().filter(|v| matches!(v, Some(OtpVerdict::Wrong { .. }))).count();
    assert_eq!(count(&conn, "SELECT COUNT(*) FROM otp_failures WHERE at = 5000") as usize, wrong);
    assert_eq!(
        count(
            &conn,
            "SELECT COUNT(*) FROM otp_transactions WHERE status = 'verified' AND verified_at = 5000"
        ),
        10
    );
    assert_eq!(
        count(&conn, "SELECT COUNT(*) FROM otp_transactions WHERE failed_attempts = 1") as usize,
        wrong
    );
    // Again: every wrong one now finds its recipient's failure in the table.
    let retried: Vec<OtpVerify> = sends
        .iter()
        .enumerate()
        .filter(|(i, _)| matches!(expected(*i), Some(OtpVerdict::Wrong { .. })))
        .map(|(i, s)| verify(&s.otp.id, i, 6_000))
        .collect();
    let refs: Vec<&OtpVerify> = retried.iter().collect();
    let verdicts = verify_all(&mut Conn::Local(&mut conn), &refs).await.unwrap();
    assert!(
        verdicts.iter().all(|v| *v == Some(OtpVerdict::RateLimited { retry_after_ms: 5_000 })),
        "{verdicts:?}"
    );
    drop(conn);
    store.close().await;
}
