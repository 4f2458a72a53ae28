//! Custom sending domains: creation, lookups by id and by sender address, check results, and
//! the background checks' queue (`next_check_at`, claimed with a lease like deliveries so that
//! several daemons never check one domain at the same time).

use herald_common::{
    api::domains::DomainStatus,
    ids::{DomainId, TenantId},
};

use super::{Engine, Store, StoreResult, execute, fetch};

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct DomainRecord {
    pub id: DomainId,
    pub tenant_id: TenantId,
    pub name: String,
    pub dkim_selector: String,
    pub challenge_token: String,
    /// The public DKIM record's text (`v=DKIM1; k=rsa; p=…`).
    pub dkim_record: String,
    /// The encrypted private key (see `service::domains`).
    pub dkim_private_key: String,
    pub status: DomainStatus,
    /// JSON: what the last check found of each record.
    pub checks: Option<String>,
    pub created_at: i64,
    pub last_checked_at: Option<i64>,
    pub verified_at: Option<i64>,
    pub next_check_at: Option<i64>,
}

super::local::local_row!(DomainRecord {
    id,
    tenant_id,
    name,
    dkim_selector,
    challenge_token,
    dkim_record,
    dkim_private_key,
    status,
    checks,
    created_at,
    last_checked_at,
    verified_at,
    next_check_at
});

/// The outcome of one check, to record.
#[derive(Clone, Debug)]
pub struct DomainCheck {
    pub status: DomainStatus,
    pub checks: String,
    pub checked_at: i64,
    pub verified_at: Option<i64>,
    pub next_check_at: Option<i64>,
}

/// The columns of a [`DomainRecord`], for `concat!` into static SQL.
macro_rules! domain_columns {
    () => {
        "id, tenant_id, name, dkim_selector, challenge_token, dkim_record, dkim_private_key, status, checks, \
         created_at, last_checked_at, verified_at, next_check_at"
    };
}

const CLAIM_SQLITE: &str = concat!(
    "UPDATE domains SET next_check_at = $1 WHERE id IN (
         SELECT id FROM domains WHERE next_check_at IS NOT NULL AND next_check_at <= $2
         ORDER BY next_check_at LIMIT $3)
     RETURNING ",
    domain_columns!()
);

/// As on SQLite, skipping rows another daemon is claiming.
const CLAIM_POSTGRES: &str = concat!(
    "UPDATE domains SET next_check_at = $1 WHERE id IN (
         SELECT id FROM domains WHERE next_check_at IS NOT NULL AND next_check_at <= $2
         ORDER BY next_check_at LIMIT $3 FOR UPDATE SKIP LOCKED)
     RETURNING ",
    domain_columns!()
);

impl Store {
    /// Inserts a domain; `false` if the tenant already has one of that name.
    pub async fn create_domain(&self, record: DomainRecord) -> StoreResult<bool> {
        self.write(move |conn| {
            Box::pin(async move {
                let inserted = execute!(
                    conn,
                    "INSERT INTO domains (id, tenant_id, name, dkim_selector, challenge_token, dkim_record,
                                          dkim_private_key, status, checks, created_at, next_check_at)
                     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
                     ON CONFLICT (tenant_id, name) DO NOTHING",
                    &record.id,
                    &record.tenant_id,
                    &record.name,
                    &record.dkim_selector,
                    &record.challenge_token,
                    &record.dkim_record,
                    &record.dkim_private_key,
                    &record.status,
                    &record.checks,
                    record.created_at,
                    record.next_check_at
                )?;
                Ok(inserted == 1)
            })
        })
        .await
    }

    /// The domain `id` of `tenant_id` (another tenant's is `None`).
    pub async fn get_domain(&self, tenant_id: &TenantId, id: &DomainId) -> StoreResult<Option<DomainRecord>> {
        let mut read = self.read().await?;
        let sql = concat!("SELECT ", domain_columns!(), " FROM domains WHERE id = $1 AND tenant_id = $2");
        Ok(fetch!(&mut read.conn(), fetch_optional, DomainRecord, sql, id, tenant_id)?)
    }

    /// The tenant's domain called `name` (lower case), verified or not.
    pub async fn find_domain_by_name(
        &self,
        tenant_id: &TenantId,
        name: &str,
    ) -> StoreResult<Option<DomainRecord>> {
        let mut read = self.read().await?;
        let sql = concat!("SELECT ", domain_columns!(), " FROM domains WHERE tenant_id = $1 AND name = $2");
        Ok(fetch!(&mut read.conn(), fetch_optional, DomainRecord, sql, tenant_id, name)?)
    }

    pub async fn list_domains(&self, tenant_id: &TenantId) -> StoreResult<Vec<DomainRecord>> {
        let mut read = self.read().await?;
        let sql = concat!(
            "SELECT ",
            domain_columns!(),
            " FROM domains WHERE tenant_id = $1 ORDER BY name LIMIT 1000"
        );
        Ok(fetch!(&mut read.conn(), fetch_all, DomainRecord, sql, tenant_id)?)
    }

    pub async fn delete_domain(&self, tenant_id: &TenantId, id: &DomainId) -> StoreResult<bool> {
        let (tenant_id, id) = (tenant_id.clone(), id.clone());
        let deleted = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "DELETE FROM domains WHERE id = $1 AND tenant_id = $2",
                        &id,
                        &tenant_id
                    )?)
                })
            })
            .await?;
        Ok(deleted == 1)
    }

    /// Records a check of domain `id`; the updated domain, or `None` if it was deleted meanwhile.
    pub async fn record_domain_check(
        &self,
        id: &DomainId,
        check: DomainCheck,
    ) -> StoreResult<Option<DomainRecord>> {
        let id = id.clone();
        self.write(move |conn| {
            Box::pin(async move {
                let sql = concat!(
                    "UPDATE domains SET status = $2, checks = $3, last_checked_at = $4, verified_at = $5,
                                        next_check_at = $6
                     WHERE id = $1 RETURNING ",
                    domain_columns!()
                );
                Ok(fetch!(
                    conn,
                    fetch_optional,
                    DomainRecord,
                    sql,
                    &id,
                    &check.status,
                    &check.checks,
                    check.checked_at,
                    check.verified_at,
                    check.next_check_at
                )?)
            })
        })
        .await
    }

    /// Leases up to `limit` domains whose background check is due at `now`: their next check
    /// moves to `lease_until`, so a daemon that dies mid-check leaves them to be checked again
    /// then, and no other daemon checks them meanwhile.
    pub async fn claim_due_domains(
        &self,
        now: i64,
        lease_until: i64,
        limit: i64,
    ) -> StoreResult<Vec<DomainRecord>> {
        self.write(move |conn| {
            Box::pin(async move {
                let sql = match conn.engine() {
                    Engine::Sqlite => CLAIM_SQLITE,
                    Engine::Postgres => CLAIM_POSTGRES,
                };
                Ok(fetch!(conn, fetch_all, DomainRecord, sql, lease_until, now, limit)?)
            })
        })
        .await
    }
}
