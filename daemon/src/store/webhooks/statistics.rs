//! PostgreSQL's statistics of the outbox, kept as fresh as the outbox (the dispatcher's
//! `statistics` task asks for them).

use crate::store::{Engine, Store, StoreResult, execute, fetch};

impl Store {
    /// Refreshes PostgreSQL's statistics of the outbox if at least `changed` rows, and
    /// `share_of_rows` of the rows they counted, were written since they were last gathered (by
    /// this daemon, another, or autovacuum); whether it did (never on SQLite). The planner knows
    /// only the endpoints that had messages at the last `ANALYZE` and takes any other for one
    /// with a single message; and the plans a connection cached while the table was small (the
    /// fan-out function's, planned once per connection) stay until the statistics
    /// change. A burst fills `webhook_messages` in seconds,
    /// faster than autovacuum looks (once a minute, if it runs at all), and until then a new
    /// endpoint's burst was planned as one message: the probes for a subject's pending messages
    /// (`endpoint_id = … AND subject_id = …`: the fan-out's, the claim's) went to
    /// `webhook_messages_due`, keyed on the endpoint alone, and walked every pending message of
    /// the endpoint (`auto_explain`: 9,000–17,000 rows filtered for each event of a dispatch, a
    /// claim of 24 messages 29 ms). `ANALYZE` reads a sample of at most 30,000 rows, whatever
    /// the table's size, and invalidates the cached plans.
    pub async fn refresh_webhook_statistics(&self, changed: i64, share_of_rows: f64) -> StoreResult<bool> {
        if self.engine() != Engine::Postgres {
            return Ok(false);
        }
        let mut conn = self.read().await?;
        // `reltuples` is -1 before the first `ANALYZE`.
        let since: Option<(i64, f64)> = fetch!(
            &mut conn.conn(),
            fetch_optional,
            (i64, f64),
            "SELECT s.n_mod_since_analyze, GREATEST(c.reltuples, 0)::FLOAT8
             FROM pg_stat_user_tables s JOIN pg_class c ON c.oid = s.relid
             WHERE s.relid = 'webhook_messages'::regclass"
        )?;
        let Some((since, rows)) = since else { return Ok(false) };
        if since < changed || (since as f64) < rows * share_of_rows {
            return Ok(false);
        }
        execute!(&mut conn.conn(), "ANALYZE webhook_messages")?;
        Ok(true)
    }
}
