//! Set-based write batches (store/writer.rs): dispatches and delivery outcomes that meet in a
//! batch are written together, a fixed number of statements per group. These tests submit
//! hundreds at once so that groups form, and check what each operation must still get on its
//! own: inbox numbering without gaps per user, idempotency keys claimed once (by dispatches
//! and by OTP sends), leases honoured, send limits kept, activity counted, and a bad operation
//! failing alone.

use std::collections::{HashMap, HashSet};

use herald_common::{
    api::notifications::{AttemptOutcome, Channel, DeliveryStatus},
    ids::{ApplicationId, NotificationId, TenantId, UserId},
};
use herald_daemon::{
    config::Layers,
    store::{
        ActivityFilter, AttemptResult, AttemptSpan, DispatchResult, IdempotencyKey, IdempotentResponse,
        InboxPage, NewNotification, Store,
    },
};
use herald_tests::{Backend, both_backends};

pub(crate) async fn open(backend: Backend, dir: &std::path::Path) -> (Store, TenantId, ApplicationId) {
    herald_tests::init_crypto();
    let url = backend.fresh_database_url(dir).await;
    let config = Layers::new().env([("HERALD_DATABASE_URL".to_owned(), url)]).build(false).unwrap();
    let store = Store::open(&config).await.expect("open store");
    let tenant = store.create_tenant("T".into()).await.unwrap();
    let app = store.create_application(&tenant.id, "A".into()).await.unwrap().unwrap();
    (store, tenant.id, app.id)
}

pub(crate) fn notification(
    tenant: &TenantId,
    app: &ApplicationId,
    channel: Channel,
    recipient: &str,
) -> NewNotification {
    NewNotification {
        id: NotificationId::new(),
        tenant_id: tenant.clone(),
        application_id: app.clone(),
        channel,
        recipient: recipient.to_owned(),
        recipient_masked: "m***".to_owned(),
        sender: None,
        subject: Some("s".to_owned()),
        title: (channel == Channel::InApp).then(|| "t".to_owned()),
        body: "b".to_owned(),
        html_body: None,
        data: (channel == Channel::InApp).then(|| r#"{"k":1}"#.to_owned()),
        template_id: None,
        category: None,
        recipient_key: format!("key-{recipient}"),
        created_at: herald_daemon::store::now_millis(),
    }
}

fn keyed(key: &str, hash: &str) -> Option<IdempotentResponse> {
    Some(IdempotentResponse {
        key: IdempotencyKey { key: key.to_owned(), request_hash: hash.to_owned() },
        status_code: 202,
        body: format!("{{\"hash\":\"{hash}\"}}"),
        ttl_ms: 3_600_000,
    })
}

/// An SMS code to `recipient`, created now and valid for ten minutes.
fn otp(
    tenant: &TenantId,
    app: &ApplicationId,
    recipient: String,
    code_hash: String,
) -> herald_daemon::store::NewOtp {
    let now = herald_daemon::store::now_millis();
    herald_daemon::store::NewOtp {
        id: herald_common::ids::OtpId::new(),
        tenant_id: tenant.clone(),
        application_id: app.clone(),
        channel: Channel::Sms,
        recipient_key: recipient,
        recipient_masked: "+1******".into(),
        salt: "salt".into(),
        code_hash,
        expires_at: now + 600_000,
        created_at: now,
    }
}

/// 1,200 dispatches at once: in-app to a few users (several per batch for one user), email, some
/// with idempotency keys used three times (twice with the same request, once with another),
/// and some for an application that does not exist (a foreign key the group's statement breaks,
/// so the group is undone and its operations run one by one).
async fn grouped_dispatches(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let grouped_before = herald_daemon::store::grouped_operations();
    let users: Vec<String> = (0..7).map(|u| format!("user-{u}")).collect();
    let mut tasks = Vec::new();
    for i in 0..1_200usize {
        let store = store.clone();
        let (mut n, idempotency, expect) = match i % 6 {
            0..=2 => (notification(&tenant, &app, Channel::InApp, &users[i % 7]), None, "created"),
            3 => (notification(&tenant, &app, Channel::Email, "a@example.com"), None, "created"),
            4 => {
                // Key k-{i/24}: used by i = 4, 10, 16 within each block of 24 (the same
                // request twice, then another).
                let hash = if i % 24 == 16 { "other" } else { "same" };
                (
                    notification(&tenant, &app, Channel::InApp, &users[i % 7]),
                    keyed(&format!("k-{}", i / 24), hash),
                    "keyed",
                )
            }
            _ => (notification(&tenant, &app, Channel::Email, "b@example.com"), None, "bad"),
        };
        // Three bad ones: each undoes its group, whose other dispatches then run one by one.
        let bad = [5, 605, 1_193].contains(&i);
        if bad {
            n.application_id = ApplicationId::new();
        }
        let expect = if expect == "bad" && !bad { "created" } else { expect };
        tasks.push(tokio::spawn(async move {
            let id = n.id.clone();
            let channel = n.channel;
            let recipient = n.recipient.clone();
            (i, expect, id, channel, recipient, store.dispatch(n, idempotency).await)
        }));
    }
    let mut created_in_app: HashMap<String, usize> = HashMap::new();
    let mut created = 0usize;
    let mut keys: HashMap<usize, Vec<(usize, DispatchResult)>> = HashMap::new();
    for task in tasks {
        let (i, expect, id, channel, recipient, result) = task.await.unwrap();
        match expect {
            "bad" => assert!(result.is_err(), "dispatch {i} to a missing application must fail"),
            "created" => {
                assert_eq!(result.unwrap(), DispatchResult::Created, "dispatch {i}");
                created += 1;
                if channel == Channel::InApp {
                    *created_in_app.entry(recipient).or_default() += 1;
                }
                let (record, attempts) = store.get_notification(&id).await.unwrap().expect("stored");
                let status = if channel == Channel::InApp {
                    DeliveryStatus::Delivered
                } else {
                    DeliveryStatus::Queued
                };
                assert_eq!(record.status, status);
                assert_eq!(attempts.len(), usize::from(channel == Channel::InApp));
            }
            _ => {
                let result = result.unwrap();
                if result == DispatchResult::Created {
                    created += 1;
                    *created_in_app.entry(recipient).or_default() += 1;
                }
                keys.entry(i / 24).or_default().push((i % 24, result));
            }
        }
    }
    // Each key: exactly one request created, a repeat of it replays its response, the other
    // request is refused, whichever order they were written in.
    assert_eq!(keys.len(), 50);
    for (key, uses) in &keys {
        let winner = uses.iter().find(|(_, r)| *r == DispatchResult::Created).map(|(slot, _)| *slot);
        let Some(winner) = winner else { panic!("key {key}: nobody created: {uses:?}") };
        for (slot, result) in uses {
            if *slot == winner {
                continue;
            }
            let same_request = (*slot == 16) == (winner == 16);
            let expected = if same_request {
                let hash = if winner == 16 { "other" } else { "same" };
                DispatchResult::Replay { status_code: 202, body: format!("{{\"hash\":\"{hash}\"}}") }
            } else {
                DispatchResult::KeyReused
            };
            assert_eq!(result, &expected, "key {key}, slot {slot}, created by slot {winner}");
        }
    }
    // Every user's items are numbered 1..=n in one sequence, none twice, none missing.
    for user in &users {
        let user_id = UserId::parse(user).unwrap();
        let page = InboxPage { unread_only: false, archived: false, before_seq: None, limit: 1_000 };
        let items = store.inbox_page(&app, &user_id, &page).await.unwrap();
        let mut seqs: Vec<i64> = items.iter().map(|item| item.seq).collect();
        seqs.sort_unstable();
        let n = created_in_app.get(user).copied().unwrap_or(0);
        assert_eq!(seqs, (1..=n as i64).collect::<Vec<_>>(), "{user}'s sequence");
        assert_eq!(store.unread_count(&app, &user_id).await.unwrap(), n as u64);
        assert!(items.iter().all(|item| item.title == "t" && item.body == "b"));
    }
    // The activity counters (kept per statement on PostgreSQL) count every notification once.
    store.fold_activity_counts().await.unwrap();
    let (_, total) = store
        .list_activity(&ActivityFilter::tenant(tenant.clone()), herald_daemon::store::now_millis(), 1, 0)
        .await
        .unwrap();
    assert_eq!(total, created as u64, "activity total_count");
    assert!(
        herald_daemon::store::grouped_operations() > grouped_before,
        "no dispatch was written in a group: the test did not exercise set-based batches"
    );
    store.close().await;
}
both_backends!(grouped_dispatches_on_each_backend, grouped_dispatches);

/// 600 email deliveries claimed, then every outcome recorded at once: sent, retried, failed
/// (retryable or not), and for a third of them a second report with a stale lease token, which
/// must change nothing but the attempt log.
async fn grouped_attempt_outcomes(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    for _ in 0..600 {
        let n = notification(&tenant, &app, Channel::Email, "a@example.com");
        assert_eq!(store.dispatch(n, None).await.unwrap(), DispatchResult::Created);
    }
    let mut claimed = Vec::new();
    while claimed.len() < 600 {
        let batch = store.claim_due_deliveries(100, 60_000).await.unwrap();
        assert!(!batch.is_empty(), "every delivery is due");
        claimed.extend(batch);
    }
    let now = herald_daemon::store::now_millis();
    let span = AttemptSpan { started_at: now, finished_at: now };
    let mut tasks = Vec::new();
    for (i, job) in claimed.iter().enumerate() {
        let result = match i % 4 {
            0 => AttemptResult::Sent { provider_message_id: Some(format!("m-{i}")) },
            1 => AttemptResult::Retry { error: "421 busy".into(), next_attempt_at: now + 3_600_000 },
            2 => {
                AttemptResult::Failed { error: "550 no such user".into(), retryable: false, transient: false }
            }
            _ => AttemptResult::Failed { error: "421 busy".into(), retryable: true, transient: true },
        };
        let writer = store.clone();
        let (id, token) = (job.id.clone(), job.attempt_count);
        tasks.push(tokio::spawn(async move { (i, writer.record_attempt(&id, token, span, result).await) }));
        if i % 3 == 0 {
            // A worker whose lease was taken over reports late, with an older token.
            let store = store.clone();
            let (id, stale) = (job.id.clone(), job.attempt_count - 1);
            let late = AttemptResult::Sent { provider_message_id: None };
            tasks.push(tokio::spawn(async move {
                (usize::MAX, store.record_attempt(&id, stale, span, late).await)
            }));
        }
    }
    for task in tasks {
        let (i, held) = task.await.unwrap();
        assert_eq!(held.unwrap(), i != usize::MAX, "outcome {i}: only the current lease holds");
    }
    for (i, job) in claimed.iter().enumerate() {
        let (record, attempts) = store.get_notification(&job.id).await.unwrap().unwrap();
        let (status, reason, retryable) = match i % 4 {
            0 => (DeliveryStatus::Sent, None, false),
            1 => (DeliveryStatus::Queued, None, false),
            2 => (DeliveryStatus::Failed, Some("550 no such user"), false),
            _ => (DeliveryStatus::Failed, Some("421 busy"), true),
        };
        assert_eq!(
            (record.status, record.failure_reason.as_deref(), record.retryable),
            (status, reason, retryable),
            "notification {i}"
        );
        let logged: Vec<AttemptOutcome> = attempts.iter().map(|a| a.outcome).collect();
        let expected = match i % 4 {
            0 => AttemptOutcome::Sent,
            2 => AttemptOutcome::PermanentFailure,
            _ => AttemptOutcome::TransientFailure,
        };
        let mut want = vec![expected];
        if i % 3 == 0 {
            // The late report's attempt (numbered with its stale token) is logged, nothing more.
            want.insert(0, AttemptOutcome::Sent);
        }
        assert_eq!(logged, want, "notification {i}'s attempts");
        if i % 4 == 0 {
            assert_eq!(
                attempts.last().unwrap().provider_message_id.as_deref(),
                Some(format!("m-{i}").as_str())
            );
        }
    }
    // Retried ones are queued again (due in an hour); the others left the queue.
    assert!(store.next_delivery_due().await.unwrap().is_some_and(|due| due >= now + 3_600_000));
    assert!(store.claim_due_deliveries(1_000, 60_000).await.unwrap().is_empty());
    let ids: HashSet<_> = claimed.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids.len(), 600);
    store.close().await;
}
both_backends!(grouped_attempt_outcomes_on_each_backend, grouped_attempt_outcomes);

/// 300 OTP sends at once, six to each of 50 recipients against a limit of five: every
/// recipient gets exactly five codes and one refusal with a wait, however the sends were
/// grouped (two sends to one recipient never share a group; they would not see each other).
/// Then a send for an application that does not exist, among 50, fails alone.
async fn grouped_otp_sends(backend: Backend) {
    use herald_daemon::store::{Limit, OtpSendStart};
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let grouped_before = herald_daemon::store::grouped_operations();
    let limit = Limit { max: 5, window_ms: 600_000 };
    let mut tasks = Vec::new();
    for i in 0..300usize {
        let otp = otp(&tenant, &app, format!("+1415555{:04}", i % 50), "hash".into());
        let store = store.clone();
        tasks.push(tokio::spawn(
            async move { (i % 50, store.begin_otp_send(otp, None, limit).await.unwrap()) },
        ));
    }
    let mut started: HashMap<usize, usize> = HashMap::new();
    let mut refused: HashMap<usize, usize> = HashMap::new();
    for task in tasks {
        match task.await.unwrap() {
            (r, OtpSendStart::Started) => *started.entry(r).or_default() += 1,
            // The wait runs from this send's own time, which may be a moment before that of
            // the sends that filled the window.
            (r, OtpSendStart::RateLimited { retry_after_ms }) => {
                assert!(retry_after_ms > 0 && retry_after_ms <= 601_000, "{retry_after_ms}");
                *refused.entry(r).or_default() += 1;
            }
            (_, other) => panic!("no idempotency key was given: {other:?}"),
        }
    }
    for r in 0..50 {
        assert_eq!((started.get(&r), refused.get(&r)), (Some(&5), Some(&1)), "recipient {r}");
    }
    assert!(herald_daemon::store::grouped_operations() > grouped_before, "no send was written in a group");
    // Then 50 sends at once, one of them for an application that does not exist (a foreign key
    // its insert breaks): it undoes its group, whose other sends then run one by one, and it
    // fails alone.
    let mut tasks = Vec::new();
    for i in 0..50usize {
        let app = if i == 25 { ApplicationId::new() } else { app.clone() };
        let send = otp(&tenant, &app, format!("+1416555{i:04}"), "hash".into());
        let store = store.clone();
        tasks.push(tokio::spawn(async move { store.begin_otp_send(send, None, limit).await }));
    }
    for (i, task) in tasks.into_iter().enumerate() {
        match task.await.unwrap() {
            Err(_) if i == 25 => {}
            Ok(OtpSendStart::Started) if i != 25 => {}
            other => panic!("send {i}: {other:?}"),
        }
    }
    store.close().await;
}
both_backends!(grouped_otp_sends_on_each_backend, grouped_otp_sends);

/// 520 OTP sends with idempotency keys at once: 40 recipients, six keys each against a limit of
/// five, every key sent twice with one request and the first key once more with another. Keyed
/// sends join groups too, and each must still get what it would alone: five codes per
/// recipient, at most one per key (the key's other sends find it in flight or reused), and a
/// refused send claims nothing.
async fn grouped_keyed_otp_sends(backend: Backend) {
    use herald_daemon::store::{Limit, OtpSendStart};
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let grouped_before = herald_daemon::store::grouped_operations();
    let limit = Limit { max: 5, window_ms: 600_000 };
    let mut tasks = Vec::new();
    for copy in 0..3usize {
        for r in 0..40usize {
            for k in 0..6usize {
                if copy == 2 && k > 0 {
                    continue;
                }
                let otp = otp(&tenant, &app, format!("+1415777{r:04}"), "hash".into());
                let hash = if copy == 2 { "other" } else { "same" };
                let key = IdempotencyKey { key: format!("otp-{r}-{k}"), request_hash: hash.into() };
                let store = store.clone();
                tasks.push(tokio::spawn(async move {
                    ((r, k), store.begin_otp_send(otp, Some((key, 3_600_000)), limit).await.unwrap())
                }));
            }
        }
    }
    let mut started: HashMap<usize, usize> = HashMap::new();
    let mut started_keys: HashSet<(usize, usize)> = HashSet::new();
    for task in tasks {
        match task.await.unwrap() {
            ((r, k), OtpSendStart::Started) => {
                *started.entry(r).or_default() += 1;
                assert!(started_keys.insert((r, k)), "key otp-{r}-{k} started two sends");
            }
            // The wait runs from this send's own time, which may be a moment before that of
            // the sends that filled the window.
            (_, OtpSendStart::RateLimited { retry_after_ms }) => {
                assert!(retry_after_ms > 0 && retry_after_ms <= 601_000, "{retry_after_ms}");
            }
            (_, OtpSendStart::Idempotent(DispatchResult::InFlight | DispatchResult::KeyReused)) => {}
            (key, other) => panic!("{key:?}: {other:?}"),
        }
    }
    let now = herald_daemon::store::now_millis();
    for r in 0..40 {
        assert_eq!(started.get(&r), Some(&5), "recipient {r}");
        for k in 0..6 {
            let key = IdempotencyKey { key: format!("otp-{r}-{k}"), request_hash: "same".into() };
            let held = store.check_idempotency_key(&app, &key, now).await.unwrap();
            if started_keys.contains(&(r, k)) {
                assert!(
                    matches!(held, DispatchResult::InFlight | DispatchResult::KeyReused),
                    "otp-{r}-{k} started a send but is {held:?}"
                );
            } else {
                assert_eq!(held, DispatchResult::Created, "otp-{r}-{k} was refused but claimed");
            }
        }
    }
    assert!(herald_daemon::store::grouped_operations() > grouped_before, "no send was written in a group");
    store.close().await;
}
both_backends!(grouped_keyed_otp_sends_on_each_backend, grouped_keyed_otp_sends);

/// 240 verifications at once over 40 transactions of 8 recipients: for each transaction, wrong
/// guesses, then (in another round) the right code and a second right code. The rules given
/// here record what each verification saw: the recipient's earlier failures must be counted as
/// if the verifications had run one after the other, however they were grouped.
async fn grouped_otp_verifications(backend: Backend) {
    use std::sync::{Arc, Mutex};

    use herald_common::{api::otp::OtpStatus, ids::OtpId};
    use herald_daemon::store::{Limit, OtpSendStart, OtpVerdict};
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let grouped_before = herald_daemon::store::grouped_operations();
    let mut transactions = Vec::new();
    for t in 0..40usize {
        let otp = otp(&tenant, &app, format!("+1415000{:04}", t % 8), format!("code-{t}"));
        let limit = Limit { max: 100, window_ms: 600_000 };
        transactions.push((otp.id.clone(), t % 8));
        assert_eq!(store.begin_otp_send(otp, None, limit).await.unwrap(), OtpSendStart::Started);
    }
    // What each verification saw: (recipient, its earlier failures in the window).
    let seen: Arc<Mutex<Vec<(usize, i64)>>> = Arc::default();
    let verify = |id: OtpId, recipient: usize, guess: String| {
        let (store, app, seen) = (store.clone(), app.clone(), seen.clone());
        tokio::spawn(async move {
            let now = herald_daemon::store::now_millis();
            store
                .verify_otp(&id, &app, now, 600_000, move |snapshot| {
                    if snapshot.status == OtpStatus::Verified {
                        return OtpVerdict::AlreadyVerified;
                    }
                    if snapshot.code_hash == guess {
                        return OtpVerdict::Verified;
                    }
                    seen.lock().unwrap().push((recipient, snapshot.recent_failures));
                    OtpVerdict::Wrong { failed_attempts: snapshot.failed_attempts + 1, tombstoned: false }
                })
                .await
                .unwrap()
        })
    };
    // Round one: four wrong guesses per transaction, plus verifications of unknown ids.
    let mut tasks = Vec::new();
    for (id, recipient) in &transactions {
        for _ in 0..4 {
            tasks.push(verify(id.clone(), *recipient, "wrong".into()));
        }
    }
    let mut unknown = Vec::new();
    for _ in 0..40 {
        unknown.push(verify(OtpId::new(), 99, "x".into()));
    }
    for task in tasks {
        assert!(matches!(task.await.unwrap(), Some(OtpVerdict::Wrong { .. })));
    }
    for task in unknown {
        assert_eq!(task.await.unwrap(), None, "no such transaction");
    }
    // Each recipient had 5 transactions × 4 wrong guesses: one after the other, they saw 0..20
    // earlier failures, each number once.
    let mut by_recipient: HashMap<usize, Vec<i64>> = HashMap::new();
    for (recipient, failures) in seen.lock().unwrap().iter() {
        by_recipient.entry(*recipient).or_default().push(*failures);
    }
    for r in 0..8 {
        let mut counts = by_recipient.remove(&r).unwrap_or_default();
        counts.sort_unstable();
        assert_eq!(
            counts,
            (0..20).collect::<Vec<i64>>(),
            "recipient {r}'s failures as each verification saw them"
        );
    }
    // Round two: the right code twice per transaction; one verifies, the other finds it verified.
    let mut tasks = Vec::new();
    for (t, (id, recipient)) in transactions.iter().enumerate() {
        for _ in 0..2 {
            tasks.push((t, verify(id.clone(), *recipient, format!("code-{t}"))));
        }
    }
    let mut verified: HashMap<usize, Vec<OtpVerdict>> = HashMap::new();
    for (t, task) in tasks {
        verified.entry(t).or_default().push(task.await.unwrap().unwrap());
    }
    for (t, mut verdicts) in verified {
        verdicts.sort_by_key(|v| format!("{v:?}"));
        assert_eq!(verdicts, [OtpVerdict::AlreadyVerified, OtpVerdict::Verified], "transaction {t}");
    }
    assert!(
        herald_daemon::store::grouped_operations() > grouped_before,
        "no verification was written in a group"
    );
    store.close().await;
}
both_backends!(grouped_otp_verifications_on_each_backend, grouped_otp_verifications);
