//! Tenants, applications and API keys.

use herald_common::{
    Scope,
    ids::{ApplicationId, KeyId, TenantId},
};

use std::{
    collections::HashMap,
    sync::RwLock,
    time::{Duration, Instant},
};

use super::{Store, StoreResult, execute, fetch, now_millis};

/// API keys are looked up on every request; a found key is remembered this long. A key revoked
/// through this daemon's store stops working at once; one revoked by another process (the admin
/// CLI, another daemon) within this time.
pub const KEY_CACHE_TTL: Duration = Duration::from_secs(5);
const KEY_CACHE_MAX: usize = 10_000;

/// Found keys by hash. Unknown hashes are not remembered, so guessing cannot fill it.
#[derive(Default)]
pub(super) struct KeyCache(RwLock<HashMap<String, (ApiKeyRecord, Instant)>>);

impl KeyCache {
    fn get(&self, hash: &str) -> Option<ApiKeyRecord> {
        let map = self.0.read().ok()?;
        let (record, at) = map.get(hash)?;
        (at.elapsed() < KEY_CACHE_TTL).then(|| record.clone())
    }

    fn put(&self, hash: &str, record: &ApiKeyRecord) {
        if let Ok(mut map) = self.0.write() {
            if map.len() >= KEY_CACHE_MAX {
                map.retain(|_, (_, at)| at.elapsed() < KEY_CACHE_TTL);
                if map.len() >= KEY_CACHE_MAX {
                    map.clear();
                }
            }
            map.insert(hash.to_owned(), (record.clone(), Instant::now()));
        }
    }

    fn clear(&self) {
        if let Ok(mut map) = self.0.write() {
            map.clear();
        }
    }
}

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct TenantRecord {
    pub id: TenantId,
    pub name: String,
    pub created_at: i64,
}

super::local::local_row!(TenantRecord { id, name, created_at });

#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ApplicationRecord {
    pub id: ApplicationId,
    pub tenant_id: TenantId,
    pub name: String,
    /// Bumped to rotate the application's signing secret (derived, never stored).
    pub signing_generation: i64,
    pub created_at: i64,
}

super::local::local_row!(ApplicationRecord { id, tenant_id, name, signing_generation, created_at });

/// An API key as authentication sees it, joined with its application.
#[derive(Clone, Debug, sqlx::FromRow)]
pub struct ApiKeyRecord {
    pub id: KeyId,
    pub application_id: ApplicationId,
    pub tenant_id: TenantId,
    pub scopes: String,
    pub revoked_at: Option<i64>,
}

super::local::local_row!(ApiKeyRecord { id, application_id, tenant_id, scopes, revoked_at });

impl ApiKeyRecord {
    pub fn scopes(&self) -> Vec<Scope> {
        Scope::parse_list(&self.scopes)
    }
}

impl Store {
    pub async fn create_tenant(&self, name: String) -> StoreResult<TenantRecord> {
        let record = TenantRecord { id: TenantId::new(), name, created_at: now_millis() };
        let row = record.clone();
        self.write(move |conn| {
            Box::pin(async move {
                execute!(
                    conn,
                    "INSERT INTO tenants (id, name, created_at) VALUES ($1, $2, $3)",
                    &row.id,
                    &row.name,
                    row.created_at
                )?;
                Ok(())
            })
        })
        .await?;
        Ok(record)
    }

    pub async fn get_tenant(&self, id: &TenantId) -> StoreResult<Option<TenantRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            TenantRecord,
            "SELECT id, name, created_at FROM tenants WHERE id = $1",
            id
        )?)
    }

    /// Creates an application; `None` if the tenant does not exist.
    pub async fn create_application(
        &self,
        tenant_id: &TenantId,
        name: String,
    ) -> StoreResult<Option<ApplicationRecord>> {
        let record = ApplicationRecord {
            id: ApplicationId::new(),
            tenant_id: tenant_id.clone(),
            name,
            signing_generation: 1,
            created_at: now_millis(),
        };
        let row = record.clone();
        let inserted = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "INSERT INTO applications (id, tenant_id, name, signing_generation, created_at)
                         SELECT $1, id, $3, $4, $5 FROM tenants WHERE id = $2",
                        &row.id,
                        &row.tenant_id,
                        &row.name,
                        row.signing_generation,
                        row.created_at
                    )?)
                })
            })
            .await?;
        Ok((inserted == 1).then_some(record))
    }

    pub async fn get_application(&self, id: &ApplicationId) -> StoreResult<Option<ApplicationRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            ApplicationRecord,
            "SELECT id, tenant_id, name, signing_generation, created_at FROM applications WHERE id = $1",
            id
        )?)
    }

    pub async fn list_applications(&self, tenant_id: &TenantId) -> StoreResult<Vec<ApplicationRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_all,
            ApplicationRecord,
            "SELECT id, tenant_id, name, signing_generation, created_at FROM applications
             WHERE tenant_id = $1 ORDER BY id",
            tenant_id
        )?)
    }

    /// Gives the application a new signing secret (the secret is derived from the generation).
    pub async fn rotate_signing_secret(&self, id: &ApplicationId) -> StoreResult<Option<ApplicationRecord>> {
        let id = id.clone();
        self.write(move |conn| {
            Box::pin(async move {
                Ok(fetch!(
                    conn,
                    fetch_optional,
                    ApplicationRecord,
                    "UPDATE applications SET signing_generation = signing_generation + 1 WHERE id = $1
                     RETURNING id, tenant_id, name, signing_generation, created_at",
                    &id
                )?)
            })
        })
        .await
    }

    /// Stores a new key's hash; `None` if the application does not exist.
    pub async fn create_api_key(
        &self,
        application_id: &ApplicationId,
        secret_hash: String,
        scopes: &[Scope],
    ) -> StoreResult<Option<KeyId>> {
        let id = KeyId::new();
        let (key, app, scopes) = (id.clone(), application_id.clone(), Scope::join(scopes));
        let inserted = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "INSERT INTO api_keys (id, application_id, secret_hash, scopes, created_at)
                         SELECT $1, id, $3, $4, $5 FROM applications WHERE id = $2",
                        &key,
                        &app,
                        &secret_hash,
                        &scopes,
                        now_millis()
                    )?)
                })
            })
            .await?;
        Ok((inserted == 1).then_some(id))
    }

    /// Revokes a key; `false` if there is no such key or it was already revoked.
    pub async fn revoke_api_key(&self, id: &KeyId) -> StoreResult<bool> {
        let revoked = self.revoke_api_key_uncached(id).await;
        self.keys.clear();
        revoked
    }

    async fn revoke_api_key_uncached(&self, id: &KeyId) -> StoreResult<bool> {
        let id = id.clone();
        let updated = self
            .write(move |conn| {
                Box::pin(async move {
                    Ok(execute!(
                        conn,
                        "UPDATE api_keys SET revoked_at = $2 WHERE id = $1 AND revoked_at IS NULL",
                        &id,
                        now_millis()
                    )?)
                })
            })
            .await?;
        Ok(updated == 1)
    }

    /// The key with this hash (served from a short-lived cache when found recently).
    pub async fn find_api_key(&self, secret_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        if let Some(record) = self.keys.get(secret_hash) {
            return Ok(Some(record));
        }
        let found = self.find_api_key_uncached(secret_hash).await?;
        if let Some(record) = &found {
            self.keys.put(secret_hash, record);
        }
        Ok(found)
    }

    async fn find_api_key_uncached(&self, secret_hash: &str) -> StoreResult<Option<ApiKeyRecord>> {
        let mut read = self.read().await?;
        Ok(fetch!(
            &mut read.conn(),
            fetch_optional,
            ApiKeyRecord,
            "SELECT k.id, k.application_id, a.tenant_id, k.scopes, k.revoked_at
             FROM api_keys k JOIN applications a ON a.id = k.application_id
             WHERE k.secret_hash = $1",
            secret_hash
        )?)
    }
}
