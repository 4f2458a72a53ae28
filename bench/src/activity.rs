//! `herald-bench activity`: a tenant with a million feed items (notifications and OTP
//! transactions, seeded straight into the database), then `GET /api/v1/activity` latency for
//! each kind of filter and for shallow and deep pages.

use std::time::{Duration, Instant};

use herald_common::api::admin::Bootstrapped;
use sqlx::{Connection, Executor};

const CHANNELS: [&str; 4] = ["email", "sms", "whatsapp", "in_app"];
const STATUSES: [&str; 5] = ["sent", "sent", "delivered", "failed", "queued"];
const DAY_MS: i64 = 86_400_000;

/// Seeds `items` rows in multi-row inserts of 1,000, in transactions of 20,000 rows.
pub async fn seed(
    database_url: &str,
    boot: &Bootstrapped,
    second_app: &str,
    items: usize,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let now = herald_common::Timestamp::now().millis();
    let otp_every = 20; // 5 % OTP transactions
    let rows: Vec<String> = (0..items)
        .map(|i| {
            let created = now - (i as i64 * 30 * DAY_MS / items as i64);
            let app = if i % 3 == 0 { second_app } else { boot.application_id.as_str() };
            let channel = CHANNELS[i % 4];
            if i % otp_every == 0 {
                let channel = if i % 2 == 0 { "email" } else { "sms" };
                let status = ["sent", "verified", "tombstoned", "failed"][i / otp_every % 4];
                format!(
                    "O('otp_{i:026}', '{t}', '{app}', '{channel}', 'k{k}', 'u***{k}@example.com', 's', 'h', '{status}', {exp}, {created}, {created})",
                    t = boot.tenant_id,
                    k = i % 5000,
                    exp = created + 300_000
                )
            } else {
                let status = STATUSES[i % 5];
                let (failure, retryable) = if status == "failed" { ("'SMTP 451 later'", "TRUE") } else { ("NULL", "FALSE") };
                format!(
                    "N('notif_{i:026}', '{t}', '{app}', '{channel}', 'u{k}@example.com', 'u***{k}@example.com', 'b', '{status}', {failure}, {retryable}, {created}, {created})",
                    t = boot.tenant_id,
                    k = i % 5000
                )
            }
        })
        .collect();
    let (notifications, otps): (Vec<&String>, Vec<&String>) = rows.iter().partition(|r| r.starts_with('N'));
    let postgres = database_url.starts_with("postgres");
    let mut statements = Vec::new();
    for chunk in notifications.chunks(1000) {
        let values: Vec<&str> = chunk.iter().map(|r| &r[1..]).collect();
        statements.push(format!(
            "INSERT INTO notifications (id, tenant_id, application_id, channel, recipient, recipient_masked, body, status,
                 failure_reason, retryable, created_at, updated_at) VALUES {}",
            values.join(",")
        ));
    }
    for chunk in otps.chunks(1000) {
        let values: Vec<&str> = chunk.iter().map(|r| &r[1..]).collect();
        statements.push(format!(
            "INSERT INTO otp_transactions (id, tenant_id, application_id, channel, recipient_key, recipient_masked, salt,
                 code_hash, status, expires_at, created_at, updated_at) VALUES {}",
            values.join(",")
        ));
    }
    if postgres {
        let mut conn = sqlx::PgConnection::connect(database_url).await?;
        for batch in statements.chunks(20) {
            let mut tx = conn.begin().await?;
            for statement in batch {
                tx.execute(sqlx::AssertSqlSafe(statement.clone())).await?;
            }
            tx.commit().await?;
        }
        conn.execute("ANALYZE").await?;
    } else {
        let mut conn = sqlx::SqliteConnection::connect(database_url).await?;
        for batch in statements.chunks(20) {
            let mut tx = conn.begin().await?;
            for statement in batch {
                tx.execute(sqlx::AssertSqlSafe(statement.clone())).await?;
            }
            tx.commit().await?;
        }
        conn.execute("ANALYZE").await?;
    }
    Ok(started.elapsed())
}

/// p50 and p99 of `n` sequential requests to `path` (after 3 unmeasured ones, so a cold plan
/// or page cache right after the daemon started does not count), and the last total_count.
pub async fn measure(
    url: &str,
    key: &str,
    path: &str,
    n: usize,
) -> anyhow::Result<(Duration, Duration, u64)> {
    let client = reqwest::Client::new();
    let mut latencies = Vec::with_capacity(n);
    let mut total = 0;
    for _ in 0..3 {
        client.get(format!("{url}{path}")).bearer_auth(key).send().await?.error_for_status()?;
    }
    for _ in 0..n {
        let started = Instant::now();
        let response = client.get(format!("{url}{path}")).bearer_auth(key).send().await?;
        anyhow::ensure!(response.status().is_success(), "{path}: HTTP {}", response.status());
        let body: serde_json::Value = response.json().await?;
        latencies.push(started.elapsed());
        total = body["total_count"].as_u64().unwrap_or(0);
    }
    latencies.sort();
    Ok((crate::load::percentile(&latencies, 50.0), crate::load::percentile(&latencies, 99.0), total))
}
