//! Open inbox streams across daemons, for the per-user stream limit. Each daemon holds a row in
//! `stream_daemons` that it renews while it runs (`alive_until`); every stream it opens is a row
//! in `open_streams`. A user's streams are counted over daemons that are alive, so the streams
//! of a daemon that was killed stop counting once its row lapses, and housekeeping deletes them.

use herald_common::ids::{ApplicationId, ConnectionId, UserId};

use super::{Engine, Store, StoreResult, execute, scalar};

/// A stream to record: whose it is, and its connection.
#[derive(Clone, Copy, Debug)]
pub struct OpenStream<'a> {
    pub application_id: &'a ApplicationId,
    pub user_id: &'a UserId,
    pub connection_id: &'a ConnectionId,
}

impl Store {
    /// Registers (or renews) daemon `daemon_id` as alive until `alive_until`.
    pub async fn renew_stream_daemon(&self, daemon_id: &str, alive_until: i64) -> StoreResult<()> {
        let id = daemon_id.to_owned();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    "INSERT INTO stream_daemons (id, alive_until) VALUES ($1, $2)
                     ON CONFLICT (id) DO UPDATE SET alive_until = excluded.alive_until",
                    &id,
                    alive_until
                )?;
                Ok(())
            })
        })
        .await
    }

    /// Records `stream` on daemon `daemon_id`, unless its user already
    /// has `max` streams on daemons alive at `now`; `false` then. Claims for one user are
    /// serialized (SQLite's single writer; a transaction-scoped advisory lock on PostgreSQL), so
    /// concurrent claims through several daemons cannot all see room for one more.
    pub async fn open_stream(
        &self,
        stream: OpenStream<'_>,
        daemon_id: &str,
        max: usize,
        now: i64,
    ) -> StoreResult<bool> {
        let (app, user, connection, daemon) = (
            stream.application_id.clone(),
            stream.user_id.clone(),
            stream.connection_id.clone(),
            daemon_id.to_owned(),
        );
        self.write(move |conn| {
            Box::pin(async move {
                if conn.engine() == Engine::Postgres {
                    execute!(
                        conn,
                        "SELECT pg_advisory_xact_lock(hashtextextended('herald.stream/' || $1 || '/' || $2, 0))",
                        &app,
                        &user
                    )?;
                }
                let open = scalar!(
                    conn,
                    fetch_one,
                    i64,
                    "SELECT COUNT(*) FROM open_streams s JOIN stream_daemons d ON d.id = s.daemon_id
                     WHERE s.application_id = $1 AND s.user_id = $2 AND d.alive_until > $3",
                    &app,
                    &user,
                    now
                )?;
                if open >= max as i64 {
                    return Ok(false);
                }
                execute!(
                    conn,
                    "INSERT INTO open_streams (connection_id, application_id, user_id, daemon_id, opened_at)
                     VALUES ($1, $2, $3, $4, $5)",
                    &connection,
                    &app,
                    &user,
                    &daemon,
                    now
                )?;
                Ok(true)
            })
        })
        .await
    }

    /// Stream `connection_id` ended.
    pub async fn close_stream(&self, connection_id: &ConnectionId) -> StoreResult<()> {
        let id = connection_id.clone();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(conn, "DELETE FROM open_streams WHERE connection_id = $1", &id)?;
                Ok(())
            })
        })
        .await
    }

    /// Daemon `daemon_id` stops: its streams and its row go.
    pub async fn close_stream_daemon(&self, daemon_id: &str) -> StoreResult<()> {
        let id = daemon_id.to_owned();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(conn, "DELETE FROM open_streams WHERE daemon_id = $1", &id)?;
                execute!(conn, "DELETE FROM stream_daemons WHERE id = $1", &id)?;
                Ok(())
            })
        })
        .await
    }

    /// Deletes daemons that lapsed before `before` (killed without stopping) with their streams,
    /// and streams whose daemon row is gone; returns the streams deleted.
    pub async fn delete_lapsed_streams(&self, before: i64) -> StoreResult<u64> {
        self.write(move |conn| {
            Box::pin(async move {
                execute!(conn, "DELETE FROM stream_daemons WHERE alive_until < $1", before)?;
                execute!(
                    conn,
                    "DELETE FROM open_streams WHERE daemon_id NOT IN (SELECT id FROM stream_daemons)"
                )
            })
        })
        .await
    }
}
