//! Delivery receipts in the store (CONTRACT §8), on both backends: a receipt finds its
//! notification by the provider's message id, is kept in the history whatever it says, and moves
//! the status only up the precedence, whatever the order, the repeats or the concurrency.

use herald_common::api::notifications::{Channel, DeliveryStatus, ReceiptProvider};
use herald_daemon::store::{AttemptResult, AttemptSpan, NewReceipt, ReceiptOutcome, Store};
use herald_tests::{Backend, both_backends};

use crate::batches::{notification, open};

/// An SMS notification the provider accepted as `sid`.
async fn sent_sms(
    store: &Store,
    backend_ids: (&herald_common::ids::TenantId, &herald_common::ids::ApplicationId),
    sid: &str,
) -> herald_common::ids::NotificationId {
    let (tenant, app) = backend_ids;
    let n = notification(tenant, app, Channel::Sms, "+15550000001");
    let id = n.id.clone();
    store.dispatch(n, None).await.unwrap();
    let claimed = store.claim_due_deliveries(64, 60_000).await.unwrap();
    let job = claimed.into_iter().find(|j| j.id == id).expect("claimed");
    let now = herald_daemon::store::now_millis();
    let span = AttemptSpan { started_at: now, finished_at: now };
    let sent = AttemptResult::Sent { provider_message_id: Some(sid.to_owned()) };
    assert!(store.record_attempt(&id, job.attempt_count, span, sent).await.unwrap());
    id
}

fn receipt(
    id: &herald_common::ids::NotificationId,
    status: DeliveryStatus,
    provider_status: &str,
) -> NewReceipt {
    NewReceipt {
        notification_id: id.clone(),
        provider: ReceiptProvider::Twilio,
        provider_status: provider_status.to_owned(),
        status,
        error_code: (status == DeliveryStatus::Undelivered).then(|| "30003".to_owned()),
        detail: (status == DeliveryStatus::Undelivered).then(|| "30003: unreachable handset".to_owned()),
        retryable: status == DeliveryStatus::Undelivered,
        received_at: herald_daemon::store::now_millis(),
    }
}

async fn status_of(
    store: &Store,
    id: &herald_common::ids::NotificationId,
) -> (DeliveryStatus, Option<String>, bool) {
    let (record, _) = store.get_notification(id).await.unwrap().unwrap();
    (record.status, record.failure_reason, record.retryable)
}

async fn receipts_move_statuses_only_up(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let id = sent_sms(&store, (&tenant, &app), "SM0001").await;
    assert_eq!(store.notification_of_provider_message("SM0001").await.unwrap(), Some(id.clone()));
    assert_eq!(store.notification_of_provider_message("SM-unknown").await.unwrap(), None);

    // Undelivered first: the status moves, with the provider's text and retryability.
    let outcome =
        store.record_receipt(receipt(&id, DeliveryStatus::Undelivered, "undelivered")).await.unwrap();
    assert_eq!(outcome, ReceiptOutcome::Recorded { changed: true });
    assert_eq!(
        status_of(&store, &id).await,
        (DeliveryStatus::Undelivered, Some("30003: unreachable handset".to_owned()), true)
    );
    // Delivered outranks it (another device, a later report); then read; a late delivered and a
    // failed after them are kept but change nothing.
    for (status, word, changed, now) in [
        (DeliveryStatus::Delivered, "delivered", true, DeliveryStatus::Delivered),
        (DeliveryStatus::Read, "read", true, DeliveryStatus::Read),
        (DeliveryStatus::Delivered, "delivered", false, DeliveryStatus::Read),
        (DeliveryStatus::Undelivered, "failed", false, DeliveryStatus::Read),
        (DeliveryStatus::Sent, "sent", false, DeliveryStatus::Read),
    ] {
        let outcome = store.record_receipt(receipt(&id, status, word)).await.unwrap();
        assert_eq!(outcome, ReceiptOutcome::Recorded { changed }, "{word}");
        let (current, reason, retryable) = status_of(&store, &id).await;
        assert_eq!(current, now, "after {word}");
        if current != DeliveryStatus::Undelivered {
            assert_eq!((reason, retryable), (None, false), "a delivered item has no failure");
        }
    }
    let history = store.receipts_of(&id).await.unwrap();
    let words: Vec<&str> = history.iter().map(|r| r.provider_status.as_str()).collect();
    assert_eq!(
        words,
        ["undelivered", "delivered", "read", "delivered", "failed", "sent"],
        "every receipt, in order"
    );

    // A receipt for a notification that does not exist writes nothing.
    let ghost = herald_common::ids::NotificationId::new();
    assert_eq!(
        store.record_receipt(receipt(&ghost, DeliveryStatus::Delivered, "delivered")).await.unwrap(),
        ReceiptOutcome::Unknown
    );
    assert!(store.receipts_of(&ghost).await.unwrap().is_empty());

    // A notification still queued (never sent) keeps its status; the receipt is history only.
    let queued = notification(&tenant, &app, Channel::Sms, "+15550000002");
    let queued_id = queued.id.clone();
    store.dispatch(queued, None).await.unwrap();
    let outcome =
        store.record_receipt(receipt(&queued_id, DeliveryStatus::Delivered, "delivered")).await.unwrap();
    assert_eq!(outcome, ReceiptOutcome::Recorded { changed: false });
    assert_eq!(status_of(&store, &queued_id).await.0, DeliveryStatus::Queued);
    store.close().await;
}
both_backends!(receipts_move_statuses_only_up_on_each_backend, receipts_move_statuses_only_up);

/// Many receipts at once, for many notifications and several for each (so groups form and
/// repeats of one notification run after their group): each ends at the highest status it was
/// sent, every receipt is kept, and the activity counters count the new statuses.
async fn concurrent_receipts_settle_on_the_highest(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let mut ids = Vec::new();
    for i in 0..20 {
        ids.push(sent_sms(&store, (&tenant, &app), &format!("SM{i:04}")).await);
    }
    let statuses =
        [DeliveryStatus::Undelivered, DeliveryStatus::Delivered, DeliveryStatus::Sent, DeliveryStatus::Read];
    let mut tasks = Vec::new();
    for (i, id) in ids.iter().enumerate() {
        // Notification i gets the first (i % 4) + 1 statuses, in a scrambled order.
        for k in (0..=(i % 4)).rev() {
            let store = store.clone();
            let r = receipt(id, statuses[k], statuses[k].as_str());
            tasks.push(tokio::spawn(async move { store.record_receipt(r).await.unwrap() }));
        }
    }
    for task in tasks {
        assert!(matches!(task.await.unwrap(), ReceiptOutcome::Recorded { .. }));
    }
    let mut expected_counts = std::collections::HashMap::new();
    for (i, id) in ids.iter().enumerate() {
        let highest = statuses[..=(i % 4)].iter().copied().max_by_key(|s| s.receipt_rank()).unwrap();
        assert_eq!(status_of(&store, id).await.0, highest, "notification {i}");
        assert_eq!(store.receipts_of(id).await.unwrap().len(), i % 4 + 1);
        *expected_counts.entry(highest).or_insert(0u64) += 1;
    }
    for (status, count) in expected_counts {
        let mut filter = herald_daemon::store::ActivityFilter::tenant(tenant.clone());
        filter.status = Some(status.into());
        let now = herald_daemon::store::now_millis();
        let (rows, total) = store.list_activity(&filter, now, 100, 0).await.unwrap();
        assert_eq!((total, rows.len() as u64), (count, count), "{status} listed and counted");
    }
    store.close().await;
}
both_backends!(
    concurrent_receipts_settle_on_the_highest_on_each_backend,
    concurrent_receipts_settle_on_the_highest
);

/// An item a receipt made `undelivered` and retryable is retried like a failed one (alone and in
/// bulk); one whose receipt says it can never arrive is not.
async fn undelivered_items_are_retried(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let unreachable = sent_sms(&store, (&tenant, &app), "SM1000").await;
    let landline = sent_sms(&store, (&tenant, &app), "SM1001").await;
    let bulk = sent_sms(&store, (&tenant, &app), "SM1002").await;
    for id in [&unreachable, &bulk] {
        store.record_receipt(receipt(id, DeliveryStatus::Undelivered, "undelivered")).await.unwrap();
    }
    let mut never = receipt(&landline, DeliveryStatus::Undelivered, "undelivered");
    never.retryable = false;
    store.record_receipt(never).await.unwrap();
    let now = herald_daemon::store::now_millis();
    let retry = |id: &herald_common::ids::NotificationId| {
        let (store, tenant, id) =
            (store.clone(), tenant.clone(), herald_common::ids::TransactionId::Notification(id.clone()));
        async move { store.retry_notification(&tenant, &id, now).await.unwrap() }
    };
    assert_eq!(retry(&unreachable).await, herald_daemon::store::RetryResult::Queued);
    assert_eq!(retry(&landline).await, herald_daemon::store::RetryResult::NotRetryable);
    assert_eq!(status_of(&store, &unreachable).await.0, DeliveryStatus::Queued);
    let mut filter = herald_daemon::store::ActivityFilter::tenant(tenant.clone());
    filter.channel = Some(Channel::Sms);
    assert_eq!(
        store.retry_matching(filter, now, 100).await.unwrap(),
        1,
        "the bulk retry takes the retryable one"
    );
    assert_eq!(status_of(&store, &bulk).await.0, DeliveryStatus::Queued);
    assert_eq!(status_of(&store, &landline).await.0, DeliveryStatus::Undelivered);
    store.close().await;
}
both_backends!(undelivered_items_are_retried_on_each_backend, undelivered_items_are_retried);

/// A receipt that overtakes the send's own record (the provider calls back before Herald has
/// committed the attempt) finds the notification `sending` and moves nothing, and is applied when
/// the attempt is recorded as sent: the best of such receipts, with its reason and retryability.
/// A receipt kept before the attempt began (an earlier attempt's) is not.
async fn a_receipt_that_overtakes_the_send_applies_when_it_is_recorded(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, app) = open(backend, dir.path()).await;
    let mut ids = Vec::new();
    for to in ["+15550000011", "+15550000012", "+15550000013", "+15550000014"] {
        let n = notification(&tenant, &app, Channel::Sms, to);
        ids.push(n.id.clone());
        store.dispatch(n, None).await.unwrap();
    }
    let started = herald_daemon::store::now_millis();
    let claimed = store.claim_due_deliveries(64, 60_000).await.unwrap();
    assert_eq!(claimed.len(), 4);
    let early = |id, status, word| {
        let mut r = receipt(id, status, word);
        r.received_at = started - 60_000;
        r
    };
    for r in [
        receipt(&ids[0], DeliveryStatus::Delivered, "delivered"),
        receipt(&ids[0], DeliveryStatus::Read, "read"),
        receipt(&ids[0], DeliveryStatus::Delivered, "delivered"),
        receipt(&ids[1], DeliveryStatus::Undelivered, "undelivered"),
        receipt(&ids[1], DeliveryStatus::Sent, "sent"),
        early(&ids[3], DeliveryStatus::Delivered, "delivered"),
    ] {
        let outcome = store.record_receipt(r).await.unwrap();
        assert_eq!(outcome, ReceiptOutcome::Recorded { changed: false }, "the send is not recorded yet");
    }
    for id in &ids {
        assert_eq!(status_of(&store, id).await.0, DeliveryStatus::Sending);
    }
    for (i, job) in claimed.iter().enumerate() {
        let span = AttemptSpan { started_at: started, finished_at: herald_daemon::store::now_millis() };
        let sent = AttemptResult::Sent { provider_message_id: Some(format!("SM00{i}")) };
        assert!(store.record_attempt(&job.id, job.attempt_count, span, sent).await.unwrap());
    }
    assert_eq!(status_of(&store, &ids[0]).await, (DeliveryStatus::Read, None, false));
    assert_eq!(
        status_of(&store, &ids[1]).await,
        (DeliveryStatus::Undelivered, Some("30003: unreachable handset".to_owned()), true)
    );
    assert_eq!(status_of(&store, &ids[2]).await, (DeliveryStatus::Sent, None, false), "no receipt");
    assert_eq!(status_of(&store, &ids[3]).await.0, DeliveryStatus::Sent, "an earlier attempt's receipt");
    // Receipts after the record move it as before.
    let outcome =
        store.record_receipt(receipt(&ids[2], DeliveryStatus::Delivered, "delivered")).await.unwrap();
    assert_eq!(outcome, ReceiptOutcome::Recorded { changed: true });
    store.close().await;
}
both_backends!(
    a_receipt_that_overtakes_the_send_applies_when_it_is_recorded_on_each_backend,
    a_receipt_that_overtakes_the_send_applies_when_it_is_recorded
);
