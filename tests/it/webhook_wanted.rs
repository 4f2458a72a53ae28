//! Which events are written: only those an enabled endpoint of the tenant wants (its type, its
//! application), on each backend.

use herald_tests::{Backend, both_backends};

use crate::webhook_store::{fan_out, open, suppression};

/// An event is written only when an enabled endpoint of its tenant wants it (migrations: SQLite
/// 0022, PostgreSQL 0024): its type and its application, as the fan-out chooses; an event with
/// no application (a domain's, a suppression's) is every application's. An endpoint subscribed
/// to other events costs a dispatch nothing, not even a batch on PostgreSQL.
async fn only_the_events_an_endpoint_wants_are_written(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let count = |sql: String| {
        let url = url.clone();
        async move { backend.count(&url, &sql).await }
    };
    // Events written, as rows or (PostgreSQL) still in batches, by type.
    let written = |event_type: &'static str| {
        let batched = if backend == Backend::Postgres {
            format!(
                " + (SELECT COALESCE(SUM(cardinality(subject_ids)), 0) FROM webhook_event_batches
                     WHERE event_type = '{event_type}')"
            )
        } else {
            String::new()
        };
        count(format!(
            "SELECT (SELECT COUNT(*) FROM webhook_events WHERE event_type = '{event_type}'){batched}"
        ))
    };
    let endpoint = |id: &str, application: &str, types: &str| {
        format!(
            "INSERT INTO webhook_endpoints (id, tenant_id, application_id, url, event_types, status, created_at, updated_at)
             VALUES ('{id}', '{tenant}', {application}, 'https://hooks.example.com/{id}', {types}, 'enabled', 1, 1)"
        )
    };
    let notification = |id: &str, application: &str| {
        format!(
            "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body,
                                        status, retryable, retry_count, created_at, updated_at)
             VALUES ('{id}', '{tenant}', '{application}', 'in_app', 'user_1', 'u****1', 'Hi', 'delivered',
                     FALSE, 0, 5, 5)"
        )
    };
    let otp = |id: &str, application: &str| {
        format!(
            "INSERT INTO otp_transactions (id, tenant_id, application_id, channel, recipient_key, recipient_masked,
                                           salt, code_hash, status, expires_at, created_at, updated_at)
             VALUES ('{id}', '{tenant}', '{application}', 'sms', '+15550100', '+1*****00', 's', 'h', 'sent', 9, 5, 5)"
        )
    };
    let setup = [
        format!(
            "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_shop', '{tenant}', 'Shop', 1)"
        ),
        format!(
            "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_blog', '{tenant}', 'Blog', 1)"
        ),
        // Wants OTP verifications of any application.
        endpoint("whe_otp", "NULL", "',otp.verified,'"),
        // Wants every event of the blog, and the tenant's own (domains, suppressions).
        endpoint("whe_blog", "'app_blog'", "NULL"),
    ];
    backend.execute(&url, &setup).await;

    // The shop's in-app dispatches and their reads: no endpoint wants them.
    backend
        .execute(&url, &[notification("ntf_shop1", "app_shop"), notification("ntf_shop2", "app_shop")])
        .await;
    backend
        .execute(&url, &["UPDATE notifications SET status = 'read' WHERE id = 'ntf_shop1'".to_owned()])
        .await;
    assert_eq!(written("notification.delivered").await, 0, "the shop's dispatches are nobody's");
    assert_eq!(written("notification.read").await, 0, "nor their reads");
    if backend == Backend::Postgres {
        assert_eq!(count("SELECT COUNT(*) FROM webhook_event_batches".into()).await, 0, "not even a batch");
    }
    // The blog's: the blog's endpoint wants them.
    backend.execute(&url, &[notification("ntf_blog1", "app_blog")]).await;
    backend
        .execute(&url, &["UPDATE notifications SET status = 'read' WHERE id = 'ntf_blog1'".to_owned()])
        .await;
    assert_eq!(written("notification.delivered").await, 1, "the blog's dispatch");
    assert_eq!(written("notification.read").await, 1, "and its read");

    // OTPs: verified is wanted by the OTP endpoint for any application; tombstoned only by the
    // blog's endpoint, for the blog's.
    backend
        .execute(
            &url,
            &[otp("otp_shop1", "app_shop"), otp("otp_shop2", "app_shop"), otp("otp_blog", "app_blog")],
        )
        .await;
    backend
        .execute(
            &url,
            &[
                "UPDATE otp_transactions SET status = 'verified' WHERE id = 'otp_shop1'".to_owned(),
                "UPDATE otp_transactions SET status = 'tombstoned' WHERE id = 'otp_shop2'".to_owned(),
                "UPDATE otp_transactions SET status = 'tombstoned' WHERE id = 'otp_blog'".to_owned(),
            ],
        )
        .await;
    assert_eq!(written("otp.verified").await, 1);
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events WHERE event_type = 'otp.tombstoned'".into()).await,
        1
    );
    assert_eq!(
        count("SELECT COUNT(*) FROM webhook_events WHERE subject_id = 'otp_shop2'".into()).await,
        0,
        "the shop's tombstone is nobody's"
    );

    // A suppression has no application: the blog's endpoint wants it, then, once it is disabled,
    // nobody does. A disabled endpoint wants nothing.
    let (first, _) = store.add_suppression(suppression(&tenant, 1)).await.unwrap();
    assert_eq!(written("suppression.created").await, 1, "every application's");
    backend
        .execute(&url, &["UPDATE webhook_endpoints SET status = 'disabled' WHERE id = 'whe_blog'".into()])
        .await;
    store.add_suppression(suppression(&tenant, 2)).await.unwrap();
    store.delete_suppression(&tenant, &first.id).await.unwrap().unwrap();
    assert_eq!(written("suppression.created").await, 1, "no enabled endpoint wants the second");
    assert_eq!(written("suppression.deleted").await, 0);

    // And what is written reaches the endpoints that want it, as before.
    fan_out(&store).await;
    let per_endpoint =
        |id: &str| count(format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{id}'"));
    assert_eq!(per_endpoint("whe_otp").await, 1, "the shop's verification");
    // The blog's four events (its dispatch, read, tombstone and the first suppression) on
    // SQLite, whose store fans out every event after its cursor in the first suppression's
    // transaction, while the endpoint was enabled; on PostgreSQL, whose fan-out is a task, none:
    // the endpoint was disabled by then.
    let blog = if backend == Backend::Sqlite { 4 } else { 0 };
    assert_eq!(per_endpoint("whe_blog").await, blog);
    store.close().await;
}
both_backends!(
    only_the_events_an_endpoint_wants_are_written_on_each_backend,
    only_the_events_an_endpoint_wants_are_written
);

/// PostgreSQL (migration 0025): one statement of notifications of several kinds writes one batch
/// per application and event type, each batch's arrays aligned (element i of each is one
/// notification's event: its id, its data, its time); the writers' lock (the fan-out's horizon) is
/// held by a transaction once a statement of it wrote a batch, and not by one whose notifications
/// no endpoint wants.
#[tokio::test]
async fn a_statement_writes_aligned_batches_and_takes_the_writers_lock_only_if_it_writes() {
    use sqlx::Connection;
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let setup = [
        format!(
            "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_shop', '{tenant}', 'Shop', 1),
                                                                               ('app_blog', '{tenant}', 'Blog', 1)"
        ),
        format!(
            "INSERT INTO webhook_endpoints (id, tenant_id, application_id, url, event_types, status, created_at, updated_at)
             VALUES ('whe_blog', '{tenant}', 'app_blog', 'https://hooks.example.com/blog',
                     ',notification.delivered,notification.failed,', 'enabled', 1, 1)"
        ),
    ];
    backend.execute(&url, &setup).await;
    let row = |id: &str, application: &str, status: &str, reason: &str, retries: i64, at: i64| {
        format!(
            "('{id}', '{tenant}', '{application}', 'in_app', 'user_1', 'u****1', 'Hi', '{status}', {reason},
              {retryable}, {retries}, {at}, {at})",
            retryable = retries > 0
        )
    };
    let insert = |rows: Vec<String>| {
        format!(
            "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body,
                                        status, failure_reason, retryable, retry_count, created_at, updated_at)
             VALUES {}",
            rows.join(", ")
        )
    };
    let advisory_locks =
        "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()";
    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    let scalar = |sql: &'static str| sqlx::query_scalar::<_, i64>(sql);
    sqlx::query("BEGIN").execute(&mut conn).await.unwrap();
    let unwanted = insert(vec![row("ntf_s1", "app_shop", "delivered", "NULL", 0, 5)]);
    sqlx::query(sqlx::AssertSqlSafe(unwanted)).execute(&mut conn).await.unwrap();
    assert_eq!(scalar(advisory_locks).fetch_one(&mut conn).await.unwrap(), 0, "nothing wanted: no lock");
    let mixed = insert(vec![
        row("ntf_b1", "app_blog", "delivered", "NULL", 0, 6),
        row("ntf_s2", "app_shop", "failed", "'refused'", 1, 7),
        row("ntf_b2", "app_blog", "failed", "'refused by the provider'", 2, 8),
        row("ntf_b3", "app_blog", "delivered", "NULL", 0, 9),
        row("ntf_b4", "app_blog", "queued", "NULL", 0, 10),
    ]);
    sqlx::query(sqlx::AssertSqlSafe(mixed)).execute(&mut conn).await.unwrap();
    assert_eq!(scalar(advisory_locks).fetch_one(&mut conn).await.unwrap(), 1, "a batch written: the lock");
    sqlx::query("COMMIT").execute(&mut conn).await.unwrap();

    let batches: Vec<(String, String, i32)> = sqlx::query_as(
        "SELECT event_type, application_id, cardinality(subject_ids) FROM webhook_event_batches ORDER BY event_type",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    let batches: Vec<_> = batches.iter().map(|(t, a, n)| (t.as_str(), a.as_str(), *n)).collect();
    let expected = [("notification.delivered", "app_blog", 2), ("notification.failed", "app_blog", 1)];
    assert_eq!(batches, expected, "one batch per type of the blog's; none of the shop's");
    // Every element matches its own notification, and its id lies within its batch.
    let aligned =
        "SELECT COUNT(DISTINCT COALESCE(u.event_id, b.first_id + u.place - 1)) FROM webhook_event_batches b
        CROSS JOIN LATERAL unnest(b.event_ids, b.subject_ids, b.datas, b.occurred_ats) WITH ORDINALITY
            AS u(event_id, subject_id, data, at, place)
        JOIN notifications n ON n.id = u.subject_id
        WHERE n.tenant_id = b.tenant_id AND n.application_id = b.application_id
          AND 'notification.' || n.status = b.event_type AND n.updated_at = u.at
          AND u.data = herald_webhook_changes(n.failure_reason, n.retryable, n.retry_count)
          AND COALESCE(u.event_id, b.first_id + u.place - 1) BETWEEN b.first_id AND b.last_id";
    assert_eq!(backend.count(&url, aligned).await, 3, "each event its own notification's");
    let failed = "SELECT datas[1] FROM webhook_event_batches WHERE event_type = 'notification.failed'";
    let data: String = sqlx::query_scalar(failed).fetch_one(&mut conn).await.unwrap();
    let data: serde_json::Value = serde_json::from_str(&data).unwrap();
    assert_eq!(data["failure_reason"], "refused by the provider");
    assert_eq!(data["retry_count"], 2);

    // And the fan-out makes the blog's endpoint its three messages.
    fan_out(&store).await;
    let messages = "SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = 'whe_blog'";
    assert_eq!(backend.count(&url, messages).await, 3);
    store.close().await;
}

/// PostgreSQL (migration 0026): a batch of a statement of 120 in-app notifications (some 7 KB,
/// past the 2 KB at which PostgreSQL would compress its largest values) is stored as written,
/// uncompressed: pglz on a batch's ids had cost the trigger a fifth of its instructions at 30
/// rows and two fifths at 120 (docs/PERFORMANCE.md). Its events are all there and fanned out.
#[tokio::test]
async fn a_statements_batch_is_stored_uncompressed_up_to_a_page() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    // Ids as long as the daemon's (a prefix and a ULID).
    let insert = feed_statement(&tenant, 120, |i| format!("ntf_01kb{i:022}"), |i| 1_000 + i);
    let [application, endpoint] = feed_and_endpoint(&tenant);
    backend.execute(&url, &[application, endpoint, insert]).await;
    let stored = "SELECT COUNT(*) FROM webhook_event_batches
        WHERE cardinality(subject_ids) = 120 AND pg_column_compression(subject_ids) IS NULL
          AND pg_column_compression(datas) IS NULL AND pg_column_compression(occurred_ats) IS NULL
          AND pg_column_size(subject_ids) > 3000";
    assert_eq!(backend.count(&url, stored).await, 1, "one batch of 120, its arrays as written");
    fan_out(&store).await;
    let messages = "SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = 'whe_all'";
    assert_eq!(backend.count(&url, messages).await, 120);
    store.close().await;
}

/// PostgreSQL (migration 0027): the events' sequence hands out blocks of 1,024 ids. A statement's
/// batch of up to 1,024 events takes one block and keeps no array of ids (its events are
/// `first_id` to `last_id`, in the order of its arrays); a larger one takes a block per 1,024
/// and keeps its ids. An event written after them (a row) is above all of them, and so is what
/// `herald_webhook_events_issued()` says; once expanded and fanned out, every event has its own
/// id and each notification's `read` follows its `delivered`.
#[tokio::test]
async fn a_batch_takes_a_block_of_ids_and_a_larger_one_a_block_per_1024() {
    let backend = Backend::Postgres;
    if !backend.available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    backend.execute(&url, &feed_and_endpoint(&tenant)).await;
    let insert = |prefix: &str, n| feed_statement(&tenant, n, |i| format!("ntf_{prefix}{i:05}"), |_| 5);
    backend.execute(&url, &[insert("small", 3), insert("large", 1_100)]).await;
    let small = "SELECT COUNT(*) FROM webhook_event_batches
        WHERE subject_ids[1] LIKE 'ntf_small%' AND event_ids IS NULL AND last_id - first_id = 2 AND cardinality(subject_ids) = 3";
    assert_eq!(backend.count(&url, small).await, 1, "three events, one block, no array of ids");
    let large = "SELECT COUNT(*) FROM webhook_event_batches
        WHERE subject_ids[1] LIKE 'ntf_large%' AND cardinality(event_ids) = 1100 AND cardinality(subject_ids) = 1100
          AND event_ids[1] = first_id AND event_ids[1100] = last_id
          AND event_ids[1024] = first_id + 1023 AND event_ids[1025] >= first_id + 1024
          AND event_ids[1025] % 1024 = first_id % 1024 AND event_ids[1100] = event_ids[1025] + 75
          AND first_id > (SELECT last_id FROM webhook_event_batches WHERE subject_ids[1] LIKE 'ntf_small%')";
    assert_eq!(backend.count(&url, large).await, 1, "1,100 events, two blocks, their ids kept");
    // A status change: its event is a row, its id from a later block than every batch's.
    let read =
        "UPDATE notifications SET status = 'read', updated_at = 6 WHERE id = 'ntf_small00001'".to_owned();
    backend.execute(&url, &[read]).await;
    let above = "SELECT COUNT(*) FROM webhook_events
        WHERE event_type = 'notification.read' AND id > (SELECT MAX(last_id) FROM webhook_event_batches)
          AND id % 1024 = (SELECT MIN(first_id) FROM webhook_event_batches) % 1024
          AND herald_webhook_events_issued() = id + 1023";
    assert_eq!(backend.count(&url, above).await, 1, "the row's id starts the last block issued");
    fan_out(&store).await;
    let messages =
        "SELECT COUNT(*), COUNT(DISTINCT event_id) FROM webhook_messages WHERE endpoint_id = 'whe_all'";
    let mut conn = {
        use sqlx::Connection;
        sqlx::PgConnection::connect(&url).await.unwrap()
    };
    let (all, distinct): (i64, i64) = sqlx::query_as(messages).fetch_one(&mut conn).await.unwrap();
    assert_eq!((all, distinct), (1_104, 1_104), "a message for every event, each its own id");
    let ordered =
        "SELECT COUNT(*) FROM webhook_messages d JOIN webhook_messages r ON r.subject_id = d.subject_id
        WHERE d.subject_id = 'ntf_small00001' AND d.event_type = 'notification.delivered'
          AND r.event_type = 'notification.read' AND d.event_id < r.event_id";
    assert_eq!(backend.count(&url, ordered).await, 1, "read after delivered");
    let placed = "SELECT COUNT(*) FROM webhook_events v JOIN webhook_messages m ON m.event_id = v.id
        WHERE v.subject_id = 'ntf_small00002' AND v.event_type = 'notification.delivered'
          AND v.id = (SELECT MIN(id) FROM webhook_events WHERE subject_id LIKE 'ntf_small%') + 2";
    assert_eq!(
        backend.count(&url, placed).await,
        1,
        "the third event of its batch, the third id of its block"
    );
    store.close().await;
}

/// PostgreSQL: the tenant's application `app_feed` and its endpoint `whe_all`, which wants every
/// event.
fn feed_and_endpoint(tenant: &herald_common::ids::TenantId) -> [String; 2] {
    [
        format!(
            "INSERT INTO applications (id, tenant_id, name, created_at) VALUES ('app_feed', '{tenant}', 'Feed', 1)"
        ),
        format!(
            "INSERT INTO webhook_endpoints (id, tenant_id, url, status, created_at, updated_at)
             VALUES ('whe_all', '{tenant}', 'https://hooks.example.com/all', 'enabled', 1, 1)"
        ),
    ]
}

/// One statement inserting `n` delivered in-app notifications of `app_feed`, the `i`th with the
/// id `id(i)`, created and updated at `at(i)`.
fn feed_statement(
    tenant: &herald_common::ids::TenantId,
    n: usize,
    id: impl Fn(usize) -> String,
    at: impl Fn(usize) -> usize,
) -> String {
    let rows: Vec<String> = (0..n)
        .map(|i| {
            format!(
                "('{id}', '{tenant}', 'app_feed', 'in_app', 'user_{i}', 'u****', 'Hi', 'delivered', {at}, {at})",
                id = id(i),
                at = at(i)
            )
        })
        .collect();
    format!(
        "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body,
                                    status, created_at, updated_at)
         VALUES {}",
        rows.join(", ")
    )
}
