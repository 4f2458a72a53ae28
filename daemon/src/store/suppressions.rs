//! The suppression list (CONTRACT §9): per tenant, one entry per (recipient, channel, category),
//! the recipient stored only as its key (an HMAC the service computes) and masked. `category`
//! is `''` in the table for "every category", so that the unique index covers it; rows read
//! from here say `None`.
//!
//! The delivery worker does not call in here: its claim matches the notification's
//! `recipient_key` against this table in the same statement (see `store/notifications`), so the
//! check costs no round trip.

use herald_common::{
    api::{notifications::Channel, suppressions::SuppressionReason},
    ids::{NotificationId, SuppressionId, TenantId, TransactionId},
};

use super::{
    Conn, Store, StoreError, StoreResult, execute, fetch,
    local::{FromLocalRow, rows_of},
    scalar,
    writer::{WriteKind, not_set_based},
};

/// An entry to add.
#[derive(Clone, Debug)]
pub struct NewSuppression {
    pub tenant_id: TenantId,
    pub channel: Channel,
    pub recipient_key: String,
    pub recipient_masked: String,
    /// `None`: every category (and transactional sends).
    pub category: Option<String>,
    pub reason: SuppressionReason,
    pub transaction_id: Option<TransactionId>,
    pub created_at: i64,
}

/// An entry as stored.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct SuppressionRecord {
    pub id: SuppressionId,
    pub tenant_id: TenantId,
    pub channel: Channel,
    pub recipient_masked: String,
    /// `''`: every category; see [`SuppressionRecord::only_category`].
    pub category: String,
    pub reason: SuppressionReason,
    pub transaction_id: Option<TransactionId>,
    pub created_at: i64,
}

super::local::local_row!(SuppressionRecord {
    id,
    tenant_id,
    channel,
    recipient_masked,
    category,
    reason,
    transaction_id,
    created_at
});

impl SuppressionRecord {
    /// The one category it stops, or `None` for every category.
    pub fn only_category(&self) -> Option<&str> {
        Some(self.category.as_str()).filter(|c| !c.is_empty())
    }
}

/// What a list of suppressions is filtered by. `recipient_key` is the key of a raw recipient.
#[derive(Clone, Debug)]
pub struct SuppressionFilter {
    pub tenant_id: TenantId,
    pub channel: Option<Channel>,
    pub reason: Option<SuppressionReason>,
    pub recipient_key: Option<String>,
}

/// The columns of a [`SuppressionRecord`], for `concat!` into static SQL.
macro_rules! columns {
    () => {
        "id, tenant_id, channel, recipient_masked, category, reason, transaction_id, created_at"
    };
}

/// The filter's `WHERE`, with `$1`..`$4` bound to tenant, channel, reason and key (`NULL` when
/// not filtered on).
macro_rules! filter {
    () => {
        "tenant_id = $1 AND ($2 IS NULL OR channel = $2) AND ($3 IS NULL OR reason = $3)
         AND ($4 IS NULL OR recipient_key = $4)"
    };
}

impl Store {
    /// Adds an entry unless one for the same recipient, channel and category exists. Returns
    /// the entry (the new one, or the one that was there) and whether it is new. The entries
    /// of a batch are added together ([`SuppressionAdd`]).
    pub async fn add_suppression(&self, new: NewSuppression) -> StoreResult<(SuppressionRecord, bool)> {
        self.writer.submit(SuppressionAdd(new)).await
    }

    /// Adds a `carrier_opt_out` for an SMS recipient (an inbound STOP) in every tenant that has
    /// texted it, each pointing at that tenant's latest notification to it. Returns how many
    /// tenants gained one.
    pub async fn add_carrier_opt_out(
        &self,
        recipient_key: String,
        recipient_masked: String,
        now: i64,
    ) -> StoreResult<Vec<SuppressionRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                let senders: Vec<(TenantId, NotificationId)> = fetch!(
                    conn,
                    fetch_all,
                    (TenantId, NotificationId),
                    "SELECT tenant_id, MAX(id) FROM notifications
                     WHERE recipient_key = $1 AND channel = 'sms' GROUP BY tenant_id",
                    &recipient_key
                )?;
                let mut added = Vec::new();
                for (tenant_id, latest) in senders {
                    let id = SuppressionId::new();
                    let inserted = execute!(
                        conn,
                        "INSERT INTO suppressions
                             (id, tenant_id, channel, recipient_key, recipient_masked, category, reason,
                              transaction_id, created_at)
                         VALUES ($1, $2, 'sms', $3, $4, '', 'carrier_opt_out', $5, $6)
                         ON CONFLICT (tenant_id, recipient_key, channel, category) DO NOTHING",
                        &id,
                        &tenant_id,
                        &recipient_key,
                        &recipient_masked,
                        &latest,
                        now
                    )?;
                    if inserted == 1 {
                        added.push(fetch!(
                            conn,
                            fetch_one,
                            SuppressionRecord,
                            concat!("SELECT ", columns!(), " FROM suppressions WHERE id = $1"),
                            &id
                        )?);
                    }
                }
                Ok(added)
            })
        })
        .await
    }

    /// Removes every `carrier_opt_out` of an SMS recipient (an inbound START), in every tenant.
    pub async fn remove_carrier_opt_outs(
        &self,
        recipient_key: String,
    ) -> StoreResult<Vec<SuppressionRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                let removed = fetch!(
                    conn,
                    fetch_all,
                    SuppressionRecord,
                    concat!("SELECT ", columns!(), " FROM suppressions
                         WHERE recipient_key = $1 AND channel = 'sms' AND reason = 'carrier_opt_out'"),
                    &recipient_key
                )?;
                execute!(
                    conn,
                    "DELETE FROM suppressions WHERE recipient_key = $1 AND channel = 'sms' AND reason = 'carrier_opt_out'",
                    &recipient_key
                )?;
                Ok(removed)
            })
        })
        .await
    }

    /// One page of a tenant's list, newest first, and how many entries the filter matches.
    pub async fn list_suppressions(
        &self,
        filter: &SuppressionFilter,
        limit: i64,
        offset: i64,
    ) -> StoreResult<(Vec<SuppressionRecord>, u64)> {
        let mut read = self.read().await?;
        let mut snapshot = read.snapshot().await?;
        let mut conn = snapshot.conn();
        let total = scalar!(
            &mut conn,
            fetch_one,
            i64,
            concat!("SELECT COUNT(*) FROM suppressions WHERE ", filter!()),
            &filter.tenant_id,
            &filter.channel,
            &filter.reason,
            &filter.recipient_key
        )?;
        let rows = fetch!(
            &mut conn,
            fetch_all,
            SuppressionRecord,
            concat!(
                "SELECT ",
                columns!(),
                " FROM suppressions WHERE ",
                filter!(),
                "
                 ORDER BY created_at DESC, id DESC LIMIT $5 OFFSET $6"
            ),
            &filter.tenant_id,
            &filter.channel,
            &filter.reason,
            &filter.recipient_key,
            limit,
            offset
        )?;
        Ok((rows, u64::try_from(total).unwrap_or(0)))
    }

    /// One entry of a tenant's list.
    pub async fn get_suppression(
        &self,
        tenant_id: &TenantId,
        id: &SuppressionId,
    ) -> StoreResult<Option<SuppressionRecord>> {
        let mut read = self.read().await?;
        fetch!(
            &mut read.conn(),
            fetch_optional,
            SuppressionRecord,
            concat!("SELECT ", columns!(), " FROM suppressions WHERE id = $1 AND tenant_id = $2"),
            id,
            tenant_id
        )
    }

    /// Removes an entry of a tenant's list; the removed entry, or `None` if there was none.
    pub async fn delete_suppression(
        &self,
        tenant_id: &TenantId,
        id: &SuppressionId,
    ) -> StoreResult<Option<SuppressionRecord>> {
        let (tenant_id, id) = (tenant_id.clone(), id.clone());
        self.write(move |conn| {
            Box::pin(async move {
                let found = fetch!(
                    conn,
                    fetch_optional,
                    SuppressionRecord,
                    concat!("SELECT ", columns!(), " FROM suppressions WHERE id = $1 AND tenant_id = $2"),
                    &id,
                    &tenant_id
                )?;
                if found.is_some() {
                    execute!(conn, "DELETE FROM suppressions WHERE id = $1", &id)?;
                }
                Ok(found)
            })
        })
        .await
    }

    /// The entry that stops a send to a recipient on a channel in `category` (`None`:
    /// transactional, stopped only by entries for every category), the oldest if several do.
    pub async fn suppression_for(
        &self,
        tenant_id: &TenantId,
        channel: Channel,
        recipient_key: &str,
        category: Option<&str>,
    ) -> StoreResult<Option<SuppressionRecord>> {
        let mut read = self.read().await?;
        fetch!(
            &mut read.conn(),
            fetch_optional,
            SuppressionRecord,
            concat!("SELECT ", columns!(), " FROM suppressions
                 WHERE tenant_id = $1 AND recipient_key = $2 AND channel = $3 AND (category = '' OR category = $4)
                 ORDER BY created_at, id LIMIT 1"),
            tenant_id,
            recipient_key,
            &channel,
            &category
        )
    }
}

/// Whom a notification went to: what an automatic suppression needs of it.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct NotificationRecipient {
    pub tenant_id: TenantId,
    pub channel: Channel,
    /// Raw: only to compute the key of a notification accepted before the list existed.
    pub recipient: String,
    pub recipient_masked: String,
    pub recipient_key: Option<String>,
}

super::local::local_row!(NotificationRecipient {
    tenant_id,
    channel,
    recipient,
    recipient_masked,
    recipient_key
});

impl Store {
    /// Whom notification `id` went to, if it exists.
    pub async fn recipient_of(&self, id: &NotificationId) -> StoreResult<Option<NotificationRecipient>> {
        let mut read = self.read().await?;
        fetch!(
            &mut read.conn(),
            fetch_optional,
            NotificationRecipient,
            "SELECT tenant_id, channel, recipient, recipient_masked, recipient_key FROM notifications WHERE id = $1",
            id
        )
    }
}

/// An entry with the key it is matched by, as the group's read-back returns it.
#[derive(sqlx::FromRow)]
struct KeyedRecord {
    recipient_key: String,
    #[sqlx(flatten)]
    record: SuppressionRecord,
}

impl super::local::FromLocalRow for KeyedRecord {
    fn from_local_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Self { recipient_key: row.get("recipient_key")?, record: SuppressionRecord::from_local_row(row)? })
    }
}

/// An entry to add, for the writer: a batch's entries are inserted by one statement
/// (PostgreSQL's `unnest`, SQLite's multi-row `VALUES`), skipping those already there, and read
/// back by a second, so a bulk import costs two statements per batch, not two per entry. Two
/// adds of one entry are never in one group: the second runs after the first, and finds it.
pub(crate) struct SuppressionAdd(NewSuppression);

impl SuppressionAdd {
    /// The entry's identity: tenant, recipient key, channel, category (`''`: every one).
    fn identity(&self) -> (&str, &str, &str, &str) {
        let n = &self.0;
        (
            n.tenant_id.as_str(),
            n.recipient_key.as_str(),
            n.channel.as_str(),
            n.category.as_deref().unwrap_or(""),
        )
    }
}

const ADD_POSTGRES: &str = "INSERT INTO suppressions
         (id, tenant_id, channel, recipient_key, recipient_masked, category, reason, transaction_id, created_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[], $7::text[],
                          $8::text[], $9::int8[])
     ON CONFLICT (tenant_id, recipient_key, channel, category) DO NOTHING
     RETURNING id";
const FIND_POSTGRES: &str = concat!(
    "SELECT s.recipient_key, ",
    "s.id, s.tenant_id, s.channel, s.recipient_masked, s.category, s.reason, s.transaction_id, s.created_at",
    " FROM suppressions s
     JOIN unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS k(tenant_id, recipient_key, channel, category)
       ON s.tenant_id = k.tenant_id AND s.recipient_key = k.recipient_key AND s.channel = k.channel
      AND s.category = k.category"
);
const ADD_LOCAL: (&str, &str, &str) = (
    "INSERT INTO suppressions
         (id, tenant_id, channel, recipient_key, recipient_masked, category, reason, transaction_id, created_at)",
    "(?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "ON CONFLICT (tenant_id, recipient_key, channel, category) DO NOTHING RETURNING id",
);
const FIND_LOCAL: (&str, &str, &str) = (
    concat!(
        "SELECT s.recipient_key, ",
        "s.id, s.tenant_id, s.channel, s.recipient_masked, s.category, s.reason, s.transaction_id, s.created_at",
        " FROM suppressions s JOIN ("
    ),
    "(?, ?, ?, ?)",
    ") AS v ON s.tenant_id = v.column1 AND s.recipient_key = v.column2 AND s.channel = v.column3
        AND s.category = v.column4",
);

impl WriteKind for SuppressionAdd {
    type Answer = (SuppressionRecord, bool);
    type Key = (String, String, String, String);

    fn conflict_keys(&self) -> Vec<Self::Key> {
        let (t, r, c, g) = self.identity();
        vec![(t.to_owned(), r.to_owned(), c.to_owned(), g.to_owned())]
    }

    async fn write_all(conn: &mut Conn<'_>, group: &[&Self]) -> StoreResult<Vec<Self::Answer>> {
        let ids: Vec<SuppressionId> = group.iter().map(|_| SuppressionId::new()).collect();
        let (added, found): (Vec<SuppressionId>, Vec<KeyedRecord>) = match conn {
            Conn::Postgres(pg) => {
                let text = |f: &dyn Fn(&NewSuppression) -> &str| -> Vec<String> {
                    group.iter().map(|a| f(&a.0).to_owned()).collect()
                };
                let (tenants, keys, channels) = (
                    text(&|n| n.tenant_id.as_str()),
                    text(&|n| n.recipient_key.as_str()),
                    text(&|n| n.channel.as_str()),
                );
                let categories: Vec<String> = group.iter().map(|a| a.identity().3.to_owned()).collect();
                super::count_call();
                let added = sqlx::query_scalar(ADD_POSTGRES)
                    .bind(ids.iter().map(|id| id.as_str().to_owned()).collect::<Vec<_>>())
                    .bind(&tenants)
                    .bind(&channels)
                    .bind(&keys)
                    .bind(text(&|n| n.recipient_masked.as_str()))
                    .bind(&categories)
                    .bind(text(&|n| n.reason.as_str()))
                    .bind(
                        group
                            .iter()
                            .map(|a| a.0.transaction_id.as_ref().map(|t| t.as_str().to_owned()))
                            .collect::<Vec<_>>(),
                    )
                    .bind(group.iter().map(|a| a.0.created_at).collect::<Vec<_>>())
                    .fetch_all(&mut **pg)
                    .await?;
                super::count_call();
                let found = sqlx::query_as(FIND_POSTGRES)
                    .bind(&tenants)
                    .bind(&keys)
                    .bind(&channels)
                    .bind(&categories)
                    .fetch_all(&mut **pg)
                    .await?;
                (added, found)
            }
            Conn::Local(local) => {
                let rows: Vec<(&SuppressionId, &NewSuppression, &str)> =
                    ids.iter().zip(group).map(|(id, a)| (id, &a.0, a.identity().3)).collect();
                let added = rows_of(
                    local,
                    ADD_LOCAL,
                    &rows,
                    |(id, n, category)| {
                        vec![
                            *id,
                            &n.tenant_id,
                            &n.channel,
                            &n.recipient_key,
                            &n.recipient_masked,
                            category,
                            &n.reason,
                            &n.transaction_id,
                            &n.created_at,
                        ]
                    },
                    |row| row.get(0),
                )?;
                let found = rows_of(
                    local,
                    FIND_LOCAL,
                    &rows,
                    |(_, n, category)| vec![&n.tenant_id, &n.recipient_key, &n.channel, category],
                    KeyedRecord::from_local_row,
                )?;
                (added, found)
            }
            Conn::Sqlite(_) => return Err(not_set_based()),
        };
        group
            .iter()
            .map(|add| {
                let (tenant, key, channel, category) = add.identity();
                let found = found.iter().find(|f| {
                    let r = &f.record;
                    f.recipient_key == key
                        && r.tenant_id.as_str() == tenant
                        && r.channel.as_str() == channel
                        && r.category == category
                });
                let record = found.map(|f| f.record.clone()).ok_or_else(|| {
                    StoreError::Statement("a suppression just added or found was not read back".to_owned())
                })?;
                let created = added.contains(&record.id);
                Ok((record, created))
            })
            .collect()
    }
}
