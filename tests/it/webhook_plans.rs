//! PostgreSQL's plans for the outbox's statements when its statistics are stale: after a burst
//! to an endpoint the statistics did not know, after a removal emptied the table, and in a burst
//! after statistics gathered while nothing was pending. Each test
//! runs on SQLite too, which has no statistics to go stale; each says what it checks there.

use herald_common::{
    api::webhooks::{EndpointStatus, MessageStatus},
    ids::WebhookEndpointId,
};
use herald_daemon::store::{ENDPOINT_REMOVAL_GROUP, Verdict};
use herald_tests::{Backend, both_backends};

use super::webhook_store::{add_endpoint, add_endpoint_as, attempt, fan_out, open};

/// PostgreSQL's plan of the fan-out's probe for a subject's pending messages, for a burst of
/// 20,000 to `whe_new` (the probe runs once per event of a dispatch).
async fn probe_plan(url: &str) -> String {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let lines: Vec<String> = sqlx::query_scalar(
        "EXPLAIN SELECT (SELECT MAX(+p.next_attempt_at) FROM webhook_messages p
                         WHERE p.endpoint_id = e.id AND p.subject_id = v.s AND p.status = 'pending'
                           AND p.lease IS NULL)
         FROM (VALUES ('whe_new')) e(id), (SELECT 'ntf_' || md5(g::TEXT) s FROM generate_series(30000, 30016) g) v",
    )
    .fetch_all(&mut conn)
    .await
    .unwrap();
    lines.join("\n")
}

/// The planner knows only the endpoints that had messages at the last `ANALYZE`, and takes any
/// other for an endpoint with one message: a burst to it had each event's probe for its
/// subject's pending messages walk all of them, on the index keyed on the endpoint alone. Once
/// enough rows changed, `refresh_webhook_statistics` gathers them again, and the probe goes to
/// the index keyed on the subject too. (SQLite has nothing to refresh.)
async fn the_outbox_statistics_follow_a_burst(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _tenant, url) = open(backend, dir.path()).await;
    if backend == Backend::Sqlite {
        assert!(!store.refresh_webhook_statistics(0, 0.0).await.unwrap());
        store.close().await;
        return;
    }
    let fill = |endpoint: &str, count: i64| {
        format!(
            "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                           created_at, updated_at)
             SELECT '{endpoint}', g, 'notification.delivered', 'ntf_' || md5(g::TEXT), 'pending', 1000 + g, 1, 1
             FROM generate_series(1, {count}) g"
        )
    };
    backend
        .execute(
            &url,
            &[
                fill("whe_old", 5_000),
                "ANALYZE webhook_messages".to_owned(),
                "DELETE FROM webhook_messages".to_owned(),
                fill("whe_new", 20_000),
            ],
        )
        .await;
    let before = probe_plan(&url).await;
    assert!(before.contains("webhook_messages_due"), "the hazard, reproduced:\n{before}");
    // The server counts a connection's changes when it reports them (at the latest as it ends).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let changed =
        "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relid = 'webhook_messages'::regclass";
    while backend.count(&url, changed).await < 25_000 {
        assert!(std::time::Instant::now() < deadline, "the changed rows were never counted");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // 25,000 rows changed since statistics that counted 5,000 (nowhere near 100,000, nor 100 times 5,000).
    assert!(
        !store.refresh_webhook_statistics(100_000, 0.0).await.unwrap(),
        "fewer rows changed than asked for"
    );
    assert!(
        !store.refresh_webhook_statistics(1_000, 100.0).await.unwrap(),
        "a smaller share of the table than asked for"
    );
    assert!(store.refresh_webhook_statistics(1_000, 0.05).await.unwrap());
    let after = probe_plan(&url).await;
    assert!(after.contains("webhook_messages_order"), "{after}");
    assert!(!store.refresh_webhook_statistics(1_000, 0.0).await.unwrap(), "nothing changed since");
    store.close().await;
}
both_backends!(the_outbox_statistics_follow_a_burst_on_each_backend, the_outbox_statistics_follow_a_burst);

/// PostgreSQL: the notification triggers' `herald_webhook_changes` is planned as its expression
/// (migration 0020). Declared IMMUTABLE over a STABLE `json_build_object`, it was not inlined,
/// and each event row went through the SQL function executor (5x the expression's time). (SQLite
/// builds the same JSON in its trigger.)
async fn the_notification_event_changes_are_inlined(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, _tenant, url) = open(backend, dir.path()).await;
    if backend == Backend::Postgres {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let plan: Vec<String> = sqlx::query_scalar(
            "EXPLAIN VERBOSE SELECT herald_webhook_changes(n.failure_reason, n.retryable, n.retry_count)
             FROM notifications n",
        )
        .fetch_all(&mut conn)
        .await
        .unwrap();
        let plan = plan.join("\n");
        assert!(!plan.contains("herald_webhook_changes("), "called, not inlined:\n{plan}");
        assert!(plan.contains("CASE WHEN"), "{plan}");
    }
    store.close().await;
}
both_backends!(
    the_notification_event_changes_are_inlined_on_each_backend,
    the_notification_event_changes_are_inlined
);

/// The most buffers any node of PostgreSQL's plan for `sql` touched (a node counts its
/// children's, so this is the statement's total outside its planning), run in a transaction
/// rolled back; `generic`: from the plan a prepared statement caches after five calls.
async fn buffers_touched(
    url: &str,
    sql: &str,
    bind: impl Fn(PgQuery<'_>) -> PgQuery<'_>,
    generic: bool,
) -> (u64, String) {
    use sqlx::Connection as _;
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let mut tx = conn.begin().await.unwrap();
    let mode = if generic { "force_generic_plan" } else { "force_custom_plan" };
    sqlx::query(sqlx::AssertSqlSafe(format!("SET LOCAL plan_cache_mode = {mode}")))
        .execute(&mut *tx)
        .await
        .unwrap();
    let explain = format!("EXPLAIN (ANALYZE, BUFFERS, COSTS OFF) {sql}");
    let plan: Vec<String> = bind(sqlx::query(sqlx::AssertSqlSafe(explain)))
        .fetch_all(&mut *tx)
        .await
        .unwrap()
        .into_iter()
        .map(|row| sqlx::Row::get::<String, _>(&row, 0))
        .collect();
    tx.rollback().await.unwrap();
    let plan = plan.join("\n");
    let mut most = 0;
    let mut planning = false;
    for line in plan.lines() {
        planning |= line.trim_start().starts_with("Planning");
        let Some(buffers) = line.split("Buffers: shared ").nth(1).filter(|_| !planning) else { continue };
        let touched: u64 = buffers
            .split_whitespace()
            .filter_map(|part| {
                part.split_once('=').and_then(|(kind, n)| {
                    matches!(kind, "hit" | "read")
                        .then(|| n.trim_end_matches(',').parse::<u64>().ok())
                        .flatten()
                })
            })
            .sum();
        most = most.max(touched);
    }
    (most, plan)
}

type PgQuery<'q> = sqlx::query::Query<'q, sqlx::Postgres, sqlx::postgres::PgArguments>;

/// Runs `sql` with its custom and its generic plan, asserts each touched fewer than 5,000
/// buffers (`what` names it in the failure), and returns the two plans.
async fn cheap_plans(
    url: &str,
    what: &str,
    sql: &str,
    bind: impl Fn(PgQuery<'_>) -> PgQuery<'_>,
) -> Vec<String> {
    let mut plans = Vec::new();
    for generic in [false, true] {
        let (touched, plan) = buffers_touched(url, sql, &bind, generic).await;
        assert!(touched < 5_000, "{what} touched {touched} buffers (generic plan: {generic}):\n{plan}");
        plans.push(plan);
    }
    plans
}

/// Removing an endpoint removes its messages. Statistics gathered after that (the statistics
/// task's `ANALYZE`) say the outbox is empty while its indexes still hold every dead entry,
/// until a vacuum (autovacuum is on by default; this server may have it off), and every index
/// path then costs the planner one page. A claim or a settlement that found its messages by id
/// went through `webhook_messages_by_endpoint` and read it whole (42,000 buffers, 108 ms a claim
/// of 32 here; a new endpoint's first deliveries stalled up to a second in the bench,
/// docs/PERFORMANCE.md). The claim now updates the rows it picked by where they are (a TID
/// scan), the settlement looks each message up by endpoint and id without a restriction that
/// would let it hash a partial index whole, and a retry's siblings are found by subject, one
/// settled message at a time, and updated by endpoint and id. On SQLite (no statistics to go
/// stale) the same steps check the claim and the settlement after a mass removal.
async fn an_emptied_outbox_leaves_claims_and_settlements_cheap(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let removed = add_endpoint(&store, &tenant, None).await;
    let endpoint = add_endpoint(&store, &tenant, None).await;
    // As the bench's endpoints before the stall: 90,000 messages delivered (pending, then
    // succeeded: each in every index twice), then removed. Their events, and the 1,500 the new
    // endpoint then gets, are made as `webhook.test`'s (no fan-out makes messages of them).
    let mut setup = vec![
        format!(
            "INSERT INTO webhook_events (tenant_id, endpoint_id, event_type, subject_id, data, occurred_at)
             WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 91500)
             SELECT '{tenant}', '{removed}', 'webhook.test', 'ntf_' || n, '{{}}', 1 FROM g"
        ),
        format!(
            "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                           created_at, updated_at)
             SELECT endpoint_id, id, event_type, subject_id, 'pending', 1000 + n, 1, 1
             FROM (SELECT v.*, row_number() OVER (ORDER BY v.id) AS n FROM webhook_events v) v
             WHERE endpoint_id = '{removed}' AND n <= 90000
             ORDER BY id"
        ),
        format!(
            "UPDATE webhook_messages SET status = 'succeeded', next_attempt_at = NULL, attempts = 1, updated_at = 2
             WHERE endpoint_id = '{removed}'"
        ),
    ];
    if backend == Backend::Postgres {
        setup.insert(0, "ALTER TABLE webhook_messages SET (autovacuum_enabled = false)".to_owned());
        setup.push("ANALYZE webhook_messages".to_owned());
    }
    backend.execute(&url, &setup).await;
    assert!(herald_tests::remove_webhook_endpoint(&store, &tenant, &removed, ENDPOINT_REMOVAL_GROUP).await);
    if backend == Backend::Postgres {
        backend.execute(&url, &["ANALYZE webhook_messages".to_owned()]).await;
        let live = "SELECT reltuples::BIGINT FROM pg_class WHERE oid = 'webhook_messages'::regclass";
        assert_eq!(backend.count(&url, live).await, 0, "the statistics say the outbox is empty");
    }
    backend
        .execute(
            &url,
            &[format!(
                "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                               created_at, updated_at)
                 SELECT '{endpoint}', id, event_type, 'pair_' || (n / 2), 'pending', 5, 1, 1
                 FROM (SELECT v.*, row_number() OVER (ORDER BY v.id) AS n FROM webhook_events v) v
                 WHERE n > 90000 ORDER BY id"
            )],
        )
        .await;
    if backend == Backend::Postgres {
        use herald_daemon::store::webhook_statements::CLAIM_POSTGRES;
        let plans = cheap_plans(&url, "a claim of 32", CLAIM_POSTGRES, |q| {
            q.bind(endpoint.as_str()).bind(100_i64).bind(100_000_i64).bind("l").bind(32_i64)
        })
        .await;
        for plan in plans {
            // Found again where they were picked, not through an index (on a stale range of an
            // endpoint's, a new endpoint's claims read all it had had).
            assert!(plan.contains("Tid Scan on webhook_messages w"), "{plan}");
        }
    }
    let claimed =
        store.claim_webhook_messages(endpoint.clone(), 100, 100_000, 32, "lease".to_owned()).await.unwrap();
    assert_eq!(claimed.len(), 32);
    if backend == Backend::Postgres {
        use herald_daemon::store::webhook_statements::SETTLE_POSTGRES;
        let ids: Vec<i64> = claimed.iter().map(|m| m.id).collect();
        let n = ids.len();
        cheap_plans(&url, "a settlement of 32", SETTLE_POSTGRES, |q| {
            q.bind(ids.clone())
                .bind(vec![endpoint.as_str(); n])
                .bind(vec!["lease"; n])
                .bind(vec![200_i64; n])
                .bind(vec![Some(200_i64); n])
                .bind(vec![None::<&str>; n])
                .bind(vec![3_i64; n])
                .bind(vec!["succeeded"; n])
                .bind(vec![None::<i64>; n])
                .bind(claimed.iter().map(|m| m.event_id).collect::<Vec<_>>())
                .bind(vec![None::<&str>; n])
        })
        .await;
    }
    if backend == Backend::Postgres {
        // A retry's siblings (the new endpoint's messages come in pairs about one subject): each
        // found by subject, then updated by endpoint and id.
        use herald_daemon::store::webhook_statements::SIBLINGS_POSTGRES;
        let n = claimed.len();
        cheap_plans(&url, "moving 32 siblings", SIBLINGS_POSTGRES, |q| {
            q.bind(vec![endpoint.as_str(); n])
                .bind(claimed.iter().map(|m| m.subject_id.as_str()).collect::<Vec<_>>())
                .bind(claimed.iter().map(|m| m.id).collect::<Vec<_>>())
                .bind(vec![1_000_000_i64; n])
                .bind(vec![true; n])
        })
        .await;
    }
    let attempts = claimed.iter().map(|m| attempt(&endpoint, m, "lease", 200, Verdict::Succeeded)).collect();
    assert!(store.record_webhook_attempts(attempts).await.unwrap().is_empty());
    let (page, _) = store.webhook_messages(&endpoint, Some(MessageStatus::Succeeded), 100, 1).await.unwrap();
    assert_eq!(page.len(), 32, "each claimed message settled");
    assert!(page.iter().all(|(_, attempts)| attempts.len() == 1));
    store.close().await;
}
both_backends!(
    an_emptied_outbox_leaves_claims_and_settlements_cheap_on_each_backend,
    an_emptied_outbox_leaves_claims_and_settlements_cheap
);

/// The fan-out's probe for the earlier pending messages a new message waits behind, in a burst
/// that follows statistics gathered while nothing was pending (an idle outbox: the statistics
/// task's `ANALYZE` then counts no row in either pending index, and a burst runs ahead of the
/// next one). PostgreSQL then costs an index scan by its height alone, and once the burst's
/// pending messages made `webhook_messages_order` (keyed on the subject too) a level deeper than
/// `webhook_messages_due`, it probed the latter by the endpoint alone: each new message read
/// every pending message of its endpoint (in the bench, a group of 1,000 events to four
/// endpoints took 1.2–2.6 s instead of 0.15 in the first seconds of each throughput step). The
/// probe now asks only for those due after the event occurred, which that index finds by its
/// range (a retry, a lease held), and the order index by the subject: a few entries either way.
/// On both backends the same setup checks what the probe decides: a message about a subject
/// whose earlier message waits for a retry is due with it, the others when their event occurred.
async fn a_bursts_fan_out_reads_only_the_messages_it_waits_behind(backend: Backend) {
    const PENDING: i64 = 12_000;
    const NEW: i64 = 200;
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let old = add_endpoint_as(&store, &tenant, None, None, EndpointStatus::Disabled).await;
    let endpoint = add_endpoint(&store, &tenant, None).await;
    // Subjects as long as Herald's ids, so the burst's messages make the order index deeper.
    let subject = "'ntf_01m8py67q8evy97eec7sjwb7tx_' || n";
    // The events of the messages already there: `webhook.test`'s of the disabled endpoint, which
    // no fan-out makes messages of.
    let events = format!(
        "INSERT INTO webhook_events (tenant_id, endpoint_id, event_type, subject_id, data, occurred_at)
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {})
         SELECT '{tenant}', '{old}', 'webhook.test', {subject}, '{{}}', 1 FROM g",
        5_000 + PENDING + 1
    );
    let messages = |endpoint: &str, status: &str, due: &str, from: i64, to: i64| {
        format!(
            "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                           created_at, updated_at)
             SELECT '{endpoint}', id, event_type, subject_id, '{status}', {due}, 1, 1
             FROM (SELECT v.*, row_number() OVER (ORDER BY v.id) AS n FROM webhook_events v) v
             WHERE n >= {from} AND n <= {to} ORDER BY id"
        )
    };
    // An idle outbox: 5,000 messages delivered, and its statistics gathered then.
    let mut setup = vec![events, messages(old.as_str(), "succeeded", "NULL", 1, 5_000)];
    if backend == Backend::Postgres {
        setup.insert(0, "ALTER TABLE webhook_messages SET (autovacuum_enabled = false)".to_owned());
        setup.push("ANALYZE webhook_messages".to_owned());
    }
    // Then a burst's messages so far, due as their events occurred, and the last one waiting for
    // its retry.
    let last = 5_000 + PENDING + 1;
    setup.push(messages(endpoint.as_str(), "pending", "1000 + n", 5_001, last - 1));
    setup.push(messages(endpoint.as_str(), "pending", "1000000000", last, last));
    setup.push("UPDATE webhook_fan_out SET last_event_id = (SELECT MAX(id) FROM webhook_events)".to_owned());
    // The burst's next events: some about new subjects, one about the retried message's.
    let retried = format!("ntf_01m8py67q8evy97eec7sjwb7tx_{last}");
    setup.push(format!(
        "INSERT INTO webhook_events (tenant_id, event_type, subject_id, data, occurred_at)
         WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < {NEW} + 1)
         SELECT '{tenant}', 'suppression.created', CASE WHEN n = {NEW} + 1 THEN '{retried}' ELSE 'new_' || n END,
                '{{}}', 100000 FROM g"
    ));
    backend.execute(&url, &setup).await;
    if backend == Backend::Postgres {
        use sqlx::{Connection as _, Row as _};
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        let made: i64 = sqlx::query_scalar("SELECT made FROM herald_webhook_fan_out_events(10000)")
            .fetch_one(&mut *tx)
            .await
            .unwrap();
        assert_eq!(made, NEW + 1);
        let read = sqlx::query(
            "SELECT pg_stat_get_xact_tuples_returned('webhook_messages_due'::regclass),
                    pg_stat_get_xact_tuples_returned('webhook_messages_order'::regclass)",
        )
        .fetch_one(&mut *tx)
        .await
        .unwrap();
        let (due, order): (i64, i64) = (read.get(0), read.get(1));
        tx.commit().await.unwrap();
        assert!(
            due + order < 10 * (NEW + 1),
            "the probes for {} messages read {due} entries of the due index and {order} of the order index",
            NEW + 1
        );
    } else {
        assert_eq!(fan_out(&store).await, NEW + 1);
    }
    let due = |subject: &str| {
        format!(
            "SELECT next_attempt_at FROM webhook_messages WHERE endpoint_id = '{endpoint}' AND subject_id = '{subject}'
             ORDER BY id DESC LIMIT 1"
        )
    };
    assert_eq!(backend.count(&url, &due(&retried)).await, 1_000_000_000, "behind the retry");
    assert_eq!(backend.count(&url, &due("new_7")).await, 100_000, "when its event occurred");
    let made = format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{endpoint}'");
    assert_eq!(backend.count(&url, &made).await, PENDING + 1 + NEW + 1);
    store.close().await;
}
both_backends!(
    a_bursts_fan_out_reads_only_the_messages_it_waits_behind_on_each_backend,
    a_bursts_fan_out_reads_only_the_messages_it_waits_behind
);

/// Removing an endpoint reads only its own messages, whatever the statistics say, and never
/// another tenant's. An endpoint keeps its delivered messages for 30 days; PostgreSQL's trigger
/// (migration 0016) deleted them by a hash join over the whole outbox and its attempts (removing
/// 100,000 of 400,000 messages read both tables, 536 ms in the writer's transaction). The store
/// deletes them in groups first, each group read from the endpoint's index in its order
/// (`DELETE_ENDPOINT_MESSAGES`), and the trigger takes what is left the same way (migration
/// 0029): on PostgreSQL its statement's generic plan, with the endpoint compared by `=`, walked
/// the primary key past the other endpoint's messages. Here the removed endpoint's messages are
/// the newest, behind 60,000 of another's. On SQLite (its foreign keys cascade, through the same
/// index) the removal in groups, and the tenant's check, are checked.
async fn removing_an_endpoint_reads_only_its_messages(backend: Backend) {
    let dir = tempfile::tempdir().unwrap();
    let (store, tenant, url) = open(backend, dir.path()).await;
    let other = add_endpoint(&store, &tenant, None).await;
    let gone = add_endpoint(&store, &tenant, None).await;
    let fill = |endpoint: &WebhookEndpointId, from: i64, to: i64| {
        format!(
            "INSERT INTO webhook_messages (endpoint_id, event_id, event_type, subject_id, status, next_attempt_at,
                                           created_at, updated_at)
             WITH RECURSIVE g(n) AS (SELECT {from} UNION ALL SELECT n + 1 FROM g WHERE n < {to})
             SELECT '{endpoint}', n, 'webhook.test', 'ntf_' || (n % 500),
                    CASE WHEN n % 10 = 0 THEN 'pending' ELSE 'succeeded' END,
                    CASE WHEN n % 10 = 0 THEN 1000 + n END, 1, 2
             FROM g"
        )
    };
    let mut setup = vec![
        fill(&other, 1, 60_000),
        fill(&gone, 60_001, 66_500),
        "INSERT INTO webhook_attempts (message_id, attempted_at, http_status, error, duration_ms)
         SELECT id, 2, 200, NULL, 3 FROM webhook_messages"
            .to_owned(),
    ];
    if backend == Backend::Postgres {
        setup.push("ANALYZE webhook_messages".to_owned());
        setup.push("ANALYZE webhook_attempts".to_owned());
    } else {
        // SQLite's foreign keys want the events (`webhook.test`'s: no fan-out makes messages of them).
        setup.insert(
            0,
            format!(
                "INSERT INTO webhook_events (id, tenant_id, endpoint_id, event_type, subject_id, data, occurred_at)
                 WITH RECURSIVE g(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM g WHERE n < 66500)
                 SELECT n, '{tenant}', '{other}', 'webhook.test', 'ntf_' || n, '{{}}', 1 FROM g"
            ),
        );
    }
    backend.execute(&url, &setup).await;
    let count = |sql: String| {
        let url = url.clone();
        async move { backend.count(&url, &sql).await }
    };
    let messages = |endpoint: &WebhookEndpointId| {
        format!("SELECT COUNT(*) FROM webhook_messages WHERE endpoint_id = '{endpoint}'")
    };
    let attempts = |endpoint: &WebhookEndpointId| {
        format!(
            "SELECT COUNT(*) FROM webhook_attempts a JOIN webhook_messages m ON m.id = a.message_id
             WHERE m.endpoint_id = '{endpoint}'"
        )
    };
    if backend == Backend::Postgres {
        use sqlx::Connection as _;
        // The trigger alone: the endpoint's row deleted with all its messages still there (as a
        // tenant's removal does), seven groups (the function's statement planned generic from
        // the sixth), in a transaction rolled back. The server counts what the transaction read.
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!("DELETE FROM webhook_endpoints WHERE id = '{gone}'")))
            .execute(&mut *tx)
            .await
            .unwrap();
        let read: Vec<(String, i64, i64, i64)> = sqlx::query_as(
            "SELECT relname::TEXT, seq_tup_read, idx_tup_fetch, n_tup_del FROM pg_stat_xact_user_tables
             WHERE relid IN ('webhook_messages'::regclass, 'webhook_attempts'::regclass) ORDER BY relname",
        )
        .fetch_all(&mut *tx)
        .await
        .unwrap();
        tx.rollback().await.unwrap();
        for (table, seq_read, index_read, deleted) in &read {
            assert_eq!(*deleted, 6_500, "{table}: {read:?}");
            assert_eq!(*seq_read, 0, "{table} read whole: {read:?}");
            // A few rows fetched per message (its index entry's, its row, its attempt), not the
            // other endpoint's 60,000 per group.
            assert!(*index_read < 10 * 6_500, "{table}: {read:?}");
        }
        // The store's group, on its generic plan too: only the endpoint's first 1,000 (each
        // message's entry, row and lock, its deletion and its attempt's: five to six buffers a
        // message, not the 60,000 rows ahead of them).
        use herald_daemon::store::webhook_statements::DELETE_ENDPOINT_MESSAGES;
        for generic in [false, true] {
            let (touched, plan) = buffers_touched(
                &url,
                DELETE_ENDPOINT_MESSAGES,
                |q| q.bind(gone.to_string()).bind(tenant.to_string()).bind(1_000_i64),
                generic,
            )
            .await;
            assert!(touched < 8_000, "a group touched {touched} buffers (generic plan: {generic}):\n{plan}");
            assert!(plan.contains("webhook_messages_by_endpoint"), "{plan}");
        }
    }
    assert_eq!(count(messages(&gone)).await, 6_500);
    // Another tenant's key removes nothing, and leaves nothing to purge.
    let stranger = store.create_tenant("U".into()).await.unwrap().id;
    assert!(!store.remove_webhook_endpoint(stranger, gone.clone(), 1).await.unwrap());
    assert_eq!(store.purge_removed_webhook_endpoint(1_000).await.unwrap(), None);
    assert_eq!(count(messages(&gone)).await, 6_500);
    assert_eq!(count(attempts(&gone)).await, 6_500);
    // The removal deletes nothing itself; the purge then does, in groups of 1,000: six full, a
    // short one with the endpoint. On PostgreSQL the oldest message is held meanwhile by another
    // transaction (as a group of attempts settling holds its messages): the groups pass it by and
    // delete the rest, and only the endpoint's own deletion waits for it. (A group that waited for
    // it, in id order, deadlocked with a settlement holding its messages in another order, in the
    // bench.)
    assert!(store.remove_webhook_endpoint(tenant.clone(), gone.clone(), 1).await.unwrap());
    assert_eq!(count(messages(&gone)).await, 6_500);
    let purge = async {
        let mut steps = Vec::new();
        while let Some(step) = store.purge_removed_webhook_endpoint(1_000).await.unwrap() {
            steps.push((step.messages, step.endpoint));
        }
        steps
    };
    let steps = if backend == Backend::Postgres {
        use sqlx::Connection as _;
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let mut tx = conn.begin().await.unwrap();
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT id FROM webhook_messages WHERE endpoint_id = '{gone}' ORDER BY id LIMIT 1 FOR UPDATE"
        )))
        .execute(&mut *tx)
        .await
        .unwrap();
        let holder = async {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
            while count(messages(&gone)).await > 1 {
                assert!(std::time::Instant::now() < deadline, "the groups waited for the row held");
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            tx.commit().await.unwrap();
        };
        tokio::join!(purge, holder).0
    } else {
        purge.await
    };
    let last = if backend == Backend::Postgres { 499 } else { 500 };
    assert_eq!(steps, [vec![(1_000, false); 6], vec![(last, true)]].concat());
    assert_eq!(count(messages(&gone)).await, 0);
    assert_eq!(
        count(
            "SELECT COUNT(*) FROM webhook_attempts a
             WHERE NOT EXISTS (SELECT 1 FROM webhook_messages m WHERE m.id = a.message_id)"
                .to_owned()
        )
        .await,
        0,
        "their attempts went with them"
    );
    assert_eq!(count(messages(&other)).await, 60_000);
    assert_eq!(count(attempts(&other)).await, 60_000);
    assert!(!store.remove_webhook_endpoint(tenant.clone(), gone.clone(), 1).await.unwrap(), "gone");
    store.close().await;
}
both_backends!(
    removing_an_endpoint_reads_only_its_messages_on_each_backend,
    removing_an_endpoint_reads_only_its_messages
);
